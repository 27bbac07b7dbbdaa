/* The interpreter on the CPU backend: the plans model_init builds from network definitions
 * (shapes, tensor table, homes, fusion decisions, ready ranges), training of the test network
 * through the same code path as the workshop CNN (frozen tensors stay put, the loss falls),
 * FLOP accounting, and inconsistent definitions refused with one line. Per-step agreement with
 * PyTorch is tests/torch_reference.py's job. */
#include "../common/err.h"
#include "../common/rng.h"
#include "../data/augment.h"
#include "../data/cifar.h"
#include "../model/batches.h"
#include "../model/evaluate.h"
#include "../model/model.h"
#include "check.h"
#include "test_nets.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int find_tensor(const struct model *m, const char *name) {
    for (int i = 0; i < m->ntensors; i++)
        if (strcmp(m->tensors[i].name, name) == 0) return i;
    return -1;
}

/* The workshop CNN's table: PyTorch's state_dict keys in order, parameters first. */
static void test_workshop_plan(void) {
    struct model m;
    model_init(&m, &net_workshop_cnn, kernels_cpu(), 2, 1);
    static const char *params[] = {
        "network.0.weight",  "network.0.bias",  "network.2.weight",  "network.2.bias",
        "network.5.weight",  "network.5.bias",  "network.6.weight",  "network.6.bias",
        "network.8.weight",  "network.8.bias",  "network.11.weight", "network.11.bias",
        "network.12.weight", "network.12.bias", "network.14.weight", "network.14.bias",
        "network.17.weight", "network.17.bias", "network.19.weight", "network.19.bias",
        "network.21.weight", "network.21.bias"};
    int bad = 0;
    for (int i = 0; i < 22; i++)
        bad += strcmp(m.tensors[i].name, params[i]) != 0 || m.tensors[i].home != HOME_PARAMS;
    EXPECT(bad == 0, "workshop parameter order: %d differences", bad);
    EXPECT(m.ntensors == 22 + 6 + 3, "workshop tensors: %d", m.ntensors);
    EXPECT(strcmp(m.tensors[22].name, "network.5.running_mean") == 0 && m.tensors[27].home == HOME_BUFFERS &&
               strcmp(m.tensors[28].name, "network.5.num_batches_tracked") == 0 &&
               m.tensors[30].home == HOME_COUNTER,
           "workshop buffers and counters: %s, %s", m.tensors[22].name, m.tensors[28].name);
    int w19 = find_tensor(&m, "network.19.weight");
    EXPECT(w19 >= 0 && m.tensors[w19].ndim == 2 && m.tensors[w19].shape[0] == 512 &&
               m.tensors[w19].shape[1] == 4096,
           "linear weight shape");
    EXPECT(m.layers[0].relu_fused && m.layers[1].relu_backward_fused && m.layers[3].relu_backward_fused &&
               !m.layers[19].relu_fused && !m.layers[20].relu_backward_fused &&
               m.layers[1].act == m.layers[0].act,
           "ReLU fusion decisions");
    EXPECT(m.layers[17].out_c == 256 && m.layers[17].out_h == 4 && m.layers[18].out_c == 4096, "shapes");
    char desc[64];
    model_layer_describe(&m, 6, desc, sizeof desc);
    EXPECT(strcmp(desc, "conv 64->128 16x16") == 0, "describe: %s", desc);
    double f0 = model_layer_flops(&m, 0, 2, 0), f0b = model_layer_flops(&m, 0, 2, 1),
           f2b = model_layer_flops(&m, 2, 2, 1);
    EXPECT(f0 == 2.0 * 2 * 32 * 3 * 9 * 32 * 32 && f0b == f0 && f2b == 2 * model_layer_flops(&m, 2, 2, 0),
           "flops: %g %g %g", f0, f0b, f2b);
    model_free(&m);
}

/* airbench94's table: the paper's state_dict keys (legacy/airbench94.py's nn.Sequential), the
 * frozen whitening filter and scales, the shapes 31 -> 15 -> 7 -> 3 -> 1. */
static void test_airbench94_plan(void) {
    struct model m;
    model_init(&m, net_find("airbench94"), kernels_cpu(), 1, 1);
    static const char *params[] = {"0.bias",       "2.conv1.weight", "2.norm1.bias", "2.conv2.weight",
                                   "2.norm2.bias", "3.conv1.weight", "3.norm1.bias", "3.conv2.weight",
                                   "3.norm2.bias", "4.conv1.weight", "4.norm1.bias", "4.conv2.weight",
                                   "4.norm2.bias", "7.weight"};
    int bad = 0;
    for (int i = 0; i < 14; i++)
        bad += strcmp(m.tensors[i].name, params[i]) != 0 || m.tensors[i].home != HOME_PARAMS;
    int w0 = find_tensor(&m, "0.weight"), g = find_tensor(&m, "4.norm2.weight");
    EXPECT(bad == 0 && w0 >= 0 && m.tensors[w0].home == HOME_BUFFERS && m.tensors[w0].shape[0] == 24 &&
               g >= 0 && m.tensors[g].home == HOME_BUFFERS && m.ntensors == 14 + 1 + 6 * 3 + 6,
           "airbench94 tensors: %d differences, %d tensors", bad, m.ntensors);
    const struct model_layer *L = m.layers;
    EXPECT(m.nlayers == 26 && L[0].out_h == 31 && L[3].out_h == 15 && L[10].out_h == 7 && L[17].out_h == 3 &&
               L[23].out_h == 1 && L[24].out_c == 256 && L[25].out_c == 10,
           "airbench94 shapes");
    const struct model_tensor *b0 = &m.tensors[find_tensor(&m, "0.bias")];
    int nonzero = 0;
    for (size_t i = 0; i < b0->numel; i++) nonzero += m.params[b0->offset + i] != 0.0f;
    EXPECT(nonzero == 0, "airbench94's whitening bias: %d of %zu values not 0", nonzero, b0->numel);
    int fused = 0, shared = 0;
    for (int i = 0; i < m.nlayers; i++) {
        fused += L[i].gelu_fused;
        shared += L[i].gelu_fused && L[i + 1].act == L[i].act;
    }
    EXPECT(fused == 6 && shared == 6 && L[4].gelu_fused && L[22 - 1].gelu_fused && !L[0].gelu_fused &&
               L[1].act != L[0].act,
           "airbench94's GELU fusion: %d batch norms fuse their GELU, %d share its output", fused, shared);
    model_free(&m);
}

