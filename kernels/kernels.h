/* The compute interface the model is written against. A backend (kernels/cpu/, kernels/cuda/)
 * fills one struct kernels; the model never calls a backend directly, so the same training step
 * runs on either. Every pointer argument below points into memory from that backend's alloc();
 * host code moves data with upload()/download() or the asynchronous copies.
 *
 * Ordering: ops run in call order on one compute queue and may return before they finish (the
 * CUDA backend; the CPU backend finishes each op before returning). download() waits for
 * everything before it. The asynchronous copies run on two queues of their own, tied to the
 * compute queue with events, so they overlap compute: input_upload_async on the input queue
 * (input batches), upload_async and download_async on the transfer queue (staged gradients).
 * Two queues, so an input upload never waits behind megabytes of gradient traffic; the two are
 * not ordered against each other.
 *
 * Lifetime: the table is usable from its constructor (kernels_cpu(), kernels_cuda()) until
 * shutdown(); afterwards it must not be used, and only the constructor may be called again.
 *
 * Layouts: weights are PyTorch's, conv [K][C][k][k] and linear [O][I], on every backend.
 * Activations with a spatial shape, written [N][C][H][W] (or [N][C][HW]) below, are stored in
 * the backend's layout (`nhwc`): PyTorch's NCHW, or NHWC, [N][H][W][C], where cuDNN's
 * tensor-core convolutions read and write them without transposing. Only the flatten ops
 * turn them into PyTorch's [N][C*H*W] order, so the linear layers, the logits and every
 * parameter mean the same on every backend. Backward functions overwrite (never accumulate
 * into) their gradient outputs.
 *
 * Element types: activations and their gradients (the void pointers below: images after
 * input_prepare, every op's x, y, dy, dx, the logits and dlogits) hold elements of act_size
 * bytes: float, or bf16 on a table with act_size 2 (the upper half of a float, rounded to
 * nearest even; PyTorch's autocast keeps activations so). Such a table computes every op in
 * float from the bf16 values it reads and rounds what it writes (a convolution's or linear
 * layer's product may be rounded before its bias is added, as in PyTorch). Everything else
 * (weights and their gradients, statistics, losses, optimizer state) is float on every table. */
#ifndef KERNELS_KERNELS_H
#define KERNELS_KERNELS_H

#include "../common/err.h"

#include <stddef.h>

/* An event on a backend's queues (opaque; the CPU backend's are always complete). */
struct kernels_event;
/* A recorded sequence of compute-queue ops (capture_end), run again by graph_launch. */
struct kernels_graph;
/* A set of convolution filters kept in the form the convolutions read (conv_filters_create). */
struct kernels_filters;

/* The passes of a convolution, as bits, for conv_workspace. */
enum conv_pass { CONV_FORWARD = 1, CONV_BACKWARD_DATA = 2, CONV_BACKWARD_FILTER = 4 };

/* A stride-1 convolution: x[N][C][H][W], w[K][C][k][k] (1 <= k <= 5), zero padding `pad` on
 * every side (0 <= pad < k), y[N][K][Ho][Wo] with Ho = H + 2 pad - k + 1, Wo likewise
 * (kernels_conv_out). */
struct conv_shape {
    int N, C, K, H, W, k, pad;
};

/* maxpool_forward's winner byte: this bit set where the maximum is not <= 0; below it, the
 * winner's offset in its window. */
enum { MAXPOOL_PASSES = 0x80 };

/* The activation a convolution's forward applies to its sums (the layer after it, fused). */
enum conv_act { CONV_ACT_NONE, CONV_ACT_RELU, CONV_ACT_GELU };

/* sgd_update: group g's settings apply where group[i] == g (g < SGD_GROUPS); SGD_SKIP leaves
 * p[i] and m[i] as they are (a stopped tensor, alignment padding). */
enum { SGD_GROUPS = 2, SGD_SKIP = 255 };
/* torch.optim.SGD's numbers for one step, in backend memory (written by scalars_set), so that a
 * recorded step (a graph) reads those of the step it runs: group g's lr and weight decay, the
 * momentum, and the factor of the gradients (1/world size after a summing allreduce). */
