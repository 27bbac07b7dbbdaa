/* Picks the vector path (GEMM and Winograd convolution) for this CPU once, at start-up (cpuid
 * via __builtin_cpu_supports). */
#include "../../common/clock.h"
#include "cpu.h"
#include "gemm.h"

#include <asm/prctl.h>
#include <cpuid.h>
#include <omp.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

struct path {
    const char *name;
    gemm_fn *fn;
    double (*probe)(long iters);
    winograd_fn *winograd;
    winograd_grad_fn *winograd_grad;
    small_conv_fn *small_conv;
    small_conv_grad_fn *small_conv_grad;
    small_conv_ws_fn *small_conv_ws;
    gemm_pack_a_fn *pack_a;
    gemm_prepacked_fn *prepacked;
    int nr;
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
static int has_avx512bf16(void) { return has_avx512() && __builtin_cpu_supports("avx512bf16"); }

/* AMX-BF16: the instructions, and the OS's grant of the tile data state to this process (Linux
 * 5.16+ keeps it off until asked: arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); the
 * grant covers every thread. Asked once, by the constructor below (before any thread). */
static int has_amx(void) {
    static int granted = -1;
    if (granted < 0) {
        enum { XFEATURE_XTILEDATA = 18 };
        /* CPUID leaf 7: EDX bit 22 AMX-BF16, bit 24 AMX-TILE (read directly: clang 14's
         * __builtin_cpu_supports does not know them). */
        unsigned a, b, c, d;
        int tiles = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1) && (d >> 24 & 1);
        granted = has_avx512bf16() && tiles &&
                  syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
    }
    return granted;
}

/* Best first. */
static const struct path paths[] = {
    {"avx512", gemm_avx512, gemm_fma_probe_avx512, winograd_conv3x3_avx512, winograd_filter_grad_avx512,
     small_conv_forward_avx512, small_conv_filter_grad_avx512, small_conv_workspace_floats_avx512,
     gemm_pack_a_avx512, gemm_prepacked_avx512, 32, has_avx512},
    {"avx2", gemm_avx2, gemm_fma_probe_avx2, winograd_conv3x3_avx2, winograd_filter_grad_avx2,
     small_conv_forward_avx2, small_conv_filter_grad_avx2, small_conv_workspace_floats_avx2, gemm_pack_a_avx2,
     gemm_prepacked_avx2, 16, has_avx2},
    {"generic", gemm_generic, gemm_fma_probe_generic, winograd_conv3x3_generic, winograd_filter_grad_generic,
     small_conv_forward_generic, small_conv_filter_grad_generic, small_conv_workspace_floats_generic,
     gemm_pack_a_generic, gemm_prepacked_generic, 8, always},
};

static const struct path *current;

/* The bf16 GEMM's paths, best first, chosen independently of the float ones: its throughput
 * probe (NULL: none) and whether it works on AMX tiles (conv.c plans by that). */
