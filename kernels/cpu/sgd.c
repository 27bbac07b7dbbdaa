#include "cpu.h"

#include <math.h>
#include <string.h>

void cpu_sgd_update(float *p, const float *grad, float *m, size_t n, float lr, float momentum,
                    float weight_decay, float grad_scale, int nesterov) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float g = grad[i] * grad_scale + weight_decay * p[i];
        float v = momentum * m[i] + g;
        m[i] = v;
        p[i] -= lr * (nesterov ? g + momentum * v : v);
    }
}

void cpu_sgd_update_groups(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                           const struct sgd_group *g, float momentum, float grad_scale, int nesterov) {
    struct sgd_group gs[SGD_GROUPS];
    memcpy(gs, g, sizeof gs);
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) {
        if (group[i] >= SGD_GROUPS) continue; /* SGD_SKIP */
        float lr = gs[group[i]].lr, weight_decay = gs[group[i]].weight_decay;
        float v0 = grad[i] * grad_scale + weight_decay * p[i];
        float v = momentum * m[i] + v0;
        m[i] = v;
        p[i] -= lr * (nesterov ? v0 + momentum * v : v);
    }
}

/* torch.lerp's float formula (aten/src/ATen/native/Lerp.h): from whichever end the weight is
 * nearer, so w = 1 lands exactly on p. PyTorch's vectorised CPU kernel fuses each branch into
 * one FMA; whether ours does is the compiler's choice (-ffp-contract=fast), a rounding apart. */
void cpu_lookahead_update(float *p, float *ema, size_t n, float w) {
    int small = fabsf(w) < 0.5f;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float e = small ? ema[i] + w * (p[i] - ema[i]) : p[i] - (p[i] - ema[i]) * (1.0f - w);
        ema[i] = e;
        p[i] = e;
    }
}
