/* Stride-1 convolution, k x k filters (1 <= k <= 5), zero padding pad (struct conv_shape):
 * x[N][C][H][W] -> y[N][K][Ho][Wo].
 *
 * Each pass runs either Winograd F(m x m, 3x3) (winograd.c) or im2col + GEMM, as plan() below
 * decides from the shape; the forward and the float filter gradient on few input channels run
 * direct kernels instead (small_conv.c, direct_forward, direct_filter_grad), and on AMX tiles every pass of a
 * shape conv_tiles_fit takes runs the tiles' direct convolution (conv_tiles.c, direct_tiles). im2col + GEMM
 * works on a chunk of nb images per thread at a time (images_per_gemm: one, except on AMX tiles): the
 * unfolded chunk col[C*k*k][nb][Ho*Wo] turns the convolution into one matrix product per chunk.
 *
 * Per thread the im2col workspace holds
 *   col  [C*k*k][nb*Ho*Wo] the unfolded chunk; in backward pixel-major, [nb*Ho*Wo][C*k*k], for
 *                          the weight gradient, then d(col) when the input gradient is im2col too
 *   dwt  [K*C*k*k + K]     this thread's partial weight and bias gradients
 *   yc   [K][nb*Ho*Wo]     when nb > 1: the chunk's y or dy side by side, as the GEMM reads and
 *                          writes them (one image's y_n[K][Ho*Wo] is them when nb is 1)
 *   gemm [gemm_workspace_floats()]
 * Partial gradients are summed in thread order afterwards, so the result is deterministic for a
 * given thread count. */
#include "cpu.h"
#include "gemm.h"

#include <omp.h>
#include <stdio.h>
#include <string.h>

static int out_pixels(const struct conv_shape *s) {
    return kernels_conv_out(s->H, s->k, s->pad) * kernels_conv_out(s->W, s->k, s->pad);
}

/* Images per im2col GEMM. One on the float and VDPBF16PS paths (their micro-tiles are 12 rows
 * high, and these are the results the float path always had). On AMX tiles as many as fit in
 * the tiles' column block (GEMM_TILES_NC pixels; at least one), so each GEMM packs its filter
 * operand once: one image of a small map makes a thin product (9 pixels of a 3x3 map fill 9 of
 * the 32 rows or k of a tile step) whose whole filter bank is packed, and whose whole weight
 * gradient is stored, once per image (measured: docs/results.md, bf16 on AMX tiles). */
static int images_per_gemm(const struct conv_shape *s, int tiles) {
    int hw = out_pixels(s), nb = tiles && hw < GEMM_TILES_NC ? GEMM_TILES_NC / hw : 1;
    return nb < s->N ? nb : s->N > 0 ? s->N : 1;
}

static size_t col_floats(const struct conv_shape *s, int nb) {
    return round16((size_t)s->C * s->k * s->k * nb * out_pixels(s));
}

static size_t per_thread_floats(const struct conv_shape *s, int nb) {
    size_t yc = nb > 1 ? round16((size_t)s->K * nb * out_pixels(s)) : 0;
    return col_floats(s, nb) + round16((size_t)s->K * s->C * s->k * s->k + s->K) + yc +
           gemm_workspace_floats();
}

/* The algorithm of each pass: 0 for im2col + GEMM, else Winograd F(m x m, 3x3) with output tile
 * m (2 to 5). Chosen from the shape and the products' number format:
 *   - Winograd needs a 3x3 "same" convolution (k 3, pad 1), a map of at least 2x2, and 16+
 *     channels on both sides of the pass (the GEMMs' depth is the channel count read, their
 *     height the count written; shallow sides such as RGB are faster as im2col). The forward
 *     reads C and writes K, the input gradient the reverse, the filter gradient reads both.
 *   - Float products: for all three passes the m with the fewest multiplies, a^2 per tile times
 *     the tiles (the last tile row and column may be partial); ties go to the smaller m
 *     (smaller coefficients, see winograd.c). Multiplies per output and channel pair, against
 *     9 direct: 32x32, 16x16, 8x8 m 4 2.25 (exact tiles); 31x31 m 4 2.4 (m 5 2.5); 15x15 m 5
 *     1.96 (m 4 2.56); 7x7 m 4 2.9 (m 5 4); 3x3 m 3 2.8 (m 4 4); 2x2 m 2 4. The transform
 *     domain batches the images of a chunk into one GEMM, so tiny maps still make wide
 *     products.
 *   - bf16 products: F(2x2) (larger tiles' transforms, coefficients up to 8, amplify the
 *     rounding of the transformed operands to bf16: relative L2 errors of 1e-2 - 2.7e-2 for
 *     m 3 and 4, 4.1e-2 for m 5, against 5.8e-3 at most for F(2x2) in tests/test_ops.c;
 *     airbench94 lost 0.26 points with m 4), for all three passes (the workshop CNN's even
 *     maps kept im2col for their filter gradient until 2026-11-29, so that their results
 *     stayed those from before Winograd; F(2x2) is 1.19x faster there: docs/results.md).
 *   - bf16 products on AMX tiles (gemm_bf16_tiles): no Winograd (the tiles' rate pays for the
 *     direct method's 2.25x more multiplies than F(2x2), and they skip its transforms); every
 *     pass of a shape conv_tiles_fit takes runs conv_tiles.c's direct convolution
 *     (direct_tiles), the few-input forward small_conv.c's (direct_forward), the others
 *     im2col + GEMM on chunks of images (images_per_gemm).
 * Measurements behind these choices: docs/results.md. */
