/* 3x3 "same" convolution (pad 1) by Winograd's minimal filtering F(m x m, 3x3), m = 2 to 5
 * (Lavin & Gray, 2016): the forward, the input gradient (the adjoint convolution: the same
 * operation with the filters rotated by 180 degrees and transposed) and the filter gradient.
 *
 * Tiles. Output tile (ty, tx) is y[m ty .. m ty + m - 1][m tx .. m tx + m - 1]; it comes from the
 * a x a input block (a = m + 2) x[m ty - 1 ..][m tx - 1 ..], zero outside the image. A plane
 * has TH = ceil(H / m) x TW = ceil(W / m) tiles: when m does not divide H or W (the odd maps
 * of airbench94: 31, 15, 7, 3) the last tile row and column are partial, their input is
 * zero-extended and their outputs past the image are dropped (forward) or taken as zero (the dy
 * of the filter gradient), which is exactly the convolution.
 *
 * Forward. With U = G g G^T (a x a, per filter g) and V = B^T d B (per input tile d), a tile is
 * Y = A^T [sum over input channels of U (.) V] A. Per transform position xi (a^2 of them) the
 * channel sum is one matrix product over the tiles t of a chunk of images:
 *     M[xi][out][t] = U[xi][out][in] V[xi][in][t]
 * Filter gradient. dL/dU = (A dY A^T) (.) V summed over tiles, and dL/dg = G^T (dL/dU) G:
 *     dU[xi][in][out] = sum over t of V[xi][in][t] D[xi][out][t],   D = A dY A^T
 * Multiplies per output pixel and channel pair: a^2 / m^2 = 4 (m 2), 2.78 (m 3), 2.25 (m 4) or
 * 1.96 (m 5) instead of 9, times the tiles' overhang on partial tiles (31x31 costs as 32x32).
 *
 *   m 2: B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]   G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
 *        A^T = [1 1 1 0; 0 1 -1 -1]
 *   m 4: B^T = [4 0 -5 0 1 0; 0 -4 -4 1 1 0; 0 4 -4 -1 1 0; 0 -2 -1 2 1 0; 0 2 -1 -2 1 0;
 *               0 4 0 -5 0 1]
 *        G = [1/4 0 0; -1/6 -1/6 -1/6; -1/6 1/6 -1/6; 1/24 1/12 1/6; 1/24 -1/12 1/6; 0 0 1]
 *        A^T = [1 1 1 1 1 0; 0 1 -1 2 -2 0; 0 1 1 4 4 0; 0 1 -1 8 -8 1]
 *   m 3 and m 5: the matrices F3 and F5 below.
 * Every m is the Toom-Cook construction on the points 0, 1, -1, 2, -2, 1/2 (the first a - 1 of
 * them) and infinity, scaled as Lavin's m 4 (G's row for point p divided by the product of
 * p - q over the other points q): A^T[i][j] = p_j^i, G[j][k] = p_j^k / f_j, and B^T the unique
 * matrix that makes the identity exact (m 2 above is that up to the signs of the first and last
 * transform slots). m 2 and m 4 are written out by hand below (their shared sums save a
 * quarter of the arithmetic); m 3 and m 5 are computed from their tables.
 * Rounding: m 2's coefficients are 0, +-1, +-1/2, so its error stays at the level of direct
 * summation; the larger m reach coefficients of 8 (m 4), 16 and 1/60 (m 5) and lose a few more
 * bits: simulated in float on 3x3 filters over 64 channels, relative error 2.9e-7 (m 2),
 * 9.6e-7 (m 3), 1.9e-6 (m 4), 3.1e-6 (m 5) (tests/test_ops.c measures them against double
 * references).
 *
 * Images are processed in chunks (one chunk per thread at a time) so each GEMM has 32 or more
 * tile columns, few enough for the chunk's buffers to stay in cache (MIN_TILES below): the
 * transform domain batches images, so tiny maps (3x3: one m-3 tile) still make wide GEMMs. U is
 * computed once per call and shared by all threads, and packed once into the GEMM's A panels
 * (bf16: as gemm_bf16 packs them, gemm_bf16_prepacked); in float the input transform also writes
 * V straight into its B panels (gemm_prepacked: no per-product packing). The filter gradient
 * sums per-thread partial dU in thread order (deterministic for a given thread count).
 *
 * Compiled once per ISA (isa.h): the transforms work on VEC tiles at a time (GCC vector types),
 * flat over all the tiles of a chunk, so they are vector code of that width. */
#include "cpu.h"
#include "gemm.h"
#include "isa.h"
#include "vec.h"

#include <omp.h>
#include <string.h>
#if VEC >= 8
#include <immintrin.h>
#endif

/* Tiles per chunk: the columns of each GEMM (N of the forward's products, K of the filter
 * gradient's). A chunk's transform-domain buffers (V and M, or V and D: a^2 x channels x tiles
 * floats each) are written, multiplied and read back once per chunk, so they should stay in
 * the core's L2 cache; the products run near the FMA peak from 32 columns, one AVX-512 panel.
 * So a chunk is the fewest whole images that make at least MIN_TILES tiles, unless up to
 * max(2 MIN_TILES, the tiles whose buffers fit CHUNK_BYTES) a count fills the GEMM's panels
 * (multiples of PANEL tiles) strictly better: 15x15 maps in F(5x5) have 9 tiles per image,
 * and 4 images (36 tiles) would leave 44 % of a 64-column product empty where 7 (63) leave
 * 2 %. (Against chunks of 64 to 256 tiles within 4 MiB, which spill a 2 MiB L2: docs/results.md,
 * "Winograd chunks in L2".) */
#define MIN_TILES   32
#define MAX_TILES   256
#define PANEL       32 /* a multiple of every path's GEMM_NR (32, 16, 8) */
#define CHUNK_BYTES ((size_t)1 << 20)
#define AMAX        7 /* a = m + 2 for m <= 5 */
#define INLINE      static inline __attribute__((always_inline))

/* f(M, ...) with M the constant equal to the run-time m (2 to 5): the helpers below take m as
 * their first argument and are always inlined, so each gets one copy per tile size. */
#define BY_TILE(m, f, ...)                                                                                   \
    switch (m) {                                                                                             \
    case 2: f(2, __VA_ARGS__); break;                                                                        \
    case 3: f(3, __VA_ARGS__); break;                                                                        \
    case 4: f(4, __VA_ARGS__); break;                                                                        \
    default: f(5, __VA_ARGS__); break;                                                                       \
    }

static inline size_t round_up(size_t n, size_t k) { return (n + k - 1) / k * k; }

/* The stride between the a^2 transform slots of a buffer holding n floats per slot: 64-byte
 * aligned and one cache line more than n. A tile's a^2 values are read and written together,
 * and with n a multiple of 4 KiB (24 to 256 channels x 256 tiles) the 36 lines would all fall
 * into the same cache sets and evict each other. Measured on a Zen 3 class EPYC: the 24 -> 64
 * and 64 -> 64 convolutions 12 - 20 % faster, the 256-channel ones unchanged within noise. */
static inline size_t slot_stride(size_t n) { return round16(n) + 16; }

