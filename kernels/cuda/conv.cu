/* Stride-1 k x k convolutions with zero padding (struct conv_shape: x[N][C][H][W],
 * w[K][C][k][k], y[N][K][Ho][Wo], Ho = H + 2 pad - k + 1) with cuDNN, plus our bias (+ ReLU)
 * and bias-gradient kernels.
 *
 * Plans: per shape (all of N, C, K, H, W, k, pad) a plan holds the descriptors and, per pass
 * (forward, backward-data, backward-filter), the deterministic algorithms cudnnFind* timed,
 * fastest first (deterministic, so a process's steps are reproducible; another process may
 * time another algorithm fastest). A pass is timed on its first need: in conv_workspace() for
 * the passes the caller names (the model, at start-up, where it learns how much workspace to
 * allocate), else in the first op that runs it (a smaller last evaluation batch). The model
 * names neither the input gradient of its first layer nor the filter gradient of a frozen
 * one, so those are never searched, and a shape for which cuDNN has no deterministic
 * algorithm there cannot stop a run.
 *
 * Workspace: every op takes, from its pass's list, the fastest algorithm whose workspace fits
 * the ws_bytes it is given, and conv_workspace() reports the largest need among the fastest
 * algorithms within CONV_WORKSPACE_LIMIT of the passes named. So an op given what
 * conv_workspace() said runs the algorithm it chose; one given less, or a shape first seen
 * later with a buffer sized for others, the fastest that fits; none fitting is an error
 * naming the layer and the bytes. No workspace size is promised or remembered between calls.
 *
 * Math: cuDNN's default math mode, which lets Ampere and newer GPUs use TF32 tensor cores for
 * FP32 convolutions, as PyTorch does by default (torch.backends.cudnn.allow_tf32); with
 * NVIDIA_TF32_OVERRIDE=0, FMA-only math (full FP32; the GPU tests use it). */
extern "C" {
#include "../../common/err.h"
}
#include "cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONV_WORKSPACE_LIMIT ((size_t)1 << 30)
/* Shapes planned per process: a network's convolutions times the batch sizes it meets (training,
 * a last evaluation batch, tests that try several): airbench94 has 7, the workshop CNN 6. */
#define MAX_PLANS 256

/* The passes, numbered as the bits of enum conv_pass (kernels.h): pass i is bit 1 << i. */
enum { FORWARD, BACKWARD_DATA, BACKWARD_FILTER, PASSES };
static_assert(CONV_FORWARD == 1 << FORWARD && CONV_BACKWARD_DATA == 1 << BACKWARD_DATA &&
                  CONV_BACKWARD_FILTER == 1 << BACKWARD_FILTER,
              "pass i is bit 1 << i of enum conv_pass");
static const char *const pass_names[PASSES] = {"forward", "backward-data", "backward-filter"};

/* The most algorithms cuDNN has for any pass (cudnn_ops.h: 8, 6 and 7). */
#define MAX_ALGOS 8
static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= MAX_ALGOS && CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= MAX_ALGOS &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= MAX_ALGOS,
              "MAX_ALGOS holds every pass's algorithms");

/* One deterministic algorithm that ran in cudnnFind*: its value (a cudnnConvolutionFwdAlgo_t,
 * BwdDataAlgo_t or BwdFilterAlgo_t, by pass), the math type it ran with, its workspace. */
struct algo {
    int algo;
    cudnnMathType_t math;
    size_t memory;
};

struct plan {
    struct conv_shape s;
    int Ho, Wo;                     /* kernels_conv_out of H, W; cuDNN agrees (checked) */
    cudnnTensorDescriptor_t x, y;   /* [N][C][H][W], [N][K][Ho][Wo] */
    cudnnFilterDescriptor_t w;      /* [K][C][k][k] */
    cudnnConvolutionDescriptor_t conv;
    cudnnMathType_t math;           /* what cudnnFind* may use: default, or FMA only */
    struct {
        int timed;                  /* cudnnFind* has run for this pass */
        int count;                  /* the deterministic algorithms that ran, fastest first */
        struct algo a[MAX_ALGOS];
    } pass[PASSES];
};

