/* airbench's whitening statistics on the GPU (struct kernels patch_covariance), the twin of
 * kernels/cpu/covariance.c with its bits: a block per chunk of PATCH_CHUNK images, a thread per
 * entry (i, j) of the upper triangle, which adds its products over the chunk's patches in the
 * CPU's order (image, row, column) with __dmul_rn and __dadd_rn (never an FMA). Each image is
 * normalised once into shared memory with __fmul_rn and __fadd_rn (input_prepare's float
 * arithmetic, uncontracted as the CPU computes it). */
#include "cuda.h"

#define SIDE    32
#define PLANE   (SIDE * SIDE)
#define PAIRS   (PATCH_DIM * (PATCH_DIM + 1) / 2)
#define THREADS 128

struct patch_norm {
    float scale[3], shift[3];
};

/* Entry t (0 <= t < PAIRS) of the upper triangle in row-major order: (*i, *j), i <= j. */
__device__ static void pair_of(int t, int *i, int *j) {
    int r = 0;
    while (t >= PATCH_DIM - r) t -= PATCH_DIM - r, r++;
    *i = r, *j = r + t;
}

/* Where patch element e (c * 4 + dy * 2 + dx) of the patch at (0, 0) lies in an image. */
__device__ static int patch_offset(int e) { return (e / 4 * SIDE + e % 4 / 2) * SIDE + e % 2; }

__global__ static void patch_covariance_kernel(const unsigned char *img, int n, struct patch_norm nm,
                                               double *part) {
    __shared__ float x[3 * PLANE];
    int k = blockIdx.x, t = threadIdx.x, i = 0, j = 0;
    if (t < PAIRS) pair_of(t, &i, &j);
    const float *xi = x + patch_offset(i), *xj = x + patch_offset(j);
    double sum = 0.0;
    int end = min(n, (k + 1) * PATCH_CHUNK);
    for (int im = k * PATCH_CHUNK; im < end; im++) {
        __syncthreads(); /* the last image's products are done */
        const unsigned char *px = img + (size_t)im * 3 * PLANE;
        for (int e = t; e < 3 * PLANE; e += THREADS)
            x[e] = __fadd_rn(__fmul_rn((float)px[e], nm.scale[e / PLANE]), nm.shift[e / PLANE]);
        __syncthreads();
        if (t < PAIRS)
            for (int y = 0; y < SIDE - 1; y++)
#pragma unroll 8
                for (int c = 0; c < SIDE - 1; c++)
                    sum = __dadd_rn(sum, __dmul_rn((double)xi[y * SIDE + c], (double)xj[y * SIDE + c]));
    }
    double *cov = part + (size_t)k * PATCH_DIM * PATCH_DIM;
    if (t < PAIRS) cov[i * PATCH_DIM + j] = sum;
    for (int e = t; e < PATCH_DIM * PATCH_DIM; e += THREADS)
        if (e % PATCH_DIM < e / PATCH_DIM) cov[e] = 0.0; /* below the diagonal */
}

void cuda_patch_covariance(const unsigned char *img, int n, const float *scale, const float *shift,
                           double *part) {
    CHECK(n >= 1);
    struct patch_norm nm;
    for (int c = 0; c < 3; c++) nm.scale[c] = scale[c], nm.shift[c] = shift[c];
    int chunks = (n + PATCH_CHUNK - 1) / PATCH_CHUNK;
    patch_covariance_kernel<<<chunks, THREADS, 0, cuda_stream()>>>(img, n, nm, part);
    LAUNCH_CHECK();
}
