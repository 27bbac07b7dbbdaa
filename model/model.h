/* A network (model/net.h) instantiated on a backend: the plan (shapes, tensor table, offsets,
 * fusion decisions) and the memory, for batches of up to max_batch images.
 *
 * Trainable tensors live in one contiguous float buffer (params), in layer order, with the
 * same layout for the gradients and the SGD momentum. Tensors that never train (running
 * statistics, frozen filters, a batch norm's fixed scale) live in a second float buffer
 * (buffers); num_batches_tracked is one int64 counter. The tensor table names every tensor by
 * its PyTorch state_dict key, in state_dict order within each home: trainable tensors first,
 * then buffers, then the counter's entries; that order is also the order of the per-tensor
 * initialisation streams. The model runs on any struct kernels backend. */
#ifndef MODEL_MODEL_H
#define MODEL_MODEL_H

#include "../kernels/kernels.h"
#include "input.h"
#include "net.h"

#include <stddef.h>
#include <stdint.h>

/* One named tensor of the state_dict. */
struct model_tensor {
    char name[64]; /* "network.5.running_mean", "2.norm1.weight" */
    int ndim, shape[4];
    size_t numel;
    enum tensor_home home; /* which buffer holds it (HOME_COUNTER: model.batches_tracked) */
    size_t offset;         /* floats from the start of that buffer (64-byte aligned) */
    int layer;             /* index of its layer */
    enum tensor_init init;
    int running; /* a running statistic (per rank until averaged) */
    int stopped; /* trainable, but no longer updated (model_stop_training) */
};

/* The plan of one layer. Shapes are one image's, [c][h][w] (linear: [features][1][1]). */
struct model_layer {
    const struct layer_def *def;
    int in_c, in_h, in_w, out_c, out_h, out_w;
    int weight, bias, running; /* tensor indices or -1 (running: running_mean; running_var next) */
    int relu_fused;            /* conv: applies the next layer's ReLU in its forward */
    int relu_backward_fused;   /* relu: the next layer (conv, max pool) does its backward */
    int gelu_fused;            /* batch norm: applies the next layer's GELU (forward and backward);
                                * that GELU layer does nothing and shares this layer's output */
    size_t grads_begin;        /* first float of its trainable tensors in params; SIZE_MAX: none */
    size_t saved;              /* batch norm: offset of batch mean [C] then invstd [C] in bn_saved */
    void *act;                 /* [max_batch][out] activations (k->act_size bytes each): its output;
                                * aliases the input when in place */
    unsigned char *winners;    /* max pool: [max_batch][out] bytes, each window's winner (the
                                * training forward's idx, which its backward reads) */
    double seconds[2];         /* forward / backward time of the steps model_timing_collect
                                * added up (the caller zeroes it) */
};

/* Floats behind the gradients in m->grads: the (loss, correct count) of the last forward_backward,
 * then two the caller may set before a reduction (dist_grads's signals: stop, checkpoint), so
 * one allreduce carries them all. */
#define MODEL_STATS 4

/* Called during backward each time a layer's gradients are final: the floats [begin, end) of
 * m->grads. Ranges arrive in decreasing order and tile [0, P + MODEL_STATS) exactly, the
 * stats first, so a caller can start reducing them while backward goes on. On an asynchronous
 * backend "final" means "issued": the caller orders itself with events. Returns 1 when it
 * ordered work of its own behind the ops issued so far (a gradient bucket's copy), 0 when it
 * only took note: then a step recorded as graphs may call it a little later, after more of
 * backward is issued (struct model_graph), and work it issues anyway is ordered behind that. */
typedef int model_grads_ready_fn(void *ctx, size_t begin, size_t end);

/* What a training step's update is (model_train_step), as far as its ops go: none, or the
 * optimizer step (over one group or with m->sgd_groups; Nesterov or not) and its lookaheads.
 * The numbers (lr, weights) are m->scalars: not part of it. */
struct model_update_ops {
    int sgd, groups, nesterov, lookaheads;
};

/* A training step recorded as graphs (kernels.h), and what it was recorded for. Without
 * grads_ready one graph holds the whole step. With it the calls stay on the host (the caller's
 * reductions start there): the first sight, op by op, notes each call's range and answer; the
 * step is then recorded as one graph per stretch up to a call that answered 1, and runs as
 * seg[i], then the calls [seg_end[i - 1], seg_end[i]) (from 0 for i = 0), for each i: a call
 * that answered 0 is made after the next graph that ends at a call. The answers are the first
 * sight's: a hook whose answers change later (other bucket sizes) still sees every range after
 * the graph that computed it, only later than it could. */
struct model_graph {
    int n, reflect;
    const void *img, *geom, *labels; /* the batch's buffers (model/input.h) */
    const float *stats;
    float label_smoothing;
    enum xent_reduction loss_reduction;
    struct model_update_ops update;
    int grads_ready; /* seen with grads_ready calls */
    int ncalls;      /* the calls of the first sight: their ranges, and which answered 1 */
    size_t (*call)[2];
    unsigned char *cut;
    int nsegs; /* 0: not recorded (yet) */
    struct kernels_graph **seg;
    int *seg_end;
};
#define MODEL_GRAPHS 8

