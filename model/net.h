/* Networks as data. A network is a name and a list of layer definitions, run in order on a
 * [3][32][32] image and ending in `classes` logits; model/model.c interprets any such list (one
 * switch over the layer kinds), so adding a network is adding a definition to model/nets.c.
 *
 * The tensors of a layer are those of the equivalent PyTorch module, named "<layer name>.<what>"
 * as its state_dict keys are (the layer name is the module's prefix, which may be nested, e.g.
 * "2.conv1"); which tensors a kind has, how they are initialised and which of them train is
 * the kind's property table (layer_kind_props). */
#ifndef MODEL_NET_H
#define MODEL_NET_H

#include <stddef.h>

enum layer_kind {
    LAYER_CONV,      /* nn.Conv2d(in, out, k, padding=pad, bias=flags & LAYER_BIAS), stride 1 */
    LAYER_RELU,      /* nn.ReLU() */
    LAYER_GELU,      /* nn.GELU() (exact erf form) */
    LAYER_MAXPOOL,   /* nn.MaxPool2d(k): window = stride = k, floor */
    LAYER_BATCHNORM, /* nn.BatchNorm2d(in, eps, momentum) */
    LAYER_FLATTEN,   /* nn.Flatten() */
    LAYER_LINEAR,    /* nn.Linear(in, out, bias=flags & LAYER_BIAS), then times `scale` */
    LAYER_KINDS
};

enum layer_flag {
    LAYER_BIAS = 1 << 0,        /* conv, linear: a bias tensor */
    LAYER_FROZEN = 1 << 1,      /* conv: the weight never trains (weight.requires_grad = False) */
    LAYER_FIXED_SCALE = 1 << 2, /* batch norm: the weight (scale) stays 1 and never trains */
    LAYER_DIRAC_INIT = 1 << 3,  /* conv: after the uniform draw, the first `in` output channels
                                 * are identities (torch.nn.init.dirac_(weight[:in])) */
    LAYER_ZERO_BIAS = 1 << 4,   /* conv: the bias starts at 0 (airbench's Conv), not uniform */
};

struct layer_def {
    enum layer_kind kind;
    const char *name;    /* state_dict prefix ("network.0", "2.conv1"); NULL without tensors */
    int out;             /* conv: output channels; linear: output features */
    int k, pad;          /* conv: kernel size (1..5) and zero padding; max pool: window */
    unsigned flags;      /* enum layer_flag */
    float scale;         /* linear: constant output factor (0 stands for 1) */
    float eps, momentum; /* batch norm (momentum in PyTorch's convention) */
};

struct recipe; /* model/config.h */

struct net_def {
    const char *name; /* the `model` metadata of our files, e.g. "workshop-cnn" */
    int classes;
    int nlayers;
    const struct layer_def *layers;
    const struct recipe *recipe; /* its training defaults (NULL: the workshop CNN's) */
};

/* The networks the programs know (model/nets.c). */
extern const struct net_def net_workshop_cnn;
extern const struct net_def net_airbench94;

/* The known network called `name`, or NULL. */
const struct net_def *net_find(const char *name);
/* The known names, comma-separated, for error messages. */
void net_known_names(char *buf, size_t size);
/* The i-th known network (0-based), or NULL past the last. */
const struct net_def *net_known(int i);

/* How a layer's tensors start (PyTorch's defaults). */
enum tensor_init {
    INIT_FAN_IN, /* uniform in +-1/sqrt(fan_in): kaiming_uniform_(a=sqrt(5)) and Conv/Linear biases */
    INIT_ONES,
    INIT_ZEROS,
};

/* Where a tensor lives: trained (params, with gradients and momentum), or a float buffer that
 * never trains (frozen tensors, running statistics), or the step counter (num_batches_tracked,
 * int64, the same for every batch-norm layer of a network that runs all layers each step). */
enum tensor_home { HOME_PARAMS, HOME_BUFFERS, HOME_COUNTER };

enum tensor_shape {
    SHAPE_WEIGHT,   /* conv [out][in][k][k], linear [out][in] */
    SHAPE_CHANNELS, /* [out] (batch norm: [channels]) */
    SHAPE_SCALAR,   /* [] */
};

/* One tensor a kind of layer may have. */
struct tensor_spec {
    const char *what; /* state_dict suffix: "weight", "running_mean", ... */
    enum tensor_shape shape;
    enum tensor_init init;
    enum tensor_home home; /* when the layer's flags do not freeze it */
    unsigned only_with;    /* present only when the layer has this flag (0: always) */
    unsigned frozen_by;    /* a flag that moves it from HOME_PARAMS to HOME_BUFFERS */
    int running;           /* a running statistic: each data-parallel rank updates its own */
};

#define LAYER_MAX_TENSORS 5

struct layer_kind_props {
    const char *name;      /* "conv", "relu", ... */
    int in_place;          /* forward: the output aliases the input (no memory of its own) */
    int needs_output;      /* backward reads the layer's output (else its input) */
    int backward_in_place; /* backward: the input gradient overwrites the output gradient */
    int weighted;          /* a matrix product (FLOP accounting) */
    unsigned flags;        /* the layer flags that apply to this kind */
    int ntensors;
    struct tensor_spec tensors[LAYER_MAX_TENSORS];
};

const struct layer_kind_props *layer_kind_props(enum layer_kind kind);

#endif
