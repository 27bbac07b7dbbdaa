/* The CPU twin of cuda-bf16 (kernels_cpu_bf16_act, kernels.h): activations stored in bf16.
 * Each op widens its bf16 inputs into float copies, runs cpu-bf16's op on them (bf16 products
 * in the convolutions and linear layers, float everywhere else) and rounds its outputs to bf16
 * once. That is the contract of a table with act_size 2, written the plainest way, so tests
 * and the model can check the bf16-activation path where no GPU is: every op copies, so it is
 * slower than cpu-bf16 and no program runs on it. */
#include "../../common/err.h"
#include "../kernels.h"
#include "cpu.h"

#include <stdlib.h>

#define BF16 2 /* bytes of an activation element here */

/* The table whose ops run on the widened copies: cpu-bf16's. */
static const struct kernels *base(void) { return kernels_cpu_bf16(); }

/* A float copy of n activations at a (NULL for NULL; the caller frees it), and room for n
 * outputs (NULL when the output a is NULL: not wanted; narrow rounds it into a and frees it). */
static float *widen(const void *a, size_t n) {
    if (!a) return NULL;
    float *t = XALLOC((n ? n : 1) * sizeof(float));
    kernels_act_to_float(BF16, a, t, n);
    return t;
}
static float *room(const void *a, size_t n) { return a ? XALLOC((n ? n : 1) * sizeof(float)) : NULL; }
/* t rounded into a (nothing when a is NULL), then t freed. */
static void narrow(float *t, void *a, size_t n) {
    if (a) kernels_act_from_float(BF16, t, a, n);
    free(t);
}

static void input_prepare(const unsigned char *img, const int *geom, void *x, int N, const float *scale,
                          const float *shift, int reflect) {
    size_t n = (size_t)N * 3 * 32 * 32; /* x[N][3][32][32] */
    float *tx = room(x, n);
    base()->input_prepare(img, geom, tx, N, scale, shift, reflect);
    narrow(tx, x, n);
}

/* The elements of a convolution's input (*nx) and output (*ny). */
static void conv_sizes(const struct conv_shape *s, size_t *nx, size_t *ny) {
    *nx = (size_t)s->N * s->C * s->H * s->W;
    *ny = (size_t)s->N * s->K * kernels_conv_out(s->H, s->k, s->pad) * kernels_conv_out(s->W, s->k, s->pad);
}

static void conv_forward(const struct conv_shape *s, const void *x, const float *w, const float *b, void *y,
                         enum conv_act act, void *ws, size_t ws_bytes) {
    size_t nx, ny;
    conv_sizes(s, &nx, &ny);
    float *tx = widen(x, nx), *ty = room(y, ny);
    base()->conv_forward(s, tx, w, b, ty, act, ws, ws_bytes);
    free(tx);
    narrow(ty, y, ny);
}

static void conv_backward(const struct conv_shape *s, const void *x, const float *w, const void *dy, void *dx,
                          float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes) {
    size_t nx, ny;
    conv_sizes(s, &nx, &ny);
    float *tx = widen(x, nx), *tdy = widen(dy, ny), *tmask = widen(dx_mask, nx), *tdx = room(dx, nx);
    base()->conv_backward(s, tx, w, tdy, tdx, dw, db, tmask, ws, ws_bytes);
    free(tx), free(tdy), free(tmask);
    narrow(tdx, dx, nx);
}

/* The element-wise ops: one or two inputs and an output of n each (the output may be an
 * input: the copies are apart). */
typedef void unary_fn(const void *x, void *y, size_t n);
typedef void binary_fn(const void *a, const void *b, void *out, size_t n);

static void unary(unary_fn *op, const void *x, void *y, size_t n) {
    float *tx = widen(x, n), *ty = room(y, n);
    op(tx, ty, n);
    free(tx);
    narrow(ty, y, n);
}

static void binary(binary_fn *op, const void *a, const void *b, void *out, size_t n) {
    float *ta = widen(a, n), *tb = widen(b, n), *tout = room(out, n);
    op(ta, tb, tout, n);
    free(ta), free(tb);
    narrow(tout, out, n);
}

static void relu_forward(const void *x, void *y, size_t n) { unary(base()->relu_forward, x, y, n); }
static void gelu_forward(const void *x, void *y, size_t n) { unary(base()->gelu_forward, x, y, n); }
static void relu_backward(const void *y, const void *dy, void *dx, size_t n) {
    binary(base()->relu_backward, y, dy, dx, n);
}
static void gelu_backward(const void *x, const void *dy, void *dx, size_t n) {
    binary(base()->gelu_backward, x, dy, dx, n);
}

static void maxpool_forward(const void *x, void *y, unsigned char *idx, int N, int C, int H, int W, int k) {
    size_t nx = (size_t)N * C * H * W, ny = (size_t)N * C * (H / k) * (W / k);
    float *tx = widen(x, nx), *ty = room(y, ny);
    base()->maxpool_forward(tx, ty, idx, N, C, H, W, k);
    free(tx);
    narrow(ty, y, ny);
}

/* Through full, rounded to bf16 as the unpooled maps are on a GPU, so the winners are picked
 * among the same values (two floats may round to a tie). */
static void conv_pool_forward(const struct conv_shape *s, const void *x, const float *w, const float *b,
                              enum conv_act act, int pk, void *full, void *y, unsigned char *winners,
                              void *ws, size_t ws_bytes) {
    conv_forward(s, x, w, b, full, act, ws, ws_bytes);
    maxpool_forward(full, y, winners, s->N, s->K, kernels_conv_out(s->H, s->k, s->pad),
                    kernels_conv_out(s->W, s->k, s->pad), pk);
}