/* Tiles of an H x W plane for tile size m. */
struct tiling {
    int m, a, TH, TW, T; /* T = TH * TW per image */
};

static inline struct tiling tiling(int m, int H, int W) {
    struct tiling tl = {m, m + 2, (H + m - 1) / m, (W + m - 1) / m, 0};
    tl.T = tl.TH * tl.TW;
    return tl;
}

/* Images per chunk, for buffers of ch channels in all (in + out, or C + K): see MIN_TILES. */
static inline int chunk_images(struct tiling tl, int ch) {
    size_t fit = CHUNK_BYTES / ((size_t)tl.a * tl.a * ch * sizeof(float));
    size_t T = (size_t)tl.T, hi = fit < 2 * MIN_TILES ? 2 * MIN_TILES : fit > MAX_TILES ? MAX_TILES : fit;
    size_t g0 = (MIN_TILES + T - 1) / T, g1 = hi / T > g0 ? hi / T : g0, best = g0;
    for (size_t g = g0 + 1; g <= g1; g++) /* fill g T / (g T rounded up to PANEL), strictly better */
        if (g * T * round_up(best * T, PANEL) > best * T * round_up(g * T, PANEL)) best = g;
    return (int)best;
}

/* Tile capacity of one chunk, in whole GEMM panels of every path (NR 32, 16 or 8). */
static inline size_t chunk_tiles(struct tiling tl, int ch) {
    return ((size_t)chunk_images(tl, ch) * tl.T + 31) / 32 * 32;
}

/* Floats of the zero-bordered copy of one plane that the transforms read tiles from
 * (pad_plane): its tiles' windows, borders included, all lie inside it. */
static inline size_t pad_floats(struct tiling tl) {
    return round16((size_t)(tl.TH * tl.m + 2) * (tl.TW * tl.m + 2));
}

/* Floats of one channel of a chunk, padded (pad_plane, pad_floats() apart), then the tiles'
 * offsets into it (tile_offsets: int32, one table per overlap), then an output row's offsets
 * (row_offsets). */
static inline size_t planes_floats(struct tiling tl, int ch, int tables) {
    return (size_t)chunk_images(tl, ch) * pad_floats(tl) + (size_t)tables * chunk_tiles(tl, ch) +
           round16((size_t)tl.TW * tl.m);
}

/* A fused max pool's room (struct pool_out), last in a thread's forward workspace: one output
 * plane (at most the tiles' extent) for windows other than 2x2, then the 2x2 pool's two column
 * tables (pool_tiles). */
static inline size_t plane_floats(struct tiling tl) {
    return round16((size_t)tl.TH * tl.m * tl.TW * tl.m) + 2 * round16((size_t)tl.TW * tl.m);
}

/* Per-thread floats of the forward: V [a^2][in][T], M [a^2][out][T], the output tiles' staging
 * S [a^2][T] (one channel's tiles, cache-resident), the GEMM's; slots slot_stride() apart; then
 * the padded planes of one channel and the tile and row offsets; then an output plane. */
static size_t conv_thread_floats(int in, int out, struct tiling tl) {
    size_t A2 = (size_t)tl.a * tl.a, T = chunk_tiles(tl, in + out);
    return A2 * (slot_stride(in * T) + slot_stride(out * T) + slot_stride(T)) + gemm_workspace_floats() +
           planes_floats(tl, in + out, 1) + plane_floats(tl);
}

/* Per-thread floats of the filter gradient: partial dU [a^2][C][K], V [a^2][C][T],
 * D [a^2][K][T], the GEMM's, the padded planes and two offset tables (overlap 1 and 0). */
static size_t grad_thread_floats(int C, int K, struct tiling tl) {
    size_t A2 = (size_t)tl.a * tl.a, T = chunk_tiles(tl, C + K);
    return round16(A2 * C * K) + A2 * (slot_stride(C * T) + slot_stride(K * T)) + gemm_workspace_floats() +
           planes_floats(tl, C + K, 2);
}

#ifdef ISA_IS_GENERIC /* once, not per ISA */
size_t winograd_conv_workspace_floats(int in, int out, int H, int W, int m, int threads) {
    struct tiling tl = tiling(m, H, W);
    size_t A2 = (size_t)tl.a * tl.a;
    return round16(A2 * in * out) + round16(A2 * gemm_packed_a_floats(out, in)) +
           conv_thread_floats(in, out, tl) * (size_t)threads;
}

size_t winograd_filter_grad_workspace_floats(int C, int K, int H, int W, int m, int threads) {
    return grad_thread_floats(C, K, tiling(m, H, W)) * (size_t)threads;
}
#endif

/* ---- Vectors of tiles (or of filters): vec.h's VEC lanes ---- */

/* Lanes 0..n-1 (n <= VEC; none when n <= 0) from base[idx[l]], zero past n; idx holds VEC
 * readable entries. One gather instruction where the path has them. */
INLINE vf load_idx(const float *base, const int *idx, int n) {
#if VEC == 16
    return (vf)_mm512_mask_i32gather_ps(_mm512_setzero_ps(), first_lanes(n), _mm512_loadu_si512(idx), base,
                                        4);
#elif VEC == 8
    return (vf)_mm256_mask_i32gather_ps(_mm256_setzero_ps(), base, _mm256_loadu_si256((const __m256i *)idx),
                                        _mm256_castsi256_ps(first_lanes(n)), 4);
#else
    vf v = (vf){0};
    for (int l = 0; l < n && l < VEC; l++) v[l] = base[idx[l]];
    return v;
#endif
}

/* Whether load_tiles may stand in for load_idx: on the AVX2 path, a full vector of tiles and
 * 4 to 8 slots a row. There a gather costs more than the loads and shuffles (AMD Zen 3: bound
 * up to 27 % of a pass); elsewhere a gather each. */
INLINE int tiles_by_rows(int n, int cnt) { return VEC == 8 && n >= VEC && cnt >= 4 && cnt <= 8; }

#if VEC == 8
/* x[k] lane l = base[idx[l] + o + k], k < 4: each tile's 4 floats from o in one 128-bit half
 * (tiles l and l + 4 share a register), then a 4x4 transpose per half. */
INLINE void transpose_tiles(const float *base, const int *idx, int o, __m256 x[4]) {
    __m256 r[4];
    for (int l = 0; l < 4; l++) r[l] = _mm256_loadu2_m128(base + idx[l + 4] + o, base + idx[l] + o);
    __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]),
           t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    x[0] = _mm256_shuffle_ps(t0, t2, 0x44), x[1] = _mm256_shuffle_ps(t0, t2, 0xee);
    x[2] = _mm256_shuffle_ps(t1, t3, 0x44), x[3] = _mm256_shuffle_ps(t1, t3, 0xee);
}
#endif

/* out[i] = load_idx(base + i, idx, VEC), i < cnt (tiles_by_rows), bit for bit, read with plain
 * loads: slots 0-3 from each tile's first 4 floats, slots 4 to cnt - 1 from its last 4 (so
 * nothing outside the tiles' cnt floats is read). */
