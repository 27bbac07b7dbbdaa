/* The ranks' model states in step: start or resume, running statistics, files (trainer.h). */
#include "trainer.h"

#include "../common/err.h"
#include "../common/rng.h"
#include "../model/whiten.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* Puts rank 0's state on every rank (identical start, fresh or resumed); h: host buffers. */
static void broadcast_state(struct model *m, struct model_state *h, int rank) {
    if (rank == 0) {
        model_get_state(m, h->params, h->momentum, h->buffers);
        h->batches_tracked = m->batches_tracked;
        if (h->ema_params) model_get_lookahead(m, h->ema_params, h->ema_buffers);
    }
    dist_bcast(h->params, m->nparams * sizeof(float), 0);
    dist_bcast(h->momentum, m->nparams * sizeof(float), 0);
    dist_bcast(h->buffers, m->nbuffers * sizeof(float), 0);
    dist_bcast(&h->batches_tracked, sizeof h->batches_tracked, 0);
    model_set_state(m, h->params, h->momentum, h->buffers);
    m->batches_tracked = h->batches_tracked;
    if (!h->ema_params) return;
    dist_bcast(h->ema_params, m->nparams * sizeof(float), 0);
    dist_bcast(h->ema_buffers, m->nbuffers * sizeof(float), 0);
    model_set_lookahead(m, h->ema_params, h->ema_buffers);
}

/* buffers[S] with its running statistics replaced by their mean over the ranks. */
static void average_running(const struct model *m, float *buffers, float *sum, int world) {
    memcpy(sum, buffers, m->nbuffers * sizeof(float));
    dist_allreduce_sum(sum, m->nbuffers);
    for (int t = 0; t < m->ntensors; t++) {
        const struct model_tensor *mt = &m->tensors[t];
        if (!mt->running) continue;
        for (size_t i = mt->offset; i < mt->offset + mt->numel; i++) buffers[i] = sum[i] / (float)world;
    }
}

void train_state_average_running(struct model *m, struct model_state *h, float *sum, int world) {
    if (world == 1) return;
    model_get_state(m, NULL, NULL, h->buffers);
    average_running(m, h->buffers, sum, world);
    model_set_state(m, NULL, NULL, h->buffers);
    if (!m->ema_params) return;
    model_get_lookahead(m, h->ema_params, h->ema_buffers);
    average_running(m, h->ema_buffers, sum, world);
    model_set_lookahead(m, h->ema_params, h->ema_buffers);
}

