/* Model and checkpoint files: safetensors (see safetensors.h) that PyTorch loads directly:
 *
 *   model = MyCnnModel(); model.load_state_dict(safetensors.torch.load_file(f))   # strict
 *
 * Tensor names are the state_dict keys of the network's PyTorch module, as the model's tensor
 * table has them (workshop-cnn: "network.0.weight", ..., "network.5.running_mean",
 * "network.5.num_batches_tracked" as I64). A checkpoint holds the same tensors plus the SGD
 * momentum buffers of the trainable ones ("optimizer.momentum.network.0.weight", ...) and, for
 * recipes with lookahead, its average of every float tensor ("optimizer.lookahead.0.weight").
 * A checkpoint taken mid-epoch holds rank 0's batch-norm running statistics in the usual names
 * (they are per rank until the epoch's end averages them) and every other rank r's as
 * "ranks.R.NAME" (and "optimizer.lookahead.ranks.R.NAME"), so a resume on as many ranks gives
 * each its own.
 *
 * __metadata__ (all strings): format "cifar10-dp", format_version "1", kind "model" or
 * "checkpoint", model (the network's name, which selects its definition on load), input (how
 * pixels become the network input),
 * normalization_mean / normalization_std (JSON arrays, 0..1 pixel scale), classes (JSON array),
 * config (JSON of the run-defining settings), epochs_completed, global_step, run_id, rng,
 * kernels (the op table the steps before the file ran on, kernels.h's name: cpu, cpu-bf16,
 * cuda, cuda-bf16; optional on reading: files of earlier versions lack it), created_by, crc32;
 * checkpoints also step_in_epoch, steps_per_epoch, ranks (sets of running
 * statistics) and epoch_sums (the epoch's loss and correct sums so far, and the running loss
 * of the log; "%a" floats, exact) (all four optional on reading: an epoch-end checkpoint). */
#ifndef IO_CHECKPOINT_H
#define IO_CHECKPOINT_H

#include "../common/err.h"
#include "../model/model.h"

#include <stdint.h>

#define CHECKPOINT_FORMAT         "cifar10-dp"
#define CHECKPOINT_FORMAT_VERSION "1"

/* Host copies of the model state; layouts as in model.h (params[P], buffers[S]). */
struct model_state {
    float *params;
    float *momentum; /* NULL: not written (model file) / not wanted (reading) */
    float *buffers;
    int64_t batches_tracked;
    float *ema_params, *ema_buffers; /* lookahead averages; NULL as momentum */
    /* Mid-epoch checkpoints: each rank's buffers (running statistics), rank_buffers[r * S ..]
     * for r < ranks (r 0: the same as buffers), and their lookahead averages likewise. ranks 1
     * (an epoch's end, a model file): none, rank_buffers NULL. checkpoint_read allocates them
     * for the ranks the file holds; checkpoint_state_free frees them. */
    int ranks;
    float *rank_buffers, *rank_ema_buffers;
};

/* What checkpoint_state_alloc allocates besides params and buffers. */
enum { STATE_MOMENTUM = 1, STATE_LOOKAHEAD = 2 };

/* Host buffers sized for m (momentum and the lookahead averages as `what` says), and their
 * release. */
struct model_state checkpoint_state_alloc(const struct model *m, unsigned what);
void checkpoint_state_free(struct model_state *s);
/* Frees the per-rank sets (rank_buffers, rank_ema_buffers) and sets ranks to 1. */
void checkpoint_state_drop_ranks(struct model_state *s);

struct run_info {
    char kind[16]; /* "model" or "checkpoint" */
    char run_id[40];
    int epochs_completed;
    int64_t global_step;
    char config[1024]; /* JSON of the run-defining settings */
    char kernels[24];  /* the op table the steps ran on (struct kernels' name); "" not recorded */
    /* Mid-epoch: step_in_epoch (> 0) steps of epoch epochs_completed + 1 are done, of
     * steps_per_epoch (all of them: stopped before the epoch's end was processed); the epoch's
     * sums so far (mean losses, correct predictions) and the running loss since the last
     * printed one. All 0 at an epoch's end. */
    int step_in_epoch, steps_per_epoch;
    double epoch_loss, epoch_correct, print_loss;
};

/* Writes m's tensors from state as a model file (state.momentum ignored) or, with info->kind
 * "checkpoint", a checkpoint (with state->ranks sets of running statistics); atomically (the
 * previous file survives any failure). */
int checkpoint_write(const char *path, const struct model *m, const struct model_state *state,
                     const struct run_info *info, struct err *e);

/* Reads a file written by checkpoint_write for a model like m: validates the format, the model
 * name (m->net's) and every tensor's dtype and shape; fills state (momentum and lookahead
 * averages only when state has room for them, which needs a checkpoint holding them) and
 * info. */
int checkpoint_read(const char *path, const struct model *m, struct model_state *state, struct run_info *info,
                    struct err *e);

/* The known network (net_find) a file of ours holds, by its `model` metadata; NULL with e set
 * ("PATH: holds model X, which this build does not know (known: ...)") otherwise. */
const struct net_def *checkpoint_net(const char *path, struct err *e);

/* Whether the file's input metadata (input, normalization_mean, normalization_std) is what this
 * build's input pipeline does, so pictures prepared by it mean to the network what they meant
 * in training. Returns 0, or -1 with "PATH: metadata X is ...; this build's ... has ..." in e. */
int checkpoint_check_input(const char *path, struct err *e);

#endif
