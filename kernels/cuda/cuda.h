/* Internals of the CUDA backend (kernels/cuda/), shared by its per-op files; the public entry
 * points are in kernels/kernels.h. Contracts of the ops are those of struct kernels.
 *
 * Every op runs on one stream (cuda_stream()), so ops are ordered among themselves and
 * asynchronous to the host; uploads of input batches and staged gradient copies each have a
 * stream of their own (backend.cu), ordered against the first with events.
 *
 * Every CUDA runtime, cuDNN and cuBLAS call goes through CUDA_CHECK / CUDNN_CHECK /
 * CUBLAS_CHECK, which print the failed expression, the error and file:line, then exit 1; every
 * kernel launch is followed by LAUNCH_CHECK(), which catches launch errors and, in a build with
 * CUDA_SYNC=1 (make CUDA_SYNC=1), also synchronises so a failing kernel is named at once. */
#ifndef KERNELS_CUDA_CUDA_H
#define KERNELS_CUDA_CUDA_H

extern "C" {
#include "../kernels.h" /* struct conv_shape, kernels_conv_out */
}
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stddef.h>
#include <stdint.h>

#include "fastdiv.h"

void cuda_fail(const char *api, const char *expr, const char *what, const char *file, int line)
    __attribute__((noreturn));
const char *cuda_cublas_error(cublasStatus_t s);

/* CHECKED_CALL: evaluate `call` (of status type T) once; if it is not `ok`, report the library,
 * `text` (the call as written: the wrappers stringify it before any macro in it expands),
 * `describe(status)` and file:line, then exit 1. Never compiled out. */
#define CHECKED_CALL(api, T, ok, describe, call, text)                                                       \
    do {                                                                                                     \
        T checked_rc_ = (call);                                                                              \
        if (checked_rc_ != (ok)) cuda_fail(api, text, describe(checked_rc_), __FILE__, __LINE__);            \
    } while (0)
#define CUDA_CHECK(call) CHECKED_CALL("CUDA", cudaError_t, cudaSuccess, cudaGetErrorString, call, #call)
#define CUDNN_CHECK(call)                                                                                    \
    CHECKED_CALL("cuDNN", cudnnStatus_t, CUDNN_STATUS_SUCCESS, cudnnGetErrorString, call, #call)
#define CUBLAS_CHECK(call)                                                                                   \
    CHECKED_CALL("cuBLAS", cublasStatus_t, CUBLAS_STATUS_SUCCESS, cuda_cublas_error, call, #call)

#ifndef CUDA_SYNC
#define CUDA_SYNC 0
#endif
#define LAUNCH_CHECK()                                                                                       \
    do {                                                                                                     \
        CUDA_CHECK(cudaGetLastError());                                                                      \
        if (CUDA_SYNC && !cuda_capturing()) CUDA_CHECK(cudaStreamSynchronize(cuda_stream()));                \
    } while (0)

/* Whether convolutions may use TF32 tensor cores (Ampere and newer): yes, as PyTorch's default,
 * unless NVIDIA_TF32_OVERRIDE=0, NVIDIA's switch, which we also honour explicitly by asking
 * cuDNN for FMA-only math. */
int cuda_tf32(void);

/* The backend's state (backend.cu), valid after kernels_cuda() succeeded. */
cudaStream_t cuda_stream(void);
/* Whether the compute stream is being recorded into a graph (kernels.h capture_begin). */
int cuda_capturing(void);
cudnnHandle_t cuda_cudnn(void);
cublasHandle_t cuda_cublas(void);
/* A device scratch buffer of at least `bytes`, owned by the backend and reused by every op
 * (ops run in stream order, so one op's scratch is free again when the next one starts).
 * Grows (with a device synchronisation) only when a larger size is asked for. */
void *cuda_scratch(size_t bytes);

/* Threads per block for the element-wise kernels and the block count covering n elements
 * (grid-stride loops cover whatever a capped grid does not: at most 2^28 threads). */
#define CUDA_THREADS 256
unsigned cuda_blocks(size_t n);
/* for (size_t i = this thread's first; i < n; i += all threads of the grid) */
#define GRID_STRIDE(i, n)                                                                                    \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                                  \
         i += (size_t)gridDim.x * blockDim.x)
/* The same over 32-bit indices, for n < 2^31 (so i + the grid's threads stays below 2^32). */
#define GRID_STRIDE32(i, n)                                                                                  \
    for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += gridDim.x * blockDim.x)

