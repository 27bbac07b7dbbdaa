/* The networks, as data (see net.h). To add one: a layer list and a net_def here, its name in
 * net.c's registry, and its PyTorch twin in tests/torch_reference.py. */
#include "net.h"

#include "config.h"

/* clang-format off */
#define CONV3(prefix, width) \
    {.kind = LAYER_CONV, .name = prefix, .out = width, .k = 3, .pad = 1, .flags = LAYER_BIAS}
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
/* clang-format on */

/* The workshop's training: torch.optim.SGD on the mean cross-entropy, cosine schedule. */
/* clang-format off */
static const struct recipe workshop_recipe = {
    .epochs = 10, .batch_size = 128, .batch_scope = BATCH_PER_RANK,
    .learning_rate = 0.05, .units = UNITS_TORCH, .schedule = LR_COSINE, .warmup_epochs = 1.0,
    .momentum = 0.9, .weight_decay = 5e-4, .norm_lr_scale = 1.0,
    .loss = XENT_MEAN, .augment = AUGMENT_CROP_FLIP,
};
/* clang-format on */

const struct net_def net_workshop_cnn = {"workshop-cnn", 10,
                                         sizeof workshop_layers / sizeof workshop_layers[0], workshop_layers,
                                         &workshop_recipe};

/* airbench94 (K. Jordan, "94% on CIFAR-10 in 3.29 Seconds on a Single GPU", 2024,
 * legacy/airbench94.py's make_net), exactly as its
 *   nn.Sequential(0 Conv(3, 24, 2, padding=0, bias=True)  1 GELU
 *                 2 ConvGroup(24, 64)  3 ConvGroup(64, 256)  4 ConvGroup(256, 256)
 *                 5 MaxPool2d(3)  6 Flatten  7 Linear(256, 10, bias=False)  8 Mul(1/9))
 * with ConvGroup = conv1 (3x3, no bias) pool (MaxPool2d(2)) norm1 activ conv2 norm2 activ
 * (one GELU module used twice) and BatchNorm(eps 1e-12, momentum 1 - 0.6, weight frozen at 1).
 * Layer 0 is the whitening filter: frozen (model/whiten.c computes it), its bias starts at 0 and
 * trains. The
 * other convolutions start as dirac_ on their first in-channels outputs.
 * Shapes per image: 3x32x32 -> 24x31x31 -> 64x15x15 -> 256x7x7 -> 256x3x3 -> 256x1x1 -> 10. */
/* clang-format off */
#define GELU {.kind = LAYER_GELU}
#define GROUP_CONV(prefix, width) \
    {.kind = LAYER_CONV, .name = prefix, .out = width, .k = 3, .pad = 1, .flags = LAYER_DIRAC_INIT}
#define GROUP_BN(prefix) \
    {.kind = LAYER_BATCHNORM, .name = prefix, .flags = LAYER_FIXED_SCALE, .eps = 1e-12f, .momentum = 0.4f}
#define GROUP(n, width) GROUP_CONV(#n ".conv1", width), POOL2, GROUP_BN(#n ".norm1"), GELU, \
                        GROUP_CONV(#n ".conv2", width), GROUP_BN(#n ".norm2"), GELU
static const struct layer_def airbench94_layers[] = {
    {.kind = LAYER_CONV, .name = "0", .out = 24, .k = 2, .pad = 0,
     .flags = LAYER_BIAS | LAYER_FROZEN | LAYER_ZERO_BIAS},
    GELU,
    GROUP(2, 64),
    GROUP(3, 256),
    GROUP(4, 256),
    {.kind = LAYER_MAXPOOL, .k = 3},
    {.kind = LAYER_FLATTEN},
    {.kind = LAYER_LINEAR, .name = "7", .out = 10, .scale = 1.0f / 9.0f},
};
/* clang-format on */

/* legacy/airbench94.py's hyp: its lr and weight decay per 1024 images, decoupled (UNITS_AIRBENCH),
 * the batch-norm tensors at 64x the lr, Nesterov, label smoothing on the summed loss, lookahead,
 * the whitening filter of 5000 images with its bias trained for 3 epochs, TTA level 2. bf16
 * products under --precision auto (where they are faster: AMX tiles, bf16 tensor cores), as the
 * paper trains in half precision: they matched fp32's accuracy within seed noise on AMX tiles,
 * on AVX512_BF16 and on an H200 (docs/training.md, bf16). */
/* clang-format off */
static const struct recipe airbench94_recipe = {
    .epochs = 9.9, .batch_size = 1024, .batch_scope = BATCH_GLOBAL,
    .learning_rate = 11.5, .units = UNITS_AIRBENCH, .schedule = LR_TRIANGLE, .warmup_epochs = 1.0,
    .momentum = 0.85, .weight_decay = 0.0153, .nesterov = 1, .norm_lr_scale = 64.0,
    .label_smoothing = 0.2, .loss = XENT_SUM, .lookahead = 5, .whiten_images = 5000,
    .first_bias_epochs = 3, .augment = AUGMENT_ALTERNATING, .tta = 2, .bf16 = 1,
};
/* clang-format on */

const struct net_def net_airbench94 = {"airbench94", 10,
                                       sizeof airbench94_layers / sizeof airbench94_layers[0],
                                       airbench94_layers, &airbench94_recipe};
