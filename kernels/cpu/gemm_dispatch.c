/* Picks the GEMM path for this CPU once, at start-up (cpuid via __builtin_cpu_supports). */
#include "gemm.h"

#include <omp.h>
#include <string.h>

struct path {
    const char *name;
    gemm_fn *fn;
    int (*supported)(void);
};

static int has_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq");
}
static int has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}
static int always(void) { return 1; }

/* Best first. */
static const struct path paths[] = {
    {"avx512", gemm_avx512, has_avx512},
    {"avx2", gemm_avx2, has_avx2},
    {"generic", gemm_generic, always},
};

static const struct path *current;

__attribute__((constructor)) static void gemm_choose(void) {
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (paths[i].supported()) {
            current = &paths[i];
            return;
        }
}

const char *gemm_isa(void) { return current->name; }

int gemm_select(const char *isa) {
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (strcmp(paths[i].name, isa) == 0) {
            if (!paths[i].supported()) return -1;
            current = &paths[i];
            return 0;
        }
    return -1;
}

void gemm(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
          const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws) {
    current->fn(M, N, K, alpha, A, rsa, csa, B, rsb, csb, beta, C, ldc, ws);
}

void gemm_parallel(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                   const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc,
                   float *ws) {
    /* Column ranges in multiples of 64 (a multiple of every path's NR) so threads never share a
     * cache line of C; static split, so results do not depend on timing. */
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int chunks = (N + 63) / 64;
        int lo = (int)((long)chunks * t / nt) * 64, hi = (int)((long)chunks * (t + 1) / nt) * 64;
        if (hi > N) hi = N;
        if (lo < hi)
            current->fn(M, hi - lo, K, alpha, A, rsa, csa, B + lo * csb, rsb, csb, beta, C + lo,
                        ldc, ws + (size_t)t * gemm_workspace_floats());
    }
}
