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

struct model {
    const struct kernels *k;
    int max_batch;
    /* Backend memory. */
    float *params;    /* [P] */
    float *grads;     /* [P + 2]: gradients, then (mean loss, correct count) of the last
                       * forward_backward, so one allreduce carries both */
    float *momentum;  /* [P] SGD momentum buffers */
    float *bn_stats;  /* [S] running_mean / running_var of the three BN layers */
    int64_t bn_batches_tracked; /* num_batches_tracked of every BN layer (they are equal) */
    float *input;     /* [max_batch][3][32][32] */
    int *labels;      /* [max_batch] */
    float *act[MODEL_LAYERS]; /* layer outputs; ReLU and Flatten alias their input */
    float *bn_saved;  /* per BN layer: batch mean [C] then invstd [C] */
    float *grad_a, *grad_b; /* [max_batch * largest activation] ping-pong for backward */
    float *stats;     /* [2] loss / correct from softmax_xent */
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

/* Training forward + backward on n <= max_batch images x_host[n][3][32][32] (normalised) with
 * labels_host[n]; leaves the gradients and (loss, correct) in m->grads; updates BN running
 * statistics. */
void model_forward_backward(struct model *m, const float *x_host, const int *labels_host, int n);

/* Eval-mode forward (BN running statistics); predictions (argmax, first maximum on ties) go to
 * pred_host[n]; logits_host[n][10] too when not NULL. */
void model_predict(struct model *m, const float *x_host, int n, int *pred_host, float *logits_host);

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
