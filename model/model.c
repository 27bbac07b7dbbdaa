/* The interpreter: model_init turns a net_def into a plan (struct model_layer per layer and a
 * tensor table), forward and backward walk the plan with one switch over the layer kinds. */
#include "model.h"

#include "../common/err.h"
#include "../common/rng.h"
#include "../data/augment.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct layer_kind_props *props_of(const struct model_layer *L) {
    return layer_kind_props(L->def->kind);
}

static void bad_net(const struct net_def *net, int i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static void bad_net(const struct net_def *net, int i, const char *fmt, ...) {
    char why[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    err_die(1, "internal error: network %s, layer %d: %s", net->name, i, why);
}

/* Output shapes, layer by layer, from a [3][32][32] input; fusion decisions. */
static void plan_shapes(struct model *m) {
    const struct net_def *net = m->net;
    int c = 3, h = 32, w = 32;
    for (int i = 0; i < m->nlayers; i++) {
        struct model_layer *L = &m->layers[i];
        const struct layer_def *d = L->def = &net->layers[i];
        L->in_c = c, L->in_h = h, L->in_w = w;
        if ((unsigned)d->kind >= LAYER_KINDS) bad_net(net, i, "unknown layer kind %d", (int)d->kind);
        if (d->flags & ~layer_kind_props(d->kind)->flags)
            bad_net(net, i, "flags 0x%x do not apply to a %s layer", d->flags, props_of(L)->name);
        switch (d->kind) {
        case LAYER_CONV:
            if (d->k < 1 || d->k > 5 || d->pad < 0 || d->pad >= d->k)
                bad_net(net, i, "kernel %d, padding %d", d->k, d->pad);
            c = d->out, h = kernels_conv_out(h, d->k, d->pad), w = kernels_conv_out(w, d->k, d->pad);
            break;
        case LAYER_MAXPOOL:
            if (d->k < 1 || d->k > h || d->k > w) bad_net(net, i, "pool window %d on %dx%d", d->k, h, w);
            h /= d->k, w /= d->k;
            break;
        case LAYER_FLATTEN: c = c * h * w, h = w = 1; break;
        case LAYER_LINEAR:
            if (h != 1 || w != 1)
                bad_net(net, i, "linear layer on a %dx%dx%d input (flatten first)", c, h, w);
            c = d->out;
            break;
        case LAYER_RELU:
        case LAYER_GELU:
        case LAYER_BATCHNORM:
        case LAYER_KINDS: break;
        }
        if (c < 1 || h < 1 || w < 1) bad_net(net, i, "output %dx%dx%d", c, h, w);
        L->out_c = c, L->out_h = h, L->out_w = w;
        enum layer_kind next = i + 1 < m->nlayers ? net->layers[i + 1].kind : LAYER_KINDS;
        L->relu_fused = d->kind == LAYER_CONV && next == LAYER_RELU;
        L->relu_backward_fused = d->kind == LAYER_RELU && (next == LAYER_CONV || next == LAYER_MAXPOOL);
        L->gelu_fused = d->kind == LAYER_BATCHNORM && next == LAYER_GELU;
    }
    if (c != net->classes || h != 1 || w != 1)
        bad_net(net, m->nlayers - 1, "output %dx%dx%d, not %d logits", c, h, w, net->classes);
}

/* The largest activation's values per image (the input's 3 x 32 x 32 included), and which. */
static size_t largest_activation(const struct model *m, int *layer) {
    size_t most = 3 * 32 * 32;
    *layer = -1;
    for (int i = 0; i < m->nlayers; i++) {
        const struct model_layer *L = &m->layers[i];
        size_t out = (size_t)L->out_c * L->out_h * L->out_w;
        if (out > most) most = out, *layer = i;
    }
    return most;
}

int model_batch_check(const struct net_def *net, int batch, struct err *e) {
    struct model m = {.net = net, .nlayers = net->nlayers};
    m.layers = XALLOC((size_t)m.nlayers * sizeof *m.layers);
    plan_shapes(&m);
    int i;
    size_t most = largest_activation(&m, &i);
    int limit = (int)((((size_t)1 << 31) - 1) / most); /* at most 2^31 - 1: an int */
    int rc = 0;
    if (batch > limit) {
        const struct model_layer *L = i < 0 ? NULL : &m.layers[i];
        rc = err_set(
            e, "%d images per batch: %s takes at most %d (its %dx%dx%d %s would hold 2^31 values or more)",
            batch, net->name, limit, L ? L->out_c : 3, L ? L->out_h : 32, L ? L->out_w : 32,
            L ? "activation" : "input");
    }
    free(m.layers);
    return rc;
}

static enum tensor_home home_of(const struct tensor_spec *ts, const struct layer_def *d) {
    return ts->frozen_by & d->flags ? HOME_BUFFERS : ts->home;
}

static void add_tensor(struct model *m, int i, const struct tensor_spec *ts, enum tensor_home home) {
    const struct model_layer *L = &m->layers[i];
    const struct layer_def *d = L->def;
    if (!d->name) bad_net(m->net, i, "a %s layer needs a name", props_of(L)->name);
    struct model_tensor *t = &m->tensors[m->ntensors];
    snprintf(t->name, sizeof t->name, "%s.%s", d->name, ts->what);
    t->layer = i, t->home = home, t->init = ts->init, t->running = ts->running;
    int ch = d->kind == LAYER_BATCHNORM ? L->in_c : L->out_c;
    if (ts->shape == SHAPE_SCALAR) t->ndim = 0;
    else if (ts->shape == SHAPE_CHANNELS) t->ndim = 1, t->shape[0] = ch;
    else if (d->kind == LAYER_CONV)
        t->ndim = 4, memcpy(t->shape, (int[]){L->out_c, L->in_c, d->k, d->k}, sizeof(int[4]));
    else CHECK(d->kind == LAYER_LINEAR), t->ndim = 2, t->shape[0] = L->out_c, t->shape[1] = L->in_c;
    t->numel = 1;
    for (int k = 0; k < t->ndim; k++) t->numel *= (size_t)t->shape[k];
    size_t *counter = home == HOME_PARAMS ? &m->nparams : &m->nbuffers;
    t->offset = home == HOME_COUNTER ? 0 : *counter;
    if (home != HOME_COUNTER) *counter += (t->numel + 15) / 16 * 16; /* 64-byte aligned tensors */
    if (strcmp(ts->what, "weight") == 0) m->layers[i].weight = m->ntensors;
    if (strcmp(ts->what, "bias") == 0) m->layers[i].bias = m->ntensors;
    if (strcmp(ts->what, "running_mean") == 0) m->layers[i].running = m->ntensors;
    m->ntensors++;
}

/* The tensor table: trainable tensors in layer order, then buffers, then the counter's
 * entries, each in state_dict order within its layer; per layer the start of its gradients. */
static void plan_tensors(struct model *m) {
    m->tensors = XALLOC((size_t)m->nlayers * LAYER_MAX_TENSORS * sizeof *m->tensors);
    for (int i = 0; i < m->nlayers; i++) m->layers[i].weight = m->layers[i].bias = m->layers[i].running = -1;
    for (enum tensor_home home = HOME_PARAMS; home <= HOME_COUNTER; home++)
        for (int i = 0; i < m->nlayers; i++) {
            struct model_layer *L = &m->layers[i];
            const struct layer_kind_props *p = props_of(L);
            size_t begin = m->nparams;
            int added = 0;
            for (int j = 0; j < p->ntensors; j++) {
                const struct tensor_spec *ts = &p->tensors[j];
                if ((!ts->only_with || (ts->only_with & L->def->flags)) && home_of(ts, L->def) == home)
                    add_tensor(m, i, ts, home), added++;
            }
            if (home == HOME_PARAMS) L->grads_begin = added ? begin : SIZE_MAX;
        }
}

static float *tensor_data(const struct model *m, int t) {
    if (t < 0) return NULL;
    const struct model_tensor *mt = &m->tensors[t];
    CHECK(mt->home != HOME_COUNTER);
    return (mt->home == HOME_PARAMS ? m->params : m->buffers) + mt->offset;
}

/* The gradient of tensor t, or NULL when it does not train (or no longer does). */
static float *tensor_grad(const struct model *m, int t) {
    return t >= 0 && m->tensors[t].home == HOME_PARAMS && !m->tensors[t].stopped
               ? m->grads + m->tensors[t].offset
               : NULL;
}

static struct conv_shape conv_shape_of(const struct model_layer *L, int n) {
    return (struct conv_shape){n, L->in_c, L->out_c, L->in_h, L->in_w, L->def->k, L->def->pad};
}

/* The lowest layer with a tensor that trains now (m->nlayers if none): the backward stops
 * there, since no gradient below it is wanted. airbench94's first convolution is frozen and its
 * bias stops training after a few epochs (model_stop_training); from then on the second
 * convolution's input gradient, the GELU's backward and the first layer's are not computed. */
static int lowest_trained(const struct model *m) {
    for (int i = 0; i < m->nlayers; i++)
        if (tensor_grad(m, m->layers[i].weight) || tensor_grad(m, m->layers[i].bias)) return i;
    return m->nlayers;
}

/* The passes layer i's convolution runs (enum conv_pass): the forward; the input gradient
 * above the lowest layer that trains (model_forward_backward gives the others no dx; stopping
 * a tensor later only drops passes); the filter gradient when the filter trains. Naming only
 * these, conv_workspace never plans a pass that never runs. */
static unsigned conv_passes(const struct model *m, int i) {
    return CONV_FORWARD | (i > lowest_trained(m) ? CONV_BACKWARD_DATA : 0u) |
           (tensor_grad(m, m->layers[i].weight) ? CONV_BACKWARD_FILTER : 0u);
}

static float linear_scale(const struct layer_def *d) { return d->scale != 0.0f ? d->scale : 1.0f; }

/* torch.nn.init.dirac_(w[:in]) on a conv filter w [out][in][k][k]: output channel o < in
 * becomes the identity on input channel o (1 at the kernel's centre k/2, k/2; 0 elsewhere). */
static void dirac_init(float *w, const struct model_layer *L) {
    int in = L->in_c, k = L->def->k, identities = in < L->out_c ? in : L->out_c;
    size_t per_out = (size_t)in * k * k;
    memset(w, 0, (size_t)identities * per_out * sizeof(float));
    for (int o = 0; o < identities; o++) w[o * per_out + ((size_t)o * k + k / 2) * k + k / 2] = 1.0f;
}

/* PyTorch's defaults, drawn on the host, one stream per tensor (its table index); dirac_ and
 * zeroed biases after the draw, so a layer's flag leaves every stream as it was. */
static void init_tensors(struct model *m, uint64_t seed) {
    float *host[2] = {XALLOC(m->nparams * sizeof(float)), XALLOC(m->nbuffers * sizeof(float))};
    for (int t = 0; t < m->ntensors; t++) {
        const struct model_tensor *mt = &m->tensors[t];
        if (mt->home == HOME_COUNTER) continue;
        float *dst = host[mt->home == HOME_BUFFERS] + mt->offset;
        const struct model_layer *L = &m->layers[mt->layer];
        struct rng r = rng_make(seed, RNG_INIT, (uint64_t)t, 0);
        /* kaiming_uniform_(a=sqrt(5)) gives the same bound 1/sqrt(fan_in) as the biases' rule */
        int k = L->def->kind == LAYER_CONV ? L->def->k : 1;
        double bound = 1.0 / sqrt((double)L->in_c * k * k);
        for (size_t i = 0; i < mt->numel; i++)
            dst[i] = mt->init == INIT_ONES    ? 1.0f
                     : mt->init == INIT_ZEROS ? 0.0f
                                              : (float)((2.0 * rng_uniform(&r) - 1.0) * bound);
        if (L->weight == t && (L->def->flags & LAYER_DIRAC_INIT)) dirac_init(dst, L);
        if (L->bias == t && (L->def->flags & LAYER_ZERO_BIAS)) memset(dst, 0, mt->numel * sizeof(float));
    }
    m->k->upload(m->params, host[0], m->nparams * sizeof(float));
    m->k->upload(m->buffers, host[1], m->nbuffers * sizeof(float));
    free(host[0]), free(host[1]);
    m->batches_tracked = 0;
}

static void graphs_clear(struct model *m);

/* m->filters: the convolutions' filters, as the backend's set (kernels.h conv_filters_create;
 * past CONV_FILTERS_MAX, the others are converted per call). */
static void filters_create(struct model *m) {
    struct conv_shape s[CONV_FILTERS_MAX];
    const float *w[CONV_FILTERS_MAX];
    int n = 0;
    for (int i = 0; i < m->nlayers && n < CONV_FILTERS_MAX; i++) {
        const struct model_layer *L = &m->layers[i];
        if (L->def->kind != LAYER_CONV) continue;
        s[n] = conv_shape_of(L, m->max_batch);
        w[n++] = tensor_data(m, L->weight);
    }
    m->filters = m->k->conv_filters_create(n, s, w);
}

/* Whether layer i is a GELU that the batch norm before it applies (it does nothing itself). */
static int fused_away(const struct model *m, int i) { return i > 0 && m->layers[i - 1].gelu_fused; }

/* The activation layer i's convolution applies: the ReLU after it (relu_fused), or the GELU
 * after it where nothing reads that GELU's input: in eval mode, or in training where the GELU
 * lies below the lowest layer that trains, so its backward never runs (airbench94's whitening
 * layer once its bias stops). That GELU layer then does nothing; the convolution writes its
 * output. */
static enum conv_act conv_act_of(const struct model *m, int i, int train) {
    const struct model_layer *L = &m->layers[i];
    if (L->relu_fused) return CONV_ACT_RELU;
    int gelu_next =
        L->def->kind == LAYER_CONV && i + 1 < m->nlayers && m->layers[i + 1].def->kind == LAYER_GELU;
    return gelu_next && (!train || i + 1 < lowest_trained(m)) ? CONV_ACT_GELU : CONV_ACT_NONE;
}

/* Whether layer i is a GELU that the convolution before it applies, in this mode. */
static int gelu_in_conv(const struct model *m, int i, int train) {
    return i > 0 && conv_act_of(m, i - 1, train) == CONV_ACT_GELU;
}

/* The max pool that convolution i runs with itself (conv_pool_forward): the layer after it,
 * or after its fused ReLU; -1 for none (and with keep_pool_inputs). */
static int pool_after(const struct model *m, int i) {
    const struct model_layer *L = &m->layers[i];
    if (m->keep_pool_inputs || L->def->kind != LAYER_CONV) return -1;
    int j = L->relu_fused ? i + 2 : i + 1;
    return j < m->nlayers && m->layers[j].def->kind == LAYER_MAXPOOL ? j : -1;
}

/* Whether max pool j runs in the convolution before it. */
static int pooled_in_conv(const struct model *m, int j) {
    return (j >= 1 && pool_after(m, j - 1) == j) || (j >= 2 && pool_after(m, j - 2) == j);
}

/* Whether layer i's output is its input's buffer: layers in place, and a fused-away GELU. */
static int shares_output(const struct model *m, int i) {
    return props_of(&m->layers[i])->in_place || fused_away(m, i);
}

/* Activations, batch-norm saves, the backward ping-pong and the kernels' scratch. */
static void alloc_activations(struct model *m) {
    const struct kernels *k = m->k;
    size_t ws = 0, max_act = 0, saved = 0, B = (size_t)m->max_batch;
    size_t e = k->act_size;
    void *prev = m->input;
    for (int i = 0; i < m->nlayers; i++) {
        struct model_layer *L = &m->layers[i];
        size_t need = 0, out = (size_t)L->out_c * L->out_h * L->out_w;
        if (L->def->kind == LAYER_CONV) {
            struct conv_shape s = conv_shape_of(L, m->max_batch);
            need = k->conv_workspace(&s, conv_passes(m, i));
        }
        if (L->def->kind == LAYER_LINEAR) need = k->linear_workspace(m->max_batch, L->in_c, L->out_c);
        if (L->def->kind == LAYER_BATCHNORM) L->saved = saved, saved += 2 * (size_t)L->in_c;
        ws = need > ws ? need : ws;
        max_act = out > max_act ? out : max_act;
        L->act = shares_output(m, i) ? prev : k->alloc(B * out * e);
        if (L->def->kind == LAYER_MAXPOOL) L->winners = k->alloc(B * out);
        prev = L->act;
    }
    m->bn_saved = k->alloc((saved ? saved : 1) * sizeof(float));
    m->grad_a = k->alloc(B * max_act * e);
    m->grad_b = k->alloc(B * max_act * e);
    m->ws = k->alloc(ws);
    m->ws_bytes = ws;
}

void model_init(struct model *m, const struct net_def *net, const struct kernels *k, int max_batch,
                uint64_t seed) {
    memset(m, 0, sizeof *m);
    m->net = net;
    m->k = k;
    m->max_batch = max_batch;
    m->nlayers = net->nlayers;
    m->layers = XALLOC((size_t)m->nlayers * sizeof *m->layers);
    plan_shapes(m);
    plan_tensors(m);
    m->params = k->alloc(m->nparams * sizeof(float));
    m->grads = k->alloc((m->nparams + MODEL_STATS) * sizeof(float));
    m->momentum = k->alloc(m->nparams * sizeof(float));
    m->buffers = k->alloc((m->nbuffers ? m->nbuffers : 1) * sizeof(float));
    m->scalars = k->alloc((SGD_HYPER_FLOATS + 2) * sizeof(float));
    m->input = k->alloc((size_t)max_batch * 3 * 32 * 32 * k->act_size);
    alloc_activations(m);
    m->host_logits = XALLOC((size_t)max_batch * net->classes * sizeof(float));
    if (k->act_size != sizeof(float)) m->host_raw = XALLOC((size_t)max_batch * net->classes * k->act_size);
    init_tensors(m, seed);
    filters_create(m);
    m->k->conv_filters_ready(m->filters);
}

void model_plan_batch(struct model *m, int n) {
    CHECK(n >= 1 && n <= m->max_batch);
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].def->kind == LAYER_CONV) {
            struct conv_shape s = conv_shape_of(&m->layers[i], n);
            m->k->conv_workspace(&s, CONV_FORWARD);
        }
}

