/* struct trainer's life outside the loop (trainer.h): the process's stop signals, then flags,
 * MPI, threads, device, data, the run's plan, the model and the gradient reduction, and their
 * release. */
#include "trainer.h"

#include "../common/err.h"
#include "../data/augment.h"
#include "../data/shard.h"
#include "../model/evaluate.h"
#include "device.h"
#include "train_options.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The signal (SIGTERM, SIGINT, SIGUSR1) that asked this process to stop, 0 while none has:
 * written by the handler, read before each step. A global because a signal handler can reach
 * nothing else. SIGUSR1 because mpirun forwards it to every rank at once, while it answers its
 * own SIGTERM by sending the ranks SIGCONT, then SIGTERM odls_base_sigkill_timeout seconds later
 * and SIGKILL as many seconds after that (Open MPI 4.1, measured). */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) { stop_signal = sig; }

/* From here on SIGTERM, SIGINT and SIGUSR1 ask for a stop at a step boundary (train_epoch)
 * rather than ending the process. SA_RESTART: a signal in the middle of a file write restarts
 * the call. */
static void catch_stop_signals(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    CHECK(sigaction(SIGTERM, &sa, NULL) == 0 && sigaction(SIGINT, &sa, NULL) == 0 &&
          sigaction(SIGUSR1, &sa, NULL) == 0);
}

/* The default checkpoint and metrics files beside the model file: M.safetensors gives
 * M`tag``ext`, any other name N gives N`tag`. */
static char *beside_model(const char *model_file, const char *tag, const char *ext) {
    const char *st = ".safetensors";
    size_t n = strlen(model_file), sl = strlen(st), size = n + strlen(tag) + strlen(ext) + 1;
    char *p = XALLOC(size);
    if (n > sl && strcmp(model_file + n - sl, st) == 0)
        snprintf(p, size, "%.*s%s%s", (int)(n - sl), model_file, tag, ext);
    else snprintf(p, size, "%s%s", model_file, tag);
    return p;
}

/* Exits (all ranks agree) where a rank's batch is more than the network takes: before the GPU
 * and the data are opened. */
static void check_rank_batch(const struct trainer *t) {
    const struct train_config *c = &t->c;
    struct err why, e = {""};
    int rank_batch = c->batch_scope == BATCH_GLOBAL ? c->batch_size / t->d.world : c->batch_size;
    int bad = model_batch_check(net_find(c->model), rank_batch, &why) ? 2 : 0;
    if (bad) err_set(&e, "--batch-size %d: %s", c->batch_size, why.msg);
    dist_agree(bad, e.msg);
}

/* The per-rank batch and the run's length from the data and the rank count; exits (all ranks
 * agree) when they do not fit. */
static void plan_steps(struct trainer *t) {
    const struct train_config *c = &t->c;
    struct err e = {""};
    int bad = 0;
    t->batch = c->batch_scope == BATCH_GLOBAL ? c->batch_size / t->d.world : c->batch_size;
    if (c->batch_scope == BATCH_GLOBAL && c->batch_size % t->d.world != 0)
        bad = 2, err_set(&e, "--batch-size %d (the global batch of %s) does not split evenly over %d ranks",
                         c->batch_size, c->model, t->d.world);
    else if (c->units == UNITS_AIRBENCH && c->momentum >= 1.0)
        bad = 2,
        err_set(&e, "--momentum %g: %s's learning-rate units need a momentum below 1", c->momentum, c->model);
    dist_agree(bad, e.msg);
    t->global_batch = t->d.world * t->batch;
    t->steps = shard_steps(t->data.train.n, t->d.world, t->batch);
    if (t->steps == 0)
        snprintf(e.msg, sizeof e.msg, "%s: %d training images, fewer than one global batch (%d ranks x %d)",
                 t->data.source, t->data.train.n, t->d.world, t->batch);
    dist_agree(t->steps == 0 ? 1 : 0, e.msg);
    t->total_steps = (long)ceil(t->steps * c->epochs - 1e-9);
    if (t->total_steps < 1) t->total_steps = 1;
    t->epochs = (int)((t->total_steps + t->steps - 1) / t->steps);
    if (t->d.rank == 0)
        printf(
            "data: %s: %d training images, %d test images; %d steps per epoch of %d images (%d ranks x %d), "
            "%d dropped per epoch\n",
            t->data.source, t->data.train.n, t->data.test.n, t->steps, t->global_batch, t->d.world, t->batch,
            t->data.train.n - t->steps * t->global_batch);
}