struct sgd_hyper {
    float lr[SGD_GROUPS], weight_decay[SGD_GROUPS], momentum, grad_scale;
};
#define SGD_HYPER_FLOATS ((int)(sizeof(struct sgd_hyper) / sizeof(float)))
#define SCALARS_SET_MAX  16 /* floats per scalars_set call */

/* How softmax_xent reduces its per-sample losses (nn.CrossEntropyLoss's reduction). */
enum xent_reduction { XENT_MEAN, XENT_SUM };

/* patch_covariance: a 2x2 patch of 3 channels as a vector ([c][dy][dx]), and images per
 * partial sum. */
enum { PATCH_DIM = 12, PATCH_CHUNK = 40 };
/* conv_filters_create: filters per set at most (airbench94 has 7 convolutions). */
enum { CONV_FILTERS_MAX = 16 };
int kernels_conv_out(int size, int k, int pad);

struct kernels {
    const char *name; /* "cpu", "cpu-bf16", "cpu-bf16-act", "cuda", "cuda-bf16" */
    int host;         /* 1: the backend computes on the host in host memory (the CPU tables) */
    int nhwc;         /* the activations' layout (top): 0 NCHW (the CPU), 1 NHWC */
    size_t act_size;  /* bytes of an activation element (top): sizeof(float), or 2 (bf16) */

    /* Memory: zero-filled, aligned allocation; exits with a message on failure. */
    void *(*alloc)(size_t bytes);
    void (*free)(void *p);
    void (*upload)(void *dst, const void *host_src, size_t bytes);
    void (*download)(void *host_dst, const void *src, size_t bytes);

    /* Host memory the asynchronous copies need (page-locked on CUDA), zero-filled. */
    void *(*host_alloc)(size_t bytes);
    void (*host_free)(void *p);
    struct kernels_event *(*event_create)(void);
    void (*event_destroy)(struct kernels_event *e);
    /* Input queue (input batches, model/batches.c), asynchronous to the host: copies host_src
     * (from host_alloc, unchanged until done completes) to dst, then marks done (when not
     * NULL). Compute does not wait for it unless told to with compute_wait. */
    void (*input_upload_async)(void *dst, const void *host_src, size_t bytes, struct kernels_event *done);
    /* Transfer queue (staged gradients, dist/dist.c), otherwise as input_upload_async. */
    void (*upload_async)(void *dst, const void *host_src, size_t bytes, struct kernels_event *done);
    /* Once the compute queue has finished everything issued before this call: copies src to
     * host_dst (from host_alloc) on the transfer queue, then marks done. With bytes 0, done only
     * marks that point of the compute queue (no queue but the compute queue is involved). */
    void (*download_async)(void *host_dst, const void *src, size_t bytes, struct kernels_event *done);
    /* Compute queue: copies src to host_dst (from host_alloc) in order with its ops (those
     * issued before have written src, those after may overwrite it); done when the work issued
     * before a later mark (download_async with bytes 0) is. May be recorded in a graph: a
     * step's (loss, correct) read back without a wait in the step. */
    void (*download_queued)(void *host_dst, const void *src, size_t bytes);
    /* Compute work issued after this call starts only once e is complete. */
    void (*compute_wait)(struct kernels_event *e);
    /* 1 when everything before e has finished, else 0; never blocks. */
    int (*event_done)(struct kernels_event *e);
    /* Blocks until e is complete. */
    void (*event_wait)(struct kernels_event *e);
    /* Timing marks on the compute queue (the per-layer times of cifar10-bench): timer_create
     * makes an event that can be marked (freed by event_destroy); timer_mark records in it the
     * point the compute queue has reached with the calls issued so far; timer_seconds is the
     * time between two marks, waiting for the later one. The CPU's marks read the host clock
     * (its ops have finished when they return); CUDA's are events timed by the GPU, so marking
     * never waits and a mark costs a few microseconds of the host. */
    struct kernels_event *(*timer_create)(void);
    void (*timer_mark)(struct kernels_event *e);
    double (*timer_seconds)(struct kernels_event *from, struct kernels_event *to);

