/* Stride-1 k x k convolutions with zero padding (struct conv_shape: x[N][C][H][W],
 * w[K][C][k][k], y[N][K][Ho][Wo], Ho = H + 2 pad - k + 1) with cuDNN, plus our bias (+ activation)
 * and bias-gradient kernels, and our own forward and filter gradient for few input channels in
 * NHWC (small_conv_kernel, small_grad_kernel, cuda_small_conv).
 *
 * Plans: per shape (all of N, C, K, H, W, k, pad) a plan holds the descriptors and, per pass
 * (forward, backward-data, backward-filter), the deterministic algorithms cudnnFind* timed,
 * fastest first (deterministic, so a process's steps are reproducible; another process may
 * time another algorithm fastest; CIFAR10_CUDA_ALGOS=fastest keeps the others too, as
 * PyTorch's cudnn.benchmark, to measure what determinism costs). A pass is timed on its first
 * need: in conv_workspace() for the passes the caller names (the model, at start-up, where it
 * learns how much workspace to allocate), else in the first op that runs it (a smaller last
 * evaluation batch). The model names neither the input gradient of its first layer nor the
 * filter gradient of a frozen one, so those are never searched, and a shape for which cuDNN
 * has no deterministic algorithm there cannot stop a run.
 *
 * Workspace: every op takes, from its pass's list, the fastest algorithm whose workspace fits
 * the ws_bytes it is given, and conv_workspace() reports the largest need among the fastest
 * algorithms within CONV_WORKSPACE_LIMIT of the passes named. So an op given what
 * conv_workspace() said runs the algorithm it chose; one given less, or a shape first seen
 * later with a buffer sized for others, the fastest that fits; none fitting is an error
 * naming the layer and the bytes. No workspace size is promised or remembered between calls.
 *
 * Math: cuDNN's default math mode, which lets Ampere and newer GPUs use TF32 tensor cores for
 * FP32 convolutions, as PyTorch does by default (torch.backends.cudnn.allow_tf32); with
 * NVIDIA_TF32_OVERRIDE=0, FMA-only math (full FP32; the GPU tests use it), where the one
 * algorithm measured short of FP32 is left out (short_of_fp32).
 *
 * bf16 (the cuda-bf16 table, --precision bf16): the convolution runs on bf16 tensors with float
 * accumulation (cuDNN's BFLOAT16 configuration: bf16 x, w, y, compute type FLOAT, tensor-core
 * math). The activations are bf16 already (CUDA_BF16), so only the filter is converted, and
 * the bf16 filter gradient widened; with CUDA_BF16_COPIES (float activations, for comparisons)
 * x and dy are converted to bf16 copies too and the bf16 result (y or dx) widened back. That is
 * PyTorch's autocast: bf16 operands and a bf16-rounded result (the CPU's cpu-bf16 keeps the
 * float result). The copies live at the front of the workspace (conversion_bytes), which
 * conv_workspace adds to cuDNN's need; the biases and their gradient stay float.
 *
 * Layout: the activations are the backend's (cuda_nhwc()). In NHWC, cuDNN's tensor-core
 * kernels read and write them as they are (in NCHW it transposes each operand to NHWC and the
 * result back, which took 17 % of an airbench94 step on an H200), and the filter is handed to
 * it as [K][k][k][C] (KRSC): the model's filters made ready in that form after each update
 * (filters.cu, kernels.h conv_filters_create), any other one copied per call in the same
 * workspace; the filter gradient comes back through a copy. Those are small: at most
 * 256 x 256 x 25 floats. */
extern "C" {
#include "../../common/err.h"
}
#include "cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONV_WORKSPACE_LIMIT ((size_t)1 << 30)
/* Shapes planned per process: a network's convolutions times the batch sizes it meets (training,
 * a last evaluation batch, tests that try several): airbench94 has 7, the workshop CNN 6. */
#define MAX_PLANS 256

/* The passes, numbered as the bits of enum conv_pass (kernels.h): pass i is bit 1 << i. */
enum { FORWARD, BACKWARD_DATA, BACKWARD_FILTER, PASSES };
static_assert(CONV_FORWARD == 1 << FORWARD && CONV_BACKWARD_DATA == 1 << BACKWARD_DATA &&
                  CONV_BACKWARD_FILTER == 1 << BACKWARD_FILTER,
              "pass i is bit 1 << i of enum conv_pass");
static const char *const pass_names[PASSES] = {"forward", "backward-data", "backward-filter"};

/* The most algorithms cuDNN has for any pass (cudnn_ops.h: 8, 6 and 7). */
#define MAX_ALGOS 8
static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= MAX_ALGOS &&
                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= MAX_ALGOS &&
                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= MAX_ALGOS,
              "MAX_ALGOS holds every pass's algorithms");

/* One algorithm that ran in cudnnFind* (deterministic unless CIFAR10_CUDA_ALGOS=fastest): its
 * value (a cudnnConvolutionFwdAlgo_t, BwdDataAlgo_t or BwdFilterAlgo_t, by pass), the math type
 * it ran with, its workspace, and a convolution descriptor of its own with that math type set
 * once: no call changes a shared descriptor's math type before it runs, so a call can be
 * captured into a CUDA graph as it is. */
struct algo {
    int algo;
    cudnnMathType_t math;
    size_t memory;
    cudnnConvolutionDescriptor_t desc;
};

struct plan {
    struct conv_shape s;
    int bf16;                          /* bf16 tensors (see the top), else float */
    int nhwc;                          /* the activations' layout (top) */
    int deterministic;                 /* keep only deterministic algorithms (cuda_deterministic) */
    int Ho, Wo;                        /* kernels_conv_out of H, W; cuDNN agrees (checked) */
    cudnnTensorDescriptor_t x, y;      /* [N][C][H][W], [N][K][Ho][Wo] (or NHWC) */
    cudnnFilterDescriptor_t w;         /* [K][C][k][k] (or [K][k][k][C] with NHWC) */
    cudnnConvolutionDescriptor_t conv; /* cudnnFind*'s, with math */
    cudnnMathType_t math;              /* what cudnnFind* may use: default, or FMA only */
    struct {
        int timed; /* cudnnFind* has run for this pass */
        int count; /* the algorithms kept (keep()), fastest first */
        struct algo a[MAX_ALGOS];
    } pass[PASSES];
};