void model_free(struct model *m) {
    const struct kernels *k = m->k;
    model_timing(m, 0);
    graphs_clear(m);
    k->conv_filters_destroy(m->filters); /* before the params it refers to */
    for (int i = 0; i < m->nlayers; i++) {
        if (!shares_output(m, i)) k->free(m->layers[i].act);
        if (m->layers[i].winners) k->free(m->layers[i].winners);
    }
    void *bufs[] = {m->params,   m->grads,  m->momentum, m->buffers, m->input,
                    m->bn_saved, m->grad_a, m->grad_b,   m->ws,      m->scalars};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) k->free(bufs[i]);
    if (m->ema_params) k->free(m->ema_params), k->free(m->ema_buffers);
    if (m->sgd_groups) k->free(m->sgd_groups);
    free(m->host_logits), free(m->host_raw), free(m->layers), free(m->tensors);
    memset(m, 0, sizeof *m);
}

void model_timing(struct model *m, int on) {
    for (int pass = 0; pass < 2; pass++) {
        if (on && !m->marks[pass]) {
            m->marks[pass] = XALLOC((size_t)(m->nlayers + 1) * sizeof *m->marks[pass]);
            for (int j = 0; j <= m->nlayers; j++) m->marks[pass][j] = m->k->timer_create();
        } else if (!on && m->marks[pass]) {
            for (int j = 0; j <= m->nlayers; j++) m->k->event_destroy(m->marks[pass][j]);
            free(m->marks[pass]);
            m->marks[pass] = NULL;
        }
    }
}

