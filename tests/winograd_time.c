/* winograd_time [--isa avx512|avx2|generic] [--reps R] [--pool] N C K H m [N C K H m ...]: times
 * the three Winograd passes of a 3x3 "same" convolution from C to K channels on N images of
 * H x H, output tile m (2 to 5; conv.c's plan picks 4 for 32, 16, 8, 31 and 7, 5 for 15, 3 for
 * 3), on the float path in use (or the one named) with the OpenMP team (OMP_NUM_THREADS): the
 * forward (winograd_conv3x3, flip 0), the input gradient (flip 1, K -> C) and the filter
 * gradient, each R times (default 10) after one untimed round, the passes interleaved so that
 * a drifting machine moves them alike. One line per shape, milliseconds, the minimum and the
 * median:
 *   winograd: isa=I threads=T N=.. C=.. K=.. H=.. m=.. fwd_ms=MIN/MED dx_ms=MIN/MED dw_ms=MIN/MED
 * With --pool, a 2x2 max pool after the convolution instead, apart against fused, interleaved:
 * the forward (the full map, then cpu_maxpool_forward; against struct pool_out, the pool read
 * from the tiles) and the two backward passes (cpu_maxpool_backward into the full map, then
 * both passes from it; against both reading the pooled gradient, struct pool_in):
 *   winograd pool: isa=I threads=T N=.. C=.. K=.. H=.. m=.. fwd_apart_ms=MIN/MED
 *     fwd_fused_ms=MIN/MED apart_ms=MIN/MED fused_ms=MIN/MED
 * Exit status 2 on bad usage (one line). */
#include "../common/clock.h"
#include "../common/err.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/kernels.h"
#include "check.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_REPS = 1000 };

static void time_shape(int N, int C, int K, int H, int m, int reps) {
    int nt = omp_get_max_threads();
    size_t ws_floats = winograd_conv_workspace_floats(C, K, H, H, m, nt), f;
    if ((f = winograd_conv_workspace_floats(K, C, H, H, m, nt)) > ws_floats) ws_floats = f;
    if ((f = winograd_filter_grad_workspace_floats(C, K, H, H, m, nt)) > ws_floats) ws_floats = f;
    size_t HW = (size_t)H * H;
    float *x = check_floats((size_t)N * C * HW), *dx = check_floats((size_t)N * C * HW);
    float *y = check_floats((size_t)N * K * HW), *dy = check_floats((size_t)N * K * HW);
    float *w = check_floats((size_t)K * C * 9), *dw = check_floats((size_t)K * C * 9),
          *ws = check_floats(ws_floats);
    double *t = malloc(3 * (size_t)reps * sizeof *t);
    CHECK(t);
    for (int r = -1; r < reps; r++) {
        double t0 = clock_seconds();
        winograd_conv3x3(x, NULL, w, 0, NULL, 0, NULL, NULL, y, N, C, K, H, H, m, GEMM_FP32, ws);
        double t1 = clock_seconds();
        winograd_conv3x3(dy, NULL, w, 1, NULL, 0, NULL, NULL, dx, N, K, C, H, H, m, GEMM_FP32, ws);
        double t2 = clock_seconds();
        winograd_filter_grad(x, dy, NULL, dw, N, C, K, H, H, m, GEMM_FP32, ws);
        double t3 = clock_seconds();
        if (r >= 0) t[r] = t1 - t0, t[reps + r] = t2 - t1, t[2 * reps + r] = t3 - t2;
    }
    char b[3][48];
    printf("winograd: isa=%s threads=%d N=%d C=%d K=%d H=%d m=%d fwd_ms=%s dx_ms=%s dw_ms=%s\n",
           kernels_cpu_isa(), nt, N, C, K, H, m, check_min_median(t, reps, b[0], sizeof b[0]),
           check_min_median(t + reps, reps, b[1], sizeof b[1]),
           check_min_median(t + 2 * reps, reps, b[2], sizeof b[2]));
    free(x), free(dx), free(y), free(dy), free(w), free(dw), free(ws), free(t);
}