struct conv_plan {
    int fwd, dx, dw;
};

/* Multiplies of Winograd F(m x m, 3x3) over an H x W map. */
static long winograd_cost(int m, int H, int W) {
    return (long)(m + 2) * (m + 2) * ((H + m - 1) / m) * ((W + m - 1) / m);
}

static struct conv_plan plan(const struct conv_shape *s, enum gemm_math math, int tiles) {
    struct conv_plan p = {0, 0, 0};
    if (s->k != 3 || s->pad != 1 || s->H < 2 || s->W < 2 || s->C < 16 || s->K < 16) return p;
    if (math == GEMM_BF16) {
        if (tiles) return p;
        p.fwd = p.dx = p.dw = 2;
        return p;
    }
    int best = 2;
    for (int m = 3; m <= 5; m++)
        if (winograd_cost(m, s->H, s->W) < winograd_cost(best, s->H, s->W)) best = m;
    p.fwd = p.dx = p.dw = best;
    return p;
}

/* Whether the forward runs small_conv.c's direct kernel: few input channels (a first layer on
 * RGB: C k^2 <= SMALL_CONV_CKK), on every path. On AMX tiles too: airbench94's 3 -> 24 2x2 layer
 * took 8.42 ms there by im2col on the tiles (8.24 ms of it not the tiles' arithmetic), 4.85 ms
 * by this kernel in fp32 (GPU machine's Xeon, 2026-11-30, batch 512, 2 threads). */
static int few_inputs(const struct conv_shape *s) { return s->C * s->k * s->k <= SMALL_CONV_CKK; }
static int direct_forward(const struct conv_shape *s) { return few_inputs(s); }
/* Whether the filter gradient runs small_conv.c's direct kernel: the same layers, float products. */
static int direct_filter_grad(const struct conv_shape *s, enum gemm_math math) {
    return math == GEMM_FP32 && few_inputs(s);
}

/* Whether this pass's products run on AMX tiles (the bf16 path in use; gemm_bf16_select may
 * change it between calls). */
static int on_tiles(enum gemm_math math) { return math == GEMM_BF16 && gemm_bf16_tiles(); }

/* Whether the passes run the tiles' direct convolution (conv_tiles.c): it reads zero-padded
 * bf16 copies of the input where im2col writes k^2 float copies and packs them again; the
 * shallow first layers (fewer than 16 channels: padded to 32 there) keep im2col. */
static int direct_tiles(const struct conv_shape *s, int tiles) {
    return tiles && conv_tiles_direct() && conv_tiles_fit(s);
}

/* Every pass lays the workspace out per thread as above (or as the Winograd code does), so one
 * size, the largest, serves them all, in both precisions (the two tables share
 * conv_workspace) and on every bf16 path (sized with the Winograd plans, which tiles only drop).
 * It depends on the thread count: the ops check it against the team they are about to start. */
static size_t workspace_bytes(const struct conv_shape *s) {
    int threads = omp_get_max_threads();
    size_t floats = per_thread_floats(s, images_per_gemm(s, 1)) * (size_t)threads +
                    round16((size_t)s->K * s->C * s->k * s->k); /* + the filters transposed */
    size_t direct = few_inputs(s) ? cpu_small_conv_workspace_floats(s, threads) : 0;
    if (direct > floats) floats = direct;
    size_t on_tiles = conv_tiles_fit(s) ? conv_tiles_workspace_floats(s, threads) : 0;
    if (on_tiles > floats) floats = on_tiles;
    for (int math = GEMM_FP32; math <= GEMM_BF16; math++) {
        struct conv_plan p = plan(s, math, 0);
        size_t f[3] = {0, 0, 0};
        if (p.fwd) f[0] = winograd_conv_workspace_floats(s->C, s->K, s->H, s->W, p.fwd, threads);
        if (p.dx) f[1] = winograd_conv_workspace_floats(s->K, s->C, s->H, s->W, p.dx, threads);
        if (p.dw) f[2] = winograd_filter_grad_workspace_floats(s->C, s->K, s->H, s->W, p.dw, threads);
        for (int i = 0; i < 3; i++)
            if (f[i] > floats) floats = f[i];
    }
    return floats * sizeof(float);
}

