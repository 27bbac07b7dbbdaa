/* Direct convolutions on AMX tiles (cpu.h: conv_tiles_*): a stride-1 k x k convolution read
 * straight from zero-padded bf16 copies of its input, without im2col's k^2 copies.
 *
 * The grid. A chunk of nb input maps H x W (padding pad < k) is stored as rows Ws = W + pad
 * long: pad zero rows, then for each image its H rows, each pad zeros then the W pixels, then
 * pad zero rows. Pixel (y, x) of image j sits at (j (H + pad) + y + pad) Ws + x + pad, so the
 * zeros between two rows (between two images) are the right padding of one and the left (top)
 * padding of the next, shared. Output pixel (oy, ox) of image j is grid position
 * q = j L + oy Ws + ox (L = (H + pad) Ws), and tap (ky, kx) reads position q + ky Ws + kx, which
 * is input pixel (oy + ky - pad, ox + kx - pad) or a zero: for every tap, consecutive grid
 * positions read consecutive stored pixels, a tile row. Positions with ox >= Wo or oy >= Ho are
 * computed and dropped. The grid runs over the chunk's images at once (P positions: nb L
 * rounded up to 32), so small maps still make long rows.
 *
 * Sums (the forward; the input gradient is the forward of dy through the rotated, transposed
 * filters with padding k - 1 - pad), per chunk:
 *   xq  [cin/32][R][16]               the input: per 32 channels and position, the 16 bf16
 *                                     pairs of channels (2c, 2c + 1), 64 bytes (a tile row)
 *   Wq  [cout/32][cin/32][k k][2][16][16] the filters: per 32 output channels, 32 input
 *                                     channels and tap, two B tiles (output channels 0-15,
 *                                     16-31), row i the pairs (2i, 2i + 1) of input channels of
 *                                     16 outputs
 *   out [cout][P]                     the sums on the grid, copied out without the dropped
 *                                     positions
 * out[co][q] = sum over taps and channels of xq[.][q + offset(tap)][.] Wq[..][co], in C tiles
 * of 16 positions x 16 output channels, blocks of 32 x 32 (four C tiles, two A, two B),
 * transposed into out. So an A tile is 16 consecutive positions, 1 KB of consecutive memory
 * whatever the tap's offset, and the taps of one channel block read nearly the same lines; the
 * layout before (rows of 16 positions of one channel pair, rows R apart, each split over two
 * cache lines) took 1.6x the L1 misses in a cache model of the 256 -> 256 7x7 forward
 * (cachegrind of the plain-C build: 48 KB L1, 2 MB L2). Each Wq block is read in order; the
 * sums take the input channels' blocks in order, the taps in order within each (sums_chunk).
 *
 * Filter gradient: dwt[tap][ci][co] = sum over q of x_pad[ci][q + offset(tap)] dy[co][q]:
 *   xb  [cin][xb_ld]         the input, bf16 planes (an A tile row: 32 consecutive positions)
 *   dyp [P/2][cout + 16]     dy as bf16 pairs of consecutive positions (0 where dropped), a
 *                            transposition (conv_tiles_grad_pairs)
 *   dwt [k k][cin][cout + 16] this thread's partial sums, loaded into the tiles and stored back
 *                            per chunk; the threads' are summed in thread order at the end, so
 *                            results depend on the thread count, not on timing.
 * (xb_ld >= R and grad_ld: rows padded off the strides that crowd L1 sets.)
 *
 * cin and cout are the channel counts padded with zeros to 32; R = P + (k - 1)(Ws + 1), the reach
 * of the tap offsets past the grid. Operands are rounded as bf16_bits; products summed in float. */
#include "cpu.h"
#include "tiles.h"
#include "transpose.h"

#include <omp.h>

/* Grid positions a chunk aims at. The sums' (512): a chunk's operands stay in L2. The filter
 * gradient's is larger: its sums (dwt, 2.4 MB a thread at 256 x 256 x 3 x 3) live in memory
 * and make one round trip through the tiles a chunk, and a chunk of 2048 positions quarters
 * those trips while what its inner loops read stays within a 2 MB L2 (dyp, 1 MB at 256 output
 * channels, 32 rows of xb and their sums: grad_chunk). */
#define GRID_TARGET 512
#define GRAD_TARGET 2048
#define GRAD_SLICE  256 /* grad_chunk's slices of positions, a multiple of 32 */

struct grid {
    int in, out;             /* channels read and written */
    int H, W, k, pad;        /* the input map and its padding */
    int Ws, Ho, Wo, L;       /* row length, output map, positions per image */
    int nb, P, R, cin, cout; /* images per chunk, grid and row lengths, padded channels */
};

static int round32(int n) { return (n + 31) / 32 * 32; }