INLINE void load_tiles(const float *base, const int *idx, int cnt, vf *out) {
#if VEC == 8
    __m256 x[4];
    transpose_tiles(base, idx, 0, x);
    for (int i = 0; i < 4; i++) out[i] = (vf)x[i];
    if (cnt == 4) return;
    transpose_tiles(base, idx, cnt - 4, x);
    for (int i = 4; i < cnt; i++) out[i] = (vf)x[i - (cnt - 4)];
#else
    (void)base, (void)idx, (void)cnt, (void)out;
#endif
}

/* Whether load_pool_cols may stand in for load_idx in pool_tiles at pooled column j (a multiple
 * of VEC) of a row of TW tiles: on the AVX2 path (the same trade as tiles_by_rows), F(4x4),
 * and the vector's 4 tiles inside the row (lanes past the map then read tiles of the row). */
INLINE int pool_cols_by_rows(int m, int j, int TW) { return VEC == 8 && m == 4 && j / 2 + 4 <= TW; }

/* Lanes l < n of load_idx(r, cols[odd] + j, n) in pool_tiles for m = 4 (pool_cols_by_rows),
 * read with two plain loads: pixel 2 (j + l) + odd is column odd (l even) or odd + 2 (l odd) of
 * tile j / 2 + l / 2, at slots odd and odd + 2 from r (the row's first slot), so the lanes
 * interleave 4 tiles of the two slots. */
INLINE vf load_pool_cols(const float *r, size_t ys, int j, int odd) {
#if VEC == 8
    __m128 a = _mm_loadu_ps(r + (size_t)odd * ys + j / 2),
           b = _mm_loadu_ps(r + (size_t)(odd + 2) * ys + j / 2);
    return (vf)_mm256_set_m128(_mm_unpackhi_ps(a, b), _mm_unpacklo_ps(a, b));
#else
    (void)r, (void)ys, (void)j, (void)odd;
    return (vf){0};
#endif
}

/* ---- The 1-D transforms, along one dimension with strides (m a constant after inlining) ---- */

/* r[0..a) = B^T d[0..a) */
INLINE void input_1d(int m, const vf *d, int ds, vf *r, int rs) {
    if (m == 2) {
        r[0] = d[0] - d[2 * ds];
        r[rs] = d[ds] + d[2 * ds];
        r[2 * rs] = d[2 * ds] - d[ds];
        r[3 * rs] = d[ds] - d[3 * ds];
    } else {
        vf d0 = d[0], d1 = d[ds], d2 = d[2 * ds], d3 = d[3 * ds], d4 = d[4 * ds], d5 = d[5 * ds];
        r[0] = 4.0f * d0 - 5.0f * d2 + d4;
        r[rs] = d3 + d4 - 4.0f * (d1 + d2);
        r[2 * rs] = d4 - d3 + 4.0f * (d1 - d2);
        r[3 * rs] = d4 - d2 + 2.0f * (d3 - d1);
        r[4 * rs] = d4 - d2 + 2.0f * (d1 - d3);
        r[5 * rs] = 4.0f * d1 - 5.0f * d3 + d5;
    }
}

/* u[0..a) = G g[0..3) */
INLINE void filter_1d(int m, const vf *g, int gs, vf *u, int us) {
    vf g0 = g[0], g1 = g[gs], g2 = g[2 * gs];
    if (m == 2) {
        u[0] = g0;
        u[us] = 0.5f * (g0 + g1 + g2);
        u[2 * us] = 0.5f * (g0 - g1 + g2);
    } else {
        u[0] = 0.25f * g0;
        u[us] = (-1.0f / 6) * (g0 + g1 + g2);
        u[2 * us] = (-1.0f / 6) * (g0 - g1 + g2);
        u[3 * us] = (1.0f / 24) * g0 + (1.0f / 12) * g1 + (1.0f / 6) * g2;
        u[4 * us] = (1.0f / 24) * g0 - (1.0f / 12) * g1 + (1.0f / 6) * g2;
    }
    u[(m + 1) * us] = g2;
}

/* y[0..m) = A^T s[0..a) */
INLINE void output_1d(int m, const vf *s, int ss, vf *y, int ys) {
    if (m == 2) {
        y[0] = s[0] + s[ss] + s[2 * ss];
        y[ys] = s[ss] - s[2 * ss] - s[3 * ss];
    } else {
        vf s0 = s[0], s1 = s[ss], s2 = s[2 * ss], s3 = s[3 * ss], s4 = s[4 * ss], s5 = s[5 * ss];
        vf p12 = s1 + s2, m12 = s1 - s2, p34 = s3 + s4, m34 = s3 - s4;
        y[0] = s0 + p12 + p34;
        y[ys] = m12 + 2.0f * m34;
        y[2 * ys] = p12 + 4.0f * p34;
        y[3 * ys] = m12 + 8.0f * m34 + s5;
    }
}

/* s[0..a) = A dy[0..m): the adjoint of output_1d */
INLINE void grad_output_1d(int m, const vf *dy, int ds, vf *s, int ss) {
    if (m == 2) {
        vf d0 = dy[0], d1 = dy[ds];
        s[0] = d0;
        s[ss] = d0 + d1;
        s[2 * ss] = d0 - d1;
        s[3 * ss] = -d1;
    } else {
        vf d0 = dy[0], d1 = dy[ds], d2 = dy[2 * ds], d3 = dy[3 * ds];
        vf e = d0 + d2, o = d1 + d3, e4 = d0 + 4.0f * d2, o8 = 2.0f * d1 + 8.0f * d3;
        s[0] = d0;
        s[ss] = e + o;
        s[2 * ss] = e - o;
        s[3 * ss] = e4 + o8;
        s[4 * ss] = e4 - o8;
        s[5 * ss] = d3;
    }
}

/* dg[0..3) = G^T du[0..a): the adjoint of filter_1d */
INLINE void grad_filter_1d(int m, const vf *du, int ds, vf *dg, int gs) {
    if (m == 2) {
        vf u0 = du[0], u1 = du[ds], u2 = du[2 * ds], u3 = du[3 * ds];
        dg[0] = u0 + 0.5f * (u1 + u2);
        dg[gs] = 0.5f * (u1 - u2);
        dg[2 * gs] = 0.5f * (u1 + u2) + u3;
    } else {
        vf u0 = du[0], u1 = du[ds], u2 = du[2 * ds], u3 = du[3 * ds], u4 = du[4 * ds];
        vf u5 = du[5 * ds];
        dg[0] = 0.25f * u0 - (1.0f / 6) * (u1 + u2) + (1.0f / 24) * (u3 + u4);
        dg[gs] = (1.0f / 6) * (u2 - u1) + (1.0f / 12) * (u3 - u4);
        dg[2 * gs] = (1.0f / 6) * (u3 + u4 - u1 - u2) + u5;
    }
}

/* ---- m 3 and m 5: the 1-D transforms straight from their matrices (see the top) ---- */

struct winograd_matrices {
    float BT[AMAX][AMAX]; /* [a][a] */
    float G[AMAX][3];     /* [a][3] */
    float AT[AMAX][AMAX]; /* [m][a] */
};