size_t cpu_conv_workspace(const struct conv_shape *s, unsigned passes) {
    (void)passes;
    return workspace_bytes(s);
}

/* The output columns [*lo, *hi) whose input column ox + kx - pad lies inside 0..W-1. */
static void valid_cols(int kx, int pad, int W, int Wo, int *lo, int *hi) {
    *lo = pad - kx > 0 ? pad - kx : 0;
    *hi = W + pad - kx < Wo ? W + pad - kx : Wo;
    if (*lo > Wo) *lo = Wo;
    if (*hi < *lo) *hi = *lo;
}

/* The unfoldings below are written for any k and pad and instantiated twice (always_inline):
 * once with the shape's values and once with the constants of the 3x3 "same" case (Ho = H,
 * Wo = W, k 3, pad 1), where their inner loops unroll and lose their bounds checks. That keeps
 * the common case as fast as code written for it alone (the generic im2col_t was 20-50% slower
 * there). */
#define INLINE static inline __attribute__((always_inline))

/* col[(c*k*k + ky*k + kx) * ld + oy*Wo + ox] = x[c][oy + ky - pad][ox + kx - pad], zero outside
 * the image (ld >= Ho*Wo: the chunk's other images sit beside it). */
INLINE void im2col_k(const float *x, float *col, size_t ld, int C, int H, int W, int Ho, int Wo, int k,
                     int pad) {
    for (int c = 0; c < C; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                float *dst = col + ((size_t)(c * k + ky) * k + kx) * ld;
                int x0, x1;
                valid_cols(kx, pad, W, Wo, &x0, &x1);
                for (int oy = 0; oy < Ho; oy++) {
                    int sy = oy + ky - pad;
                    float *d = dst + (size_t)oy * Wo;
                    if (sy < 0 || sy >= H) {
                        memset(d, 0, (size_t)Wo * sizeof(float));
                        continue;
                    }
                    const float *row = x + ((size_t)c * H + sy) * W;
                    /* The zero runs are at most pad long; as loops over pad they stay inline
                     * instead of becoming memset calls. */
                    for (int i = 0; i < pad; i++)
                        if (i < x0) d[i] = 0.0f;
                    for (int ox = x0; ox < x1; ox++) d[ox] = row[ox + kx - pad];
                    for (int i = 0; i < pad; i++)
                        if (x1 + i < Wo) d[x1 + i] = 0.0f;
                }
            }
}

static void im2col(const float *x, float *col, size_t ld, const struct conv_shape *s) {
    if (s->k == 3 && s->pad == 1) im2col_k(x, col, ld, s->C, s->H, s->W, s->H, s->W, 3, 1);
    else
        im2col_k(x, col, ld, s->C, s->H, s->W, kernels_conv_out(s->H, s->k, s->pad),
                 kernels_conv_out(s->W, s->k, s->pad), s->k, s->pad);
}

/* The same unfolding stored pixel-major, colT[oy*Wo + ox][c*k*k + ky*k + kx]: the weight
 * gradient's GEMM then reads it as a plain row-major operand (packed by row copies) instead of a
 * transposed one (packed element by element). Writes are sequential; the k rows read per channel
 * and pixel stay in cache from one pixel to the next. */
INLINE void im2col_t_k(const float *x, float *colT, int C, int H, int W, int Ho, int Wo, int k, int pad) {
    size_t HW = (size_t)H * W;
    float *d = colT;
    for (int oy = 0; oy < Ho; oy++)
        for (int ox = 0; ox < Wo; ox++) {
            int sx0 = ox - pad; /* the input column under kx = 0 */
            for (int c = 0; c < C; c++)
                for (int ky = 0; ky < k; ky++, d += k) {
                    int sy = oy + ky - pad;
                    if (sy < 0 || sy >= H) {
                        for (int kx = 0; kx < k; kx++) d[kx] = 0.0f;
                        continue;
                    }
                    const float *r = x + c * HW + (size_t)sy * W;
                    for (int kx = 0, sx = sx0; kx < k; kx++, sx++) d[kx] = sx >= 0 && sx < W ? r[sx] : 0.0f;
                }
        }
}

