/* Minimal test harness for the C test programs: EXPECT records a pass or a failure with file
 * and line; check_summary prints "NAME: N passed, N failed" and returns the exit status. */
#ifndef TESTS_CHECK_H
#define TESTS_CHECK_H

#include "../data/cifar.h"

#include <stddef.h>
#include <stdint.h>

void check_record(int ok, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define EXPECT(cond, ...) check_record(!!(cond), __FILE__, __LINE__, __VA_ARGS__)

/* Relative L2 error ||a - ref|| / max(||ref||, tiny) of a float array against a double one. */
double check_rel_l2(const float *a, const double *ref, size_t n);
/* Same for two float arrays. */
double check_rel_l2f(const float *a, const float *ref, size_t n);

/* "MIN/MEDIAN" of the times t[0..n) (seconds) in milliseconds, two decimals, into buf (sorts
 * t): the timing tools' figures (winograd_time, tiles_time). */
const char *check_min_median(double *t, int n, char *buf, size_t size);

/* Fills x[n] with uniform values in [lo, hi) from a fixed-seed generator. */
void check_fill(float *x, size_t n, float lo, float hi, unsigned seed);
/* n floats, 64-byte aligned (the GEMM's packed panels need it), filled with check_fill's values
 * in [-0.5, 0.5); the timing tools' operands. Free with free(). */
float *check_floats(size_t n);

/* A fresh directory /tmp/cifar10-NAME.XXXXXX (path written to dir[n]), and its removal. */
void check_tmpdir(const char *name, char *dir, size_t n);
void check_rmdir(const char *dir);

/* A synthetic set of n labelled images (records in *raw, caller frees set.records and *raw)
 * whose label is a function of the image, so training on it lowers the loss. */
struct cifar_set check_learnable_set(int n, uint8_t **raw);

/* n records of random pixels and random labels (an LCG from seed); caller frees as above. */
struct cifar_set check_random_set(int n, uint32_t seed, uint8_t **raw);

/* model_forward_backward and model_predict on q's oldest submitted batch, which they then
 * release: a trainer's or evaluator's step. */
struct model;
struct batches;
int check_forward_backward(struct model *m, struct batches *q);
int check_predict(struct model *m, struct batches *q, int *pred, float *logits);

/* Runs fn(arg) in a child process (no core file when it aborts) with its stderr in msg[size]
 * (NUL-terminated, cut at size - 1); returns its wait status (waitpid's). The child exits 0 when
 * fn returns. */
int check_in_child(void (*fn)(void *arg), void *arg, char *msg, size_t size);

int check_summary(const char *suite);

#endif
