/* The bf16 GEMM (gemm.h: gemm_bf16): gemm()'s contract, with both operands rounded to bfloat16
 * as they are packed and the products summed in float. The blocking is gemm.c's (BLIS style),
 * the panels hold bf16 pairs along k, the layout AVX512_BF16's VDPBF16PS reads:
 *
 *   Ap[kp][MR][2]: A(r, 2kp) and A(r, 2kp+1) side by side (one 32-bit word per row),
 *   Bp[kp][NR][2]: B(2kp, c) and B(2kp+1, c) side by side,
 *
 * zero past the matrix (rows, columns, and the odd k of an odd depth), so one VDPBF16PS adds
 * two k steps into 16 float accumulators: the 2 x 16 multiply-adds of a float FMA's 16 in one
 * instruction.
 *
 * Compiled three times (isa.h): CPU_ISA=avx512bf16 is that kernel; CPU_ISA=generic computes
 * the same thing in plain C (every product of two bf16 is exact in float, and each is added in
 * the instruction's order, odd k then even k, rounding to nearest), so it runs anywhere: the
 * tests' check of the packing; CPU_ISA=avx2 computes the same sums again with AVX2 FMA, at about
 * the float GEMM's speed, so CPUs without the instructions can run bf16 (to check what bf16 does
 * to accuracy, not to go faster). */
#include "gemm.h"
#include "isa.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(ISA_HAS_BF16) || VEC == 8
#include <immintrin.h>
#endif

/* 12 x 32 floats of accumulators: 24 of the 32 zmm registers, plus 2 of B and 1 of A (8 x 48
 * and 6 x 64 measured the same on Zen 5). */
#define MR 12
#define NV 2 /* vectors of 16 columns */
#define NR GEMM_BF16_NR
_Static_assert(NR == 16 * NV, "B panels are NV vectors wide");
#define KC 256 /* even: k pairs never straddle a block */
#define MC 96  /* a multiple of MR */
#define NC 512

#define GEMM_NAME  ISA_FN(gemm_bf16)
#define PROBE_NAME ISA_FN(gemm_bf16_probe)

#ifdef ISA_IS_GENERIC /* once, not per ISA */
float bf16_widen(uint32_t bits16) {
    uint32_t u = bits16 << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

float bf16_round(float f) { return bf16_widen(bf16_bits(f)); }
#endif

/* Two floats as one bf16 pair word: lo at the lower address (little endian). */
static inline uint32_t pair(float lo, float hi) { return bf16_bits(lo) | bf16_bits(hi) << 16; }

/* dst[c] = pair(r0[c], r1[c]) for c < 16: two lines of 16 floats, interleaved as bf16. */
static inline void pairs16(const float *r0, const float *r1, uint32_t *dst) {
#if defined(ISA_HAS_BF16)
    /* VCVTNE2PS2BF16 rounds as bf16_bits does (nearest even, subnormals to zero, NaN quiet):
     * r0 lands in the low 16 halves, r1 in the high; VPERMW interleaves them. */
    static const short interleave[32]
        __attribute__((aligned(64))) = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                        8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __m512i v = (__m512i)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(r1), _mm512_loadu_ps(r0));
    _mm512_storeu_si512(dst, _mm512_permutexvar_epi16(_mm512_load_si512(interleave), v));
#else
    for (int c = 0; c < 16; c++) dst[c] = pair(r0[c], r1[c]);
#endif
}

/* dst[k] = pair(line[2k], line[2k + 1]) for k < 16: 32 consecutive floats (a row of A along
 * k) are already in pair order, so this is a plain conversion. */
static inline void pairs_along16(const float *line, uint32_t *dst) {
#if defined(ISA_HAS_BF16)
    __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(line + 16), _mm512_loadu_ps(line));
    _mm512_storeu_si512(dst, (__m512i)v);
#else
    for (int k = 0; k < 16; k++) dst[k] = pair(line[2 * k], line[2 * k + 1]);
#endif
}

