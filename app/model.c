#include "model.h"

#include "../common/clock.h"
#include "../common/err.h"
#include "../common/rng.h"
#include "../data/augment.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum kind { CONV, RELU, POOL, BN, FLATTEN, LINEAR };
/* The Sequential, index by index; in/out are channels (conv, BN) or features (linear). */
static const struct layer {
    enum kind kind;
    int in, out;
} layers[MODEL_LAYERS] = {
    {CONV, 3, 32},     {RELU, 0, 0}, {CONV, 32, 64},   {RELU, 0, 0}, {POOL, 0, 0}, {BN, 64, 64},
    {CONV, 64, 128},   {RELU, 0, 0}, {CONV, 128, 128}, {RELU, 0, 0}, {POOL, 0, 0}, {BN, 128, 128},
    {CONV, 128, 256},  {RELU, 0, 0}, {CONV, 256, 256}, {RELU, 0, 0}, {POOL, 0, 0}, {BN, 256, 256},
    {FLATTEN, 0, 0},   {LINEAR, 4096, 512}, {RELU, 0, 0}, {LINEAR, 512, MODEL_CLASSES},
};

/* Per layer: output shape [C][H][W] (linear: [out][1][1]), and the tensors it owns. */
struct shape {
    int c, h, w;
};
static struct shape out_shape[MODEL_LAYERS], in_shape[MODEL_LAYERS];
/* Per layer: index of its first tensor (weight) or -1, of its running_mean tensor (BN), and
 * the offset of its saved batch statistics in bn_saved. */
static int weight_of[MODEL_LAYERS], running_of[MODEL_LAYERS], bn_saved_off[MODEL_LAYERS];
static int tensor_layer[32];
/* ReLUs fused into neighbours: a conv followed by a ReLU applies it in its forward; a ReLU
 * followed by a conv or a max pool has its backward done by that layer's backward. */
static int relu_after[MODEL_LAYERS], relu_backward_fused[MODEL_LAYERS];
static struct model_tensor tensors[32];
static int ntensors;
static size_t nparams, nbn;
static size_t bn_saved_floats, max_act_floats; /* per image for the latter */

static void add_tensor(int layer, const char *what, enum model_buffer buf, int ndim, const int *shape) {
    CHECK(ntensors < (int)(sizeof tensors / sizeof tensors[0]));
    tensor_layer[ntensors] = layer;
    struct model_tensor *t = &tensors[ntensors++];
    snprintf(t->name, sizeof t->name, "network.%d.%s", layer, what);
    t->ndim = ndim;
    t->numel = 1;
    for (int d = 0; d < ndim; d++) t->numel *= (size_t)(t->shape[d] = shape[d]);
    t->buffer = buf;
    size_t *counter = buf == MODEL_PARAMS ? &nparams : &nbn;
    t->offset = *counter;
    *counter += (t->numel + 15) / 16 * 16; /* 64-byte aligned tensors */
}

