/* cifar10-train: data-parallel training of a network (the workshop CNN, airbench94) on CIFAR-10
 * with its recipe (model/config.h).
 *
 *   [mpirun -np N] cifar10-train [flags] DATA
 *
 * Every rank holds the whole model and reads the whole dataset; each step every rank runs
 * forward/backward on its own slice of the global batch, one MPI_Allreduce sums the gradients
 * (with the loss and accuracy counts riding along), and every rank applies the same SGD update,
 * so the weights stay identical. Rank 0 prints the log and writes the files. */
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/shard.h"
#include "../model/evaluate.h"
#include "device.h"
#include "train_options.h"
#include "trainer.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXIT_INTERRUPTED 4

static void format_duration(double s, char *out, size_t n) {
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(out, n, "%ldh%02ldm%02lds", t / 3600, t / 60 % 60, t % 60);
    else if (t >= 60) snprintf(out, n, "%ldm%02lds", t / 60, t % 60);
    else snprintf(out, n, "%.1fs", s);
}

/* Images gathered between two dist_grads_progress calls: about 15 us of host time each. */
#define GATHER_CHUNK 32

/* Fills and submits the batch of `step` (this rank's slice of the epoch's order). The gather
 * runs while the device computes the previous step's backward, so it goes in chunks with the
 * gradient buckets advanced between them: a bucket whose gradients appear meanwhile starts its
 * reduction then, not after the gather. */
static void submit_step(struct trainer *t, int epoch, int step) {
    const struct train_config *c = &t->c;
    const int *idx = shard_slice(t->perm, step, t->d.rank, t->d.world, t->batch);
    struct batch *b = batches_next(&t->batches);
    for (int i = 0; i < t->batch; i += GATHER_CHUNK) {
        int n = t->batch - i < GATHER_CHUNK ? t->batch - i : GATHER_CHUNK;
        augment_gather(&t->data.train, idx + i, n, c->seed, epoch, c->augment,
                       b->img + (size_t)i * CIFAR_IMAGE_BYTES, b->geom + 3 * i, b->labels + i);
        dist_grads_progress(t->grads);
    }
    b->reflect = augment_reflects(c->augment);
    batches_submit(&t->batches, t->batch);
}

/* The steps of `epoch`: all of them, except in a last epoch cut by fractional --epochs. */
static int epoch_steps(const struct trainer *t, int epoch) {
    long left = t->total_steps - (long)epoch * t->steps;
    return left < t->steps ? (int)left : t->steps;
}

/* A metrics file that fails to take a record stops taking them (metrics_*); training goes on. */
static void metrics_warn(int rc, const struct err *e) {
    if (rc) fprintf(stderr, "%s: warning: %s\n", err_progname(), e->msg);
}

/* Rank 0: the running loss of the last print_freq steps, in the log and the metrics file
 * (global: the step's number in the run, from 1; lr: its learning rate). */
static void log_step(struct trainer *t, int epoch, int step, long global, double lr, double loss) {
    printf("[%d, %5d] loss: %.3f\n", epoch + 1, step + 1, loss);
    double now = dist_time();
    struct metrics_step r = {.epoch = epoch + 1,
                             .step = step + 1,
                             .global_step = global,
                             .loss = loss,
                             .lr = lr,
                             .elapsed_s = now - t->run_start,
                             .images_per_s =
                                 (double)t->c.print_freq * t->global_batch / (now - t->logged_at)};
    t->logged_at = now;
    struct err e;
    metrics_warn(metrics_step(&t->metrics, &r, &e), &e);
    metrics_warn(tensorboard_step(&t->tb, &r, &e), &e);
}

/* Rank 0: whether --checkpoint-interval has gone by since the last checkpoint. */
static int checkpoint_due(const struct trainer *t) {
    return t->d.rank == 0 && t->c.checkpoint_interval > 0 &&
           dist_time() - t->checkpoint_at >= t->c.checkpoint_interval;
}

/* A checkpoint in the middle of an epoch, after the step just taken (collective): rank 0
 * writes it with every rank's running statistics, which differ until the epoch's end. */