struct model {
    const struct net_def *net;
    const struct kernels *k;
    int max_batch;
    /* The plan. */
    int nlayers, ntensors;
    struct model_layer *layers;        /* [nlayers] */
    struct model_tensor *tensors;      /* [ntensors] */
    size_t nparams, nbuffers;          /* floats in params (P) and buffers (S) */
    model_grads_ready_fn *grads_ready; /* optional (NULL), with its ctx */
    void *grads_ready_ctx;
    /* Backend memory. */
    float *params;           /* [P] */
    float *grads;            /* [P + MODEL_STATS]: gradients, then the stats (see MODEL_STATS) */
    float *momentum;         /* [P] SGD momentum buffers */
    float *buffers;          /* [S] */
    int64_t batches_tracked; /* num_batches_tracked of every batch-norm layer (they are equal) */
    void *input;             /* [max_batch][3][32][32] normalised, from input_prepare (activations,
                              * k->act_size bytes each): one fixed buffer, where the network's work
                              * begins (a CUDA graph's input) */
    float *bn_saved;         /* per batch-norm layer: batch mean [C] then invstd [C] */
    void *grad_a, *grad_b;   /* [max_batch * largest activation] ping-pong for backward */
    void *ws;                /* kernel scratch: ws_bytes, the largest any layer needs */
    size_t ws_bytes;
    struct kernels_filters *filters; /* the convolutions' filters made ready after each change of
                                      * params (kernels.h conv_filters_create; NULL on the CPU) */
    float *host_logits;              /* [max_batch][classes] host memory for model_predict */
    void *host_raw; /* the same as activations (act_size bytes each) when those are not float */
    /* The loss of model_forward_backward (defaults: no smoothing, XENT_MEAN). */
    float label_smoothing;
    enum xent_reduction loss_reduction;
    /* A convolution that feeds a max pool (through a fused ReLU or directly) runs both at once,
     * forward (conv_pool_forward: its own output may never be written) and backward
     * (conv_pool_backward: the pool's input gradient may never be written); with
     * keep_pool_inputs non-zero (0 after model_init) they run apart, for callers that read
     * those. */
    int keep_pool_inputs;
    /* Graphs of training steps: with graphs non-zero (the caller's choice; 0 after model_init),
     * model_forward_backward and model_train_step run a step whose batch size, batch buffers,
     * loss settings, update ops, grads_ready (set or not) and trained tensors they have met
     * once before from graphs of its ops (struct model_graph), recorded the second time, where the backend
     * records them (kernels.h: CUDA) and the step is not timed; otherwise, and on the first sight, op by op.
     * A graph runs the same kernels on the same buffers, so the results are the same bit for
     * bit. model_stop_training retires every graph (the backward changes). */
    int graphs;
    struct model_graph graph[MODEL_GRAPHS];
    int ngraphs;
    long replays;                           /* steps run from recorded graphs */
    struct model_graph *seeing, *recording; /* a step on its first sight / being recorded */
    int calls_seen, calls_done;             /* while recording: grads_ready calls met, made */
    /* A step's numbers (backend memory, set by scalars_set ahead of the ops that read them):
     * struct sgd_hyper, then the weights of its lookahead updates. */
    float *scalars;
    /* Each float of params in its SGD group (enum SGD_GROUPS: 0, 1 for batch-norm tensors, or
     * SGD_SKIP for stopped tensors and alignment padding), backend memory [P]: made by the first
     * model_optimizer_step that needs groups, again after model_stop_training; NULL until then. */
    unsigned char *sgd_groups;
    int sgd_groups_stale;
    /* Lookahead averages of params [P] and buffers [S]; NULL until model_lookahead_init. */
    float *ema_params, *ema_buffers;
    /* While timing (model_timing): timer marks around every layer's forward, [0][nlayers + 1],
     * and backward, [1][nlayers + 1] (marked from nlayers down to marks_lowest, the lowest layer
     * whose backward ran); NULL otherwise. */
    struct kernels_event **marks[2];
    int marks_lowest;
};

/* One optimizer step's settings: torch.optim.SGD (see struct kernels sgd_update) with the
 * gradients scaled by grad_scale. Batch-norm tensors form a group with lr * norm_lr_scale and
 * weight_decay / norm_lr_scale (airbench's bias group: a larger step, the same decay per
 * step); 1 puts every tensor in one group. Stopped tensors take no update of any kind. */
struct sgd_settings {
    float lr, momentum, weight_decay, grad_scale, norm_lr_scale;
    int nesterov;
};

