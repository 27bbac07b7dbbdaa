/* Data-parallel plumbing over MPI (Open MPI). Works with and without mpirun (a singleton run is
 * a world of one). Only rank 0 prints the training log and writes files. */
#ifndef DIST_DIST_H
#define DIST_DIST_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

struct dist {
    int rank, world;
    int local_rank, local_size; /* within this node (MPI_COMM_TYPE_SHARED) */
    int local_same_mask;        /* ranks on this node with the same CPU affinity mask as ours */
};

/* MPI_Init, after dist_mpi_defaults; fills d. mask_id identifies this process's CPU affinity
 * mask (cpus.h). */
void dist_init(int *argc, char ***argv, uint64_t mask_id, struct dist *d);
/* The MPI settings the gradient reduction wants, as defaults a user's own settings override:
 * Open MPI's nonblocking allreduce as a ring (coll_libnbc_iallreduce_algorithm 1; see dist.c).
 * dist_init applies them; a program that calls MPI_Init itself calls this first. */
void dist_mpi_defaults(void);
void dist_finalize(void);

/* Agreement on errors found independently by every rank (bad flags, unreadable data): each
 * rank passes its own status (0 = fine, else an exit code) and message. If any rank failed,
 * the lowest failing rank prints "PROG: message" (one line for the whole job), every rank
 * finalises MPI and exits with that code. Returns only when all ranks are fine. */
void dist_agree(int status, const char *message);

/* A failure one rank hits alone (e.g. rank 0 cannot write the checkpoint): prints the message
 * and aborts the whole job with the exit code (MPI_Abort), so no rank hangs. */
void dist_fail(int code, const char *message) __attribute__((noreturn));

/* In-place sum over all ranks (one MPI_Allreduce; chunked only beyond INT_MAX elements). */
void dist_allreduce_sum(float *buf, size_t n);
void dist_allreduce_sum_double(double *buf, size_t n);
void dist_bcast(void *buf, size_t bytes, int root);
/* Rank 0 receives every rank's n floats, in rank order, in all[world][n] (unused elsewhere). */
void dist_gather_floats(const float *mine, float *all, size_t n);
/* Rank 0's all[world][n] to the ranks: rank r receives all[r] in mine[n]. */
void dist_scatter_floats(const float *all, float *mine, size_t n);
/* Collective timeout. Every collective below (and the gradient buckets') waits at most
 * the current bound in seconds; past that, the rank prints one line (rank, last step, the call, or
 * the gradient bucket) and exits with DIST_EXIT_TIMEOUT, and mpirun ends the job: a rank, host
 * or network path that is gone, or stalled, otherwise leaves the others waiting forever (TCP
 * may never notice a cut link). The bound starts at DIST_TIMEOUT_STARTUP (data loading, the
 * first steps) and, after DIST_TIMEOUT_WARMUP steps, becomes the larger of DIST_TIMEOUT_MIN
 * and DIST_TIMEOUT_STEPS times the median of the last 64 step times, unless fixed. */
#define DIST_EXIT_TIMEOUT    5
#define DIST_TIMEOUT_STARTUP 600.0
#define DIST_TIMEOUT_WARMUP  10
#define DIST_TIMEOUT_MIN     60.0
#define DIST_TIMEOUT_STEPS   50.0
void dist_timeout_fixed(double seconds);
/* Records a step's wall time (global_step: the steps done, for the message) and adapts. */
void dist_timeout_step(long global_step, double step_seconds);
/* A stop request (the caller's signal flag, nonzero once a stop signal came) that arrives while
 * a collective has waited DIST_STALL_STOP seconds or more ends the wait the same way, with a
 * line saying so: the other ranks cannot join a clean stop then (mpirun, having lost a host,
 * signals the ranks it still reaches and kills them a second later), and waiting on would only
 * end in SIGKILL without a word. Below that wait the stop waits for the collective, as a clean
 * stop at the step boundary needs; healthy waits (a rank writing the checkpoint, a slower
 * step) stay well under it. */
#define DIST_STALL_STOP 10.0
void dist_stop_flag(volatile sig_atomic_t *flag);
/* How a rank waits: it polls MPI (Open MPI progresses nonblocking collectives only inside MPI
 * calls) and yields the core between polls for the first DIST_SPIN_SECONDS of a wait, where
 * every healthy reduction ends; past that it sleeps DIST_POLL_SLEEP_NS between polls, so a rank
 * waiting on a stalled peer or a cut link does not hold a core until the timeout (on a shared
 * node, or beside the other ranks of its host). */
#define DIST_SPIN_SECONDS  1.0
#define DIST_POLL_SLEEP_NS 200000L
/* HOST mode: while backward runs with gradient buckets in flight, a thread calls into MPI
 * every DIST_PROGRESS_NS so that their rings move during long layers (dist_grads_attach). */
#define DIST_PROGRESS_NS 200000L

/* Largest x over all ranks. */
double dist_max_double(double x);
void dist_barrier(void);
/* Wall-clock seconds (MPI_Wtime). */
double dist_time(void);

/* Rank 0 prints every rank's line (up to 767 characters), in rank order: "rank R: line". */
void dist_print_all(const char *line);

/* Whether this Open MPI can take GPU memory in its calls (MPIX_Query_cuda_support(); 0 for an
 * MPI without the query). */
