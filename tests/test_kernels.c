/* Every CPU kernel, forward and backward, against a double-precision reference written straight
 * from the definition; the GEMM on every ISA path this CPU has; thread counts 1, 2 and 3 (more
 * threads than images included). Tolerance: relative L2 error <= 1e-5 (float vs double). */
#include "../common/err.h"
#include "../kernels/cpu/gemm.h"
#include "../kernels/kernels.h"
#include "check.h"

#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOL 1e-5

static const struct kernels *K_;

static float *fnew(size_t n) { return XALLOC(n * sizeof(float)); }
static double *dnew(size_t n) { return XALLOC(n * sizeof(double)); }

static void test_gemm_path(const char *isa) {
    if (gemm_select(isa) != 0) {
        printf("test_kernels: gemm %s: skipped (this CPU lacks it)\n", isa);
        return;
    }
    /* Sizes straddle every blocking edge: MC=96, KC=256, NC=512 and the MR/NR tiles. */
    static const int sizes[][3] = {{1, 1, 1}, {7, 13, 5}, {97, 33, 257}, {130, 515, 300}, {5, 600, 70}};
    float *ws = fnew(gemm_workspace_floats() * 4);
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int M = sizes[s][0], N = sizes[s][1], Kd = sizes[s][2];
                float *A = fnew((size_t)M * Kd), *B = fnew((size_t)Kd * N), *C = fnew((size_t)M * N);
                double *R = dnew((size_t)M * N);
                check_fill(A, (size_t)M * Kd, -1, 1, 1);
                check_fill(B, (size_t)Kd * N, -1, 1, 2);
                check_fill(C, (size_t)M * N, -1, 1, 3);
                ptrdiff_t rsa = ta ? 1 : Kd, csa = ta ? M : 1, rsb = tb ? 1 : N, csb = tb ? Kd : 1;
                float alpha = 0.75f, beta = s % 2 ? 0.0f : 0.5f;
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        double acc = 0;
                        for (int k = 0; k < Kd; k++) acc += (double)A[i * rsa + k * csa] * B[k * rsb + j * csb];
                        R[i * N + j] = alpha * acc + (beta == 0.0f ? 0.0 : beta * (double)C[i * N + j]);
                    }
                if (beta == 0.0f) /* C must not be read when beta == 0 */
                    for (size_t i = 0; i < (size_t)M * N; i++) C[i] = NAN;
                if (s == 3)
                    gemm_parallel(M, N, Kd, alpha, A, rsa, csa, B, rsb, csb, beta, C, N, ws);
                else
                    gemm(M, N, Kd, alpha, A, rsa, csa, B, rsb, csb, beta, C, N, ws);
                double e = check_rel_l2(C, R, (size_t)M * N);
                EXPECT(e < TOL, "gemm %s %dx%dx%d ta=%d tb=%d: rel err %.3g", isa, M, N, Kd, ta, tb, e);
                free(A), free(B), free(C), free(R);
            }
    free(ws);
}

