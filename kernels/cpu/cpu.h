/* CPU implementations of the ops in kernels/kernels.h, one file per op (input.c, conv.c, relu.c,
 * gelu.c, maxpool.c, batchnorm.c, linear.c, softmax_xent.c (and the TTA sum of logits), sgd.c: the SGD and
 * lookahead updates), gathered into the table by backend.c. Contracts are those of struct kernels.
 * Multi-threaded with OpenMP over the current team size; static schedules, so results are
 * reproducible for a given thread count. */
#ifndef KERNELS_CPU_CPU_H
#define KERNELS_CPU_CPU_H

#include "../kernels.h"
#include "gemm.h"

#include <stddef.h>

/* n floats rounded up to a multiple of 16: a workspace's regions start 64 bytes aligned. */
static inline size_t round16(size_t n) { return (n + 15) / 16 * 16; }

/* k, once kernels_check found it complete (else exits naming the missing op: an internal
 * error); the CPU tables' constructors (backend.c, bf16_act.c) call it. */
const struct kernels *cpu_table_checked(const struct kernels *k);

void cpu_input_prepare(const unsigned char *img, const int *geom, void *x, int N, const float *scale,
                       const float *shift, int reflect);
void cpu_patch_covariance(const unsigned char *img, int n, const float *scale, const float *shift,
                          double *part);
size_t cpu_conv_workspace(const struct conv_shape *s, unsigned passes);
void cpu_conv_describe(const struct conv_shape *s, enum conv_pass pass, size_t ws_bytes, char *buf,
                       size_t size);
void cpu_conv_describe_bf16(const struct conv_shape *s, enum conv_pass pass, size_t ws_bytes, char *buf,
                            size_t size);
void cpu_conv_forward(const struct conv_shape *s, const void *x, const float *w, const float *b, void *y,
                      enum conv_act act, void *ws, size_t ws_bytes);
void cpu_conv_pool_forward(const struct conv_shape *s, const void *x, const float *w, const float *b,
                           enum conv_act act, int pk, void *full, void *y, unsigned char *winners, void *ws,
                           size_t ws_bytes);
void cpu_conv_backward(const struct conv_shape *s, const void *x, const float *w, const void *dy, void *dx,
                       float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes);
void cpu_conv_pool_backward(const struct conv_shape *s, const void *x, const float *w, const void *dyp,
                            const unsigned char *winners, int pk, int relu, void *full, void *dx, float *dw,
                            float *db, const void *dx_mask, void *ws, size_t ws_bytes);
/* The bf16 table's convolution and linear layer: operands rounded to bf16 for the products
 * (gemm_bf16), everything else as the float ones. */
void cpu_conv_forward_bf16(const struct conv_shape *s, const void *x, const float *w, const float *b, void *y,
                           enum conv_act act, void *ws, size_t ws_bytes);
void cpu_conv_pool_forward_bf16(const struct conv_shape *s, const void *x, const float *w, const float *b,
                                enum conv_act act, int pk, void *full, void *y, unsigned char *winners,
                                void *ws, size_t ws_bytes);
void cpu_conv_backward_bf16(const struct conv_shape *s, const void *x, const float *w, const void *dy,
                            void *dx, float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes);
void cpu_conv_pool_backward_bf16(const struct conv_shape *s, const void *x, const float *w, const void *dyp,
                                 const unsigned char *winners, int pk, int relu, void *full, void *dx,
                                 float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes);
void cpu_linear_forward_bf16(const void *x, const float *w, const float *b, void *y, int N, int I, int O,
                             float scale, void *ws, size_t ws_bytes);
void cpu_linear_backward_bf16(const void *x, const float *w, const void *dy, void *dx, float *dw, float *db,
                              int N, int I, int O, float scale, void *ws, size_t ws_bytes);
void cpu_relu_forward(const void *x, void *y, size_t n);
void cpu_relu_backward(const void *y, const void *dy, void *dx, size_t n);
void cpu_gelu_forward(const void *x, void *y, size_t n);
void cpu_gelu_backward(const void *x, const void *dy, void *dx, size_t n);
void cpu_maxpool_forward(const void *x, void *y, unsigned char *idx, int N, int C, int H, int W, int k);
/* One plane of cpu_maxpool_forward, no threads of its own: y[H/k][W/k] and the winners (idx
 * NULL: none) from x[H][W]; for a convolution that pools its output as it writes it. */
