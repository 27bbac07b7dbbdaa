/* The whitening filter of airbench94's first layer (legacy/airbench94.py's init_whitening_conv):
 * the eigenvectors of the uncentred covariance of all 2x2x3 input patches, each scaled by
 * 1/sqrt(eigenvalue + eps), in descending eigenvalue order, followed by their negations. */
#ifndef MODEL_WHITEN_H
#define MODEL_WHITEN_H

#include "../common/err.h"
#include "../data/cifar.h"
#include "../kernels/kernels.h"

#define WHITEN_DIM     PATCH_DIM /* a 2x2 patch of 3 channels as a vector, in the filter's [c][ky][kx] */
#define WHITEN_FILTERS 24        /* the filters and their negations: a [24][3][2][2] conv weight */
#define WHITEN_EPS     5e-4

/* The eigen-decomposition of the symmetric n x n matrix a (row-major; destroyed) by cyclic
 * Jacobi rotations in double: eigenvalues ascending in lambda[n], eigenvector i in column i of
 * v[n][n] (orthonormal), as torch.linalg.eigh returns them. */
void whiten_eigh(int n, double *a, double *lambda, double *v);

/* cov[12][12] = (1/count) sum of p p^T over every 2x2 patch p (stride 1: 31x31 per image) of
 * the first n images of set, normalised as the model's input (data/augment.h; no
 * augmentation), accumulated in double: the partial sums by k's patch_covariance (in its
 * memory: the images are uploaded), added on the host in chunk order. The same bits on every
 * backend. */
void whiten_covariance(const struct kernels *k, const struct cifar_set *set, int n,
                       double cov[WHITEN_DIM * WHITEN_DIM]);

/* The filters w[24][12] in double from a covariance; lambda[12]: its eigenvalues, descending
 * (filter i, i < 12, belongs to lambda[i]; filter 12 + i is its negation). */
void whiten_filters(const double cov[WHITEN_DIM * WHITEN_DIM], double lambda[WHITEN_DIM],
                    double w[WHITEN_FILTERS * WHITEN_DIM]);

/* The filter w[24][3][2][2] from the first n images of train (airbench: 5000), its statistics
 * on backend k. Returns 0, or -1 with one line in e when train has fewer than n images or
 * n < 1. */
int whiten_filter(const struct kernels *k, const struct cifar_set *train, int n, float *w, struct err *e);

#endif
