/* Per-channel partial sums (see cuda.h), reduced in a fixed order:
 *   HW > 1 (NCHW maps): grid (S, C), one block per (run of images, channel), the block's
 *     threads along the run's elements, then a shared-memory tree;
 *   HW == 1 (rows: NHWC maps as [N*HW][C], linear outputs): grid (S, C / 32), a block of 32
 *     channels x ROW_LANES lanes of rows (row_partials_kernel), each thread a pack of
 *     channels (16 bytes where the buffers allow); each thread sums every ROW_LANES-th row
 *     of the run, then the lanes are added in order. The lanes do not depend on the pack,
 *     so the sums' order, and their bits, do not depend on the buffers' alignment.
 * Either way about 1024 blocks, enough to fill any GPU. Each thread adds its terms in float,
 * FLUSH_TERMS at a time, and carries each such sum into a double (struct thread_sums): the
 * error stays that of short float sums under a double total, and nearly every addition is a
 * float one. On GPUs whose double arithmetic runs at 1/64 of float (A10G, L4, L40S) a double
 * addition per term would take longer than reading the term. */
#include "cuda.h"

#define ROW_LANES   32 /* a block: 32 / V packs of V channels x ROW_LANES (at most 1024 threads) */
#define FLUSH_TERMS 16 /* terms a thread adds in float before carrying their sum into double */

/* A channel's constants for the sums: its first element (CHANNEL_SUM_SQUARE's shift), its
 * mean and invstd, and the batch norm's scale and shift (z = x * scale + shift, as its forward
 * computes z). */
struct channel_consts {
    float first, mean, invstd, scale, shift;
};

/* Channel c's constants; a is [N][C][HW] (HW 1 for rows), so its first element is a[c * HW]. */
template <typename T>
__device__ static struct channel_consts consts_of(enum channel_sum what, const T *a, struct channel_inputs in,
                                                  int c, uint32_t HW) {
    struct channel_consts k = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    if (what == CHANNEL_SUM_SQUARE) k.first = act_load(a, (size_t)c * HW);
    if (what == CHANNEL_SUM_XHAT || what == CHANNEL_SUM_XHAT_GELU)
        k.mean = in.mean[c], k.invstd = in.invstd[c];
    if (what == CHANNEL_SUM_XHAT_GELU)
        k.scale = in.gamma[c] * k.invstd, k.shift = in.beta[c] - k.mean * k.scale;
    return k;
}

/* Whether each of the V winner bytes at w + at has MAXPOOL_PASSES: one load of V bytes (at a
 * multiple of V where V > 1). */
template <int V> __device__ static void passing_load(const unsigned char *w, uint32_t at, bool *pass) {
    unsigned long long bytes;
    if constexpr (V == 8) bytes = *(const unsigned long long *)(w + at);
    else if constexpr (V == 4) bytes = *(const uint32_t *)(w + at);
    else bytes = w[at];
    for (int e = 0; e < V; e++) pass[e] = (bytes >> (8 * e)) & MAXPOOL_PASSES;
}

/* A thread's two sums of each of V channels: up to FLUSH_TERMS terms in f, then carried into
 * d[0][0..V-1] and d[1][0..V-1], doubles the caller keeps (shared memory in row_partials_kernel,
 * so that they hold no registers). CHANNEL_SUM_SQUARE's float terms are x - shift[e], the
 * chunk's own first x, carried over to the channel's shift in double (sums_flush), so that
 * rounding in float never meets a difference larger than the chunk's spread: a channel of
 * zeros whose first element is large (a ReLU's output) would otherwise add the same rounded
 * square n times and lose the variance to cancellation. */
template <int V> struct thread_sums {
    float f[2][V], shift[V];
    double *d[2];
    int terms;
};