void cpu_maxpool_plane(const float *x, float *y, unsigned char *idx, int H, int W, int k);
void cpu_maxpool_backward(const unsigned char *idx, const void *dy, void *dx, int N, int C, int H, int W,
                          int k, int relu);
/* One plane of cpu_maxpool_backward, no threads of its own: dx[H][W] from dy[H/k][W/k] and the
 * winners idx[H/k][W/k]. */
void cpu_maxpool_backward_plane(const unsigned char *idx, const float *dy, float *dx, int H, int W, int k,
                                int relu);
void cpu_batchnorm_forward_train(const void *x, const float *gamma, const float *beta, void *y,
                                 float *save_mean, float *save_invstd, float *running_mean,
                                 float *running_var, float momentum, float eps, int N, int C, int HW,
                                 int gelu);
void cpu_batchnorm_forward_eval(const void *x, const float *gamma, const float *beta,
                                const float *running_mean, const float *running_var, float eps, void *y,
                                int N, int C, int HW, int gelu);
void cpu_batchnorm_backward(const void *x, const void *dy, const float *gamma, const float *beta,
                            const float *save_mean, const float *save_invstd, void *dx, float *dgamma,
                            float *dbeta, int N, int C, int HW, int gelu);
size_t cpu_linear_workspace(int N, int I, int O);
void cpu_linear_forward(const void *x, const float *w, const float *b, void *y, int N, int I, int O,
                        float scale, void *ws, size_t ws_bytes);
void cpu_linear_backward(const void *x, const float *w, const void *dy, void *dx, float *dw, float *db, int N,
                         int I, int O, float scale, void *ws, size_t ws_bytes);
void cpu_softmax_xent(const void *logits, const int *labels, void *dlogits, float *out, int N, int classes,
                      float smoothing, enum xent_reduction reduction);
void cpu_sgd_update(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                    const struct sgd_hyper *h, int nesterov);
void cpu_lookahead_update(float *p, float *ema, size_t n, const float *weight);
void cpu_scalars_set(float *dst, const float *v, int n);
void cpu_logits_add(const void *z, float *sum, size_t n, float weight, int add);

/* Internal to the convolution (conv.c uses winograd.c for 3x3 "same" convolutions, see there;
 * m: the output tile, 2 to 5). Workspace floats for threads threads: of winograd_conv3x3 from
 * `in` to `out` channels, and of winograd_filter_grad. */
size_t winograd_conv_workspace_floats(int in, int out, int H, int W, int m, int threads);
size_t winograd_filter_grad_workspace_floats(int C, int K, int H, int W, int m, int threads);
/* A max pool that winograd_conv3x3 applies to each output plane as it writes it
 * (conv_pool_forward): windows k; y[N][out][H/k][W/k] and the winners (NULL: none) as
 * cpu_maxpool_forward writes them. */
struct pool_out {
    int k;
    float *y;
    unsigned char *winners;
};
/* A gradient map t[N][chans][H][W] given as the 2x2 max pool's backward would write it
 * (conv_pool_backward): dy[N][chans][H/2][W/2] routed to each window's winner (winners, as
 * cpu_maxpool_forward wrote them), 0 elsewhere, and 0 where relu and the winner does not pass
 * (cpu_maxpool_backward's). The Winograd passes read it into their padded planes as they go,
 * so the map itself is never stored. */
struct pool_in {
    const float *dy;
    const unsigned char *winners;
    int relu;
};
/* These two dispatch to the ISA path in use (gemm_dispatch.c), like gemm().
 * y[N][out][H][W] = conv3x3 pad 1 of x[N][in][H][W] (or of the map xp gives, when not NULL) by
 * w[out][in][3][3] (flip 0), or by w[in][out][3][3] rotated 180 degrees (flip 1: the input
 * gradient), + bias[out] (when not NULL), then ReLU (relu) or the ReLU-backward mask
 * (mask[N][out][H][W], when not NULL); with pool not NULL, its pooled maps instead of y (which
 * is then not written). */
void winograd_conv3x3(const float *x, const struct pool_in *xp, const float *w, int flip, const float *bias,
                      int relu, const float *mask, const struct pool_out *pool, float *y, int N, int in,
                      int out, int H, int W, int m, enum gemm_math math, float *ws);
/* dw[K][C][3][3] = the filter gradient of that convolution (flip 0, C -> K), from x[N][C][H][W]
 * and dy[N][K][H][W] (or the map dyp gives, when not NULL), summed over the batch. */
