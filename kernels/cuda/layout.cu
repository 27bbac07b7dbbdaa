/* The layout conversions of the NHWC backend (cuda.h): flatten's reordering of an activation
 * and the filters' [K][C][kk] <-> [K][kk][C] for cuDNN's NHWC convolutions. All of them are
 * small (a flatten input of a few thousand floats per image, a filter of at most
 * 256 x 256 x 25), so they are plain one-thread-per-element gathers. */
#include "cuda.h"

/* dst[n][b][a] = src[n][a][b] for n < total / (A * B); elements of type T, moved as they are. */
template <typename T>
__global__ static void transpose_kernel(const T *src, T *dst, size_t total, size_t A, size_t B) {
    GRID_STRIDE(i, total) {
        size_t n = i / (A * B), r = i - n * A * B, b = r / A, a = r - b * A;
        dst[i] = src[n * A * B + a * B + b];
    }
}

/* x[N][A][B] becomes x[N][B][A], through the scratch buffer. */
template <typename T> static void transpose_in_place(T *x, int N, int A, int B) {
    size_t total = (size_t)N * A * B;
    T *copy = (T *)cuda_scratch(total * sizeof(T));
    CUDA_CHECK(cudaMemcpyAsync(copy, x, total * sizeof(T), cudaMemcpyDeviceToDevice, cuda_stream()));
    cuda_launch(transpose_kernel<T>, total, (const T *)copy, x, total, (size_t)A, (size_t)B);
}

template <typename T> static void flatten_forward(void *x, int N, int C, int HW) {
    if (cuda_nhwc() && HW > 1 && C > 1) transpose_in_place((T *)x, N, HW, C); /* [HW][C] -> [C][HW] */
}

template <typename T> static void flatten_backward(void *x, int N, int C, int HW) {
    if (cuda_nhwc() && HW > 1 && C > 1) transpose_in_place((T *)x, N, C, HW);
}

template <typename T> static void fill(struct kernels *k) {
    k->flatten_forward = flatten_forward<T>;
    k->flatten_backward = flatten_backward<T>;
}

void cuda_fill_layout(struct kernels *k, enum cuda_precision p) { CUDA_FILL_BY_TYPE(k, p, fill); }

/* dst[k][s][c] = w[k][c][s] (krsc) or dst = w, converted to T; i indexes dst. */
template <typename T>
__global__ static void filter_pack_kernel(const float *w, T *dst, size_t total, int C, int kk, int krsc) {
    GRID_STRIDE(i, total) { act_store(dst, i, w[krsc ? krsc_source<size_t>(i, C, kk) : i]); }
}

/* dw[k][c][s] = src[k][s][c] (krsc) or dw = src, widened to float; j indexes dw. */
template <typename T>
__global__ static void filter_unpack_kernel(const T *src, float *dw, size_t total, int C, int kk, int krsc) {
    GRID_STRIDE(j, total) {
        size_t from = j;
        if (krsc) {
            size_t k = j / ((size_t)C * kk), r = j - k * C * kk, c = r / kk, s = r - c * kk;
            from = (k * kk + s) * C + c;
        }
        dw[j] = act_load(src, from);
    }
}

template <typename T> void cuda_filter_pack(const float *w, T *dst, int K, int C, int kk, int krsc) {
    size_t total = (size_t)K * C * kk;
    cuda_launch(filter_pack_kernel<T>, total, w, dst, total, C, kk, krsc);
}

template <typename T> void cuda_filter_unpack(const T *src, float *dw, int K, int C, int kk, int krsc) {
    size_t total = (size_t)K * C * kk;
    cuda_launch(filter_unpack_kernel<T>, total, src, dw, total, C, kk, krsc);
}

template void cuda_filter_pack<float>(const float *, float *, int, int, int, int);
template void cuda_filter_pack<bf16_t>(const float *, bf16_t *, int, int, int, int);
template void cuda_filter_unpack<float>(const float *, float *, int, int, int, int);
template void cuda_filter_unpack<bf16_t>(const bf16_t *, float *, int, int, int, int);
