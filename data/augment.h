/* Input pipeline for one batch: augmentation (random 32x32 crop of the image zero-padded by 4
 * pixels, then random horizontal flip, as torchvision's RandomCrop(32, padding=4) +
 * RandomHorizontalFlip) and per-channel normalisation. The random choices for an image are a
 * pure function of (seed, epoch, index of the image in the dataset), so they do not depend on
 * the rank count or on which rank processes the image. This module draws the choices and
 * gathers raw pixels; the pixel work runs on the compute backend (input_prepare), so a GPU
 * receives 1 byte per pixel instead of 4. */
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

/* Fills img[count][3][32][32] (raw pixels), geom[count][3] = {dx, dy, flip} and labels[count]
 * for images indices[0..count) of set: the input of struct kernels' input_prepare. geom is the
 * identity (4, 4, 0) when augment is zero, else augment_draw(seed, epoch, index). */
void augment_gather(const struct cifar_set *set, const int *indices, int count, uint64_t seed,
                    int epoch, int augment, unsigned char *img, int *geom, int *labels);

/* The normalisation as input_prepare takes it: pixel * scale[c] + shift[c] with
 * scale = 1 / (255 std[c]) and shift = -mean[c] / std[c]. */
void augment_scale_shift(float scale[CIFAR_CHANNELS], float shift[CIFAR_CHANNELS]);

#endif