void winograd_filter_grad(const float *x, const float *dy, const struct pool_in *dyp, float *dw, int N, int C,
                          int K, int H, int W, int m, enum gemm_math math, float *ws);
typedef void winograd_fn(const float *x, const struct pool_in *xp, const float *w, int flip,
                         const float *bias, int relu, const float *mask, const struct pool_out *pool,
                         float *y, int N, int in, int out, int H, int W, int m, enum gemm_math math,
                         float *ws);
typedef void winograd_grad_fn(const float *x, const float *dy, const struct pool_in *dyp, float *dw, int N,
                              int C, int K, int H, int W, int m, enum gemm_math math, float *ws);
winograd_fn winograd_conv3x3_generic, winograd_conv3x3_avx2, winograd_conv3x3_avx512;
winograd_grad_fn winograd_filter_grad_generic, winograd_filter_grad_avx2, winograd_filter_grad_avx512;

/* Direct convolutions on AMX tiles (conv_tiles.c, compiled as "amx" and, the same operations in
 * plain C, "generic": the bf16 paths "amx" and "amx-emulated"; conv.c takes them on those
 * paths for the shapes conv_tiles_fit accepts: 16+ channels on both sides, pad < k). Stride 1,
 * operands rounded as gemm_bf16 rounds them, products summed in float; ws holds
 * conv_tiles_workspace_floats(s, threads) floats (64-byte aligned), threads the team the call
 * starts.
 *   conv_tiles_sums, flip 0: out = y[N][K][Ho][Wo] = conv(in = x[N][C][H][W], w[K][C][k][k]) +
 *     b[K] (NULL: none), ReLU'd when relu; flip 1: out = dx[N][C][H][W] from in = dy[N][K][Ho][Wo]
 *     (dy through the 180-degree rotated, transposed filters), 0 where mask[N][C][H][W] <= 0
 *     when mask is not NULL. With pool not NULL (struct pool_out), each output plane is pooled
 *     as it is made, into the pool's maps, and out is not written.
 *   conv_tiles_filter_grad: dw[K][C][k][k] from x and dy, summed over the batch (per thread,
 *     then over the threads in order: the same bits for a given thread count).
 * how: CONV_TILES_RESIDENT: the C tiles hold each block of sums as long as they can (the sums'
 * whole sum, the filter gradient's whole chunk), the other operands read from L2; without it
 * the loops are blocked for L1, the sums making more trips through memory. CONV_TILES_PREFETCH:
 * software prefetches of what the tiles load next (conv_tiles.c; the resident sums take none).
 * The same bits whatever how. CONV_TILES_FIND, a path's how only: cpu_conv_tiles_sums /
 * _filter_grad time the candidates at the first call of each shape and pass and keep the fastest
 * (conv_tiles_find); the other paths pass their own (gemm_dispatch.c: "amx" and "amx-emulated"
 * find, "amx-prefetch" prefetches, "amx-resident" is resident, "amx-noprefetch" neither).
 * Where in_pool (dy_pool) is not NULL, in (dy) is NULL and the map is the one it gives (struct
 * pool_in: a 2x2 max pool's backward), made plane by plane as the packing reads it.
 * cpu_conv_tiles_sums / _filter_grad run the bf16 path in use, which must work on tiles. */
int conv_tiles_fit(const struct conv_shape *s);
/* 1 when the bf16 path in use has the direct convolutions ("amx", "amx-emulated"; not
 * "amx-im2col", the tiles with im2col for every pass, kept for comparisons). */
int conv_tiles_direct(void);
size_t conv_tiles_workspace_floats(const struct conv_shape *s, int threads);
enum { CONV_TILES_RESIDENT = 1, CONV_TILES_PREFETCH = 2, CONV_TILES_FIND = 4 };
typedef void conv_tiles_sums_fn(const struct conv_shape *s, int flip, unsigned how, const float *in,
                                const struct pool_in *in_pool, const float *w, const float *b, int relu,
                                const float *mask, const struct pool_out *pool, float *out, float *ws);
typedef void conv_tiles_grad_fn(const struct conv_shape *s, unsigned how, const float *x, const float *dy,
                                const struct pool_in *dy_pool, float *dw, float *ws);
conv_tiles_sums_fn conv_tiles_sums_amx, conv_tiles_sums_amxcost, conv_tiles_sums_generic;
void cpu_conv_tiles_sums(const struct conv_shape *s, int flip, const float *in, const struct pool_in *in_pool,
                         const float *w, const float *b, int relu, const float *mask,
                         const struct pool_out *pool, float *out, float *ws);
