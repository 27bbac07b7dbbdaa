/* Single-precision matrix multiply for the CPU kernels.
 *
 *   C[M][N] = alpha * op(A) op(B) + beta * C
 *
 * op(A) is M x K with element (i,k) at A[i*rsa + k*csa]; op(B) is K x N with element (k,j) at
 * B[k*rsb + j*csb]; so a transposed operand is just a different pair of strides. C is row-major
 * with leading dimension ldc. When beta == 0, C is not read (it may hold garbage).
 *
 * The same source (gemm.c) is compiled once per instruction set (generic x86-64, AVX2+FMA,
 * AVX-512); gemm() uses the best one this CPU supports, chosen once at start-up with cpuid.
 * The default build therefore runs on any x86-64. */
#ifndef KERNELS_CPU_GEMM_H
#define KERNELS_CPU_GEMM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* The signature every GEMM here shares (gemm, gemm_bf16 and their per-ISA paths). */
typedef void gemm_fn(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                     const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws);

/* Floats of scratch one gemm() call needs (independent of M, N, K). */
size_t gemm_workspace_floats(void);

/* Single-threaded; ws: gemm_workspace_floats() floats, 64-byte aligned, private to the caller. */
void gemm(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa, const float *B,
          ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws);

/* The same product with A and B rounded to bfloat16 (round to nearest even; subnormal results
 * flushed to signed zero) and the products summed in float: on AVX512_BF16 (VDPBF16PS) twice
 * the multiply-adds per instruction of gemm(). Same workspace as gemm(). CPUs without the
 * instructions run a plain-C path that computes the same sums (slowly: for tests). */
void gemm_bf16(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa, const float *B,
               ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws);

/* The value bfloat16 stores for f, as gemm_bf16 rounds it (the tests' references); the float
 * a bf16 holds (bits16: its 16 bits). */
float bf16_round(float f);
float bf16_widen(uint32_t bits16);

/* C = beta * C, not reading C when beta is 0: every GEMM's result for K == 0, as BLAS defines
 * it (the block loops would write nothing). */
static inline void gemm_scale_c(int M, int N, float beta, float *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
}

/* The 16 bits of bf16_round(f): round to nearest even; NaN stays a (quiet) NaN; values whose
 * bfloat16 would be subnormal become signed zeros, as VDPBF16PS and TDPBF16PS treat subnormal
 * inputs (DAZ), so all paths agree. Written without branches so packing loops vectorise. */
static inline uint32_t bf16_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
    uint32_t nan = ((u >> 16) | 0x40u) & 0xffffu, zero = (u >> 16) & 0x8000u;
    uint32_t r = (u & 0x7f800000u) == 0 ? zero : rounded;
    return (u & 0x7fffffffu) > 0x7f800000u ? nan : r;
}

/* The bf16 GEMMs' packing (gemm_bf16.c, per bf16 path; gemm_amx.c uses it), operands rounded
 * as bf16_round and held as pairs along k (one uint32_t: element 2k in the low half, 2k + 1 in
 * the high; an odd kc's last high half 0):
 *   gemm_bf16_pack_b: op(B) (kc x nc, strides as gemm's) in panels of GEMM_BF16_NR columns,
 *     panel p holding Bp[p * NR * kpad + kp * NR + c] = pair kp of column p * NR + c; zero past
 *     nc and for pairs [(kc + 1) / 2, kpad);
 *   gemm_bf16_pack_rows: op(A) (rows x kc) row by row, dst[r * kpad + kp] = pair kp of row r;
 *     zero past kc and for rows [rows, rows_pad). */
#define GEMM_BF16_NR 32
typedef void gemm_bf16_pack_b_fn(int kc, int nc, const float *B, ptrdiff_t rsb, ptrdiff_t csb, int kpad,
                                 uint32_t *Bp);
typedef void gemm_bf16_pack_rows_fn(int rows, int rows_pad, int kc, const float *A, ptrdiff_t rsa,
                                    ptrdiff_t csa, int kpad, uint32_t *dst);
