/* Model/checkpoint files: round trip, corruption and truncation detection, wrong architecture,
 * atomic replacement when a write fails (simulated full disk via RLIMIT_FSIZE), the JSON reader
 * on malformed input, resume-settings comparison and the learning-rate schedule. */
#include "../common/err.h"
#include "../io/checkpoint.h"
#include "../io/json.h"
#include "../io/safetensors.h"
#include "../model/config.h"
#include "../model/model.h"
#include "check.h"
#include "test_nets.h"

#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static char dir[256];
static struct model M; /* the workshop network on the CPU backend: the tensor table */

static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(*n + 1);
    CHECK(fread(b, 1, *n, f) == *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const uint8_t *b, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(b, 1, n, f) == n);
    fclose(f);
}

static struct model_state new_state(int with_momentum) { return checkpoint_state_alloc(&M, with_momentum); }

static void free_state(struct model_state *s) { checkpoint_state_free(s); }

static int count_tmp_files(void) {
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d))) n += strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void expect_read_error(const char *path, int want_momentum, const char *want) {
    struct model_state s = new_state(want_momentum);
    struct run_info info;
    struct err e = {""};
    int rc = checkpoint_read(path, &M, &s, &info, &e);
    EXPECT(rc == -1 && strstr(e.msg, want) && strstr(e.msg, path),
           "reading %s: rc %d, message '%s' lacks '%s'", path, rc, e.msg, want);
    free_state(&s);
}

/* A mid-epoch checkpoint of 3 ranks: each rank's running statistics (values and lookahead
 * averages) under its own names, the position and the epoch's sums exactly; a resume reads
 * them back; an epoch-end file reads as one set; a position past the epoch is refused. */
static void test_mid_epoch(void) {
    size_t S = M.nbuffers;
    struct model_state a = checkpoint_state_alloc(&M, STATE_MOMENTUM | STATE_LOOKAHEAD);
    struct model_state b = checkpoint_state_alloc(&M, STATE_MOMENTUM | STATE_LOOKAHEAD);
    model_get_state(&M, a.params, a.momentum, a.buffers);
    model_get_state(&M, a.ema_params, NULL, a.ema_buffers);
    a.ranks = 3;
    a.rank_buffers = XALLOC(3 * S * sizeof(float));
    a.rank_ema_buffers = XALLOC(3 * S * sizeof(float));
    for (int r = 0; r < 3; r++)
        for (size_t i = 0; i < S; i++) {
            a.rank_buffers[r * S + i] = a.buffers[i] + (float)(r * 1000 + i);
            a.rank_ema_buffers[r * S + i] = a.ema_buffers[i] - (float)(r * 1000 + i);
        }
    memcpy(a.buffers, a.rank_buffers, S * sizeof(float)); /* rank 0's are the file's own */
    memcpy(a.ema_buffers, a.rank_ema_buffers, S * sizeof(float));
    struct run_info info = {.kind = "checkpoint",
                            .run_id = "run-mid",
                            .epochs_completed = 2,
                            .global_step = 16,
                            .config = "{}",
                            .step_in_epoch = 4,
                            .steps_per_epoch = 6,
                            .epoch_loss = 0.1,
                            .epoch_correct = 123,
                            .print_loss = 1.0 / 3};
    char ck[512];
    snprintf(ck, sizeof ck, "%s/mid.safetensors", dir);
    struct err e = {""};
    EXPECT(checkpoint_write(ck, &M, &a, &info, &e) == 0, "write mid-epoch checkpoint: %s", e.msg);
    struct run_info got;
    EXPECT(checkpoint_read(ck, &M, &b, &got, &e) == 0, "read mid-epoch checkpoint: %s", e.msg);
    EXPECT(got.step_in_epoch == 4 && got.steps_per_epoch == 6 && got.epoch_loss == 0.1 &&
               got.epoch_correct == 123 && got.print_loss == 1.0 / 3,
           "position and sums: step %d of %d, %.17g %.17g %.17g", got.step_in_epoch, got.steps_per_epoch,
           got.epoch_loss, got.epoch_correct, got.print_loss);
    int same = b.ranks == 3 && b.rank_buffers && b.rank_ema_buffers, running = 0;
    for (int i = 0; same && i < M.ntensors; i++) {
        const struct model_tensor *mt = &M.tensors[i];
        running += mt->running;
        for (size_t r = 0; mt->home == HOME_BUFFERS && r < 3;
             r++) { /* other buffers: rank 0's in every set */
            size_t from = (mt->running ? r : 0) * S + mt->offset, to = r * S + mt->offset,
                   bytes = mt->numel * 4;
            same &= !memcmp(a.rank_buffers + from, b.rank_buffers + to, bytes) &&
                    !memcmp(a.rank_ema_buffers + from, b.rank_ema_buffers + to, bytes);
        }
    }
    EXPECT(same && running >= 2, "per-rank statistics round trip (%d sets, %d running tensors)", b.ranks,
           running);
    struct safetensors st;
    EXPECT(safetensors_read(ck, &st, &e) == 0 && json_get(&st.header, "ranks.2.network.5.running_var") &&
               json_get(&st.header, "optimizer.lookahead.ranks.1.network.5.running_mean") &&
               !json_get(&st.header, "ranks.1.network.5.weight") &&
               !json_get(&st.header, "ranks.0.network.5.running_var"),
           "per-rank tensor names");
    safetensors_free(&st);
    /* an epoch-end checkpoint: one set, no position */
    a.ranks = 1;
    info.step_in_epoch = 0, info.epoch_loss = info.epoch_correct = info.print_loss = 0;
    EXPECT(checkpoint_write(ck, &M, &a, &info, &e) == 0 && checkpoint_read(ck, &M, &b, &got, &e) == 0 &&
               b.ranks == 1 && !b.rank_buffers && got.step_in_epoch == 0,
           "epoch-end checkpoint read as %d sets, step %d", b.ranks, got.step_in_epoch);
    info.step_in_epoch = 6; /* stopped after the epoch's last step, before its end was processed */
    EXPECT(checkpoint_write(ck, &M, &a, &info, &e) == 0 && checkpoint_read(ck, &M, &b, &got, &e) == 0 &&
               got.step_in_epoch == 6,
           "a checkpoint after the epoch's last step: %s", e.msg);
    info.step_in_epoch = 7;
    EXPECT(checkpoint_write(ck, &M, &a, &info, &e) == 0, "write: %s", e.msg);
    expect_read_error(ck, 1, "step_in_epoch 7 is past steps_per_epoch 6");
    checkpoint_state_free(&a), checkpoint_state_free(&b);
}

