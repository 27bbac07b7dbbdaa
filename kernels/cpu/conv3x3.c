/* 3x3 "same" convolution.
 *
 * Forward and input gradient: Winograd F(2x2, 3x3) (winograd.c) where it applies (even sizes,
 * 16+ channels each side); otherwise, and always for the weight gradient, im2col + GEMM with one
 * image per thread at a time.
 *
 * Per thread the im2col workspace holds
 *   col  [C*9][H*W]        the unfolded image; in backward pixel-major, [H*W][C*9], for the
 *                          weight gradient, then d(col) when the input gradient is im2col too
 *   dwt  [K*C*9 + K]       this thread's partial weight and bias gradients
 *   gemm [gemm_workspace_floats()]
 * Partial gradients are summed in thread order afterwards, so the result is deterministic for a
 * given thread count. */
#include "cpu.h"
#include "gemm.h"

#include <omp.h>
#include <string.h>

static size_t per_thread_floats(int C, int K, int H, int W) {
    size_t col = (size_t)C * 9 * H * W, dwt = (size_t)K * C * 9 + K;
    size_t round = 16; /* keep every region 64-byte aligned */
    return (col + round - 1) / round * round + (dwt + round - 1) / round * round +
           gemm_workspace_floats();
}

size_t cpu_conv3x3_workspace(int N, int C, int K, int H, int W) {
    (void)N;
    int threads = omp_get_max_threads();
    size_t floats = per_thread_floats(C, K, H, W) * (size_t)threads;
    if (winograd_applies(C, K, H, W)) { /* forward */
        size_t f = winograd_workspace_floats(C, K, H, W, threads);
        if (f > floats) floats = f;
    }
    if (winograd_applies(K, C, H, W)) { /* input gradient */
        size_t f = winograd_workspace_floats(K, C, H, W, threads);
        if (f > floats) floats = f;
    }
    return floats * sizeof(float);
}

/* col[(c*9 + ky*3 + kx)][y*W + x] = x[c][y + ky - 1][x + kx - 1], zero outside the image. */
static void im2col(const float *x, float *col, int C, int H, int W) {
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                float *dst = col + ((size_t)(c * 9 + ky * 3 + kx)) * H * W;
                for (int y = 0; y < H; y++) {
                    int sy = y + ky - 1;
                    float *d = dst + y * W;
                    if (sy < 0 || sy >= H) {
                        memset(d, 0, (size_t)W * sizeof(float));
                        continue;
                    }
                    const float *s = x + ((size_t)c * H + sy) * W + (kx - 1);
                    int x0 = kx == 0 ? 1 : 0, x1 = kx == 2 ? W - 1 : W;
                    if (kx == 0) d[0] = 0.0f;
                    for (int xx = x0; xx < x1; xx++) d[xx] = s[xx];
                    if (kx == 2) d[W - 1] = 0.0f;
                }
            }
}

/* The same unfolding stored pixel-major, colT[y*W + x][c*9 + ky*3 + kx]: the weight gradient's
 * GEMM then reads it as a plain row-major operand (packed by row copies) instead of a transposed
 * one (packed element by element). Writes are sequential; the 3 rows read per channel and pixel
 * stay in cache from one pixel to the next. */
static void im2col_t(const float *x, float *colT, int C, int H, int W) {
    size_t HW = (size_t)H * W;
    float *d = colT;
    for (int y = 0; y < H; y++)
        for (int xx = 0; xx < W; xx++)
            for (int c = 0; c < C; c++, d += 9)
                for (int ky = 0; ky < 3; ky++) {
                    int sy = y + ky - 1;
                    if (sy < 0 || sy >= H) {
                        d[ky * 3] = d[ky * 3 + 1] = d[ky * 3 + 2] = 0.0f;
                        continue;
                    }
                    const float *r = x + c * HW + (size_t)sy * W + xx;
                    d[ky * 3] = xx > 0 ? r[-1] : 0.0f;
                    d[ky * 3 + 1] = r[0];
                    d[ky * 3 + 2] = xx < W - 1 ? r[1] : 0.0f;
                }
}

/* The adjoint of im2col: dx[c][y + ky - 1][x + kx - 1] += col[(c*9 + ky*3 + kx)][y*W + x]. */
static void col2im(const float *col, float *dx, int C, int H, int W) {
    memset(dx, 0, (size_t)C * H * W * sizeof(float));
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < 3; ky++)
            for (int kx = 0; kx < 3; kx++) {
                const float *src = col + ((size_t)(c * 9 + ky * 3 + kx)) * H * W;
                for (int y = 0; y < H; y++) {
                    int sy = y + ky - 1;
                    if (sy < 0 || sy >= H) continue;
                    float *d = dx + ((size_t)c * H + sy) * W + (kx - 1);
                    const float *s = src + y * W;
                    int x0 = kx == 0 ? 1 : 0, x1 = kx == 2 ? W - 1 : W;
                    for (int xx = x0; xx < x1; xx++) d[xx] += s[xx];
                }
            }
}

