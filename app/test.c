/* cifar10-test: scores a model file on test_batch.bin (eval mode) in the workshop's format,
 * with per-class accuracy and a confusion matrix; --min-accuracy turns it into a gate. */
#include "../common/err.h"
#include "../common/file.h"
#include "../data/cifar.h"
#include "../io/checkpoint.h"
#include "../io/json.h"
#include "../model/config.h"
#include "../model/evaluate.h"
#include "../model/model.h"
#include "device.h"
#include "options.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: cifar10-test [--batch-size N] [--min-accuracy PCT] [--tta L] [--json OUT]\n"
    "                    [--device D] [--threads N] --model-file FILE DATA\n"
    "\n"
    "Scores a model file (or checkpoint) written by cifar10-train on test_batch.bin.\n"
    "DATA: a directory with test_batch.bin, a directory containing cifar-10-batches-bin/, or\n"
    "cifar-10-binary.tar.gz itself.\n"
    "\n"
    "  --model-file FILE     model to score (default cifar10-model.safetensors)\n"
    "  --batch-size N        images per forward pass (default 250)\n"
    "  --min-accuracy PCT    exit 3 when the overall accuracy (percent) is below PCT\n"
    "  --tta L               test-time augmentation: 0 none, 1 mirror, 2 mirror and 1-pixel\n"
    "                        translations (default: the model's recipe: airbench94 2, else 0)\n"
    "  --json OUT            also write the scores to OUT as JSON: overall and per-class\n"
    "                        accuracy, the confusion matrix (written atomically)\n"
    "  --device D            cpu, cuda (GPU 0 of those visible) or auto (default: cuda when a\n"
    "                        GPU is visible, else cpu); any model file works on either\n"
    "  --threads N           threads (default: the CPUs this process may use)\n"
    "  --help, --version\n"
    "\n"
    "Exit codes: 0 scored (and at or above --min-accuracy), 1 runtime error (data, model file,\n"
    "--device=cuda without a GPU),\n"
    "2 bad command line, 3 accuracy below --min-accuracy.\n";

enum {
    OPT_BATCH = 256,
    OPT_MIN,
    OPT_MODEL,
    OPT_THREADS,
    OPT_DEVICE,
    OPT_TTA,
    OPT_JSON,
    OPT_HELP,
    OPT_VERSION
};
static const struct option long_options[] = {
    {"batch-size", required_argument, 0, OPT_BATCH}, {"min-accuracy", required_argument, 0, OPT_MIN},
    {"model-file", required_argument, 0, OPT_MODEL}, {"threads", required_argument, 0, OPT_THREADS},
    {"device", required_argument, 0, OPT_DEVICE},    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},        {"tta", required_argument, 0, OPT_TTA},
    {"json", required_argument, 0, OPT_JSON},        {0, 0, 0, 0},
};

static void usage_error(const struct err *e) { err_die(2, "%s (try --help)", e->msg); }

/* What a scoring counts: conf[t][p] images of true class t predicted as p. */
struct scores {
    long conf[CIFAR_CLASSES][CIFAR_CLASSES];
    long correct, total, per_class[CIFAR_CLASSES];
    int tta;
};

static void scores_sum(struct scores *s) {
    s->correct = s->total = 0;
    for (int t = 0; t < CIFAR_CLASSES; t++) {
        s->per_class[t] = 0;
        for (int p = 0; p < CIFAR_CLASSES; p++) s->per_class[t] += s->conf[t][p];
        s->correct += s->conf[t][t];
        s->total += s->per_class[t];
    }
}

