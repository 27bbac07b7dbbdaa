/* The networks, as data (see net.h). To add one: a layer list and a net_def here, its name in
 * net.c's registry, and its PyTorch twin in tests/torch_reference.py. */
#include "net.h"

#define CONV3(prefix, width) {.kind = LAYER_CONV, .name = prefix, .out = width, .k = 3, .pad = 1, .flags = LAYER_BIAS}
#define RELU {.kind = LAYER_RELU}
#define POOL2 {.kind = LAYER_MAXPOOL, .k = 2}
#define BN(prefix) {.kind = LAYER_BATCHNORM, .name = prefix, .eps = 1e-5f, .momentum = 0.1f}
#define LINEAR(prefix, width) {.kind = LAYER_LINEAR, .name = prefix, .out = width, .flags = LAYER_BIAS}

/* The workshop CNN, exactly as PyTorch's
 *   network = nn.Sequential(
 *     0 Conv2d(3, 32, 3, padding=1)   1 ReLU  2 Conv2d(32, 64, 3, padding=1)    3 ReLU
 *     4 MaxPool2d(2)   5 BatchNorm2d(64)
 *     6 Conv2d(64, 128, 3, padding=1) 7 ReLU  8 Conv2d(128, 128, 3, padding=1)  9 ReLU
 *     10 MaxPool2d(2)  11 BatchNorm2d(128)
 *     12 Conv2d(128, 256, 3, padding=1) 13 ReLU 14 Conv2d(256, 256, 3, padding=1) 15 ReLU
 *     16 MaxPool2d(2)  17 BatchNorm2d(256)
 *     18 Flatten  19 Linear(4096, 512)  20 ReLU  21 Linear(512, 10))
 * Shapes per image: 3x32x32 -> 64x16x16 -> 128x8x8 -> 256x4x4 -> 4096 -> 512 -> 10. */
static const struct layer_def workshop_layers[] = {
    CONV3("network.0", 32),   RELU, CONV3("network.2", 64),   RELU, POOL2, BN("network.5"),
    CONV3("network.6", 128),  RELU, CONV3("network.8", 128),  RELU, POOL2, BN("network.11"),
    CONV3("network.12", 256), RELU, CONV3("network.14", 256), RELU, POOL2, BN("network.17"),
    {.kind = LAYER_FLATTEN},  LINEAR("network.19", 512), RELU, LINEAR("network.21", 10),
};

const struct net_def net_workshop_cnn = {"workshop-cnn", 10, sizeof workshop_layers / sizeof workshop_layers[0],
                                         workshop_layers};