static struct plan plans[MAX_PLANS];
static int nplans;

/* Whether algorithm `algo` of pass i falls short of FMA math's promise (full FP32). cuDNN's
 * non-fused Winograd on filters above 3x3 does: on an H200 (cuDNN 9.14.0, FMA math) its
 * backward-data pass of conv 3->16 5x5 came within 5.2e-4 (relative L2) of the double
 * reference, TF32's error, where every other algorithm, and it on 3x3 filters, stays within
 * test_ops' 1e-5. Under TF32 math that error is the mode's own, so it stays eligible there. */
static bool short_of_fp32(const struct plan *p, int i, int algo) {
    static const int winograd_nonfused[PASSES] = {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
                                                  CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED};
    return p->math == CUDNN_FMA_MATH && p->s.k > 3 && algo == winograd_nonfused[i];
}

/* A convolution descriptor of plan p's padding (stride 1, dilation 1: PyTorch's Conv2d is a
 * cross-correlation; the compute type is float in both precisions: float accumulation) with
 * math type `math`. */
static cudnnConvolutionDescriptor_t conv_desc(const struct plan *p, cudnnMathType_t math) {
    cudnnConvolutionDescriptor_t d;
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, p->s.pad, p->s.pad, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
    return d;
}

/* cuDNN's results (sorted by time) for pass i, less those that failed, are not deterministic
 * (unless the plan takes any) or fall short of FP32 under FMA math. Perf:
 * cudnnConvolution{Fwd,BwdData,BwdFilter}AlgoPerf_t. */
template <typename Perf> static void keep(struct plan *p, int i, const Perf *r, int got) {
    for (int k = 0; k < p->pass[i].count; k++)
        CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(p->pass[i].a[k].desc));
    p->pass[i].count = 0;
    for (int j = 0; j < got; j++)
        if (r[j].status == CUDNN_STATUS_SUCCESS &&
            (r[j].determinism == CUDNN_DETERMINISTIC || !p->deterministic) &&
            !short_of_fp32(p, i, (int)r[j].algo))
            p->pass[i].a[p->pass[i].count++] =
                algo{(int)r[j].algo, r[j].mathType, r[j].memory, conv_desc(p, r[j].mathType)};
    p->pass[i].timed = 1;
}

/* Times every algorithm of pass i. cudnnFind* runs them on tensors and workspace it allocates
 * itself, so no buffer of ours is touched, even mid-step; but it allocates and synchronises, so
 * never during a graph capture (a capture meets only passes its step timed op by op before). */
static void time_pass(struct plan *p, int i) {
    if (cuda_capturing()) err_die(1, "internal error: cudnnFind during a graph capture");
    cudnnHandle_t h = cuda_cudnn();
    int got = 0;
    if (i == FORWARD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithm(h, p->x, p->w, p->conv, p->y,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &got, r));
        keep(p, i, r, got);
    } else if (i == BACKWARD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithm(
            h, p->w, p->y, p->conv, p->x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &got, r));
        keep(p, i, r, got);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithm(
            h, p->x, p->y, p->conv, p->w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &got, r));
        keep(p, i, r, got);
    }
}

/* The fastest algorithm of pass i whose workspace fits `bytes` (timing the pass first if it
 * has not been); exits naming the layer and the bytes when there is none. */
static const struct algo *choose(struct plan *p, int i, size_t bytes) {
    if (!p->pass[i].timed) time_pass(p, i);
    int count = p->pass[i].count;
    const struct algo *a = p->pass[i].a;
    for (int j = 0; j < count; j++)
        if (a[j].memory <= bytes) return &a[j];
    const struct conv_shape *s = &p->s;
    const char *kind = p->deterministic ? "deterministic " : "";
    if (count == 0)
        fprintf(
            stderr,
            "%s: cuDNN has no %s%s algorithm that runs for conv %d->%d %dx%d kernel %d pad %d, batch %d\n",
            err_progname(), kind, pass_names[i], s->C, s->K, s->H, s->W, s->k, s->pad, s->N);
    else {
        size_t least = a[0].memory;
        for (int j = 1; j < count; j++) least = a[j].memory < least ? a[j].memory : least;
        fprintf(stderr,
                "%s: conv %d->%d %dx%d kernel %d pad %d, batch %d: no %s%s algorithm fits in %zu bytes of "
                "workspace (the smallest needs %zu)\n",
                err_progname(), s->C, s->K, s->H, s->W, s->k, s->pad, s->N, kind, pass_names[i], bytes,
                least);
    }
    exit(1);
}

static int same_shape(const struct conv_shape *a, const struct conv_shape *b) {
    /* (the precision is compared by plan_get) */
    return a->N == b->N && a->C == b->C && a->K == b->K && a->H == b->H && a->W == b->W && a->k == b->k &&
           a->pad == b->pad;
}

/* The plan of shape s in float or bf16: its descriptors, made on first sight; no pass timed
 * yet. */
static struct plan *plan_get(const struct conv_shape *s, int bf16) {
    for (int i = 0; i < nplans; i++)
        if (same_shape(&plans[i].s, s) && plans[i].bf16 == bf16 && plans[i].nhwc == cuda_nhwc() &&
            plans[i].deterministic == cuda_deterministic())
            return &plans[i];
    CHECK(nplans < MAX_PLANS);
    CHECK(s->k >= 1 && s->k <= 5 && s->pad >= 0 && s->pad < s->k); /* the contract's range */
    struct plan *p = &plans[nplans++];
    memset(p, 0, sizeof *p); /* a slot reused after cuda_conv_release() has nothing timed */
    p->s = *s;
    p->bf16 = bf16;
    p->nhwc = cuda_nhwc();
    p->deterministic = cuda_deterministic();
    p->Ho = kernels_conv_out(s->H, s->k, s->pad);
    p->Wo = kernels_conv_out(s->W, s->k, s->pad);
    p->math = bf16 ? CUDNN_TENSOR_OP_MATH : cuda_tf32() ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
    cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
    cudnnTensorFormat_t format = p->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->x));
    CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->y));
    CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->x, format, type, s->N, s->C, s->H, s->W));
    CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, type, format, s->K, s->C, s->k, s->k));
    p->conv = conv_desc(p, p->math);
    /* cuDNN's own output size (1 + (H + 2 pad - k) / stride) must be the one the model sized y
     * by, or cuDNN would read and write y with other strides. */
    int on, oc, oh, ow;
    CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->conv, p->x, p->w, &on, &oc, &oh, &ow));
    CHECK(on == s->N && oc == s->K && oh == p->Ho && ow == p->Wo);
    CUDNN_CHECK(cudnnSetTensor4dDescriptor(p->y, format, type, s->N, s->K, p->Ho, p->Wo));
    return p;
}