/* F(3x3, 3x3): points 0, 1, -1, 2, infinity */
static const struct winograd_matrices F3 = {
    .BT = {{2, -1, -2, 1, 0}, {0, -2, -1, 1, 0}, {0, 2, -3, 1, 0}, {0, -1, 0, 1, 0}, {0, 2, -1, -2, 1}},
    .G = {{1.0f / 2, 0, 0},
          {-1.0f / 2, -1.0f / 2, -1.0f / 2},
          {-1.0f / 6, 1.0f / 6, -1.0f / 6},
          {1.0f / 6, 1.0f / 3, 2.0f / 3},
          {0, 0, 1}},
    .AT = {{1, 1, 1, 1, 0}, {0, 1, -1, 2, 0}, {0, 1, 1, 4, 1}},
};

/* F(5x5, 3x3): points 0, 1, -1, 2, -2, 1/2, infinity */
static const struct winograd_matrices F5 = {
    .BT = {{-2, 4, 2.5f, -5, -0.5f, 1, 0},
           {0, 2, -2, -4.5f, 0.5f, 1, 0},
           {0, -2, 6, -3.5f, -1.5f, 1, 0},
           {0, 1, -1.5f, -2, 1.5f, 1, 0},
           {0, -1, 2.5f, 0, -2.5f, 1, 0},
           {0, 4, 0, -5, 0, 1, 0},
           {0, -2, 4, 2.5f, -5, -0.5f, 1}},
    .G = {{-1.0f / 2, 0, 0},
          {-1.0f / 3, -1.0f / 3, -1.0f / 3},
          {1.0f / 9, -1.0f / 9, 1.0f / 9},
          {1.0f / 36, 1.0f / 18, 1.0f / 9},
          {-1.0f / 60, 1.0f / 30, -1.0f / 15},
          {32.0f / 45, 16.0f / 45, 8.0f / 45},
          {0, 0, 1}},
    .AT = {{1, 1, 1, 1, 1, 1, 0},
           {0, 1, -1, 2, -2, 0.5f, 0},
           {0, 1, 1, 4, 4, 0.25f, 0},
           {0, 1, -1, 8, -8, 0.125f, 0},
           {0, 1, 1, 16, 16, 0.0625f, 1}},
};

/* y[i ys] = sum over j < cols of T(i, j) x[j xs], for i < rows; T(i, j) = t[i ld + j], or
 * t[j ld + i] when tr. Fully unrolled with t a constant table, the coefficients are constants:
 * zeros drop out, +-1 become additions. */
INLINE void matvec_1d(const float *t, int ld, int tr, int rows, int cols, const vf *x, int xs, vf *y,
                      int ys) {
#pragma GCC unroll 7
    for (int i = 0; i < rows; i++) {
        vf s = (vf){0};
        int any = 0;
#pragma GCC unroll 7
        for (int j = 0; j < cols; j++) {
            float c = tr ? t[j * ld + i] : t[i * ld + j];
            if (c == 0.0f) continue;
            vf p = c == 1.0f ? x[j * xs] : c == -1.0f ? -x[j * xs] : c * x[j * xs];
            s = any ? s + p : p;
            any = 1;
        }
        y[i * ys] = s;
    }
}

/* The 1-D transforms by kind, so one 2-D helper serves them all (a constant after inlining). */
enum transform { INPUT, OUTPUT, GRAD_OUTPUT, FILTER, GRAD_FILTER };

INLINE void transform_1d(enum transform k, int m, const vf *x, int xs, vf *y, int ys) {
    if (m == 3 || m == 5) {
        const struct winograd_matrices *f = m == 3 ? &F3 : &F5;
        int a = m + 2;
        switch (k) {
        case INPUT: matvec_1d(&f->BT[0][0], AMAX, 0, a, a, x, xs, y, ys); break;       /* B^T d */
        case OUTPUT: matvec_1d(&f->AT[0][0], AMAX, 0, m, a, x, xs, y, ys); break;      /* A^T s */
        case GRAD_OUTPUT: matvec_1d(&f->AT[0][0], AMAX, 1, a, m, x, xs, y, ys); break; /* A dy */
        case FILTER: matvec_1d(&f->G[0][0], 3, 0, a, 3, x, xs, y, ys); break;          /* G g */
        case GRAD_FILTER: matvec_1d(&f->G[0][0], 3, 1, 3, a, x, xs, y, ys); break;     /* G^T du */
        }
        return;
    }
    switch (k) {
    case INPUT: input_1d(m, x, xs, y, ys); break;
    case OUTPUT: output_1d(m, x, xs, y, ys); break;
    case GRAD_OUTPUT: grad_output_1d(m, x, xs, y, ys); break;
    case FILTER: filter_1d(m, x, xs, y, ys); break;
    case GRAD_FILTER: grad_filter_1d(m, x, xs, y, ys); break;
    }
}

/* y = T x T^T for the 1-D transform T of kind k from nin to nout values: T down the columns of
 * x[nin][nin], then along each row of the result, into y[nout][nout]. */
INLINE void transform_2d(enum transform k, int m, int nin, int nout, vf x[AMAX][AMAX], vf y[AMAX][AMAX]) {
    vf r[AMAX][AMAX];
    for (int i = 0; i < nin; i++) transform_1d(k, m, &x[0][i], AMAX, &r[0][i], AMAX);
    for (int q = 0; q < nout; q++) transform_1d(k, m, r[q], 1, y[q], 1);
}

/* ---- Tiles ----
 * A chunk's tiles are read where they lie: each channel's planes of the chunk are first copied
 * with a zero border (pad_plane), then one flat pass over all the chunk's tiles of that channel
 * transforms them, VEC tiles per vector, each vector of a transform slot loaded with one gather
 * at the tiles' offsets (tile_offsets; on the AVX2 path a full vector's rows by transposes,
 * load_tiles). Flat over the whole chunk, not per plane, so the vectors are full even for 3x3
 * maps (one tile each). */

/* pad[py][px] (PH x PW, PW = TW m + 2 off, PH = TH m + 2 off) = src[py - off][px - off], zero
 * outside src[H][W]: every tile window (win = m + 2 off values a side; off 1: the forward's input
 * tiles overlap their neighbours by one pixel on each side, off 0: the output gradient's tiles do
 * not) is a plain win x win block of it. */
/* p[0..n) = 0, in vectors (a loop of floats becomes a memset call). */
INLINE void zero_n(float *p, int n) {
    for (int i = 0; i < n; i += VEC) store_n(p + i, 1, (vf){0}, n - i < VEC ? n - i : VEC);
}

INLINE void pad_plane_m(int m, const float *restrict src, int H, int W, int off, float *restrict pad) {
    struct tiling tl = tiling(m, H, W);
    int PW = tl.TW * m + 2 * off, PH = tl.TH * m + 2 * off;
    for (int py = 0; py < PH; py++) {
        float *restrict p = pad + (size_t)py * PW;
        int sy = py - off;
        if (sy < 0 || sy >= H) {
            zero_n(p, PW);
            continue;
        }
        const float *restrict s = src + (size_t)sy * W;
        if (off) p[0] = 0.0f;
        for (int x = 0; x < W; x += VEC) {
            int n = W - x < VEC ? W - x : VEC;
            store_n(p + off + x, 1, load_n(s + x, 1, n), n);
        }
        zero_n(p + off + W, PW - off - W);
    }
}