/* Records the ready ranges of the last backward (P: the model's nparams; a backward's first
 * range is the stats', [P, P + MODEL_STATS), so one starting there starts a new record). */
struct ranges {
    int n;
    size_t P, begin[64], end[64];
};

static int record(void *ctx, size_t begin, size_t end) {
    struct ranges *r = ctx;
    if (begin == r->P) r->n = 0;
    CHECK(r->n < 64);
    r->begin[r->n] = begin, r->end[r->n] = end, r->n++;
    return 0;
}

/* `steps` SGD steps (lr 0.05, momentum 0.9, weight decay 5e-4) of m on batches of B images of set
 * (step s: images s B, s B + 1, ...), crop-flip augmented, fed by q; the mean loss of the first
 * 5 and of the last 5 steps in *first and *last. */
static void sgd_steps(struct model *m, struct batches *q, const struct cifar_set *set, int B, int steps,
                      float *first, float *last) {
    int idx[64];
    CHECK(B <= 64 && steps >= 5);
    *first = *last = 0.0f;
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < B; i++) idx[i] = (step * B + i) % set->n;
        struct batch *b = batches_next(q);
        augment_gather(set, idx, B, 1, 0, 0, b->img, b->geom, b->labels);
        batches_submit(q, B);
        check_forward_backward(m, q);
        float loss;
        m->k->download(&loss, m->grads + m->nparams, sizeof loss);
        if (step < 5) *first += loss / 5;
        if (step >= steps - 5) *last += loss / 5;
        model_sgd_step(m, 0.05f, 0.9f, 5e-4f, 1.0f);
    }
}

static void test_test_net(void) {
    struct model m;
    struct batches q;
    model_init(&m, &test_net, kernels_cpu(), 16, 7);
    batches_init(&q, m.k, 16);
    const struct model_layer *L = m.layers;
    EXPECT(L[0].out_h == 31 && L[3].out_h == 15 && L[9].out_h == 5 && L[10].out_c == 400 && L[11].out_c == 10,
           "test-net shapes: %d %d %d %d", L[0].out_h, L[3].out_h, L[9].out_h, L[10].out_c);
    int w0 = find_tensor(&m, "0.weight"), b0 = find_tensor(&m, "0.bias"),
        g1 = find_tensor(&m, "2.norm1.weight");
    int lin = find_tensor(&m, "5.weight");
    EXPECT(w0 >= 0 && m.tensors[w0].home == HOME_BUFFERS && m.tensors[w0].shape[2] == 2 && b0 >= 0 &&
               m.tensors[b0].home == HOME_PARAMS && g1 >= 0 && m.tensors[g1].home == HOME_BUFFERS &&
               lin >= 0 && find_tensor(&m, "5.bias") < 0 && find_tensor(&m, "2.conv1.bias") < 0,
           "test-net homes");
    EXPECT(model_layer_flops(&m, 0, 1, 1) == 0.0 && model_layer_flops(&m, 11, 1, 1) == 2 * 400 * 10 * 2,
           "flops of a frozen first layer / of the last");
    char desc[64];
    model_layer_describe(&m, 0, desc, sizeof desc);
    EXPECT(strcmp(desc, "conv2 p0 3->8 32x32") == 0, "describe: %s", desc);

    uint8_t *raw;
    struct cifar_set set = check_learnable_set(256, &raw);
    struct ranges r = {.P = m.nparams};
    m.grads_ready = record, m.grads_ready_ctx = &r;
    float *frozen0 = XALLOC(m.nbuffers * 4), *frozen1 = XALLOC(m.nbuffers * 4), *p0 = XALLOC(m.nparams * 4);
    model_get_state(&m, p0, NULL, frozen0);
    float first, last;
    sgd_steps(&m, &q, &set, 16, 40, &first, &last);
    /* Ready ranges: the stats, then one per layer with trainable tensors (0, 2, 4, 6, 7,
     * 11), descending and tiling [0, P + MODEL_STATS). */
    int tiles = r.n == 7 && r.begin[0] == m.nparams && r.end[0] == m.nparams + MODEL_STATS &&
                r.end[r.n - 1] == r.begin[r.n - 2] && r.begin[r.n - 1] == 0;
    for (int i = 1; i < r.n; i++) tiles &= r.end[i] == r.begin[i - 1] && r.begin[i] < r.end[i];
    EXPECT(tiles, "ready ranges: %d of them", r.n);
    model_get_state(&m, NULL, NULL, frozen1);
    int moved = 0;
    for (int t = 0; t < m.ntensors; t++) {
        const struct model_tensor *mt = &m.tensors[t];
        if (mt->home == HOME_BUFFERS && !mt->running)
            moved += memcmp(frozen0 + mt->offset, frozen1 + mt->offset, mt->numel * 4) != 0;
    }
    EXPECT(moved == 0, "%d frozen tensors changed in training", moved);
    EXPECT(frozen1[m.tensors[g1].offset] == 1.0f, "fixed batch-norm scale is %g",
           frozen1[m.tensors[g1].offset]);
    EXPECT(m.params[m.tensors[b0].offset] != p0[m.tensors[b0].offset],
           "the frozen filter's bias did not train");
    EXPECT(m.batches_tracked == 40, "num_batches_tracked %lld", (long long)m.batches_tracked);
    EXPECT(last < 0.8f * first, "test-net did not learn: loss %.4f -> %.4f", first, last);
    printf("test_model: test-net, 40 steps of 16: mean loss of the first 5 %.4f, of the last 5 %.4f\n", first,
           last);
    free(frozen0), free(frozen1), free(p0), free(set.records), free(raw);
    batches_free(&q);
    model_free(&m);
}