static void im2col_t(const float *x, float *colT, const struct conv_shape *s) {
    if (s->k == 3 && s->pad == 1) im2col_t_k(x, colT, s->C, s->H, s->W, s->H, s->W, 3, 1);
    else
        im2col_t_k(x, colT, s->C, s->H, s->W, kernels_conv_out(s->H, s->k, s->pad),
                   kernels_conv_out(s->W, s->k, s->pad), s->k, s->pad);
}

/* The adjoint of im2col: dx[c][oy + ky - pad][ox + kx - pad] += col[(c*k*k + ky*k + kx) * ld +
 * oy*Wo + ox], in (ky, kx) order for each element of dx. */
static void col2im(const float *col, size_t ld, float *dx, const struct conv_shape *s) {
    int k = s->k, pad = s->pad, H = s->H, W = s->W;
    int Ho = kernels_conv_out(H, k, pad), Wo = kernels_conv_out(W, k, pad);
    memset(dx, 0, (size_t)s->C * H * W * sizeof(float));
    for (int c = 0; c < s->C; c++)
        for (int ky = 0; ky < k; ky++)
            for (int kx = 0; kx < k; kx++) {
                const float *src = col + ((size_t)(c * k + ky) * k + kx) * ld;
                int x0, x1;
                valid_cols(kx, pad, W, Wo, &x0, &x1);
                for (int oy = 0; oy < Ho; oy++) {
                    int sy = oy + ky - pad;
                    if (sy < 0 || sy >= H) continue;
                    float *row = dx + ((size_t)c * H + sy) * W;
                    const float *r = src + (size_t)oy * Wo;
                    for (int ox = x0; ox < x1; ox++) row[ox + kx - pad] += r[ox];
                }
            }
}

/* The chunk's y: images [n0, n0 + cnt), with the bias, from its unfolding col[Ckk][ld] (ld =
 * nb*HWo). yc is y_n0 itself when nb is 1, else the chunk's [K][ld] buffer, copied out after. */
static void forward_chunk(gemm_fn *mm, const struct conv_shape *s, const float *x, const float *w,
                          const float *b, float *y, int relu, int n0, int cnt, int nb, float *col, float *yc,
                          float *gws) {
    int K = s->K, HWo = out_pixels(s), Ckk = s->C * s->k * s->k;
    size_t CHW = (size_t)s->C * s->H * s->W, ld = (size_t)nb * HWo, cols = (size_t)cnt * HWo;
    for (int j = 0; j < cnt; j++) im2col(x + (n0 + j) * CHW, col + (size_t)j * HWo, ld, s);
    if (b)
        for (int o = 0; o < K; o++)
            for (size_t i = 0; i < cols; i++) yc[o * ld + i] = b[o];
    /* yc[K][cols] = (b ? yc : 0) + w[K][Ckk] col[Ckk][cols] */
    mm(K, (int)cols, Ckk, 1.0f, w, Ckk, 1, col, (int)ld, 1, b ? 1.0f : 0.0f, yc, (int)ld, gws);
    for (int j = 0; j < cnt; j++) {
        float *yn = y + (size_t)(n0 + j) * K * HWo;
        if (nb > 1)
            for (int o = 0; o < K; o++)
                memcpy(yn + (size_t)o * HWo, yc + o * ld + (size_t)j * HWo, HWo * sizeof(float));
        if (relu)
            for (int i = 0; i < K * HWo; i++) yn[i] = yn[i] <= 0.0f ? 0.0f : yn[i];
    }
}

/* y = the convolution's sums (+ b), then ReLU when relu: Winograd or im2col + GEMM by the
 * forward's plan. */
static void sums_forward(enum gemm_math math, int tiles, const struct conv_shape *s, const float *x,
                         const float *w, const float *b, float *y, int relu, void *ws) {
    int m = plan(s, math, tiles).fwd;
    if (m) {
        winograd_conv3x3(x, NULL, w, 0, b, relu, NULL, NULL, y, s->N, s->C, s->K, s->H, s->W, m, math, ws);
        return;
    }
    gemm_fn *mm = gemm_of(math);
    int nb = images_per_gemm(s, tiles), chunks = (s->N + nb - 1) / nb;
    size_t stride = per_thread_floats(s, nb), cols = col_floats(s, nb);
#pragma omp parallel
    {
        float *col = (float *)ws + stride * (size_t)omp_get_thread_num();
        float *yc = col + cols + round16((size_t)s->K * s->C * s->k * s->k + s->K);
        float *gws = col + stride - gemm_workspace_floats();
#pragma omp for schedule(static)
        for (int c = 0; c < chunks; c++) {
            int n0 = c * nb, cnt = s->N - n0 < nb ? s->N - n0 : nb;
            forward_chunk(mm, s, x, w, b, y, relu, n0, cnt, nb, col,
                          nb > 1 ? yc : y + (size_t)n0 * s->K * out_pixels(s), gws);
        }
    }
}