void model_timing_collect(struct model *m) {
    CHECK(m->marks[0] && m->marks[1]);
    const struct kernels *k = m->k;
    for (int i = 0; i < m->nlayers; i++) {
        m->layers[i].seconds[0] += k->timer_seconds(m->marks[0][i], m->marks[0][i + 1]);
        if (i >= m->marks_lowest)
            m->layers[i].seconds[1] += k->timer_seconds(m->marks[1][i + 1], m->marks[1][i]);
    }
}

int model_conv_describe(const struct model *m, int i, enum conv_pass pass, char *buf, size_t size) {
    const struct model_layer *L = &m->layers[i];
    if (L->def->kind != LAYER_CONV || !(conv_passes(m, i) & pass)) return 0;
    struct conv_shape s = conv_shape_of(L, m->max_batch);
    m->k->conv_describe(&s, pass, m->ws_bytes, buf, size);
    return 1;
}

void model_layer_describe(const struct model *m, int i, char *buf, size_t size) {
    const struct model_layer *L = &m->layers[i];
    const struct layer_def *d = L->def;
    if (d->kind == LAYER_CONV && d->k == 3 && d->pad == 1)
        snprintf(buf, size, "conv %d->%d %dx%d", L->in_c, L->out_c, L->in_h, L->in_w);
    else if (d->kind == LAYER_CONV)
        snprintf(buf, size, "conv%d p%d %d->%d %dx%d", d->k, d->pad, L->in_c, L->out_c, L->in_h, L->in_w);
    else if (d->kind == LAYER_LINEAR) snprintf(buf, size, "linear %d->%d", L->in_c, L->out_c);
    else
        snprintf(buf, size, "%s %dx%dx%d%s", props_of(L)->name, L->in_c, L->in_h, L->in_w,
                 fused_away(m, i)                                ? " (fused)"
                 : gelu_in_conv(m, i, 1) || pooled_in_conv(m, i) ? " (in the conv)"
                                                                 : "");
}

