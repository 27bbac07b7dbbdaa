/* dump_steps NET DATA OUTDIR STEPS BATCH LR
 *            [--recipe airbench94 --steps-per-epoch K --total-steps T [--bias-epochs E]]
 * Runs STEPS training steps of network NET (a known one or a test network, tests/test_nets.h)
 * on DATA's first images (no augmentation, SGD with momentum 0.9 and weight decay 5e-4 at a
 * constant LR) and writes, for tests/torch_reference.py:
 *   OUTDIR/init.safetensors   the initial model file (as cifar10-train writes it)
 *   OUTDIR/final.safetensors  the model file after STEPS steps
 *   OUTDIR/state_S.safetensors  checkpoint (weights, momentum, BN statistics) after step S
 *   OUTDIR/dump.safetensors   x [STEPS][BATCH][3][32][32], indices and labels [STEPS][BATCH] (I64),
 *                             losses [STEPS], grad.<name> (first step's gradients of the
 *                             trainable tensors), eval_logits [BATCH][classes] of the final model
 *                             on the first batch, act.<S>.<L> [BATCH][...]: for steps S = 0, 1,
 *                             the output of every layer L that is a ReLU or feeds a max pool (our
 *                             ReLU and max-pool decisions).
 *
 * Recipe mode (--recipe airbench94): the optimizer is the recipe's (config_recipe), applied
 * step by step as app/train.c does for one rank with a global batch of BATCH: LR is the
 * recipe's learning rate in airbench's units (c.learning_rate; the recipe's own is 11.5),
 * label smoothing and the summed loss on the model, model_optimizer_step with config_sgd_at
 * at global step S of a run of T steps of K per epoch (triangle schedule, Nesterov, the
 * batch-norm group), then lookahead with config_lookahead_weight after step S + 1 when due,
 * and the final full lookahead (weight 0) when S + 1 == T; the first layer's bias stops
 * training (model_stop_training) before step E * K, the first of epoch E (E: --bias-epochs,
 * default the recipe's first_bias_epochs, 3). T >= STEPS (T == STEPS takes the final
 * lookahead); the first layer keeps its initial filter (whitening has its own test). Changes:
 *   state_S.safetensors also holds the lookahead averages (optimizer.lookahead.<name>),
 *   act.<S>.<L> is written for every step S, not only 0 and 1 (every step is compared),
 *   dump.safetensors holds sgd_lr / sgd_weight_decay [STEPS] (the other group's values of
 *   each step, for diagnosis) and metadata recipe, total_steps, steps_per_epoch, bias_epochs,
 *   batch, learning_rate (what Python needs to recompute the run on its own).
 * Everything is read through the backend's download(), as for device memory. */
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/cifar.h"
#include "../io/checkpoint.h"
#include "../io/safetensors.h"
#include "../model/batches.h"
#include "../model/config.h"
#include "../model/model.h"
#include "check.h"
#include "test_nets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOMENTUM     0.9f
#define WEIGHT_DECAY 5e-4f

/* A model file (mom NULL) or a checkpoint; ema_p/ema_b: the lookahead averages (NULL: none). */
static void write_model(const char *dir, const char *name, struct model *m, const float *p, const float *mom,
                        const float *bn, const float *ema_p, const float *ema_b) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct model_state st = {
        (float *)p, (float *)mom, (float *)bn, m->batches_tracked, (float *)ema_p, (float *)ema_b,
        1,          NULL,         NULL};
    struct run_info info = {.kind = "model", .run_id = "dump-steps", .config = "{}"};
    if (mom) snprintf(info.kind, sizeof info.kind, "checkpoint");
    struct err e;
    if (checkpoint_write(path, m, &st, &info, &e) != 0) err_die(1, "%s", e.msg);
}

/* Whether the reference needs layer i's output to follow our decisions. */
static int decides(const struct model *m, int i) {
    return m->layers[i].def->kind == LAYER_RELU ||
           (i + 1 < m->nlayers && m->layers[i + 1].def->kind == LAYER_MAXPOOL);
}