/* Rank 0: the checkpoint file from h, its time counted apart (time to accuracy leaves it out,
 * as airbench writes none): the device's queued work is waited for first, so the count holds
 * only the state's download and the file. */
static void write_checkpoint(struct trainer *t, struct model_state *h) {
    float probe;
    t->m.k->download(&probe, t->m.params, sizeof probe); /* waits for the compute queue */
    double t0 = dist_time();
    train_state_write(t->checkpoint_file, &t->m, h, &t->info);
    t->checkpoint_s += dist_time() - t0;
    t->checkpoints++;
}

static void save_mid_epoch(struct trainer *t) {
    struct model_state *h = &t->h;
    size_t S = t->m.nbuffers;
    int R = t->d.rank == 0, world = S > 0 ? t->d.world : 1;
    model_get_state(&t->m, NULL, NULL, h->buffers);
    if (h->ema_params) model_get_lookahead(&t->m, h->ema_params, h->ema_buffers);
    if (R && world > 1) {
        h->rank_buffers = XALLOC((size_t)world * S * sizeof(float));
        if (h->ema_params) h->rank_ema_buffers = XALLOC((size_t)world * S * sizeof(float));
        h->ranks = world;
    }
    if (world > 1) dist_gather_floats(h->buffers, h->rank_buffers, S);
    if (world > 1 && h->ema_params) dist_gather_floats(h->ema_buffers, h->rank_ema_buffers, S);
    if (R) write_checkpoint(t, h);
    checkpoint_state_drop_ranks(h);
    t->checkpoint_at = dist_time();
}

/* A step's results: stats holds its (loss, correct) summed over the ranks, then its signals
 * (stop, checkpoint); global is its number in the run (from 1), lr its learning rate, and no
 * later step has begun when a signal is set. Dies on a loss that is not finite; adds to the
 * epoch's sums and the log; writes the checkpoint a signal asks for (after an epoch's last step
 * only when stopping: the epoch's end, evaluation and record, is then the resume's). Returns
 * the stop count. */
static int step_done(struct trainer *t, int epoch, int step, int steps, const float *stats, long global,
                     double lr) {
    const struct train_config *c = &t->c;
    struct run_info *p = &t->info;
    double loss = c->loss == XENT_SUM ? stats[0] / t->global_batch : stats[0] / t->d.world;
    if (!isfinite(loss)) { /* identical on every rank after the allreduce */
        char msg[200];
        snprintf(msg, sizeof msg, "loss is %g at epoch %d step %d: training diverged (lower --learning-rate)",
                 loss, epoch + 1, step + 1);
        dist_agree(1, msg);
    }
    p->epoch_loss += loss;
    p->epoch_correct += stats[1];
    p->print_loss += loss;
    p->step_in_epoch = step + 1;
    if ((step + 1) % c->print_freq == 0) {
        if (t->d.rank == 0) log_step(t, epoch, step, global, lr, p->print_loss / c->print_freq);
        p->print_loss = 0;
    }
    int stop = (int)stats[2];
    if (stop || (stats[3] > 0 && step + 1 < steps)) save_mid_epoch(t);
    return stop;
}

/* One epoch of data-parallel SGD from step t->info.step_in_epoch (0, or where a mid-epoch
 * checkpoint left it), summing the loss and correct predictions into t->info. While the
 * device runs a step's forward and backward, the host gathers and uploads the next batch and
 * the gradient buckets are reduced as backward produces them. Each step's reduction also
 * carries the signals: a stop asked for on any rank (SIGTERM, SIGINT) and rank 0's
 * checkpoint clock, so every rank acts on them after the same step. One rank waits for no
 * step: a step's results (its batch slot's copy of (loss, correct)) are taken after the next
 * step is issued, except where a signal is set or the epoch ends. Returns how many ranks
 * asked to stop: then the run stops after that step, with its checkpoint written. */
