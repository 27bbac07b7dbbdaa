/* The ready filters (kernels.h conv_filters_create, _ready, _destroy): a model's convolution
 * filters kept in the form cuDNN reads (KRSC in NHWC, bf16 with bf16 products; what
 * cuda_filter_pack makes of one), made by one kernel for all of them after each update, so
 * the forward and the backward-data pass of each layer do not convert their filter at every
 * call (12 launches of an airbench94 step).
 *
 * A set (one per model) holds its filters in one device buffer, each a 256-byte aligned slice
 * of its precision's type. It is current from its conv_filters_ready until an upload, an
 * update or a lookahead writes over one of its filters (cuda_filters_touched), after which the
 * conv ops convert those filters per call again until the next conv_filters_ready. A conv op
 * finds a filter's ready form by its pointer and shape among the live sets of its precision
 * and the current layout (cuda_filter_ready). */
extern "C" {
#include "../../common/err.h"
}
#include "cuda.h"

#include <stdlib.h>
#include <string.h>

/* What the packing kernel needs of a set (by value: a few hundred bytes of parameters). */
struct filter_batch {
    int n, krsc;
    uint32_t begin[CONV_FILTERS_MAX + 1]; /* filter f: elements [begin[f], begin[f + 1]) of all */
    uint32_t at[CONV_FILTERS_MAX];        /* its first element in the buffer */
    uint32_t C[CONV_FILTERS_MAX], kk[CONV_FILTERS_MAX];
    const float *w[CONV_FILTERS_MAX];
};

/* struct kernels_filters: a set of filters in the form of its precision (bf16 or float) and of
 * the layout it was made in; filter i at batch.at[i] of buf. */
struct kernels_filters {
    int n, bf16, nhwc, current;
    int touched_in_capture; /* an update recorded in the capture under way wrote over a filter */
    int K[CONV_FILTERS_MAX], k[CONV_FILTERS_MAX]; /* (w and C: batch's) */
    void *buf;
    struct filter_batch batch;
};
/* The live sets: what cuda_filter_ready searches and cuda_filters_touched ends. */
#define MAX_SETS 16
static struct kernels_filters *live[MAX_SETS];
static int nlive;

/* Element i of all the set's filters in order, packed as cuda_filter_pack packs one. */
template <typename T> __global__ static void filters_pack_kernel(struct filter_batch b, T *buf) {
    GRID_STRIDE32(i, b.begin[b.n]) {
        int f = 0;
        while (i >= b.begin[f + 1]) f++;
        uint32_t j = i - b.begin[f];
        act_store(buf, b.at[f] + j, b.w[f][b.krsc ? krsc_source<uint32_t>(j, b.C[f], b.kk[f]) : j]);
    }
}

struct kernels_filters *cuda_filters_create(int bf16, int n, const struct conv_shape *s,
                                            const float *const *w) {
    CHECK(n >= 0 && n <= CONV_FILTERS_MAX && (n == 0 || (s && w)));
    if (cuda_capturing()) err_die(1, "internal error: conv_filters_create during a graph capture");
    /* No set (each op converts per call): nothing to convert (float NCHW: cuDNN reads w as it
     * is), the switch off, or as many sets live as this keeps. */
    if (n == 0 || (!bf16 && !cuda_nhwc()) || !cuda_filters_on() || nlive == MAX_SETS) return NULL;
    struct kernels_filters *f = (struct kernels_filters *)calloc(1, sizeof *f); /* (XALLOC: not exported) */
    CHECK(f);
    f->bf16 = bf16 != 0;
    f->nhwc = cuda_nhwc();
    size_t e = f->bf16 ? sizeof(bf16_t) : sizeof(float), align = 256 / e, at = 0, all = 0;
    for (int i = 0; i < n; i++) {
        CHECK(s[i].K >= 1 && s[i].C >= 1 && s[i].k >= 1 && w[i]);
        size_t numel = (size_t)s[i].K * s[i].C * s[i].k * s[i].k;
        CHECK(at + numel < (size_t)1 << 31);
        f->K[i] = s[i].K, f->k[i] = s[i].k;
        f->batch.w[i] = w[i], f->batch.C[i] = (uint32_t)s[i].C, f->batch.kk[i] = (uint32_t)(s[i].k * s[i].k);
        f->batch.begin[i] = (uint32_t)all, f->batch.at[i] = (uint32_t)at;
        all += numel, at += (numel + align - 1) / align * align;
    }
    f->n = f->batch.n = n;
    f->batch.begin[n] = (uint32_t)all;
    f->batch.krsc = f->nhwc;
    CUDA_CHECK(cudaMalloc(&f->buf, at * e));
    live[nlive++] = f;
    return f;
}

void cuda_filters_ready(struct kernels_filters *f) {
    if (!f) return;
    CHECK(f->nhwc == cuda_nhwc());
    uint32_t total = f->batch.begin[f->n];
    if (f->bf16) cuda_launch(filters_pack_kernel<bf16_t>, total, f->batch, (bf16_t *)f->buf);
    else cuda_launch(filters_pack_kernel<float>, total, f->batch, (float *)f->buf);
    f->current = 1;
}

void cuda_filters_destroy(struct kernels_filters *f) {
    if (!f) return;
    if (cuda_capturing()) err_die(1, "internal error: conv_filters_destroy during a graph capture");
    int i = 0;
    while (i < nlive && live[i] != f) i++;
    CHECK(i < nlive);
    live[i] = live[--nlive];
    if (f->buf) {
        CUDA_CHECK(cudaStreamSynchronize(cuda_stream())); /* no op still reads it */
        CUDA_CHECK(cudaFree(f->buf));
    }
    free(f);
}

const void *cuda_filter_ready(int bf16, const float *w, int K, int C, int k) {
    for (int j = 0; j < nlive; j++) {
        const struct kernels_filters *f = live[j];
        if (!f->current || f->bf16 != (bf16 != 0) || f->nhwc != cuda_nhwc()) continue;
        for (int i = 0; i < f->n; i++)
            if (f->batch.w[i] == w && f->K[i] == K && f->batch.C[i] == (uint32_t)C && f->k[i] == k)
                return (const char *)f->buf +
                       (size_t)f->batch.at[i] * (f->bf16 ? sizeof(bf16_t) : sizeof(float));
    }
    return NULL;
}

void cuda_filters_touched(const void *p, size_t bytes) {
    const char *lo = (const char *)p, *hi = lo + bytes;
    for (int j = 0; j < nlive; j++) {
        struct kernels_filters *f = live[j];
        for (int i = 0; i < f->n; i++) {
            const char *w = (const char *)f->batch.w[i];
            size_t wb = (size_t)(f->batch.begin[i + 1] - f->batch.begin[i]) * sizeof(float);
            if (w < hi && lo < w + wb) f->current = 0, f->touched_in_capture |= cuda_capturing();
        }
    }
}

void cuda_filters_capture_end(void) {
    for (int j = 0; j < nlive; j++) {
        struct kernels_filters *f = live[j];
        if (f->touched_in_capture && !f->current)
            err_die(1,
                    "internal error: a graph writes over filters of a ready set without conv_filters_ready "
                    "after");
        f->touched_in_capture = 0;
    }
}

void cuda_filters_release(void) {
    while (nlive) {
        struct kernels_filters *f = live[--nlive];
        if (f->buf) CUDA_CHECK(cudaFree(f->buf));
        free(f);
    }
}
