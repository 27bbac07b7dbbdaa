/* One cifar10-train process's state (struct trainer) and its life outside the training loop
 * (train.c): its setup and release (trainer.c); keeping the ranks' model states in step: the
 * fresh start or resume decided by rank 0 and broadcast, the averaging of the ranks' running
 * statistics, and writing the model and checkpoint files (train_state.c). */
#ifndef APP_TRAINER_H
#define APP_TRAINER_H

#include "../common/cpus.h"
#include "../data/cifar.h"
#include "../dist/dist.h"
#include "../io/checkpoint.h"
#include "../io/metrics.h"
#include "../io/tensorboard.h"
#include "../model/batches.h"
#include "../model/config.h"
#include "../model/model.h"

/* Everything one training process holds. */
struct trainer {
    struct train_config c;
    struct dist d;
    struct cpus cpus;
    int threads;
    char *checkpoint_file, *metrics_file;
    struct metrics metrics; /* rank 0 */
    struct tensorboard tb;  /* rank 0, with --tensorboard-dir */
    double run_start;       /* dist_time() when training began in this process */
    double whiten_s;        /* rank 0: seconds computing the whitening filter (0: none, resumed) */
    double checkpoint_s;    /* rank 0: seconds writing checkpoints in this process's run */
    int checkpoints;        /* rank 0: how many it wrote */
    double steps_s;         /* seconds in the epochs' training steps (train_epoch) */
    double scoring_s;       /* seconds scoring the test set after each epoch */
    double final_s;         /* seconds of the final test-time augmented score */
    double logged_at;       /* dist_time() of the last printed loss (or the epoch's start) */
    double checkpoint_at;   /* dist_time() of the last checkpoint (or the run's start) */
    struct cifar_data data;
    int batch;               /* images per rank per step */
    int steps, global_batch; /* per epoch; images per step over all ranks */
    long total_steps;        /* ceil(steps x epochs) */
    int epochs;              /* epochs begun: ceil(c.epochs) */
    struct model m;
    struct batches batches;   /* the training batches: filled here, read by m */
    struct model_state h;     /* host copies of the state, for broadcasts and files */
    float *buffer_sums;       /* [S] host scratch for averaging running statistics */
    struct run_info info;     /* run id, epochs done, global step, settings */
    char device[768];         /* what --device chose for this rank */
    struct dist_grads *grads; /* bucketed gradient allreduce */
    int *perm;                /* [train.n] this epoch's order */
    int warm_up;              /* untimed steps before the run (trainer_warm_up) */
};

/* Everything before the first step: the stop signals (SIGTERM, SIGINT, SIGUSR1 then ask for a
 * stop at a step boundary instead of ending the process), MPI, the flags, threads, device,
 * data, the run's plan (per-rank batch, steps), the model, its batches and the gradient
 * reduction; rank 0 logs each. Exits on errors (all ranks agree), and with 0 after --help or
 * --version. trainer_free releases it all. */
void trainer_init(struct trainer *t, int argc, char **argv);
void trainer_free(struct trainer *t);
/* The update of the step now due (t->info.global_step) in the recipe: its optimizer step, then
 * lookahead where the recipe has it due after that step (and the final full one after the
 * last step). */
struct model_update trainer_update(const struct trainer *t);
/* Before the run's clock starts: t->warm_up training steps on a batch of zero images (one rank:
 * with the update, as the run's steps; several: with the gradient hand-overs rehearsed,
 * dist_grads_rehearse), then one batch of the test slice scored at the run's TTA level (the
 * device's first launches of every kernel, which load their modules, and the recording of the
 * step graphs of steps without lookahead, as airbench times its runs after a warm-up run).
 * Nothing of it stays: no gradient leaves the rank, the weights, momentum, batch-norm running
 * statistics and step counter are restored, the loader's order and augmentation untouched, and
 * the batch queue holds nothing (its two slots are interchangeable). CIFAR10_WARM_UP=N sets the count
 * (default 4 on a GPU, 0 on the CPU, where there is nothing to warm; the tests run it there to see the run
 * unchanged). */
void trainer_warm_up(struct trainer *t);
/* This rank's share [begin, end) of the test set, scored by each rank in evaluations. */
void trainer_test_slice(const struct trainer *t, int *begin, int *end);

/* The stop signal this process has received, 0 while none has. */
int trainer_stop_signal(void);

/* Fresh start or resume, decided by rank 0 (--resume; the checkpoint's settings must match
 * c's; a fresh start computes the whitening filter), then every rank holds rank 0's state, and
 * a mid-epoch checkpoint's per-rank running statistics are scattered or averaged. Rank 0 logs
 * the start ("starting run ..." or "resuming run ..."). A failure on rank 0 ends every rank
 * (dist_agree) with its one-line reason. */
void train_state_start(struct trainer *t);

/* Running statistics differ per rank (each saw its own batches), and so do their lookahead
 * averages: average both over the `world` ranks, so every rank, evaluation and file sees the
 * same values; the other buffers (frozen tensors) are the same everywhere and stay. sum: host
 * scratch of m->nbuffers floats. */
void train_state_average_running(struct model *m, struct model_state *h, float *sum, int world);

/* Writes m's state, with info, to the model or checkpoint file `path` (atomically; h: host
 * buffers); a failure ends the job (dist_fail) with the reason. */
void train_state_write(const char *path, const struct model *m, struct model_state *h,
                       const struct run_info *info);

#endif