/* Once the frozen first filter's bias stops training (model_stop_training), nothing below layer
 * 2 trains: the backward runs neither layer 0 nor the GELU (no time recorded for them), layer 2
 * computes its filter gradient only (flops halved), and every gradient that still trains, with
 * the loss and the ready ranges, is bit for bit the same as with the bias training. */
static void test_backward_stops(void) {
    uint8_t *raw;
    struct cifar_set set = check_learnable_set(64, &raw);
    int idx[16];
    for (int i = 0; i < 16; i++) idx[i] = i * 3;
    struct model m[2];
    struct batches q[2];
    struct ranges r[2] = {{0}, {0}};
    for (int k = 0; k < 2; k++) {
        model_init(&m[k], &test_net, kernels_cpu(), 16, 7);
        batches_init(&q[k], m[k].k, 16);
        if (k) model_stop_training(&m[k], find_tensor(&m[k], "0.bias"));
        m[k].grads_ready = record, m[k].grads_ready_ctx = &r[k];
        struct batch *b = batches_next(&q[k]);
        augment_gather(&set, idx, 16, 1, 0, 0, b->img, b->geom, b->labels);
        batches_submit(&q[k], 16);
        model_timing(&m[k], 1);
        check_forward_backward(&m[k], &q[k]);
        model_timing_collect(&m[k]);
    }
    const struct model_layer *L0 = m[0].layers, *L1 = m[1].layers;
    EXPECT(L0[0].seconds[1] > 0 && L0[1].seconds[1] > 0 && L1[0].seconds[1] == 0 && L1[1].seconds[1] == 0 &&
               L1[2].seconds[1] > 0,
           "backward time of layers 0, 1, 2: %g %g, then with the bias stopped %g %g %g", L0[0].seconds[1],
           L0[1].seconds[1], L1[0].seconds[1], L1[1].seconds[1], L1[2].seconds[1]);
    double f2 = model_layer_flops(&m[1], 2, 16, 0);
    EXPECT(model_layer_flops(&m[0], 2, 16, 1) == 2 * f2 && model_layer_flops(&m[1], 2, 16, 1) == f2,
           "layer 2's backward flops: %g, then %g (forward %g)", model_layer_flops(&m[0], 2, 16, 1),
           model_layer_flops(&m[1], 2, 16, 1), f2);
    int differ = 0, b0 = find_tensor(&m[0], "0.bias");
    for (int t = 0; t < m[0].ntensors; t++) {
        const struct model_tensor *mt = &m[0].tensors[t];
        if (mt->home == HOME_PARAMS && t != b0)
            differ += memcmp(m[0].grads + mt->offset, m[1].grads + mt->offset, mt->numel * 4) != 0;
    }
    differ += memcmp(m[0].grads + m[0].nparams, m[1].grads + m[1].nparams, MODEL_STATS * 4) != 0;
    EXPECT(differ == 0, "with the bias stopped, %d gradients (or the loss) differ", differ);
    int same = r[0].n == r[1].n;
    for (int i = 0; same && i < r[0].n; i++)
        same = r[0].begin[i] == r[1].begin[i] && r[0].end[i] == r[1].end[i];
    EXPECT(same, "ready ranges: %d, then %d with the bias stopped", r[0].n, r[1].n);
    for (int k = 0; k < 2; k++) batches_free(&q[k]), model_free(&m[k]);
    free(set.records), free(raw);
}

/* LAYER_DIRAC_INIT: output channel o < in of the filter [out][in][k][k] is the identity on
 * input channel o (1 at the centre k/2, k/2); every other value is the uniform draw of the same
 * network without the flag (the init streams do not move). Both ways of min(in, out): 3 -> 4
 * with k 3 (three identities) and 4 -> 2 with k 2 (two, centre 1, 1 as dirac_ puts it). */
