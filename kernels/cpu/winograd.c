/* 3x3 "same" convolution by Winograd's minimal filtering F(2x2, 3x3) (Lavin & Gray, 2016).
 *
 * Every 2x2 output tile comes from a 4x4 input tile d; with the 4x4 transform of each filter
 * U = G g G^T and of each input tile V = B^T d B, the tile is Y = A^T [sum over input channels
 * of U (.) V] A. Per transform position xi (16 of them) the channel sum is one matrix product
 *   M[xi][out][t] = U[xi][out][in] V[xi][in][t]        (t: the tiles of a chunk of images)
 * so 16 GEMMs of depth `in` replace one of depth 9*in for 4 output pixels: 2.25x fewer
 * multiply-adds than im2col. Rounding: each output is still a sum of the same products, with
 * transforms whose coefficients are 0, +-1 and +-1/2; the error stays at the float level
 * (measured in tests/test_ops.c against double references).
 *
 *   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1]   G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1]
 *   A^T = [1 1 1 0; 0 1 -1 -1]
 *
 * Images are processed in chunks (one chunk per thread at a time) so each GEMM has a few hundred
 * tile columns; U is computed once per call and shared by all threads.
 *
 * Compiled once per ISA (isa.h), so the transforms' loops (written over whole rows of tiles, with
 * no dependencies between iterations) become vector code of that width. */
#include "cpu.h"
#include "gemm.h"
#include "isa.h"

#include <omp.h>
#include <string.h>

/* Tile columns per GEMM we aim for (N of each of the 16 products). */
#define TARGET_TILES 256

static inline size_t round16(size_t n) { return (n + 15) / 16 * 16; }

static inline int chunk_images(int H, int W) {
    int per_image = (H / 2) * (W / 2);
    return (TARGET_TILES + per_image - 1) / per_image;
}

/* Floats of one plane's transform scratch: 8 x [TH + 1][TW] (input) or 4 x [TH][TW] (output). */
static inline size_t scratch_floats(int H, int W) { return 8 * ((size_t)H / 2 + 1) * (W / 2); }

/* Per-thread floats: V [16][in][T], M [16][out][T], the transform scratch, the GEMM's. */
static size_t thread_floats(int in, int out, int H, int W) {
    size_t T = (size_t)chunk_images(H, W) * (H / 2) * (W / 2);
    return round16(16 * (size_t)in * T) + round16(16 * (size_t)out * T) +
           round16(scratch_floats(H, W)) + gemm_workspace_floats();
}

#ifdef ISA_IS_GENERIC /* once, not per ISA */
int winograd_applies(int in, int out, int H, int W) {
    /* Even sizes only (whole 2x2 tiles); shallow inputs such as RGB are faster as im2col. */
    return H % 2 == 0 && W % 2 == 0 && H >= 4 && W >= 4 && in >= 16 && out >= 16;
}

size_t winograd_workspace_floats(int in, int out, int H, int W, int threads) {
    return round16(16 * (size_t)in * out) + thread_floats(in, out, H, W) * (size_t)threads;
}
#endif

/* U[xi][o][i] = (G g G^T)[xi] for the filter g from output channel o to input channel i:
 * g = w[o][i] (flip == 0, w is [out][in][3][3]) or w[i][o] rotated by 180 degrees (flip == 1,
 * w is [in][out][3][3]: the adjoint, i.e. the input gradient of a forward convolution). */
static void transform_filters(const float *w, int flip, int in, int out, float *U) {
    size_t plane = (size_t)out * in;
#pragma omp for schedule(static)
    for (int o = 0; o < out; o++)
        for (int i = 0; i < in; i++) {
            float g[3][3];
            const float *src = flip ? w + ((size_t)i * out + o) * 9 : w + ((size_t)o * in + i) * 9;
            for (int r = 0; r < 3; r++)
                for (int c = 0; c < 3; c++) g[r][c] = flip ? src[(2 - r) * 3 + (2 - c)] : src[r * 3 + c];
            float t[4][3]; /* G g */
            for (int c = 0; c < 3; c++) {
                t[0][c] = g[0][c];
                t[1][c] = 0.5f * (g[0][c] + g[1][c] + g[2][c]);
                t[2][c] = 0.5f * (g[0][c] - g[1][c] + g[2][c]);
                t[3][c] = g[2][c];
            }
            for (int r = 0; r < 4; r++) { /* (G g) G^T */
                float u[4] = {t[r][0], 0.5f * (t[r][0] + t[r][1] + t[r][2]),
                              0.5f * (t[r][0] - t[r][1] + t[r][2]), t[r][2]};
                for (int c = 0; c < 4; c++) U[(size_t)(r * 4 + c) * plane + (size_t)o * in + i] = u[c];
            }
        }
}