/* kernel<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(args...) over n elements, then
 * LAUNCH_CHECK(). */
template <typename... P, typename... A>
static inline void cuda_launch(void (*kernel)(P...), size_t n, A... args) {
    kernel<<<cuda_blocks(n), CUDA_THREADS, 0, cuda_stream()>>>(args...);
    LAUNCH_CHECK();
}

/* The channel of element i of an [N][C][HW] tensor, (i / HW) % C, without a divide
 * (fastdiv.h); made on the host for tensors of fewer than 2^31 elements (checked). */
struct channel_of {
    struct fastdiv hw, c;
};
struct channel_of cuda_channel_of(int N, int C, int HW);
__device__ static inline uint32_t channel_at(uint32_t i, struct channel_of k) {
    return fastdiv_mod(fastdiv_div(i, k.hw), k.c);
}

/* The activations' layout (kernels.h), chosen when the backend starts: NHWC (1), unless
 * CIFAR10_CUDA_LAYOUT=nchw (0; for comparisons). */
int cuda_nhwc(void);
/* Whether convolutions take only cuDNN's deterministic algorithms (1, so a process's steps are
 * reproducible), chosen when the backend starts: unless CIFAR10_CUDA_ALGOS=fastest (0: the
 * fastest cudnnFind timed, as PyTorch's cudnn.benchmark; atomics may reorder sums). */
int cuda_deterministic(void);
/* Whether the forward and the filter gradient of a convolution on few input channels (C k^2 <=
 * 27 in NHWC: airbench94's 2x2 whitening layer and the workshop CNN's 3x3 first layer on RGB,
 * whose forward cuDNN runs without tensor cores and whose deterministic filter gradient is
 * slow) are our direct kernels (1), unless CIFAR10_CUDA_SMALL_CONV=cudnn (0: cuDNN's, for
 * comparisons); chosen at start. */
int cuda_small_conv(void);
/* Whether filter sets are made ready (1: kernels.h conv_filters_create, filters.cu), unless
 * CIFAR10_CUDA_FILTERS=per-call (0: every set empty, each call converts its filter, for
 * comparisons); chosen at start. */
int cuda_filters_on(void);
/* An activation [N][C][HW] in the backend's layout as the a[rows][C][hw] that channel_of and
 * the channel partials index: itself in NCHW, [N * HW][C][1] in NHWC (a pixel per row). */
static inline void cuda_act_rows(int nhwc, int *N, int *HW) {
    if (nhwc) *N *= *HW, *HW = 1;
}

/* 1 / x within about 1 ulp, from the GPU's reciprocal unit (rcp.approx: no divide). */
__device__ static inline float cuda_rcp(float x) {
#ifdef __CUDA_ARCH__
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(x));
    return r;
#else
    return 1.0f / x;
#endif
}

/* GELU (exact form) and its derivative Phi(x) + x phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi),
 * for the GELU kernels and batch norm's fused GELU (which runs it three times an element). Phi
 * from its lower tail, Phi(-a) = exp(-a^2 / 2) T(a) for a = |x| (T smooth: Mills' ratio over
 * sqrt(2 pi)), T(a) = P(t) / (a + 4) with t = (a - 4) / (a + 4) and P a degree-8 fit on [0, 14]
 * (relative error 9e-8; past 13.2 the tail and the density are flushed to 0, as on the CPU).
 * Phi is the tail for x < 0 and 1 - tail else, so it is accurate relative to Phi in the lower
 * tail, where 0.5 (1 + erf(x / sqrt 2)) cancels. exp(-a^2 / 2) is shared by Phi and phi and
 * taken from exp2f of the product's rounded part, times 1 + its rounding errors, so it keeps
 * its relative accuracy where a^2 / 2 is large. About 36 PTX instructions, against about 80
 * with CUDA's normcdff (130 for the slope with its expf). Against double on every 7th float
 * of (-14, 14), with exp2f and the reciprocal each 2 ulp off: y within 9.1e-7 relative (13.6
 * ulp; the Horner sum near x = 0) for x > -12.97 (below, the tail is subnormal: |y| < 1e-37,
 * 1.3e-6 relative), the slope within 14 ulp of |Phi| + |x phi|. The CPU twin
 * (cpu/gelu_vec.h) is another fit, with a central polynomial near 0. */
