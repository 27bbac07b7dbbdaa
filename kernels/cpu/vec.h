/* The vector types of the files compiled per ISA (isa.h): VEC lanes, written with GCC's vector
 * extension so small loops become vector code whatever the compiler makes of them; the lane
 * helpers they share. Include after isa.h. */
#ifndef KERNELS_CPU_VEC_H
#define KERNELS_CPU_VEC_H

#include "isa.h"

typedef float vf __attribute__((vector_size(VEC * sizeof(float))));
/* The same vector at any float-aligned address. */
typedef float vfu __attribute__((vector_size(VEC * sizeof(float)), aligned(sizeof(float))));
/* Lane masks of comparisons (-1 true, 0 false). */
typedef int vi __attribute__((vector_size(VEC * sizeof(int))));

static inline vf splat(float v) { return (vf){0} + v; }

/* m ? a : b per lane, m all ones or all zeros (a comparison's result). */
static inline vf vselect(vi m, vf a, vf b) { return (vf)((m & (vi)a) | (~m & (vi)b)); }

#endif
