/* Exact (erf) GELU, as nn.GELU() (approximate="none"); the math and its accuracy: gelu_vec.h.
 *
 * Compiled once per ISA (isa.h) as gelu_forward_avx512, ...; cpu_gelu_forward/backward run the
 * path gemm_select chose (gemm_dispatch.c), so --isa and the tests switch GELU with the GEMM.
 * Tails shorter than a vector go through one zero-padded vector. */
#include "cpu.h"
#include "gelu_vec.h"
#include "gemm.h"

#include <string.h>

void ISA_FN(gelu_forward)(const float *x, float *y, size_t n) {
    size_t whole = n / VEC * VEC;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < whole; i += VEC) store(y + i, gelu_v(load(x + i)));
    if (whole == n) return;
    float xt[VEC] = {0}, yt[VEC];
    memcpy(xt, x + whole, (n - whole) * sizeof(float));
    store(yt, gelu_v(load(xt)));
    memcpy(y + whole, yt, (n - whole) * sizeof(float));
}

void ISA_FN(gelu_backward)(const float *x, const float *dy, float *dx, size_t n) {
    size_t whole = n / VEC * VEC;
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < whole; i += VEC) store(dx + i, gelu_grad_v(load(x + i), load(dy + i)));
    if (whole == n) return;
    float xt[VEC] = {0}, dyt[VEC] = {0}, dxt[VEC];
    memcpy(xt, x + whole, (n - whole) * sizeof(float));
    memcpy(dyt, dy + whole, (n - whole) * sizeof(float));
    store(dxt, gelu_grad_v(load(xt), load(dyt)));
    memcpy(dx + whole, dxt, (n - whole) * sizeof(float));
}

/* Batch norm's fused GELU (batchnorm.c), on one image inside its image loop, so without threads
 * of its own: y = GELU(z) and g = dy * GELU'(z), z = x * scale + shift, with scale and shift
 * given per element (the image's channels' values, each repeated over its plane). */
void ISA_FN(gelu_affine_forward)(const float *x, float *y, size_t n, const float *scale, const float *shift) {
    size_t whole = n / VEC * VEC;
    for (size_t i = 0; i < whole; i += VEC)
        store(y + i, gelu_v(load(x + i) * load(scale + i) + load(shift + i)));
    if (whole == n) return;
    float xt[VEC] = {0}, st[VEC] = {0}, ht[VEC] = {0}, yt[VEC];
    memcpy(xt, x + whole, (n - whole) * sizeof(float));
    memcpy(st, scale + whole, (n - whole) * sizeof(float));
    memcpy(ht, shift + whole, (n - whole) * sizeof(float));
    store(yt, gelu_v(load(xt) * load(st) + load(ht)));
    memcpy(y + whole, yt, (n - whole) * sizeof(float));
}

void ISA_FN(gelu_affine_backward)(const float *x, const float *dy, float *g, size_t n, const float *scale,
                                  const float *shift) {
    size_t whole = n / VEC * VEC;
    for (size_t i = 0; i < whole; i += VEC)
        store(g + i, gelu_grad_v(load(x + i) * load(scale + i) + load(shift + i), load(dy + i)));
    if (whole == n) return;
    float xt[VEC] = {0}, st[VEC] = {0}, ht[VEC] = {0}, dyt[VEC] = {0}, gt[VEC];
    memcpy(xt, x + whole, (n - whole) * sizeof(float));
    memcpy(st, scale + whole, (n - whole) * sizeof(float));
    memcpy(ht, shift + whole, (n - whole) * sizeof(float));
    memcpy(dyt, dy + whole, (n - whole) * sizeof(float));
    store(gt, gelu_grad_v(load(xt) * load(st) + load(ht), load(dyt)));
    memcpy(g + whole, gt, (n - whole) * sizeof(float));
}

#ifdef ISA_IS_GENERIC /* once, not per ISA */
static const struct {
    const char *isa;
    gelu_forward_fn *forward;
    gelu_backward_fn *backward;
    struct gelu_affine affine;
} paths[] = {
    {"avx512",
     gelu_forward_avx512,
     gelu_backward_avx512,
     {gelu_affine_forward_avx512, gelu_affine_backward_avx512}},
    {"avx2", gelu_forward_avx2, gelu_backward_avx2, {gelu_affine_forward_avx2, gelu_affine_backward_avx2}},
    {"generic",
     gelu_forward_generic,
     gelu_backward_generic,
     {gelu_affine_forward_generic, gelu_affine_backward_generic}},
};

#define NPATHS (sizeof paths / sizeof paths[0])

/* The row of the path in use; the last (generic) when gemm_isa() names none of the others. */
static size_t path(void) {
    const char *isa = gemm_isa();
    size_t i = 0;
    while (i + 1 < NPATHS && strcmp(paths[i].isa, isa) != 0) i++;
    return i;
}

void cpu_gelu_forward(const void *x, void *y, size_t n) { paths[path()].forward(x, y, n); }

void cpu_gelu_backward(const void *x, const void *dy, void *dx, size_t n) {
    paths[path()].backward(x, dy, dx, n);
}

struct gelu_affine cpu_gelu_affine(void) {
    return paths[path()].affine;
}
#endif
