#include "checkpoint.h"

#include "../data/augment.h"
#include "../data/cifar.h"
#include "../model/net.h"
#include "safetensors.h"

#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOMENTUM_PREFIX  "optimizer.momentum."
#define LOOKAHEAD_PREFIX "optimizer.lookahead."
#define RANKS_PREFIX     "ranks."
#define MAX_RANKS        65536

struct model_state checkpoint_state_alloc(const struct model *m, unsigned what) {
    size_t P = m->nparams * sizeof(float), S = (m->nbuffers ? m->nbuffers : 1) * sizeof(float);
    int la = (what & STATE_LOOKAHEAD) != 0;
    return (struct model_state){XALLOC(P),
                                what & STATE_MOMENTUM ? XALLOC(P) : NULL,
                                XALLOC(S),
                                0,
                                la ? XALLOC(P) : NULL,
                                la ? XALLOC(S) : NULL,
                                1,
                                NULL,
                                NULL};
}

void checkpoint_state_free(struct model_state *s) {
    free(s->params), free(s->momentum), free(s->buffers), free(s->ema_params), free(s->ema_buffers);
    free(s->rank_buffers), free(s->rank_ema_buffers);
    memset(s, 0, sizeof *s);
}

void checkpoint_state_drop_ranks(struct model_state *s) {
    free(s->rank_buffers), free(s->rank_ema_buffers);
    s->rank_buffers = s->rank_ema_buffers = NULL;
    s->ranks = 1;
}

/* Which copy of a tensor: its value, its momentum, its lookahead average. */
enum part { PART_VALUE, PART_MOMENTUM, PART_LOOKAHEAD };

