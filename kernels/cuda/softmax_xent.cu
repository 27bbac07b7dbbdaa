/* Softmax cross-entropy: one block; each thread takes whole rows (10 classes), in double as
 * cpu/softmax_xent.c (the same target, smoothing term and divisor, see there), and the loss and
 * correct count are reduced in a fixed order. */
#include "cuda.h"

__global__ static void softmax_xent_kernel(const float *logits, const int *labels, float *dlogits, float *out,
                                           int N, int classes, float smoothing, double on, double off,
                                           double div) {
    double loss = 0.0, correct = 0.0;
    for (int n = threadIdx.x; n < N; n += blockDim.x) {
        const float *z = logits + (size_t)n * classes;
        int arg = 0;
        for (int j = 1; j < classes; j++)
            if (z[j] > z[arg]) arg = j;
        double m = z[arg], sum = 0.0;
        for (int j = 0; j < classes; j++) sum += exp((double)z[j] - m);
        double lse = m + log(sum);
        int label = labels[n];
        double row = lse - z[label];
        if (smoothing != 0.0f) {
            double zsum = 0.0;
            for (int j = 0; j < classes; j++) zsum += z[j];
            row = (1.0 - smoothing) * row + smoothing * (lse - zsum / classes);
        }
        loss += row;
        correct += arg == label;
        if (dlogits)
            for (int j = 0; j < classes; j++)
                dlogits[(size_t)n * classes + j] =
                    (float)((exp((double)z[j] - lse) - (j == label ? on : off)) / div);
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

void cuda_softmax_xent(const float *logits, const int *labels, float *dlogits, float *out, int N, int classes,
                       float smoothing, enum xent_reduction reduction) {
    double off = (double)smoothing / classes, on = 1.0 - smoothing + off;
    double div = reduction == XENT_MEAN ? N : 1.0;
    softmax_xent_kernel<<<1, CUDA_THREADS, 0, cuda_stream()>>>(logits, labels, dlogits, out, N, classes,
                                                               smoothing, on, off, div);
    LAUNCH_CHECK();
}