static void test_conv(int N, int C, int Kc, int H, int W) {
    size_t xs = (size_t)N * C * H * W, ys = (size_t)N * Kc * H * W, wsz = (size_t)Kc * C * 9;
    float *x = fnew(xs), *w = fnew(wsz), *b = fnew(Kc), *y = fnew(ys), *dy = fnew(ys);
    float *dx = fnew(xs), *dw = fnew(wsz), *db = fnew(Kc);
    void *ws = K_->alloc(K_->conv3x3_workspace(N, C, Kc, H, W));
    check_fill(x, xs, -1, 1, 4), check_fill(w, wsz, -0.5f, 0.5f, 5), check_fill(b, Kc, -1, 1, 6);
    check_fill(dy, ys, -1, 1, 7);
    double *ry = dnew(ys), *rdx = dnew(xs), *rdw = dnew(wsz), *rdb = dnew(Kc);
    for (int n = 0; n < N; n++)
        for (int k = 0; k < Kc; k++)
            for (int i = 0; i < H; i++)
                for (int j = 0; j < W; j++) {
                    size_t yi = (((size_t)n * Kc + k) * H + i) * W + j;
                    double acc = b[k];
                    for (int c = 0; c < C; c++)
                        for (int u = 0; u < 3; u++)
                            for (int v = 0; v < 3; v++) {
                                int si = i + u - 1, sj = j + v - 1;
                                if (si < 0 || si >= H || sj < 0 || sj >= W) continue;
                                size_t xi = (((size_t)n * C + c) * H + si) * W + sj;
                                size_t wi = ((size_t)k * C + c) * 9 + u * 3 + v;
                                acc += (double)x[xi] * w[wi];
                                rdx[xi] += (double)dy[yi] * w[wi];
                                rdw[wi] += (double)dy[yi] * x[xi];
                            }
                    ry[yi] = acc;
                    rdb[k] += dy[yi];
                }
    K_->conv3x3_forward(x, w, b, y, N, C, Kc, H, W, 0, ws);
    double e = check_rel_l2(y, ry, ys);
    EXPECT(e < TOL, "conv3x3 forward N%d C%d K%d %dx%d threads %d: %.3g", N, C, Kc, H, W, omp_get_max_threads(), e);
    memset(dx, 0xff, xs * sizeof(float)); /* NaN garbage: outputs must be overwritten */
    memset(dw, 0xff, wsz * sizeof(float));
    K_->conv3x3_backward(x, w, dy, dx, dw, db, N, C, Kc, H, W, NULL, ws);
    e = check_rel_l2(dx, rdx, xs);
    EXPECT(e < TOL, "conv3x3 dx N%d C%d K%d %dx%d threads %d: %.3g", N, C, Kc, H, W, omp_get_max_threads(), e);
    e = check_rel_l2(dw, rdw, wsz);
    EXPECT(e < TOL, "conv3x3 dw N%d C%d K%d %dx%d threads %d: %.3g", N, C, Kc, H, W, omp_get_max_threads(), e);
    e = check_rel_l2(db, rdb, Kc);
    EXPECT(e < TOL, "conv3x3 db: %.3g", e);
    /* Fused ReLU: forward output clamped; input gradient masked by a ReLU output (x itself). */
    for (size_t i = 0; i < ys; i++) ry[i] = ry[i] > 0 ? ry[i] : 0.0;
    for (size_t i = 0; i < xs; i++) rdx[i] = x[i] > 0 ? rdx[i] : 0.0;
    K_->conv3x3_forward(x, w, b, y, N, C, Kc, H, W, 1, ws);
    e = check_rel_l2(y, ry, ys);
    EXPECT(e < TOL, "conv3x3 forward+relu N%d C%d K%d %dx%d: %.3g", N, C, Kc, H, W, e);
    K_->conv3x3_backward(x, w, dy, dx, dw, db, N, C, Kc, H, W, x, ws);
    e = check_rel_l2(dx, rdx, xs);
    EXPECT(e < TOL, "conv3x3 dx masked N%d C%d K%d %dx%d: %.3g", N, C, Kc, H, W, e);
    /* dx == NULL (the first layer) still yields the same dw */
    float *dw2 = fnew(wsz);
    K_->conv3x3_backward(x, w, dy, NULL, dw2, db, N, C, Kc, H, W, NULL, ws);
    EXPECT(memcmp(dw, dw2, wsz * sizeof(float)) == 0, "conv3x3 dw without dx differs");
    K_->free(ws);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db), free(dw2);
    free(ry), free(rdx), free(rdw), free(rdb);
}

