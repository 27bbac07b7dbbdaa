/* AMX-BF16 tile operations for the files compiled as "amx" and "generic" (isa.h; the Makefile's
 * AMX_ISA_SRC): one kernel body for both builds. Eight tiles of 16 rows x 64 bytes (palette 1):
 *
 *   TILE_ZERO(t)              tile t = 0
 *   TILE_LOAD(t, p, stride)   tile t = 16 rows of 64 bytes from p, rows stride bytes apart
 *   TILE_STORE(t, p, stride)  the reverse
 *   TILE_DP(c, a, b)          TDPBF16PS: c (16 x 16 floats) += a (16 rows of 16 bf16 pairs)
 *                             times b (16 rows, one pair each, of 16 columns):
 *                             c[m][n] += a[m][2k] b[k][2n] + a[m][2k+1] b[k][2n+1] over k
 *
 * A kernel declares TILE_REGS (the register file: a struct in the plain-C build, nothing on AMX)
 * and brackets its tile work with tiles_begin() / tiles_end() on each thread (the tile state is
 * the thread's; the OS must have granted it: gemm_dispatch.c). TILE_FENCE() orders the
 * program's loads and stores against the tile loads and stores, which GCC's intrinsics do not
 * (they are asm statements with no memory operand): fence both ends of a stretch of tile
 * operations, so that what a TILE_LOAD reads is written before it and not overwritten before
 * it runs, and what a TILE_STORE writes is read (or overwritten) only after it.
 *
 * The plain-C build adds each product of TDPBF16PS to its output in float, for each k pair the
 * even product then the odd one. The hardware may round otherwise (the SDM's pseudo-code sums a
 * row's products in a temporary first, and flushes denormal outputs), so the tests hold the two
 * to bf16's tolerance, not to the same bits. */
#ifndef KERNELS_CPU_TILES_H
#define KERNELS_CPU_TILES_H

#include "gemm.h"
#include "isa.h"

#include <string.h>

#if !defined(ISA_HAS_AMX) || defined(ISA_TILES_COST)
/* The builds without tile instructions count the TDPBF16PS they carry out or leave out: this
 * thread's count, added to gemm_tiles_products_sum (gemm_dispatch.c; gemm.h:
 * gemm_tiles_products) at tiles_end(). */
#include <stdatomic.h>
extern _Atomic unsigned long long gemm_tiles_products_sum;
static __thread unsigned long long tiles_dp_count;
static inline void tiles_begin(void) {}
static inline void tiles_end(void) {
    atomic_fetch_add_explicit(&gemm_tiles_products_sum, tiles_dp_count, memory_order_relaxed);
    tiles_dp_count = 0;
}
#endif

#if defined(ISA_TILES_COST)
/* The amxcost build (the bf16 path "amx-cost", a timing tool for CPUs without AMX): amx's code
 * with the tile arithmetic dropped, so that a run times all the rest (packing, conversions,
 * pooling, the loops' addressing) on any AVX512_BF16 CPU. A tile load keeps only its address
 * computation (an empty asm that takes the pointer); a tile store writes zeros where the tile
 * would go, so every result is 0: the ops after it time on zeros, not on stale memory whose
 * denormals and NaNs would move their times from run to run. */
static inline void tile_store_zeros(void *p, size_t stride) {
    for (int r = 0; r < 16; r++) memset((char *)p + r * stride, 0, 64);
}
#define TILE_REGS
#define TILE_FENCE()             __asm__ volatile("" ::: "memory")
#define TILE_ZERO(t)             ((void)0)
#define TILE_LOAD(t, p, stride)  __asm__ volatile("" ::"r"(p), "r"((size_t)(stride)))
#define TILE_STORE(t, p, stride) tile_store_zeros(p, stride)
#define TILE_DP(c, a, b)         (tiles_dp_count++)
#elif defined(ISA_HAS_AMX)
#include <immintrin.h>

struct tile_config {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
};
static const struct tile_config tiles_config __attribute__((aligned(64))) = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 64, 64, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 16, 16},
};
static inline void tiles_begin(void) { _tile_loadconfig(&tiles_config); }
static inline void tiles_end(void) { _tile_release(); }

