/* The networks, as data (see net.h). To add one: a layer list and a net_def here, its name in
 * net.c's registry, and its PyTorch twin in tests/torch_reference.py. */
#include "net.h"

/* The workshop CNN, exactly as PyTorch's
 *   network = nn.Sequential(
 *     0 Conv2d(3, 32, 3, padding=1)   1 ReLU  2 Conv2d(32, 64, 3, padding=1)    3 ReLU
 *     4 MaxPool2d(2)   5 BatchNorm2d(64)
 *     6 Conv2d(64, 128, 3, padding=1) 7 ReLU  8 Conv2d(128, 128, 3, padding=1)  9 ReLU
 *     10 MaxPool2d(2)  11 BatchNorm2d(128)
 *     12 Conv2d(128, 256, 3, padding=1) 13 ReLU 14 Conv2d(256, 256, 3, padding=1) 15 ReLU
 *     16 MaxPool2d(2)  17 BatchNorm2d(256)
 *     18 Flatten  19 Linear(4096, 512)  20 ReLU  21 Linear(512, 10)) */
#define CONV3(name, out) {LAYER_CONV, name, out, 3, 1, LAYER_BIAS, 0, 0, 0}
#define RELU {LAYER_RELU, 0, 0, 0, 0, 0, 0, 0, 0}
#define POOL2 {LAYER_MAXPOOL, 0, 0, 2, 0, 0, 0, 0, 0}
#define BN(name) {LAYER_BATCHNORM, name, 0, 0, 0, 0, 0, 1e-5f, 0.1f}
static const struct layer_def workshop_layers[] = {
    CONV3("network.0", 32),   RELU, CONV3("network.2", 64),   RELU, POOL2, BN("network.5"),
    CONV3("network.6", 128),  RELU, CONV3("network.8", 128),  RELU, POOL2, BN("network.11"),
    CONV3("network.12", 256), RELU, CONV3("network.14", 256), RELU, POOL2, BN("network.17"),
    {LAYER_FLATTEN, 0, 0, 0, 0, 0, 0, 0, 0},
    {LAYER_LINEAR, "network.19", 512, 0, 0, LAYER_BIAS, 0, 0, 0},
    RELU,
    {LAYER_LINEAR, "network.21", 10, 0, 0, LAYER_BIAS, 0, 0, 0},
};

const struct net_def net_workshop_cnn = {"workshop-cnn", 10, sizeof workshop_layers / sizeof workshop_layers[0],
                                         workshop_layers};
