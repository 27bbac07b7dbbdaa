/* The input pipeline on the CPU: crop/flip of uint8 images, then per-channel scale and shift
 * (see struct kernels input_prepare; the CUDA twin is kernels/cuda/elementwise.cu). */
#include "cpu.h"

#define SIDE 32
#define PAD 4

void cpu_input_prepare(const unsigned char *img, const int *geom, float *x, int N, const float *scale,
                       const float *shift) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const unsigned char *src = img + (size_t)n * 3 * SIDE * SIDE;
        float *dst = x + (size_t)n * 3 * SIDE * SIDE;
        int dx = geom[3 * n], dy = geom[3 * n + 1], flip = geom[3 * n + 2];
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < SIDE; y++) {
                int sy = y + dy - PAD;
                float *d = dst + (c * SIDE + y) * SIDE;
                for (int px = 0; px < SIDE; px++) {
                    int cx = flip ? SIDE - 1 - px : px; /* the flip happens after the crop */
                    int sx = cx + dx - PAD;
                    int inside = sy >= 0 && sy < SIDE && sx >= 0 && sx < SIDE;
                    float v = inside ? (float)src[(c * SIDE + sy) * SIDE + sx] : 0.0f;
                    d[px] = v * scale[c] + shift[c];
                }
            }
    }
}
