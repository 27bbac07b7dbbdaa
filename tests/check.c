#include "check.h"

#include "../common/err.h"
#include "../common/rng.h"
#include "../model/batches.h"
#include "../model/model.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

static int passed, failed;

void check_record(int ok, const char *file, int line, const char *fmt, ...) {
    if (ok) {
        passed++;
        return;
    }
    failed++;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

double check_rel_l2(const float *a, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (isnan(num)) return INFINITY;
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

static int by_value(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

const char *check_min_median(double *t, int n, char *buf, size_t size) {
    qsort(t, (size_t)n, sizeof *t, by_value);
    snprintf(buf, size, "%.2f/%.2f", t[0] * 1e3, t[n / 2] * 1e3);
    return buf;
}

double check_rel_l2f(const float *a, const float *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
    }
    if (isnan(num)) return INFINITY;
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

void check_fill(float *x, size_t n, float lo, float hi, unsigned seed) {
    unsigned long long s = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    for (size_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ULL + 1442695040888963407ULL;
        x[i] = lo + (hi - lo) * (float)((s >> 40) * 0x1.0p-24);
    }
}

float *check_floats(size_t n) {
    float *p = aligned_alloc(64, (n * sizeof(float) + 63) / 64 * 64);
    CHECK(p);
    check_fill(p, n, -0.5f, 0.5f, 1);
    return p;
}

void check_tmpdir(const char *name, char *dir, size_t n) {
    snprintf(dir, n, "/tmp/cifar10-%s.XXXXXX", name);
    if (!mkdtemp(dir)) {
        perror(dir);
        exit(1);
    }
}

void check_rmdir(const char *dir) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "warning: could not remove %s\n", dir);
}

int check_summary(const char *suite) {
    printf("%s: %d passed, %d failed\n", suite, passed, failed);
    return failed ? 1 : 0;
}

/* A synthetic labelled set of n images whose label is a function of the image (a brighter
 * channel and left half), so training lowers the loss; raw records in *raw. */
struct cifar_set check_learnable_set(int n, uint8_t **raw) {
    *raw = XALLOC((size_t)n * CIFAR_RECORD_BYTES);
    struct rng r = rng_make(9, RNG_INIT, 77, 0);
    struct cifar_set set = {.n = n, .records = XALLOC((size_t)n * sizeof(uint8_t *))};
    for (int i = 0; i < n; i++) {
        uint8_t *rec = *raw + (size_t)i * CIFAR_RECORD_BYTES;
        int label = (int)rng_below(&r, 10);
        rec[0] = (uint8_t)label;
        for (int p = 0; p < CIFAR_IMAGE_BYTES; p++)
            rec[1 + p] = (uint8_t)(rng_below(&r, 96) + (p / 1024 == label % 3 ? 24 * (label / 3) : 0) +
                                   (p % 32 < 16) * 40);
        set.records[i] = rec;
    }
    return set;
}

struct cifar_set check_random_set(int n, uint32_t seed, uint8_t **raw) {
    *raw = XALLOC((size_t)n * CIFAR_RECORD_BYTES);
    for (size_t i = 0; i < (size_t)n * CIFAR_RECORD_BYTES; i++)
        seed = seed * 1664525u + 1013904223u, (*raw)[i] = (uint8_t)(seed >> 24);
    struct cifar_set set = {.n = n, .records = XALLOC((size_t)n * sizeof(uint8_t *))};
    for (int i = 0; i < n; i++)
        (*raw)[(size_t)i * CIFAR_RECORD_BYTES] %= 10, set.records[i] = *raw + (size_t)i * CIFAR_RECORD_BYTES;
    return set;
}

int check_forward_backward(struct model *m, struct batches *q) {
    struct model_input in;
    int slot = batches_take(q, &in), n = model_forward_backward(m, &in);
    batches_release(q, slot);
    return n;
}

int check_predict(struct model *m, struct batches *q, int *pred, float *logits) {
    struct model_input in;
    int slot = batches_take(q, &in), n = model_predict(m, &in, pred, logits);
    batches_release(q, slot);
    return n;
}

int check_in_child(void (*fn)(void *arg), void *arg, char *msg, size_t size) {
    fflush(stdout), fflush(stderr);
    int fds[2];
    CHECK(size > 0 && pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        setrlimit(RLIMIT_CORE, &(struct rlimit){0, 0}); /* an abort leaves no core file */
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t len = 0;
    for (ssize_t got; len < size - 1 && (got = read(fds[0], msg + len, size - 1 - len)) > 0;)
        len += (size_t)got;
    msg[len] = '\0';
    close(fds[0]);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid);
    return status;
}
