#include "evaluate.h"

#include "../data/augment.h"

void evaluate_range(struct model *m, const struct cifar_set *set, int begin, int end, float *x,
                    int *labels, int *pred, long confusion[CIFAR_CLASSES][CIFAR_CLASSES]) {
    int idx[1024];
    for (int at = begin; at < end;) {
        int n = end - at;
        if (n > m->max_batch) n = m->max_batch;
        if (n > (int)(sizeof idx / sizeof idx[0])) n = (int)(sizeof idx / sizeof idx[0]);
        for (int i = 0; i < n; i++) idx[i] = at + i;
        augment_batch(set, idx, n, 0, 0, 0, x, labels);
        model_predict(m, x, n, pred, NULL);
        for (int i = 0; i < n; i++) confusion[labels[i]][pred[i]]++;
        at += n;
    }
}
