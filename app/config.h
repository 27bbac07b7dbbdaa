/* The training configuration: defaults, the learning-rate schedule, and the record of the
 * settings that define a run (stored in checkpoints; a resume must match them). */
#ifndef APP_CONFIG_H
#define APP_CONFIG_H

#include "device.h"
#include "json.h"

#include <stdint.h>

enum resume_mode { RESUME_AUTO, RESUME_NEVER, RESUME_REQUIRE };
enum lr_schedule { LR_COSINE, LR_CONSTANT };

struct train_config {
    /* Settings that define the run (must match to resume). */
    const char *model;     /* the network's name (app/net.h) */
    int epochs;            /* >= 1 */
    int batch_size;        /* per rank, >= 1 */
    double learning_rate;  /* peak, for the global batch (gradients are averaged) */
    enum lr_schedule schedule;
    double warmup_epochs;  /* linear warm-up from lr/10 (cosine schedule only) */
    double momentum, weight_decay;
    uint64_t seed;
    int augment;
    /* Settings that may change between a run and its resume. */
    int print_freq;
    int threads;           /* 0: the CPUs this process may use */
    int eval;              /* score test_batch.bin after every epoch when present */
    enum device_kind device;
    double bucket_mb;      /* gradient allreduce bucket size (MiB; 0: one allreduce per step) */
    enum resume_mode resume;
    const char *model_file, *checkpoint_file, *data;
};

void config_defaults(struct train_config *c);

/* Learning rate at `progress` epochs into the run (epoch + fraction of it done). */
double config_lr_at(const struct train_config *c, double progress);

const char *config_schedule_name(enum lr_schedule s);
int config_schedule_parse(const char *s, enum lr_schedule *out);

/* JSON object of the run-defining settings, e.g. {"model":"workshop-cnn","epochs":10,...}. */
void config_to_json(const struct train_config *c, struct strbuf *out);

/* Compares the run-defining settings with a saved JSON record. Returns 0 when they match, else
 * -1 with the first difference in e ("--epochs: the checkpoint has 10, this run has 20"). */
int config_compare(const struct train_config *c, const char *saved_json, struct err *e);

#endif