gemm_bf16_pack_b_fn gemm_bf16_pack_b_generic, gemm_bf16_pack_b_avx2, gemm_bf16_pack_b_avx512bf16;
gemm_bf16_pack_rows_fn gemm_bf16_pack_rows_generic, gemm_bf16_pack_rows_avx2, gemm_bf16_pack_rows_avx512bf16;
/* And the last step of each: C (mr x nr) = alpha * acc + beta * C (C not read when beta is 0),
 * acc's rows lda floats apart. */
typedef void gemm_bf16_store_fn(const float *acc, int lda, int mr, int nr, float alpha, float beta, float *C,
                                int ldc);
gemm_bf16_store_fn gemm_bf16_store_generic, gemm_bf16_store_avx2, gemm_bf16_store_avx512bf16;

/* One product from one of the two: GEMM_FP32 is gemm(), GEMM_BF16 gemm_bf16(). The convolution
 * and linear ops take this as a value, so one code path serves both precisions. */
enum gemm_math { GEMM_FP32, GEMM_BF16 };

/* Same product (gemm or gemm_bf16 by math) with the N columns split across the OpenMP team
 * (call outside a parallel region); ws: omp_get_max_threads() * gemm_workspace_floats()
 * floats. */
void gemm_parallel(enum gemm_math math, int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa,
                   ptrdiff_t csa, const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc,
                   float *ws);

/* The instruction-set paths: name ("avx512", "avx2", "generic") of the one in use, and a switch
 * used by tests and benchmarks; gemm_select returns -1 when the CPU lacks that path. The choice
 * covers every per-ISA kernel (the GEMM, the Winograd and direct convolutions, GELU). */
const char *gemm_isa(void);
int gemm_select(const char *isa);

/* gemm or gemm_bf16, by math. */
gemm_fn *gemm_of(enum gemm_math math);

/* The bf16 paths, best first: "amx" (AMX-BF16 tiles, where the CPU has them and the OS grants
 * the tile state), "avx512bf16", "avx2" (avx512bf16's sums, bit for bit, on AVX2 FMA: as slow
 * as fp32 or slower, so only an explicit --precision bf16 runs it), "generic" (the same sums in
 * plain C); and "amx-emulated" (the tile path's operations in plain C, for tests: never chosen
 * by default) and "amx-im2col" (the amx GEMM with conv.c's im2col for every convolution instead
 * of the tiles' direct one, for comparisons: never chosen by default), "amx-prefetch",
 * "amx-resident" and "amx-noprefetch" (amx with one of the loops it times fixed, cpu.h's
 * conv_tiles_find: the same bits, for comparisons, never chosen by default); and
 * "amx-cost" (amx's code with the tile instructions left out, on AVX512_BF16 CPUs: a timing
 * tool, its results meaningless). The one in use, and a switch for tests and benchmarks (-1
 * when the CPU lacks it). gemm_bf16_hw: 1 when this CPU has AVX512_BF16; gemm_bf16_vector: 1
 * when it has a vector path (AVX512_BF16 or AVX2), not only plain C. gemm_tiles_products: the
 * TDPBF16PS "amx-emulated" carried out and "amx-cost" left out so far, over every thread
 * (amx's own are not counted). */
const char *gemm_bf16_isa(void);
int gemm_bf16_select(const char *isa);
int gemm_bf16_hw(void);
int gemm_bf16_vector(void);
unsigned long long gemm_tiles_products(void);
/* 1 when the bf16 path in use works on AMX tiles ("amx", "amx-emulated"): the convolution then
 * keeps its bf16 products off Winograd (conv.c). GEMM_TILES_NC: the tiles' column block; a
 * product at most that wide packs each block of its A once. */
int gemm_bf16_tiles(void);
#define GEMM_TILES_NC 512

/* The machine's FP32 FMA peak on one ISA path: runs a latency-free FMA loop on every thread of
 * the current OpenMP team size (threads) for about `seconds`; returns GFLOP/s summed over the
 * threads, or -1 when the CPU lacks that path. */
double gemm_fma_peak(const char *isa, int threads, double seconds);

/* The bf16 multiply-add peak of the bf16 path in use (TDPBF16PS on "amx", VDPBF16PS on
 * "avx512bf16"; 2 flops per multiply-add), measured as gemm_fma_peak; -1 on the plain-C
 * paths. */
