/* test_ops: every op of struct kernels (kernels/kernels.h) on every backend this build and machine
 * have, in the spirit of ggml's test-backend-ops. One table of cases (op, shapes, flags), each
 * written once; one runner per op builds the inputs, computes a double-precision reference on
 * the host straight from the op's definition, runs the op through the backend's own
 * alloc/upload/download (never touching backend memory from the host) and compares.
 *
 * Columns (backends):
 *   cpu   the whole table on the default ISA path with 1 and 3 OpenMP threads (3: more threads
 *         than cores, and than the images of some cases), then the conv, linear, GELU and
 *         fused batch norm + GELU cases (the code that differs per ISA: the GEMM, the Winograd
 *         and direct convolutions, GELU) on every ISA path this CPU has, with 2 threads; and, in child
 * processes, that the conv and linear ops stop at their CHECK when given a workspace one byte short; cpu-bf16
 * kernels_cpu_bf16(): the conv and linear cases on every bf16 GEMM path this CPU has (amx where the CPU has
 * AMX-BF16 and the OS grants the tile state, avx512bf16 where it has AVX512_BF16, avx2 where it has AVX2; the
 * plain-C path and the tile path's plain-C twin, amx-emulated, always), 2 threads; cpu-bf16-act
 * kernels_cpu_bf16_act() (bf16 activations, cuda-bf16's twin): the whole table, 2 threads; cuda  the whole
 * table on GPU 0, in builds with the CUDA backend on a machine with a GPU (TF32 off, so the GPU computes in
 * FP32 like the CPU), in the layout the environment gives (NHWC by default); then shutdown() and the whole
 * table again in NCHW (CIFAR10_CUDA_LAYOUT=nchw) on the backend kernels_cuda() makes afresh after it; then,
 * in both layouts where the GPU has bf16 tensor cores, the whole table on kernels_cuda_bf16() (cuda-bf16,
 * bf16 activations) and the conv and linear cases on its float-activation form (CIFAR10_CUDA_BF16=copies).
 * Activations go up and come down through dev_act and host_act, which reorder them for an NHWC backend, so
 * every reference is NCHW.
 *
 * Tolerances, backend result against the double reference:
 *   relative L2 error <= 1e-5: conv, linear, batch norm (y, saved and running statistics,
 *       gradients), GELU: float arithmetic that differs only in summation order and rounding;
 *   relative L2 error <= 1e-6: softmax cross-entropy (loss, dlogits), SGD (3 steps),
 *       lookahead, logits_add's sum;
 *   exact (==): ReLU, flatten, max pool (values, and the gradient's routing to the first maximum
 *       on ties, or to the last NaN), the argmax count of softmax cross-entropy, the
 *       asynchronous copies (download_queued too), batch norm on activations one element off
 *       alignment against aligned ones (F_ORDER: every output; the sums' order is the same), lookahead with
 * decay 0 and 1 (torch.lerp's formula lands on an end exactly) and its p == ema, logits_add (the float
 * product w z; fmaf(w, z, sum)); relative L2 error
 * <= 1e-2: conv and linear y, dx, dw on cpu-bf16 and cuda-bf16 (db is a float sum and keeps 1e-5). Operands
 * rounded to bf16 carry up to 2^-8 relative error each; measured here: im2col and linear about 3e-3, Winograd
 * F(2x2) 4e-3 to 5.8e-3. F(3x3) and F(4x4) reached 1e-2 to 2.7e-2 and F(5x5) 4.1e-2, as their transforms
 *       (coefficients up to 8) amplify the rounding of the transformed tiles and filters:
 *       conv.c's plan keeps bf16 products on F(2x2) and im2col, and this bound holds it
 *       there. The column prints its worst error;
 *   every element within 1e-6: input_prepare (a rounding or two of values below 3, while a
 *       pixel from the wrong place is off by a multiple of the scale, about 0.017);
 *   patch_covariance: every sum within 1e-12 of its magnitude from a long double one, and bit
 *       for bit the CPU table's (the contract: the same order, no FMA, on every backend);
 *   bf16 activations (act_size 2): the inputs are rounded to bf16 before the reference is
 *       taken, so it is computed from what the op reads; products as above within 1e-2; other
 *       outputs stored as bf16 (GELU, batch norm's y and dx, dlogits) within TOL_ACT = 4e-3, as
 *       their one rounding is at most 2^-8 of each value (half a unit in the last place of
 *       8 significant bits; 1.7e-3 relative L2 over uniform values); input_prepare within
 *       1e-6 plus 2^-8 of the value; ReLU, max pool, flatten still exact;
 *       statistics, parameter gradients and the loss (float) keep their float tolerances.
 * Every output is prefilled with NaN on the backend, so an element an op fails to write is
 * caught; an output skipped with NULL must leave the others bit for bit as computed with it.
 * Every conv case also runs with its filter in a set made ready (conv_filters_create): y and
 * dx bit for bit as without, and after the filter changes (lookahead_update, upload) without
 * conv_filters_ready, y from the new values (as a copy in no set gives), so no stale ready
 * form is read.
 *
 * "CPU internals" at the end: the GEMM itself on every ISA path (also on pre-packed operands); bf16_round on
 * hand-worked values; gemm_bf16 on every bf16 path against the double product of the bf16_round-ed operands
 * (1e-5: those products are exact in float), and that it rounds every operand exactly as
 * bf16_round (==). */
#include "../common/err.h"
#include "../kernels/cpu/cpu.h" /* conv_tiles_grad_pairs_* */
#include "../kernels/cpu/gemm.h"
#include "../kernels/cuda/fastdiv.h" /* plain C: the GPU kernels' index division */
#include "../kernels/kernels.h"
#include "check.h"

#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define TOL       1e-5 /* float arithmetic ops */
#define TOL_FINE  1e-6 /* softmax cross-entropy, SGD, lookahead */
#define TOL_INPUT 1e-6 /* input_prepare, per element */
#define TOL_BF16  1e-2 /* conv and linear with bf16 operands (cpu-bf16), see the header */
#define TOL_ACT   4e-3 /* an output rounded to bf16 activations, see the header */

/* ---- The case table ---- */

enum op {
    OP_INPUT,
    OP_CONV,
    OP_RELU,
    OP_GELU,
    OP_MAXPOOL,
    OP_BATCHNORM,
    OP_LINEAR,
    OP_XENT,
    OP_SGD,
    OP_LOOKAHEAD,
    OP_COPY,
    OP_FLATTEN,
    OP_LOGITS,
    OP_COVARIANCE,
    OP_COUNT
};
static const char *const op_names[OP_COUNT] = {"input_prepare", "conv",
                                               "relu",          "gelu",
                                               "maxpool",       "batchnorm",
                                               "linear",        "softmax_xent",
                                               "sgd_update",    "lookahead_update",
                                               "async copies",  "flatten",
                                               "logits_add",    "patch_covariance"};

enum {
    F_BIAS = 1 << 0,       /* conv, linear: with a bias */
    F_RELU = 1 << 1,       /* conv: fused ReLU in the forward; maxpool: x is a ReLU output (>= 0) */
    F_MASK = 1 << 2,       /* conv: dx through the ReLU that made x (dx_mask = x, as the model calls it) */
    F_NO_DX = 1 << 3,      /* conv, linear, batchnorm: backward again with dx NULL (nothing below trains) */
    F_NO_DW = 1 << 4,      /* conv: ... with dw NULL (a frozen filter) */
    F_NO_DB = 1 << 5,      /* conv, linear: ... with db NULL (no bias) */
    F_NO_DGAMMA = 1 << 6,  /* batchnorm: ... with dgamma NULL (a frozen scale) */
    F_NO_GRAD = 1 << 7,    /* softmax_xent: ... with dlogits NULL (evaluation) */
    F_TIES = 1 << 8,       /* maxpool, softmax_xent: tied maxima */
    F_INPLACE = 1 << 9,    /* relu (y = x, dx = dy), gelu (dx = dy): output in the input's buffer */
    F_CONFIDENT = 1 << 10, /* softmax_xent: logits of 100 (a right and a wrong confident sample) */
    F_GELU = 1 << 11,      /* batchnorm, conv: with the fused GELU (conv: in the forward) */
    F_NAN = 1 << 12,       /* maxpool, relu: NaNs in x (PyTorch propagates them) */
    F_GROUPS = 1 << 13,    /* sgd_update: through sgd_update_groups, two groups and skipped elements */
    F_POOL = 1 << 14,      /* conv: also conv_pool_forward and conv_pool_backward with a 2x2 max pool */
    F_POOL3 = 1 << 15,     /* conv: ... with a 3x3 one */
    F_ORDER = 1 << 16,     /* batchnorm: again on buffers off alignment, dy with cancelling terms */
    F_FAR = 1 << 17,       /* batchnorm: the training forward's statistics only (see run_batchnorm) */
    F_SPARSE = 1 << 18     /* batchnorm: x 0 but for each channel's first element (see bn_inputs) */
};
static const char *const flag_names[] = {
    "bias",      "relu", "mask", "-dx",    "-dw",  "-db",   "-dgamma", "-dlogits", "ties",  "in-place",
    "confident", "gelu", "nan",  "groups", "pool", "pool3", "order",   "far",      "sparse"};

struct op_case {
    enum op op;
    unsigned flags;
    union {
        struct conv_shape conv;
        struct {
            int N, C, H, W, k;
        } pool;
        struct {
            int N, C, HW;
            float eps, momentum, offset;
        } bn;
        struct {
            int N, I, O;
            float scale;
        } lin;
        struct {
            int N, classes;
            float smoothing;
            enum xent_reduction reduction;
        } xent;
        struct {
            int N, first, reflect;
        } input; /* images; geometry combination of the first */
        struct {
            int n;
            float lr, momentum, weight_decay, grad_scale;
            int resume, nesterov;
        } sgd;
        struct {
            int n;
            float weight;
        } lookahead;
        struct {
            int N, C, HW;
        } flat;
        struct {
            int n;
            float weight;
        } logits;
        int n; /* relu, gelu, async copies, patch_covariance (images) */
    };
};

/* clang-format off */
#define CONV(N, C, K, H, W, k, pad, f) {OP_CONV, f, .conv = {N, C, K, H, W, k, pad}}
#define POOL(N, C, H, W, k, f) {OP_MAXPOOL, f, .pool = {N, C, H, W, k}}
#define BN(N, C, HW, eps, mom, offset, f) {OP_BATCHNORM, f, .bn = {N, C, HW, eps, mom, offset}}
#define LIN(N, I, O, scale, f) {OP_LINEAR, f, .lin = {N, I, O, scale}}
/* clang-format on */

