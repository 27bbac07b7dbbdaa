#include "dist.h"

#include "../common/err.h"
#include "../model/model.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h> /* MPIX_Query_cuda_support */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Checked MPI call: MPI's default handler already aborts the job on errors; this catches the
 * cases where an error handler returned instead, naming the call and location. */
#define MPI_CHECK(call)                                                                                      \
    do {                                                                                                     \
        int mpi_rc_ = (call);                                                                                \
        if (mpi_rc_ != MPI_SUCCESS) {                                                                        \
            fprintf(stderr, "%s: %s failed (MPI error %d) at %s:%d\n", err_progname(), #call, mpi_rc_,       \
                    __FILE__, __LINE__);                                                                     \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                                    \
        }                                                                                                    \
    } while (0)

static struct dist self;

/* The collective deadline (dist.h: dist_timeout_*): MPI is process-wide state, and so is this. */
static struct {
    double seconds;    /* current bound on a collective's wait */
    int fixed;         /* --collective-timeout given: no adaptation */
    long step;         /* global step of the last dist_timeout_step (-1: before the first) */
    double recent[64]; /* the last step times, a ring */
    int n;             /* step times recorded */
} deadline = {DIST_TIMEOUT_STARTUP, 0, -1, {0}, 0};
static volatile sig_atomic_t *stop_flag; /* dist_stop_flag's, NULL while none was given */

void dist_stop_flag(volatile sig_atomic_t *flag) { stop_flag = flag; }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void dist_timeout_fixed(double seconds) {
    deadline.seconds = seconds;
    deadline.fixed = 1;
}

void dist_timeout_step(long global_step, double step_seconds) {
    deadline.step = global_step;
    deadline.recent[deadline.n++ % 64] = step_seconds;
    if (deadline.fixed || deadline.n < DIST_TIMEOUT_WARMUP) return;
    int k = deadline.n < 64 ? deadline.n : 64;
    double sorted[64];
    memcpy(sorted, deadline.recent, (size_t)k * sizeof(double));
    qsort(sorted, (size_t)k, sizeof(double), cmp_double);
    double bound = DIST_TIMEOUT_STEPS * sorted[k / 2];
    deadline.seconds = bound > DIST_TIMEOUT_MIN ? bound : DIST_TIMEOUT_MIN;
}

/* Ends the process when a wait of `waited` seconds so far has gone on too long: past the
 * deadline, or past DIST_STALL_STOP with a stop requested; one line naming the rank, the last
 * step and `what`. */
static void check_wait(const char *what, double waited) {
    int stop = stop_flag && *stop_flag && waited >= DIST_STALL_STOP;
    if (waited <= deadline.seconds && !stop) return;
    char step[48] = "before the first step";
    if (deadline.step >= 0) snprintf(step, sizeof step, "after step %ld", deadline.step);
    char why[96];
    if (stop) snprintf(why, sizeof why, "had waited %.0f s when a stop signal came", waited);
    else
        snprintf(why, sizeof why, "made no progress for %.0f s (collective timeout %.0f s)", waited,
                 deadline.seconds);
    fprintf(stderr,
            "%s: rank %d, %s: %s %s: a rank, host or link is gone or stalled; stopping (rerun to resume "
            "from the last checkpoint)\n",
            err_progname(), self.rank, step, what, why);
    fflush(stdout);
    fflush(stderr);
    _exit(DIST_EXIT_TIMEOUT);
}

/* Between two polls of a wait that has gone on for `waited` seconds (see DIST_SPIN_SECONDS). */
static void wait_pause(double waited) {
    if (waited < DIST_SPIN_SECONDS) {
        sched_yield();
        return;
    }
    struct timespec pause = {0, DIST_POLL_SLEEP_NS};
    nanosleep(&pause, NULL);
}

/* Waits for the n requests, MPI progressing them, for at most the deadline; past it, one line
 * naming the rank, the last step and `what`, and the process exits (mpirun then ends the job):
 * a rank, host or link that is gone can leave a collective waiting forever. */
static void wait_all(int n, MPI_Request *req, const char *what) {
    double start = MPI_Wtime();
    for (;;) {
        int done = 0;
        MPI_CHECK(MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE));
        if (done) return;
        double waited = MPI_Wtime() - start;
        check_wait(what, waited);
        wait_pause(waited);
    }
}

