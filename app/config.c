#include "config.h"

#include "net.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void config_defaults(struct train_config *c) {
    memset(c, 0, sizeof *c);
    c->model = net_workshop_cnn.name;
    c->epochs = 10;
    c->batch_size = 128;
    c->learning_rate = 0.05;
    c->schedule = LR_COSINE;
    c->warmup_epochs = 1.0;
    c->momentum = 0.9;
    c->weight_decay = 5e-4;
    c->seed = 1;
    c->augment = 1;
    c->print_freq = 5;
    c->eval = 1;
    c->device = DEVICE_AUTO;
    c->bucket_mb = 2.0;
    c->resume = RESUME_AUTO;
    c->model_file = "cifar10-model.safetensors";
}

double config_lr_at(const struct train_config *c, double progress) {
    if (c->schedule == LR_CONSTANT) return c->learning_rate;
    double w = c->warmup_epochs < c->epochs ? c->warmup_epochs : 0.0;
    if (progress < w) return c->learning_rate * (0.1 + 0.9 * progress / w);
    double t = (progress - w) / (c->epochs - w); /* 0..1 over the cosine part */
    return c->learning_rate * 0.5 * (1.0 + cos(M_PI * (t > 1.0 ? 1.0 : t)));
}

const char *config_schedule_name(enum lr_schedule s) { return s == LR_COSINE ? "cosine" : "constant"; }

int config_schedule_parse(const char *s, enum lr_schedule *out) {
    if (strcmp(s, "cosine") == 0) *out = LR_COSINE;
    else if (strcmp(s, "constant") == 0) *out = LR_CONSTANT;
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
    add_setting(s, &n, "epochs", "--epochs", 0, "%d", c->epochs);
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
        int same = 0;
        if (v && v->type == JSON_STRING) {
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
