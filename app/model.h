/* The workshop CNN, exactly as PyTorch's
 *
 *   network = nn.Sequential(
 *     0 Conv2d(3, 32, 3, padding=1)   1 ReLU  2 Conv2d(32, 64, 3, padding=1)    3 ReLU
 *     4 MaxPool2d(2)   5 BatchNorm2d(64)
 *     6 Conv2d(64, 128, 3, padding=1) 7 ReLU  8 Conv2d(128, 128, 3, padding=1)  9 ReLU
 *     10 MaxPool2d(2)  11 BatchNorm2d(128)
 *     12 Conv2d(128, 256, 3, padding=1) 13 ReLU 14 Conv2d(256, 256, 3, padding=1) 15 ReLU
 *     16 MaxPool2d(2)  17 BatchNorm2d(256)
 *     18 Flatten  19 Linear(4096, 512)  20 ReLU  21 Linear(512, 10))
 *
 * All trainable parameters live in one contiguous float buffer (params), described by a
 * pointer table whose names are PyTorch's state_dict keys ("network.0.weight", ...);
 * gradients and momentum use the same layout. BN running statistics live in a second buffer
 * (bn_stats) with their own table entries. The model runs on any struct kernels backend. */
#ifndef APP_MODEL_H
#define APP_MODEL_H

#include "../kernels/kernels.h"

#include <stddef.h>
#include <stdint.h>

#define MODEL_NAME "workshop-cnn"
#define MODEL_CLASSES 10
#define MODEL_LAYERS 22
#define MODEL_BN_EPS 1e-5f
#define MODEL_BN_MOMENTUM 0.1f

enum model_buffer { MODEL_PARAMS, MODEL_BN_STATS };

/* One named tensor of the state_dict (num_batches_tracked excepted: see the model struct). */
struct model_tensor {
    char name[32];          /* "network.5.running_mean" */
    int ndim, shape[4];
    size_t numel;
    enum model_buffer buffer; /* which buffer holds it */
    size_t offset;            /* floats from the start of that buffer */
};

/* The tensor table (same for every model instance): params first, in state_dict order. */
int model_tensor_count(void);
const struct model_tensor *model_tensor_at(int i);
size_t model_param_count(void);    /* floats in params, grads (excluding extras), momentum */
size_t model_bn_stats_count(void); /* floats in bn_stats */

/* One batch on the host, filled by the caller (from the backend's host_alloc: page-locked on
 * CUDA, so its upload runs while the device computes). */
struct model_batch {
    unsigned char *img; /* [max_batch][3][32][32] raw pixels */
    int *geom;          /* [max_batch][3] crop/flip per image (struct kernels input_prepare) */
    int *labels;        /* [max_batch] */
};

/* Called during backward each time a parameter layer's gradients are final: the floats
 * [begin, end) of m->grads. Ranges arrive in decreasing order and tile [0, P + 2) exactly,
 * (loss, correct) first, so a caller can start reducing them while backward goes on. On an
 * asynchronous backend "final" means "issued": the caller orders itself with events. */
typedef void model_grads_ready_fn(void *ctx, size_t begin, size_t end);

struct model {
    const struct kernels *k;
    int max_batch;
    model_grads_ready_fn *grads_ready; /* optional (NULL), with its ctx */
    void *grads_ready_ctx;
    /* Backend memory. */
    float *params;    /* [P] */
    float *grads;     /* [P + 2]: gradients, then (mean loss, correct count) of the last
                       * forward_backward, so one allreduce carries both */
    float *momentum;  /* [P] SGD momentum buffers */
    float *bn_stats;  /* [S] running_mean / running_var of the three BN layers */
    int64_t bn_batches_tracked; /* num_batches_tracked of every BN layer (they are equal) */
    float *input;     /* [max_batch][3][32][32] normalised, from input_prepare */
    /* Two batch slots, alternating, so one uploads while the other is used: */
    struct model_batch host[2];          /* host side, filled by the caller */
    unsigned char *dev_img[2];           /* [max_batch][3072] device copies */
    int *dev_geom[2], *dev_labels[2];    /* [max_batch][3], [max_batch] */
    struct kernels_event *uploaded[2];   /* slot's upload finished */
    struct kernels_event *consumed[2];   /* compute has finished reading slot's device copy */
    int fill, queued, queued_n[2];       /* next slot to fill; submitted, unconsumed batches */
    float *act[MODEL_LAYERS]; /* layer outputs; ReLU and Flatten alias their input */
    float *bn_saved;  /* per BN layer: batch mean [C] then invstd [C] */
    float *grad_a, *grad_b; /* [max_batch * largest activation] ping-pong for backward */
    void *ws;         /* kernel scratch */
    float *host_logits; /* [max_batch][10] host memory for model_predict */
    /* Wall time spent in each layer, [layer][0 forward, 1 backward], summed over calls since
     * model_init (host clock around each kernel call: exact for the synchronous CPU backend). */
    double layer_seconds[MODEL_LAYERS][2];
};

/* Allocates everything for batches of up to max_batch images and initialises the parameters
 * as PyTorch does by default (kaiming-uniform a=sqrt(5) weights, uniform +-1/sqrt(fan_in)
 * biases, BN weight 1 / bias 0 / mean 0 / var 1), from `seed` alone. */
void model_init(struct model *m, const struct kernels *k, int max_batch, uint64_t seed);
void model_free(struct model *m);

/* Batches: model_batch_next() returns the host slot to fill (waiting, if need be, until its
 * previous contents are no longer needed); model_batch_submit(m, n) starts the upload of its
 * first n <= max_batch images and returns at once. At most two batches may be submitted and
 * not yet consumed; model_forward_backward and model_predict consume the oldest. */
struct model_batch *model_batch_next(struct model *m);
void model_batch_submit(struct model *m, int n);

/* Training forward + backward on the oldest submitted batch: leaves the gradients and
 * (mean loss, correct count) in m->grads (calling grads_ready as they are issued) and updates
 * BN running statistics. May return before the device has finished; returns the batch size. */
int model_forward_backward(struct model *m);

/* Eval-mode forward (BN running statistics) on the oldest submitted batch; predictions
 * (argmax, first maximum on ties) go to pred_host[n]; logits_host[n][10] too when not NULL.
 * Returns n. */
int model_predict(struct model *m, int *pred_host, float *logits_host);

/* One torch.optim.SGD step over all parameters with m->grads scaled by grad_scale. */
void model_sgd_step(struct model *m, float lr, float momentum, float weight_decay, float grad_scale);

/* Host copies of the state, for files: params[P], momentum[P], bn_stats[S]. */
void model_get_state(const struct model *m, float *params, float *momentum, float *bn_stats);
void model_set_state(struct model *m, const float *params, const float *momentum,
                     const float *bn_stats);

/* For benchmarks: layer i as text ("conv 64->128 16x16") and the flops (2 per multiply-add) of
 * its forward (pass 0) or backward (pass 1) on n images; 0 for layers without a matrix product. */
void model_layer_describe(int i, char *buf, size_t size);
/* Layer i's kind ("conv", "relu", "maxpool", "batchnorm", "flatten", "linear") and the shape of
 * one image's output, [c][h][w] (linear: [c][1][1]); its output for the last forward is
 * act[i] (tests compare our ReLU and max-pool decisions through it). */
const char *model_layer_kind(int i);
void model_layer_output_shape(int i, int *c, int *h, int *w);
double model_layer_flops(int i, int n, int pass);

#endif
