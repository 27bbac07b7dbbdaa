#include "augment.h"

#include "../common/rng.h"

const float augment_mean[CIFAR_CHANNELS] = {0.4914f, 0.4822f, 0.4465f};
const float augment_std[CIFAR_CHANNELS] = {0.2470f, 0.2435f, 0.2616f};

#define PAD 4

struct augment_choice augment_draw(uint64_t seed, int epoch, int index) {
    struct rng r = rng_make(seed, RNG_AUGMENT, (uint64_t)epoch, (uint64_t)index);
    struct augment_choice a;
    a.dy = (int)rng_below(&r, 2 * PAD + 1);
    a.dx = (int)rng_below(&r, 2 * PAD + 1);
    a.flip = (int)rng_below(&r, 2);
    return a;
}

void augment_geometry(const uint8_t *src, uint8_t *dst, struct augment_choice a) {
    for (int c = 0; c < CIFAR_CHANNELS; c++)
        for (int y = 0; y < CIFAR_SIDE; y++) {
            int sy = y + a.dy - PAD;
            uint8_t *d = dst + (c * CIFAR_SIDE + y) * CIFAR_SIDE;
            for (int x = 0; x < CIFAR_SIDE; x++) {
                int cx = a.flip ? CIFAR_SIDE - 1 - x : x; /* flip happens after the crop */
                int sx = cx + a.dx - PAD;
                int inside = sy >= 0 && sy < CIFAR_SIDE && sx >= 0 && sx < CIFAR_SIDE;
                d[x] = inside ? src[(c * CIFAR_SIDE + sy) * CIFAR_SIDE + sx] : 0;
            }
        }
}

void augment_normalize(const uint8_t *src, float *dst) {
    for (int c = 0; c < CIFAR_CHANNELS; c++) {
        float scale = 1.0f / (255.0f * augment_std[c]), shift = -augment_mean[c] / augment_std[c];
        for (int i = 0; i < CIFAR_SIDE * CIFAR_SIDE; i++)
            dst[c * CIFAR_SIDE * CIFAR_SIDE + i] = src[c * CIFAR_SIDE * CIFAR_SIDE + i] * scale + shift;
    }
}

void augment_batch(const struct cifar_set *set, const int *indices, int count, uint64_t seed,
                   int epoch, int augment, float *x, int *labels) {
#pragma omp parallel for schedule(static)
    for (int i = 0; i < count; i++) {
        int idx = indices[i];
        const uint8_t *img = cifar_pixels(set, idx);
        uint8_t tmp[CIFAR_IMAGE_BYTES];
        if (augment) {
            augment_geometry(img, tmp, augment_draw(seed, epoch, idx));
            img = tmp;
        }
        augment_normalize(img, x + (size_t)i * CIFAR_IMAGE_BYTES);
        labels[i] = cifar_label(set, idx);
    }
}
