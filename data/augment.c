#include "augment.h"

#include "../common/rng.h"

#include <string.h>

const float augment_mean[CIFAR_CHANNELS] = {0.4914f, 0.4822f, 0.4465f};
const float augment_std[CIFAR_CHANNELS] = {0.2470f, 0.2435f, 0.2616f};

#define PAD 4

/* airbench94's crop: up to 2 pixels each way. */
#define TRANSLATE 2

struct augment_choice augment_draw(enum augment_kind kind, uint64_t seed, int epoch, int index) {
    struct augment_choice a = {PAD, PAD, 0};
    struct rng r = rng_make(seed, RNG_AUGMENT, (uint64_t)epoch, (uint64_t)index);
    if (kind == AUGMENT_CROP_FLIP) {
        a.dy = (int)rng_below(&r, 2 * PAD + 1);
        a.dx = (int)rng_below(&r, 2 * PAD + 1);
        a.flip = (int)rng_below(&r, 2);
    } else if (kind == AUGMENT_ALTERNATING) {
        a.dy = PAD - TRANSLATE + (int)rng_below(&r, 2 * TRANSLATE + 1);
        a.dx = PAD - TRANSLATE + (int)rng_below(&r, 2 * TRANSLATE + 1);
        /* the run's flip of this image: a stream of its own with no epoch in it */
        struct rng once = rng_make(seed, RNG_FLIP, (uint64_t)index, 0);
        a.flip = (int)rng_below(&once, 2) ^ (epoch & 1);
    }
    return a;
}

int augment_reflects(enum augment_kind kind) { return kind == AUGMENT_ALTERNATING; }

void augment_gather(const struct cifar_set *set, const int *indices, int count, uint64_t seed, int epoch,
                    enum augment_kind kind, unsigned char *img, int *geom, int *labels) {
    for (int i = 0; i < count; i++) {
        int idx = indices[i];
        memcpy(img + (size_t)i * CIFAR_IMAGE_BYTES, cifar_pixels(set, idx), CIFAR_IMAGE_BYTES);
        struct augment_choice a = augment_draw(kind, seed, epoch, idx);
        geom[3 * i] = a.dx, geom[3 * i + 1] = a.dy, geom[3 * i + 2] = a.flip;
        labels[i] = cifar_label(set, idx);
    }
}

void augment_scale_shift(float scale[CIFAR_CHANNELS], float shift[CIFAR_CHANNELS]) {
    for (int c = 0; c < CIFAR_CHANNELS; c++) {
        scale[c] = 1.0f / (255.0f * augment_std[c]);
        shift[c] = -augment_mean[c] / augment_std[c];
    }
}