int dist_cuda_aware(void);

/* Gradient averaging overlapped with backward, in buckets as PyTorch DDP and Horovod do.
 * Attach it to a model; during model_forward_backward every range of finished gradients joins
 * the open bucket, and a bucket that reaches bucket_bytes (or holds the first layer) is closed.
 * Its reduction starts, in bucket order on every rank, once its gradients exist:
 *   LOCAL  one rank: nothing is reduced.
 *   HOST   host memory (CPU backend): MPI_Iallreduce on m->grads itself, at once; a
 *          progress thread keeps the reductions moving while backward runs (Open MPI moves
 *          them only inside MPI calls), where MPI grants MPI_THREAD_SERIALIZED (dist_init
 *          asks for it).
 *   STAGED GPU memory (the default there): the bucket is copied to page-locked host memory on
 *          the transfer queue behind its kernels, MPI_Iallreduce'd there once that copy is
 *          done, and copied back on its own as soon as its reduction completes; the compute
 *          queue waits for every copy-back before the SGD update.
 *   DEVICE GPU memory, opt-in: a blocking MPI_Allreduce straight on GPU memory, once the
 *          bucket's kernels have finished. Open MPI is CUDA-aware for blocking collectives
 *          only (its coll/cuda component stages them through host memory); MPI_Iallreduce goes
 *          to coll/libnbc, which reduces over the raw pointers on the host, and the Open MPI
 *          FAQ lists it among the calls that do not take GPU memory. So DEVICE needs both a
 *          CUDA-aware MPI (dist_cuda_aware) and CIFAR10_CUDA_AWARE_MPI=1 in every rank's
 *          environment (mpirun -x CIFAR10_CUDA_AWARE_MPI=1); it pays only where the MPI moves
 *          GPU memory faster than the staging does (GPUDirect RDMA through UCX, say).
 * bucket_bytes 0: one bucket after the whole backward. */
enum dist_grads_mode { DIST_GRADS_LOCAL, DIST_GRADS_HOST, DIST_GRADS_DEVICE, DIST_GRADS_STAGED };
struct err;
struct model;
struct dist_grads;
/* The mode for `world` ranks with gradients in GPU memory or not, whether DEVICE was asked for
 * (device_opt_in) and whether the MPI is CUDA-aware. */
enum dist_grads_mode dist_grads_choose(int world, int gpu_memory, int device_opt_in, int cuda_aware);
/* CIFAR10_CUDA_AWARE_MPI: 1 asks for DEVICE; unset, empty or 0 not; -1 with one line in e for
 * anything else (the programs check it before dist_grads_attach, which CHECKs it). */
int dist_cuda_aware_wanted(struct err *e);
/* Collective (every rank calls it): dist_grads_choose with this job's answers; DEVICE only when
 * every rank chose it (blocking and nonblocking collectives never match one another). */
struct dist_grads *dist_grads_attach(struct model *m, size_t bucket_bytes, int gpu_memory);
/* With the mode given (tests: STAGED over a fake asynchronous backend); every rank the same. */
struct dist_grads *dist_grads_attach_mode(struct model *m, size_t bucket_bytes, enum dist_grads_mode mode);
enum dist_grads_mode dist_grads_mode(const struct dist_grads *g);
const char *dist_grads_mode_name(enum dist_grads_mode mode);
/* Why DEVICE was asked for (CIFAR10_CUDA_AWARE_MPI=1) with several ranks and not taken, for the
 * log: host memory, an MPI without CUDA support, or a rank that could not; NULL otherwise. */
const char *dist_grads_refusal(const struct dist_grads *g);
int dist_grads_buckets(const struct dist_grads *g); /* buckets of the last step */
/* Tests: how many of this step's reductions, in order, the progress thread last found complete
 * (0 without the thread). Once it counts a bucket, that bucket's sums may be read. */
int dist_grads_progress_seen(struct dist_grads *g);
/* Between model_forward_backward and dist_grads_finish (e.g. between chunks of the next batch's
 * gather): starts the reductions of the buckets whose gradients now exist, lets MPI progress
 * the started ones (it moves only inside MPI calls) and, STAGED, starts the copy-back of each
 * reduced bucket. Never blocks, except DEVICE's reductions themselves. */
void dist_grads_progress(struct dist_grads *g);
/* With on non-zero, between steps: the model's grads_ready calls only answer where a bucket
 * would close, copying and reducing nothing, and no dist_grads_finish follows; 0 ends it. For
 * untimed warm-up steps, which so record the step graphs the run will use (model.h). */
void dist_grads_rehearse(struct dist_grads *g, int on);
/* Two values every rank contributes to the next step's reduction, summed like the loss: a
 * rank's request to stop, and a checkpoint's being due (rank 0's clock). Set them before
 * model_forward_backward; they hold until set again. No extra message: they ride in the
 * first bucket, beside (loss, correct). */
void dist_grads_signal(struct dist_grads *g, float stop, float checkpoint);
/* Waits for every bucket and returns the sums over the ranks of (loss, correct, stop,
 * checkpoint); the SGD update issued afterwards sees the summed gradients. */
void dist_grads_finish(struct dist_grads *g, float stats[4]);
void dist_grads_free(struct dist_grads *g);

#endif
