/* Element-wise ops: ReLU, GELU, bias (+ ReLU) after a convolution or linear layer, the SGD and
 * lookahead updates over flat parameter buffers, and the input pipeline (crop/flip +
 * normalisation of uint8 images). One thread per element or per pack of elements (cuda.h),
 * grid-stride loops (a grid may be capped); size_t indices, except where an element's channel is needed:
 * there 32-bit indices and fastdiv.h's division (tensors of fewer than 2^31 elements, checked). */
#include "cuda.h"

/* Activations of type T (float or bf16, cuda.h's act_load / act_store), V elements a thread
 * (cuda.h's packs; n a multiple of V): out = f(a) (map_kernel) or f(a, b) (map2_kernel), per
 * element in float. In place (out == a or b) is allowed: each thread reads its packs before
 * writing. */
template <typename T, int V, typename F>
__global__ static void map_kernel(const T *a, T *out, size_t n, F f) {
    GRID_STRIDE(j, n / V) {
        float v[V];
        pack_load<V>(a, j * V, v);
        for (int e = 0; e < V; e++) v[e] = f(v[e]);
        pack_store<V>(out, j * V, v);
    }
}

template <typename T, int V, typename F>
__global__ static void map2_kernel(const T *a, const T *b, T *out, size_t n, F f) {
    GRID_STRIDE(j, n / V) {
        float u[V], v[V];
        pack_load<V>(a, j * V, u);
        pack_load<V>(b, j * V, v);
        for (int e = 0; e < V; e++) v[e] = f(u[e], v[e]);
        pack_store<V>(out, j * V, v);
    }
}

/* The two over n elements: packed where n and the buffers allow (cuda_pack), else one element
 * a thread. */
template <typename T, typename F> static void map(const void *a, void *out, size_t n, F f) {
    if (cuda_pack<T>(n, a, out) > 1)
        cuda_launch(map_kernel<T, CUDA_PACK<T>, F>, n / CUDA_PACK<T>, (const T *)a, (T *)out, n, f);
    else cuda_launch(map_kernel<T, 1, F>, n, (const T *)a, (T *)out, n, f);
}
template <typename T, typename F> static void map2(const void *a, const void *b, void *out, size_t n, F f) {
    if (cuda_pack<T>(n, a, b, out) > 1)
        cuda_launch(map2_kernel<T, CUDA_PACK<T>, F>, n / CUDA_PACK<T>, (const T *)a, (const T *)b, (T *)out,
                    n, f);
    else cuda_launch(map2_kernel<T, 1, F>, n, (const T *)a, (const T *)b, (T *)out, n, f);
}

/* The element-wise functions: ReLU (NaN stays NaN, as PyTorch's) and its gradient through y,
 * GELU and its gradient through x. */
struct relu_fn {
    __device__ float operator()(float x) const { return x <= 0.0f ? 0.0f : x; }
};
struct relu_grad_fn {
    __device__ float operator()(float y, float dy) const { return y <= 0.0f ? 0.0f : dy; }
};
struct gelu_fn {
    __device__ float operator()(float x) const { return cuda_gelu(x); }
};
struct gelu_grad_fn {
    __device__ float operator()(float x, float dy) const { return dy * cuda_gelu_slope(x); }
};

/* float <-> bf16 for the bf16 convolutions (conv.cu): round to nearest even, and widen. */
__global__ static void to_bf16_kernel(const float *src, __nv_bfloat16 *dst, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __float2bfloat16_rn(src[i]);
}

/* The same, 8 elements per thread (two 16-byte float loads, one 16-byte bf16 store, or the
 * reverse) over n8 groups of 8, for 16-byte aligned buffers: the scalar kernels moved a step's
 * conversions at about half the memory bandwidth of an H200 (ncu, airbench94 at 1024). */
__global__ static void to_bf16_x8_kernel(const float4 *src, uint4 *dst, size_t n8) {
    GRID_STRIDE(i, n8) {
        float4 a = src[2 * i], b = src[2 * i + 1];
        __nv_bfloat162 p[4] = {__floats2bfloat162_rn(a.x, a.y), __floats2bfloat162_rn(a.z, a.w),
                               __floats2bfloat162_rn(b.x, b.y), __floats2bfloat162_rn(b.z, b.w)};
        uint4 u;
        memcpy(&u, p, sizeof u);
        dst[i] = u;
    }
}

__global__ static void from_bf16_x8_kernel(const uint4 *src, float4 *dst, size_t n8) {
    GRID_STRIDE(i, n8) {
        uint4 u = src[i];
        __nv_bfloat162 p[4];
        memcpy(p, &u, sizeof u);
        float2 f0 = __bfloat1622float2(p[0]), f1 = __bfloat1622float2(p[1]), f2 = __bfloat1622float2(p[2]),
               f3 = __bfloat1622float2(p[3]);
        dst[2 * i] = make_float4(f0.x, f0.y, f1.x, f1.y);
        dst[2 * i + 1] = make_float4(f2.x, f2.y, f3.x, f3.y);
    }
}

