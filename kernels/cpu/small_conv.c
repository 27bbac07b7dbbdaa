/* The forward of a convolution on few input channels (C k^2 <= SMALL_CONV_CKK: a first layer on
 * RGB), computed directly, with its bias and activation (enum conv_act) applied in registers.
 *
 * im2col + GEMM is a poor fit there: the GEMM's depth is only C k^2 (12 for airbench94's 2x2
 * whitening layer, 27 for the workshop's 3x3), so unfolding and packing cost as much as the
 * products, and a fused GELU would be a second pass over the output. Here each thread copies
 * one image at a time into a zero-bordered buffer xp[C][Hp][Wp] and, for each block of KB
 * output channels, sweeps its output rows VEC pixels at a time: one load of the input per
 * filter tap feeds KB multiply-adds (KB accumulators, the block's weights broadcast), so the
 * image is read from L1 and the output written once. Per output, the sum runs over the taps in
 * (c, u, v) order, from the bias.
 *
 * Workspace (small_conv_workspace_floats): the packed filters wp[K/KB][C k^2][KB] (zero past K),
 * the block's biases, then one padded image per thread. With bf16 products (GEMM_BF16) the
 * filters and the copied image are rounded to bf16 first (bf16_round), so every product is
 * exact and the sums are float, as gemm_bf16's.
 *
 * Compiled once per ISA (isa.h); cpu_small_conv_forward (gemm_dispatch.c) runs the path
 * gemm_select chose. */
#include "cpu.h"
#include "gelu_vec.h"
#include "gemm.h"

#include <omp.h>
#include <string.h>

#define KB 8 /* output channels per register block: KB accumulators of VEC pixels */

/* The padded image's row length: every vector of an output row, the last one overrunning the
 * row up to a whole VEC, reads columns ox0 + v < Wp. */
static int padded_width(const struct conv_shape *s) {
    int Wo = kernels_conv_out(s->W, s->k, s->pad);
    return (Wo + VEC - 1) / VEC * VEC + s->k - 1;
}

static size_t image_floats(const struct conv_shape *s) {
    return round16((size_t)s->C * (s->H + 2 * s->pad) * padded_width(s));
}

static size_t filter_floats(const struct conv_shape *s) {
    return round16((size_t)(s->K + KB - 1) / KB * KB * (s->C * s->k * s->k + 1));
}

size_t ISA_FN(small_conv_workspace_floats)(const struct conv_shape *s, int threads) {
    return filter_floats(s) + image_floats(s) * (size_t)threads;
}

static float operand(float v, int bf16) { return bf16 ? bf16_round(v) : v; }

/* wp[ob][r][e] = w[ob*KB + e][r] (r = (c, u, v) flattened, as w stores it), then bias[ob][e]. */
static void pack_filters(const struct conv_shape *s, const float *w, const float *b, float *wp, int bf16) {
    int ckk = s->C * s->k * s->k, nob = (s->K + KB - 1) / KB;
    float *bp = wp + (size_t)nob * ckk * KB;
    for (int ob = 0; ob < nob; ob++)
        for (int e = 0; e < KB; e++) {
            int o = ob * KB + e;
            for (int r = 0; r < ckk; r++)
                wp[((size_t)ob * ckk + r) * KB + e] = o < s->K ? operand(w[(size_t)o * ckk + r], bf16) : 0.0f;
            bp[ob * KB + e] = o < s->K && b ? b[o] : 0.0f;
        }
}

/* xp[c][py][px] = x[c][py - pad][px - pad], zero outside the image. */
static void pad_image(const struct conv_shape *s, const float *x, float *xp, int bf16) {
    int Hp = s->H + 2 * s->pad, Wp = padded_width(s);
    memset(xp, 0, (size_t)s->C * Hp * Wp * sizeof(float));
    for (int c = 0; c < s->C; c++)
        for (int h = 0; h < s->H; h++) {
            const float *src = x + ((size_t)c * s->H + h) * s->W;
            float *dst = xp + ((size_t)c * Hp + h + s->pad) * Wp + s->pad;
            for (int i = 0; i < s->W; i++) dst[i] = operand(src[i], bf16);
        }
}

static inline vf activate(vf v, enum conv_act act) {
    if (act == CONV_ACT_RELU) return (vf)((vi)v & ~(v <= 0.0f)); /* NaN stays NaN */
    if (act == CONV_ACT_GELU) return gelu_v(v);
    return v;
}

/* Output channels [ob*KB, ob*KB + kb) of one image, every row, from its padded copy xp. */
static void block_rows(const struct conv_shape *s, const float *xp, const float *wb, const float *bias,
                       const int *off, int kb, enum conv_act act, float *y) {
    int ckk = s->C * s->k * s->k, Wp = padded_width(s);
    int Ho = kernels_conv_out(s->H, s->k, s->pad), Wo = kernels_conv_out(s->W, s->k, s->pad);
    size_t plane = (size_t)Ho * Wo;
    for (int oy = 0; oy < Ho; oy++)
        for (int ox0 = 0; ox0 < Wo; ox0 += VEC) {
            const float *xr = xp + (size_t)oy * Wp + ox0;
            vf acc[KB];
            for (int e = 0; e < KB; e++) acc[e] = splat(bias[e]);
            for (int r = 0; r < ckk; r++) {
                vf v = load(xr + off[r]);
                for (int e = 0; e < KB; e++) acc[e] += v * wb[r * KB + e];
            }
            /* A row's last vector may overrun it into the next rows of the same plane, which the
             * next oy rewrite; only a vector that would leave the plane is stored in part. */
            size_t at = (size_t)oy * Wo + ox0;
            int n = at + VEC <= plane ? VEC : Wo - ox0 < VEC ? Wo - ox0 : VEC;
            float *yr = y + at;
            for (int e = 0; e < kb; e++) {
                vf a = activate(acc[e], act);
                if (n == VEC) *(vfu *)(yr + e * plane) = a;
                else memcpy(yr + e * plane, &a, (size_t)n * sizeof(float));
            }
        }
}

void ISA_FN(small_conv_forward)(const struct conv_shape *s, const float *x, const float *w, const float *b,
                                float *y, enum conv_act act, int bf16, float *ws) {
    int ckk = s->C * s->k * s->k, nob = (s->K + KB - 1) / KB, Hp = s->H + 2 * s->pad, Wp = padded_width(s);
    CHECK(ckk <= SMALL_CONV_CKK);
    size_t plane = (size_t)kernels_conv_out(s->H, s->k, s->pad) * kernels_conv_out(s->W, s->k, s->pad);
    size_t CHW = (size_t)s->C * s->H * s->W;
    int off[SMALL_CONV_CKK];
    for (int c = 0, r = 0; c < s->C; c++)
        for (int u = 0; u < s->k; u++)
            for (int v = 0; v < s->k; v++) off[r++] = (c * Hp + u) * Wp + v;
    float *wp = ws, *bp = wp + (size_t)nob * ckk * KB;
    pack_filters(s, w, b, wp, bf16);
#pragma omp parallel
    {
        float *xp = ws + filter_floats(s) + image_floats(s) * (size_t)omp_get_thread_num();
#pragma omp for schedule(static)
        for (int n = 0; n < s->N; n++) {
            pad_image(s, x + n * CHW, xp, bf16);
            for (int ob = 0; ob < nob; ob++) {
                int kb = s->K - ob * KB < KB ? s->K - ob * KB : KB;
                block_rows(s, xp, wp + (size_t)ob * ckk * KB, bp + ob * KB, off, kb, act,
                           y + ((size_t)n * s->K + (size_t)ob * KB) * plane);
            }
        }
    }
}
