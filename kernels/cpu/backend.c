/* The CPU backend's table: host memory, OpenMP kernels, synchronous. */
#include "../../common/clock.h"
#include "../../common/err.h"
#include "../kernels.h"
#include "cpu.h"
#include "gemm.h"

#include <stdlib.h>
#include <string.h>

static void *cpu_alloc(size_t bytes) { return XALLOC(bytes); }
static void cpu_free(void *p) { free(p); }
static void cpu_copy(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

/* Every op has finished when it returns, so events are always complete and the asynchronous
 * copies are plain copies; a timer mark is the host clock's reading. */
struct kernels_event {
    double seconds;
};
static struct kernels_event *cpu_event_create(void) { return XALLOC(sizeof(struct kernels_event)); }
static void cpu_event_destroy(struct kernels_event *e) { free(e); }
static void cpu_download_queued(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }

static void cpu_copy_async(void *dst, const void *src, size_t bytes, struct kernels_event *done) {
    (void)done;
    if (bytes) memcpy(dst, src, bytes);
}
static void cpu_event_nothing(struct kernels_event *e) { (void)e; }
static int cpu_event_done(struct kernels_event *e) { return (void)e, 1; }
static void cpu_timer_mark(struct kernels_event *e) { e->seconds = clock_seconds(); }
static double cpu_timer_seconds(struct kernels_event *from, struct kernels_event *to) {
    return to->seconds - from->seconds;
}
/* NCHW is already PyTorch's flatten order. */
static void cpu_flatten(void *x, int N, int C, int HW) { (void)x, (void)N, (void)C, (void)HW; }
/* No graphs: ops run as they are called (capture_begin refuses, so the others are never
 * reached). */
static int cpu_capture_begin(void) { return -1; }
static struct kernels_graph *cpu_capture_end(void) { err_die(1, "internal error: capture_end on the CPU"); }
static void cpu_graph_launch(struct kernels_graph *g) {
    (void)g;
    err_die(1, "internal error: graph_launch on the CPU");
}
static void cpu_graph_destroy(struct kernels_graph *g) {
    (void)g;
    err_die(1, "internal error: graph_destroy on the CPU");
}
/* Nothing to release: every buffer and event was freed by its owner, the table is constant. */
static void cpu_shutdown(void) {}
/* The convolutions read the filters as they are: no set to make. */
static struct kernels_filters *cpu_conv_filters_create(int n, const struct conv_shape *s,
                                                       const float *const *w) {
    CHECK(n >= 0 && n <= CONV_FILTERS_MAX);
    (void)s, (void)w;
    return NULL;
}
static void cpu_conv_filters_nothing(struct kernels_filters *f) { CHECK(!f); }

static const struct kernels cpu_kernels = {
    .name = "cpu",
    .host = 1,
    .act_size = sizeof(float),
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .host_alloc = cpu_alloc,
    .host_free = cpu_free,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .input_upload_async = cpu_copy_async,
    .upload_async = cpu_copy_async,
    .download_async = cpu_copy_async,
    .download_queued = cpu_download_queued,
    .compute_wait = cpu_event_nothing,
    .event_done = cpu_event_done,
    .event_wait = cpu_event_nothing,
    .timer_create = cpu_event_create,
    .timer_mark = cpu_timer_mark,
    .timer_seconds = cpu_timer_seconds,
    .input_prepare = cpu_input_prepare,
    .patch_covariance = cpu_patch_covariance,
    .conv_workspace = cpu_conv_workspace,
    .linear_workspace = cpu_linear_workspace,
    .conv_describe = cpu_conv_describe,
    .conv_filters_create = cpu_conv_filters_create,
    .conv_filters_ready = cpu_conv_filters_nothing,
    .conv_filters_destroy = cpu_conv_filters_nothing,
    .conv_forward = cpu_conv_forward,
    .conv_pool_forward = cpu_conv_pool_forward,
    .conv_backward = cpu_conv_backward,
    .conv_pool_backward = cpu_conv_pool_backward,
    .relu_forward = cpu_relu_forward,
    .relu_backward = cpu_relu_backward,
    .gelu_forward = cpu_gelu_forward,
    .gelu_backward = cpu_gelu_backward,
    .maxpool_forward = cpu_maxpool_forward,
    .maxpool_backward = cpu_maxpool_backward,
    .flatten_forward = cpu_flatten,
    .flatten_backward = cpu_flatten,
    .batchnorm_forward_train = cpu_batchnorm_forward_train,
    .batchnorm_forward_eval = cpu_batchnorm_forward_eval,
    .batchnorm_backward = cpu_batchnorm_backward,
    .linear_forward = cpu_linear_forward,
    .linear_backward = cpu_linear_backward,
    .softmax_xent = cpu_softmax_xent,
    .sgd_update = cpu_sgd_update,
    .lookahead_update = cpu_lookahead_update,
    .scalars_set = cpu_scalars_set,
    .logits_add = cpu_logits_add,
    .capture_begin = cpu_capture_begin,
    .capture_end = cpu_capture_end,
    .graph_launch = cpu_graph_launch,
    .graph_destroy = cpu_graph_destroy,
    .shutdown = cpu_shutdown,
};

/* The float table with bf16 products in the convolution and linear ops. */
static struct kernels bf16_of(struct kernels k) {
    k.name = "cpu-bf16";
    k.conv_describe = cpu_conv_describe_bf16;
    k.conv_forward = cpu_conv_forward_bf16;
    k.conv_pool_forward = cpu_conv_pool_forward_bf16;
    k.conv_backward = cpu_conv_backward_bf16;
    k.conv_pool_backward = cpu_conv_pool_backward_bf16;
    k.linear_forward = cpu_linear_forward_bf16;
    k.linear_backward = cpu_linear_backward_bf16;
    return k;
}

/* The tables are constant once made, so one check decides for every call; a missing op is a
 * bug in this file, reported at start-up rather than as a NULL call later. */
const struct kernels *cpu_table_checked(const struct kernels *k) {
    struct err e;
    if (kernels_check(k, &e) != 0) err_die(1, "internal error: %s", e.msg);
    return k;
}

const struct kernels *kernels_cpu(void) {
    static const struct kernels *t;
    if (!t) t = cpu_table_checked(&cpu_kernels);
    return t;
}

const struct kernels *kernels_cpu_bf16(void) {
    static struct kernels bf16;
    static const struct kernels *t;
    if (!t) {
        bf16 = bf16_of(cpu_kernels);
        t = cpu_table_checked(&bf16);
    }
    return t;
}

int kernels_cpu_bf16_native(void) { return gemm_bf16_hw(); }
int kernels_cpu_bf16_vector(void) { return gemm_bf16_vector(); }
const char *kernels_cpu_isa(void) { return gemm_isa(); }
const char *kernels_cpu_bf16_isa(void) { return gemm_bf16_isa(); }
int kernels_cpu_select(const char *isa) { return gemm_select(isa); }
int kernels_cpu_select_bf16(const char *isa) { return gemm_bf16_select(isa); }
double kernels_cpu_fma_peak(const char *isa, int threads, double seconds) {
    return gemm_fma_peak(isa, threads, seconds);
}
double kernels_cpu_bf16_peak(int threads, double seconds) { return gemm_bf16_peak(threads, seconds); }
unsigned long long kernels_cpu_tile_products(void) { return gemm_tiles_products(); }
int kernels_cpu_tiles_find(double *seconds) { return conv_tiles_find_spent(seconds); }
