/* Stride-1 k x k convolutions with zero padding (struct conv_shape: x[N][C][H][W],
 * w[K][C][k][k], y[N][K][Ho][Wo], Ho = H + 2 pad - k + 1) with cuDNN, plus our bias (+ ReLU)
 * and bias-gradient kernels. Per shape (all of N, C, K, H, W, k, pad) a plan holds the
 * descriptors and the algorithms that cudnnFind* measured fastest among the deterministic ones
 * (so a process's steps are reproducible; another process may time another algorithm fastest)
 * whose workspace fits the limit; plans are made by conv_workspace() at model start-up, which
 * is where the model learns how much workspace to allocate. A shape first seen later (a
 * smaller last evaluation batch) is planned then, within the workspace already promised.
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

#define CONV_WORKSPACE_LIMIT ((size_t)1 << 30)
#define MAX_PLANS 64

struct plan {
    struct conv_shape s;
    int Ho, Wo;                     /* kernels_conv_out of H, W; cuDNN agrees (checked) */
    cudnnTensorDescriptor_t x, y;   /* [N][C][H][W], [N][K][Ho][Wo] */
    cudnnFilterDescriptor_t w;      /* [K][C][k][k] */
    cudnnConvolutionDescriptor_t conv;
    cudnnConvolutionFwdAlgo_t fwd;
    cudnnConvolutionBwdDataAlgo_t bwd_data;
    cudnnConvolutionBwdFilterAlgo_t bwd_filter;
    cudnnMathType_t fwd_math, data_math, filter_math;
    size_t workspace; /* the largest of the three algorithms' */
};

static struct plan plans[MAX_PLANS];
static int nplans;
static size_t promised; /* the largest workspace returned so far: what the model allocated */

/* The first of cuDNN's results (sorted by time) that ran, is deterministic and fits `limit`;
 * exits naming the layer when there is none. Perf: cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t. */
template <typename Perf>
static const Perf *pick(const Perf *r, int count, size_t limit, const char *what, const struct plan *p) {
    for (int i = 0; i < count; i++)
        if (r[i].status == CUDNN_STATUS_SUCCESS && r[i].determinism == CUDNN_DETERMINISTIC && r[i].memory <= limit)
            return &r[i];
    fprintf(stderr, "%s: cuDNN has no deterministic %s algorithm for conv %d->%d %dx%d kernel %d pad %d, batch %d, "
            "within %zu bytes of workspace\n",
            err_progname(), what, p->s.C, p->s.K, p->s.H, p->s.W, p->s.k, p->s.pad, p->s.N, limit);
    exit(1);
}

static int same_shape(const struct conv_shape *a, const struct conv_shape *b) {
    return a->N == b->N && a->C == b->C && a->K == b->K && a->H == b->H && a->W == b->W && a->k == b->k &&
           a->pad == b->pad;
}

static struct plan *plan_get(const struct conv_shape *s, size_t limit) {
    for (int i = 0; i < nplans; i++)
        if (same_shape(&plans[i].s, s)) return &plans[i];
    CHECK(nplans < MAX_PLANS);
    CHECK(s->k >= 1 && s->k <= 5 && s->pad >= 0 && s->pad < s->k); /* the contract's range */
    struct plan *p = &plans[nplans++];
    p->s = *s;
    p->Ho = kernels_conv_out(s->H, s->k, s->pad);
    p->Wo = kernels_conv_out(s->W, s->k, s->pad);
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->N, s->C, s->H, s->W));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, s->K, s->C, s->k, s->k));
    /* pad_h, pad_w, stride u, v = 1, dilation 1: PyTorch's Conv2d is a cross-correlation. */
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, s->pad, s->pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, cuda_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
    /* cuDNN's own output size (1 + (H + 2 pad - k) / stride) must be the one the model sized y
     * by, or cuDNN would read and write y with other strides. */
    int on, oc, oh, ow;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
    CHECK(on == s->N && oc == s->K && oh == p->Ho && ow == p->Wo);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, s->N, s->K, p->Ho, p->Wo));
    cudnnHandle_t h = cuda_cudnn();
    int got;
    cudnnConvolutionFwdAlgoPerf_t fr[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, p->x, p->w, p->conv, p->y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, fr));
    const cudnnConvolutionFwdAlgoPerf_t *f = pick(fr, got, limit, "forward", p);
    cudnnConvolutionBwdDataAlgoPerf_t dr[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(h, p->w, p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, dr));
    const cudnnConvolutionBwdDataAlgoPerf_t *d = pick(dr, got, limit, "backward-data", p);
    cudnnConvolutionBwdFilterAlgoPerf_t wr[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(h, p->x, p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, wr));
    const cudnnConvolutionBwdFilterAlgoPerf_t *w = pick(wr, got, limit, "backward-filter", p);
    p->fwd = f->algo, p->fwd_math = f->mathType;
    p->bwd_data = d->algo, p->data_math = d->mathType;
    p->bwd_filter = w->algo, p->filter_math = w->mathType;
    p->workspace = f->memory;
    if (d->memory > p->workspace) p->workspace = d->memory;
    if (w->memory > p->workspace) p->workspace = w->memory;
    return p;
}

size_t cuda_conv_workspace(const struct conv_shape *s) {
    struct plan *p = plan_get(s, CONV_WORKSPACE_LIMIT);
    if (p->workspace > promised) promised = p->workspace;
    return p->workspace;
}

void cuda_conv_forward(const struct conv_shape *s, const float *x, const float *w, const float *b, float *y, int relu,
                       void *ws) {
    struct plan *p = plan_get(s, promised);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->fwd_math));
    CUDNN_CHECK(cudnnConvolutionForward(cuda_cudnn(), &one, p->x, x, p->w, w, p->conv, p->fwd, ws, p->workspace, &zero,
                                        p->y, y));
    if (b) cuda_bias_act(y, b, 1.0f, s->N, s->K, p->Ho * p->Wo, relu);
    else if (relu) cuda_relu_forward(y, y, (size_t)s->N * s->K * p->Ho * p->Wo);
}

void cuda_conv_backward(const struct conv_shape *s, const float *x, const float *w, const float *dy, float *dx,
                        float *dw, float *db, const float *dx_mask, void *ws) {
    struct plan *p = plan_get(s, promised);
    const float one = 1.0f, zero = 0.0f;
    if (db) { /* db[K] = the sum of dy[N][K][Ho][Wo] over n, y, x */
        double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(s->N, s->K) * s->K * sizeof(double));
        int S = cuda_channel_partials(CHANNEL_SUM, dy, NULL, NULL, NULL, part, s->N, s->K, p->Ho * p->Wo);
        cuda_channel_reduce(part, db, S, s->K, 1.0f);
    }
    if (dw) {
        CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->filter_math));
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(cuda_cudnn(), &one, p->x, x, p->y, dy, p->conv, p->bwd_filter, ws,
                                                   p->workspace, &zero, p->w, dw));
    }
    if (!dx) return;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->data_math));
    CUDNN_CHECK(cudnnConvolutionBackwardData(cuda_cudnn(), &one, p->w, w, p->y, dy, p->conv, p->bwd_data, ws,
                                             p->workspace, &zero, p->x, dx));
    if (dx_mask) cuda_relu_backward(dx_mask, dx, dx, (size_t)s->N * s->C * s->H * s->W);
}
