/* allreduce_time [--mode poll|sleep|block] [--reps N] [--warmup N] BYTES...
 * Times float-sum allreduces of each size over all ranks (scripts/scaling.sh runs it between
 * network-namespace hosts): per repetition a barrier, then each rank's time to completion, the
 * slowest rank's counted. mode poll: MPI_Iallreduce tested in a loop with sched_yield, as
 * dist/dist.c waits for a gradient bucket (Open MPI progresses it only inside MPI calls);
 * sleep: the same with a 20 us sleep between tests (what a rank does once a wait passes
 * DIST_SPIN_SECONDS); block: MPI_Allreduce. MPI's settings are training's (dist_mpi_defaults:
 * OMPI_MCA_coll_libnbc_iallreduce_algorithm=0 in the environment measures Open MPI's own
 * choice). Rank 0 prints one line per size:
 *   allreduce: bytes=B ranks=R mode=M reps=N median_s=S min_s=S max_s=S
 * Exit status 2 on bad usage (one line), 1 when the sums are wrong. */
#include "../common/err.h"
#include "../dist/dist.h"

#include <mpi.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One allreduce of n floats in buf, to completion; returns this rank's seconds. */
/* How a rank waits for the allreduce (the usage above), and the modes' names. */
enum mode { MODE_BLOCK, MODE_POLL, MODE_SLEEP, MODES };
static const char *const mode_names[MODES] = {"block", "poll", "sleep"};

static double one(float *buf, int n, enum mode mode) {
    double t0 = MPI_Wtime();
    if (mode != MODE_BLOCK) {
        MPI_Request req;
        MPI_Iallreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
        for (int done = 0; !done;) {
            MPI_Test(&req, &done, MPI_STATUS_IGNORE);
            if (!done && mode == MODE_SLEEP) nanosleep(&(struct timespec){0, 20000}, NULL);
            else if (!done) sched_yield();
        }
    } else {
        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    }
    return MPI_Wtime() - t0;
}

/* Times reps allreduces of `bytes` (after warmup untimed ones); rank 0 prints the line. Every
 * rank contributes rank + 1 to every element, so the sum is known: returns 0 when it is right. */
static int time_size(long bytes, int reps, int warmup, enum mode mode, int rank, int world) {
    int n = (int)(bytes / (long)sizeof(float));
    float *buf = XALLOC((size_t)(n > 0 ? n : 1) * sizeof(float));
    double *t = XALLOC((size_t)reps * sizeof(double));
    int wrong = 0;
    for (int r = -warmup; r < reps; r++) {
        for (int i = 0; i < n; i++) buf[i] = (float)(rank + 1);
        MPI_Barrier(MPI_COMM_WORLD);
        double mine = one(buf, n, mode), slowest;
        MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (r >= 0) t[r] = slowest;
        for (int i = 0; i < n; i++) wrong += buf[i] != (float)world * (world + 1) / 2;
    }
    int any;
    MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        qsort(t, (size_t)reps, sizeof *t, cmp_double);
        double median = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
        printf("allreduce: bytes=%ld ranks=%d mode=%s reps=%d median_s=%.6f min_s=%.6f max_s=%.6f\n", bytes,
               world, mode_names[mode], reps, median, t[0], t[reps - 1]);
        if (any) fprintf(stderr, "allreduce_time: %d elements of the %ld-byte sums are wrong\n", any, bytes);
        fflush(stdout);
    }
    free(buf), free(t);
    return any != 0;
}

/* The mode named s, or -1. */
static int mode_of(const char *s) {
    for (int m = 0; m < MODES; m++)
        if (strcmp(s, mode_names[m]) == 0) return m;
    return -1;
}

static long parse_long(const char *what, const char *s, long lo, long hi) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi)
        err_die(2, "%s: '%s' is not a whole number from %ld to %ld", what, s, lo, hi);
    return v;
}

int main(int argc, char **argv) {
    err_set_progname("allreduce_time");
    dist_mpi_defaults(); /* the ring, as training has it */
    MPI_Init(&argc, &argv);
    int rank, world, reps = 20, warmup = 3, a = 1;
    enum mode mode = MODE_POLL;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    for (; a < argc && strncmp(argv[a], "--", 2) == 0; a += 2) {
        if (a + 1 >= argc) err_die(2, "%s needs a value", argv[a]);
        if (strcmp(argv[a], "--mode") == 0 && mode_of(argv[a + 1]) >= 0)
            mode = (enum mode)mode_of(argv[a + 1]);
        else if (strcmp(argv[a], "--reps") == 0) reps = (int)parse_long("--reps", argv[a + 1], 1, 100000);
        else if (strcmp(argv[a], "--warmup") == 0)
            warmup = (int)parse_long("--warmup", argv[a + 1], 0, 100000);
        else
            err_die(2, "%s %s: unknown option or value (--mode poll|sleep|block, --reps N, --warmup N)",
                    argv[a], argv[a + 1]);
    }
    if (a >= argc)
        err_die(2, "usage: allreduce_time [--mode poll|sleep|block] [--reps N] [--warmup N] BYTES...");
    int bad = 0;
    for (; a < argc; a++)
        bad |= time_size(parse_long("BYTES", argv[a], 4, 1L << 30), reps, warmup, mode, rank, world);
    MPI_Finalize();
    return bad;
}