    /* The input pipeline on the device: x[N][3][32][32] = crop/flip of img[N][3][32][32]
     * (uint8) by geom[N][3] = {dx, dy, flip} (int32; offsets 0..8 into the image padded by 4,
     * 4,4 = identity; flip mirrors left-right after the crop), then x = pixel * scale[c] +
     * shift[c] (scale/shift: host arrays of 3, the normalisation of data/augment.h). The
     * padding is zeros, or with reflect non-zero the mirror image without the edge row
     * (F.pad(mode='reflect'): offsets up to 31 pixels out). */
    void (*input_prepare)(const unsigned char *img, const int *geom, void *x, int N, const float *scale,
                          const float *shift, int reflect);

    /* airbench's whitening statistics: part[k][PATCH_DIM][PATCH_DIM] (double, backend memory;
     * the upper triangle, the rest 0) = the sum of p p^T over every 2x2 patch p (stride 1: 31
     * x 31 per image) of images [k PATCH_CHUNK, (k + 1) PATCH_CHUNK) of img[n][3][32][32]
     * (uint8, backend memory; the last chunk shorter), normalised as input_prepare does
     * (pixel * scale[c] + shift[c] in float; host arrays of 3). Each product and sum in double,
     * images, rows and columns in order, nothing contracted into an FMA: the same bits on every
     * backend (the host adds the chunks in order, so no thread count changes them either). */
    void (*patch_covariance)(const unsigned char *img, int n, const float *scale, const float *shift,
                             double *part);

    /* Scratch (bytes) that conv_forward and conv_backward need for this shape, for the passes
     * named (enum conv_pass: the forward, the backward with dx, the backward with dw), and that
     * linear_forward and linear_backward need. A caller allocates one buffer of the largest
     * size over its layers and hands it, with its size, to every such op.
     * On CUDA this is where the passes named are planned: cuDNN's algorithms are timed and the
     * fastest deterministic one within 1 GiB of workspace kept (exits naming the layer when
     * none is). Name only the passes that will run: one never named (the input gradient of a
     * first layer, the filter gradient of a frozen one) is never searched, so a missing
     * algorithm there cannot stop a run; a pass first run unnamed is planned then, within the
     * ws_bytes that call is given. The CPU's size does not depend on passes. */
    size_t (*conv_workspace)(const struct conv_shape *s, unsigned passes);
    size_t (*linear_workspace)(int N, int I, int O);
    /* How pass `pass` (one enum conv_pass) of shape s runs, in a few words for logs and
     * benchmarks, given ws_bytes of scratch: the CPU's method ("Winograd F(4x4)", "im2col +
     * GEMM"), cuDNN's algorithm, math and workspace ("IMPLICIT_PRECOMP_GEMM, tensor ops,
     * 1.2 MiB"). On CUDA it plans the pass as an op would. */
    void (*conv_describe)(const struct conv_shape *s, enum conv_pass pass, size_t ws_bytes, char *buf,
                          size_t size);
    /* Filters made ready in the form the backend's convolutions read (CUDA: KRSC in NHWC,
     * bf16 where the products are), all at once, so that the conv ops need not convert them
     * at each call. conv_filters_create (outside a graph capture) names a set: filters w[i] of
     * shapes s[i] (N unused), n <= CONV_FILTERS_MAX, that the caller will hand to the conv
     * ops; NULL where there is nothing to make ready (the CPU reads w as it is).
     * conv_filters_ready (on the compute queue; may be recorded in a graph) makes the set's
     * ready forms from the filters' values now. A conv op given one of them with its shape
     * reads the ready form while it is current: until an upload() or an sgd_update or
     * lookahead_update writes over one of the set's filters (the asynchronous uploads must
     * not), after which the ops convert at each call again. So call it after each update and
     * load; a graph that updates the filters must make them ready after (CUDA stops at its
     * capture_end otherwise), and one recorded with a current set reads the ready forms at
     * each replay, so make them ready after any change before replaying it.
     * conv_filters_destroy (outside a capture) frees a set; before its filters' memory is
     * freed, and before shutdown. NULL (no set: each op converts per call; also past the
     * backend's count of live sets) is taken by ready and destroy, which do nothing. */
    struct kernels_filters *(*conv_filters_create)(int n, const struct conv_shape *s, const float *const *w);
    void (*conv_filters_ready)(struct kernels_filters *f);
    void (*conv_filters_destroy)(struct kernels_filters *f);

