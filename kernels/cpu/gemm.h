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

/* Floats of scratch one gemm() call needs (independent of M, N, K). */
size_t gemm_workspace_floats(void);

/* Single-threaded; ws: gemm_workspace_floats() floats, 64-byte aligned, private to the caller. */
void gemm(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
          const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws);

/* Same product with the N columns split across the OpenMP team (call outside a parallel region);
 * ws: omp_get_max_threads() * gemm_workspace_floats() floats. */
void gemm_parallel(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                   const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc,
                   float *ws);

/* The instruction-set paths: name ("avx512", "avx2", "generic") of the one in use, and a switch
 * used by tests and benchmarks; gemm_select returns -1 when the CPU lacks that path. The choice
 * covers every per-ISA kernel (the GEMM, the Winograd convolution and GELU). */
const char *gemm_isa(void);
int gemm_select(const char *isa);

/* The machine's FP32 FMA peak on one ISA path: runs a latency-free FMA loop on every thread of
 * the current OpenMP team size (threads) for about `seconds`; returns GFLOP/s summed over the
 * threads, or -1 when the CPU lacks that path. */
double gemm_fma_peak(const char *isa, int threads, double seconds);

/* One ISA path, as compiled from gemm.c (see isa.h); used only by the dispatcher. */
typedef void gemm_fn(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa,
                     ptrdiff_t csa, const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta,
                     float *C, int ldc, float *ws);
gemm_fn gemm_generic, gemm_avx2, gemm_avx512;
double gemm_fma_probe_generic(long iters), gemm_fma_probe_avx2(long iters),
    gemm_fma_probe_avx512(long iters);

#endif
