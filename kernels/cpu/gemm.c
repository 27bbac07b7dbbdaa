/* Blocked GEMM in the style of BLIS/GotoBLAS: op(B) is packed into KC x NR panels, op(A) into
 * MR x KC panels, and a register-blocked MR x NR micro-kernel does all the arithmetic. Packing
 * also absorbs the transposes, so one micro-kernel serves every layout.
 *
 * This file is compiled once per ISA (isa.h); the vector width and the MR x NR tile follow from
 * it: 16 (AVX-512) or 8 (AVX2) or 4 (SSE2) floats per vector. */
#include "gemm.h"
#include "../../common/err.h"
#include "isa.h"
#include "transpose.h" /* pack_lines' in-register transpose */
#include "vec.h"

#include <stdint.h>
#include <string.h>

/* The register tile (isa.h): MR rows of A times NR = 2 vectors of B. */
#define MR         GEMM_MR
#define NR         GEMM_NR
#define GEMM_NAME  ISA_FN(gemm)
#define PROBE_NAME ISA_FN(gemm_fma_probe)
/* Cache blocking, shared by every ISA so the workspace size is one constant: a KC x NC panel of
 * B (512 KiB) stays in L2, an MC x KC block of A (96 KiB) in L1/L2. MC is a multiple of 8, 6, 4. */
#define KC 256
#define MC 96
#define NC 512

/* vf, and vfu for rows of C at any float-aligned address: vec.h. */

/* B panels are read with aligned vector loads (vf): 64 bytes covers every path's VEC. */
static int aligned64(const void *p) { return ((uintptr_t)p & 63) == 0; }

/* Not per ISA: defined once, in the generic object. */
#ifdef ISA_IS_GENERIC
size_t gemm_workspace_floats(void) { return (size_t)MC * KC + (size_t)KC * NC; }

size_t gemm_packed_a_floats(int M, int K) {
    return (size_t)(M + GEMM_MR_LCM - 1) / GEMM_MR_LCM * GEMM_MR_LCM * K;
}
#endif

/* One panel from `lines` source lines that are contiguous in k (line l starts at src + l*ld):
 * dst[k*width + l] = line l's element k for l < lines, 0 for lines <= l < width. On the vector
 * paths, blocks of VEC lines x VEC k are loaded a vector per line, transposed in registers and
 * stored a vector (or the width's part of one) per k: a scalar copy per element cost about as
 * much as the products in the Winograd filter gradient, whose operands are both transposed
 * (tests/test_ops.c checks every layout on every path). A block reads its VEC lines at once;
 * lines a power-of-two stride apart share L1 sets, but a block is 16 lines at most: at a 4 KiB
 * stride (27 x 32 x 1024) the product still ran 1.9x as fast as with the scalar copy
 * (docs/results.md).
 * The rest of k, and the generic path: one stream per line (all lines at once would touch
 * addresses one stride apart, for power-of-two strides all in the same L1 set). */
_Static_assert(GEMM_MR <= VEC && GEMM_NR % VEC == 0, "pack_lines' blocks tile the panel widths");
static void pack_lines(const float *src, ptrdiff_t ld, int lines, int kc, int width, float *dst) {
    int k0 = 0;
#if VEC >= 8
    int group = width < VEC ? width : VEC; /* lines per transposed block: MR may be below VEC */
    for (; k0 + VEC <= kc; k0 += VEC)
        for (int l0 = 0; l0 < width; l0 += group) {
            vreg r[VEC];
            for (int l = 0; l < VEC; l++)
                r[l] = l < group && l0 + l < lines ? VLOAD(src + (l0 + l) * ld + k0) : VZERO();
            transpose_vec(r);
            for (int k = 0; k < VEC; k++) {
                float *d = dst + (size_t)(k0 + k) * width + l0;
                if (group == VEC) memcpy(d, &r[k], sizeof r[k]);
                else memcpy(d, &r[k], (size_t)group * sizeof(float));
            }
        }
#endif
    for (int l = 0; l < lines; l++) {
        const float *line = src + l * ld;
        for (int k = k0; k < kc; k++) dst[k * width + l] = line[k];
    }
    for (int l = lines; l < width; l++)
        for (int k = k0; k < kc; k++) dst[k * width + l] = 0.0f;
}

/* Packs rows [0, mc) x cols [0, kc) of op(A) into MR-row panels: panel p holds Ap[k*MR + r] =
 * A(p*MR + r, k), rows past mc are zero. k contiguous (csa == 1): pack_lines. */
static void pack_a(int mc, int kc, const float *A, ptrdiff_t rsa, ptrdiff_t csa, float *Ap) {
    for (int p = 0; p < mc; p += MR) {
        int rows = mc - p < MR ? mc - p : MR;
        if (csa == 1) {
            pack_lines(A + p * rsa, rsa, rows, kc, MR, Ap);
        } else {
            for (int k = 0; k < kc; k++) {
                for (int r = 0; r < rows; r++) Ap[k * MR + r] = A[(p + r) * rsa + k * csa];
                for (int r = rows; r < MR; r++) Ap[k * MR + r] = 0.0f;
            }
        }
        Ap += (size_t)MR * kc;
    }
}