static struct plan plans[MAX_PLANS];
static int nplans;

/* cuDNN's results (sorted by time) for pass i, less those that failed or are not
 * deterministic. Perf: cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t. */
template <typename Perf>
static void keep(struct plan *p, int i, const Perf *r, int got) {
    p->pass[i].count = 0;
    for (int j = 0; j < got; j++)
        if (r[j].status == CUDNN_STATUS_SUCCESS && r[j].determinism == CUDNN_DETERMINISTIC)
            p->pass[i].a[p->pass[i].count++] = algo{(int)r[j].algo, r[j].mathType, r[j].memory};
    p->pass[i].timed = 1;
}

/* Times every algorithm of pass i. cudnnFind* runs them on tensors and workspace it allocates
 * itself, so no buffer of ours is touched, even mid-step. */
static void time_pass(struct plan *p, int i) {
    cudnnHandle_t h = cuda_cudnn();
    int got = 0;
    /* An op may have left the math type of its last algorithm on the descriptor. */
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->math));
    if (i == FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                         &got, r));
        keep(p, i, r, got);
    } else if (i == BACKWARD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, p->w, p->y, p->conv, p->x,
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, r));
        keep(p, i, r, got);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, p->x, p->y, p->conv, p->w,
                                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, r));
        keep(p, i, r, got);
    }
}

/* The fastest algorithm of pass i whose workspace fits `bytes` (timing the pass first if it
 * has not been); exits naming the layer and the bytes when there is none. */
static const struct algo *choose(struct plan *p, int i, size_t bytes) {
    if (!p->pass[i].timed) time_pass(p, i);
    int count = p->pass[i].count;
    const struct algo *a = p->pass[i].a;
    for (int j = 0; j < count; j++)
        if (a[j].memory <= bytes) return &a[j];
    const struct conv_shape *s = &p->s;
    if (count == 0)
        fprintf(stderr, "%s: cuDNN has no deterministic %s algorithm that runs for conv %d->%d %dx%d kernel %d pad %d, "
                "batch %d\n",
                err_progname(), pass_names[i], s->C, s->K, s->H, s->W, s->k, s->pad, s->N);
    else {
        size_t least = a[0].memory;
        for (int j = 1; j < count; j++) least = a[j].memory < least ? a[j].memory : least;
        fprintf(stderr, "%s: conv %d->%d %dx%d kernel %d pad %d, batch %d: no deterministic %s algorithm fits in %zu "
                "bytes of workspace (the smallest needs %zu)\n",
                err_progname(), s->C, s->K, s->H, s->W, s->k, s->pad, s->N, pass_names[i], bytes, least);
    }
    exit(1);
}

static int same_shape(const struct conv_shape *a, const struct conv_shape *b) {
    return a->N == b->N && a->C == b->C && a->K == b->K && a->H == b->H && a->W == b->W && a->k == b->k &&
           a->pad == b->pad;
}

/* The plan of shape s: its descriptors, made on first sight; no pass timed yet. */
static struct plan *plan_get(const struct conv_shape *s) {
    for (int i = 0; i < nplans; i++)
        if (same_shape(&plans[i].s, s)) return &plans[i];
    CHECK(nplans < MAX_PLANS);
    CHECK(s->k >= 1 && s->k <= 5 && s->pad >= 0 && s->pad < s->k); /* the contract's range */
    struct plan *p = &plans[nplans++];
    memset(p, 0, sizeof *p); /* a slot reused after cuda_conv_release() has nothing timed */
    p->s = *s;
    p->Ho = kernels_conv_out(s->H, s->k, s->pad);
    p->Wo = kernels_conv_out(s->W, s->k, s->pad);
    p->math = cuda_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->N, s->C, s->H, s->W));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s->K, s->C, s->k, s->k));
    /* pad_h, pad_w, stride u, v = 1, dilation 1: PyTorch's Conv2d is a cross-correlation. */
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, s->pad, s->pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    /* cuDNN's own output size (1 + (H + 2 pad - k) / stride) must be the one the model sized y
     * by, or cuDNN would read and write y with other strides. */
    int on, oc, oh, ow;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
    CHECK(on == s->N && oc == s->K && oh == p->Ho && ow == p->Wo);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->N, s->K, p->Ho, p->Wo));
    return p;
}