    /* The four ops below take scratch ws[ws_bytes] from alloc(). Enough is what conv_workspace
     * / linear_workspace say for the call's shape and passes. The CPU backend needs that much
     * (its size does not depend on N, only on the OpenMP thread count) and stops at a CHECK
     * when ws_bytes is short. The CUDA backend takes the fastest deterministic algorithm that
     * fits ws_bytes, so a buffer sized for another shape (the model's, for max_batch, also
     * serves a smaller last batch) works unless none fits, which exits naming the layer and
     * the bytes. */

    /* y[N][K][Ho][Wo] = conv(x[N][C][H][W], w[K][C][k][k], zero padding s->pad, stride 1)
     * + b[K] (no bias when b is NULL), then the activation act (enum conv_act: a fused ReLU or
     * GELU layer, as relu_forward or gelu_forward; the sum itself is not kept). Shapes: struct
     * conv_shape. Pass CONV_FORWARD. */
    void (*conv_forward)(const struct conv_shape *s, const void *x, const float *w, const float *b, void *y,
                         enum conv_act act, void *ws, size_t ws_bytes);
    /* conv_forward, then a max pool of its output (a convolution, its activation and the max
     * pool after them, in one): y[N][K][Ho/pk][Wo/pk] and winners as maxpool_forward gives
     * them from conv_forward's output with window pk. full[N][K][Ho][Wo] (activations) is
     * scratch for that output, which a backend may pool as it computes it instead, never
     * writing it: its contents afterwards are unspecified. Pass CONV_FORWARD. */
    void (*conv_pool_forward)(const struct conv_shape *s, const void *x, const float *w, const float *b,
                              enum conv_act act, int pk, void *full, void *y, unsigned char *winners,
                              void *ws, size_t ws_bytes);
    /* From dy[N][K][Ho][Wo]: dx[N][C][H][W] (skipped when dx is NULL: nothing below trains; pass
     * CONV_BACKWARD_DATA), dw[K][C][k][k] (skipped when NULL: a frozen filter; pass
     * CONV_BACKWARD_FILTER), db[K] (skipped when NULL: no bias); dw and db are summed over the
     * batch. When dx_mask[N][C][H][W] is not NULL (the output of a ReLU that fed this
     * convolution, i.e. x itself), dx is also taken through that ReLU's backward:
     * dx = dx_mask <= 0 ? 0 : dx (as relu_backward). */
    void (*conv_backward)(const struct conv_shape *s, const void *x, const float *w, const void *dy, void *dx,
                          float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes);
    /* conv_backward of a convolution whose output fed a max pool (window pk, the winners from
     * its conv_pool_forward), from that pool's output gradient dyp[N][K][Ho/pk][Wo/pk]: dy is
     * what maxpool_backward(winners, dyp, ..., relu) gives (relu: the convolution's activation
     * was a ReLU), then conv_backward from it, but that db may be summed in another order (from
     * dyp: CUDA), so within float rounding of it. full[N][K][Ho][Wo] (activations) is scratch
     * for that dy, which a backend may route as it reads instead, never writing it: its
     * contents afterwards are unspecified. */
    void (*conv_pool_backward)(const struct conv_shape *s, const void *x, const float *w, const void *dyp,
                               const unsigned char *winners, int pk, int relu, void *full, void *dx,
                               float *dw, float *db, const void *dx_mask, void *ws, size_t ws_bytes);

    /* y[n] = x[n] <= 0 ? 0 : x[n] (max(x, 0) keeping NaN, as torch.relu); y may equal x. */
    void (*relu_forward)(const void *x, void *y, size_t n);
    /* dx[n] = y[n] <= 0 ? 0 : dy[n], from the forward output y (a NaN passes dy, as in
     * PyTorch); dx may equal dy. */
    void (*relu_backward)(const void *y, const void *dy, void *dx, size_t n);

