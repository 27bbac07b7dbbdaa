#include "batches.h"

#include <string.h>

void batches_init(struct batches *b, const struct kernels *k, int max_batch) {
    memset(b, 0, sizeof *b);
    b->k = k;
    b->max_batch = max_batch;
    for (int s = 0; s < 2; s++) {
        b->host[s].img = k->host_alloc((size_t)max_batch * 3 * 32 * 32);
        b->host[s].geom = k->host_alloc((size_t)max_batch * 3 * sizeof(int));
        b->host[s].labels = k->host_alloc((size_t)max_batch * sizeof(int));
        b->dev_img[s] = k->alloc((size_t)max_batch * 3 * 32 * 32);
        b->dev_geom[s] = k->alloc((size_t)max_batch * 3 * sizeof(int));
        b->dev_labels[s] = k->alloc((size_t)max_batch * sizeof(int));
        b->stats[s] = k->host_alloc(2 * sizeof(float));
        b->uploaded[s] = k->event_create();
        b->consumed[s] = k->event_create();
        k->download_async(NULL, NULL, 0, b->uploaded[s]); /* both start out complete */
        k->download_async(NULL, NULL, 0, b->consumed[s]);
    }
}

void batches_free(struct batches *b) {
    const struct kernels *k = b->k;
    /* A batch submitted for a step that never ran may still be in flight on the input queue:
     * free nothing it copies from or to until it has landed, nor what a step still reads. */
    for (int s = 0; s < 2; s++) k->event_wait(b->uploaded[s]), k->event_wait(b->consumed[s]);
    for (int s = 0; s < 2; s++) {
        k->free(b->dev_img[s]), k->free(b->dev_geom[s]), k->free(b->dev_labels[s]);
        k->host_free(b->host[s].img), k->host_free(b->host[s].geom), k->host_free(b->host[s].labels);
        k->host_free(b->stats[s]);
        k->event_destroy(b->uploaded[s]), k->event_destroy(b->consumed[s]);
    }
    memset(b, 0, sizeof *b);
}

struct batch *batches_next(struct batches *b) {
    CHECK(b->queued < 2);
    int s = b->fill;
    b->k->event_wait(b->uploaded[s]); /* the host copy is free once uploaded... */
    b->k->event_wait(b->consumed[s]); /* ...and the device copy once read */
    return &b->host[s];
}

/* Whether geom[n][3] holds offsets 0..8 and flips 0 or 1: the crops input_prepare reads
 * inside the image (or its mirror image); any other would read outside it on the device. */
static int geometry_ok(const int *geom, int n) {
    for (int i = 0; i < 3 * n; i += 3)
        if (geom[i] < 0 || geom[i] > 8 || geom[i + 1] < 0 || geom[i + 1] > 8 || (geom[i + 2] & ~1)) return 0;
    return 1;
}

void batches_submit(struct batches *b, int n) {
    const struct kernels *k = b->k;
    CHECK(n >= 1 && n <= b->max_batch && b->queued < 2);
    int s = b->fill;
    CHECK(geometry_ok(b->host[s].geom, n));
    k->input_upload_async(b->dev_img[s], b->host[s].img, (size_t)n * 3 * 32 * 32, NULL);
    k->input_upload_async(b->dev_geom[s], b->host[s].geom, (size_t)n * 3 * sizeof(int), NULL);
    k->input_upload_async(b->dev_labels[s], b->host[s].labels, (size_t)n * sizeof(int), b->uploaded[s]);
    b->queued_n[s] = n;
    b->queued_reflect[s] = b->host[s].reflect;
    b->queued++;
    b->fill ^= 1;
}

int batches_take(struct batches *b, struct model_input *in) {
    CHECK(b->queued > 0);
    int s = b->queued == 2 ? b->fill : b->fill ^ 1;
    b->queued--;
    *in = (struct model_input){b->dev_img[s],  b->dev_geom[s],       b->dev_labels[s],
                               b->queued_n[s], b->queued_reflect[s], b->stats[s]};
    b->k->compute_wait(b->uploaded[s]);
    return s;
}

void batches_release(struct batches *b, int slot) { b->k->download_async(NULL, NULL, 0, b->consumed[slot]); }

void batches_wait(struct batches *b, int slot) { b->k->event_wait(b->consumed[slot]); }
