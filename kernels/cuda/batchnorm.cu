/* Batch norm over N and HW of x[N][C][HW]: channel statistics from deterministic partial sums
 * (reduce.cu; the forward's of d = x - x[0][c][0] and d^2, as the CPU's, so that E[d^2] - E[d]^2
 * in double does not cancel; their float parts are taken about each chunk's own first value),
 * a per-channel finishing kernel in double, then one element-wise kernel. In
 * NHWC the same kernels see x as [N * HW][C][1] (cuda_act_rows). A fused GELU is applied in the
 * element-wise kernel of the forward, and its backward recomputes z = x * scale + shift (as the
 * forward computed it) in the partial sums and in the dx kernel, so z is never stored.
 *
 * The finishing kernels also write what the element-wise kernels need per channel, in scratch
 * rows of coef_stride floats (coefs): so a pack of channels reads each row's values with 16-byte
 * loads, not its channels' gamma, beta, mean and invstd one float at a time. */
#include "cuda.h"

/* Floats between the rows of a per-channel table: C rounded up to 4, so each row starts 16-byte
 * aligned (the table itself does: after doubles, in scratch). */
__host__ __device__ static int coef_stride(int C) { return (C + 3) / 4 * 4; }

/* The V values of row[c + e * cstep], e < V: 16-byte loads where the channels are consecutive
 * (cstep 1; c a multiple of V, the row aligned), else one load. */
template <int V> __device__ static void channel_row(const float *row, uint32_t c, int cstep, float *v) {
    if (V > 1 && cstep) {
        for (int e = 0; e < V; e += 4) {
            float4 f = *reinterpret_cast<const float4 *>(row + c + e);
            v[e] = f.x, v[e + 1] = f.y, v[e + 2] = f.z, v[e + 3] = f.w;
        }
    } else {
        float f = row[c];
        for (int e = 0; e < V; e++) v[e] = f;
    }
}

/* scale = gamma * invstd and shift = beta - mean * scale, rows 0 and 1 of coefs (y = z = x *
 * scale + shift, in the CPU backend's operation order). */
__device__ static void affine_coefs(int c, int C, float gamma, float beta, float mean, float invstd,
                                    float *coefs) {
    float scale = gamma * invstd;
    coefs[c] = scale;
    coefs[coef_stride(C) + c] = beta - mean * scale;
}

/* y = z = x * scale[c] + shift[c] (rows of coefs), or GELU(z); V elements a thread (cuda.h's
 * packs), channels c + e * cstep. */
template <typename T, int V>
__global__ static void normalize_kernel(const T *x, const float *coefs, T *y, uint32_t n,
                                        struct channel_of ch, int cstep, int gelu) {
    uint32_t cs = (uint32_t)coef_stride((int)ch.c.d);
    GRID_STRIDE32(j, n / V) {
        uint32_t i = j * V, c = channel_at(i, ch);
        float v[V], scale[V], shift[V];
        pack_load<V>(x, i, v);
        channel_row<V>(coefs, c, cstep, scale);
        channel_row<V>(coefs + cs, c, cstep, shift);
        for (int e = 0; e < V; e++) {
            float z = v[e] * scale[e] + shift[e];
            v[e] = gelu ? cuda_gelu(z) : z;
        }
        pack_store<V>(y, i, v);
    }
}

/* Batch statistics, the running-statistics update and the affine rows of coefs (a block per
 * channel) from the sums of d = x - x[c * HW] and d^2 (x as [N][C][HW], HW 1 for rows);
 * inv_count is 1 / count, made on the host (the GPU's double divide is a software routine). */
template <typename T>
__global__ static void stats_kernel(const double *part, const T *x, int HW, int S, int C, double count,
                                    double inv_count, float momentum, float eps, const float *gamma,
                                    const float *beta, float *save_mean, float *save_invstd,
                                    float *running_mean, float *running_var, float *coefs) {
    int c = blockIdx.x;
    double sum, sq;
    channel_totals(part, S, C, c, 1, &sum, &sq);
    if (threadIdx.x != 0) return;
    double dmean = sum * inv_count, var = sq * inv_count - dmean * dmean;
    double mean = (double)act_load(x, (size_t)c * HW) + dmean;
    if (var < 0.0) var = 0.0;
    float fmean = (float)mean, finvstd = (float)(1.0 / sqrt(var + eps));
    save_mean[c] = fmean;
    save_invstd[c] = finvstd;
    double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
    affine_coefs(c, C, gamma[c], beta[c], fmean, finvstd, coefs);
}

