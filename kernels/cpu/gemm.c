/* Blocked GEMM in the style of BLIS/GotoBLAS: op(B) is packed into KC x NR panels, op(A) into
 * MR x KC panels, and a register-blocked MR x NR micro-kernel does all the arithmetic. Packing
 * also absorbs the transposes, so one micro-kernel serves every layout.
 *
 * This file is compiled once per ISA with GEMM_ISA set (see the Makefile); the vector width and
 * the MR x NR tile follow from it: 16 (AVX-512) or 8 (AVX2) or 4 (SSE2) floats per vector,
 * NR = 2 vectors, MR chosen so the accumulators fill most of the register file. */
#include "gemm.h"

#include <string.h>

#if !defined(GEMM_ISA)
#error "compile with -DGEMM_ISA=generic|avx2|avx512"
#endif

#define generic 1
#define avx2 2
#define avx512 3
#if GEMM_ISA == avx512
#define VEC 16
#define MR 8
#define GEMM_NAME gemm_avx512
#elif GEMM_ISA == avx2
#define VEC 8
#define MR 6
#define GEMM_NAME gemm_avx2
#else
#define VEC 4
#define MR 4
#define GEMM_NAME gemm_generic
#endif
#undef generic
#undef avx2
#undef avx512

#define NR (2 * VEC)
/* Cache blocking, shared by every ISA so the workspace size is one constant: a KC x NC panel of
 * B (512 KiB) stays in L2, an MC x KC block of A (96 KiB) in L1/L2. MC is a multiple of 8, 6, 4. */
#define KC 256
#define MC 96
#define NC 512

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));

/* Exported under its ISA name only from the generic object, so the three objects do not clash. */
#if VEC == 4
size_t gemm_workspace_floats(void) { return (size_t)MC * KC + (size_t)KC * NC; }
#endif

/* Packs rows [0, mc) x cols [0, kc) of op(A) into MR-row panels: panel p holds Ap[k*MR + r] =
 * A(p*MR + r, k), rows past mc are zero. */
static void pack_a(int mc, int kc, const float *A, ptrdiff_t rsa, ptrdiff_t csa, float *Ap) {
    for (int p = 0; p < mc; p += MR) {
        int rows = mc - p < MR ? mc - p : MR;
        for (int k = 0; k < kc; k++) {
            for (int r = 0; r < rows; r++) Ap[k * MR + r] = A[(p + r) * rsa + k * csa];
            for (int r = rows; r < MR; r++) Ap[k * MR + r] = 0.0f;
        }
        Ap += (size_t)MR * kc;
    }
}

/* Packs rows [0, kc) x cols [0, nc) of op(B) into NR-column panels: Bp[k*NR + c] = B(k, p*NR + c). */
static void pack_b(int kc, int nc, const float *B, ptrdiff_t rsb, ptrdiff_t csb, float *Bp) {
    for (int p = 0; p < nc; p += NR) {
        int cols = nc - p < NR ? nc - p : NR;
        for (int k = 0; k < kc; k++) {
            const float *src = B + k * rsb + p * csb;
            if (csb == 1 && cols == NR) {
                memcpy(Bp + k * NR, src, NR * sizeof(float));
            } else {
                for (int c = 0; c < cols; c++) Bp[k * NR + c] = src[c * csb];
                for (int c = cols; c < NR; c++) Bp[k * NR + c] = 0.0f;
            }
        }
        Bp += (size_t)NR * kc;
    }
}

/* acc = sum_k Ap[k][0..MR) x Bp[k][0..NR); then C tile (mr x nr valid) = alpha*acc + beta*C. */
static void micro_kernel(int kc, const float *restrict Ap, const float *restrict Bp, int mr, int nr,
                         float alpha, float beta, float *restrict C, int ldc) {
    vf acc[MR][2];
    for (int r = 0; r < MR; r++) acc[r][0] = acc[r][1] = (vf){0};
    for (int k = 0; k < kc; k++) {
        vf b0 = *(const vf *)(Bp + k * NR);
        vf b1 = *(const vf *)(Bp + k * NR + VEC);
        for (int r = 0; r < MR; r++) {
            float a = Ap[k * MR + r];
            acc[r][0] += a * b0;
            acc[r][1] += a * b1;
        }
    }
    float tile[MR][NR] __attribute__((aligned(64)));
    memcpy(tile, acc, sizeof tile);
    for (int r = 0; r < mr; r++) {
        float *c = C + (ptrdiff_t)r * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < nr; j++) c[j] = alpha * tile[r][j];
        else
            for (int j = 0; j < nr; j++) c[j] = alpha * tile[r][j] + beta * c[j];
    }
}

void GEMM_NAME(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
               const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc,
               float *ws) {
    float *Ap = ws;                        /* [MC * KC] */
    float *Bp = ws + (size_t)MC * KC;      /* [KC * NC] */
    if (K == 0) {                          /* C = beta * C, as BLAS defines it */
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
        return;
    }
    for (int jc = 0; jc < N; jc += NC) {
        int nc = N - jc < NC ? N - jc : NC;
        for (int pc = 0; pc < K; pc += KC) {
            int kc = K - pc < KC ? K - pc : KC;
            float beta_block = pc == 0 ? beta : 1.0f; /* later K blocks accumulate */
            pack_b(kc, nc, B + pc * rsb + jc * csb, rsb, csb, Bp);
            for (int ic = 0; ic < M; ic += MC) {
                int mc = M - ic < MC ? M - ic : MC;
                pack_a(mc, kc, A + ic * rsa + pc * csa, rsa, csa, Ap);
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int mr = mc - ir < MR ? mc - ir : MR;
                        micro_kernel(kc, Ap + (size_t)ir * kc, Bp + (size_t)jr * kc, mr, nr, alpha,
                                     beta_block, C + (ptrdiff_t)(ic + ir) * ldc + jc + jr, ldc);
                    }
                }
            }
        }
    }
}
