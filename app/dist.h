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

#endif