__global__ static void eval_stats_kernel(const float *gamma, const float *beta, const float *running_mean,
                                         const float *running_var, float eps, float *coefs, int C) {
    GRID_STRIDE(c, (size_t)C) {
        float invstd = (float)(1.0 / sqrt((double)running_var[c] + eps));
        affine_coefs((int)c, C, gamma[c], beta[c], running_mean[c], invstd, coefs);
    }
}

/* dbeta, dgamma (not when NULL: a frozen scale; dx still needs the sum) and the rows of coefs dx
 * needs (a block per channel), with mg = mean(g) and mgx = mean(g * xhat), k = gamma * invstd:
 * k; the mean; shift = beta - mean * k (GELU's z = x * k + shift, as the forward made it; with
 * gelu only: beta is read only then); a = -k invstd mgx and b = -k mg, so that dx = k g +
 * (a (x - mean) + b) = k (g - mg - xhat mgx). x - mean is formed first, as the CPU does: a
 * (x + b / a) form would cancel where the mean is far from 0 against the spread. */
__global__ static void backward_stats_kernel(const double *part, int S, int C, double inv_count,
                                             const float *gamma, const float *beta, const float *mean,
                                             const float *invstd, int gelu, float *dgamma, float *dbeta,
                                             float *coefs) {
    int c = blockIdx.x;
    double sdy, sdyx;
    channel_totals(part, S, C, c, 1, &sdy, &sdyx);
    if (threadIdx.x != 0) return;
    dbeta[c] = (float)sdy;
    if (dgamma) dgamma[c] = (float)sdyx;
    double k = (double)gamma[c] * invstd[c];
    int cs = coef_stride(C);
    float fk = gamma[c] * invstd[c];
    coefs[c] = fk;
    coefs[cs + c] = mean[c];
    coefs[2 * cs + c] = gelu ? beta[c] - mean[c] * fk : 0.0f;
    coefs[3 * cs + c] = (float)(-k * invstd[c] * (sdyx * inv_count));
    coefs[4 * cs + c] = (float)(-k * (sdy * inv_count));
}

/* dx = k (g - mean(g) - xhat mean(g * xhat)) = k g + (a (x - mean) + b) (the rows of coefs), g =
 * dy, or with a fused GELU g = dy * GELU'(z), z = x * k + shift; V elements a thread, channels
 * c + e * cstep. */
template <typename T, int V>
__global__ static void backward_dx_kernel(const T *x, const T *dy, const float *coefs, T *dx, uint32_t n,
                                          struct channel_of ch, int cstep, int gelu) {
    uint32_t cs = (uint32_t)coef_stride((int)ch.c.d);
    GRID_STRIDE32(j, n / V) {
        uint32_t i = j * V, c = channel_at(i, ch);
        float xv[V], g[V], k[V], mean[V], shift[V], a[V], b[V];
        pack_load<V>(x, i, xv);
        pack_load<V>(dy, i, g);
        channel_row<V>(coefs, c, cstep, k);
        channel_row<V>(coefs + cs, c, cstep, mean);
        channel_row<V>(coefs + 3 * cs, c, cstep, a);
        channel_row<V>(coefs + 4 * cs, c, cstep, b);
        if (gelu) channel_row<V>(coefs + 2 * cs, c, cstep, shift);
        for (int e = 0; e < V; e++) {
            if (gelu) g[e] *= cuda_gelu_slope(xv[e] * k[e] + shift[e]);
            g[e] = k[e] * g[e] + (a[e] * (xv[e] - mean[e]) + b[e]);
        }
        pack_store<V>(dx, i, g);
    }
}

/* normalize_kernel over x[N][C][HW] into y with the affine rows of coefs, packed where the
 * buffers allow (cuda_pack_channels). */
template <typename T>
static void normalize(const T *x, const float *coefs, T *y, int N, int C, int HW, int gelu) {
    size_t n = (size_t)N * C * HW;
    int cstep, V = cuda_pack_channels<T>(C, HW, &cstep, x, y);
    struct channel_of ch = cuda_channel_of(N, C, HW);
    if (V > 1)
        cuda_launch(normalize_kernel<T, CUDA_PACK<T>>, n / V, x, coefs, y, (uint32_t)n, ch, cstep, gelu);
    else cuda_launch(normalize_kernel<T, 1>, n, x, coefs, y, (uint32_t)n, ch, cstep, gelu);
}