__device__ static inline float cuda_normal_cdf(float x, float *gauss) {
    const float log2e = 1.44269502e+00f, log2e_lo = 1.92596303e-08f, ln2 = 0.693147182f;
    float a = fminf(fabsf(x), 14.0f);                       /* NaN: 14; y and the slope stay NaN through x */
    float q = a * a, q_err = fmaf(a, a, -q), h = -0.5f * q; /* -a^2 / 2 = h - q_err / 2 */
    float p = h * log2e, p_err = fmaf(h, log2e, -p) + h * log2e_lo; /* h log2(e) = p + p_err */
    float g = exp2f(p) * (1.0f + fmaf(p_err, ln2, -0.5f * q_err));
    g = h < -87.0f ? 0.0f : g;
    float d = cuda_rcp(a + 4.0f), t = (a - 4.0f) * d;
    float P = 4.019268090e-04f;
    P = fmaf(P, t, 1.559852390e-03f);
    P = fmaf(P, t, -3.665396245e-03f);
    P = fmaf(P, t, -7.549710572e-03f);
    P = fmaf(P, t, 6.043913960e-02f);
    P = fmaf(P, t, -1.865183562e-01f);
    P = fmaf(P, t, 3.871340752e-01f);
    P = fmaf(P, t, -6.078967452e-01f);
    P = fmaf(P, t, 7.552851439e-01f);
    float tail = g * (P * d);
    *gauss = g;
    return x < 0.0f ? tail : 1.0f - tail;
}
__device__ static inline float cuda_gelu(float x) {
    float g;
    return x * cuda_normal_cdf(x, &g);
}
__device__ static inline float cuda_gelu_slope(float x) {
    float g, cdf = cuda_normal_cdf(x, &g);
    return cdf + x * (g * 0.398942280f);
}

/* A convolution's fused activation (enum conv_act) on one sum; ReLU keeps NaN (torch.relu). */
__device__ static inline float cuda_activate(float v, int act) {
    return act == CONV_ACT_RELU ? (v <= 0.0f ? 0.0f : v) : act == CONV_ACT_GELU ? cuda_gelu(v) : v;
}

/* Per-channel partial sums for bias gradients and batch norm over a[N][C][HW] (and b, same
 * shape; both of activation type T, float or bf16, summed as floats): each channel is split
 * into S fixed runs of images (rows when HW is 1) and every (run, channel) sum is taken in a
 * fixed order, each thread's terms in float 16 at a time and those sums in double (reduce.cu),
 * so the result is deterministic and does not depend on the GPU. With
 * xhat = (b - mean[c]) * invstd[c], writes part[0][S][C] = the sum of the first quantity and
 * part[1][S][C] = the sum of the second:
 *   CHANNEL_SUM:           a, nothing (part[1] untouched)
 *   CHANNEL_SUM_SQUARE:    d, d * d with d = a - a[0][c][0] (the channel's first element)
 *   CHANNEL_SUM_XHAT:      a, a * xhat   (batch norm backward: a = dy, b = x)
 *   CHANNEL_SUM_XHAT_GELU: g, g * xhat with g = a * GELU'(xhat * gamma[c] + beta[c]) (batch
 *                          norm backward through a fused GELU)
 *   CHANNEL_SUM_PASSING:   a where b's max-pool winner byte has MAXPOOL_PASSES, else 0;
 *                          nothing (a pooled gradient through the ReLU before the pool)
 * part must hold 2 * cuda_channel_splits(N, C, HW) * C doubles. Returns S. */
enum channel_sum {
    CHANNEL_SUM,
    CHANNEL_SUM_SQUARE,
    CHANNEL_SUM_XHAT,
    CHANNEL_SUM_XHAT_GELU,
    CHANNEL_SUM_PASSING
};
/* What a partial-sum kernel reads besides a: b and a channel's statistics and affine (NULL where
 * the sum needs none). */
