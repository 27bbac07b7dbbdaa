/* The backend-independent parts of kernels/kernels.h. */
#include "kernels.h"

#include <string.h>

int kernels_conv_out(int size, int k, int pad) { return size + 2 * pad - k + 1; }

/* Every function pointer of struct kernels, in declaration order. */
/* clang-format off */
#define OP(name) {#name, offsetof(struct kernels, name)}
static const struct {
    const char *name;
    size_t offset;
} ops[] = {
    OP(alloc), OP(free), OP(upload), OP(download), OP(host_alloc), OP(host_free),
    OP(event_create), OP(event_destroy), OP(input_upload_async), OP(upload_async),
    OP(download_async), OP(compute_wait), OP(event_done), OP(event_wait), OP(timer_create), OP(timer_mark), OP(timer_seconds), OP(input_prepare),
    OP(conv_workspace), OP(linear_workspace), OP(conv_describe), OP(conv_forward), OP(conv_backward),
    OP(relu_forward), OP(relu_backward), OP(gelu_forward), OP(gelu_backward),
    OP(maxpool_forward), OP(maxpool_backward), OP(flatten_forward), OP(flatten_backward),
    OP(batchnorm_forward_train),
    OP(batchnorm_forward_eval), OP(batchnorm_backward), OP(linear_forward), OP(linear_backward),
    OP(softmax_xent), OP(sgd_update), OP(lookahead_update), OP(shutdown),
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
    return 0;
}