/* nb images a chunk: the grid's length P and the rows' R. */
static void set_chunk(struct grid *g, int nb) {
    g->nb = nb;
    g->P = round32(nb * g->L);
    g->R = (int)round16((size_t)g->P + (size_t)(g->k - 1) * (g->Ws + 1));
}

static struct grid grid_of(int in, int out, int H, int W, int k, int pad, int target) {
    struct grid g = {.in = in, .out = out, .H = H, .W = W, .k = k, .pad = pad};
    g.Ws = W + pad;
    g.Ho = H + 2 * pad - k + 1; /* <= H + pad and Wo <= Ws, as pad < k */
    g.Wo = W + 2 * pad - k + 1;
    g.L = (H + pad) * g.Ws;
    set_chunk(&g, target / g.L > 1 ? target / g.L : 1);
    g.cin = round32(in);
    g.cout = round32(out);
    return g;
}

/* g with at most n images a chunk (the workspace is sized for g's own): the batch's, or for the
 * filter gradient the batch over the team, rounded down, so that every thread has a chunk
 * (when the batch has an image for each). */
static struct grid for_batch(struct grid g, int n) {
    if (n > 0 && n < g.nb) set_chunk(&g, n);
    return g;
}

/* The grids of the forward and of the input gradient. */
static struct grid forward_grid(const struct conv_shape *s) {
    return grid_of(s->C, s->K, s->H, s->W, s->k, s->pad, GRID_TARGET);
}
static struct grid backward_grid(const struct conv_shape *s) {
    return grid_of(s->K, s->C, kernels_conv_out(s->H, s->k, s->pad), kernels_conv_out(s->W, s->k, s->pad),
                   s->k, s->k - 1 - s->pad, GRID_TARGET);
}
/* The filter gradient's: the forward's grid in chunks of GRAD_TARGET positions. */
static struct grid grad_grid(const struct conv_shape *s) {
    return grid_of(s->C, s->K, s->H, s->W, s->k, s->pad, GRAD_TARGET);
}

/* Floats of the sums' shared filters, and of one thread's region. */
static size_t sums_filter_floats(const struct grid *g) {
    return round16((size_t)g->k * g->k * g->cin * g->cout / 2);
}
/* Two planes of the larger of the input and output maps (struct maps' buffers). */
static size_t maps_floats(const struct grid *g) {
    size_t in = (size_t)g->H * g->W, out = (size_t)g->Ho * g->Wo;
    return round16(2 * (in > out ? in : out));
}
/* A sums thread's region: xq, sums[cout][P], plane[Ho][Wo] (a pooled output's), the maps'
 * buffers, t[16][R] (pack_pairs' rows), acc[P][32] (sums_chunk's). */
static size_t sums_thread_floats(const struct grid *g) {
    return round16((size_t)g->cin / 2 * g->R) + round16((size_t)g->cout * g->P) +
           round16((size_t)g->Ho * g->Wo) + maps_floats(g) + (size_t)16 * g->R + (size_t)32 * g->P;
}
/* The rows of dyp and dwt: cout words and a tile row more, so that the tile rows grad_chunk
 * reads (cout words apart, a multiple of 1 KB, would gather in a few L1 sets) spread over the
 * sets. */
static size_t grad_ld(const struct grid *g) { return (size_t)g->cout + 16; }

/* The rows of xb: R bf16 or more, 64 past a multiple of 128, so that the rows (an odd multiple
 * of two cache lines past a multiple of 4 KB apart) fall in different L1 sets, and the 32 that
 * grad_chunk reads at once spread over all of them. (Not R itself: the sums' xq wants its
 * 32-channel blocks, R x 64 bytes apart, off a multiple of 4 KB.) */
static size_t xb_ld(const struct grid *g) { return ((size_t)g->R + 63) / 128 * 128 + 64; }

/* A filter gradient thread's region: xb, dyp, rows[16][P] (pack_grad_pairs' t), the maps'
 * buffers, dwt. */
static size_t grad_thread_floats(const struct grid *g) {
    return round16((size_t)g->cin * xb_ld(g) / 2) + round16((size_t)g->P * grad_ld(g) / 2) +
           (size_t)16 * g->P + maps_floats(g) + round16((size_t)g->k * g->k * g->cin * grad_ld(g));
}

#ifdef ISA_IS_GENERIC /* once, not per ISA */
int conv_tiles_fit(const struct conv_shape *s) {
    return s->C >= 16 && s->K >= 16 && s->pad >= 0 && s->pad < s->k && s->H + 2 * s->pad >= s->k &&
           s->W + 2 * s->pad >= s->k;
}

