/* A run's metrics as JSON Lines (one JSON object per line), written by rank 0 of cifar10-train
 * as it trains, for plots, dashboards and other pods reading the file over EFS while it grows:
 *
 *   {"kind":"step","run":ID,"epoch":E,"step":S,"global_step":G,"loss":L,"lr":LR,
 *    "images_per_s":R,"elapsed_s":T}
 *   {"kind":"epoch","run":ID,"epoch":E,"global_step":G,"train_loss":L,"train_accuracy":A,
 *    "test_accuracy":X or null,"images_per_s":R,"elapsed_s":T,"eta_s":T2}
 *   {"kind":"final","run":ID,"global_step":G,"test_accuracy":X,"tta":LEVEL,"elapsed_s":T}
 *
 * E is the 1-based epoch and S the 1-based step within it, as in the log; G counts the optimizer
 * steps done (after this record's step); L is the mean loss per image of the logged steps, LR
 * the base learning rate after the schedule (torch.optim.SGD's, of the non-batch-norm group);
 * accuracies are percentages; T is the run's wall time, continued across resumes. Each record
 * is flushed when written; epoch and final records are also fsynced. */
#ifndef IO_METRICS_H
#define IO_METRICS_H

#include "../common/err.h"

#include <stdio.h>

struct metrics {
    FILE *f; /* NULL: closed, or stopped after a write error */
    char *path;
    char run[64];    /* the run id every record carries */
    double elapsed0; /* elapsed_s of the last record kept from before a resume, else 0 */
};

struct metrics_step {
    int epoch, step;
    long global_step;
    double loss, lr, images_per_s, elapsed_s;
};

struct metrics_epoch {
    int epoch;
    long global_step;
    double train_loss, train_accuracy, test_accuracy; /* test_accuracy < 0: not measured */
    double images_per_s, elapsed_s, eta_s;
};

/* Opens `path` for run `run` that continues after `global_step` optimizer steps and `epochs`
 * completed epochs (0 and 0 for a fresh start). The records up to that point are kept: step
 * records with global_step <= the given one and epoch records with epoch <= `epochs` of the
 * same run; everything else (records past the checkpoint, another run's, a torn last line) is
 * dropped by rewriting the file atomically (temporary file, fsync, rename). A fresh start
 * therefore begins an empty file. Returns 0, or -1 with "PATH: what is wrong" in e. */
int metrics_open(struct metrics *m, const char *path, const char *run, long global_step, int epochs,
                 struct err *e);

/* Append one record. On a write error: -1 with e set, and the file is closed (later calls do
 * nothing), so a full disk costs the metrics, not the training. */
int metrics_step(struct metrics *m, const struct metrics_step *r, struct err *e);
int metrics_epoch(struct metrics *m, const struct metrics_epoch *r, struct err *e);
int metrics_final(struct metrics *m, long global_step, double test_accuracy, int tta, double elapsed_s,
                  struct err *e);

void metrics_close(struct metrics *m);

#endif
