/* Batch norm over N and HW of x[N][C][HW]: channel statistics from deterministic partial sums
 * (reduce.cu; the forward's of d = x - x[0][c][0] and d^2, as the CPU's, so that E[d^2] - E[d]^2
 * in double does not cancel; their float parts are taken about each chunk's own first value),
 * a per-channel finishing kernel in double, then one element-wise kernel. In
 * NHWC the same kernels see x as [N * HW][C][1] (cuda_act_rows). A fused GELU is applied in the
 * element-wise kernel of the forward, and its backward recomputes z = x * scale + shift (as the
 * forward computed it) in the partial sums and in the dx kernel, so z is never stored. */
#include "cuda.h"

/* y = z = (x - mean[c]) * invstd[c] * gamma[c] + beta[c], in the CPU backend's operation order,
 * or GELU(z); V elements a thread (cuda.h's packs), channels c + e * cstep. */
template <typename T, int V>
__global__ static void normalize_kernel(const T *x, const float *gamma, const float *beta, const float *mean,
                                        const float *invstd, T *y, uint32_t n, struct channel_of ch,
                                        int cstep, int gelu) {
    GRID_STRIDE32(j, n / V) {
        uint32_t i = j * V, c = channel_at(i, ch);
        float v[V];
        pack_load<V>(x, i, v);
        for (int e = 0; e < V; e++) {
            uint32_t ce = c + e * cstep;
            float scale = gamma[ce] * invstd[ce], shift = beta[ce] - mean[ce] * scale;
            float z = v[e] * scale + shift;
            v[e] = gelu ? cuda_gelu(z) : z;
        }
        pack_store<V>(y, i, v);
    }
}

/* Batch statistics and the running-statistics update (a block per channel) from the sums of
 * d = x - x[c * HW] and d^2 (x as [N][C][HW], HW 1 for rows); inv_count is 1 / count, made on
 * the host (the GPU's double divide is a software routine). */
template <typename T>
__global__ static void stats_kernel(const double *part, const T *x, int HW, int S, int C, double count,
                                    double inv_count, float momentum, float eps, float *save_mean,
                                    float *save_invstd, float *running_mean, float *running_var) {
    int c = blockIdx.x;
    double sum, sq;
    channel_totals(part, S, C, c, 1, &sum, &sq);
    if (threadIdx.x != 0) return;
    double dmean = sum * inv_count, var = sq * inv_count - dmean * dmean;
    double mean = (double)act_load(x, (size_t)c * HW) + dmean;
    if (var < 0.0) var = 0.0;
    save_mean[c] = (float)mean;
    save_invstd[c] = (float)(1.0 / sqrt(var + eps));
    double unbiased = count > 1.0 ? var * count / (count - 1.0) : var;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

__global__ static void eval_stats_kernel(const float *running_var, float eps, float *invstd, int C) {
    GRID_STRIDE(c, (size_t)C) invstd[c] = (float)(1.0 / sqrt((double)running_var[c] + eps));
}

/* dbeta, dgamma (not when NULL: a frozen scale; dx still needs the sum) and the means dx needs:
 * coef[0][C] = mean(dy), coef[1][C] = mean(dy * xhat); a block per channel. */
__global__ static void backward_stats_kernel(const double *part, int S, int C, double inv_count,
                                             float *dgamma, float *dbeta, float *coef) {
    int c = blockIdx.x;
    double sdy, sdyx;
    channel_totals(part, S, C, c, 1, &sdy, &sdyx);
    if (threadIdx.x != 0) return;
    dbeta[c] = (float)sdy;
    if (dgamma) dgamma[c] = (float)sdyx;
    coef[c] = (float)(sdy * inv_count);
    coef[C + c] = (float)(sdyx * inv_count);
}

/* dx = gamma * invstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy, or with a fused GELU
 * g = dy * GELU'(z); V elements a thread, channels c + e * cstep. */
template <typename T, int V>
__global__ static void backward_dx_kernel(const T *x, const T *dy, const float *gamma, const float *beta,
                                          const float *mean, const float *invstd, const float *coef, T *dx,
                                          uint32_t n, struct channel_of ch, int cstep, int gelu) {
    GRID_STRIDE32(j, n / V) {
        uint32_t i = j * V, c = channel_at(i, ch);
        float xv[V], g[V];
        pack_load<V>(x, i, xv);
        pack_load<V>(dy, i, g);
        for (int e = 0; e < V; e++) {
            uint32_t ce = c + e * cstep;
            float k = gamma[ce] * invstd[ce];
            if (gelu) g[e] *= cuda_gelu_slope(xv[e] * k + (beta[ce] - mean[ce] * k));
            g[e] = k * (g[e] - coef[ce] - (xv[e] - mean[ce]) * invstd[ce] * coef[ch.c.d + ce]);
        }
        pack_store<V>(dx, i, g);
    }
}

/* normalize_kernel over x[N][C][HW] into y, packed where the buffers allow (cuda_pack_channels). */
template <typename T>
static void normalize(const T *x, const float *gamma, const float *beta, const float *mean,
                      const float *invstd, T *y, int N, int C, int HW, int gelu) {
    size_t n = (size_t)N * C * HW;
    int cstep, V = cuda_pack_channels<T>(C, HW, &cstep, x, y);
    struct channel_of ch = cuda_channel_of(N, C, HW);
    if (V > 1)
        cuda_launch(normalize_kernel<T, CUDA_PACK<T>>, n / V, x, gamma, beta, mean, invstd, y, (uint32_t)n,
                    ch, cstep, gelu);
    else
        cuda_launch(normalize_kernel<T, 1>, n, x, gamma, beta, mean, invstd, y, (uint32_t)n, ch, cstep, gelu);
}

/* The table's entries, activations of type T (the pointers' elements). */
template <typename T>
static void batchnorm_forward_train(const void *x, const float *gamma, const float *beta, void *y,
                                    float *save_mean, float *save_invstd, float *running_mean,
                                    float *running_var, float momentum, float eps, int N, int C, int HW,
                                    int gelu) {
    double count = (double)N * HW;
    cuda_act_rows(cuda_nhwc(), &N, &HW);
    double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(N, C, HW) * C * sizeof(double));
    int S = cuda_channel_partials(CHANNEL_SUM_SQUARE, (const T *)x, channel_inputs{}, part, N, C, HW);
    stats_kernel<T><<<C, TOTAL_THREADS, 0, cuda_stream()>>>(part, (const T *)x, HW, S, C, count, 1.0 / count,
                                                            momentum, eps, save_mean, save_invstd,
                                                            running_mean, running_var);
    LAUNCH_CHECK();
    normalize((const T *)x, gamma, beta, save_mean, save_invstd, (T *)y, N, C, HW, gelu);
}

