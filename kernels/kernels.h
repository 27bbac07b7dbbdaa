/* The compute interface the model is written against. A backend (kernels/cpu/, kernels/cuda/)
 * fills one struct kernels; the model never calls a backend directly, so the same training step
 * runs on either. Every pointer argument below points into memory from that backend's alloc();
 * host code moves data with upload()/download() or the asynchronous copies.
 *
 * Ordering: ops run in call order on one compute queue and may return before they finish (the
 * CUDA backend; the CPU backend finishes each op before returning). download() waits for
 * everything before it. The asynchronous copies run on a separate transfer queue and are tied
 * to the compute queue with events, so input uploads and gradient downloads overlap compute.
 *
 * Layouts are PyTorch's: activations NCHW, conv weights [K][C][3][3], linear weights [O][I].
 * Backward functions overwrite (never accumulate into) their gradient outputs. */
#ifndef KERNELS_KERNELS_H
#define KERNELS_KERNELS_H

#include "../common/err.h"

#include <stddef.h>

/* An event on a backend's queues (opaque; the CPU backend's are always complete). */
struct kernels_event;

struct kernels {
    const char *name; /* "cpu", "cuda" */

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
    /* Transfer queue, asynchronous to the host: copies host_src (from host_alloc, unchanged
     * until done completes) to dst, then marks done. Compute does not wait for it unless told to
     * with compute_wait. */
    void (*upload_async)(void *dst, const void *host_src, size_t bytes, struct kernels_event *done);
    /* Once the compute queue has finished everything issued before this call: copies src to
     * host_dst (from host_alloc) on the transfer queue, then marks done. With bytes 0, done only
     * marks that point of the compute queue. */
    void (*download_async)(void *host_dst, const void *src, size_t bytes, struct kernels_event *done);
    /* Compute work issued after this call starts only once e is complete. */
    void (*compute_wait)(struct kernels_event *e);
    /* 1 when everything before e has finished, else 0; never blocks. */
    int (*event_done)(struct kernels_event *e);
    /* Blocks until e is complete. */
    void (*event_wait)(struct kernels_event *e);

    /* The input pipeline on the device: x[N][3][32][32] = crop/flip of img[N][3][32][32]
     * (uint8) by geom[N][3] = {dx, dy, flip} (int32; offsets 0..8 into the image zero-padded by
     * 4, 4,4 = identity; flip mirrors left-right after the crop), then x = pixel * scale[c] +
     * shift[c] (scale/shift: host arrays of 3, the normalisation of data/augment.h). */
    void (*input_prepare)(const unsigned char *img, const int *geom, float *x, int N,
                          const float *scale, const float *shift);

    /* Scratch needed by conv3x3_* for these sizes (bytes), and by linear_* (bytes). */
    size_t (*conv3x3_workspace)(int N, int C, int K, int H, int W);
    size_t (*linear_workspace)(int N, int I, int O);

    /* y[N][K][H][W] = conv(x[N][C][H][W], w[K][C][3][3], zero padding 1, stride 1) + b[K],
     * then max(y, 0) when relu is non-zero (a fused ReLU layer). */
    void (*conv3x3_forward)(const float *x, const float *w, const float *b, float *y, int N, int C,
                            int K, int H, int W, int relu, void *ws);
    /* From dy[N][K][H][W]: dx[N][C][H][W] (skipped when dx is NULL), dw[K][C][3][3], db[K]
     * (both summed over the batch). When dx_mask[N][C][H][W] is not NULL (the output of a ReLU
     * that fed this convolution, i.e. x itself), dx is also taken through that ReLU's backward:
     * dx = dx_mask > 0 ? dx : 0. */
    void (*conv3x3_backward)(const float *x, const float *w, const float *dy, float *dx, float *dw,
                             float *db, int N, int C, int K, int H, int W, const float *dx_mask,
                             void *ws);

    /* y[n] = max(x[n], 0); y may equal x. */
    void (*relu_forward)(const float *x, float *y, size_t n);
    /* dx[n] = y[n] > 0 ? dy[n] : 0, from the forward output y; dx may equal dy. */
    void (*relu_backward)(const float *y, const float *dy, float *dx, size_t n);

