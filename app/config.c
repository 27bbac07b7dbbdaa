#include "config.h"

#include "model.h"
#include "net.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void config_defaults(struct train_config *c) {
    memset(c, 0, sizeof *c);
    c->print_freq = 5;
    c->eval = 1;
    c->device = DEVICE_AUTO;
    c->precision = PRECISION_AUTO;
    c->bucket_mb = 2.0;
    c->checkpoint_interval = 300;
    c->resume = RESUME_AUTO;
    c->model_file = "cifar10-model.safetensors";
    c->seed = 1;
    config_recipe(c, net_airbench94.name);
}

void config_recipe(struct train_config *c, const char *model) {
    c->model = model;
    c->units = UNITS_TORCH;
    c->nesterov = 0;
    c->norm_lr_scale = 1.0;
    c->label_smoothing = 0.0;
    c->loss = XENT_MEAN;
    c->lookahead = c->whiten_images = c->first_bias_epochs = 0;
    c->warmup_epochs = 1.0;
    c->tta = 0;
    c->bf16_recipe = 0;
    if (strcmp(model, net_airbench94.name) == 0) { /* legacy/airbench94.py's hyp */
        c->epochs = 9.9;
        c->batch_size = 1024;
        c->batch_scope = BATCH_GLOBAL;
        c->learning_rate = 11.5;
        c->units = UNITS_AIRBENCH;
        c->schedule = LR_TRIANGLE;
        c->momentum = 0.85;
        c->weight_decay = 0.0153;
        c->nesterov = 1;
        c->norm_lr_scale = 64.0;
        c->label_smoothing = 0.2;
        c->loss = XENT_SUM;
        c->lookahead = 5;
        c->whiten_images = 5000;
        c->first_bias_epochs = 3;
        c->augment = AUGMENT_ALTERNATING;
        c->tta = 2;
        return;
    }
    c->epochs = 10; /* the workshop's */
    c->batch_size = 128;
    c->batch_scope = BATCH_PER_RANK;
    c->learning_rate = 0.05;
    c->schedule = LR_COSINE;
    c->momentum = 0.9;
    c->weight_decay = 5e-4;
    c->augment = AUGMENT_CROP_FLIP;
}

/* The scheduled lr at `step` for peak lr `peak_lr`. */
static double scheduled_lr(const struct train_config *c, double peak_lr, long step, long total, int steps_per_epoch) {
    if (c->schedule == LR_CONSTANT) return peak_lr;
    if (c->schedule == LR_TRIANGLE) { /* np.interp(step, [0, int(0.23 total), total], [0.2, 1, 0.07]) */
        long peak = (long)(0.23 * (double)total);
        double f = step <= peak ? (peak > 0 ? 0.2 + 0.8 * (double)step / (double)peak : 1.0)
                                : 1.0 + (0.07 - 1.0) * (double)(step - peak) / (double)(total - peak);
        return peak_lr * f;
    }
    /* cosine, over epochs: the epoch count plus the fraction of this one done */
    double progress = (double)(step / steps_per_epoch) + (double)(step % steps_per_epoch) / steps_per_epoch;
    double epochs = (double)total / steps_per_epoch;
    double w = c->warmup_epochs < epochs ? c->warmup_epochs : 0.0;
    if (progress < w) return peak_lr * (0.1 + 0.9 * progress / w);
    double t = (progress - w) / (epochs - w); /* 0..1 over the cosine part */
    return peak_lr * 0.5 * (1.0 + cos(M_PI * (t > 1.0 ? 1.0 : t)));
}

void config_sgd_at(const struct train_config *c, long step, long total_steps, int steps_per_epoch, int global_batch,
                   int world, struct sgd_settings *out) {
    double lr = c->learning_rate, wd = c->weight_decay;
    if (c->units == UNITS_AIRBENCH) { /* lr per 1024 images over the Nesterov gain 1 + 1/(1 - momentum) */
        double kilostep = 1024.0 * (1.0 + 1.0 / (1.0 - c->momentum));
        lr = c->learning_rate / kilostep;
        wd = c->weight_decay * global_batch / kilostep / lr;
    }
    out->lr = (float)scheduled_lr(c, lr, step, total_steps, steps_per_epoch);
    out->momentum = (float)c->momentum;
    out->weight_decay = (float)wd;
    /* the allreduce sums: a mean loss wants the average, a summed loss the sum */
    out->grad_scale = c->loss == XENT_MEAN ? 1.0f / (float)world : 1.0f;
    out->norm_lr_scale = (float)c->norm_lr_scale;
    out->nesterov = c->nesterov;
}

double config_lookahead_weight(const struct train_config *c, long step, long total_steps) {
    if (c->lookahead <= 0 || step % c->lookahead != 0) return -1.0;
    double r = (double)step / (double)total_steps;
    return 1.0 - pow(0.95, 5) * r * r * r;
}

const char *config_schedule_name(enum lr_schedule s) {
    return s == LR_COSINE ? "cosine" : s == LR_TRIANGLE ? "triangle" : "constant";
}

int config_schedule_parse(const char *s, enum lr_schedule *out) {
    if (strcmp(s, "cosine") == 0) *out = LR_COSINE;
    else if (strcmp(s, "constant") == 0) *out = LR_CONSTANT;
    else if (strcmp(s, "triangle") == 0) *out = LR_TRIANGLE;
    else return -1;
    return 0;
}