static const struct op_case cases[] = {
    /* input_prepare: all 81 crop offsets x 2 flips, one image each; one image alone at 8,8 flipped */
    {OP_INPUT, 0, .input = {162, 0, 0}},
    {OP_INPUT, 0, .input = {1, 161, 0}},
    {OP_INPUT, 0, .input = {162, 0, 1}}, /* the same with reflect padding */
    {OP_INPUT, 0, .input = {1, 80, 1}},

    /* conv, im2col + GEMM: every k 1..5, pads 0, k/2 and k-1, odd sizes, channel counts that
     * are not multiples of the vector width */
    CONV(2, 3, 5, 6, 10, 3, 1, F_BIAS | F_MASK),             /* 3x3 same; 2 images < 3 threads */
    CONV(1, 3, 4, 7, 5, 1, 0, F_BIAS),                       /* 1x1, batch 1 */
    CONV(3, 5, 7, 9, 8, 2, 0, F_NO_DB),                      /* even k, valid (8x7), no bias */
    CONV(2, 5, 3, 7, 7, 2, 1, F_BIAS | F_RELU),              /* even k, pad 1: output 8x8, larger */
    CONV(2, 4, 6, 9, 11, 3, 0, F_BIAS | F_RELU | F_MASK),    /* 3x3 valid: 7x9 */
    CONV(2, 3, 5, 4, 4, 3, 2, F_BIAS),                       /* 3x3 pad k-1 ("full"): 6x6 */
    CONV(3, 17, 5, 8, 7, 4, 2, F_BIAS | F_MASK),             /* 4x4 pad k/2: 9x8 */
    CONV(2, 3, 16, 32, 32, 5, 2, F_BIAS | F_RELU | F_NO_DX), /* 5x5 first layer on RGB, dx NULL */
    CONV(1, 6, 5, 15, 15, 5, 0, F_NO_DB),                    /* 5x5 valid, batch 1 */
    CONV(2, 7, 3, 5, 3, 5, 4, F_BIAS),                       /* pad k-1, image smaller than the window: 9x7 */
    CONV(4, 40, 12, 5, 3, 3, 1, F_BIAS),          /* C*9 = 360 > KC = 256: the GEMM's K is blocked */
    CONV(2, 12, 9, 6, 6, 5, 2, F_BIAS | F_NO_DW), /* C*25 = 300 > KC with 5x5 */
    /* few input channels (C k^2 <= 27): the GPU's own forward in NHWC (cuda_small_conv) */
    CONV(4, 3, 24, 32, 32, 2, 0, F_BIAS | F_NO_DX), /* airbench94's whitening layer */
    CONV(2, 3, 5, 9, 9, 2, 1, F_BIAS | F_RELU),     /* 5 outputs: no packs; pad 1 */
    CONV(2, 4, 16, 7, 8, 2, 1, F_RELU | F_NO_DB),   /* C k^2 = 16, no bias, ReLU, pad 1 */

    /* conv, the workshop's 3x3 pad 1 on even maps with 16+ channels on the side a pass reads and
     * the side it writes: Winograd for the forward, dx and dw (float: F(4x4), exact tiles, or
     * as noted; bf16: F(2x2)) */
    CONV(7, 16, 24, 4, 6, 3, 1, F_BIAS | F_RELU | F_MASK), /* chunks of images, a partial last one (N 7) */
    CONV(2, 32, 17, 16, 16, 3, 1, F_BIAS | F_NO_DX),       /* odd K; several tiles per row */
    CONV(1, 32, 64, 32, 32, 3, 1,
         F_BIAS | F_RELU | F_MASK),                         /* the workshop's second layer: 8 tiles per row */
    CONV(5, 16, 8, 12, 12, 3, 1, F_BIAS | F_RELU | F_MASK), /* AMX tiles' im2col: chunks of 3 images (3 x 144
                                                               of the tiles' 512 columns), the last partial */
    /* 16+ channels on one side only: the forward reads C and writes K, dx the reverse, so a
     * one-sided threshold would put one of them on Winograd (conv.c's plan() wants
     * 16+ on both sides: im2col both ways) */
    CONV(3, 24, 8, 8, 8, 3, 1, F_BIAS),
    CONV(3, 8, 24, 8, 8, 3, 1, F_BIAS | F_RELU),
    CONV(1, 32, 16, 4, 4, 3, 1,
         F_BIAS | F_RELU | F_MASK), /* batch 1: one 4x4 image, one F(4x4) tile (bf16: four) */
    CONV(5, 16, 32, 8, 8, 3, 1, F_BIAS | F_RELU | F_MASK | F_NO_DX),
    CONV(2, 16, 16, 6, 6, 3, 1, F_MASK | F_NO_DW | F_NO_DB), /* frozen filter: dx only; float m 3 */
    CONV(2, 64, 128, 8, 8, 3, 1, F_BIAS | F_RELU),           /* a workshop layer */
    /* odd channel counts both ways (bf16: an odd GEMM depth, its last pair's high half zero) */
    CONV(2, 17, 19, 8, 8, 3, 1, F_BIAS | F_RELU | F_MASK),

    /* conv, 3x3 pad 1 on odd maps (16+ channels both sides): Winograd F(m x m, 3x3) for the
     * forward, dx and dw, m 3, 4 or 5 as conv.c's plan() picks (fewest multiplies; in bf16
     * at most 4), the last tile row and column partial where m does not divide the map
     * (zero-extended input, outputs past the map dropped); airbench94's maps 31, 15, 7, 3,
     * channel counts that are not multiples of 16, more threads than images */
    CONV(2, 24, 64, 31, 31, 3, 1,
         F_MASK | F_NO_DB), /* airbench94's first group: m 4, 8 tiles per row, the last partial */
    CONV(3, 20, 36, 15, 15, 3, 1, F_BIAS | F_RELU | F_MASK), /* m 5 (bf16: m 4) */
    CONV(2, 64, 96, 15, 15, 3, 1, F_BIAS | F_MASK), /* m 5 on airbench94's second group's map and depth */
    CONV(16, 20, 24, 15, 15, 3, 1,
         F_BIAS | F_RELU | F_MASK), /* m 5, 9 tiles an image: chunks of 7 images (63 tiles fill the
                                       GEMM's panels better than 4's 36), 2 per thread, the last of 2 */
    CONV(3, 16, 16, 32, 32, 3, 1, F_BIAS | F_MASK), /* m 4, 64 tiles an image: a chunk per image */
    CONV(2, 32, 24, 13, 13, 3, 1, F_BIAS | F_MASK), /* m 5, the last tile row and column 3 of 5 */
    CONV(3, 16, 24, 5, 5, 3, 1, F_BIAS | F_RELU),   /* m 5, one exact tile per image */
    CONV(2, 17, 19, 7, 9, 3, 1,
         F_BIAS | F_RELU | F_MASK),                 /* m 5 (bf16: m 4), partial tiles on both sides, 7x9 */
    CONV(5, 36, 20, 3, 3, 3, 1, F_NO_DX | F_NO_DB), /* m 3, one exact tile per image */
    CONV(1, 48, 40, 3, 3, 3, 1, F_BIAS | F_MASK),   /* batch 1: one chunk, idle threads */
    CONV(2, 16, 20, 9, 6, 3, 1, F_BIAS | F_MASK | F_NO_DW), /* odd H, even W: m 3, exact tiles */
    CONV(1, 300, 20, 7, 7, 3, 1, F_BIAS),         /* m 4; 300 channels: GEMM K (forward), M (dw) blocked */
    CONV(3, 16, 16, 2, 2, 3, 1, F_BIAS | F_MASK), /* 2x2 map: F(2x2), one exact tile */
    CONV(4, 24, 17, 1, 1, 3, 1, F_BIAS | F_MASK), /* 1x1 map: im2col */

    /* relu, gelu: odd lengths (vector tails), in place */
    {OP_RELU, 0, .n = 1},
    {OP_RELU, 0, .n = 7},
    {OP_RELU, F_INPLACE, .n = 1001},
    {OP_RELU, 0, .n = 4099},
    {OP_RELU, F_NAN | F_INPLACE, .n = 1001}, /* NaN stays NaN, its gradient passes (torch.relu) */
    {OP_GELU, 0, .n = 1},
    {OP_GELU, F_INPLACE, .n = 7},
    {OP_GELU, 0, .n = 1001},
    {OP_GELU, F_INPLACE, .n = 4099},
    /* lengths a multiple of 8: 16-byte packs on the GPU (4 floats, 8 bf16) */
    {OP_RELU, 0, .n = 4096},
    {OP_RELU, F_NAN | F_INPLACE, .n = 1024},
    {OP_GELU, F_INPLACE, .n = 4096},
    {OP_GELU, 0, .n = 8},

    /* maxpool: k 2, 3 and 4, floor (rows and columns no window covers), ties, ReLU inputs */
    POOL(3, 4, 6, 8, 2, F_TIES),
    POOL(2, 5, 31, 31, 2, F_TIES | F_RELU), /* 31x31 -> 15x15 */
    POOL(1, 3, 15, 15, 3, 0),               /* -> 5x5 */
    POOL(2, 17, 7, 7, 3, F_TIES),           /* -> 2x2, one row and column left over */
    POOL(1, 1, 3, 3, 2, F_TIES),            /* -> 1x1 */
    POOL(2, 3, 17, 9, 4, F_TIES | F_RELU),  /* -> 4x2 */
    POOL(2, 64, 16, 16, 2, F_RELU),         /* a workshop layer */
    POOL(2, 5, 31, 31, 2, F_NAN | F_RELU),  /* NaN propagates (k = 2: the vector path) */
    POOL(2, 3, 9, 9, 3, F_NAN | F_RELU),    /* ... and with any k */
    /* channels a multiple of 8: packs of adjacent channels on the GPU in NHWC */
    POOL(2, 24, 31, 31, 2, F_TIES | F_RELU), /* airbench94's first pool's map */
    POOL(2, 8, 9, 9, 2, F_NAN | F_RELU),
    POOL(3, 16, 7, 7, 3, F_TIES),
    POOL(2, 8, 17, 9, 4, F_TIES | F_RELU),
    /* rows of more than 16 windows: the AVX-512 forward's whole steps and its masked tail */
    POOL(2, 3, 36, 40, 2, F_TIES | F_RELU), /* -> 18x20 */
    POOL(1, 2, 10, 67, 2, F_NAN),           /* -> 5x33, a column left over */

    /* batchnorm: train (y, saved and running statistics), eval, backward */
    BN(5, 3, 12, 1e-5f, 0.1f, 0, F_NO_DX),                 /* also with dx NULL */
    BN(1, 17, 49, 1e-5f, 0.1f, 0, 0),                      /* batch 1 */
    BN(4, 5, 1, 1e-5f, 0.1f, 0, 0),                        /* 1x1 maps: N values per channel */
    BN(7, 16, 36, 1e-12f, 0.4f, 0, F_NO_DGAMMA),           /* tiny eps, momentum 0.4, frozen gamma */
    BN(3, 5, 9, 1e-5f, 0.1f, 6.0f, 0),                     /* mean large against the spread */
    BN(32, 64, 256, 1e-5f, 0.1f, 0, 0),                    /* 8192 values per channel */
    BN(2, 3, 1024, 1e-5f, 0.1f, 0, F_NO_DGAMMA | F_NO_DX), /* 32x32 maps */
    /* with the fused GELU: airbench94's 64 x 15 x 15 and 256 x 3 x 3 maps, dx or dgamma NULL */
    BN(3, 64, 225, 1e-12f, 0.6f, 0, F_GELU | F_NO_DX),
    BN(5, 256, 9, 1e-12f, 0.6f, 0.5f, F_GELU | F_NO_DGAMMA),
    BN(4, 5, 1, 1e-5f, 0.1f, 0, F_GELU),
    /* channels a multiple of 8 but not of 32 (the GPU's NHWC sums take 32 channels a block) */
    BN(6, 24, 49, 1e-5f, 0.1f, 0, F_GELU),
    BN(3, 72, 25, 1e-5f, 0.1f, 0.5f, 0),
    /* packs in NCHW too: maps of 64 (a pack inside one channel), 1x1 maps (adjacent channels) */
    BN(3, 16, 64, 1e-5f, 0.1f, 0, F_GELU),
    BN(40, 16, 1, 1e-5f, 0.1f, 0, F_GELU),
    /* fewer channels than the 3-thread runs' threads (the CPU gives each thread a channel range) */
    BN(6, 2, 9, 1e-5f, 0.1f, 0, F_GELU),
    BN(5, 1, 20, 1e-5f, 0.1f, 6.0f, 0),

    /* linear: y = scale (x w^T + b) */
    LIN(9, 70, 33, 1.0f, F_BIAS),
    LIN(130, 300, 520, 1.0f, F_BIAS),      /* straddles the GEMM's MC, KC and NC blocks */
    LIN(1, 5, 10, 1.0f, F_BIAS | F_NO_DX), /* batch 1, dx NULL */
    LIN(7, 17, 3, 1.0f / 9, F_NO_DB),      /* scale 1/9 without bias */
    LIN(64, 512, 10, 0.125f, F_BIAS),      /* a classifier head */
    LIN(3, 1, 2, 2.0f, F_BIAS | F_NO_DX | F_NO_DB),

    /* softmax_xent: loss, argmax count (first maximum wins), dlogits; unsmoothed mean (the
     * workshop's), then airbench's label smoothing 0.2 with the sum and with the mean */
    {OP_XENT, F_CONFIDENT | F_TIES, .xent = {7, 10, 0, XENT_MEAN}},
    {OP_XENT, F_NO_GRAD, .xent = {300, 10, 0, XENT_MEAN}}, /* more rows than threads */
    {OP_XENT, 0, .xent = {1, 3, 0, XENT_MEAN}},
    {OP_XENT, F_TIES | F_NO_GRAD | F_CONFIDENT, .xent = {33, 100, 0, XENT_MEAN}},
    {OP_XENT, F_NO_GRAD, .xent = {300, 10, 0.2f, XENT_SUM}},
    {OP_XENT, F_CONFIDENT | F_TIES, .xent = {300, 10, 0.2f, XENT_MEAN}},
    {OP_XENT, F_TIES | F_CONFIDENT, .xent = {300, 100, 0.2f, XENT_SUM}},
    {OP_XENT, F_NO_GRAD, .xent = {300, 100, 0.2f, XENT_MEAN}},
    {OP_XENT, 0, .xent = {300, 10, 0, XENT_SUM}},

    /* sgd_update: 3 steps */
    {OP_SGD, 0, .sgd = {5, 0.1f, 0.9f, 5e-4f, 0.5f, 0}},
    {OP_SGD, 0, .sgd = {1001, 0.05f, 0.9f, 5e-4f, 0.5f, 0}},
    {OP_SGD, 0, .sgd = {1, 0.2f, 0.0f, 0.0f, 1.0f, 0}},          /* plain SGD */
    {OP_SGD, 0, .sgd = {4099, 0.01f, 0.9f, 5e-3f, 0.25f, 1}},    /* resumed: momentum not zero */
    {OP_SGD, 0, .sgd = {1001, 0.05f, 0.85f, 5e-4f, 0.5f, 0, 1}}, /* Nesterov (airbench) */
    {OP_SGD, 0, .sgd = {4099, 0.01f, 0.9f, 5e-3f, 0.25f, 1, 1}}, /* Nesterov, resumed */
    {OP_SGD, F_GROUPS, .sgd = {4099, 1.4648e-3f, 0.85f, 1.3624f, 1.0f, 1, 1}}, /* airbench's groups */
    {OP_SGD, F_GROUPS, .sgd = {5, 0.1f, 0.9f, 5e-4f, 0.5f, 0, 0}},

    /* lookahead_update: airbench's decay 0.95^5, and the ends (ema = p, ema kept) */
    {OP_LOOKAHEAD, 0, .lookahead = {1001, 0.2262190625f}},
    {OP_LOOKAHEAD, 0, .lookahead = {4099, 1.0f}},
    {OP_LOOKAHEAD, 0, .lookahead = {7, 0.0f}},
    {OP_LOOKAHEAD, 0, .lookahead = {4099, 0.7f}}, /* lerp from the p end */

    /* the asynchronous copies around an op */
    {OP_COPY, 0, .n = 1001},
    {OP_COPY, 0, .n = 1 << 20},

    /* flatten: the workshop CNN's 256x4x4, odd sizes, and the shapes with nothing to reorder */
    {OP_FLATTEN, 0, .flat = {3, 256, 16}},
    {OP_FLATTEN, 0, .flat = {2, 5, 12}},
    {OP_FLATTEN, 0, .flat = {2, 1, 9}},
    {OP_FLATTEN, 0, .flat = {2, 7, 1}},

    /* Cases added later go here: the cases draw their data from one stream in table order
     * (hfill), so every case above keeps the data it was written and tuned with. */
    /* the CPU's direct forward (C k^2 <= 27, small_conv.c), the activation fused: blocks of 8
     * outputs (a partial last block), rows of 16 pixels (a partial last vector) */
    CONV(3, 3, 24, 32, 32, 2, 0, F_BIAS | F_GELU | F_NO_DX), /* airbench94's whitening layer, its GELU */
    CONV(3, 3, 32, 32, 32, 3, 1, F_BIAS | F_RELU | F_NO_DX), /* the workshop's first layer */
    CONV(2, 5, 13, 9, 7, 2, 1, F_GELU | F_NO_DB),            /* C k^2 = 20, 13 outputs, no bias */
    CONV(2, 1, 9, 19, 40, 3, 2, F_BIAS | F_GELU),            /* one channel, pad k - 1: 21 x 42 */
    CONV(3, 2, 3, 5, 1, 1, 0, F_BIAS | F_RELU),              /* 1x1 filter on a one-column map */
    /* GELU after the other paths' sums: Winograd, im2col */
    CONV(2, 16, 16, 8, 8, 3, 1, F_BIAS | F_GELU),
    CONV(2, 6, 5, 7, 7, 3, 1, F_GELU | F_NO_DB),
    /* conv_pool_forward: the max pool in the Winograd output (m 4, 5, 3; odd maps: floor), and
     * through the unpooled maps elsewhere (direct, im2col, a GELU) */
    CONV(2, 16, 24, 8, 8, 3, 1, F_BIAS | F_RELU | F_POOL),
    CONV(2, 24, 32, 31, 31, 3, 1, F_POOL | F_NO_DX),
    CONV(3, 20, 17, 15, 15, 3, 1, F_BIAS | F_POOL),
    CONV(2, 17, 16, 3, 3, 3, 1, F_BIAS | F_RELU | F_POOL),
    CONV(2, 3, 8, 9, 9, 3, 1, F_BIAS | F_RELU | F_POOL),
    CONV(2, 8, 6, 6, 5, 3, 1, F_BIAS | F_POOL),
    CONV(2, 16, 16, 8, 8, 3, 1, F_GELU | F_POOL),
    CONV(1, 16, 20, 40, 38, 3, 1, F_BIAS | F_RELU | F_POOL),  /* 19 windows a row: a vector and 3 */
    CONV(2, 16, 18, 11, 10, 3, 1, F_BIAS | F_RELU | F_POOL3), /* 3x3 windows: through a plane */
    /* logits_add: TTA level 2's weight over a 1024-image chunk's logits, and an odd length */
    {OP_LOGITS, 0, .logits = {10240, 0.25f}},
    {OP_LOGITS, 0, .logits = {1001, 0.3f}}, /* a weight whose products round */
    /* patch_covariance: one image; two whole chunks and a partial one */
    {OP_COVARIANCE, 0, .n = 1},
    {OP_COVARIANCE, 0, .n = 97},
    /* batch norm off alignment: 16 rows a run of the CUDA sums (NHWC), dy with cancelling terms */
    BN(64, 32, 256, 1e-5f, 0.1f, 0, F_ORDER),
    /* a bias before a GELU and a pool: the bias gradient from the pooled gradient */
    CONV(2, 16, 16, 8, 8, 3, 1, F_BIAS | F_GELU | F_POOL),
    /* AMX tiles' direct convolution (16+ channels each side) beyond 3x3 "same": every k and
     * pads 0 to k-1 on the grid; 3x3 maps (4x4 on the grid) make chunks of 32 images (N 97: two
     * chunks a thread, a partial last one) */
    CONV(3, 16, 20, 9, 7, 5, 2, F_BIAS | F_MASK),
    CONV(2, 20, 16, 6, 5, 1, 0, F_BIAS | F_RELU | F_MASK),
    CONV(2, 16, 17, 8, 7, 2, 0, F_BIAS | F_MASK),
    CONV(2, 17, 16, 7, 6, 2, 1, F_NO_DB),
    CONV(3, 16, 16, 5, 4, 3, 2, F_BIAS | F_MASK),
    CONV(2, 16, 24, 9, 11, 3, 0, F_BIAS | F_RELU | F_MASK),
    CONV(2, 33, 16, 6, 6, 4, 3, F_BIAS | F_MASK),
    CONV(97, 16, 16, 3, 3, 3, 1, F_BIAS | F_MASK),
    /* batch norm of values 1000 from 0, 5 wide: E[x^2] is 2e5 times the variance */
    BN(16, 32, 49, 1e-5f, 0.1f, 1000.0f, F_FAR),
    BN(3, 40, 200, 1e-5f, 0.1f, 1000.0f, F_FAR),
    /* a ReLU's output: channels of zeros but for their first element */
    BN(16, 32, 49, 1e-12f, 0.1f, 0, F_SPARSE),
    BN(32, 64, 225, 1e-12f, 0.1f, 0, F_SPARSE | F_GELU),
    /* F(4x4) pools read from the tiles by rows on the AVX2 path (winograd.c load_pool_cols),
     * with a bias and a ReLU: 16 pooled columns (two full vectors), 8 (one), 15 (a full vector
     * and one of 7 whose last lane reads the tile past the map) */
    CONV(1, 16, 16, 32, 32, 3, 1, F_BIAS | F_RELU | F_POOL),
    CONV(2, 16, 16, 16, 16, 3, 1, F_BIAS | F_RELU | F_POOL),
    CONV(1, 16, 20, 31, 31, 3, 1, F_BIAS | F_RELU | F_POOL),
    /* the GPU's filter gradient on few input channels (small_grad_kernel): one output channel
     * (256 position lanes a block), 256 (one lane), 300 (cuDNN's: more than a block's threads),
     * and over 1024^2 positions (more than 1024 a block) */
    CONV(3, 2, 1, 20, 30, 3, 1, F_BIAS | F_NO_DX),
    CONV(2, 3, 256, 6, 7, 1, 0, F_BIAS | F_MASK),
    CONV(1, 1, 300, 5, 5, 3, 1, F_BIAS),
    CONV(1025, 1, 2, 32, 32, 3, 1, F_BIAS | F_NO_DX),
    /* ... patch offsets 3 and 4 (k 5, k 4 pooled), C k^2 = 27 by 1x1 at 256 outputs (the most
     * sums a block), 256 outputs without a bias, a map smaller than its padding, 100 outputs */
    CONV(2, 1, 256, 9, 9, 5, 2, F_BIAS),
    CONV(2, 27, 256, 5, 6, 1, 0, F_BIAS),
    CONV(2, 3, 256, 5, 6, 3, 1, F_NO_DB),
    CONV(2, 3, 7, 1, 5, 3, 2, F_BIAS),
    CONV(3, 1, 5, 6, 5, 4, 3, F_BIAS | F_POOL),
    CONV(1, 3, 100, 40, 41, 3, 1, F_BIAS),
};
#define NCASES (sizeof cases / sizeof cases[0])

/* ---- Buffers of one case (freed when it ends), the backend under test, messages ---- */

static const struct kernels *B; /* the backend under test */
/* Tolerance of the products (conv and linear y, dx, dw): TOL, or TOL_BF16 on cpu-bf16. */
static double tol_products = TOL;
static double worst_products; /* the largest such error seen in the current column */
static char where[96];        /* the column: "cpu avx512, 3 threads" */
static char what[192];        /* the case: "conv N2 C3 K5 6x10 k3 pad 1 bias mask" */
static unsigned seed;         /* reset per case, so every backend sees the same inputs */

/* A case's buffers at most: a conv case under CIFAR10_CUDA_ALGOS=fastest adds three host copies
 * for every rerun it compares (128 was too few there). */
enum { MAX_BUFS = 1024 };
static void *host_bufs[MAX_BUFS], *dev_bufs[MAX_BUFS];
static int n_host, n_dev;

static void *hnew(size_t bytes) {
    CHECK(n_host < MAX_BUFS);
    return host_bufs[n_host++] = XALLOC(bytes);
}
static double *dnew(size_t n) { return hnew(n * sizeof(double)); }
static float *hfill(size_t n, float lo, float hi) {
    float *p = hnew(n * sizeof(float));
    check_fill(p, n, lo, hi, seed++);
    return p;
}

static void *dev_alloc(size_t bytes) {
    CHECK(n_dev < MAX_BUFS);
    return dev_bufs[n_dev++] = B->alloc(bytes);
}
static void *dev_copy(const void *host, size_t bytes) {
    void *d = dev_alloc(bytes);
    B->upload(d, host, bytes);
    return d;
}
static float *dev_of(const float *host, size_t n) { return dev_copy(host, n * sizeof(float)); }
/* An output buffer holding NaN, so that an element the op does not write shows. */
static float *dev_nan(size_t n) {
    float *h = hnew(n * sizeof(float));
    memset(h, 0xff, n * sizeof(float));
    return dev_of(h, n);
}
static float *host_of(const float *d, size_t n) {
    float *h = hnew(n * sizeof(float));
    B->download(h, d, n * sizeof(float));
    return h;
}
/* dst[n][b][a] = src[n][a][b]. */
static float *host_transposed(const float *src, int N, int A, int Bd) {
    float *dst = hnew((size_t)N * A * Bd * sizeof(float));
    for (size_t n = 0; n < (size_t)N; n++)
        for (size_t a = 0; a < (size_t)A; a++)
            for (size_t b = 0; b < (size_t)Bd; b++) dst[(n * Bd + b) * A + a] = src[(n * A + a) * Bd + b];
    return dst;
}
/* Activations: elements of B->act_size bytes (float, or bf16 on cpu-bf16-act and cuda-bf16).
 * act_round turns host inputs into the values the backend will hold (a bf16 rounding), so the
 * references are computed from exactly what the op reads; every runner calls it on its
 * activation inputs before its reference. */
static void act_round(float *h, size_t n) {
    if (B->act_size == sizeof(float)) return;
    void *t = hnew(n * B->act_size);
    kernels_act_from_float(B->act_size, h, t, n);
    kernels_act_to_float(B->act_size, t, h, n);
}
/* An activation x[N][C][HW] (the host's, NCHW) on the backend in its layout (kernels.h) and
 * element type, and a backend activation back as NCHW floats: the references stay NCHW on
 * every backend. dev_flat / host_flat: n elements without a layout (HW 1). */
