#include "cpu.h"

#include <math.h>

void cpu_softmax_xent(const float *logits, const int *labels, float *dlogits, float *out, int N,
                      int classes) {
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
        loss += lse - z[labels[n]];
        correct += arg == labels[n];
        if (dlogits)
            for (int j = 0; j < classes; j++)
                dlogits[(size_t)n * classes + j] =
                    (float)((exp((double)z[j] - lse) - (j == labels[n])) / N);
    }
    out[0] = (float)(loss / N);
    out[1] = (float)correct;
}
