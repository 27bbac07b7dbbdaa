/* Max pool, window = stride = k: x[N][C][H][W] -> y[N][C][H/k][W/k] (floor, as nn.MaxPool2d(k)).
 * NaN propagates as in PyTorch: an element replaces the window's maximum when it is larger or
 * NaN, so a window with a NaN gives NaN, and its gradient goes to the last NaN of the window
 * (row-major), else to the first maximum. The forward records that winner in idx (kernels.h),
 * so the backward reads one byte per window instead of the window's k*k inputs.
 * The window loops are written once, for any k, and inlined with the constant k = 2 for the
 * common 2x2 pool, where they unroll; the 2x2 rows have loops of their own that vectorise
 * (forward_row2, backward_row2); where the float path is avx512, the forward with winners and
 * the backward of rows of 4 or more windows run AVX-512 forms (forward_row2_avx512,
 * backward_plane2_avx512), and elsewhere the backward of rows of few windows a sparse one
 * (backward_plane2_sparse). */
#include "cpu.h"

#include <math.h>
#include <string.h>

#define INLINE static inline __attribute__((always_inline))

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

/* yp[Ho][Wo] from one plane xp[H][W], no winners (a forward no backward follows). */
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

/* One row of windows (rows i*k .. i*k+k-1 of a plane at r): y[Wo] and the winners ip[Wo].
 * Branch-free: which element of a window wins is data-dependent, and branching on it mispredicts
 * so often that the 2x2 pool ran 2.8x slower on random data when it branched. */
INLINE void forward_row(const float *restrict r, float *restrict y, unsigned char *restrict ip, int W, int Wo,
                        int k) {
    for (int j = 0; j < Wo; j++) {
        const float *win = r + j * k;
        float m = win[0];
        int best = 0;
        for (int a = 0; a < k; a++)
            for (int b = a ? 0 : 1; b < k; b++) {
                float c = win[a * W + b];
                int newer = -(c > m || isnan(c)); /* all ones when c is the new maximum */
                best = (best & ~newer) | ((a * k + b) & newer);
                m = newer ? c : m;
            }
        y[j] = m;
        ip[j] = (unsigned char)(best | (m <= 0.0f ? 0 : MAXPOOL_PASSES));
    }
}

/* forward_row for k = 2 on rows r0, r1, written so that it vectorises: the window as a tree,
 * (x0, x1) and (x2, x3) and then the pairs, each step keeping the later element only when it
 * is larger or NaN. That picks what the row-major scan picks: the first maximum (ties keep the
 * earlier side), or the last NaN (a NaN on the later side wins, a later non-NaN never beats
 * one); the maximum is NaN exactly when the window holds one. */
static void forward_row2(const float *restrict r0, const float *restrict r1, float *restrict y,
                         unsigned char *restrict ip, int Wo) {
    for (int j = 0; j < Wo; j++) {
        float x0 = r0[2 * j], x1 = r0[2 * j + 1], x2 = r1[2 * j], x3 = r1[2 * j + 1];
        int t1 = x1 > x0 || x1 != x1, t3 = x3 > x2 || x3 != x3;
        float m01 = t1 ? x1 : x0, m23 = t3 ? x3 : x2;
        int t = m23 > m01 || m23 != m23;
        float m = t ? m23 : m01;
        int best = t ? 2 + t3 : t1;
        y[j] = m;
        ip[j] = (unsigned char)(best | (m <= 0.0f ? 0 : MAXPOOL_PASSES));
    }
}

#if defined(__x86_64__)
#include <immintrin.h>
/* forward_row2 in AVX-512, 16 windows a step (the rest masked): compiled for it here, run where
 * the float path in use is avx512 (cpu_maxpool_plane). The compiler's SSE2 form of forward_row2
 * ran about 2.4 ns a window on an AMD EPYC Zen 4, whatever the row's length (docs/results.md).
 * The same comparisons: a later element wins when it is greater (ordered) or NaN. */
