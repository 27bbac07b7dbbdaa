#include "checkpoint.h"

#include "../data/augment.h"
#include "../data/cifar.h"
#include "net.h"
#include "safetensors.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOMENTUM_PREFIX "optimizer.momentum."
#define LOOKAHEAD_PREFIX "optimizer.lookahead."
#define MAX_TENSORS 256

struct model_state checkpoint_state_alloc(const struct model *m, unsigned what) {
    size_t P = m->nparams * sizeof(float), S = (m->nbuffers ? m->nbuffers : 1) * sizeof(float);
    int la = (what & STATE_LOOKAHEAD) != 0;
    return (struct model_state){XALLOC(P), what & STATE_MOMENTUM ? XALLOC(P) : NULL, XALLOC(S), 0,
                                la ? XALLOC(P) : NULL, la ? XALLOC(S) : NULL};
}

void checkpoint_state_free(struct model_state *s) {
    free(s->params), free(s->momentum), free(s->buffers), free(s->ema_params), free(s->ema_buffers);
    memset(s, 0, sizeof *s);
}

/* Which copy of a tensor: its value, its momentum, its lookahead average. */
enum part { PART_VALUE, PART_MOMENTUM, PART_LOOKAHEAD };

/* Where tensor t of m lives in state, for that part. */
static void *state_data(const struct model_state *state, const struct model_tensor *t, enum part part) {
    if (part == PART_MOMENTUM) return state->momentum + t->offset;
    if (t->home == HOME_COUNTER) return (void *)&state->batches_tracked;
    if (part == PART_LOOKAHEAD) return (t->home == HOME_PARAMS ? state->ema_params : state->ema_buffers) + t->offset;
    return (t->home == HOME_PARAMS ? state->params : state->buffers) + t->offset;
}

/* Whether a checkpoint of state holds that part of tensor t (file or state). */
static int has_part(const struct model_state *state, const struct model_tensor *t, enum part part) {
    if (part == PART_MOMENTUM) return state->momentum && t->home == HOME_PARAMS;
    if (part == PART_LOOKAHEAD) return state->ema_params && t->home != HOME_COUNTER;
    return 1;
}

static const char *const part_prefix[] = {"", MOMENTUM_PREFIX, LOOKAHEAD_PREFIX};

static struct st_tensor st_of(const struct model_tensor *t, const char *name, const void *data) {
    struct st_tensor s = {.name = name, .dtype = t->home == HOME_COUNTER ? ST_I64 : ST_F32, .ndim = t->ndim, .data = data};
    for (int d = 0; d < t->ndim; d++) s.shape[d] = t->shape[d];
    return s;
}

/* How pixels become the network input, as the metadata states it. */
#define INPUT_META "RGB 32x32, NCHW float32: x = (pixel / 255 - mean[c]) / std[c]"

/* The normalisation of the input pipeline (augment.h) as the metadata writes it. */
static void normalization_meta(char mean[96], char std[96]) {
    snprintf(mean, 96, "[%.4f,%.4f,%.4f]", augment_mean[0], augment_mean[1], augment_mean[2]);
    snprintf(std, 96, "[%.4f,%.4f,%.4f]", augment_std[0], augment_std[1], augment_std[2]);
}

