/* The vector types of the files compiled per ISA (isa.h): VEC lanes, written with GCC's vector
 * extension so small loops become vector code whatever the compiler makes of them; the lane
 * helpers they share. Include after isa.h. */
#ifndef KERNELS_CPU_VEC_H
#define KERNELS_CPU_VEC_H

#include "isa.h"

#include <stddef.h>
#if VEC >= 8
#include <immintrin.h>
#endif

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));
/* The same vector at any float-aligned address. */
typedef float vfu __attribute__((vector_size(VEC * sizeof(float)), aligned(sizeof(float))));
/* Lane masks of comparisons (-1 true, 0 false). */
typedef int vi __attribute__((vector_size(VEC * sizeof(int))));

static inline vf splat(float v) { return (vf){0} + v; }

/* m ? a : b per lane, m all ones or all zeros (a comparison's result). */
static inline vf vselect(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }

/* Lane masks and partial vectors: masked loads and stores where the path has them. */
#if VEC == 16
typedef __mmask16 lanes;
#elif VEC == 8
typedef __m256i lanes;
#endif

#if VEC >= 8
/* The mask of lanes 0..n-1 (none when n <= 0, all when n >= VEC). */
static inline __attribute__((always_inline)) lanes first_lanes(int n) {
#if VEC == 16
    return n >= VEC ? (__mmask16)0xffff : n <= 0 ? (__mmask16)0 : (__mmask16)((1u << n) - 1);
#else
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
#endif
}
#endif

/* Lanes 0..n-1 (1 <= n <= VEC) from p[l * stride], zero past n. */
static inline __attribute__((always_inline)) vf load_n(const float *p, size_t stride, int n) {
    if (stride == 1 && n == VEC) return *(const vfu *)p;
#if VEC == 16
    if (stride == 1) return (vf)_mm512_maskz_loadu_ps(first_lanes(n), p);
#elif VEC == 8
    if (stride == 1) return (vf)_mm256_maskload_ps(p, first_lanes(n));
#endif
    vf v = (vf){0};
    for (int l = 0; l < n; l++) v[l] = p[l * stride];
    return v;
}

/* p[l * stride] = lane l, for l < n (1 <= n <= VEC). */
static inline __attribute__((always_inline)) void store_n(float *p, size_t stride, vf v, int n) {
    if (stride == 1 && n == VEC) {
        *(vfu *)p = v;
        return;
    }
#if VEC == 16
    if (stride == 1) return _mm512_mask_storeu_ps(p, first_lanes(n), (__m512)v);
#elif VEC == 8
    if (stride == 1) return _mm256_maskstore_ps(p, first_lanes(n), (__m256)v);
#endif
    for (int l = 0; l < n; l++) p[l * stride] = v[l];
}

#endif
