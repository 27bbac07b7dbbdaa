/* The input pipeline on the CPU: crop/flip of uint8 images, then per-channel scale and shift
 * (see struct kernels input_prepare; the CUDA twin is kernels/cuda/elementwise.cu). The product
 * is rounded before the sum, as the twin does (the Makefile builds this file without FMA
 * contraction), so both backends' batches are the same bits. */
#include "cpu.h"

#define SIDE 32
#define PAD  4

/* The source coordinate of padded coordinate i (-PAD..SIDE+PAD-1): outside the image, -1 for
 * zero padding, or its mirror image for reflect padding (as torch.nn.functional.pad(mode=
 * 'reflect'): -1 -> 1, SIDE -> SIDE - 2). */
static int source(int i, int reflect) {
    if (i >= 0 && i < SIDE) return i;
    if (!reflect) return -1;
    return i < 0 ? -i : 2 * (SIDE - 1) - i;
}

void cpu_input_prepare(const unsigned char *img, const int *geom, void *xv, int N, const float *scale,
                       const float *shift, int reflect) {
    float *x = xv;
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
        const unsigned char *src = img + (size_t)n * 3 * SIDE * SIDE;
        float *dst = x + (size_t)n * 3 * SIDE * SIDE;
        int dx = geom[3 * n], dy = geom[3 * n + 1], flip = geom[3 * n + 2];
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < SIDE; y++) {
                int sy = source(y + dy - PAD, reflect);
                float *d = dst + (c * SIDE + y) * SIDE;
                for (int px = 0; px < SIDE; px++) {
                    int cx = flip ? SIDE - 1 - px : px; /* the flip happens after the crop */
                    int sx = source(cx + dx - PAD, reflect);
                    int inside = sy >= 0 && sx >= 0;
                    float v = inside ? (float)src[(c * SIDE + sy) * SIDE + sx] : 0.0f;
                    d[px] = v * scale[c] + shift[c];
                }
            }
    }
}