/* The operands cuDNN sees where they differ from ours, at the front of the workspace, each on a
 * 256-byte boundary: with CUDA_BF16_COPIES, copies of x and y (or dy) and the bf16 result dx;
 * the filter w and the filter gradient dw in cuDNN's form whenever that differs (bf16, or KRSC
 * for NHWC). A float NCHW plan needs none. Elements are bf16 or float as the plan. */
struct copies {
    void *x, *w, *y, *dw, *dx;
};

static size_t round256(size_t bytes) { return (bytes + 255) / 256 * 256; }

static int filter_copied(const struct plan *p) { return p->bf16 || p->nhwc; }

/* The bytes of each copy (0: none), in the order of struct copies; `acts`: the activations are
 * converted (CUDA_BF16_COPIES). */
static void copy_bytes(const struct plan *p, int acts, size_t bytes[5]) {
    const struct conv_shape *s = &p->s;
    size_t e = p->bf16 ? sizeof(bf16_t) : sizeof(float);
    size_t x = acts ? round256((size_t)s->N * s->C * s->H * s->W * e) : 0;
    size_t w = filter_copied(p) ? round256((size_t)s->K * s->C * s->k * s->k * e) : 0;
    size_t y = acts ? round256((size_t)s->N * s->K * p->Ho * p->Wo * e) : 0;
    bytes[0] = x, bytes[1] = w, bytes[2] = y, bytes[3] = w, bytes[4] = x;
}

static size_t conversion_bytes(const struct plan *p, int acts) {
    size_t b[5];
    copy_bytes(p, acts, b);
    return b[0] + b[1] + b[2] + b[3] + b[4];
}

static struct copies copies_in(const struct plan *p, int acts, void *ws) {
    size_t b[5];
    copy_bytes(p, acts, b);
    char *at = (char *)ws;
    struct copies c;
    c.x = at, at += b[0];
    c.w = at, at += b[1];
    c.y = at, at += b[2];
    c.dw = at, at += b[3];
    c.dx = at;
    return c;
}

/* w as cuDNN reads it (filter_copied), and a filter gradient back from that form. */
static void filter_pack(const struct plan *p, const float *w, void *dst) {
    const struct conv_shape *s = &p->s;
    if (p->bf16) cuda_filter_pack(w, (bf16_t *)dst, s->K, s->C, s->k * s->k, p->nhwc);
    else cuda_filter_pack(w, (float *)dst, s->K, s->C, s->k * s->k, p->nhwc);
}

/* w in the form cuDNN reads: the ready one (filters.cu) if w's is current, else packed into
 * dst now. */
static const void *filter_form(const struct plan *p, const float *w, void *dst) {
    const struct conv_shape *s = &p->s;
    const void *ready = cuda_filter_ready(p->bf16, w, s->K, s->C, s->k);
    if (ready) return ready;
    filter_pack(p, w, dst);
    return dst;
}

static void filter_unpack(const struct plan *p, const void *src, float *dw) {
    const struct conv_shape *s = &p->s;
    if (p->bf16) cuda_filter_unpack((const bf16_t *)src, dw, s->K, s->C, s->k * s->k, p->nhwc);
    else cuda_filter_unpack((const float *)src, dw, s->K, s->C, s->k * s->k, p->nhwc);
}

/* The workspace an op hands to cuDNN: what follows the copies. Exits naming the layer when
 * ws_bytes cannot even hold the copies. */
static size_t cudnn_bytes(const struct plan *p, int acts, size_t ws_bytes) {
    size_t need = conversion_bytes(p, acts);
    if (ws_bytes < need) {
        const struct conv_shape *s = &p->s;
        fprintf(stderr,
                "%s: conv %d->%d %dx%d kernel %d pad %d, batch %d: %zu bytes of workspace cannot hold "
                "the copies of the operands (%zu bytes)\n",
                err_progname(), s->C, s->K, s->H, s->W, s->k, s->pad, s->N, ws_bytes, need);
        exit(1);
    }
    return ws_bytes - need;
}

/* Precision P's plans: cuDNN's bf16 configuration unless CUDA_FLOAT; activation copies with
 * CUDA_BF16_COPIES. */
#define BF16_OF(P) ((P) != CUDA_FLOAT)
#define ACTS_OF(P) ((P) == CUDA_BF16_COPIES)

/* The forward on few input channels (cuda_small_conv): C k^2 <= SMALL_CKK, the filter small
 * enough for shared memory. cuDNN runs airbench94's 3 -> 24 2x2 whitening layer without tensor
 * cores (C 3) and adds the bias in a second pass, about 6 % of the bf16 step for a layer that
 * is mostly memory traffic; the workshop CNN's 3 -> 32 3x3 first layer (C k^2 = 27) is the same
 * kind of layer. The CPU's direct forward takes the same layers (small_conv.c). NHWC, and not
 * with CUDA_BF16_COPIES (kept as it was). */
#define SMALL_CKK 27
template <enum cuda_precision P> static bool small_forward(const struct conv_shape *s) {
    int ckk = s->C * s->k * s->k;
    return P != CUDA_BF16_COPIES && cuda_nhwc() && cuda_small_conv() && ckk <= SMALL_CKK &&
           (size_t)s->K * ckk * sizeof(float) <= 48 * 1024;
}