/* CIFAR10_WARM_UP (trainer_warm_up): unset or empty, 4 on a GPU and 0 on the CPU; else a count
 * of steps, 0 to 100; -1 with one line in e for anything else. */
static int warm_up_steps(const struct kernels *k, struct err *e) {
    const char *v = getenv("CIFAR10_WARM_UP");
    if (!v || !*v) return k->host ? 0 : 4;
    char *end;
    long n = strtol(v, &end, 10);
    if (*end || n < 0 || n > 100)
        return err_set(e, "CIFAR10_WARM_UP=%s: expected a count of steps, 0 to 100", v), -1;
    return (int)n;
}

/* MPI (after the GPU a CUDA-aware MPI sets up on is made current), the stop signals, then the
 * flags; exits (all ranks agree) on a bad command line, with 0 after --help and --version. */
static void start(struct trainer *t, int argc, char **argv, struct device_early *early) {
    device_before_mpi(argc, argv, early);
    dist_init(&argc, &argv, t->cpus.mask_id, &t->d);
    catch_stop_signals();
    dist_stop_flag(&stop_signal);
    struct err e = {""};
    int status = train_options_parse(argc, argv, &t->c, t->d.rank, &e);
    if (status == -1) { /* --help, --version */
        dist_finalize();
        exit(0);
    }
    if (status) snprintf(e.msg + strlen(e.msg), sizeof e.msg - strlen(e.msg), " (try --help)");
    dist_agree(status, e.msg);
    check_rank_batch(t);
    const struct train_config *c = &t->c;
    if (c->collective_timeout > 0) dist_timeout_fixed(c->collective_timeout);
    t->checkpoint_file = c->checkpoint_file ? strdup(c->checkpoint_file)
                                            : beside_model(c->model_file, ".checkpoint", ".safetensors");
    t->metrics_file =
        c->metrics_file ? strdup(c->metrics_file) : beside_model(c->model_file, ".metrics.jsonl", "");
}

/* The rank's threads and device, and the settings read from the environment for it; *graphs
 * is device_graphs_wanted's answer. Exits (all ranks agree) where one cannot be had. */
static const struct kernels *device_setup(struct trainer *t, struct device_early *early, int *graphs) {
    const struct train_config *c = &t->c;
    struct err e = {""};
    t->threads =
        c->threads ? c->threads : t->cpus.usable / (t->d.local_same_mask > 0 ? t->d.local_same_mask : 1);
    if (t->threads < 1) t->threads = 1;
    omp_set_num_threads(t->threads);
    const struct kernels *k = device_select(c->device, c->precision, c->bf16_recipe, t->d.local_rank,
                                            t->device, sizeof t->device, &e);
    dist_agree(k ? 0 : 1, e.msg);
    if (!k->host) device_after_mpi(early, t->d.local_rank);
    *graphs = device_graphs_wanted(&e);
    dist_agree(*graphs < 0 ? 1 : 0, e.msg);
    dist_agree(dist_cuda_aware_wanted(&e) < 0 ? 1 : 0, e.msg);
    t->warm_up = warm_up_steps(k, &e);
    dist_agree(t->warm_up < 0 ? 1 : 0, e.msg);
    return k;
}

/* Rank 0's line on the ranks, threads and CPU kernels, then every rank's device. */
static void log_setup(const struct trainer *t) {
    if (t->d.rank == 0) {
        char quota[32] = "none";
        if (t->cpus.quota > 0) snprintf(quota, sizeof quota, "%.2f CPUs", t->cpus.quota);
        printf(
            "cifar10-train %s: %d rank(s) x %d thread(s); threads %s (rank 0: %d CPUs in its affinity mask, "
            "cgroup quota %s, shared by %d rank(s) on this node); CPU kernels: %s (bf16: %s)\n",
            CIFAR10_DP_VERSION, t->d.world, t->threads, t->c.threads ? "from --threads" : "detected",
            t->cpus.affinity, quota, t->d.local_same_mask, kernels_cpu_isa(),
            kernels_cpu_bf16_vector() ? kernels_cpu_bf16_isa() : "none");
    }
    dist_print_all(t->device);
}

