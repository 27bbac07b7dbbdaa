/* dump_steps NET DATA OUTDIR STEPS BATCH LR
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
 * Everything is read through the backend's download(), as for device memory. */
#include "../app/checkpoint.h"
#include "../app/model.h"
#include "../app/safetensors.h"
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/cifar.h"
#include "test_nets.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOMENTUM 0.9f
#define WEIGHT_DECAY 5e-4f

static void write_model(const char *dir, const char *name, struct model *m, const float *p,
                        const float *mom, const float *bn) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct model_state st = {(float *)p, (float *)mom, (float *)bn, m->batches_tracked, NULL, NULL};
    struct run_info info = {.kind = "model", .run_id = "dump-steps", .config = "{}"};
    if (mom) snprintf(info.kind, sizeof info.kind, "checkpoint");
    struct err e;
    if (checkpoint_write(path, m, &st, &info, &e) != 0) err_die(1, "%s", e.msg);
}

/* Whether the reference needs layer i's output to follow our decisions. */
static int decides(const struct model *m, int i) {
    return m->layers[i].def->kind == LAYER_RELU || (i + 1 < m->nlayers && m->layers[i + 1].def->kind == LAYER_MAXPOOL);
}

/* A host copy of n floats of backend memory. */
static float *host_copy(const struct model *m, const float *src, size_t n) {
    float *h = XALLOC(n * sizeof(float));
    m->k->download(h, src, n * sizeof(float));
    return h;
}

int main(int argc, char **argv) {
    err_set_progname("dump_steps");
    if (argc != 7) err_die(2, "usage: dump_steps NET DATA OUTDIR STEPS BATCH LR");
    const struct net_def *net = test_nets_find(argv[1]);
    if (!net) err_die(2, "%s: no such network", argv[1]);
    const char *data_dir = argv[2], *out = argv[3];
    int steps = atoi(argv[4]), B = atoi(argv[5]);
    float lr = strtof(argv[6], NULL);
    struct cifar_data data;
    struct err e;
    if (cifar_load(data_dir, CIFAR_TRAIN, &data, &e) != 0) err_die(1, "%s", e.msg);
    if (data.train.n < steps * B) err_die(1, "need %d images", steps * B);
    struct model m;
    model_init(&m, net, kernels_cpu(), B, 42);
    size_t P = m.nparams, S = m.nbuffers ? m.nbuffers : 1;
    int L = m.nlayers, classes = net->classes;
    float *p = XALLOC(P * 4), *bn = XALLOC(S * 4), *g = XALLOC(P * 4);
    model_get_state(&m, p, NULL, bn);
    write_model(out, "init.safetensors", &m, p, NULL, bn);

    float *x = XALLOC((size_t)steps * B * CIFAR_IMAGE_BYTES * 4), *losses = XALLOC((size_t)steps * 4);
    int *idx = XALLOC((size_t)steps * B * sizeof(int)), *lab = XALLOC((size_t)steps * B * sizeof(int));
    int64_t *idx64 = XALLOC((size_t)steps * B * 8), *lab64 = XALLOC((size_t)steps * B * 8);
    float *mom = XALLOC(P * 4);
    /* ReLU outputs of the first two steps: acts[s][L] */
    float **acts[2] = {XALLOC((size_t)L * sizeof(float *)), XALLOC((size_t)L * sizeof(float *))};
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < B; i++) idx[s * B + i] = (s * B + i * 7) % data.train.n; /* a spread of images */
        float *xs = x + (size_t)s * B * CIFAR_IMAGE_BYTES;
        struct batch *b = model_batch_next(&m);
        augment_gather(&data.train, idx + s * B, B, 0, 0, 0, b->img, b->geom, lab + s * B);
        memcpy(b->labels, lab + s * B, (size_t)B * sizeof(int));
        model_batch_submit(&m, B);
        model_forward_backward(&m);
        /* The network's input as the pipeline made it. */
        m.k->download(xs, m.input, (size_t)B * CIFAR_IMAGE_BYTES * 4);
        m.k->download(&losses[s], m.grads + P, sizeof(float));
        if (s == 0) m.k->download(g, m.grads, P * 4);
        for (int l = 0; s < 2 && l < L; l++) {
            const struct model_layer *ml = &m.layers[l];
            acts[s][l] = decides(&m, l) ? host_copy(&m, ml->act, (size_t)B * ml->out_c * ml->out_h * ml->out_w) : NULL;
        }
        model_sgd_step(&m, lr, MOMENTUM, WEIGHT_DECAY, 1.0f);
        model_get_state(&m, p, mom, bn);
        char name[64];
        snprintf(name, sizeof name, "state_%d.safetensors", s + 1);
        write_model(out, name, &m, p, mom, bn);
    }
    for (int i = 0; i < steps * B; i++) idx64[i] = idx[i], lab64[i] = lab[i];
    write_model(out, "final.safetensors", &m, p, NULL, bn);
    float *logits = XALLOC((size_t)B * classes * 4);
    int *pred = XALLOC((size_t)B * sizeof(int));
    struct batch *b = model_batch_next(&m);
    augment_gather(&data.train, idx, B, 0, 0, 0, b->img, b->geom, b->labels);
    model_batch_submit(&m, B);
    model_predict(&m, pred, logits);

    /* dump.safetensors */
    struct st_tensor t[256];
    char names[256][96];
    int nt = 0;
    t[nt++] = (struct st_tensor){"x", ST_F32, 5, {steps, B, 3, 32, 32}, x};
    t[nt++] = (struct st_tensor){"indices", ST_I64, 2, {steps, B}, idx64};
    t[nt++] = (struct st_tensor){"labels", ST_I64, 2, {steps, B}, lab64};
    t[nt++] = (struct st_tensor){"losses", ST_F32, 1, {steps}, losses};
    t[nt++] = (struct st_tensor){"eval_logits", ST_F32, 2, {B, classes}, logits};
    for (int s = 0; s < 2 && s < steps; s++)
        for (int l = 0; l < L; l++) {
            if (!acts[s][l]) continue;
            snprintf(names[nt], sizeof names[nt], "act.%d.%d", s, l);
            const struct model_layer *ml = &m.layers[l];
            t[nt] = ml->out_h == 1 ? (struct st_tensor){names[nt], ST_F32, 2, {B, ml->out_c}, acts[s][l]}
                                   : (struct st_tensor){names[nt], ST_F32, 4, {B, ml->out_c, ml->out_h, ml->out_w}, acts[s][l]};
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
    char path[4200];
    snprintf(path, sizeof path, "%s/dump.safetensors", out);
    if (safetensors_write(path, t, nt, NULL, 0, &e) != 0) err_die(1, "%s", e.msg);
    printf("dump_steps: %d steps of %d images, losses %.4f -> %.4f\n", steps, B, losses[0], losses[steps - 1]);
    return 0;
}