size_t cuda_conv_workspace(const struct conv_shape *s, unsigned passes) {
    CHECK(passes < 1u << PASSES);
    struct plan *p = plan_get(s);
    size_t bytes = 0;
    for (int i = 0; i < PASSES; i++)
        if (passes & 1u << i) {
            size_t need = choose(p, i, CONV_WORKSPACE_LIMIT)->memory;
            if (need > bytes) bytes = need;
        }
    return bytes;
}

void cuda_conv_release(void) {
    for (int i = 0; i < nplans; i++) {
        CUDNN_CHECK(cudnnDestroyTensorDescriptor(plans[i].x));
        CUDNN_CHECK(cudnnDestroyTensorDescriptor(plans[i].y));
        CUDNN_CHECK(cudnnDestroyFilterDescriptor(plans[i].w));
        CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(plans[i].conv));
    }
    nplans = 0;
}

void cuda_conv_forward(const struct conv_shape *s, const float *x, const float *w, const float *b, float *y, int relu,
                       void *ws, size_t ws_bytes) {
    struct plan *p = plan_get(s);
    const struct algo *a = choose(p, FORWARD, ws_bytes);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, a->math));
    CUDNN_CHECK(cudnnConvolutionForward(cuda_cudnn(), &one, p->x, x, p->w, w, p->conv, (cudnnConvolutionFwdAlgo_t)a->algo,
                                        ws, ws_bytes, &zero, p->y, y));
    if (b) cuda_bias_act(y, b, 1.0f, s->N, s->K, p->Ho * p->Wo, relu);
    else if (relu) cuda_relu_forward(y, y, (size_t)s->N * s->K * p->Ho * p->Wo);
}

void cuda_conv_backward(const struct conv_shape *s, const float *x, const float *w, const float *dy, float *dx,
                        float *dw, float *db, const float *dx_mask, void *ws, size_t ws_bytes) {
    struct plan *p = plan_get(s);
    const float one = 1.0f, zero = 0.0f;
    if (db) { /* db[K] = the sum of dy[N][K][Ho][Wo] over n, y, x */
        double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(s->N, s->K) * s->K * sizeof(double));
        int S = cuda_channel_partials(CHANNEL_SUM, dy, NULL, NULL, NULL, part, s->N, s->K, p->Ho * p->Wo);
        cuda_channel_reduce(part, db, S, s->K, 1.0f);
    }
    if (dw) {
        const struct algo *a = choose(p, BACKWARD_FILTER, ws_bytes);
        CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, a->math));
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(cuda_cudnn(), &one, p->x, x, p->y, dy, p->conv,
                                                   (cudnnConvolutionBwdFilterAlgo_t)a->algo, ws, ws_bytes, &zero, p->w,
                                                   dw));
    }
    if (!dx) return;
    const struct algo *a = choose(p, BACKWARD_DATA, ws_bytes);
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, a->math));
    CUDNN_CHECK(cudnnConvolutionBackwardData(cuda_cudnn(), &one, p->w, w, p->y, dy, p->conv,
                                             (cudnnConvolutionBwdDataAlgo_t)a->algo, ws, ws_bytes, &zero, p->x, dx));
    if (dx_mask) cuda_relu_backward(dx_mask, dx, dx, (size_t)s->N * s->C * s->H * s->W);
}