/* The forward's sums and ReLU by the pass's plan; a GELU afterwards, in place (no network
 * fuses one into a convolution that these paths run). */
static void conv_forward(enum gemm_math math, const struct conv_shape *s, const float *x, const float *w,
                         const float *b, float *y, enum conv_act act, void *ws, size_t ws_bytes) {
    CHECK(ws_bytes >= workspace_bytes(s));
    int tiles = on_tiles(math);
    if (direct_forward(s)) {
        cpu_small_conv_forward(s, x, w, b, y, act, math == GEMM_BF16, ws);
        return;
    }
    if (direct_tiles(s, tiles))
        cpu_conv_tiles_sums(s, 0, x, NULL, w, b, act == CONV_ACT_RELU, NULL, NULL, y, ws);
    else sums_forward(math, tiles, s, x, w, b, y, act == CONV_ACT_RELU, ws);
    if (act == CONV_ACT_GELU) cpu_gelu_forward(y, y, (size_t)s->N * s->K * out_pixels(s));
}

/* conv_forward, then the max pool: on the Winograd path and the tiles' direct one each output
 * plane is pooled as it is written (struct pool_out), so the unpooled maps never reach memory;
 * elsewhere (and with a GELU, which those paths do not apply) through full. */
static void conv_pool_forward(enum gemm_math math, const struct conv_shape *s, const float *x, const float *w,
                              const float *b, enum conv_act act, int pk, float *full, float *y,
                              unsigned char *winners, void *ws, size_t ws_bytes) {
    CHECK(ws_bytes >= workspace_bytes(s));
    int tiles = on_tiles(math), m = plan(s, math, tiles).fwd, Ho = kernels_conv_out(s->H, s->k, s->pad),
        Wo = kernels_conv_out(s->W, s->k, s->pad);
    CHECK(pk >= 1 && pk * pk <= MAXPOOL_PASSES && pk <= Ho && pk <= Wo);
    struct pool_out pool = {pk, y, winners};
    if (m && act != CONV_ACT_GELU && !direct_forward(s)) {
        winograd_conv3x3(x, NULL, w, 0, b, act == CONV_ACT_RELU, NULL, &pool, NULL, s->N, s->C, s->K, s->H,
                         s->W, m, math, ws);
        return;
    }
    if (direct_tiles(s, tiles) && act != CONV_ACT_GELU) {
        cpu_conv_tiles_sums(s, 0, x, NULL, w, b, act == CONV_ACT_RELU, NULL, &pool, NULL, ws);
        return;
    }
    conv_forward(math, s, x, w, b, full, act, ws, ws_bytes);
    cpu_maxpool_forward(full, y, winners, s->N, s->K, Ho, Wo, pk);
}

/* The chunk [n0, n0 + cnt)'s share of the im2col backward: adds its weight and bias gradients
 * to this thread's partials dwt[K][Ckk] and dbt[K] (each skipped when NULL) and writes its
 * input gradients (dx not NULL; col is then overwritten with d(col)), from wT[Ckk][K], the
 * filters transposed. The GEMMs read the chunk's dy as dyc[K][nb*HWo]: dy_n0 itself when nb
 * is 1, else gathered into buf. With dyp not NULL (the bias gradient alone), each plane of dy
 * is made from the 2x2 max pool's gradient into col first (struct pool_in). */
