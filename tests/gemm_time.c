/* gemm_time [--isa avx512|avx2|generic] M N K...: times the float GEMM on the path in use (or
 * the one named; one thread) on the Winograd
 * filter gradient's product per transform slot, dU[M][N] += V[M][K] D[N][K]^T with both operands
 * k-contiguous (rows K floats apart), as winograd.c calls gemm(): 36 slots (F(4x4)), the best of
 * 30 repetitions. Beside it the same product on operands packed beforehand (gemm_pack_a and
 * NR-column panels of D^T) through gemm_prepacked, the products alone: the difference is what
 * gemm()'s packing of two transposed operands costs. One line per shape:
 *   gemm: isa=I M=.. N=.. K=.. gemm_us=T gemm_gflops=G prepacked_us=T prepacked_gflops=G
 * Exit status 2 on bad usage (one line). */
#include "../common/clock.h"
#include "../common/err.h"
#include "../kernels/cpu/gemm.h"
#include "../kernels/kernels.h"
#include "check.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { SLOTS = 36, REPS = 30 };

static void time_shape(int M, int N, int K) {
    int nr = gemm_nr(), panels = (N + nr - 1) / nr;
    size_t pa = gemm_packed_a_floats(M, K), pb = (size_t)panels * nr * K;
    float *V = check_floats((size_t)SLOTS * M * K), *D = check_floats((size_t)SLOTS * N * K);
    float *U = check_floats((size_t)SLOTS * M * N), *ws = check_floats(gemm_workspace_floats());
    float *Ap = check_floats(SLOTS * pa), *Bp = check_floats(SLOTS * pb);
    memset(Bp, 0, SLOTS * pb * sizeof(float));
    for (int x = 0; x < SLOTS; x++) { /* the operands as gemm_prepacked takes them */
        gemm_pack_a(M, K, V + (size_t)x * M * K, K, 1, Ap + x * pa);
        for (int j = 0; j < N; j++)
            for (int k = 0; k < K; k++)
                Bp[x * pb + (size_t)(j / nr) * nr * K + (size_t)k * nr + j % nr] =
                    D[((size_t)x * N + j) * K + k];
    }
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < REPS; r++) {
        double t0 = clock_seconds();
        for (int x = 0; x < SLOTS; x++)
            gemm(M, N, K, 1.0f, V + (size_t)x * M * K, K, 1, D + (size_t)x * N * K, 1, K, 1.0f,
                 U + (size_t)x * M * N, N, ws);
        double t1 = clock_seconds();
        for (int x = 0; x < SLOTS; x++)
            gemm_prepacked(M, N, K, Ap + x * pa, Bp + x * pb, U + (size_t)x * M * N, N);
        double t2 = clock_seconds();
        best[0] = t1 - t0 < best[0] ? t1 - t0 : best[0];
        best[1] = t2 - t1 < best[1] ? t2 - t1 : best[1];
    }
    double flops = 2.0 * SLOTS * M * N * K;
    printf(
        "gemm: isa=%s M=%d N=%d K=%d gemm_us=%.0f gemm_gflops=%.1f prepacked_us=%.0f prepacked_gflops=%.1f\n",
        kernels_cpu_isa(), M, N, K, best[0] * 1e6, flops / best[0] * 1e-9, best[1] * 1e6,
        flops / best[1] * 1e-9);
    free(V), free(D), free(U), free(ws), free(Ap), free(Bp);
}

int main(int argc, char **argv) {
    err_set_progname("gemm_time");
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "--isa") == 0) {
        if (kernels_cpu_select(argv[2]) != 0) {
            fprintf(stderr, "gemm_time: --isa %s: not a path this CPU has\n", argv[2]);
            return 2;
        }
        first = 3;
    }
    if (argc - first < 3 || (argc - first) % 3 != 0) {
        fprintf(stderr, "usage: gemm_time [--isa avx512|avx2|generic] M N K [M N K ...]\n");
        return 2;
    }
    for (int i = first; i < argc; i += 3) {
        int M = atoi(argv[i]), N = atoi(argv[i + 1]), K = atoi(argv[i + 2]);
        if (M < 1 || N < 1 || K < 1 || M > 4096 || N > 4096 || K > 4096) {
            fprintf(stderr, "gemm_time: %s %s %s: sizes from 1 to 4096\n", argv[i], argv[i + 1], argv[i + 2]);
            return 2;
        }
        time_shape(M, N, K);
    }
    return 0;
}