/* Builds the plan of `net` (exits naming the layer if the definition is inconsistent: an
 * internal error), allocates everything for batches of up to max_batch images and initialises
 * the tensors as PyTorch does by default (kaiming-uniform a=sqrt(5) weights, uniform
 * +-1/sqrt(fan_in) biases, batch norm weight 1 / bias 0 / mean 0 / var 1), from `seed` alone:
 * one random stream per tensor, keyed by its index in the table. */
void model_init(struct model *m, const struct net_def *net, const struct kernels *k, int max_batch,
                uint64_t seed);
void model_free(struct model *m);
/* 0 where `net` takes batches of `batch` images; else -1 with one line in e ("N images per
 * batch: ..."): every activation of a batch must hold fewer than 2^31 values, as the GPU kernels
 * index tensors with 32-bit counts. */
int model_batch_check(const struct net_def *net, int batch, struct err *e);

/* Plans the forward of every convolution at batch n (1 <= n <= max_batch) now: the CUDA backend
 * times cuDNN's algorithms for a shape on first sight, so a batch size met later (an
 * evaluation's last, smaller chunk) would time them in the middle of a run. */
void model_plan_batch(struct model *m, int n);

/* Both read the batch `in` (model/input.h), normalised and augmented into m->input first.
 *
 * Training forward + backward: leaves the gradients and (mean loss, correct count) in m->grads
 * (calling grads_ready as they are issued), the latter also in in->stats where it is set, and
 * updates batch-norm running statistics. May return before the device has finished; returns
 * the batch size. */
int model_forward_backward(struct model *m, const struct model_input *in);

/* Eval-mode forward (batch-norm running statistics) of in's n images, issued on the compute
 * queue: returns their logits [n][classes] (activations, in the backend's memory), valid until
 * the next call that runs the model. */
const void *model_logits(struct model *m, const struct model_input *in);

/* Eval-mode forward (batch-norm running statistics): predictions (argmax, first maximum on
 * ties) go to pred_host[n]; logits_host[n][classes] too when not NULL. Returns n. */
int model_predict(struct model *m, const struct model_input *in, int *pred_host, float *logits_host);

/* One torch.optim.SGD step over the trainable tensors with m->grads scaled by grad_scale. */
void model_sgd_step(struct model *m, float lr, float momentum, float weight_decay, float grad_scale);
/* The same with groups, Nesterov and stopped tensors (struct sgd_settings). */
void model_optimizer_step(struct model *m, const struct sgd_settings *s);

/* A step's update: the optimizer step, then `lookaheads` (0-2) lookahead updates with weights
 * lookahead[] (model_lookahead_update). */
struct model_update {
    struct sgd_settings sgd;
    int lookaheads;
    float lookahead[2];
};
void model_update(struct model *m, const struct model_update *u);
/* model_forward_backward then model_update(u) as one step: recorded with its update in one
 * graph where graphs apply (struct model). For one rank: with grads_ready (gradients reduced
 * before the update) it stops with an internal error. Returns the batch size. */
int model_train_step(struct model *m, const struct model_input *in, const struct model_update *u);

/* Tensor t (trainable) takes no further updates and no gradient: PyTorch's
 * requires_grad = False mid-run (airbench's whitening bias after its epochs). */
void model_stop_training(struct model *m, int t);

/* Lookahead (airbench's LookaheadState) over every float tensor, params and buffers:
 * init copies the current state into the averages (allocating them); update does
 * lookahead_update(weight) on both. Get/set copy the averages from/to host memory. */
void model_lookahead_init(struct model *m);
void model_lookahead_update(struct model *m, float weight);
void model_get_lookahead(const struct model *m, float *params, float *buffers);
void model_set_lookahead(struct model *m, const float *params, const float *buffers);

/* Host copies of the state, for files (NULL: not wanted): params[P], momentum[P], buffers[S]. */
void model_get_state(const struct model *m, float *params, float *momentum, float *buffers);
void model_set_state(struct model *m, const float *params, const float *momentum, const float *buffers);

/* For benchmarks: layer i as text ("conv 64->128 16x16") and the flops (2 per multiply-add) of
 * its forward (pass 0) or backward (pass 1) on n images; 0 for layers without a matrix product. */
void model_layer_describe(const struct model *m, int i, char *buf, size_t size);
double model_layer_flops(const struct model *m, int i, int n, int pass);
/* How layer i's convolution runs pass `pass` (enum conv_pass) at max_batch (the backend's
 * conv_describe): 1, or 0 when layer i is no convolution or never runs that pass. */
int model_conv_describe(const struct model *m, int i, enum conv_pass pass, char *buf, size_t size);
/* Per-layer times. model_timing(m, 1) marks the compute queue around every layer's forward and
 * backward from then on (model_timing(m, 0) stops); model_timing_collect adds the last
 * model_forward_backward's times to each layer's seconds[], waiting for that step to finish
 * (on a GPU, a stall of the queue: collect outside the steps whose throughput counts). */
void model_timing(struct model *m, int on);
void model_timing_collect(struct model *m);

#endif