void dist_mpi_defaults(void) {
    /* Open MPI's nonblocking allreduce (coll/libnbc, which the gradient buckets use) takes a
     * binomial tree for in-place buffers, sending each bucket whole about log2(ranks) times over
     * the slowest links; its ring sends 2 (ranks - 1) / ranks of it. Between namespace hosts on
     * 1 Gbit/s links the ring reduced a 2 MiB bucket 1.7x faster on 2 ranks and 3.1x on 8
     * (docs/scaling.md). Set before MPI_Init, where Open MPI reads its parameters; a value the
     * user set (environment, mpirun -x or --mca) wins; other MPIs ignore it. */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
}

void dist_init(int *argc, char ***argv, uint64_t mask_id, struct dist *d) {
    dist_mpi_defaults();
    int provided; /* below SERIALIZED: the gradient buckets go without their progress thread */
    MPI_CHECK(MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided));
    MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
    MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &d->world));
    MPI_Comm node;
    MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node));
    MPI_CHECK(MPI_Comm_rank(node, &d->local_rank));
    MPI_CHECK(MPI_Comm_size(node, &d->local_size));
    uint64_t *masks = XALLOC((size_t)d->local_size * sizeof *masks);
    MPI_CHECK(MPI_Allgather(&mask_id, 1, MPI_UINT64_T, masks, 1, MPI_UINT64_T, node));
    d->local_same_mask = 0;
    for (int i = 0; i < d->local_size; i++) d->local_same_mask += masks[i] == mask_id;
    free(masks);
    MPI_CHECK(MPI_Comm_free(&node));
    self = *d;
}

void dist_finalize(void) { MPI_CHECK(MPI_Finalize()); }

void dist_agree(int status, const char *message) {
    int mine = status ? self.rank : INT_MAX, first_bad = INT_MAX;
    MPI_Request r;
    MPI_CHECK(MPI_Iallreduce(&mine, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD, &r));
    wait_all(1, &r, "MPI_Allreduce (agreeing on errors)");
    if (first_bad == INT_MAX) return;
    if (self.rank == first_bad) fprintf(stderr, "%s: %s\n", err_progname(), message);
    /* Everyone exits with the reporting rank's code. */
    int exit_code = status;
    MPI_CHECK(MPI_Ibcast(&exit_code, 1, MPI_INT, first_bad, MPI_COMM_WORLD, &r));
    wait_all(1, &r, "MPI_Bcast (an error's exit code)");
    fflush(stdout);
    fflush(stderr);
    MPI_Finalize();
    exit(exit_code);
}

void dist_fail(int code, const char *message) {
    fprintf(stderr, "%s: %s\n", err_progname(), message);
    fflush(stdout);
    fflush(stderr);
    if (self.world <= 1) {
        MPI_Finalize();
        exit(code);
    }
    MPI_Abort(MPI_COMM_WORLD, code);
    exit(code);
}

void dist_allreduce_sum(float *buf, size_t n) {
    while (n > 0) {
        int chunk = n > INT_MAX ? INT_MAX : (int)n;
        MPI_Request r;
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &r));
        wait_all(1, &r, "MPI_Allreduce");
        buf += chunk, n -= (size_t)chunk;
    }
}

void dist_allreduce_sum_double(double *buf, size_t n) {
    CHECK(n <= INT_MAX);
    MPI_Request r;
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &r));
    wait_all(1, &r, "MPI_Allreduce");
}

void dist_bcast(void *buf, size_t bytes, int root) {
    char *p = buf;
    while (bytes > 0) {
        int chunk = bytes > INT_MAX ? INT_MAX : (int)bytes;
        MPI_Request r;
        MPI_CHECK(MPI_Ibcast(p, chunk, MPI_BYTE, root, MPI_COMM_WORLD, &r));
        wait_all(1, &r, "MPI_Bcast");
        p += chunk, bytes -= (size_t)chunk;
    }
}

double dist_time(void) { return MPI_Wtime(); }

void dist_gather_floats(const float *mine, float *all, size_t n) {
    CHECK(n <= INT_MAX);
    MPI_Request r;
    MPI_CHECK(MPI_Igather(mine, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD, &r));
    wait_all(1, &r, "MPI_Gather");
}

