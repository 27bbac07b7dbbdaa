/* k x k max pool with stride k (nn.MaxPool2d(k), floor): y[N][C][H/k][W/k] from x[N][C][H][W]
 * in the backend's layout (NCHW, or NHWC: y[N][H/k][W/k][C]), one thread per output element,
 * or in NHWC per pack of adjacent channels (16 bytes, cuda.h) where C and the buffers allow. NaN propagates
 * as in PyTorch: an element replaces the maximum when it is larger or NaN, so dy goes to the last NaN of a
 * window, else to its first maximum in row-major order (strict '>'), as cpu/maxpool.c does.
 *
 * The forward records each window's winner in a byte (idx, kernels.h), so the backward reads
 * that byte instead of the window's k*k inputs.
 *
 * Backward: windows do not overlap (stride = k), so the thread of a window writes all k*k of
 * its dx elements, dy at the winner and 0 elsewhere, with no atomics. Rows and columns past
 * the last whole window (H % k, W % k of them: the 31, 15 and 7 maps of airbench94) belong to
 * no window; the threads of the last window column and row write their zeros beside and below
 * them, so every dx element is written once and no pass zeroes dx first. Not one thread per
 * dx element instead: each would rescan its whole window to learn whether it holds the maximum
 * (k*k reads per element).
 *
 * Indices are 32-bit, divided by fastdiv.h's dividers (x has fewer than 2^31 elements). */
#include "cuda.h"

/* The pool's shape for the kernels: x[planes][H][W] (NCHW; a plane per image and channel) or
 * x[N][H][W][C] (NHWC; a plane per image, its elements C apart), windows k x k; dividers by
 * Wo = W / k, Ho = H / k and, in NHWC, C; x has fewer than 2^31 elements (checked). */
struct pool {
    uint32_t H, W, k, C, step; /* step: 1 in NCHW, C in NHWC (the distance of two columns) */
    int nhwc;
    struct fastdiv wo, ho, c;
};

static struct pool pool_shape(int N, int C, int H, int W, int k) {
    CHECK(k >= 1 && C >= 1 && H >= k && W >= k &&
          (uint64_t)N * C * H * W < (uint64_t)1 << 31); /* a window at least */
    struct pool p;
    p.H = (uint32_t)H, p.W = (uint32_t)W, p.k = (uint32_t)k, p.C = (uint32_t)C;
    p.nhwc = cuda_nhwc();
    p.step = p.nhwc ? p.C : 1;
    p.wo = fastdiv_make((uint32_t)(W / k));
    p.ho = fastdiv_make((uint32_t)(H / k));
    p.c = fastdiv_make((uint32_t)C);
    return p;
}

/* Output o of the pool ([plane][i][j] in NCHW, [n][i][j][c] in NHWC): its window's row i and
 * column j among the windows, the index in x of its top-left element, and its channel c. */
struct window {
    uint32_t i, j, at, c;
};

__device__ static struct window window_of(uint32_t o, struct pool p) {
    struct window w;
    uint32_t q = o, c = 0; /* q: the output's place among its plane's outputs and the planes */
    if (p.nhwc) q = fastdiv_div(o, p.c), c = o - q * p.C;
    uint32_t row = fastdiv_div(q, p.wo), plane = fastdiv_div(row, p.ho); /* row = plane * Ho + i */
    w.j = q - row * p.wo.d;
    w.i = row - plane * p.ho.d;
    w.at = (plane * p.H * p.W + w.i * p.k * p.W + w.j * p.k) * p.step + c;
    w.c = p.nhwc ? c : plane - fastdiv_div(plane, p.c) * p.C;
    return w;
}

/* The bias and activation a convolution's output gets before its pool (conv_pool_forward):
 * b[c] (b not NULL) added, then act (cuda_activate), each value rounded to T as bias_act would
 * store it, so the maxima and winners are those of the pool of bias_act's output. */
struct pool_act {
    const float *b;
    int act;
};

/* v through the pool's activation, bias the channel's b[c] (read once per window: pool_bias). */
template <typename T> __device__ static float activated(float v, struct pool_act a, float bias) {
    if (!a.b && a.act == CONV_ACT_NONE) return v;
    v = cuda_activate(a.b ? v + bias : v, a.act);
    if constexpr (sizeof(T) == 2) v = __bfloat162float(__float2bfloat16_rn(v));
    return v;
}

template <int V> __device__ static void pool_bias(struct pool_act a, uint32_t c, float *bias) {
    for (int e = 0; e < V; e++) bias[e] = a.b ? a.b[c + e] : 0.0f;
}

/* The window size: K where it is a template argument (2 and 3, the networks' pools: the loops
 * unroll and a window's loads are all issued before its comparisons), else p.k (K = 0). */
template <int K> __device__ static int pool_k(struct pool p) { return K ? K : (int)p.k; }

/* Window element q (row-major) of the V channels, v[V], into the running maxima m and their
 * offsets best (window_max). */
