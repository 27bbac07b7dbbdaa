/* The staged gradient allreduce (DIST_GRADS_STAGED: GPU memory through page-locked host
 * memory) on the CPU; run as `mpirun -np 2 test_staged` and with 1 rank. Its device side is a
 * fake asynchronous backend: the CPU table with the copies and events replaced, so copies
 * complete late (when an event is waited for, after some polls, or when the test says) and in
 * queue order, as on a GPU. MPI calls are watched through the profiling interface: this file
 * defines MPI_Iallreduce, MPI_Testsome and MPI_Waitsome, which check and log, then call PMPI_*.
 * Checked:
 *  (a) a bucket's MPI_Iallreduce starts only once its download is complete, in bucket order;
 *  (b) each bucket's copy-back is issued only after its own reduction completed, and the SGD
 *      update finds every copy-back complete and waited for by the compute queue;
 *  (c) the summed gradients and the weights after the update equal HOST mode's bit for bit
 *      (1 and 2 ranks: sums of two floats do not depend on the order);
 *  (d) the mode: STAGED for GPU memory unless DEVICE is opted in on a CUDA-aware MPI;
 *  (e) dist_grads_progress starts a bucket whose download completed early, and copies it back
 *      once reduced, both before dist_grads_finish;
 *  (f) DEVICE mode (reductions in device memory) on the same fake: a dist_grads_progress call
 *      after backward reduces every bucket without a synchronous upload or download (which
 *      would wait for the whole compute queue; the signals go up on the transfer queue), and
 *      the sums and signals equal HOST mode's bit for bit. */
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/shard.h"
#include "../dist/dist.h"
#include "../model/batches.h"
#include "../model/model.h"
#include "check.h"
#include "test_nets.h"

#include <mpi.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_BUCKETS 64 /* as dist/dist.c */

enum { Q_INPUT, Q_TRANSFER }; /* the fake's two copy queues, as kernels.h's */

/* One asynchronous copy. Downloads take their source when issued (the CPU compute before them
 * has finished) and deliver it when they complete; uploads read their source when they
 * complete, and their destination holds NaNs (0xff bytes) until then. */
struct copy {
    void *dst;
    const void *src;
    unsigned char *snapshot; /* downloads: the source when issued */
    size_t bytes;
    int queue, done, waited; /* waited: the compute queue waited for it */
};

/* The copy this event marks (index into fake.copies), or -1: complete (a mark on the compute
 * queue, which is synchronous here). */
struct kernels_event {
    int copy;
};

static struct {
    struct kernels k;
    const struct kernels *cpu;
    struct copy *copies; /* every copy, in issue order */
    int ncopies, cap;
    int delay, polls;       /* a queue's oldest copy completes after delay polls (-1: never) */
    int watch;              /* the staged model is running: check its copies and MPI calls */
    int uploads, downloads; /* upload() and download() calls, counted while count_syncs is set */
    int count_syncs;
    /* This step of the staged model: bucket downloads (copy indices), reductions started and
     * copy-backs (copy indices), in issue order. */
    int down[MAX_BUCKETS], ndown, nred, back[MAX_BUCKETS], nback;
    struct reduction {
        MPI_Request req;
        const void *buf;
        int complete;
    } red[MAX_BUCKETS];
    int violations;
    char first[300]; /* the first violation */
} fake;

static struct dist d;

static void violation(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void violation(const char *fmt, ...) {
    if (fake.violations++) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fake.first, sizeof fake.first, fmt, ap);
    va_end(ap);
}

/* ---- the fake backend ---- */

static void copy_complete(struct copy *c) {
    memcpy(c->dst, c->snapshot ? c->snapshot : c->src, c->bytes);
    free(c->snapshot);
    c->snapshot = NULL;
    c->done = 1;
}

/* Completes copy i and every copy before it on its queue (a queue runs in order). */
static void complete_through(int i) {
    for (int j = 0; j <= i; j++)
        if (fake.copies[j].queue == fake.copies[i].queue && !fake.copies[j].done)
            copy_complete(&fake.copies[j]);
}

/* The oldest incomplete copy of queue q, or -1. */
static int queue_head(int q) {
    for (int j = 0; j < fake.ncopies; j++)
        if (fake.copies[j].queue == q && !fake.copies[j].done) return j;
    return -1;
}