static void new_run_id(char *out, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    uint64_t h = 0;
    for (const char *c = host; *c; c++) h = h * 131 + (unsigned char)*c;
    struct rng r = rng_make((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec, RNG_RUN_ID,
                            (uint64_t)getpid(), h);
    time_t now = ts.tv_sec;
    struct tm tm;
    gmtime_r(&now, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(out, n, "%s-%08" PRIx32, stamp, (uint32_t)rng_u64(&r));
}

void train_state_write(const char *path, const struct model *m, struct model_state *h,
                       const struct run_info *info) {
    model_get_state(m, h->params, h->momentum, h->buffers);
    h->batches_tracked = m->batches_tracked;
    if (h->ema_params) model_get_lookahead(m, h->ema_params, h->ema_buffers);
    struct err e;
    if (checkpoint_write(path, m, h, info, &e) != 0) dist_fail(1, e.msg);
}

/* Rank 0, resuming a mid-epoch checkpoint of another rank count: its ranks' running statistics
 * (and their lookahead averages) averaged into h, as the epoch's end would have averaged them. */
static void average_saved_ranks(struct trainer *t) {
    struct model_state *h = &t->h;
    size_t S = t->m.nbuffers;
    for (int i = 0; i < t->m.ntensors; i++) {
        const struct model_tensor *mt = &t->m.tensors[i];
        for (size_t j = mt->offset; mt->running && j < mt->offset + mt->numel; j++) {
            double sum = 0, ema = 0;
            for (int r = 0; r < h->ranks; r++) {
                sum += h->rank_buffers[(size_t)r * S + j];
                if (h->ema_params) ema += h->rank_ema_buffers[(size_t)r * S + j];
            }
            h->buffers[j] = (float)(sum / h->ranks);
            if (h->ema_params) h->ema_buffers[j] = (float)(ema / h->ranks);
        }
    }
    printf("%s: written mid-epoch by %d ranks, resumed on %d: their batch-norm running statistics averaged\n",
           t->checkpoint_file, h->ranks, t->d.world);
    checkpoint_state_drop_ranks(h);
}

/* After broadcast_state, resuming a mid-epoch checkpoint of as many ranks as this job: rank r
 * takes rank r's running statistics (and their lookahead averages) from rank 0's copy. */
static void scatter_saved_ranks(struct trainer *t) {
    struct model_state *h = &t->h;
    int ranks = h->ranks;
    dist_bcast(&ranks, sizeof ranks, 0);
    if (ranks == 1) return;
    CHECK(ranks == t->d.world); /* try_resume averaged any other count */
    dist_scatter_floats(h->rank_buffers, h->buffers, t->m.nbuffers);
    model_set_state(&t->m, NULL, NULL, h->buffers);
    if (h->ema_params) {
        dist_scatter_floats(h->rank_ema_buffers, h->ema_buffers, t->m.nbuffers);
        model_set_lookahead(&t->m, h->ema_params, h->ema_buffers);
    }
    checkpoint_state_drop_ranks(h);
}

/* Rank 0: loads the checkpoint when --resume asks for it and the settings match. Returns 1 when
 * resumed, 0 for a fresh start, -1 with e set on an error. */
static int try_resume(struct trainer *t, struct err *e) {
    struct stat sb;
    int exists = stat(t->checkpoint_file, &sb) == 0;
    if (t->c.resume == RESUME_REQUIRE && !exists)
        return err_set(e, "%s: no checkpoint to resume from (--resume=require)", t->checkpoint_file);
    if (t->c.resume == RESUME_NEVER || !exists) return 0;
    struct run_info saved;
    if (checkpoint_read(t->checkpoint_file, &t->m, &t->h, &saved, e) != 0) {
        snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg),
                 " (use --resume=never to start over)");
        return -1;
    }
    struct err why;
    if (config_compare(&t->c, saved.config, &why) != 0)
        return err_set(e, "%s: cannot resume: %s (use --resume=never to start over)", t->checkpoint_file,
                       why.msg);
    if (saved.epochs_completed > t->epochs)
        return err_set(e, "%s: has %d epochs, more than --epochs %g", t->checkpoint_file,
                       saved.epochs_completed, t->c.epochs);
    if (saved.step_in_epoch > 0 && saved.steps_per_epoch != t->steps)
        return err_set(e,
                       "%s: written in the middle of an epoch of %d steps; this job's epochs have %d "
                       "(another rank count?): "
                       "resume with the ranks it had, or use --resume=never to start over",
                       t->checkpoint_file, saved.steps_per_epoch, t->steps);
    if (t->h.ranks > 1 && t->h.ranks != t->d.world) average_saved_ranks(t);
    model_set_state(&t->m, t->h.params, t->h.momentum, t->h.buffers);
    t->m.batches_tracked = t->h.batches_tracked;
    if (t->h.ema_params) model_set_lookahead(&t->m, t->h.ema_params, t->h.ema_buffers);
    t->info.epochs_completed = saved.epochs_completed;
    t->info.global_step = saved.global_step;
    t->info.step_in_epoch = saved.step_in_epoch;
    t->info.epoch_loss = saved.epoch_loss, t->info.epoch_correct = saved.epoch_correct;
    t->info.print_loss = saved.print_loss;
    memcpy(t->info.run_id, saved.run_id, sizeof t->info.run_id);
    if (saved.kernels[0] && strcmp(saved.kernels, t->info.kernels) != 0) /* --device, --precision */
        printf("%s: written by steps on the %s kernels; this run continues on %s (from the same weights, "
               "not bit for bit as a run on either)\n",
               t->checkpoint_file, saved.kernels, t->info.kernels);
    return 1;
}