static void test_relu_pool(void) {
    int N = 3, C = 4, H = 6, W = 8;
    size_t n = (size_t)N * C * H * W, no = n / 4;
    float *x = fnew(n), *y = fnew(n), *dy = fnew(n), *dx = fnew(n);
    check_fill(x, n, -1, 1, 8), check_fill(dy, n, -1, 1, 9);
    K_->relu_forward(x, y, n);
    K_->relu_backward(y, dy, dx, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += y[i] != (x[i] > 0 ? x[i] : 0.0f) || dx[i] != (x[i] > 0 ? dy[i] : 0.0f);
    EXPECT(bad == 0, "relu: %d wrong elements", bad);
    /* ties: quantise so windows often hold equal maxima */
    for (size_t i = 0; i < n; i++) x[i] = roundf(x[i] * 2.0f);
    float *p = fnew(no), *dp = fnew(no);
    check_fill(dp, no, -1, 1, 10);
    K_->maxpool2_forward(x, p, N, C, H, W);
    K_->maxpool2_backward(x, dp, dx, N, C, H, W, 0);
    float *dxr = fnew(n); /* the same through a ReLU: zero where the window's max is <= 0 */
    K_->maxpool2_backward(x, dp, dxr, N, C, H, W, 1);
    int badf = 0, badb = 0, ties = 0, badr = 0, nonpos = 0;
    for (int q = 0; q < N * C; q++)
        for (int i = 0; i < H / 2; i++)
            for (int j = 0; j < W / 2; j++) {
                const float *xq = x + (size_t)q * H * W;
                int idx[4] = {2 * i * W + 2 * j, 2 * i * W + 2 * j + 1, (2 * i + 1) * W + 2 * j, (2 * i + 1) * W + 2 * j + 1};
                int best = 0, nmax = 1;
                for (int t = 1; t < 4; t++) {
                    if (xq[idx[t]] > xq[idx[best]]) best = t, nmax = 1;
                    else if (xq[idx[t]] == xq[idx[best]]) nmax++;
                }
                ties += nmax > 1;
                float g = dp[(size_t)q * (H / 2) * (W / 2) + i * (W / 2) + j];
                badf += p[(size_t)q * (H / 2) * (W / 2) + i * (W / 2) + j] != xq[idx[best]];
                for (int t = 0; t < 4; t++) badb += dx[(size_t)q * H * W + idx[t]] != (t == best ? g : 0.0f);
                float gr = xq[idx[best]] > 0 ? g : 0.0f;
                nonpos += !(xq[idx[best]] > 0);
                for (int t = 0; t < 4; t++) badr += dxr[(size_t)q * H * W + idx[t]] != (t == best ? gr : 0.0f);
            }
    EXPECT(ties > 0, "maxpool tie cases exercised: %d", ties);
    EXPECT(nonpos > 0, "maxpool windows with max <= 0 exercised: %d", nonpos);
    EXPECT(badf == 0 && badb == 0, "maxpool: %d forward and %d backward mismatches", badf, badb);
    EXPECT(badr == 0, "maxpool backward through ReLU: %d mismatches", badr);
    free(x), free(y), free(dy), free(dx), free(p), free(dp), free(dxr);
}

static void test_batchnorm(void) {
    int N = 5, C = 3, HW = 12;
    size_t n = (size_t)N * C * HW;
    float *x = fnew(n), *y = fnew(n), *dy = fnew(n), *dx = fnew(n), g[3], be[3], mean[3], inv[3];
    float rm[3] = {0.1f, -0.2f, 0.3f}, rv[3] = {1.0f, 2.0f, 0.5f}, dg[3], dbe[3];
    check_fill(x, n, -2, 3, 11), check_fill(dy, n, -1, 1, 12), check_fill(g, 3, 0.5f, 1.5f, 13);
    check_fill(be, 3, -1, 1, 14);
    float eps = 1e-5f, mom = 0.1f;
    K_->batchnorm_forward_train(x, g, be, y, mean, inv, rm, rv, mom, eps, N, C, HW);
    double *ry = dnew(n), *rdx = dnew(n), rdg[3] = {0}, rdb[3] = {0};
    double cnt = (double)N * HW;
    for (int c = 0; c < C; c++) {
        double s = 0, sq = 0;
        for (int q = 0; q < N; q++)
            for (int i = 0; i < HW; i++) s += x[((size_t)q * C + c) * HW + i];
        double mu = s / cnt;
        for (int q = 0; q < N; q++)
            for (int i = 0; i < HW; i++) sq += pow(x[((size_t)q * C + c) * HW + i] - mu, 2);
        double var = sq / cnt, is = 1 / sqrt(var + eps);
        double erm = (1 - mom) * (c == 0 ? 0.1 : c == 1 ? -0.2 : 0.3) + mom * mu;
        double erv = (1 - mom) * (c == 0 ? 1.0 : c == 1 ? 2.0 : 0.5) + mom * sq / (cnt - 1);
        EXPECT(fabs(rm[c] - erm) < 1e-6 && fabs(rv[c] - erv) < 1e-6 * erv, "bn running stats c%d: %g %g vs %g %g", c, rm[c], rv[c], erm, erv);
        EXPECT(fabs(mean[c] - mu) < 1e-6 && fabs(inv[c] - is) < 1e-6 * is, "bn saved stats c%d", c);
        double sdy = 0, sdyx = 0;
        for (int q = 0; q < N; q++)
            for (int i = 0; i < HW; i++) {
                size_t k = ((size_t)q * C + c) * HW + i;
                double xh = (x[k] - mu) * is;
                ry[k] = xh * g[c] + be[c];
                sdy += dy[k], sdyx += dy[k] * xh;
            }
        rdg[c] = sdyx, rdb[c] = sdy;
        for (int q = 0; q < N; q++)
            for (int i = 0; i < HW; i++) {
                size_t k = ((size_t)q * C + c) * HW + i;
                double xh = (x[k] - mu) * is;
                rdx[k] = g[c] * is * (dy[k] - sdy / cnt - xh * sdyx / cnt);
            }
    }
    EXPECT(check_rel_l2(y, ry, n) < TOL, "bn forward train: %.3g", check_rel_l2(y, ry, n));
    K_->batchnorm_backward(x, dy, g, mean, inv, dx, dg, dbe, N, C, HW);
    EXPECT(check_rel_l2(dx, rdx, n) < TOL, "bn dx: %.3g", check_rel_l2(dx, rdx, n));
    EXPECT(check_rel_l2(dg, rdg, 3) < TOL && check_rel_l2(dbe, rdb, 3) < TOL, "bn dgamma/dbeta");
    /* eval mode uses the running statistics */
    K_->batchnorm_forward_eval(x, g, be, rm, rv, eps, y, N, C, HW);
    for (size_t k = 0; k < n; k++) {
        int c = (int)(k / HW % C);
        ry[k] = (x[k] - (double)rm[c]) / sqrt((double)rv[c] + eps) * g[c] + be[c];
    }
    EXPECT(check_rel_l2(y, ry, n) < TOL, "bn forward eval: %.3g", check_rel_l2(y, ry, n));
    free(x), free(y), free(dy), free(dx), free(ry), free(rdx);
}

static void test_linear(int N, int I, int O) {
    float *x = fnew((size_t)N * I), *w = fnew((size_t)O * I), *b = fnew(O), *y = fnew((size_t)N * O);
    float *dy = fnew((size_t)N * O), *dx = fnew((size_t)N * I), *dw = fnew((size_t)O * I), *db = fnew(O);
    double *ry = dnew((size_t)N * O), *rdx = dnew((size_t)N * I), *rdw = dnew((size_t)O * I), *rdb = dnew(O);
    void *ws = K_->alloc(K_->linear_workspace(N, I, O));
    check_fill(x, (size_t)N * I, -1, 1, 15), check_fill(w, (size_t)O * I, -0.1f, 0.1f, 16);
    check_fill(b, O, -1, 1, 17), check_fill(dy, (size_t)N * O, -1, 1, 18);
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double acc = b[o];
            for (int i = 0; i < I; i++) {
                acc += (double)x[n * I + i] * w[o * I + i];
                rdx[n * I + i] += (double)dy[n * O + o] * w[o * I + i];
                rdw[o * I + i] += (double)dy[n * O + o] * x[n * I + i];
            }
            ry[n * O + o] = acc;
            rdb[o] += dy[n * O + o];
        }
    K_->linear_forward(x, w, b, y, N, I, O, ws);
    K_->linear_backward(x, w, dy, dx, dw, db, N, I, O, ws);
    EXPECT(check_rel_l2(y, ry, (size_t)N * O) < TOL, "linear forward %dx%dx%d", N, I, O);
    EXPECT(check_rel_l2(dx, rdx, (size_t)N * I) < TOL, "linear dx %dx%dx%d", N, I, O);
    EXPECT(check_rel_l2(dw, rdw, (size_t)O * I) < TOL, "linear dw %dx%dx%d: %.3g", N, I, O, check_rel_l2(dw, rdw, (size_t)O * I));
    EXPECT(check_rel_l2(db, rdb, O) < TOL, "linear db %dx%dx%d", N, I, O);
    K_->free(ws);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db), free(ry), free(rdx), free(rdw), free(rdb);
}

