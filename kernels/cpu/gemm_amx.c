/* The bf16 GEMM on AMX tiles (gemm.h: gemm_bf16's contract; dispatched as the bf16 path "amx"):
 * operands rounded to bfloat16 as they are packed, products summed in float. The blocking is
 * gemm_bf16.c's; the register block is 32 x 32 floats in four accumulator tiles:
 *
 *   tiles 0-3  C: rows 0-15 / 16-31 x columns 0-15 / 16-31, 16 rows of 16 floats each
 *   tiles 4-5  A: rows 0-15 / 16-31 of the block, 16 pairs along k each (64 bytes a row)
 *   tiles 6-7  B: columns 0-15 / 16-31, 16 rows of pairs along k (one k pair per row)
 *
 * so one TDPBF16PS does 16 x 16 x 32 multiply-adds, and a step of 32 k does four of them from
 * two A and two B tile loads. A is packed row by row (gemm_bf16_pack_rows: a tile row is 16
 * consecutive pairs of one row of A), B in gemm_bf16_pack_b's 32-column panels (a tile row is
 * half of one of its rows). The depth of both is padded with zero pairs to a multiple of 16, so
 * every tile is whole.
 *
 * Compiled twice (isa.h): CPU_ISA=amx is that kernel (the tiles configured and released around
 * each call: the tile state belongs to the thread); CPU_ISA=generic carries out the same tile
 * operations in plain C on the same panels (tiles.h), the tests' check of the packing and
 * blocking on CPUs without AMX; CPU_ISA=amxcost is amx's code without the tile instructions, a
 * timing tool (tiles.h). The OS must grant the tile state first (gemm_dispatch.c asks,
 * with arch_prctl). */
#include "tiles.h"

#if defined(ISA_HAS_AMX)
#define PACK(name) name##_avx512bf16 /* gemm_bf16.c's helpers; AMX-BF16 CPUs have AVX512_BF16 */
#else
#define PACK(name) name##_generic
#endif

#define MR 32
#define NR GEMM_BF16_NR /* 32: two B tiles */
#define KT 16           /* k pairs per tile step */
#define KC 256          /* KC / 2 a multiple of KT: a block's padded depth stays within KC / 2 */
#define MC 96           /* a multiple of MR */
#define NC GEMM_TILES_NC

/* acc = Ap (32 rows x kpad pairs, rows kpad pairs apart) times Bp (kpad rows of 32 pairs). */
static void block(int kpad, const uint32_t *Ap, const uint32_t *Bp, float acc[MR][NR]) {
    TILE_REGS;
    TILE_FENCE();
    TILE_ZERO_C();
    const size_t a_stride = (size_t)kpad * sizeof *Ap, b_stride = NR * sizeof *Bp;
    for (int k = 0; k < kpad; k += KT)
        TILE_STEP_2X2(Ap + k, Ap + (size_t)16 * kpad + k, a_stride, Bp + (size_t)k * NR,
                      Bp + (size_t)k * NR + 16, b_stride);
    TILE_STORE_C(&acc[0][0], NR);
    TILE_FENCE();
}

#if defined(ISA_HAS_AMX) && !defined(ISA_TILES_COST)
/* Throughput probe (gemm.h: gemm_bf16_peak): four independent TDPBF16PS chains, as in block();
 * returns the flops executed, 2 per multiply-add, 16 x 16 x 32 multiply-adds per instruction. */
double gemm_tiles_probe_amx(long iters) {
    uint32_t a[16 * KT] __attribute__((aligned(64))), b[KT * 16] __attribute__((aligned(64)));
    for (int i = 0; i < 16 * KT; i++) a[i] = 0x3f803f80u, b[i] = 0x33d633d6u; /* (1, 1), (1e-7, 1e-7) */
    TILE_FENCE();
    tiles_begin();
    TILE_ZERO(0);
    TILE_ZERO(1);
    TILE_ZERO(2);
    TILE_ZERO(3);
    TILE_LOAD(4, a, 64);
    TILE_LOAD(5, a, 64);
    TILE_LOAD(6, b, 64);
    TILE_LOAD(7, b, 64);
    for (long it = 0; it < iters; it++) {
        TILE_DP(0, 4, 6);
        TILE_DP(1, 4, 7);
        TILE_DP(2, 5, 6);
        TILE_DP(3, 5, 7);
    }
    tiles_end();
    return 2.0 * 16 * 16 * 32 * 4 * (double)iters;
}
#endif

void ISA_FN(gemm_tiles)(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                        const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc,
                        float *ws) {
    /* Half a float per packed element: both panels fit in gemm_workspace_floats(). */
    _Static_assert((MC * KC + KC * NC) / 2 <= 96 * 256 + 256 * 512, "panels fit gemm's workspace");
    uint32_t *Ap = (uint32_t *)ws;           /* [MC][KC/2] pairs, row by row */
    uint32_t *Bp = Ap + (size_t)MC * KC / 2; /* [NC/NR][KC/2][NR] pairs */
    if (K == 0) {
        gemm_scale_c(M, N, beta, C, ldc);
        return;
    }
    float acc[MR][NR] __attribute__((aligned(64)));
    tiles_begin();
    for (int jc = 0; jc < N; jc += NC) {
        int nc = N - jc < NC ? N - jc : NC;
        for (int pc = 0; pc < K; pc += KC) {
            int kc = K - pc < KC ? K - pc : KC;
            int kpad = ((kc + 1) / 2 + KT - 1) / KT * KT; /* pairs, whole tiles */
            float beta_block = pc == 0 ? beta : 1.0f;     /* later K blocks accumulate */
            PACK(gemm_bf16_pack_b)(kc, nc, B + pc * rsb + jc * csb, rsb, csb, kpad, Bp);
            for (int ic = 0; ic < M; ic += MC) {
                int mc = M - ic < MC ? M - ic : MC;
                PACK(gemm_bf16_pack_rows)
                (mc, (mc + MR - 1) / MR * MR, kc, A + ic * rsa + pc * csa, rsa, csa, kpad, Ap);
                for (int jr = 0; jr < nc; jr += NR) {
                    int nr = nc - jr < NR ? nc - jr : NR;
                    for (int ir = 0; ir < mc; ir += MR) {
                        int mr = mc - ir < MR ? mc - ir : MR;
                        block(kpad, Ap + (size_t)ir * kpad, Bp + (size_t)jr * kpad, acc);
                        PACK(gemm_bf16_store)
                        (&acc[0][0], NR, mr, nr, alpha, beta_block, C + (ptrdiff_t)(ic + ir) * ldc + jc + jr,
                         ldc);
                    }
                }
            }
        }
    }
    tiles_end();
}
