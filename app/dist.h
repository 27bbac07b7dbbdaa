/* Data-parallel plumbing over MPI (Open MPI). Works with and without mpirun (a singleton run is
 * a world of one). Only rank 0 prints the training log and writes files. */
#ifndef APP_DIST_H
#define APP_DIST_H

#include <stddef.h>
#include <stdint.h>

struct dist {
    int rank, world;
    int local_rank, local_size; /* within this node (MPI_COMM_TYPE_SHARED) */
    int local_same_mask;        /* ranks on this node with the same CPU affinity mask as ours */
};

/* MPI_Init; fills d. mask_id identifies this process's CPU affinity mask (cpus.h). */
void dist_init(int *argc, char ***argv, uint64_t mask_id, struct dist *d);
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
/* Largest x over all ranks. */
double dist_max_double(double x);
void dist_barrier(void);
/* Wall-clock seconds (MPI_Wtime). */
double dist_time(void);

/* Rank 0 prints every rank's line (up to 255 characters), in rank order: "rank R: line". */
void dist_print_all(const char *line);

/* Whether this Open MPI can take GPU memory in its calls (MPIX_Query_cuda_support(); 0 for an
 * MPI without the query). */
int dist_cuda_aware(void);

/* Gradient averaging overlapped with backward, in buckets as PyTorch DDP and Horovod do.
 * Attach it to a model; during model_forward_backward every range of finished gradients joins
 * the open bucket, and a bucket that reaches bucket_bytes (or holds the first layer) is closed
 * and its MPI_Iallreduce started as soon as its gradients exist:
 *   - host memory (CPU backend): at once, on m->grads itself;
 *   - GPU memory with a CUDA-aware MPI: once the bucket's backward kernels have finished, on
 *     device memory;
 *   - otherwise: the bucket is copied to page-locked host memory on the transfer queue behind
 *     its kernels, reduced there, and all buckets are copied back before the SGD update.
 * dist_grads_finish() waits for every bucket and returns the summed (loss, correct) pair; with
 * one rank nothing is reduced. bucket_bytes 0: one bucket after the whole backward. */
enum dist_grads_mode { DIST_GRADS_LOCAL, DIST_GRADS_HOST, DIST_GRADS_DEVICE, DIST_GRADS_STAGED };
struct model;
struct dist_grads;
struct dist_grads *dist_grads_attach(struct model *m, size_t bucket_bytes, int gpu_memory);
enum dist_grads_mode dist_grads_mode(const struct dist_grads *g);
const char *dist_grads_mode_name(enum dist_grads_mode mode);
int dist_grads_buckets(const struct dist_grads *g); /* buckets of the last step */
void dist_grads_finish(struct dist_grads *g, float stats[2]);
void dist_grads_free(struct dist_grads *g);

#endif
