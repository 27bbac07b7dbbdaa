#include "dist.h"

#include "../common/err.h"
#include "model.h"

#include <limits.h>
#include <sched.h>
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h> /* MPIX_Query_cuda_support */
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Checked MPI call: MPI's default handler already aborts the job on errors; this catches the
 * cases where an error handler returned instead, naming the call and location. */
#define MPI_CHECK(call)                                                                          \
    do {                                                                                         \
        int mpi_rc_ = (call);                                                                    \
        if (mpi_rc_ != MPI_SUCCESS) {                                                            \
            fprintf(stderr, "%s: %s failed (MPI error %d) at %s:%d\n", err_progname(), #call,   \
                    mpi_rc_, __FILE__, __LINE__);                                                \
            MPI_Abort(MPI_COMM_WORLD, 1);                                                        \
        }                                                                                        \
    } while (0)

static struct dist self;

void dist_init(int *argc, char ***argv, uint64_t mask_id, struct dist *d) {
    MPI_CHECK(MPI_Init(argc, argv));
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
    MPI_CHECK(MPI_Allreduce(&mine, &first_bad, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    if (first_bad == INT_MAX) return;
    if (self.rank == first_bad) fprintf(stderr, "%s: %s\n", err_progname(), message);
    /* Everyone exits with the reporting rank's code. */
    int exit_code = status;
    MPI_CHECK(MPI_Bcast(&exit_code, 1, MPI_INT, first_bad, MPI_COMM_WORLD));
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
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, chunk, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
        buf += chunk, n -= (size_t)chunk;
    }
}

void dist_allreduce_sum_double(double *buf, size_t n) {
    CHECK(n <= INT_MAX);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
}

void dist_bcast(void *buf, size_t bytes, int root) {
    char *p = buf;
    while (bytes > 0) {
        int chunk = bytes > INT_MAX ? INT_MAX : (int)bytes;
        MPI_CHECK(MPI_Bcast(p, chunk, MPI_BYTE, root, MPI_COMM_WORLD));
        p += chunk, bytes -= (size_t)chunk;
    }
}

double dist_time(void) { return MPI_Wtime(); }

double dist_max_double(double x) {
    double out;
    MPI_CHECK(MPI_Allreduce(&x, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD));
    return out;
}

void dist_barrier(void) { MPI_CHECK(MPI_Barrier(MPI_COMM_WORLD)); }

void dist_print_all(const char *line) {
    char mine[256] = "";
    snprintf(mine, sizeof mine, "%s", line);
    char *all = self.rank == 0 ? XALLOC((size_t)self.world * sizeof mine) : NULL;
    MPI_CHECK(MPI_Gather(mine, (int)sizeof mine, MPI_CHAR, all, (int)sizeof mine, MPI_CHAR, 0, MPI_COMM_WORLD));
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

struct dist_grads {
    struct model *m;
    enum dist_grads_mode mode;
    size_t bucket_floats, total; /* total = P + 2 */
    float *host;                 /* DIST_GRADS_STAGED: [total] page-locked */
    struct kernels_event *copied; /* staged buckets back on the device */
    int nbuckets, started;       /* buckets closed, and with their allreduce started */
    int last_buckets;            /* buckets of the last finished step */
    size_t open_begin, open_end; /* the bucket being filled: [open_begin, open_end) */
    struct bucket {
        size_t begin, end;
        struct kernels_event *ready; /* its gradients exist (on the host, when staged) */
    } b[MAX_BUCKETS];
    MPI_Request req[MAX_BUCKETS]; /* bucket i's MPI_Iallreduce, once started */
};

static float *bucket_buffer(struct dist_grads *g, const struct bucket *b) {
    return (g->mode == DIST_GRADS_STAGED ? g->host : g->m->grads) + b->begin;
}

static void bucket_start(struct dist_grads *g) {
    const struct bucket *b = &g->b[g->started];
    CHECK(b->end - b->begin <= INT_MAX);
    MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, bucket_buffer(g, b), (int)(b->end - b->begin), MPI_FLOAT, MPI_SUM,
                             MPI_COMM_WORLD, &g->req[g->started]));
    g->started++;
}

/* Starts every closed bucket whose gradients are ready, in order (all ranks must start the
 * collectives in the same order), and lets MPI progress the started ones. */
static void buckets_advance(struct dist_grads *g) {
    const struct kernels *k = g->m->k;
    while (g->started < g->nbuckets && k->event_done(g->b[g->started].ready)) bucket_start(g);
    int flag;
    if (g->started > 0) MPI_CHECK(MPI_Testall(g->started, g->req, &flag, MPI_STATUSES_IGNORE));
}