__attribute__((constructor)) static void build_tables(void) {
    struct shape s = {3, 32, 32};
    for (int i = 0; i < MODEL_LAYERS; i++) {
        const struct layer *l = &layers[i];
        in_shape[i] = s;
        weight_of[i] = -1;
        switch (l->kind) {
        case CONV:
            weight_of[i] = ntensors;
            add_tensor(i, "weight", MODEL_PARAMS, 4, (int[]){l->out, l->in, 3, 3});
            add_tensor(i, "bias", MODEL_PARAMS, 1, (int[]){l->out});
            s.c = l->out;
            break;
        case POOL: s.h /= 2, s.w /= 2; break;
        case BN:
            weight_of[i] = ntensors;
            add_tensor(i, "weight", MODEL_PARAMS, 1, (int[]){l->out});
            add_tensor(i, "bias", MODEL_PARAMS, 1, (int[]){l->out});
            bn_saved_off[i] = (int)bn_saved_floats;
            bn_saved_floats += 2 * (size_t)l->out;
            break;
        case FLATTEN: s = (struct shape){s.c * s.h * s.w, 1, 1}; break;
        case LINEAR:
            CHECK(s.c == l->in && s.h == 1 && s.w == 1);
            weight_of[i] = ntensors;
            add_tensor(i, "weight", MODEL_PARAMS, 2, (int[]){l->out, l->in});
            add_tensor(i, "bias", MODEL_PARAMS, 1, (int[]){l->out});
            s.c = l->out;
            break;
        case RELU: break;
        }
        out_shape[i] = s;
        relu_after[i] = l->kind == CONV && i + 1 < MODEL_LAYERS && layers[i + 1].kind == RELU;
        relu_backward_fused[i] = l->kind == RELU && i + 1 < MODEL_LAYERS &&
                                 (layers[i + 1].kind == CONV || layers[i + 1].kind == POOL);
        size_t a = (size_t)s.c * s.h * s.w;
        if (a > max_act_floats) max_act_floats = a;
    }
    /* BN buffers after all parameters, in state_dict order (num_batches_tracked is separate). */
    for (int i = 0; i < MODEL_LAYERS; i++)
        if (layers[i].kind == BN) {
            running_of[i] = ntensors;
            add_tensor(i, "running_mean", MODEL_BN_STATS, 1, (int[]){layers[i].out});
            add_tensor(i, "running_var", MODEL_BN_STATS, 1, (int[]){layers[i].out});
        }
}

int model_tensor_count(void) { return ntensors; }
const struct model_tensor *model_tensor_at(int i) { return &tensors[i]; }
size_t model_param_count(void) { return nparams; }
size_t model_bn_stats_count(void) { return nbn; }

static float *tensor_ptr(float *base, int t) { return base + tensors[t].offset; }

void model_init(struct model *m, const struct kernels *k, int max_batch, uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->k = k;
    m->max_batch = max_batch;
    m->params = k->alloc(nparams * sizeof(float));
    m->grads = k->alloc((nparams + 2) * sizeof(float));
    m->momentum = k->alloc(nparams * sizeof(float));
    m->bn_stats = k->alloc(nbn * sizeof(float));
    m->input = k->alloc((size_t)max_batch * 3 * 32 * 32 * sizeof(float));
    for (int s = 0; s < 2; s++) {
        m->host[s].img = k->host_alloc((size_t)max_batch * 3 * 32 * 32);
        m->host[s].geom = k->host_alloc((size_t)max_batch * 3 * sizeof(int));
        m->host[s].labels = k->host_alloc((size_t)max_batch * sizeof(int));
        m->dev_img[s] = k->alloc((size_t)max_batch * 3 * 32 * 32);
        m->dev_geom[s] = k->alloc((size_t)max_batch * 3 * sizeof(int));
        m->dev_labels[s] = k->alloc((size_t)max_batch * sizeof(int));
        m->uploaded[s] = k->event_create();
        m->consumed[s] = k->event_create();
        k->download_async(NULL, NULL, 0, m->uploaded[s]); /* both start out complete */
        k->download_async(NULL, NULL, 0, m->consumed[s]);
    }
    m->bn_saved = k->alloc(bn_saved_floats * sizeof(float));
    m->grad_a = k->alloc((size_t)max_batch * max_act_floats * sizeof(float));
    m->grad_b = k->alloc((size_t)max_batch * max_act_floats * sizeof(float));
    m->host_logits = XALLOC((size_t)max_batch * MODEL_CLASSES * sizeof(float));
    size_t ws = 0;
    for (int i = 0; i < MODEL_LAYERS; i++) {
        const struct layer *l = &layers[i];
        struct shape s = in_shape[i], o = out_shape[i];
        size_t need = 0;
        if (l->kind == CONV) need = k->conv3x3_workspace(max_batch, s.c, o.c, s.h, s.w);
        if (l->kind == LINEAR) need = k->linear_workspace(max_batch, l->in, l->out);
        if (need > ws) ws = need;
        if (l->kind == RELU || l->kind == FLATTEN)
            m->act[i] = m->act[i - 1]; /* in place */
        else
            m->act[i] = k->alloc((size_t)max_batch * o.c * o.h * o.w * sizeof(float));
    }
    m->ws = k->alloc(ws);

    /* PyTorch's defaults: kaiming_uniform_(a=sqrt(5)) gives bound 1/sqrt(fan_in) for weights,
     * and biases are uniform in +-1/sqrt(fan_in). Drawn on the host, one stream per tensor. */
    float *host = XALLOC(nparams * sizeof(float));
    float *hbn = XALLOC(nbn * sizeof(float));
    for (int t = 0; t < ntensors; t++) {
        const struct model_tensor *tt = &tensors[t];
        int layer = tensor_layer[t];
        float *dst = (tt->buffer == MODEL_PARAMS ? host : hbn) + tt->offset;
        struct rng r = rng_make(seed, RNG_INIT, (uint64_t)t, 0);
        if (layers[layer].kind == BN) {
            float v = strstr(tt->name, "weight") || strstr(tt->name, "running_var") ? 1.0f : 0.0f;
            for (size_t i = 0; i < tt->numel; i++) dst[i] = v;
        } else {
            int fan_in = layers[layer].kind == CONV ? layers[layer].in * 9 : layers[layer].in;
            double bound = 1.0 / sqrt((double)fan_in);
            for (size_t i = 0; i < tt->numel; i++) dst[i] = (float)((2.0 * rng_uniform(&r) - 1.0) * bound);
        }
    }
    k->upload(m->params, host, nparams * sizeof(float));
    k->upload(m->bn_stats, hbn, nbn * sizeof(float));
    free(host);
    free(hbn);
    m->bn_batches_tracked = 0;
}

