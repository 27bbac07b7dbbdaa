/* Max pool, window = stride = k: x[N][C][H][W] -> y[N][C][H/k][W/k] (floor, as nn.MaxPool2d(k)).
 * NaN propagates as in PyTorch: an element replaces the window's maximum when it is larger or
 * NaN, so a window with a NaN gives NaN, and its gradient goes to the last NaN of the window
 * (row-major), else to the first maximum.
 * The window loops are written once, for any k, and inlined with the constant k = 2 for the
 * common 2x2 pool, where they unroll (and the forward pass vectorises); the 2x2 backward has a
 * row loop of its own that vectorises too (backward_row2). */
#include "cpu.h"

#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

/* yp[Ho][Wo] from one plane xp[H][W]. */
INLINE void forward_plane(const float *restrict xp, float *restrict yp, int W, int Ho, int Wo, int k) {
    for (int i = 0; i < Ho; i++)
        for (int j = 0; j < Wo; j++) {
            const float *win = xp + (size_t)i * k * W + (size_t)j * k;
            float m = win[0];
            int nan = isnan(m) != 0; /* kept apart from m, so that the maximum stays a vector max */
            for (int a = 0; a < k; a++) {
                const float *row = win + (size_t)a * W;
                for (int b = a ? 0 : 1; b < k; b++) {
                    m = row[b] > m ? row[b] : m;
                    nan |= isnan(row[b]) != 0;
                }
            }
            yp[i * Wo + j] = nan ? NAN : m;
        }
}

/* One row of windows: rows i*k .. i*k+k-1 of a plane, x at r, dx at d, dy at g[Wo]. Branch-free:
 * which element of a window wins is data-dependent, and branching on it (as the compiler does
 * for if/else here) mispredicts so often that the 2x2 pool ran 2.8x slower on random data. The
 * winner's offset is kept with a mask, and its gradient stored once, after the window is zeroed. */
INLINE void backward_row(const float *restrict r, const float *restrict g, float *restrict d, int W, int Wo,
                         int k, int relu) {
    for (int j = 0; j < Wo; j++) {
        const float *win = r + j * k;
        float *dwin = d + j * k;
        /* The first maximum in row-major window order wins (strict '>', as PyTorch picks on
         * ties), or the last NaN; best = its offset a * W + b from the window's corner. */
        float m = win[0];
        int best = 0;
        for (int a = 0; a < k; a++)
            for (int b = a ? 0 : 1; b < k; b++) {
                float c = win[a * W + b];
                int newer = -(c > m || isnan(c)); /* all ones when c is the new maximum */
                best = (best & ~newer) | ((a * W + b) & newer);
                m = newer ? c : m;
            }
        for (int a = 0; a < k; a++)
            for (int b = 0; b < k; b++) dwin[a * W + b] = 0.0f;
        /* Through the ReLU too: its output x is 0 wherever its input was <= 0 (NaN passes). */
        dwin[best] = (relu & (m <= 0.0f)) ? 0.0f : g[j];
    }
}

/* A float's bits as an int, and back (memcpy: no aliasing questions, and it still vectorises). */
static inline int bits(float v) {
    int u;
    memcpy(&u, &v, sizeof u);
    return u;
}
static inline float from_bits(int u) {
    float v;
    memcpy(&v, &u, sizeof v);
    return v;
}

/* backward_row for k = 2 on rows r0, r1 of x and d0, d1 of dx, written so that it vectorises
 * (backward_row's store to the winner's offset does not): the window's winner, the last NaN if
 * it has one, else the first element equal to its maximum m, as backward_row picks; the
 * gradient is handed along the window in row-major order to the first element selected.
 * Branch-free with integer masks on the bits, as backward_row, also in the scalar iterations the
 * vector loop leaves (float selects come out as branches there, and rows of 3 or 7 windows are
 * mostly such iterations). 1.4-1.5x faster than backward_row on 512x64x31x31 and 512x256x15x15
 * of random data, the same on 512x256x7x7. */
static void backward_row2(const float *restrict r0, const float *restrict r1, const float *restrict g,
                          float *restrict d0, float *restrict d1, int Wo, int relu) {
    int gate = relu ? 0 : -1; /* all ones: the gradient passes whatever m is */
    for (int j = 0; j < Wo; j++) {
        float x0 = r0[2 * j], x1 = r0[2 * j + 1], x2 = r1[2 * j], x3 = r1[2 * j + 1];
        float m = x0;
        m = x1 > m ? x1 : m;
        m = x2 > m ? x2 : m;
        m = x3 > m ? x3 : m;
        int n1 = -(x1 != x1), n2 = -(x2 != x2), n3 = -(x3 != x3); /* all ones: NaN */
        int nan = -(x0 != x0) | n1 | n2 | n3;
        int left = bits(g[j]) & (gate | nan | -(m > 0.0f)); /* the gradient not yet placed */
        /* With a NaN: the last NaN (x3 takes what is left); else the first equal to m. */
        int first0 = (nan & ~(n1 | n2 | n3)) | (~nan & -(x0 == m));
        int first1 = (nan & n1 & ~(n2 | n3)) | (~nan & -(x1 == m));
        int first2 = (nan & n2 & ~n3) | (~nan & -(x2 == m));
        d0[2 * j] = from_bits(left & first0), left &= ~first0;
        d0[2 * j + 1] = from_bits(left & first1), left &= ~first1;
        d1[2 * j] = from_bits(left & first2), left &= ~first2;
        d1[2 * j + 1] = from_bits(left);
    }
}

/* dxp[H][W] of one plane: the windows' rows, then 0 in the columns right of the last window and
 * in the rows below it. */
INLINE void backward_plane(const float *xp, const float *gp, float *dxp, int H, int W, int Ho, int Wo, int k,
                           int relu) {
    for (int i = 0; i < Ho; i++) {
        size_t row = (size_t)i * k * W;
        if (k == 2)
            backward_row2(xp + row, xp + row + W, gp + (size_t)i * Wo, dxp + row, dxp + row + W, Wo, relu);
        else backward_row(xp + row, gp + (size_t)i * Wo, dxp + row, W, Wo, k, relu);
        for (int a = 0; a < k; a++)
            for (int c = Wo * k; c < W; c++) dxp[row + (size_t)a * W + c] = 0.0f;
    }
    for (size_t i = (size_t)Ho * k * W; i < (size_t)H * W; i++) dxp[i] = 0.0f;
}

void cpu_maxpool_forward(const void *xv, void *yv, int N, int C, int H, int W, int k) {
    const float *x = xv;
    float *y = yv;
    int Ho = H / k, Wo = W / k;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * C; p++) {
        const float *xp = x + (size_t)p * H * W;
        float *yp = y + (size_t)p * Ho * Wo;
        if (k == 2) forward_plane(xp, yp, W, Ho, Wo, 2);
        else forward_plane(xp, yp, W, Ho, Wo, k);
    }
}

void cpu_maxpool_backward(const void *xv, const void *dyv, void *dxv, int N, int C, int H, int W, int k,
                          int relu) {
    const float *x = xv, *dy = dyv;
    float *dx = dxv;
    int Ho = H / k, Wo = W / k;
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * C; p++) {
        const float *xp = x + (size_t)p * H * W, *gp = dy + (size_t)p * Ho * Wo;
        float *dxp = dx + (size_t)p * H * W;
        if (k == 2) backward_plane(xp, gp, dxp, H, W, Ho, Wo, 2, relu);
        else backward_plane(xp, gp, dxp, H, W, Ho, Wo, k, relu);
    }
}