double model_layer_flops(const struct model *m, int i, int n, int pass) {
    const struct model_layer *L = &m->layers[i];
    if (!props_of(L)->weighted) return 0.0;
    int k = L->def->kind == LAYER_CONV ? L->def->k : 1;
    double f = 2.0 * n * L->out_c * L->out_h * L->out_w * L->in_c * k * k;
    /* Backward: the weight gradient when the weight trains, the input gradient above the
     * lowest layer that trains (model_forward_backward). */
    return pass == 0 ? f : f * ((tensor_grad(m, L->weight) != NULL) + (i > lowest_trained(m)));
}

/* Layer L's forward on n images from x into L->act; train selects batch statistics (and
 * updates running statistics). */
static void forward_layer(struct model *m, int i, const void *x, int n, int train) {
    const struct kernels *k = m->k;
    struct model_layer *L = &m->layers[i];
    const struct layer_def *d = L->def;
    void *y = L->act;
    float *w = tensor_data(m, L->weight), *b = tensor_data(m, L->bias);
    size_t count = (size_t)n * L->out_c * L->out_h * L->out_w;
    switch (d->kind) {
    case LAYER_CONV: {
        struct conv_shape s = conv_shape_of(L, n);
        enum conv_act act = conv_act_of(m, i, train);
        int j = pool_after(m, i);
        if (j >= 0) {
            struct model_layer *P = &m->layers[j];
            k->conv_pool_forward(&s, x, w, b, act, P->def->k, y, P->act, train ? P->winners : NULL, m->ws,
                                 m->ws_bytes);
        } else
            k->conv_forward(&s, x, w, b, act == CONV_ACT_GELU ? m->layers[i + 1].act : y, act, m->ws,
                            m->ws_bytes);
        break;
    }
    case LAYER_RELU:
        if (!(i > 0 && m->layers[i - 1].relu_fused)) k->relu_forward(x, y, count);
        break;
    case LAYER_GELU:
        if (!fused_away(m, i) && !gelu_in_conv(m, i, train)) k->gelu_forward(x, y, count);
        break;
    case LAYER_MAXPOOL:
        if (!pooled_in_conv(m, i))
            k->maxpool_forward(x, y, train ? L->winners : NULL, n, L->in_c, L->in_h, L->in_w, d->k);
        break;
    case LAYER_BATCHNORM: {
        float *rm = tensor_data(m, L->running), *rv = tensor_data(m, L->running + 1);
        float *mean = m->bn_saved + L->saved, *invstd = mean + L->in_c;
        int HW = L->in_h * L->in_w;
        if (train)
            k->batchnorm_forward_train(x, w, b, y, mean, invstd, rm, rv, d->momentum, d->eps, n, L->in_c, HW,
                                       L->gelu_fused);
        else k->batchnorm_forward_eval(x, w, b, rm, rv, d->eps, y, n, L->in_c, HW, L->gelu_fused);
        break;
    }
    case LAYER_FLATTEN: k->flatten_forward(y, n, L->in_c, L->in_h * L->in_w); break;
    case LAYER_KINDS: break;
    case LAYER_LINEAR:
        k->linear_forward(x, w, b, y, n, L->in_c, L->out_c, linear_scale(d), m->ws, m->ws_bytes);
        break;
    }
}