static int copy_push(int queue, void *dst, const void *src, size_t bytes, struct kernels_event *done) {
    if (fake.ncopies == fake.cap) {
        fake.cap = fake.cap ? 2 * fake.cap : 256;
        fake.copies = realloc(fake.copies, (size_t)fake.cap * sizeof *fake.copies);
        CHECK(fake.copies);
    }
    int i = fake.ncopies++;
    fake.copies[i] = (struct copy){.dst = dst, .src = src, .bytes = bytes, .queue = queue};
    if (done) done->copy = i;
    return i;
}

static struct kernels_event *fake_event_create(void) {
    struct kernels_event *e = XALLOC(sizeof *e);
    e->copy = -1;
    return e;
}

static void fake_event_destroy(struct kernels_event *e) { free(e); }

static void fake_input_upload_async(void *dst, const void *src, size_t bytes, struct kernels_event *done) {
    copy_push(Q_INPUT, dst, src, bytes, done);
}

/* The reduction of this step whose buffer is buf, or NULL. */
static struct reduction *reduction_of(const void *buf) {
    for (int r = 0; r < fake.nred; r++)
        if (fake.red[r].buf == buf) return &fake.red[r];
    return NULL;
}

/* (b), at the copy-back: it carries a bucket whose reduction has completed, back to where the
 * bucket's download took it from. */
static void check_copy_back(void *dst, const void *src, size_t bytes) {
    const struct reduction *r = reduction_of(src);
    if (!r) return violation("copy-back of %p issued before its reduction started", src);
    if (!r->complete)
        violation("copy-back of bucket %d issued before its reduction completed", (int)(r - fake.red));
    const struct copy *down = &fake.copies[fake.down[r - fake.red]];
    if (down->src != dst || down->bytes != bytes)
        violation("copy-back of bucket %d goes elsewhere", (int)(r - fake.red));
}

static void fake_upload_async(void *dst, const void *src, size_t bytes, struct kernels_event *done) {
    int i = copy_push(Q_TRANSFER, dst, src, bytes, done);
    memset(dst, 0xff, bytes);
    if (!fake.watch) return;
    check_copy_back(dst, src, bytes);
    CHECK(fake.nback < MAX_BUCKETS);
    fake.back[fake.nback++] = i;
}

static void fake_download_async(void *dst, const void *src, size_t bytes, struct kernels_event *done) {
    if (bytes == 0) {
        done->copy = -1;
        return;
    }
    int i = copy_push(Q_TRANSFER, dst, src, bytes, done);
    fake.copies[i].snapshot = XALLOC(bytes);
    memcpy(fake.copies[i].snapshot, src, bytes);
    if (!fake.watch) return;
    CHECK(fake.ndown < MAX_BUCKETS);
    fake.down[fake.ndown++] = i;
}

static void fake_event_wait(struct kernels_event *e) {
    if (e->copy >= 0) complete_through(e->copy);
}

static void fake_compute_wait(struct kernels_event *e) {
    if (e->copy < 0) return;
    complete_through(e->copy);
    for (int j = 0; j <= e->copy; j++)
        if (fake.copies[j].queue == fake.copies[e->copy].queue) fake.copies[j].waited = 1;
}

/* A poll is what lets time pass: each one brings the oldest copy of e's queue closer. */
static int fake_event_done(struct kernels_event *e) {
    if (e->copy < 0 || fake.copies[e->copy].done) return 1;
    if (fake.delay >= 0 && ++fake.polls > fake.delay) {
        copy_complete(&fake.copies[queue_head(fake.copies[e->copy].queue)]);
        fake.polls = 0;
    }
    return fake.copies[e->copy].done;
}

/* (b), at the update: every bucket came back, complete and waited for by the compute queue.
 * Ends the step's log. */
static void fake_sgd_update(float *p, const float *grad, float *m, const unsigned char *group, size_t n,
                            const struct sgd_hyper *h, int nesterov) {
    if (fake.watch) {
        if (fake.nback != fake.ndown)
            violation("%d of %d buckets copied back before the update", fake.nback, fake.ndown);
        for (int b = 0; b < fake.nback; b++) {
            const struct copy *c = &fake.copies[fake.back[b]];
            if (!c->done || !c->waited)
                violation("the update does not wait for copy-back %d (%s)", b,
                          c->done ? "complete" : "incomplete");
        }
        fake.ndown = fake.nred = fake.nback = 0;
    }
    fake.cpu->sgd_update(p, grad, m, group, n, h, nesterov);
}

