/* airbench's whitening statistics on the CPU (struct kernels patch_covariance; the CUDA twin is
 * kernels/cuda/covariance.cu). Every product and sum in double and none contracted into an FMA
 * (this file is built with -ffp-contract=off), in the order image, row, column, as the twin
 * does: the same bits on both. */
#include "cpu.h"

#include <string.h>

#define SIDE  32
#define PLANE (SIDE * SIDE)

/* cov += p p^T (upper triangle) for every 2x2 patch p of one image x[3][32][32]. */
static void add_patches(const float *x, double *cov) {
    for (int y = 0; y + 1 < SIDE; y++)
        for (int xx = 0; xx + 1 < SIDE; xx++) {
            double p[PATCH_DIM];
            for (int c = 0; c < 3; c++)
                for (int k = 0; k < 4; k++) p[c * 4 + k] = x[(c * SIDE + y + k / 2) * SIDE + xx + k % 2];
            for (int i = 0; i < PATCH_DIM; i++)
                for (int j = i; j < PATCH_DIM; j++) cov[i * PATCH_DIM + j] += p[i] * p[j];
        }
}

void cpu_patch_covariance(const unsigned char *img, int n, const float *scale, const float *shift,
                          double *part) {
    enum { D2 = PATCH_DIM * PATCH_DIM };
    int chunks = (n + PATCH_CHUNK - 1) / PATCH_CHUNK;
#pragma omp parallel for schedule(dynamic)
    for (int k = 0; k < chunks; k++) {
        double *cov = part + (size_t)k * D2;
        memset(cov, 0, D2 * sizeof(double));
        int end = (k + 1) * PATCH_CHUNK < n ? (k + 1) * PATCH_CHUNK : n;
        for (int i = k * PATCH_CHUNK; i < end; i++) {
            const unsigned char *px = img + (size_t)i * 3 * PLANE;
            float x[3 * PLANE];
            for (int j = 0; j < 3 * PLANE; j++) /* as input_prepare computes the input */
                x[j] = (float)px[j] * scale[j / PLANE] + shift[j / PLANE];
            add_patches(x, cov);
        }
    }
}