typedef unsigned char vb __attribute__((vector_size(VEC)));

/* Lanes 0, VEC, 1, VEC + 1, ... of (a, b), and the same from their upper halves: two vectors
 * interleaved (__builtin_shufflevector: GCC 12 and clang alike). */
#if VEC == 16
#define INTERLEAVE_LO(a, b)                                                                                  \
    __builtin_shufflevector(a, b, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23)
#define INTERLEAVE_HI(a, b)                                                                                  \
    __builtin_shufflevector(a, b, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31)
#elif VEC == 8
#define INTERLEAVE_LO(a, b) __builtin_shufflevector(a, b, 0, 8, 1, 9, 2, 10, 3, 11)
#define INTERLEAVE_HI(a, b) __builtin_shufflevector(a, b, 4, 12, 5, 13, 6, 14, 7, 15)
#else
#define INTERLEAVE_LO(a, b) __builtin_shufflevector(a, b, 0, 4, 1, 5)
#define INTERLEAVE_HI(a, b) __builtin_shufflevector(a, b, 2, 6, 3, 7)
#endif

/* Bytes p[0..n) (1 <= n <= VEC) widened to lanes; past n, zero or (where `left`, the bytes
 * readable from p, allows a whole vector) the bytes that follow: one masked load on AVX-512,
 * one plain load elsewhere but at a buffer's end (no call to memcpy for a row's few bytes). */
INLINE vi load_bytes_n(const unsigned char *p, int n, size_t left) {
#if VEC == 16
    (void)left;
    return (vi)_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(first_lanes(n), p));
#else
    vb b = {0};
    if (left >= VEC) memcpy(&b, p, VEC);
    else
        for (int l = 0; l < n; l++) b[l] = p[l];
    return __builtin_convertvector(b, vi);
#endif
}

/* pad_plane_m of the plane a 2x2 max pool's backward writes (struct pool_in), from the pooled
 * gradient dy[H/2][W/2] and its winner bytes, VEC windows at a time: row 2i + r of the plane
 * holds, at columns 2j and 2j + 1, dy[i][j] where window (i, j)'s winner is (r, 0) or (r, 1)
 * and passes, else 0; the row and column no window covers (odd H, W) are 0. */
INLINE void unpool_plane_m(int m, const float *restrict dy, const unsigned char *restrict win, int relu,
                           int H, int W, int off, float *restrict pad) {
    struct tiling tl = tiling(m, H, W);
    int PW = tl.TW * m + 2 * off, PH = tl.TH * m + 2 * off, Ho = H / 2, Wo = W / 2;
    for (int py = 0; py < PH; py++) {
        float *restrict p = pad + (size_t)py * PW;
        int sy = py - off;
        if (sy < 0 || sy >= 2 * Ho) {
            zero_n(p, PW);
            continue;
        }
        const float *d = dy + (size_t)(sy / 2) * Wo;
        const unsigned char *b = win + (size_t)(sy / 2) * Wo;
        int even = (sy & 1) * 2; /* the winner offset r * 2 + c of column 2j here */
        if (off) p[0] = 0.0f;
        for (int j = 0; j < Wo; j += VEC) {
            int n = Wo - j < VEC ? Wo - j : VEC;
            /* lanes past n: whatever the bytes, v is 0 there */
            vi w = load_bytes_n(b + j, n, (size_t)(Ho - sy / 2) * Wo - j), at = w & (MAXPOOL_PASSES - 1);
            vi pass = relu ? (w & MAXPOOL_PASSES) != 0 : ~(vi){0};
            vi v = (vi)load_n(d + j, 1, n);
            vf e = (vf)(v & (at == even) & pass), o = (vf)(v & (at == even + 1) & pass);
            store_n(p + off + 2 * j, 1, INTERLEAVE_LO(e, o), 2 * n < VEC ? 2 * n : VEC);
            if (2 * n > VEC) store_n(p + off + 2 * j + VEC, 1, INTERLEAVE_HI(e, o), 2 * n - VEC);
        }
        zero_n(p + off + 2 * Wo, PW - off - 2 * Wo);
    }
}

/* Asks for plane p (n floats) in cache ahead of its pad_plane: a chunk reads its images'
 * planes of one channel, short runs too far apart for the hardware prefetchers. */
static inline void prefetch_plane(const float *p, size_t n) {
    for (size_t i = 0; i < n; i += 16) __builtin_prefetch(p + i);
}

/* One copy per tile size and overlap, both constants. */
INLINE void pad_plane_mo(int m, const float *src, int H, int W, int off, float *pad) {
    off ? pad_plane_m(m, src, H, W, 1, pad) : pad_plane_m(m, src, H, W, 0, pad);
}

static void pad_plane(int m, const float *src, int H, int W, int off, float *pad) {
    BY_TILE(m, pad_plane_mo, src, H, W, off, pad);
}

INLINE void unpool_plane_mo(int m, const float *dy, const unsigned char *win, int relu, int H, int W, int off,
                            float *pad) {
    off ? unpool_plane_m(m, dy, win, relu, H, W, 1, pad) : unpool_plane_m(m, dy, win, relu, H, W, 0, pad);
}

/* Channel c of the gn images from n0 of t[N][chans][H][W], or of the map tp gives when not
 * NULL, padded (pad_plane, overlap off) into pad, pad_floats() apart; the next channel's planes
 * prefetched meanwhile. */
static void pad_channel(struct tiling tl, const float *t, const struct pool_in *tp, int chans, int c, int n0,
                        int gn, int H, int W, int off, float *pad) {
    size_t HW = (size_t)H * W, HWp = (size_t)(H / 2) * (W / 2);
    for (int li = 0; li < gn; li++) {
        size_t p = (size_t)(n0 + li) * chans + c;
        float *dst = pad + li * pad_floats(tl);
        if (tp) {
            if (c + 1 < chans) prefetch_plane(tp->dy + (p + 1) * HWp, HWp);
            BY_TILE(tl.m, unpool_plane_mo, tp->dy + p * HWp, tp->winners + p * HWp, tp->relu, H, W, off, dst);
            continue;
        }
        if (c + 1 < chans) prefetch_plane(t + (p + 1) * HW, HW);
        pad_plane(tl.m, t + p * HW, H, W, off, dst);
    }
}

/* idx[t] for the tiles t = image li T + ty TW + tx of g images: the offset of the tile's window
 * in the images' padded planes (pad_floats() apart, overlap off); 0 for t in [g T, cap). */
static void tile_offsets(struct tiling tl, int off, int g, size_t cap, int *idx) {
    int PW = tl.TW * tl.m + 2 * off;
    size_t t = 0;
    for (int li = 0; li < g; li++)
        for (int ty = 0; ty < tl.TH; ty++)
            for (int tx = 0; tx < tl.TW; tx++)
                idx[t++] = (int)((size_t)li * pad_floats(tl)) + tl.m * (ty * PW + tx);
    for (; t < cap; t++) idx[t] = 0;
}