/* V[xi][c][t] for every tile t = ty*TW + tx of one channel plane x[H][W].
 *
 * Tile t reads rows 2ty-1 .. 2ty+2 and columns 2tx-1 .. 2tx+2 of x (zero outside). With the
 * padded plane P[r][p] = x[r-1][p-1], its 4x4 input is P[2ty + j][2tx + i]. The plane is first
 * split into 8 arrays of [TH + 1][TW]: by row parity (even rows r = 2a, odd rows r = 2a + 1) and
 * by column i of the tile (P[r][2tx + i], i = 0..3). Row j of tile t is then element t (j < 2)
 * or t + TW (j >= 2) of the even or odd array, so the transform is one flat loop over all the
 * plane's tiles: full vectors even for 8x8 planes (16 tiles). */
static void transform_plane(const float *x, int H, int W, float *V, size_t xi_stride,
                            float *scratch) {
    int TH = H / 2, TW = W / 2, T = TH * TW;
    size_t A = (size_t)(TH + 1) * TW;
    float *restrict part = scratch; /* [parity][column i][TH + 1][TW] */
    for (int r = 0; r < H + 2; r++) {
        float *restrict d0 = part + ((size_t)(r % 2) * 4) * A + (size_t)(r / 2) * TW;
        float *restrict d1 = d0 + A, *restrict d2 = d1 + A, *restrict d3 = d2 + A;
        if (r == 0 || r == H + 1) {
            for (int tx = 0; tx < TW; tx++) d0[tx] = d1[tx] = d2[tx] = d3[tx] = 0.0f;
            continue;
        }
        const float *restrict xr = x + (size_t)(r - 1) * W;
        d0[0] = 0.0f;
#pragma omp simd
        for (int tx = 1; tx < TW; tx++) d0[tx] = xr[2 * tx - 1];
#pragma omp simd
        for (int tx = 0; tx < TW; tx++) {
            d1[tx] = xr[2 * tx];
            d2[tx] = xr[2 * tx + 1];
        }
#pragma omp simd
        for (int tx = 0; tx < TW - 1; tx++) d3[tx] = xr[2 * tx + 2];
        d3[TW - 1] = 0.0f;
    }
    const float *restrict ev = part, *restrict od = part + 4 * A;
    float *restrict v[16];
    for (int xi = 0; xi < 16; xi++) v[xi] = V + (size_t)xi * xi_stride;
#pragma omp simd
    for (int t = 0; t < T; t++) {
        float d[4][4];
        for (int i = 0; i < 4; i++) {
            d[0][i] = ev[i * A + t];
            d[1][i] = od[i * A + t];
            d[2][i] = ev[i * A + t + TW];
            d[3][i] = od[i * A + t + TW];
        }
        float r[4][4]; /* B^T d */
        for (int i = 0; i < 4; i++) {
            r[0][i] = d[0][i] - d[2][i];
            r[1][i] = d[1][i] + d[2][i];
            r[2][i] = d[2][i] - d[1][i];
            r[3][i] = d[1][i] - d[3][i];
        }
        for (int q = 0; q < 4; q++) { /* (B^T d) B */
            v[q * 4 + 0][t] = r[q][0] - r[q][2];
            v[q * 4 + 1][t] = r[q][1] + r[q][2];
            v[q * 4 + 2][t] = r[q][2] - r[q][1];
            v[q * 4 + 3][t] = r[q][1] - r[q][3];
        }
    }
}

/* y[H][W] of one output channel from M[xi][t] (t over the plane's tiles): Y = A^T M A per tile,
 * as one flat loop into 4 arrays (one per output position in the tile), then interleaved into
 * y with the bias, then ReLU (relu) or the ReLU-backward mask (mask: y = mask > 0 ? y : 0). */
