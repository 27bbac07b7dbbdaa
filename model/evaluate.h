/* Eval-mode scoring of a range of a dataset, shared by cifar10-train (per-epoch and final test
 * accuracy, each rank a slice) and cifar10-test, with airbench's test-time augmentation:
 *   level 0: the image as it is;
 *   level 1: the mean of the logits of the image and its mirror image;
 *   level 2: 1/2 of level 1, plus 1/4 each of level 1 on the image translated by one pixel
 *            up-left and by one pixel down-right (reflect padding: F.pad(x, (1,)*4, 'reflect')
 *            cropped at [0:32, 0:32] and [2:34, 2:34]), i.e. six views weighted
 *            1/4, 1/4, 1/8, 1/8, 1/8, 1/8 (legacy/airbench94.py's infer_mirror_translate).
 * The prediction is the argmax of the weighted logits (the first maximum on ties). */
#ifndef MODEL_EVALUATE_H
#define MODEL_EVALUATE_H

#include "../data/cifar.h"
#include "model.h"

#define EVALUATE_TTA_MAX 2

/* Adds to confusion[true][predicted] the predictions for images [begin, end) of set at TTA
 * level tta (0..EVALUATE_TTA_MAX), in batches of up to min(m->max_batch, 1024). The batches
 * are its own (model/batches.h); each batch's images go up once, its views' logits are summed
 * on the device (kernels.h logits_add, in view order) and come down once. */
void evaluate_range(struct model *m, const struct cifar_set *set, int begin, int end, int tta,
                    long confusion[CIFAR_CLASSES][CIFAR_CLASSES]);

/* Plans (model_plan_batch) the batch sizes evaluate_range meets on images [begin, end) that
 * model_init has not: its last chunk's, and 1024 when max_batch is larger. */
void evaluate_plan(struct model *m, int begin, int end);

/* The TTA-weighted logits of images [begin, end) of set into logits[end - begin][classes], in
 * batches as evaluate_range. */
void evaluate_logits(struct model *m, const struct cifar_set *set, int begin, int end, int tta,
                     float *logits);

#endif