/* Tiles [0, n): V[xi][t] (xi stride vs) = B^T d B of the a^2 tile values d[j][i] =
 * P[j PW + i + idx[t]] (padded planes, overlap 1). panel 0: the tiles of a slot are a plain
 * row, tile t at V + t. panel GEMM_NR: they are rows of the GEMM's B panels (gemm.h), tile t at
 * V + (t / NR) pstride + t % NR, and the last panel is written whole, zero past n. */
INLINE void input_tiles_m(int m, const float *P, int PW, const int *idx, float *V, size_t vs, int n,
                          int panel, size_t pstride) {
    int a = m + 2, end = panel ? (n + panel - 1) / panel * panel : n;
    for (int t = 0; t < end; t += VEC) {
        int l = n - t < VEC ? n - t : VEC; /* <= 0 in the last panel's padding: zeros */
        vf d[AMAX][AMAX], v[AMAX][AMAX];
        int rows = tiles_by_rows(l, a);
        for (int j = 0; j < a; j++)
            if (rows) load_tiles(P + j * PW, idx + t, a, d[j]);
            else
                for (int i = 0; i < a; i++) d[j][i] = load_idx(P + j * PW + i, idx + t, l);
        transform_2d(INPUT, m, a, a, d, v);
        float *vt = panel ? V + (size_t)(t / panel) * pstride + t % panel : V + t;
        for (int q = 0; q < a; q++)
            for (int p = 0; p < a; p++) store_n(vt + (size_t)(q * a + p) * vs, 1, v[q][p], panel ? VEC : l);
    }
}

/* Tiles [0, n): D[xi][t] (xi stride ds) = A dY A^T of the m^2 values dY[j][i] =
 * P[j PW + i + idx[t]] (padded planes, overlap 0). */
INLINE void grad_output_tiles_m(int m, const float *P, int PW, const int *idx, float *D, size_t ds, int n) {
    int a = m + 2;
    for (int t = 0; t < n; t += VEC) {
        int l = n - t < VEC ? n - t : VEC;
        vf g[AMAX][AMAX], d[AMAX][AMAX];
        int rows = tiles_by_rows(l, m);
        for (int j = 0; j < m; j++)
            if (rows) load_tiles(P + j * PW, idx + t, m, g[j]);
            else
                for (int i = 0; i < m; i++) g[j][i] = load_idx(P + j * PW + i, idx + t, l);
        transform_2d(GRAD_OUTPUT, m, m, a, g, d);
        for (int q = 0; q < a; q++)
            for (int p = 0; p < a; p++) store_n(D + (size_t)(q * a + p) * ds + t, 1, d[q][p], l);
    }
}

/* Tiles [0, n): Y[j m + i][t] (stride ys) = A^T M A of the a^2 values M[xi][t] (stride ms). */
INLINE void output_tiles_m(int m, const float *M, size_t ms, float *Y, size_t ys, int n) {
    int a = m + 2;
    for (int t = 0; t < n; t += VEC) {
        int l = n - t < VEC ? n - t : VEC;
        vf s[AMAX][AMAX], y[AMAX][AMAX];
        for (int j = 0; j < a; j++)
            for (int i = 0; i < a; i++) s[j][i] = load_n(M + (size_t)(j * a + i) * ms + t, 1, l);
        transform_2d(OUTPUT, m, a, m, s, y);
        for (int j = 0; j < m; j++)
            for (int i = 0; i < m; i++) store_n(Y + (size_t)(j * m + i) * ys + t, 1, y[j][i], l);
    }
}

/* y[H][W] of one plane from its tiles' outputs Y (slot j m + i, stride ys, tile t at t) + bias,
 * the positions inside the map only; then ReLU (relu) or the ReLU-backward mask (mask:
 * y = mask <= 0 ? 0 : y; NaN passes both, as PyTorch's ReLU). Each output row is gathered VEC
 * pixels at a time: pixel ox of row oy is Y[(oy % m) m + ox % m][(oy / m) TW + ox / m], at
 * oidx[ox] = (ox % m) ys + ox / m from its row's start (row_offsets). */
INLINE void scatter_tiles_m(int m, const float *Y, size_t ys, const int *oidx, float bias, int relu,
                            const float *mask, float *y, int H, int W) {
    int TW = tiling(m, H, W).TW;
    for (int oy = 0; oy < H; oy++) {
        const float *src = Y + (size_t)(oy % m) * m * ys + (size_t)(oy / m) * TW;
        float *row = y + (size_t)oy * W;
        const float *mrow = mask ? mask + (size_t)oy * W : NULL;
        for (int ox = 0; ox < W; ox += VEC) {
            int n = W - ox < VEC ? W - ox : VEC;
            vf v = load_idx(src, oidx + ox, n) + bias;
            if (relu) v = (vf)((vi)v & ~(v <= 0.0f));
            if (mask) v = (vf)((vi)v & ~(load_n(mrow + ox, 1, n) <= 0.0f));
            store_n(row + ox, 1, v, n);
        }
    }
}

/* A fused 2x2 max pool of one plane straight from its tiles' outputs (read as scatter_tiles
 * reads them, or by load_pool_cols, + bias, then ReLU), so the plane itself is never stored:
 * y[H/2][W/2] and the winners ip (NULL: none) as cpu_maxpool_forward gives them. The window is a
 * tree, (x0, x1) and (x2, x3), then the pairs, each step keeping the later side only when it is
 * larger or NaN: what the row-major scan picks (the first maximum, or the last NaN), VEC windows
 * at a time. cols[0] and cols[1]: the offsets (oidx) of the even and the odd columns. */
INLINE void pool_tiles_m(int m, const float *Y, size_t ys, const int *const cols[2], float bias, int relu,
                         float *y, unsigned char *ip, int H, int W) {
    int TW = tiling(m, H, W).TW, Wo = W / 2;
    for (int i = 0; i < H / 2; i++) {
        const float *r[2];
        for (int u = 0; u < 2; u++)
            r[u] = Y + (size_t)((2 * i + u) % m) * m * ys + (size_t)((2 * i + u) / m) * TW;
        for (int j = 0; j < Wo; j += VEC) {
            int n = Wo - j < VEC ? Wo - j : VEC;
            vf x[4];
            int rows = pool_cols_by_rows(m, j, TW);
            for (int e = 0; e < 4; e++) {
                x[e] =
                    (rows ? load_pool_cols(r[e / 2], ys, j, e % 2) : load_idx(r[e / 2], cols[e % 2] + j, n)) +
                    bias;
                if (relu) x[e] = (vf)((vi)x[e] & ~(x[e] <= 0.0f));
            }
            vi t1 = (x[1] > x[0]) | (x[1] != x[1]), t3 = (x[3] > x[2]) | (x[3] != x[3]);
            vf m01 = vselect(t1, x[1], x[0]), m23 = vselect(t3, x[3], x[2]);
            vi t = (m23 > m01) | (m23 != m23);
            vf mx = vselect(t, m23, m01);
            store_n(y + (size_t)i * Wo + j, 1, mx, n);
            if (!ip) continue;
            vi best = (t & (2 | (t3 & 1))) | (~t & t1 & 1) | (~(mx <= 0.0f) & MAXPOOL_PASSES);
            vb bytes = __builtin_convertvector(best, vb);
            memcpy(ip + (size_t)i * Wo + j, &bytes, (size_t)n);
        }
    }
}