static void time_pool(int N, int C, int K, int H, int m, int reps) {
    int nt = omp_get_max_threads();
    size_t ws_floats = winograd_conv_workspace_floats(K, C, H, H, m, nt), f;
    if ((f = winograd_conv_workspace_floats(C, K, H, H, m, nt)) > ws_floats) ws_floats = f;
    if ((f = winograd_filter_grad_workspace_floats(C, K, H, H, m, nt)) > ws_floats) ws_floats = f;
    size_t HW = (size_t)H * H, np = (size_t)N * K * (H / 2) * (H / 2);
    float *x = check_floats((size_t)N * C * HW), *dx = check_floats((size_t)N * C * HW),
          *dy = check_floats((size_t)N * K * HW);
    float *dyp = check_floats(np), *w = check_floats((size_t)K * C * 9),
          *dw = check_floats((size_t)K * C * 9);
    float *ws = check_floats(ws_floats), *yp = check_floats(np);
    unsigned char *win = malloc(np), *ywin = malloc(np);
    double *t = malloc(4 * (size_t)reps * sizeof *t);
    CHECK(win && ywin && t);
    for (size_t i = 0; i < np; i++) win[i] = (unsigned char)((i * 2654435761u >> 7) % 4) | MAXPOOL_PASSES;
    struct pool_in in = {dyp, win, 0};
    struct pool_out out = {2, yp, ywin};
    for (int r = -1; r < reps; r++) {
        double f0 = clock_seconds();
        winograd_conv3x3(x, NULL, w, 0, NULL, 0, NULL, NULL, dy, N, C, K, H, H, m, GEMM_FP32, ws);
        cpu_maxpool_forward(dy, yp, ywin, N, K, H, H, 2);
        double f1 = clock_seconds();
        winograd_conv3x3(x, NULL, w, 0, NULL, 0, NULL, &out, NULL, N, C, K, H, H, m, GEMM_FP32, ws);
        double t0 = clock_seconds();
        cpu_maxpool_backward(win, dyp, dy, N, K, H, H, 2, 0);
        winograd_conv3x3(dy, NULL, w, 1, NULL, 0, NULL, NULL, dx, N, K, C, H, H, m, GEMM_FP32, ws);
        winograd_filter_grad(x, dy, NULL, dw, N, C, K, H, H, m, GEMM_FP32, ws);
        double t1 = clock_seconds();
        winograd_conv3x3(NULL, &in, w, 1, NULL, 0, NULL, NULL, dx, N, K, C, H, H, m, GEMM_FP32, ws);
        winograd_filter_grad(x, NULL, &in, dw, N, C, K, H, H, m, GEMM_FP32, ws);
        double t2 = clock_seconds();
        if (r >= 0)
            t[r] = f1 - f0, t[reps + r] = t0 - f1, t[2 * reps + r] = t1 - t0, t[3 * reps + r] = t2 - t1;
    }
    char b[4][48];
    printf("winograd pool: isa=%s threads=%d N=%d C=%d K=%d H=%d m=%d fwd_apart_ms=%s fwd_fused_ms=%s "
           "apart_ms=%s fused_ms=%s\n",
           kernels_cpu_isa(), nt, N, C, K, H, m, check_min_median(t, reps, b[0], sizeof b[0]),
           check_min_median(t + reps, reps, b[1], sizeof b[1]),
           check_min_median(t + 2 * reps, reps, b[2], sizeof b[2]),
           check_min_median(t + 3 * reps, reps, b[3], sizeof b[3]));
    free(x), free(dx), free(dy), free(dyp), free(w), free(dw), free(ws), free(yp), free(win), free(ywin);
    free(t);
}

static int usage(void) {
    fprintf(
        stderr,
        "usage: winograd_time [--isa avx512|avx2|generic] [--reps 1-%d] [--pool] N C K H m [N C K H m ...]\n",
        MAX_REPS);
    return 2;
}

int main(int argc, char **argv) {
    err_set_progname("winograd_time");
    int first = 1, reps = 10, pool = 0;
    while (argc - first >= 2 && strncmp(argv[first], "--", 2) == 0) {
        if (strcmp(argv[first], "--pool") == 0) {
            pool = 1, first++;
            continue;
        }
        if (strcmp(argv[first], "--isa") == 0 && kernels_cpu_select(argv[first + 1]) != 0) {
            fprintf(stderr, "winograd_time: --isa %s: not a path this CPU has\n", argv[first + 1]);
            return 2;
        } else if (strcmp(argv[first], "--reps") == 0) {
            reps = atoi(argv[first + 1]);
            if (reps < 1 || reps > MAX_REPS) return usage();
        } else if (strcmp(argv[first], "--isa") != 0) {
            return usage();
        }
        first += 2;
    }
    if (argc - first < 5 || (argc - first) % 5 != 0) return usage();
    for (int i = first; i < argc; i += 5) {
        int N = atoi(argv[i]), C = atoi(argv[i + 1]), K = atoi(argv[i + 2]), H = atoi(argv[i + 3]);
        int m = atoi(argv[i + 4]);
        if (N < 1 || N > 4096 || C < 1 || C > 4096 || K < 1 || K > 4096 || H < 2 || H > 256 || m < 2 ||
            m > 5) {
            fprintf(stderr, "winograd_time: %s %s %s %s %s: N, C, K 1 to 4096, H 2 to 256, m 2 to 5\n",
                    argv[i], argv[i + 1], argv[i + 2], argv[i + 3], argv[i + 4]);
            return 2;
        }
        if (pool) time_pool(N, C, K, H, m, reps);
        else time_shape(N, C, K, H, m, reps);
    }
    return 0;
}
