/* The in-register transpose of VEC x VEC floats (or 32-bit words) on the vector paths of the
 * files compiled per ISA (isa.h; VEC 8 or 16): the vector type vreg, its load and zero, and
 * transpose_vec. Include after isa.h. */
#ifndef KERNELS_CPU_TRANSPOSE_H
#define KERNELS_CPU_TRANSPOSE_H

#include "isa.h"

#if VEC >= 8
#include <immintrin.h>
/* The vector type and the few intrinsics the transpose takes, per path (4x4 transposes within
 * each 128-bit lane are the same on both; only the lanes' exchange differs). */
#if VEC == 16
typedef __m512 vreg;
#define VLOAD(p)          _mm512_loadu_ps(p)
#define VZERO()           _mm512_setzero_ps()
#define PD(x)             _mm512_castps_pd(x)
#define PS(x)             _mm512_castpd_ps(x)
#define UNPACKLO_PS       _mm512_unpacklo_ps
#define UNPACKHI_PS       _mm512_unpackhi_ps
#define UNPACKLO_PD(a, b) PS(_mm512_unpacklo_pd(PD(a), PD(b)))
#define UNPACKHI_PD(a, b) PS(_mm512_unpackhi_pd(PD(a), PD(b)))
#else
typedef __m256 vreg;
#define VLOAD(p)          _mm256_loadu_ps(p)
#define VZERO()           _mm256_setzero_ps()
#define PD(x)             _mm256_castps_pd(x)
#define PS(x)             _mm256_castpd_ps(x)
#define UNPACKLO_PS       _mm256_unpacklo_ps
#define UNPACKHI_PS       _mm256_unpackhi_ps
#define UNPACKLO_PD(a, b) PS(_mm256_unpacklo_pd(PD(a), PD(b)))
#define UNPACKHI_PD(a, b) PS(_mm256_unpackhi_pd(PD(a), PD(b)))
#endif

/* r[VEC] (rows) becomes its transpose: 4x4 transposes within each 128-bit lane (unpacks), then
 * the lanes exchanged (AVX-512: two rounds of lane shuffles; AVX2: one). */
static inline void transpose_vec(vreg r[VEC]) {
    vreg t[VEC];
    for (int i = 0; i < VEC; i += 2)
        t[i] = UNPACKLO_PS(r[i], r[i + 1]), t[i + 1] = UNPACKHI_PS(r[i], r[i + 1]);
    for (int i = 0; i < VEC; i += 4) {
        r[i] = UNPACKLO_PD(t[i], t[i + 2]), r[i + 1] = UNPACKHI_PD(t[i], t[i + 2]);
        r[i + 2] = UNPACKLO_PD(t[i + 1], t[i + 3]), r[i + 3] = UNPACKHI_PD(t[i + 1], t[i + 3]);
    }
#if VEC == 16
    for (int h = 0; h < VEC; h += 8)
        for (int i = 0; i < 4; i++) {
            t[h + i] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0x88);
            t[h + i + 4] = _mm512_shuffle_f32x4(r[h + i], r[h + i + 4], 0xdd);
        }
    for (int i = 0; i < 8; i++) {
        r[i] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88);
        r[i + 8] = _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd);
    }
#else
    for (int i = 0; i < 4; i++) {
        t[i] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x20);
        t[i + 4] = _mm256_permute2f128_ps(r[i], r[i + 4], 0x31);
    }
    for (int i = 0; i < VEC; i++) r[i] = t[i];
#endif
}
#endif

#endif
