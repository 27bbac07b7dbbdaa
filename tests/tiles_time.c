/* tiles_time [--path amx|amx-cost|amx-emulated] [--reps R] N C K H [N C K H ...]: times the AMX
 * tiles' three passes of a 3x3 "same" convolution from C to K channels on N images of H x H
 * (conv_tiles.c: the forward, the input gradient and the filter gradient, float activations)
 * with each of their loops fixed (plain: blocked for L1; prefetch: the same with software
 * prefetches; resident: the sums held in the tiles), on the OpenMP team (OMP_NUM_THREADS), each
 * R times (default 5) after one untimed round, passes and loops interleaved so that a drifting
 * machine moves them alike. amx-cost runs amx's code without its tile instructions (tiles.h):
 * its times against amx's are what the tiles' loads and arithmetic cost. One line per shape and
 * loop, milliseconds, the minimum and the median:
 *   tiles: path=P threads=T N=.. C=.. K=.. H=.. loops=L fwd_ms=MIN/MED dx_ms=MIN/MED dw_ms=MIN/MED
 * Exit status 2 on bad usage, 1 where the CPU lacks the path (one line). */
#include "../common/clock.h"
#include "../common/err.h"
#include "../kernels/cpu/cpu.h"
#include "../kernels/kernels.h"
#include "check.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_REPS = 1000, LOOPS = 3, PASSES = 3 };

static const struct {
    const char *name;
    conv_tiles_sums_fn *sums;
    conv_tiles_grad_fn *grad;
} paths[] = {
    {"amx", conv_tiles_sums_amx, conv_tiles_filter_grad_amx},
    {"amx-cost", conv_tiles_sums_amxcost, conv_tiles_filter_grad_amxcost},
    {"amx-emulated", conv_tiles_sums_generic, conv_tiles_filter_grad_generic},
};
static const unsigned hows[LOOPS] = {0, CONV_TILES_PREFETCH, CONV_TILES_RESIDENT};
static const char *const how_names[LOOPS] = {"plain", "prefetch", "resident"};

static void time_shape(int p, int reps, struct conv_shape s) {
    size_t nx = (size_t)s.N * s.C * s.H * s.W, ny = (size_t)s.N * s.K * s.H * s.W, nw = (size_t)s.K * s.C * 9;
    float *x = check_floats(nx), *dy = check_floats(ny), *w = check_floats(nw), *b = check_floats(s.K);
    float *y = check_floats(ny), *dx = check_floats(nx), *dw = check_floats(nw);
    float *ws = check_floats(conv_tiles_workspace_floats(&s, omp_get_max_threads()));
    check_fill(x, nx, -2, 2, 1), check_fill(dy, ny, -1, 1, 2), check_fill(w, nw, -0.5f, 0.5f, 3);
    check_fill(b, s.K, -0.5f, 0.5f, 4);
    static double t[LOOPS][PASSES][MAX_REPS];
    for (int r = -1; r < reps; r++)
        for (int h = 0; h < LOOPS; h++)
            for (int pass = 0; pass < PASSES; pass++) {
                double t0 = clock_seconds();
                if (pass == 0) paths[p].sums(&s, 0, hows[h], x, NULL, w, b, 0, NULL, NULL, y, ws);
                else if (pass == 1) paths[p].sums(&s, 1, hows[h], dy, NULL, w, NULL, 0, NULL, NULL, dx, ws);
                else paths[p].grad(&s, hows[h], x, dy, NULL, dw, ws);
                if (r >= 0) t[h][pass][r] = clock_seconds() - t0;
            }
    for (int h = 0; h < LOOPS; h++) {
        char f[32], d[32], g[32];
        printf("tiles: path=%s threads=%d N=%d C=%d K=%d H=%d loops=%s fwd_ms=%s dx_ms=%s dw_ms=%s\n",
               paths[p].name, omp_get_max_threads(), s.N, s.C, s.K, s.H, how_names[h],
               check_min_median(t[h][0], reps, f, sizeof f), check_min_median(t[h][1], reps, d, sizeof d),
               check_min_median(t[h][2], reps, g, sizeof g));
    }
    free(x), free(dy), free(w), free(b), free(y), free(dx), free(dw), free(ws);
}

static void usage(void) {
    err_die(2, "usage: tiles_time [--path amx|amx-cost|amx-emulated] [--reps R] N C K H [N C K H ...] "
               "(C, K >= 16)");
}

/* A 3x3, pad-1 convolution from the arguments N C K H (W = H). */
static struct conv_shape shape_of(char **a) {
    return (struct conv_shape){.N = atoi(a[0]),
                               .C = atoi(a[1]),
                               .K = atoi(a[2]),
                               .H = atoi(a[3]),
                               .W = atoi(a[3]),
                               .k = 3,
                               .pad = 1};
}

int main(int argc, char **argv) {
    err_set_progname("tiles_time");
    int i = 1, p = 0, reps = 5;
    for (; i + 1 < argc && strncmp(argv[i], "--", 2) == 0; i += 2) {
        if (strcmp(argv[i], "--reps") == 0) reps = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--path") == 0) {
            for (p = 0; p < (int)(sizeof paths / sizeof paths[0]) && strcmp(paths[p].name, argv[i + 1]);
                 p++) {}
            if (p == (int)(sizeof paths / sizeof paths[0])) usage();
        } else usage();
    }
    if (reps < 1 || reps > MAX_REPS || i == argc || (argc - i) % 4 != 0) usage();
    /* Every shape checked before the path: bad usage is exit 2 on any CPU. */
    for (int j = i; j < argc; j += 4) {
        struct conv_shape s = shape_of(argv + j);
        if (s.N < 1 || s.H < 1 || !conv_tiles_fit(&s)) usage();
    }
    if (gemm_bf16_select(paths[p].name) != 0) err_die(1, "this CPU lacks the bf16 path %s", paths[p].name);
    for (; i < argc; i += 4) time_shape(p, reps, shape_of(argv + i));
    return 0;
}