static void backward_chunk(gemm_fn *mm, const struct conv_shape *s, const float *x, const float *wT,
                           const float *dy, const struct pool_in *dyp, float *dx, const float *mask,
                           float *dwt, float *dbt, int n0, int cnt, int nb, float *col, float *buf,
                           float *gws) {
    int K = s->K, HWo = out_pixels(s), Ckk = s->C * s->k * s->k;
    size_t CHW = (size_t)s->C * s->H * s->W, ld = (size_t)nb * HWo, cols = (size_t)cnt * HWo;
    const float *dyc = nb > 1 ? buf : dy + (size_t)n0 * K * HWo;
    if (nb > 1 && (dwt || dx))
        for (int j = 0; j < cnt; j++)
            for (int o = 0; o < K; o++)
                memcpy(buf + o * ld + (size_t)j * HWo, dy + ((size_t)(n0 + j) * K + o) * HWo,
                       HWo * sizeof(float));
    if (dwt) {
        for (int j = 0; j < cnt; j++) im2col_t(x + (n0 + j) * CHW, col + (size_t)j * HWo * Ckk, s);
        /* dwt[K][Ckk] += dyc[K][cols] colT[cols][Ckk] */
        mm(K, Ckk, (int)cols, 1.0f, dyc, (int)ld, 1, col, Ckk, 1, 1.0f, dwt, Ckk, gws);
    }
    int Ho = kernels_conv_out(s->H, s->k, s->pad), Wo = kernels_conv_out(s->W, s->k, s->pad);
    size_t HWp = (size_t)(Ho / 2) * (Wo / 2); /* a pooled plane of dyp */
    if (dbt)
        for (int j = 0; j < cnt; j++)
            for (int o = 0; o < K; o++) {
                size_t p = (size_t)(n0 + j) * K + o;
                const float *d = dy + p * HWo;
                if (dyp) {
                    cpu_maxpool_backward_plane(dyp->winners + p * HWp, dyp->dy + p * HWp, col, Ho, Wo, 2,
                                               dyp->relu);
                    d = col;
                }
                float sum = 0.0f;
                /* Vector partial sums, not one serial chain of float additions (the adder's
                 * latency per pixel). */
#pragma omp simd reduction(+ : sum)
                for (int i = 0; i < HWo; i++) sum += d[i];
                dbt[o] += sum;
            }
    if (dx) {
        /* dcol[Ckk][cols] = wT[Ckk][K] dyc[K][cols], reusing col */
        mm(Ckk, (int)cols, K, 1.0f, wT, K, 1, dyc, (int)ld, 1, 0.0f, col, (int)ld, gws);
        for (int j = 0; j < cnt; j++) {
            float *dxn = dx + (n0 + j) * CHW;
            col2im(col + (size_t)j * HWo, ld, dxn, s);
            if (mask)
                for (size_t i = 0; i < CHW; i++) dxn[i] = mask[(n0 + j) * CHW + i] <= 0.0f ? 0.0f : dxn[i];
        }
    }
}

/* Weight and bias gradients and, when dx is not NULL, the input gradient, all by im2col; dy
 * given by dyp instead when that is not NULL, for the bias gradient alone. */
static void backward_im2col(enum gemm_math math, int tiles, const struct conv_shape *s, const float *x,
                            const float *w, const float *dy, const struct pool_in *dyp, float *dx, float *dw,
                            float *db, const float *dx_mask, float *ws) {
    CHECK(!dyp || (!dx && !dw));
    gemm_fn *mm = gemm_of(math);
    size_t dw_floats = (size_t)s->K * s->C * s->k * s->k;
    int nb = images_per_gemm(s, tiles), chunks = (s->N + nb - 1) / nb;
    size_t stride = per_thread_floats(s, nb), cols = col_floats(s, nb);
    /* The partials present: [lo, hi) of dwt[K*Ckk] followed by dbt[K]. */
    size_t lo = dw ? 0 : dw_floats, hi = db ? dw_floats + s->K : dw_floats;
    /* wT[Ckk][K], after the threads' regions: the input gradient's GEMM then packs its filter
     * operand from rows (vector conversions on the bf16 paths) instead of element by element
     * down the columns of w, once per chunk. */
    int Ckk = s->C * s->k * s->k;
    float *wT = dx ? ws + stride * (size_t)omp_get_max_threads() : NULL;
#pragma omp parallel
    {
        if (wT) {
#pragma omp for schedule(static)
            for (int r = 0; r < Ckk; r++)
                for (int o = 0; o < s->K; o++) wT[(size_t)r * s->K + o] = w[(size_t)o * Ckk + r];
        }
        int nt = omp_get_num_threads();
        float *col = ws + stride * (size_t)omp_get_thread_num();
        float *dwt = col + cols;                      /* [K][Ckk] then [K] */
        float *buf = dwt + round16(dw_floats + s->K); /* [K][nb*HWo] when nb > 1 */
        float *gws = col + stride - gemm_workspace_floats();
        memset(dwt + lo, 0, (hi - lo) * sizeof(float));
#pragma omp for schedule(static)
        for (int c = 0; c < chunks; c++) {
            int n0 = c * nb, cnt = s->N - n0 < nb ? s->N - n0 : nb;
            backward_chunk(mm, s, x, wT, dy, dyp, dx, dx ? dx_mask : NULL, dw ? dwt : NULL,
                           db ? dwt + dw_floats : NULL, n0, cnt, nb, col, buf, gws);
        }
        /* Sum the per-thread partials in thread order (implicit barrier above). */
#pragma omp for schedule(static)
        for (size_t i = lo; i < hi; i++) {
            float sum = 0.0f;
            for (int t = 0; t < nt; t++) sum += (ws + stride * (size_t)t + cols)[i];
            if (i < dw_floats) dw[i] = sum;
            else db[i - dw_floats] = sum;
        }
    }
}