/* The filter gradient of such a layer is ours too (small_filter_grad), up to CUDA_THREADS
 * outputs. */
template <enum cuda_precision P> static bool small_backward(const struct conv_shape *s) {
    return small_forward<P>(s) && s->K <= CUDA_THREADS;
}

template <enum cuda_precision P> static size_t conv_workspace(const struct conv_shape *s, unsigned passes) {
    CHECK(passes < 1u << PASSES);
    /* ours: no workspace, nothing to time */
    if (small_forward<P>(s)) passes &= ~(unsigned)CONV_FORWARD;
    if (small_backward<P>(s)) passes &= ~(unsigned)CONV_BACKWARD_FILTER;
    struct plan *p = plan_get(s, BF16_OF(P));
    size_t bytes = 0;
    for (int i = 0; i < PASSES; i++)
        if (passes & 1u << i) {
            size_t need = choose(p, i, CONV_WORKSPACE_LIMIT)->memory;
            if (need > bytes) bytes = need;
        }
    return conversion_bytes(p, ACTS_OF(P)) + bytes;
}

void cuda_conv_release(void) {
    for (int i = 0; i < nplans; i++) {
        CUDNN_CHECK(cudnnDestroyTensorDescriptor(plans[i].x));
        CUDNN_CHECK(cudnnDestroyTensorDescriptor(plans[i].y));
        CUDNN_CHECK(cudnnDestroyFilterDescriptor(plans[i].w));
        CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(plans[i].conv));
        for (int j = 0; j < PASSES; j++)
            for (int k = 0; k < plans[i].pass[j].count; k++)
                CUDNN_CHECK(cudnnDestroyConvolutionDescriptor(plans[i].pass[j].a[k].desc));
    }
    nplans = 0;
}

/* y's bias (b not NULL) and activation act, one pass in the plan's layout; y of type T. */
template <typename T> static void bias_act(const struct plan *p, void *y, const float *b, enum conv_act act) {
    int rows = p->s.N, hw = p->Ho * p->Wo;
    if (!b && act == CONV_ACT_NONE) return;
    cuda_act_rows(p->nhwc, &rows, &hw);
    cuda_bias_act((T *)y, b, 1.0f, rows, p->s.K, hw, act);
}

/* The shape for small_conv_kernel: dividers by K / V (packs per pixel), Wo, Ho and C k^2. */
struct small_conv {
    uint32_t C, H, W, K, k, pad, Ho, Wo, ckk, total; /* total: output packs */
    struct fastdiv kv, wo, ho, fck;
};

/* y[n][oy][ox][o] = b[o] + sum over (u, v, c) of x[n][oy + u - pad][ox + v - pad][c] w[o][c][u][v]
 * (NHWC; zero padding), then the activation act (cuda_activate); b may be NULL. A thread per output pixel and
 * pack of V output channels (cuda.h), float sums in the order u, v, c; the filter in shared memory as
 * [c][u][v][o], so a pack's weights are adjacent, and in bf16 (T) rounded to bf16 first, as cuDNN's bf16
 * convolution reads it. */
template <typename T, int V>
__global__ static void small_conv_kernel(const T *x, const float *w, const float *b, T *y,
                                         struct small_conv g, int act) {
    extern __shared__ float sw[];
    for (uint32_t i = threadIdx.x; i < g.K * g.ckk; i += blockDim.x) {
        uint32_t o = fastdiv_div(i, g.fck), r = i - o * g.ckk;
        float v = w[i];
        if constexpr (sizeof(T) == 2) v = __bfloat162float(__float2bfloat16_rn(v));
        sw[r * g.K + o] = v;
    }
    __syncthreads();
    GRID_STRIDE32(j, g.total) {
        uint32_t pix = fastdiv_div(j, g.kv), o0 = (j - pix * g.kv.d) * V;
        uint32_t row = fastdiv_div(pix, g.wo), ox = pix - row * g.Wo;
        uint32_t n = fastdiv_div(row, g.ho), oy = row - n * g.Ho;
        float acc[V];
        for (int e = 0; e < V; e++) acc[e] = b ? b[o0 + e] : 0.0f;
        for (uint32_t u = 0; u < g.k; u++) {
            uint32_t iy = oy + u - g.pad; /* wraps past H when above the image */
            if (iy >= g.H) continue;
            for (uint32_t v = 0; v < g.k; v++) {
                uint32_t ix = ox + v - g.pad;
                if (ix >= g.W) continue;
                const T *xp = x + ((n * g.H + iy) * g.W + ix) * g.C;
                for (uint32_t c = 0; c < g.C; c++) {
                    float xv = act_load(xp, c);
                    const float *wr = sw + ((c * g.k + u) * g.k + v) * g.K + o0;
                    for (int e = 0; e < V; e++) acc[e] += xv * wr[e];
                }
            }
        }
        for (int e = 0; e < V; e++) acc[e] = cuda_activate(acc[e], act);
        pack_store<V>(y, (size_t)pix * g.K + o0, acc);
    }
}

template <typename T>
static void small_conv_forward(const struct conv_shape *s, const void *x, const float *w, const float *b,
                               void *y, enum conv_act act) {
    struct small_conv g;
    g.C = (uint32_t)s->C, g.H = (uint32_t)s->H, g.W = (uint32_t)s->W, g.K = (uint32_t)s->K;
    g.k = (uint32_t)s->k, g.pad = (uint32_t)s->pad, g.ckk = g.C * g.k * g.k;
    g.Ho = (uint32_t)kernels_conv_out(s->H, s->k, s->pad),
    g.Wo = (uint32_t)kernels_conv_out(s->W, s->k, s->pad);
    CHECK(g.Ho >= 1 && g.Wo >= 1 && (uint64_t)s->N * g.H * g.W * g.C < (uint64_t)1 << 31 &&
          (uint64_t)s->N * g.Ho * g.Wo * g.K < (uint64_t)1 << 31);
    int cstep, V = cuda_pack_channels<T>(s->K, 1, &cstep, y);
    g.total = (uint32_t)s->N * g.Ho * g.Wo * (g.K / (uint32_t)V);
    g.kv = fastdiv_make(g.K / (uint32_t)V), g.wo = fastdiv_make(g.Wo), g.ho = fastdiv_make(g.Ho);
    g.fck = fastdiv_make(g.ckk);
    size_t shared = (size_t)g.K * g.ckk * sizeof(float);
    if (V > 1)
        small_conv_kernel<T, CUDA_PACK<T>><<<cuda_blocks(g.total), CUDA_THREADS, shared, cuda_stream()>>>(
            (const T *)x, w, b, (T *)y, g, act);
    else
        small_conv_kernel<T, 1><<<cuda_blocks(g.total), CUDA_THREADS, shared, cuda_stream()>>>(
            (const T *)x, w, b, (T *)y, g, act);
    LAUNCH_CHECK();
}