struct channel_inputs {
    const void *b; /* elements of a's type; bytes for CHANNEL_SUM_PASSING */
    const float *mean, *invstd, *gamma, *beta;
};
int cuda_channel_splits(int N, int C, int HW);
template <typename T>
int cuda_channel_partials(enum channel_sum what, const T *a, struct channel_inputs in, double *part, int N,
                          int C, int HW);
/* *a and *b summed over the threads of a one-dimensional block (blockDim.x a power of two, at
 * most CUDA_THREADS) by a tree in shared memory, in a fixed order: the totals in every thread's
 * *a and *b. Every thread of the block calls it. */
__device__ static inline void block_sum2(double *a, double *b) {
    __shared__ double r1[CUDA_THREADS], r2[CUDA_THREADS];
    r1[threadIdx.x] = *a, r2[threadIdx.x] = *b;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            r1[threadIdx.x] += r1[threadIdx.x + half], r2[threadIdx.x] += r2[threadIdx.x + half];
        __syncthreads();
    }
    *a = r1[0], *b = r2[0];
}

/* The totals over s of part[0][s][c] and, when two, part[1][s][c], by a block per channel c
 * (the finishing kernels run one, of TOTAL_THREADS): each thread sums every blockDim.x-th run
 * in order, then block_sum2. A thread per channel walking all S runs instead took 29 us a
 * batch-norm layer in NHWC, where S is in the hundreds. */
#define TOTAL_THREADS 128
__device__ static inline void channel_totals(const double *part, int S, int C, int c, int two, double *t1,
                                             double *t2) {
    double a = 0.0, b = 0.0;
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        a += part[(size_t)s * C + c];
        if (two) b += part[(size_t)(S + s) * C + c];
    }
    block_sum2(&a, &b);
    *t1 = a, *t2 = b;
}

/* out[c] = scale * sum over s of part[s][c] (float), the bias gradient from CHANNEL_SUM or
 * CHANNEL_SUM_PASSING partials (scale: a linear layer's output multiplier; 1 for a
 * convolution). */
void cuda_channel_reduce(const double *part, float *out, int S, int C, float scale);

/* The tables' precisions (backend.cu): float (cuda); bf16 activations (cuda-bf16: every op
 * reads and writes bf16, computes in float; the convolutions and linear layers run on bf16
 * tensor cores with float accumulation); bf16 products on float activations through bf16
 * copies of the operands (cuda-bf16 with CIFAR10_CUDA_BF16=copies, kept for comparisons). */
enum cuda_precision { CUDA_FLOAT, CUDA_BF16, CUDA_BF16_COPIES };
/* Each op file's entries of struct kernels for precision p (one file per op family):
 * conv.cu conv_workspace, conv_describe, conv_forward, conv_backward; linear.cu the linear
 * ops; elementwise.cu input_prepare, relu, gelu; maxpool.cu, batchnorm.cu, softmax_xent.cu
 * theirs; layout.cu flatten. */
void cuda_fill_conv(struct kernels *k, enum cuda_precision p);
void cuda_fill_linear(struct kernels *k, enum cuda_precision p);
void cuda_fill_elementwise(struct kernels *k, enum cuda_precision p);
void cuda_fill_maxpool(struct kernels *k, enum cuda_precision p);
void cuda_fill_batchnorm(struct kernels *k, enum cuda_precision p);
void cuda_fill_softmax_xent(struct kernels *k, enum cuda_precision p);
void cuda_fill_layout(struct kernels *k, enum cuda_precision p);
/* Destroys every convolution plan (shutdown; the device must be idle). */
void cuda_conv_release(void);
/* The float-only ops, the same in every table (elementwise.cu). */
void cuda_sgd_update(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                     const struct sgd_hyper *h, int nesterov);
void cuda_lookahead_update(float *p, float *ema, size_t n, const float *weight);
void cuda_scalars_set(float *dst, const float *v, int n);
/* The same in every table too (covariance.cu). */
void cuda_patch_covariance(const unsigned char *img, int n, const float *scale, const float *shift,
                           double *part);

