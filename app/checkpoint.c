#include "checkpoint.h"

#include "../data/augment.h"
#include "../data/cifar.h"
#include "model.h"
#include "safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOMENTUM_PREFIX "optimizer.momentum."
#define MAX_TENSORS 64

static const char *bn_layer_names[] = {"network.5", "network.11", "network.17"};

int checkpoint_write(const char *path, const struct model_state *state, const struct run_info *info,
                     struct err *e) {
    int full = strcmp(info->kind, "checkpoint") == 0;
    struct st_tensor t[MAX_TENSORS];
    char names[MAX_TENSORS][64];
    int nt = 0;
    for (int i = 0; i < model_tensor_count(); i++) {
        const struct model_tensor *mt = model_tensor_at(i);
        const float *base = mt->buffer == MODEL_PARAMS ? state->params : state->bn_stats;
        t[nt] = (struct st_tensor){.name = mt->name, .dtype = ST_F32, .ndim = mt->ndim, .data = base + mt->offset};
        for (int d = 0; d < mt->ndim; d++) t[nt].shape[d] = mt->shape[d];
        nt++;
    }
    for (int b = 0; b < 3; b++) {
        snprintf(names[nt], sizeof names[nt], "%s.num_batches_tracked", bn_layer_names[b]);
        t[nt] = (struct st_tensor){.name = names[nt], .dtype = ST_I64, .ndim = 0, .data = &state->bn_batches_tracked};
        nt++;
    }
    if (full)
        for (int i = 0; i < model_tensor_count(); i++) {
            const struct model_tensor *mt = model_tensor_at(i);
            if (mt->buffer != MODEL_PARAMS) continue;
            snprintf(names[nt], sizeof names[nt], MOMENTUM_PREFIX "%s", mt->name);
            t[nt] = (struct st_tensor){.name = names[nt], .dtype = ST_F32, .ndim = mt->ndim, .data = state->momentum + mt->offset};
            for (int d = 0; d < mt->ndim; d++) t[nt].shape[d] = mt->shape[d];
            nt++;
        }
    char mean[96], std[96], classes[256] = "[", epochs[16], step[32];
    snprintf(mean, sizeof mean, "[%.4f,%.4f,%.4f]", augment_mean[0], augment_mean[1], augment_mean[2]);
    snprintf(std, sizeof std, "[%.4f,%.4f,%.4f]", augment_std[0], augment_std[1], augment_std[2]);
    for (int c = 0; c < CIFAR_CLASSES; c++)
        snprintf(classes + strlen(classes), sizeof classes - strlen(classes), "%s\"%s\"", c ? "," : "", cifar_class_names[c]);
    strcat(classes, "]");
    snprintf(epochs, sizeof epochs, "%d", info->epochs_completed);
    snprintf(step, sizeof step, "%" PRId64, info->global_step);
    const struct st_meta meta[] = {
        {"format", CHECKPOINT_FORMAT},
        {"format_version", CHECKPOINT_FORMAT_VERSION},
        {"kind", full ? "checkpoint" : "model"},
        {"model", MODEL_NAME},
        {"input", "RGB 32x32, NCHW float32: x = (pixel / 255 - mean[c]) / std[c]"},
        {"normalization_mean", mean},
        {"normalization_std", std},
        {"classes", classes},
        {"config", info->config},
        {"epochs_completed", epochs},
        {"global_step", step},
        {"run_id", info->run_id},
        {"rng", "counter-based: splitmix64 keyed by (seed, purpose, epoch, image index)"},
        {"created_by", "cifar10-dp " CIFAR10_DP_VERSION},
    };
    return safetensors_write(path, t, nt, meta, (int)(sizeof meta / sizeof meta[0]), e);
}

static int copy_tensor(const struct safetensors *st, const char *name, enum st_dtype dtype, int ndim,
                       const int *shape, void *dst, size_t bytes, struct err *e) {
    const void *src;
    if (safetensors_tensor(st, name, dtype, ndim, shape, &src, e) != 0) return -1;
    memcpy(dst, src, bytes);
    return 0;
}