#define WIDE __attribute__((target("avx512f,avx512bw,avx512vl")))
/* The first n lanes of 16 (none for n <= 0, all for n >= 16): a masked step's loads and stores. */
static __mmask16 first_lanes(int n) { return (__mmask16)(n <= 0 ? 0u : n >= 16 ? 0xffffu : (1u << n) - 1); }
WIDE static __mmask16 wins(__m512 later, __m512 earlier) {
    return _mm512_cmp_ps_mask(later, earlier, _CMP_GT_OQ) | _mm512_cmp_ps_mask(later, later, _CMP_UNORD_Q);
}
/* The even (odd) elements of the 2n floats at r, n <= 16, in the lanes of *e (*o). */
WIDE static void split(const float *r, int n, __m512 *e, __m512 *o) {
    __m512 a = _mm512_maskz_loadu_ps(first_lanes(2 * n), r),
           b = _mm512_maskz_loadu_ps(first_lanes(2 * n - 16), r + 16);
    const __m512i even = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    *e = _mm512_permutex2var_ps(a, even, b);
    *o = _mm512_permutex2var_ps(a, _mm512_add_epi32(even, _mm512_set1_epi32(1)), b);
}
WIDE static void forward_row2_avx512(const float *r0, const float *r1, float *y, unsigned char *ip, int Wo) {
    const __m512i one = _mm512_set1_epi32(1), two = _mm512_set1_epi32(2);
    for (int j = 0; j < Wo; j += 16) {
        int n = Wo - j < 16 ? Wo - j : 16;
        __m512 x0, x1, x2, x3;
        split(r0 + 2 * j, n, &x0, &x1);
        split(r1 + 2 * j, n, &x2, &x3);
        __mmask16 t1 = wins(x1, x0), t3 = wins(x3, x2);
        __m512 m01 = _mm512_mask_blend_ps(t1, x0, x1), m23 = _mm512_mask_blend_ps(t3, x2, x3);
        __mmask16 t = wins(m23, m01);
        __m512 m = _mm512_mask_blend_ps(t, m01, m23);
        __m512i best =
            _mm512_mask_add_epi32(_mm512_maskz_mov_epi32(t1, one), t, two, _mm512_maskz_mov_epi32(t3, one));
        __mmask16 passes =
            (__mmask16)~_mm512_cmp_ps_mask(m, _mm512_setzero_ps(), _CMP_LE_OQ); /* NaN passes */
        best = _mm512_mask_or_epi32(best, passes, best, _mm512_set1_epi32(MAXPOOL_PASSES));
        __mmask16 out = first_lanes(n);
        _mm512_mask_storeu_ps(y + j, out, m);
        _mm512_mask_cvtepi32_storeu_epi8(ip + j, out, best);
    }
}

/* The 2x2 backward of one plane in AVX-512, 16 windows a step (the rest masked): each window's
 * four elements take its gradient (through the ReLU's gate) or 0 by its winner byte, as
 * backward_row2, interleaved into the two rows of dx; then the column and row no window
 * covers. */
WIDE static void backward_plane2_avx512(const unsigned char *ip, const float *g, float *dx, int H, int W,
                                        int relu) {
    int Ho = H / 2, Wo = W / 2;
    const __m512i lo = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0),
                  hi = _mm512_add_epi32(lo, _mm512_set1_epi32(8)), mask7 = _mm512_set1_epi32(~MAXPOOL_PASSES);
    for (int i = 0; i < Ho; i++) {
        float *d0 = dx + (size_t)2 * i * W, *d1 = d0 + W;
        for (int j = 0; j < Wo; j += 16) {
            int n = Wo - j < 16 ? Wo - j : 16;
            __mmask16 m = first_lanes(n);
            __m512i b = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, ip + (size_t)i * Wo + j));
            __m512 v = _mm512_maskz_loadu_ps(m, g + (size_t)i * Wo + j);
            if (relu)
                v = _mm512_maskz_mov_ps(_mm512_test_epi32_mask(b, _mm512_set1_epi32(MAXPOOL_PASSES)), v);
            __m512i at = _mm512_and_si512(b, mask7);
            __m512 w[4];
            for (int q = 0; q < 4; q++)
                w[q] = _mm512_maskz_mov_ps(_mm512_cmpeq_epi32_mask(at, _mm512_set1_epi32(q)), v);
            /* each dx row: 2 n floats from 2 j, the first 16 and the rest */
            __mmask16 m0 = first_lanes(2 * n), m1 = first_lanes(2 * n - 16);
            _mm512_mask_storeu_ps(d0 + 2 * j, m0, _mm512_permutex2var_ps(w[0], lo, w[1]));
            _mm512_mask_storeu_ps(d0 + 2 * j + 16, m1, _mm512_permutex2var_ps(w[0], hi, w[1]));
            _mm512_mask_storeu_ps(d1 + 2 * j, m0, _mm512_permutex2var_ps(w[2], lo, w[3]));
            _mm512_mask_storeu_ps(d1 + 2 * j + 16, m1, _mm512_permutex2var_ps(w[2], hi, w[3]));
        }
        if (W % 2) d0[W - 1] = d1[W - 1] = 0.0f;
    }
    if (H % 2) memset(dx + (size_t)(H - 1) * W, 0, (size_t)W * sizeof *dx);
}
#endif