/* Packs rows [0, mc) x cols [0, kc) of op(A): panel p holds Ap[kp*MR + r] = the pair
 * (A(pMR + r, 2kp), A(pMR + r, 2kp + 1)); zero past mc rows and past kc. Rows contiguous
 * along k (csa == 1, the forward's weights): 16 pairs of a row at a time through a buffer. */
static void pack_a(int mc, int kc, const float *A, ptrdiff_t rsa, ptrdiff_t csa, uint32_t *Ap) {
    int kp = (kc + 1) / 2;
    for (int p = 0; p < mc; p += MR) {
        int rows = mc - p < MR ? mc - p : MR;
        for (int r = 0; r < MR; r++) {
            const float *row = A + (ptrdiff_t)(p + r) * rsa;
            int k = 0;
            if (r < rows && csa == 1)
                for (uint32_t buf[16]; 2 * k + 32 <= kc; k += 16) {
                    pairs_along16(row + 2 * k, buf);
                    for (int i = 0; i < 16; i++) Ap[(k + i) * MR + r] = buf[i];
                }
            for (; k < kp; k++) {
                float lo = 0.0f, hi = 0.0f;
                if (r < rows) {
                    lo = row[2 * k * csa];
                    if (2 * k + 1 < kc) hi = row[(2 * k + 1) * csa];
                }
                Ap[k * MR + r] = pair(lo, hi);
            }
        }
        Ap += (size_t)MR * kp;
    }
}

/* Packs rows [0, kc) x cols [0, nc) of op(B) (gemm.h: gemm_bf16_pack_b): Bp[kp*NR + c] = the
 * pair (B(2kp, pNR + c), B(2kp + 1, pNR + c)); zero past nc columns, past kc, and for pairs
 * [(kc + 1) / 2, kpad). Rows of B contiguous (csb == 1, the usual case): two rows at a time,
 * 16 columns per step; columns contiguous (rsb == 1): 16 pairs of a column at a time. */
void ISA_FN(gemm_bf16_pack_b)(int kc, int nc, const float *B, ptrdiff_t rsb, ptrdiff_t csb, int kpad,
                              uint32_t *Bp) {
    int kp = (kc + 1) / 2;
    for (int p = 0; p < nc; p += NR) {
        int cols = nc - p < NR ? nc - p : NR;
        int k = 0;
        if (rsb == 1) /* columns contiguous along k (a transposed B): as pack_a's rows */
            for (uint32_t buf[16]; 2 * k + 32 <= kc; k += 16)
                for (int c = 0; c < NR; c++) {
                    if (c < cols) pairs_along16(B + (ptrdiff_t)(p + c) * csb + 2 * k, buf);
                    for (int i = 0; i < 16; i++) Bp[(size_t)(k + i) * NR + c] = c < cols ? buf[i] : 0;
                }
        for (; k < kp; k++) {
            const float *r0 = B + 2 * k * rsb + p * csb, *r1 = r0 + rsb;
            uint32_t *dst = Bp + (size_t)k * NR;
            int odd = 2 * k + 1 < kc;
            if (csb == 1 && cols == NR && odd) {
                for (int c = 0; c < NR; c += 16) pairs16(r0 + c, r1 + c, dst + c);
            } else {
                for (int c = 0; c < cols; c++) dst[c] = pair(r0[c * csb], odd ? r1[c * csb] : 0.0f);
                for (int c = cols; c < NR; c++) dst[c] = 0;
            }
        }
        memset(Bp + (size_t)kp * NR, 0, (size_t)(kpad - kp) * NR * sizeof *Bp);
        Bp += (size_t)NR * kpad;
    }
}

/* gemm.h: gemm_bf16_pack_rows. Row r of op(A) (r < rows) as pairs along k at dst + r * kpad;
 * zero past kc, and rows [rows, rows_pad) all zero. */