conv_tiles_grad_fn conv_tiles_filter_grad_amx, conv_tiles_filter_grad_amxcost, conv_tiles_filter_grad_generic;
void cpu_conv_tiles_filter_grad(const struct conv_shape *s, const float *x, const float *dy,
                                const struct pool_in *dy_pool, float *dw, float *ws);

/* The tiles' loops chosen by timing (conv_tiles_find.c), as cuDNN's find chooses algorithms:
 * conv_tiles_find returns the how of the fastest candidate for pass `pass` of shape s, timing
 * them at its first call for that shape and pass: run(t, how, ctx) runs the pass with `how` on
 * shape t, s with its first conv_tiles_trial_images(s, pass, threads) images only (two chunks a
 * thread, at most N), CONV_TILES_CANDIDATES candidates (prefetch, the default, which wins ties;
 * resident; plain), alternated twice, the fastest of each kept. The results of those
 * images are written and must be written again by the call. Later calls return the choice made.
 * Outside parallel regions only. conv_tiles_found: the choice for s and pass (NULL: not timed
 * yet); conv_tiles_forget drops every choice (gemm_bf16_select does: another path's code);
 * conv_tiles_find_spent: the shapes and passes timed since, and *seconds their trials took;
 * conv_tiles_describe_found: ", loops <how> (ms on <n> images: <each candidate's time>)" for
 * logs. */
enum { CONV_TILES_CANDIDATES = 3 };
struct conv_tiles_found {
    struct conv_shape shape;
    enum conv_pass pass;
    unsigned how;                          /* the fastest candidate's */
    int images;                            /* the trial's */
    double seconds[CONV_TILES_CANDIDATES]; /* each candidate's fastest, in conv_tiles_candidate order */
};
typedef void conv_tiles_run_fn(const struct conv_shape *t, unsigned how, void *ctx);
unsigned conv_tiles_find(const struct conv_shape *s, enum conv_pass pass, conv_tiles_run_fn *run, void *ctx);
const struct conv_tiles_found *conv_tiles_found(const struct conv_shape *s, enum conv_pass pass);
void conv_tiles_forget(void);
int conv_tiles_find_spent(double *seconds);
int conv_tiles_trial_images(const struct conv_shape *s, enum conv_pass pass, int threads);
unsigned conv_tiles_candidate(int c);
const char *conv_tiles_how_name(unsigned how);
void conv_tiles_describe_found(const struct conv_shape *s, enum conv_pass pass, char *buf, size_t size);
/* 1 when the bf16 path in use finds its tiles' loops (CONV_TILES_FIND). */
int conv_tiles_finds(void);
/* Internal to conv_tiles.c, for tests: out[pp][cout] (uint32_t bf16 pair words, rows cout apart,
 * columns 0..15 written) = (t[i][2 pp], t[i][2 pp + 1]) rounded as bf16_bits, for the 16 rows i of
 * t[16][P] and pp < P / 2 (P a multiple of 32). The amx build runs AVX-512 (and AVX512_BF16)
 * only, no tile instruction. */
/* Internal to conv_tiles.c, for tests (amx's AVX-512 code against the plain-C build):
 *   conv_tiles_put_run: n positions from i of a grid row d, bf16 of a[0..n) (NULL: zeros);
 *     with pairs, d holds uint32_t pairs and b (NULL: zeros) gives their high halves, else d
 *     holds uint16_t; rounded as bf16_bits.
 *   conv_tiles_put_floats: d[0, n) = s[0, n) (s NULL when n is 0), d[n, total) = 0.
 *   conv_tiles_plane_out: d[Ho][Wo] = o's rows (Ws floats apart, the first Wo of each) + bias,
 *     ReLU'd where relu, or taken through a ReLU's backward where m (a mask plane [Ho][Wo]) is
 *     not NULL: 0 where m <= 0 (a NaN passes). */
typedef void conv_tiles_put_run_fn(void *d, int pairs, size_t i, const float *a, const float *b, int n);
typedef void conv_tiles_plane_out_fn(const float *o, int Ho, int Wo, int Ws, float bias, int relu,
                                     const float *m, float *d);
