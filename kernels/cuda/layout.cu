/* The layout conversions of the NHWC backend (cuda.h): flatten's reordering of an activation
 * and the filters' [K][C][kk] <-> [K][kk][C] for cuDNN's NHWC convolutions. All of them are
 * small (a flatten input of a few thousand floats per image, a filter of at most
 * 256 x 256 x 25), so they are plain one-thread-per-element gathers, their indices divided by
 * fastdiv.h's dividers (a 64-bit divide is a software routine of about a hundred instructions). */
#include "cuda.h"

/* dst[n][b][a] = src[n][a][b] for n < total / (A * B); elements of type T, moved as they are;
 * 32-bit indices (fewer than 2^31 elements), divided by fastdiv.h's dividers ab (A * B) and a. */
template <typename T>
__global__ static void transpose_kernel(const T *src, T *dst, uint32_t total, struct fastdiv ab,
                                        struct fastdiv a_div, uint32_t B) {
    uint32_t A = a_div.d;
    GRID_STRIDE32(i, total) {
        uint32_t n = fastdiv_div(i, ab), r = i - n * ab.d, b = fastdiv_div(r, a_div), a = r - b * A;
        dst[i] = src[n * ab.d + a * B + b];
    }
}

/* x[N][A][B] becomes x[N][B][A], through the scratch buffer. */
template <typename T> static void transpose_in_place(T *x, int N, int A, int B) {
    size_t total = (size_t)N * A * B;
    CHECK(total < (size_t)1 << 31);
    T *copy = (T *)cuda_scratch(total * sizeof(T));
    CUDA_CHECK(cudaMemcpyAsync(copy, x, total * sizeof(T), cudaMemcpyDeviceToDevice, cuda_stream()));
    cuda_launch(transpose_kernel<T>, total, (const T *)copy, x, (uint32_t)total,
                fastdiv_make((uint32_t)A * (uint32_t)B), fastdiv_make((uint32_t)A), (uint32_t)B);
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

/* dst[k][s][c] = w[k][c][s] (krsc) or dst = w, converted to T; i indexes dst. 32-bit indices
 * (a filter has fewer than 2^31 elements), divided by fastdiv.h's dividers of kk * C and C. */
template <typename T>
__global__ static void filter_pack_kernel(const float *w, T *dst, uint32_t total, struct fastdiv kkc,
                                          struct fastdiv c_div, uint32_t kk, int krsc) {
    uint32_t C = c_div.d;
    GRID_STRIDE32(i, total) {
        uint32_t from = i;
        if (krsc) {
            uint32_t k = fastdiv_div(i, kkc), r = i - k * kkc.d, s = fastdiv_div(r, c_div), c = r - s * C;
            from = (k * C + c) * kk + s;
        }
        act_store(dst, i, w[from]);
    }
}

/* dw[k][c][s] = src[k][s][c] (krsc) or dw = src, widened to float; j indexes dw; dividers of
 * C * kk and kk. */
template <typename T>
__global__ static void filter_unpack_kernel(const T *src, float *dw, uint32_t total, struct fastdiv ckk,
                                            struct fastdiv kk_div, uint32_t C, int krsc) {
    uint32_t kk = kk_div.d;
    GRID_STRIDE32(j, total) {
        uint32_t from = j;
        if (krsc) {
            uint32_t k = fastdiv_div(j, ckk), r = j - k * ckk.d, c = fastdiv_div(r, kk_div), s = r - c * kk;
            from = (k * kk + s) * C + c;
        }
        dw[j] = act_load(src, from);
    }
}

template <typename T> void cuda_filter_pack(const float *w, T *dst, int K, int C, int kk, int krsc) {
    size_t total = (size_t)K * C * kk;
    CHECK(total < (size_t)1 << 31);
    cuda_launch(filter_pack_kernel<T>, total, w, dst, (uint32_t)total, fastdiv_make((uint32_t)(kk * C)),
                fastdiv_make((uint32_t)C), (uint32_t)kk, krsc);
}

template <typename T> void cuda_filter_unpack(const T *src, float *dw, int K, int C, int kk, int krsc) {
    size_t total = (size_t)K * C * kk;
    CHECK(total < (size_t)1 << 31);
    cuda_launch(filter_unpack_kernel<T>, total, src, dw, (uint32_t)total, fastdiv_make((uint32_t)(C * kk)),
                fastdiv_make((uint32_t)kk), (uint32_t)C, krsc);
}

template void cuda_filter_pack<float>(const float *, float *, int, int, int, int);
template void cuda_filter_pack<bf16_t>(const float *, bf16_t *, int, int, int, int);
template void cuda_filter_unpack<float>(const float *, float *, int, int, int, int);
template void cuda_filter_unpack<bf16_t>(const bf16_t *, float *, int, int, int, int);