/* Timer mark j of pass (0 forward, 1 backward), while timing. */
static void mark(struct model *m, int pass, int j) {
    if (m->marks[pass]) m->k->timer_mark(m->marks[pass][j]);
}

static void forward(struct model *m, int n, int train) {
    const void *x = m->input;
    mark(m, 0, 0);
    for (int i = 0; i < m->nlayers; i++) {
        forward_layer(m, i, x, n, train);
        mark(m, 0, i + 1);
        x = m->layers[i].act;
    }
}

/* Layer i's backward on n images: from d (the gradient w.r.t. its output) its parameter
 * gradients and, unless dx is NULL, the gradient w.r.t. its input in dx (in d itself for
 * kinds whose backward runs in place). */
static void backward_layer(struct model *m, int i, void *dy, void *dx, int n) {
    const struct kernels *k = m->k;
    struct model_layer *L = &m->layers[i];
    const struct layer_def *def = L->def;
    const void *x = i > 0 ? m->layers[i - 1].act : m->input;
    int after_relu = i > 0 && m->layers[i - 1].relu_backward_fused; /* x is a ReLU's output */
    float *w = tensor_data(m, L->weight), *dw = tensor_grad(m, L->weight), *db = tensor_grad(m, L->bias);
    size_t count = (size_t)n * L->out_c * L->out_h * L->out_w;
    switch (def->kind) {
    case LAYER_RELU:
        if (!L->relu_backward_fused) k->relu_backward(L->act, dy, dy, count);
        break;
    case LAYER_GELU:
        CHECK(dx || fused_away(m, i)); /* a GELU has no parameters: a layer below it trains */
        if (!fused_away(m, i)) k->gelu_backward(x, dy, dx, count);
        break;
    case LAYER_CONV: {
        struct conv_shape s = conv_shape_of(L, n);
        int j = pool_after(m, i); /* dy is that pool's output gradient; L->act is free scratch */
        if (j >= 0)
            k->conv_pool_backward(&s, x, w, dy, m->layers[j].winners, m->layers[j].def->k,
                                  m->layers[j - 1].relu_backward_fused, L->act, dx, dw, db,
                                  after_relu ? x : NULL, m->ws, m->ws_bytes);
        else k->conv_backward(&s, x, w, dy, dx, dw, db, after_relu ? x : NULL, m->ws, m->ws_bytes);
        break;
    }
    case LAYER_MAXPOOL:
        if (!pooled_in_conv(m, i))
            k->maxpool_backward(L->winners, dy, dx, n, L->in_c, L->in_h, L->in_w, def->k, after_relu);
        break;
    case LAYER_BATCHNORM: {
        const float *mean = m->bn_saved + L->saved, *invstd = mean + L->in_c;
        k->batchnorm_backward(x, dy, w, tensor_data(m, L->bias), mean, invstd, dx, dw, db, n, L->in_c,
                              L->in_h * L->in_w, L->gelu_fused);
        break;
    }
    case LAYER_LINEAR:
        k->linear_backward(x, w, dy, dx, dw, db, n, L->in_c, L->out_c, linear_scale(def), m->ws, m->ws_bytes);
        break;
    case LAYER_FLATTEN: /* its forward reordered the layer below's output in place (on an NHWC
                         * backend; a forward alone leaves it so): undone for a backward that
                         * reads it (a ReLU's) */
        k->flatten_backward(dy, n, L->in_c, L->in_h * L->in_w);
        k->flatten_backward(L->act, n, L->in_c, L->in_h * L->in_w);
        break;
    case LAYER_KINDS: break;
    }
}

