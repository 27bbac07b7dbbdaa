/* Eval-mode scoring of a range of a dataset, shared by cifar10-train (per-epoch test accuracy,
 * each rank a slice) and cifar10-test. */
#ifndef APP_EVALUATE_H
#define APP_EVALUATE_H

#include "../data/cifar.h"
#include "model.h"

/* Adds to confusion[true][predicted] the predictions for images [begin, end) of set, in
 * batches of up to m->max_batch. x: [max_batch][3072] floats and labels: [max_batch] ints of
 * host scratch; pred: [max_batch] ints. */
void evaluate_range(struct model *m, const struct cifar_set *set, int begin, int end, float *x,
                    int *labels, int *pred, long confusion[CIFAR_CLASSES][CIFAR_CLASSES]);

#endif