static void *dev_act(const float *host, int N, int C, int HW) {
    size_t n = (size_t)N * C * HW;
    const float *h = B->nhwc ? host_transposed(host, N, C, HW) : host;
    void *t = hnew(n * B->act_size);
    kernels_act_from_float(B->act_size, h, t, n);
    return dev_copy(t, n * B->act_size);
}
static float *host_act(const void *d, int N, int C, int HW) {
    size_t n = (size_t)N * C * HW;
    void *t = hnew(n * B->act_size);
    B->download(t, d, n * B->act_size);
    float *h = hnew(n * sizeof(float));
    kernels_act_to_float(B->act_size, t, h, n);
    return B->nhwc ? host_transposed(h, N, HW, C) : h;
}
/* Max pool's winner bytes [N][C][HW] in the backend's layout, as floats in NCHW. */
static float *host_winners(const unsigned char *d, int N, int C, int HW) {
    size_t n = (size_t)N * C * HW;
    unsigned char *t = hnew(n);
    B->download(t, d, n);
    float *h = hnew(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = t[i];
    return B->nhwc ? host_transposed(h, N, HW, C) : h;
}
static void *dev_flat(const float *host, size_t n) { return dev_act(host, 1, 1, (int)n); }
static float *host_flat(const void *d, size_t n) { return host_act(d, 1, 1, (int)n); }
/* An activation output holding NaN (all bits set is NaN in float and in bf16). */
static void *dev_act_nan(size_t n) {
    void *h = hnew(n * B->act_size);
    memset(h, 0xff, n * B->act_size);
    return dev_copy(h, n * B->act_size);
}
static void release_case(void) {
    while (n_dev) B->free(dev_bufs[--n_dev]);
    while (n_host) free(host_bufs[--n_host]);
}

/* what = the formatted case followed by its flags. */
static void name_case(const struct op_case *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void name_case(const struct op_case *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    for (size_t i = 0; i < sizeof flag_names / sizeof flag_names[0]; i++)
        if (c->flags & 1u << i && len < (int)sizeof what)
            len += snprintf(what + len, sizeof what - len, " %s", flag_names[i]);
}

/* h[n] (a download) against ref[n]: relative L2 error <= tol. */
static void expect_rel(const char *out, const float *h, const double *ref, size_t n, double tol) {
    double e = check_rel_l2(h, ref, n);
    EXPECT(e <= tol, "%s: %s: %s: rel L2 error %.3g > %.0e", where, what, out, e, tol);
}

/* An activation output computed in float (GELU, batch norm, dlogits): within tol, or, where
 * activations are bf16, within TOL_ACT: its one rounding to bf16 (half a unit in the last
 * place, 2^-8 of each value at most) stays inside. */
static void expect_act(const char *out, const float *h, const double *ref, size_t n, double tol) {
    expect_rel(out, h, ref, n, B->act_size == sizeof(float) || tol > TOL_ACT ? tol : TOL_ACT);
}

/* A product of the conv and linear ops: within tol_products; the worst error is kept for the
 * column's summary line (how close the bf16 column comes to its bound). */
static void expect_products(const char *out, const float *h, const double *ref, size_t n) {
    double e = check_rel_l2(h, ref, n);
    if (e > worst_products) worst_products = e;
    expect_rel(out, h, ref, n, tol_products);
}

/* Every element of h[n] within tol + rel |ref| of ref[n] (expect_abs: rel 0; tol 0: equal); NaN
 * matches only a NaN reference (max pool propagates NaN). */
static void expect_near(const char *out, const float *h, const double *ref, size_t n, double tol,
                        double rel) {
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++)
        if (!(fabs(h[i] - ref[i]) <= tol + rel * fabs(ref[i])) && !(isnan(h[i]) && isnan(ref[i])) &&
            bad++ == 0)
            first = i;
    EXPECT(bad == 0, "%s: %s: %s: %zu of %zu elements off by more than %g, first [%zu] %.9g (want %.9g)",
           where, what, out, bad, n, tol, first, bad ? h[first] : 0.0, bad ? ref[first] : 0.0);
}
static void expect_abs(const char *out, const float *h, const double *ref, size_t n, double tol) {
    expect_near(out, h, ref, n, tol, 0.0);
}

/* Two backend arrays bit for bit equal: out from this run, d2 from the one `against` names. */
static void expect_equal_bytes(const char *out, const void *d1, const void *d2, size_t bytes,
                               const char *against) {
    void *h1 = hnew(bytes), *h2 = hnew(bytes);
    B->download(h1, d1, bytes), B->download(h2, d2, bytes);
    EXPECT(memcmp(h1, h2, bytes) == 0, "%s: %s: %s differs from %s", where, what, out, against);
}
/* Two backend arrays of n floats, or of n activations (expect_same_act), bit for bit those of
 * the run with every output. */
static void expect_same_bytes(const char *out, const void *d1, const void *d2, size_t bytes) {
    expect_equal_bytes(out, d1, d2, bytes, "the run with every output");
}
static void expect_same(const char *out, const float *d1, const float *d2, size_t n) {
    expect_same_bytes(out, d1, d2, n * sizeof(float));
}
static void expect_same_act(const char *out, const void *d1, const void *d2, size_t n) {
    expect_same_bytes(out, d1, d2, n * B->act_size);
}

/* A conv backward output d1 against the same output of another run d2 (`against`), n floats or
 * activations: bit for bit, except on CUDA under CIFAR10_CUDA_ALGOS=fastest, whose algorithms
 * may sum in any order (split-K, atomics): there within tol_products (rel L2) of it. */
static int exact_reruns = 1;
static void expect_again(const char *out, const void *d1, const void *d2, size_t n, int act,
                         const char *against) {
    if (exact_reruns) {
        expect_equal_bytes(out, d1, d2, n * (act ? B->act_size : sizeof(float)), against);
        return;
    }
    const float *h1 = act ? host_flat(d1, n) : host_of(d1, n), *h2 = act ? host_flat(d2, n) : host_of(d2, n);
    double *ref = dnew(n);
    for (size_t i = 0; i < n; i++) ref[i] = h2[i];
    expect_rel(out, h1, ref, n, tol_products);
}
/* The run with other outputs NULL (d1) against the run with all of them (d2). */
static void expect_rerun(const char *out, const void *d1, const void *d2, size_t n, int act) {
    expect_again(out, d1, d2, n, act, "the run with every output");
}

/* ---- input_prepare ---- */

/* The CIFAR-10 normalisation (augment_scale_shift), rounded. */
static const float in_scale[3] = {0.0171f, 0.0175f, 0.0174f}, in_shift[3] = {-1.99f, -1.98f, -1.71f};

/* Geometry combination g (0..161) as {dx, dy, flip}: every offset pair, then flipped. */
static void geometry(int g, int *geom) { geom[0] = g % 9, geom[1] = g / 9 % 9, geom[2] = g / 81 % 2; }

/* Padded coordinate i's source pixel, written out as F.pad's two modes: -1 for a zero. */
static int input_source(int i, int reflect) {
    if (i < 0) return reflect ? -i : -1;
    if (i > 31) return reflect ? 31 - (i - 31) : -1;
    return i;
}

/* The pixel that element i of the prepared batch ([n][c][y][x]) reads, 0 for zero padding. */
static double input_pixel(const unsigned char *img, const int *geom, size_t i, int reflect) {
    size_t n = i / 3072;
    int c = (int)(i / 1024 % 3), y = (int)(i / 32 % 32), px = (int)(i % 32);
    const int *g = geom + 3 * n;
    int sx = input_source((g[2] ? 31 - px : px) + g[0] - 4, reflect); /* crop, then flip */
    int sy = input_source(y + g[1] - 4, reflect);
    return sx >= 0 && sy >= 0 ? img[(n * 3 + c) * 1024 + sy * 32 + sx] : 0.0;
}

static void input_reference(const unsigned char *img, const int *geom, double *x, int N, int reflect) {
    for (size_t i = 0; i < (size_t)N * 3072; i++)
        x[i] = input_pixel(img, geom, i, reflect) * in_scale[i / 1024 % 3] + in_shift[i / 1024 % 3];
}

static void run_input(const struct op_case *c) {
    int N = c->input.N;
    size_t n = (size_t)N * 3072;
    name_case(c, "input_prepare N%d from geometry %d, %s padding", N, c->input.first,
              c->input.reflect ? "reflect" : "zero");
    unsigned char *img = hnew(n);
    int *geom = hnew((size_t)N * 3 * sizeof(int));
    for (size_t i = 0; i < n; i++) img[i] = (unsigned char)((i + seed) * 2654435761u >> 24);
    for (int i = 0; i < N; i++) geometry(c->input.first + i, geom + 3 * i);
    double *ref = dnew(n);
    input_reference(img, geom, ref, N, c->input.reflect);
    void *x = dev_act_nan(n);
    B->input_prepare(dev_copy(img, n), dev_copy(geom, (size_t)N * 3 * sizeof(int)), x, N, in_scale, in_shift,
                     c->input.reflect);
    /* bf16 activations: and half a unit in bf16's last place, at most 2^-8 of the value */
    float *h = host_act(x, N, 3, 1024);
    expect_near("x", h, ref, n, TOL_INPUT, B->act_size == sizeof(float) ? 0.0 : 0x1p-8);
    /* Float activations bit for bit: each value's product with the scale rounded, then the sum
     * (no FMA, which a GPU compiler would make of it): every backend's input is the CPU's. */
    size_t off = 0, first = 0;
    for (size_t i = 0; i < n && B->act_size == sizeof(float); i++) {
        int ch = (int)(i / 1024 % 3);
        volatile float product = (float)input_pixel(img, geom, i, c->input.reflect) * in_scale[ch];
        float want = product + in_shift[ch];
        if (memcmp(&h[i], &want, sizeof want) != 0 && off++ == 0) first = i;
    }
    EXPECT(off == 0, "%s: %s: x: %zu of %zu values not the product rounded, then the sum; first [%zu] %.9g",
           where, what, off, n, first, off ? h[first] : 0.0);
}

/* ---- conv ---- */

static void conv_sizes(const struct conv_shape *s, size_t *nx, size_t *nw, size_t *ny) {
    int Ho = s->H + 2 * s->pad - s->k + 1, Wo = s->W + 2 * s->pad - s->k + 1;
    *nx = (size_t)s->N * s->C * s->H * s->W, *nw = (size_t)s->K * s->C * s->k * s->k;
    *ny = (size_t)s->N * s->K * Ho * Wo;
}

/* GELU and its slope in double, from the definition (Phi by erfc: accurate in both tails). */
static double gelu_ref(double z) { return z * 0.5 * erfc(-z / sqrt(2.0)); }
static double gelu_slope_ref(double z) {
    return 0.5 * erfc(-z / sqrt(2.0)) + z * exp(-0.5 * z * z) / sqrt(2.0 * M_PI);
}

/* y (no ReLU), and from dy: dx, dw, db (accumulated into zeroed arrays), by the definition. */
static void conv_reference(const struct conv_shape *s, const float *x, const float *w, const float *b,
                           const float *dy, double *y, double *dx, double *dw, double *db) {
    int Ho = s->H + 2 * s->pad - s->k + 1, Wo = s->W + 2 * s->pad - s->k + 1, k = s->k;
    for (int n = 0; n < s->N; n++)
        for (int o = 0; o < s->K; o++)
            for (int i = 0; i < Ho; i++)
                for (int j = 0; j < Wo; j++) {
                    size_t yi = (((size_t)n * s->K + o) * Ho + i) * Wo + j;
                    double acc = b ? b[o] : 0.0;
                    for (int c = 0; c < s->C; c++)
                        for (int u = 0; u < k; u++)
                            for (int v = 0; v < k; v++) {
                                int si = i + u - s->pad, sj = j + v - s->pad;
                                if (si < 0 || si >= s->H || sj < 0 || sj >= s->W) continue;
                                size_t xi = (((size_t)n * s->C + c) * s->H + si) * s->W + sj;
                                size_t wi = (((size_t)o * s->C + c) * k + u) * k + v;
                                acc += (double)x[xi] * w[wi];
                                dx[xi] += (double)dy[yi] * w[wi];
                                dw[wi] += (double)dy[yi] * x[xi];
                            }
                    y[yi] = acc;
                    db[o] += dy[yi];
                }
}

/* The backward again with the outputs the case names set to NULL: the others as in the run
 * with all of them (dx, dw, db; expect_rerun). */
static void conv_skipped(const struct op_case *c, const void *x, const float *w, const void *dy,
                         const void *mask, void *ws, size_t ws_bytes, const void *dx, const float *dw,
                         const float *db) {
    unsigned f = c->flags;
    if (!(f & (F_NO_DX | F_NO_DW | F_NO_DB))) return;
    size_t nx, nw, ny;
    conv_sizes(&c->conv, &nx, &nw, &ny);
    void *vdx = f & F_NO_DX ? NULL : dev_act_nan(nx);
    float *vdw = f & F_NO_DW ? NULL : dev_nan(nw), *vdb = f & F_NO_DB ? NULL : dev_nan(c->conv.K);
    B->conv_backward(&c->conv, x, w, dy, vdx, vdw, vdb, mask, ws, ws_bytes);
    if (vdx) expect_rerun("dx with other outputs NULL", vdx, dx, nx, 1);
    if (vdw) expect_rerun("dw with other outputs NULL", vdw, dw, nw, 0);
    if (vdb) expect_rerun("db with other outputs NULL", vdb, db, c->conv.K, 0);
}

/* An output of conv_pool_backward (d1) against the two ops apart (d2), as expect_again. */
static void expect_apart(const char *out, const void *d1, const void *d2, size_t n, int act) {
    expect_again(out, d1, d2, n, act, "maxpool_backward, then conv_backward");
}

/* conv_pool_forward with a pk x pk pool: y and the winners bit for bit those of maxpool_forward on
 * conv_forward's output gy (any difference, even a near-tie decided otherwise, is a defect of
 * the fused path: both compute the same sums); y is also checked against the double reference
 * through gy's own check. With and without winners. Then conv_pool_backward from a pooled
 * gradient with those winners (through the ReLU when act is one; dx, dw, db as the case's
 * flags leave them) as maxpool_backward into a map and conv_backward from it give them (both
 * checked against double precision by their own cases); db within TOL of it. */
static void conv_pooled(const struct op_case *c, const void *gx, const float *gw, const float *gb,
                        enum conv_act act, int pk, const void *gy, const void *mask, void *ws,
                        size_t ws_bytes) {
    const struct conv_shape *s = &c->conv;
    int Ho = kernels_conv_out(s->H, s->k, s->pad), Wo = kernels_conv_out(s->W, s->k, s->pad);
    size_t np = (size_t)s->N * s->K * (Ho / pk) * (Wo / pk), nfull = (size_t)s->N * s->K * Ho * Wo, nx, nw,
           ny;
    conv_sizes(s, &nx, &nw, &ny);
    void *ry = dev_act_nan(np), *y = dev_act_nan(np), *full = dev_act_nan(nfull);
    unsigned char *rwin = dev_alloc(np), *win = dev_alloc(np);
    B->maxpool_forward(gy, ry, rwin, s->N, s->K, Ho, Wo, pk);
    B->conv_pool_forward(s, gx, gw, gb, act, pk, full, y, win, ws, ws_bytes);
    const char *unfused = "maxpool_forward of conv_forward's output";
    expect_equal_bytes("pooled y", y, ry, np * B->act_size, unfused);
    expect_equal_bytes("winners", win, rwin, np, unfused);
    y = dev_act_nan(np);
    B->conv_pool_forward(s, gx, gw, gb, act, pk, full, y, NULL, ws, ws_bytes);
    expect_equal_bytes("pooled y without winners", y, ry, np * B->act_size, unfused);

    float *dyp = hfill(np, -1, 1);
    act_round(dyp, np);
    void *gdyp = dev_act(dyp, s->N, s->K, (Ho / pk) * (Wo / pk)), *rfull = dev_act_nan(nfull);
    int relu = act == CONV_ACT_RELU;
    void *rdx = c->flags & F_NO_DX ? NULL : dev_act_nan(nx), *dx = rdx ? dev_act_nan(nx) : NULL;
    float *rdw = dev_nan(nw), *dw = dev_nan(nw), *rdb = gb ? dev_nan(s->K) : NULL,
          *db = gb ? dev_nan(s->K) : NULL;
    B->maxpool_backward(win, gdyp, rfull, s->N, s->K, Ho, Wo, pk, relu);
    B->conv_backward(s, gx, gw, rfull, rdx, rdw, rdb, mask, ws, ws_bytes);
    B->conv_pool_backward(s, gx, gw, gdyp, win, pk, relu, full, dx, dw, db, mask, ws, ws_bytes);
    if (dx) expect_apart("dx from the pooled gradient", dx, rdx, nx, 1);
    expect_apart("dw from the pooled gradient", dw, rdw, nw, 0);
    if (db) { /* (summed in another order on CUDA, kernels.h: within TOL) */
        const float *apart = host_of(rdb, s->K);
        double *ref = dnew(s->K);
        for (int k = 0; k < s->K; k++) ref[k] = apart[k];
        expect_rel("db from the pooled gradient", host_of(db, s->K), ref, s->K, TOL);
    }
}

/* The filter in a set made ready (conv_filters_create, _ready): y and dx bit for bit as with
 * the filter converted per call; then, the filter changed by a lookahead_update or an upload
 * without conv_filters_ready, y as a copy of the new filter (never made ready) gives, so no
 * stale ready form is read; and once ready again, the same. */
static void conv_ready(const struct op_case *c, const void *gx, float *gw, const float *gb, enum conv_act act,
                       const void *gdy, const void *mask, void *ws, size_t ws_bytes, const void *gy,
                       const void *gdx) {
    const struct conv_shape *s = &c->conv;
    size_t nx, nw, ny;
    conv_sizes(s, &nx, &nw, &ny);
    struct kernels_filters *set = B->conv_filters_create(1, s, (const float *const[]){gw});
    B->conv_filters_ready(set);
    void *y = dev_act_nan(ny), *dx = dev_act_nan(nx);
    B->conv_forward(s, gx, gw, gb, y, act, ws, ws_bytes);
    expect_again("y with the filter made ready", y, gy, ny, 1, "the filter converted per call");
    B->conv_backward(s, gx, gw, gdy, dx, NULL, NULL, mask, ws, ws_bytes);
    expect_again("dx with the filter made ready", dx, gdx, nx, 1, "the filter converted per call");
    float half = 0.5f, *other = hfill(nw, -0.5f, 0.5f), *weight = dev_of(&half, 1);
    for (int change = 0; change < 2; change++) {
        if (change == 0) B->lookahead_update(gw, dev_of(other, nw), nw, weight); /* w = the mean */
        else B->upload(gw, other, nw * sizeof(float));
        const float *now = host_of(gw, nw);
        float *fresh = dev_of(now, nw); /* the same values, in no set */
        void *ref = dev_act_nan(ny), *ref_dx = dev_act_nan(nx);
        B->conv_forward(s, gx, fresh, gb, ref, act, ws, ws_bytes);
        B->conv_backward(s, gx, fresh, gdy, ref_dx, NULL, NULL, mask, ws, ws_bytes);
        static const char *const names[2][2][2] = {
            {{"y after a lookahead_update of the ready filter",
              "dx after a lookahead_update of the ready filter"},
             {"y after it is ready again", "dx after it is ready again"}},
            {{"y after an upload over the ready filter", "dx after an upload over the ready filter"},
             {"y after it is ready again", "dx after it is ready again"}}};
        for (int ready = 0; ready < 2; ready++) {
            if (ready) B->conv_filters_ready(set);
            y = dev_act_nan(ny), dx = dev_act_nan(nx);
            B->conv_forward(s, gx, gw, gb, y, act, ws, ws_bytes);
            B->conv_backward(s, gx, gw, gdy, dx, NULL, NULL, mask, ws, ws_bytes);
            expect_again(names[change][ready][0], y, ref, ny, 1, "a copy of the filter in no set");
            expect_again(names[change][ready][1], dx, ref_dx, nx, 1, "a copy of the filter in no set");
        }
    }
    B->conv_filters_destroy(set);
}

static void run_conv(const struct op_case *c) {
    const struct conv_shape *s = &c->conv;
    size_t nx, nw, ny;
    conv_sizes(s, &nx, &nw, &ny);
    name_case(c, "conv N%d C%d K%d %dx%d k%d pad %d", s->N, s->C, s->K, s->H, s->W, s->k, s->pad);
    EXPECT(kernels_conv_out(s->H, s->k, s->pad) == s->H + 2 * s->pad - s->k + 1, "%s: kernels_conv_out",
           what);
    float *x = hfill(nx, -1, 1), *w = hfill(nw, -0.5f, 0.5f), *dy = hfill(ny, -1, 1);
    float *b = c->flags & F_BIAS ? hfill(s->K, -1, 1) : NULL;
    act_round(x, nx), act_round(dy, ny);
    double *ry = dnew(ny), *rdx = dnew(nx), *rdw = dnew(nw), *rdb = dnew(s->K);
    conv_reference(s, x, w, b, dy, ry, rdx, rdw, rdb);
    for (size_t i = 0; i < ny && c->flags & F_RELU; i++) ry[i] = ry[i] > 0 ? ry[i] : 0.0;
    for (size_t i = 0; i < ny && c->flags & F_GELU; i++) ry[i] = gelu_ref(ry[i]);
    for (size_t i = 0; i < nx && c->flags & F_MASK; i++) rdx[i] = x[i] > 0 ? rdx[i] : 0.0;

    int HW = s->H * s->W, HWo = (int)(ny / ((size_t)s->N * s->K));
    void *gx = dev_act(x, s->N, s->C, HW), *gdy = dev_act(dy, s->N, s->K, HWo);
    float *gw = dev_of(w, nw), *gb = b ? dev_of(b, s->K) : NULL;
    const void *mask = c->flags & F_MASK ? gx : NULL;
    size_t ws_bytes = B->conv_workspace(s, CONV_FORWARD | CONV_BACKWARD_DATA | CONV_BACKWARD_FILTER);
    void *ws = dev_alloc(ws_bytes);
    void *gy = dev_act_nan(ny), *gdx = dev_act_nan(nx);
    float *gdw = dev_nan(nw), *gdb = dev_nan(s->K);
    enum conv_act act = c->flags & F_RELU ? CONV_ACT_RELU : c->flags & F_GELU ? CONV_ACT_GELU : CONV_ACT_NONE;
    B->conv_forward(s, gx, gw, gb, gy, act, ws, ws_bytes);
    expect_products("y", host_act(gy, s->N, s->K, HWo), ry, ny);
    B->conv_backward(s, gx, gw, gdy, gdx, gdw, gdb, mask, ws, ws_bytes);
    expect_products("dx", host_act(gdx, s->N, s->C, HW), rdx, nx);
    expect_products("dw", host_of(gdw, nw), rdw, nw);
    expect_rel("db", host_of(gdb, s->K), rdb, s->K, TOL);
    conv_skipped(c, gx, gw, gdy, mask, ws, ws_bytes, gdx, gdw, gdb);
    if (c->flags & (F_POOL | F_POOL3))
        conv_pooled(c, gx, gw, gb, act, c->flags & F_POOL ? 2 : 3, gy, mask, ws, ws_bytes);
    conv_ready(c, gx, gw, gb, act, gdy, mask, ws, ws_bytes, gy, gdx); /* (last: it changes gw) */
}

/* ---- relu, gelu ---- */

static void run_relu(const struct op_case *c) {
    size_t n = (size_t)c->n;
    name_case(c, "relu n %zu", n);
    float *x = hfill(n, -1, 1), *dy = hfill(n, -1, 1);
    for (size_t i = 0; i < n; i += 5) x[i] = i % 10 ? 0.0f : -0.0f;   /* y = 0 and dx = 0 at zeros */
    for (size_t i = 3; i < n && c->flags & F_NAN; i += 7) x[i] = NAN; /* y NaN, dx = dy there */
    act_round(x, n), act_round(dy, n);
    double *ry = dnew(n), *rdx = dnew(n);
    for (size_t i = 0; i < n; i++) ry[i] = x[i] <= 0 ? 0.0 : x[i], rdx[i] = x[i] <= 0 ? 0.0 : dy[i];
    void *gx = dev_flat(x, n), *gy = c->flags & F_INPLACE ? gx : dev_act_nan(n);
    B->relu_forward(gx, gy, n);
    expect_abs("y", host_flat(gy, n), ry, n, 0);
    void *gdy = dev_flat(dy, n), *gdx = c->flags & F_INPLACE ? gdy : dev_act_nan(n);
    B->relu_backward(gy, gdy, gdx, n);
    expect_abs("dx", host_flat(gdx, n), rdx, n, 0);
}

static void run_gelu(const struct op_case *c) {
    size_t n = (size_t)c->n;
    name_case(c, "gelu n %zu", n);
    float *x = hfill(n, -6, 6), *dy = hfill(n, -1, 1);
    x[0] = n > 1 ? 0.0f : x[0], x[n - 1] = n > 2 ? -12.0f : x[n - 1]; /* 0 and a far tail */
    /* In the longer cases, -16 to 15.5 in steps of 1/2: erf saturating, the density below
     * float's range (|x| > 13.2); short ones would have almost nothing but zeros to compare */
    for (size_t i = 1; n >= 1000 && i <= 64; i++) x[i] = -16.0f + 0.5f * (float)(i - 1);
    act_round(x, n), act_round(dy, n);
    double *ry = dnew(n), *rdx = dnew(n);
    for (size_t i = 0; i < n; i++) {
        ry[i] = gelu_ref(x[i]), rdx[i] = dy[i] * gelu_slope_ref(x[i]);
    }
    void *gx = dev_flat(x, n), *gy = dev_act_nan(n);
    B->gelu_forward(gx, gy, n);
    expect_act("y", host_flat(gy, n), ry, n, TOL);
    void *gdy = dev_flat(dy, n), *gdx = c->flags & F_INPLACE ? gdy : dev_act_nan(n);
    B->gelu_backward(gx, gdy, gdx, n);
    expect_act("dx", host_flat(gdx, n), rdx, n, TOL);
}

/* ---- maxpool ---- */

/* y = the max of each k x k window of x[Q][H][W]; dy routed to the window's first maximum
 * (row-major) into dx[0], and into dx[1] through a ReLU (0 where that max <= 0). A NaN wins
 * as in PyTorch's kernels (`val > maxval || isnan(val)`): the last NaN of a window is its
 * maximum and takes dy, also through the ReLU. win: the winner bytes the forward records
 * (kernels.h). Returns the number of windows with a tied maximum. */
static int maxpool_reference(const float *x, const float *dy, double *y, double *dx[2], double *win, int Q,
                             int H, int W, int k) {
    int Ho = H / k, Wo = W / k, ties = 0;
    for (int q = 0; q < Q; q++)
        for (int i = 0; i < Ho; i++)
            for (int j = 0; j < Wo; j++) {
                const float *xq = x + (size_t)q * H * W;
                int best = i * k * W + j * k, nmax = 0;
                for (int u = 0; u < k; u++)
                    for (int v = 0; v < k; v++) {
                        int at = (i * k + u) * W + j * k + v;
                        if (xq[at] > xq[best] || (isnan(xq[at]) && at != best)) best = at, nmax = 1;
                        else nmax += xq[at] == xq[best];
                    }
                ties += nmax > 1;
                size_t yi = ((size_t)q * Ho + i) * Wo + j, xi = (size_t)q * H * W + best;
                int r = best / W - i * k, c = best % W - j * k;
                win[yi] = (r * k + c) | (xq[best] <= 0 ? 0 : MAXPOOL_PASSES);
                y[yi] = xq[best];
                dx[0][xi] = dy[yi];
                dx[1][xi] = xq[best] <= 0 ? 0.0 : dy[yi];
            }
    return ties;
}

static void run_maxpool(const struct op_case *c) {
    int N = c->pool.N, C = c->pool.C, H = c->pool.H, W = c->pool.W, k = c->pool.k;
    size_t nx = (size_t)N * C * H * W, ny = (size_t)N * C * (H / k) * (W / k);
    name_case(c, "maxpool N%d C%d %dx%d k%d", N, C, H, W, k);
    float *x = hfill(nx, -1, 1), *dy = hfill(ny, -1, 1);
    for (size_t i = 0; i < nx; i++) {
        if (c->flags & F_TIES) x[i] = roundf(x[i] * 2) / 2; /* 5 values: windows often tie */
        if (c->flags & F_RELU) x[i] = x[i] > 0 ? x[i] : 0.0f;
    }
    for (size_t q = 0; q < (size_t)N * C && c->flags & F_TIES; q++) /* the first window always */
        x[q * H * W] = x[q * H * W + 1] = 1.0f;
    for (size_t i = 0; i < nx && c->flags & F_NAN; i++) /* windows with 0, 1 and 2 NaNs */
        if (i % 13 == 0 || i % 17 == 5) x[i] = NAN;
    act_round(x, nx), act_round(dy, ny);
    double *ry = dnew(ny), *rdx[2] = {dnew(nx), dnew(nx)}, *rwin = dnew(ny);
    int ties = maxpool_reference(x, dy, ry, rdx, rwin, N * C, H, W, k);
    EXPECT(!(c->flags & F_TIES) || ties > 0, "%s: %s: no tied window", where, what);
    size_t nans = 0;
    for (size_t i = 0; i < ny; i++) nans += isnan(ry[i]);
    EXPECT(!(c->flags & F_NAN) || (nans > 0 && nans < ny), "%s: %s: %zu NaN outputs", where, what, nans);
    int HWo = (H / k) * (W / k);
    void *gx = dev_act(x, N, C, H * W), *gdy = dev_act(dy, N, C, HWo), *gy = dev_act_nan(ny);
    unsigned char *gwin = dev_alloc(ny);
    B->maxpool_forward(gx, gy, NULL, N, C, H, W, k); /* evaluation: no winners */
    expect_abs("y without winners", host_act(gy, N, C, HWo), ry, ny, 0);
    gy = dev_act_nan(ny);
    B->maxpool_forward(gx, gy, gwin, N, C, H, W, k);
    expect_abs("y", host_act(gy, N, C, HWo), ry, ny, 0);
    expect_abs("winners", host_winners(gwin, N, C, HWo), rwin, ny, 0);
    for (int relu = 0; relu < 2; relu++) {
        void *gdx = dev_act_nan(nx);
        B->maxpool_backward(gwin, gdy, gdx, N, C, H, W, k, relu);
        expect_abs(relu ? "dx through ReLU" : "dx", host_act(gdx, N, C, H * W), rdx[relu], nx, 0);
    }
}

/* ---- batchnorm ---- */

struct bn_data {
    float *x, *dy, *gamma, *beta, *rm, *rv;                                     /* inputs */
    double *y, *mean, *invstd, *rm_new, *rv_new, *dx, *dgamma, *dbeta, *y_eval; /* reference */
};

/* Every element k of channel ch in x[N][C][HW]. */
#define FOR_CHANNEL(k)                                                                                       \
    for (int n_ = 0; n_ < N; n_++)                                                                           \
        for (size_t k = ((size_t)n_ * C + ch) * HW, end_ = k + HW; k < end_; k++)

/* y = z or GELU(z) (F_GELU), and the backward from g = dy, or dy * GELU'(z). */
static void bn_reference(const struct op_case *c, struct bn_data *d) {
    int N = c->bn.N, C = c->bn.C, HW = c->bn.HW, gelu = !!(c->flags & F_GELU);
    double cnt = (double)N * HW, eps = c->bn.eps, mom = c->bn.momentum;
    for (int ch = 0; ch < C; ch++) {
        double s = 0, sq = 0, sdy = 0, sdyx = 0;
        FOR_CHANNEL(k) s += d->x[k];
        double mu = s / cnt;
        FOR_CHANNEL(k) sq += (d->x[k] - mu) * (d->x[k] - mu);
        double is = 1 / sqrt(sq / cnt + eps), eval_is = 1 / sqrt(d->rv[ch] + eps);
        FOR_CHANNEL(k) {
            double xh = (d->x[k] - mu) * is, z = xh * d->gamma[ch] + d->beta[ch];
            double ze = (d->x[k] - d->rm[ch]) * eval_is * d->gamma[ch] + d->beta[ch];
            double g = gelu ? d->dy[k] * gelu_slope_ref(z) : d->dy[k];
            d->y[k] = gelu ? gelu_ref(z) : z;
            d->y_eval[k] = gelu ? gelu_ref(ze) : ze;
            d->dx[k] = g; /* for now: the gradient the batch norm sees */
            sdy += g, sdyx += g * xh;
        }
        FOR_CHANNEL(k)
        d->dx[k] = d->gamma[ch] * is * (d->dx[k] - sdy / cnt - (d->x[k] - mu) * is * sdyx / cnt);
        d->mean[ch] = mu, d->invstd[ch] = is, d->dgamma[ch] = sdyx, d->dbeta[ch] = sdy;
        d->rm_new[ch] = (1 - mom) * d->rm[ch] + mom * mu;
        d->rv_new[ch] = (1 - mom) * d->rv[ch] + mom * sq / (cnt - 1);
    }
}

static void bn_inputs(const struct op_case *c, struct bn_data *d) {
    size_t n = (size_t)c->bn.N * c->bn.C * c->bn.HW, C = (size_t)c->bn.C;
    d->x = hfill(n, -2 + c->bn.offset, 3 + c->bn.offset), d->dy = hfill(n, -1, 1);
    /* F_SPARSE: each channel 0 but for x[0][c][0] = 4097.3, whose square rounds in float: summed
     * about it, each zero adds the same rounded square, and the variance (about 4097^2 / n) is
     * lost to cancellation unless the sums shift away from it. */
    if (c->flags & F_SPARSE)
        for (size_t k = 0; k < n; k++) d->x[k] = k % c->bn.HW == 0 && k / c->bn.HW < C ? 4097.3f : 0.0f;
    act_round(d->x, n), act_round(d->dy, n);
    d->gamma = hfill(C, 0.5f, 1.5f), d->beta = hfill(C, -1, 1);
    d->rm = hfill(C, -0.2f, 0.2f), d->rv = hfill(C, 0.5f, 2);
    double **refs[] = {&d->y,    &d->dx,     &d->y_eval, /* per element, then per channel */
                       &d->mean, &d->invstd, &d->rm_new, &d->rv_new, &d->dgamma, &d->dbeta};
    for (int i = 0; i < 9; i++) *refs[i] = dnew(i < 3 ? n : C);
    bn_reference(c, d);
}

/* The backward with every output, then (F_NO_DGAMMA) with dgamma NULL, (F_NO_DX) with dx NULL. */
static void bn_backward(const struct op_case *c, const struct bn_data *d, const void *gx, const float *ggamma,
                        const float *gbeta, const float *gmean, const float *ginvstd) {
    int N = c->bn.N, C = c->bn.C, HW = c->bn.HW, gelu = !!(c->flags & F_GELU);
    size_t n = (size_t)N * C * HW;
    void *gdy = dev_act(d->dy, N, C, HW), *gdx = dev_act_nan(n);
    float *gdg = dev_nan(C), *gdb = dev_nan(C);
    B->batchnorm_backward(gx, gdy, ggamma, gbeta, gmean, ginvstd, gdx, gdg, gdb, N, C, HW, gelu);
    expect_act("dx", host_act(gdx, N, C, HW), d->dx, n, TOL);
    expect_rel("dgamma", host_of(gdg, C), d->dgamma, C, TOL);
    expect_rel("dbeta", host_of(gdb, C), d->dbeta, C, TOL);
    if (c->flags & F_NO_DGAMMA) {
        void *vdx = dev_act_nan(n);
        float *vdb = dev_nan(C);
        B->batchnorm_backward(gx, gdy, ggamma, gbeta, gmean, ginvstd, vdx, NULL, vdb, N, C, HW, gelu);
        expect_same_act("dx with dgamma NULL", vdx, gdx, n);
        expect_same("dbeta with dgamma NULL", vdb, gdb, C);
    }
    if (c->flags & F_NO_DX) {
        float *vdg = dev_nan(C), *vdb = dev_nan(C);
        B->batchnorm_backward(gx, gdy, ggamma, gbeta, gmean, ginvstd, NULL, vdg, vdb, N, C, HW, gelu);
        expect_same("dgamma with dx NULL", vdg, gdg, C);
        expect_same("dbeta with dx NULL", vdb, gdb, C);
    }
}

/* F_ORDER: forward (train) and backward on activations one element past an aligned address
 * (CUDA then takes no 16-byte packs) against the same on aligned buffers: the same bits, so
 * the channel sums' order does not depend on where the buffers lie. dy of channel 0 holds
 * 1e20, -1e20 and 1 at pixels 0, 1 and 8 of image 0, so that sums grouped differently differ
 * (1 against 0 in dbeta). */
static void bn_misaligned(const struct op_case *c, const struct bn_data *d) {
    int N = c->bn.N, C = c->bn.C, HW = c->bn.HW, gelu = !!(c->flags & F_GELU);
    size_t n = (size_t)N * C * HW, e = B->act_size;
    CHECK(HW > 8);
    float *dy = hnew(n * sizeof(float));
    memcpy(dy, d->dy, n * sizeof(float));
    dy[0] = 1e20f, dy[1] = -1e20f, dy[8] = 1.0f;
    float *gg = dev_of(d->gamma, C), *gb = dev_of(d->beta, C);
    char *out[2][6]; /* [aligned, off] y, dx, mean, invstd, dgamma, dbeta */
    float *stats[2][2];
    for (int off = 0; off < 2; off++) {
        char *act[4]; /* x, dy, y, dx */
        for (int i = 0; i < 4; i++) act[i] = (char *)dev_alloc((n + 1) * e) + off * e;
        for (int i = 0; i < 2; i++) { /* x and dy as dev_act lays them out */
            void *t = dev_act(i ? dy : d->x, N, C, HW), *h = hnew(n * e);
            B->download(h, t, n * e);
            B->upload(act[i], h, n * e);
        }
        float *rm = dev_of(d->rm, C), *rv = dev_of(d->rv, C), *m = dev_nan(C), *is = dev_nan(C);
        float *dg = dev_nan(C), *db = dev_nan(C);
        B->batchnorm_forward_train(act[0], gg, gb, act[2], m, is, rm, rv, c->bn.momentum, c->bn.eps, N, C, HW,
                                   gelu);
        B->batchnorm_backward(act[0], act[1], gg, gb, m, is, act[3], dg, db, N, C, HW, gelu);
        char *o[6] = {act[2], act[3], (char *)m, (char *)is, (char *)dg, (char *)db};
        memcpy(out[off], o, sizeof o);
        stats[off][0] = rm, stats[off][1] = rv;
    }
    static const char *const names[6] = {"y, misaligned",         "dx, misaligned",
                                         "save_mean, misaligned", "save_invstd, misaligned",
                                         "dgamma, misaligned",    "dbeta, misaligned"};
    for (int i = 0; i < 6; i++)
        expect_equal_bytes(names[i], out[1][i], out[0][i], i < 2 ? n * e : C * sizeof(float),
                           "aligned buffers");
    expect_equal_bytes("running_mean, misaligned", stats[1][0], stats[0][0], C * sizeof(float),
                       "aligned buffers");
    expect_equal_bytes("running_var, misaligned", stats[1][1], stats[0][1], C * sizeof(float),
                       "aligned buffers");
}

static void run_batchnorm(const struct op_case *c) {
    int N = c->bn.N, C = c->bn.C, HW = c->bn.HW, gelu = !!(c->flags & F_GELU);
    size_t n = (size_t)N * C * HW;
    name_case(c, "batchnorm N%d C%d HW%d eps %g momentum %g x offset %g", N, C, HW, c->bn.eps, c->bn.momentum,
              c->bn.offset);
    struct bn_data d;
    bn_inputs(c, &d);
    void *gx = dev_act(d.x, N, C, HW), *gy = dev_act_nan(n);
    float *gg = dev_of(d.gamma, C), *gb = dev_of(d.beta, C);
    float *grm = dev_of(d.rm, C), *grv = dev_of(d.rv, C), *gm = dev_nan(C), *gi = dev_nan(C);
    B->batchnorm_forward_train(gx, gg, gb, gy, gm, gi, grm, grv, c->bn.momentum, c->bn.eps, N, C, HW, gelu);
    expect_rel("save_mean", host_of(gm, C), d.mean, C, TOL);
    expect_rel("save_invstd", host_of(gi, C), d.invstd, C, TOL);
    expect_rel("running_mean", host_of(grm, C), d.rm_new, C, TOL);
    expect_rel("running_var", host_of(grv, C), d.rv_new, C, TOL);
    /* F_FAR: statistics summed without a shift would cancel (they must not); the outputs carry
     * x's rounding times the offset on every backend (z = x * scale + shift), so are not held
     * to TOL there. */
    if (c->flags & F_FAR) return;
    expect_act("y (train)", host_act(gy, N, C, HW), d.y, n, TOL);
    bn_backward(c, &d, gx, gg, gb, gm, gi);
    float *erm = dev_of(d.rm, C), *erv = dev_of(d.rv, C);
    void *gye = dev_act_nan(n);
    B->batchnorm_forward_eval(gx, gg, gb, erm, erv, c->bn.eps, gye, N, C, HW, gelu);
    expect_act("y (eval)", host_act(gye, N, C, HW), d.y_eval, n, TOL);
    if (c->flags & F_ORDER) bn_misaligned(c, &d);
}

/* ---- linear ---- */

static void linear_reference(const struct op_case *c, const float *x, const float *w, const float *b,
                             const float *dy, double *y, double *dx, double *dw, double *db) {
    int N = c->lin.N, I = c->lin.I, O = c->lin.O;
    double s = c->lin.scale;
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double acc = b ? b[o] : 0.0, g = s * dy[(size_t)n * O + o];
            for (int i = 0; i < I; i++) {
                acc += (double)x[(size_t)n * I + i] * w[(size_t)o * I + i];
                dx[(size_t)n * I + i] += g * w[(size_t)o * I + i];
                dw[(size_t)o * I + i] += g * x[(size_t)n * I + i];
            }
            y[(size_t)n * O + o] = s * acc;
            db[o] += g;
        }
}

