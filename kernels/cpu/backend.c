/* The CPU backend's table: host memory, OpenMP kernels. */
#include "../kernels.h"
#include "../../common/err.h"
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(size_t bytes) { return XALLOC(bytes); }
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static const struct kernels cpu_kernels = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .conv3x3_workspace = cpu_conv3x3_workspace,
    .linear_workspace = cpu_linear_workspace,
    .conv3x3_forward = cpu_conv3x3_forward,
    .conv3x3_backward = cpu_conv3x3_backward,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .maxpool2_forward = cpu_maxpool2_forward,
    .maxpool2_backward = cpu_maxpool2_backward,
    .batchnorm_forward_train = cpu_batchnorm_forward_train,
    .batchnorm_forward_eval = cpu_batchnorm_forward_eval,
    .batchnorm_backward = cpu_batchnorm_backward,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .softmax_xent = cpu_softmax_xent,
    .sgd_update = cpu_sgd_update,
};

const struct kernels *kernels_cpu(void) { return &cpu_kernels; }