static void test_dirac_init(void) {
    static const struct layer_def plain[] = {{.kind = LAYER_CONV, .name = "a", .out = 4, .k = 3, .pad = 1},
                                             {.kind = LAYER_CONV, .name = "b", .out = 2, .k = 2, .pad = 0},
                                             {.kind = LAYER_MAXPOOL, .k = 31},
                                             {.kind = LAYER_FLATTEN},
                                             {.kind = LAYER_LINEAR, .name = "l", .out = 10}};
    struct layer_def dirac[5];
    memcpy(dirac, plain, sizeof dirac);
    dirac[0].flags = dirac[1].flags = LAYER_DIRAC_INIT;
    const struct net_def nets[2] = {{"plain", 10, 5, plain, NULL}, {"dirac", 10, 5, dirac, NULL}};
    struct model m[2];
    float *p[2];
    for (int i = 0; i < 2; i++) {
        model_init(&m[i], &nets[i], kernels_cpu(), 1, 5);
        p[i] = XALLOC(m[i].nparams * 4);
        model_get_state(&m[i], p[i], NULL, NULL);
    }
    int bad = m[0].nparams != m[1].nparams, identities = 0;
    for (int layer = 0; layer < 2; layer++) {
        const struct model_layer *L = &m[1].layers[layer];
        const struct model_tensor *t = &m[1].tensors[L->weight];
        int in = L->in_c, k = L->def->k;
        for (size_t j = 0; j < t->numel; j++) {
            size_t kk = (size_t)k * k;
            int o = (int)(j / (in * kk)), c = (int)(j / kk % in), y = (int)(j % kk) / k,
                x = (int)(j % kk) % k;
            float want = o < in ? (c == o && y == k / 2 && x == k / 2) : p[0][t->offset + j];
            identities += want == 1.0f;
            bad += p[1][t->offset + j] != want;
        }
    }
    for (int t = 0; t < m[1].ntensors; t++) /* the other tensors: the same draw */
        if (t != m[1].layers[0].weight && t != m[1].layers[1].weight)
            bad += memcmp(p[0] + m[1].tensors[t].offset, p[1] + m[1].tensors[t].offset,
                          m[1].tensors[t].numel * 4) != 0;
    EXPECT(bad == 0 && identities == 3 + 2, "dirac init: %d differences, %d identities", bad, identities);
    for (int i = 0; i < 2; i++) free(p[i]), model_free(&m[i]);
}

static void init_child(void *net) {
    struct model m;
    model_init(&m, net, kernels_cpu(), 1, 0);
}

/* model_init on `net` in a child process: it must exit 1 with `want` in its one line. */
static void expect_refused(const struct net_def *net, const char *want) {
    char msg[512];
    int status = check_in_child(init_child, (void *)net, msg, sizeof msg);
    EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 1 && strstr(msg, want) &&
               strchr(msg, '\n') == msg + strlen(msg) - 1,
           "%s: status %d, '%s' (want '%s')", net->name, status, msg, want);
}

/* Inconsistent definitions are refused with one line naming the network and the layer. */
static void test_bad_definitions(void) {
    static const struct layer_def unflattened[] = {
        {.kind = LAYER_CONV, .name = "c", .out = 4, .k = 3, .pad = 1},
        {.kind = LAYER_LINEAR, .name = "l", .out = 10}};
    static const struct layer_def frozen_linear[] = {
        {.kind = LAYER_FLATTEN}, {.kind = LAYER_LINEAR, .name = "l", .out = 10, .flags = LAYER_FROZEN}};
    static const struct layer_def big_kernel[] = {
        {.kind = LAYER_CONV, .name = "c", .out = 4, .k = 7, .pad = 3}};
    static const struct layer_def wrong_classes[] = {{.kind = LAYER_FLATTEN},
                                                     {.kind = LAYER_LINEAR, .name = "l", .out = 7}};
    static const struct layer_def unnamed[] = {{.kind = LAYER_FLATTEN}, {.kind = LAYER_LINEAR, .out = 10}};
    static const struct net_def nets[] = {{"unflattened", 10, 2, unflattened, NULL},
                                          {"frozen-linear", 10, 2, frozen_linear, NULL},
                                          {"big-kernel", 10, 1, big_kernel, NULL},
                                          {"wrong-classes", 10, 2, wrong_classes, NULL},
                                          {"unnamed", 10, 2, unnamed, NULL}};
    expect_refused(
        &nets[0],
        "internal error: network unflattened, layer 1: linear layer on a 4x32x32 input (flatten first)");
    expect_refused(&nets[1], "network frozen-linear, layer 1: flags 0x2 do not apply to a linear layer");
    expect_refused(&nets[2], "network big-kernel, layer 0: kernel 7, padding 3");
    expect_refused(&nets[3], "network wrong-classes, layer 1: output 7x1x1, not 10 logits");
    expect_refused(&nets[4], "network unnamed, layer 1: a linear layer needs a name");
}

/* model_optimizer_step with airbench's batch-norm group and a stopped tensor (one call of
 * sgd_update with m->sgd_groups) equals, bit for bit, a call of sgd_update per tensor
 * with its group's settings, the stopped tensor and the alignment padding left alone; twice,
 * the second time after another tensor stops (the groups made again). */