static void run_linear(const struct op_case *c) {
    int N = c->lin.N, I = c->lin.I, O = c->lin.O;
    size_t nx = (size_t)N * I, nw = (size_t)O * I, ny = (size_t)N * O;
    float sc = c->lin.scale;
    name_case(c, "linear N%d I%d O%d scale %g", N, I, O, sc);
    float *x = hfill(nx, -1, 1), *w = hfill(nw, -0.1f, 0.1f), *dy = hfill(ny, -1, 1);
    float *b = c->flags & F_BIAS ? hfill(O, -1, 1) : NULL;
    act_round(x, nx), act_round(dy, ny);
    double *ry = dnew(ny), *rdx = dnew(nx), *rdw = dnew(nw), *rdb = dnew(O);
    linear_reference(c, x, w, b, dy, ry, rdx, rdw, rdb);
    void *gx = dev_flat(x, nx), *gdy = dev_flat(dy, ny);
    float *gw = dev_of(w, nw), *gb = b ? dev_of(b, O) : NULL;
    size_t ws_bytes = B->linear_workspace(N, I, O);
    void *ws = dev_alloc(ws_bytes);
    void *gy = dev_act_nan(ny), *gdx = dev_act_nan(nx);
    float *gdw = dev_nan(nw), *gdb = dev_nan(O);
    B->linear_forward(gx, gw, gb, gy, N, I, O, sc, ws, ws_bytes);
    expect_products("y", host_flat(gy, ny), ry, ny);
    B->linear_backward(gx, gw, gdy, gdx, gdw, gdb, N, I, O, sc, ws, ws_bytes);
    expect_products("dx", host_flat(gdx, nx), rdx, nx);
    expect_products("dw", host_of(gdw, nw), rdw, nw);
    expect_rel("db", host_of(gdb, O), rdb, O, TOL);
    if (!(c->flags & (F_NO_DX | F_NO_DB))) return;
    void *vdx = c->flags & F_NO_DX ? NULL : dev_act_nan(nx);
    float *vdw = dev_nan(nw), *vdb = c->flags & F_NO_DB ? NULL : dev_nan(O);
    B->linear_backward(gx, gw, gdy, vdx, vdw, vdb, N, I, O, sc, ws, ws_bytes);
    expect_same("dw with other outputs NULL", vdw, gdw, nw);
    if (vdx) expect_same_act("dx with db NULL", vdx, gdx, nx);
    if (vdb) expect_same("db with dx NULL", vdb, gdb, O);
}