/* The synchronous copies, counted for (f). */
static void fake_upload(void *dst, const void *src, size_t bytes) {
    fake.uploads += fake.count_syncs;
    fake.cpu->upload(dst, src, bytes);
}
static void fake_download(void *dst, const void *src, size_t bytes) {
    fake.downloads += fake.count_syncs;
    fake.cpu->download(dst, src, bytes);
}

static void fake_init(void) {
    fake.cpu = kernels_cpu();
    fake.k = *fake.cpu;
    fake.k.name = "fake-async";
    fake.k.event_create = fake_event_create;
    fake.k.event_destroy = fake_event_destroy;
    fake.k.input_upload_async = fake_input_upload_async;
    fake.k.upload_async = fake_upload_async;
    fake.k.download_async = fake_download_async;
    fake.k.compute_wait = fake_compute_wait;
    fake.k.event_done = fake_event_done;
    fake.k.event_wait = fake_event_wait;
    fake.k.sgd_update = fake_sgd_update;
    fake.k.upload = fake_upload;
    fake.k.download = fake_download;
}

/* ---- MPI, watched through the profiling interface ---- */

/* (a): the k-th reduction of a step is the k-th bucket downloaded, and that download is done. */
int MPI_Iallreduce(const void *sendbuf, void *recvbuf, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm,
                   MPI_Request *req) {
    int k = fake.nred;
    if (fake.watch) {
        const struct copy *c = k < fake.ndown ? &fake.copies[fake.down[k]] : NULL;
        if (!c) violation("reduction %d started with %d buckets downloaded", k, fake.ndown);
        else if (c->dst != recvbuf || c->bytes != (size_t)count * sizeof(float))
            violation("reduction %d is not on bucket %d: out of bucket order", k, k);
        else if (!c->done) violation("reduction %d started before its download completed", k);
    }
    int rc = PMPI_Iallreduce(sendbuf, recvbuf, count, type, op, comm, req);
    if (fake.watch) {
        CHECK(k < MAX_BUCKETS);
        fake.red[k] = (struct reduction){.req = *req, .buf = recvbuf};
        fake.nred++;
    }
    return rc;
}

/* Marks the reductions whose requests were completed (turned into MPI_REQUEST_NULL). dist.c
 * takes completions through MPI_Testsome and MPI_Waitsome only: one taken otherwise would go
 * unseen here and fail (b). */
static void note_completions(const MPI_Request *before, const MPI_Request *after, int n) {
    for (int j = 0; j < n; j++) {
        if (before[j] == MPI_REQUEST_NULL || after[j] != MPI_REQUEST_NULL) continue;
        for (int r = 0; r < fake.nred; r++)
            if (fake.red[r].req == before[j] && !fake.red[r].complete) {
                fake.red[r].complete = 1;
                break;
            }
    }
}

/* MPI_Testsome and MPI_Waitsome: the real call, then the completions it made noted. */
typedef int some_fn(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]);
static int observe_some(some_fn *real, int incount, MPI_Request reqs[], int *outcount, int indices[],
                        MPI_Status statuses[]) {
    MPI_Request before[MAX_BUCKETS];
    CHECK(incount <= MAX_BUCKETS);
    memcpy(before, reqs, (size_t)incount * sizeof *reqs);
    int rc = real(incount, reqs, outcount, indices, statuses);
    note_completions(before, reqs, incount);
    return rc;
}

int MPI_Testsome(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]) {
    return observe_some(PMPI_Testsome, incount, reqs, outcount, indices, statuses);
}

int MPI_Waitsome(int incount, MPI_Request reqs[], int *outcount, int indices[], MPI_Status statuses[]) {
    return observe_some(PMPI_Waitsome, incount, reqs, outcount, indices, statuses);
}

/* ---- the tests ---- */