/* The filter gradient on few input channels (small_backward's layers, in NHWC): cuDNN's only
 * deterministic algorithm for the workshop CNN's 3 -> 32 3x3 first layer at batch 512 took
 * 0.39 ms on an H200 for 0.9 GFLOP and 70 MB of workspace, its atomic one 0.16 ms: 6.4 % of
 * the network's throughput, the whole price of determinism there. Ours is deterministic by
 * construction: fixed position ranges per block, fixed orders of summation, no atomics, and
 * the bias gradient comes with it as one more column of ones. Stage 1: each block sums its
 * positions' patches against dy into partial[block][r][o] (floats); stage 2 sums the blocks in
 * a fixed order, in double. */
#define SFG_CHUNK 64 /* positions staged in shared memory at a time */
#define SFG_R4    28 /* a patch row: C k^2 (<= SMALL_CKK) and the ones column, in float4s */
static_assert(SMALL_CKK + 1 <= SFG_R4 && SFG_R4 % 4 == 0, "a patch row holds C k^2 + 1 floats");

/* The shape for the filter gradient's kernels: R = C k^2 (+ 1 with the bias gradient), L
 * position lanes of K threads a block, `per` positions a block, `blocks` blocks. */
struct small_grad {
    uint32_t C, H, W, K, k, pad, Ho, Wo, ckk, R, r4, L, per, blocks, positions;
    struct fastdiv c, kk, wo, ho;
};

/* A block stages a chunk as SFG_GROUPS groups of SFG_CHUNK threads, thread t the position t %
 * SFG_CHUNK and every SFG_GROUPS-th column from t / SFG_CHUNK. */
#define SFG_GROUPS (CUDA_THREADS / SFG_CHUNK)
static_assert(CUDA_THREADS % SFG_CHUNK == 0 && SFG_R4 % SFG_GROUPS == 0, "a chunk's columns split evenly");
#define SFG_ONES 0xfe /* col_u of the ones column */
#define SFG_NONE 0xff /* col_u past R: 0 */

/* Stage 1: block b's positions [b per, (b + 1) per) (the last ones fewer), in chunks of
 * SFG_CHUNK: their patch rows staged in shared memory (row q column r = (u k + v) C + c:
 * x[n][oy + u - pad][ox + v - pad][c], 0 outside the image; 1 in the ones column), each column's
 * offset and (u, v) made once a block. Thread t is output channel o = t % K of lane t / K (L
 * lanes); each lane sums every L-th row of a chunk (float4 reads, broadcast across a warp's
 * channels) times its dy. Then the lanes' sums in order into partial[block][r][o]. */
template <typename T>
__global__ static void small_grad_kernel(const T *x, const T *dy, float *partial, struct small_grad g) {
    __shared__ float4 rows[SFG_CHUNK * SFG_R4 / 4];
    __shared__ float sums[SFG_R4 * CUDA_THREADS];
    __shared__ int col_off[SFG_R4];
    __shared__ uint8_t col_u[SFG_R4], col_v[SFG_R4];
    float *flat = (float *)rows;
    uint32_t t = threadIdx.x, o = t % g.K, lane = t / g.K, n4 = g.r4 / 4;
    uint32_t first = blockIdx.x * g.per, end = min(first + g.per, g.positions);
    if (t < SFG_R4) { /* seen after the chunk loop's first barrier */
        uint32_t u = t < g.ckk ? 0 : t < g.R ? SFG_ONES : SFG_NONE, v = 0;
        int off = 0;
        if (t < g.ckk) {
            uint32_t uv = fastdiv_div(t, g.c), c = t - uv * g.C;
            u = fastdiv_div(uv, g.kk), v = uv - u * g.k;
            off = (((int)u - (int)g.pad) * (int)g.W + ((int)v - (int)g.pad)) * (int)g.C + (int)c;
        }
        col_off[t] = off, col_u[t] = (uint8_t)u, col_v[t] = (uint8_t)v;
    }
    float acc[SFG_R4];
    for (int r = 0; r < SFG_R4; r++) acc[r] = 0.0f;
    for (uint32_t at = first; at < end; at += SFG_CHUNK) {
        __syncthreads(); /* the last chunk's rows are read */
        uint32_t q = t % SFG_CHUNK, p = at + q;
        uint32_t row = fastdiv_div(p, g.wo), ox = p - row * g.Wo, n = fastdiv_div(row, g.ho),
                 oy = row - n * g.Ho;
        long long pixel = ((long long)(n * g.H + oy) * g.W + ox) * g.C; /* read only where p < end */
#pragma unroll
        for (int m = 0; m < SFG_R4 / SFG_GROUPS; m++) {
            uint32_t r = t / SFG_CHUNK + (uint32_t)m * SFG_GROUPS;
            if (r >= g.r4) break;
            uint32_t u = col_u[r];
            float value = 0.0f;
            if (p < end && u == SFG_ONES) value = 1.0f;
            else if (p < end && u != SFG_NONE) {
                uint32_t iy = oy + u - g.pad, ix = ox + col_v[r] - g.pad; /* wrap past H, W above, left */
                if (iy < g.H && ix < g.W) value = act_load(x, (size_t)(pixel + col_off[r]));
            }
            flat[q * g.r4 + r] = value;
        }
        __syncthreads();
        if (lane >= g.L) continue;
        for (uint32_t q = lane; q < SFG_CHUNK && at + q < end; q += g.L) {
            float d = act_load(dy, (size_t)(at + q) * g.K + o);
            const float4 *row = rows + q * n4;
#pragma unroll
            for (int j = 0; j < SFG_R4 / 4; j++)
                if (j < (int)n4) {
                    float4 a = row[j];
                    acc[4 * j] += d * a.x, acc[4 * j + 1] += d * a.y;
                    acc[4 * j + 2] += d * a.z, acc[4 * j + 3] += d * a.w;
                }
        }
    }
    if (lane < g.L)
        for (int r = 0; r < SFG_R4; r++)
            if (r < (int)g.R) sums[r * CUDA_THREADS + t] = acc[r];
    __syncthreads();
    for (uint32_t i = t; i < g.R * g.K; i += blockDim.x) {
        uint32_t r = i / g.K, oo = i - r * g.K;
        float s = 0.0f;
        for (uint32_t l = 0; l < g.L; l++) s += sums[r * CUDA_THREADS + l * g.K + oo];
        partial[(size_t)blockIdx.x * g.R * g.K + i] = s;
    }
}