static void maxpool_backward(const unsigned char *idx, const void *dy, void *dx, int N, int C, int H, int W,
                             int k, int relu) {
    size_t nx = (size_t)N * C * H * W, ny = (size_t)N * C * (H / k) * (W / k);
    float *tdy = widen(dy, ny), *tdx = room(dx, nx);
    base()->maxpool_backward(idx, tdy, tdx, N, C, H, W, k, relu);
    free(tdy);
    narrow(tdx, dx, nx);
}

static void conv_pool_backward(const struct conv_shape *s, const void *x, const float *w, const void *dyp,
                               const unsigned char *winners, int pk, int relu, void *full, void *dx,
                               float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes) {
    maxpool_backward(winners, dyp, full, s->N, s->K, kernels_conv_out(s->H, s->k, s->pad),
                     kernels_conv_out(s->W, s->k, s->pad), pk, relu);
    conv_backward(s, x, w, full, dx, dw, db, dx_mask, ws, ws_bytes);
}

static void batchnorm_forward_train(const void *x, const float *gamma, const float *beta, void *y,
                                    float *save_mean, float *save_invstd, float *running_mean,
                                    float *running_var, float momentum, float eps, int N, int C, int HW,
                                    int gelu) {
    size_t n = (size_t)N * C * HW;
    float *tx = widen(x, n), *ty = room(y, n);
    base()->batchnorm_forward_train(tx, gamma, beta, ty, save_mean, save_invstd, running_mean, running_var,
                                    momentum, eps, N, C, HW, gelu);
    free(tx);
    narrow(ty, y, n);
}

static void batchnorm_forward_eval(const void *x, const float *gamma, const float *beta,
                                   const float *running_mean, const float *running_var, float eps, void *y,
                                   int N, int C, int HW, int gelu) {
    size_t n = (size_t)N * C * HW;
    float *tx = widen(x, n), *ty = room(y, n);
    base()->batchnorm_forward_eval(tx, gamma, beta, running_mean, running_var, eps, ty, N, C, HW, gelu);
    free(tx);
    narrow(ty, y, n);
}

static void batchnorm_backward(const void *x, const void *dy, const float *gamma, const float *beta,
                               const float *save_mean, const float *save_invstd, void *dx, float *dgamma,
                               float *dbeta, int N, int C, int HW, int gelu) {
    size_t n = (size_t)N * C * HW;
    float *tx = widen(x, n), *tdy = widen(dy, n), *tdx = room(dx, n);
    base()->batchnorm_backward(tx, tdy, gamma, beta, save_mean, save_invstd, tdx, dgamma, dbeta, N, C, HW,
                               gelu);
    free(tx), free(tdy);
    narrow(tdx, dx, n);
}

static void linear_forward(const void *x, const float *w, const float *b, void *y, int N, int I, int O,
                           float scale, void *ws, size_t ws_bytes) {
    float *tx = widen(x, (size_t)N * I), *ty = room(y, (size_t)N * O);
    base()->linear_forward(tx, w, b, ty, N, I, O, scale, ws, ws_bytes);
    free(tx);
    narrow(ty, y, (size_t)N * O);
}

static void linear_backward(const void *x, const float *w, const void *dy, void *dx, float *dw, float *db,
                            int N, int I, int O, float scale, void *ws, size_t ws_bytes) {
    float *tx = widen(x, (size_t)N * I), *tdy = widen(dy, (size_t)N * O), *tdx = room(dx, (size_t)N * I);
    base()->linear_backward(tx, w, tdy, tdx, dw, db, N, I, O, scale, ws, ws_bytes);
    free(tx), free(tdy);
    narrow(tdx, dx, (size_t)N * I);
}

static void softmax_xent(const void *logits, const int *labels, void *dlogits, float *out, int N, int classes,
                         float smoothing, enum xent_reduction reduction) {
    size_t n = (size_t)N * classes;
    float *tz = widen(logits, n), *tdz = room(dlogits, n);
    base()->softmax_xent(tz, labels, tdz, out, N, classes, smoothing, reduction);
    free(tz);
    narrow(tdz, dlogits, n);
}

static void logits_add(const void *z, float *sum, size_t n, float weight, int add) {
    float *tz = widen(z, n);
    base()->logits_add(tz, sum, n, weight, add);
    free(tz);
}

const struct kernels *kernels_cpu_bf16_act(void) {
    static struct kernels k;
    static const struct kernels *t;
    if (t) return t;
    k = *base();
    k.name = "cpu-bf16-act";
    k.act_size = BF16;
    k.input_prepare = input_prepare;
    k.conv_forward = conv_forward;
    k.conv_pool_forward = conv_pool_forward;
    k.conv_backward = conv_backward;
    k.conv_pool_backward = conv_pool_backward;
    k.relu_forward = relu_forward;
    k.relu_backward = relu_backward;
    k.gelu_forward = gelu_forward;
    k.gelu_backward = gelu_backward;
    k.maxpool_forward = maxpool_forward;
    k.maxpool_backward = maxpool_backward;
    k.batchnorm_forward_train = batchnorm_forward_train;
    k.batchnorm_forward_eval = batchnorm_forward_eval;
    k.batchnorm_backward = batchnorm_backward;
    k.linear_forward = linear_forward;
    k.linear_backward = linear_backward;
    k.softmax_xent = softmax_xent;
    k.logits_add = logits_add;
    return t = cpu_table_checked(&k);
}
