/* Softmax cross-entropy: one block; each thread takes whole rows (10 classes), in double as
 * cpu/softmax_xent.c (the same target, smoothing term and divisor, see there), and the loss and
 * correct count are reduced in a fixed order. And the TTA sum of logits, fmaf as on the CPU. */
#include "cuda.h"

/* Logits and their gradient of type T (cuda.h). */
template <typename T>
__global__ static void softmax_xent_kernel(const T *logits, const int *labels, T *dlogits, float *out, int N,
                                           int classes, float smoothing, double on, double off, double div) {
    double loss = 0.0, correct = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        size_t row0 = (size_t)n * classes;
        int arg = 0;
        for (int j = 1; j < classes; j++)
            if (act_load(logits, row0 + j) > act_load(logits, row0 + arg)) arg = j;
        double m = act_load(logits, row0 + arg), sum = 0.0;
        for (int j = 0; j < classes; j++) sum += exp((double)act_load(logits, row0 + j) - m);
        double lse = m + log(sum);
        int label = labels[n];
        double row = lse - act_load(logits, row0 + label);
        if (smoothing != 0.0f) {
            double zsum = 0.0;
            for (int j = 0; j < classes; j++) zsum += act_load(logits, row0 + j);
            row = (1.0 - smoothing) * row + smoothing * (lse - zsum / classes);
        }
        loss += row;
        correct += arg == label;
        if (dlogits)
            for (int j = 0; j < classes; j++)
                act_store(
                    dlogits, row0 + j,
                    (float)((exp((double)act_load(logits, row0 + j) - lse) - (j == label ? on : off)) / div));
    }
    __shared__ double r1[CUDA_THREADS], r2[CUDA_THREADS];
    r1[threadIdx.x] = loss, r2[threadIdx.x] = correct;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if ((int)threadIdx.x < half)
            r1[threadIdx.x] += r1[threadIdx.x + half], r2[threadIdx.x] += r2[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        out[0] = (float)(r1[0] / div);
        out[1] = (float)r2[0];
    }
}

template <typename T>
static void softmax_xent(const void *logits, const int *labels, void *dlogits, float *out, int N, int classes,
                         float smoothing, enum xent_reduction reduction) {
    double off = (double)smoothing / classes, on = 1.0 - smoothing + off;
    double div = reduction == XENT_MEAN ? N : 1.0;
    softmax_xent_kernel<T><<<1, CUDA_THREADS, 0, cuda_stream()>>>((const T *)logits, labels, (T *)dlogits,
                                                                  out, N, classes, smoothing, on, off, div);
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
