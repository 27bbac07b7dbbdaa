/* Division of 32-bit indices by a divisor fixed at launch, without a divide instruction: the
 * element-wise kernels find an element's channel ((i / HW) % C) and a pool's window from flat
 * indices, and the GPU has no integer divider (a 64-bit / or % is a software routine of about a
 * hundred instructions, a 32-bit one about twenty); this is a multiply-high, an add and a shift.
 *
 * Granlund and Montgomery's method, as PyTorch's IntDivider: for 1 <= d < 2^31, with s the
 * least shift such that 2^s >= d and m = floor(2^32 (2^s - d) / d) + 1 (which fits in 32 bits),
 *   n / d = (umulhi(n, m) + n) >> s   for every 0 <= n < 2^31
 * (the sum then stays below 2^32). tests/test_ops.c checks it against '/' on the CPU, where
 * this header also compiles (plain C). */
#ifndef KERNELS_CUDA_FASTDIV_H
#define KERNELS_CUDA_FASTDIV_H

#include <stdint.h>

#ifdef __CUDACC__
#define FASTDIV_FN __host__ __device__ static inline
#else
#define FASTDIV_FN static inline
#endif

struct fastdiv {
    uint32_t d, m, s;
};

/* The divider of d, 1 <= d < 2^31 (the caller checks). */
FASTDIV_FN struct fastdiv fastdiv_make(uint32_t d) {
    uint32_t s = 0;
    while (s < 31 && ((uint32_t)1 << s) < d) s++;
    struct fastdiv f;
    f.d = d;
    f.s = s;
    f.m = (uint32_t)((((uint64_t)1 << 32) * (((uint64_t)1 << s) - d)) / d + 1);
    return f;
}

/* n / f.d for 0 <= n < 2^31. */
FASTDIV_FN uint32_t fastdiv_div(uint32_t n, struct fastdiv f) {
#ifdef __CUDA_ARCH__
    uint32_t hi = __umulhi(n, f.m);
#else
    uint32_t hi = (uint32_t)(((uint64_t)n * f.m) >> 32);
#endif
    return (hi + n) >> f.s;
}

/* n % f.d likewise. */
FASTDIV_FN uint32_t fastdiv_mod(uint32_t n, struct fastdiv f) { return n - fastdiv_div(n, f) * f.d; }

#endif
