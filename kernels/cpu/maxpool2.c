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

void cpu_maxpool2_backward(const float *x, const float *dy, float *dx, int N, int C, int H, int W) {
    int Ho = H / 2, Wo = W / 2;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * C; p++) {
        const float *xp = x + (size_t)p * H * W;
        const float *dyp = dy + (size_t)p * Ho * Wo;
        float *dxp = dx + (size_t)p * H * W;
        for (int i = 0; i < Ho; i++)
            for (int j = 0; j < Wo; j++) {
                int base = (2 * i) * W + 2 * j;
                int offs[4] = {base, base + 1, base + W, base + W + 1};
                int best = 0; /* strict '>' keeps the first maximum, as PyTorch does */
                for (int q = 1; q < 4; q++)
                    if (xp[offs[q]] > xp[offs[best]]) best = q;
                for (int q = 0; q < 4; q++) dxp[offs[q]] = q == best ? dyp[i * Wo + j] : 0.0f;
            }
    }
}
