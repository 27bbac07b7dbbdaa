/* The whitening filter (model/whiten.c): the Jacobi eigen-decomposition against matrices with
 * known eigenvalues, the filter against its definition (it whitens the patch covariance), and
 * against airbench's own computation in PyTorch float64 (tests/whiten_reference.py, run from
 * the repository root as tests/run.sh does). */
#include "../common/err.h"
#include "../common/rng.h"
#include "../data/augment.h"
#include "../model/whiten.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N WHITEN_DIM

/* A random orthogonal q[n][n]: Gram-Schmidt on uniform rows. */
static void random_orthogonal(int n, double *q, uint64_t seed) {
    struct rng r = rng_make(seed, RNG_INIT, 1, 0);
    for (int i = 0; i < n; i++) {
        double *row = q + i * n, norm = 0.0;
        for (int k = 0; k < n; k++) row[k] = 2.0 * rng_uniform(&r) - 1.0;
        for (int j = 0; j < i; j++) {
            double dot = 0.0;
            for (int k = 0; k < n; k++) dot += row[k] * q[j * n + k];
            for (int k = 0; k < n; k++) row[k] -= dot * q[j * n + k];
        }
        for (int k = 0; k < n; k++) norm += row[k] * row[k];
        for (int k = 0; k < n; k++) row[k] /= sqrt(norm);
    }
}

/* a = q^T diag(d) q: a symmetric matrix with eigenvalues d. */
static void rotated_diagonal(int n, const double *d, const double *q, double *a) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) {
            a[i * n + j] = 0.0;
            for (int k = 0; k < n; k++) a[i * n + j] += q[k * n + i] * d[k] * q[k * n + j];
        }
}

static int ascending(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* whiten_eigh on a[n][n] whose eigenvalues are d (any order): the eigenvalues ascending and
 * equal to d, A v = lambda v and V^T V = I, each to 1e-12 relative to the largest |d|. */
static void check_eigh(const char *what, int n, const double *a, const double *d) {
    double work[N * N], lambda[N], v[N * N], want[N], scale = 0.0, eig = 0.0, res = 0.0, orth = 0.0;
    memcpy(work, a, (size_t)n * n * sizeof(double));
    memcpy(want, d, (size_t)n * sizeof(double));
    qsort(want, (size_t)n, sizeof(double), ascending);
    whiten_eigh(n, work, lambda, v);
    for (int i = 0; i < n; i++) scale = fmax(scale, fabs(d[i]));
    for (int i = 0; i < n; i++) {
        eig = fmax(eig, fabs(lambda[i] - want[i]));
        for (int r = 0; r < n; r++) {
            double av = 0.0, vv = 0.0;
            for (int k = 0; k < n; k++) av += a[r * n + k] * v[k * n + i], vv += v[k * n + r] * v[k * n + i];
            res = fmax(res, fabs(av - lambda[i] * v[r * n + i]));
            orth = fmax(orth, fabs(vv - (r == i)));
        }
    }
    EXPECT(eig <= 1e-12 * scale && res <= 1e-12 * scale && orth <= 1e-12,
           "%s: eigenvalues off by %.3g, |Av - lambda v| %.3g, |V^T V - I| %.3g", what, eig, res, orth);
}

static void test_eigh(void) {
    double d[N] = {3.0, -1.0, 2.0, 0.5, 7.0, 1e-6, 4.0, -2.5, 0.25, 11.0, 6.0, 0.0}, a[N * N] = {0}, q[N * N];
    for (int i = 0; i < N; i++) a[i * N + i] = d[i];
    check_eigh("diagonal", N, a, d);
    random_orthogonal(N, q, 3);
    rotated_diagonal(N, d, q, a);
    check_eigh("rotated diagonal", N, a, d);
    double repeated[N] = {2.0, 2.0, 2.0, 5.0, 5.0, 1.0, 1.0, 1.0, 1.0, 9.0, 0.1, 0.1};
    rotated_diagonal(N, repeated, q, a);
    check_eigh("repeated eigenvalues", N, a, repeated);
    double two[2] = {1.0, 3.0}, a2[4] = {2.0, 1.0, 1.0, 2.0}; /* [[2, 1], [1, 2]]: 1 and 3 */
    check_eigh("2x2", 2, a2, two);
}

/* n images of smooth random fields (a sinusoid shared by the channels with per-channel gains)
 * plus a little noise: strongly correlated patches whose smallest eigenvalues fall below eps. */
static struct cifar_set smooth_set(int n, uint8_t **raw) {
    *raw = XALLOC((size_t)n * CIFAR_RECORD_BYTES);
    struct cifar_set set = {.n = n, .records = XALLOC((size_t)n * sizeof(uint8_t *))};
    struct rng r = rng_make(11, RNG_INIT, 2, 0);
    for (int i = 0; i < n; i++) {
        uint8_t *rec = *raw + (size_t)i * CIFAR_RECORD_BYTES;
        double fy = 0.6 * rng_uniform(&r), fx = 0.6 * rng_uniform(&r), phase = 6.3 * rng_uniform(&r);
        rec[0] = (uint8_t)(i % 10);
        for (int p = 0; p < CIFAR_IMAGE_BYTES; p++) {
            int c = p / 1024, y = p / 32 % 32, x = p % 32;
            double v = 120.0 + (60.0 - 15.0 * c) * sin(fy * y + fx * x + phase) + 4.0 * rng_uniform(&r);
            rec[1 + p] = (uint8_t)v;
        }
        set.records[i] = rec;
    }
    return set;
}

/* (W cov W^T)[i][j] - delta_ij lambda_i / (lambda_i + eps), largest over the first 12 rows. */
static double whitening_error(const double *w, const double *cov, const double *lambda) {
    double worst = 0.0;
    for (int i = 0; i < N; i++)
        for (int j = 0; j < N; j++) {
            double s = 0.0;
            for (int k = 0; k < N; k++)
                for (int l = 0; l < N; l++) s += w[i * N + k] * cov[k * N + l] * w[j * N + l];
            worst = fmax(worst, fabs(s - (i == j ? lambda[i] / (lambda[i] + WHITEN_EPS) : 0.0)));
        }
    return worst;
}

/* airbench's own computation in PyTorch float64 on the same inputs (the model's normalised
 * images x[n][3][32][32], float32) must give our float filter, up to each eigenvector's sign. */
static void cross_check_torch(const struct cifar_set *set, int n, const float *w) {
    if (system("/usr/bin/python3 -c 'import torch' 2>/dev/null") != 0) {
        printf("test_whiten: PyTorch cross-check skipped: /usr/bin/python3 cannot import torch\n");
        return;
    }
    char dir[256], path[512], cmd[1024];
    check_tmpdir("whiten", dir, sizeof dir);
    float scale[3], shift[3], *x = XALLOC((size_t)n * CIFAR_IMAGE_BYTES * sizeof(float));
    augment_scale_shift(scale, shift);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < CIFAR_IMAGE_BYTES; j++)
            x[(size_t)i * CIFAR_IMAGE_BYTES + j] =
                (float)cifar_pixels(set, i)[j] * scale[j / 1024] + shift[j / 1024];
    snprintf(path, sizeof path, "%s/x.f32", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(x, sizeof(float), (size_t)n * CIFAR_IMAGE_BYTES, f) == (size_t)n * CIFAR_IMAGE_BYTES &&
          fclose(f) == 0);
    snprintf(path, sizeof path, "%s/w.f32", dir);
    f = fopen(path, "wb");
    CHECK(f && fwrite(w, sizeof(float), WHITEN_FILTERS * N, f) == WHITEN_FILTERS * N && fclose(f) == 0);
    snprintf(cmd, sizeof cmd, "/usr/bin/python3 tests/whiten_reference.py %s %d %g", dir, n, WHITEN_EPS);
    fflush(stdout);
    EXPECT(system(cmd) == 0, "tests/whiten_reference.py: our filter differs from airbench's in PyTorch");
    free(x);
    check_rmdir(dir);
}

