/* Input pipeline for one batch: augmentation (random 32x32 crop of the image zero-padded by 4
 * pixels, then random horizontal flip, as torchvision's RandomCrop(32, padding=4) +
 * RandomHorizontalFlip) and per-channel normalisation. The random choices for an image are a
 * pure function of (seed, epoch, index of the image in the dataset), so they do not depend on
 * the rank count or on which rank processes the image. */
#ifndef DATA_AUGMENT_H
#define DATA_AUGMENT_H

#include "cifar.h"

#include <stdint.h>

/* Per-channel mean and std on the 0..1 pixel scale (the CIFAR-10 training-set statistics);
 * input = (pixel / 255 - mean[c]) / std[c]. Recorded in every model file. */
extern const float augment_mean[CIFAR_CHANNELS];
extern const float augment_std[CIFAR_CHANNELS];

struct augment_choice {
    int dx, dy; /* crop offset into the 40x40 padded image, 0..8; 4, 4 is the identity */
    int flip;   /* 1: mirror left-right after cropping */
};

struct augment_choice augment_draw(uint64_t seed, int epoch, int index);

/* dst[3][32][32] = the crop/flip of src[3][32][32]; pixels from the padding are 0. */
void augment_geometry(const uint8_t *src, uint8_t *dst, struct augment_choice a);

/* dst[3][32][32] = (src / 255 - mean[c]) / std[c]. */
void augment_normalize(const uint8_t *src, float *dst);

/* Builds x[count][3][32][32] and labels[count] from images indices[0..count) of set, augmented
 * with (seed, epoch) when augment is non-zero. Threads over images. */
void augment_batch(const struct cifar_set *set, const int *indices, int count, uint64_t seed,
                   int epoch, int augment, float *x, int *labels);

#endif