/* (d) */
static void test_choose(void) {
    static const struct {
        int world, gpu, opt_in, aware;
        enum dist_grads_mode want;
    } cases[] = {
        {1, 0, 0, 0, DIST_GRADS_LOCAL},  {1, 1, 1, 1, DIST_GRADS_LOCAL},  {2, 0, 0, 0, DIST_GRADS_HOST},
        {2, 0, 1, 1, DIST_GRADS_HOST},   {2, 1, 0, 0, DIST_GRADS_STAGED}, {2, 1, 0, 1, DIST_GRADS_STAGED},
        {2, 1, 1, 0, DIST_GRADS_STAGED}, {2, 1, 1, 1, DIST_GRADS_DEVICE}, {3, 1, 1, 1, DIST_GRADS_DEVICE},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        enum dist_grads_mode got =
            dist_grads_choose(cases[i].world, cases[i].gpu, cases[i].opt_in, cases[i].aware);
        EXPECT(got == cases[i].want, "world %d, gpu memory %d, opt-in %d, CUDA-aware %d: mode %s, want %s",
               cases[i].world, cases[i].gpu, cases[i].opt_in, cases[i].aware, dist_grads_mode_name(got),
               dist_grads_mode_name(cases[i].want));
    }
    /* The opt-in as the binaries see it: GPU memory is DEVICE only with CIFAR10_CUDA_AWARE_MPI=1
     * on a CUDA-aware MPI (this one may or may not be). */
    struct model m;
    model_init(&m, &test_net, kernels_cpu(), 2, 1);
    for (int opt_in = 0; opt_in < 2; opt_in++) {
        if (opt_in) setenv("CIFAR10_CUDA_AWARE_MPI", "1", 1);
        struct dist_grads *g = dist_grads_attach(&m, 0, 1);
        enum dist_grads_mode want = d.world == 1                  ? DIST_GRADS_LOCAL
                                    : opt_in && dist_cuda_aware() ? DIST_GRADS_DEVICE
                                                                  : DIST_GRADS_STAGED;
        EXPECT(dist_grads_mode(g) == want, "opt-in %d: mode %s, want %s", opt_in,
               dist_grads_mode_name(dist_grads_mode(g)), dist_grads_mode_name(want));
        /* Asked for and refused: the log says why (here the MPI's CUDA support is the reason). */
        const char *why = dist_grads_refusal(g), *want_why = "this MPI library has no CUDA support";
        if (want == DIST_GRADS_STAGED && opt_in)
            EXPECT(why && strstr(why, want_why), "opt-in 1, staged: refusal \"%s\", want \"...%s...\"",
                   why ? why : "(none)", want_why);
        else
            EXPECT(!why, "opt-in %d, mode %s: refusal \"%s\", want none", opt_in, dist_grads_mode_name(want),
                   why);
        dist_grads_free(g);
    }
    /* Gradients in host memory (the CPU) with the opt-in: several ranks say it is ignored. */
    setenv("CIFAR10_CUDA_AWARE_MPI", "1", 1);
    struct dist_grads *h = dist_grads_attach(&m, 0, 0);
    const char *hwhy = dist_grads_refusal(h);
    if (d.world > 1)
        EXPECT(hwhy && strstr(hwhy, "host memory"), "host memory, opt-in 1: refusal \"%s\"",
               hwhy ? hwhy : "(none)");
    else EXPECT(!hwhy, "1 rank, host memory, opt-in 1: refusal \"%s\", want none", hwhy);
    dist_grads_free(h);
    /* Other values are refused before any rank attaches (the programs exit with this line). */
    struct err e;
    static const char *const values[][2] = {{"", "0"}, {"0", "0"}, {"1", "1"}, {"yes", "-1"}, {"10", "-1"}};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        setenv("CIFAR10_CUDA_AWARE_MPI", values[i][0], 1);
        int got = dist_cuda_aware_wanted(&e);
        EXPECT(got == atoi(values[i][1]), "CIFAR10_CUDA_AWARE_MPI=%s: %d, want %s", values[i][0], got,
               values[i][1]);
    }
    EXPECT(strcmp(e.msg, "CIFAR10_CUDA_AWARE_MPI=10: expected 0 or 1") == 0, "the line for 10: \"%s\"",
           e.msg);
    unsetenv("CIFAR10_CUDA_AWARE_MPI");
    model_free(&m);
}

/* Gathers images idx[0..B) of set into q's next batch in chunks of 32, progressing g between
 * them, as cifar10-train does; submits it. */
static void submit(struct batches *q, struct dist_grads *g, const struct cifar_set *set, const int *idx,
                   int B) {
    struct batch *b = batches_next(q);
    for (int i = 0; i < B; i += 32) {
        int n = B - i < 32 ? B - i : 32;
        augment_gather(set, idx + i, n, 5, 0, 1, b->img + (size_t)i * CIFAR_IMAGE_BYTES, b->geom + 3 * i,
                       b->labels + i);
        if (g) dist_grads_progress(g);
    }
    batches_submit(q, B);
}

