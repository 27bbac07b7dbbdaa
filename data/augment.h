/* Input pipeline for one batch: augmentation and per-channel normalisation. Two kinds of
 * augmentation (enum augment_kind):
 *   - crop-flip (the workshop recipe): a random 32x32 crop of the image zero-padded by 4 pixels,
 *     then a random horizontal flip, as torchvision's RandomCrop(32, padding=4) +
 *     RandomHorizontalFlip;
 *   - alternating (airbench94): a random crop of the image reflect-padded by 2, and the
 *     "alternating flip": each image is flipped at random once for the whole run, and every odd
 *     epoch mirrors that choice (so over two epochs an image is seen both ways).
 * The random choices for an image are a pure function of (seed, epoch, index of the image in
 * the dataset), so they do not depend on the rank count or on which rank processes the image. This module
 * draws the choices and gathers raw pixels; the pixel work runs on the compute backend (input_prepare), so a
 * GPU receives 1 byte per pixel instead of 4. */
#ifndef DATA_AUGMENT_H
#define DATA_AUGMENT_H

#include "cifar.h"

#include <stdint.h>

/* Per-channel mean and std on the 0..1 pixel scale (the CIFAR-10 training-set statistics);
 * input = (pixel / 255 - mean[c]) / std[c]. Recorded in every model file. */
extern const float augment_mean[CIFAR_CHANNELS];
extern const float augment_std[CIFAR_CHANNELS];

enum augment_kind { AUGMENT_NONE, AUGMENT_CROP_FLIP, AUGMENT_ALTERNATING };

struct augment_choice {
    int dx, dy; /* crop offset into the 40x40 padded image, 0..8; 4, 4 is the identity */
    int flip;   /* 1: mirror left-right after cropping */
};

/* The choice for image `index` in `epoch`: the identity for AUGMENT_NONE; crop-flip offsets
 * 0..8; alternating offsets 2..6 (input_prepare's reflect padding). */
struct augment_choice augment_draw(enum augment_kind kind, uint64_t seed, int epoch, int index);

/* Whether the kind's crops read reflect padding (input_prepare's reflect), not zeros. */
int augment_reflects(enum augment_kind kind);

/* Fills img[count][3][32][32] (raw pixels), geom[count][3] = {dx, dy, flip} and labels[count]
 * for images indices[0..count) of set: the input of struct kernels' input_prepare, with
 * geom = augment_draw(kind, seed, epoch, index). */
void augment_gather(const struct cifar_set *set, const int *indices, int count, uint64_t seed, int epoch,
                    enum augment_kind kind, unsigned char *img, int *geom, int *labels);

/* The normalisation as input_prepare takes it: pixel * scale[c] + shift[c] with
 * scale = 1 / (255 std[c]) and shift = -mean[c] / std[c]. */
void augment_scale_shift(float scale[CIFAR_CHANNELS], float shift[CIFAR_CHANNELS]);

#endif
