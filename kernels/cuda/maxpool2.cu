/* 2x2 max pool, stride 2: one thread per output element; backward writes the four inputs of
 * its window (windows do not overlap, so no atomics), routing dy to the first maximum in
 * row-major order as cpu/maxpool2.c and PyTorch do. */
#include "cuda.h"

__global__ static void maxpool2_forward_kernel(const float *x, float *y, size_t total, int H, int W) {
    int Ho = H / 2, Wo = W / 2;
    GRID_STRIDE(o, total) {
        int j = (int)(o % Wo), i = (int)(o / Wo % Ho);
        size_t plane = o / ((size_t)Ho * Wo);
        const float *r0 = x + plane * H * W + (size_t)(2 * i) * W + 2 * j, *r1 = r0 + W;
        float m = r0[0];
        if (r0[1] > m) m = r0[1];
        if (r1[0] > m) m = r1[0];
        if (r1[1] > m) m = r1[1];
        y[o] = m;
    }
}

__global__ static void maxpool2_backward_kernel(const float *x, const float *dy, float *dx, size_t total,
                                                int H, int W, int relu) {
    int Ho = H / 2, Wo = W / 2;
    GRID_STRIDE(o, total) {
        int j = (int)(o % Wo), i = (int)(o / Wo % Ho);
        size_t plane = o / ((size_t)Ho * Wo), at = plane * H * W + (size_t)(2 * i) * W + 2 * j;
        float a = x[at], b = x[at + 1], c = x[at + W], d = x[at + W + 1];
        float m = a;
        int best = 0;
        if (b > m) m = b, best = 1;
        if (c > m) m = c, best = 2;
        if (d > m) m = d, best = 3;
        float v = relu && !(m > 0.0f) ? 0.0f : dy[o]; /* through the ReLU whose output x is */
        dx[at] = best == 0 ? v : 0.0f;
        dx[at + 1] = best == 1 ? v : 0.0f;
        dx[at + W] = best == 2 ? v : 0.0f;
        dx[at + W + 1] = best == 3 ? v : 0.0f;
    }
}

void cuda_maxpool2_forward(const float *x, float *y, int N, int C, int H, int W) {
    size_t total = (size_t)N * C * (H / 2) * (W / 2);
    maxpool2_forward_kernel<<<cuda_blocks(total), CUDA_THREADS, 0, cuda_stream()>>>(x, y, total, H, W);
    LAUNCH_CHECK();
}

void cuda_maxpool2_backward(const float *x, const float *dy, float *dx, int N, int C, int H, int W, int relu) {
    size_t total = (size_t)N * C * (H / 2) * (W / 2);
    maxpool2_backward_kernel<<<cuda_blocks(total), CUDA_THREADS, 0, cuda_stream()>>>(x, dy, dx, total, H, W, relu);
    LAUNCH_CHECK();
}