/* (e), on a backward just issued with no download complete: completing the first bucket's
 * download lets a progress call start its reduction, and later calls copy it back; then two
 * more downloads complete at once, and one call starts both, in order (a). */
static void check_progress(struct dist_grads *g, const char *name) {
    EXPECT(fake.nred == 0, "%s: %d reductions started before any download completed", name, fake.nred);
    int first = queue_head(Q_TRANSFER);
    EXPECT(fake.ndown > 3 && first == fake.down[0], "%s: the transfer queue does not start with bucket 0",
           name);
    complete_through(first);
    dist_grads_progress(g);
    EXPECT(fake.nred == 1, "%s: progress started %d reductions once bucket 0 was downloaded, want 1", name,
           fake.nred);
    for (int i = 0; i < 10000 && fake.nback == 0; i++) {
        dist_grads_progress(g);
        if (fake.nback == 0) usleep(100);
    }
    EXPECT(fake.nback == 1, "%s: %d buckets copied back by progress, want bucket 0 alone", name, fake.nback);
    complete_through(fake.down[2]);
    dist_grads_progress(g);
    EXPECT(fake.nred == 3, "%s: progress started %d reductions once buckets 0-2 were downloaded, want 3",
           name, fake.nred);
}

/* A model on the fake backend in `mode` beside the same model (seed 5) in HOST mode on the CPU
 * backend, each with its queue of batches and its gradient reduction, and a shard permutation
 * of set (seed `seed`): the two sides of (b), (c) and (f). */
struct pair {
    struct model s, h;
    struct batches sq, hq;
    struct dist_grads *gs, *gh;
    int *perm;
};

static void pair_init(struct pair *p, const struct net_def *net, const struct cifar_set *set, int B,
                      size_t bucket, enum dist_grads_mode mode, uint64_t seed) {
    model_init(&p->s, net, &fake.k, B, 5);
    model_init(&p->h, net, kernels_cpu(), B, 5);
    batches_init(&p->sq, &fake.k, B), batches_init(&p->hq, kernels_cpu(), B);
    p->gs = dist_grads_attach_mode(&p->s, bucket, mode);
    p->gh = dist_grads_attach_mode(&p->h, bucket, DIST_GRADS_HOST);
    p->perm = XALLOC((size_t)set->n * sizeof(int));
    shard_permutation(seed, 0, set->n, p->perm);
}

static void pair_free(struct pair *p) {
    free(p->perm);
    dist_grads_free(p->gs), dist_grads_free(p->gh);
    batches_free(&p->sq), batches_free(&p->hq);
    model_free(&p->s), model_free(&p->h);
}

/* The same step on the CPU backend in HOST mode (p->h) as the one just reduced on the fake
 * backend (p->s, its sums ss[]): equal gradients and sums, and the step's signals summed (a
 * stop at step 1, rank 0's checkpoint flag = step); `mode` names the fake backend's mode. */
static void expect_host_step(struct pair *p, const struct net_def *net, const struct cifar_set *set, int B,
                             int step, const float *ss, const char *mode) {
    float sh[MODEL_STATS];
    size_t P = p->s.nparams;
    submit(&p->hq, NULL, set, shard_slice(p->perm, step, d.rank, d.world, B), B);
    check_forward_backward(&p->h, &p->hq);
    dist_grads_finish(p->gh, sh);
    EXPECT(memcmp(p->s.grads, p->h.grads, (P + 2) * sizeof(float)) == 0 && memcmp(ss, sh, sizeof sh) == 0,
           "%s, step %d, rank %d: %s sums differ from host-memory sums", net->name, step, d.rank, mode);
    EXPECT(ss[2] == (step == 1) && ss[3] == step,
           "%s, step %d, rank %d: %s: signals summed to (%g, %g), want (%d, %d)", net->name, step, d.rank,
           mode, ss[2], ss[3], step == 1, step);
}

/* Three steps of `net` in STAGED mode on the fake backend beside the same steps in HOST mode on
 * the CPU backend: step 0's copies complete only when the test or a wait says so, later steps'
 * after 0 and 3 polls. Every rank takes its own shard. */