void cpu_conv3x3_forward(const float *x, const float *w, const float *b, float *y, int N, int C,
                         int K, int H, int W, int relu, void *ws) {
    if (winograd_applies(C, K, H, W)) {
        winograd_conv3x3(x, w, 0, b, relu, NULL, y, N, C, K, H, W, ws);
        return;
    }
    int HW = H * W, C9 = C * 9;
    size_t stride = per_thread_floats(C, K, H, W);
#pragma omp parallel
    {
        float *col = (float *)ws + stride * (size_t)omp_get_thread_num();
        float *gws = col + stride - gemm_workspace_floats();
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            float *yn = y + (size_t)n * K * HW;
            im2col(x + (size_t)n * C * HW, col, C, H, W);
            for (int k = 0; k < K; k++)
                for (int i = 0; i < HW; i++) yn[k * HW + i] = b[k];
            /* y_n[K][HW] += w[K][C9] col[C9][HW] */
            gemm(K, HW, C9, 1.0f, w, C9, 1, col, HW, 1, 1.0f, yn, HW, gws);
            if (relu)
                for (int i = 0; i < K * HW; i++) yn[i] = yn[i] > 0.0f ? yn[i] : 0.0f;
        }
    }
}

void cpu_conv3x3_backward(const float *x, const float *w, const float *dy, float *dx, float *dw,
                          float *db, int N, int C, int K, int H, int W, const float *dx_mask,
                          void *ws) {
    int HW = H * W, C9 = C * 9;
    size_t stride = per_thread_floats(C, K, H, W);
    size_t col_floats = ((size_t)C9 * HW + 15) / 16 * 16;
    size_t dw_floats = (size_t)K * C9;
    int winograd_dx = dx && winograd_applies(K, C, H, W);
#pragma omp parallel
    {
        int nt = omp_get_num_threads();
        float *col = (float *)ws + stride * (size_t)omp_get_thread_num();
        float *dwt = col + col_floats; /* [K][C9] then [K] */
        float *gws = col + stride - gemm_workspace_floats();
        memset(dwt, 0, (dw_floats + K) * sizeof(float));
#pragma omp for schedule(static)
        for (int n = 0; n < N; n++) {
            const float *dyn = dy + (size_t)n * K * HW;
            im2col_t(x + (size_t)n * C * HW, col, C, H, W);
            /* dwt[K][C9] += dy_n[K][HW] colT[HW][C9] */
            gemm(K, C9, HW, 1.0f, dyn, HW, 1, col, C9, 1, 1.0f, dwt, C9, gws);
            for (int k = 0; k < K; k++) {
                float s = 0.0f;
                for (int i = 0; i < HW; i++) s += dyn[k * HW + i];
                dwt[dw_floats + k] += s;
            }
            if (dx && !winograd_dx) {
                /* dcol[C9][HW] = w^T[C9][K] dy_n[K][HW], reusing col */
                float *dxn = dx + (size_t)n * C * HW;
                gemm(C9, HW, K, 1.0f, w, 1, C9, dyn, HW, 1, 0.0f, col, HW, gws);
                col2im(col, dxn, C, H, W);
                if (dx_mask) {
                    const float *mn = dx_mask + (size_t)n * C * HW;
                    for (int i = 0; i < C * HW; i++) dxn[i] = mn[i] > 0.0f ? dxn[i] : 0.0f;
                }
            }
        }
        /* Sum the per-thread partials in thread order (implicit barrier above). */
#pragma omp for schedule(static)
        for (size_t i = 0; i < dw_floats + K; i++) {
            float s = 0.0f;
            for (int t = 0; t < nt; t++) s += ((float *)ws + stride * (size_t)t + col_floats)[i];
            if (i < dw_floats)
                dw[i] = s;
            else
                db[i - dw_floats] = s;
        }
    }
    /* The input gradient is the adjoint convolution: dy through the 180-degree rotated,
     * transposed filters (after the weight gradient, since both use the workspace). */
    if (winograd_dx) winograd_conv3x3(dy, w, 1, NULL, 0, dx_mask, dx, N, K, C, H, W, ws);
}