size_t conv_tiles_workspace_floats(const struct conv_shape *s, int threads) {
    struct grid f = forward_grid(s), b = backward_grid(s);
    size_t fwd = sums_filter_floats(&f) + sums_thread_floats(&f) * threads;
    size_t dx = sums_filter_floats(&b) + sums_thread_floats(&b) * threads;
    struct grid d = grad_grid(s);
    size_t dw = grad_thread_floats(&d) * threads;
    size_t most = fwd > dx ? fwd : dx;
    return most > dw ? most : dw;
}

int conv_tiles_trial_images(const struct conv_shape *s, enum conv_pass pass, int threads) {
    struct grid g = pass == CONV_FORWARD         ? forward_grid(s)
                    : pass == CONV_BACKWARD_DATA ? backward_grid(s)
                                                 : grad_grid(s);
    long n = 2L * threads * g.nb;
    return n < s->N ? (int)n : s->N;
}
#endif

#if defined(ISA_HAS_AMX)
/* The lanes of a run's step of 16 from x of n. */
static __mmask16 lanes(int x, int n) { return (__mmask16)(n - x >= 16 ? 0xffffu : (1u << (n - x)) - 1); }
#endif

/* cpu.h: n positions from i of a grid row d, bf16 of a (and b). The rows are short (3 to 33
 * positions: the maps' widths), so the amx builds convert 16 at a time with the rest masked
 * (VCVTNE2PS2BF16 rounds as bf16_bits), where the compiler's loops left up to 15 to scalar
 * code; the generic build keeps the plain loops. */