struct bf16_path {
    const char *name;
    gemm_fn *fn;
    int (*supported)(void);
    double (*probe)(long iters);
    int tiles;
    conv_tiles_sums_fn *tiles_sums; /* the direct convolutions of a path on tiles */
    conv_tiles_grad_fn *tiles_grad;
    unsigned tiles_how;          /* the tiles' loops: cpu.h's conv_tiles_* how */
    gemm_bf16_pack_a_fn *pack_a; /* gemm.h's pre-packed A (NULL on tiles) */
    gemm_bf16_prepacked_fn *prepacked;
};
static const struct bf16_path bf16_paths[] = {
    /* the tiles' loops chosen per shape and pass by timing (cpu.h: conv_tiles_find) */
    {"amx", gemm_tiles_amx, has_amx, gemm_tiles_probe_amx, 1, conv_tiles_sums_amx, conv_tiles_filter_grad_amx,
     CONV_TILES_FIND, NULL, NULL},
    {"avx512bf16", gemm_bf16_avx512bf16, has_avx512bf16, gemm_bf16_probe_avx512bf16, 0, NULL, NULL, 0,
     gemm_bf16_pack_a_avx512bf16, gemm_bf16_prepacked_avx512bf16},
    /* VDPBF16PS's sums on float FMA: no faster */
    {"avx2", gemm_bf16_avx2, has_avx2, NULL, 0, NULL, NULL, 0, gemm_bf16_pack_a_avx2,
     gemm_bf16_prepacked_avx2},
    {"generic", gemm_bf16_generic, always, NULL, 0, NULL, NULL, 0, gemm_bf16_pack_a_generic,
     gemm_bf16_prepacked_generic},
    /* tests only: after "generic", never the default */
    {"amx-emulated", gemm_tiles_generic, always, NULL, 1, conv_tiles_sums_generic,
     conv_tiles_filter_grad_generic, CONV_TILES_FIND, NULL, NULL},
    /* the tiles with im2col for every convolution (their method before the direct one): for
     * comparisons, never the default */
    {"amx-im2col", gemm_tiles_amx, has_amx, gemm_tiles_probe_amx, 1, NULL, NULL, 0, NULL, NULL},
    /* amx with each of find's candidates fixed (cpu.h): blocked for L1 with software prefetches;
     * each 32 x 32 block of sums held in the C tiles as long as they can (CONV_TILES_RESIDENT: as
     * before they were blocked for L1, in the new order); blocked, no prefetches. For comparisons,
     * never the default */
    {"amx-prefetch", gemm_tiles_amx, has_amx, gemm_tiles_probe_amx, 1, conv_tiles_sums_amx,
     conv_tiles_filter_grad_amx, CONV_TILES_PREFETCH, NULL, NULL},
    {"amx-resident", gemm_tiles_amx, has_amx, gemm_tiles_probe_amx, 1, conv_tiles_sums_amx,
     conv_tiles_filter_grad_amx, CONV_TILES_RESIDENT, NULL, NULL},
    {"amx-noprefetch", gemm_tiles_amx, has_amx, gemm_tiles_probe_amx, 1, conv_tiles_sums_amx,
     conv_tiles_filter_grad_amx, 0, NULL, NULL},
    /* amx's code with the tile instructions left out (tiles.h), and the prefetches that feed them:
     * what the rest of amx costs, timed on CPUs without AMX; never the default, its results
     * meaningless */
    {"amx-cost", gemm_tiles_amxcost, has_avx512bf16, NULL, 1, conv_tiles_sums_amxcost,
     conv_tiles_filter_grad_amxcost, 0, NULL, NULL},
};
static const struct bf16_path *current_bf16;

_Atomic unsigned long long gemm_tiles_products_sum; /* tiles.h */
unsigned long long gemm_tiles_products(void) { return gemm_tiles_products_sum; }