static void test_softmax_sgd(void) {
    int N = 7, Cl = 10, labels[7] = {0, 3, 9, 9, 1, 5, 2};
    float z[70], dz[70], out[2];
    check_fill(z, 70, -5, 5, 19);
    z[3 * 10 + 9] = 100.0f; /* a confident, correct sample: no overflow */
    K_->softmax_xent(z, labels, dz, out, N, Cl);
    double loss = 0, rdz[70];
    int correct = 0;
    for (int n = 0; n < N; n++) {
        double m = -INFINITY, s = 0;
        int arg = 0;
        for (int j = 0; j < Cl; j++) {
            if (z[n * Cl + j] > m) m = z[n * Cl + j], arg = j;
        }
        for (int j = 0; j < Cl; j++) s += exp(z[n * Cl + j] - m);
        loss += m + log(s) - z[n * Cl + labels[n]];
        correct += arg == labels[n];
        for (int j = 0; j < Cl; j++) rdz[n * Cl + j] = (exp(z[n * Cl + j] - m) / s - (j == labels[n])) / N;
    }
    EXPECT(fabs(out[0] - loss / N) < 1e-6 * loss / N, "xent loss %g vs %g", out[0], loss / N);
    EXPECT(out[1] == (float)correct && correct >= 1, "xent correct %g vs %d", out[1], correct);
    EXPECT(check_rel_l2(dz, rdz, 70) < TOL, "xent dlogits");
    /* SGD: three steps against the torch.optim.SGD formulas in double */
    float p[5] = {1, -2, 3, 0.5f, -0.25f}, g[5] = {0.1f, 0.2f, -0.3f, 0, 1}, m[5] = {0};
    double rp[5], rm[5] = {0};
    for (int i = 0; i < 5; i++) rp[i] = p[i];
    for (int step = 0; step < 3; step++) {
        K_->sgd_update(p, g, m, 5, 0.1f, 0.9f, 5e-4f, 0.5f);
        for (int i = 0; i < 5; i++) {
            double d = 0.5 * g[i] + 5e-4 * rp[i];
            rm[i] = step == 0 ? d : 0.9 * rm[i] + d; /* PyTorch's first step: buf = d_p */
            rp[i] -= 0.1 * rm[i];
        }
    }
    EXPECT(check_rel_l2(p, rp, 5) < 1e-6, "sgd params: %.3g", check_rel_l2(p, rp, 5));
    EXPECT(check_rel_l2(m, rm, 5) < 1e-6, "sgd momentum");
}