void dist_scatter_floats(const float *all, float *mine, size_t n) {
    CHECK(n <= INT_MAX);
    MPI_Request r;
    MPI_CHECK(MPI_Iscatter(all, (int)n, MPI_FLOAT, mine, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD, &r));
    wait_all(1, &r, "MPI_Scatter");
}

double dist_max_double(double x) {
    double out;
    MPI_Request r;
    MPI_CHECK(MPI_Iallreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &r));
    wait_all(1, &r, "MPI_Allreduce");
    return out;
}

void dist_barrier(void) {
    MPI_Request r;
    MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &r));
    wait_all(1, &r, "MPI_Barrier");
}

void dist_print_all(const char *line) {
    char mine[768] = "";
    snprintf(mine, sizeof mine, "%s", line);
    char *all = self.rank == 0 ? XALLOC((size_t)self.world * sizeof mine) : NULL;
    MPI_Request r;
    MPI_CHECK(MPI_Igather(mine, (int)sizeof mine, MPI_CHAR, all, (int)sizeof mine, MPI_CHAR, 0,
                          MPI_COMM_WORLD, &r));
    wait_all(1, &r, "MPI_Gather");
    if (self.rank != 0) return;
    for (int r = 0; r < self.world; r++) printf("rank %d: %s\n", r, all + (size_t)r * sizeof mine);
    free(all);
}

int dist_cuda_aware(void) {
#if defined(MPIX_CUDA_AWARE_SUPPORT)
    /* The run-time answer: the library in use may differ from the headers built against. */
    return MPIX_Query_cuda_support();
#else
    return 0;
#endif
}

#define MAX_BUCKETS 64
/* Every rank's environment must hold this (=1) for DIST_GRADS_DEVICE: see dist.h. */
#define DEVICE_OPT_IN "CIFAR10_CUDA_AWARE_MPI"
_Static_assert(MODEL_STATS == 4, "dist.h: (loss, correct, stop, checkpoint)");

/* The progress thread of HOST mode. Open MPI moves a nonblocking collective only inside MPI
 * calls, and each of a ring's 2 (ranks - 1) rounds waits for one; backward calls MPI only where
 * a layer hands over its gradients, so a bucket moved about one round per layer (measured and
 * modelled in docs/scaling.md). While backward runs with reductions in flight ("armed"), this
 * thread calls MPI every DIST_PROGRESS_NS. MPI_THREAD_SERIALIZED and `lock` keep one thread in
 * MPI at a time: the trainer's thread takes `lock` for its MPI calls while the thread exists,
 * and the thread sleeps on `wake` when disarmed, so the collectives outside a backward never
 * meet it. */
struct progress {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int running, armed, quit;
    int issued; /* the thread polls req[0, issued): set under lock once MPI_Iallreduce returned */
    int seen;   /* of them, the leading ones it last found complete (dist_grads_progress_seen) */
};

struct dist_grads {
    struct model *m;
    struct progress p;
    enum dist_grads_mode mode;
    const char *refusal;         /* dist_grads_refusal */
    size_t bucket_floats, total; /* total = P + MODEL_STATS */
    float signals[2];            /* set by dist_grads_signal, for the next reduction */
    float *host;                 /* STAGED: [total] page-locked */
    float *signals_host;         /* DEVICE: [2] page-locked, the signals on their way up */
    struct kernels_event *signals_up;
    int nbuckets;                /* buckets closed this step */
    int started, reduced;        /* of them: reduction started (in order), and completed */
    int last_buckets;            /* buckets of the last finished step */
    size_t open_begin, open_end; /* the bucket being filled: [open_begin, open_end) */
    int rehearsal;               /* dist_grads_rehearse */
    struct bucket {
        size_t begin, end;
        struct kernels_event *ready; /* its gradients exist (on the host, when staged) */
        struct kernels_event *back;  /* STAGED: its sums are back in m->grads */
    } b[MAX_BUCKETS];
    MPI_Request req[MAX_BUCKETS]; /* bucket i's MPI_Iallreduce once started; MPI_REQUEST_NULL once
                                   * completed (DEVICE: always) */
};

static void grads_lock(struct dist_grads *g) {
    if (g->p.running) CHECK(pthread_mutex_lock(&g->p.lock) == 0);
}