/* The workshop's lines, then the confusion matrix. */
static void scores_print(const struct scores *s) {
    printf("Accuracy of the network on the %ld test images: %ld %%\n", s->total, 100 * s->correct / s->total);
    printf("Overall accuracy: %.2f%% (%ld of %ld; test-time augmentation level %d)\n",
           100.0 * s->correct / s->total, s->correct, s->total, s->tta);
    for (int t = 0; t < CIFAR_CLASSES; t++) {
        if (s->per_class[t])
            printf("Accuracy for class: %-5s is %.1f %%\n", cifar_short_names[t],
                   100.0 * s->conf[t][t] / s->per_class[t]);
        else printf("Accuracy for class: %-5s is n/a (no test images)\n", cifar_short_names[t]);
    }
    printf("Finished Testing\n");
    printf("Confusion matrix (rows: true class, columns: predicted class):\n%-6s", "");
    for (int p = 0; p < CIFAR_CLASSES; p++) printf("%6s", cifar_short_names[p]);
    printf("\n");
    for (int t = 0; t < CIFAR_CLASSES; t++) {
        printf("%-6s", cifar_short_names[t]);
        for (int p = 0; p < CIFAR_CLASSES; p++) printf("%6ld", s->conf[t][p]);
        printf("\n");
    }
}

/* The scores as one JSON object (accuracies in percent, null for a class without images). */
static int scores_write_json(const struct scores *s, const char *path, const char *model_file,
                             const struct run_info *info, const char *net, struct err *e) {
    struct strbuf b = {0};
    strbuf_printf(&b, "{\"model_file\":");
    strbuf_json_string(&b, model_file);
    strbuf_printf(&b, ",\"model\":");
    strbuf_json_string(&b, net);
    strbuf_printf(&b, ",\"run\":");
    strbuf_json_string(&b, info->run_id);
    strbuf_printf(&b, ",\"kernels\":");
    if (info->kernels[0]) strbuf_json_string(&b, info->kernels);
    else strbuf_printf(&b, "null");
    strbuf_printf(&b, ",\"epochs_completed\":%d,\"tta\":%d,\"total\":%ld,\"correct\":%ld,\"accuracy\":%.4f",
                  info->epochs_completed, s->tta, s->total, s->correct, 100.0 * s->correct / s->total);
    strbuf_printf(&b, ",\n \"classes\":[");
    for (int t = 0; t < CIFAR_CLASSES; t++) {
        strbuf_printf(&b, "%s{\"name\":\"%s\",\"total\":%ld,\"correct\":%ld,\"accuracy\":", t ? ",\n  " : "",
                      cifar_class_names[t], s->per_class[t], s->conf[t][t]);
        if (s->per_class[t]) strbuf_printf(&b, "%.4f}", 100.0 * s->conf[t][t] / s->per_class[t]);
        else strbuf_printf(&b, "null}");
    }
    strbuf_printf(&b, "],\n \"confusion\":[");
    for (int t = 0; t < CIFAR_CLASSES; t++)
        for (int p = 0; p < CIFAR_CLASSES; p++)
            strbuf_printf(&b, "%s%ld%s",
                          p   ? ","
                          : t ? ",\n  ["
                              : "[",
                          s->conf[t][p], p == CIFAR_CLASSES - 1 ? "]" : "");
    strbuf_printf(&b, "]}\n");
    int rc = file_write_atomic(path, b.s, b.len, e);
    strbuf_free(&b);
    return rc;
}

/* The command line's settings. */
struct test_options {
    int batch, threads, tta; /* tta -1: the recipe's level */
    enum device_kind device;
    double min_accuracy; /* -1: no gate */
    const char *model_file, *json_file, *data_path;
};

/* The flags into o; exits 2 with one line on a bad command line, 0 after --help and
 * --version. */
