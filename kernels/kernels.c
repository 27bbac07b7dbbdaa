/* The backend-independent parts of kernels/kernels.h. */
#include "kernels.h"

#include <stdint.h>
#include <string.h>

int kernels_conv_out(int size, int k, int pad) { return size + 2 * pad - k + 1; }

/* The bf16 nearest f, ties to even: the upper 16 bits after adding half a unit of the lower
 * ones (less one, plus the kept bit's parity); a NaN keeps its sign and becomes quiet; a
 * subnormal stays one, as CUDA's __float2bfloat16_rn (cpu/gemm_bf16.c's bf16_bits flushes
 * them to zero instead, as VDPBF16PS reads its operands). */
static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)(u >> 16 | 0x40u);
    return (uint16_t)((u + 0x7fffu + (u >> 16 & 1u)) >> 16);
}

void kernels_act_from_float(size_t act_size, const float *src, void *dst, size_t n) {
    if (act_size == sizeof(float)) {
        memmove(dst, src, n * sizeof(float));
        return;
    }
    uint16_t *d = dst;
    for (size_t i = 0; i < n; i++) d[i] = bf16_of(src[i]);
}

void kernels_act_to_float(size_t act_size, const void *src, float *dst, size_t n) {
    if (act_size == sizeof(float)) {
        memmove(dst, src, n * sizeof(float));
        return;
    }
    const uint16_t *s = src;
    for (size_t i = n; i-- > 0;) { /* from the end: dst may be src itself, widened in place */
        uint32_t u = (uint32_t)s[i] << 16;
        memcpy(dst + i, &u, sizeof u);
    }
}

/* Every function pointer of struct kernels, in declaration order. */
/* clang-format off */
#define OP(name) {#name, offsetof(struct kernels, name)}
static const struct {
    const char *name;
    size_t offset;
} ops[] = {
    OP(alloc), OP(free), OP(upload), OP(download), OP(host_alloc), OP(host_free),
    OP(event_create), OP(event_destroy), OP(input_upload_async), OP(upload_async),
    OP(download_async), OP(download_queued), OP(compute_wait), OP(event_done), OP(event_wait), OP(timer_create), OP(timer_mark), OP(timer_seconds), OP(input_prepare), OP(patch_covariance),
    OP(conv_workspace), OP(linear_workspace), OP(conv_describe), OP(conv_filters_create), OP(conv_filters_ready), OP(conv_filters_destroy), OP(conv_forward), OP(conv_pool_forward), OP(conv_backward), OP(conv_pool_backward),
    OP(relu_forward), OP(relu_backward), OP(gelu_forward), OP(gelu_backward),
    OP(maxpool_forward), OP(maxpool_backward), OP(flatten_forward), OP(flatten_backward),
    OP(batchnorm_forward_train),
    OP(batchnorm_forward_eval), OP(batchnorm_backward), OP(linear_forward), OP(linear_backward),
    OP(softmax_xent), OP(sgd_update), OP(lookahead_update), OP(scalars_set),
    OP(logits_add),
    OP(capture_begin), OP(capture_end), OP(graph_launch), OP(graph_destroy), OP(shutdown),
};
#undef OP
/* clang-format on */

/* Everything after `name` is a function pointer, so an op added to struct kernels but not to
 * ops[] changes the struct's size and stops the build here. */
typedef void (*any_fn)(void);
_Static_assert(sizeof ops / sizeof ops[0] ==
                   (sizeof(struct kernels) - offsetof(struct kernels, alloc)) / sizeof(any_fn),
               "ops[] must list every function pointer of struct kernels");

int kernels_check(const struct kernels *k, struct err *e) {
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        /* Read as one function-pointer type (they all share its representation), by memcpy so
         * no typed access to a member of another type is made. */
        any_fn fn;
        memcpy(&fn, (const char *)k + ops[i].offset, sizeof fn);
        if (!fn) return err_set(e, "the %s backend has no %s", k->name, ops[i].name);
    }
    if (k->act_size != sizeof(float) && k->act_size != 2)
        return err_set(e, "the %s backend's activations have %zu-byte elements", k->name, k->act_size);
    return 0;
}