/* Rank 0's line on how the gradients are reduced and whether steps run as CUDA graphs. */
static void log_gradients(const struct trainer *t, int graphs) {
    if (t->d.rank != 0) return;
    printf("gradients: %s", dist_grads_mode_name(dist_grads_mode(t->grads)));
    if (dist_grads_refusal(t->grads)) printf(" (%s)", dist_grads_refusal(t->grads));
    if (dist_grads_mode(t->grads) != DIST_GRADS_LOCAL) {
        if (t->c.bucket_mb > 0) printf(", buckets of %g MiB overlapped with backward", t->c.bucket_mb);
        else printf(", one allreduce after backward");
    }
    if (t->m.graphs)
        printf("; training steps as CUDA graphs%s (CIFAR10_CUDA_GRAPHS=off: op by op)",
               t->m.grads_ready ? ", one between two gradient hand-overs" : "");
    else if (graphs == 2) printf("; CIFAR10_CUDA_GRAPHS=on ignored: the CPU records no graphs");
    printf("\n");
}

/* The model, its batches, the gradient reduction and the host state for files, for the run's
 * plan. */
static void model_setup(struct trainer *t, const struct kernels *k, int graphs) {
    const struct train_config *c = &t->c;
    const struct net_def *net = net_find(c->model);
    CHECK(net && net->classes == CIFAR_CLASSES); /* parse_model names a known network */
    model_init(&t->m, net, k, t->batch, c->seed);
    if ((c->eval || c->tta) && t->data.test.n > 0) { /* before the run's clock starts */
        int begin, end;
        trainer_test_slice(t, &begin, &end);
        evaluate_plan(&t->m, begin, end);
    }
    batches_init(&t->batches, k, t->batch);
    t->m.label_smoothing = (float)c->label_smoothing;
    t->m.loss_reduction = c->loss;
    t->grads = dist_grads_attach(&t->m, (size_t)(c->bucket_mb * 1048576.0), !k->host);
    t->m.graphs = graphs > 0 && !k->host;
    log_gradients(t, graphs);
    t->h = checkpoint_state_alloc(&t->m, STATE_MOMENTUM | (c->lookahead ? STATE_LOOKAHEAD : 0u));
    t->buffer_sums = XALLOC((t->m.nbuffers ? t->m.nbuffers : 1) * sizeof(float));
    snprintf(t->info.kind, sizeof t->info.kind, "checkpoint");
    snprintf(t->info.kernels, sizeof t->info.kernels, "%s", k->name);
    t->info.steps_per_epoch = t->steps;
    struct strbuf cfg = {0};
    config_to_json(c, &cfg);
    CHECK(cfg.len < sizeof t->info.config);
    memcpy(t->info.config, cfg.s, cfg.len + 1);
    strbuf_free(&cfg);
    t->perm = XALLOC((size_t)t->data.train.n * sizeof(int));
}

void trainer_init(struct trainer *t, int argc, char **argv) {
    memset(t, 0, sizeof *t);
    cpus_detect(&t->cpus);
    struct device_early early; /* a CUDA-aware MPI sets up on the GPU current when it starts */
    start(t, argc, argv, &early);
    int graphs;
    const struct kernels *k = device_setup(t, &early, &graphs);
    log_setup(t);
    const struct train_config *c = &t->c;
    if (t->d.rank == 0) printf("reading %s\n", c->data);
    struct err e = {""};
    int status =
        cifar_load(c->data, CIFAR_TRAIN | (c->eval || c->tta ? CIFAR_TEST_OPTIONAL : 0), &t->data, &e) ? 1
                                                                                                       : 0;
    dist_agree(status, e.msg);
    plan_steps(t);
    model_setup(t, k, graphs);
}