int checkpoint_write(const char *path, const struct model *m, const struct model_state *state,
                     const struct run_info *info, struct err *e) {
    int full = strcmp(info->kind, "checkpoint") == 0;
    CHECK(3 * m->ntensors <= MAX_TENSORS);
    struct st_tensor t[MAX_TENSORS];
    char names[MAX_TENSORS][96];
    int nt = 0;
    for (enum part part = PART_VALUE; part <= (full ? PART_LOOKAHEAD : PART_VALUE); part++)
        for (int i = 0; i < m->ntensors; i++) {
            const struct model_tensor *mt = &m->tensors[i];
            if (!has_part(state, mt, part)) continue;
            snprintf(names[nt], sizeof names[nt], "%s%s", part_prefix[part], mt->name);
            t[nt] = st_of(mt, names[nt], state_data(state, mt, part));
            nt++;
        }
    char mean[96], std[96], classes[256] = "[", epochs[16], step[32];
    normalization_meta(mean, std);
    for (int c = 0; c < CIFAR_CLASSES; c++)
        snprintf(classes + strlen(classes), sizeof classes - strlen(classes), "%s\"%s\"", c ? "," : "", cifar_class_names[c]);
    strcat(classes, "]");
    snprintf(epochs, sizeof epochs, "%d", info->epochs_completed);
    snprintf(step, sizeof step, "%" PRId64, info->global_step);
    const struct st_meta meta[] = {
        {"format", CHECKPOINT_FORMAT},
        {"format_version", CHECKPOINT_FORMAT_VERSION},
        {"kind", full ? "checkpoint" : "model"},
        {"model", m->net->name},
        {"input", INPUT_META},
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

int checkpoint_check_input(const char *path, struct err *e) {
    struct safetensors st;
    if (safetensors_read(path, &st, e) != 0) return -1;
    char mean[96], std[96];
    normalization_meta(mean, std);
    const char *want[][2] = {{"input", INPUT_META}, {"normalization_mean", mean}, {"normalization_std", std}};
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        const char *has = safetensors_meta(&st, want[i][0]);
        if (!has || strcmp(has, want[i][1]) != 0)
            rc = err_set(e, "%s: metadata %s is %s; this build's input pipeline has %s", path, want[i][0],
                         has ? has : "missing", want[i][1]);
    }
    safetensors_free(&st);
    return rc;
}

/* Checks the file's format metadata; returns its model name, or NULL with e set. */
static const char *format_check(const struct safetensors *st, const char *path, struct err *e) {
    const char *format = safetensors_meta(st, "format"), *version = safetensors_meta(st, "format_version");
    const char *model = safetensors_meta(st, "model");
    if (!format || strcmp(format, CHECKPOINT_FORMAT) != 0)
        return err_set(e, "%s: not a cifar10-dp file (metadata format is %s)", path, format ? format : "missing"), NULL;
    if (!version || strcmp(version, CHECKPOINT_FORMAT_VERSION) != 0)
        return err_set(e, "%s: format version %s; this build reads version %s", path, version ? version : "missing",
                       CHECKPOINT_FORMAT_VERSION), NULL;
    if (!model) return err_set(e, "%s: no model name in the metadata", path), NULL;
    return model;
}

const struct net_def *checkpoint_net(const char *path, struct err *e) {
    struct safetensors st;
    if (safetensors_read(path, &st, e) != 0) return NULL;
    const char *model = format_check(&st, path, e);
    const struct net_def *net = model ? net_find(model) : NULL;
    if (model && !net) {
        char known[256];
        net_known_names(known, sizeof known);
        err_set(e, "%s: holds model %s, which this build does not know (known: %s)", path, model, known);
    }
    safetensors_free(&st);
    return net;
}

/* The run's record from the metadata (format already checked). */
static int read_info(const struct safetensors *st, const char *path, const struct model_state *state,
                     struct run_info *info, struct err *e) {
    const char *kind = safetensors_meta(st, "kind"), *run_id = safetensors_meta(st, "run_id");
    const char *config = safetensors_meta(st, "config");
    const char *epochs = safetensors_meta(st, "epochs_completed"), *step = safetensors_meta(st, "global_step");
    if (!kind || (strcmp(kind, "model") != 0 && strcmp(kind, "checkpoint") != 0))
        return err_set(e, "%s: unknown kind %s", path, kind ? kind : "(missing)");
    if (state->momentum && strcmp(kind, "checkpoint") != 0)
        return err_set(e, "%s: is a model file, not a checkpoint (it has no optimizer state)", path);
    if (!run_id || !config || !epochs || !step || strlen(run_id) >= sizeof info->run_id ||
        strlen(config) >= sizeof info->config)
        return err_set(e, "%s: incomplete metadata (run_id, config, epochs_completed, global_step)", path);
    memset(info, 0, sizeof *info);
    snprintf(info->kind, sizeof info->kind, "%s", kind);
    snprintf(info->run_id, sizeof info->run_id, "%s", run_id);
    snprintf(info->config, sizeof info->config, "%s", config);
    char *end1, *end2;
    long ep = strtol(epochs, &end1, 10);
    long long gs = strtoll(step, &end2, 10);
    if (*end1 || *end2 || ep < 0 || ep > 1000000 || gs < 0)
        return err_set(e, "%s: bad epochs_completed or global_step in metadata", path);
    info->epochs_completed = (int)ep;
    info->global_step = gs;
    return 0;
}

static int copy_tensor(const struct safetensors *st, const char *name, const struct model_tensor *t, void *dst,
                       struct err *e) {
    const void *src;
    enum st_dtype dtype = t->home == HOME_COUNTER ? ST_I64 : ST_F32;
    if (safetensors_tensor(st, name, dtype, t->ndim, t->shape, &src, e) != 0) return -1;
    memcpy(dst, src, t->home == HOME_COUNTER ? sizeof(int64_t) : t->numel * sizeof(float));
    return 0;
}

int checkpoint_read(const char *path, const struct model *m, struct model_state *state, struct run_info *info,
                    struct err *e) {
    struct safetensors st;
    if (safetensors_read(path, &st, e) != 0) return -1;
    const char *model = format_check(&st, path, e);
    int rc = model ? 0 : -1;
    if (!rc && strcmp(model, m->net->name) != 0)
        rc = err_set(e, "%s: holds model %s, this program runs %s", path, model, m->net->name);
    if (!rc) rc = read_info(&st, path, state, info, e);
    for (enum part part = PART_VALUE; part <= PART_LOOKAHEAD; part++)
        for (int i = 0; i < m->ntensors && !rc; i++) {
            const struct model_tensor *mt = &m->tensors[i];
            if (!has_part(state, mt, part)) continue;
            char name[128];
            snprintf(name, sizeof name, "%s%s", part_prefix[part], mt->name);
            rc = copy_tensor(&st, name, mt, state_data(state, mt, part), e);
        }
    safetensors_free(&st);
    return rc;
}