/* ---- softmax_xent ---- */

/* Logits in [-5, 5); F_CONFIDENT: 100 at the label of row 3 (right) and next to the label of
 * row 5 (wrong); F_TIES: rows whose maximum is tied, with the label the first or the second of
 * the tie. */
static void xent_inputs(const struct op_case *c, float *z, int *labels) {
    int N = c->xent.N, K = c->xent.classes;
    for (int n = 0; n < N; n++) labels[n] = (int)((n * 7u + seed) % (unsigned)K);
    for (int n = 0; n < N && c->flags & F_TIES; n++) {
        int other = (labels[n] + (n % 2 ? K - 1 : 1)) % K; /* before or after the label, mod K */
        if (n % 3 == 1) z[n * K + labels[n]] = z[n * K + other] = 9.0f;
    }
    if (c->flags & F_CONFIDENT && N > 5)
        z[3 * K + labels[3]] = 100.0f, z[5 * K + (labels[5] + 1) % K] = 100.0f;
}

/* With target t[j] = (1 - smoothing) onehot + smoothing / K: loss = sum over rows of
 * -sum_j t[j] log softmax[j], dz = softmax - t, both divided by N for the mean; *correct: rows
 * whose first maximum is the label. */
static double xent_reference(const struct op_case *c, const float *z, const int *labels, double *dz,
                             int *correct) {
    int N = c->xent.N, K = c->xent.classes;
    double sm = c->xent.smoothing, div = c->xent.reduction == XENT_MEAN ? N : 1, loss = 0;
    *correct = 0;
    for (int n = 0; n < N; n++) {
        const float *zn = z + (size_t)n * K;
        int arg = 0;
        for (int j = 1; j < K; j++) arg = zn[j] > zn[arg] ? j : arg;
        double s = 0;
        for (int j = 0; j < K; j++) s += exp((double)zn[j] - zn[arg]);
        *correct += arg == labels[n];
        for (int j = 0; j < K; j++) {
            double t = (1 - sm) * (j == labels[n]) + sm / K, logp = zn[j] - zn[arg] - log(s);
            loss -= t * logp;
            dz[(size_t)n * K + j] = (exp(logp) - t) / div;
        }
    }
    return loss / div;
}

static void run_xent(const struct op_case *c) {
    int N = c->xent.N, K = c->xent.classes, correct;
    size_t nz = (size_t)N * K;
    name_case(c, "softmax_xent N%d classes %d smoothing %g %s", N, K, c->xent.smoothing,
              c->xent.reduction == XENT_MEAN ? "mean" : "sum");
    float *z = hfill(nz, -5, 5);
    int *labels = hnew((size_t)N * sizeof(int));
    xent_inputs(c, z, labels);
    act_round(z, nz);
    double *rdz = dnew(nz), loss = xent_reference(c, z, labels, rdz, &correct);
    void *gz = dev_flat(z, nz), *gdz = dev_act_nan(nz);
    float *gout = dev_nan(2);
    int *glab = dev_copy(labels, (size_t)N * sizeof(int));
    B->softmax_xent(gz, glab, gdz, gout, N, K, c->xent.smoothing, c->xent.reduction);
    float *out = host_of(gout, 2);
    EXPECT(fabs(out[0] - loss) <= TOL_FINE * fabs(loss), "%s: %s: loss %.9g, want %.9g", where, what, out[0],
           loss);
    EXPECT(out[1] == correct, "%s: %s: correct %g, want %d", where, what, out[1], correct);
    expect_act("dlogits", host_flat(gdz, nz), rdz, nz, TOL_FINE);
    if (!(c->flags & F_NO_GRAD)) return;
    float *vout = dev_nan(2);
    B->softmax_xent(gz, glab, NULL, vout, N, K, c->xent.smoothing, c->xent.reduction);
    expect_same("out with dlogits NULL", vout, gout, 2);
}

/* ---- sgd_update ---- */

/* F_GROUPS: element i in group i % 3 == 0 (lr x 64, weight decay / 64, airbench's batch-norm
 * group), skipped where i % 7 == 3, else group 0; each element must also equal, bit for bit, what
 * sgd_update without groups makes of it with its group's settings. The lr changes every step
 * (scalars_set before each update, in the queue behind the last). */
static unsigned char sgd_group_of(size_t i) { return i % 7 == 3 ? SGD_SKIP : i % 3 == 0; }

/* hyper (backend memory) = step `step`'s settings of case c, group k's as group 0 with one < 0. */
static void sgd_hyper_set(const struct op_case *c, int step, int k, float *hyper) {
    float lr = c->sgd.lr * (1.0f - 0.25f * (float)step), wd = c->sgd.weight_decay;
    struct sgd_hyper h = {{lr, lr * 64.0f}, {wd, wd / 64.0f}, c->sgd.momentum, c->sgd.grad_scale};
    if (k == 1) h.lr[0] = h.lr[1], h.weight_decay[0] = h.weight_decay[1];
    B->scalars_set(hyper, (const float *)&h, SGD_HYPER_FLOATS);
}

static void run_sgd(const struct op_case *c) {
    size_t n = (size_t)c->sgd.n;
    int groups = !!(c->flags & F_GROUPS);
    double lr = c->sgd.lr, mom = c->sgd.momentum, wd = c->sgd.weight_decay, gs = c->sgd.grad_scale;
    name_case(c, "sgd_update n %zu lr %g momentum %g weight decay %g grad scale %g%s%s%s", n, lr, mom, wd, gs,
              c->sgd.resume ? " resumed" : "", c->sgd.nesterov ? " nesterov" : "", groups ? " groups" : "");
    unsigned char *group = hnew(n);
    for (size_t i = 0; i < n; i++) group[i] = groups ? sgd_group_of(i) : 0;
    float *p = hfill(n, -1, 1), *m = c->sgd.resume ? hfill(n, -0.5f, 0.5f) : hnew(n * sizeof(float));
    double *rp = dnew(n), *rm = dnew(n);
    for (size_t i = 0; i < n; i++) rp[i] = p[i], rm[i] = m[i];
    float *gp = dev_of(p, n), *gm = dev_of(m, n), *gg = dev_nan(n);
    float *hyper[1 + SGD_GROUPS];
    for (int k = 0; k <= SGD_GROUPS; k++) hyper[k] = dev_nan(SGD_HYPER_FLOATS);
    /* with groups, the same steps by sgd_update without groups with each group's settings, on copies */
    float *sp[SGD_GROUPS], *sm[SGD_GROUPS];
    for (int k = 0; k < SGD_GROUPS; k++) sp[k] = dev_of(p, n), sm[k] = dev_of(m, n);
    unsigned char *ggroup = dev_copy(group, n);
    for (int step = 0; step < 3; step++) {
        float *gr = hfill(n, -1, 1);
        B->upload(gg, gr, n * sizeof(float));
        sgd_hyper_set(c, step, -1, hyper[SGD_GROUPS]);
        B->sgd_update(gp, gg, gm, groups ? ggroup : NULL, n, (const struct sgd_hyper *)hyper[SGD_GROUPS],
                      c->sgd.nesterov);
        for (int k = 0; groups && k < SGD_GROUPS; k++) {
            sgd_hyper_set(c, step, k, hyper[k]);
            B->sgd_update(sp[k], gg, sm[k], NULL, n, (const struct sgd_hyper *)hyper[k], c->sgd.nesterov);
        }
        float slr = c->sgd.lr * (1.0f - 0.25f * (float)step);
        for (size_t i = 0; i < n; i++) {
            if (group[i] == SGD_SKIP) continue;
            double glr = group[i] ? (double)(slr * 64.0f) : slr,
                   gwd = group[i] ? (double)(c->sgd.weight_decay / 64.0f) : wd;
            double gi = gs * gr[i] + gwd * rp[i];
            rm[i] = mom * rm[i] + gi;
            rp[i] -= glr * (c->sgd.nesterov ? gi + mom * rm[i] : rm[i]);
        }
    }
    float *hp = host_of(gp, n), *hm = host_of(gm, n);
    expect_rel("params after 3 steps", hp, rp, n, TOL_FINE);
    expect_rel("momentum after 3 steps", hm, rm, n, TOL_FINE);
    if (!groups) return;
    float *hs[SGD_GROUPS][2];
    for (int k = 0; k < SGD_GROUPS; k++) hs[k][0] = host_of(sp[k], n), hs[k][1] = host_of(sm[k], n);
    size_t moved = 0, apart = 0;
    for (size_t i = 0; i < n; i++) {
        if (group[i] == SGD_SKIP) {
            moved += memcmp(&hp[i], &p[i], 4) != 0 || memcmp(&hm[i], &m[i], 4) != 0;
            continue;
        }
        apart += memcmp(&hp[i], &hs[group[i]][0][i], 4) != 0 || memcmp(&hm[i], &hs[group[i]][1][i], 4) != 0;
    }
    EXPECT(moved == 0, "%s: %s: %zu skipped elements changed", where, what, moved);
    EXPECT(apart == 0, "%s: %s: %zu elements differ from sgd_update with their group's settings", where, what,
           apart);
}

/* ---- lookahead_update ---- */

/* ema += (1 - decay) (p - ema), p = ema: the weight as the op takes it (1 - decay in float), the
 * rest in double. At the ends torch.lerp's formula is exact: weight 1 gives p, weight 0 the old
 * ema, bit for bit. ema is drawn on another scale than p, so that p - ema rounds and the naive
 * ema + w (p - ema) misses those exact ends (on hfill's common grid it would hit them). */
static void run_lookahead(const struct op_case *c) {
    size_t n = (size_t)c->lookahead.n;
    float w = c->lookahead.weight;
    name_case(c, "lookahead_update n %zu weight %.9g", n, w);
    float *p = hfill(n, -1, 1), *ema = hfill(n, -0.01f, 0.01f);
    double *ref = dnew(n);
    for (size_t i = 0; i < n; i++) ref[i] = ema[i] + (double)w * ((double)p[i] - ema[i]);
    const float *exact = w == 1.0f ? p : w == 0.0f ? ema : NULL;
    float *gp = dev_of(p, n), *gema = dev_of(ema, n), *gw = dev_nan(1);
    B->scalars_set(gw, &w, 1);
    B->lookahead_update(gp, gema, n, gw);
    float *hema = host_of(gema, n);
    expect_rel("ema", hema, ref, n, TOL_FINE);
    EXPECT(!exact || memcmp(hema, exact, n * sizeof(float)) == 0, "%s: %s: ema is not exactly %s", where,
           what, exact == p ? "p" : "the old ema");
    EXPECT(memcmp(host_of(gp, n), hema, n * sizeof(float)) == 0, "%s: %s: p differs from ema", where, what);
}

/* ---- the asynchronous copies ---- */

/* The first half of x by input_upload_async (input queue), the rest by upload_async (transfer
 * queue) -> compute_wait on both -> relu_forward -> download_async -> event_wait, with the
 * host buffers from host_alloc; plus a bytes-0 download_async that only marks a point. */
static void run_copy(const struct op_case *c) {
    size_t n = (size_t)c->n, e = B->act_size, bytes = n * e;
    name_case(c, "async copies n %zu", n);
    float *x = hfill(n, -1, 1);
    act_round(x, n);
    double *ref = dnew(n);
    for (size_t i = 0; i < n; i++) ref[i] = x[i] > 0 ? x[i] : 0.0;
    char *hin = B->host_alloc(bytes), *hout = B->host_alloc(bytes);
    char *gx = dev_act_nan(n), *gy = dev_act_nan(n);
    kernels_act_from_float(e, x, hin, n);
    memset(hout, 0xff, bytes);
    struct kernels_event *in = B->event_create(), *up = B->event_create(), *down = B->event_create();
    struct kernels_event *mark = B->event_create();
    size_t half = n / 2;
    B->input_upload_async(gx, hin, half * e, in);
    B->upload_async(gx + half * e, hin + half * e, (n - half) * e, up);
    B->compute_wait(in);
    B->compute_wait(up);
    B->relu_forward(gx, gy, n);
    B->download_async(hout, gy, bytes, down);
    B->download_async(hout, gy, 0, mark);
    B->event_wait(down);
    B->event_wait(mark);
    EXPECT(B->event_done(in) && B->event_done(up) && B->event_done(down) && B->event_done(mark),
           "%s: %s: event_done 0 after the wait", where, what);
    float *y = hnew(n * sizeof(float));
    kernels_act_to_float(e, hout, y, n);
    expect_abs("downloaded y", y, ref, n, 0);
    /* download_queued between the op that writes y and one that overwrites it (with relu of a
     * buffer of zeros): the copy holds the first y */
    char *hq = B->host_alloc(bytes), *gz = dev_act_nan(n);
    memset(hq, 0xff, bytes);
    memset(hin, 0, bytes);
    B->upload(gz, hin, bytes);
    B->relu_forward(gx, gy, n);
    B->download_queued(hq, gy, bytes);
    B->relu_forward(gz, gy, n);
    B->download_async(NULL, NULL, 0, mark);
    B->event_wait(mark);
    kernels_act_to_float(e, hq, y, n);
    expect_abs("y by download_queued", y, ref, n, 0);
    B->event_destroy(in), B->event_destroy(up), B->event_destroy(down), B->event_destroy(mark);
    B->host_free(hin), B->host_free(hout), B->host_free(hq);
}

/* ---- flatten ---- */

/* flatten_forward turns the backend's layout into PyTorch's [N][C*HW] order (the NCHW order),
 * and flatten_backward back: exact. */
static void run_flatten(const struct op_case *c) {
    int N = c->flat.N, C = c->flat.C, HW = c->flat.HW;
    size_t n = (size_t)N * C * HW;
    name_case(c, "flatten N%d C%d HW%d", N, C, HW);
    float *x = hfill(n, -1, 1);
    act_round(x, n);
    double *ref = dnew(n);
    for (size_t i = 0; i < n; i++) ref[i] = x[i];
    void *gx = dev_act(x, N, C, HW);
    B->flatten_forward(gx, N, C, HW);
    expect_abs("flattened", host_flat(gx, n), ref, n, 0);
    B->flatten_backward(gx, N, C, HW);
    expect_abs("unflattened", host_act(gx, N, C, HW), ref, n, 0);
}

/* ---- logits_add ---- */

/* The first view (add 0) writes w * z, the float product, exactly; a later one (add 1) fmaf(w,
 * z, sum) exactly, one rounding on every backend, and so within TOL_FINE of the double sum. */