static void test_round_trip(void) {
    size_t P = M.nparams, S = M.nbuffers;
    struct model_state a = new_state(1), b = new_state(1);
    model_get_state(&M, a.params, a.momentum, a.buffers);
    for (size_t i = 0; i < P; i++) a.momentum[i] = (float)i * 1e-3f; /* distinguishable */
    for (size_t i = 0; i < S; i++) a.buffers[i] += (float)i;         /* S: BN statistics floats */
    a.batches_tracked = 1234;
    struct run_info info = {
        .kind = "checkpoint", .run_id = "run-xyz", .epochs_completed = 7, .global_step = 2730};
    snprintf(info.config, sizeof info.config, "{\"epochs\":10}");
    char ck[512], mf[512];
    snprintf(ck, sizeof ck, "%s/c.safetensors", dir);
    snprintf(mf, sizeof mf, "%s/m.safetensors", dir);
    struct err e = {""};
    EXPECT(checkpoint_write(ck, &M, &a, &info, &e) == 0, "write checkpoint: %s", e.msg);
    struct run_info got;
    EXPECT(checkpoint_read(ck, &M, &b, &got, &e) == 0, "read checkpoint: %s", e.msg);
    int same = b.batches_tracked == 1234;
    for (int i = 0; i < M.ntensors; i++) { /* tensor by tensor: alignment gaps are not stored */
        const struct model_tensor *mt = &M.tensors[i];
        size_t o = mt->offset, bytes = mt->numel * 4;
        if (mt->home == HOME_PARAMS)
            same &=
                !memcmp(a.params + o, b.params + o, bytes) && !memcmp(a.momentum + o, b.momentum + o, bytes);
        else if (mt->home == HOME_BUFFERS) same &= !memcmp(a.buffers + o, b.buffers + o, bytes);
    }
    EXPECT(same, "checkpoint round trip changed the state");
    EXPECT(strcmp(got.run_id, "run-xyz") == 0 && got.epochs_completed == 7 && got.global_step == 2730 &&
               strcmp(got.config, "{\"epochs\":10}") == 0 && strcmp(got.kind, "checkpoint") == 0,
           "run info round trip");
    snprintf(info.kind, sizeof info.kind, "model");
    EXPECT(checkpoint_write(mf, &M, &a, &info, &e) == 0, "write model: %s", e.msg);
    struct model_state c = new_state(0);
    EXPECT(checkpoint_read(mf, &M, &c, &got, &e) == 0 && memcmp(a.params, c.params, P * 4) == 0,
           "read model: %s", e.msg);
    expect_read_error(mf, 1, "is a model file, not a checkpoint");
    /* metadata a consumer needs */
    struct safetensors st;
    EXPECT(safetensors_read(mf, &st, &e) == 0, "safetensors_read: %s", e.msg);
    const char *keys[] = {"format",
                          "format_version",
                          "model",
                          "normalization_mean",
                          "normalization_std",
                          "classes",
                          "run_id",
                          "epochs_completed",
                          "config",
                          "crc32"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        EXPECT(safetensors_meta(&st, keys[i]) != NULL, "metadata %s missing", keys[i]);
    EXPECT(strcmp(safetensors_meta(&st, "normalization_mean"), "[0.4914,0.4822,0.4465]") == 0, "mean %s",
           safetensors_meta(&st, "normalization_mean"));
    EXPECT(json_get(&st.header, "optimizer.momentum.network.0.weight") == NULL,
           "model file carries momentum");
    EXPECT(json_get(&st.header, "network.17.num_batches_tracked") != NULL, "num_batches_tracked missing");
    safetensors_free(&st);

    /* corruption: a flipped data byte, a flipped header byte, truncation at several points */
    size_t n;
    uint8_t *orig = slurp(mf, &n);
    char bad[600];
    snprintf(bad, sizeof bad, "%s/bad.safetensors", dir);
    uint8_t *b2 = malloc(n);
    memcpy(b2, orig, n);
    b2[n - 1000] ^= 0x10;
    spit(bad, b2, n);
    expect_read_error(bad, 0, "checksum mismatch");
    memcpy(b2, orig, n);
    b2[8] = 'X'; /* the header's opening brace */
    spit(bad, b2, n);
    expect_read_error(bad, 0, "corrupt header");
    size_t cuts[] = {0, 5, 8, 100, n / 2, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        spit(bad, orig, cuts[i]);
        expect_read_error(bad, 0, "truncated");
    }
    memcpy(b2, orig, n);
    spit(bad, b2, n);
    uint8_t junk[3] = {1, 2, 3};
    FILE *f = fopen(bad, "ab");
    fwrite(junk, 1, 3, f);
    fclose(f);
    expect_read_error(bad, 0, "bytes after the last tensor");
    spit(bad, (const uint8_t *)"hello world, not a model at all", 31);
    expect_read_error(bad, 0, "not a safetensors file");
    free(b2);
    free(orig);

    /* wrong architecture: conv0 with 16 filters */
    struct st_tensor t[64];
    int nt = 0;
    for (int i = 0; i < M.ntensors; i++) {
        const struct model_tensor *mt = &M.tensors[i];
        if (mt->home == HOME_COUNTER) continue;
        t[nt] = (struct st_tensor){
            mt->name, ST_F32, mt->ndim, {0}, (mt->home == HOME_PARAMS ? a.params : a.buffers) + mt->offset};
        for (int d = 0; d < mt->ndim; d++) t[nt].shape[d] = mt->shape[d];
        if (i == 0) t[nt].shape[0] = 16;
        nt++;
    }
    struct st_meta meta[] = {{"format", "cifar10-dp"},  {"format_version", "1"}, {"kind", "model"},
                             {"model", "workshop-cnn"}, {"run_id", "x"},         {"config", "{}"},
                             {"epochs_completed", "1"}, {"global_step", "1"}};
    EXPECT(safetensors_write(bad, t, nt, meta, 8, &e) == 0, "write odd model: %s", e.msg);
    expect_read_error(bad, 0, "network.0.weight has shape [16,3,3,3], expected [32,3,3,3]");
    struct st_meta other[] = {{"format", "cifar10-dp"}, {"format_version", "2"}};
    EXPECT(safetensors_write(bad, t, 1, other, 2, &e) == 0, "write v2");
    expect_read_error(bad, 0, "format version 2");

    /* atomic replacement: a write that fails (file size limit = full disk) keeps the old file */
    size_t before_n;
    uint8_t *before = slurp(ck, &before_n);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit old, lim = {1 << 20, 1 << 20};
    getrlimit(RLIMIT_FSIZE, &old);
    lim.rlim_max = old.rlim_max;
    setrlimit(RLIMIT_FSIZE, &lim);
    snprintf(info.kind, sizeof info.kind, "checkpoint");
    info.epochs_completed = 8;
    int rc = checkpoint_write(ck, &M, &a, &info, &e);
    setrlimit(RLIMIT_FSIZE, &old);
    EXPECT(rc == -1 && strstr(e.msg, "write failed") && strstr(e.msg, ck),
           "failed write reported: rc %d '%s'", rc, e.msg);
    size_t after_n;
    uint8_t *after = slurp(ck, &after_n);
    EXPECT(after && after_n == before_n && memcmp(before, after, before_n) == 0,
           "failed write damaged the previous checkpoint");
    EXPECT(count_tmp_files() == 0, "temporary file left behind");
    EXPECT(checkpoint_read(ck, &M, &b, &got, &e) == 0 && got.epochs_completed == 7,
           "previous checkpoint unreadable after failed write");
    free(before), free(after);
    char nodir[600];
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/m.safetensors", dir);
    EXPECT(checkpoint_write(nodir, &M, &a, &info, &e) == -1 && strstr(e.msg, "No such file"),
           "write into missing dir: '%s'", e.msg);
    free_state(&a), free_state(&b), free_state(&c);
}

static void test_json(void) {
    const char *bad[] = {
        "",    "{",          "{\"a\":}", "[1,2",        "\"abc", "{\"a\" 1}", "tru",  "[1,]",
        "01x", "{\"a\":1}}", "\"\\x\"",  "[\"\\u12\"]", "1e999", "\"a\x01\"", "\"\\", "\"\\ud83d\\uzz\""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        struct json j;
        struct err e = {""};
        EXPECT(json_parse(bad[i], strlen(bad[i]), &j, &e) == -1 && strstr(e.msg, "byte"),
               "json accepted '%s'", bad[i]);
    }
    char deep[200];
    memset(deep, '[', 100);
    memset(deep + 100, ']', 100);
    struct json j;
    struct err e;
    EXPECT(json_parse(deep, 200, &j, &e) == -1 && strstr(e.msg, "nested"), "deep nesting accepted");
    const char *good = " {\"s\":\"a\\\"b\\u00e9\\n\\u20ac\\ud83d\\ude00\xc3\xbc\\\\\\/"
                       "\\b\\f\\r\\t\",\"n\":-1.5e2,\"t\":true,"
                       "\"z\":null,\"a\":[1,{\"k\":[]}]} ";
    EXPECT(json_parse(good, strlen(good), &j, &e) == 0, "valid json rejected: %s", e.msg);
    EXPECT(strcmp(json_get(&j, "s")->string,
                  "a\"b\xc3\xa9\n\xe2\x82\xac\xf0\x9f\x98\x80\xc3\xbc\\/\b\f\r\t") == 0 &&
               json_get(&j, "n")->number == -150 && json_get(&j, "t")->boolean == 1 &&
               json_get(&j, "a")->count == 2 && json_get(&j, "missing") == NULL,
           "json values");
    json_free(&j);
    struct strbuf sb = {0};
    strbuf_json_string(&sb, "q\"\\\n");
    EXPECT(strcmp(sb.s, "\"q\\\"\\\\\\u000a\"") == 0, "json escape: %s", sb.s);
    strbuf_free(&sb);
}

/* The workshop recipe over the program's defaults (which are airbench94's). */
static void workshop_config(struct train_config *c) {
    config_defaults(c);
    config_recipe(c, "workshop-cnn");
}

static void test_config(void) {
    struct train_config a, b;
    config_defaults(&a);
    EXPECT(strcmp(a.model, "airbench94") == 0 && a.epochs == 9.9 && a.batch_size == 1024 && a.tta == 2,
           "the program's default is airbench94 and its recipe: %s", a.model);
    workshop_config(&a);
    workshop_config(&b);
    struct strbuf sb = {0};
    config_to_json(&a, &sb);
    struct err e = {""};
    EXPECT(config_compare(&b, sb.s, &e) == 0, "identical settings differ: %s", e.msg);
    b.threads = 7, b.print_freq = 99, b.model_file = "elsewhere"; /* may change on resume */
    EXPECT(config_compare(&b, sb.s, &e) == 0, "non-defining settings block a resume: %s", e.msg);
    b.learning_rate = 0.1;
    EXPECT(config_compare(&b, sb.s, &e) == -1 && strstr(e.msg, "--learning-rate: the checkpoint has 0.05"),
           "lr diff: %s", e.msg);
    workshop_config(&b);
    b.seed = 18446744073709551615ull;
    EXPECT(config_compare(&b, sb.s, &e) == -1 && strstr(e.msg, "--seed"), "seed diff: %s", e.msg);
    workshop_config(&b);
    b.augment = 0;
    EXPECT(config_compare(&b, sb.s, &e) == -1 && strstr(e.msg, "augmentation"), "augment diff: %s", e.msg);
    workshop_config(&b);
    b.epochs = 11;
    EXPECT(config_compare(&b, sb.s, &e) == -1 &&
               strstr(e.msg, "--epochs: the checkpoint has 10, this run has 11"),
           "epochs diff: %s", e.msg);
    /* a record from before label smoothing and lookahead existed reads as without them */
    const char *old =
        "{\"model\":\"workshop-cnn\",\"epochs\":10,\"batch_size\":128,\"learning_rate\":0.05,"
        "\"lr_schedule\":\"cosine\",\"warmup_epochs\":1,\"momentum\":0.9,\"weight_decay\":0.0005,"
        "\"seed\":\"1\",\"augment\":true}";
    EXPECT(config_compare(&a, old, &e) == 0, "an older workshop record: %s", e.msg);
    config_recipe(&b, "airbench94");
    EXPECT(config_compare(&b, sb.s, &e) == -1 &&
               strstr(e.msg, "model: the checkpoint has workshop-cnn, this run has airbench94"),
           "model diff: %s", e.msg);
    strbuf_free(&sb);
    config_to_json(&b, &sb);
    EXPECT(strstr(sb.s, "\"epochs\":9.9,") && strstr(sb.s, "\"label_smoothing\":0.2,") &&
               strstr(sb.s, "\"lookahead\":5,\"whiten_images\":5000}"),
           "airbench94 record: %s", sb.s);
    config_recipe(&a, "airbench94");
    EXPECT(config_compare(&a, sb.s, &e) == 0, "airbench94 against itself: %s", e.msg);
    a.label_smoothing = 0.1;
    EXPECT(config_compare(&a, sb.s, &e) == -1 &&
               strstr(e.msg, "--label-smoothing: the checkpoint has 0.2, this run has 0.1"),
           "smoothing diff: %s", e.msg);
    strbuf_free(&sb);
}

/* The settings of each step: the workshop's warm-up and cosine (per-rank mean loss), airbench's
 * units, triangle, groups and summed loss, and its lookahead weights. */
static void test_schedule(void) {
    struct train_config c;
    workshop_config(&c);
    struct sgd_settings s;
    float lr[4];
    long at[4] = {0, 100, 1000, 550}; /* 10 epochs of 100 steps: start, end of warm-up, end, middle */
    for (int i = 0; i < 4; i++) config_sgd_at(&c, at[i], 1000, 100, 256, 2, &s), lr[i] = s.lr;
    EXPECT(fabsf(lr[0] - 0.005f) < 1e-9f && lr[1] == 0.05f && fabsf(lr[2]) < 1e-9f &&
               fabsf(lr[3] - 0.025f) < 1e-9f,
           "cosine points: %g %g %g %g", lr[0], lr[1], lr[2], lr[3]);
    EXPECT(s.momentum == 0.9f && s.weight_decay == 5e-4f && s.grad_scale == 0.5f && s.norm_lr_scale == 1.0f &&
               !s.nesterov,
           "workshop settings");
    int mono = 1;
    for (long i = 100; i < 999; i++) {
        config_sgd_at(&c, i, 1000, 100, 256, 2, &s);
        float before = s.lr;
        config_sgd_at(&c, i + 1, 1000, 100, 256, 2, &s);
        mono &= s.lr < before;
    }
    EXPECT(mono, "cosine part not decreasing");
    c.schedule = LR_CONSTANT;
    config_sgd_at(&c, 990, 1000, 100, 256, 2, &s);
    EXPECT(s.lr == 0.05f, "constant schedule: %g", s.lr);
    /* airbench94: 48 steps x 9.9 epochs = 476; lr = 11.5 / (1024 (1 + 1 / 0.15)); peak at
     * int(0.23 x 476) = 109; decay 0.0153 x 1024 / (1024 (1 + 1 / 0.15)) / lr */
    config_recipe(&c, "airbench94");
    double base = 11.5 / (1024.0 * (1.0 + 1.0 / (1.0 - 0.85))),
           wd = 0.0153 * 1024 / (1024.0 * (1.0 + 1.0 / 0.15)) / base;
    long steps[5] = {0, 54, 109, 300, 476};
    double want[5] = {0.2, 0.2 + 0.8 * 54 / 109.0, 1.0, 1.0 - 0.93 * (300 - 109) / 367.0, 0.07};
    for (int i = 0; i < 5; i++) {
        config_sgd_at(&c, steps[i], 476, 48, 1024, 4, &s);
        EXPECT(fabs(s.lr - base * want[i]) < 1e-6 * base, "triangle at step %ld: %.9g, not %.9g", steps[i],
               s.lr, base * want[i]);
    }
    EXPECT(fabs(s.weight_decay - wd) < 1e-6 * wd && s.grad_scale == 1.0f && s.norm_lr_scale == 64.0f &&
               s.nesterov && s.momentum == 0.85f,
           "airbench settings: wd %.9g (%.9g)", s.weight_decay, wd);
    double w5 = config_lookahead_weight(&c, 5, 476), w476 = config_lookahead_weight(&c, 475, 476);
    double r = 5.0 / 476;
    EXPECT(w5 == 1.0 - pow(0.95, 5) * r * r * r && config_lookahead_weight(&c, 4, 476) < 0 &&
               config_lookahead_weight(&c, 476, 476) < 0 &&
               fabs(w476 - (1 - pow(0.95, 5) * pow(475.0 / 476, 3))) < 1e-15,
           "lookahead weights %.17g %.17g", w5, w476);
    c.lookahead = 0;
    EXPECT(config_lookahead_weight(&c, 5, 476) < 0, "lookahead 0 still updates");
}

/* The network comes from the file: a known name selects its definition, any other is refused
 * with one line; frozen tensors are saved without momentum. */
static void test_network_selection(void) {
    char mf[512], tf[512];
    snprintf(mf, sizeof mf, "%s/w.safetensors", dir);
    snprintf(tf, sizeof tf, "%s/t.safetensors", dir);
    struct run_info info = {.kind = "model", .run_id = "r", .config = "{}"}, got;
    struct model_state a = new_state(0);
    model_get_state(&M, a.params, NULL, a.buffers);
    struct err e = {""};
    EXPECT(checkpoint_write(mf, &M, &a, &info, &e) == 0, "write: %s", e.msg);
    EXPECT(checkpoint_net(mf, &e) == &net_workshop_cnn, "workshop-cnn file not recognised: %s", e.msg);
    struct model t;
    model_init(&t, &test_net, kernels_cpu(), 2, 4);
    struct model_state ts = checkpoint_state_alloc(&t, 1), back = checkpoint_state_alloc(&t, 1);
    model_get_state(&t, ts.params, ts.momentum, ts.buffers);
    for (int i = 0; i < t.ntensors; i++) /* within the tensors: alignment gaps are not stored */
        for (size_t j = 0; t.tensors[i].home == HOME_PARAMS && j < t.tensors[i].numel; j++)
            ts.momentum[t.tensors[i].offset + j] = (float)(i + j);
    snprintf(info.kind, sizeof info.kind, "checkpoint");
    EXPECT(checkpoint_write(tf, &t, &ts, &info, &e) == 0, "write test-net: %s", e.msg);
    EXPECT(
        checkpoint_net(tf, &e) == NULL &&
            strstr(
                e.msg,
                "holds model test-net, which this build does not know (known: workshop-cnn, airbench94)") &&
            strstr(e.msg, tf),
        "unknown network: '%s'", e.msg);
    expect_read_error(tf, 0, "holds model test-net, this program runs workshop-cnn");
    EXPECT(checkpoint_read(tf, &t, &back, &got, &e) == 0 &&
               memcmp(ts.buffers, back.buffers, t.nbuffers * 4) == 0 &&
               memcmp(ts.momentum, back.momentum, t.nparams * 4) == 0,
           "test-net round trip: %s", e.msg);
    struct safetensors st;
    EXPECT(safetensors_read(tf, &st, &e) == 0, "read back: %s", e.msg);
    const char *present[] = {"0.weight",
                             "0.bias",
                             "2.norm1.weight",
                             "2.norm2.num_batches_tracked",
                             "5.weight",
                             "optimizer.momentum.0.bias",
                             "optimizer.momentum.2.norm1.bias"};
    const char *absent[] = {"optimizer.momentum.0.weight", "optimizer.momentum.2.norm1.weight", "5.bias",
                            "2.conv1.bias"};
    for (size_t i = 0; i < sizeof present / sizeof present[0]; i++)
        EXPECT(json_get(&st.header, present[i]), "%s missing", present[i]);
    for (size_t i = 0; i < sizeof absent / sizeof absent[0]; i++)
        EXPECT(!json_get(&st.header, absent[i]), "%s present", absent[i]);
    safetensors_free(&st);
    checkpoint_state_free(&ts), checkpoint_state_free(&back), free_state(&a);
    model_free(&t);
}

/* The kernels record: written and read back; absent (a file from before it) reads as ""; a name
 * with other bytes than a table name's, or too long, is refused with one line. */
static void test_kernels_record(void) {
    struct model_state a = new_state(0), b = new_state(0);
    model_get_state(&M, a.params, NULL, a.buffers);
    struct run_info info = {.kind = "model", .run_id = "r", .config = "{}", .kernels = "cpu-bf16"}, got;
    char mf[512];
    snprintf(mf, sizeof mf, "%s/k.safetensors", dir);
    struct err e = {""};
    EXPECT(checkpoint_write(mf, &M, &a, &info, &e) == 0 && checkpoint_read(mf, &M, &b, &got, &e) == 0 &&
               strcmp(got.kernels, "cpu-bf16") == 0,
           "kernels round trip: '%s' (%s)", got.kernels, e.msg);
    struct st_tensor t[64];
    int nt = 0;
    int64_t tracked = 5;
    for (int i = 0; i < M.ntensors; i++) {
        const struct model_tensor *mt = &M.tensors[i];
        const void *data = mt->home == HOME_COUNTER  ? (const void *)&tracked
                           : mt->home == HOME_PARAMS ? (const void *)(a.params + mt->offset)
                                                     : (const void *)(a.buffers + mt->offset);
        t[nt] = (struct st_tensor){mt->name, mt->home == HOME_COUNTER ? ST_I64 : ST_F32, mt->ndim, {0}, data};
        for (int d = 0; d < mt->ndim; d++) t[nt].shape[d] = mt->shape[d];
        nt++;
    }
    const char *values[] = {NULL, "cpu\nbf16", "cuda-bf16-and-a-name-too-long", "cuda-bf16"};
    for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
        struct st_meta meta[] = {{"format", "cifar10-dp"},  {"format_version", "1"}, {"kind", "model"},
                                 {"model", "workshop-cnn"}, {"run_id", "x"},         {"config", "{}"},
                                 {"epochs_completed", "1"}, {"global_step", "1"},    {"kernels", values[v]}};
        EXPECT(safetensors_write(mf, t, nt, meta, values[v] ? 9 : 8, &e) == 0, "write: %s", e.msg);
        if (v == 1) expect_read_error(mf, 0, "bad kernels in metadata: 'cpu?bf16'");
        else if (v == 2) expect_read_error(mf, 0, "bad kernels in metadata: 'cuda-bf16-and-a-name-too-long'");
        else
            EXPECT(checkpoint_read(mf, &M, &b, &got, &e) == 0 && strcmp(got.kernels, v ? values[v] : "") == 0,
                   "kernels %s read as '%s' (%s)", values[v] ? values[v] : "absent", got.kernels, e.msg);
    }
    free_state(&a), free_state(&b);
}

int main(void) {
    check_tmpdir("test-ckpt", dir, sizeof dir);
    model_init(&M, &net_workshop_cnn, kernels_cpu(), 2, 3);
    test_json();
    test_round_trip();
    test_mid_epoch();
    test_kernels_record();
    test_network_selection();
    test_config();
    test_schedule();
    check_rmdir(dir);
    model_free(&M);
    return check_summary("test_checkpoint");
}