/* The batch becomes m->input (normalised, augmented); returns its size. */
static int prepare_input(struct model *m, const struct model_input *in) {
    CHECK(in->n >= 1 && in->n <= m->max_batch);
    float scale[3], shift[3];
    augment_scale_shift(scale, shift);
    m->k->input_prepare(in->img, in->geom, m->input, in->n, scale, shift, in->reflect);
    return in->n;
}

/* While a step is recorded: ends the stretch captured so far as the next graph, launches it,
 * makes the grads_ready calls not made yet up to call `last` (-1: none), and with `more`
 * non-zero begins the next stretch's capture. */
static void segment_end(struct model *m, struct model_graph *g, int last, int more) {
    struct kernels_graph *seg = m->k->capture_end();
    g->seg[g->nsegs] = seg;
    g->seg_end[g->nsegs++] = last + 1;
    m->k->graph_launch(seg);
    for (; m->calls_done <= last; m->calls_done++)
        m->grads_ready(m->grads_ready_ctx, g->call[m->calls_done][0], g->call[m->calls_done][1]);
    if (more) CHECK(m->k->capture_begin() == 0);
}

/* The caller's grads_ready, if any: called at once op by op (on a step's first sight, its range
 * and answer noted); while the step is recorded (struct model_graph), where the first sight's
 * call answered 1 the stretch so far becomes a graph and runs, then the calls since the last
 * one; the others wait for that. */
static void grads_ready(struct model *m, size_t begin, size_t end) {
    if (!m->grads_ready) return;
    struct model_graph *g = m->recording;
    if (!g) {
        int cut = m->grads_ready(m->grads_ready_ctx, begin, end);
        if ((g = m->seeing)) {
            CHECK(g->ncalls <= m->nlayers);
            g->call[g->ncalls][0] = begin, g->call[g->ncalls][1] = end;
            g->cut[g->ncalls++] = cut != 0;
        }
        return;
    }
    int at = m->calls_seen++;
    CHECK(at < g->ncalls && g->call[at][0] == begin && g->call[at][1] == end); /* as on the first sight */
    if (g->cut[at]) segment_end(m, g, at, 1);
}

/* A training step's ops: the input, forward, loss, backward. */
static void train_ops(struct model *m, const struct model_input *in) {
    int n = prepare_input(m, in);
    forward(m, n, 1);
    void *d = m->grad_a, *other = m->grad_b; /* d: gradient w.r.t. the current layer's output */
    size_t P = m->nparams, ready_end = P;
    /* (mean loss, correct) go straight behind the gradients, so one reduction carries both. */
    m->k->softmax_xent(m->layers[m->nlayers - 1].act, in->labels, d, m->grads + P, n, m->net->classes,
                       m->label_smoothing, m->loss_reduction);
    if (in->stats) m->k->download_queued(in->stats, m->grads + P, 2 * sizeof(float));
    grads_ready(m, P, P + MODEL_STATS);
    int lowest = lowest_trained(m);
    mark(m, 1, m->nlayers);
    m->marks_lowest = lowest;
    for (int i = m->nlayers - 1; i >= 0; i--) {
        struct model_layer *L = &m->layers[i];
        void *dx = i > lowest ? other : NULL; /* none for the images, nor where nothing below trains */
        if (i >= lowest) {
            backward_layer(m, i, d, dx, n);
            mark(m, 1, i);
        }
        if (L->grads_begin != SIZE_MAX) { /* through the alignment padding up to ready_end */
            grads_ready(m, L->grads_begin, ready_end);
            ready_end = L->grads_begin;
        }
        /* d now holds the input gradient, or (a pool in its convolution, a GELU in its batch
         * norm) still its own */
        if (props_of(L)->backward_in_place || (L->def->kind == LAYER_MAXPOOL && pooled_in_conv(m, i)) ||
            fused_away(m, i))
            continue;
        other = d;
        d = dx;
    }
    CHECK(ready_end == 0);
}

static void graphs_clear(struct model *m) {
    for (int i = 0; i < m->ngraphs; i++) {
        struct model_graph *g = &m->graph[i];
        for (int j = 0; j < g->nsegs; j++) m->k->graph_destroy(g->seg[j]);
        free(g->call), free(g->cut), free(g->seg), free(g->seg_end);
    }
    m->ngraphs = 0;
}

/* The update's ops, reading m->scalars (set before by update_prepare). */
static void update_ops(struct model *m, const struct model_update_ops *u) {
    const struct kernels *k = m->k;
    if (u->sgd)
        k->sgd_update(m->params, m->grads, m->momentum, u->groups ? m->sgd_groups : NULL, m->nparams,
                      (const struct sgd_hyper *)m->scalars, u->nesterov);
    for (int i = 0; i < u->lookaheads; i++) {
        const float *w = m->scalars + SGD_HYPER_FLOATS + i;
        k->lookahead_update(m->params, m->ema_params, m->nparams, w);
        k->lookahead_update(m->buffers, m->ema_buffers, m->nbuffers, w);
    }
    if (u->sgd || u->lookaheads) k->conv_filters_ready(m->filters);
}