static void run_logits(const struct op_case *c) {
    size_t n = (size_t)c->logits.n;
    float w = c->logits.weight;
    name_case(c, "logits_add n %zu weight %g", n, w);
    float *z = hfill(n, -5, 5), *s = hfill(n, -3, 3);
    act_round(z, n);
    double *first = dnew(n), *added = dnew(n);
    float *fused = hnew(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        first[i] = (float)w * z[i], added[i] = (double)w * z[i] + s[i], fused[i] = fmaf(w, z[i], s[i]);
    void *gz = dev_flat(z, n);
    float *gfirst = dev_nan(n), *gsum = dev_of(s, n);
    B->logits_add(gz, gfirst, n, w, 0);
    B->logits_add(gz, gsum, n, w, 1);
    expect_abs("first view", host_of(gfirst, n), first, n, 0);
    float *hsum = host_of(gsum, n);
    expect_rel("added view", hsum, added, n, TOL_FINE);
    EXPECT(memcmp(hsum, fused, n * sizeof(float)) == 0, "%s: %s: added view is not fmaf(w, z, sum)", where,
           what);
}

/* ---- patch_covariance ---- */

/* Each chunk's sums within 1e-12 (relative to the sum of the products' magnitudes) of long
 * double ones, the lower triangle 0, and bit for bit the CPU table's (every backend sums in the
 * same order, uncontracted). */
static void run_covariance(const struct op_case *c) {
    enum { D = PATCH_DIM, D2 = PATCH_DIM * PATCH_DIM };
    int n = c->n, chunks = (n + PATCH_CHUNK - 1) / PATCH_CHUNK;
    name_case(c, "patch_covariance of %d images", n);
    size_t bytes = (size_t)n * 3072, nparts = (size_t)chunks * D2;
    unsigned char *img = hnew(bytes);
    for (size_t i = 0; i < bytes; i++) img[i] = (unsigned char)((i + seed) * 2654435761u >> 24);
    seed++;
    long double *ref = hnew(nparts * sizeof(long double)), *mag = hnew(nparts * sizeof(long double));
    memset(ref, 0, nparts * sizeof(long double)), memset(mag, 0, nparts * sizeof(long double));
    float *x = hnew(3072 * sizeof(float));
    for (int im = 0; im < n; im++) {
        for (int j = 0; j < 3072; j++) {
            volatile float t = (float)img[(size_t)im * 3072 + j] * in_scale[j / 1024]; /* two roundings */
            x[j] = t + in_shift[j / 1024];
        }
        long double *r = ref + (size_t)(im / PATCH_CHUNK) * D2, *a = mag + (size_t)(im / PATCH_CHUNK) * D2;
        for (int y = 0; y < 31; y++)
            for (int xx = 0; xx < 31; xx++)
                for (int i = 0; i < D; i++)
                    for (int j = i; j < D; j++) {
                        long double v = (long double)x[(i / 4 * 32 + y + i % 4 / 2) * 32 + xx + i % 2] *
                                        x[(j / 4 * 32 + y + j % 4 / 2) * 32 + xx + j % 2];
                        r[i * D + j] += v, a[i * D + j] += fabsl(v);
                    }
    }
    double *part = hnew(nparts * sizeof(double)), *cpu = hnew(nparts * sizeof(double));
    double *dpart = dev_alloc(nparts * sizeof(double));
    memset(part, 0xff, nparts * sizeof(double));
    B->upload(dpart, part, nparts * sizeof(double));
    B->patch_covariance(dev_copy(img, bytes), n, in_scale, in_shift, dpart);
    B->download(part, dpart, nparts * sizeof(double));
    kernels_cpu()->patch_covariance(img, n, in_scale, in_shift, cpu);
    size_t bad = 0, lower = 0;
    for (size_t e = 0; e < nparts; e++) {
        int i = (int)(e % D2) / D, j = (int)(e % D2) % D;
        if (j < i) lower += part[e] != 0.0;
        else bad += !(fabsl((long double)part[e] - ref[e]) <= 1e-12L * mag[e]);
    }
    EXPECT(bad == 0 && lower == 0,
           "%s: %s: %zu sums off long double's by more than 1e-12, %zu below the diagonal not 0", where, what,
           bad, lower);
    EXPECT(memcmp(part, cpu, nparts * sizeof(double)) == 0,
           "%s: %s: the sums differ from the CPU table's bits", where, what);
}

/* ---- The runner ---- */

typedef void run_fn(const struct op_case *c);
static run_fn *const runners[] = {
    [OP_INPUT] = run_input,     [OP_CONV] = run_conv,
    [OP_RELU] = run_relu,       [OP_GELU] = run_gelu,
    [OP_MAXPOOL] = run_maxpool, [OP_BATCHNORM] = run_batchnorm,
    [OP_LINEAR] = run_linear,   [OP_XENT] = run_xent,
    [OP_SGD] = run_sgd,         [OP_LOOKAHEAD] = run_lookahead,
    [OP_COPY] = run_copy,       [OP_FLATTEN] = run_flatten,
    [OP_LOGITS] = run_logits,   [OP_COVARIANCE] = run_covariance,
};
_Static_assert(sizeof runners / sizeof runners[0] == OP_COUNT, "a runner for every op");

/* The table on backend B, as column `where`: all of it (which 0), the conv, linear, GELU and
 * fused batch norm + GELU cases (1: the per-ISA code) or the conv and linear cases (2: the bf16
 * products). */
static void run_cases(int which) {
    double t0 = omp_get_wtime();
    int ran = 0;
    for (size_t i = 0; i < NCASES; i++) {
        const struct op_case *c = &cases[i];
        /* the ops whose CPU code follows the float path: gelu, batch norm's fused GELU, and
         * max pool (its forward on AVX-512 where the path is avx512) */
        int per_isa = c->op == OP_GELU || c->op == OP_MAXPOOL || (c->op == OP_BATCHNORM && c->flags & F_GELU);
        if (which && c->op != OP_CONV && c->op != OP_LINEAR && (which == 2 || !per_isa)) continue;
        seed = 1000u * (unsigned)i + 1;
        runners[c->op](c);
        release_case();
        ran++;
    }
    printf("test_ops: %s: %d cases in %.2f s\n", where, ran, omp_get_wtime() - t0);
    fflush(stdout);
}

static void print_table(void) {
    int count[OP_COUNT] = {0};
    for (size_t i = 0; i < NCASES; i++) count[cases[i].op]++;
    printf("test_ops: %zu cases:", NCASES);
    for (int op = 0; op < OP_COUNT; op++)
        printf(" %s %d%s", op_names[op], count[op], op + 1 < OP_COUNT ? "," : "\n");
}

/* ---- kernels_check ---- */

static void expect_complete(const struct kernels *k) {
    struct err e = {""};
    EXPECT(kernels_check(k, &e) == 0, "%s: kernels_check: %s", k->name, e.msg);
}

/* A copy of the CPU table with one op NULL (or a bad act_size): kernels_check must refuse it,
 * saying `what` (the op's name). */
static void expect_check_names(const struct kernels *t, const char *what) {
    struct err e = {""};
    int rc = kernels_check(t, &e);
    EXPECT(rc == -1 && strstr(e.msg, what), "kernels_check, want \"%s\": %d \"%s\"", what, rc, e.msg);
}

static void check_catches_null(void) {
    struct kernels t = *kernels_cpu();
    t.input_prepare = NULL;
    expect_check_names(&t, "input_prepare");
    t = *kernels_cpu();
    t.gelu_backward = NULL;
    expect_check_names(&t, "gelu_backward");
    t = *kernels_cpu();
    t.sgd_update = NULL;
    expect_check_names(&t, "sgd_update");
    t = *kernels_cpu();
    t.scalars_set = NULL;
    expect_check_names(&t, "scalars_set");
    t = *kernels_cpu();
    t.shutdown = NULL;
    expect_check_names(&t, "shutdown");
    t = *kernels_cpu();
    t.capture_begin = NULL;
    expect_check_names(&t, "capture_begin");
    t = *kernels_cpu();
    t.act_size = 3; /* neither float nor bf16 */
    expect_check_names(&t, "3-byte elements");
}

/* ---- The CPU's workspace check ---- */

/* In a child process with one thread: op (0 conv_forward, 1 conv_backward, 2 linear_forward,
 * 3 linear_backward) given a workspace one byte shorter than conv_workspace / linear_workspace
 * say; it must stop at its CHECK before touching anything. One thread: should the check be
 * missing, the op runs without an OpenMP team, which a forked child cannot safely start. */
static void short_workspace_child(int op) {
    omp_set_num_threads(1);
    static const struct conv_shape s = {2, 3, 4, 6, 6, 3, 1};
    size_t need = op < 2 ? B->conv_workspace(&s, CONV_FORWARD | CONV_BACKWARD_DATA | CONV_BACKWARD_FILTER)
                         : B->linear_workspace(2, 5, 3);
    float *x = B->alloc(4096), *w = B->alloc(4096), *y = B->alloc(4096), *dx = B->alloc(4096),
          *dw = B->alloc(4096);
    void *ws = B->alloc(need);
    switch (op) {
    case 0: B->conv_forward(&s, x, w, NULL, y, 0, ws, need - 1); break;
    case 1: B->conv_backward(&s, x, w, y, dx, dw, NULL, NULL, ws, need - 1); break;
    case 2: B->linear_forward(x, w, NULL, y, 2, 5, 3, 1.0f, ws, need - 1); break;
    default: B->linear_backward(x, w, y, dx, dw, NULL, 2, 5, 3, 1.0f, ws, need - 1); break;
    }
}

static void short_workspace_op(void *op) { short_workspace_child(*(const int *)op); }

/* Each op with too little workspace: the child must die (CHECK aborts) with the check's line. */
static void check_catches_short_workspace(void) {
    static const char *const ops[] = {"conv_forward", "conv_backward", "linear_forward", "linear_backward"};
    for (int op = 0; op < 4; op++) {
        char msg[512];
        int status = check_in_child(short_workspace_op, &op, msg, sizeof msg);
        EXPECT(!(WIFEXITED(status) && WEXITSTATUS(status) == 0) && strstr(msg, "check failed: ws_bytes >="),
               "cpu: %s with a workspace one byte short: status %d, stderr '%s' (want the CHECK on ws_bytes)",
               ops[op], status, msg);
    }
}

/* ---- The columns ---- */

static void cpu_column(void) {
    static const char *const isas[] = {"generic", "avx2", "avx512"};
    B = kernels_cpu();
    expect_complete(B);
    check_catches_null();
    check_catches_short_workspace();
    const char *best = gemm_isa();
    int threads = omp_get_max_threads();
    for (int t = 1; t <= 3; t += 2) {
        omp_set_num_threads(t);
        snprintf(where, sizeof where, "cpu %s (default), %d thread%s", best, t, t > 1 ? "s" : "");
        run_cases(0);
    }
    omp_set_num_threads(2);
    for (int i = 0; i < 3; i++) {
        if (gemm_select(isas[i]) != 0) {
            printf("test_ops: cpu %s: skipped: this CPU lacks it\n", isas[i]);
            continue;
        }
        snprintf(where, sizeof where, "cpu %s, 2 threads, conv, linear, gelu, maxpool, batchnorm + gelu",
                 isas[i]);
        run_cases(1);
    }
    gemm_select(best);
    omp_set_num_threads(threads);
    B->shutdown(); /* nothing to release; it must be there and callable */
}

/* cpu-bf16: the conv and linear cases (the ops that differ from the cpu table) on every bf16
 * GEMM path this CPU has (amx and avx512bf16 where present; the plain-C one and the tile path's
 * plain-C twin always), 2 threads, within TOL_BF16; then the rest of the table once, which must
 * match the float tolerances. */
/* Every bf16 GEMM path (gemm_dispatch.c's table); those the CPU lacks are skipped. */
static const char *const bf16_paths[] = {"amx",          "avx512bf16",   "avx2",
                                         "generic",      "amx-emulated", "amx-im2col",
                                         "amx-prefetch", "amx-resident", "amx-noprefetch"};
enum { N_BF16_PATHS = sizeof bf16_paths / sizeof bf16_paths[0] };

static void cpu_bf16_column(void) {
    B = kernels_cpu_bf16();
    expect_complete(B);
    EXPECT(B->host && strcmp(B->name, "cpu-bf16") == 0, "kernels_cpu_bf16: name %s host %d", B->name,
           B->host);
    const char *best = gemm_bf16_isa();
    int threads = omp_get_max_threads();
    omp_set_num_threads(2);
    for (int i = 0; i < N_BF16_PATHS; i++) {
        if (gemm_bf16_select(bf16_paths[i]) != 0) {
            printf(
                "test_ops: cpu-bf16 %s: skipped: this CPU lacks it (AMX: or the OS refuses the tile state)\n",
                bf16_paths[i]);
            continue;
        }
        snprintf(where, sizeof where, "cpu-bf16 %s, 2 threads, conv and linear", bf16_paths[i]);
        tol_products = TOL_BF16, worst_products = 0.0;
        run_cases(2);
        printf("test_ops: %s: worst rel L2 error of a product %.3g (bound %.0e)\n", where, worst_products,
               TOL_BF16);
    }
    tol_products = TOL;
    gemm_bf16_select(best);
    omp_set_num_threads(threads);
}

/* A table with bf16 activations (cpu-bf16-act, cuda-bf16) as column `where`: the whole table,
 * products within TOL_BF16, other activation outputs within TOL_ACT, exact ops exact. */
static void bf16_act_cases(void) {
    EXPECT(B->act_size == 2, "%s: act_size %zu", B->name, B->act_size);
    tol_products = TOL_BF16, worst_products = 0.0;
    run_cases(0);
    printf("test_ops: %s: worst rel L2 error of a product %.3g (bound %.0e)\n", where, worst_products,
           TOL_BF16);
    tol_products = TOL;
}

/* cpu-bf16-act, the twin of cuda-bf16, on the bf16 path in use, 2 threads. */
static void cpu_bf16_act_column(void) {
    B = kernels_cpu_bf16_act();
    expect_complete(B);
    EXPECT(B->host && strcmp(B->name, "cpu-bf16-act") == 0, "kernels_cpu_bf16_act: name %s", B->name);
    int threads = omp_get_max_threads();
    omp_set_num_threads(2);
    snprintf(where, sizeof where, "cpu-bf16-act %s, 2 threads", gemm_bf16_isa());
    bf16_act_cases();
    omp_set_num_threads(threads);
}

static void cuda_column(void) {
#if CIFAR10_CUDA
    struct err why = {""};
    if (kernels_cuda_devices(&why) == 0) {
        printf("test_ops: cuda: skipped: no GPU (%s)\n", why.msg);
        return;
    }
    B = kernels_cuda(0);
    const char *algos = getenv("CIFAR10_CUDA_ALGOS");
    exact_reruns = !(algos && strcmp(algos, "fastest") == 0);
    char name[512];
    kernels_cuda_describe(name, sizeof name);
    printf("test_ops: cuda: GPU 0: %s\n", name);
    expect_complete(B);
    snprintf(where, sizeof where, "cuda %s", B->nhwc ? "nhwc" : "nchw");
    run_cases(0);
    /* The environment's layout (unset or empty: NHWC), then, after shutdown, the other one on
     * the backend made afresh, and bf16 in both layouts; the environment as it was after. */
    const char *env = getenv("CIFAR10_CUDA_LAYOUT"), *env_bf16 = getenv("CIFAR10_CUDA_BF16");
    char saved[16] = "", saved_bf16[16] = "";
    if (env) snprintf(saved, sizeof saved, "%s", env);
    if (env_bf16) snprintf(saved_bf16, sizeof saved_bf16, "%s", env_bf16);
    int first = !(env && strcmp(env, "nchw") == 0);
    EXPECT(B->nhwc == first, "cuda: CIFAR10_CUDA_LAYOUT=%s gave nhwc %d", env ? env : "(unset)", B->nhwc);
    B->shutdown();
    const char *layouts[2] = {"nchw", "nhwc"};
    for (int i = 0; i < 2; i++) {
        CHECK(setenv("CIFAR10_CUDA_LAYOUT", layouts[i], 1) == 0);
        B = kernels_cuda(0);
        EXPECT(B->nhwc == i, "cuda: CIFAR10_CUDA_LAYOUT=%s gave nhwc %d", layouts[i], B->nhwc);
        if (i != first) {
            snprintf(where, sizeof where, "cuda %s, after shutdown and kernels_cuda(0) again", layouts[i]);
            run_cases(0);
        }
        if (!kernels_cuda_bf16_native()) {
            printf("test_ops: cuda-bf16: skipped: GPU 0 has no bf16 tensor cores\n");
            B->shutdown();
            continue;
        }
        CHECK(setenv("CIFAR10_CUDA_BF16", "activations", 1) == 0);
        B = kernels_cuda_bf16(0);
        expect_complete(B);
        snprintf(where, sizeof where, "cuda-bf16 %s", layouts[i]);
        bf16_act_cases();
        B->shutdown();
        /* The bf16 copies on float activations (CIFAR10_CUDA_BF16=copies): conv and linear. */
        CHECK(setenv("CIFAR10_CUDA_BF16", "copies", 1) == 0);
        B = kernels_cuda_bf16(0);
        EXPECT(B->act_size == sizeof(float), "cuda-bf16 copies: act_size %zu", B->act_size);
        snprintf(where, sizeof where, "cuda-bf16 copies %s, conv and linear", layouts[i]);
        tol_products = TOL_BF16, worst_products = 0.0;
        run_cases(2);
        printf("test_ops: %s: worst rel L2 error of a product %.3g (bound %.0e)\n", where, worst_products,
               TOL_BF16);
        tol_products = TOL;
        B->shutdown();
    }
    /* cuDNN's forward for few input channels in NHWC (CIFAR10_CUDA_SMALL_CONV=cudnn; ours is
     * the default): conv and linear. */
    const char *env_small = getenv("CIFAR10_CUDA_SMALL_CONV");
    char saved_small[16] = "";
    if (env_small) snprintf(saved_small, sizeof saved_small, "%s", env_small);
    CHECK(setenv("CIFAR10_CUDA_LAYOUT", "nhwc", 1) == 0 &&
          setenv("CIFAR10_CUDA_SMALL_CONV", "cudnn", 1) == 0);
    B = kernels_cuda(0);
    snprintf(where, sizeof where, "cuda nhwc, CIFAR10_CUDA_SMALL_CONV=cudnn, conv and linear");
    run_cases(2);
    int bf16_native = kernels_cuda_bf16_native(); /* (asked while the backend is up) */
    B->shutdown();
    if (bf16_native) {
        CHECK(setenv("CIFAR10_CUDA_BF16", "activations", 1) == 0);
        B = kernels_cuda_bf16(0);
        snprintf(where, sizeof where, "cuda-bf16 nhwc, CIFAR10_CUDA_SMALL_CONV=cudnn");
        bf16_act_cases();
        B->shutdown();
    }
    CHECK((env_small ? setenv("CIFAR10_CUDA_SMALL_CONV", saved_small, 1)
                     : unsetenv("CIFAR10_CUDA_SMALL_CONV")) == 0);
    CHECK((env ? setenv("CIFAR10_CUDA_LAYOUT", saved, 1) : unsetenv("CIFAR10_CUDA_LAYOUT")) == 0);
    CHECK((env_bf16 ? setenv("CIFAR10_CUDA_BF16", saved_bf16, 1) : unsetenv("CIFAR10_CUDA_BF16")) == 0);
    exact_reruns = 1;
#else
    printf("test_ops: cuda: skipped: this build has no CUDA backend\n");
#endif
}

/* ---- CPU internals: the GEMM on every ISA path ---- */

/* C = alpha op(A) op(B) + beta C in double, for the strides gemm() takes. */
static void gemm_reference(int M, int N, int Kd, double alpha, const float *A, ptrdiff_t rsa, ptrdiff_t csa,
                           const float *Bm, ptrdiff_t rsb, ptrdiff_t csb, double beta, const float *C,
                           double *R) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < Kd; k++) acc += (double)A[i * rsa + k * csa] * Bm[k * rsb + j * csb];
            R[(size_t)i * N + j] = alpha * acc + (beta == 0 ? 0.0 : beta * C[(size_t)i * N + j]);
        }
}