void ISA_FN(conv_tiles_put_run)(void *d, int pairs, size_t i, const float *a, const float *b, int n) {
    size_t size = pairs ? sizeof(uint32_t) : sizeof(uint16_t), bytes = (size_t)n * size;
    if (!a) {
#if defined(ISA_HAS_AMX)
        if (bytes <= 64) { /* a row's padding: one masked store, not a call */
            __mmask64 m = bytes == 64 ? ~(__mmask64)0 : ((__mmask64)1 << bytes) - 1;
            _mm512_mask_storeu_epi8((char *)d + i * size, m, _mm512_setzero_si512());
            return;
        }
#endif
        memset((char *)d + i * size, 0, bytes);
        return;
    }
#if defined(ISA_HAS_AMX)
    /* word 2 j of a pair vector: a's j (word j of the conversion), word 2 j + 1: b's (16 + j) */
    const __m512i interleave = _mm512_set_epi16(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8,
                                                23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    for (int x = 0; x < n; x += 16) {
        __mmask16 m = lanes(x, n);
        __m512 va = _mm512_maskz_loadu_ps(m, a + x);
        if (pairs) {
            __m512 vb = b ? _mm512_maskz_loadu_ps(m, b + x) : _mm512_setzero_ps();
            __m512i w = _mm512_permutexvar_epi16(interleave, (__m512i)_mm512_cvtne2ps_pbh(vb, va));
            _mm512_mask_storeu_epi32((uint32_t *)d + i + x, m, w);
        } else {
            _mm256_mask_storeu_epi16((uint16_t *)d + i + x, m, (__m256i)_mm512_cvtneps_pbh(va));
        }
    }
#else
    if (pairs) {
        uint32_t *o = (uint32_t *)d + i;
        for (int x = 0; x < n; x++) o[x] = bf16_bits(a[x]) | (b ? bf16_bits(b[x]) << 16 : 0u);
    } else {
        uint16_t *o = (uint16_t *)d + i;
        for (int x = 0; x < n; x++) o[x] = (uint16_t)bf16_bits(a[x]);
    }
#endif
}
#define put_run ISA_FN(conv_tiles_put_run)

/* cpu.h: d[0, n) = s[0, n), d[n, total) = 0, floats: a grid row of dy (s NULL when n is 0). The
 * amx builds store 16 at a time with masks, as put_run, not two calls (memcpy, memset) for a
 * row of 3 to 32 floats (not yet timed on AMX). */
void ISA_FN(conv_tiles_put_floats)(float *d, const float *s, int n, int total) {
#if defined(ISA_HAS_AMX)
    for (int x = 0; x < total; x += 16) {
        __m512 v = x < n ? _mm512_maskz_loadu_ps(lanes(x, n), s + x) : _mm512_setzero_ps();
        _mm512_mask_storeu_ps(d + x, lanes(x, total), v);
    }
#else
    if (n > 0) memcpy(d, s, (size_t)n * sizeof *d);
    memset(d + n, 0, (size_t)(total - n) * sizeof *d);
#endif
}
#define put_floats ISA_FN(conv_tiles_put_floats)

/* Where a pass reads its input maps: the planes of map[N][chans][h][w], or with pool not NULL
 * the 2x2 max pool's backward of pool (struct pool_in: the map is never stored), made plane by
 * plane into a buffer as they are needed. */
struct maps {
    const float *map;
    const struct pool_in *pool;
    int chans, h, w;
};

/* Plane c of image n of m, NULL for c >= chans (a padding channel): a pointer into the map, or
 * made in buf[h][w]. */
static const float *map_plane(const struct maps *m, int n, int c, float *buf) {
    if (c >= m->chans) return NULL;
    size_t at = (size_t)n * m->chans + c, hw = (size_t)m->h * m->w, pooled = (size_t)(m->h / 2) * (m->w / 2);
    if (!m->pool) return m->map + at * hw;
    cpu_maxpool_backward_plane(m->pool->winners + at * pooled, m->pool->dy + at * pooled, buf, m->h, m->w, 2,
                               m->pool->relu);
    return buf;
}

/* A grid row (struct comment) of input channel c (pairs: c and c + 1) of the chunk's cnt images
 * from image n0 of m (an H x W map): the stored rows image after image, zeros in the padding and
 * past cnt images up to R. bufs: two planes for map_plane. */
static void grid_row(const struct grid *g, const struct maps *m, int n0, int cnt, int c, int pairs,
                     float *bufs, void *d) {
    size_t i = 0;
    int present = c < m->chans;
    if (present) {
        put_run(d, pairs, i, NULL, NULL, g->pad * g->Ws);
        i += (size_t)g->pad * g->Ws;
    }
    for (int j = 0; present && j < cnt; j++) {
        const float *a = map_plane(m, n0 + j, c, bufs),
                    *b = pairs ? map_plane(m, n0 + j, c + 1, bufs + (size_t)g->H * g->W) : NULL;
        for (int y = 0; y < g->H; y++, i += (size_t)g->Ws) {
            size_t at = (size_t)y * g->W;
            put_run(d, pairs, i, NULL, NULL, g->pad);
            put_run(d, pairs, i + g->pad, a + at, b ? b + at : NULL, g->W);
        }
        put_run(d, pairs, i, NULL, NULL, g->pad * g->Ws);
        i += (size_t)g->pad * g->Ws;
    }
    put_run(d, pairs, i, NULL, NULL, (int)((size_t)g->R - i));
}

/* cpu.h: d[j][i] = s[i][j] for i, j < 16, 32-bit words (rows ss and ds words apart), in one
 * AVX-512 transpose in the amx builds. */
void ISA_FN(conv_tiles_transpose16)(const uint32_t *s, size_t ss, uint32_t *d, size_t ds) {
#if defined(ISA_HAS_AMX)
    vreg r[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps((const float *)(s + i * ss));
    transpose_vec(r);
    for (int j = 0; j < 16; j++) _mm512_storeu_ps((float *)(d + j * ds), r[j]);
#else
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) d[(size_t)j * ds + i] = s[(size_t)i * ss + j];
#endif
}
#define transpose16 ISA_FN(conv_tiles_transpose16)

/* xq (struct comment): the chunk's input (images n0.. of m), each 32 channels made as 16 grid
 * rows of channel pairs in t[16][R], then transposed 16 positions at a time (R is a multiple
 * of 16). */
static void pack_pairs(const struct grid *g, const struct maps *m, int n0, int cnt, float *bufs, uint32_t *t,
                       uint32_t *xq) {
    for (int cc = 0; cc < g->cin / 32; cc++) {
        for (int p = 0; p < 16; p++) grid_row(g, m, n0, cnt, cc * 32 + 2 * p, 1, bufs, t + (size_t)p * g->R);
        uint32_t *d = xq + (size_t)cc * g->R * 16;
        for (int q = 0; q < g->R; q += 16) transpose16(t + q, g->R, d + (size_t)q * 16, 16);
    }
}

/* xb: the chunk's input (images n0.. of m) as bf16 planes. */
static void pack_planes(const struct grid *g, const struct maps *m, int n0, int cnt, float *bufs,
                        uint16_t *xb) {
    for (int c = 0; c < g->cin; c++) grid_row(g, m, n0, cnt, c, 0, bufs, xb + (size_t)c * xb_ld(g));
}

/* out[pp][ld] (pair words, rows ld apart) = pair(t[i][2 pp], t[i][2 pp + 1]) for the 16
 * rows i of t (rows P floats apart), pp < P / 2, out's columns 0..15: a transposition, as 16 x 16
 * blocks of pair words on AVX-512 (transpose.h; P is a multiple of 32). */
void ISA_FN(conv_tiles_grad_pairs)(const float *t, int P, int ld, uint32_t *out) {
#if defined(ISA_HAS_AMX)
    for (int p0 = 0; p0 < P; p0 += 32) {
        vreg r[16];
        for (int i = 0; i < 16; i++) { /* VCVTNE2PS2BF16 rounds as bf16_bits; words in order */
            const float *row = t + (size_t)i * P + p0;
            r[i] = (vreg)_mm512_cvtne2ps_pbh(_mm512_loadu_ps(row + 16), _mm512_loadu_ps(row));
        }
        transpose_vec(r);
        for (int m = 0; m < 16; m++) _mm512_storeu_ps(out + (size_t)(p0 / 2 + m) * ld, r[m]);
    }
#else
    for (int pp = 0; pp < P / 2; pp++)
        for (int i = 0; i < 16; i++)
            out[(size_t)pp * ld + i] =
                bf16_bits(t[(size_t)i * P + 2 * pp]) | bf16_bits(t[(size_t)i * P + 2 * pp + 1]) << 16;
#endif
}

/* dyp (struct comment) from the chunk's dy (images n0.. of m, Ho x Wo maps), 16 channels at a
 * time through t[16][P], their grid rows in float (0 on dropped positions and padding
 * channels); buf: a plane for map_plane. */
static void pack_grad_pairs(const struct grid *g, const struct maps *m, int n0, int cnt, float *buf, float *t,
                            uint32_t *dyp) {
    for (int c0 = 0; c0 < g->cout; c0 += 16) {
        for (int i = 0; i < 16; i++) {
            float *row = t + (size_t)i * g->P;
            size_t q = 0;
            for (int j = 0; c0 + i < g->out && j < cnt; j++) {
                const float *plane = map_plane(m, n0 + j, c0 + i, buf);
                for (int y = 0; y < g->H + g->pad; y++, q += (size_t)g->Ws) {
                    int kept = y < g->Ho ? g->Wo : 0;
                    put_floats(row + q, kept ? plane + (size_t)y * g->Wo : NULL, kept, g->Ws);
                }
            }
            memset(row + q, 0, ((size_t)g->P - q) * sizeof *row);
        }
        ISA_FN(conv_tiles_grad_pairs)(t, g->P, grad_ld(g), dyp + c0);
    }
}

/* Wq (struct comment) from w[K][C][k][k]: the forward's filters (flip 0: out K, in C), or the
 * input gradient's (flip 1: out C, in K, taps rotated by 180 degrees). Rows split over the
 * calling team. */
static void pack_filters(const struct grid *g, const float *w, int flip, uint16_t *Wq) {
    int k = g->k, chunks = g->cin / 32, rows = k * k * chunks * g->cout;
#pragma omp for schedule(static)
    for (int r = 0; r < rows; r++) { /* tile row i of B tile h of block (rb, cc, tap) */
        int i = r % 16, h = r / 16 % 2, tap = r / 32 % (k * k), cc = r / 32 / (k * k) % chunks,
            rb = r / 32 / (k * k) / chunks;
        int ky = tap / k, kx = tap % k;
        uint16_t *d = Wq + (size_t)r * 32;
        for (int e = 0; e < 32; e++) {
            int co = rb * 32 + h * 16 + e / 2, ci = cc * 32 + 2 * i + e % 2;
            float v = 0.0f;
            if (co < g->out && ci < g->in)
                v = flip ? w[(((size_t)ci * g->out + co) * k + (k - 1 - ky)) * k + (k - 1 - kx)]
                         : w[(((size_t)co * g->in + ci) * k + ky) * k + kx];
            d[e] = (uint16_t)bf16_bits(v);
        }
    }
}

/* Lines [l0, l0 + n) of the first `lines` of a block the tiles load next: line l at p +
 * (l / row_lines) stride + (l % row_lines) 64 bytes (PREFETCHT0; the sums' lines, stored again,
 * are the thread's own, so they arrive exclusive). A tile load waits for its 16 rows, and the
 * tiles' registers are not renamed, so a row that misses L1 stalls the products behind it;
 * spread over the steps before, in shares of n, the prefetches ride the load ports the products
 * leave idle. Nothing where p is NULL. */
static inline void prefetch_share(const void *p, size_t stride, int row_lines, int lines, int l0, int n) {
    if (!p) return;
    int l1 = l0 + n < lines ? l0 + n : lines;
    for (int l = l0; l < l1; l++)
        __builtin_prefetch((const char *)p + (size_t)(l / row_lines) * stride + (size_t)(l % row_lines) * 64,
                           0, 3);
}

/* out[cout][P] = the chunk's sums on the grid (struct comment), per 32 output channels, the
 * input channels' blocks in order and the taps in order within each. Block by block: a block's
 * filters (k k B tile pairs, 18 KB at k = 3) stay in L1 while every 32 positions read them,
 * the partial sums waiting in acc[P][32] between the blocks (a cache model: 2.2 - 3.1 L1
 * misses a TDPBF16PS; 9 with two blocks at a time, the filters evicted). resident: all blocks
 * at once, the C tiles holding each 32 x 32 block's whole sum while every 32 positions read all
 * the filters of their output channels (9). The same bits either way. Each finished block goes
 * through blk[position][output channel] into out. With prefetch (block by block only), the
 * taps of 32 positions prefetch what the next 32 load first: their partial sums (64 lines) and
 * their input's new lines (32; the rest the taps before read). */
static void sums_chunk(const struct grid *g, unsigned how, const uint16_t *Wq, const uint32_t *xq, float *acc,
                       float *out) {
    TILE_REGS;
    int resident = how & CONV_TILES_RESIDENT, prefetch = (how & CONV_TILES_PREFETCH) && !resident;
    int k = g->k, taps = k * k, chunks = g->cin / 32, group = resident ? chunks : 1;
    size_t span = (size_t)(k - 1) * (g->Ws + 1);                        /* the farthest tap's offset */
    int c_per = (64 + taps - 1) / taps, a_per = (32 + taps - 1) / taps; /* prefetches a step */
    float blk[32][32] __attribute__((aligned(64)));
    for (int r0 = 0; r0 < g->cout; r0 += 32)
        for (int c0 = 0; c0 < chunks; c0 += group) {
            int c1 = chunks - c0 < group ? chunks : c0 + group;
            const uint16_t *b0 = Wq + ((size_t)r0 / 32 * chunks + c0) * taps * 32 * 32; /* in order */
            for (int q0 = 0; q0 < g->P; q0 += 32) {
                float *c = acc + (size_t)q0 * 32;
                const uint16_t *b = b0;
                int more = prefetch && q0 + 32 < g->P, st = 0;
                const float *c_next = more && chunks > 1 ? c + 32 * 32 : NULL; /* loaded or stored next */
                const uint32_t *a_next = more ? xq + ((size_t)c0 * g->R + q0 + 32 + span) * 16 : NULL;
                TILE_FENCE();
                if (c0 == 0) TILE_ZERO_C();
                else TILE_LOAD_C(c, 32);
                for (int cc = c0; cc < c1; cc++)
                    for (int ky = 0; ky < k; ky++) {
                        const uint32_t *a = xq + ((size_t)cc * g->R + q0 + (size_t)ky * g->Ws) * 16;
                        for (int kx = 0; kx < k; kx++, a += 16, b += 32 * 32, st++) { /* tap (ky, kx) */
                            TILE_STEP_2X2(a, a + 16 * 16, 64, b, b + 16 * 32, 64);
                            prefetch_share(c_next, 0, 64, 64, st * c_per, c_per);
                            prefetch_share(a_next, 0, 32, 32, st * a_per, a_per);
                        }
                    }
                TILE_STORE_C(c1 < chunks ? c : &blk[0][0], 32);
                TILE_FENCE();
                if (c1 < chunks) continue;
                for (int i = 0; i < 32; i += 16)
                    for (int j = 0; j < 32; j += 16)
                        transpose16((const uint32_t *)&blk[i][j], 32,
                                    (uint32_t *)(out + (size_t)(r0 + j) * g->P + q0 + i), g->P);
            }
        }
}

/* cpu.h: one output plane from the grid, 16 positions a step in the amx builds (put_run). */
void ISA_FN(conv_tiles_plane_out)(const float *o, int Ho, int Wo, int Ws, float bias, int relu,
                                  const float *m, float *d) {
    for (int y = 0; y < Ho; y++, d += Wo, o += Ws) {
        const float *my = m ? m + (size_t)y * Wo : NULL;
#if defined(ISA_HAS_AMX)
        const __m512 vbias = _mm512_set1_ps(bias), zero = _mm512_setzero_ps();
        for (int x = 0; x < Wo; x += 16) {
            __mmask16 k = lanes(x, Wo);
            __m512 v = _mm512_add_ps(_mm512_maskz_loadu_ps(k, o + x), vbias);
            if (relu) v = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(v, zero, _CMP_LE_OQ), v, zero);
            if (my)
                v = _mm512_mask_blend_ps(
                    _mm512_cmp_ps_mask(_mm512_maskz_loadu_ps(k, my + x), zero, _CMP_LE_OQ), v, zero);
            _mm512_mask_storeu_ps(d + x, k, v);
        }
#else
        for (int x = 0; x < Wo; x++) {
            float v = o[x] + bias;
            if (relu) v = v <= 0.0f ? 0.0f : v;
            if (my) v = my[x] <= 0.0f ? 0.0f : v;
            d[x] = v;
        }
#endif
    }
}

