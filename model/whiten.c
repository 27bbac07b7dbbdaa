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

/* Adds p p^T (upper triangle) for every 2x2 patch of one image x[3][32][32]. */
static void add_patches(const float *x, double *cov) {
    for (int y = 0; y + 1 < CIFAR_SIDE; y++)
        for (int xx = 0; xx + 1 < CIFAR_SIDE; xx++) {
            double p[WHITEN_DIM];
            for (int c = 0; c < CIFAR_CHANNELS; c++)
                for (int k = 0; k < 4; k++)
                    p[c * 4 + k] = x[(c * CIFAR_SIDE + y + k / 2) * CIFAR_SIDE + xx + k % 2];
            for (int i = 0; i < WHITEN_DIM; i++)
                for (int j = i; j < WHITEN_DIM; j++) cov[i * WHITEN_DIM + j] += p[i] * p[j];
        }
}

/* Images per partial sum: the chunks' sums are taken in parallel (on one thread, airbench's
 * 5000 images took a visible part of a GPU run's time to accuracy) and added in chunk order, so
 * the covariance does not depend on the thread count. */
#define WHITEN_CHUNK 40

/* part += the patches' products of images [first, end) of set (upper triangle). */
static void add_images(const struct cifar_set *set, int first, int end, const float *scale,
                       const float *shift, double *part) {
    float x[CIFAR_IMAGE_BYTES];
    for (int i = first; i < end; i++) {
        const uint8_t *px = cifar_pixels(set, i);
        for (int j = 0; j < CIFAR_IMAGE_BYTES; j++) /* as input_prepare computes the input */
            x[j] = (float)px[j] * scale[j / (CIFAR_SIDE * CIFAR_SIDE)] + shift[j / (CIFAR_SIDE * CIFAR_SIDE)];
        add_patches(x, part);
    }
}

void whiten_covariance(const struct cifar_set *set, int n, double cov[WHITEN_DIM * WHITEN_DIM]) {
    enum { D2 = WHITEN_DIM * WHITEN_DIM };
    float scale[CIFAR_CHANNELS], shift[CIFAR_CHANNELS];
    augment_scale_shift(scale, shift);
    int chunks = (n + WHITEN_CHUNK - 1) / WHITEN_CHUNK;
    double *part = XALLOC((size_t)chunks * D2 * sizeof(double));
#pragma omp parallel for schedule(dynamic)
    for (int k = 0; k < chunks; k++) {
        int first = k * WHITEN_CHUNK, end = first + WHITEN_CHUNK < n ? first + WHITEN_CHUNK : n;
        memset(part + (size_t)k * D2, 0, D2 * sizeof(double));
        add_images(set, first, end, scale, shift, part + (size_t)k * D2);
    }
    memset(cov, 0, D2 * sizeof(double));
    for (int k = 0; k < chunks; k++)
        for (int i = 0; i < D2; i++) cov[i] += part[(size_t)k * D2 + i];
    free(part);
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

int whiten_filter(const struct cifar_set *train, int n, float *w, struct err *e) {
    if (n < 1 || n > train->n)
        return err_set(e, "whitening needs %d training images, the set has %d", n, train->n);
    double cov[WHITEN_DIM * WHITEN_DIM], lambda[WHITEN_DIM], wd[WHITEN_FILTERS * WHITEN_DIM];
    whiten_covariance(train, n, cov);
    whiten_filters(cov, lambda, wd);
    for (int i = 0; i < WHITEN_FILTERS * WHITEN_DIM; i++) w[i] = (float)wd[i];
    return 0;
}
