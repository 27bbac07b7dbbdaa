/* The whitening filter (see whiten.h). Double precision throughout: over ~5M patches a float
 * covariance comes out with negative eigenvalues. */
#include "whiten.h"

#include "../data/augment.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One Jacobi rotation J (J_pp = J_qq = c, J_pq = s, J_qp = -s) with A <- J^T A J chosen so
 * that a_pq becomes 0, and V <- V J. */
static void rotate(int n, double *a, double *v, int p, int q) {
    double theta = (a[q * n + q] - a[p * n + p]) / (2.0 * a[p * n + q]);
    double t = (theta >= 0 ? 1.0 : -1.0) / (fabs(theta) + hypot(theta, 1.0)); /* the smaller root */
    double c = 1.0 / sqrt(t * t + 1.0), s = t * c;
    for (int k = 0; k < n; k++) { /* columns p, q of A and V */
        double akp = a[k * n + p], akq = a[k * n + q], vkp = v[k * n + p], vkq = v[k * n + q];
        a[k * n + p] = c * akp - s * akq, a[k * n + q] = s * akp + c * akq;
        v[k * n + p] = c * vkp - s * vkq, v[k * n + q] = s * vkp + c * vkq;
    }
    for (int k = 0; k < n; k++) { /* rows p, q of A */
        double apk = a[p * n + k], aqk = a[q * n + k];
        a[p * n + k] = c * apk - s * aqk, a[q * n + k] = s * apk + c * aqk;
    }
    a[p * n + q] = a[q * n + p] = 0.0;
}

static double off_diagonal(int n, const double *a) {
    double off = 0.0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++) off += i != j ? a[i * n + j] * a[i * n + j] : 0.0;
    return off;
}

/* Eigenpairs in ascending order (selection sort: n is 12). */
static void sort_ascending(int n, double *lambda, double *v) {
    for (int i = 0; i < n; i++) {
        int min = i;
        for (int j = i + 1; j < n; j++) min = lambda[j] < lambda[min] ? j : min;
        double l = lambda[i];
        lambda[i] = lambda[min], lambda[min] = l;
        for (int k = 0; k < n; k++) {
            double x = v[k * n + i];
            v[k * n + i] = v[k * n + min], v[k * n + min] = x;
        }
    }
}

void whiten_eigh(int n, double *a, double *lambda, double *v) {
    double norm = 0.0;
    for (int i = 0; i < n * n; i++) norm += a[i] * a[i];
    for (int i = 0; i < n * n; i++) v[i] = i % (n + 1) == 0 ? 1.0 : 0.0;
    /* Cyclic sweeps converge quadratically; 50 is far beyond what a 12x12 needs. */
    for (int sweep = 0; sweep < 50 && off_diagonal(n, a) > 1e-32 * norm; sweep++)
        for (int p = 0; p < n; p++)
            for (int q = p + 1; q < n; q++)
                if (a[p * n + q] != 0.0) rotate(n, a, v, p, q);
    for (int i = 0; i < n; i++) lambda[i] = a[i * n + i];
    sort_ascending(n, lambda, v);
}

void whiten_covariance(const struct kernels *k, const struct cifar_set *set, int n,
                       double cov[WHITEN_DIM * WHITEN_DIM]) {
    enum { D2 = WHITEN_DIM * WHITEN_DIM };
    float scale[CIFAR_CHANNELS], shift[CIFAR_CHANNELS];
    augment_scale_shift(scale, shift);
    int chunks = (n + PATCH_CHUNK - 1) / PATCH_CHUNK;
    size_t bytes = (size_t)n * CIFAR_IMAGE_BYTES;
    uint8_t *img = XALLOC(bytes);
    for (int i = 0; i < n; i++)
        memcpy(img + (size_t)i * CIFAR_IMAGE_BYTES, cifar_pixels(set, i), CIFAR_IMAGE_BYTES);
    double *part = XALLOC((size_t)chunks * D2 * sizeof(double));
    unsigned char *dimg = k->alloc(bytes);
    double *dpart = k->alloc((size_t)chunks * D2 * sizeof(double));
    k->upload(dimg, img, bytes);
    k->patch_covariance(dimg, n, scale, shift, dpart);
    k->download(part, dpart, (size_t)chunks * D2 * sizeof(double));
    k->free(dimg), k->free(dpart);
    memset(cov, 0, D2 * sizeof(double));
    for (int c = 0; c < chunks; c++) /* in chunk order: no thread count changes the sum */
        for (int i = 0; i < D2; i++) cov[i] += part[(size_t)c * D2 + i];
    free(part), free(img);
    double count = (double)n * (CIFAR_SIDE - 1) * (CIFAR_SIDE - 1);
    for (int i = 0; i < WHITEN_DIM; i++)
        for (int j = i; j < WHITEN_DIM; j++)
            cov[i * WHITEN_DIM + j] = cov[j * WHITEN_DIM + i] = cov[i * WHITEN_DIM + j] / count;
}

void whiten_filters(const double cov[WHITEN_DIM * WHITEN_DIM], double lambda[WHITEN_DIM],
                    double w[WHITEN_FILTERS * WHITEN_DIM]) {
    double a[WHITEN_DIM * WHITEN_DIM], up[WHITEN_DIM], v[WHITEN_DIM * WHITEN_DIM];
    memcpy(a, cov, sizeof a);
    whiten_eigh(WHITEN_DIM, a, up, v);
    for (int i = 0; i < WHITEN_DIM; i++) { /* airbench flips eigh's ascending order */
        int col = WHITEN_DIM - 1 - i;
        lambda[i] = up[col];
        double f = 1.0 / sqrt(up[col] + WHITEN_EPS);
        for (int k = 0; k < WHITEN_DIM; k++) {
            w[i * WHITEN_DIM + k] = v[k * WHITEN_DIM + col] * f;
            w[(WHITEN_DIM + i) * WHITEN_DIM + k] = -v[k * WHITEN_DIM + col] * f;
        }
    }
}

int whiten_filter(const struct kernels *k, const struct cifar_set *train, int n, float *w, struct err *e) {
    if (n < 1 || n > train->n)
        return err_set(e, "whitening needs %d training images, the set has %d", n, train->n);
    double cov[WHITEN_DIM * WHITEN_DIM], lambda[WHITEN_DIM], wd[WHITEN_FILTERS * WHITEN_DIM];
    whiten_covariance(k, train, n, cov);
    whiten_filters(cov, lambda, wd);
    for (int i = 0; i < WHITEN_FILTERS * WHITEN_DIM; i++) w[i] = (float)wd[i];
    return 0;
}
