#include "dist.h"

#include "../common/err.h"

#include <limits.h>
#include <mpi.h>
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