/* A fresh start's first layer: the whitening filter of the first c.whiten_images training
 * images (rank 0; the broadcast gives it to the others). */
static int whiten_first_layer(struct trainer *t, struct err *e) {
    const struct model_tensor *w = &t->m.tensors[t->m.layers[0].weight];
    CHECK(w->home == HOME_BUFFERS && w->numel == WHITEN_FILTERS * WHITEN_DIM);
    model_get_state(&t->m, NULL, NULL, t->h.buffers);
    if (whiten_filter(t->m.k, &t->data.train, t->c.whiten_images, t->h.buffers + w->offset, e) != 0) {
        snprintf(e->msg + strlen(e->msg), sizeof e->msg - strlen(e->msg), " (%s)", t->data.source);
        return -1;
    }
    model_set_state(&t->m, NULL, NULL, t->h.buffers);
    return 0;
}

void train_state_start(struct trainer *t) {
    struct err e = {""};
    int resumed = 0, status = 0;
    if (t->c.lookahead) model_lookahead_init(&t->m);
    if (t->d.rank == 0) {
        resumed = try_resume(t, &e);
        if (resumed < 0) status = 1;
        double t0 = dist_time();
        if (resumed == 0 && t->c.whiten_images > 0 && whiten_first_layer(t, &e) != 0) status = 1;
        t->whiten_s = resumed == 0 && t->c.whiten_images > 0 ? dist_time() - t0 : 0.0;
        if (resumed == 0 && t->c.lookahead) model_lookahead_init(&t->m); /* averages start at the weights */
        if (resumed <= 0) new_run_id(t->info.run_id, sizeof t->info.run_id);
    }
    dist_agree(status, e.msg);
    dist_bcast(&resumed, sizeof resumed, 0);
    dist_bcast(&t->info, sizeof t->info, 0);
    broadcast_state(&t->m, &t->h, t->d.rank);
    scatter_saved_ranks(t);
    if (t->d.rank != 0) return;
    const struct train_config *c = &t->c;
    if (resumed && t->info.step_in_epoch > 0) {
        printf("resuming run %s from %s: %d of %d epochs and %d of %d steps of epoch %d done\n",
               t->info.run_id, t->checkpoint_file, t->info.epochs_completed, t->epochs, t->info.step_in_epoch,
               t->steps, t->info.epochs_completed + 1);
        return;
    }
    if (resumed) {
        printf("resuming run %s from %s: %d of %d epochs done\n", t->info.run_id, t->checkpoint_file,
               t->info.epochs_completed, t->epochs);
        return;
    }
    printf("starting run %s: %s, %g epochs (%ld steps), lr %g (%s%s), momentum %g%s, weight decay %g, seed "
           "%" PRIu64 ", augmentation %s\n",
           t->info.run_id, c->model, c->epochs, t->total_steps, c->learning_rate,
           config_schedule_name(c->schedule), c->units == UNITS_AIRBENCH ? ", airbench's units" : "",
           c->momentum, c->nesterov ? " (Nesterov)" : "", c->weight_decay, c->seed,
           c->augment == AUGMENT_NONE        ? "off"
           : c->augment == AUGMENT_CROP_FLIP ? "crop + flip"
                                             : "crop + alternating flip");
    if (c->label_smoothing > 0 || c->loss == XENT_SUM || c->lookahead || c->norm_lr_scale != 1.0)
        printf("recipe: label smoothing %g, %s loss, lookahead every %d steps, batch-norm lr x %g\n",
               c->label_smoothing, c->loss == XENT_SUM ? "summed" : "mean", c->lookahead, c->norm_lr_scale);
    if (c->whiten_images > 0)
        printf("first layer: whitening filter of the first %d training images%s\n", c->whiten_images,
               c->first_bias_epochs > 0 ? "; its bias trains for the first epochs only" : "");
}