    /* GELU, exact (erf) form as nn.GELU(): y = x * Phi(x), Phi(x) = (1 + erf(x / sqrt 2)) / 2;
     * y must not equal x (backward needs the input). */
    void (*gelu_forward)(const void *x, void *y, size_t n);
    /* dx[n] = dy[n] * (Phi(x) + x * phi(x)), phi the standard normal density, from the
     * forward input x; dx may equal dy. */
    void (*gelu_backward)(const void *x, const void *dy, void *dx, size_t n);

    /* Max pool with window = stride = k (nn.MaxPool2d(k), k * k <= MAXPOOL_PASSES):
     * y[N][C][H/k][W/k] (floor: rows and columns past the last whole window are ignored) = max
     * of each k x k window of x[N][C][H][W]; NaN where the window holds a NaN (PyTorch's
     * propagation, so a diverging run shows). Unless idx is NULL (no backward follows), each
     * window's winner goes to idx[N][C][H/k][W/k] (bytes, in the layout of y): the first
     * maximum in row-major order (the element PyTorch picks on ties) or the last NaN (PyTorch's
     * too), as its offset r * k + c in the window, plus MAXPOOL_PASSES where that maximum is
     * not <= 0 (a ReLU before the pool passes its gradient there). */
    void (*maxpool_forward)(const void *x, void *y, unsigned char *idx, int N, int C, int H, int W, int k);
    /* dx[N][C][H][W] = dy routed to each window's winner (idx from the forward), 0 elsewhere
     * (also in the rows and columns no window covers). With relu non-zero, x was the output of
     * a ReLU and dx also goes through its backward: 0 where the winner does not pass (x <= 0;
     * a NaN passes dy, as in PyTorch). */
    void (*maxpool_backward)(const unsigned char *idx, const void *dy, void *dx, int N, int C, int H, int W,
                             int k, int relu);

    /* Flatten, in place: x[N][C][HW] in the backend's layout becomes PyTorch's [N][C*HW]
     * (nn.Flatten after NCHW), and back; nothing to do on an NCHW backend or when HW or C is 1.
     * Both run on the compute queue. */
    void (*flatten_forward)(void *x, int N, int C, int HW);
    void (*flatten_backward)(void *x, int N, int C, int HW);

    /* Training-mode batch norm of x[N][C][HW] over N and HW: z = (x - mean) * invstd * gamma[C]
     * + beta[C], invstd = 1/sqrt(biased var + eps), and y = z, or y = GELU(z) with gelu
     * non-zero (a fused GELU layer, as gelu_forward: z itself is not kept). Saves mean[C] and
     * invstd[C] for backward and updates running_mean/var[C] as PyTorch does:
     * r = (1 - momentum) r + momentum * stat, with the unbiased variance (N*HW / (N*HW - 1)) for
     * running_var. */
    void (*batchnorm_forward_train)(const void *x, const float *gamma, const float *beta, void *y,
                                    float *save_mean, float *save_invstd, float *running_mean,
                                    float *running_var, float momentum, float eps, int N, int C, int HW,
                                    int gelu);
    /* Eval mode: normalises with running_mean/var[C] (then GELU with gelu non-zero). */
    void (*batchnorm_forward_eval)(const void *x, const float *gamma, const float *beta,
                                   const float *running_mean, const float *running_var, float eps, void *y,
                                   int N, int C, int HW, int gelu);
    /* dx[N][C][HW] (skipped when NULL: nothing below trains), dgamma[C] (skipped when NULL: a
     * scale frozen at its value, as PyTorch's weight.requires_grad = False), dbeta[C] from dy
     * and the saved statistics. With gelu non-zero, dy is the gradient w.r.t. the fused GELU's
     * output: z is recomputed from x, the statistics, gamma and beta (read only then), and the
     * batch norm's backward runs on dy * GELU'(z). */
    void (*batchnorm_backward)(const void *x, const void *dy, const float *gamma, const float *beta,
                               const float *save_mean, const float *save_invstd, void *dx, float *dgamma,
                               float *dbeta, int N, int C, int HW, int gelu);

