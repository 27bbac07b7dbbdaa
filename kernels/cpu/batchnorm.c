/* Batch norm over N and HW of x[N][C][HW], statistics summed in double so that a 128 x 32 x 32
 * reduction loses nothing measurable.
 *
 * Memory order. Each thread owns a static range of channels (channel_range) and walks the
 * images in order, its channels' planes of one image being one contiguous run: the per-channel
 * reductions are summed in the same order whatever the team (per plane, then plane after plane),
 * while the reads stream. (Walking one channel's N planes instead, C * HW floats apart, left the
 * hardware prefetchers with runs of 196 bytes on 7x7 maps.) The forward's statistics take one
 * read: the sums of d = x - x[0][c][0] and of d^2, the shift keeping E[d^2] - E[d]^2 free of
 * cancellation as long as the channel's first value is within a few thousand standard
 * deviations of its mean.
 *
 * A fused GELU (gelu non-zero) runs with GELU's vector code (cpu_gelu_affine), z = x * scale +
 * shift taken from per-element copies of the channels' scale and shift (one image's worth):
 * planes of 7x7 or 3x3 are too short for vectors of their own. The forward writes GELU(z) where
 * z would go, image by image; the backward makes g = dy * GELU'(z) in dx (or, without dx, a
 * temporary) for its channels of one image and sums that image's statistics while g is in cache,
 * then makes dx from g in place. */
#include "../../common/err.h"
#include "cpu.h"

#include <math.h>
#include <omp.h>
#include <stdlib.h>

/* Channels [*c0, *c1) of thread t of nt. */
static void channel_range(int C, int t, int nt, int *c0, int *c1) {
    *c0 = (int)((long)C * t / nt);
    *c1 = (int)((long)C * (t + 1) / nt);
}

/* Per-element copies of scale[C] and shift[C] for one image: s[c HW + i] = scale[c], t too. */
static float *affine_planes(const float *scale, const float *shift, int C, int HW) {
    size_t per = (size_t)C * HW;
    float *s = XALLOC(2 * per * sizeof(float)), *t = s + per;
    for (int c = 0; c < C; c++)
        for (int i = 0; i < HW; i++) s[(size_t)c * HW + i] = scale[c], t[(size_t)c * HW + i] = shift[c];
    return s;
}

/* y = x * scale[c] + shift[c] (affine: scale[C], then shift[C]), or GELU of it (gelu.c's
 * vector code, on affine_planes' copies), image by image. */
static void affine_images(const float *x, float *y, const float *affine, int N, int C, int HW, int gelu) {
    size_t per = (size_t)C * HW;
    if (gelu) {
        float *st = affine_planes(affine, affine + C, C, HW);
        struct gelu_affine f = cpu_gelu_affine();
#pragma omp parallel for schedule(static)
        for (int n = 0; n < N; n++) f.forward(x + (size_t)n * per, y + (size_t)n * per, per, st, st + per);
        free(st);
        return;
    }
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int c = 0; c < C; c++) {
            const float *xc = x + (size_t)n * per + (size_t)c * HW;
            float *yc = y + (size_t)n * per + (size_t)c * HW;
            float scale = affine[c], shift = affine[C + c];
            for (int i = 0; i < HW; i++) yc[i] = xc[i] * scale + shift;
        }
}

/* affine[c] = scale, affine[C + c] = shift of y = x * scale + shift, with the saved and the
 * running statistics, from s = sum of d and q = sum of d^2, d = x - k, over count values. */
static void finish_stats(int c, int C, double k, double s, double q, double count, const float *gamma,
                         const float *beta, float eps, float momentum, float *affine, float *save_mean,
                         float *save_invstd, float *running_mean, float *running_var) {
    double mean = k + s / count, sq = q - s * s / count; /* sum of (x - mean)^2 */
    if (sq < 0.0) sq = 0.0;
    double var = sq / count;
    float invstd = (float)(1.0 / sqrt(var + eps));
    float scale = gamma[c] * invstd, shift = beta[c] - (float)mean * scale;
    affine[c] = scale, affine[C + c] = shift;
    save_mean[c] = (float)mean;
    save_invstd[c] = invstd;
    double unbiased = count > 1.0 ? sq / (count - 1.0) : var;
    running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * mean);
    running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * unbiased);
}

