#include "cpu.h"

void cpu_sgd_update(float *p, const float *grad, float *m, size_t n, float lr, float momentum,
                    float weight_decay, float grad_scale) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale + weight_decay * p[i];
        float v = momentum * m[i] + g;
        m[i] = v;
        p[i] -= lr * v;
    }
}