static int train_epoch(struct trainer *t, int epoch) {
    const struct train_config *c = &t->c;
    struct run_info *p = &t->info;
    int steps = epoch_steps(t, epoch);
    struct { /* one rank: the step issued whose results are not taken yet (step -1: none) */
        int step, slot;
        long global;
        double lr;
    } pending = {-1, 0, 0, 0.0};
    t->logged_at = dist_time();
    shard_permutation(c->seed, epoch, t->data.train.n, t->perm);
    if (p->step_in_epoch < steps) submit_step(t, epoch, p->step_in_epoch);
    for (int step = p->step_in_epoch; step < steps; step++) {
        double t0 = dist_time();
        float stop = trainer_stop_signal() != 0, checkpoint = checkpoint_due(t);
        dist_grads_signal(t->grads, stop, checkpoint);
        struct model_input in;
        int slot = batches_take(&t->batches, &in);
        struct model_update u = trainer_update(t);
        if (t->m.grads_ready) in.stats = NULL, model_forward_backward(&t->m, &in); /* update: below */
        else model_train_step(&t->m, &in, &u); /* one rank: the update in its graph */
        batches_release(&t->batches, slot);
        long global = (long)++t->info.global_step;
        if (step + 1 < steps) submit_step(t, epoch, step + 1);
        if (pending.step >= 0) { /* its slot's (loss, correct), once that step is done */
            batches_wait(&t->batches, pending.slot);
            const float *r = t->batches.stats[pending.slot];
            step_done(t, epoch, pending.step, steps, (const float[MODEL_STATS]){r[0], r[1], 0, 0},
                      pending.global, pending.lr);
            dist_timeout_step(pending.global, dist_time() - t0);
            pending.step = -1;
        }
        float stats[MODEL_STATS]; /* summed over ranks: the loss (mean or sum per rank), correct count,
                                     signals */
        if (t->m.grads_ready) {
            dist_grads_finish(t->grads, stats);
            model_update(&t->m, &u);
        } else if (stop == 0 && checkpoint == 0 && step + 1 < steps) {
            pending.step = step, pending.slot = slot, pending.global = global, pending.lr = u.sgd.lr;
            continue;
        } else {
            batches_wait(&t->batches, slot);
            const float *r = t->batches.stats[slot];
            stats[0] = r[0], stats[1] = r[1], stats[2] = stop, stats[3] = checkpoint;
        }
        dist_timeout_step(global, dist_time() - t0);
        int stopped = step_done(t, epoch, step, steps, stats, global, u.sgd.lr);
        if (stopped) return stopped;
    }
    return 0;
}

/* Test accuracy in percent at TTA level tta, each rank scoring its own slice of test_batch.bin. */
static double test_accuracy(struct trainer *t, int tta) {
    long conf[CIFAR_CLASSES][CIFAR_CLASSES] = {{0}};
    const struct cifar_set *test = &t->data.test;
    int begin, end;
    trainer_test_slice(t, &begin, &end);
    evaluate_range(&t->m, test, begin, end, tta, conf);
    double right = 0;
    for (int k = 0; k < CIFAR_CLASSES; k++) right += (double)conf[k][k];
    dist_allreduce_sum_double(&right, 1);
    return 100.0 * right / test->n;
}

/* Before `epoch`: a first-layer bias past its epochs stops training (requires_grad = False). */
static void begin_epoch(struct trainer *t, int epoch) {
    const struct model_layer *first = &t->m.layers[0];
    if (t->c.first_bias_epochs > 0 && epoch >= t->c.first_bias_epochs && first->bias >= 0 &&
        !t->m.tensors[first->bias].stopped) {
        model_stop_training(&t->m, first->bias);
        if (t->d.rank == 0)
            printf("%s stops training after %d epochs\n", t->m.tensors[first->bias].name,
                   t->c.first_bias_epochs);
    }
}

/* The run's settings as markdown, for TensorBoard's text tab. */
static void settings_text(const struct trainer *t, struct strbuf *b) {
    strbuf_printf(b, "run `%s`: %s, %d rank(s) x %d thread(s), %s; ", t->info.run_id, t->c.model, t->d.world,
                  t->threads, t->device);
    if (t->info.global_step) strbuf_printf(b, "resumed after step %ld\n\n", (long)t->info.global_step);
    else strbuf_printf(b, "fresh start\n\n");
    strbuf_printf(b, "    %s\n", t->info.config); /* an indented block: shown verbatim */
}