static void grads_unlock(struct dist_grads *g) {
    if (g->p.running) CHECK(pthread_mutex_unlock(&g->p.lock) == 0);
}

/* The thread: while armed, MPI_Request_get_status on the reductions issued (it runs MPI's
 * progress engine and, unlike MPI_Test, leaves the requests to the trainer's thread); once all
 * of them are complete it disarms itself until the next bucket starts, so that it does not
 * wake for nothing (each wake-up takes a core from a compute thread). */
static void *progress_main(void *arg) {
    struct dist_grads *g = arg;
    const struct timespec pause = {0, DIST_PROGRESS_NS};
    CHECK(pthread_mutex_lock(&g->p.lock) == 0);
    for (;;) {
        while (!g->p.armed && !g->p.quit) CHECK(pthread_cond_wait(&g->p.wake, &g->p.lock) == 0);
        if (g->p.quit) break;
        int flag = 1, i = 0;
        for (; i < g->p.issued && flag; i += flag)
            if (g->req[i] != MPI_REQUEST_NULL)
                MPI_CHECK(MPI_Request_get_status(g->req[i], &flag, MPI_STATUS_IGNORE));
        g->p.seen = i;
        if (flag) g->p.armed = 0;
        CHECK(pthread_mutex_unlock(&g->p.lock) == 0);
        nanosleep(&pause, NULL);
        CHECK(pthread_mutex_lock(&g->p.lock) == 0);
    }
    CHECK(pthread_mutex_unlock(&g->p.lock) == 0);
    return NULL;
}

/* HOST mode with more than one rank and an MPI that allows it (MPI_THREAD_SERIALIZED or
 * above): starts the thread, disarmed. */
static void progress_start(struct dist_grads *g) {
    int level;
    MPI_CHECK(MPI_Query_thread(&level));
    if (g->mode != DIST_GRADS_HOST || level < MPI_THREAD_SERIALIZED) return;
    CHECK(pthread_mutex_init(&g->p.lock, NULL) == 0);
    CHECK(pthread_cond_init(&g->p.wake, NULL) == 0);
    sigset_t all, old; /* the thread blocks the asynchronous signals: the trainer's handlers
                        * run on its own thread; a fault in this one still reaches MPI's */
    sigfillset(&all);
    const int faults[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT};
    for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++) sigdelset(&all, faults[i]);
    CHECK(pthread_sigmask(SIG_SETMASK, &all, &old) == 0);
    CHECK(pthread_create(&g->p.thread, NULL, progress_main, g) == 0);
    CHECK(pthread_sigmask(SIG_SETMASK, &old, NULL) == 0);
    g->p.running = 1;
}

static void progress_arm(struct dist_grads *g, int armed) {
    if (!g->p.running) return;
    CHECK(pthread_mutex_lock(&g->p.lock) == 0);
    g->p.armed = armed;
    if (armed) CHECK(pthread_cond_signal(&g->p.wake) == 0);
    CHECK(pthread_mutex_unlock(&g->p.lock) == 0);
}

static void progress_stop(struct dist_grads *g) {
    if (!g->p.running) return;
    CHECK(pthread_mutex_lock(&g->p.lock) == 0);
    g->p.quit = 1;
    CHECK(pthread_cond_signal(&g->p.wake) == 0);
    CHECK(pthread_mutex_unlock(&g->p.lock) == 0);
    CHECK(pthread_join(g->p.thread, NULL) == 0);
    pthread_cond_destroy(&g->p.wake);
    pthread_mutex_destroy(&g->p.lock);
    g->p.running = 0;
}

static float *bucket_buffer(struct dist_grads *g, const struct bucket *b) {
    return (g->mode == DIST_GRADS_STAGED ? g->host : g->m->grads) + b->begin;
}

/* The signals join the stats in the first bucket (the one holding them) just before its
 * reduction: behind whatever its download brought (STAGED); in GPU memory for DEVICE, by a copy
 * on the transfer queue that only this thread waits for: no kernel writes those two floats, and
 * upload() would wait for the whole compute queue, in the middle of backward. */
