#include "evaluate.h"

#include "../data/augment.h"

void evaluate_range(struct model *m, const struct cifar_set *set, int begin, int end, int *pred,
                    long confusion[CIFAR_CLASSES][CIFAR_CLASSES]) {
    int idx[1024];
    for (int at = begin; at < end;) {
        int n = end - at;
        if (n > m->max_batch) n = m->max_batch;
        if (n > (int)(sizeof idx / sizeof idx[0])) n = (int)(sizeof idx / sizeof idx[0]);
        for (int i = 0; i < n; i++) idx[i] = at + i;
        struct batch *b = model_batch_next(m);
        augment_gather(set, idx, n, 0, 0, 0, b->img, b->geom, b->labels);
        model_batch_submit(m, n);
        model_predict(m, pred, NULL);
        for (int i = 0; i < n; i++) confusion[b->labels[i]][pred[i]]++;
        at += n;
    }
}
