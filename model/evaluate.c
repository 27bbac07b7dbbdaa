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

/* The views of a TTA level on the device (each view's geometry, the same for every image of a
 * chunk, uploaded once) and the weighted sum of a chunk's logits there, so a chunk costs one
 * upload of its images and one download of its sums however many views it has. */
struct scorer {
    struct model *m;
    struct batches q;
    int chunk, nviews;
    const struct view *views;
    int *geom[sizeof level2 / sizeof level2[0]]; /* per view, [chunk][3] (device) */
    float *sum;                                  /* [chunk][classes] (device) */
};

/* The images per batch of an evaluation: up to max_batch, at most 1024. */
static int chunk_of(const struct model *m) { return m->max_batch < 1024 ? m->max_batch : 1024; }

static void scorer_init(struct scorer *s, struct model *m, int tta) {
    static const struct view *const levels[] = {level0, level1, level2};
    static const int nviews[] = {1, 2, 6};
    CHECK(tta >= 0 && tta <= EVALUATE_TTA_MAX);
    const struct kernels *k = m->k;
    *s = (struct scorer){.m = m, .chunk = chunk_of(m), .nviews = nviews[tta], .views = levels[tta]};
    batches_init(&s->q, k, s->chunk);
    int *g = XALLOC((size_t)s->chunk * 3 * sizeof(int));
    for (int v = 0; v < s->nviews; v++) {
        for (int i = 0; i < s->chunk; i++)
            g[3 * i] = s->views[v].dx, g[3 * i + 1] = s->views[v].dy, g[3 * i + 2] = s->views[v].flip;
        s->geom[v] = k->alloc((size_t)s->chunk * 3 * sizeof(int));
        k->upload(s->geom[v], g, (size_t)s->chunk * 3 * sizeof(int));
    }
    free(g);
    s->sum = k->alloc((size_t)s->chunk * m->net->classes * sizeof(float));
}

static void scorer_free(struct scorer *s) {
    for (int v = 0; v < s->nviews; v++) s->m->k->free(s->geom[v]);
    s->m->k->free(s->sum);
    batches_free(&s->q);
}

/* Gathers images [at, at + n) of set into the next slot of the queue and starts its upload. */
static void scorer_submit(struct scorer *s, const struct cifar_set *set, int at, int n) {
    int idx[1024];
    for (int i = 0; i < n; i++) idx[i] = at + i;
    struct batch *b = batches_next(&s->q);
    augment_gather(set, idx, n, 0, 0, AUGMENT_NONE, b->img, b->geom, b->labels);
    batches_submit(&s->q, n);
}

/* Issues the views' forwards of the oldest submitted chunk (n images) and their weighted sum
 * into s->sum, in view order. */
static void scorer_views(struct scorer *s, int n) {
    const struct kernels *k = s->m->k;
    struct model_input in;
    int slot = batches_take(&s->q, &in);
    for (int v = 0; v < s->nviews; v++) {
        struct model_input view = in;
        view.geom = s->geom[v], view.reflect = 1;
        const void *z = model_logits(s->m, &view);
        k->logits_add(z, s->sum, (size_t)n * s->m->net->classes, s->views[v].weight, v > 0);
    }
    batches_release(&s->q, slot);
}

/* The weighted logits of images [begin, end) of set at level tta: into logits[end - begin]
 * [classes] when not NULL, and their argmax (the first maximum) counted in confusion[true]
 * [predicted] when not NULL. The host gathers and uploads chunk c + 1 while the device
 * computes chunk c. */
static void score(struct model *m, const struct cifar_set *set, int begin, int end, int tta, float *logits,
                  long confusion[CIFAR_CLASSES][CIFAR_CLASSES]) {
    struct scorer s;
    scorer_init(&s, m, tta);
    int classes = m->net->classes;
    float *host = XALLOC((size_t)s.chunk * classes * sizeof(float));
    if (begin < end) scorer_submit(&s, set, begin, end - begin < s.chunk ? end - begin : s.chunk);
    for (int at = begin, n; at < end; at += n) {
        n = end - at < s.chunk ? end - at : s.chunk;
        scorer_views(&s, n);
        int next = at + n, next_n = end - next < s.chunk ? end - next : s.chunk;
        if (next_n > 0) scorer_submit(&s, set, next, next_n);
        float *z = logits ? logits + (size_t)(at - begin) * classes : host;
        m->k->download(z, s.sum, (size_t)n * classes * sizeof(float));
        for (int i = 0; i < n && confusion; i++) {
            const float *zi = z + (size_t)i * classes;
            int arg = 0;
            for (int j = 1; j < classes; j++)
                if (zi[j] > zi[arg]) arg = j;
            confusion[cifar_label(set, at + i)][arg]++;
        }
    }
    free(host);
    scorer_free(&s);
}

void evaluate_plan(struct model *m, int begin, int end) {
    int chunk = chunk_of(m), last = (end - begin) % chunk;
    if (chunk < m->max_batch && end - begin >= chunk) model_plan_batch(m, chunk); /* batches over 1024 */
    if (last > 0) model_plan_batch(m, last);
}

void evaluate_range(struct model *m, const struct cifar_set *set, int begin, int end, int tta,
                    long confusion[CIFAR_CLASSES][CIFAR_CLASSES]) {
    CHECK(m->net->classes == CIFAR_CLASSES);
    score(m, set, begin, end, tta, NULL, confusion);
}

void evaluate_logits(struct model *m, const struct cifar_set *set, int begin, int end, int tta, float *out) {
    score(m, set, begin, end, tta, out, NULL);
}