/* One row of windows of dx at d from the winners ip[Wo] and dy at g[Wo]: each window zeroed, its
 * gradient stored once at the winner (through the ReLU with relu: 0 unless it passes). */
INLINE void backward_row(const unsigned char *restrict ip, const float *restrict g, float *restrict d, int W,
                         int Wo, int k, int relu) {
    for (int j = 0; j < Wo; j++) {
        float *dwin = d + j * k;
        int best = ip[j] & ~MAXPOOL_PASSES;
        for (int a = 0; a < k; a++)
            for (int b = 0; b < k; b++) dwin[a * W + b] = 0.0f;
        dwin[best / k * W + best % k] = relu && !(ip[j] & MAXPOOL_PASSES) ? 0.0f : g[j];
    }
}

/* backward_row for k = 2 on rows d0, d1 of dx, written so that it vectorises (backward_row's
 * store to the winner's offset does not): each of the window's four elements takes the gradient
 * or zero by an integer mask on its bits. */
static void backward_row2(const unsigned char *restrict ip, const float *restrict g, float *restrict d0,
                          float *restrict d1, int Wo, int relu) {
    int gate = relu ? 0 : -1; /* all ones: the gradient passes whatever the winner */
    for (int j = 0; j < Wo; j++) {
        int b = ip[j], at = b & ~MAXPOOL_PASSES;
        int left = bits(g[j]) & (gate | -((b & MAXPOOL_PASSES) != 0));
        d0[2 * j] = from_bits(left & -(at == 0));
        d0[2 * j + 1] = from_bits(left & -(at == 1));
        d1[2 * j] = from_bits(left & -(at == 2));
        d1[2 * j + 1] = from_bits(left & -(at == 3));
    }
}

/* One plane: y and, unless ip is NULL, the winners (k = 2 on AVX-512 where wide). */
INLINE void pool_plane(const float *xp, float *yp, unsigned char *ip, int W, int Ho, int Wo, int k,
                       int wide) {
    (void)wide; /* used on x86-64 only */
    if (!ip) {
        forward_plane(xp, yp, W, Ho, Wo, k);
        return;
    }
    for (int i = 0; i < Ho; i++) {
        const float *r = xp + (size_t)i * k * W;
#if defined(__x86_64__)
        if (k == 2 && wide) {
            forward_row2_avx512(r, r + W, yp + (size_t)i * Wo, ip + (size_t)i * Wo, Wo);
            continue;
        }
#endif
        if (k == 2) forward_row2(r, r + W, yp + (size_t)i * Wo, ip + (size_t)i * Wo, Wo);
        else forward_row(r, yp + (size_t)i * Wo, ip + (size_t)i * Wo, W, Wo, k);
    }
}

void cpu_maxpool_plane(const float *x, float *y, unsigned char *idx, int H, int W, int k) {
    int wide = W / k >= 4 && gemm_path_avx512(); /* chosen where the CPU has it */
    if (k == 2) pool_plane(x, y, idx, W, H / 2, W / 2, 2, wide);
    else pool_plane(x, y, idx, W, H / k, W / k, k, wide);
}

