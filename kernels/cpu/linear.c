/* nn.Linear followed by a constant factor: y[N][O] = scale (x[N][I] w[O][I]^T + b[O]). The scale
 * rides on the GEMMs' alpha, so with scale 1 every result is the plain layer's, bit for bit. */
#include "cpu.h"
#include "gemm.h"

#include <omp.h>

size_t cpu_linear_workspace(int N, int I, int O) {
    (void)N, (void)I, (void)O;
    return gemm_workspace_floats() * (size_t)omp_get_max_threads() * sizeof(float);
}

static void linear_forward(enum gemm_math math, const float *x, const float *w, const float *b, float *y,
                           int N, int I, int O, float scale, void *ws, size_t ws_bytes) {
    CHECK(ws_bytes >= cpu_linear_workspace(N, I, O));
    /* y[N][O] = scale x[N][I] w^T[I][O] */
    gemm_parallel(math, N, O, I, scale, x, I, 1, w, 1, I, 0.0f, y, O, ws);
    if (!b) return;
        /* + scale b[O] (exactly b when scale is 1) */
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) y[(size_t)n * O + o] += scale * b[o];
}

static void linear_backward(enum gemm_math math, const float *x, const float *w, const float *dy, float *dx,
                            float *dw, float *db, int N, int I, int O, float scale, void *ws,
                            size_t ws_bytes) {
    CHECK(ws_bytes >= cpu_linear_workspace(N, I, O));
    /* dw[O][I] = scale dy^T[O][N] x[N][I] */
    gemm_parallel(math, O, I, N, scale, dy, 1, O, x, I, 1, 0.0f, dw, I, ws);
    /* dx[N][I] = scale dy[N][O] w[O][I] */
    if (dx) gemm_parallel(math, N, I, O, scale, dy, O, 1, w, I, 1, 0.0f, dx, I, ws);
    if (!db) return;
#pragma omp parallel for schedule(static)
    for (int o = 0; o < O; o++) {
        float s = 0.0f;
        for (int n = 0; n < N; n++) s += dy[(size_t)n * O + o];
        db[o] = scale * s;
    }
}

/* The table's entries: float (cpu) and bf16 (cpu-bf16) products. */
void cpu_linear_forward(const void *x, const float *w, const float *b, void *y, int N, int I, int O,
                        float scale, void *ws, size_t ws_bytes) {
    linear_forward(GEMM_FP32, x, w, b, y, N, I, O, scale, ws, ws_bytes);
}

void cpu_linear_forward_bf16(const void *x, const float *w, const float *b, void *y, int N, int I, int O,
                             float scale, void *ws, size_t ws_bytes) {
    linear_forward(GEMM_BF16, x, w, b, y, N, I, O, scale, ws, ws_bytes);
}

void cpu_linear_backward(const void *x, const float *w, const void *dy, void *dx, float *dw, float *db, int N,
                         int I, int O, float scale, void *ws, size_t ws_bytes) {
    linear_backward(GEMM_FP32, x, w, dy, dx, dw, db, N, I, O, scale, ws, ws_bytes);
}

void cpu_linear_backward_bf16(const void *x, const float *w, const void *dy, void *dx, float *dw, float *db,
                              int N, int I, int O, float scale, void *ws, size_t ws_bytes) {
    linear_backward(GEMM_BF16, x, w, dy, dx, dw, db, N, I, O, scale, ws, ws_bytes);
}
