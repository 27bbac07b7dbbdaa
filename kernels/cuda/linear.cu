/* Linear layers with cuBLAS (column-major): a row-major [R][C] matrix is a column-major C x R
 * one, so y[N][O] = x[N][I] w[O][I]^T is y^T (O x N) = w^T-as-stored (I x O)^T x (I x N).
 * The output multiplier `scale` is every GEMM's alpha (C = alpha op(A) op(B) + beta C; beta 0,
 * so C is overwritten, never read), the bias is added as scale * b and its gradient is scaled
 * in the reduction: the multiplier costs no pass of its own. */
#include "cuda.h"

/* One cuBLAS GEMM (cublasSgemm's arguments) in precision p (cuda.h): CUDA_FLOAT is cublasSgemm
 * itself; CUDA_BF16_COPIES cublasGemmEx on float A, B and C with CUBLAS_COMPUTE_32F_FAST_16BF,
 * where cuBLAS rounds A and B to bf16 and multiplies on tensor cores with float accumulation
 * (the CPU's gemm_bf16); CUDA_BF16 cublasGemmEx on bf16 A and B with float accumulation
 * (CUBLAS_COMPUTE_32F) into C of type c_type: bf16 for activations, float for a weight
 * gradient. */
static void gemm(enum cuda_precision p, cudaDataType_t c_type, cublasOperation_t ta, cublasOperation_t tb,
                 int m, int n, int k, const float *alpha, const void *A, int lda, const void *B, int ldb,
                 void *C, int ldc) {
    const float zero = 0.0f;
    if (p == CUDA_FLOAT) {
        CUBLAS_CHECK(cublasSgemm(cuda_cublas(), ta, tb, m, n, k, alpha, (const float *)A, lda,
                                 (const float *)B, ldb, &zero, (float *)C, ldc));
    } else if (p == CUDA_BF16_COPIES) {
        CUBLAS_CHECK(cublasGemmEx(cuda_cublas(), ta, tb, m, n, k, alpha, A, CUDA_R_32F, lda, B, CUDA_R_32F,
                                  ldb, &zero, C, CUDA_R_32F, ldc, CUBLAS_COMPUTE_32F_FAST_16BF,
                                  CUBLAS_GEMM_DEFAULT));
    } else {
        CUBLAS_CHECK(cublasGemmEx(cuda_cublas(), ta, tb, m, n, k, alpha, A, CUDA_R_16BF, lda, B, CUDA_R_16BF,
                                  ldb, &zero, C, c_type, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    }
}

/* Workspace: with bf16 activations, a bf16 copy of the weight (cuBLAS multiplies two bf16
 * operands); otherwise none (cuBLAS works in the backend's workspace, backend.cu). */
template <enum cuda_precision P> static size_t linear_workspace(int N, int I, int O) {
    (void)N;
    return P == CUDA_BF16 ? ((size_t)O * I * sizeof(bf16_t) + 255) / 256 * 256 : 0;
}

/* w as the GEMMs read it: itself, or its bf16 copy made in ws. */
template <enum cuda_precision P>
static const void *weight_for(const float *w, int I, int O, void *ws, size_t ws_bytes) {
    if (P != CUDA_BF16) return w;
    CHECK(ws_bytes >= linear_workspace<P>(0, I, O));
    cuda_to_bf16(w, (bf16_t *)ws, (size_t)O * I);
    return ws;
}

/* The cuBLAS type of activations of type T. */
template <typename T> static cudaDataType_t act_type(void) {
    return sizeof(T) == 2 ? CUDA_R_16BF : CUDA_R_32F;
}

/* Activations are T (bf16 with CUDA_BF16, float otherwise). */
template <enum cuda_precision P, typename T>
static void linear_forward(const void *x, const float *w, const float *b, void *y, int N, int I, int O,
                           float scale, void *ws, size_t ws_bytes) {
    /* y^T (O x N, ldc O) = scale * w (stored I x O, lda I)^T x (I x N, ldb I). */
    const void *wo = weight_for<P>(w, I, O, ws, ws_bytes);
    gemm(P, act_type<T>(), CUBLAS_OP_T, CUBLAS_OP_N, O, N, I, &scale, wo, I, x, I, y, O);
    if (b) cuda_bias_act((T *)y, b, scale, N, O, 1, CONV_ACT_NONE);
}

template <enum cuda_precision P, typename T>
static void linear_backward(const void *x, const float *w, const void *dy, void *dx, float *dw, float *db,
                            int N, int I, int O, float scale, void *ws, size_t ws_bytes) {
    /* dw[O][I] = scale * dy^T x: column-major I x O = x (I x N) times dy^T (N x O); float. */
    gemm(P, CUDA_R_32F, CUBLAS_OP_N, CUBLAS_OP_T, I, O, N, &scale, x, I, dy, O, dw, I);
    /* dx[N][I] = scale * dy w: column-major I x N = w (I x O) times dy (O x N). */
    if (dx) {
        const void *wo = weight_for<P>(w, I, O, ws, ws_bytes);
        gemm(P, act_type<T>(), CUBLAS_OP_N, CUBLAS_OP_N, I, N, O, &scale, wo, I, dy, O, dx, I);
    }
    if (!db) return;
    /* db[O] = scale * the sum over n of dy[n][O]: the channel sum with HW = 1. */
    double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(N, O, 1) * O * sizeof(double));
    int S = cuda_channel_partials(CHANNEL_SUM, (const T *)dy, channel_inputs{}, part, N, O, 1);
    cuda_channel_reduce(part, db, S, O, scale);
}

template <enum cuda_precision P, typename T> static void fill_as(struct kernels *k) {
    k->linear_workspace = linear_workspace<P>;
    k->linear_forward = linear_forward<P, T>;
    k->linear_backward = linear_backward<P, T>;
}

void cuda_fill_linear(struct kernels *k, enum cuda_precision p) { CUDA_FILL_BY_PRECISION(k, p, fill_as); }