__attribute__((constructor)) static void gemm_choose(void) {
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (paths[i].supported()) {
            current = &paths[i];
            break;
        }
    for (size_t i = 0; i < sizeof bf16_paths / sizeof bf16_paths[0]; i++)
        if (bf16_paths[i].supported()) {
            current_bf16 = &bf16_paths[i];
            break;
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

const char *gemm_bf16_isa(void) { return current_bf16->name; }
int gemm_bf16_tiles(void) { return current_bf16->tiles; }
int conv_tiles_direct(void) { return current_bf16->tiles_sums != NULL; }
int gemm_bf16_hw(void) { return has_avx512bf16(); }
int gemm_bf16_vector(void) { return has_avx512bf16() || has_avx2(); }

int gemm_bf16_select(const char *isa) {
    for (size_t i = 0; i < sizeof bf16_paths / sizeof bf16_paths[0]; i++)
        if (strcmp(bf16_paths[i].name, isa) == 0) {
            if (!bf16_paths[i].supported()) return -1;
            current_bf16 = &bf16_paths[i];
            conv_tiles_forget(); /* choices timed on another path's code */
            return 0;
        }
    return -1;
}

void gemm_bf16(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa, const float *B,
               ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws) {
    current_bf16->fn(M, N, K, alpha, A, rsa, csa, B, rsb, csb, beta, C, ldc, ws);
}

void gemm_bf16_pack_a(int M, int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa, uint32_t *Ap) {
    CHECK(current_bf16->pack_a);
    current_bf16->pack_a(M, K, A, rsa, csa, Ap);
}

void gemm_bf16_prepacked(int M, int N, int K, const uint32_t *Ap, const float *B, ptrdiff_t rsb,
                         ptrdiff_t csb, float *C, int ldc, float *ws) {
    CHECK(current_bf16->prepacked);
    current_bf16->prepacked(M, N, K, Ap, B, rsb, csb, C, ldc, ws);
}

/* A call of cpu_conv_tiles_sums / _filter_grad, for conv_tiles_find's trials. */
struct tiles_call {
    const struct bf16_path *path;
    int flip;
    const float *in, *w, *b, *mask, *dy; /* the filter gradient's: in (x), dy, in_pool (dy's) */
    const struct pool_in *in_pool;
    int relu;
    const struct pool_out *pool;
    float *out, *ws;
};

static void run_sums(const struct conv_shape *s, unsigned how, void *ctx) {
    const struct tiles_call *c = ctx;
    c->path->tiles_sums(s, c->flip, how, c->in, c->in_pool, c->w, c->b, c->relu, c->mask, c->pool, c->out,
                        c->ws);
}

static void run_grad(const struct conv_shape *s, unsigned how, void *ctx) {
    const struct tiles_call *c = ctx;
    c->path->tiles_grad(s, how, c->in, c->dy, c->in_pool, c->out, c->ws);
}

/* The call c of pass `pass` with the path's how, or the one conv_tiles_find chooses. */
static void run_tiles(const struct conv_shape *s, enum conv_pass pass, conv_tiles_run_fn *run,
                      struct tiles_call *c) {
    unsigned how = c->path->tiles_how;
    if (how & CONV_TILES_FIND) how = conv_tiles_find(s, pass, run, c);
    run(s, how, c);
}

void cpu_conv_tiles_sums(const struct conv_shape *s, int flip, const float *in, const struct pool_in *in_pool,
                         const float *w, const float *b, int relu, const float *mask,
                         const struct pool_out *pool, float *out, float *ws) {
    CHECK(current_bf16->tiles_sums);
    struct tiles_call c = {.path = current_bf16,
                           .flip = flip,
                           .in = in,
                           .w = w,
                           .b = b,
                           .mask = mask,
                           .in_pool = in_pool,
                           .relu = relu,
                           .pool = pool,
                           .out = out,
                           .ws = ws};
    run_tiles(s, flip ? CONV_BACKWARD_DATA : CONV_FORWARD, run_sums, &c);
}

void cpu_conv_tiles_filter_grad(const struct conv_shape *s, const float *x, const float *dy,
                                const struct pool_in *dy_pool, float *dw, float *ws) {
    CHECK(current_bf16->tiles_grad);
    struct tiles_call c = {.path = current_bf16, .in = x, .dy = dy, .in_pool = dy_pool, .out = dw, .ws = ws};
    run_tiles(s, CONV_BACKWARD_FILTER, run_grad, &c);
}

int conv_tiles_finds(void) { return (current_bf16->tiles_how & CONV_TILES_FIND) != 0; }

gemm_fn *gemm_of(enum gemm_math math) { return math == GEMM_BF16 ? gemm_bf16 : gemm; }

void gemm(int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa, const float *B,
          ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc, float *ws) {
    current->fn(M, N, K, alpha, A, rsa, csa, B, rsb, csb, beta, C, ldc, ws);
}

int gemm_nr(void) { return current->nr; }
int gemm_path_avx512(void) { return current->fn == gemm_avx512; }

void gemm_pack_a(int M, int K, const float *A, ptrdiff_t rsa, ptrdiff_t csa, float *Ap) {
    current->pack_a(M, K, A, rsa, csa, Ap);
}

void gemm_prepacked(int M, int N, int K, const float *Ap, const float *Bp, float *C, int ldc) {
    current->prepacked(M, N, K, Ap, Bp, C, ldc);
}

void winograd_conv3x3(const float *x, const struct pool_in *xp, const float *w, int flip, const float *bias,
                      int relu, const float *mask, const struct pool_out *pool, float *y, int N, int in,
                      int out, int H, int W, int m, enum gemm_math math, float *ws) {
    current->winograd(x, xp, w, flip, bias, relu, mask, pool, y, N, in, out, H, W, m, math, ws);
}

void winograd_filter_grad(const float *x, const float *dy, const struct pool_in *dyp, float *dw, int N, int C,
                          int K, int H, int W, int m, enum gemm_math math, float *ws) {
    current->winograd_grad(x, dy, dyp, dw, N, C, K, H, W, m, math, ws);
}

void cpu_small_conv_forward(const struct conv_shape *s, const float *x, const float *w, const float *b,
                            float *y, enum conv_act act, int bf16, float *ws) {
    current->small_conv(s, x, w, b, y, act, bf16, ws);
}

void cpu_small_conv_filter_grad(const struct conv_shape *s, const float *x, const float *dy, float *dw,
                                float *db, float *ws) {
    current->small_conv_grad(s, x, dy, dw, db, ws);
}

/* The most any path needs: the path in use may change between sizing and the call (tests). */
size_t cpu_small_conv_workspace_floats(const struct conv_shape *s, int threads) {
    size_t most = 0;
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++) {
        size_t f = paths[i].small_conv_ws(s, threads);
        most = f > most ? f : most;
    }
    return most;
}

void gemm_parallel(enum gemm_math math, int M, int N, int K, float alpha, const float *A, ptrdiff_t rsa,
                   ptrdiff_t csa, const float *B, ptrdiff_t rsb, ptrdiff_t csb, float beta, float *C, int ldc,
                   float *ws) {
    gemm_fn *fn = math == GEMM_BF16 ? current_bf16->fn : current->fn;
    /* Column ranges in multiples of 64 (a multiple of every path's NR) so threads never share a
     * cache line of C; static split, so results do not depend on timing. */
#pragma omp parallel
    {
        int t = omp_get_thread_num(), nt = omp_get_num_threads();
        int chunks = (N + 63) / 64;
        int lo = (int)((long)chunks * t / nt) * 64, hi = (int)((long)chunks * (t + 1) / nt) * 64;
        if (hi > N) hi = N;
        if (lo < hi)
            fn(M, hi - lo, K, alpha, A, rsa, csa, B + lo * csb, rsb, csb, beta, C + lo, ldc,
               ws + (size_t)t * gemm_workspace_floats());
    }
}

/* GFLOP/s of probe (returns the flops it ran) on threads threads for about `seconds`. */
static double peak(double (*probe)(long iters), int threads, double seconds) {
    /* Calibrate on one thread, then run all threads for the same iteration count at once; the
     * rate is total flops over the slowest thread's time. */
    long iters = 1000;
    double t0 = clock_seconds();
    probe(iters);
    while (clock_seconds() - t0 < 0.05 * seconds) {
        iters *= 2;
        t0 = clock_seconds();
        probe(iters);
    }
    iters = (long)((double)iters * seconds / (clock_seconds() - t0 + 1e-9)) + 1;
    double flops = 0.0, start = 0.0, end = 0.0;
#pragma omp parallel num_threads(threads) reduction(+ : flops)
    {
#pragma omp barrier
#pragma omp single
        start = clock_seconds();
        flops += probe(iters);
#pragma omp barrier
#pragma omp single
        end = clock_seconds();
    }
    return flops / (end - start) * 1e-9;
}

double gemm_fma_peak(const char *isa, int threads, double seconds) {
    for (size_t i = 0; i < sizeof paths / sizeof paths[0]; i++)
        if (strcmp(paths[i].name, isa) == 0 && paths[i].supported())
            return peak(paths[i].probe, threads, seconds);
    return -1.0;
}

double gemm_bf16_peak(int threads, double seconds) {
    return current_bf16->probe ? peak(current_bf16->probe, threads, seconds) : -1.0;
}