/* Stage 2: dw[o][c][u][v] (and db[o] from the ones column) = the blocks' partials summed in
 * double, in a fixed order: a block's 32 columns i (r K + o) each summed by 8 slices of the
 * blocks (slice j: blocks j, j + 8, ...; coalesced loads), then the slices in order. */
#define SFG_SLICES (CUDA_THREADS / 32)
__global__ static void small_grad_sum_kernel(const float *partial, float *dw, float *db,
                                             struct small_grad g) {
    __shared__ double slices[CUDA_THREADS];
    uint32_t col = threadIdx.x % 32, slice = threadIdx.x / 32, i = blockIdx.x * 32 + col, n = g.R * g.K;
    double s = 0.0;
    if (i < n)
        for (uint32_t b = slice; b < g.blocks; b += SFG_SLICES) s += partial[(size_t)b * n + i];
    slices[threadIdx.x] = s;
    __syncthreads();
    if (slice != 0 || i >= n) return;
    for (uint32_t j = 1; j < SFG_SLICES; j++) s += slices[j * 32 + col];
    uint32_t r = i / g.K, o = i - r * g.K;
    if (r == g.ckk) {
        db[o] = (float)s;
        return;
    }
    uint32_t uv = r / g.C, c = r - uv * g.C, u = uv / g.k, v = uv - u * g.k;
    dw[((o * g.C + c) * g.k + u) * g.k + v] = (float)s;
}

/* The shape of a small_backward layer's filter gradient, with the bias gradient's column or
 * without. */
static struct small_grad small_grad_make(const struct conv_shape *s, int with_db) {
    struct small_grad g;
    g.C = (uint32_t)s->C, g.H = (uint32_t)s->H, g.W = (uint32_t)s->W, g.K = (uint32_t)s->K;
    g.k = (uint32_t)s->k, g.pad = (uint32_t)s->pad, g.ckk = g.C * g.k * g.k;
    g.Ho = (uint32_t)kernels_conv_out(s->H, s->k, s->pad),
    g.Wo = (uint32_t)kernels_conv_out(s->W, s->k, s->pad);
    CHECK(s->N >= 1 && g.K >= 1 && g.K <= CUDA_THREADS && g.ckk <= SMALL_CKK && g.Ho >= 1 && g.Wo >= 1 &&
          (uint64_t)s->N * g.H * g.W * g.C < (uint64_t)1 << 31 &&
          (uint64_t)s->N * g.Ho * g.Wo * g.K < (uint64_t)1 << 31 &&
          (uint64_t)(g.k + g.pad) * (g.W + 1) * g.C < (uint64_t)1 << 31); /* col_off's int */
    g.R = g.ckk + (with_db ? 1 : 0), g.r4 = (g.R + 3) / 4 * 4, g.L = CUDA_THREADS / g.K;
    g.positions = (uint32_t)s->N * g.Ho * g.Wo;
    /* At least 1024 positions a block, at most 1024 blocks: a function of the shape only, so
     * the sums' order, and their bits, are the same on every GPU. */
    uint32_t per = (g.positions + 1023) / 1024;
    g.per = (per < 1024 ? 1024 : per + SFG_CHUNK - 1) / SFG_CHUNK * SFG_CHUNK;
    g.blocks = (g.positions + g.per - 1) / g.per;
    g.c = fastdiv_make(g.C), g.kk = fastdiv_make(g.k), g.wo = fastdiv_make(g.Wo), g.ho = fastdiv_make(g.Ho);
    return g;
}

/* The scratch bytes small_filter_grad takes for the partials. */
static size_t small_grad_bytes(const struct small_grad *g) {
    return (size_t)g->blocks * g->R * g->K * sizeof(float);
}

/* dw (and db unless NULL) of a small_backward layer from x and dy of type T, with no workspace
 * but the backend's scratch for the partials. */
template <typename T>
static void small_filter_grad(const struct conv_shape *s, const void *x, const void *dy, float *dw,
                              float *db) {
    struct small_grad g = small_grad_make(s, db != NULL);
    float *partial = (float *)cuda_scratch(small_grad_bytes(&g));
    small_grad_kernel<T>
        <<<g.blocks, CUDA_THREADS, 0, cuda_stream()>>>((const T *)x, (const T *)dy, partial, g);
    LAUNCH_CHECK();
    small_grad_sum_kernel<<<(g.R * g.K + 31) / 32, CUDA_THREADS, 0, cuda_stream()>>>(partial, dw, db, g);
    LAUNCH_CHECK();
}

/* y = cuDNN's sums of the convolution (no bias, no activation), in the plan's layout and
 * precision P; the plan. */