static void pool_tiles(int m, const float *Y, size_t ys, const int *const cols[2], float bias, int relu,
                       float *y, unsigned char *ip, int H, int W) {
    BY_TILE(m, pool_tiles_m, Y, ys, cols, bias, relu, y, ip, H, W);
}

/* oidx[ox] for scatter_tiles (round16(TW m) entries, 0 past W). */
static void row_offsets(struct tiling tl, int W, size_t ys, int *oidx) {
    for (int ox = 0; ox < (int)round16((size_t)tl.TW * tl.m); ox++)
        oidx[ox] = ox < W ? (int)((size_t)(ox % tl.m) * ys) + ox / tl.m : 0;
}

static void scatter_tiles(int m, const float *Y, size_t ys, const int *oidx, float bias, int relu,
                          const float *mask, float *y, int H, int W) {
    BY_TILE(m, scatter_tiles_m, Y, ys, oidx, bias, relu, mask, y, H, W);
}

static void input_tiles(int m, const float *P, int PW, const int *idx, float *V, size_t vs, int n, int panel,
                        size_t pstride) {
    BY_TILE(m, input_tiles_m, P, PW, idx, V, vs, n, panel, pstride);
}

static void grad_output_tiles(int m, const float *P, int PW, const int *idx, float *D, size_t ds, int n) {
    BY_TILE(m, grad_output_tiles_m, P, PW, idx, D, ds, n);
}

static void output_tiles(int m, const float *M, size_t ms, float *Y, size_t ys, int n) {
    BY_TILE(m, output_tiles_m, M, ms, Y, ys, n);
}

/* ---- Filters ---- */

/* U[xi][o][i] = (G g G^T)[xi] for the filter g from output channel o to input channel i:
 * g = w[o][i] (flip == 0, w is [out][in][3][3]) or w[i][o] rotated by 180 degrees (flip == 1,
 * w is [in][out][3][3]: the adjoint, i.e. the input gradient of a forward convolution).
 * Lanes: VEC input channels. Work-shared over the calling team (ends with its barrier). */
INLINE void filters_m(int m, const float *w, int flip, int in, int out, float *U) {
    int a = m + 2;
    size_t plane = (size_t)out * in, lane = flip ? (size_t)out * 9 : 9;
#pragma omp for schedule(static)
    for (int o = 0; o < out; o++)
        for (int i0 = 0; i0 < in; i0 += VEC) {
            int n = in - i0 < VEC ? in - i0 : VEC;
            const float *src = flip ? w + ((size_t)i0 * out + o) * 9 : w + ((size_t)o * in + i0) * 9;
            vf g[AMAX][AMAX], u[AMAX][AMAX];
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 3; c++)
                    g[r][c] = load_n(src + (flip ? (2 - r) * 3 + (2 - c) : r * 3 + c), lane, n);
            transform_2d(FILTER, m, 3, a, g, u);
            for (int r = 0; r < a; r++)
                for (int c = 0; c < a; c++)
                    store_n(U + (size_t)(r * a + c) * plane + (size_t)o * in + i0, 1, u[r][c], n);
        }
}

/* dw[o][c][3][3] = G^T dU[xi][c][o] G, dU the sum of the parts partial dU (dU + p stride, p <
 * parts), added in part order. Lanes: VEC output channels. Work-shared over the calling team. */
INLINE void grad_filters_m(int m, const float *dU, size_t stride, int parts, int C, int K, float *dw) {
    int a = m + 2;
    size_t plane = (size_t)C * K;
#pragma omp for schedule(static)
    for (int c = 0; c < C; c++)
        for (int o0 = 0; o0 < K; o0 += VEC) {
            int n = K - o0 < VEC ? K - o0 : VEC;
            vf du[AMAX][AMAX], g[AMAX][AMAX];
            for (int xi = 0; xi < a * a; xi++) {
                const float *at = dU + xi * plane + (size_t)c * K + o0;
                vf sum = load_n(at, 1, n);
                for (int p = 1; p < parts; p++) sum += load_n(at + p * stride, 1, n);
                du[xi / a][xi % a] = sum;
            }
            transform_2d(GRAD_FILTER, m, a, 3, du, g);
            for (int r = 0; r < 3; r++)
                for (int q = 0; q < 3; q++)
                    store_n(dw + ((size_t)o0 * C + c) * 9 + r * 3 + q, (size_t)C * 9, g[r][q], n);
        }
}

static void filters(int m, const float *w, int flip, int in, int out, float *U) {
    BY_TILE(m, filters_m, w, flip, in, out, U);
}

static void grad_filters(int m, const float *dU, size_t stride, int parts, int C, int K, float *dw) {
    BY_TILE(m, grad_filters_m, dU, stride, parts, C, K, dw);
}

/* A fused pool's room, the last plane_floats(tl) before end (a thread's workspace): returns the
 * plane; cols[0] and cols[1] after it, the offsets (oidx) of the even and the odd columns. */
static float *pool_room(struct tiling tl, float *end, const int *oidx, int W, int *cols[2]) {
    size_t n = round16((size_t)tl.TW * tl.m);
    float *plane = end - plane_floats(tl);
    cols[0] = (int *)(plane + round16((size_t)tl.TH * tl.m * tl.TW * tl.m)), cols[1] = cols[0] + n;
    for (size_t j = 0; j < n; j++)
        for (int e = 0; e < 2; e++) cols[e][j] = (int)j < W / 2 ? oidx[2 * j + e] : 0;
    return plane;
}

/* Plane p (image * out + channel) of a fused max pool, from the output plane xp[H][W]. */
static void pool_output_plane(const struct pool_out *pool, const float *xp, size_t p, int H, int W) {
    size_t at = p * (size_t)(H / pool->k) * (W / pool->k);
    cpu_maxpool_plane(xp, pool->y + at, pool->winners ? pool->winners + at : NULL, H, W, pool->k);
}

/* Images per chunk for a team of nt: up to chunk_images(), but at least one chunk per thread. */
static int chunk_size(struct tiling tl, int ch, int N, int nt) {
    int g = chunk_images(tl, ch), fair = (N + nt - 1) / nt;
    return g < fair ? g : fair;
}