/* The chunk's cnt images (from image n0) out of the sums on the grid, out[cout][P]: each plane
 * as plane_out makes it (b[co] added where b is not NULL; mask from image n0), into
 * y[cnt][out][Ho][Wo], or with pool not NULL, through plane[Ho][Wo] into the pool's maps (its
 * images from n0, as cpu_maxpool_plane makes them), y not written. */
static void copy_out(const struct grid *g, const float *out, const float *b, int relu, const float *mask,
                     const struct pool_out *pool, int n0, int cnt, float *y, float *plane) {
    size_t hw = (size_t)g->Ho * g->Wo,
           pooled = (size_t)(g->Ho / (pool ? pool->k : 1)) * (g->Wo / (pool ? pool->k : 1));
    for (int j = 0; j < cnt; j++)
        for (int co = 0; co < g->out; co++) {
            size_t at = ((size_t)j * g->out + co) * hw;
            const float *o = out + (size_t)co * g->P + (size_t)j * g->L;
            ISA_FN(conv_tiles_plane_out)
            (o, g->Ho, g->Wo, g->Ws, b ? b[co] : 0.0f, relu, mask ? mask + at : NULL, pool ? plane : y + at);
            if (pool) {
                size_t p = ((size_t)(n0 + j) * g->out + co) * pooled;
                cpu_maxpool_plane(plane, pool->y + p, pool->winners ? pool->winners + p : NULL, g->Ho, g->Wo,
                                  pool->k);
            }
        }
}

