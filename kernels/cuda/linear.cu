/* Linear layers with cuBLAS (column-major): a row-major [R][C] matrix is a column-major C x R
 * one, so y[N][O] = x[N][I] w[O][I]^T is y^T (O x N) = w^T-as-stored (I x O)^T x (I x N).
 * The output multiplier `scale` is every GEMM's alpha (C = alpha op(A) op(B) + beta C; beta 0,
 * so C is overwritten, never read), the bias is added as scale * b and its gradient is scaled
 * in the reduction: the multiplier costs no pass of its own. */
#include "cuda.h"

size_t cuda_linear_workspace(int N, int I, int O) {
    (void)N, (void)I, (void)O;
    return 0; /* cuBLAS keeps its own */
}

void cuda_linear_forward(const float *x, const float *w, const float *b, float *y, int N, int I, int O, float scale,
                         void *ws, size_t ws_bytes) {
    (void)ws, (void)ws_bytes; /* cuda_linear_workspace: none */
    const float zero = 0.0f;
    /* y^T (O x N, ldc O) = scale * w (stored I x O, lda I)^T x (I x N, ldb I). */
    CUBLAS_CHECK(cublasSgemm(cuda_cublas(), CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &scale, w, I, x, I, &zero, y, O));
    if (b) cuda_bias_act(y, b, scale, N, O, 1, 0);
}

void cuda_linear_backward(const float *x, const float *w, const float *dy, float *dx, float *dw, float *db, int N,
                          int I, int O, float scale, void *ws, size_t ws_bytes) {
    (void)ws, (void)ws_bytes;
    const float zero = 0.0f;
    /* dw[O][I] = scale * dy^T x: column-major I x O = x (I x N) times dy^T (N x O). */
    CUBLAS_CHECK(cublasSgemm(cuda_cublas(), CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &scale, x, I, dy, O, &zero, dw, I));
    /* dx[N][I] = scale * dy w: column-major I x N = w (I x O) times dy (O x N). */
    if (dx)
        CUBLAS_CHECK(cublasSgemm(cuda_cublas(), CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &scale, w, I, dy, O, &zero, dx, I));
    if (!db) return;
    /* db[O] = scale * the sum over n of dy[n][O]: the channel sum with HW = 1. */
    double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(N, O) * O * sizeof(double));
    int S = cuda_channel_partials(CHANNEL_SUM, dy, NULL, NULL, NULL, part, N, O, 1);
    cuda_channel_reduce(part, db, S, O, scale);
}