    /* y[N][O] = scale * (x[N][I] w[O][I]^T + b[O]) (no bias when b is NULL): nn.Linear
     * followed by a constant multiplication. */
    void (*linear_forward)(const void *x, const float *w, const float *b, void *y, int N, int I, int O,
                           float scale, void *ws, size_t ws_bytes);
    /* dx[N][I] = scale * dy w (skipped when dx is NULL), dw[O][I] = scale * dy^T x,
     * db[O] = scale * sum over n of dy (skipped when db is NULL). */
    void (*linear_backward)(const void *x, const float *w, const void *dy, void *dx, float *dw, float *db,
                            int N, int I, int O, float scale, void *ws, size_t ws_bytes);

    /* Softmax cross-entropy of logits[N][classes] against labels[N] (int32 in backend memory),
     * with nn.CrossEntropyLoss's label_smoothing: the target of row n is
     * t[j] = (1 - smoothing) * (j == labels[n]) + smoothing / classes (0 <= smoothing <= 1).
     * out[0] = the loss sum over n of -sum_j t[j] log softmax[j], divided by N when reduction
     * is XENT_MEAN (XENT_SUM: not divided), out[1] = count of argmax == label (first maximum
     * wins). dlogits[N][classes] = (softmax - t), divided by N for XENT_MEAN; skipped when
     * dlogits is NULL. Smoothing 0 with XENT_MEAN computes exactly as before smoothing existed
     * (the same float operations), so the workshop network's results stay bit for bit. */
    void (*softmax_xent)(const void *logits, const int *labels, void *dlogits, float *out, int N, int classes,
                         float smoothing, enum xent_reduction reduction);

    /* torch.optim.SGD (dampening 0) over a flat buffer p[n] with momentum buffer m[n], element i
     * with the settings of its group (group[i], uint8 in backend memory: enum SGD_GROUPS,
     * SGD_SKIP; NULL: all in group 0) from h (backend memory, struct sgd_hyper):
     *   g = grad_scale * grad + weight_decay * p;  m = momentum * m + g;
     *   p -= lr * m                    (nesterov 0)
     *   p -= lr * (g + momentum * m)   (nesterov non-zero: SGD(nesterov=True), with the new m)
     * (m starts at zero, which equals PyTorch's "m = g on the first step" since dampening is 0).
     * Groups give airbench's batch-norm tensors their own lr and decay, and skip stopped
     * tensors, in one call; each element computes as a call of its own would. */
    void (*sgd_update)(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                       const struct sgd_hyper *h, int nesterov);

    /* Lookahead (airbench's LookaheadState.update) over p[n] and its average ema[n] with the
     * weight *weight (backend memory): ema = torch.lerp(ema, p, weight), then p = ema;
     * airbench's weight is 1 - decay, computed by the caller in double as Python does. The lerp
     * is PyTorch's formula in float: ema + w * (p - ema) when |w| < 0.5, else
     * p - (p - ema) * (1 - w), so weight 1 gives ema = p and weight 0 leaves ema exactly. */
    void (*lookahead_update)(float *p, float *ema, size_t n, const float *weight);

    /* dst[0..n) (backend memory) = v[0..n) (host memory, read before the call returns; 1 <= n
     * <= SCALARS_SET_MAX) on the compute queue, in order with its ops: a step's scalars (struct
     * sgd_hyper, lookahead weights) for the ops after it, a graph's among them, while the ops
     * before it still read the previous values. */
    void (*scalars_set)(float *dst, const float *v, int n);

    /* Test-time augmentation's weighted sum of logits: sum[n] (float) = weight * z[n] with add
     * 0 (sum is not read), else fmaf(weight, z[n], sum[n]): one rounding on every backend; z
     * holds activations (a forward's logits). */
    void (*logits_add)(const void *z, float *sum, size_t n, float weight, int add);

