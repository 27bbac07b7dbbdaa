/* A queue of input batches, owned by whoever feeds a model (trainer, evaluator): two slots,
 * alternating, so the host fills and uploads one while the device computes on the other. Host memory comes
 * from the backend's host_alloc (page-locked on CUDA, so uploads run on the input queue during compute);
 * events order each slot's reuse against the upload and against the compute that reads it. Any network takes
 * its input through this (a [3][32][32] uint8 image, its crop/flip and its label). */
#ifndef MODEL_BATCHES_H
#define MODEL_BATCHES_H

#include "../kernels/kernels.h"
#include "input.h"

/* One batch on the host, filled by the caller. */
struct batch {
    unsigned char *img; /* [max_batch][3][32][32] raw pixels */
    int *geom;          /* [max_batch][3] crop/flip per image (struct kernels input_prepare) */
    int *labels;        /* [max_batch] */
    int reflect;        /* the crops read reflect padding (augment_reflects), not zeros */
};

struct batches {
    const struct kernels *k;
    int max_batch;
    struct batch host[2];              /* host side, filled by the caller */
    unsigned char *dev_img[2];         /* [max_batch][3072] device copies */
    int *dev_geom[2], *dev_labels[2];  /* [max_batch][3], [max_batch] */
    struct kernels_event *uploaded[2]; /* slot's upload finished */
    struct kernels_event *consumed[2]; /* compute has finished reading slot's device copy */
    int fill, queued, queued_n[2];     /* next slot to fill; submitted, unconsumed batches */
    int queued_reflect[2];             /* the submitted batches' padding mode */
    float *stats[2];                   /* [2] page-locked: the step's (loss, correct) (model_input) */
};

void batches_init(struct batches *b, const struct kernels *k, int max_batch);
void batches_free(struct batches *b);

/* The host slot to fill next (waits, if need be, until its previous contents are no longer
 * needed); at most two batches may be submitted and not yet taken. */
struct batch *batches_next(struct batches *b);
/* Starts the upload of the filled slot's first n <= max_batch images; returns at once. Stops
 * at a CHECK when a geometry is outside input_prepare's (offsets 0..8, flip 0 or 1), which the
 * device would read past the image with. */
void batches_submit(struct batches *b, int n);
/* The oldest submitted batch into *in (its device copies); returns its slot. Compute issued
 * afterwards waits for its upload. */
int batches_take(struct batches *b, struct model_input *in);
/* Ends the use of slot's device copy, after everything issued so far (which may read it). */
void batches_release(struct batches *b, int slot);
/* Waits until the compute queue has passed slot's release: the step that read it is done, and
 * its (loss, correct) are in b->stats[slot]. */
void batches_wait(struct batches *b, int slot);

#endif
