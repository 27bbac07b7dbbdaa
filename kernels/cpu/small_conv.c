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
 * the block's biases, then one padded image per thread; for the filter gradient, per thread
 * its vector partials and the image's shifted copies (shift_image). With bf16 products
 * (GEMM_BF16) the filters and the copied image are rounded to bf16 first (bf16_round), so
 * every product is exact and the sums are float, as gemm_bf16's.
 *
 * The filter gradient (small_conv_filter_grad, float products only) is direct too: im2col's
 * unfolded copy is 9x the image and its GEMM is 27 columns deep. Per image, for each block of
 * GB_O output channels and GB_T taps, one sweep over the output rows VEC pixels at a time
 * keeps GB_O x GB_T vector sums in registers, fed by GB_O dy vectors and one input vector per
 * tap, read from a copy of the image shifted for that tap's column so the load is aligned.
 * The sums are added to the thread's vector partials dwv[o][r][VEC], whose lanes and threads
 * are summed in order at the end: results depend on the ISA and the thread count, not timing.
 *
 * Compiled once per ISA (isa.h); cpu_small_conv_forward and cpu_small_conv_filter_grad
 * (gemm_dispatch.c) run the path gemm_select chose. */
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

/* The filter gradient's register block: GB_O output channels x GB_T taps of vector sums, with
 * GB_O dy vectors and one input vector beside them in the register file (32 zmm, 16 ymm or
 * xmm). K and C k^2 are rounded up to whole blocks (grad_dims); the extra sums are dropped. */
#if VEC == 16
#define GB_O 3
#define GB_T 9
#else
#define GB_O 2
#define GB_T 5
#endif

struct grad_dims {
    int Kp, ckkp; /* K and C k^2 rounded up to GB_O and GB_T */
};

static struct grad_dims grad_dims(const struct conv_shape *s) {
    int ckk = s->C * s->k * s->k;
    return (struct grad_dims){(s->K + GB_O - 1) / GB_O * GB_O, (ckk + GB_T - 1) / GB_T * GB_T};
}

/* The filter gradient's copy of an image: k copies of the zero-padded image, copy v shifted left
 * by v columns, rows of the output's width rounded up to whole vectors, so every tap's vector
 * load is aligned (an unaligned one straddles two cache lines: two loads' time). */
static int shifted_width(const struct conv_shape *s) {
    int Wo = kernels_conv_out(s->W, s->k, s->pad);
    return (Wo + VEC - 1) / VEC * VEC;
}

static size_t shifted_floats(const struct conv_shape *s) {
    return round16((size_t)s->k * s->C * (s->H + 2 * s->pad) * shifted_width(s));
}

/* xs[v][c][py][i] = x[c][py - pad][i + v - pad], zero outside the image. */
static void shift_image(const struct conv_shape *s, const float *x, float *xs) {
    int Hp = s->H + 2 * s->pad, Ws = shifted_width(s);
    memset(xs, 0, shifted_floats(s) * sizeof(float));
    for (int v = 0; v < s->k; v++)
        for (int c = 0; c < s->C; c++)
            for (int h = 0; h < s->H; h++) {
                const float *src = x + ((size_t)c * s->H + h) * s->W;
                float *dst = xs + (((size_t)v * s->C + c) * Hp + h + s->pad) * Ws;
                /* dst[i] = src[i + v - pad] for the i where that lies in the row */
                int lo = s->pad - v > 0 ? s->pad - v : 0,
                    hi = s->W + s->pad - v < Ws ? s->W + s->pad - v : Ws;
                if (hi > lo) memcpy(dst + lo, src + lo + v - s->pad, (size_t)(hi - lo) * sizeof(float));
            }
}

/* A thread's vector partials: dwv[Kp][ckkp] then dbv[Kp], VEC floats each. */
static size_t grad_partial_floats(const struct conv_shape *s) {
    struct grad_dims g = grad_dims(s);
    return round16(((size_t)g.Kp * g.ckkp + g.Kp) * VEC);
}

