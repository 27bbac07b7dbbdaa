#include "cpu.h"

#include <math.h>

/* fmaf, not w * z + s: one rounding whatever the compiler contracts (-ffp-contract=fast), as
 * the GPU's FFMA. */
void cpu_logits_add(const void *zv, float *sum, size_t n, float w, int add) {
    const float *z = zv;
    for (size_t i = 0; i < n; i++) sum[i] = add ? fmaf(w, z[i], sum[i]) : w * z[i];
}

void cpu_softmax_xent(const void *logitsv, const int *labels, void *dlogitsv, float *out, int N, int classes,
                      float smoothing, enum xent_reduction reduction) {
    const float *logits = logitsv;
    float *dlogits = dlogitsv;
    /* Target t[j] = on at the label, off elsewhere. With smoothing 0 these are 1.0 and 0.0 and
     * the divisor is N, so the arithmetic is that of the unsmoothed mean loss, bit for bit. */
    double off = (double)smoothing / classes, on = 1.0 - smoothing + off;
    double div = reduction == XENT_MEAN ? N : 1.0;
    double loss = 0.0;
    int correct = 0;
    /* N x 10 is tiny: one thread, in order, so the loss sum is reproducible. */
    for (int n = 0; n < N; n++) {
        const float *z = logits + (size_t)n * classes;
        int arg = 0;
        for (int j = 1; j < classes; j++)
            if (z[j] > z[arg]) arg = j;
        double m = z[arg], sum = 0.0;
        for (int j = 0; j < classes; j++) sum += exp((double)z[j] - m);
        double lse = m + log(sum);
        /* -sum_j t[j] (z[j] - lse) = (1 - s) (lse - z[label]) + s (lse - mean_j z[j]); the
         * smoothing term only when there is one, so smoothing 0 adds nothing to the sum. */
        double row = lse - z[labels[n]];
        if (smoothing != 0.0f) {
            double zsum = 0.0;
            for (int j = 0; j < classes; j++) zsum += z[j];
            row = (1.0 - smoothing) * row + smoothing * (lse - zsum / classes);
        }
        loss += row;
        correct += arg == labels[n];
        if (dlogits)
            for (int j = 0; j < classes; j++)
                dlogits[(size_t)n * classes + j] =
                    (float)((exp((double)z[j] - lse) - (j == labels[n] ? on : off)) / div);
    }
    out[0] = (float)(loss / div);
    out[1] = (float)correct;
}
