/* dump_steps DATA OUTDIR STEPS BATCH LR
 * Runs STEPS training steps of the model on DATA's first images (no augmentation, SGD with
 * momentum 0.9 and weight decay 5e-4 at a constant LR) and writes, for tests/torch_reference.py:
 *   OUTDIR/init.safetensors   the initial model file (as cifar10-train writes it)
 *   OUTDIR/final.safetensors  the model file after STEPS steps
 *   OUTDIR/state_S.safetensors  checkpoint (weights, momentum, BN statistics) after step S
 *   OUTDIR/dump.safetensors   x [STEPS][BATCH][3][32][32], indices and labels [STEPS][BATCH] (I64),
 *                             losses [STEPS], grad.<name> (first step's gradients),
 *                             eval_logits [BATCH][10] of the final model on the first batch,
 *                             act.<S>.<L> [BATCH][...]: for steps S = 0, 1, the output of every
 *                             ReLU layer L (our ReLU and max-pool decisions). */
#include "../app/checkpoint.h"
#include "../app/model.h"
#include "../app/safetensors.h"
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/cifar.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MOMENTUM 0.9f
#define WEIGHT_DECAY 5e-4f

static void write_model(const char *dir, const char *name, struct model *m, const float *p,
                        const float *mom, const float *bn) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    struct model_state st = {(float *)p, (float *)mom, (float *)bn, m->bn_batches_tracked};
    struct run_info info = {.kind = "model", .run_id = "dump-steps", .config = "{}"};
    if (mom) snprintf(info.kind, sizeof info.kind, "checkpoint");
    struct err e;
    if (checkpoint_write(path, &st, &info, &e) != 0) err_die(1, "%s", e.msg);
}

int main(int argc, char **argv) {
    err_set_progname("dump_steps");
    if (argc != 6) err_die(2, "usage: dump_steps DATA OUTDIR STEPS BATCH LR");
    int steps = atoi(argv[3]), B = atoi(argv[4]);
    float lr = strtof(argv[5], NULL);
    struct cifar_data data;
    struct err e;
    if (cifar_load(argv[1], CIFAR_TRAIN, &data, &e) != 0) err_die(1, "%s", e.msg);
    if (data.train.n < steps * B) err_die(1, "need %d images", steps * B);
    struct model m;
    model_init(&m, kernels_cpu(), B, 42);
    size_t P = model_param_count(), S = model_bn_stats_count();
    float *p = XALLOC(P * 4), *bn = XALLOC(S * 4), *g = XALLOC(P * 4);
    model_get_state(&m, p, NULL, bn);
    write_model(argv[2], "init.safetensors", &m, p, NULL, bn);

    float *x = XALLOC((size_t)steps * B * CIFAR_IMAGE_BYTES * 4), *losses = XALLOC((size_t)steps * 4);
    int *idx = XALLOC((size_t)steps * B * sizeof(int)), *lab = XALLOC((size_t)steps * B * sizeof(int));
    int64_t *idx64 = XALLOC((size_t)steps * B * 8), *lab64 = XALLOC((size_t)steps * B * 8);
    float *mom = XALLOC(P * 4);
    /* ReLU outputs of the first two steps: acts[s][L] */
    float *acts[2][MODEL_LAYERS] = {{0}};
    int act_shape[MODEL_LAYERS][3];
    for (int s = 0; s < steps; s++) {
        for (int i = 0; i < B; i++) idx[s * B + i] = (s * B + i * 7) % data.train.n; /* a spread of images */
        float *xs = x + (size_t)s * B * CIFAR_IMAGE_BYTES;
        struct model_batch *b = model_batch_next(&m);
        augment_gather(&data.train, idx + s * B, B, 0, 0, 0, b->img, b->geom, lab + s * B);
        memcpy(b->labels, lab + s * B, (size_t)B * sizeof(int));
        model_batch_submit(&m, B);
        model_forward_backward(&m);
        /* The network's input as the pipeline made it (host memory on the CPU backend). */
        memcpy(xs, m.input, (size_t)B * CIFAR_IMAGE_BYTES * 4);
        losses[s] = m.grads[P];
        if (s == 0) memcpy(g, m.grads, P * 4);
        for (int l = 0; s < 2 && l < MODEL_LAYERS; l++) {
            if (strcmp(model_layer_kind(l), "relu") != 0) continue;
            int *sh = act_shape[l];
            model_layer_output_shape(l, &sh[0], &sh[1], &sh[2]);
            size_t n = (size_t)B * sh[0] * sh[1] * sh[2];
            acts[s][l] = XALLOC(n * 4);
            memcpy(acts[s][l], m.act[l], n * 4);
        }
        model_sgd_step(&m, lr, MOMENTUM, WEIGHT_DECAY, 1.0f);
        model_get_state(&m, p, mom, bn);
        char name[64];
        snprintf(name, sizeof name, "state_%d.safetensors", s + 1);
        write_model(argv[2], name, &m, p, mom, bn);
    }
    for (int i = 0; i < steps * B; i++) idx64[i] = idx[i], lab64[i] = lab[i];
    write_model(argv[2], "final.safetensors", &m, p, NULL, bn);
    float *logits = XALLOC((size_t)B * 10 * 4);
    int *pred = XALLOC((size_t)B * sizeof(int));
    struct model_batch *b = model_batch_next(&m);
    augment_gather(&data.train, idx, B, 0, 0, 0, b->img, b->geom, b->labels);
    model_batch_submit(&m, B);
    model_predict(&m, pred, logits);

    /* dump.safetensors */
    struct st_tensor t[160];
    char names[160][64];
    int nt = 0;
    t[nt++] = (struct st_tensor){"x", ST_F32, 5, {steps, B, 3, 32, 32}, x};
    t[nt++] = (struct st_tensor){"indices", ST_I64, 2, {steps, B}, idx64};
    t[nt++] = (struct st_tensor){"labels", ST_I64, 2, {steps, B}, lab64};
    t[nt++] = (struct st_tensor){"losses", ST_F32, 1, {steps}, losses};
    t[nt++] = (struct st_tensor){"eval_logits", ST_F32, 2, {B, 10}, logits};
    for (int s = 0; s < 2; s++)
        for (int l = 0; l < MODEL_LAYERS; l++) {
            if (!acts[s][l]) continue;
            snprintf(names[nt], sizeof names[nt], "act.%d.%d", s, l);
            int *sh = act_shape[l];
            t[nt] = sh[1] == 1 ? (struct st_tensor){names[nt], ST_F32, 2, {B, sh[0]}, acts[s][l]}
                               : (struct st_tensor){names[nt], ST_F32, 4, {B, sh[0], sh[1], sh[2]}, acts[s][l]};
            nt++;
        }
    for (int i = 0; i < model_tensor_count(); i++) {
        const struct model_tensor *mt = model_tensor_at(i);
        if (mt->buffer != MODEL_PARAMS) continue;
        snprintf(names[nt], sizeof names[nt], "grad.%s", mt->name);
        t[nt] = (struct st_tensor){names[nt], ST_F32, mt->ndim, {0}, g + mt->offset};
        for (int d = 0; d < mt->ndim; d++) t[nt].shape[d] = mt->shape[d];
        nt++;
    }
    char path[4200];
    snprintf(path, sizeof path, "%s/dump.safetensors", argv[2]);
    if (safetensors_write(path, t, nt, NULL, 0, &e) != 0) err_die(1, "%s", e.msg);
    printf("dump_steps: %d steps of %d images, losses %.4f -> %.4f\n", steps, B, losses[0], losses[steps - 1]);
    return 0;
}