static void test_staged(const struct net_def *net, const struct cifar_set *set, int B, size_t bucket) {
    struct pair p;
    pair_init(&p, net, set, B, bucket, DIST_GRADS_STAGED, 5);
    struct model *s = &p.s;
    struct dist_grads *gs = p.gs;
    size_t P = s->nparams;
    submit(&p.sq, NULL, set, shard_slice(p.perm, 0, d.rank, d.world, B), B);
    for (int step = 0; step < 3; step++) {
        float ss[MODEL_STATS];
        /* signals: a stop from the last rank at step 1, rank 0's checkpoint flag = step */
        float stop = step == 1 && d.rank == d.world - 1, due = d.rank == 0 ? (float)step : 0;
        dist_grads_signal(gs, stop, due), dist_grads_signal(p.gh, stop, due);
        fake.watch = 1;
        fake.delay = step == 0 ? -1 : 3 * (step - 1);
        check_forward_backward(s, &p.sq);
        if (step == 0) check_progress(gs, net->name), fake.delay = 1;
        if (step < 2) submit(&p.sq, gs, set, shard_slice(p.perm, step + 1, d.rank, d.world, B), B);
        dist_grads_finish(gs, ss);
        model_sgd_step(s, 0.05f, 0.9f, 5e-4f, 1.0f / d.world);
        fake.watch = 0;
        EXPECT(fake.violations == 0, "%s, step %d: %d ordering violations, the first: %s", net->name, step,
               fake.violations, fake.first);
        fake.violations = 0;
        EXPECT(dist_grads_buckets(gs) > 3, "%s: %d buckets of %zu bytes", net->name, dist_grads_buckets(gs),
               bucket);

        expect_host_step(&p, net, set, B, step, ss, "staged");
        model_sgd_step(&p.h, 0.05f, 0.9f, 5e-4f, 1.0f / d.world);
        EXPECT(memcmp(s->params, p.h.params, P * sizeof(float)) == 0,
               "%s, step %d, rank %d: weights differ after the update", net->name, step, d.rank);
    }
    pair_free(&p);
}

/* (f): three steps of `net` in DEVICE mode on the fake backend beside HOST mode on the CPU. */
static void test_device(const struct net_def *net, const struct cifar_set *set, int B, size_t bucket) {
    struct pair p;
    pair_init(&p, net, set, B, bucket, DIST_GRADS_DEVICE, 7);
    struct dist_grads *gs = p.gs;
    fake.delay = 0;
    for (int step = 0; step < 3; step++) {
        float ss[MODEL_STATS];
        float stop = step == 1 && d.rank == d.world - 1, due = d.rank == 0 ? (float)step : 0;
        dist_grads_signal(gs, stop, due), dist_grads_signal(p.gh, stop, due);
        submit(&p.sq, NULL, set, shard_slice(p.perm, step, d.rank, d.world, B), B);
        fake.uploads = fake.downloads = 0, fake.count_syncs = 1;
        check_forward_backward(&p.s, &p.sq);
        dist_grads_progress(gs); /* every bucket is ready: all reduced here */
        EXPECT(fake.uploads + fake.downloads == 0,
               "%s, step %d: %d synchronous copies during the device-memory reductions", net->name, step,
               fake.uploads + fake.downloads);
        dist_grads_finish(gs, ss); /* (its one download, the stats, is allowed) */
        fake.count_syncs = 0;
        EXPECT(fake.uploads == 0, "%s, step %d: %d synchronous uploads in dist_grads_finish", net->name, step,
               fake.uploads);
        expect_host_step(&p, net, set, B, step, ss, "device-memory");
        model_sgd_step(&p.s, 0.05f, 0.9f, 5e-4f, 1.0f / d.world);
        model_sgd_step(&p.h, 0.05f, 0.9f, 5e-4f, 1.0f / d.world);
    }
    pair_free(&p);
}

int main(int argc, char **argv) {
    err_set_progname("test_staged");
    dist_init(&argc, &argv, 0, &d);
    omp_set_num_threads(1);
    fake_init();
    test_choose();

    /* A small in-memory dataset of random images. */
    int n = 64, B = 4;
    uint8_t *raw;
    struct cifar_set set = check_random_set(n, 54321, &raw);
    test_staged(&test_net, &set, B, 2048);
    test_staged(&net_workshop_cnn, &set, B, 65536);
    test_device(&test_net, &set, B, 2048);
    free(set.records), free(raw);
    for (int i = 0; i < fake.ncopies; i++) free(fake.copies[i].snapshot);
    free(fake.copies);

    /* The job's verdict: any failure on any rank fails every rank. */
    char label[40];
    snprintf(label, sizeof label, "test_staged (rank %d of %d)", d.rank, d.world);
    int bad = check_summary(label), any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    dist_finalize();
    return any;
}