int checkpoint_read(const char *path, struct model_state *state, struct run_info *info, struct err *e) {
    struct safetensors st;
    if (safetensors_read(path, &st, e) != 0) return -1;
    int rc = 0;
    const char *format = safetensors_meta(&st, "format"), *version = safetensors_meta(&st, "format_version");
    const char *model = safetensors_meta(&st, "model"), *kind = safetensors_meta(&st, "kind");
    const char *run_id = safetensors_meta(&st, "run_id"), *config = safetensors_meta(&st, "config");
    const char *epochs = safetensors_meta(&st, "epochs_completed"), *step = safetensors_meta(&st, "global_step");
    if (!format || strcmp(format, CHECKPOINT_FORMAT) != 0)
        rc = err_set(e, "%s: not a cifar10-dp file (metadata format is %s)", path, format ? format : "missing");
    else if (!version || strcmp(version, CHECKPOINT_FORMAT_VERSION) != 0)
        rc = err_set(e, "%s: format version %s; this build reads version %s", path, version ? version : "missing", CHECKPOINT_FORMAT_VERSION);
    else if (!model || strcmp(model, MODEL_NAME) != 0)
        rc = err_set(e, "%s: holds model %s, this program runs %s", path, model ? model : "(missing)", MODEL_NAME);
    else if (!kind || (strcmp(kind, "model") != 0 && strcmp(kind, "checkpoint") != 0))
        rc = err_set(e, "%s: unknown kind %s", path, kind ? kind : "(missing)");
    else if (state->momentum && strcmp(kind, "checkpoint") != 0)
        rc = err_set(e, "%s: is a model file, not a checkpoint (it has no optimizer state)", path);
    else if (!run_id || !config || !epochs || !step || strlen(run_id) >= sizeof info->run_id ||
             strlen(config) >= sizeof info->config)
        rc = err_set(e, "%s: incomplete metadata (run_id, config, epochs_completed, global_step)", path);
    if (!rc) {
        memset(info, 0, sizeof *info);
        snprintf(info->kind, sizeof info->kind, "%s", kind);
        snprintf(info->run_id, sizeof info->run_id, "%s", run_id);
        snprintf(info->config, sizeof info->config, "%s", config);
        char *end1, *end2;
        long ep = strtol(epochs, &end1, 10);
        long long gs = strtoll(step, &end2, 10);
        if (*end1 || *end2 || ep < 0 || ep > 1000000 || gs < 0)
            rc = err_set(e, "%s: bad epochs_completed or global_step in metadata", path);
        info->epochs_completed = (int)ep;
        info->global_step = gs;
    }
    for (int i = 0; i < model_tensor_count() && !rc; i++) {
        const struct model_tensor *mt = model_tensor_at(i);
        float *base = mt->buffer == MODEL_PARAMS ? state->params : state->bn_stats;
        rc = copy_tensor(&st, mt->name, ST_F32, mt->ndim, mt->shape, base + mt->offset, mt->numel * sizeof(float), e);
        if (!rc && state->momentum && mt->buffer == MODEL_PARAMS) {
            char name[96];
            snprintf(name, sizeof name, MOMENTUM_PREFIX "%s", mt->name);
            rc = copy_tensor(&st, name, ST_F32, mt->ndim, mt->shape, state->momentum + mt->offset, mt->numel * sizeof(float), e);
        }
    }
    for (int b = 0; b < 3 && !rc; b++) {
        char name[64];
        int64_t v;
        snprintf(name, sizeof name, "%s.num_batches_tracked", bn_layer_names[b]);
        rc = copy_tensor(&st, name, ST_I64, 0, NULL, &v, sizeof v, e);
        if (!rc) state->bn_batches_tracked = v;
    }
    safetensors_free(&st);
    return rc;
}