struct model_update trainer_update(const struct trainer *t) {
    const struct train_config *c = &t->c;
    struct model_update u = {.lookaheads = 0};
    long step = (long)t->info.global_step;
    config_sgd_at(c, step, t->total_steps, t->steps, t->global_batch, t->d.world, &u.sgd);
    double w = config_lookahead_weight(c, step + 1, t->total_steps);
    if (w >= 0) u.lookahead[u.lookaheads++] = (float)w;
    if (c->lookahead && step + 1 == t->total_steps) u.lookahead[u.lookaheads++] = 0.0f;
    return u;
}

void trainer_warm_up(struct trainer *t) {
    struct model *m = &t->m;
    if (t->warm_up == 0) return;
    /* The steps here are the run's own, so their graphs are the ones it uses: one rank's with
     * the update (the common one, without lookahead; the weights and momentum put back), the
     * others' with their gradient hand-overs rehearsed (no gradient leaves the rank). */
    int one_rank = !m->grads_ready;
    struct model_update u = trainer_update(t);
    u.lookaheads = 0;
    size_t P = one_rank ? m->nparams : 1;
    float *params = XALLOC(P * sizeof(float)), *momentum = XALLOC(P * sizeof(float)),
          *buffers = XALLOC((m->nbuffers ? m->nbuffers : 1) * sizeof(float));
    model_get_state(m, one_rank ? params : NULL, one_rank ? momentum : NULL, buffers);
    int64_t tracked = m->batches_tracked;
    dist_grads_rehearse(t->grads, 1);
    for (int s = 0; s < t->warm_up; s++) {
        struct batch *b = batches_next(&t->batches);
        memset(b->img, 0, (size_t)t->batch * CIFAR_IMAGE_BYTES);
        for (int i = 0; i < t->batch; i++) b->geom[3 * i] = b->geom[3 * i + 1] = 4, b->geom[3 * i + 2] = 0;
        memset(b->labels, 0, (size_t)t->batch * sizeof(int));
        b->reflect = augment_reflects(t->c.augment);
        batches_submit(&t->batches, t->batch);
        struct model_input in;
        int slot = batches_take(&t->batches, &in);
        if (one_rank) model_train_step(m, &in, &u);
        else in.stats = NULL, model_forward_backward(m, &in); /* as train_epoch's steps */
        batches_release(&t->batches, slot);
    }
    dist_grads_rehearse(t->grads, 0);
    m->batches_tracked = tracked;
    model_set_state(m, one_rank ? params : NULL, one_rank ? momentum : NULL, buffers);
    free(params), free(momentum), free(buffers);
    /* The scoring's kernels too (eval mode changes nothing): one batch of this rank's test slice
     * at the run's TTA level, the result dropped. */
    if ((t->c.eval || t->c.tta) && t->data.test.n > 0) {
        int begin, end;
        long confusion[CIFAR_CLASSES][CIFAR_CLASSES] = {{0}};
        trainer_test_slice(t, &begin, &end);
        if (end - begin > t->batch) end = begin + t->batch;
        if (end > begin) evaluate_range(m, &t->data.test, begin, end, t->c.tta, confusion);
    }
    if (t->d.rank == 0)
        printf(
            "warm-up: %d steps' forward and backward%s on zero images, untimed, undone (CIFAR10_WARM_UP)\n",
            t->warm_up, one_rank ? " and update" : "");
}

void trainer_test_slice(const struct trainer *t, int *begin, int *end) {
    int n = t->data.test.n;
    *begin = (int)((long)n * t->d.rank / t->d.world);
    *end = (int)((long)n * (t->d.rank + 1) / t->d.world);
}

void trainer_free(struct trainer *t) {
    free(t->perm), free(t->checkpoint_file), free(t->metrics_file);
    metrics_close(&t->metrics);
    tensorboard_close(&t->tb);
    dist_grads_free(t->grads);
    checkpoint_state_free(&t->h);
    free(t->buffer_sums);
    batches_free(&t->batches);
    model_free(&t->m);
    cifar_free(&t->data);
}

int trainer_stop_signal(void) { return stop_signal; }