/* Starts sums carried into d0[0..V-1] and d1[0..V-1], which it zeroes. */
template <int V> __device__ static void sums_init(struct thread_sums<V> *t, double *d0, double *d1) {
    for (int e = 0; e < V; e++) t->f[0][e] = t->f[1][e] = t->shift[e] = 0.0f, d0[e] = d1[e] = 0.0;
    t->d[0] = d0, t->d[1] = d1, t->terms = 0;
}

/* The float sums carried into the double ones (at the end, and every FLUSH_TERMS terms). For
 * CHANNEL_SUM_SQUARE, with o = shift - k.first and n terms: sum (x - k.first) = s + n o and
 * sum (x - k.first)^2 = q + 2 o s + n o^2, s and q the chunk's sums about its shift. */
template <int V>
__device__ static void sums_flush(enum channel_sum what, const struct channel_consts *k,
                                  struct thread_sums<V> *t) {
    if (t->terms == 0) return;
    for (int e = 0; e < V; e++) {
        double s = t->f[0][e], q = t->f[1][e];
        if (what == CHANNEL_SUM_SQUARE) {
            double o = (double)t->shift[e] - k[e].first, n = t->terms;
            q += o * (2.0 * s + n * o);
            s += n * o;
        }
        t->d[0][e] += s, t->d[1][e] += q;
        t->f[0][e] = t->f[1][e] = 0.0f;
    }
    t->terms = 0;
}

/* The V elements at a + at (a pack: cuda.h; channels k[0..V-1]) added to their sums (cuda.h's
 * quantities); b is of a's type, or bytes (CHANNEL_SUM_PASSING). */
template <int V, typename T>
__device__ static void add_terms(enum channel_sum what, const T *a, const void *b, uint32_t at,
                                 const struct channel_consts *k, struct thread_sums<V> *t) {
    float va[V], vb[V];
    bool pass[V];
    pack_load<V>(a, at, va);
    if (what == CHANNEL_SUM_XHAT || what == CHANNEL_SUM_XHAT_GELU) pack_load<V>((const T *)b, at, vb);
    if (what == CHANNEL_SUM_PASSING) passing_load<V>((const unsigned char *)b, at, pass);
    for (int e = 0; e < V; e++) {
        float v = va[e];
        if (what == CHANNEL_SUM_PASSING && !pass[e]) v = 0.0f;
        if (what == CHANNEL_SUM_XHAT_GELU) v *= cuda_gelu_slope(vb[e] * k[e].scale + k[e].shift);
        if (what == CHANNEL_SUM_SQUARE) {
            if (t->terms == 0) t->shift[e] = v;
            v -= t->shift[e];
        }
        t->f[0][e] += v;
        if (what == CHANNEL_SUM_SQUARE) t->f[1][e] += v * v;
        else if (what == CHANNEL_SUM_XHAT || what == CHANNEL_SUM_XHAT_GELU)
            t->f[1][e] += v * ((vb[e] - k[e].mean) * k[e].invstd);
    }
    if (++t->terms == FLUSH_TERMS) sums_flush(what, k, t);
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
    double s1, s2;
    struct thread_sums<1> t;
    sums_init(&t, &s1, &s2);
    struct channel_consts k = consts_of(what, a, in, c, HW);
    for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
        uint32_t image = fastdiv_div(i, hw);
        uint32_t at = ((n0 + image) * (uint32_t)C + (uint32_t)c) * HW + (i - image * HW);
        add_terms<1>(what, a, in.b, at, &k, &t);
    }
    sums_flush(what, &k, &t);
    block_sum2(&s1, &s2);
    if (threadIdx.x == 0) {
        part[(size_t)s * C + c] = s1;
        if (what != CHANNEL_SUM && what != CHANNEL_SUM_PASSING) part[(size_t)(S + s) * C + c] = s2;
    }
}

/* a[N][C] (rows): a block covers 32 channels as 32 / V packs of V channels (cuda.h; V = 1: a
 * warp reads 32 adjacent channels of one row) times ROW_LANES lanes; each thread sums every
 * ROW_LANES-th row of the run, then each channel's lanes are added in order. The sum is a template parameter
 * so that each instance holds only the registers its sum needs (a pack of 8 keeps 16 float sums, and 8
 * channels' constants for the xhat sums). */