void cpu_batchnorm_forward_train(const void *xv, const float *gamma, const float *beta, void *y,
                                 float *save_mean, float *save_invstd, float *running_mean,
                                 float *running_var, float momentum, float eps, int N, int C, int HW,
                                 int gelu) {
    const float *x = xv;
    double count = (double)N * HW;
    float *affine = XALLOC(2 * (size_t)C * sizeof(float)); /* scale[C], shift[C] */
    double *sums = XALLOC(2 * (size_t)C * sizeof(double)); /* sum d[C], sum d^2[C] */
#pragma omp parallel
    {
        int c0, c1;
        channel_range(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int c = c0; c < c1; c++) sums[c] = sums[C + c] = 0.0;
        for (int n = 0; n < N; n++)
            for (int c = c0; c < c1; c++) {
                const float *xc = x + ((size_t)n * C + c) * HW;
                double k = x[(size_t)c * HW], s = 0.0, q = 0.0;
#pragma omp simd reduction(+ : s, q)
                for (int i = 0; i < HW; i++) {
                    double d = (double)xc[i] - k;
                    s += d;
                    q += d * d;
                }
                sums[c] += s;
                sums[C + c] += q;
            }
        for (int c = c0; c < c1; c++)
            finish_stats(c, C, x[(size_t)c * HW], sums[c], sums[C + c], count, gamma, beta, eps, momentum,
                         affine, save_mean, save_invstd, running_mean, running_var);
    }
    affine_images(x, y, affine, N, C, HW, gelu);
    free(sums);
    free(affine);
}

void cpu_batchnorm_forward_eval(const void *x, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, float eps, void *y,
                                int N, int C, int HW, int gelu) {
    float *affine = XALLOC(2 * (size_t)C * sizeof(float));
    for (int c = 0; c < C; c++) {
        float invstd = (float)(1.0 / sqrt((double)running_var[c] + eps));
        float scale = gamma[c] * invstd, shift = beta[c] - running_mean[c] * scale;
        affine[c] = scale, affine[C + c] = shift;
    }
    affine_images(x, y, affine, N, C, HW, gelu);
    free(affine);
}

/* dx (skipped when NULL), dgamma (skipped when NULL), dbeta from g = dy, or with gelu
 * g = dy * GELU'(z), z as the forward made it (scale = gamma * invstd, shift = beta - mean *
 * scale). */
void cpu_batchnorm_backward(const void *xv, const void *dyv, const float *gamma, const float *beta,
                            const float *save_mean, const float *save_invstd, void *dxv, float *dgamma,
                            float *dbeta, int N, int C, int HW, int gelu) {
    const float *x = xv, *dy = dyv;
    float *dx = dxv;
    double count = (double)N * HW;
    size_t per = (size_t)C * HW;
    float *st = NULL, *temp = NULL;
    if (gelu) {
        float *affine = XALLOC(2 * (size_t)C * sizeof(float));
        for (int c = 0; c < C; c++) {
            float scale = gamma[c] * save_invstd[c];
            affine[c] = scale, affine[C + c] = beta[c] - save_mean[c] * scale;
        }
        st = affine_planes(affine, affine + C, C, HW);
        free(affine);
        if (!dx) temp = XALLOC((size_t)N * per * sizeof(float));
    }
    float *gbuf = gelu ? (dx ? dx : temp) : NULL; /* g when made here */
    const float *g = gelu ? gbuf : dy;
    double *sums = XALLOC(2 * (size_t)C * sizeof(double)); /* sum g[C], sum g * xhat[C] */
    struct gelu_affine f = cpu_gelu_affine();
#pragma omp parallel
    {
        int c0, c1;
        channel_range(C, omp_get_thread_num(), omp_get_num_threads(), &c0, &c1);
        for (int c = c0; c < c1; c++) sums[c] = sums[C + c] = 0.0;
        for (int n = 0; n < N && c1 > c0; n++) {
            size_t at = (size_t)n * per + (size_t)c0 * HW, run = (size_t)(c1 - c0) * HW;
            if (gelu)
                f.backward(x + at, dy + at, gbuf + at, run, st + (size_t)c0 * HW, st + per + (size_t)c0 * HW);
            for (int c = c0; c < c1; c++) {
                const float *xc = x + ((size_t)n * C + c) * HW, *gc = g + ((size_t)n * C + c) * HW;
                float mean = save_mean[c], invstd = save_invstd[c];
                double sdy = 0.0, sdyx = 0.0;
#pragma omp simd reduction(+ : sdy, sdyx)
                for (int i = 0; i < HW; i++) {
                    sdy += gc[i];
                    sdyx += gc[i] * ((xc[i] - mean) * invstd);
                }
                sums[c] += sdy;
                sums[C + c] += sdyx;
            }
        }
        for (int c = c0; c < c1; c++) {
            dbeta[c] = (float)sums[c];
            if (dgamma) dgamma[c] = (float)sums[C + c];
        }
        /* dx = gamma * invstd * (g - mean(g) - xhat * mean(g * xhat)); g may be dx itself */
        for (int n = 0; n < N && dx; n++)
            for (int c = c0; c < c1; c++) {
                float mean = save_mean[c], invstd = save_invstd[c], k = gamma[c] * invstd;
                float mdy = (float)(sums[c] / count), mdyx = (float)(sums[C + c] / count);
                const float *xc = x + ((size_t)n * C + c) * HW, *gc = g + ((size_t)n * C + c) * HW;
                float *dxc = dx + ((size_t)n * C + c) * HW;
                for (int i = 0; i < HW; i++) dxc[i] = k * (gc[i] - mdy - (xc[i] - mean) * invstd * mdyx);
            }
    }
    free(sums);
    free(st);
    free(temp);
}