/* Rank 0 opens the metrics file, keeping the records up to a resumed checkpoint, and with
 * --tensorboard-dir a new event file whose START drops the points past that checkpoint. */
static void open_metrics(struct trainer *t) {
    struct err e = {""};
    long done = (long)t->info.global_step;
    int status = t->d.rank == 0 && metrics_open(&t->metrics, t->metrics_file, t->info.run_id, done,
                                                t->info.epochs_completed, &e) != 0;
    if (t->d.rank == 0 && !status && t->c.tensorboard_dir) {
        struct strbuf text = {0};
        settings_text(t, &text);
        status = tensorboard_open(&t->tb, t->c.tensorboard_dir, done ? done + 1 : 0, text.s, &e) != 0;
        strbuf_free(&text);
    }
    dist_agree(status, e.msg);
}

/* Rank 0: the epoch's line in the log and its record in the metrics file from its sums in
 * t->info (test_acc < 0: not measured; rate: images/s of the steps this process ran). */
static void report_epoch(struct trainer *t, int epoch, double test_acc, double rate, double eta_s) {
    char el[32], eta[32], test[64] = "";
    double images = (double)epoch_steps(t, epoch) * t->global_batch, elapsed = dist_time() - t->run_start;
    double loss = t->info.epoch_loss / epoch_steps(t, epoch), correct = t->info.epoch_correct;
    if (test_acc >= 0) snprintf(test, sizeof test, ", test accuracy %.2f%%", test_acc);
    format_duration(elapsed, el, sizeof el);
    format_duration(eta_s, eta, sizeof eta);
    printf("epoch %d/%d: loss %.4f, train accuracy %.2f%%%s, %.1f images/s, elapsed %s, ETA %s\n", epoch + 1,
           t->epochs, loss, 100.0 * correct / images, test, rate, el, eta);
    struct metrics_epoch r = {.epoch = epoch + 1,
                              .global_step = (long)t->info.global_step,
                              .train_loss = loss,
                              .train_accuracy = 100.0 * correct / images,
                              .test_accuracy = test_acc,
                              .images_per_s = rate,
                              .elapsed_s = elapsed,
                              .eta_s = eta_s};
    struct err e;
    metrics_warn(metrics_epoch(&t->metrics, &r, &e), &e);
    metrics_warn(tensorboard_epoch(&t->tb, &r, &e), &e);
}

/* Rank 0: airbench's count, the whitening filter, training and the final test-time augmented
 * score, from data in memory (here with per-epoch scores too unless --no-eval), without the
 * checkpoints, which airbench does not write; then where it went. The rest is the epochs' ends
 * (running statistics averaged, records) and the device's queue drained before each checkpoint. */
static void report_time_to_accuracy(const struct trainer *t, double elapsed) {
    double tta = t->whiten_s + elapsed - t->checkpoint_s;
    printf("time to accuracy %.2f s (whitening %.2f s, then the run time less %.2f s writing %d "
           "checkpoint(s))\n",
           tta, t->whiten_s, t->checkpoint_s, t->checkpoints);
    printf("time to accuracy by phase: whitening %.3f s, training steps %.3f s, per-epoch scores %.3f s, "
           "final score %.3f s, the rest %.3f s\n",
           t->whiten_s, t->steps_s, t->scoring_s, t->final_s,
           tta - t->whiten_s - t->steps_s - t->scoring_s - t->final_s);
}

/* Rank 0: the model file, after the run's closing lines. */
static void finish(struct trainer *t, int epochs_run) {
    const struct train_config *c = &t->c;
    if (epochs_run == 0) printf("the checkpoint already holds all %d epochs\n", t->epochs);
    char el[32];
    double elapsed = dist_time() - t->run_start;
    format_duration(elapsed, el, sizeof el);
    printf("run time %s (%.1f s: training, evaluation, checkpoints)\n", el, elapsed);
    if (c->tta > 0 && t->data.test.n > 0 && t->whiten_s > 0) report_time_to_accuracy(t, elapsed);
    printf("saving model: %s\n", c->model_file);
    struct run_info model_info = t->info;
    snprintf(model_info.kind, sizeof model_info.kind, "model");
    train_state_write(c->model_file, &t->m, &t->h, &model_info);
    printf("Finished Training\n");
}