static void test_filter(void) {
    uint8_t *raw;
    const int n = 100; /* two whole chunks of the covariance's sums and a partial one */
    struct cifar_set set = smooth_set(n, &raw);
    double cov[N * N], lambda[N], wd[WHITEN_FILTERS * N], w64[WHITEN_FILTERS * N];
    whiten_covariance(kernels_cpu(), &set, n, cov);
    whiten_filters(cov, lambda, wd);
    int order = 1, negated = 1;
    for (int i = 0; i + 1 < N; i++) order &= lambda[i] >= lambda[i + 1] && lambda[N - 1] > 0.0;
    for (int i = 0; i < N * N; i++) negated &= wd[N * N + i] == -wd[i];
    EXPECT(order && negated, "eigenvalues descending and positive (%d), filters 12..23 the negations (%d)",
           order, negated);
    printf("test_whiten: eigenvalues of the synthetic patch covariance %.3g .. %.3g (eps %g)\n", lambda[0],
           lambda[N - 1], WHITEN_EPS);
    double e64 = whitening_error(wd, cov, lambda);
    EXPECT(e64 <= 1e-9, "double filter: W cov W^T off diag(lambda / (lambda + eps)) by %.3g", e64);

    float w[WHITEN_FILTERS * N];
    struct err e;
    EXPECT(whiten_filter(kernels_cpu(), &set, n, w, &e) == 0, "whiten_filter: %s", e.msg);
    for (int i = 0; i < WHITEN_FILTERS * N; i++) w64[i] = w[i];
    /* float storage rounds each value by 2^-24 relative, and the largest filters (1/sqrt(eps)
     * ~ 45) meet the largest eigenvalues in W cov W^T: measured ~4e-7 here, so 1e-5, not 1e-9 */
    double e32 = whitening_error(w64, cov, lambda);
    EXPECT(e32 <= 1e-5, "float filter: W cov W^T off diag(lambda / (lambda + eps)) by %.3g", e32);
    printf("test_whiten: W cov W^T vs diag(lambda / (lambda + eps)): %.3g (double filter), %.3g (float "
           "filter)\n",
           e64, e32);
    EXPECT(whiten_filter(kernels_cpu(), &set, n + 1, w, &e) == -1 &&
               strstr(e.msg, "whitening needs 101 training images, the set has 100"),
           "too few images: %s", e.msg);
    cross_check_torch(&set, n, w);
    free(set.records), free(raw);
}

int main(void) {
    err_set_progname("test_whiten");
    test_eigh();
    test_filter();
    return check_summary("test_whiten");
}
