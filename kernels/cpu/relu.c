#include "cpu.h"

void cpu_relu_forward(const void *xv, void *yv, size_t n) {
    const float *x = xv;
    float *y = yv;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = x[i] <= 0.0f ? 0.0f : x[i]; /* NaN stays NaN */
}

void cpu_relu_backward(const void *yv, const void *dyv, void *dxv, size_t n) {
    const float *y = yv, *dy = dyv;
    float *dx = dxv;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) dx[i] = y[i] <= 0.0f ? 0.0f : dy[i];
}