static void signals_put(struct dist_grads *g, float *dst) {
    if (g->mode != DIST_GRADS_DEVICE) {
        memcpy(dst, g->signals, sizeof g->signals);
        return;
    }
    const struct kernels *k = g->m->k;
    memcpy(g->signals_host, g->signals, sizeof g->signals);
    k->upload_async(dst, g->signals_host, sizeof g->signals, g->signals_up);
    k->event_wait(g->signals_up);
}

/* Bucket i's sums exist (on the host, when staged): a staged bucket goes back to the device
 * at once, on the transfer queue, behind nothing but the copies issued before it. */
static void bucket_reduced(struct dist_grads *g, int i) {
    const struct bucket *b = &g->b[i];
    if (g->mode == DIST_GRADS_STAGED)
        g->m->k->upload_async(g->m->grads + b->begin, g->host + b->begin, (b->end - b->begin) * sizeof(float),
                              b->back);
    g->reduced++;
}

/* The next bucket's reduction. DEVICE: blocking, since only blocking collectives are
 * CUDA-aware; its kernels have finished (its ready event), so MPI's own synchronous copies
 * (which the compute queue does not order) see the gradients. */
static void bucket_start(struct dist_grads *g) {
    int i = g->started++;
    const struct bucket *b = &g->b[i];
    CHECK(b->end - b->begin <= INT_MAX);
    int n = (int)(b->end - b->begin);
    if (i == 0) signals_put(g, bucket_buffer(g, b) + (g->total - 2 - b->begin));
    if (g->mode == DIST_GRADS_DEVICE) {
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, bucket_buffer(g, b), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        g->req[i] = MPI_REQUEST_NULL;
        bucket_reduced(g, i);
    } else {
        grads_lock(g);
        MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, bucket_buffer(g, b), n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD,
                                 &g->req[i]));
        g->p.issued = i + 1;
        grads_unlock(g);
    }
}

/* check_wait, naming the first gradient bucket still in flight. */
static void bucket_check_wait(const struct dist_grads *g, double waited) {
    if (waited <= DIST_STALL_STOP && waited <= deadline.seconds)
        return; /* the common case, without the line */
    int i = 0;
    while (i < g->started && g->req[i] == MPI_REQUEST_NULL) i++;
    char what[96];
    snprintf(what, sizeof what, "the gradient allreduce (bucket %d of %d, %.2f MiB)", i + 1, g->nbuckets,
             (double)(g->b[i].end - g->b[i].begin) * sizeof(float) / 1048576.0);
    check_wait(what, waited);
}

/* Takes the reductions that have completed (block: at least one, waiting for it, with the
 * progress thread disarmed) and hands each to bucket_reduced; MPI progresses the others
 * meanwhile. */
static void buckets_complete(struct dist_grads *g, int block) {
    if (g->reduced == g->started) return; /* none in flight */
    int n, done[MAX_BUCKETS];
    double start = block ? MPI_Wtime() : 0.0;
    for (;;) {
        grads_lock(g);
        MPI_CHECK(MPI_Testsome(g->started, g->req, &n, done, MPI_STATUSES_IGNORE));
        grads_unlock(g);
        if (!block || (n != MPI_UNDEFINED && n > 0)) break;
        double waited = MPI_Wtime() - start;
        bucket_check_wait(g, waited);
        wait_pause(waited);
    }
    for (int j = 0; n != MPI_UNDEFINED && j < n; j++) bucket_reduced(g, done[j]);
}

/* Starts every closed bucket whose gradients are ready, in order (all ranks must start the
 * collectives in the same order), then takes the completed reductions. */
static void buckets_advance(struct dist_grads *g) {
    const struct kernels *k = g->m->k;
    while (g->started < g->nbuckets && k->event_done(g->b[g->started].ready)) bucket_start(g);
    buckets_complete(g, 0);
}

static void bucket_close(struct dist_grads *g) {
    const struct kernels *k = g->m->k;
    CHECK(g->nbuckets < MAX_BUCKETS);
    struct bucket *b = &g->b[g->nbuckets++];
    b->begin = g->open_begin, b->end = g->open_end;
    size_t bytes = (b->end - b->begin) * sizeof(float);
    if (g->mode == DIST_GRADS_STAGED)
        k->download_async(g->host + b->begin, g->m->grads + b->begin, bytes, b->ready);
    else k->download_async(NULL, NULL, 0, b->ready); /* marks the point backward has reached */
    g->open_end = g->open_begin;
}

