/* Exact (erf) GELU, as nn.GELU() (approximate="none"):
 *   y = x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2   (the standard normal CDF)
 *   dy/dx = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)   (its density)
 *
 * Vectorised, with polynomials in place of erf (Chebyshev fits, made with mpmath's chebyfit):
 *   |x| < 1:  Phi(x) = 1/2 + x P(x^2);
 *   else:     from the tail Phi(-a), a = |x|: Phi(-a) = exp(-a^2 / 2) T(a), where T (Mills'
 *             ratio over sqrt(2 pi)) is smooth and falls like 1 / (a sqrt(2 pi)). With
 *             t = (a - 4) / (a + 4), which maps a in [0, inf) onto [-1, 1), T(a) = H(t) / (a + 4),
 *             H a polynomial; Phi(x) = tail for x < 0, 1 - tail for x > 0.
 * Nothing cancels in the negative tail (1 + erf loses every digit by x = -5) and exp(-x^2 / 2) is
 * the density's too. Against double on a dense grid, every ISA path: y within 2.2 ulp for x >= 0
 * and 5.2 ulp (3e-7 relative) for x < 0, dx within 4 ulp of |Phi| + |x phi|; past |x| = 13.2
 * the tail and the density are 0 (below float's normal range).
 *
 * This header holds the vector form, for the files compiled per ISA (isa.h) that apply GELU
 * in registers: gelu.c, and small_conv.c's fused activation. Include it after isa.h. */
#ifndef KERNELS_CPU_GELU_VEC_H
#define KERNELS_CPU_GELU_VEC_H

#include "vec.h"

#define INV_SQRT_2PI 0.39894228040143267794f
#define A_MAX        14.0f  /* |x| is clamped here (H's range); Phi(-14) = 8e-45 */
#define CENTRAL      1.0f   /* |x| below this: the central polynomial P */
#define EXP_MIN      -87.0f /* exp below this is taken as 0 (2^-126 is float's least normal) */
#define LOG2E        1.44269504089f
#define LN2_HI       0.693359375f /* 9 bits: n LN2_HI is exact for |n| < 2^15 */
#define LN2_LO       -2.12194442e-4f
#define ROUNDER      12582912.0f /* 1.5 * 2^23: adding it rounds |v| < 2^22 to an integer */

/* exp(h + l) for h <= 0, |l| < 0.1 (a small correction to h), 0 where h < EXP_MIN. Cody-Waite:
 * exp = 2^n exp(r), n = round((h + l) / ln 2), r = h + l - n ln 2 in [-ln2/2, ln2/2]; exp(r) =
 * 1 + r + r^2 q(r), q a degree-4 Chebyshev fit (error 8e-9 on exp(r)). */
static inline vf exp_neg(vf h, vf l) {
    vf shifted = (h + l) * LOG2E + ROUNDER, n = shifted - ROUNDER;
    vf r = (h - n * LN2_HI) + (l - n * LN2_LO);
    vf q = splat(1.39261759e-3f);
    q = q * r + 8.36317334e-3f;
    q = q * r + 4.16665561e-2f;
    q = q * r + 1.66665778e-1f;
    q = q * r + 0.5f;
    vf e = (q * (r * r) + r) + 1.0f;
    vi pow2 = ((vi)shifted - (vi)splat(ROUNDER) + 127) << 23; /* 2^n, n >= -126 */
    return (vf)((vi)(e * (vf)pow2) & (h >= EXP_MIN));
}

/* Phi(x) for |x| < CENTRAL: 1/2 + x P(x^2), P a degree-5 Chebyshev fit (relative error 8e-10). */
static inline vf central_cdf(vf x) {
    vf s = x * x, p = splat(-7.66053836e-06f);
    p = p * s + 1.13502298e-4f;
    p = p * s - 1.18634396e-3f;
    p = p * s + 9.97332856e-3f;
    p = p * s - 6.64903596e-2f;
    p = p * s + 3.98942292e-1f;
    return x * p + 0.5f;
}

/* Phi(-a) for 0 <= a <= A_MAX, and exp(-a^2 / 2) in *gauss. */
static inline vf lower_tail(vf a, vf *gauss) {
    /* -a^2 / 2 as h + l, h exact: a_hi keeps 12 significant bits, so a_hi^2 fits in a float. */
    vf a_hi = (vf)((vi)a & (int)0xfffff000), a_lo = a - a_hi;
    vf h = (-0.5f * a_hi) * a_hi, l = (-0.5f * a_lo) * (a + a_hi);
    vf g = exp_neg(h, l);
    *gauss = g;
    /* H(t), degree 10: error 1.2e-9 for a <= A_MAX */
    vf d = 1.0f / (a + 4.0f), t = (a - 4.0f) * d;
    vf p = splat(-5.37639462e-05f);
    p = p * t - 2.37585482e-4f;
    p = p * t + 1.67433391e-4f;
    p = p * t + 1.64726411e-3f;
    p = p * t - 3.48678185e-3f;
    p = p * t - 7.54520902e-3f;
    p = p * t + 6.03970587e-2f;
    p = p * t - 1.86521336e-1f;
    p = p * t + 3.87137383e-1f;
    p = p * t - 6.07896686e-1f;
    p = p * t + 7.55285144e-1f;
    return g * (p * d);
}

/* Phi(x), and exp(-x^2 / 2) in *gauss. */
static inline vf normal_cdf(vf x, vf *gauss) {
    vf a = (vf)((vi)x & 0x7fffffff);
    a = vselect(a < A_MAX, a, splat(A_MAX)); /* also NaN; y and dx stay NaN through x */
    vf tail = lower_tail(a, gauss);
    return vselect(a < CENTRAL, central_cdf(x), vselect(x < 0.0f, tail, 1.0f - tail));
}

static inline vf load(const float *p) { return *(const vfu *)p; }
static inline void store(float *p, vf v) { *(vfu *)p = v; }

static inline vf gelu_v(vf x) {
    vf g;
    return x * normal_cdf(x, &g);
}

static inline vf gelu_grad_v(vf x, vf dy) {
    vf g, cdf = normal_cdf(x, &g);
    return dy * (cdf + x * (g * INV_SQRT_2PI));
}

#endif
