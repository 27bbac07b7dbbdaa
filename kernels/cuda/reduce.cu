/* Per-channel partial sums (see cuda.h), double accumulators, reduced in a fixed order:
 *   HW > 1 (NCHW maps): grid (S, C), one block per (run of images, channel), the block's
 *     threads along the run's elements, then a shared-memory tree;
 *   HW == 1 (rows: NHWC maps as [N*HW][C], linear outputs): grid (S, C / 32), a block of 32
 *     channels x ROW_LANES rows, so a warp reads 32 adjacent channels of one row; each
 *     thread sums every ROW_LANES-th row of the run, then the lanes are added in order.
 * Either way about 1024 blocks, enough to fill any GPU. */
#include "cuda.h"

#define ROW_LANES 8

/* A channel's constants for the sums: its mean and invstd, and the batch norm's scale and shift
 * (z = x * scale + shift, as its forward computes z). */
struct channel_consts {
    float mean, invstd, scale, shift;
};

__device__ static struct channel_consts consts_of(enum channel_sum what, struct channel_inputs in, int c) {
    struct channel_consts k = {0.0f, 0.0f, 0.0f, 0.0f};
    if (what == CHANNEL_SUM_XHAT || what == CHANNEL_SUM_XHAT_GELU)
        k.mean = in.mean[c], k.invstd = in.invstd[c];
    if (what == CHANNEL_SUM_XHAT_GELU)
        k.scale = in.gamma[c] * k.invstd, k.shift = in.beta[c] - k.mean * k.scale;
    return k;
}

/* Element `at`'s two quantities (cuda.h) added to s1 and s2; b is of a's type. */
template <typename T>
__device__ static void add_terms(enum channel_sum what, const T *a, const T *b, uint32_t at,
                                 struct channel_consts k, double *s1, double *s2) {
    float v = act_load(a, at);
    if (what == CHANNEL_SUM_XHAT_GELU) v *= cuda_gelu_slope(act_load(b, at) * k.scale + k.shift);
    *s1 += v;
    if (what == CHANNEL_SUM_SQUARE) *s2 += (double)v * v;
    else if (what != CHANNEL_SUM) *s2 += (double)v * ((act_load(b, at) - k.mean) * k.invstd);
}

/* Where run s of `run` images (rows) starts, or N past the end: runs of equal length, the last
 * ones shorter or empty, so no block divides to find its images. */
__device__ static uint32_t run_start(int s, uint32_t run, int N) {
    uint32_t at = (uint32_t)s * run;
    return at < (uint32_t)N ? at : (uint32_t)N;
}

int cuda_channel_splits(int N, int C, int HW) {
    int s = HW > 1 ? (1024 + C - 1) / C : 1024 / ((C + 31) / 32);
    s = s < 1 ? 1 : s;
    return s < N ? s : N;
}

/* hw divides by HW; a[N][C][HW] has fewer than 2^31 elements (cuda_channel_of checks). */
template <typename T>
__global__ static void partials_kernel(enum channel_sum what, const T *a, struct channel_inputs in,
                                       double *part, int N, int C, uint32_t run, struct fastdiv hw) {
    int s = blockIdx.x, S = gridDim.x, c = blockIdx.y;
    uint32_t HW = hw.d;
    uint32_t n0 = run_start(s, run, N), n1 = run_start(s + 1, run, N);
    uint32_t count = (n1 - n0) * HW;
    double s1 = 0.0, s2 = 0.0;
    struct channel_consts k = consts_of(what, in, c);
    for (uint32_t t = threadIdx.x; t < count; t += blockDim.x) {
        uint32_t image = fastdiv_div(t, hw);
        uint32_t at = ((n0 + image) * (uint32_t)C + (uint32_t)c) * HW + (t - image * HW);
        add_terms(what, a, (const T *)in.b, at, k, &s1, &s2);
    }
    block_sum2(&s1, &s2);
    if (threadIdx.x == 0) {
        part[(size_t)s * C + c] = s1;
        if (what != CHANNEL_SUM) part[(size_t)(S + s) * C + c] = s2;
    }
}

/* a[N][C] (rows); block (32, ROW_LANES): threadIdx.x the channel within the block's 32. */
template <typename T>
__global__ static void row_partials_kernel(enum channel_sum what, const T *a, struct channel_inputs in,
                                           double *part, int N, int C, uint32_t run) {
    int s = blockIdx.x, S = gridDim.x, c = blockIdx.y * 32 + threadIdx.x, lane = threadIdx.y;
    uint32_t n0 = run_start(s, run, N), n1 = run_start(s + 1, run, N);
    double s1 = 0.0, s2 = 0.0;
    if (c < C) {
        struct channel_consts k = consts_of(what, in, c);
        for (uint32_t n = n0 + lane; n < n1; n += ROW_LANES)
            add_terms(what, a, (const T *)in.b, n * (uint32_t)C + (uint32_t)c, k, &s1, &s2);
    }
    __shared__ double r1[ROW_LANES][32], r2[ROW_LANES][32];
    r1[lane][threadIdx.x] = s1, r2[lane][threadIdx.x] = s2;
    __syncthreads();
    if (lane == 0 && c < C) {
        for (int l = 1; l < ROW_LANES; l++) s1 += r1[l][threadIdx.x], s2 += r2[l][threadIdx.x];
        part[(size_t)s * C + c] = s1;
        if (what != CHANNEL_SUM) part[(size_t)(S + s) * C + c] = s2;
    }
}

template <typename T>
int cuda_channel_partials(enum channel_sum what, const T *a, struct channel_inputs in, double *part, int N,
                          int C, int HW) {
    int S = cuda_channel_splits(N, C, HW);
    uint32_t run = ((uint32_t)N + (uint32_t)S - 1) / (uint32_t)S;
    struct fastdiv hw = cuda_channel_of(N, C, HW).hw; /* (also checks the size) */
    if (HW == 1)
        row_partials_kernel<T>
            <<<dim3(S, (C + 31) / 32), dim3(32, ROW_LANES), 0, cuda_stream()>>>(what, a, in, part, N, C, run);
    else partials_kernel<T><<<dim3(S, C), CUDA_THREADS, 0, cuda_stream()>>>(what, a, in, part, N, C, run, hw);
    LAUNCH_CHECK();
    return S;
}

template int cuda_channel_partials<float>(enum channel_sum, const float *, struct channel_inputs, double *,
                                          int, int, int);
template int cuda_channel_partials<bf16_t>(enum channel_sum, const bf16_t *, struct channel_inputs, double *,
                                           int, int, int);

/* out[c] = scale * the sum, scaled in double before the one rounding to float; a block per
 * channel. */
__global__ static void reduce_kernel(const double *part, float *out, int S, int C, float scale) {
    double sum, unused;
    channel_totals(part, S, C, blockIdx.x, 0, &sum, &unused);
    if (threadIdx.x == 0) out[blockIdx.x] = (float)(sum * scale);
}

void cuda_channel_reduce(const double *part, float *out, int S, int C, float scale) {
    reduce_kernel<<<C, TOTAL_THREADS, 0, cuda_stream()>>>(part, out, S, C, scale);
    LAUNCH_CHECK();
}