static void bucket_close(struct dist_grads *g) {
    const struct kernels *k = g->m->k;
    CHECK(g->nbuckets < MAX_BUCKETS);
    struct bucket *b = &g->b[g->nbuckets++];
    b->begin = g->open_begin, b->end = g->open_end;
    size_t bytes = (b->end - b->begin) * sizeof(float);
    if (g->mode == DIST_GRADS_STAGED)
        k->download_async(g->host + b->begin, g->m->grads + b->begin, bytes, b->ready);
    else
        k->download_async(NULL, NULL, 0, b->ready); /* marks the point backward has reached */
    g->open_end = g->open_begin;
    buckets_advance(g);
}

static void grads_ready(void *ctx, size_t begin, size_t end) {
    struct dist_grads *g = ctx;
    CHECK(end == g->open_begin && begin < end); /* the descending tiling model.h promises */
    g->open_begin = begin;
    if (begin == 0 || (g->bucket_floats && (g->open_end - begin) >= g->bucket_floats)) bucket_close(g);
    else buckets_advance(g);
}

struct dist_grads *dist_grads_attach(struct model *m, size_t bucket_bytes, int gpu_memory) {
    struct dist_grads *g = XALLOC(sizeof *g);
    g->m = m;
    g->total = m->nparams + 2;
    g->bucket_floats = bucket_bytes / sizeof(float);
    g->open_begin = g->open_end = g->total;
    if (self.world == 1) g->mode = DIST_GRADS_LOCAL;
    else if (!gpu_memory) g->mode = DIST_GRADS_HOST;
    else g->mode = dist_cuda_aware() ? DIST_GRADS_DEVICE : DIST_GRADS_STAGED;
    if (g->mode == DIST_GRADS_LOCAL) return g;
    if (g->mode == DIST_GRADS_STAGED) {
        g->host = m->k->host_alloc(g->total * sizeof(float));
        g->copied = m->k->event_create();
    }
    for (int i = 0; i < MAX_BUCKETS; i++) g->b[i].ready = m->k->event_create();
    m->grads_ready = grads_ready;
    m->grads_ready_ctx = g;
    return g;
}

enum dist_grads_mode dist_grads_mode(const struct dist_grads *g) { return g->mode; }

const char *dist_grads_mode_name(enum dist_grads_mode mode) {
    static const char *names[] = {"none (1 rank)", "MPI_Iallreduce on host memory",
                                  "MPI_Iallreduce on GPU memory (CUDA-aware MPI)",
                                  "MPI_Iallreduce staged through page-locked host memory"};
    return names[mode];
}

int dist_grads_buckets(const struct dist_grads *g) { return g->last_buckets; }

void dist_grads_finish(struct dist_grads *g, float stats[2]) {
    const struct kernels *k = g->m->k;
    size_t P = g->total - 2;
    if (g->mode == DIST_GRADS_LOCAL) {
        k->download(stats, g->m->grads + P, 2 * sizeof(float));
        return;
    }
    CHECK(g->open_begin == 0 && g->open_end == 0); /* a whole backward went by */
    /* Poll rather than block on the next bucket's event, so MPI keeps progressing the
     * buckets already started while the device finishes backward. */
    while (g->started < g->nbuckets) {
        buckets_advance(g);
        if (g->started < g->nbuckets) sched_yield();
    }
    MPI_CHECK(MPI_Waitall(g->nbuckets, g->req, MPI_STATUSES_IGNORE));
    if (g->mode == DIST_GRADS_STAGED) {
        k->upload_async(g->m->grads, g->host, g->total * sizeof(float), g->copied);
        k->compute_wait(g->copied); /* the SGD update sees the sums */
        stats[0] = g->host[P], stats[1] = g->host[P + 1];
    } else {
        k->download(stats, g->m->grads + P, 2 * sizeof(float));
    }
    g->last_buckets = g->nbuckets;
    g->nbuckets = g->started = 0;
    g->open_begin = g->open_end = g->total;
}

void dist_grads_free(struct dist_grads *g) {
    const struct kernels *k = g->m->k;
    if (g->mode != DIST_GRADS_LOCAL) {
        for (int i = 0; i < MAX_BUCKETS; i++) k->event_destroy(g->b[i].ready);
        g->m->grads_ready = NULL;
    }
    if (g->host) k->host_free(g->host), k->event_destroy(g->copied);
    free(g);
}
