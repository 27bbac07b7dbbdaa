/* The training configuration: each network's recipe (its default settings), the
 * learning-rate schedule and optimizer settings per step, and the record of the settings that
 * define a run (stored in checkpoints; a resume must match them). */
#ifndef MODEL_CONFIG_H
#define MODEL_CONFIG_H

#include "../app/device.h"
#include "../data/augment.h"
#include "../io/json.h"
#include "../kernels/kernels.h"

#include <stdint.h>
#include <stdio.h>

enum resume_mode { RESUME_AUTO, RESUME_NEVER, RESUME_REQUIRE };
/* cosine: linear warm-up from lr/10 over warmup_epochs, then cosine decay to 0.
 * triangle (airbench94): a factor linear from 0.2 to 1 over the first 23% of the steps, then
 * linear to 0.07 at the last (np.interp over [0, int(0.23 total), total]), stepped per step as
 * LambdaLR does (the first step takes factor(0)). constant: lr throughout. */
enum lr_schedule { LR_COSINE, LR_CONSTANT, LR_TRIANGLE };
/* How --learning-rate and --weight-decay read: torch.optim.SGD's lr and weight_decay for the
 * global batch (workshop), or airbench's decoupled values per 1024 images (lr 11.5, decay
 * 0.0153), converted as its code does (config_sgd_at). */
enum lr_units { UNITS_TORCH, UNITS_AIRBENCH };
/* Whether --batch-size counts the images of one rank (the global batch grows with the ranks)
 * or of the whole step (each rank takes 1/ranks of it: the recipe keeps its global batch). */
enum batch_scope { BATCH_PER_RANK, BATCH_GLOBAL };

/* A network's recipe: the defaults of the settings that define its run. nets.c keeps one beside
 * each network (struct net_def's recipe); config_recipe copies it, cifar10-train --help prints
 * them side by side (config_print_recipes). Fields as in struct train_config. */
struct recipe {
    double epochs;
    int batch_size;
    enum batch_scope batch_scope;
    double learning_rate;
    enum lr_units units;
    enum lr_schedule schedule;
    double warmup_epochs;
    double momentum, weight_decay;
    int nesterov;
    double norm_lr_scale;
    double label_smoothing;
    enum xent_reduction loss;
    int lookahead, whiten_images, first_bias_epochs;
    enum augment_kind augment;
    int tta;
    int bf16; /* train_config's bf16_recipe */
};

struct train_config {
    /* Settings that define the run (must match to resume). */
    const char *model; /* the network's name (model/net.h); it chooses the recipe */
    double epochs;     /* > 0; a fraction cuts the last epoch (ceil(steps x epochs) steps) */
    int batch_size;    /* >= 1, as batch_scope says */
    enum batch_scope batch_scope;
    double learning_rate; /* peak, in lr_units */
    enum lr_units units;
    enum lr_schedule schedule;
    double warmup_epochs; /* linear warm-up from lr/10 (cosine schedule only) */
    double momentum, weight_decay;
    int nesterov;
    double norm_lr_scale; /* batch-norm tensors: lr x this, weight decay / this (1: one group) */
    double label_smoothing;
    enum xent_reduction loss; /* XENT_MEAN: gradients averaged; XENT_SUM: summed over the global batch */
    int lookahead;            /* lookahead every this many steps (0: none), see config_lookahead_weight */
    int whiten_images;        /* > 0: the first layer is the whitening filter of that many images */
    int first_bias_epochs;    /* > 0: the first layer's bias trains for this many epochs only */
    uint64_t seed;
    enum augment_kind augment;
    /* Settings that may change between a run and its resume. */
    int tta; /* test-time augmentation of the final score: 0, 1 or 2 (evaluate.h) */
    int print_freq;
    int threads; /* 0: the CPUs this process may use */
    int eval;    /* score test_batch.bin after every epoch when present */
    enum device_kind device;
    enum precision precision;   /* of the products (device.h); auto resolves with bf16_recipe */
    int bf16_recipe;            /* the recipe allows bf16 products under --precision auto */
    double bucket_mb;           /* gradient allreduce bucket size (MiB; 0: one allreduce per step) */
    double checkpoint_interval; /* seconds between mid-epoch checkpoints (0: epoch ends only) */
    double collective_timeout;  /* seconds a collective may wait (0: adaptive, dist.h) */
    enum resume_mode resume;
    const char *model_file, *checkpoint_file, *metrics_file, *data;
    const char *tensorboard_dir; /* NULL: no TensorBoard event files */
};

/* The program's defaults: airbench94 and its recipe. */
void config_defaults(struct train_config *c);
/* The recipe of network `model` over c's run-independent settings (files, threads, device...):
 * model, epochs, batch, optimizer, schedule, loss, augmentation, TTA. A name that is not a known
 * network, or a network without a recipe of its own (the tests' networks), takes the workshop
 * CNN's. */
void config_recipe(struct train_config *c, const char *model);

/* The known networks' recipes side by side, one row per setting (cifar10-train --help). */
void config_print_recipes(FILE *f);

/* The optimizer settings of global step `step` (0-based) of a run of total_steps steps with
 * steps_per_epoch steps per epoch and global_batch images per step, over `world` ranks. */
struct sgd_settings;
void config_sgd_at(const struct train_config *c, long step, long total_steps, int steps_per_epoch,
                   int global_batch, int world, struct sgd_settings *out);

/* Lookahead after `step` steps done: the lerp weight 1 - 0.95^5 (step / total)^3, computed in
 * double as airbench does, or -1 when no update is due (not a multiple of c->lookahead). The
 * run's end then applies weight 0 (the full lookahead: the weights become the average). */
double config_lookahead_weight(const struct train_config *c, long step, long total_steps);

const char *config_schedule_name(enum lr_schedule s);
int config_schedule_parse(const char *s, enum lr_schedule *out);

/* JSON object of the run-defining settings, e.g. {"model":"workshop-cnn","epochs":10,...}. */
void config_to_json(const struct train_config *c, struct strbuf *out);

/* Compares the run-defining settings with a saved JSON record. Returns 0 when they match, else
 * -1 with the first difference in e ("--epochs: the checkpoint has 10, this run has 20"). */
int config_compare(const struct train_config *c, const char *saved_json, struct err *e);

#endif