static void conv_backward(enum gemm_math math, const struct conv_shape *s, const float *x, const float *w,
                          const float *dy, float *dx, float *dw, float *db, const float *dx_mask, void *ws,
                          size_t ws_bytes) {
    CHECK(ws_bytes >= workspace_bytes(s));
    int tiles = on_tiles(math);
    if (direct_tiles(s, tiles)) {
        if (db) backward_im2col(math, tiles, s, x, w, dy, NULL, NULL, NULL, db, NULL, ws);
        if (dw) cpu_conv_tiles_filter_grad(s, x, dy, NULL, dw, ws);
        if (dx) cpu_conv_tiles_sums(s, 1, dy, NULL, w, NULL, 0, dx_mask, NULL, dx, ws);
        return;
    }
    if (dw && direct_filter_grad(s, math)) {
        cpu_small_conv_filter_grad(s, x, dy, dw, db, ws);
        if (dx) backward_im2col(math, tiles, s, x, w, dy, NULL, dx, NULL, NULL, dx_mask, ws);
        return;
    }
    struct conv_plan p = plan(s, math, tiles);
    float *im2col_dx = p.dx ? NULL : dx, *im2col_dw = p.dw ? NULL : dw;
    if (db || im2col_dw || im2col_dx)
        backward_im2col(math, tiles, s, x, w, dy, NULL, im2col_dx, im2col_dw, db, dx_mask, ws);
    /* The Winograd passes after the im2col one, since all use the workspace. */
    if (dw && p.dw) winograd_filter_grad(x, dy, NULL, dw, s->N, s->C, s->K, s->H, s->W, p.dw, math, ws);
    /* The input gradient is the adjoint convolution: dy through the 180-degree rotated,
     * transposed filters. */
    if (dx && p.dx)
        winograd_conv3x3(dy, NULL, w, 1, NULL, 0, dx_mask, NULL, dx, s->N, s->K, s->C, s->H, s->W, p.dx, math,
                         ws);
}

/* conv_backward from the gradient of the 2x2 max pool after the convolution: where both
 * passes that run are Winograd's or the tiles' direct ones, each reads dy from the pooled
 * gradient and the winners as it pads (packs) its planes (struct pool_in), and the bias gradient
 * makes each plane of dy in cache, so the unpooled gradient never reaches memory; the same
 * planes, so the same results as the two ops apart, which run through full elsewhere. */
static void conv_pool_backward(enum gemm_math math, const struct conv_shape *s, const float *x,
                               const float *w, const float *dyp, const unsigned char *winners, int pk,
                               int relu, float *full, float *dx, float *dw, float *db, const float *dx_mask,
                               void *ws, size_t ws_bytes) {
    CHECK(ws_bytes >= workspace_bytes(s));
    int tiles = on_tiles(math), Ho = kernels_conv_out(s->H, s->k, s->pad),
        Wo = kernels_conv_out(s->W, s->k, s->pad);
    CHECK(pk >= 1 && pk * pk <= MAXPOOL_PASSES && pk <= Ho && pk <= Wo);
    struct conv_plan p = plan(s, math, tiles);
    struct pool_in in = {dyp, winners, relu};
    if (pk == 2 && direct_tiles(s, tiles)) {
        if (db) backward_im2col(math, tiles, s, x, w, NULL, &in, NULL, NULL, db, NULL, ws);
        if (dw) cpu_conv_tiles_filter_grad(s, x, NULL, &in, dw, ws);
        if (dx) cpu_conv_tiles_sums(s, 1, NULL, &in, w, NULL, 0, dx_mask, NULL, dx, ws);
        return;
    }
    if (pk != 2 || (dw && !p.dw) || (dx && !p.dx)) {
        cpu_maxpool_backward(winners, dyp, full, s->N, s->K, Ho, Wo, pk, relu);
        conv_backward(math, s, x, w, full, dx, dw, db, dx_mask, ws, ws_bytes);
        return;
    }
    if (db) backward_im2col(math, tiles, s, x, w, NULL, &in, NULL, NULL, db, NULL, ws);
    if (dw) winograd_filter_grad(x, NULL, &in, dw, s->N, s->C, s->K, s->H, s->W, p.dw, math, ws);
    if (dx)
        winograd_conv3x3(NULL, &in, w, 1, NULL, 0, dx_mask, NULL, dx, s->N, s->K, s->C, s->H, s->W, p.dx,
                         math, ws);
}