/* dxp[H][W] of one plane: the windows' rows, then 0 in the columns right of the last window and
 * in the rows below it. */
INLINE void backward_plane(const unsigned char *ip, const float *gp, float *dxp, int H, int W, int Ho, int Wo,
                           int k, int relu) {
    for (int i = 0; i < Ho; i++) {
        size_t row = (size_t)i * k * W;
        if (k == 2)
            backward_row2(ip + (size_t)i * Wo, gp + (size_t)i * Wo, dxp + row, dxp + row + W, Wo, relu);
        else backward_row(ip + (size_t)i * Wo, gp + (size_t)i * Wo, dxp + row, W, Wo, k, relu);
        for (int a = 0; a < k; a++)
            for (int c = Wo * k; c < W; c++) dxp[row + (size_t)a * W + c] = 0.0f;
    }
    for (size_t i = (size_t)Ho * k * W; i < (size_t)H * W; i++) dxp[i] = 0.0f;
}

void cpu_maxpool_forward(const void *xv, void *yv, unsigned char *idx, int N, int C, int H, int W, int k) {
    const float *x = xv;
    float *y = yv;
    int Ho = H / k, Wo = W / k;
    CHECK(k >= 1 && k * k <= MAXPOOL_PASSES);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * C; p++)
        cpu_maxpool_plane(x + (size_t)p * H * W, y + (size_t)p * Ho * Wo,
                          idx ? idx + (size_t)p * Ho * Wo : NULL, H, W, k);
}

/* The 2x2 backward as a zeroed plane and one store per window, for rows of windows that
 * backward_row2's (SSE2) vector loop covers in part or not at all: rows of 15, 7 or 3 windows (the
 * odd maps) ran 1.2x - 2.3x slower through its scalar remainder, and 4 windows (8x8) 1.8x
 * (docs/results.md). */
static void backward_plane2_sparse(const unsigned char *restrict ip, const float *restrict g,
                                   float *restrict dx, int H, int W, int relu) {
    int Ho = H / 2, Wo = W / 2, gate = relu ? 0 : -1;
    memset(dx, 0, (size_t)H * W * sizeof *dx);
    for (int i = 0; i < Ho; i++)
        for (int j = 0; j < Wo; j++) {
            int b = ip[i * Wo + j], at = b & ~MAXPOOL_PASSES;
            int v = bits(g[i * Wo + j]) & (gate | -((b & MAXPOOL_PASSES) != 0));
            dx[(size_t)(2 * i + (at >> 1)) * W + 2 * j + (at & 1)] = from_bits(v);
        }
}

void cpu_maxpool_backward_plane(const unsigned char *idx, const float *dy, float *dx, int H, int W, int k,
                                int relu) {
#if defined(__x86_64__)
    if (k == 2 && W / 2 >= 4 && gemm_path_avx512()) { /* as cpu_maxpool_plane */
        backward_plane2_avx512(idx, dy, dx, H, W, relu);
        return;
    }
#endif
    if (k == 2 && (W / 2 % 4 != 0 || W / 2 < 8)) backward_plane2_sparse(idx, dy, dx, H, W, relu);
    else if (k == 2) backward_plane(idx, dy, dx, H, W, H / 2, W / 2, 2, relu);
    else backward_plane(idx, dy, dx, H, W, H / k, W / k, k, relu);
}

void cpu_maxpool_backward(const unsigned char *idx, const void *dyv, void *dxv, int N, int C, int H, int W,
                          int k, int relu) {
    const float *dy = dyv;
    float *dx = dxv;
    size_t HWo = (size_t)(H / k) * (W / k);
    CHECK(k >= 1 && k * k <= MAXPOOL_PASSES);
#pragma omp parallel for schedule(static)
    for (long p = 0; p < (long)N * C; p++)
        cpu_maxpool_backward_plane(idx + p * HWo, dy + p * HWo, dx + (size_t)p * H * W, H, W, k, relu);
}
