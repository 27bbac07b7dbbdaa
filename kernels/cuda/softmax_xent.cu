/* Softmax cross-entropy: a thread per row (10 classes), in double as cpu/softmax_xent.c (the
 * same target, smoothing term and divisor, see there), in blocks of XENT_ROWS rows so that the
 * rows' double arithmetic spreads over many SMs (GPUs such as the A10G and L4 run double at
 * 1/64 of float); each block's loss and correct count are summed in a fixed order, then the
 * blocks' (xent_total_kernel). And the TTA sum of logits, fmaf as on the CPU. */
#include "cuda.h"

#define XENT_ROWS 64 /* rows (threads) a block: a power of two, at most CUDA_THREADS */

/* Logits and their gradient of type T (cuda.h); part[0][S] and part[1][S] the blocks' sums. */
template <typename T>
__global__ static void __launch_bounds__(XENT_ROWS)
    softmax_xent_kernel(const T *logits, const int *labels, T *dlogits, double *part, int N, int classes,
                        float smoothing, double on, double off, double div) {
    int n = blockIdx.x * XENT_ROWS + threadIdx.x;
    double loss = 0.0, correct = 0.0;
    if (n < N) {
        size_t row0 = (size_t)n * classes;
        int arg = 0;
        for (int j = 1; j < classes; j++)
            if (act_load(logits, row0 + j) > act_load(logits, row0 + arg)) arg = j;
        double m = act_load(logits, row0 + arg), sum = 0.0;
        for (int j = 0; j < classes; j++) sum += exp((double)act_load(logits, row0 + j) - m);
        double lse = m + log(sum);
        int label = labels[n];
        loss = lse - act_load(logits, row0 + label);
        if (smoothing != 0.0f) {
            double zsum = 0.0;
            for (int j = 0; j < classes; j++) zsum += act_load(logits, row0 + j);
            loss = (1.0 - smoothing) * loss + smoothing * (lse - zsum / classes);
        }
        correct = arg == label;
        if (dlogits)
            for (int j = 0; j < classes; j++)
                act_store(
                    dlogits, row0 + j,
                    (float)((exp((double)act_load(logits, row0 + j) - lse) - (j == label ? on : off)) / div));
    }
    block_sum2(&loss, &correct);
    if (threadIdx.x == 0) part[blockIdx.x] = loss, part[gridDim.x + blockIdx.x] = correct;
}

/* out[0] = the loss over all S blocks divided by div, out[1] = the correct count (one block). */
__global__ static void xent_total_kernel(const double *part, int S, double div, float *out) {
    double loss, correct;
    channel_totals(part, S, 1, 0, 1, &loss, &correct);
    if (threadIdx.x == 0) out[0] = (float)(loss / div), out[1] = (float)correct;
}

template <typename T>
static void softmax_xent(const void *logits, const int *labels, void *dlogits, float *out, int N, int classes,
                         float smoothing, enum xent_reduction reduction) {
    double off = (double)smoothing / classes, on = 1.0 - smoothing + off;
    double div = reduction == XENT_MEAN ? N : 1.0;
    int S = (N + XENT_ROWS - 1) / XENT_ROWS; /* N 0: no block; the total is the CPU's 0 / 0, or 0 */
    double *part = (double *)cuda_scratch(2 * (size_t)(S > 0 ? S : 1) * sizeof(double));
    if (S > 0) {
        softmax_xent_kernel<T><<<S, XENT_ROWS, 0, cuda_stream()>>>((const T *)logits, labels, (T *)dlogits,
                                                                   part, N, classes, smoothing, on, off, div);
        LAUNCH_CHECK();
    }
    xent_total_kernel<<<1, TOTAL_THREADS, 0, cuda_stream()>>>(part, S, div, out);
    LAUNCH_CHECK();
}

template <typename T>
__global__ static void logits_add_kernel(const T *z, float *sum, uint32_t n, float w, int add) {
    GRID_STRIDE32(i, n) sum[i] = add ? fmaf(w, act_load(z, i), sum[i]) : w * act_load(z, i);
}

template <typename T> static void logits_add(const void *z, float *sum, size_t n, float w, int add) {
    CHECK(n < (1u << 31));
    cuda_launch(logits_add_kernel<T>, n, (const T *)z, sum, (uint32_t)n, w, add);
}

template <typename T> static void fill(struct kernels *k) {
    k->softmax_xent = softmax_xent<T>;
    k->logits_add = logits_add<T>;
}

void cuda_fill_softmax_xent(struct kernels *k, enum cuda_precision p) { CUDA_FILL_BY_TYPE(k, p, fill); }
