#include "test_nets.h"

#include <string.h>

/* Shapes per image: 3x32x32 -> 8x31x31 -> 12x31x31 -> 12x15x15 -> 16x15x15 -> 16x5x5 -> 400 -> 10 */
/* clang-format off */
#define GELU {.kind = LAYER_GELU}
#define BN_FIXED(prefix) \
    {.kind = LAYER_BATCHNORM, .name = prefix, .flags = LAYER_FIXED_SCALE, .eps = 1e-12f, .momentum = 0.4f}
static const struct layer_def test_layers[] = {
    {.kind = LAYER_CONV, .name = "0", .out = 8, .k = 2, .pad = 0, .flags = LAYER_BIAS | LAYER_FROZEN},
    GELU,
    {.kind = LAYER_CONV, .name = "2.conv1", .out = 12, .k = 3, .pad = 1},
    {.kind = LAYER_MAXPOOL, .k = 2},
    BN_FIXED("2.norm1"),
    GELU,
    {.kind = LAYER_CONV, .name = "2.conv2", .out = 16, .k = 3, .pad = 1},
    BN_FIXED("2.norm2"),
    GELU,
    {.kind = LAYER_MAXPOOL, .k = 3},
    {.kind = LAYER_FLATTEN},
    {.kind = LAYER_LINEAR, .name = "5", .out = 10, .scale = 1.0f / 9.0f},
};
/* clang-format on */

const struct net_def test_net = {"test-net", 10, sizeof test_layers / sizeof test_layers[0], test_layers,
                                 NULL};

const struct net_def *test_nets_find(const char *name) {
    return strcmp(name, test_net.name) == 0 ? &test_net : net_find(name);
}