void ISA_FN(conv_tiles_sums)(const struct conv_shape *s, int flip, unsigned how, const float *in,
                             const struct pool_in *in_pool, const float *w, const float *b, int relu,
                             const float *mask, const struct pool_out *pool, float *out, float *ws) {
    CHECK(conv_tiles_fit(s));
    struct grid g = for_batch(flip ? backward_grid(s) : forward_grid(s), s->N);
    struct maps m = {in, in_pool, g.in, g.H, g.W};
    uint16_t *Wq = (uint16_t *)ws;
    size_t filters = sums_filter_floats(&g), region = sums_thread_floats(&g);
    size_t out_image = (size_t)g.out * g.Ho * g.Wo;
    int chunks = (s->N + g.nb - 1) / g.nb;
#pragma omp parallel
    {
        pack_filters(&g, w, flip, Wq); /* the omp for's barrier: ready for every thread */
        float *mine = ws + filters + region * (size_t)omp_get_thread_num();
        uint32_t *xq = (uint32_t *)mine;
        float *sums = mine + round16((size_t)g.cin / 2 * g.R), *plane = sums + round16((size_t)g.cout * g.P);
        float *bufs = plane + round16((size_t)g.Ho * g.Wo);
        uint32_t *t = (uint32_t *)(bufs + maps_floats(&g));
        float *acc = (float *)t + (size_t)16 * g.R;
        tiles_begin();
#pragma omp for schedule(static)
        for (int c = 0; c < chunks; c++) {
            int n0 = c * g.nb, cnt = s->N - n0 < g.nb ? s->N - n0 : g.nb;
            pack_pairs(&g, &m, n0, cnt, bufs, t, xq);
            sums_chunk(&g, how, Wq, xq, acc, sums);
            copy_out(&g, sums, b, relu, mask ? mask + n0 * out_image : NULL, pool, n0, cnt,
                     pool ? NULL : out + n0 * out_image, plane);
        }
        tiles_end();
    }
}