int main(void) {
    K_ = kernels_cpu();
    printf("test_kernels: cpu gemm default path: %s\n", gemm_isa());
    const char *best = gemm_isa();
    test_gemm_path("generic");
    test_gemm_path("avx2");
    test_gemm_path("avx512");
    gemm_select(best);
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        test_conv(2, 3, 5, 6, 10);  /* fewer images than threads when t = 3 */
        test_conv(5, 16, 32, 8, 8);
        test_linear(9, 70, 33);
        test_relu_pool();
        test_batchnorm();
    }
    test_conv(4, 40, 20, 5, 3); /* C*9 = 360 > KC: the K dimension is blocked */
    /* Winograd shapes (even sizes, 16+ channels) on every vector path: chunks of several
     * images (4x4 tiles), a partial last chunk (N = 7), forward-only and dx-only cases. */
    for (int p = 0; p < 3; p++) {
        static const char *isas[] = {"generic", "avx2", "avx512"};
        if (gemm_select(isas[p]) != 0) continue;
        printf("test_kernels: conv3x3 on the %s path\n", isas[p]);
        omp_set_num_threads(2);
        test_conv(7, 16, 24, 4, 6);
        test_conv(3, 24, 8, 8, 8);  /* Winograd for dx only */
        test_conv(3, 8, 24, 8, 8);  /* Winograd for the forward only */
        omp_set_num_threads(1);
        test_conv(2, 32, 17, 16, 16);
    }
    gemm_select(best);
    test_linear(130, 300, 520);
    test_softmax_sgd();
    return check_summary("test_kernels");
}