/* One size, both operands transposed or not; beta 0 on odd sizes, with C full of NaN (it must
 * not be read); size 3 through gemm_parallel. math GEMM_BF16: gemm_bf16, against the double
 * product of the operands as bf16_round rounds them (the products are then exact in float, so
 * the float tolerance holds: what is tested is the packing, the pairing and the sums). */
static void gemm_case(enum gemm_math math, const char *isa, int s, int M, int N, int Kd, float *ws) {
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = hfill((size_t)M * Kd, -1, 1), *Bm = hfill((size_t)Kd * N, -1, 1);
            float *C = hfill((size_t)M * N, -1, 1);
            double *R = dnew((size_t)M * N);
            ptrdiff_t rsa = ta ? 1 : Kd, csa = ta ? M : 1, rsb = tb ? 1 : N, csb = tb ? Kd : 1;
            float alpha = 0.75f, beta = s % 2 ? 0.0f : 0.5f;
            float *Ar = hfill((size_t)M * Kd, 0, 0), *Br = hfill((size_t)Kd * N, 0, 0);
            for (size_t i = 0; i < (size_t)M * Kd; i++) Ar[i] = math == GEMM_BF16 ? bf16_round(A[i]) : A[i];
            for (size_t i = 0; i < (size_t)Kd * N; i++) Br[i] = math == GEMM_BF16 ? bf16_round(Bm[i]) : Bm[i];
            gemm_reference(M, N, Kd, alpha, Ar, rsa, csa, Br, rsb, csb, beta, C, R);
            if (beta == 0.0f) memset(C, 0xff, (size_t)M * N * sizeof(float));
            if (s == 3) gemm_parallel(math, M, N, Kd, alpha, A, rsa, csa, Bm, rsb, csb, beta, C, N, ws);
            else gemm_of(math)(M, N, Kd, alpha, A, rsa, csa, Bm, rsb, csb, beta, C, N, ws);
            double e = check_rel_l2(C, R, (size_t)M * N);
            EXPECT(e <= TOL, "%s %s %dx%dx%d ta=%d tb=%d: rel err %.3g",
                   math == GEMM_BF16 ? "gemm_bf16" : "gemm", isa, M, N, Kd, ta, tb, e);
        }
}

/* gemm_pack_a (A's rows apart by more than K) + gemm_prepacked (B laid out here in the path's
 * NR-column panels, their columns past N zero) on the path in use, against the double product,
 * C full of NaN (beta 0: not read). Sizes off every tile edge and K past KC. */
static void packed_cases(const char *isa) {
    static const int sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {97, 33, 257}, {30, 70, 300}};
    int nr = gemm_nr();
    for (int s = 0; s < 4; s++) {
        int M = sizes[s][0], N = sizes[s][1], Kd = sizes[s][2], panels = (N + nr - 1) / nr;
        seed = 300u + (unsigned)s;
        float *A = hfill((size_t)M * (Kd + 3), -1, 1), *Bm = hfill((size_t)Kd * N, -1, 1);
        float *Bp = hfill((size_t)panels * nr * Kd, 0, 0), *C = hfill((size_t)M * N, 0, 0);
        double *R = dnew((size_t)M * N);
        float *Ap = XALLOC(gemm_packed_a_floats(M, Kd) * sizeof(float));
        for (int k = 0; k < Kd; k++)
            for (int j = 0; j < N; j++)
                Bp[(size_t)(j / nr) * nr * Kd + (size_t)k * nr + j % nr] = Bm[(size_t)k * N + j];
        gemm_reference(M, N, Kd, 1.0, A, Kd + 3, 1, Bm, N, 1, 0.0, C, R);
        memset(C, 0xff, (size_t)M * N * sizeof(float));
        gemm_pack_a(M, Kd, A, Kd + 3, 1, Ap);
        gemm_prepacked(M, N, Kd, Ap, Bp, C, N);
        double e = check_rel_l2(C, R, (size_t)M * N);
        EXPECT(e <= TOL, "gemm_prepacked %s %dx%dx%d: rel err %.3g", isa, M, N, Kd, e);
        free(Ap);
        while (n_host) free(host_bufs[--n_host]);
    }
}

static void test_gemm_path(enum gemm_math math, const char *isa) {
    const char *name = math == GEMM_BF16 ? "gemm_bf16" : "gemm";
    if ((math == GEMM_BF16 ? gemm_bf16_select(isa) : gemm_select(isa)) != 0) {
        printf("test_ops: cpu internals: %s %s: skipped: this CPU lacks it\n", name, isa);
        return;
    }
    /* Sizes straddle every blocking edge: MC=96, KC=256, NC=512 and the MR/NR tiles; K = 0 is
     * C = beta * C (beta 0 at odd s: C's NaNs become zeros). */
    static const int sizes[][3] = {{1, 1, 1},    {7, 13, 5}, {97, 33, 257}, {130, 515, 300},
                                   {5, 600, 70}, {6, 11, 0}, {9, 4, 0}};
    float *ws = XALLOC(gemm_workspace_floats() * sizeof(float) * (size_t)omp_get_max_threads());
    for (int s = 0; s < (int)(sizeof sizes / sizeof *sizes); s++) {
        seed = 100u * (unsigned)s + 7;
        gemm_case(math, isa, s, sizes[s][0], sizes[s][1], sizes[s][2], ws);
        while (n_host) free(host_bufs[--n_host]);
    }
    free(ws);
    if (math == GEMM_FP32) packed_cases(isa);
    printf("test_ops: cpu internals: %s %s: done\n", name, isa);
}

/* bf16_round against values worked out by hand: exact bf16 values stay, ties go to the even
 * mantissa, overflow rounds to infinity, NaN stays NaN, and what would be a bf16 subnormal
 * becomes a signed zero (as VDPBF16PS reads subnormals). */
static void test_bf16_round(void) {
    static const struct {
        float in, want;
    } cases[] = {
        {1.0f, 1.0f},
        {-2.5f, -2.5f},
        {1.0f + 0x1p-8f, 1.0f},                      /* tie: mantissa 0 is even, down */
        {1.0f + 3 * 0x1p-8f, 1.0f + 0x1p-6f},        /* tie: 1 + 2^-7 is odd, up */
        {1.0f + 0x1p-8f + 0x1p-20f, 1.0f + 0x1p-7f}, /* past the tie: up */
        {-(1.0f + 0x1p-9f), -1.0f},                  /* below the tie: down */
        {3.14159265f, 3.140625f},
        {0x1.fffffep127f, INFINITY}, /* FLT_MAX rounds up to infinity */
        {INFINITY, INFINITY},
        {-INFINITY, -INFINITY},
        {0x1p-126f, 0x1p-126f}, /* the smallest normal stays */
        {0x1p-130f, 0.0f},      /* subnormal: zero */
        {-0x1p-140f, -0.0f},
        {0.0f, 0.0f},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float got = bf16_round(cases[i].in);
        EXPECT(got == cases[i].want && signbit(got) == signbit(cases[i].want), "bf16_round(%a) = %a, want %a",
               (double)cases[i].in, (double)got, (double)cases[i].want);
    }
    EXPECT(isnan(bf16_round(NAN)), "bf16_round(NaN) = %a, want a NaN", (double)bf16_round(NAN));
    printf("test_ops: cpu internals: bf16_round: done\n");
}

/* gemm_bf16 on the current path rounds every operand exactly as bf16_round does, whichever way
 * it packs it (the AVX512_BF16 path converts whole rows with VCVTNE2PS2BF16): with one
 * factor 1 and the other terms zero, each output is one rounded operand, compared with ==.
 * Values: ties, subnormals, the largest finite bf16, and random ones (no infinity: inf x 0 would
 * turn its row to NaN); A's rows contiguous (and
 * transposed), B's rows contiguous (and transposed). */
static void test_gemm_bf16_rounding(const char *isa) {
    if (gemm_bf16_select(isa) != 0) return;
    enum { M = 40, N = 70, KD = 64 };
    static const float special[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -(1.0f + 0x1p-8f + 0x1p-20f),
                                    0x1p-130f,      -0x1p-140f,         0x1.fefffep127f,
                                    0x1p-126f,      3.14159265f};
    float *ws = XALLOC(gemm_workspace_floats() * sizeof(float));
    float *v = hfill((size_t)M * KD, -3, 3), *ones = hfill((size_t)KD * N, 0, 0),
          *C = hfill((size_t)M * N, 0, 0);
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) v[i * 5] = special[i];
    int bad = 0;
    for (int t = 0; t < 2; t++) {
        /* A = v as M x KD (t 0: rows contiguous; t 1: transposed storage), B = e_k x ones: column
         * j of the product picks A(i, j % KD) when B(k, j) = (k == j % KD). */
        memset(ones, 0, (size_t)KD * N * sizeof(float));
        for (int j = 0; j < N; j++) ones[(size_t)(j % KD) * (t ? 1 : N) + (size_t)j * (t ? KD : 1)] = 1.0f;
        gemm_bf16(M, N, KD, 1.0f, v, t ? 1 : KD, t ? M : 1, ones, t ? 1 : N, t ? KD : 1, 0.0f, C, N, ws);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float want = bf16_round(t ? v[(size_t)(j % KD) * M + i] : v[(size_t)i * KD + j % KD]);
                if (!(C[(size_t)i * N + j] == want) && bad++ == 0)
                    EXPECT(0, "gemm_bf16 %s: A(%d,%d) packed as %a, bf16_round gives %a", isa, i, j % KD,
                           (double)C[(size_t)i * N + j], (double)want);
            }
        /* B = v as KD x N picked by A = the identity rows: C(i, j) = B(i, j). */
        float *id = hfill((size_t)KD * KD, 0, 0), *Bv = hfill((size_t)KD * N, -3, 3),
              *C2 = hfill((size_t)KD * N, 0, 0);
        for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) Bv[i * 7] = special[i];
        for (int i = 0; i < KD; i++) id[(size_t)i * KD + i] = 1.0f;
        gemm_bf16(KD, N, KD, 1.0f, id, KD, 1, Bv, t ? 1 : N, t ? KD : 1, 0.0f, C2, N, ws);
        for (int i = 0; i < KD; i++)
            for (int j = 0; j < N; j++) {
                float want = bf16_round(t ? Bv[(size_t)j * KD + i] : Bv[(size_t)i * N + j]);
                if (!(C2[(size_t)i * N + j] == want) && bad++ == 0)
                    EXPECT(0, "gemm_bf16 %s: B(%d,%d) packed as %a, bf16_round gives %a", isa, i, j,
                           (double)C2[(size_t)i * N + j], (double)want);
            }
    }
    EXPECT(bad == 0, "gemm_bf16 %s: %d operands rounded differently from bf16_round", isa, bad);
    while (n_host) free(host_bufs[--n_host]);
    free(ws);
    printf("test_ops: cpu internals: gemm_bf16 %s rounds as bf16_round: done\n", isa);
}

/* The bf16 GEMM tests' operands: sizes across every blocking edge (MC 96, KC 256 with an odd
 * last block, NC 512, the 12 x 32 tile), and per size both layouts of both operands (t 0 to 3),
 * random in [-1, 1] from seed0; C random, R zero (host buffers, freed with the case). */
static const int bf16_sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {97, 33, 257}, {130, 515, 300}, {13, 70, 600}};
#define N_BF16_SIZES ((int)(sizeof bf16_sizes / sizeof bf16_sizes[0]))
struct bf16_case {
    int M, N, K;
    ptrdiff_t rsa, csa, rsb, csb;
    float *A, *B, *C, *R;
};
static struct bf16_case bf16_case_of(int s, int t, unsigned seed0) {
    struct bf16_case c = {
        bf16_sizes[s][0], bf16_sizes[s][1], bf16_sizes[s][2], 0, 0, 0, 0, NULL, NULL, NULL, NULL};
    int ta = t & 1, tb = t >> 1;
    c.rsa = ta ? 1 : c.K, c.csa = ta ? c.M : 1, c.rsb = tb ? 1 : c.N, c.csb = tb ? c.K : 1;
    seed = seed0 + 4u * (unsigned)s + (unsigned)t;
    c.A = hfill((size_t)c.M * c.K, -1, 1), c.B = hfill((size_t)c.K * c.N, -1, 1);
    c.C = hfill((size_t)c.M * c.N, -1, 1), c.R = hfill((size_t)c.M * c.N, 0, 0);
    return c;
}

/* The bf16 paths against the plain-C one on the same operands: the same packing and blocking,
 * and each pair of exact products added in VDPBF16PS's order (odd k, then even) with one
 * rounding each. avx2 is our code and must match bit for bit (exact). The instruction itself
 * (avx512bf16) is documented to add that way, but a CPU's implementation may round otherwise
 * (a fused pair, flushed subnormal sums): it is held to float-level agreement (relative L2
 * <= 1e-6, where a packing fault is off by O(1)), and the count of results that differ in any
 * bit is printed. Random operands in [-1, 1]; both layouts of both operands, beta 0 and not,
 * sizes across every blocking edge. */
static void test_gemm_bf16_same_sums(const char *isa, int exact) {
    if (gemm_bf16_select(isa) != 0) return;
    float *ws = XALLOC(gemm_workspace_floats() * sizeof(float));
    size_t differ = 0, total = 0;
    double err2 = 0.0, ref2 = 0.0;
    for (int s = 0; s < N_BF16_SIZES; s++)
        for (int t = 0; t < 4; t++) {
            struct bf16_case o = bf16_case_of(s, t, 500u);
            int M = o.M, N = o.N;
            float *C = o.C, *R = o.R;
            memcpy(R, C, (size_t)M * N * sizeof(float));
            float beta = t == 3 ? 0.0f : 0.5f;
            gemm_bf16(M, N, o.K, 0.75f, o.A, o.rsa, o.csa, o.B, o.rsb, o.csb, beta, C, N, ws);
            CHECK(gemm_bf16_select("generic") == 0);
            gemm_bf16(M, N, o.K, 0.75f, o.A, o.rsa, o.csa, o.B, o.rsb, o.csb, beta, R, N, ws);
            CHECK(gemm_bf16_select(isa) == 0);
            for (size_t i = 0; i < (size_t)M * N; i++) {
                differ += memcmp(&C[i], &R[i], sizeof(float)) != 0;
                err2 += ((double)C[i] - R[i]) * ((double)C[i] - R[i]);
                ref2 += (double)R[i] * R[i];
            }
            total += (size_t)M * N;
            while (n_host) free(host_bufs[--n_host]);
        }
    double rel = sqrt(err2 / ref2);
    if (exact)
        EXPECT(differ == 0, "gemm_bf16 %s: %zu of %zu results differ from the plain-C path's", isa, differ,
               total);
    else
        EXPECT(rel <= 1e-6, "gemm_bf16 %s: rel L2 %.3g from the plain-C path (%zu of %zu results differ)",
               isa, rel, differ, total);
    free(ws);
    printf("test_ops: cpu internals: gemm_bf16 %s against the plain-C path: %zu of %zu results differ in any "
           "bit "
           "(rel L2 %.3g; required: %s): done\n",
           isa, differ, total, rel, exact ? "none" : "<= 1e-6");
}

/* gemm_bf16_prepacked (winograd.c's bf16 products, their A packed once per call) against
 * gemm_bf16 on the same operands (bf16_case_of's): the same packing and the same kernel, so the
 * same bits, on every bf16 path that has it; nothing written past gemm_bf16_packed_a_words. */
static void test_gemm_bf16_prepacked(const char *isa) {
    if (gemm_bf16_select(isa) != 0) return;
    float *ws = XALLOC(gemm_workspace_floats() * sizeof(float));
    size_t differ = 0, total = 0, overrun = 0;
    for (int s = 0; s < N_BF16_SIZES; s++)
        for (int t = 0; t < 4; t++) {
            struct bf16_case o = bf16_case_of(s, t, 700u);
            size_t words = gemm_bf16_packed_a_words(o.M, o.K), mn = (size_t)o.M * o.N;
            uint32_t *Ap = XALLOC((words + 16) * sizeof *Ap);
            for (int i = 0; i < 16; i++) Ap[words + i] = 0xdeadbeefu;
            gemm_bf16_pack_a(o.M, o.K, o.A, o.rsa, o.csa, Ap);
            gemm_bf16_prepacked(o.M, o.N, o.K, Ap, o.B, o.rsb, o.csb, o.C, o.N, ws);
            gemm_bf16(o.M, o.N, o.K, 1.0f, o.A, o.rsa, o.csa, o.B, o.rsb, o.csb, 0.0f, o.R, o.N, ws);
            for (int i = 0; i < 16; i++) overrun += Ap[words + i] != 0xdeadbeefu;
            for (size_t i = 0; i < mn; i++) differ += memcmp(&o.C[i], &o.R[i], sizeof(float)) != 0;
            total += mn;
            free(Ap);
            while (n_host) free(host_bufs[--n_host]);
        }
    EXPECT(differ == 0, "gemm_bf16_prepacked %s: %zu of %zu results differ from gemm_bf16's", isa, differ,
           total);
    EXPECT(overrun == 0, "gemm_bf16_pack_a %s: wrote past gemm_bf16_packed_a_words", isa);
    free(ws);
    printf("test_ops: cpu internals: gemm_bf16_prepacked %s against gemm_bf16: %zu of %zu results differ: "
           "done\n",
           isa, differ, total);
}

/* The CUDA kernels' index division (kernels/cuda/fastdiv.h, plain C too) against '/' and '%':
 * every divisor below 3000 on a sweep of small indices and the largest ones, and the
 * divisors the networks' maps give (HW and channel counts) and the extremes near 2^31. */
static void test_fastdiv(void) {
    long wrong = 0, count = 0;
    for (uint32_t d = 1; d < 3000; d++) {
        struct fastdiv f = fastdiv_make(d);
        for (uint32_t n = 0; n < 40000; n += 3, count++) wrong += fastdiv_div(n, f) != n / d;
        for (uint32_t n = 0x7fffffffu; n > 0x7fffffffu - 300; n--, count++)
            wrong += fastdiv_div(n, f) != n / d || fastdiv_mod(n, f) != n % d;
    }
    static const uint32_t ds[] = {961, 225,   49,      9,           1024,        64,          24,
                                  256, 65536, 1000003, 0x3fffffffu, 0x40000000u, 0x40000001u, 0x7fffffffu};
    for (size_t i = 0; i < sizeof ds / sizeof *ds; i++) {
        struct fastdiv f = fastdiv_make(ds[i]);
        for (uint32_t n = 0x7fffffffu; n > 0x7fffffffu - 20000; n--, count++)
            wrong += fastdiv_div(n, f) != n / ds[i];
        for (uint32_t n = 0; n < 20000; n++, count++) wrong += fastdiv_mod(n * 7919u, f) != n * 7919u % ds[i];
    }
    EXPECT(wrong == 0, "fastdiv: %ld of %ld quotients differ from '/'", wrong, count);
    if (wrong == 0)
        printf("test_ops: fastdiv (the CUDA kernels' index division): %ld quotients and remainders equal '/' "
               "and '%%'\n",
               count);
}

/* The tiles' dy transposition (conv_tiles.c): the amx build's AVX-512 shuffles against the
 * plain-C build, bit for bit, on ties, subnormals, infinities, NaN and random values, and
 * nothing written past its 16 columns. The amx build runs no tile instruction here, so any CPU
 * with AVX512_BF16 checks it. */