/* Called while backward is issued. DEVICE buckets wait for dist_grads_progress or finish: a
 * blocking reduction here would hold up the issue of the rest of backward. */
static int grads_ready(void *ctx, size_t begin, size_t end) {
    struct dist_grads *g = ctx;
    CHECK(end == g->open_begin && begin < end); /* the descending tiling model.h promises */
    g->open_begin = begin;
    int close = begin == 0 || (g->bucket_floats && (g->open_end - begin) >= g->bucket_floats);
    if (g->rehearsal) { /* where a bucket would close; the next step starts afresh after the last */
        if (close) g->open_end = begin;
        if (begin == 0) g->open_begin = g->open_end = g->total;
        return close;
    }
    if (close) bucket_close(g);
    if (g->mode != DIST_GRADS_DEVICE) buckets_advance(g);
    progress_arm(g, begin != 0 && g->reduced < g->started); /* until backward's last layer */
    return close; /* its copy (or mark) is ordered behind the gradients issued so far */
}

enum dist_grads_mode dist_grads_choose(int world, int gpu_memory, int device_opt_in, int cuda_aware) {
    if (world == 1) return DIST_GRADS_LOCAL;
    if (!gpu_memory) return DIST_GRADS_HOST;
    return device_opt_in && cuda_aware ? DIST_GRADS_DEVICE : DIST_GRADS_STAGED;
}

int dist_cuda_aware_wanted(struct err *e) {
    const char *v = getenv(DEVICE_OPT_IN);
    if (!v || !*v || strcmp(v, "0") == 0) return 0;
    if (strcmp(v, "1") == 0) return 1;
    return err_set(e, DEVICE_OPT_IN "=%s: expected 0 or 1", v), -1;
}