/* dwt[k k][cin][cout] += the chunk's filter gradient (struct comment). Per 32 input channels
 * (their sums, k k 32 (cout + 16) floats, 306 KB at 256 x 256 x 3 x 3, stay in L2 through the
 * chunk), slice by slice of GRAD_SLICE positions, whose input rows and dy pairs (18 - 24 and
 * 16 KB) stay near while every block of 32 output channels and every tap reads them: the taps
 * share the dy tiles, and their input tiles nearly the same lines. A cache model put 128
 * positions a slice at 5.0 - 5.8 L1 misses a TDPBF16PS, 256 at 7.6 - 11, against 16.4 for
 * whole-chunk passes (results.md); on AMX (2026-12-02) 256 took 4 - 5 % less time in all,
 * 7 - 9 % on the 7x7 and 3x3 maps: half the trips of the sums through the tiles. resident:
 * one slice, the whole chunk, the sums making one trip through the tiles a tap and 32 x 32
 * block. Each sum takes the positions in order: the same bits either way. With prefetch, each
 * block's steps prefetch the sums the next block loads (32 rows of 2 lines). */
static void grad_chunk(const struct grid *g, unsigned how, const uint16_t *xb, const uint32_t *dyp,
                       float *dwt) {
    TILE_REGS;
    int k = g->k, slice = how & CONV_TILES_RESIDENT ? g->P : GRAD_SLICE, prefetch = how & CONV_TILES_PREFETCH;
    size_t ld = grad_ld(g);
    size_t a_stride = xb_ld(g) * sizeof *xb, b_stride = ld * sizeof *dyp;
    TILE_FENCE();
    for (int r0 = 0; r0 < g->cin; r0 += 32)
        for (int s0 = 0; s0 < g->P; s0 += slice) {
            int s1 = g->P - s0 < slice ? g->P : s0 + slice, steps = (s1 - s0) / 32,
                per = (64 + steps - 1) / steps;
            for (int c0 = 0; c0 < g->cout; c0 += 32)
                for (int tap = 0; tap < k * k; tap++) {
                    int offset = tap / k * g->Ws + tap % k;
                    float *c = dwt + ((size_t)tap * g->cin + r0) * ld + c0;
                    const float *next = !prefetch           ? NULL
                                        : tap + 1 < k * k   ? c + (size_t)g->cin * ld
                                        : c0 + 32 < g->cout ? dwt + (size_t)r0 * ld + c0 + 32
                                        : s1 < g->P         ? dwt + (size_t)r0 * ld
                                                            : NULL;
                    TILE_LOAD_C(c, ld);
                    for (int q0 = s0; q0 < s1; q0 += 32) {
                        const uint16_t *a = xb + (size_t)r0 * xb_ld(g) + q0 + offset;
                        const uint32_t *bp = dyp + (size_t)(q0 / 2) * ld + c0;
                        TILE_STEP_2X2(a, a + 16 * xb_ld(g), a_stride, bp, bp + 16, b_stride);
                        prefetch_share(next, ld * sizeof *dwt, 2, 64, (q0 - s0) / 32 * per, per);
                    }
                    TILE_STORE_C(c, ld);
                }
        }
    TILE_FENCE();
}

