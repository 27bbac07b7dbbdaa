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

/* A network's recipe; the workshop CNN's for an unknown name or a network without one. */
static const struct recipe *recipe_of(const struct net_def *net) {
    return net && net->recipe ? net->recipe : net_workshop_cnn.recipe;
}

void config_recipe(struct train_config *c, const char *model) {
    const struct recipe *r = recipe_of(net_find(model));
    c->model = model;
    c->epochs = r->epochs;
    c->batch_size = r->batch_size;
    c->batch_scope = r->batch_scope;
    c->learning_rate = r->learning_rate;
    c->units = r->units;
    c->schedule = r->schedule;
    c->warmup_epochs = r->warmup_epochs;
    c->momentum = r->momentum;
    c->weight_decay = r->weight_decay;
    c->nesterov = r->nesterov;
    c->norm_lr_scale = r->norm_lr_scale;
    c->label_smoothing = r->label_smoothing;
    c->loss = r->loss;
    c->lookahead = r->lookahead;
    c->whiten_images = r->whiten_images;
    c->first_bias_epochs = r->first_bias_epochs;
    c->augment = r->augment;
    c->tta = r->tta;
    c->bf16_recipe = r->bf16;
}

/* One row of config_print_recipes: each known recipe's value of a setting, formatted. */
typedef void recipe_cell_fn(const struct recipe *r, char *out, size_t size);
#define CELL(name, ...)                                                                                      \
    static void name(const struct recipe *r, char *out, size_t size) { snprintf(out, size, __VA_ARGS__); }
CELL(cell_epochs, "%g", r->epochs)
CELL(cell_batch, "%d %s", r->batch_size, r->batch_scope == BATCH_GLOBAL ? "in all" : "per rank")
CELL(cell_lr, "%g%s", r->learning_rate, r->units == UNITS_AIRBENCH ? " (per 1024)" : "")
CELL(cell_schedule, "%s", config_schedule_name(r->schedule))
CELL(cell_momentum, "%g%s", r->momentum, r->nesterov ? ", Nesterov" : "")
CELL(cell_decay, "%g%s", r->weight_decay, r->units == UNITS_AIRBENCH ? " (per 1024)" : "")
CELL(cell_smoothing, "%g (%s loss)", r->label_smoothing, r->loss == XENT_SUM ? "summed" : "mean")
CELL(cell_lookahead, "%d%s", r->lookahead, r->lookahead ? " (and a final one)" : " (none)")
CELL(cell_tta, "%d", r->tta)
CELL(cell_augment, "%s",
     r->augment == AUGMENT_ALTERNATING ? "reflect crop, alt. flip"
     : r->augment == AUGMENT_CROP_FLIP ? "zero-pad crop, flip"
                                       : "none")
CELL(cell_whiten, "%d", r->whiten_images)
CELL(cell_bias_epochs, "%d", r->first_bias_epochs)
CELL(cell_norm_lr, "x %g", r->norm_lr_scale)
#undef CELL
static void cell_warmup(const struct recipe *r, char *out, size_t size) {
    if (r->schedule == LR_COSINE) snprintf(out, size, "%g (from LR/10)", r->warmup_epochs);
    else snprintf(out, size, "-");
}

void config_print_recipes(FILE *f) {
    static const struct {
        const char *flag, *what;
        recipe_cell_fn *cell;
    } rows[] = {
        {"--epochs E", "epochs", cell_epochs},
        {"--batch-size N", "images per step", cell_batch},
        {"--learning-rate LR", "peak lr", cell_lr},
        {"--lr-schedule S", "lr schedule", cell_schedule},
        {"--warmup-epochs E", "cosine's warm-up", cell_warmup},
        {"--momentum M", "SGD momentum", cell_momentum},
        {"--weight-decay WD", "L2 weight decay", cell_decay},
        {"--label-smoothing S", "cross-entropy", cell_smoothing},
        {"--lookahead N", "lookahead every N", cell_lookahead},
        {"--tta L", "final score's TTA", cell_tta},
        {"  (recipe only)", "augmentation", cell_augment},
        {"--whiten-images N", "whitening images", cell_whiten},
        {"  (recipe only)", "first bias epochs", cell_bias_epochs},
        {"  (recipe only)", "batch-norm lr", cell_norm_lr},
    };
    fprintf(f, "  %-21s %-19s", "", "");
    for (int i = 0; net_known(i); i++) fprintf(f, net_known(i + 1) ? " %-24s" : " %s", net_known(i)->name);
    fputc('\n', f);
    for (size_t row = 0; row < sizeof rows / sizeof rows[0]; row++) {
        fprintf(f, "  %-21s %-19s", rows[row].flag, rows[row].what);
        for (int i = 0; net_known(i); i++) {
            char cell[64];
            rows[row].cell(recipe_of(net_known(i)), cell, sizeof cell);
            fprintf(f, net_known(i + 1) ? " %-24s" : " %s", cell); /* no trailing blanks */
        }
        fputc('\n', f);
    }
}

/* The scheduled lr at `step` for peak lr `peak_lr`. */
static double scheduled_lr(const struct train_config *c, double peak_lr, long step, long total,
                           int steps_per_epoch) {
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

void config_sgd_at(const struct train_config *c, long step, long total_steps, int steps_per_epoch,
                   int global_batch, int world, struct sgd_settings *out) {
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
            else rc = err_set(e, "%s: the checkpoint has %s, this run has %s", s[i].flag, have, s[i].value);
        }
    }
    json_free(&saved);
    return rc;
}