/* Activation elements of type T (float or bf16) read into float and written from it, rounded
 * to nearest even: the only place an op's arithmetic meets the storage type. */
typedef __nv_bfloat16 bf16_t;
__device__ static inline float act_load(const float *p, size_t i) { return p[i]; }
__device__ static inline float act_load(const bf16_t *p, size_t i) { return __bfloat162float(p[i]); }
__device__ static inline void act_store(float *p, size_t i, float v) { p[i] = v; }
__device__ static inline void act_store(bf16_t *p, size_t i, float v) { p[i] = __float2bfloat16_rn(v); }

/* Packs: V consecutive activation elements moved by one access, into and out of float v[V].
 * V is 1 (act_load / act_store) or CUDA_PACK<T>, 16 bytes: 4 floats or 8 bf16 (one 2-byte
 * element a thread leaves most of a GPU's memory bandwidth unused). A 16-byte pack needs p + i
 * 16-byte aligned; cuda_pack chooses V for the buffers at hand. Stores round as act_store (to
 * nearest even). */
template <typename T> constexpr int CUDA_PACK = 16 / (int)sizeof(T);
template <int V, typename T> __device__ static inline void pack_load(const T *p, size_t i, float *v) {
    static_assert(V == 1 || V == CUDA_PACK<T>, "a pack is one element or 16 bytes");
    if constexpr (V == 1) v[0] = act_load(p, i);
    else if constexpr (sizeof(T) == sizeof(float)) {
        float4 a = *reinterpret_cast<const float4 *>(p + i);
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
    } else {
        uint4 u = *reinterpret_cast<const uint4 *>(p + i);
        __nv_bfloat162 h[4];
        memcpy(h, &u, sizeof u);
        for (int k = 0; k < 4; k++) {
            float2 f = __bfloat1622float2(h[k]);
            v[2 * k] = f.x, v[2 * k + 1] = f.y;
        }
    }
}
template <int V, typename T> __device__ static inline void pack_store(T *p, size_t i, const float *v) {
    static_assert(V == 1 || V == CUDA_PACK<T>, "a pack is one element or 16 bytes");
    if constexpr (V == 1) act_store(p, i, v[0]);
    else if constexpr (sizeof(T) == sizeof(float)) {
        *reinterpret_cast<float4 *>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
        __nv_bfloat162 h[4];
        for (int k = 0; k < 4; k++) h[k] = __floats2bfloat162_rn(v[2 * k], v[2 * k + 1]);
        uint4 u;
        memcpy(&u, h, sizeof u);
        *reinterpret_cast<uint4 *>(p + i) = u;
    }
}
/* The pack width for a pass over n elements of type T through the buffers a, b, c (NULL: not
 * used): CUDA_PACK<T> when n is a multiple of it and every buffer is 16-byte aligned, else 1. */
template <typename T>
static inline int cuda_pack(size_t n, const void *a, const void *b = nullptr, const void *c = nullptr) {
    const int V = CUDA_PACK<T>;
    uintptr_t bits = (uintptr_t)a | (uintptr_t)b | (uintptr_t)c;
    return n % V == 0 && bits % 16 == 0 ? V : 1;
}
/* The same for a[N][C][HW] whose elements' channels matter (channel_of): a pack must then hold
 * one channel's elements (HW a multiple of the width) or consecutive channels of one row (HW 1,
 * C a multiple: NHWC maps, linear outputs). *cstep: how far the channel moves from one element
 * of a pack to the next (0 or 1). */
template <typename T>
static inline int cuda_pack_channels(int C, int HW, int *cstep, const void *a, const void *b = nullptr,
                                     const void *c = nullptr) {
    const int V = CUDA_PACK<T>;
    *cstep = HW == 1;
    int fits = HW == 1 ? C % V == 0 : HW % V == 0;
    return fits ? cuda_pack<T>((size_t)C * HW, a, b, c) : 1;
}

/* The table entries' pointer types of an op file's fill for precision p: T for bf16
 * activations, float otherwise. */