/* Scratch for the partial sums of S runs (doubles), then `rows` rows of coefs (coef_stride floats each). */
static void stats_scratch(int S, int C, int rows, double **part, float **coefs) {
    size_t part_bytes = 2 * (size_t)S * C * sizeof(double);
    char *scratch = (char *)cuda_scratch(part_bytes + (size_t)rows * coef_stride(C) * sizeof(float));
    *part = (double *)scratch;
    *coefs = (float *)(scratch + part_bytes);
}

/* The table's entries, activations of type T (the pointers' elements). */
template <typename T>
static void batchnorm_forward_train(const void *x, const float *gamma, const float *beta, void *y,
                                    float *save_mean, float *save_invstd, float *running_mean,
                                    float *running_var, float momentum, float eps, int N, int C, int HW,
                                    int gelu) {
    double count = (double)N * HW;
    cuda_act_rows(cuda_nhwc(), &N, &HW);
    double *part;
    float *coefs;
    stats_scratch(cuda_channel_splits(N, C, HW), C, 2, &part, &coefs);
    int S = cuda_channel_partials(CHANNEL_SUM_SQUARE, (const T *)x, channel_inputs{}, part, N, C, HW);
    stats_kernel<T><<<C, TOTAL_THREADS, 0, cuda_stream()>>>(part, (const T *)x, HW, S, C, count, 1.0 / count,
                                                            momentum, eps, gamma, beta, save_mean,
                                                            save_invstd, running_mean, running_var, coefs);
    LAUNCH_CHECK();
    normalize((const T *)x, coefs, (T *)y, N, C, HW, gelu);
}

template <typename T>
static void batchnorm_forward_eval(const void *x, const float *gamma, const float *beta,
                                   const float *running_mean, const float *running_var, float eps, void *y,
                                   int N, int C, int HW, int gelu) {
    cuda_act_rows(cuda_nhwc(), &N, &HW);
    double *part;
    float *coefs;
    stats_scratch(0, C, 2, &part, &coefs);
    eval_stats_kernel<<<cuda_blocks((size_t)C), CUDA_THREADS, 0, cuda_stream()>>>(gamma, beta, running_mean,
                                                                                  running_var, eps, coefs, C);
    LAUNCH_CHECK();
    normalize((const T *)x, coefs, (T *)y, N, C, HW, gelu);
}

template <typename T>
static void batchnorm_backward(const void *x, const void *dy, const float *gamma, const float *beta,
                               const float *save_mean, const float *save_invstd, void *dx, float *dgamma,
                               float *dbeta, int N, int C, int HW, int gelu) {
    double count = (double)N * HW;
    cuda_act_rows(cuda_nhwc(), &N, &HW);
    int S = cuda_channel_splits(N, C, HW);
    double *part;
    float *coefs;
    stats_scratch(S, C, 5, &part, &coefs);
    struct channel_inputs in = {x, save_mean, save_invstd, gamma, beta};
    cuda_channel_partials(gelu ? CHANNEL_SUM_XHAT_GELU : CHANNEL_SUM_XHAT, (const T *)dy, in, part, N, C, HW);
    backward_stats_kernel<<<C, TOTAL_THREADS, 0, cuda_stream()>>>(
        part, S, C, 1.0 / count, gamma, beta, save_mean, save_invstd, gelu, dgamma, dbeta, coefs);
    LAUNCH_CHECK();
    if (!dx) return;
    size_t n = (size_t)N * C * HW;
    int cstep, V = cuda_pack_channels<T>(C, HW, &cstep, x, dy, dx);
    struct channel_of ch = cuda_channel_of(N, C, HW);
    if (V > 1)
        cuda_launch(backward_dx_kernel<T, CUDA_PACK<T>>, n / V, (const T *)x, (const T *)dy,
                    (const float *)coefs, (T *)dx, (uint32_t)n, ch, cstep, gelu);
    else
        cuda_launch(backward_dx_kernel<T, 1>, n, (const T *)x, (const T *)dy, (const float *)coefs, (T *)dx,
                    (uint32_t)n, ch, cstep, gelu);
}

template <typename T> static void fill(struct kernels *k) {
    k->batchnorm_forward_train = batchnorm_forward_train<T>;
    k->batchnorm_forward_eval = batchnorm_forward_eval<T>;
    k->batchnorm_backward = batchnorm_backward<T>;
}

void cuda_fill_batchnorm(struct kernels *k, enum cuda_precision p) { CUDA_FILL_BY_TYPE(k, p, fill); }