/* Packs rows [0, kc) x cols [0, nc) of op(B) into NR-column panels: Bp[k*NR + c] = B(k, p*NR + c).
 * Rows of B contiguous (csb == 1): vector copies; k contiguous (rsb == 1, a transposed B): one
 * stream per column (pack_lines). */
static void pack_b(int kc, int nc, const float *B, ptrdiff_t rsb, ptrdiff_t csb, float *Bp) {
    for (int p = 0; p < nc; p += NR) {
        int cols = nc - p < NR ? nc - p : NR;
        if (rsb == 1 && csb != 1) {
            pack_lines(B + p * csb, csb, cols, kc, NR, Bp);
        } else {
            for (int k = 0; k < kc; k++) {
                const float *src = B + k * rsb + p * csb;
                if (csb == 1 && cols == NR) {
                    memcpy(Bp + k * NR, src, NR * sizeof(float));
                } else {
                    for (int c = 0; c < cols; c++) Bp[k * NR + c] = src[c * csb];
                    for (int c = cols; c < NR; c++) Bp[k * NR + c] = 0.0f;
                }
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
    if (mr == MR && nr == NR) { /* whole tile: vector loads and stores of C */
        vf va = (vf){0} + alpha, vb = (vf){0} + beta;
        for (int r = 0; r < MR; r++) {
            vfu *c = (vfu *)(C + (ptrdiff_t)r * ldc);
            if (beta == 0.0f) {
                c[0] = va * acc[r][0];
                c[1] = va * acc[r][1];
            } else {
                c[0] = va * acc[r][0] + vb * c[0];
                c[1] = va * acc[r][1] + vb * c[1];
            }
        }
        return;
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

void GEMM_NAME(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa, const float *B,
               ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws) {
    float *Ap = ws;                   /* [MC * KC] */
    float *Bp = ws + (size_t)MC * KC; /* [KC * NC] */
    CHECK(aligned64(ws));             /* micro_kernel loads B panels with aligned vector loads */
    if (K == 0) {
        gemm_scale_c(M, N, beta, C, ldc);
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

void ISA_FN(gemm_pack_a)(int M, int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa, float *Ap) {
    pack_a(M, K, A, rsa, csa, Ap);
}

/* The panels are K deep, so a KC block of panel p starts pc panel rows into it. A B panel (NR x
 * K) stays in L1 while all of A's panels (from L2) pass it. */
void ISA_FN(gemm_prepacked)(int M, int N, int K, const float *Ap, const float *Bp, float *C, int ldc) {
    /* Checked on every path, so that a caller's misaligned Bp fails on any CPU, not only on
     * one whose vectors are 64 bytes wide. */
    CHECK(aligned64(Bp));
    for (int pc = 0; pc < K; pc += KC) {
        int kc = K - pc < KC ? K - pc : KC;
        float beta = pc == 0 ? 0.0f : 1.0f; /* later K blocks accumulate */
        for (int jr = 0; jr < N; jr += NR) {
            int nr = N - jr < NR ? N - jr : NR;
            const float *b = Bp + (size_t)jr * K + (size_t)pc * NR;
            for (int ir = 0; ir < M; ir += MR) {
                int mr = M - ir < MR ? M - ir : MR;
                micro_kernel(kc, Ap + (size_t)ir * K + (size_t)pc * MR, b, mr, nr, 1.0f, beta,
                             C + (ptrdiff_t)ir * ldc + jr, ldc);
            }
        }
    }
}

/* FMA throughput probe: iters rounds of 12 independent vector FMA chains (more than latency x
 * ports on current cores, so the FMA units, not dependencies, set the pace). Returns the flops
 * executed (2 per lane per FMA). */
double PROBE_NAME(long iters) {
    vf mul = (vf){0} + 0.999999f, add = (vf){0} + 1e-6f; /* converges; no overflow */
    vf a0 = mul, a1 = a0 + add, a2 = a1 + add, a3 = a2 + add, a4 = a3 + add, a5 = a4 + add;
    vf a6 = a5 + add, a7 = a6 + add, a8 = a7 + add, a9 = a8 + add, a10 = a9 + add, a11 = a10 + add;
    for (long it = 0; it < iters; it++) {
        a0 = a0 * mul + add, a1 = a1 * mul + add, a2 = a2 * mul + add, a3 = a3 * mul + add;
        a4 = a4 * mul + add, a5 = a5 * mul + add, a6 = a6 * mul + add, a7 = a7 * mul + add;
        a8 = a8 * mul + add, a9 = a9 * mul + add, a10 = a10 * mul + add, a11 = a11 * mul + add;
        /* Registers, not memory: the compiler may neither fold nor hoist the chains. */
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
        __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
    vf sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    volatile float sink = sum[0];
    (void)sink;
    return 2.0 * VEC * 12.0 * (double)iters;
}
