/* Per-ISA compilation. The files in the Makefile's ISA_SRC (gemm.c, winograd.c, gelu.c) are
 * compiled once per instruction set, with -DCPU_ISA=generic|avx2|avx512 and the matching -march
 * (the bf16 GEMM, gemm_bf16.c, once as generic and once as avx512bf16: BF16_ISA_SRC; the tile
 * GEMM, gemm_amx.c, and the tiles' direct convolutions, conv_tiles.c, as generic, amx and
 * amxcost: AMX_ISA_SRC);
 * this header turns CPU_ISA into the vector width VEC (floats) and ISA_FN(name), the name a
 * function is exported under for that path (gemm_avx512, ...). gemm_dispatch.c picks the path at
 * start-up (gelu.c follows its choice). Functions that must exist once (not per ISA) are compiled
 * only under ISA_IS_GENERIC. */
#ifndef KERNELS_CPU_ISA_H
#define KERNELS_CPU_ISA_H

#if !defined(CPU_ISA)
#error "compile with -DCPU_ISA=generic|avx2|avx512|avx512bf16|amx|amxcost (see the Makefile's ISA_SRC)"
#endif

#define generic    1
#define avx2       2
#define avx512     3
#define avx512bf16 4
#define amx        5
#define amxcost    6
#if CPU_ISA == amx
#define VEC          16
#define ISA_FN(name) name##_amx
#define ISA_HAS_BF16 1
#define ISA_HAS_AMX  1
#elif CPU_ISA == amxcost /* amx's code without its tile instructions: tiles.h */
#define VEC            16
#define ISA_FN(name)   name##_amxcost
#define ISA_HAS_BF16   1
#define ISA_HAS_AMX    1
#define ISA_TILES_COST 1
#elif CPU_ISA == avx512bf16
#define VEC          16
#define ISA_FN(name) name##_avx512bf16
#define ISA_HAS_BF16 1
#elif CPU_ISA == avx512
#define VEC          16
#define ISA_FN(name) name##_avx512
#elif CPU_ISA == avx2
#define VEC          8
#define ISA_FN(name) name##_avx2
#else
#define VEC            4
#define ISA_FN(name)   name##_generic
#define ISA_IS_GENERIC 1
#endif
#undef generic
#undef avx2
#undef avx512
#undef avx512bf16
#undef amx
#undef amxcost

/* The float GEMM's register tile (gemm.c): GEMM_MR rows of A times GEMM_NR = 2 vectors of B,
 * MR chosen so the accumulators fill most of the register file (32 zmm, 16 ymm, 16 xmm). Other
 * per-ISA files (winograd.c) lay operands out in its panels for gemm_prepacked. */
#if VEC == 16
#define GEMM_MR 8
#elif VEC == 8
#define GEMM_MR 6
#else
#define GEMM_MR 4
#endif
#define GEMM_NR (2 * VEC)

#endif