template <enum cuda_precision P, typename T>
static struct plan *conv_sums(const struct conv_shape *s, const void *x, const float *w, void *y, void *ws,
                              size_t ws_bytes) {
    struct plan *p = plan_get(s, BF16_OF(P));
    size_t cudnn_ws_bytes = cudnn_bytes(p, ACTS_OF(P), ws_bytes), ny = (size_t)s->N * s->K * p->Ho * p->Wo;
    void *cudnn_ws = (char *)ws + conversion_bytes(p, ACTS_OF(P));
    const struct algo *a = choose(p, FORWARD, cudnn_ws_bytes);
    const float one = 1.0f, zero = 0.0f;
    const void *xo = x, *wo = w;
    void *yo = y;
    struct copies c = copies_in(p, ACTS_OF(P), ws);
    if (ACTS_OF(P)) {
        cuda_to_bf16((const float *)x, (bf16_t *)c.x, (size_t)s->N * s->C * s->H * s->W);
        xo = c.x, yo = c.y;
    }
    if (filter_copied(p)) wo = filter_form(p, w, c.w);
    CUDNN_CHECK(cudnnConvolutionForward(cuda_cudnn(), &one, p->x, xo, p->w, wo, a->desc,
                                        (cudnnConvolutionFwdAlgo_t)a->algo, cudnn_ws, cudnn_ws_bytes, &zero,
                                        p->y, yo));
    if (ACTS_OF(P)) cuda_from_bf16((const bf16_t *)c.y, (float *)y, ny);
    return p;
}

/* The table's entries for precision P, activations of type T (bf16 with CUDA_BF16, float
 * otherwise). */
template <enum cuda_precision P, typename T>
static void conv_forward(const struct conv_shape *s, const void *x, const float *w, const float *b, void *y,
                         enum conv_act act, void *ws, size_t ws_bytes) {
    if (small_forward<P>(s)) {
        small_conv_forward<T>(s, x, w, b, y, act);
        return;
    }
    bias_act<T>(conv_sums<P, T>(s, x, w, y, ws, ws_bytes), y, b, act);
}

/* The convolution into full (the unpooled maps, kernels.h), then the max pool from it: cuDNN's
 * sums, with the bias and activation applied by the pool as it reads them (one pass over full
 * instead of bias_act's two), or our small convolution with its own. */
template <enum cuda_precision P, typename T>
static void conv_pool_forward(const struct conv_shape *s, const void *x, const float *w, const float *b,
                              enum conv_act act, int pk, void *full, void *y, unsigned char *winners,
                              void *ws, size_t ws_bytes) {
    int Ho = kernels_conv_out(s->H, s->k, s->pad), Wo = kernels_conv_out(s->W, s->k, s->pad);
    if (small_forward<P>(s)) {
        small_conv_forward<T>(s, x, w, b, full, act);
        cuda_maxpool_forward<T>(full, y, winners, NULL, CONV_ACT_NONE, s->N, s->K, Ho, Wo, pk);
        return;
    }
    conv_sums<P, T>(s, x, w, full, ws, ws_bytes);
    cuda_maxpool_forward<T>(full, y, winners, b, act, s->N, s->K, Ho, Wo, pk);
}

/* db[K] = the sum of dy over n, y, x (float in every precision). */
template <typename T> static void bias_grad(const struct plan *p, const void *dy, float *db) {
    int rows = p->s.N, hw = p->Ho * p->Wo, K = p->s.K;
    cuda_act_rows(p->nhwc, &rows, &hw);
    double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(rows, K, hw) * K * sizeof(double));
    int S = cuda_channel_partials(CHANNEL_SUM, (const T *)dy, channel_inputs{}, part, rows, K, hw);
    cuda_channel_reduce(part, db, S, K, 1.0f);
}

template <enum cuda_precision P, typename T>
static void conv_backward(const struct conv_shape *s, const void *x, const float *w, const void *dy, void *dx,
                          float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes) {
    if (dw && small_backward<P>(s)) { /* ours, db with it; cuDNN's only for dx */
        small_filter_grad<T>(s, x, dy, dw, db);
        dw = NULL, db = NULL;
        if (!dx) return;
    }
    struct plan *p = plan_get(s, BF16_OF(P));
    size_t cudnn_ws_bytes = cudnn_bytes(p, ACTS_OF(P), ws_bytes);
    void *cudnn_ws = (char *)ws + conversion_bytes(p, ACTS_OF(P));
    size_t nx = (size_t)s->N * s->C * s->H * s->W;
    const float one = 1.0f, zero = 0.0f;
    if (db) bias_grad<T>(p, dy, db);
    /* The operands cuDNN reads and the results it writes: ours, or copies (struct copies). */
    const void *xo = x, *wo = w, *dyo = dy;
    void *dwo = dw, *dxo = dx;
    struct copies c = copies_in(p, ACTS_OF(P), ws);
    if (ACTS_OF(P) && (dw || dx)) {
        cuda_to_bf16((const float *)dy, (bf16_t *)c.y, (size_t)s->N * s->K * p->Ho * p->Wo);
        if (dw) cuda_to_bf16((const float *)x, (bf16_t *)c.x, nx);
        xo = c.x, dyo = c.y, dxo = c.dx;
    }
    if (filter_copied(p)) {
        if (dx) wo = filter_form(p, w, c.w);
        dwo = c.dw;
    }
    if (dw) {
        const struct algo *a = choose(p, BACKWARD_FILTER, cudnn_ws_bytes);
        CUDNN_CHECK(cudnnConvolutionBackwardFilter(cuda_cudnn(), &one, p->x, xo, p->y, dyo, a->desc,
                                                   (cudnnConvolutionBwdFilterAlgo_t)a->algo, cudnn_ws,
                                                   cudnn_ws_bytes, &zero, p->w, dwo));
        if (filter_copied(p)) filter_unpack(p, c.dw, dw);
    }
    if (!dx) return;
    const struct algo *a = choose(p, BACKWARD_DATA, cudnn_ws_bytes);
    CUDNN_CHECK(cudnnConvolutionBackwardData(cuda_cudnn(), &one, p->w, wo, p->y, dyo, a->desc,
                                             (cudnnConvolutionBwdDataAlgo_t)a->algo, cudnn_ws, cudnn_ws_bytes,
                                             &zero, p->x, dxo));
    if (ACTS_OF(P)) cuda_from_bf16((const bf16_t *)c.dx, (float *)dx, nx);
    if (dx_mask) cuda_relu_backward<T>(dx_mask, dx, dx, nx);
}