static void test_tiles_grad_pairs(void) {
    if (!gemm_bf16_hw()) {
        printf("test_ops: cpu internals: conv_tiles_grad_pairs amx: skipped: this CPU lacks AVX512_BF16\n");
        return;
    }
    enum { P = 96, COUT = 48 };
    static const float special[] = {
        1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 0x1p-130f, -0x1p-140f, 0x1.fffffep127f,
        INFINITY,       -INFINITY,          NAN,       0x1p-126f,  -0.0f};
    seed = 4242;
    float *t = hfill((size_t)16 * P, -3, 3);
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) t[i * 37] = special[i];
    uint32_t *got = XALLOC((size_t)P / 2 * COUT * sizeof *got),
             *want = XALLOC((size_t)P / 2 * COUT * sizeof *want);
    memset(got, 0xa5, (size_t)P / 2 * COUT * sizeof *got);
    memset(want, 0xa5, (size_t)P / 2 * COUT * sizeof *want);
    conv_tiles_grad_pairs_amx(t, P, COUT, got);
    conv_tiles_grad_pairs_generic(t, P, COUT, want);
    size_t differ = 0;
    for (size_t i = 0; i < (size_t)P / 2 * COUT; i++) differ += got[i] != want[i];
    EXPECT(differ == 0, "conv_tiles_grad_pairs amx: %zu of %d words differ from the plain-C build's", differ,
           P / 2 * COUT);
    EXPECT(want[16] == 0xa5a5a5a5u && want[(size_t)5 * COUT + 40] == 0xa5a5a5a5u,
           "conv_tiles_grad_pairs: wrote past its 16 columns");
    EXPECT(want[(size_t)3 * COUT + 2] == ((uint32_t)bf16_bits(t[2 * P + 6]) | bf16_bits(t[2 * P + 7]) << 16),
           "conv_tiles_grad_pairs: word (3, 2) is not the pair of row 2 at 6, 7");
    free(got);
    free(want);
    while (n_host) free(host_bufs[--n_host]);
    printf("test_ops: cpu internals: conv_tiles_grad_pairs amx against the plain-C build: %zu of %d words "
           "differ: done\n",
           differ, P / 2 * COUT);
}

/* The tiles' 16 x 16 transposition (conv_tiles.c: conv_tiles_transpose16, the input's packing
 * and the sums' copy out of the tiles): the plain-C build against its definition, and the amx
 * build's AVX-512 transpose against it bit for bit (NaN payloads and all: words, not floats),
 * with rows apart as the convolutions use them, and nothing written outside the 16 x 16 words.
 * The amx build on any CPU with AVX512_BF16. */
static void test_tiles_transpose16(void) {
    enum { SS = 40, DS = 24, SN = 16 * SS, DN = 16 * DS };
    uint32_t s[SN], got[DN], want[DN];
    uint32_t x = 12345u;
    for (int i = 0; i < SN; i++) s[i] = x = x * 1664525u + 1013904223u;
    s[3 * SS + 5] = 0x7fc00001u; /* a NaN with a payload */
    memset(want, 0xa5, sizeof want);
    conv_tiles_transpose16_generic(s, SS, want, DS);
    int wrong = 0;
    for (int j = 0; j < 16; j++)
        for (int d = 0; d < DS; d++) wrong += want[j * DS + d] != (d < 16 ? s[d * SS + j] : 0xa5a5a5a5u);
    EXPECT(wrong == 0, "conv_tiles_transpose16 (plain C): %d of %d words are not the transpose's", wrong, DN);
    if (!gemm_bf16_hw()) {
        printf("test_ops: cpu internals: conv_tiles_transpose16 plain C: done; amx: skipped: this CPU lacks "
               "AVX512_BF16\n");
        return;
    }
    memset(got, 0xa5, sizeof got);
    conv_tiles_transpose16_amx(s, SS, got, DS);
    int differ = 0;
    for (int i = 0; i < DN; i++) differ += got[i] != want[i];
    EXPECT(differ == 0, "conv_tiles_transpose16 amx: %d of %d words differ from the plain-C build's", differ,
           DN);
    printf(
        "test_ops: cpu internals: conv_tiles_transpose16 plain C and amx: %d, %d of %d words wrong: done\n",
        wrong, differ, DN);
}

/* The tiles' grid rows and output planes (conv_tiles.c: conv_tiles_put_run, _plane_out): the
 * amx build's masked AVX-512 steps against the plain-C build, bit for bit, for every run length
 * from 1 to 40 (whole steps of 16 and every tail), the specials of test_tiles_grad_pairs among
 * the values, and nothing written past the run or the plane. Any CPU with AVX512_BF16. */
static void test_tiles_runs(void) {
    if (!gemm_bf16_hw()) {
        printf("test_ops: cpu internals: conv_tiles_put_run, _plane_out amx: skipped: this CPU lacks "
               "AVX512_BF16\n");
        return;
    }
    enum { LEN = 64, PAD = 5 };
    static const float special[] = {1.0f + 0x1p-8f, 0x1p-130f, -0x1p-140f, INFINITY, NAN, -0.0f, 0.0f, -1.0f};
    seed = 4343;
    float *a = hfill(LEN, -3, 3), *b = hfill(LEN, -3, 3), *m = hfill(LEN * LEN, -1, 1);
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) a[3 + 5 * i] = b[2 + 7 * i] = special[i];
    uint32_t got[LEN + PAD], want[LEN + PAD];
    int runs = 0, planes = 0;
    for (int pairs = 0; pairs < 2; pairs++)
        for (int n = 1; n <= 40; n++)
            for (int which = 0; which < 3; which++) { /* b, no b, no a (zeros) */
                const float *pa = which == 2 ? NULL : a + n % 3, *pb = which == 0 ? b + n % 5 : NULL;
                memset(got, 0xa5, sizeof got);
                memset(want, 0xa5, sizeof want);
                conv_tiles_put_run_amx(got, pairs, 1, pa, pb, n);
                conv_tiles_put_run_generic(want, pairs, 1, pa, pb, n);
                EXPECT(memcmp(got, want, sizeof got) == 0,
                       "conv_tiles_put_run amx: pairs %d, n %d, case %d differs from the plain-C build's",
                       pairs, n, which);
                runs++;
            }
    float fgot[LEN + PAD], fwant[LEN + PAD];
    for (int n = 0; n <= 40; n++)
        for (int extra = 0; extra < 4; extra++) { /* a row's padding after the values: 0, 1, 5, 17 */
            int total = n + (int[]){0, 1, 5, 17}[extra];
            memset(fgot, 0xa5, sizeof fgot);
            memset(fwant, 0xa5, sizeof fwant);
            conv_tiles_put_floats_amx(fgot, n ? a + n % 3 : NULL, n, total);
            conv_tiles_put_floats_generic(fwant, n ? a + n % 3 : NULL, n, total);
            EXPECT(memcmp(fgot, fwant, sizeof fgot) == 0,
                   "conv_tiles_put_floats amx: n %d, total %d differs from the plain-C build's", n, total);
            runs++;
        }
    EXPECT(memcmp(&fwant[3], &a[40 % 3 + 3], 4) == 0 && fwant[56] == 0.0f &&
               ((uint32_t *)fwant)[57] == 0xa5a5a5a5u,
           "conv_tiles_put_floats: the last row is not its values, zeros, then nothing");
    static const int shapes[][3] = {{31, 31, 32}, {15, 15, 16}, {7, 7, 8},
                                    {3, 3, 4},    {1, 17, 18},  {2, 33, 35}};
    float *o = hfill(LEN * LEN, -2, 2), *pgot = hnew((LEN * LEN + PAD) * sizeof(float)),
          *pwant = hnew((LEN * LEN + PAD) * sizeof(float));
    for (size_t i = 0; i < sizeof special / sizeof *special; i++) o[11 * i + 1] = special[i];
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
        for (int flags = 0; flags < 4; flags++) { /* relu, mask */
            int Ho = shapes[sh][0], Wo = shapes[sh][1], Ws = shapes[sh][2];
            memset(pgot, 0xa5, (LEN * LEN + PAD) * sizeof(float));
            memset(pwant, 0xa5, (LEN * LEN + PAD) * sizeof(float));
            conv_tiles_plane_out_amx(o, Ho, Wo, Ws, 0.25f, flags & 1, flags & 2 ? m : NULL, pgot);
            conv_tiles_plane_out_generic(o, Ho, Wo, Ws, 0.25f, flags & 1, flags & 2 ? m : NULL, pwant);
            EXPECT(memcmp(pgot, pwant, (LEN * LEN + PAD) * sizeof(float)) == 0,
                   "conv_tiles_plane_out amx: %dx%d (rows %d apart), relu %d, mask %d differs from the "
                   "plain-C build's",
                   Ho, Wo, Ws, flags & 1, flags >> 1);
            planes++;
        }
    EXPECT(want[0] == 0xa5a5a5a5u && ((uint32_t *)pwant)[LEN * LEN] == 0xa5a5a5a5u,
           "conv_tiles_put_run, _plane_out: wrote outside the run or the plane");
    while (n_host) free(host_bufs[--n_host]);
    printf("test_ops: cpu internals: conv_tiles_put_run and _plane_out amx against the plain-C build: %d "
           "runs, %d "
           "planes: done\n",
           runs, planes);
}

/* The tiles' loops (cpu.h: conv_tiles_*'s how), blocked for L1, the sums making trips through
 * memory between the input channels' blocks (the filter gradient's between slices of
 * positions), or resident, the C tiles holding each block's whole sum (whole chunk), each with
 * and without software prefetches, give the same bits: the forward (96 -> 48 channels: three blocks in, the
 * outputs padded), the input gradient (two blocks in) and the filter gradient (chunks of several slices), in
 * the plain-C build and, where the CPU has AMX, the amx build; and the results are not zeros. */
static void test_tiles_resident(void) {
    struct conv_shape s = {.N = 40, .C = 96, .H = 9, .W = 9, .K = 48, .k = 3, .pad = 1};
    conv_tiles_sums_fn *const sums[] = {conv_tiles_sums_generic, conv_tiles_sums_amx};
    conv_tiles_grad_fn *const grads[] = {conv_tiles_filter_grad_generic, conv_tiles_filter_grad_amx};
    const char *const names[] = {"plain C", "amx"};
    int threads = omp_get_max_threads();
    omp_set_num_threads(2);
    seed = 4444;
    size_t nx = (size_t)s.N * s.C * s.H * s.W, ny = (size_t)s.N * s.K * s.H * s.W, nw = (size_t)s.K * s.C * 9;
    float *x = hfill(nx, -2, 2), *dy = hfill(ny, -2, 2), *w = hfill(nw, -1, 1), *b = hfill(s.K, -1, 1);
    float *ws = hnew(conv_tiles_workspace_floats(&s, 2) * sizeof(float));
    static const unsigned hows[] = {0, CONV_TILES_PREFETCH, CONV_TILES_RESIDENT,
                                    CONV_TILES_RESIDENT | CONV_TILES_PREFETCH};
    enum { HOWS = sizeof hows / sizeof hows[0] };
    float *out[HOWS];
    for (int h = 0; h < HOWS; h++) out[h] = hnew(nx * sizeof(float));
    int compared = 0;
    for (int build = 0; build < 2; build++) {
        if (build == 1 && gemm_bf16_select("amx") != 0) {
            printf("test_ops: cpu internals: conv_tiles amx resident or not: skipped: this CPU lacks AMX\n");
            break;
        }
        for (int pass = 0; pass < 3; pass++) { /* forward, input gradient, filter gradient */
            size_t n = pass == 0 ? ny : pass == 1 ? nx : nw;
            for (int h = 0; h < HOWS; h++) {
                memset(out[h], 0xa5, nx * sizeof(float));
                if (pass < 2)
                    sums[build](&s, pass, hows[h], pass ? dy : x, NULL, w, pass ? NULL : b, 0, NULL, NULL,
                                out[h], ws);
                else grads[build](&s, hows[h], x, dy, NULL, out[h], ws);
            }
            size_t zeros = 0;
            for (size_t i = 0; i < n; i++) zeros += out[0][i] == 0.0f;
            EXPECT(zeros < n / 100, "conv_tiles %s pass %d: %zu of %zu results are 0", names[build], pass,
                   zeros, n);
            for (int h = 1; h < HOWS; h++)
                EXPECT(memcmp(out[0], out[h], n * sizeof(float)) == 0,
                       "conv_tiles %s pass %d: how %u differs from how 0 (blocked for L1, no prefetch)",
                       names[build], pass, hows[h]);
            compared++;
        }
    }
    omp_set_num_threads(threads);
    while (n_host) free(host_bufs[--n_host]);
    printf("test_ops: cpu internals: conv_tiles resident or blocked for L1, prefetching or not: the same "
           "bits in %d "
           "passes: done\n",
           compared);
}

/* conv_tiles_find on the tiles' plain-C twin (amx-emulated finds as amx does): each pass of a
 * shape timed once, at its first call, on its first images only (a trial of 80 of 100 for the
 * sums: 2 chunks of 20 a thread), its three candidates; the results the same bits as the fixed
 * loops' (every image written again after the trials); a path chosen again forgets. */
static void test_tiles_find(void) {
    struct conv_shape s = {.N = 100, .C = 32, .H = 4, .W = 4, .K = 48, .k = 3, .pad = 1};
    int threads = omp_get_max_threads();
    omp_set_num_threads(2);
    CHECK(gemm_bf16_select("amx-emulated") == 0);
    seed = 4545;
    size_t nx = (size_t)s.N * s.C * s.H * s.W, ny = (size_t)s.N * s.K * s.H * s.W, nw = (size_t)s.K * s.C * 9;
    float *x = hfill(nx, -2, 2), *dy = hfill(ny, -2, 2), *w = hfill(nw, -1, 1), *b = hfill(s.K, -1, 1);
    float *mask = hfill(nx, -1, 1), *ws = hnew(conv_tiles_workspace_floats(&s, 2) * sizeof(float));
    size_t most = ny > nx ? ny : nx; /* > nw */
    float *got = hnew(most * sizeof(float)), *want = hnew(most * sizeof(float));
    static const enum conv_pass passes[] = {CONV_FORWARD, CONV_BACKWARD_DATA, CONV_BACKWARD_FILTER};
    static const int trials[] = {80, 80, 100}; /* the filter gradient's chunks: 81 images */
    for (int i = 0; i < 3; i++) {
        enum conv_pass pass = passes[i];
        size_t n = pass == CONV_FORWARD ? ny : pass == CONV_BACKWARD_DATA ? nx : nw;
        for (int call = 0; call < 2; call++) {
            memset(got, 0xa5, most * sizeof(float)), memset(want, 0x5a, most * sizeof(float));
            double before;
            int timed = conv_tiles_find_spent(&before);
            if (pass == CONV_BACKWARD_FILTER) {
                cpu_conv_tiles_filter_grad(&s, x, dy, NULL, got, ws);
                conv_tiles_filter_grad_generic(&s, 0, x, dy, NULL, want, ws);
            } else {
                int flip = pass == CONV_BACKWARD_DATA;
                cpu_conv_tiles_sums(&s, flip, flip ? dy : x, NULL, w, flip ? NULL : b, 0, flip ? mask : NULL,
                                    NULL, got, ws);
                conv_tiles_sums_generic(&s, flip, 0, flip ? dy : x, NULL, w, flip ? NULL : b, 0,
                                        flip ? mask : NULL, NULL, want, ws);
            }
            EXPECT(memcmp(got, want, n * sizeof(float)) == 0,
                   "conv_tiles_find pass %d call %d: the results differ from the plain loops'", pass, call);
            double after;
            EXPECT(conv_tiles_find_spent(&after) == timed + (call == 0) && (after > before) == (call == 0),
                   "conv_tiles_find pass %d call %d: %d passes timed before, %d after (%g -> %g s)", pass,
                   call, timed, conv_tiles_find_spent(&after), before, after);
            const struct conv_tiles_found *f = conv_tiles_found(&s, pass);
            EXPECT(f && f->images == trials[i] && f->images == conv_tiles_trial_images(&s, pass, 2),
                   "conv_tiles_find pass %d: trial of %d images, expected %d", pass, f ? f->images : -1,
                   trials[i]);
            if (!f) continue;
            int best = 0;
            for (int c = 0; c < CONV_TILES_CANDIDATES; c++) {
                EXPECT(f->seconds[c] > 0.0 && f->seconds[c] < 10.0,
                       "conv_tiles_find pass %d: candidate %d %g s", pass, c, f->seconds[c]);
                best = f->seconds[c] < f->seconds[best] ? c : best;
            }
            EXPECT(f->how == conv_tiles_candidate(best),
                   "conv_tiles_find pass %d: chose %s, the fastest is %s", pass, conv_tiles_how_name(f->how),
                   conv_tiles_how_name(conv_tiles_candidate(best)));
        }
    }
    double spent;
    EXPECT(conv_tiles_find_spent(&spent) == 3, "conv_tiles_find: %d passes timed, expected 3",
           conv_tiles_find_spent(&spent));
    CHECK(gemm_bf16_select("amx-emulated") == 0);
    EXPECT(!conv_tiles_found(&s, CONV_FORWARD) && conv_tiles_find_spent(&spent) == 0 && spent == 0.0,
           "conv_tiles_find: a path chosen again keeps the choices made before");
    omp_set_num_threads(threads);
    while (n_host) free(host_bufs[--n_host]);
    printf(
        "test_ops: cpu internals: conv_tiles_find: 3 passes timed once each, the plain loops' bits: done\n");
}

static void cpu_internals(void) {
    test_fastdiv();
    const char *best = gemm_isa(), *best_bf16 = gemm_bf16_isa();
    test_gemm_path(GEMM_FP32, "generic");
    test_gemm_path(GEMM_FP32, "avx2");
    test_gemm_path(GEMM_FP32, "avx512");
    gemm_select(best);
    test_bf16_round();
    for (int i = 0; i < N_BF16_PATHS; i++) test_gemm_path(GEMM_BF16, bf16_paths[i]);
    for (int i = 0; i < N_BF16_PATHS; i++) test_gemm_bf16_rounding(bf16_paths[i]);
    test_gemm_bf16_same_sums("avx2", 1);
    test_gemm_bf16_same_sums("avx512bf16", 0);
    test_gemm_bf16_prepacked("avx512bf16");
    test_gemm_bf16_prepacked("avx2");
    test_gemm_bf16_prepacked("generic");
    test_tiles_grad_pairs();
    test_tiles_runs();
    test_tiles_transpose16();
    test_tiles_resident();
    test_tiles_find();
    gemm_bf16_select(best_bf16);
}

/* The GPU's column before the bf16 CPU paths (AMX among them on a GPU machine's Xeon), each
 * column's lines flushed as it ends (failures go to stderr at once): were one path to crash
 * there, the log still holds what ran before it. Every case reseeds its data, so the order
 * changes no input. */
int main(void) {
    setenv("NVIDIA_TF32_OVERRIDE", "0", 1); /* before CUDA starts: FP32 everywhere */
    print_table();
    void (*const columns[])(void) = {cpu_column, cuda_column, cpu_bf16_column, cpu_bf16_act_column,
                                     cpu_internals};
    for (size_t i = 0; i < sizeof columns / sizeof columns[0]; i++) {
        columns[i]();
        fflush(stdout);
    }
    return check_summary("test_ops");
}
