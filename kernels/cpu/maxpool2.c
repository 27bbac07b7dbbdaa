#include "cpu.h"

void cpu_maxpool2_forward(const float *x, float *y, int N, int C, int H, int W) {
    int Ho = H / 2, Wo = W / 2;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * C; p++) {
        const float *xp = x + (size_t)p * H * W;
        float *yp = y + (size_t)p * Ho * Wo;
        for (int i = 0; i < Ho; i++)
            for (int j = 0; j < Wo; j++) {
                const float *r0 = xp + (2 * i) * W + 2 * j, *r1 = r0 + W;
                float m = r0[0];
                if (r0[1] > m) m = r0[1];
                if (r1[0] > m) m = r1[0];
                if (r1[1] > m) m = r1[1];
                yp[i * Wo + j] = m;
            }
    }
}

void cpu_maxpool2_backward(const float *x, const float *dy, float *dx, int N, int C, int H, int W,
                           int relu) {
    int Ho = H / 2, Wo = W / 2;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * C; p++)
        for (int i = 0; i < Ho; i++) {
            const float *restrict r0 = x + (size_t)p * H * W + (size_t)(2 * i) * W, *restrict r1 = r0 + W;
            const float *restrict g = dy + (size_t)p * Ho * Wo + (size_t)i * Wo;
            float *restrict d0 = dx + (size_t)p * H * W + (size_t)(2 * i) * W, *restrict d1 = d0 + W;
            /* Branch-free: window (a b / c d), the first maximum in that order wins (strict '>',
             * as PyTorch picks on ties). */
#pragma omp simd
            for (int j = 0; j < Wo; j++) {
                float a = r0[2 * j], b = r0[2 * j + 1], c = r1[2 * j], d = r1[2 * j + 1];
                float m = a;
                int best = 0;
                if (b > m) m = b, best = 1;
                if (c > m) m = c, best = 2;
                if (d > m) m = d, best = 3;
                /* Through the ReLU too: its output x is 0 wherever its input was <= 0. */
                float v = relu && !(m > 0.0f) ? 0.0f : g[j];
                d0[2 * j] = best == 0 ? v : 0.0f;
                d0[2 * j + 1] = best == 1 ? v : 0.0f;
                d1[2 * j] = best == 2 ? v : 0.0f;
                d1[2 * j + 1] = best == 3 ? v : 0.0f;
            }
        }
}
