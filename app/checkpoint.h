/* Model and checkpoint files: safetensors (see safetensors.h) that PyTorch loads directly:
 *
 *   model = MyCnnModel(); model.load_state_dict(safetensors.torch.load_file(f))   # strict
 *
 * Tensor names are the state_dict keys of MyCnnModel.network ("network.0.weight", ...,
 * "network.5.running_mean", "network.5.num_batches_tracked" as I64). A checkpoint holds the
 * same tensors plus the SGD momentum buffers ("optimizer.momentum.network.0.weight", ...).
 *
 * __metadata__ (all strings): format "cifar10-dp", format_version "1", kind "model" or
 * "checkpoint", model "workshop-cnn", input (how pixels become the network input),
 * normalization_mean / normalization_std (JSON arrays, 0..1 pixel scale), classes (JSON array),
 * config (JSON of the run-defining settings), epochs_completed, global_step, run_id, rng,
 * created_by, crc32. */
#ifndef APP_CHECKPOINT_H
#define APP_CHECKPOINT_H

#include "../common/err.h"

#include <stdint.h>

#define CHECKPOINT_FORMAT "cifar10-dp"
#define CHECKPOINT_FORMAT_VERSION "1"

/* Host copies of the model state; layouts as in model.h (params[P], bn_stats[S]). */
struct model_state {
    float *params;
    float *momentum; /* NULL: not written (model file) / not wanted (reading) */
    float *bn_stats;
    int64_t bn_batches_tracked;
};

struct run_info {
    char kind[16];          /* "model" or "checkpoint" */
    char run_id[40];
    int epochs_completed;
    int64_t global_step;
    char config[1024];      /* JSON of the run-defining settings */
};

/* Writes a model file (state.momentum ignored) or, with info->kind "checkpoint", a checkpoint;
 * atomically (the previous file survives any failure). */
int checkpoint_write(const char *path, const struct model_state *state, const struct run_info *info,
                     struct err *e);

/* Reads a file written by checkpoint_write: validates the format, model name and every tensor's
 * dtype and shape; fills state (momentum only when state->momentum is not NULL, which needs a
 * checkpoint) and info. */
int checkpoint_read(const char *path, struct model_state *state, struct run_info *info, struct err *e);

#endif