void model_free(struct model *m) {
    const struct kernels *k = m->k;
    for (int i = 0; i < MODEL_LAYERS; i++)
        if (layers[i].kind != RELU && layers[i].kind != FLATTEN) k->free(m->act[i]);
    void *bufs[] = {m->params, m->grads, m->momentum, m->bn_stats, m->input,
                    m->bn_saved, m->grad_a, m->grad_b, m->ws};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) k->free(bufs[i]);
    for (int s = 0; s < 2; s++) {
        k->free(m->dev_img[s]), k->free(m->dev_geom[s]), k->free(m->dev_labels[s]);
        k->host_free(m->host[s].img), k->host_free(m->host[s].geom), k->host_free(m->host[s].labels);
        k->event_destroy(m->uploaded[s]), k->event_destroy(m->consumed[s]);
    }
    free(m->host_logits);
    memset(m, 0, sizeof *m);
}

static const char *kind_names[] = {"conv", "relu", "maxpool", "batchnorm", "flatten", "linear"};

const char *model_layer_kind(int i) { return kind_names[layers[i].kind]; }

void model_layer_output_shape(int i, int *c, int *h, int *w) {
    *c = out_shape[i].c, *h = out_shape[i].h, *w = out_shape[i].w;
}

void model_layer_describe(int i, char *buf, size_t size) {
    const struct layer *l = &layers[i];
    struct shape s = in_shape[i];
    if (l->kind == CONV)
        snprintf(buf, size, "conv %d->%d %dx%d", l->in, l->out, s.h, s.w);
    else if (l->kind == LINEAR)
        snprintf(buf, size, "linear %d->%d", l->in, l->out);
    else
        snprintf(buf, size, "%s %dx%dx%d", kind_names[l->kind], s.c, s.h, s.w);
}

double model_layer_flops(int i, int n, int pass) {
    const struct layer *l = &layers[i];
    struct shape s = in_shape[i];
    double f;
    if (l->kind == CONV)
        f = 2.0 * n * l->out * l->in * 9 * s.h * s.w;
    else if (l->kind == LINEAR)
        f = 2.0 * n * l->in * l->out;
    else
        return 0.0;
    /* Backward: the weight gradient, plus the input gradient except for layer 0. */
    return pass == 0 ? f : (i == 0 ? f : 2.0 * f);
}