template <typename T>
static void batchnorm_forward_eval(const void *x, const float *gamma, const float *beta,
                                   const float *running_mean, const float *running_var, float eps, void *y,
                                   int N, int C, int HW, int gelu) {
    cuda_act_rows(cuda_nhwc(), &N, &HW);
    float *invstd = (float *)cuda_scratch((size_t)C * sizeof(float));
    eval_stats_kernel<<<cuda_blocks((size_t)C), CUDA_THREADS, 0, cuda_stream()>>>(running_var, eps, invstd,
                                                                                  C);
    LAUNCH_CHECK();
    normalize((const T *)x, gamma, beta, running_mean, invstd, (T *)y, N, C, HW, gelu);
}

template <typename T>
static void batchnorm_backward(const void *x, const void *dy, const float *gamma, const float *beta,
                               const float *save_mean, const float *save_invstd, void *dx, float *dgamma,
                               float *dbeta, int N, int C, int HW, int gelu) {
    double count = (double)N * HW;
    cuda_act_rows(cuda_nhwc(), &N, &HW);
    int S = cuda_channel_splits(N, C, HW);
    size_t part_bytes = 2 * (size_t)S * C * sizeof(double);
    char *scratch = (char *)cuda_scratch(part_bytes + 2 * (size_t)C * sizeof(float));
    double *part = (double *)scratch;
    float *coef = (float *)(scratch + part_bytes);
    struct channel_inputs in = {x, save_mean, save_invstd, gamma, beta};
    cuda_channel_partials(gelu ? CHANNEL_SUM_XHAT_GELU : CHANNEL_SUM_XHAT, (const T *)dy, in, part, N, C, HW);
    backward_stats_kernel<<<C, TOTAL_THREADS, 0, cuda_stream()>>>(part, S, C, 1.0 / count, dgamma, dbeta,
                                                                  coef);
    LAUNCH_CHECK();
    if (!dx) return;
    size_t n = (size_t)N * C * HW;
    int cstep, V = cuda_pack_channels<T>(C, HW, &cstep, x, dy, dx);
    struct channel_of ch = cuda_channel_of(N, C, HW);
    if (V > 1)
        cuda_launch(backward_dx_kernel<T, CUDA_PACK<T>>, n / V, (const T *)x, (const T *)dy, gamma, beta,
                    save_mean, save_invstd, (const float *)coef, (T *)dx, (uint32_t)n, ch, cstep, gelu);
    else
        cuda_launch(backward_dx_kernel<T, 1>, n, (const T *)x, (const T *)dy, gamma, beta, save_mean,
                    save_invstd, (const float *)coef, (T *)dx, (uint32_t)n, ch, cstep, gelu);
}

template <typename T> static void fill(struct kernels *k) {
    k->batchnorm_forward_train = batchnorm_forward_train<T>;
    k->batchnorm_forward_eval = batchnorm_forward_eval<T>;
    k->batchnorm_backward = batchnorm_backward<T>;
}

void cuda_fill_batchnorm(struct kernels *k, enum cuda_precision p) { CUDA_FILL_BY_TYPE(k, p, fill); }