__global__ static void from_bf16_kernel(const __nv_bfloat16 *src, float *dst, size_t n) {
    GRID_STRIDE(i, n) dst[i] = __bfloat162float(src[i]);
}

/* y[N][C][HW] += scale * b[C] (b not NULL), then the activation act (cuda_activate); V
 * elements a thread, channels c + e * cstep (cuda_pack_channels). */
template <typename T, int V>
__global__ static void bias_act_kernel(T *y, const float *b, float scale, uint32_t n, struct channel_of ch,
                                       int cstep, int act) {
    GRID_STRIDE32(j, n / V) {
        uint32_t i = j * V, c = channel_at(i, ch);
        float v[V];
        pack_load<V>(y, i, v);
        for (int e = 0; e < V; e++) v[e] = cuda_activate(b ? v[e] + scale * b[c + e * cstep] : v[e], act);
        pack_store<V>(y, i, v);
    }
}

/* One element of torch.optim.SGD's step as in cpu/sgd.c, the same operation order (so only FMA
 * contraction differs). */
__device__ static inline void sgd_element(float *p, float *m, float grad, float lr, float momentum,
                                          float weight_decay, float grad_scale, int nesterov) {
    float g = grad * grad_scale + weight_decay * *p;
    float v = momentum * *m + g;
    *m = v;
    *p -= lr * (nesterov ? g + momentum * v : v);
}

/* sgd_element with the settings of group[i] (all group 0 without groups) from h, read in
 * device memory once per thread; SGD_SKIP (any value past the groups) leaves the element
 * alone. */
__global__ static void sgd_kernel(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                                  const struct sgd_hyper *h, int nesterov) {
    const struct sgd_hyper s = *h;
    GRID_STRIDE(i, n) {
        unsigned k = group ? group[i] : 0u;
        if (k < SGD_GROUPS)
            sgd_element(&p[i], &m[i], grad[i], s.lr[k], s.momentum, s.weight_decay[k], s.grad_scale,
                        nesterov);
    }
}

/* Lookahead as cpu/sgd.c: ema = torch.lerp(ema, p, w) by its float formula (from the nearer
 * end), then p = ema; w read in device memory. */
__global__ static void lookahead_kernel(float *p, float *ema, size_t n, const float *weight) {
    const float w = *weight;
    const int small = fabsf(w) < 0.5f;
    GRID_STRIDE(i, n) {
        float e = small ? ema[i] + w * (p[i] - ema[i]) : p[i] - (p[i] - ema[i]) * (1.0f - w);
        ema[i] = e;
        p[i] = e;
    }
}

/* scalars_set's values by value (a kernel parameter). */
struct scalars {
    float v[SCALARS_SET_MAX];
};

__global__ static void scalars_kernel(float *dst, struct scalars s, int n) {
    if ((int)threadIdx.x < n) dst[threadIdx.x] = s.v[threadIdx.x];
}

struct norm3 {
    float scale[3], shift[3];
};

/* The source coordinate of padded coordinate i, as cpu/input.c's source(): -1 for zero
 * padding outside the image, the mirror image for reflect padding. */
__device__ static int input_source(int i, int reflect) {
    if (i >= 0 && i < 32) return i;
    if (!reflect) return -1;
    return i < 0 ? -i : 62 - i;
}

/* x[n][c][y][x] (x[n][y][x][c] with nhwc): one thread per output element; see data/augment.c
 * for the geometry. */
template <typename T>
__global__ static void input_kernel(const unsigned char *img, const int *geom, T *x, size_t total,
                                    struct norm3 nm, int reflect, int nhwc) {
    GRID_STRIDE(i, total) {
        int px, py, c;
        if (nhwc) c = (int)(i % 3), px = (int)(i / 3 % 32), py = (int)(i / 96 % 32);
        else px = (int)(i % 32), py = (int)(i / 32 % 32), c = (int)(i / 1024 % 3);
        size_t n = i / 3072;
        const int *g = geom + 3 * n;
        int sy = input_source(py + g[1] - 4, reflect);
        int cx = g[2] ? 31 - px : px;
        int sx = input_source(cx + g[0] - 4, reflect);
        int inside = sy >= 0 && sx >= 0;
        float v = inside ? (float)img[n * 3072 + (size_t)(c * 32 + sy) * 32 + sx] : 0.0f;
        /* the product rounded, then the sum (no FMA): cpu/input.c's bits, which the whitening
         * statistics (covariance.cu) also start from */
        act_store(x, i, __fadd_rn(__fmul_rn(v, nm.scale[c]), nm.shift[c]));
    }
}

