/* Exact (erf) GELU, as nn.GELU() (approximate="none"):
 *   y = x Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2   (the standard normal CDF)
 *   dy/dx = Phi(x) + x phi(x),  phi(x) = exp(-x^2 / 2) / sqrt(2 pi)   (its density)
 * all in float (erff, expf). */
#include "cpu.h"

#include <math.h>

#define SQRT1_2 0.70710678118654752440f      /* 1 / sqrt 2 */
#define INV_SQRT_2PI 0.39894228040143267794f /* 1 / sqrt(2 pi) */

static inline float normal_cdf(float x) { return 0.5f * (1.0f + erff(x * SQRT1_2)); }

void cpu_gelu_forward(const float *x, float *y, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = x[i] * normal_cdf(x[i]);
}

void cpu_gelu_backward(const float *x, const float *dy, float *dx, size_t n) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float pdf = INV_SQRT_2PI * expf(-0.5f * x[i] * x[i]);
        dx[i] = dy[i] * (normal_cdf(x[i]) + x[i] * pdf);
    }
}
