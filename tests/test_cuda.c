/* Whole models on the CUDA backend against the CPU backend (every op of both is tested against
 * double precision in test_ops), for workshop-cnn and the test network (and airbench94 where
 * named):
 *   - batch 32: a 200-step run whose losses must track the CPU run's (and its first step's loss
 *     and gradients), and two 20-step GPU runs, one consuming each batch right after submitting
 *     it and one with the input pipeline overlapping compute as in training, that must agree
 *     bit for bit;
 *   - lock-step runs at batch 1, 127 and 512 and with partial batches after full ones (127, 100,
 *     127 images on a model for 127, then scoring 127 and 27: the GPU plans the convolutions of
 *     100 and 27 images mid-run), and 4 steps of batch 64 under airbench94's recipe (also on
 *     airbench94 itself: reflect-padded crops and the alternating flip, label smoothing on the
 *     summed loss, Nesterov SGD with the batch-norm group, lookahead, the first bias stopped
 *     mid-run): after every step the GPU model takes the CPU model's state (and lookahead
 *     averages), so each step is compared from the same state; then both score the same weights;
 *   - checkpoints written from one device and scored on the other (airbench94 too);
 *   - with two GPUs visible, a step on GPU 1 against the same step on GPU 0.
 * Every gradient comparison covers the convolution backward with dx both through a ReLU mask
 * (a convolution after a ReLU: workshop-cnn's network.2, .8, .14) and without one (after batch
 * norm or GELU: network.6, .12; test-net's 2.conv1, 2.conv2). Needs a GPU; without one (or in
 * a CUDA=0 build) it prints "skipped: no GPU" and passes nothing.
 *
 * Usage: test_cuda [--tf32 | --bf16] [--graphs] (--graphs: only the graph tests, for the CPU
 * emulation of the backend, tests/cudaemu.sh, where the whole test takes minutes). By default TF32 is off
 * (NVIDIA_TF32_OVERRIDE=0, set before CUDA starts: cuDNN reads it then), so both sides compute in FP32 and
 * differ only in summation order. --tf32 leaves cuDNN its default math, as training runs: on Ampere and newer
 * the convolutions use TF32 tensor cores, whose inputs keep a 10-bit mantissa (about 1e-3 relative per
 * product; the linear layers stay FP32). --bf16 runs everything on cuda-bf16 (bf16 activations) against its
 * CPU twin cpu-bf16-act, where the GPU has bf16 tensor cores.
 *
 * Tolerances, GPU against CPU from the same state (relative L2 error), FP32 / TF32:
 *   loss of a step: 1e-5 / 2e-3;
 *   logits of one model, running statistics after a step: 1e-5 / 1e-2;
 *   predictions: equal, except where the top two logits are within the logits tolerance;
 *   gradients of a step: 5e-2 / 0.3. Gradients are not continuous in the arithmetic: a change
 *     in the last bits flips near-ties of a max pool (which element gets the gradient; exact
 *     ties too, in windows over a crop's zero padding) and ReLU masks, and each flip moves a
 *     whole contribution, in every layer below it: one winner of workshop-cnn's last pool
 *     flipped in a step of batch 1 moved its gradients 2.05e-2 (the CPU emulation of this
 *     backend, tests/cudaemu, whose operands round like neither the GPU nor the CPU);
 *   weights after a step, lookahead averages: 6e-4 / 1e-2 (lr times the gradients' difference:
 *     2.35e-4 after that flip);
 *   momentum: the gradients' tolerance.
 * Measured by emulation on the CPU backend (convolution inputs rounded to 22 bits for FP32's
 * other summation order, truncated to 10 for TF32), worst over batches of 1, 32, 127 and 512
 * and up to 4 sets of images: loss 1.1e-6 / 4.4e-4, logits 2.4e-7 / 2.3e-3, gradients
 * 4.9e-3 / 0.099 (2.5e-6 in FP32 where nothing flipped), weights 7.6e-6 / 9.1e-4.
 * Steps that follow each other on each device instead compound those differences: after 3
 * steps of batch 1 the weights were 2.1e-2 apart in TF32, and within 60 to 100 steps two runs
 * that round differently are different SGD trajectories. So the 200 steps (at lr 0.005; at 0.02
 * workshop-cnn's loss climbs back to 2.2 within 40 steps and such runs part at once) check the
 * mean loss of steps 1-20 and 21-40 within 5 % / 10 % of the CPU's (measured up to 1.2 % /
 * 2.8 %) and the GPU's mean of the last 20 steps at most twice the CPU's (measured 0.82 to 1.38
 * times).
 * bf16 (--bf16), stated before any GPU ran it: both sides round every activation to bf16 and
 * multiply bf16 operands, but the CPU's convolutions are Winograd F(2x2) on bf16-rounded
 * transforms where cuDNN multiplies x and w directly (5e-3 apart per convolution in test_ops),
 * so each rounding of an activation can land on the other side of a bf16 step and every max
 * pool near-tie can flip: loss 1e-2, logits 5e-2, gradients 0.5, weights 3e-2, course 0.10.
 * On the CPU, bf16 activations against float moved a first step's loss 2.3e-4, the logits
 * 1.3e-2 and the gradients 0.22 (test_model).
 * Exact: two GPU runs in one process (deterministic algorithms, fixed reduction orders), either
 * precision. GPU 1 against GPU 0 takes the GPU-against-CPU tolerances: each GPU times its own
 * cuDNN algorithms. */
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/cifar.h"
#include "../io/checkpoint.h"
#include "../kernels/kernels.h"
#include "../model/batches.h"
#include "../model/model.h"
#include "check.h"
#include "test_nets.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --graphs: only the graph tests (test_graphs, every network), for the CPU emulation of the
 * backend (tests/cudaemu.sh), where the whole test takes about 9 minutes. */