/* The run-defining settings: JSON key, flag name, and value as text (exact: see shortest). */
struct setting {
    const char *key, *flag;
    char value[64];
    int is_string;
};

/* The shortest decimal that reads back as exactly v (0.05, not 0.050000000000000003). */
static void shortest(char *out, size_t n, double v) {
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(out, n, "%.0f", v);
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v) return;
    }
}

static void add_setting(struct setting *s, int *n, const char *key, const char *flag, int is_string,
                        const char *fmt, ...) __attribute__((format(printf, 6, 7)));
static void add_setting(struct setting *s, int *n, const char *key, const char *flag, int is_string,
                        const char *fmt, ...) {
    struct setting *t = &s[(*n)++];
    *t = (struct setting){key, flag, "", is_string};
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(t->value, sizeof t->value, fmt, ap);
    va_end(ap);
}

static int settings_of(const struct train_config *c, struct setting *s) {
    int n = 0;
    add_setting(s, &n, "model", "model", 1, "%s", c->model);
    char epochs[32];
    shortest(epochs, sizeof epochs, c->epochs);
    add_setting(s, &n, "epochs", "--epochs", 0, "%s", epochs);
    add_setting(s, &n, "batch_size", "--batch-size", 0, "%d", c->batch_size);
    char lr[32], warmup[32], momentum[32], wd[32];
    shortest(lr, sizeof lr, c->learning_rate);
    shortest(warmup, sizeof warmup, c->warmup_epochs);
    shortest(momentum, sizeof momentum, c->momentum);
    shortest(wd, sizeof wd, c->weight_decay);
    add_setting(s, &n, "learning_rate", "--learning-rate", 0, "%s", lr);
    add_setting(s, &n, "lr_schedule", "--lr-schedule", 1, "%s", config_schedule_name(c->schedule));
    add_setting(s, &n, "warmup_epochs", "--warmup-epochs", 0, "%s", warmup);
    add_setting(s, &n, "momentum", "--momentum", 0, "%s", momentum);
    add_setting(s, &n, "weight_decay", "--weight-decay", 0, "%s", wd);
    /* a string: JSON numbers (doubles) cannot hold every 64-bit seed */
    add_setting(s, &n, "seed", "--seed", 1, "%llu", (unsigned long long)c->seed);
    add_setting(s, &n, "augment", "--no-augment", 0, "%s", c->augment ? "true" : "false");
    /* added with airbench94 (is_added_later) */
    char smoothing[32];
    shortest(smoothing, sizeof smoothing, c->label_smoothing);
    add_setting(s, &n, "label_smoothing", "--label-smoothing", 0, "%s", smoothing);
    add_setting(s, &n, "lookahead", "--lookahead", 0, "%d", c->lookahead);
    add_setting(s, &n, "whiten_images", "--whiten-images", 0, "%d", c->whiten_images);
    return n;
}

void config_to_json(const struct train_config *c, struct strbuf *out) {
    struct setting s[16];
    int n = settings_of(c, s);
    strbuf_printf(out, "{");
    for (int i = 0; i < n; i++) {
        strbuf_printf(out, "%s\"%s\":", i ? "," : "", s[i].key);
        if (s[i].is_string) strbuf_json_string(out, s[i].value);
        else strbuf_printf(out, "%s", s[i].value);
    }
    strbuf_printf(out, "}");
}

/* Settings added with airbench94: a record without them (an older workshop file) reads as 0. */
static int is_added_later(const char *key) {
    static const char *const keys[] = {"label_smoothing", "lookahead", "whiten_images"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        if (strcmp(key, keys[i]) == 0) return 1;
    return 0;
}

int config_compare(const struct train_config *c, const char *saved_json, struct err *e) {
    struct json saved;
    struct err je;
    if (json_parse(saved_json, strlen(saved_json), &saved, &je) != 0 || saved.type != JSON_OBJECT) {
        json_free(&saved);
        return err_set(e, "the recorded training configuration is unreadable (%s)", je.msg);
    }
    struct setting s[16];
    int n = settings_of(c, s), rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        const struct json *v = json_get(&saved, s[i].key);
        char have[64] = "(missing)";
        int same = 0, added_later = is_added_later(s[i].key);
        if (!v && added_later) {
            snprintf(have, sizeof have, "0");
            same = strcmp(s[i].value, "0") == 0;
        } else if (v && v->type == JSON_STRING) {
            snprintf(have, sizeof have, "%s", v->string);
            same = s[i].is_string && strcmp(v->string, s[i].value) == 0;
        } else if (v && v->type == JSON_BOOL) {
            snprintf(have, sizeof have, "%s", v->boolean ? "true" : "false");
            same = strcmp(have, s[i].value) == 0;
        } else if (v && v->type == JSON_NUMBER) {
            shortest(have, sizeof have, v->number);
            double mine = 0;
            sscanf(s[i].value, "%lf", &mine);
            same = !s[i].is_string && v->number == mine;
        }
        if (!same) {
            if (strcmp(s[i].key, "augment") == 0)
                rc = err_set(e, "augmentation: the checkpoint was trained %s it, this run %s",
                             strcmp(have, "true") == 0 ? "with" : "without", c->augment ? "with" : "without");
            else
                rc = err_set(e, "%s: the checkpoint has %s, this run has %s", s[i].flag, have, s[i].value);
        }
    }
    json_free(&saved);
    return rc;
}
