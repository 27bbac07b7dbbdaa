#include "cpu.h"

#include <math.h>

/* One element of torch.optim.SGD's step (struct kernels sgd_update), written once so that
 * sgd_update_groups computes each element exactly as sgd_update does. */
static inline __attribute__((always_inline)) void sgd_element(float *restrict p, float *restrict m,
                                                              float grad, float lr, float momentum,
                                                              float weight_decay, float grad_scale,
                                                              int nesterov) {
    float g = grad * grad_scale + weight_decay * *p;
    float v = momentum * *m + g;
    *m = v;
    *p -= lr * (nesterov ? g + momentum * v : v);
}

void cpu_sgd_update(float *p, const float *grad, float *m, size_t n, float lr, float momentum,
                    float weight_decay, float grad_scale, int nesterov) {
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++)
        sgd_element(&p[i], &m[i], grad[i], lr, momentum, weight_decay, grad_scale, nesterov);
}

void cpu_sgd_update_groups(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                           const struct sgd_group *g, float momentum, float grad_scale, int nesterov) {
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        if (group[i] < SGD_GROUPS) /* else SGD_SKIP */
            sgd_element(&p[i], &m[i], grad[i], g[group[i]].lr, momentum, g[group[i]].weight_decay, grad_scale,
                        nesterov);
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