#define CUDA_FILL_BY_TYPE(k, p, fill) ((p) == CUDA_BF16 ? fill<bf16_t>(k) : fill<float>(k))
/* The same for the files whose ops also depend on the precision itself (conv.cu, linear.cu):
 * fill<P, T> with the activation type T of precision P. */
#define CUDA_FILL_BY_PRECISION(k, p, fill)                                                                   \
    ((p) == CUDA_BF16          ? fill<CUDA_BF16, bf16_t>(k)                                                  \
     : (p) == CUDA_BF16_COPIES ? fill<CUDA_BF16_COPIES, float>(k)                                            \
                               : fill<CUDA_FLOAT, float>(k))

/* Shared by the op files, for T float and bf16 (elementwise.cu): cuda_relu_forward/backward
 * are the table's ReLU ops on T elements; cuda_bias_act: y[N][C][HW] += scale * b[C] (nothing
 * added when b is NULL), then the activation act (enum conv_act, cuda_activate) in the same
 * pass (NCHW indexing: an NHWC map is [N * HW][C][1]). */
template <typename T> void cuda_relu_forward(const void *x, void *y, size_t n);
template <typename T> void cuda_relu_backward(const void *y, const void *dy, void *dx, size_t n);
template <typename T> void cuda_bias_act(T *y, const float *b, float scale, int N, int C, int HW, int act);
/* The table's max pool forward on T elements (maxpool.cu), each element of x first taken
 * through cuda_bias_act's bias b (NULL: none) and activation act and rounded to T, as the pool of
 * cuda_bias_act's output would read it: conv.cu's conv_pool_forward, without that pass. */
template <typename T>
void cuda_maxpool_forward(const void *x, void *y, unsigned char *idx, const float *b, int act, int N, int C,
                          int H, int W, int k);
/* The table's max pool backward on T elements (maxpool.cu), for conv.cu's conv_pool_backward. */
template <typename T>
void cuda_maxpool_backward(const unsigned char *idx, const void *dy, void *dx, int N, int C, int H, int W,
                           int k, int relu);
/* dst[i] = src[i] rounded to bf16 (nearest even), and widened back (the bf16 copies). */
void cuda_to_bf16(const float *src, bf16_t *dst, size_t n);
void cuda_from_bf16(const bf16_t *src, float *dst, size_t n);
/* A filter for cuDNN: dst = w[K][C][kk] as T (float, or bf16 rounded to nearest even),
 * reordered to [K][kk][C] when krsc (NHWC convolutions); and a filter gradient back from that
 * form to dw[K][C][kk]. */
template <typename T> void cuda_filter_pack(const float *w, T *dst, int K, int C, int kk, int krsc);
/* Where element j of a filter's KRSC form [K][kk][C] comes from in w[K][C][kk] (the packing of
 * cuda_filter_pack and of the ready filters, filters.cu); I: the index type. */
template <typename I> __device__ static inline I krsc_source(I j, I C, I kk) {
    I k = j / (kk * C), r = j - k * kk * C, s = r / C, c = r - s * C;
    return (k * C + c) * kk + s;
}
/* The ready filters (filters.cu; kernels.h conv_filters_create, _ready, _destroy; bf16: the
 * set's form). cuda_filter_ready returns w's ready form (shape K, C, k) from a live current
 * set of that form and the current layout, else NULL; cuda_filters_touched ends the currency
 * of the sets with a filter in [p, p + bytes) (an upload or update wrote there);
 * cuda_filters_release frees the sets left (shutdown). */
struct kernels_filters *cuda_filters_create(int bf16, int n, const struct conv_shape *s,
                                            const float *const *w);
void cuda_filters_ready(struct kernels_filters *f);
void cuda_filters_destroy(struct kernels_filters *f);
const void *cuda_filter_ready(int bf16, const float *w, int K, int C, int k);
void cuda_filters_touched(const void *p, size_t bytes);
/* At a capture's end: stops with a message if the capture wrote over a set's filter (an update)
 * and did not make the set ready after it, for the graph would change the filters at each
 * replay and leave the ready forms as they were. */
void cuda_filters_capture_end(void);
void cuda_filters_release(void);
template <typename T> void cuda_filter_unpack(const T *src, float *dw, int K, int C, int kk, int krsc);

#endif