static int graphs_only;

/* The precision tested: 0 FP32, 1 TF32 (--tf32), 2 bf16 (--bf16); -1 for anything else. */
static int parse_mode(int argc, char **argv) {
    int mode = 0, bad = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--graphs") == 0 && !graphs_only) graphs_only = 1;
        else if (strcmp(argv[i], "--tf32") == 0 && mode == 0) mode = 1;
        else if (strcmp(argv[i], "--bf16") == 0 && mode == 0) mode = 2;
        else bad = 1;
    }
    if (!bad) return mode;
    fprintf(stderr, "usage: test_cuda [--tf32 | --bf16] [--graphs]\n");
    return -1;
}

#if CIFAR10_CUDA

struct tolerances {
    double loss, logits, grads, weights, course;
};
static const struct tolerances fp32_tol = {1e-5, 1e-5, 5e-2, 6e-4, 0.05},
                               tf32_tol = {2e-3, 1e-2, 0.3, 1e-2, 0.10},
                               bf16_tol = {1e-2, 5e-2, 0.5, 3e-2, 0.10};
static const struct tolerances *tol = &fp32_tol;

static const struct kernels *cpu, *gpu;
/* The GPU table of the mode: kernels_cuda, or kernels_cuda_bf16 with --bf16. */
static const struct kernels *(*gpu_table)(int device) = kernels_cuda;

/* Small enough that 200 steps of workshop-cnn descend smoothly: at 0.02 its loss climbs back
 * to 2.2 within 40 steps, and runs that round differently part at once. */
#define LR 0.005f

static float *fnew(size_t n) { return XALLOC(n * sizeof(float)); }

/* Fills q's next batch with images first, first+1, ... (mod set->n) of set, n of them,
 * augmented (seed 3) as `augment` says, and submits it. */
static void submit(struct batches *q, const struct cifar_set *set, int first, int n,
                   enum augment_kind augment, int epoch) {
    int *idx = XALLOC((size_t)n * sizeof(int));
    for (int i = 0; i < n; i++) idx[i] = (first + i) % set->n;
    struct batch *b = batches_next(q);
    augment_gather(set, idx, n, 3, epoch, augment, b->img, b->geom, b->labels);
    b->reflect = augment_reflects(augment);
    batches_submit(q, n);
    free(idx);
}

static void submit_step(struct batches *q, const struct cifar_set *set, int B, int step) {
    submit(q, set, step * B, B, AUGMENT_CROP_FLIP, step / 8);
}

/* What a training run leaves on the host; NULL: not wanted. */
struct run {
    float *losses;  /* [steps] */
    float *grads0;  /* [P] the first step's gradients */
    float *params;  /* [P] after the last step */
    float *buffers; /* [S] after the last step */
};

/* `steps` SGD steps of `net` with batch B from seed 11 on k. Without overlap each batch is
 * consumed right after its submission; with it, as in training, step s+1's batch is gathered
 * and submitted (its upload under way) while step s computes: submitted before
 * model_forward_backward(s) on even steps (two batches queued when it takes the oldest), after
 * it on odd ones (one queued, train.c's order). */
static void train_run(const struct net_def *net, const struct kernels *k, const struct cifar_set *set, int B,
                      int steps, int overlap, const struct run *out) {
    struct model m;
    struct batches q;
    model_init(&m, net, k, B, 11);
    batches_init(&q, k, B);
    size_t P = m.nparams;
    if (overlap) submit_step(&q, set, B, 0);
    for (int s = 0; s < steps; s++) {
        int ahead = overlap && s + 1 < steps;
        if (!overlap) submit_step(&q, set, B, s);
        if (ahead && s % 2 == 0) submit_step(&q, set, B, s + 1);
        check_forward_backward(&m, &q);
        if (ahead && s % 2 == 1) submit_step(&q, set, B, s + 1);
        float stats[2];
        k->download(stats, m.grads + P, sizeof stats);
        if (out->losses) out->losses[s] = stats[0];
        if (s == 0 && out->grads0) k->download(out->grads0, m.grads, P * sizeof(float));
        model_sgd_step(&m, LR, 0.9f, 5e-4f, 1.0f);
    }
    model_get_state(&m, out->params, NULL, out->buffers);
    batches_free(&q);
    model_free(&m);
}