/* A host copy of n floats of backend memory. */
static float *host_copy(const struct model *m, const float *src, size_t n) {
    float *h = XALLOC(n * sizeof(float));
    m->k->download(h, src, n * sizeof(float));
    return h;
}

#define USAGE                                                                                                \
    "usage: dump_steps NET DATA OUTDIR STEPS BATCH LR [--recipe airbench94 --steps-per-epoch K "             \
    "--total-steps T "                                                                                       \
    "[--bias-epochs E]]"

/* A whole positive number, or exit with the usage. */
static int positive(const char *flag, const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < 1 || v > 1000000)
        err_die(2, "%s: %s is not a whole number >= 1\n%s", flag, s, USAGE);
    return (int)v;
}

int main(int argc, char **argv) {
    err_set_progname("dump_steps");
    if (argc < 7) err_die(2, USAGE);
    const struct net_def *net = test_nets_find(argv[1]);
    if (!net) err_die(2, "%s: no such network", argv[1]);
    const char *data_dir = argv[2], *out = argv[3];
    int steps = positive("STEPS", argv[4]), B = positive("BATCH", argv[5]);
    float lr = strtof(argv[6], NULL);
    /* Recipe mode. */
    const char *recipe = NULL;
    int K = 0, bias_epochs = -1;
    long T = 0;
    for (int i = 7; i < argc; i += 2) {
        if (i + 1 >= argc) err_die(2, "%s needs a value\n%s", argv[i], USAGE);
        if (strcmp(argv[i], "--recipe") == 0) recipe = argv[i + 1];
        else if (strcmp(argv[i], "--steps-per-epoch") == 0) K = positive(argv[i], argv[i + 1]);
        else if (strcmp(argv[i], "--total-steps") == 0) T = positive(argv[i], argv[i + 1]);
        else if (strcmp(argv[i], "--bias-epochs") == 0) bias_epochs = positive(argv[i], argv[i + 1]);
        else err_die(2, "%s: unknown option\n%s", argv[i], USAGE);
    }
    struct train_config c;
    memset(&c, 0, sizeof c);
    if (recipe) {
        if (strcmp(recipe, "airbench94") != 0) err_die(2, "--recipe %s: only airbench94 is known", recipe);
        if (!K || !T) err_die(2, "--recipe needs --steps-per-epoch and --total-steps\n%s", USAGE);
        if (T < steps) err_die(2, "--total-steps %ld is below STEPS %d", T, steps);
        config_recipe(&c, recipe);
        c.learning_rate = strtod(argv[6], NULL);
        if (bias_epochs > 0) c.first_bias_epochs = bias_epochs;
    } else if (K || T || bias_epochs > 0) {
        err_die(2, "--steps-per-epoch, --total-steps and --bias-epochs need --recipe\n%s", USAGE);
    }
    struct cifar_data data;
    struct err e;
    if (cifar_load(data_dir, CIFAR_TRAIN, &data, &e) != 0) err_die(1, "%s", e.msg);
    if (data.train.n < steps * B) err_die(1, "need %d images", steps * B);
    struct model m;
    struct batches q;
    model_init(&m, net, kernels_cpu(), B, 42);
    m.keep_pool_inputs = 1; /* the pools' inputs are dumped (test_model holds the fused pools to these) */
    batches_init(&q, m.k, B);
    size_t P = m.nparams, S = m.nbuffers ? m.nbuffers : 1;
    int L = m.nlayers, classes = net->classes;
    float *p = XALLOC(P * 4), *bn = XALLOC(S * 4), *g = XALLOC(P * 4);
    model_get_state(&m, p, NULL, bn);
    write_model(out, "init.safetensors", &m, p, NULL, bn, NULL, NULL);
    float *ema_p = NULL, *ema_b = NULL, *sgd_lr = XALLOC((size_t)steps * 4),
          *sgd_wd = XALLOC((size_t)steps * 4);
    if (recipe) {
        m.label_smoothing = (float)c.label_smoothing;
        m.loss_reduction = c.loss;
        if (c.lookahead) { /* averages start at the weights, as in app/train.c */
            model_lookahead_init(&m);
            ema_p = XALLOC(P * 4), ema_b = XALLOC(S * 4);
        }
    }
    int act_steps = recipe ? steps : 2; /* the steps whose decision-layer outputs are dumped */

    float *x = XALLOC((size_t)steps * B * CIFAR_IMAGE_BYTES * 4), *losses = XALLOC((size_t)steps * 4);
    int *idx = XALLOC((size_t)steps * B * sizeof(int)), *lab = XALLOC((size_t)steps * B * sizeof(int));
    int64_t *idx64 = XALLOC((size_t)steps * B * 8), *lab64 = XALLOC((size_t)steps * B * 8);
    float *mom = XALLOC(P * 4);
    /* Decision-layer outputs of the first act_steps steps: acts[s][L] */
    float ***acts = XALLOC((size_t)act_steps * sizeof(float **));
    for (int s = 0; s < act_steps; s++) acts[s] = XALLOC((size_t)L * sizeof(float *));
    for (int s = 0; s < steps; s++) {
        const struct model_layer *first = &m.layers[0];
        if (recipe && c.first_bias_epochs > 0 && s % K == 0 && s / K >= c.first_bias_epochs &&
            first->bias >= 0 && !m.tensors[first->bias].stopped) { /* app/train.c's begin_epoch */
            model_stop_training(&m, first->bias);
            printf("dump_steps: %s stops training before step %d (epoch %d)\n", m.tensors[first->bias].name,
                   s + 1, s / K + 1);
        }
        for (int i = 0; i < B; i++) idx[s * B + i] = (s * B + i * 7) % data.train.n; /* a spread of images */
        float *xs = x + (size_t)s * B * CIFAR_IMAGE_BYTES;
        struct batch *b = batches_next(&q);
        augment_gather(&data.train, idx + s * B, B, 0, 0, 0, b->img, b->geom, lab + s * B);
        memcpy(b->labels, lab + s * B, (size_t)B * sizeof(int));
        batches_submit(&q, B);
        check_forward_backward(&m, &q);
        /* The network's input as the pipeline made it. */
        m.k->download(xs, m.input, (size_t)B * CIFAR_IMAGE_BYTES * 4);
        m.k->download(&losses[s], m.grads + P, sizeof(float));
        if (s == 0) m.k->download(g, m.grads, P * 4);
        for (int l = 0; s < act_steps && l < L; l++) {
            const struct model_layer *ml = &m.layers[l];
            acts[s][l] =
                decides(&m, l) ? host_copy(&m, ml->act, (size_t)B * ml->out_c * ml->out_h * ml->out_w) : NULL;
        }
        if (recipe) { /* app/train.c's update_weights, for 1 rank */
            struct sgd_settings st;
            config_sgd_at(&c, s, T, K, B, 1, &st);
            model_optimizer_step(&m, &st);
            sgd_lr[s] = st.lr, sgd_wd[s] = st.weight_decay;
            double w = config_lookahead_weight(&c, s + 1, T);
            if (w >= 0) model_lookahead_update(&m, (float)w);
            if (c.lookahead && s + 1 == T) model_lookahead_update(&m, 0.0f);
        } else {
            model_sgd_step(&m, lr, MOMENTUM, WEIGHT_DECAY, 1.0f);
            sgd_lr[s] = lr, sgd_wd[s] = WEIGHT_DECAY;
        }
        model_get_state(&m, p, mom, bn);
        if (ema_p) model_get_lookahead(&m, ema_p, ema_b);
        char name[64];
        snprintf(name, sizeof name, "state_%d.safetensors", s + 1);
        write_model(out, name, &m, p, mom, bn, ema_p, ema_b);
    }
    for (int i = 0; i < steps * B; i++) idx64[i] = idx[i], lab64[i] = lab[i];
    write_model(out, "final.safetensors", &m, p, NULL, bn, NULL, NULL);
    float *logits = XALLOC((size_t)B * classes * 4);
    int *pred = XALLOC((size_t)B * sizeof(int));
    struct batch *b = batches_next(&q);
    augment_gather(&data.train, idx, B, 0, 0, 0, b->img, b->geom, b->labels);
    batches_submit(&q, B);
    check_predict(&m, &q, pred, logits);

    /* dump.safetensors */
    int cap = 64 + act_steps * L + m.ntensors;
    struct st_tensor *t = XALLOC((size_t)cap * sizeof *t);
    char(*names)[96] = XALLOC((size_t)cap * sizeof *names);
    int nt = 0;
    t[nt++] = (struct st_tensor){"x", ST_F32, 5, {steps, B, 3, 32, 32}, x};
    t[nt++] = (struct st_tensor){"indices", ST_I64, 2, {steps, B}, idx64};
    t[nt++] = (struct st_tensor){"labels", ST_I64, 2, {steps, B}, lab64};
    t[nt++] = (struct st_tensor){"losses", ST_F32, 1, {steps}, losses};
    t[nt++] = (struct st_tensor){"eval_logits", ST_F32, 2, {B, classes}, logits};
    if (recipe) {
        t[nt++] = (struct st_tensor){"sgd_lr", ST_F32, 1, {steps}, sgd_lr};
        t[nt++] = (struct st_tensor){"sgd_weight_decay", ST_F32, 1, {steps}, sgd_wd};
    }
    for (int s = 0; s < act_steps && s < steps; s++)
        for (int l = 0; l < L; l++) {
            if (!acts[s][l]) continue;
            snprintf(names[nt], sizeof names[nt], "act.%d.%d", s, l);
            const struct model_layer *ml = &m.layers[l];
            t[nt] = ml->out_h == 1
                        ? (struct st_tensor){names[nt], ST_F32, 2, {B, ml->out_c}, acts[s][l]}
                        : (struct st_tensor){
                              names[nt], ST_F32, 4, {B, ml->out_c, ml->out_h, ml->out_w}, acts[s][l]};
            nt++;
        }
    for (int i = 0; i < m.ntensors; i++) {
        const struct model_tensor *mt = &m.tensors[i];
        if (mt->home != HOME_PARAMS) continue;
        snprintf(names[nt], sizeof names[nt], "grad.%s", mt->name);
        t[nt] = (struct st_tensor){names[nt], ST_F32, mt->ndim, {0}, g + mt->offset};
        for (int d = 0; d < mt->ndim; d++) t[nt].shape[d] = mt->shape[d];
        nt++;
    }
    CHECK(nt <= cap);
    char path[4200], total[32], per_epoch[32], biasep[32], batch[32], lrtext[64];
    snprintf(path, sizeof path, "%s/dump.safetensors", out);
    snprintf(total, sizeof total, "%ld", T);
    snprintf(per_epoch, sizeof per_epoch, "%d", K);
    snprintf(biasep, sizeof biasep, "%d", c.first_bias_epochs);
    snprintf(batch, sizeof batch, "%d", B);
    snprintf(lrtext, sizeof lrtext, "%.17g", c.learning_rate);
    const struct st_meta meta[] = {
        {"recipe", recipe ? recipe : ""}, {"total_steps", total}, {"steps_per_epoch", per_epoch},
        {"bias_epochs", biasep},          {"batch", batch},       {"learning_rate", lrtext}};
    int nmeta = recipe ? (int)(sizeof meta / sizeof meta[0]) : 0;
    if (safetensors_write(path, t, nt, recipe ? meta : NULL, nmeta, &e) != 0) err_die(1, "%s", e.msg);
    printf("dump_steps: %d steps of %d images, losses %.4f -> %.4f\n", steps, B, losses[0],
           losses[steps - 1]);
    return 0;
}
