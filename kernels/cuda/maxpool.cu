/* k x k max pool with stride k (nn.MaxPool2d(k), floor): y[N][C][H/k][W/k] from x[N][C][H][W],
 * one thread per output element. dy goes to the first maximum of each window in row-major order
 * (strict '>'), as cpu/maxpool.c and PyTorch do.
 *
 * Backward: windows do not overlap (stride = k), so the thread of a window writes all k*k of
 * its dx elements, dy at the maximum and 0 elsewhere, with no atomics. Rows and columns past
 * the last whole window (H % k, W % k of them) belong to no thread, so when there are any, dx
 * is zeroed with a memset first. Not one thread per dx element instead: each would rescan its
 * whole window to learn whether it holds the maximum (k*k reads per element); the memset is one
 * write pass, and only shapes that leave a border pay it. */
#include "cuda.h"

/* Output o = [n][c][i][j] of the pool: the index in x of its window's top-left element. */
__device__ static size_t window_at(size_t o, int H, int W, int k) {
    int Ho = H / k, Wo = W / k;
    int j = (int)(o % Wo), i = (int)(o / Wo % Ho);
    size_t plane = o / ((size_t)Ho * Wo);
    return plane * H * W + (size_t)i * k * W + (size_t)j * k;
}

/* The maximum of the k x k window at x + at (rows W apart) and, in *best, the row-major offset
 * r * k + c of its first occurrence. */
__device__ static float window_max(const float *x, size_t at, int W, int k, int *best) {
    float m = x[at];
    int b = 0;
    for (int r = 0; r < k; r++)
        for (int c = 0; c < k; c++) {
            float v = x[at + (size_t)r * W + c];
            if (v > m) m = v, b = r * k + c;
        }
    *best = b;
    return m;
}

__global__ static void maxpool_forward_kernel(const float *x, float *y, size_t total, int H, int W, int k) {
    GRID_STRIDE(o, total) {
        int best;
        y[o] = window_max(x, window_at(o, H, W, k), W, k, &best);
    }
}

__global__ static void maxpool_backward_kernel(const float *x, const float *dy, float *dx, size_t total,
                                               int H, int W, int k, int relu) {
    GRID_STRIDE(o, total) {
        size_t at = window_at(o, H, W, k);
        int best;
        float m = window_max(x, at, W, k, &best);
        float v = relu && !(m > 0.0f) ? 0.0f : dy[o]; /* through the ReLU whose output x is */
        for (int r = 0; r < k; r++)
            for (int c = 0; c < k; c++) dx[at + (size_t)r * W + c] = r * k + c == best ? v : 0.0f;
    }
}

void cuda_maxpool_forward(const float *x, float *y, int N, int C, int H, int W, int k) {
    size_t total = (size_t)N * C * (H / k) * (W / k);
    maxpool_forward_kernel<<<cuda_blocks(total), CUDA_THREADS, 0, cuda_stream()>>>(x, y, total, H, W, k);
    LAUNCH_CHECK();
}

void cuda_maxpool_backward(const float *x, const float *dy, float *dx, int N, int C, int H, int W, int k,
                           int relu) {
    /* The uncovered border (see the top): all bits zero is 0.0f. Same stream, so it lands first. */
    if (H % k || W % k)
        CUDA_CHECK(cudaMemsetAsync(dx, 0, (size_t)N * C * H * W * sizeof(float), cuda_stream()));
    size_t total = (size_t)N * C * (H / k) * (W / k);
    maxpool_backward_kernel<<<cuda_blocks(total), CUDA_THREADS, 0, cuda_stream()>>>(x, dy, dx, total, H, W, k,
                                                                                    relu);
    LAUNCH_CHECK();
}