#define TILE_REGS
#define TILE_FENCE()             __asm__ volatile("" ::: "memory")
#define TILE_ZERO(t)             _tile_zero(t)
#define TILE_LOAD(t, p, stride)  _tile_loadd(t, p, stride)
#define TILE_STORE(t, p, stride) _tile_stored(t, p, stride)
#define TILE_DP(c, a, b)         _tile_dpbf16ps(c, a, b)
#else
union tile_reg {
    float f[16][16];
    uint32_t u[16][16];
};

static inline void tile_load(union tile_reg *t, const void *p, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy(t->u[r], (const char *)p + r * stride, 64);
}
static inline void tile_store(const union tile_reg *t, void *p, size_t stride) {
    for (int r = 0; r < 16; r++) memcpy((char *)p + r * stride, t->u[r], 64);
}
/* The float a bf16 pair word's low (hi 0) or high half holds (bf16_widen, inlined). */
static inline float tile_half(uint32_t pair, int hi) {
    uint32_t u = hi ? pair & 0xffff0000u : pair << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
static inline void tile_dp(union tile_reg *c, const union tile_reg *a, const union tile_reg *b) {
    for (int m = 0; m < 16; m++)
        for (int k = 0; k < 16; k++) {
            uint32_t x = a->u[m][k];
            float lo = tile_half(x, 0), hi = tile_half(x, 1);
            for (int n = 0; n < 16; n++) {
                uint32_t y = b->u[k][n];
                c->f[m][n] += lo * tile_half(y, 0);
                c->f[m][n] += hi * tile_half(y, 1);
            }
        }
    tiles_dp_count++;
}

#define TILE_REGS                union tile_reg tile_regs_[8]
#define TILE_FENCE()             ((void)0)
#define TILE_ZERO(t)             memset(&tile_regs_[t], 0, sizeof tile_regs_[t])
#define TILE_LOAD(t, p, stride)  tile_load(&tile_regs_[t], p, stride)
#define TILE_STORE(t, p, stride) tile_store(&tile_regs_[t], p, stride)
#define TILE_DP(c, a, b)         tile_dp(&tile_regs_[c], &tile_regs_[a], &tile_regs_[b])
#endif

/* The 32 x 32 float block every kernel here accumulates, in C tiles 0 - 3: tile 2 i + j holds
 * rows 16 i.., columns 16 j.. of the block at c (rows ld floats apart). TILE_STEP_2X2 is one
 * step of it: A tiles 4, 5 from a0, a1 (rows a_stride bytes apart), B tiles 6, 7 from b0, b1
 * (b_stride), then C tile 2 i + j += A tile 4 + i times B tile 6 + j. */
#define TILE_ZERO_C()                                                                                        \
    do {                                                                                                     \
        TILE_ZERO(0);                                                                                        \
        TILE_ZERO(1);                                                                                        \
        TILE_ZERO(2);                                                                                        \
        TILE_ZERO(3);                                                                                        \
    } while (0)
#define TILE_MOVE_C(op, c, ld)                                                                               \
    do {                                                                                                     \
        op(0, (c), (ld) * sizeof(float));                                                                    \
        op(1, (c) + 16, (ld) * sizeof(float));                                                               \
        op(2, (c) + (size_t)16 * (ld), (ld) * sizeof(float));                                                \
        op(3, (c) + (size_t)16 * (ld) + 16, (ld) * sizeof(float));                                           \
    } while (0)
#define TILE_LOAD_C(c, ld)  TILE_MOVE_C(TILE_LOAD, c, ld)
#define TILE_STORE_C(c, ld) TILE_MOVE_C(TILE_STORE, c, ld)
#define TILE_STEP_2X2(a0, a1, a_stride, b0, b1, b_stride)                                                    \
    do {                                                                                                     \
        TILE_LOAD(4, a0, a_stride);                                                                          \
        TILE_LOAD(5, a1, a_stride);                                                                          \
        TILE_LOAD(6, b0, b_stride);                                                                          \
        TILE_LOAD(7, b1, b_stride);                                                                          \
        TILE_DP(0, 4, 6);                                                                                    \
        TILE_DP(1, 4, 7);                                                                                    \
        TILE_DP(2, 5, 6);                                                                                    \
        TILE_DP(3, 5, 7);                                                                                    \
    } while (0)

#endif