template <int V, typename T>
__device__ static void window_take(float *v, int q, struct pool_act pa, const float *bias, float *m,
                                   int *best) {
    for (int e = 0; e < V; e++) {
        v[e] = activated<T>(v[e], pa, bias[e]);
        if (best[e] < 0 || v[e] > m[e] || isnan(v[e])) m[e] = v[e], best[e] = q;
    }
}

/* The maxima of the k x k windows of the V channels (from channel w.c) at x + w.at (a pack:
 * cuda.h; rows W * step apart, columns step apart), each value taken through pa first, in m[V]
 * and, in best[V], the row-major offset r * k + c of each one's first occurrence; NaN and the
 * last NaN's offset where a window has one. */
template <int V, int K, typename T>
__device__ static void window_max(const T *x, struct window w, struct pool p, struct pool_act pa, float *m,
                                  int *best) {
    const int k = pool_k<K>(p);
    float bias[V];
    pool_bias<V>(pa, w.c, bias);
    for (int e = 0; e < V; e++) m[e] = -INFINITY, best[e] = -1;
    if constexpr (K > 0) {
        float v[K * K][V];
#pragma unroll
        for (int q = 0; q < K * K; q++) pack_load<V>(x, w.at + ((q / K) * p.W + q % K) * p.step, v[q]);
#pragma unroll
        for (int q = 0; q < K * K; q++) window_take<V, T>(v[q], q, pa, bias, m, best);
    } else {
        for (int r = 0; r < k; r++)
            for (int c = 0; c < k; c++) {
                float v[V];
                pack_load<V>(x, w.at + (r * p.W + c) * p.step, v);
                window_take<V, T>(v, r * k + c, pa, bias, m, best);
            }
    }
}

/* The winner bytes of outputs o .. o + V - 1 (kernels.h): one aligned store of V bytes. */
template <int V>
__device__ static void store_winners(unsigned char *idx, uint32_t o, const float *m, const int *best) {
    unsigned long long packed = 0;
    for (int e = 0; e < V; e++)
        packed |= (unsigned long long)(best[e] | (m[e] <= 0.0f ? 0 : MAXPOOL_PASSES)) << (8 * e);
    if constexpr (V == 8) *(unsigned long long *)(idx + o) = packed;
    else if constexpr (V == 4) *(uint32_t *)(idx + o) = (uint32_t)packed;
    else
        for (int e = 0; e < V; e++) idx[o + e] = (unsigned char)(packed >> (8 * e));
}

/* Activations of type T (cuda.h), V channels a thread (V > 1 in NHWC only); a maximum is one of
 * x's values, so storing it loses nothing. The winners go to idx unless it is NULL. */
template <typename T, int V, int K>
__global__ static void maxpool_forward_kernel(const T *x, T *y, unsigned char *idx, uint32_t total,
                                              struct pool p, struct pool_act pa) {
    GRID_STRIDE32(j, total / V) {
        uint32_t o = j * V;
        float m[V];
        int best[V];
        window_max<V, K>(x, window_of(o, p), p, pa, m, best);
        pack_store<V>(y, o, m);
        if (idx) store_winners<V>(idx, o, m, best);
    }
}

/* The zeros of dx that no window covers, written by the windows of the last column (the
 * W % k columns to their right) and of the last row (the H % k rows below them, and below the
 * right-hand columns for the corner window). */
template <int V, typename T> __device__ static void border_zero(T *dx, struct window w, struct pool p) {
    uint32_t right = w.j + 1 == p.wo.d ? p.W - p.wo.d * p.k : 0; /* columns past this window's row */
    uint32_t below = w.i + 1 == p.ho.d ? p.H - p.ho.d * p.k : 0; /* rows past this window's column */
    float zero[V];
    for (int e = 0; e < V; e++) zero[e] = 0.0f;
    for (uint32_t r = 0; r < p.k + below; r++)
        for (uint32_t c = r < p.k ? p.k : 0; c < p.k + right; c++)
            pack_store<V>(dx, w.at + (r * p.W + c) * p.step, zero);
}

/* The winner bytes of outputs o .. o + V - 1: one aligned load of V bytes. */
template <int V> __device__ static void winners_load(const unsigned char *idx, uint32_t o, int *b) {
    unsigned long long bytes;
    if constexpr (V == 8) bytes = *(const unsigned long long *)(idx + o);
    else if constexpr (V == 4) bytes = *(const uint32_t *)(idx + o);
    else bytes = idx[o];
    for (int e = 0; e < V; e++) b[e] = (int)((bytes >> (8 * e)) & 0xff);
}