/* m->sgd_groups from the tensor table (struct model), through the host. */
static void make_sgd_groups(struct model *m) {
    unsigned char *host = XALLOC(m->nparams ? m->nparams : 1);
    memset(host, SGD_SKIP, m->nparams);
    for (int t = 0; t < m->ntensors; t++) {
        const struct model_tensor *mt = &m->tensors[t];
        if (mt->home != HOME_PARAMS || mt->stopped) continue;
        memset(host + mt->offset, m->layers[mt->layer].def->kind == LAYER_BATCHNORM, mt->numel);
    }
    if (!m->sgd_groups) m->sgd_groups = m->k->alloc(m->nparams ? m->nparams : 1);
    m->k->upload(m->sgd_groups, host, m->nparams);
    free(host);
    m->sgd_groups_stale = 0;
}

/* u's ops (none for NULL), and its numbers into m->scalars on the compute queue: before the
 * ops, outside any recording. One group unless the batch-norm tensors have their own lr or a
 * tensor has stopped; each element computes as with a call per tensor. */
static struct model_update_ops update_prepare(struct model *m, const struct model_update *u) {
    struct model_update_ops ops = {0, 0, 0, 0};
    if (!u) return ops;
    const struct sgd_settings *s = &u->sgd;
    int whole = s->norm_lr_scale == 1.0f;
    for (int t = 0; whole && t < m->ntensors; t++) whole = !m->tensors[t].stopped;
    if (!whole && (!m->sgd_groups || m->sgd_groups_stale)) make_sgd_groups(m);
    CHECK(u->lookaheads >= 0 && u->lookaheads <= 2 && (u->lookaheads == 0 || m->ema_params));
    float f = s->norm_lr_scale, v[SGD_HYPER_FLOATS + 2];
    struct sgd_hyper h = {
        {s->lr, s->lr * f}, {s->weight_decay, s->weight_decay / f}, s->momentum, s->grad_scale};
    memcpy(v, &h, sizeof h);
    v[SGD_HYPER_FLOATS] = u->lookahead[0], v[SGD_HYPER_FLOATS + 1] = u->lookahead[1];
    m->k->scalars_set(m->scalars, v, SGD_HYPER_FLOATS + 2);
    return (struct model_update_ops){1, !whole, s->nesterov != 0, u->lookaheads};
}

static int graph_matches(const struct model_graph *g, const struct model *m, const struct model_input *in,
                         const struct model_update_ops *u) {
    return g->n == in->n && g->reflect == in->reflect && g->img == in->img && g->geom == in->geom &&
           g->labels == in->labels && g->stats == in->stats && g->label_smoothing == m->label_smoothing &&
           g->loss_reduction == m->loss_reduction && !memcmp(&g->update, u, sizeof *u) &&
           g->grads_ready == (m->grads_ready != NULL);
}

/* The graph entry of this step (struct model_graph), made on its first sight; NULL where steps
 * run op by op (graphs off, timing). */
static struct model_graph *graph_find(struct model *m, const struct model_input *in,
                                      const struct model_update_ops *u) {
    if (!m->graphs || m->marks[0]) return NULL;
    for (int i = 0; i < m->ngraphs; i++)
        if (graph_matches(&m->graph[i], m, in, u)) return &m->graph[i];
    if (m->ngraphs == MODEL_GRAPHS) graphs_clear(m);
    int calls = m->nlayers + 1; /* the loss's stats, then at most one per layer */
    struct model_graph *g = &m->graph[m->ngraphs++];
    *g = (struct model_graph){.n = in->n,
                              .reflect = in->reflect,
                              .img = in->img,
                              .geom = in->geom,
                              .labels = in->labels,
                              .stats = in->stats,
                              .label_smoothing = m->label_smoothing,
                              .loss_reduction = m->loss_reduction,
                              .update = *u,
                              .grads_ready = m->grads_ready != NULL,
                              .ncalls = -1, /* not seen yet */
                              .call = XALLOC((size_t)calls * sizeof *g->call),
                              .cut = XALLOC((size_t)calls),
                              .seg = XALLOC((size_t)(calls + 1) * sizeof *g->seg),
                              .seg_end = XALLOC((size_t)(calls + 1) * sizeof *g->seg_end)};
    return g;
}

/* The second sight of g's step: recorded as it runs (struct model_graph). 0 where the backend
 * records nothing (graphs stay off from then on). */
static int graph_record(struct model *m, struct model_graph *g, const struct model_input *in,
                        const struct model_update_ops *u) {
    if (m->k->capture_begin() != 0) {
        m->graphs = 0;
        return 0;
    }
    m->recording = g;
    m->calls_seen = m->calls_done = 0;
    train_ops(m, in);
    update_ops(m, u);
    CHECK(m->calls_seen == g->ncalls);
    segment_end(m, g, g->ncalls - 1, 0);
    m->recording = NULL;
    return 1;
}

static void graph_run(struct model *m, const struct model_graph *g) {
    for (int i = 0, call = 0; i < g->nsegs; i++) {
        m->k->graph_launch(g->seg[i]);
        for (; call < g->seg_end[i]; call++)
            m->grads_ready(m->grads_ready_ctx, g->call[call][0], g->call[call][1]);
    }
}