/* Parameter and buffer floats of net. */
static void sizes_of(const struct net_def *net, size_t *P, size_t *S) {
    struct model m;
    model_init(&m, net, cpu, 1, 0);
    *P = m.nparams, *S = m.nbuffers;
    model_free(&m);
}

/* Predictions pred[n] against ref_pred[n], the argmax of ref_logits[n][classes]: how many
 * differ where the reference's logits of the two classes are further apart than the logits
 * tolerance of that image's largest |logit| (nearer, rounding may break the tie either way). */
static int clear_disagreements(const int *pred, const int *ref_pred, const float *ref_logits, int n,
                               int classes) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const float *z = ref_logits + (size_t)i * classes;
        float top = 0;
        for (int j = 0; j < classes; j++) top = fmaxf(top, fabsf(z[j]));
        bad += pred[i] != ref_pred[i] && z[ref_pred[i]] - z[pred[i]] > tol->logits * top;
    }
    return bad;
}

/* a[n] within t of ref[n] (relative L2 error). */
static void expect_close(const char *what, const char *quantity, const float *a, const float *ref, size_t n,
                         double t) {
    double e = check_rel_l2f(a, ref, n);
    EXPECT(e <= t, "%s: %s: rel err %.3g, tolerance %g", what, quantity, e, t);
}

/* One model scored on two devices: logits[n][classes] and pred[n] against the reference's. */
static void expect_same_scores(const char *what, const float *logits, const float *ref_logits,
                               const int *pred, const int *ref_pred, int n, int classes) {
    expect_close(what, "logits", logits, ref_logits, (size_t)n * classes, tol->logits);
    int bad = clear_disagreements(pred, ref_pred, ref_logits, n, classes);
    EXPECT(bad == 0, "%s: %d predictions differ", what, bad);
}

static double mean_of(const float *x, int n) {
    double sum = 0;
    for (int i = 0; i < n; i++) sum += x[i];
    return sum / n;
}

/* The losses of two runs of `steps` (see the top): close in the first 40 steps, and the GPU run
 * learning as the CPU run does by the end. */
static void expect_course(const struct net_def *net, const float *lc, const float *lg, int steps) {
    double c0 = mean_of(lc, 20), c1 = mean_of(lc + 20, 20), cl = mean_of(lc + steps - 20, 20);
    double g0 = mean_of(lg, 20), g1 = mean_of(lg + 20, 20), gl = mean_of(lg + steps - 20, 20);
    printf("test_cuda: %s, %d steps, mean loss of steps 1-20, 21-40 and the last 20: CPU %.4f %.4f %.4f, GPU "
           "%.4f %.4f %.4f\n",
           net->name, steps, c0, c1, cl, g0, g1, gl);
    EXPECT(fabs(g0 - c0) <= tol->course * c0 && fabs(g1 - c1) <= tol->course * c1,
           "%s: the GPU's mean loss of steps 1-20 or 21-40 is over %g %% off the CPU's", net->name,
           100 * tol->course);
    EXPECT(gl <= 2 * cl, "%s: the GPU's mean loss of the last 20 steps is over twice the CPU's", net->name);
    EXPECT(lc[steps - 1] < 0.7 * lc[0], "%s: the CPU run did not learn (%.4f -> %.4f)", net->name, lc[0],
           lc[steps - 1]);
}

/* 200 steps of batch 32, and the overlap check. */
static void test_training(const struct net_def *net, const struct cifar_set *set) {
    size_t P, S;
    sizes_of(net, &P, &S);
    int B = 32, steps = 200;
    float *lc = fnew(steps), *lg = fnew(steps), *gc = fnew(P), *gg = fnew(P);
    train_run(net, cpu, set, B, steps, 1, &(struct run){lc, gc, NULL, NULL});
    train_run(net, gpu, set, B, steps, 1, &(struct run){lg, gg, NULL, NULL});
    char what[96];
    snprintf(what, sizeof what, "%s, step 1 of %d images", net->name, B);
    expect_close(what, "loss", lg, lc, 1, tol->loss);
    expect_close(what, "gradients", gg, gc, P, tol->grads);
    expect_course(net, lc, lg, steps);
    /* The same 20 steps with and without the overlap: an upload racing the compute that reads
     * its slot, or a batch taken out of order, would show here. */
    float *l[2] = {fnew(20), fnew(20)}, *p[2] = {fnew(P), fnew(P)}, *bn[2] = {fnew(S), fnew(S)};
    for (int overlap = 0; overlap < 2; overlap++)
        train_run(net, gpu, set, B, 20, overlap, &(struct run){l[overlap], NULL, p[overlap], bn[overlap]});
    EXPECT(memcmp(p[0], p[1], P * 4) == 0 && memcmp(bn[0], bn[1], S * 4) == 0 &&
               memcmp(l[0], l[1], 20 * 4) == 0,
           "%s: 20 GPU steps with the input pipeline overlapping compute differ from 20 without", net->name);
    for (int i = 0; i < 2; i++) free(l[i]), free(p[i]), free(bn[i]);
    free(lc), free(lg), free(gc), free(gg);
}