void ISA_FN(gemm_bf16_pack_rows)(int rows, int rows_pad, int kc, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                                 int kpad, uint32_t *dst) {
    int kp = (kc + 1) / 2;
    for (int r = 0; r < rows_pad; r++, dst += kpad) {
        int k = 0;
        if (r < rows) {
            const float *row = A + (ptrdiff_t)r * rsa;
            if (csa == 1)
                for (; 2 * k + 32 <= kc; k += 16) pairs_along16(row + 2 * k, dst + k);
            for (; k < kp; k++)
                dst[k] = pair(row[2 * k * csa], 2 * k + 1 < kc ? row[(2 * k + 1) * csa] : 0.0f);
        }
        memset(dst + k, 0, (size_t)(kpad - k) * sizeof *dst);
    }
}

/* gemm.h: gemm_bf16_store. C (mr x nr) = alpha * acc + beta * C (C not read when beta is 0).
 * One fused multiply-add, written out: left to the compiler, the sum would be contracted on the
 * paths compiled with FMA and not on the generic one, and the paths would round it differently. */
void ISA_FN(gemm_bf16_store)(const float *acc, int lda, int mr, int nr, float alpha, float beta, float *C,
                             int ldc) {
    for (int r = 0; r < mr; r++) {
        const float *a = acc + (size_t)r * lda;
        float *c = C + (ptrdiff_t)r * ldc;
        if (beta == 0.0f)
            for (int j = 0; j < nr; j++) c[j] = alpha * a[j];
        else
            for (int j = 0; j < nr; j++) c[j] = fmaf(alpha, a[j], beta * c[j]);
    }
}

#if defined(ISA_HAS_BF16)
/* acc = sum over kp of Ap[kp][0..MR) x Bp[kp][0..NR), two k steps per instruction. */
static void micro_kernel(int kp, const uint32_t *restrict Ap, const uint32_t *restrict Bp, int mr, int nr,
                         float alpha, float beta, float *restrict C, int ldc) {
    __m512 acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int k = 0; k < kp; k++) {
        __m512bh b[NV];
        for (int v = 0; v < NV; v++) b[v] = (__m512bh)_mm512_loadu_si512(Bp + (size_t)k * NR + 16 * v);
        for (int r = 0; r < MR; r++) {
            __m512bh a = (__m512bh)_mm512_set1_epi32((int)Ap[k * MR + r]);
            for (int v = 0; v < NV; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], a, b[v]);
        }
    }
    float tile[MR][NR] __attribute__((aligned(64)));
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) _mm512_store_ps(tile[r] + 16 * v, acc[r][v]);
    ISA_FN(gemm_bf16_store)(&tile[0][0], NR, mr, nr, alpha, beta, C, ldc);
}
#elif VEC == 8
/* The same sums as VDPBF16PS on AVX2 FMA. A bf16 is the top half of a float, so a pair word
 * widens to its two floats with one AND (hi) and one shift (lo); each product of two bf16 is
 * exact in float, so FMA(hi, hi, acc) then FMA(lo, lo, acc) rounds exactly as the instruction
 * does (and as the plain-C path below: the tests compare the two bit for bit). The 12 x 32 tile
 * runs as six 4 x 16 sub-tiles: 8 accumulators, 4 widened B vectors and 2 of A fit the 16 ymm
 * registers. */