/* After a stop the ranks agreed on, with the checkpoint written: every rank leaves with
 * EXIT_INTERRUPTED, which the same command resumes from. */
static void stopped(struct trainer *t, int requests) {
    if (t->d.rank == 0)
        printf("stopped by a signal (SIGTERM, SIGINT or SIGUSR1 on %d of %d ranks) after step %ld (epoch %d, "
               "step %d of %d); %s holds it: "
               "run the same command to resume\n",
               requests, t->d.world, (long)t->info.global_step, t->info.epochs_completed + 1,
               t->info.step_in_epoch, t->steps, t->checkpoint_file);
    const struct kernels *k = t->m.k;
    trainer_free(t);
    fflush(stdout);
    dist_barrier(); /* no rank exits (and has mpirun end the job) before the checkpoint is written */
    dist_finalize();
    k->shutdown();
    exit(EXIT_INTERRUPTED);
}

int main(int argc, char **argv) {
    err_set_progname("cifar10-train");
    setvbuf(stdout, NULL, _IOLBF, 0); /* line-buffered for kubectl logs */
    static struct trainer t;
    trainer_init(&t, argc, argv);
    train_state_start(&t);
    open_metrics(&t);
    trainer_warm_up(&t);
    const struct train_config *c = &t.c;
    int R = t.d.rank == 0, epochs_run = 0;
    double epochs_time = 0;
    t.run_start = t.checkpoint_at = dist_time();
    for (int epoch = t.info.epochs_completed; epoch < t.epochs; epoch++) {
        double t0 = dist_time();
        int first = t.info.step_in_epoch;
        begin_epoch(&t, epoch);
        double written = t.checkpoint_s;
        int stop = train_epoch(&t, epoch);
        t.steps_s += dist_time() - t0 - (t.checkpoint_s - written); /* less mid-epoch checkpoints */
        if (stop) stopped(&t, stop);                                /* with the checkpoint written */
        double rate = (double)(epoch_steps(&t, epoch) - first) * t.global_batch / (dist_time() - t0);
        train_state_average_running(&t.m, &t.h, t.buffer_sums, t.d.world);
        double t1 = dist_time(), test_acc = c->eval && t.data.test.n > 0 ? test_accuracy(&t, 0) : -1;
        t.scoring_s += dist_time() - t1;
        t.info.epochs_completed = epoch + 1;
        epochs_run++;
        double eta = (epochs_time + dist_time() - t0) / epochs_run * (t.epochs - epoch - 1);
        /* the record goes before the checkpoint: whatever a resume starts from has its epochs' records */
        if (R) report_epoch(&t, epoch, test_acc, rate, eta);
        t.info.step_in_epoch = 0;
        t.info.epoch_loss = t.info.epoch_correct = t.info.print_loss = 0;
        if (R) write_checkpoint(&t, &t.h);
        t.checkpoint_at = dist_time();
        epochs_time += dist_time() - t0;
    }
    if (c->tta > 0 && t.data.test.n > 0) {
        double t1 = dist_time(), acc = test_accuracy(&t, c->tta);
        t.final_s = dist_time() - t1;
        if (R) printf("final test accuracy %.2f%% (test-time augmentation level %d)\n", acc, c->tta);
        struct err e;
        if (R)
            metrics_warn(metrics_final(&t.metrics, (long)t.info.global_step, acc, c->tta,
                                       dist_time() - t.run_start, &e),
                         &e);
        if (R) metrics_warn(tensorboard_final(&t.tb, (long)t.info.global_step, acc, &e), &e);
    }
    if (R) finish(&t, epochs_run);
    const struct kernels *k = t.m.k;
    trainer_free(&t);
    dist_finalize();
    k->shutdown(); /* last, after MPI_Finalize: see kernels.h */
    return 0;
}