static void parse_args(int argc, char **argv, struct test_options *o) {
    *o = (struct test_options){.batch = 250,
                               .tta = -1,
                               .device = DEVICE_AUTO,
                               .min_accuracy = -1,
                               .model_file = "cifar10-model.safetensors"};
    struct err e = {""};
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", long_options, NULL)) != -1) {
        int bad = 0;
        switch (opt) {
        case OPT_BATCH: bad = options_int("--batch-size", optarg, 1, 65536, &o->batch, &e); break;
        case OPT_MIN:
            bad = options_double("--min-accuracy", optarg, 0.0, 0, &o->min_accuracy, &e);
            if (!bad && o->min_accuracy > 100) bad = err_set(&e, "--min-accuracy: %s is above 100", optarg);
            break;
        case OPT_MODEL: o->model_file = optarg; break;
        case OPT_JSON:
            o->json_file = optarg;
            if (!optarg[0]) bad = err_set(&e, "--json: empty file name");
            break;
        case OPT_TTA: bad = options_int("--tta", optarg, 0, EVALUATE_TTA_MAX, &o->tta, &e); break;
        case OPT_THREADS: bad = options_int("--threads", optarg, 1, 4096, &o->threads, &e); break;
        case OPT_DEVICE:
            if (device_parse(optarg, &o->device) != 0)
                bad = err_set(&e, "--device: '%s' is not cpu, cuda or auto", optarg);
            break;
        case OPT_HELP: fputs(usage, stdout); exit(0);
        case OPT_VERSION: printf("cifar10-test %s\n", CIFAR10_DP_VERSION); exit(0);
        case ':': bad = err_set(&e, "%s: missing value", argv[optind - 1]); break;
        default: bad = err_set(&e, "%s: unknown flag", argv[optind - 1]); break;
        }
        if (bad) usage_error(&e);
    }
    if (optind == argc) err_set(&e, "missing DATA (the CIFAR-10 directory or tarball)"), usage_error(&e);
    if (optind + 1 < argc) err_set(&e, "%s: unexpected extra argument", argv[optind + 1]), usage_error(&e);
    o->data_path = argv[optind];
}

/* The model file's network and weights into m (batch images per forward); exits with one line
 * when the file is not a model of a network this build knows. */
static void model_load(struct model *m, const struct kernels *k, const char *path, int batch,
                       struct run_info *info) {
    struct err e = {""};
    printf("loading model %s\n", path);
    const struct net_def *net = checkpoint_net(path, &e); /* the file names its network */
    if (!net) err_die(1, "%s", e.msg);
    CHECK(net->classes == CIFAR_CLASSES);
    struct err why;
    if (model_batch_check(net, batch, &why)) err_die(2, "--batch-size %d: %s", batch, why.msg);
    model_init(m, net, k, batch, 0);
    struct model_state st = checkpoint_state_alloc(m, 0);
    if (checkpoint_read(path, m, &st, info, &e) != 0) err_die(1, "%s", e.msg);
    model_set_state(m, st.params, NULL, st.buffers);
    checkpoint_state_free(&st);
    printf("model: %s of run %s after %d epochs%s%s, trained with %s\n", info->kind, info->run_id,
           info->epochs_completed, info->kernels[0] ? " on " : "", info->kernels, info->config);
}

int main(int argc, char **argv) {
    err_set_progname("cifar10-test");
    setvbuf(stdout, NULL, _IOLBF, 0);
    struct test_options o;
    parse_args(argc, argv, &o);
    char desc[768];
    const struct kernels *k = device_open_fp32(o.device, o.threads, desc, sizeof desc);
    struct err e = {""};
    printf("device: %s\n", desc);
    printf("reading %s\n", o.data_path);
    struct cifar_data data;
    if (cifar_load(o.data_path, CIFAR_TEST, &data, &e) != 0) err_die(1, "%s", e.msg);
    struct model m;
    struct run_info info;
    model_load(&m, k, o.model_file, o.batch, &info);

    if (o.tta < 0) { /* the level of the network's recipe */
        struct train_config recipe;
        config_defaults(&recipe);
        config_recipe(&recipe, m.net->name);
        o.tta = recipe.tta;
    }
    struct scores sc = {.tta = o.tta};
    evaluate_range(&m, &data.test, 0, data.test.n, o.tta, sc.conf);
    scores_sum(&sc);
    scores_print(&sc);
    if (o.json_file && scores_write_json(&sc, o.json_file, o.model_file, &info, m.net->name, &e) != 0)
        err_die(1, "%s", e.msg);
    double accuracy = 100.0 * sc.correct / sc.total;
    model_free(&m);
    cifar_free(&data);
    k->shutdown();
    if (o.min_accuracy >= 0 && accuracy < o.min_accuracy) {
        fprintf(stderr, "cifar10-test: accuracy %.2f%% is below --min-accuracy %g\n", accuracy,
                o.min_accuracy);
        return 3;
    }
    return 0;
}