    /* y[N][C][H/2][W/2] = max of each 2x2 window of x[N][C][H][W] (H, W even). */
    void (*maxpool2_forward)(const float *x, float *y, int N, int C, int H, int W);
    /* dx[N][C][H][W] = dy routed to the first maximum of each window in row-major order (the
     * element PyTorch picks on ties), 0 elsewhere. With relu non-zero, x is the output of a ReLU
     * and dx also goes through its backward (0 where x <= 0). */
    void (*maxpool2_backward)(const float *x, const float *dy, float *dx, int N, int C, int H,
                              int W, int relu);

    /* Training-mode batch norm of x[N][C][HW] over N and HW: y = (x - mean) * invstd * gamma[C]
     * + beta[C], invstd = 1/sqrt(biased var + eps). Saves mean[C] and invstd[C] for backward and
     * updates running_mean/var[C] as PyTorch does: r = (1 - momentum) r + momentum * stat, with
     * the unbiased variance (N*HW / (N*HW - 1)) for running_var. */
    void (*batchnorm_forward_train)(const float *x, const float *gamma, const float *beta,
                                    float *y, float *save_mean, float *save_invstd,
                                    float *running_mean, float *running_var, float momentum,
                                    float eps, int N, int C, int HW);
    /* Eval mode: normalises with running_mean/var[C]. */
    void (*batchnorm_forward_eval)(const float *x, const float *gamma, const float *beta,
                                   const float *running_mean, const float *running_var, float eps,
                                   float *y, int N, int C, int HW);
    /* dx[N][C][HW], dgamma[C], dbeta[C] from dy and the saved statistics. */
    void (*batchnorm_backward)(const float *x, const float *dy, const float *gamma,
                               const float *save_mean, const float *save_invstd, float *dx,
                               float *dgamma, float *dbeta, int N, int C, int HW);

    /* y[N][O] = x[N][I] w[O][I]^T + b[O] */
    void (*linear_forward)(const float *x, const float *w, const float *b, float *y, int N, int I,
                           int O, void *ws);
    /* dx[N][I] = dy w (skipped when dx is NULL), dw[O][I] = dy^T x, db[O] = sum over n of dy. */
    void (*linear_backward)(const float *x, const float *w, const float *dy, float *dx, float *dw,
                            float *db, int N, int I, int O, void *ws);

    /* Mean softmax cross-entropy of logits[N][classes] against labels[N] (int32 in backend
     * memory). out[0] = mean loss, out[1] = count of argmax == label (first maximum wins).
     * dlogits[N][classes] = (softmax - onehot) / N; skipped when dlogits is NULL. */
    void (*softmax_xent)(const float *logits, const int *labels, float *dlogits, float *out, int N,
                         int classes);

    /* torch.optim.SGD (dampening 0, no Nesterov) over a flat buffer, with the gradient first
     * multiplied by grad_scale (1/world size after a summing allreduce):
     *   g = grad_scale * grad + weight_decay * p;  m = momentum * m + g;  p -= lr * m
     * (m starts at zero, which equals PyTorch's "m = g on the first step" since dampening is 0). */
    void (*sgd_update)(float *p, const float *grad, float *m, size_t n, float lr, float momentum,
                       float weight_decay, float grad_scale);
};

/* The CPU backend (OpenMP threads; vector code chosen at run time). */
const struct kernels *kernels_cpu(void);

/* The CUDA backend, in builds with CUDA (the Makefile defines CIFAR10_CUDA=1 there; CUDA=0
 * builds have none of these three). kernels_cuda_devices: the GPUs this process can use, or 0
 * with the reason in e (no driver, no GPU, CUDA_VISIBLE_DEVICES hides them all).
 * kernels_cuda(device): makes that GPU current, creates the streams and the cuDNN and cuBLAS
 * handles (first call only; one GPU per process) and returns the table.
 * kernels_cuda_describe: "NVIDIA H100 80GB HBM3 (sm_90, 79.1 GiB, PCI 0000:1b:00.0)". */
int kernels_cuda_devices(struct err *e);
const struct kernels *kernels_cuda(int device);
void kernels_cuda_describe(char *buf, size_t size);

#endif