/* How a lock-step run trains. */
struct recipe {
    const char *name;
    enum augment_kind augment;
    float label_smoothing;
    enum xent_reduction loss;
    struct sgd_settings sgd;
    float lookahead;     /* weight of a lookahead update after every step; < 0: no lookahead */
    int stop_first_bias; /* the first layer's bias stops training before this step (1-based); 0: never */
};

/* Plain SGD, as test_training. */
static const struct recipe plain = {
    "plain SGD", AUGMENT_CROP_FLIP, 0.0f, XENT_MEAN, {LR, 0.9f, 5e-4f, 1.0f, 1.0f, 0}, -1.0f, 0};

/* airbench94's step (model/config.c, UNITS_AIRBENCH): reflect-padded crops with the alternating
 * flip, label smoothing 0.2 on the summed loss, Nesterov SGD at lr 11.5 / (1024 (1 + 1 / 0.15))
 * with weight decay 0.0153 * 1024 / (1024 (1 + 1 / 0.15)) / lr, batch-norm tensors at 64x the lr
 * and 1/64 the decay; a lookahead update after every step (airbench's: every 5th, weight
 * 1 - 0.95^5 (step/total)^3) and the first layer's bias stopped mid-run (its whitening bias). */
static const struct recipe airbench = {"airbench94 recipe",
                                       AUGMENT_ALTERNATING,
                                       0.2f,
                                       XENT_SUM,
                                       {1.4648e-3f, 0.85f, 1.3624f, 1.0f, 64.0f, 1},
                                       0.7f,
                                       3};

/* A lock-step run (see the top): training steps of train[s] images, then scoring eval[e]. */
struct schedule {
    int max_batch, steps, evals, train[4], eval[2];
    const struct recipe *recipe;
};
static const struct schedule schedules[] = {
    {1, 3, 1, {1, 1, 1}, {1}, &plain},               /* batch norm over one image's pixels */
    {127, 3, 1, {127, 127, 127}, {127}, &plain},     /* odd */
    {512, 3, 1, {512, 512, 512}, {512}, &plain},     /* large */
    {127, 3, 2, {127, 100, 127}, {127, 27}, &plain}, /* partial batches after full ones */
    {64, 4, 1, {64, 64, 64, 64}, {64}, &airbench},   /* epochs 0..3: the flip alternates */
};

/* What a step leaves, on the host. */
struct step_state {
    float stats[2];                              /* mean (or summed) loss, correct */
    float *grads, *weights, *momentum, *buffers; /* [P], [P], [P], [S] */
    float *ema_params, *ema_buffers;             /* [P], [S]: the lookahead averages, if any */
};

static void step_state_alloc(struct step_state *st, size_t P, size_t S) {
    st->grads = fnew(P), st->weights = fnew(P), st->momentum = fnew(P), st->buffers = fnew(S ? S : 1);
    st->ema_params = fnew(P), st->ema_buffers = fnew(S ? S : 1);
}

static void step_state_free(struct step_state *st) {
    free(st->grads), free(st->weights), free(st->momentum), free(st->buffers), free(st->ema_params),
        free(st->ema_buffers);
}

/* Training step `step` (0-based, also its epoch) of m (fed by q) under r on images first..
 * (n of them); its results in st. */
static void step_and_read(struct model *m, struct batches *q, const struct recipe *r,
                          const struct cifar_set *set, int step, int first, int n, struct step_state *st) {
    size_t P = m->nparams;
    if (r->stop_first_bias == step + 1 && m->layers[0].bias >= 0) model_stop_training(m, m->layers[0].bias);
    submit(q, set, first, n, r->augment, step);
    check_forward_backward(m, q);
    m->k->download(st->stats, m->grads + P, sizeof st->stats);
    m->k->download(st->grads, m->grads, P * sizeof(float));
    model_optimizer_step(m, &r->sgd);
    if (r->lookahead >= 0) {
        model_lookahead_update(m, r->lookahead);
        model_get_lookahead(m, st->ema_params, st->ema_buffers);
    }
    model_get_state(m, st->weights, st->momentum, st->buffers);
}

/* m[0] (CPU) and m[1] (GPU), in the same state, score the schedule's batches (fed by q). */
static void expect_scores(const struct net_def *net, struct model m[2], struct batches q[2],
                          const struct cifar_set *set, const struct schedule *sc) {
    int C = net->classes;
    for (int e = 0, first = 0; e < sc->evals; first += sc->eval[e], e++) {
        int n = sc->eval[e], *pred[2];
        float *logits[2];
        for (int j = 0; j < 2; j++) {
            pred[j] = XALLOC((size_t)n * sizeof(int)), logits[j] = fnew((size_t)n * C);
            submit(&q[j], set, first, n, AUGMENT_NONE, 0);
            check_predict(&m[j], &q[j], pred[j], logits[j]);
        }
        char what[128];
        snprintf(what, sizeof what, "%s, %s, scoring %d images on a model for %d", net->name,
                 sc->recipe->name, n, sc->max_batch);
        expect_same_scores(what, logits[1], logits[0], pred[1], pred[0], n, C);
        for (int j = 0; j < 2; j++) free(pred[j]), free(logits[j]);
    }
}