/* cudnn_ops.h's names of the algorithms, by pass, and of the math types. */
static const char *algo_name(int pass, int algo) {
    static const char *const fwd[] = {
        "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
        "WINOGRAD",      "WINOGRAD_NONFUSED"};
    static const char *const data[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                       "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
    static const char *const filter[] = {
        "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
    static_assert(sizeof fwd / sizeof *fwd == CUDNN_CONVOLUTION_FWD_ALGO_COUNT &&
                      sizeof data / sizeof *data == CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT &&
                      sizeof filter / sizeof *filter == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                  "a name for every algorithm");
    const char *const *names = pass == FORWARD ? fwd : pass == BACKWARD_DATA ? data : filter;
    int count = pass == FORWARD         ? (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT
                : pass == BACKWARD_DATA ? (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                        : (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    return algo >= 0 && algo < count ? names[algo] : "unknown";
}

static const char *math_name(cudnnMathType_t math) {
    switch (math) {
    case CUDNN_DEFAULT_MATH: return "default math";
    case CUDNN_TENSOR_OP_MATH: return "tensor ops";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return "tensor ops with conversion";
    case CUDNN_FMA_MATH: return "FMA";
    }
    return "unknown math";
}

/* The algorithm an op of pass `pass` given ws_bytes would run (planning the pass as it would),
 * its math type and workspace. */
template <enum cuda_precision P>
static void conv_describe(const struct conv_shape *s, enum conv_pass pass, size_t ws_bytes, char *buf,
                          size_t size) {
    int i = pass == CONV_FORWARD ? FORWARD : pass == CONV_BACKWARD_DATA ? BACKWARD_DATA : BACKWARD_FILTER;
    if (pass == CONV_FORWARD && small_forward<P>(s)) {
        snprintf(buf, size, "ours (direct, few input channels), 0.0 MiB%s, NHWC",
                 P == CUDA_BF16 ? ", bf16" : "");
        return;
    }
    if (pass == CONV_BACKWARD_FILTER && small_backward<P>(s)) {
        struct small_grad g = small_grad_make(s, 1);
        snprintf(buf, size,
                 "ours (direct, few input channels, deterministic), 0.0 MiB (%.1f MiB of scratch)%s, NHWC",
                 (double)small_grad_bytes(&g) / (1 << 20), P == CUDA_BF16 ? ", bf16" : "");
        return;
    }
    struct plan *p = plan_get(s, BF16_OF(P));
    const struct algo *a = choose(p, i, cudnn_bytes(p, ACTS_OF(P), ws_bytes));
    snprintf(buf, size, "%s, %s, %.1f MiB%s%s", algo_name(i, a->algo), math_name(a->math),
             (double)a->memory / (1 << 20),
             P == CUDA_BF16          ? ", bf16"
             : P == CUDA_BF16_COPIES ? ", bf16 copies"
                                     : "",
             p->nhwc ? ", NHWC" : "");
}

/* db[K] of a pooled convolution from its pool's output gradient dyp[N][K][HWp]: the full map's
 * gradient is dyp at each window's winner (0 there too where relu and the winner did not pass
 * the ReLU) and 0 elsewhere, so its sum is that of dyp so masked, a quarter of the full map's
 * elements (2x2 windows) to read. */
template <typename T>
static void pooled_bias_grad(int N, int K, int HWp, const void *dyp, const unsigned char *winners, int relu,
                             float *db) {
    if (N * HWp == 0) { /* no window: the full map's gradient is all 0 */
        CUDA_CHECK(cudaMemsetAsync(db, 0, (size_t)K * sizeof(float), cuda_stream()));
        return;
    }
    int rows = N, hw = HWp;
    cuda_act_rows(cuda_nhwc(), &rows, &hw);
    double *part = (double *)cuda_scratch(2 * (size_t)cuda_channel_splits(rows, K, hw) * K * sizeof(double));
    struct channel_inputs in = {winners, NULL, NULL, NULL, NULL};
    int S = cuda_channel_partials(relu ? CHANNEL_SUM_PASSING : CHANNEL_SUM, (const T *)dyp, in, part, rows, K,
                                  hw);
    cuda_channel_reduce(part, db, S, K, 1.0f);
}

/* The pool's backward into full, then conv_backward from it, but for db, summed from dyp
 * (pooled_bias_grad). */
template <enum cuda_precision P, typename T>
static void conv_pool_backward(const struct conv_shape *s, const void *x, const float *w, const void *dyp,
                               const unsigned char *winners, int pk, int relu, void *full, void *dx,
                               float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes) {
    int Ho = kernels_conv_out(s->H, s->k, s->pad), Wo = kernels_conv_out(s->W, s->k, s->pad);
    cuda_maxpool_backward<T>(winners, dyp, full, s->N, s->K, Ho, Wo, pk, relu);
    if (db) pooled_bias_grad<T>(s->N, s->K, (Ho / pk) * (Wo / pk), dyp, winners, relu, db);
    conv_backward<P, T>(s, x, w, full, dx, dw, NULL, dx_mask, ws, ws_bytes);
}

template <enum cuda_precision P>
static struct kernels_filters *conv_filters_create(int n, const struct conv_shape *s, const float *const *w) {
    return cuda_filters_create(BF16_OF(P), n, s, w);
}

template <enum cuda_precision P, typename T> static void fill_as(struct kernels *k) {
    k->conv_workspace = conv_workspace<P>;
    k->conv_describe = conv_describe<P>;
    k->conv_filters_create = conv_filters_create<P>;
    k->conv_filters_ready = cuda_filters_ready;
    k->conv_filters_destroy = cuda_filters_destroy;
    k->conv_forward = conv_forward<P, T>;
    k->conv_pool_forward = conv_pool_forward<P, T>;
    k->conv_backward = conv_backward<P, T>;
    k->conv_pool_backward = conv_pool_backward<P, T>;
}

void cuda_fill_conv(struct kernels *k, enum cuda_precision p) { CUDA_FILL_BY_PRECISION(k, p, fill_as); }