static void test_grouped_update(void) {
    struct model m[2];
    for (int j = 0; j < 2; j++) model_init(&m[j], &net_airbench94, kernels_cpu(), 2, 5);
    size_t P = m[0].nparams;
    const struct sgd_settings st = {1.4648e-3f, 0.85f, 1.3624f, 0.5f, 64.0f, 1};
    const char *stop[2] = {"0.bias", "3.conv1.weight"};
    int s = find_tensor(&m[0], "0.bias");
    CHECK(s >= 0);
    float b0 = m[0].params[m[0].tensors[s].offset];
    for (int round = 0; round < 2; round++) {
        for (int j = 0; j < 2; j++) {
            check_fill(m[j].grads, P, -1, 1, 77u + (unsigned)round); /* the same gradients */
            model_stop_training(&m[j], find_tensor(&m[j], stop[round]));
        }
        model_optimizer_step(&m[0], &st);
        for (int t = 0; t < m[1].ntensors; t++) { /* the per-tensor calls */
            const struct model_tensor *mt = &m[1].tensors[t];
            if (mt->home != HOME_PARAMS || mt->stopped) continue;
            float f = m[1].layers[mt->layer].def->kind == LAYER_BATCHNORM ? st.norm_lr_scale : 1.0f;
            size_t o = mt->offset;
            const struct sgd_hyper h = {{st.lr * f}, {st.weight_decay / f}, st.momentum, st.grad_scale};
            kernels_cpu()->sgd_update(m[1].params + o, m[1].grads + o, m[1].momentum + o, NULL, mt->numel, &h,
                                      st.nesterov);
        }
        EXPECT(memcmp(m[0].params, m[1].params, P * 4) == 0 &&
                   memcmp(m[0].momentum, m[1].momentum, P * 4) == 0,
               "grouped update, round %d: differs from a call per tensor", round);
    }
    EXPECT(m[0].params[m[0].tensors[s].offset] == b0 && m[0].momentum[m[0].tensors[s].offset] == 0.0f,
           "grouped update: the stopped bias moved");
    for (int j = 0; j < 2; j++) model_free(&m[j]);
}

/* Submits a batch of 4 whose image 2 has the geometry g[3]. */
static void submit_child(void *g) {
    const int *geom = g;
    struct batches q;
    batches_init(&q, kernels_cpu(), 4);
    struct batch *b = batches_next(&q);
    for (int i = 0; i < 4; i++) b->geom[3 * i] = b->geom[3 * i + 1] = 4, b->geom[3 * i + 2] = 0;
    b->geom[6] = geom[0], b->geom[7] = geom[1], b->geom[8] = geom[2];
    batches_submit(&q, 4);
}

/* 1 when submitting geometry {dx, dy, flip} stops a child process at the CHECK naming it
 * (abort, "check failed: geometry_ok"), 0 when the submit goes through. */
static int geometry_refused(int dx, int dy, int flip) {
    int g[3] = {dx, dy, flip};
    char msg[512];
    int status = check_in_child(submit_child, g, msg, sizeof msg);
    return WIFSIGNALED(status) && strstr(msg, "check failed: geometry_ok") != NULL;
}

/* batches_submit refuses crops outside input_prepare's range (the device would read past the
 * image) and takes its edges. */
