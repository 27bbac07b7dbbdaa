#include "cpu.h"

#include <math.h>
#include <string.h>

/* One element of torch.optim.SGD's step (struct kernels sgd_update), written once so that
 * every group computes as a call of its own would. */
static inline __attribute__((always_inline)) void sgd_element(float *restrict p, float *restrict m,
                                                              float grad, float lr, float momentum,
                                                              float weight_decay, float grad_scale,
                                                              int nesterov) {
    float g = grad * grad_scale + weight_decay * *p;
    float v = momentum * *m + g;
    *m = v;
    *p -= lr * (nesterov ? g + momentum * v : v);
}

void cpu_sgd_update(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                    const struct sgd_hyper *h, int nesterov) {
    const float lr = h->lr[0], wd = h->weight_decay[0], mom = h->momentum, gs = h->grad_scale;
    if (!group) {
#pragma omp parallel for simd schedule(static)
        for (size_t i = 0; i < n; i++) sgd_element(&p[i], &m[i], grad[i], lr, mom, wd, gs, nesterov);
        return;
    }
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++)
        if (group[i] < SGD_GROUPS) /* else SGD_SKIP */
            sgd_element(&p[i], &m[i], grad[i], h->lr[group[i]], mom, h->weight_decay[group[i]], gs, nesterov);
}

/* torch.lerp's float formula (aten/src/ATen/native/Lerp.h): from whichever end the weight is
 * nearer, so w = 1 lands exactly on p. PyTorch's vectorised CPU kernel fuses each branch into
 * one FMA; whether ours does is the compiler's choice (-ffp-contract=fast), a rounding apart. */
void cpu_lookahead_update(float *p, float *ema, size_t n, const float *weight) {
    const float w = *weight;
    int small = fabsf(w) < 0.5f;
#pragma omp parallel for simd schedule(static)
    for (size_t i = 0; i < n; i++) {
        float e = small ? ema[i] + w * (p[i] - ema[i]) : p[i] - (p[i] - ema[i]) * (1.0f - w);
        ema[i] = e;
        p[i] = e;
    }
}

void cpu_scalars_set(float *dst, const float *v, int n) {
    CHECK(n >= 1 && n <= SCALARS_SET_MAX);
    memcpy(dst, v, (size_t)n * sizeof(float));
}
