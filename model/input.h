/* A batch as the model reads it: device memory, ready for compute (uploaded, with compute
 * ordered after the upload). The caller owns it (model/batches.h is one way to fill it); the
 * model reads it only in work issued before model_forward_backward or model_predict returns. */
#ifndef MODEL_INPUT_H
#define MODEL_INPUT_H

struct model_input {
    const unsigned char *img; /* [n][3][32][32] raw pixels */
    const int *geom;          /* [n][3] crop/flip per image (struct kernels input_prepare) */
    const int *labels;        /* [n] (training only) */
    int n;                    /* 1 <= n <= the model's max_batch */
    int reflect;              /* the crops read reflect padding (augment_reflects), not zeros */
    float *stats;             /* training: host_alloc memory that receives the step's (loss, correct) on the
                               * compute queue (kernels.h download_queued), or NULL */
};

#endif
