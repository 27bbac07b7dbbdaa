/* Eval-mode scoring of a range of a dataset, shared by cifar10-train (per-epoch test accuracy,
 * each rank a slice) and cifar10-test. */
#ifndef APP_EVALUATE_H
#define APP_EVALUATE_H

#include "../data/cifar.h"
#include "model.h"

/* Adds to confusion[true][predicted] the predictions for images [begin, end) of set, in
 * batches of up to min(m->max_batch, 1024); pred: [max_batch] ints of host scratch. Needs no
 * batch of m submitted and leaves none. */
void evaluate_range(struct model *m, const struct cifar_set *set, int begin, int end, int *pred,
                    long confusion[CIFAR_CLASSES][CIFAR_CLASSES]);

#endif