static void micro_kernel(int kp, const uint32_t *restrict Ap, const uint32_t *restrict Bp, int mr, int nr,
                         float alpha, float beta, float *restrict C, int ldc) {
    enum { SR = 4, SC = 16 }; /* the sub-tile: rows, columns (two vectors of 8) */
    _Static_assert(MR % SR == 0 && NR % SC == 0, "sub-tiles cover the tile");
    const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    float tile[MR][NR] __attribute__((aligned(32)));
    for (int r0 = 0; r0 < MR; r0 += SR)
        for (int c0 = 0; c0 < NR; c0 += SC) {
            __m256 acc[SR][2];
            for (int r = 0; r < SR; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
            for (int k = 0; k < kp; k++) {
                __m256 bhi[2], blo[2];
                for (int v = 0; v < 2; v++) {
                    __m256i b = _mm256_loadu_si256((const __m256i *)(Bp + (size_t)k * NR + c0 + 8 * v));
                    bhi[v] = _mm256_castsi256_ps(_mm256_and_si256(b, hi_mask));
                    blo[v] = _mm256_castsi256_ps(_mm256_slli_epi32(b, 16));
                }
                for (int r = 0; r < SR; r++) {
                    __m256i a = _mm256_set1_epi32((int)Ap[k * MR + r0 + r]);
                    __m256 ahi = _mm256_castsi256_ps(_mm256_and_si256(a, hi_mask));
                    __m256 alo = _mm256_castsi256_ps(_mm256_slli_epi32(a, 16));
                    for (int v = 0; v < 2; v++)
                        acc[r][v] = _mm256_fmadd_ps(alo, blo[v], _mm256_fmadd_ps(ahi, bhi[v], acc[r][v]));
                }
            }
            for (int r = 0; r < SR; r++)
                for (int v = 0; v < 2; v++) _mm256_store_ps(&tile[r0 + r][c0 + 8 * v], acc[r][v]);
        }
    ISA_FN(gemm_bf16_store)(&tile[0][0], NR, mr, nr, alpha, beta, C, ldc);
}
#else
/* The same sums as VDPBF16PS, one lane at a time: acc += hi * hi, then += lo * lo. */
static void micro_kernel(int kp, const uint32_t *restrict Ap, const uint32_t *restrict Bp, int mr, int nr,
                         float alpha, float beta, float *restrict C, int ldc) {
    float acc[MR][NR];
    memset(acc, 0, sizeof acc);
    for (int k = 0; k < kp; k++)
        for (int r = 0; r < MR; r++) {
            uint32_t a = Ap[k * MR + r];
            float alo = bf16_widen(a & 0xffffu), ahi = bf16_widen(a >> 16);
            for (int c = 0; c < NR; c++) {
                uint32_t b = Bp[(size_t)k * NR + c];
                acc[r][c] += ahi * bf16_widen(b >> 16);
                acc[r][c] += alo * bf16_widen(b & 0xffffu);
            }
        }
    ISA_FN(gemm_bf16_store)(&acc[0][0], NR, mr, nr, alpha, beta, C, ldc);
}
#endif

/* C = alpha op(A) op(B) + beta C in blocks (gemm.c's loops), each block of A packed here, or
 * with Apre not NULL taken from Apre, where gemm_bf16_pack_a laid all of them out: the block of
 * K block pc and row block ic at (pc / 2) Mpad + ic kp words (Mpad: M in whole panels; a full K
 * block takes Mpad KC / 2 words, a row block of it MC kp). */
static void blocked(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                    const uint32_t *Apre, const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C,
                    int ldc, float *ws) {
    /* Half a float per packed element: both panels fit in gemm_workspace_floats(). */
    _Static_assert((MC * KC + KC * NC) / 2 <= 96 * 256 + 256 * 512, "panels fit gemm's workspace");
    uint32_t *Ap = (uint32_t *)ws;           /* [MC/MR][KC/2][MR] pairs */
    uint32_t *Bp = Ap + (size_t)MC * KC / 2; /* [NC/NR][KC/2][NR] pairs */
    size_t Mpad = (size_t)(M + MR - 1) / MR * MR;
    if (K == 0) {
        gemm_scale_c(M, N, beta, C, ldc);
        return;
    }
    for (int jc = 0; jc < N; jc += NC) {
        int nc = N - jc < NC ? N - jc : NC;
        for (int pc = 0; pc < K; pc += KC) {
            int kc = K - pc < KC ? K - pc : KC, kp = (kc + 1) / 2;
            float beta_block = pc == 0 ? beta : 1.0f; /* later K blocks accumulate */
            ISA_FN(gemm_bf16_pack_b)(kc, nc, B + pc * rsb + jc * csb, rsb, csb, kp, Bp);
            for (int ic = 0; ic < M; ic += MC) {
                int mc = M - ic < MC ? M - ic : MC;
                const uint32_t *a = Apre ? Apre + (size_t)pc / 2 * Mpad + (size_t)ic * kp : Ap;
                if (!Apre) pack_a(mc, kc, A + ic * rsa + pc * csa, rsa, csa, Ap);
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int mr = mc - ir < MR ? mc - ir : MR;
                        micro_kernel(kp, a + (size_t)ir * kp, Bp + (size_t)jr * kp, mr, nr, alpha, beta_block,
                                     C + (ptrdiff_t)(ic + ir) * ldc + jc + jr, ldc);
                    }
                }
            }
        }
    }
}