static void untransform_plane(const float *M, size_t xi_stride, float bias, int relu,
                              const float *mask, float *y, int H, int W, float *scratch) {
    int TH = H / 2, TW = W / 2, T = TH * TW;
    const float *restrict m[16];
    for (int xi = 0; xi < 16; xi++) m[xi] = M + (size_t)xi * xi_stride;
    float *restrict q00 = scratch, *restrict q01 = q00 + T, *restrict q10 = q01 + T;
    float *restrict q11 = q10 + T;
#pragma omp simd
    for (int t = 0; t < T; t++) {
        float s0[4], s1[4]; /* A^T M: rows */
        for (int j = 0; j < 4; j++) {
            s0[j] = m[j][t] + m[4 + j][t] + m[8 + j][t];
            s1[j] = m[4 + j][t] - m[8 + j][t] - m[12 + j][t];
        }
        q00[t] = s0[0] + s0[1] + s0[2] + bias;
        q01[t] = s0[1] - s0[2] - s0[3] + bias;
        q10[t] = s1[0] + s1[1] + s1[2] + bias;
        q11[t] = s1[1] - s1[2] - s1[3] + bias;
    }
    for (int ty = 0; ty < TH; ty++) {
        float *restrict y0 = y + (size_t)(2 * ty) * W, *restrict y1 = y0 + W;
        const float *a = q00 + ty * TW, *b = q01 + ty * TW, *c = q10 + ty * TW, *d = q11 + ty * TW;
#pragma omp simd
        for (int tx = 0; tx < TW; tx++) {
            y0[2 * tx] = a[tx];
            y0[2 * tx + 1] = b[tx];
            y1[2 * tx] = c[tx];
            y1[2 * tx + 1] = d[tx];
        }
    }
    if (relu)
#pragma omp simd
        for (int i = 0; i < H * W; i++) y[i] = y[i] > 0.0f ? y[i] : 0.0f;
    if (mask)
#pragma omp simd
        for (int i = 0; i < H * W; i++) y[i] = mask[i] > 0.0f ? y[i] : 0.0f;
}

void ISA_FN(winograd_conv3x3)(const float *x, const float *w, int flip, const float *bias, int relu,
                      const float *mask, float *y, int N, int in, int out, int H, int W,
                      float *ws) {
    int TH = H / 2, TW = W / 2, per_image = TH * TW;
    size_t HW = (size_t)H * W;
    float *U = ws;
    float *thread_base = ws + round16(16 * (size_t)in * out);
    size_t stride = thread_floats(in, out, H, W);
#pragma omp parallel
    {
        int nt = omp_get_num_threads();
        /* Up to chunk_images() images per chunk, but at least one chunk per thread. */
        int g = chunk_images(H, W), fair = (N + nt - 1) / nt;
        if (g > fair) g = fair;
        int chunks = (N + g - 1) / g;
        size_t T = (size_t)chunk_images(H, W) * per_image; /* capacity */
        float *V = thread_base + stride * (size_t)omp_get_thread_num();
        float *Mt = V + round16(16 * (size_t)in * T);
        float *scratch = Mt + round16(16 * (size_t)out * T);
        float *gws = scratch + round16(scratch_floats(H, W));
        transform_filters(w, flip, in, out, U); /* ends with the barrier of its omp for */
#pragma omp for schedule(static)
        for (int ch = 0; ch < chunks; ch++) {
            int n0 = ch * g, gn = N - n0 < g ? N - n0 : g;
            int tiles = gn * per_image;
            for (int li = 0; li < gn; li++)
                for (int c = 0; c < in; c++)
                    transform_plane(x + ((size_t)(n0 + li) * in + c) * HW, H, W,
                                    V + (size_t)c * tiles + (size_t)li * per_image,
                                    (size_t)in * tiles, scratch);
            for (int xi = 0; xi < 16; xi++)
                gemm(out, tiles, in, 1.0f, U + (size_t)xi * out * in, in, 1,
                     V + (size_t)xi * in * tiles, tiles, 1, 0.0f, Mt + (size_t)xi * out * tiles,
                     tiles, gws);
            for (int li = 0; li < gn; li++)
                for (int o = 0; o < out; o++) {
                    size_t off = ((size_t)(n0 + li) * out + o) * HW;
                    untransform_plane(Mt + (size_t)o * tiles + (size_t)li * per_image,
                                      (size_t)out * tiles, bias ? bias[o] : 0.0f, relu,
                                      mask ? mask + off : NULL, y + off, H, W, scratch);
                }
        }
    }
}