size_t ISA_FN(small_conv_workspace_floats)(const struct conv_shape *s, int threads) {
    size_t fwd = filter_floats(s) + image_floats(s) * (size_t)threads;
    size_t grad = (grad_partial_floats(s) + shifted_floats(s)) * (size_t)threads;
    return fwd > grad ? fwd : grad;
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

/* acc[e][t] += dy of channel e at pixels [at, at + n) times the input under tap t there (n <= VEC
 * pixels of one row; lanes past n add nothing, even where the input holds an infinity). */
static inline __attribute__((always_inline)) void
grad_sums(vf acc[GB_O][GB_T], const float *const d[GB_O], size_t at, const float *xr, const int *off, int n) {
    vf dv[GB_O];
    for (int e = 0; e < GB_O; e++) dv[e] = load_n(d[e] + at, 1, n);
    for (int t = 0; t < GB_T; t++) {
        vf v = load_n(xr + off[t], 1, n);
        for (int e = 0; e < GB_O; e++) acc[e][t] += dv[e] * v;
    }
}

/* One image's sums into dwv[Kp][ckkp] and dbv[Kp] (vectors): xs its shifted copies, dyn its dy
 * planes [K][Ho*Wo], off[r] tap r's offset in xs (ckkp entries; past C k^2 a copy of the
 * last). The blocks' extra output channels read plane K-1 again. */
static void grad_image(const struct conv_shape *s, struct grad_dims g, const float *xs, const float *dyn,
                       const int *off, vf *dwv, vf *dbv) {
    int Ho = kernels_conv_out(s->H, s->k, s->pad), Wo = kernels_conv_out(s->W, s->k, s->pad);
    int Ws = shifted_width(s);
    size_t plane = (size_t)Ho * Wo;
    for (int o0 = 0; o0 < g.Kp; o0 += GB_O) {
        const float *d[GB_O];
        for (int e = 0; e < GB_O; e++) d[e] = dyn + (size_t)(o0 + e < s->K ? o0 + e : s->K - 1) * plane;
        for (int r0 = 0; r0 < g.ckkp; r0 += GB_T) {
            vf acc[GB_O][GB_T];
            for (int e = 0; e < GB_O; e++)
                for (int t = 0; t < GB_T; t++) acc[e][t] = (vf){0};
            for (int oy = 0; oy < Ho; oy++) {
                int ox0 = 0;
                for (; ox0 + VEC <= Wo; ox0 += VEC)
                    grad_sums(acc, d, (size_t)oy * Wo + ox0, xs + (size_t)oy * Ws + ox0, off + r0, VEC);
                if (ox0 < Wo)
                    grad_sums(acc, d, (size_t)oy * Wo + ox0, xs + (size_t)oy * Ws + ox0, off + r0, Wo - ox0);
            }
            for (int e = 0; e < GB_O; e++)
                for (int t = 0; t < GB_T; t++) dwv[(size_t)(o0 + e) * g.ckkp + r0 + t] += acc[e][t];
        }
    }
    if (!dbv) return;
    for (int o = 0; o < s->K; o++) {
        vf sum = (vf){0};
        for (size_t i = 0; i < plane; i += VEC)
            sum += load_n(dyn + o * plane + i, 1, plane - i < VEC ? (int)(plane - i) : VEC);
        dbv[o] += sum;
    }
}

void ISA_FN(small_conv_filter_grad)(const struct conv_shape *s, const float *x, const float *dy, float *dw,
                                    float *db, float *ws) {
    int ckk = s->C * s->k * s->k, Hp = s->H + 2 * s->pad, Ws = shifted_width(s);
    CHECK(ckk <= SMALL_CONV_CKK);
    struct grad_dims g = grad_dims(s);
    size_t stride = grad_partial_floats(s) + shifted_floats(s), CHW = (size_t)s->C * s->H * s->W;
    size_t plane = (size_t)kernels_conv_out(s->H, s->k, s->pad) * kernels_conv_out(s->W, s->k, s->pad);
    int off[SMALL_CONV_CKK + GB_T];
    for (int c = 0, r = 0; c < s->C; c++)
        for (int u = 0; u < s->k; u++)
            for (int v = 0; v < s->k; v++) off[r++] = ((v * s->C + c) * Hp + u) * Ws;
    for (int r = ckk; r < g.ckkp; r++) off[r] = off[ckk - 1];
#pragma omp parallel
    {
        int nt = omp_get_num_threads();
        float *mine = ws + stride * (size_t)omp_get_thread_num();
        vf *dwv = (vf *)mine, *dbv = dwv + (size_t)g.Kp * g.ckkp;
        float *xs = mine + grad_partial_floats(s);
        memset(mine, 0, grad_partial_floats(s) * sizeof(float));
#pragma omp for schedule(static)
        for (int n = 0; n < s->N; n++) {
            shift_image(s, x + n * CHW, xs);
            grad_image(s, g, xs, dy + (size_t)n * s->K * plane, off, dwv, db ? dbv : NULL);
        }
        /* dw[o][r] = the threads' partials, then their lanes, each in order (barrier above). */
#pragma omp for schedule(static)
        for (int i = 0; i < s->K * (ckk + 1); i++) {
            int o = i / (ckk + 1), r = i % (ckk + 1);
            if (r == ckk && !db) continue;
            float sum = 0.0f;
            for (int t = 0; t < nt; t++) {
                const vf *p = (const vf *)(ws + stride * (size_t)t);
                vf v = r < ckk ? p[(size_t)o * g.ckkp + r] : p[(size_t)g.Kp * g.ckkp + o];
                for (int l = 0; l < VEC; l++) sum += v[l];
            }
            if (r < ckk) dw[(size_t)o * ckk + r] = sum;
            else db[o] = sum;
        }
    }
}