static void test_lockstep(const struct net_def *net, const struct cifar_set *set, const struct schedule *sc) {
    const struct recipe *r = sc->recipe;
    struct model m[2]; /* CPU, GPU */
    struct batches q[2];
    struct step_state st[2];
    for (int j = 0; j < 2; j++) {
        model_init(&m[j], net, j ? gpu : cpu, sc->max_batch, 11);
        batches_init(&q[j], j ? gpu : cpu, sc->max_batch);
        m[j].label_smoothing = r->label_smoothing, m[j].loss_reduction = r->loss;
        if (r->lookahead >= 0) model_lookahead_init(&m[j]);
    }
    size_t P = m[0].nparams, S = m[0].nbuffers;
    for (int j = 0; j < 2; j++) step_state_alloc(&st[j], P, S);
    for (int s = 0, first = 0; s < sc->steps; first += sc->train[s], s++) {
        for (int j = 0; j < 2; j++) step_and_read(&m[j], &q[j], r, set, s, first, sc->train[s], &st[j]);
        char what[128];
        snprintf(what, sizeof what, "%s, %s, step %d on %d images, model for %d", net->name, r->name, s + 1,
                 sc->train[s], sc->max_batch);
        expect_close(what, "loss", st[1].stats, st[0].stats, 1, tol->loss);
        expect_close(what, "gradients", st[1].grads, st[0].grads, P, tol->grads);
        expect_close(what, "weights", st[1].weights, st[0].weights, P, tol->weights);
        expect_close(what, "momentum", st[1].momentum, st[0].momentum, P, tol->grads);
        expect_close(what, "running statistics", st[1].buffers, st[0].buffers, S, tol->logits);
        if (r->lookahead >= 0) {
            expect_close(what, "lookahead weights", st[1].ema_params, st[0].ema_params, P, tol->weights);
            expect_close(what, "lookahead statistics", st[1].ema_buffers, st[0].ema_buffers, S, tol->logits);
            model_set_lookahead(&m[1], st[0].ema_params, st[0].ema_buffers);
        }
        model_set_state(&m[1], st[0].weights, st[0].momentum, st[0].buffers);
    }
    expect_scores(net, m, q, set, sc);
    for (int j = 0; j < 2; j++) step_state_free(&st[j]), batches_free(&q[j]), model_free(&m[j]);
}

/* How test_graphs runs its steps. APART: model_forward_backward, then model_optimizer_step.
 * IN_GRAPH: model_train_step, the update with a lookahead every second step (two after the last)
 * in the step's graph, against the ops apart op by op. SEGMENTS: as APART with a grads_ready
 * hook (struct ready_log), which splits a step's graph at each of its calls. */
enum graph_mode { APART, IN_GRAPH, SEGMENTS };

/* A grads_ready hook as dist/dist.c's staged reduction uses it: each range it is handed goes to
 * host memory by download_async behind the ops issued so far; the ranges, in order. It answers
 * 1 (a bucket closed) at every third call and the last, so the recorded step has a graph per
 * three calls and makes the others late (their copies then wait for more of backward). */
enum { MAX_READY = 64 };
struct ready_log {
    float *grads, *host;
    struct kernels_event *done[MAX_READY];
    size_t cut[MAX_READY][2];
    int n, cuts; /* calls, calls that answered 1 (this step) */
};

static int log_ready(void *ctx, size_t begin, size_t end) {
    struct ready_log *r = ctx;
    CHECK(r->n < MAX_READY);
    r->cut[r->n][0] = begin, r->cut[r->n][1] = end;
    gpu->download_async(r->host + begin, r->grads + begin, (end - begin) * sizeof(float), r->done[r->n]);
    int cut = r->n % 3 == 2 || begin == 0; /* a bucket closed: every third call and the last */
    r->cuts += cut;
    r->n++;
    return cut;
}

/* Waits for r's copies: 1 when they hold what grads[0, total) holds now. */
static int ready_copies_match(struct ready_log *r, size_t total, float *scratch) {
    for (int i = 0; i < r->n; i++) gpu->event_wait(r->done[i]);
    gpu->download(scratch, r->grads, total * sizeof(float));
    return memcmp(scratch, r->host, total * sizeof(float)) == 0;
}

/* Step s of test_graphs on m (update u, IN_GRAPH), then its loss and gradients to the host.
 * Returns 1 when the batch slot's copy of (loss, correct) (model_input stats) differs from
 * m->grads' after the step. */