    /* Graphs (CUDA graphs): capture_begin makes the compute-queue ops called after it, up to
     * capture_end, be recorded instead of run, and returns 0; or returns -1 where the backend
     * cannot (the CPU), which records nothing and changes nothing. capture_end returns the
     * recording, ready to run (one that recorded no op runs nothing); graph_launch runs it on
     * the compute queue, with the arguments and buffers its ops were called with (their
     * contents as they are then); graph_destroy waits for the compute queue, then frees it.
     * Between capture_begin and capture_end only ops that run on the compute queue may be
     * called: no alloc, copy, download, event, timer or scalars_set call (a graph reads the
     * scalars as they are when it runs), no convolution shape not planned before, nothing that
     * needs more scratch than an earlier run of the same ops did (run them once first); a
     * backend stops with a message naming what broke the rule. */
    int (*capture_begin)(void);
    struct kernels_graph *(*capture_end)(void);
    void (*graph_launch)(struct kernels_graph *g);
    void (*graph_destroy)(struct kernels_graph *g);

    /* Waits for everything issued, then releases everything the backend created (CUDA: the
     * convolution plans, scratch, cuDNN and cuBLAS handles, queues) and ends with
     * cudaDeviceReset, so a leak checker (compute-sanitizer --leak-check full) sees the whole
     * picture; nothing on the CPU. Call it last, once everything from alloc, host_alloc and
     * event_create has been freed (a reset frees the rest without saying so), and after
     * MPI_Finalize where MPI is used: a CUDA-aware MPI releases CUDA resources of its own in
     * MPI_Finalize, which must still find the device's context. */
    void (*shutdown)(void);
};

/* 0 when every op of the table is present and act_size is 4 or 2; else -1 with e saying which
 * ("the cuda backend has no gelu_backward", or its act_size). Both backends' constructors check their table
 * with it, so a missing op is an internal error at start-up, never a NULL call. */
int kernels_check(const struct kernels *k, struct err *e);

/* Host conversions between float and activation elements of act_size bytes (struct kernels):
 * copies for float; bf16 by rounding to nearest even (NaN stays NaN, a value beyond bf16's
 * range becomes infinity), widened exactly. */
void kernels_act_from_float(size_t act_size, const float *src, void *dst, size_t n);
void kernels_act_to_float(size_t act_size, const void *src, float *dst, size_t n);

/* The CPU backend (OpenMP threads; vector code chosen at run time). */
const struct kernels *kernels_cpu(void);
/* The same backend ("cpu-bf16") with the convolutions' and linear layers' products in bf16:
 * operands rounded to bfloat16 (nearest even) as the GEMMs pack them, products summed in float,
 * float outputs; every other op, and all memory, as kernels_cpu(). Runs on any CPU, but only
 * those with AVX512_BF16 (kernels_cpu_bf16_native() == 1) have the instructions that make it
 * fast; elsewhere the same sums are computed on AVX2 FMA at about the float speed
 * (kernels_cpu_bf16_vector() == 1), or in plain C, slowly (tests). */
const struct kernels *kernels_cpu_bf16(void);
/* cuda-bf16's twin ("cpu-bf16-act", act_size 2): cpu-bf16's ops on activations stored in bf16,
 * each op widening its inputs, computing in float and rounding its outputs once. For tests
 * (the bf16-activation path of the model and test_ops' references, where no GPU is): every op
 * copies its activations, so it is slower than cpu-bf16, which the programs use. */
const struct kernels *kernels_cpu_bf16_act(void);
int kernels_cpu_bf16_native(void);
int kernels_cpu_bf16_vector(void);

