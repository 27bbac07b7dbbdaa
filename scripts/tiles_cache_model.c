/* One pass of the AMX tiles' direct convolution (kernels/cpu/conv_tiles.c) in its plain-C build,
 * for scripts/tiles-cache-model.sh to run under cachegrind: the tiles' memory traffic without
 * AMX hardware. Usage: tiles_cache_model C K H k pad N fwd|dx|dw [resident] (an H x H map,
 * stride 1; resident: cpu.h's CONV_TILES_RESIDENT, else the amx path's CONV_TILES_PREFETCH,
 * where conv_tiles.c takes how: compiled with TILES_HOW_ARG; with TILES_RESIDENT_ARG, a
 * conv_tiles.c of d1511cc's, which took resident). Prints the pass, its TDPBF16PS and a hash of the result's
 * bits (the same bits before and after a change that keeps the products and their order). */
#include "../kernels/cpu/cpu.h"
#include "../kernels/cpu/gemm.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float *random_floats(size_t n, unsigned *state) {
    float *p = aligned_alloc(64, (n * sizeof *p + 63) / 64 * 64);
    for (size_t i = 0; i < n; i++) {
        *state = *state * 1664525u + 1013904223u;
        p[i] = (float)(*state >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

static unsigned hash_bits(const float *a, size_t n) {
    unsigned h = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned u;
        memcpy(&u, &a[i], sizeof u);
        h = h * 31u + u;
    }
    return h;
}

int main(int argc, char **argv) {
    if (argc != 8 && !(argc == 9 && !strcmp(argv[8], "resident"))) {
        fprintf(stderr, "usage: %s C K H k pad N fwd|dx|dw [resident]\n", argv[0]);
        return 2;
    }
#if defined(TILES_HOW_ARG)
#define RESIDENT how,
    unsigned how = argc == 9 ? CONV_TILES_RESIDENT : CONV_TILES_PREFETCH;
#elif defined(TILES_RESIDENT_ARG)
#define RESIDENT resident,
    int resident = argc == 9;
#else
#define RESIDENT
    if (argc == 9) {
        fprintf(stderr, "%s: this conv_tiles.c has no resident loop order\n", argv[0]);
        return 2;
    }
#endif
    struct conv_shape s = {.C = atoi(argv[1]),
                           .K = atoi(argv[2]),
                           .H = atoi(argv[3]),
                           .W = atoi(argv[3]),
                           .k = atoi(argv[4]),
                           .pad = atoi(argv[5]),
                           .N = atoi(argv[6])};
    const char *pass = argv[7];
    if (!conv_tiles_fit(&s) || s.N < 1 || (strcmp(pass, "fwd") && strcmp(pass, "dx") && strcmp(pass, "dw"))) {
        fprintf(stderr, "%s: not a shape the tiles take, or not a pass (fwd, dx, dw)\n", argv[0]);
        return 2;
    }
    int Ho = kernels_conv_out(s.H, s.k, s.pad);
    size_t nx = (size_t)s.N * s.C * s.H * s.W, ny = (size_t)s.N * s.K * Ho * Ho,
           nw = (size_t)s.K * s.C * s.k * s.k;
    unsigned state = 1;
    float *x = random_floats(nx, &state), *w = random_floats(nw, &state), *dy = random_floats(ny, &state);
    float *ws = aligned_alloc(
        64, (conv_tiles_workspace_floats(&s, omp_get_max_threads()) * sizeof(float) + 63) / 64 * 64);
    size_t n = !strcmp(pass, "fwd") ? ny : !strcmp(pass, "dx") ? nx : nw;
    float *out = calloc(n, sizeof *out);
    if (!strcmp(pass, "fwd"))
        conv_tiles_sums_generic(&s, 0, RESIDENT x, NULL, w, NULL, 0, NULL, NULL, out, ws);
    else if (!strcmp(pass, "dx"))
        conv_tiles_sums_generic(&s, 1, RESIDENT dy, NULL, w, NULL, 0, NULL, NULL, out, ws);
    else conv_tiles_filter_grad_generic(&s, RESIDENT x, dy, NULL, out, ws);
    printf("%s %d->%d %dx%d k%d pad%d N%d: %llu TDPBF16PS, result bits %08x\n", pass, s.C, s.K, s.H, s.W, s.k,
           s.pad, s.N, gemm_tiles_products(), hash_bits(out, n));
    return 0;
}