static int graph_test_step(struct model *m, struct batches *q, enum graph_mode mode,
                           const struct model_update *u, float *loss, float *grads) {
    size_t P = m->nparams;
    struct model_input in;
    int slot = batches_take(q, &in);
    if (mode == IN_GRAPH && m->graphs) model_train_step(m, &in, u);
    else model_forward_backward(m, &in);
    batches_release(q, slot);
    batches_wait(q, slot);
    float stats[2];
    gpu->download(stats, m->grads + P, sizeof stats);
    *loss = stats[0];
    gpu->download(grads, m->grads, P * sizeof(float));
    int off = memcmp(stats, q->stats[slot], sizeof stats) != 0;
    if (mode == IN_GRAPH && m->graphs) return off;
    model_optimizer_step(m, &u->sgd);
    for (int i = 0; i < u->lookaheads; i++) model_lookahead_update(m, u->lookahead[i]);
    return off;
}

/* Training steps as CUDA graphs (struct model's graphs) against the same steps op by op, on
 * the same GPU, in lock step: after every step the same loss and gradients, at the end the same
 * weights, momentum, statistics (and lookahead averages), bit for bit. 12 steps of airbench94's
 * recipe (the batch-norm group, so the grouped update too) with an lr and lookahead weights
 * that change every step, from 2 alternating batch slots: a slot's step recorded on its second
 * sight and run from its graphs after that (IN_GRAPH: a lookahead after steps 4 and 8, keys of
 * their own); the first layer's bias stopped before step 9, which must retire every graph (one
 * still in use would write the stopped bias's gradient: the gradients would differ), a step
 * recorded again on step 11; a last partial batch, met once, so op by op. At least 2 steps must
 * have run from stored graphs, and each step's batch slot must hold its (loss, correct). SEGMENTS: the hook
 * sees the same ranges in the same order, and each range's copy holds the final gradients (it ran behind the
 * graph that computed them). */
static void test_graphs(const struct net_def *net, const struct cifar_set *set, enum graph_mode mode) {
    enum { B = 64, STEPS = 12, STOP = 8 };
    static const char *const names[] = {"update apart", "update in the graph", "split at grads_ready"};
    size_t P, S;
    sizes_of(net, &P, &S);
    struct model m[2];
    struct batches q[2];
    struct ready_log r[2];
    float loss[2], *g[2], *w[2], *mo[2], *bn[2], *ep[2], *eb[2], *scratch = fnew(P + MODEL_STATS);
    for (int j = 0; j < 2; j++) {
        model_init(&m[j], net, gpu, B, 11);
        batches_init(&q[j], gpu, B);
        m[j].label_smoothing = airbench.label_smoothing, m[j].loss_reduction = airbench.loss;
        m[j].graphs = j;
        model_lookahead_init(&m[j]);
        if (mode == SEGMENTS) {
            memset(&r[j], 0, sizeof r[j]);
            r[j].grads = m[j].grads, r[j].host = gpu->host_alloc((P + MODEL_STATS) * sizeof(float));
            for (int i = 0; i < MAX_READY; i++) r[j].done[i] = gpu->event_create();
            m[j].grads_ready = log_ready, m[j].grads_ready_ctx = &r[j];
        }
        g[j] = fnew(P), w[j] = fnew(P), mo[j] = fnew(P), bn[j] = fnew(S ? S : 1);
        ep[j] = fnew(P), eb[j] = fnew(S ? S : 1);
    }
    int differ = 0, cuts = 0, copies = 0, stats_off = 0;
    CHECK(m[0].layers[0].bias >= 0); /* the stop below */
    for (int s = 0; s < STEPS; s++) {
        struct model_update u = {.sgd = airbench.sgd,
                                 .lookaheads = s + 1 == STEPS ? 2 : s % 4 == 3,
                                 .lookahead = {0.3f + 0.01f * (float)s, 0.6f - 0.02f * (float)s}};
        u.sgd.lr *= 1.0f + 0.1f * (float)s;
        for (int j = 0; j < 2; j++) {
            if (s == STOP) model_stop_training(&m[j], m[j].layers[0].bias);
            submit(&q[j], set, s * B, s + 1 == STEPS ? 37 : B, airbench.augment, s);
            if (mode == SEGMENTS) r[j].n = r[j].cuts = 0;
            stats_off += graph_test_step(&m[j], &q[j], mode, &u, &loss[j], g[j]);
            if (mode == SEGMENTS) copies += !ready_copies_match(&r[j], P + MODEL_STATS, scratch);
        }
        if ((memcmp(&loss[0], &loss[1], 4) != 0 || memcmp(g[0], g[1], P * 4) != 0) && !differ++)
            printf("test_cuda: %s, %s: step %d as a CUDA graph: loss %.9g, op by op %.9g\n", net->name,
                   names[mode], s + 1, loss[1], loss[0]);
        cuts += mode == SEGMENTS && (r[0].n != r[1].n || memcmp(r[0].cut, r[1].cut, sizeof r[0].cut) != 0);
    }
    int recorded = 0, segs = 0;
    for (int i = 0; i < m[1].ngraphs; i++) recorded += m[1].graph[i].nsegs > 0, segs += m[1].graph[i].nsegs;
    for (int j = 0; j < 2; j++) {
        model_get_state(&m[j], w[j], mo[j], bn[j]);
        model_get_lookahead(&m[j], ep[j], eb[j]);
    }
    /* after the stop: slot 0's step recorded on step 11; the stretches up to each cut, the rest */
    int want_segs = mode == SEGMENTS ? r[0].cuts + 1 : 1;
    EXPECT(recorded == 1 && segs == want_segs && m[1].replays >= 2 && m[0].replays == 0,
           "%s, %s: %d steps in %d graphs recorded after the last step, want 1 in %d; %ld steps run from "
           "graphs, want 2 or more",
           net->name, names[mode], recorded, segs, want_segs, m[1].replays);
    EXPECT(differ == 0, "%s, %s: %d of %d steps as CUDA graphs differ in loss or gradients from op by op",
           net->name, names[mode], differ, STEPS);
    EXPECT(stats_off == 0, "%s, %s: the batch slot's (loss, correct) differ from the model's in %d steps",
           net->name, names[mode], stats_off);
    EXPECT(cuts == 0 && copies == 0,
           "%s, %s: grads_ready saw other ranges in %d steps; its copies missed gradients in %d", net->name,
           names[mode], cuts, copies);
    EXPECT(memcmp(w[0], w[1], P * 4) == 0 && memcmp(mo[0], mo[1], P * 4) == 0 &&
               memcmp(bn[0], bn[1], S * 4) == 0 && memcmp(ep[0], ep[1], P * 4) == 0 &&
               memcmp(eb[0], eb[1], S * 4) == 0,
           "%s, %s: the state after %d steps as CUDA graphs differs from op by op", net->name, names[mode],
           STEPS);
    for (int j = 0; j < 2; j++) {
        if (mode == SEGMENTS) {
            gpu->host_free(r[j].host);
            for (int i = 0; i < MAX_READY; i++) gpu->event_destroy(r[j].done[i]);
        }
        batches_free(&q[j]), model_free(&m[j]);
        free(g[j]), free(w[j]), free(mo[j]), free(bn[j]), free(ep[j]), free(eb[j]);
    }
    free(scratch);
}