/* "Winograd F(4x4)", "direct", "direct on tiles" (with the loops found, on a path that finds
 * them) or "im2col + GEMM", with the product path: what conv_forward / conv_backward do for pass
 * (ws_bytes: the same for every method). */
static void conv_describe(enum gemm_math math, const struct conv_shape *s, enum conv_pass pass, char *buf,
                          size_t size) {
    int tiles = on_tiles(math);
    struct conv_plan p = plan(s, math, tiles);
    int m = pass == CONV_FORWARD ? p.fwd : pass == CONV_BACKWARD_DATA ? p.dx : p.dw;
    const char *path = math == GEMM_FP32 ? gemm_isa() : gemm_bf16_isa();
    if ((pass == CONV_FORWARD && direct_forward(s)) ||
        (pass == CONV_BACKWARD_FILTER && direct_filter_grad(s, math)))
        snprintf(buf, size, "direct, %s", path);
    else if (direct_tiles(s, tiles)) {
        int n = snprintf(buf, size, "direct on tiles, %s", path);
        if (conv_tiles_finds() && n > 0 && (size_t)n < size)
            conv_tiles_describe_found(s, pass, buf + n, size - n);
    } else if (m) snprintf(buf, size, "Winograd F(%dx%d), %s", m, m, path);
    else snprintf(buf, size, "im2col + GEMM, %s", path);
}

/* The table's entries: float (cpu) and bf16 (cpu-bf16) products, the same code otherwise. */
void cpu_conv_forward(const struct conv_shape *s, const void *x, const float *w, const float *b, void *y,
                      enum conv_act act, void *ws, size_t ws_bytes) {
    conv_forward(GEMM_FP32, s, x, w, b, y, act, ws, ws_bytes);
}

void cpu_conv_forward_bf16(const struct conv_shape *s, const void *x, const float *w, const float *b, void *y,
                           enum conv_act act, void *ws, size_t ws_bytes) {
    conv_forward(GEMM_BF16, s, x, w, b, y, act, ws, ws_bytes);
}

void cpu_conv_pool_forward(const struct conv_shape *s, const void *x, const float *w, const float *b,
                           enum conv_act act, int pk, void *full, void *y, unsigned char *winners, void *ws,
                           size_t ws_bytes) {
    conv_pool_forward(GEMM_FP32, s, x, w, b, act, pk, full, y, winners, ws, ws_bytes);
}

void cpu_conv_pool_forward_bf16(const struct conv_shape *s, const void *x, const float *w, const float *b,
                                enum conv_act act, int pk, void *full, void *y, unsigned char *winners,
                                void *ws, size_t ws_bytes) {
    conv_pool_forward(GEMM_BF16, s, x, w, b, act, pk, full, y, winners, ws, ws_bytes);
}

void cpu_conv_backward(const struct conv_shape *s, const void *x, const float *w, const void *dy, void *dx,
                       float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes) {
    conv_backward(GEMM_FP32, s, x, w, dy, dx, dw, db, dx_mask, ws, ws_bytes);
}

void cpu_conv_backward_bf16(const struct conv_shape *s, const void *x, const float *w, const void *dy,
                            void *dx, float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes) {
    conv_backward(GEMM_BF16, s, x, w, dy, dx, dw, db, dx_mask, ws, ws_bytes);
}

void cpu_conv_pool_backward(const struct conv_shape *s, const void *x, const float *w, const void *dyp,
                            const unsigned char *winners, int pk, int relu, void *full, void *dx, float *dw,
                            float *db, const void *dx_mask, void *ws, size_t ws_bytes) {
    conv_pool_backward(GEMM_FP32, s, x, w, dyp, winners, pk, relu, full, dx, dw, db, dx_mask, ws, ws_bytes);
}

void cpu_conv_pool_backward_bf16(const struct conv_shape *s, const void *x, const float *w, const void *dyp,
                                 const unsigned char *winners, int pk, int relu, void *full, void *dx,
                                 float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes) {
    conv_pool_backward(GEMM_BF16, s, x, w, dyp, winners, pk, relu, full, dx, dw, db, dx_mask, ws, ws_bytes);
}

void cpu_conv_describe(const struct conv_shape *s, enum conv_pass pass, size_t ws_bytes, char *buf,
                       size_t size) {
    (void)ws_bytes;
    conv_describe(GEMM_FP32, s, pass, buf, size);
}

void cpu_conv_describe_bf16(const struct conv_shape *s, enum conv_pass pass, size_t ws_bytes, char *buf,
                            size_t size) {
    (void)ws_bytes;
    conv_describe(GEMM_BF16, s, pass, buf, size);
}