/* dx from the winners idx the forward recorded: a window's thread writes its k * k elements. */
template <typename T, int V, int K>
__global__ static void maxpool_backward_kernel(const unsigned char *idx, const T *dy, T *dx, uint32_t total,
                                               struct pool p, int relu) {
    const int k = pool_k<K>(p);
    GRID_STRIDE32(j, total / V) {
        uint32_t o = j * V;
        struct window w = window_of(o, p);
        float g[V], out[V];
        int best[V];
        pack_load<V>(dy, o, g);
        winners_load<V>(idx, o, best);
        for (int e = 0; e < V; e++) {
            if (relu && !(best[e] & MAXPOOL_PASSES)) g[e] = 0.0f; /* through the ReLU before the pool */
            best[e] &= ~MAXPOOL_PASSES;
        }
#pragma unroll
        for (int r = 0; r < k; r++)
#pragma unroll
            for (int c = 0; c < k; c++) {
                for (int e = 0; e < V; e++) out[e] = r * k + c == best[e] ? g[e] : 0.0f;
                pack_store<V>(dx, w.at + (r * p.W + c) * p.step, out);
            }
        border_zero<V>(dx, w, p);
    }
}

/* One of a kernel's instances <..., K> over n threads: k2 or k3 where k is 2 or 3 (pool_k),
 * else k0. */
template <typename F, typename... A> static void launch_by_k(int k, size_t n, F k2, F k3, F k0, A... args) {
    if (k == 2) cuda_launch(k2, n, args...);
    else if (k == 3) cuda_launch(k3, n, args...);
    else cuda_launch(k0, n, args...);
}

/* The pack width: V channels a thread in NHWC where C and the buffers allow, else 1. */
template <typename T>
static int pool_pack(struct pool p, const void *a, const void *b, const void *c = nullptr) {
    int cstep;
    return p.nhwc ? cuda_pack_channels<T>((int)p.C, 1, &cstep, a, b, c) : 1;
}

template <typename T>
void cuda_maxpool_forward(const void *x, void *y, unsigned char *idx, const float *b, int act, int N, int C,
                          int H, int W, int k) {
    if (H < k || W < k) return; /* no window: y is empty */
    CHECK(k * k <= MAXPOOL_PASSES);
    struct pool p = pool_shape(N, C, H, W, k);
    struct pool_act pa = {b, act};
    uint32_t total = (uint32_t)N * C * (H / k) * (W / k);
    const int V = CUDA_PACK<T>;
    if (pool_pack<T>(p, x, y, idx) > 1) /* idx: V-byte stores */
        launch_by_k(k, total / V, maxpool_forward_kernel<T, V, 2>, maxpool_forward_kernel<T, V, 3>,
                    maxpool_forward_kernel<T, V, 0>, (const T *)x, (T *)y, idx, total, p, pa);
    else
        launch_by_k(k, total, maxpool_forward_kernel<T, 1, 2>, maxpool_forward_kernel<T, 1, 3>,
                    maxpool_forward_kernel<T, 1, 0>, (const T *)x, (T *)y, idx, total, p, pa);
}

template <typename T>
static void maxpool_forward(const void *x, void *y, unsigned char *idx, int N, int C, int H, int W, int k) {
    cuda_maxpool_forward<T>(x, y, idx, NULL, CONV_ACT_NONE, N, C, H, W, k);
}

template <typename T>
void cuda_maxpool_backward(const unsigned char *idx, const void *dy, void *dx, int N, int C, int H, int W,
                           int k, int relu) {
    if (H < k || W < k) { /* no window: dx is all border (all bits zero is 0.0 in float and bf16) */
        CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)N * C * H * W * sizeof(T), cuda_stream()));
        return;
    }
    struct pool p = pool_shape(N, C, H, W, k);
    uint32_t total = (uint32_t)N * C * (H / k) * (W / k);
    const int V = CUDA_PACK<T>;
    if (pool_pack<T>(p, dy, dx, idx) > 1) /* idx: V-byte loads */
        launch_by_k(k, total / V, maxpool_backward_kernel<T, V, 2>, maxpool_backward_kernel<T, V, 3>,
                    maxpool_backward_kernel<T, V, 0>, idx, (const T *)dy, (T *)dx, total, p, relu);
    else
        launch_by_k(k, total, maxpool_backward_kernel<T, 1, 2>, maxpool_backward_kernel<T, 1, 3>,
                    maxpool_backward_kernel<T, 1, 0>, idx, (const T *)dy, (T *)dx, total, p, relu);
}

template <typename T> static void fill(struct kernels *k) {
    k->maxpool_forward = maxpool_forward<T>;
    k->maxpool_backward = cuda_maxpool_backward<T>;
}

void cuda_fill_maxpool(struct kernels *k, enum cuda_precision p) { CUDA_FILL_BY_TYPE(k, p, fill); }

template void cuda_maxpool_forward<float>(const void *, void *, unsigned char *, const float *, int, int, int,
                                          int, int, int);
template void cuda_maxpool_forward<bf16_t>(const void *, void *, unsigned char *, const float *, int, int,
                                           int, int, int, int);
template void cuda_maxpool_backward<float>(const unsigned char *, const void *, void *, int, int, int, int,
                                           int, int);
template void cuda_maxpool_backward<bf16_t>(const unsigned char *, const void *, void *, int, int, int, int,
                                            int, int);