template <typename T, int V, enum channel_sum what>
__global__ static void __launch_bounds__(32 / V * ROW_LANES)
    row_partials_kernel(const T *a, struct channel_inputs in, double *part, int N, int C, uint32_t run) {
    constexpr int P = 32 / V, L = ROW_LANES; /* packs per 32 channels, lanes */
    int s = blockIdx.x, S = gridDim.x, pack = threadIdx.x % P, lane = threadIdx.x / P;
    int c0 = blockIdx.y * 32 + pack * V; /* the pack's first channel (C is a multiple of V) */
    uint32_t n0 = run_start(s, run, N), n1 = run_start(s + 1, run, N);
    __shared__ double r[2][L][32];
    struct thread_sums<V> t;
    sums_init(&t, &r[0][lane][pack * V], &r[1][lane][pack * V]);
    if (c0 < C) {
        struct channel_consts k[V];
        for (int e = 0; e < V; e++) k[e] = consts_of(what, a, in, c0 + e, 1);
        for (uint32_t n = n0 + lane; n < n1; n += L)
            add_terms<V>(what, a, in.b, n * (uint32_t)C + (uint32_t)c0, k, &t);
        sums_flush(what, k, &t);
    }
    __syncthreads();
    int q = threadIdx.x / 32, cc = threadIdx.x % 32, c = blockIdx.y * 32 + cc; /* a thread per sum */
    if (q < 2 && c < C && (q == 0 || (what != CHANNEL_SUM && what != CHANNEL_SUM_PASSING))) {
        double sum = r[q][0][cc];
        for (int l = 1; l < L; l++) sum += r[q][l][cc];
        part[(size_t)(q * S + s) * C + c] = sum;
    }
}

/* row_partials_kernel<T, V, what> on grid (S, C / 32 rounded up), chosen by what at run time. */
template <typename T, int V, enum channel_sum what>
static void rows_launch(dim3 grid, const T *a, struct channel_inputs in, double *part, int N, int C,
                        uint32_t run) {
    row_partials_kernel<T, V, what><<<grid, 32 / V * ROW_LANES, 0, cuda_stream()>>>(a, in, part, N, C, run);
}
template <typename T, int V>
static void rows_partials(enum channel_sum what, dim3 grid, const T *a, struct channel_inputs in,
                          double *part, int N, int C, uint32_t run) {
    static void (*const by_sum[])(dim3, const T *, struct channel_inputs, double *, int, int, uint32_t) = {
        rows_launch<T, V, CHANNEL_SUM>, rows_launch<T, V, CHANNEL_SUM_SQUARE>,
        rows_launch<T, V, CHANNEL_SUM_XHAT>, rows_launch<T, V, CHANNEL_SUM_XHAT_GELU>,
        rows_launch<T, V, CHANNEL_SUM_PASSING>};
    CHECK((unsigned)what < sizeof by_sum / sizeof by_sum[0]);
    by_sum[what](grid, a, in, part, N, C, run);
}

template <typename T>
int cuda_channel_partials(enum channel_sum what, const T *a, struct channel_inputs in, double *part, int N,
                          int C, int HW) {
    int S = cuda_channel_splits(N, C, HW);
    uint32_t run = ((uint32_t)N + (uint32_t)S - 1) / (uint32_t)S;
    struct fastdiv hw = cuda_channel_of(N, C, HW).hw; /* (also checks the size) */
    int cstep;
    dim3 rows(S, (C + 31) / 32);
    if (HW == 1 && cuda_pack_channels<T>(C, 1, &cstep, a, in.b) > 1)
        rows_partials<T, CUDA_PACK<T>>(what, rows, a, in, part, N, C, run);
    else if (HW == 1) rows_partials<T, 1>(what, rows, a, in, part, N, C, run);
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