void GEMM_NAME(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa, const float *B,
               ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws) {
    blocked(M, N, K, alpha, A, rsa, csa, NULL, B, rsb, csb, beta, C, ldc, ws);
}

#ifdef ISA_IS_GENERIC /* once, not per ISA */
size_t gemm_bf16_packed_a_words(int M, int K) {
    return (size_t)(M + MR - 1) / MR * MR * (((size_t)K + 1) / 2);
}
#endif

/* gemm.h: every block blocked() would pack, at the offsets it reads them from. */
void ISA_FN(gemm_bf16_pack_a)(int M, int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa, uint32_t *Ap) {
    size_t Mpad = (size_t)(M + MR - 1) / MR * MR;
    for (int pc = 0; pc < K; pc += KC) {
        int kc = K - pc < KC ? K - pc : KC, kp = (kc + 1) / 2;
        for (int ic = 0; ic < M; ic += MC)
            pack_a(M - ic < MC ? M - ic : MC, kc, A + ic * rsa + pc * csa, rsa, csa,
                   Ap + (size_t)pc / 2 * Mpad + (size_t)ic * kp);
    }
}

void ISA_FN(gemm_bf16_prepacked)(int M, int N, int K, const uint32_t *Ap, const float *B, ptrdiff_t rsb,
                                 ptrdiff_t csb, float *C, int ldc, float *ws) {
    blocked(M, N, K, 1.0f, NULL, 0, 0, Ap, B, rsb, csb, 0.0f, C, ldc, ws);
}

#if defined(ISA_HAS_BF16)
/* Throughput probe: 12 independent VDPBF16PS chains (enough to cover latency x ports). Returns
 * the flops executed: 2 per multiply-add, 32 multiply-adds per instruction. */
double PROBE_NAME(long iters) {
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80); /* (1, 1) */
    __m512bh y = (__m512bh)_mm512_set1_epi32(0x33d633d6); /* (1e-7, 1e-7): no overflow */
    /* Named registers, not an array: an array would live in memory, and the chains would wait
     * on store forwarding instead of the arithmetic units. */
    __m512 a0 = _mm512_set1_ps(0), a1 = _mm512_set1_ps(1), a2 = _mm512_set1_ps(2);
    __m512 a3 = _mm512_set1_ps(3), a4 = _mm512_set1_ps(4), a5 = _mm512_set1_ps(5);
    __m512 a6 = _mm512_set1_ps(6), a7 = _mm512_set1_ps(7), a8 = _mm512_set1_ps(8);
    __m512 a9 = _mm512_set1_ps(9), a10 = _mm512_set1_ps(10), a11 = _mm512_set1_ps(11);
#define DP(a) a = _mm512_dpbf16_ps(a, x, y)
    for (long it = 0; it < iters; it++) {
        DP(a0), DP(a1), DP(a2), DP(a3), DP(a4), DP(a5), DP(a6), DP(a7), DP(a8), DP(a9), DP(a10);
        DP(a11);
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
        __asm__ volatile("" : "+v"(a6), "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
    }
#undef DP
    __m512 sum = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    volatile float sink = _mm512_reduce_add_ps(sum);
    (void)sink;
    return 2.0 * 32 * 12.0 * (double)iters;
}
#endif