/* The CPU backend's vector paths, chosen once at start-up from CPUID (every per-ISA kernel
 * follows the choice), for the programs' logs and benchmarks:
 *   kernels_cpu_isa: the float path in use, "avx512", "avx2" or "generic";
 *   kernels_cpu_bf16_isa: the bf16 products' path, "amx", "avx512bf16", "avx2" or "generic"
 *     (amx times its tiles' loops at each convolution shape's and pass's first call and keeps
 *     the fastest, all giving the same bits; "amx-im2col": AMX tiles with the convolutions by
 *     im2col, for comparisons; "amx-prefetch", "amx-resident", "amx-noprefetch": amx with one
 *     of those loops fixed (blocked for L1 with software prefetches; each block of sums held in
 *     the tiles through its whole sum; blocked without prefetches), for comparisons;
 *     "amx-cost": amx's code without its tile instructions, a timing tool for CPUs without
 *     AMX);
 *   kernels_cpu_tile_products: the TDPBF16PS "amx-emulated" has carried out and "amx-cost" left
 *     out so far (amx's own are not counted);
 *   kernels_cpu_tiles_find: the shapes and passes whose tiles' loops were timed since the bf16
 *     path was chosen, and *seconds those trials took (amx, amx-emulated; 0 elsewhere);
 *   kernels_cpu_select / kernels_cpu_select_bf16: switch to the named path (0), or -1 when
 *     this CPU lacks it (the choice in use then stays);
 *   kernels_cpu_fma_peak: the FP32 FMA peak of path isa measured now over `threads` threads
 *     for about `seconds`, GFLOP/s summed over them; -1 when the CPU lacks the path;
 *   kernels_cpu_bf16_peak: the bf16 multiply-add peak of the bf16 path in use, measured so;
 *     -1 on the plain-C paths. */
const char *kernels_cpu_isa(void);
const char *kernels_cpu_bf16_isa(void);
int kernels_cpu_select(const char *isa);
int kernels_cpu_select_bf16(const char *isa);
double kernels_cpu_fma_peak(const char *isa, int threads, double seconds);
double kernels_cpu_bf16_peak(int threads, double seconds);
unsigned long long kernels_cpu_tile_products(void);
int kernels_cpu_tiles_find(double *seconds);

/* The CUDA backend, in builds with CUDA (the Makefile defines CIFAR10_CUDA=1 there; CUDA=0
 * builds have none of these). It lives in a plugin (kernels/cuda/plugin.h) that
 * kernels_cuda_devices opens where an NVIDIA driver is installed; call it first.
 * kernels_cuda_devices: the GPUs this process can use, or 0 with the reason in e (no driver, the
 * plugin missing, unloadable or from another build, no GPU, CUDA_VISIBLE_DEVICES hides them all).
 * kernels_cuda(device): makes that GPU current, creates the streams and the cuDNN and cuBLAS
 * handles (first call only; one GPU per process: later calls must name the same device) and
 * returns the table; after its shutdown(), a call starts afresh on any device.
 * kernels_cuda_describe: "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB, PCI 0000:1b:00.0; driver for
 * CUDA 13.0, cuDNN 9.19.0; convolutions ...)": the loaded libraries, not the headers. */
int kernels_cuda_devices(struct err *e);
const struct kernels *kernels_cuda(int device);
/* After kernels_cuda(device): 1 when that GPU has bf16 tensor cores (compute capability 8.0+).
 * kernels_cuda_bf16(device): the same backend ("cuda-bf16") with activations in bf16
 * (act_size 2; PyTorch's autocast): convolutions in cuDNN's bf16 configuration and linear
 * layers in cuBLAS's bf16 GEMM, both with float accumulation, every other op computing in
 * float between bf16 loads and stores; only where native. CIFAR10_CUDA_BF16 (read when the
 * table is first made after kernels_cuda): "activations" or unset, that; "copies", float
 * activations (act_size 4) with bf16 copies of the convolutions' and linear layers' operands,
 * for comparisons. kernels_cpu_bf16_act() is its CPU twin. */
int kernels_cuda_bf16_native(void);
const struct kernels *kernels_cuda_bf16(int device);
void kernels_cuda_describe(char *buf, size_t size);
/* After kernels_cuda_devices: makes that GPU this process's current one (cudaSetDevice) and
 * nothing more, so a CUDA-aware MPI started next sets itself up there (app/device.h,
 * device_before_mpi); kernels_cuda(device) then builds the backend on it. 0, or -1 where CUDA
 * refused (the error cleared; nothing exits). */
int kernels_cuda_make_current(int device);

#endif