/* Forward through all layers; train selects batch statistics (and updates running stats). */
static void forward(struct model *m, int n, int train) {
    const struct kernels *k = m->k;
    const float *x = m->input;
    for (int i = 0; i < MODEL_LAYERS; i++) {
        const struct layer *l = &layers[i];
        struct shape s = in_shape[i], o = out_shape[i];
        float *y = m->act[i];
        float *w = weight_of[i] >= 0 ? tensor_ptr(m->params, weight_of[i]) : NULL;
        float *b = weight_of[i] >= 0 ? tensor_ptr(m->params, weight_of[i] + 1) : NULL;
        double t0 = clock_seconds();
        switch (l->kind) {
        case CONV: k->conv3x3_forward(x, w, b, y, n, s.c, o.c, s.h, s.w, relu_after[i], m->ws); break;
        case RELU:
            if (!relu_after[i - 1]) k->relu_forward(x, y, (size_t)n * o.c * o.h * o.w);
            break;
        case POOL: k->maxpool2_forward(x, y, n, s.c, s.h, s.w); break;
        case BN: {
            float *rm = tensor_ptr(m->bn_stats, running_of[i]);
            float *rv = tensor_ptr(m->bn_stats, running_of[i] + 1);
            if (train)
                k->batchnorm_forward_train(x, w, b, y, m->bn_saved + bn_saved_off[i],
                                           m->bn_saved + bn_saved_off[i] + s.c, rm, rv,
                                           MODEL_BN_MOMENTUM, MODEL_BN_EPS, n, s.c, s.h * s.w);
            else
                k->batchnorm_forward_eval(x, w, b, rm, rv, MODEL_BN_EPS, y, n, s.c, s.h * s.w);
            break;
        }
        case FLATTEN: break;
        case LINEAR: k->linear_forward(x, w, b, y, n, l->in, l->out, m->ws); break;
        }
        m->layer_seconds[i][0] += clock_seconds() - t0;
        x = y;
    }
}

struct model_batch *model_batch_next(struct model *m) {
    CHECK(m->queued < 2);
    int s = m->fill;
    m->k->event_wait(m->uploaded[s]); /* the host copy is free once uploaded... */
    m->k->event_wait(m->consumed[s]); /* ...and the device copy once read */
    return &m->host[s];
}

void model_batch_submit(struct model *m, int n) {
    const struct kernels *k = m->k;
    CHECK(n >= 1 && n <= m->max_batch && m->queued < 2);
    int s = m->fill;
    k->upload_async(m->dev_img[s], m->host[s].img, (size_t)n * 3 * 32 * 32, NULL);
    k->upload_async(m->dev_geom[s], m->host[s].geom, (size_t)n * 3 * sizeof(int), NULL);
    k->upload_async(m->dev_labels[s], m->host[s].labels, (size_t)n * sizeof(int), m->uploaded[s]);
    m->queued_n[s] = n;
    m->queued++;
    m->fill ^= 1;
}

/* The oldest submitted batch becomes m->input (normalised, augmented); returns its slot. */
static int take_batch(struct model *m, int *n) {
    const struct kernels *k = m->k;
    CHECK(m->queued > 0);
    int s = m->queued == 2 ? m->fill : m->fill ^ 1;
    m->queued--;
    *n = m->queued_n[s];
    float scale[3], shift[3];
    augment_scale_shift(scale, shift);
    k->compute_wait(m->uploaded[s]);
    k->input_prepare(m->dev_img[s], m->dev_geom[s], m->input, *n, scale, shift);
    return s;
}

/* Ends the use of slot s's device copy (after everything issued so far that reads it). */
static void release_batch(struct model *m, int s) { m->k->download_async(NULL, NULL, 0, m->consumed[s]); }

