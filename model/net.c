/* The per-kind property table and the registry of known networks. */
#include "net.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

/* Tensors in state_dict order. Running statistics and the step counter never train. */
/* clang-format off */
#define T(what, shape, init, home, only_with, frozen_by) {what, shape, init, home, only_with, frozen_by, 0}
#define RUNNING(what, init) {what, SHAPE_CHANNELS, init, HOME_BUFFERS, 0, 0, 1}
static const struct layer_kind_props props[LAYER_KINDS] = {
    [LAYER_CONV] = {.name = "conv", .weighted = 1, .ntensors = 2,
                    .flags = LAYER_BIAS | LAYER_FROZEN | LAYER_DIRAC_INIT | LAYER_ZERO_BIAS,
                    .tensors = {T("weight", SHAPE_WEIGHT, INIT_FAN_IN, HOME_PARAMS, 0, LAYER_FROZEN),
                                T("bias", SHAPE_CHANNELS, INIT_FAN_IN, HOME_PARAMS, LAYER_BIAS, 0)}},
    [LAYER_RELU] = {.name = "relu", .in_place = 1, .needs_output = 1, .backward_in_place = 1},
    /* GELU's backward writes the other gradient buffer: in place (reading and overwriting dy)
     * airbench94's first GELU took 14.3 - 15.0 ms at batch 512 on the Xeon with AMX, into the
     * other buffer 8.6 (docs/results.md). */
    [LAYER_GELU] = {.name = "gelu"},
    [LAYER_MAXPOOL] = {.name = "maxpool"},
    [LAYER_BATCHNORM] = {.name = "batchnorm", .flags = LAYER_FIXED_SCALE, .ntensors = 5,
        .tensors = {T("weight", SHAPE_CHANNELS, INIT_ONES, HOME_PARAMS, 0, LAYER_FIXED_SCALE),
                    T("bias", SHAPE_CHANNELS, INIT_ZEROS, HOME_PARAMS, 0, 0),
                    RUNNING("running_mean", INIT_ZEROS),
                    RUNNING("running_var", INIT_ONES),
                    T("num_batches_tracked", SHAPE_SCALAR, INIT_ZEROS, HOME_COUNTER, 0, 0)}},
    [LAYER_FLATTEN] = {.name = "flatten", .in_place = 1, .backward_in_place = 1},
    [LAYER_LINEAR] = {.name = "linear", .weighted = 1, .flags = LAYER_BIAS, .ntensors = 2,
                      .tensors = {T("weight", SHAPE_WEIGHT, INIT_FAN_IN, HOME_PARAMS, 0, 0),
                                  T("bias", SHAPE_CHANNELS, INIT_FAN_IN, HOME_PARAMS, LAYER_BIAS, 0)}},
};
#undef T
#undef RUNNING
/* clang-format on */

const struct layer_kind_props *layer_kind_props(enum layer_kind kind) { return &props[kind]; }

static const struct net_def *const known[] = {&net_workshop_cnn, &net_airbench94};

const struct net_def *net_find(const char *name) {
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(known[i]->name, name) == 0) return known[i];
    return NULL;
}

const struct net_def *net_known(int i) {
    return i >= 0 && (size_t)i < sizeof known / sizeof known[0] ? known[i] : NULL;
}

void net_known_names(char *buf, size_t size) {
    size_t at = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof known / sizeof known[0] && at < size; i++)
        at += (size_t)snprintf(buf + at, size - at, "%s%s", i ? ", " : "", known[i]->name);
}