void ISA_FN(conv_tiles_filter_grad)(const struct conv_shape *s, unsigned how, const float *x, const float *dy,
                                    const struct pool_in *dy_pool, float *dw, float *ws) {
    CHECK(conv_tiles_fit(s));
    int team = omp_get_max_threads();
    struct grid g = for_batch(grad_grid(s), s->N / team > 1 ? s->N / team : 1);
    struct maps mx = {x, NULL, g.in, g.H, g.W}, mdy = {dy, dy_pool, g.out, g.Ho, g.Wo};
    size_t region = grad_thread_floats(&g), xb_floats = round16((size_t)g.cin * xb_ld(&g) / 2),
           dyp_floats = round16((size_t)g.P * grad_ld(&g) / 2),
           bufs_at = xb_floats + dyp_floats + (size_t)16 * g.P, dwt_at = bufs_at + maps_floats(&g),
           dwt_floats = (size_t)g.k * g.k * g.cin * grad_ld(&g);
    int chunks = (s->N + g.nb - 1) / g.nb, taps = g.k * g.k;
#pragma omp parallel
    {
        int nt = omp_get_num_threads();
        float *mine = ws + region * (size_t)omp_get_thread_num();
        uint16_t *xb = (uint16_t *)mine;
        uint32_t *dyp = (uint32_t *)(mine + xb_floats);
        float *rows = mine + xb_floats + dyp_floats, *bufs = mine + bufs_at, *dwt = mine + dwt_at;
        memset(dwt, 0, dwt_floats * sizeof *dwt);
        tiles_begin();
#pragma omp for schedule(static)
        for (int c = 0; c < chunks; c++) {
            int n0 = c * g.nb, cnt = s->N - n0 < g.nb ? s->N - n0 : g.nb;
            pack_planes(&g, &mx, n0, cnt, bufs, xb);
            pack_grad_pairs(&g, &mdy, n0, cnt, bufs, rows, dyp);
            grad_chunk(&g, how, xb, dyp, dwt);
        }
        tiles_end();
        /* dw[co][ci][ky][kx] = the threads' dwt[tap][ci][co] summed in thread order (after the
         * omp for's barrier), their rows read along co. */
#pragma omp for schedule(static)
        for (int r = 0; r < taps * s->C; r++) {
            int tap = r / s->C, ci = r % s->C;
            size_t at = ((size_t)tap * g.cin + ci) * grad_ld(&g);
            for (int co = 0; co < s->K; co++) {
                float sum = 0.0f;
                for (int t = 0; t < nt; t++) sum += (ws + region * (size_t)t + dwt_at)[at + co];
                dw[((size_t)co * s->C + ci) * taps + tap] = sum;
            }
        }
    }
}