static void test_batch_geometry(void) {
    static const int bad[][3] = {{9, 4, 0}, {4, -1, 0}, {4, 4, 2}, {-1, 8, 1}, {4, 100, 0}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        EXPECT(geometry_refused(bad[i][0], bad[i][1], bad[i][2]), "batches_submit took geometry {%d, %d, %d}",
               bad[i][0], bad[i][1], bad[i][2]);
    static const int good[][3] = {{0, 0, 0}, {8, 8, 1}, {0, 8, 1}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        EXPECT(!geometry_refused(good[i][0], good[i][1], good[i][2]),
               "batches_submit refused geometry {%d, %d, %d}", good[i][0], good[i][1], good[i][2]);
}

/* The largest batch of each network: the most images whose largest activation (airbench94's
 * 64x31x31, the workshop CNN's 64x32x32) holds fewer than 2^31 values, and one more refused. */
static void test_batch_limit(void) {
    static const struct {
        const struct net_def *net;
        int limit;
    } nets[] = {{&net_airbench94, 34916}, {&net_workshop_cnn, 32767}};
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
        struct err e = {""};
        int n = nets[i].limit;
        EXPECT((long long)n * 64 * (i ? 32 * 32 : 31 * 31) < (1LL << 31) &&
                   (long long)(n + 1) * 64 * (i ? 32 * 32 : 31 * 31) >= (1LL << 31),
               "%s: %d is not the limit", nets[i].net->name, n);
        EXPECT(model_batch_check(nets[i].net, n, &e) == 0, "%s: batch %d refused: %s", nets[i].net->name, n,
               e.msg);
        EXPECT(model_batch_check(nets[i].net, n + 1, &e) == -1 && strstr(e.msg, "takes at most"),
               "%s: batch %d taken", nets[i].net->name, n + 1);
        EXPECT(model_batch_check(nets[i].net, 1, &e) == 0, "%s: batch 1 refused", nets[i].net->name);
    }
}

/* Graphs asked for on the CPU, which records none (capture_begin refuses): the steps run op by
 * op, graphs is switched off at the first capture, and the results are those without. (The
 * graphs themselves are test_cuda's, on a GPU.) */
static void test_graphs_fallback(void) {
    uint8_t *raw;
    struct cifar_set set = check_learnable_set(64, &raw);
    float *w[2] = {NULL, NULL};
    size_t P = 0;
    int graphs_after = -1;
    for (int j = 0; j < 2; j++) {
        struct model m;
        struct batches q;
        model_init(&m, &test_net, kernels_cpu(), 8, 3);
        batches_init(&q, m.k, 8);
        m.graphs = j;
        float first, last;
        sgd_steps(&m, &q, &set, 8, 5, &first, &last);
        P = m.nparams, w[j] = XALLOC(2 * P * sizeof(float));
        model_get_state(&m, w[j], w[j] + P, NULL);
        if (j) graphs_after = m.graphs;
        batches_free(&q);
        model_free(&m);
    }
    EXPECT(graphs_after == 0 && memcmp(w[0], w[1], 2 * P * sizeof(float)) == 0,
           "graphs on the CPU: still asked for (%d) or the steps differ", graphs_after);
    free(w[0]), free(w[1]);
    free(set.records), free(raw);
}

/* TTA's views (model/evaluate.h, legacy/airbench94.py's infer_mirror_translate): crop offsets,
 * flip, weight. */
struct tta_view {
    int dx, dy, flip;
    float weight;
};
static const struct tta_view tta_views[][6] = {
    {{4, 4, 0, 1.0f}},
    {{4, 4, 0, 0.5f}, {4, 4, 1, 0.5f}},
    {{4, 4, 0, 0.25f},
     {4, 4, 1, 0.25f},
     {3, 3, 0, 0.125f},
     {3, 3, 1, 0.125f},
     {5, 5, 0, 0.125f},
     {5, 5, 1, 0.125f}},
};
static const int tta_nviews[] = {1, 2, 6};

/* The reference of evaluate_logits: each view of images [at, at + n) of set scored alone by
 * model_predict, the logits summed on the host in view order (w z, then fmaf), into sum[n][10]. */
static void tta_reference(struct model *m, struct batches *q, const struct cifar_set *set, int at, int n,
                          int tta, float *sum) {
    int idx[64], pred[64];
    float logits[64 * 10];
    for (int i = 0; i < n; i++) idx[i] = at + i;
    for (int v = 0; v < tta_nviews[tta]; v++) {
        const struct tta_view *view = &tta_views[tta][v];
        struct batch *b = batches_next(q);
        augment_gather(set, idx, n, 0, 0, AUGMENT_NONE, b->img, b->geom, b->labels);
        for (int i = 0; i < n; i++)
            b->geom[3 * i] = view->dx, b->geom[3 * i + 1] = view->dy, b->geom[3 * i + 2] = view->flip;
        b->reflect = 1;
        batches_submit(q, n);
        struct model_input in;
        int slot = batches_take(q, &in);
        model_predict(m, &in, pred, logits);
        batches_release(q, slot);
        for (int j = 0; j < n * 10; j++)
            sum[j] = v ? fmaf(view->weight, logits[j], sum[j]) : view->weight * logits[j];
    }
}

/* evaluate_logits at TTA levels 0, 1 and 2 bit for bit as the views scored one by one
 * (tta_reference), over chunks of max_batch 8 with a partial last one (23 images from image
 * 3 on), on cpu and cpu-bf16-act; evaluate_range's confusion counts the argmax of those sums. */
static void test_evaluate(void) {
    uint8_t *raw;
    struct cifar_set set = check_random_set(40, 11, &raw);
    const struct kernels *tables[] = {kernels_cpu(), kernels_cpu_bf16_act()};
    enum { AT = 3, N = 23, MB = 8 };
    for (int t = 0; t < 2; t++)
        for (int tta = 0; tta <= EVALUATE_TTA_MAX; tta++) {
            struct model m;
            struct batches q;
            model_init(&m, &test_net, tables[t], MB, 5);
            batches_init(&q, m.k, MB);
            float got[N * 10], want[N * 10];
            long conf[CIFAR_CLASSES][CIFAR_CLASSES] = {{0}}, wconf[CIFAR_CLASSES][CIFAR_CLASSES] = {{0}};
            evaluate_logits(&m, &set, AT, AT + N, tta, got);
            evaluate_range(&m, &set, AT, AT + N, tta, conf);
            for (int at = 0; at < N; at += MB)
                tta_reference(&m, &q, &set, AT + at, N - at < MB ? N - at : MB, tta, want + at * 10);
            for (int i = 0; i < N; i++) {
                int arg = 0;
                for (int j = 1; j < 10; j++) arg = want[i * 10 + j] > want[i * 10 + arg] ? j : arg;
                wconf[cifar_label(&set, AT + i)][arg]++;
            }
            EXPECT(memcmp(got, want, sizeof got) == 0,
                   "%s TTA level %d: evaluate_logits differs from the views scored one by one", m.k->name,
                   tta);
            EXPECT(memcmp(conf, wconf, sizeof conf) == 0,
                   "%s TTA level %d: evaluate_range's confusion differs from the sums' argmax", m.k->name,
                   tta);
            batches_free(&q);
            model_free(&m);
        }
    free(set.records), free(raw);
}

/* The first step on one batch of n images on m[0] and m[1] (the same state): loss and
 * gradients of each in loss[j], grads[j]; then both score the same images: logits[j], pred[j]. */
static void step_both(struct model m[2], const struct cifar_set *set, int n, float loss[2], float *grads[2],
                      float *logits[2], int *pred[2]) {
    int *idx = XALLOC((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) idx[i] = i % set->n;
    for (int j = 0; j < 2; j++) {
        struct batches q;
        batches_init(&q, m[j].k, n);
        struct batch *b = batches_next(&q);
        augment_gather(set, idx, n, 1, 0, AUGMENT_CROP_FLIP, b->img, b->geom, b->labels);
        batches_submit(&q, n);
        check_forward_backward(&m[j], &q);
        m[j].k->download(grads[j], m[j].grads, m[j].nparams * sizeof(float));
        m[j].k->download(&loss[j], m[j].grads + m[j].nparams, sizeof(float));
        b = batches_next(&q);
        augment_gather(set, idx, n, 1, 0, AUGMENT_NONE, b->img, b->geom, b->labels);
        batches_submit(&q, n);
        check_predict(&m[j], &q, pred[j], logits[j]);
        batches_free(&q);
    }
    free(idx);
}

/* A convolution and the max pool after it run as one (conv_pool_forward, pooled as the
 * Winograd output is written) give a training step and a prediction bit for bit those of the
 * two ops apart (keep_pool_inputs), on every network with such a pair and every product path:
 * the same sums, pooled the same way. */
static void test_pools_fused(void) {
    uint8_t *raw;
    struct cifar_set set = check_learnable_set(64, &raw);
    const struct net_def *nets[] = {&net_workshop_cnn, &net_airbench94};
    const struct kernels *ks[] = {kernels_cpu(), kernels_cpu_bf16(), kernels_cpu_bf16_act()};
    enum { N = 8 };
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++) {
            struct model m[2];
            size_t P = 0, C = (size_t)nets[i]->classes;
            float loss[2], *grads[2], *logits[2];
            int *pred[2];
            for (int j = 0; j < 2; j++) {
                model_init(&m[j], nets[i], ks[b], N, 5);
                m[j].keep_pool_inputs = j;
                P = m[j].nparams;
                grads[j] = XALLOC(P * sizeof(float)), logits[j] = XALLOC(N * C * sizeof(float));
                pred[j] = XALLOC(N * sizeof(int));
            }
            step_both(m, &set, N, loss, grads, logits, pred);
            EXPECT(
                memcmp(&loss[0], &loss[1], sizeof(float)) == 0 && memcmp(grads[0], grads[1], P * 4) == 0 &&
                    memcmp(logits[0], logits[1], N * C * 4) == 0,
                "%s on %s: with the pools in the convolutions, loss %.9g (apart %.9g), gradients or logits "
                "differ",
                nets[i]->name, ks[b]->name, loss[0], loss[1]);
            for (int j = 0; j < 2; j++) free(grads[j]), free(logits[j]), free(pred[j]), model_free(&m[j]);
        }
    free(set.records), free(raw);
}

/* bf16 activations through the whole model: each network on cpu-bf16-act (cuda-bf16's twin:
 * every activation rounded to bf16) against cpu-bf16 (the same bf16 products on float
 * activations), from the same state and batch of 64 images. What differs is only the rounding
 * of the activations (2^-8 relative at most, each), so the first step's loss stays within
 * 2e-3 and the logits within 3e-2 (relative; measured: loss 2.3e-4, logits 1.6e-3 to 1.3e-2);
 * the gradients, within 0.35 (relative L2; measured 0.048 on test-net, 0.11 on airbench94,
 * 0.22 on the workshop CNN, whose gradients the bf16 products alone move 0.21 from float's),
 * move further: at initialisation each is a small difference of
 * large terms (softmax minus target), and bf16 makes ties in max-pool windows that float
 * breaks the other way, each moving a whole contribution below. Predictions agree except
 * where the top two logits are within 3e-2 of the largest. Then test-net trains 40 steps on
 * it and learns. This covers model.c's side (buffers of act_size elements, the logits widened
 * on the host); each op's bf16 rounding is test_ops' cpu-bf16-act column. */
static void test_bf16_activations(void) {
    uint8_t *raw;
    struct cifar_set set = check_learnable_set(256, &raw);
    const struct net_def *nets[] = {&net_workshop_cnn, &test_net, &net_airbench94};
    enum { N = 64 };
    for (size_t i = 0; i < sizeof nets / sizeof nets[0]; i++) {
        const struct net_def *net = nets[i];
        struct model m[2];
        model_init(&m[0], net, kernels_cpu_bf16(), N, 11);
        model_init(&m[1], net, kernels_cpu_bf16_act(), N, 11);
        EXPECT(m[1].k->act_size == 2, "cpu-bf16-act: act_size %zu", m[1].k->act_size);
        size_t P = m[0].nparams, C = (size_t)net->classes;
        float loss[2], *grads[2], *logits[2];
        int *pred[2];
        for (int j = 0; j < 2; j++)
            grads[j] = XALLOC(P * sizeof(float)), logits[j] = XALLOC(N * C * sizeof(float)),
            pred[j] = XALLOC(N * sizeof(int));
        step_both(m, &set, N, loss, grads, logits, pred);
        double el = fabs((double)loss[1] - loss[0]) / fabs(loss[0]),
               eg = check_rel_l2f(grads[1], grads[0], P), ez = check_rel_l2f(logits[1], logits[0], N * C);
        int bad = 0;
        for (int n = 0; n < N; n++) {
            const float *z = logits[0] + n * C;
            float top = 0;
            for (size_t c = 0; c < C; c++) top = fmaxf(top, fabsf(z[c]));
            bad += pred[1][n] != pred[0][n] && z[pred[0][n]] - z[pred[1][n]] > 3e-2f * top;
        }
        printf("test_model: %s, bf16 activations against float, batch %d: loss %.3g, gradients %.3g, logits "
               "%.3g (relative)\n",
               net->name, N, el, eg, ez);
        EXPECT(el <= 2e-3 && ez <= 3e-2 && eg <= 0.35,
               "%s: bf16 activations: loss %.3g, logits %.3g, gradients %.3g", net->name, el, ez, eg);
        EXPECT(bad == 0, "%s: bf16 activations: %d predictions differ", net->name, bad);
        for (int j = 0; j < 2; j++) free(grads[j]), free(logits[j]), free(pred[j]), model_free(&m[j]);
    }
    struct model m;
    struct batches q;
    model_init(&m, &test_net, kernels_cpu_bf16_act(), 16, 7);
    batches_init(&q, m.k, 16);
    float first, last;
    sgd_steps(&m, &q, &set, 16, 40, &first, &last);
    EXPECT(last < 0.8f * first, "test-net on bf16 activations did not learn: loss %.4f -> %.4f", first, last);
    printf("test_model: test-net on bf16 activations, 40 steps of 16: mean loss of the first 5 %.4f, of the "
           "last "
           "5 %.4f\n",
           first, last);
    batches_free(&q);
    model_free(&m);
    free(set.records), free(raw);
}

/* model_train_step (the update issued with the step, from the scalars it sets first) equals
 * model_forward_backward, model_optimizer_step and model_lookahead_update called apart, bit for
 * bit: airbench94's groups and Nesterov, the lr changing every step, 0, 1 and 2 lookahead updates
 * (their weights changing too), a tensor stopped midway; its batch slot receives its (loss,
 * correct). */
static void test_train_step(void) {
    enum { B = 8, STEPS = 5 };
    uint8_t *raw;
    struct cifar_set set = check_learnable_set(STEPS * B, &raw);
    struct model m[2];
    struct batches q[2];
    float *st[2];
    for (int j = 0; j < 2; j++) {
        model_init(&m[j], &net_airbench94, kernels_cpu(), B, 7);
        batches_init(&q[j], m[j].k, B);
        model_lookahead_init(&m[j]);
    }
    size_t P = m[0].nparams, S = m[0].nbuffers;
    for (int j = 0; j < 2; j++) st[j] = XALLOC((3 * P + 2 * S) * sizeof(float));
    int idx[B], stats_apart = 0;
    for (int s = 0; s < STEPS; s++) {
        struct model_update u = {.sgd = {1.4648e-3f * (float)(s + 1), 0.85f, 1.3624f, 0.5f, 64.0f, 1},
                                 .lookaheads = s % 3,
                                 .lookahead = {0.2262190625f + 0.1f * (float)s, 0.7f}};
        for (int i = 0; i < B; i++) idx[i] = s * B + i;
        for (int j = 0; j < 2; j++) {
            if (s == 2) model_stop_training(&m[j], find_tensor(&m[j], "0.bias"));
            struct batch *b = batches_next(&q[j]);
            augment_gather(&set, idx, B, 1, 0, AUGMENT_CROP_FLIP, b->img, b->geom, b->labels);
            batches_submit(&q[j], B);
            struct model_input in;
            int slot = batches_take(&q[j], &in);
            if (j == 0) {
                model_train_step(&m[j], &in, &u);
            } else {
                model_forward_backward(&m[j], &in);
                model_optimizer_step(&m[j], &u.sgd);
                for (int k = 0; k < u.lookaheads; k++) model_lookahead_update(&m[j], u.lookahead[k]);
            }
            batches_release(&q[j], slot);
            if (j == 0) { /* its (loss, correct) in the slot once the step is done */
                batches_wait(&q[j], slot);
                stats_apart += memcmp(q[j].stats[slot], m[j].grads + m[j].nparams, 2 * sizeof(float)) != 0;
            }
        }
    }
    for (int j = 0; j < 2; j++) {
        model_get_state(&m[j], st[j], st[j] + P, st[j] + 2 * P);
        model_get_lookahead(&m[j], st[j] + 2 * P + S, st[j] + 3 * P + S);
    }
    EXPECT(memcmp(st[0], st[1], (3 * P + 2 * S) * sizeof(float)) == 0,
           "model_train_step: the state after %d steps differs from the ops called apart", STEPS);
    EXPECT(stats_apart == 0,
           "model_train_step: (loss, correct) in the batch slot differ from m->grads in %d steps",
           stats_apart);
    for (int j = 0; j < 2; j++) batches_free(&q[j]), model_free(&m[j]), free(st[j]);
    free(set.records), free(raw);
}

/* model_train_step with a grads_ready hook stops: the update would come before the reduction. */
static void train_step_child(void *unused) {
    (void)unused;
    struct model m;
    struct batches q;
    struct ranges r = {0};
    model_init(&m, &test_net, kernels_cpu(), 4, 1);
    batches_init(&q, m.k, 4);
    r.P = m.nparams;
    m.grads_ready = record, m.grads_ready_ctx = &r;
    struct batch *b = batches_next(&q);
    memset(b->img, 0, 4 * CIFAR_IMAGE_BYTES), memset(b->labels, 0, 4 * sizeof(int));
    for (int i = 0; i < 4; i++) b->geom[3 * i] = b->geom[3 * i + 1] = 4, b->geom[3 * i + 2] = 0;
    batches_submit(&q, 4);
    struct model_input in;
    batches_take(&q, &in);
    model_train_step(&m, &in, &(struct model_update){.sgd = {0.1f, 0.9f, 0.0f, 1.0f, 1.0f, 0}});
}

static void test_train_step_refuses_hook(void) {
    char msg[512];
    int status = check_in_child(train_step_child, NULL, msg, sizeof msg);
    EXPECT(WIFSIGNALED(status) && strstr(msg, "check failed: u && !m->grads_ready"),
           "model_train_step with grads_ready: status %d, \"%s\"", status, msg);
}

int main(void) {
    err_set_progname("test_model");
    omp_set_num_threads(2);
    test_workshop_plan();
    test_test_net();
    test_backward_stops();
    test_airbench94_plan();
    test_dirac_init();
    test_bad_definitions();
    test_bf16_activations();
    test_pools_fused();
    test_grouped_update();
    test_graphs_fallback();
    test_train_step();
    test_train_step_refuses_hook();
    test_evaluate();
    test_batch_geometry();
    test_batch_limit();
    return check_summary("test_model");
}
