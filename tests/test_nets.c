#include "test_nets.h"

#include <string.h>

/* Shapes per image: 3x32x32 -> 8x31x31 -> 12x31x31 -> 12x15x15 -> 16x15x15 -> 16x5x5 -> 400 -> 10 */
static const struct layer_def test_layers[] = {
    {LAYER_CONV, "0", 8, 2, 0, LAYER_BIAS | LAYER_FROZEN, 0, 0, 0},
    {LAYER_GELU, 0, 0, 0, 0, 0, 0, 0, 0},
    {LAYER_CONV, "2.conv1", 12, 3, 1, 0, 0, 0, 0},
    {LAYER_MAXPOOL, 0, 0, 2, 0, 0, 0, 0, 0},
    {LAYER_BATCHNORM, "2.norm1", 0, 0, 0, LAYER_FIXED_SCALE, 0, 1e-12f, 0.4f},
    {LAYER_GELU, 0, 0, 0, 0, 0, 0, 0, 0},
    {LAYER_CONV, "2.conv2", 16, 3, 1, 0, 0, 0, 0},
    {LAYER_BATCHNORM, "2.norm2", 0, 0, 0, LAYER_FIXED_SCALE, 0, 1e-12f, 0.4f},
    {LAYER_GELU, 0, 0, 0, 0, 0, 0, 0, 0},
    {LAYER_MAXPOOL, 0, 0, 3, 0, 0, 0, 0, 0},
    {LAYER_FLATTEN, 0, 0, 0, 0, 0, 0, 0, 0},
    {LAYER_LINEAR, "5", 10, 0, 0, 0, 1.0f / 9.0f, 0, 0},
};

const struct net_def test_net = {"test-net", 10, sizeof test_layers / sizeof test_layers[0], test_layers};

const struct net_def *test_nets_find(const char *name) {
    return strcmp(name, test_net.name) == 0 ? &test_net : net_find(name);
}