/* dst = src converted, n elements: groups of 8 by the x8 kernel when both buffers are 16-byte
 * aligned (V: the vector types it takes), the rest by the scalar one. */
template <typename S, typename D, typename VS, typename VD>
static void convert(const S *src, D *dst, size_t n, void (*x8)(const VS *, VD *, size_t),
                    void (*one)(const S *, D *, size_t)) {
    size_t n8 = ((uintptr_t)src | (uintptr_t)dst) % 16 == 0 ? n / 8 : 0, done = 8 * n8;
    if (n8) cuda_launch(x8, n8, (const VS *)src, (VD *)dst, n8);
    if (done < n) cuda_launch(one, n - done, src + done, dst + done, n - done);
}

void cuda_to_bf16(const float *src, bf16_t *dst, size_t n) {
    convert(src, dst, n, to_bf16_x8_kernel, to_bf16_kernel);
}

void cuda_from_bf16(const bf16_t *src, float *dst, size_t n) {
    convert(src, dst, n, from_bf16_x8_kernel, from_bf16_kernel);
}

template <typename T> void cuda_relu_forward(const void *x, void *y, size_t n) { map<T>(x, y, n, relu_fn{}); }

template <typename T> void cuda_relu_backward(const void *y, const void *dy, void *dx, size_t n) {
    map2<T>(y, dy, dx, n, relu_grad_fn{});
}

template <typename T> static void gelu_forward(const void *x, void *y, size_t n) {
    map<T>(x, y, n, gelu_fn{});
}

template <typename T> static void gelu_backward(const void *x, const void *dy, void *dx, size_t n) {
    map2<T>(x, dy, dx, n, gelu_grad_fn{});
}

template <typename T> void cuda_bias_act(T *y, const float *b, float scale, int N, int C, int HW, int act) {
    size_t n = (size_t)N * C * HW;
    int cstep, V = cuda_pack_channels<T>(C, HW, &cstep, y);
    struct channel_of ch = cuda_channel_of(N, C, HW);
    if (V > 1) cuda_launch(bias_act_kernel<T, CUDA_PACK<T>>, n / V, y, b, scale, (uint32_t)n, ch, cstep, act);
    else cuda_launch(bias_act_kernel<T, 1>, n, y, b, scale, (uint32_t)n, ch, cstep, act);
}

template void cuda_relu_forward<float>(const void *, void *, size_t);
template void cuda_relu_forward<bf16_t>(const void *, void *, size_t);
template void cuda_relu_backward<float>(const void *, const void *, void *, size_t);
template void cuda_relu_backward<bf16_t>(const void *, const void *, void *, size_t);
template void cuda_bias_act<float>(float *, const float *, float, int, int, int, int);
template void cuda_bias_act<bf16_t>(bf16_t *, const float *, float, int, int, int, int);

void cuda_sgd_update(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                     const struct sgd_hyper *h, int nesterov) {
    cuda_launch(sgd_kernel, n, p, grad, m, group, n, h, nesterov);
    cuda_filters_touched(p, n * sizeof(float));
}

void cuda_lookahead_update(float *p, float *ema, size_t n, const float *weight) {
    cuda_launch(lookahead_kernel, n, p, ema, n, weight);
    cuda_filters_touched(p, n * sizeof(float));
    cuda_filters_touched(ema, n * sizeof(float));
}

void cuda_scalars_set(float *dst, const float *v, int n) {
    CHECK(n >= 1 && n <= SCALARS_SET_MAX);
    /* captured, v would be baked into the graph: every replay would set this step's numbers */
    if (cuda_capturing()) err_die(1, "internal error: scalars_set during a graph capture");
    struct scalars s = {};
    memcpy(s.v, v, (size_t)n * sizeof(float));
    scalars_kernel<<<1, 32, 0, cuda_stream()>>>(dst, s, n);
    LAUNCH_CHECK();
}

template <typename T>
static void input_prepare(const unsigned char *img, const int *geom, void *x, int N, const float *scale,
                          const float *shift, int reflect) {
    struct norm3 nm;
    for (int c = 0; c < 3; c++) nm.scale[c] = scale[c], nm.shift[c] = shift[c];
    size_t total = (size_t)N * 3072;
    cuda_launch(input_kernel<T>, total, img, geom, (T *)x, total, nm, reflect, cuda_nhwc());
}

template <typename T> static void fill(struct kernels *k) {
    k->input_prepare = input_prepare<T>;
    k->relu_forward = cuda_relu_forward<T>;
    k->relu_backward = cuda_relu_backward<T>;
    k->gelu_forward = gelu_forward<T>;
    k->gelu_backward = gelu_backward<T>;
}

void cuda_fill_elementwise(struct kernels *k, enum cuda_precision p) { CUDA_FILL_BY_TYPE(k, p, fill); }
