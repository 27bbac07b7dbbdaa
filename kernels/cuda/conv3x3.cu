/* 3x3 convolutions (padding 1, stride 1) with cuDNN, plus our bias + ReLU and bias-gradient
 * kernels. Per shape (N, C, K, H, W) a plan holds the descriptors and the algorithms that
 * cudnnFind* measured fastest among the deterministic ones (so a process's steps are
 * reproducible; another process may time another algorithm fastest)
 * whose workspace fits the limit; plans are made by conv3x3_workspace() at model start-up,
 * which is where the model learns how much workspace to allocate. A shape first seen later (a
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
    int N, C, K, H, W;
    cudnnTensorDescriptor_t x, y;   /* [N][C][H][W], [N][K][H][W] */
    cudnnFilterDescriptor_t w;      /* [K][C][3][3] */
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
    fprintf(stderr, "%s: cuDNN has no deterministic %s algorithm for conv %d->%d %dx%d, batch %d, within %zu bytes of workspace\n",
            err_progname(), what, p->C, p->K, p->H, p->W, p->N, limit);
    exit(1);
}

static struct plan *plan_get(int N, int C, int K, int H, int W, size_t limit) {
    for (int i = 0; i < nplans; i++) {
        struct plan *p = &plans[i];
        if (p->N == N && p->C == C && p->K == K && p->H == H && p->W == W) return p;
    }
    CHECK(nplans < MAX_PLANS);
    struct plan *p = &plans[nplans++];
    p->N = N, p->C = C, p->K = K, p->H = H, p->W = W;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&p->conv));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, H, W));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, 3, 3));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(p->conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, cuda_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH));
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

size_t cuda_conv3x3_workspace(int N, int C, int K, int H, int W) {
    struct plan *p = plan_get(N, C, K, H, W, CONV_WORKSPACE_LIMIT);
    if (p->workspace > promised) promised = p->workspace;
    return p->workspace;
}

void cuda_conv3x3_forward(const float *x, const float *w, const float *b, float *y, int N, int C, int K, int H, int W,
                          int relu, void *ws) {
    struct plan *p = plan_get(N, C, K, H, W, promised);
    const float one = 1.0f, zero = 0.0f;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->fwd_math));
    CUDNN_CHECK(cudnnConvolutionForward(cuda_cudnn(), &one, p->x, x, p->w, w, p->conv, p->fwd, ws, p->workspace, &zero,
                                        p->y, y));
    cuda_bias_act(y, b, N, K, H * W, relu);
}

void cuda_conv3x3_backward(const float *x, const float *w, const float *dy, float *dx, float *dw, float *db, int N,
                           int C, int K, int H, int W, const float *dx_mask, void *ws) {
    struct plan *p = plan_get(N, C, K, H, W, promised);
    const float one = 1.0f, zero = 0.0f;
    double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(N, K) * K * sizeof(double));
    int S = cuda_channel_partials(CHANNEL_SUM, dy, NULL, NULL, NULL, part, N, K, H * W);
    cuda_channel_reduce(part, db, S, K);
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->filter_math));
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(cuda_cudnn(), &one, p->x, x, p->y, dy, p->conv, p->bwd_filter, ws,
                                               p->workspace, &zero, p->w, dw));
    if (!dx) return;
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->conv, p->data_math));
    CUDNN_CHECK(cudnnConvolutionBackwardData(cuda_cudnn(), &one, p->w, w, p->y, dy, p->conv, p->bwd_data, ws,
                                             p->workspace, &zero, p->x, dx));
    if (dx_mask) cuda_relu_backward(dx_mask, dx, dx, (size_t)N * C * H * W);
}