/* A model trained on one device, written to a file, scored on the other. */
static void test_cross_device(const struct net_def *net, const struct cifar_set *set) {
    size_t P, S;
    sizes_of(net, &P, &S);
    char dir[256], path[512];
    check_tmpdir("cuda", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/m.safetensors", dir);
    enum { B = 32 };
    const struct kernels *from[2] = {gpu, cpu}, *to[2] = {cpu, gpu};
    for (int dir_i = 0; dir_i < 2; dir_i++) {
        struct model_state st = {.params = fnew(P), .buffers = fnew(S), .batches_tracked = 5};
        train_run(net, from[dir_i], set, B, 5, 1, &(struct run){NULL, NULL, st.params, st.buffers});
        struct run_info info = {.kind = "model", .run_id = "cross", .config = "{}"};
        struct err e = {""};
        struct model shape; /* the tensor table */
        model_init(&shape, net, cpu, 1, 0);
        EXPECT(checkpoint_write(path, &shape, &st, &info, &e) == 0, "write: %s", e.msg);
        struct model_state in = {.params = fnew(P), .buffers = fnew(S)};
        EXPECT(checkpoint_read(path, &shape, &in, &info, &e) == 0, "read: %s", e.msg);
        model_free(&shape);
        float logits[2][B * 10];
        int pred[2][B];
        const struct kernels *ks[2] = {from[dir_i], to[dir_i]};
        for (int j = 0; j < 2; j++) {
            struct model m;
            struct batches q;
            model_init(&m, net, ks[j], B, 0);
            batches_init(&q, ks[j], B);
            model_set_state(&m, j == 0 ? st.params : in.params, NULL, j == 0 ? st.buffers : in.buffers);
            submit(&q, set, 0, B, AUGMENT_NONE, 0);
            check_predict(&m, &q, pred[j], logits[j]);
            batches_free(&q);
            model_free(&m);
        }
        char what[96];
        snprintf(what, sizeof what, "%s trained on %s, scored on %s", net->name, from[dir_i]->name,
                 to[dir_i]->name);
        expect_same_scores(what, logits[1], logits[0], pred[1], pred[0], B, net->classes);
        free(st.params), free(st.buffers), free(in.params), free(in.buffers);
    }
    check_rmdir(dir);
}

/* With two GPUs visible: a step of workshop-cnn on GPU 1 against the same step on GPU 0 (one
 * GPU per process: shutdown() lets kernels_cuda() start afresh on another). Leaves GPU 1 or 0
 * in `gpu`. */
static void test_second_gpu(const struct cifar_set *set, int gpus) {
    if (gpus < 2) {
        printf("test_cuda: GPU 1: skipped: %d GPU visible\n", gpus);
        return;
    }
    const struct net_def *net = &net_workshop_cnn;
    size_t P, S;
    sizes_of(net, &P, &S);
    float l[2], *g[2] = {fnew(P), fnew(P)}, *w[2] = {fnew(P), fnew(P)};
    for (int dev = 0; dev < 2; dev++) {
        if (dev == 1) gpu->shutdown(), gpu = gpu_table(1);
        train_run(net, gpu, set, 32, 1, 1, &(struct run){&l[dev], g[dev], w[dev], NULL});
    }
    char name[512];
    kernels_cuda_describe(name, sizeof name);
    printf("test_cuda: GPU 1: %s: a step %s GPU 0's\n", name,
           memcmp(w[0], w[1], P * 4) == 0 ? "bit for bit as" : "within tolerance of");
    const char *what = "GPU 1 against GPU 0, a step of workshop-cnn on 32 images";
    expect_close(what, "loss", &l[1], &l[0], 1, tol->loss);
    expect_close(what, "gradients", g[1], g[0], P, tol->grads);
    expect_close(what, "weights", w[1], w[0], P, tol->weights);
    free(g[0]), free(g[1]), free(w[0]), free(w[1]);
}

int main(int argc, char **argv) {
    int mode = parse_mode(argc, argv);
    if (mode < 0) return 2;
    /* Before CUDA starts. */
    if (mode == 1) unsetenv("NVIDIA_TF32_OVERRIDE");
    else setenv("NVIDIA_TF32_OVERRIDE", "0", 1);
    tol = mode == 2 ? &bf16_tol : mode == 1 ? &tf32_tol : &fp32_tol;
    const char *label = mode == 2   ? "test_cuda (bf16)"
                        : mode == 1 ? "test_cuda (tf32 on)"
                                    : "test_cuda (tf32 off)";
    struct err why;
    int gpus = kernels_cuda_devices(&why);
    if (gpus == 0) {
        printf("test_cuda: skipped: no GPU (%s)\n", why.msg);
        return check_summary(label);
    }
    cpu = kernels_cpu();
    gpu = kernels_cuda(0);
    if (mode == 2) {
        if (!kernels_cuda_bf16_native()) {
            printf("test_cuda: skipped: GPU 0 has no bf16 tensor cores\n");
            gpu->shutdown();
            return check_summary(label);
        }
        cpu = kernels_cpu_bf16_act(), gpu_table = kernels_cuda_bf16, gpu = kernels_cuda_bf16(0);
    }
    char name[512];
    kernels_cuda_describe(name, sizeof name);
    printf("test_cuda: GPU 0: %s; tolerances: loss %g, logits %g, gradients %g, weights %g, course %g\n",
           name, tol->loss, tol->logits, tol->grads, tol->weights, tol->course);
    uint8_t *raw;
    struct cifar_set set = check_learnable_set(512, &raw);
    /* 8 batch sizes (32, 1, 127, 512, 100, 27, 64, 37) x 9 convolutions and 4 (64, 32, 1, 37) x 7
     * for airbench94: 100 plans, within conv.cu's 256. */
    const struct net_def *nets[] = {&net_workshop_cnn, &test_net};
    for (size_t i = 0; i < sizeof nets / sizeof nets[0] && graphs_only; i++)
        for (int mode = APART; mode <= SEGMENTS; mode++) test_graphs(nets[i], &set, (enum graph_mode)mode);
    for (size_t i = 0; i < sizeof nets / sizeof nets[0] && !graphs_only; i++) {
        printf("test_cuda: %s\n", nets[i]->name);
        test_training(nets[i], &set);
        for (size_t j = 0; j < sizeof schedules / sizeof schedules[0]; j++)
            test_lockstep(nets[i], &set, &schedules[j]);
        test_cross_device(nets[i], &set);
        for (int mode = APART; mode <= SEGMENTS; mode++) test_graphs(nets[i], &set, (enum graph_mode)mode);
    }
    /* The real network under its own recipe (the convolutions of 31x31 .. 3x3 maps). */
    printf("test_cuda: %s\n", net_airbench94.name);
    if (!graphs_only) {
        test_lockstep(&net_airbench94, &set, &schedules[sizeof schedules / sizeof schedules[0] - 1]);
        test_cross_device(&net_airbench94, &set);
    }
    for (int mode = APART; mode <= SEGMENTS; mode++)
        test_graphs(&net_airbench94, &set, (enum graph_mode)mode);
    test_second_gpu(&set, gpus);
    gpu->shutdown();
    free(set.records), free(raw);
    return check_summary(label);
}

#else

int main(int argc, char **argv) {
    if (parse_mode(argc, argv) < 0) return 2;
    printf("test_cuda: skipped: no GPU (this build has no CUDA backend: CUDA=0 or no nvcc)\n");
    return check_summary("test_cuda");
}

#endif
