#include "evaluate.h"

#include "../common/err.h"
#include "../data/augment.h"
#include "batches.h"

#include <stdlib.h>
#include <string.h>

/* One view of an image: its crop offsets and flip (input_prepare's geometry, 4,4 = as it is)
 * and the weight of its logits. */
struct view {
    int dx, dy, flip;
    float weight;
};

static const struct view level0[] = {{4, 4, 0, 1.0f}};
static const struct view level1[] = {{4, 4, 0, 0.5f}, {4, 4, 1, 0.5f}};
static const struct view level2[] = {{4, 4, 0, 0.25f},  {4, 4, 1, 0.25f},  {3, 3, 0, 0.125f},
                                     {3, 3, 1, 0.125f}, {5, 5, 0, 0.125f}, {5, 5, 1, 0.125f}};

/* The weighted logits of images idx[0..n) over the views of level tta, into sum[n][classes]. */
static void predict_views(struct model *m, struct batches *q, const struct cifar_set *set, const int *idx,
                          int n, int tta, int *pred, float *logits, float *sum) {
    static const struct view *const levels[] = {level0, level1, level2};
    static const int nviews[] = {1, 2, 6};
    size_t count = (size_t)n * m->net->classes;
    memset(sum, 0, count * sizeof(float));
    for (int v = 0; v < nviews[tta]; v++) {
        const struct view *view = &levels[tta][v];
        struct batch *b = batches_next(q);
        augment_gather(set, idx, n, 0, 0, AUGMENT_NONE, b->img, b->geom, b->labels);
        for (int i = 0; i < n; i++)
            b->geom[3 * i] = view->dx, b->geom[3 * i + 1] = view->dy, b->geom[3 * i + 2] = view->flip;
        b->reflect = 1;
        batches_submit(q, n);
        struct model_input in;
        int slot = batches_take(q, &in);
        model_predict(m, &in, pred, logits);
        batches_release(q, slot);
        for (size_t j = 0; j < count; j++) sum[j] += view->weight * logits[j];
    }
}

/* The images per batch of an evaluation: up to max_batch, at most 1024. */
static int chunk_of(const struct model *m) { return m->max_batch < 1024 ? m->max_batch : 1024; }

void evaluate_plan(struct model *m, int begin, int end) {
    int chunk = chunk_of(m), last = (end - begin) % chunk;
    if (chunk < m->max_batch && end - begin >= chunk) model_plan_batch(m, chunk); /* batches over 1024 */
    if (last > 0) model_plan_batch(m, last);
}

void evaluate_range(struct model *m, const struct cifar_set *set, int begin, int end, int tta, int *pred,
                    long confusion[CIFAR_CLASSES][CIFAR_CLASSES]) {
    CHECK(tta >= 0 && tta <= EVALUATE_TTA_MAX && m->net->classes == CIFAR_CLASSES);
    int idx[1024], classes = m->net->classes;
    int chunk = chunk_of(m);
    float *logits = XALLOC((size_t)chunk * classes * sizeof(float)),
          *sum = XALLOC((size_t)chunk * classes * sizeof(float));
    struct batches q;
    batches_init(&q, m->k, chunk);
    for (int at = begin; at < end;) {
        int n = end - at < chunk ? end - at : chunk;
        for (int i = 0; i < n; i++) idx[i] = at + i;
        predict_views(m, &q, set, idx, n, tta, pred, logits, sum);
        for (int i = 0; i < n; i++) {
            const float *z = sum + (size_t)i * classes;
            int arg = 0;
            for (int j = 1; j < classes; j++)
                if (z[j] > z[arg]) arg = j;
            confusion[cifar_label(set, at + i)][arg]++;
        }
        at += n;
    }
    batches_free(&q);
    free(logits), free(sum);
}

void evaluate_logits(struct model *m, const struct cifar_set *set, int begin, int end, int tta, float *out) {
    CHECK(tta >= 0 && tta <= EVALUATE_TTA_MAX);
    int idx[1024], classes = m->net->classes, chunk = chunk_of(m);
    float *logits = XALLOC((size_t)chunk * classes * sizeof(float));
    int *pred = XALLOC((size_t)chunk * sizeof(int));
    struct batches q;
    batches_init(&q, m->k, chunk);
    for (int at = begin; at < end;) {
        int n = end - at < chunk ? end - at : chunk;
        for (int i = 0; i < n; i++) idx[i] = at + i;
        predict_views(m, &q, set, idx, n, tta, pred, logits, out + (size_t)(at - begin) * classes);
        at += n;
    }
    batches_free(&q);
    free(logits), free(pred);
}