double gemm_bf16_peak(int threads, double seconds);

/* Pre-packed operands, for callers that lay a product's operands out once and reuse them
 * (winograd.c). Per ISA path, since the panel sizes are: GEMM_MR and GEMM_NR of isa.h.
 *   gemm_pack_a: Ap = op(A) (M x K, strides as gemm's) in MR-row panels, panel p holding
 *     Ap[p*MR*K + k*MR + r] = A(p*MR + r, k), rows past M zero;
 *     gemm_packed_a_floats(M, K) floats suffice for every path.
 *   gemm_prepacked: C[M][N] = Ap Bp (beta 0), where Bp holds B (K x N) in NR-column panels,
 *     Bp[p*NR*K + k*NR + c] = B(k, p*NR + c), ceil(N / NR) whole panels (their columns past N
 *     are read and must be finite; their results are dropped). */
size_t gemm_packed_a_floats(int M, int K);
#define GEMM_MR_LCM 24 /* a multiple of every path's MR (8, 6, 4) */
typedef void gemm_pack_a_fn(int M, int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa, float *Ap);
typedef void gemm_prepacked_fn(int M, int N, int K, const float *Ap, const float *Bp, float *C, int ldc);
gemm_pack_a_fn gemm_pack_a_generic, gemm_pack_a_avx2, gemm_pack_a_avx512;
gemm_prepacked_fn gemm_prepacked_generic, gemm_prepacked_avx2, gemm_prepacked_avx512;

/* The two above on the path in use, and its NR (for the tests; winograd.c calls its own path's
 * directly). */
gemm_pack_a_fn gemm_pack_a;
gemm_prepacked_fn gemm_prepacked;
int gemm_nr(void);

/* Pre-packed A for the bf16 GEMM (winograd.c), on the bf16 path in use (not the tiles': their
 * convolutions run no Winograd, and these CHECK-fail there):
 *   gemm_bf16_pack_a: Ap = op(A) (M x K) rounded and paired as gemm_bf16 packs it, every block
 *     of it at once, gemm_bf16_packed_a_words(M, K) words;
 *   gemm_bf16_prepacked: C[M][N] = Ap op(B) (beta 0), B as gemm_bf16 takes it, ws
 *     gemm_workspace_floats(): bit for bit gemm_bf16(M, N, K, 1, A, ..., B, ..., 0, C, ldc). */
size_t gemm_bf16_packed_a_words(int M, int K);
typedef void gemm_bf16_pack_a_fn(int M, int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa, uint32_t *Ap);
typedef void gemm_bf16_prepacked_fn(int M, int N, int K, const uint32_t *Ap, const float *B, ptrdiff_t rsb,
                                    ptrdiff_t csb, float *C, int ldc, float *ws);
gemm_bf16_pack_a_fn gemm_bf16_pack_a, gemm_bf16_pack_a_generic, gemm_bf16_pack_a_avx2,
    gemm_bf16_pack_a_avx512bf16;
gemm_bf16_prepacked_fn gemm_bf16_prepacked, gemm_bf16_prepacked_generic, gemm_bf16_prepacked_avx2,
    gemm_bf16_prepacked_avx512bf16;
/* 1 when the float path in use is avx512 (chosen only where the CPU has AVX-512): for kernels
 * compiled once with an AVX-512 form beside a generic one (maxpool.c); a call, not a string
 * compare, as they ask per plane. */
int gemm_path_avx512(void);

/* One ISA path, as compiled from gemm.c and gemm_bf16.c (see isa.h); used only by the
 * dispatcher. */
gemm_fn gemm_generic, gemm_avx2, gemm_avx512, gemm_bf16_generic, gemm_bf16_avx2, gemm_bf16_avx512bf16;
gemm_fn gemm_tiles_amx, gemm_tiles_generic; /* gemm_amx.c: AMX tiles, and their plain-C twin */
gemm_fn gemm_tiles_amxcost;                 /* and amx's code without the tile instructions */
double gemm_bf16_probe_avx512bf16(long iters), gemm_tiles_probe_amx(long iters);
double gemm_fma_probe_generic(long iters), gemm_fma_probe_avx2(long iters), gemm_fma_probe_avx512(long iters);

#endif
