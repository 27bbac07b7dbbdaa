#include "cpu.h"
#include "gemm.h"

#include <omp.h>

size_t cpu_linear_workspace(int N, int I, int O) {
    (void)N, (void)I, (void)O;
    return gemm_workspace_floats() * (size_t)omp_get_max_threads() * sizeof(float);
}

void cpu_linear_forward(const float *x, const float *w, const float *b, float *y, int N, int I,
                        int O, void *ws) {
    /* y[N][O] = x[N][I] w^T[I][O] */
    gemm_parallel(N, O, I, 1.0f, x, I, 1, w, 1, I, 0.0f, y, O, ws);
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) y[(size_t)n * O + o] += b[o];
}

void cpu_linear_backward(const float *x, const float *w, const float *dy, float *dx, float *dw,
                         float *db, int N, int I, int O, void *ws) {
    /* dw[O][I] = dy^T[O][N] x[N][I] */
    gemm_parallel(O, I, N, 1.0f, dy, 1, O, x, I, 1, 0.0f, dw, I, ws);
    /* dx[N][I] = dy[N][O] w[O][I] */
    if (dx) gemm_parallel(N, I, O, 1.0f, dy, O, 1, w, I, 1, 0.0f, dx, I, ws);
#pragma omp parallel for schedule(static)
    for (int o = 0; o < O; o++) {
        float s = 0.0f;
        for (int n = 0; n < N; n++) s += dy[(size_t)n * O + o];
        db[o] = s;
    }
}