void ISA_FN(winograd_conv3x3)(const float *x, const struct pool_in *xp, const float *w, int flip,
                              const float *bias, int relu, const float *mask, const struct pool_out *pool,
                              float *y, int N, int in, int out, int H, int W, int m, enum gemm_math math,
                              float *ws) {
    CHECK(m >= 2 && m <= 5); /* BY_TILE's cases */
    struct tiling tl = tiling(m, H, W);
    int A2 = tl.a * tl.a;
    size_t HW = (size_t)H * W;
    /* U's A panels are packed once per call, not once per product: in float, with the input
     * transform writing the B panels too (gemm_prepacked); in bf16 as gemm_bf16 packs them
     * (gemm_bf16_prepacked, which packs B itself). */
    int packed = math == GEMM_FP32, panel = packed ? GEMM_NR : 0;
    size_t pa = gemm_packed_a_floats(out, in);
    CHECK(gemm_bf16_packed_a_words(out, in) <= pa);     /* the bf16 panels fit the float ones' room */
    float *U = ws;                                      /* [a^2][out][in] */
    float *Ap = U + round16((size_t)A2 * in * out);     /* [a^2][pa]: U's A panels */
    float *thread_base = Ap + round16((size_t)A2 * pa); /* aligned: a^2 is odd for m 3, 5 */
    size_t stride = conv_thread_floats(in, out, tl), cap = chunk_tiles(tl, in + out);
#pragma omp parallel
    {
        int g = chunk_size(tl, in + out, N, omp_get_num_threads());
        int chunks = (N + g - 1) / g;
        size_t vs = slot_stride(in * cap), ms = slot_stride(out * cap), ss = slot_stride(cap);
        float *V = thread_base + stride * (size_t)omp_get_thread_num(); /* slots vs apart */
        float *Mt = V + A2 * vs;                                        /* ms apart */
        float *S = Mt + A2 * ms;                                        /* ss apart */
        float *gws = S + A2 * ss;
        float *pad = gws + gemm_workspace_floats(); /* g padded planes, then the offsets */
        int *idx = (int *)(pad + (size_t)chunk_images(tl, in + out) * pad_floats(tl));
        int PW = tl.TW * m + 2, *oidx = idx + cap;
        tile_offsets(tl, 1, g, cap, idx);
        row_offsets(tl, W, ss, oidx);
        int *cols[2] = {NULL, NULL};
        float *plane = pool ? pool_room(tl, V + stride, oidx, W, cols) : NULL;
        filters(m, w, flip, in, out, U); /* ends with the barrier of its omp for */
#pragma omp for schedule(static)
        for (int xi = 0; xi < A2; xi++)
            if (packed) ISA_FN(gemm_pack_a)(out, in, U + (size_t)xi * out * in, in, 1, Ap + xi * pa);
            else gemm_bf16_pack_a(out, in, U + (size_t)xi * out * in, in, 1, (uint32_t *)(Ap + xi * pa));
#pragma omp for schedule(static)
        for (int ch = 0; ch < chunks; ch++) {
            int n0 = ch * g, gn = N - n0 < g ? N - n0 : g;
            int tiles = gn * tl.T;
            size_t ld = round16(tiles); /* row length of V (unpacked) and M: aligned rows */
            for (int c = 0; c < in; c++) {
                pad_channel(tl, x, xp, in, c, n0, gn, H, W, 1, pad);
                input_tiles(m, pad, PW, idx, V + (size_t)c * (panel ? (size_t)panel : ld), vs, tiles, panel,
                            (size_t)in * panel);
            }
            for (int xi = 0; xi < A2; xi++)
                if (packed)
                    ISA_FN(gemm_prepacked)(out, tiles, in, Ap + xi * pa, V + xi * vs, Mt + xi * ms, (int)ld);
                else
                    gemm_bf16_prepacked(out, tiles, in, (const uint32_t *)(Ap + xi * pa), V + xi * vs,
                                        (ptrdiff_t)ld, 1, Mt + xi * ms, (int)ld, gws);
            for (int o = 0; o < out; o++) {
                output_tiles(m, Mt + (size_t)o * ld, ms, S, ss, tiles);
                for (int li = 0; li < gn; li++) {
                    size_t p = (size_t)(n0 + li) * out + o, off = p * HW;
                    const float *Y = S + (size_t)li * tl.T;
                    float b = bias ? bias[o] : 0.0f;
                    if (pool && pool->k == 2) {
                        size_t at = p * (size_t)(H / 2) * (W / 2);
                        pool_tiles(m, Y, ss, (const int *const *)cols, b, relu, pool->y + at,
                                   pool->winners ? pool->winners + at : NULL, H, W);
                        continue;
                    }
                    scatter_tiles(m, Y, ss, oidx, b, relu, mask ? mask + off : NULL, pool ? plane : y + off,
                                  H, W);
                    if (pool) pool_output_plane(pool, plane, p, H, W);
                }
            }
        }
    }
}

void ISA_FN(winograd_filter_grad)(const float *x, const float *dy, const struct pool_in *dyp, float *dw,
                                  int N, int C, int K, int H, int W, int m, enum gemm_math math, float *ws) {
    gemm_fn *mm = gemm_of(math);
    CHECK(m >= 2 && m <= 5); /* BY_TILE's cases */
    struct tiling tl = tiling(m, H, W);
    int A2 = tl.a * tl.a;
    size_t dU_floats = (size_t)A2 * C * K;
    size_t stride = grad_thread_floats(C, K, tl), cap = chunk_tiles(tl, C + K);
#pragma omp parallel
    {
        int nt = omp_get_num_threads();
        int g = chunk_size(tl, C + K, N, nt);
        int chunks = (N + g - 1) / g;
        float *dU = ws + stride * (size_t)omp_get_thread_num(); /* this thread's partial */
        size_t vs = slot_stride(C * cap), ds = slot_stride(K * cap);
        float *V = dU + round16(dU_floats); /* slots vs apart */
        float *D = V + A2 * vs;             /* ds apart */
        float *gws = D + A2 * ds;
        float *pad = gws + gemm_workspace_floats(); /* g padded planes, then the offsets */
        int *idx1 = (int *)(pad + (size_t)chunk_images(tl, C + K) * pad_floats(tl)), *idx0 = idx1 + cap;
        int PW1 = tl.TW * m + 2, PW0 = tl.TW * m;
        tile_offsets(tl, 1, g, cap, idx1);
        tile_offsets(tl, 0, g, cap, idx0);
        float beta = 0.0f; /* the thread's first chunk writes its partial, the others add */
#pragma omp for schedule(static)
        for (int ch = 0; ch < chunks; ch++) {
            int n0 = ch * g, gn = N - n0 < g ? N - n0 : g;
            int tiles = gn * tl.T;
            size_t ld = round16(tiles); /* row length of V and D: aligned rows */
            for (int c = 0; c < C; c++) {
                pad_channel(tl, x, NULL, C, c, n0, gn, H, W, 1, pad);
                input_tiles(m, pad, PW1, idx1, V + (size_t)c * ld, vs, tiles, 0, 0);
            }
            for (int o = 0; o < K; o++) {
                pad_channel(tl, dy, dyp, K, o, n0, gn, H, W, 0, pad);
                grad_output_tiles(m, pad, PW0, idx0, D + (size_t)o * ld, ds, tiles);
            }
            /* dU[xi][C][K] += V[xi][C][tiles] D[xi][K][tiles]^T (rows ld apart) */
            for (int xi = 0; xi < A2; xi++)
                mm(C, K, tiles, 1.0f, V + xi * vs, (ptrdiff_t)ld, 1, D + xi * ds, 1, (ptrdiff_t)ld, beta,
                   dU + (size_t)xi * C * K, K, gws);
            beta = 1.0f;
        }
        if (beta == 0.0f) memset(dU, 0, dU_floats * sizeof(float)); /* no chunk here */
#pragma omp barrier
        /* The partials summed in thread order as the filters are transformed back. */
        grad_filters(m, ws, stride, nt, C, K, dw);
    }
}