int model_forward_backward(struct model *m) {
    const struct kernels *k = m->k;
    int n, slot = take_batch(m, &n);
    const int *labels = m->dev_labels[slot];
    forward(m, n, 1);
    m->bn_batches_tracked++;
    float *d = m->grad_a, *other = m->grad_b; /* d: gradient w.r.t. the current layer's output */
    /* (mean loss, correct) go straight behind the gradients, so one reduction carries both. */
    k->softmax_xent(m->act[MODEL_LAYERS - 1], labels, d, m->grads + nparams, n, MODEL_CLASSES);
    release_batch(m, slot);
    size_t ready_end = nparams + 2;
    if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, nparams, ready_end);
    ready_end = nparams;
    for (int i = MODEL_LAYERS - 1; i >= 0; i--) {
        const struct layer *l = &layers[i];
        struct shape s = in_shape[i], o = out_shape[i];
        const float *x = i > 0 ? m->act[i - 1] : m->input;
        float *dx = i > 0 ? other : NULL; /* no gradient for the input images */
        float *w = weight_of[i] >= 0 ? tensor_ptr(m->params, weight_of[i]) : NULL;
        float *dw = weight_of[i] >= 0 ? tensor_ptr(m->grads, weight_of[i]) : NULL;
        float *db = weight_of[i] >= 0 ? tensor_ptr(m->grads, weight_of[i] + 1) : NULL;
        double t0 = clock_seconds();
        switch (l->kind) {
        case RELU:
            if (!relu_backward_fused[i]) k->relu_backward(m->act[i], d, d, (size_t)n * o.c * o.h * o.w);
            break;
        case FLATTEN: break;
        case CONV: {
            const float *mask = i > 0 && relu_backward_fused[i - 1] ? x : NULL;
            k->conv3x3_backward(x, w, d, dx, dw, db, n, s.c, o.c, s.h, s.w, mask, m->ws);
            break;
        }
        case POOL:
            k->maxpool2_backward(x, d, dx, n, s.c, s.h, s.w, relu_backward_fused[i - 1]);
            break;
        case BN:
            k->batchnorm_backward(x, d, w, m->bn_saved + bn_saved_off[i],
                                  m->bn_saved + bn_saved_off[i] + s.c, dx, dw, db, n, s.c, s.h * s.w);
            break;
        case LINEAR: k->linear_backward(x, w, d, dx, dw, db, n, l->in, l->out, m->ws); break;
        }
        m->layer_seconds[i][1] += clock_seconds() - t0;
        if (weight_of[i] >= 0) {
            size_t begin = tensors[weight_of[i]].offset; /* through the padding up to ready_end */
            if (m->grads_ready) m->grads_ready(m->grads_ready_ctx, begin, ready_end);
            ready_end = begin;
        }
        if (l->kind == RELU || l->kind == FLATTEN) continue; /* in place: d stays */
        other = d;
        d = dx;
    }
    CHECK(ready_end == 0);
    return n;
}

int model_predict(struct model *m, int *pred_host, float *logits_host) {
    const struct kernels *k = m->k;
    int n, slot = take_batch(m, &n);
    forward(m, n, 0);
    release_batch(m, slot);
    float *host = m->host_logits;
    k->download(host, m->act[MODEL_LAYERS - 1], (size_t)n * MODEL_CLASSES * sizeof(float));
    for (int i = 0; i < n; i++) {
        const float *z = host + (size_t)i * MODEL_CLASSES;
        int arg = 0;
        for (int j = 1; j < MODEL_CLASSES; j++)
            if (z[j] > z[arg]) arg = j;
        pred_host[i] = arg;
    }
    if (logits_host) memcpy(logits_host, host, (size_t)n * MODEL_CLASSES * sizeof(float));
    return n;
}

void model_sgd_step(struct model *m, float lr, float momentum, float weight_decay, float grad_scale) {
    m->k->sgd_update(m->params, m->grads, m->momentum, nparams, lr, momentum, weight_decay, grad_scale);
}

void model_get_state(const struct model *m, float *params, float *momentum, float *bn_stats) {
    if (params) m->k->download(params, m->params, nparams * sizeof(float));
    if (momentum) m->k->download(momentum, m->momentum, nparams * sizeof(float));
    if (bn_stats) m->k->download(bn_stats, m->bn_stats, nbn * sizeof(float));
}

void model_set_state(struct model *m, const float *params, const float *momentum,
                     const float *bn_stats) {
    if (params) m->k->upload(m->params, params, nparams * sizeof(float));
    if (momentum) m->k->upload(m->momentum, momentum, nparams * sizeof(float));
    if (bn_stats) m->k->upload(m->bn_stats, bn_stats, nbn * sizeof(float));
}