/* A step: op by op (noting its grads_ready calls on the first sight), recorded on the second
 * sight, run from its graphs after that (struct model). */
static int train_step(struct model *m, const struct model_input *in, const struct model_update *u) {
    CHECK(in->n >= 1 && in->n <= m->max_batch);
    struct model_update_ops ops = update_prepare(m, u);
    struct model_graph *g = graph_find(m, in, &ops);
    if (g && g->nsegs) {
        graph_run(m, g);
        m->replays++;
    } else if (!g || g->ncalls < 0 || !graph_record(m, g, in, &ops)) {
        if (g) g->ncalls = 0, m->seeing = g;
        train_ops(m, in);
        update_ops(m, &ops);
        m->seeing = NULL;
    }
    m->batches_tracked++;
    return in->n;
}

int model_forward_backward(struct model *m, const struct model_input *in) { return train_step(m, in, NULL); }

int model_train_step(struct model *m, const struct model_input *in, const struct model_update *u) {
    CHECK(u && !m->grads_ready);
    return train_step(m, in, u);
}

const void *model_logits(struct model *m, const struct model_input *in) {
    forward(m, prepare_input(m, in), 0);
    return m->layers[m->nlayers - 1].act;
}

int model_predict(struct model *m, const struct model_input *in, int *pred_host, float *logits_host) {
    int n = in->n, classes = m->net->classes;
    const void *z = model_logits(m, in);
    float *host = m->host_logits;
    size_t count = (size_t)n * classes, e = m->k->act_size;
    void *raw = e == sizeof(float) ? (void *)host : m->host_raw;
    m->k->download(raw, z, count * e);
    if (raw != host) kernels_act_to_float(e, raw, host, count);
    for (int i = 0; i < n; i++) {
        const float *z = host + (size_t)i * classes;
        int arg = 0;
        for (int j = 1; j < classes; j++)
            if (z[j] > z[arg]) arg = j;
        pred_host[i] = arg;
    }
    if (logits_host) memcpy(logits_host, host, (size_t)n * classes * sizeof(float));
    return n;
}

void model_sgd_step(struct model *m, float lr, float momentum, float weight_decay, float grad_scale) {
    model_optimizer_step(m, &(struct sgd_settings){lr, momentum, weight_decay, grad_scale, 1.0f, 0});
}

void model_optimizer_step(struct model *m, const struct sgd_settings *s) {
    model_update(m, &(struct model_update){.sgd = *s});
}

void model_update(struct model *m, const struct model_update *u) {
    struct model_update_ops ops = update_prepare(m, u);
    update_ops(m, &ops);
}

void model_stop_training(struct model *m, int t) {
    CHECK(t >= 0 && t < m->ntensors && m->tensors[t].home == HOME_PARAMS);
    /* Its gradient slice stays in the allreduce's buckets but is no longer written: zeroed
     * once, it sums to 0 (left as it was, every step would sum it again, doubling it on two
     * ranks until it reached inf). */
    size_t n = m->tensors[t].numel;
    float *zeros = XALLOC(n * sizeof(float)); /* zero-filled */
    m->k->upload(m->grads + m->tensors[t].offset, zeros, n * sizeof(float));
    free(zeros);
    m->tensors[t].stopped = 1;
    m->sgd_groups_stale = 1;
    graphs_clear(m); /* the backward changes: the graphs recorded before are stale */
}

void model_lookahead_init(struct model *m) {
    const struct kernels *k = m->k;
    if (!m->ema_params) {
        m->ema_params = k->alloc(m->nparams * sizeof(float));
        m->ema_buffers = k->alloc((m->nbuffers ? m->nbuffers : 1) * sizeof(float));
    }
    float *p = XALLOC(m->nparams * sizeof(float)),
          *b = XALLOC((m->nbuffers ? m->nbuffers : 1) * sizeof(float));
    model_get_state(m, p, NULL, b); /* through the host: once per run */
    model_set_lookahead(m, p, b);
    free(p), free(b);
}

void model_lookahead_update(struct model *m, float weight) {
    CHECK(m->ema_params);
    m->k->scalars_set(m->scalars + SGD_HYPER_FLOATS, &weight, 1);
    update_ops(m, &(struct model_update_ops){0, 0, 0, 1});
}

void model_get_lookahead(const struct model *m, float *params, float *buffers) {
    CHECK(m->ema_params);
    m->k->download(params, m->ema_params, m->nparams * sizeof(float));
    m->k->download(buffers, m->ema_buffers, m->nbuffers * sizeof(float));
}

void model_set_lookahead(struct model *m, const float *params, const float *buffers) {
    CHECK(m->ema_params);
    m->k->upload(m->ema_params, params, m->nparams * sizeof(float));
    m->k->upload(m->ema_buffers, buffers, m->nbuffers * sizeof(float));
}

void model_get_state(const struct model *m, float *params, float *momentum, float *buffers) {
    if (params) m->k->download(params, m->params, m->nparams * sizeof(float));
    if (momentum) m->k->download(momentum, m->momentum, m->nparams * sizeof(float));
    if (buffers) m->k->download(buffers, m->buffers, m->nbuffers * sizeof(float));
}

void model_set_state(struct model *m, const float *params, const float *momentum, const float *buffers) {
    if (params) m->k->upload(m->params, params, m->nparams * sizeof(float));
    if (momentum) m->k->upload(m->momentum, momentum, m->nparams * sizeof(float));
    if (buffers) m->k->upload(m->buffers, buffers, m->nbuffers * sizeof(float));
    if (params || buffers) m->k->conv_filters_ready(m->filters); /* (a frozen filter is a buffer) */
}