conv_tiles_put_run_fn conv_tiles_put_run_amx, conv_tiles_put_run_amxcost, conv_tiles_put_run_generic;
typedef void conv_tiles_put_floats_fn(float *d, const float *s, int n, int total);
conv_tiles_put_floats_fn conv_tiles_put_floats_amx, conv_tiles_put_floats_amxcost,
    conv_tiles_put_floats_generic;
conv_tiles_plane_out_fn conv_tiles_plane_out_amx, conv_tiles_plane_out_amxcost, conv_tiles_plane_out_generic;
void conv_tiles_grad_pairs_amx(const float *t, int P, int ld, uint32_t *out);
void conv_tiles_grad_pairs_amxcost(const float *t, int P, int ld, uint32_t *out);
void conv_tiles_grad_pairs_generic(const float *t, int P, int ld, uint32_t *out);
/* Internal to conv_tiles.c, for tests: d[j][i] = s[i][j] for i, j < 16, 32-bit words, rows ss
 * (of s) and ds (of d) words apart; the amx build runs AVX-512 only. */
typedef void conv_tiles_transpose16_fn(const uint32_t *s, size_t ss, uint32_t *d, size_t ds);
conv_tiles_transpose16_fn conv_tiles_transpose16_amx, conv_tiles_transpose16_amxcost,
    conv_tiles_transpose16_generic;

/* The direct forward of a convolution on few input channels (small_conv.c, compiled per ISA),
 * C k^2 <= SMALL_CONV_CKK, with its bias and activation; bf16 rounds the operands of the
 * products to bf16. ws holds cpu_small_conv_workspace_floats(s, threads) floats, threads the
 * team the call starts. cpu_small_conv_forward runs the path in use (gemm_dispatch.c). */
#define SMALL_CONV_CKK 27
typedef void small_conv_fn(const struct conv_shape *s, const float *x, const float *w, const float *b,
                           float *y, enum conv_act act, int bf16, float *ws);
typedef size_t small_conv_ws_fn(const struct conv_shape *s, int threads);
small_conv_fn small_conv_forward_generic, small_conv_forward_avx2, small_conv_forward_avx512;
small_conv_ws_fn small_conv_workspace_floats_generic, small_conv_workspace_floats_avx2,
    small_conv_workspace_floats_avx512;
void cpu_small_conv_forward(const struct conv_shape *s, const float *x, const float *w, const float *b,
                            float *y, enum conv_act act, int bf16, float *ws);
/* The filter gradient of such a convolution, float products: dw[K][C k^2] and, db not NULL,
 * db[K], from x and dy, in the same workspace. */
typedef void small_conv_grad_fn(const struct conv_shape *s, const float *x, const float *dy, float *dw,
                                float *db, float *ws);
small_conv_grad_fn small_conv_filter_grad_generic, small_conv_filter_grad_avx2, small_conv_filter_grad_avx512;
void cpu_small_conv_filter_grad(const struct conv_shape *s, const float *x, const float *dy, float *dw,
                                float *db, float *ws);
size_t cpu_small_conv_workspace_floats(const struct conv_shape *s, int threads);

/* GELU's ISA paths (gelu.c, compiled per ISA); cpu_gelu_forward/backward call the one in use. */
typedef void gelu_forward_fn(const float *x, float *y, size_t n);
typedef void gelu_backward_fn(const float *x, const float *dy, float *dx, size_t n);
gelu_forward_fn gelu_forward_generic, gelu_forward_avx2, gelu_forward_avx512;
gelu_backward_fn gelu_backward_generic, gelu_backward_avx2, gelu_backward_avx512;
/* Batch norm's fused GELU on one image, no threads of its own (gelu.c): y = GELU(z) and
 * g = dy * GELU'(z), z = x * scale + shift with scale[n] and shift[n] per element;
 * cpu_gelu_affine: the pair of the path in use. */
typedef void gelu_affine_forward_fn(const float *x, float *y, size_t n, const float *scale,
                                    const float *shift);
typedef void gelu_affine_backward_fn(const float *x, const float *dy, float *g, size_t n, const float *scale,
                                     const float *shift);
gelu_affine_forward_fn gelu_affine_forward_generic, gelu_affine_forward_avx2, gelu_affine_forward_avx512;
gelu_affine_backward_fn gelu_affine_backward_generic, gelu_affine_backward_avx2, gelu_affine_backward_avx512;
struct gelu_affine {
    gelu_affine_forward_fn *forward;
    gelu_affine_backward_fn *backward;
};
struct gelu_affine cpu_gelu_affine(void);

#endif