/* Where tensor t of m lives in state, for that part. */
static void *state_data(const struct model_state *state, const struct model_tensor *t, enum part part) {
    if (part == PART_MOMENTUM) return state->momentum + t->offset;
    if (t->home == HOME_COUNTER) return (void *)&state->batches_tracked;
    if (part == PART_LOOKAHEAD)
        return (t->home == HOME_PARAMS ? state->ema_params : state->ema_buffers) + t->offset;
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
    struct st_tensor s = {
        .name = name, .dtype = t->home == HOME_COUNTER ? ST_I64 : ST_F32, .ndim = t->ndim, .data = data};
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

/* Rank r's copy (r >= 1) of running statistic mt, value or lookahead average, in state. */
static float *rank_data(const struct model *m, const struct model_state *state, const struct model_tensor *mt,
                        enum part part, int r) {
    float *sets = part == PART_LOOKAHEAD ? state->rank_ema_buffers : state->rank_buffers;
    return sets + (size_t)r * m->nbuffers + mt->offset;
}

/* The name of rank r's copy of mt: "ranks.R.NAME" (after the part's prefix). */
static void rank_name(char *out, size_t n, const struct model_tensor *mt, enum part part, int r) {
    snprintf(out, n, "%s" RANKS_PREFIX "%d.%s", part_prefix[part], r, mt->name);
}

/* The tensors of a file of state: every part of every tensor, then ranks 1.. 's running
 * statistics (their values, then their lookahead averages). names: [3 ntensors x ranks][128]. */
static int file_tensors(const struct model *m, const struct model_state *state, int full, struct st_tensor *t,
                        char (*names)[128]) {
    int nt = 0;
    for (enum part part = PART_VALUE; part <= (full ? PART_LOOKAHEAD : PART_VALUE); part++)
        for (int i = 0; i < m->ntensors; i++) {
            const struct model_tensor *mt = &m->tensors[i];
            if (!has_part(state, mt, part)) continue;
            snprintf(names[nt], sizeof names[nt], "%s%s", part_prefix[part], mt->name);
            t[nt] = st_of(mt, names[nt], state_data(state, mt, part));
            nt++;
        }
    for (int r = 1; full && r < state->ranks; r++)
        for (enum part part = PART_VALUE; part <= PART_LOOKAHEAD; part += PART_LOOKAHEAD - PART_VALUE)
            for (int i = 0; i < m->ntensors && (part == PART_VALUE || state->ema_params); i++) {
                const struct model_tensor *mt = &m->tensors[i];
                if (!mt->running) continue;
                rank_name(names[nt], sizeof names[nt], mt, part, r);
                t[nt] = st_of(mt, names[nt], rank_data(m, state, mt, part, r));
                nt++;
            }
    return nt;
}

int checkpoint_write(const char *path, const struct model *m, const struct model_state *state,
                     const struct run_info *info, struct err *e) {
    int full = strcmp(info->kind, "checkpoint") == 0, ranks = full && state->ranks > 1 ? state->ranks : 1;
    CHECK(ranks == 1 || (state->rank_buffers && (state->rank_ema_buffers || !state->ema_params)));
    size_t most = (size_t)3 * m->ntensors * ranks;
    struct st_tensor *t = XALLOC(most * sizeof *t);
    char(*names)[128] = XALLOC(most * sizeof *names);
    int nt = file_tensors(m, state, full, t, names);
    char mean[96], std[96], classes[256] = "[", epochs[16], step[32];
    normalization_meta(mean, std);
    for (int c = 0; c < CIFAR_CLASSES; c++)
        snprintf(classes + strlen(classes), sizeof classes - strlen(classes), "%s\"%s\"", c ? "," : "",
                 cifar_class_names[c]);
    strcat(classes, "]");
    snprintf(epochs, sizeof epochs, "%d", info->epochs_completed);
    snprintf(step, sizeof step, "%" PRId64, info->global_step);
    char in_epoch[16], per_epoch[16], nranks[16], sums[128];
    snprintf(in_epoch, sizeof in_epoch, "%d", info->step_in_epoch);
    snprintf(per_epoch, sizeof per_epoch, "%d", info->steps_per_epoch);
    snprintf(nranks, sizeof nranks, "%d", ranks);
    snprintf(sums, sizeof sums, "%a %a %a", info->epoch_loss, info->epoch_correct, info->print_loss);
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
        {"kernels", info->kernels},
        {"rng", "counter-based: splitmix64 keyed by (seed, purpose, epoch, image index)"},
        {"created_by", "cifar10-dp " CIFAR10_DP_VERSION},
        /* checkpoints only */
        {"step_in_epoch", in_epoch},
        {"steps_per_epoch", per_epoch},
        {"ranks", nranks},
        {"epoch_sums", sums},
    };
    int nmeta = (int)(sizeof meta / sizeof meta[0]) - (full ? 0 : 4);
    int rc = safetensors_write(path, t, nt, meta, nmeta, e);
    free(t), free(names);
    return rc;
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
        return err_set(e, "%s: not a cifar10-dp file (metadata format is %s)", path,
                       format ? format : "missing"),
               NULL;
    if (!version || strcmp(version, CHECKPOINT_FORMAT_VERSION) != 0)
        return err_set(e, "%s: format version %s; this build reads version %s", path,
                       version ? version : "missing", CHECKPOINT_FORMAT_VERSION),
               NULL;
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

/* Optional integer metadata `key` in [lo, hi]; absent: 0 (ranks: 1). */
static int meta_int(const struct safetensors *st, const char *path, const char *key, long lo, long hi,
                    int *out, struct err *e) {
    const char *s = safetensors_meta(st, key);
    *out = strcmp(key, "ranks") == 0;
    if (!s) return 0;
    char *end;
    long v = strtol(s, &end, 10);
    if (!*s || *end || v < lo || v > hi) return err_set(e, "%s: bad %s in metadata: '%s'", path, key, s);
    *out = (int)v;
    return 0;
}

/* A mid-epoch checkpoint's position and sums (optional: an epoch's end holds 0s). */
static int read_progress(const struct safetensors *st, const char *path, struct run_info *info, int *ranks,
                         struct err *e) {
    if (meta_int(st, path, "step_in_epoch", 0, 1 << 30, &info->step_in_epoch, e) != 0 ||
        meta_int(st, path, "steps_per_epoch", 0, 1 << 30, &info->steps_per_epoch, e) != 0 ||
        meta_int(st, path, "ranks", 1, MAX_RANKS, ranks, e) != 0)
        return -1;
    if (info->step_in_epoch > info->steps_per_epoch)
        return err_set(e, "%s: step_in_epoch %d is past steps_per_epoch %d", path, info->step_in_epoch,
                       info->steps_per_epoch);
    const char *sums = safetensors_meta(st, "epoch_sums");
    if (!sums) return 0;
    char *p = (char *)sums, *end;
    double *v[3] = {&info->epoch_loss, &info->epoch_correct, &info->print_loss};
    for (int i = 0; i < 3; i++, p = end) {
        *v[i] = strtod(p, &end);
        if (end == p || !isfinite(*v[i]))
            return err_set(e, "%s: bad epoch_sums in metadata: '%s'", path, sums);
    }
    if (*p) return err_set(e, "%s: bad epoch_sums in metadata: '%s'", path, sums);
    return 0;
}

/* The optional kernels record: a table name (letters, digits, '-'), or absent (""). */
static int read_kernels(const struct safetensors *st, const char *path, struct run_info *info,
                        struct err *e) {
    const char *s = safetensors_meta(st, "kernels");
    if (!s) return 0;
    size_t n = strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789-");
    if (s[n] || n >= sizeof info->kernels) {
        char shown[40];
        snprintf(shown, sizeof shown, "%s", s);
        for (char *c = shown; *c; c++)
            if (!isprint((unsigned char)*c)) *c = '?';
        return err_set(e, "%s: bad kernels in metadata: '%s%s'", path, shown,
                       strlen(s) >= sizeof shown ? "..." : "");
    }
    memcpy(info->kernels, s, n + 1);
    return 0;
}

/* The run's record from the metadata (format already checked); *ranks: the sets of running
 * statistics it holds. */
static int read_info(const struct safetensors *st, const char *path, const struct model_state *state,
                     struct run_info *info, int *ranks, struct err *e) {
    const char *kind = safetensors_meta(st, "kind"), *run_id = safetensors_meta(st, "run_id");
    const char *config = safetensors_meta(st, "config");
    const char *epochs = safetensors_meta(st, "epochs_completed"),
               *step = safetensors_meta(st, "global_step");
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
    if (read_kernels(st, path, info, e) != 0) return -1;
    return read_progress(st, path, info, ranks, e);
}

static int copy_tensor(const struct safetensors *st, const char *name, const struct model_tensor *t,
                       void *dst, struct err *e) {
    const void *src;
    enum st_dtype dtype = t->home == HOME_COUNTER ? ST_I64 : ST_F32;
    if (safetensors_tensor(st, name, dtype, t->ndim, t->shape, &src, e) != 0) return -1;
    memcpy(dst, src, t->home == HOME_COUNTER ? sizeof(int64_t) : t->numel * sizeof(float));
    return 0;
}

/* A checkpoint's per-rank running statistics into state (ranks > 1): every set starts as rank
 * 0's buffers (the frozen tensors are the same on every rank) and takes rank r's statistics. */
static int read_ranks(const struct safetensors *st, const struct model *m, struct model_state *state,
                      int ranks, struct err *e) {
    checkpoint_state_drop_ranks(state);
    state->ranks = ranks;
    if (ranks == 1) return 0;
    size_t S = m->nbuffers;
    state->rank_buffers = XALLOC((size_t)ranks * S * sizeof(float));
    if (state->ema_params) state->rank_ema_buffers = XALLOC((size_t)ranks * S * sizeof(float));
    for (int r = 0; r < ranks; r++) {
        memcpy(state->rank_buffers + (size_t)r * S, state->buffers, S * sizeof(float));
        if (state->ema_params)
            memcpy(state->rank_ema_buffers + (size_t)r * S, state->ema_buffers, S * sizeof(float));
    }
    for (int r = 1; r < ranks; r++)
        for (enum part part = PART_VALUE; part <= PART_LOOKAHEAD; part += PART_LOOKAHEAD - PART_VALUE)
            for (int i = 0; i < m->ntensors && (part == PART_VALUE || state->ema_params); i++) {
                const struct model_tensor *mt = &m->tensors[i];
                char name[128];
                rank_name(name, sizeof name, mt, part, r);
                if (mt->running && copy_tensor(st, name, mt, rank_data(m, state, mt, part, r), e) != 0)
                    return -1;
            }
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
    int ranks = 1;
    if (!rc) rc = read_info(&st, path, state, info, &ranks, e);
    for (enum part part = PART_VALUE; part <= PART_LOOKAHEAD; part++)
        for (int i = 0; i < m->ntensors && !rc; i++) {
            const struct model_tensor *mt = &m->tensors[i];
            if (!has_part(state, mt, part)) continue;
            char name[128];
            snprintf(name, sizeof name, "%s%s", part_prefix[part], mt->name);
            rc = copy_tensor(&st, name, mt, state_data(state, mt, part), e);
        }
    if (!rc && state->momentum) rc = read_ranks(&st, m, state, ranks, e);
    safetensors_free(&st);
    return rc;
}
