/* Linear layers with cuBLAS (column-major): a row-major [R][C] matrix is a column-major C x R
 * one, so y[N][O] = x[N][I] w[O][I]^T is y^T (O x N) = w^T-as-stored (I x O)^T x (I x N).
 * The output multiplier `scale` is every GEMM's alpha (C = alpha op(A) op(B) + beta C; beta 0,
 * so C is overwritten, never read), the bias is added as scale * b and its gradient is scaled
 * in the reduction: the multiplier costs no pass of its own. */
#include "cuda.h"

/* One cuBLAS GEMM on float matrices (cublasSgemm's arguments): bf16 0 is cublasSgemm itself;
 * bf16 1 is cublasGemmEx with CUBLAS_COMPUTE_32F_FAST_16BF, where cuBLAS rounds A and B to bf16
 * and multiplies on tensor cores with float accumulation, float C: the CPU's gemm_bf16. */
static void gemm(int bf16, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                 const float *alpha, const float *A, int lda, const float *B, int ldb, float *C, int ldc) {
    const float zero = 0.0f;
    if (!bf16) {
        CUBLAS_CHECK(cublasSgemm(cuda_cublas(), ta, tb, m, n, k, alpha, A, lda, B, ldb, &zero, C, ldc));
        return;
    }
    CUBLAS_CHECK(cublasGemmEx(cuda_cublas(), ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F, ldb,
                              &zero, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF, CUBLAS_GEMM_DEFAULT));
}

size_t cuda_linear_workspace(int N, int I, int O) {
    (void)N, (void)I, (void)O;
    return 0; /* cuBLAS keeps its own */
}

static void linear_forward(int bf16, const float *x, const float *w, const float *b, float *y, int N, int I,
                           int O, float scale) {
    /* y^T (O x N, ldc O) = scale * w (stored I x O, lda I)^T x (I x N, ldb I). */
    gemm(bf16, CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &scale, w, I, x, I, y, O);
    if (b) cuda_bias_act(y, b, scale, N, O, 1, 0);
}

static void linear_backward(int bf16, const float *x, const float *w, const float *dy, float *dx, float *dw,
                            float *db, int N, int I, int O, float scale) {
    /* dw[O][I] = scale * dy^T x: column-major I x O = x (I x N) times dy^T (N x O). */
    gemm(bf16, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &scale, x, I, dy, O, dw, I);
    /* dx[N][I] = scale * dy w: column-major I x N = w (I x O) times dy (O x N). */
    if (dx) gemm(bf16, CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &scale, w, I, dy, O, dx, I);
    if (!db) return;
    /* db[O] = scale * the sum over n of dy[n][O]: the channel sum with HW = 1. */
    double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(N, O, 1) * O * sizeof(double));
    int S = cuda_channel_partials(CHANNEL_SUM, dy, channel_inputs{}, part, N, O, 1);
    cuda_channel_reduce(part, db, S, O, scale);
}

/* The tables' entries (cuda_linear_workspace: none, so ws is unused). */
void cuda_linear_forward(const float *x, const float *w, const float *b, float *y, int N, int I, int O,
                         float scale, void *ws, size_t ws_bytes) {
    (void)ws, (void)ws_bytes;
    linear_forward(0, x, w, b, y, N, I, O, scale);
}

void cuda_linear_forward_bf16(const float *x, const float *w, const float *b, float *y, int N, int I, int O,
                              float scale, void *ws, size_t ws_bytes) {
    (void)ws, (void)ws_bytes;
    linear_forward(1, x, w, b, y, N, I, O, scale);
}

void cuda_linear_backward(const float *x, const float *w, const float *dy, float *dx, float *dw, float *db,
                          int N, int I, int O, float scale, void *ws, size_t ws_bytes) {
    (void)ws, (void)ws_bytes;
    linear_backward(0, x, w, dy, dx, dw, db, N, I, O, scale);
}

void cuda_linear_backward_bf16(const float *x, const float *w, const float *dy, float *dx, float *dw,
                               float *db, int N, int I, int O, float scale, void *ws, size_t ws_bytes) {
    (void)ws, (void)ws_bytes;
    linear_backward(1, x, w, dy, dx, dw, db, N, I, O, scale);
}