struct dist_grads *dist_grads_attach(struct model *m, size_t bucket_bytes, int gpu_memory) {
    struct err e;
    int device_opt_in = dist_cuda_aware_wanted(&e);
    CHECK(device_opt_in >= 0); /* the programs refuse other values first */
    enum dist_grads_mode mode = dist_grads_choose(self.world, gpu_memory, device_opt_in, dist_cuda_aware());
    if (self.world > 1) {
        int device = mode == DIST_GRADS_DEVICE, all_device;
        MPI_CHECK(MPI_Allreduce(&device, &all_device, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
        if (device && !all_device) mode = DIST_GRADS_STAGED;
    }
    struct dist_grads *g = dist_grads_attach_mode(m, bucket_bytes, mode);
    if (device_opt_in && self.world > 1 && mode != DIST_GRADS_DEVICE)
        g->refusal = !gpu_memory          ? DEVICE_OPT_IN "=1 ignored: the gradients are in host memory"
                     : !dist_cuda_aware() ? DEVICE_OPT_IN "=1 ignored: this MPI library has no CUDA support"
                                          : DEVICE_OPT_IN
                         "=1 ignored: not every rank set it or has a CUDA-aware MPI";
    return g;
}

struct dist_grads *dist_grads_attach_mode(struct model *m, size_t bucket_bytes, enum dist_grads_mode mode) {
    struct dist_grads *g = XALLOC(sizeof *g);
    g->m = m;
    g->mode = mode;
    g->total = m->nparams + MODEL_STATS;
    g->bucket_floats = bucket_bytes / sizeof(float);
    g->open_begin = g->open_end = g->total;
    if (mode == DIST_GRADS_LOCAL) return g;
    if (mode == DIST_GRADS_STAGED) g->host = m->k->host_alloc(g->total * sizeof(float));
    if (mode == DIST_GRADS_DEVICE) {
        g->signals_host = m->k->host_alloc(sizeof g->signals);
        g->signals_up = m->k->event_create();
    }
    for (int i = 0; i < MAX_BUCKETS; i++) {
        g->b[i].ready = m->k->event_create();
        if (mode == DIST_GRADS_STAGED) g->b[i].back = m->k->event_create();
    }
    m->grads_ready = grads_ready;
    m->grads_ready_ctx = g;
    progress_start(g);
    return g;
}

enum dist_grads_mode dist_grads_mode(const struct dist_grads *g) { return g->mode; }

const char *dist_grads_refusal(const struct dist_grads *g) { return g->refusal; }

const char *dist_grads_mode_name(enum dist_grads_mode mode) {
    static const char *names[] = {"none (1 rank)", "MPI_Iallreduce on host memory",
                                  "MPI_Allreduce on GPU memory (CUDA-aware MPI, " DEVICE_OPT_IN "=1)",
                                  "MPI_Iallreduce staged through page-locked host memory"};
    return names[mode];
}

int dist_grads_buckets(const struct dist_grads *g) { return g->last_buckets; }

int dist_grads_progress_seen(struct dist_grads *g) {
    if (!g->p.running) return 0;
    CHECK(pthread_mutex_lock(&g->p.lock) == 0);
    int seen = g->p.seen;
    CHECK(pthread_mutex_unlock(&g->p.lock) == 0);
    return seen;
}

void dist_grads_progress(struct dist_grads *g) {
    if (g->mode != DIST_GRADS_LOCAL) buckets_advance(g);
}

/* Until every bucket is reduced: while the device still computes some bucket, poll rather than
 * block on its event, so MPI keeps progressing the buckets already started; then block in
 * MPI_Waitsome, copying each bucket back as it completes. */
static void buckets_finish(struct dist_grads *g) {
    while (g->reduced < g->nbuckets) {
        if (g->started < g->nbuckets) {
            buckets_advance(g);
            if (g->started < g->nbuckets) sched_yield();
        } else {
            buckets_complete(g, 1);
        }
    }
}

void dist_grads_rehearse(struct dist_grads *g, int on) {
    CHECK(g->nbuckets == 0 && g->open_begin == g->total); /* between steps */
    g->rehearsal = on;
}

void dist_grads_signal(struct dist_grads *g, float stop, float checkpoint) {
    g->signals[0] = stop, g->signals[1] = checkpoint;
}

void dist_grads_finish(struct dist_grads *g, float stats[MODEL_STATS]) {
    const struct kernels *k = g->m->k;
    size_t P = g->total - MODEL_STATS;
    if (g->mode == DIST_GRADS_LOCAL) {
        k->download(stats, g->m->grads + P, 2 * sizeof(float));
        stats[2] = g->signals[0], stats[3] = g->signals[1];
        return;
    }
    CHECK(g->open_begin == 0 && g->open_end == 0); /* a whole backward went by */
    progress_arm(g, 0);
    buckets_finish(g);
    if (g->mode == DIST_GRADS_STAGED) {
        /* The SGD update must see every copy-back. kernels.h runs upload_async on one
         * transfer queue in issue order, so a wait for the copy-back issued last would cover
         * the others; the last bucket's is not that one, since reductions complete (and go
         * back) in any order. A wait per bucket needs neither that bookkeeping nor the
         * one-queue order (it stays right should a backend spread the transfer queue over
         * several streams), for microseconds of host time. */
        for (int i = 0; i < g->nbuckets; i++) k->compute_wait(g->b[i].back);
        memcpy(stats, g->host + P, MODEL_STATS * sizeof(float)); /* bucket 0's, reduced */
    } else {
        k->download(stats, g->m->grads + P, MODEL_STATS * sizeof(float));
    }
    g->last_buckets = g->nbuckets;
    g->nbuckets = g->started = g->reduced = 0;
    g->p.issued = g->p.seen = 0; /* disarmed: the thread reads them only once armed again, under lock */
    g->open_begin = g->open_end = g->total;
}

void dist_grads_free(struct dist_grads *g) {
    const struct kernels *k = g->m->k;
    progress_stop(g);
    /* The last copies back from page-locked memory finished before it goes (kernels.h promises
     * no wait in host_free; an event never marked is complete). */
    for (int i = 0; i < MAX_BUCKETS && g->mode == DIST_GRADS_STAGED; i++) k->event_wait(g->b[i].back);
    if (g->mode != DIST_GRADS_LOCAL) {
        for (int i = 0; i < MAX_BUCKETS; i++) {
            k->event_destroy(g->b[i].ready);
            if (g->b[i].back) k->event_destroy(g->b[i].back);
        }
        g->m->grads_ready = NULL;
    }
    if (g->host) k->host_free(g->host);
    if (g->signals_host) k->host_free(g->signals_host), k->event_destroy(g->signals_up);
    free(g);
}
