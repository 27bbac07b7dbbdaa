/* cifar10-predict: a trained model on your own pictures (PNG, JPEG): each brought to 32x32 as
 * torchvision's Resize(32) + CenterCrop(32) would (data/image.h), normalised as in training, and
 * scored in eval mode; prints the top classes with their probabilities (softmax of the logits,
 * after test-time augmentation when asked). */
#include "../common/err.h"
#include "../data/cifar.h"
#include "../data/image.h"
#include "../io/checkpoint.h"
#include "../io/json.h"
#include "../model/config.h"
#include "../model/evaluate.h"
#include "../model/model.h"
#include "device.h"
#include "options.h"

#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: cifar10-predict [--top K] [--tta L] [--json] [--max-pixels N] [--device D]\n"
    "                       [--threads N] --model-file FILE IMAGE...\n"
    "\n"
    "Classifies PNG and JPEG pictures with a model file written by cifar10-train: each picture\n"
    "is brought to 32x32 as torchvision's Resize(32) + CenterCrop(32) would (EXIF orientation\n"
    "applied), normalised with the model file's own metadata, and scored.\n"
    "\n"
    "  --model-file FILE     model to use (default cifar10-model.safetensors)\n"
    "  --top K               classes to print per picture, most probable first (default 3)\n"
    "  --tta L               test-time augmentation: 0 none (default), 1 mirror, 2 mirror and\n"
    "                        1-pixel translations (the probabilities are the softmax of the\n"
    "                        weighted logits)\n"
    "  --json                one JSON document on stdout instead of lines\n"
    "  --max-pixels N        refuse pictures with more pixels than N (default 64000000)\n"
    "  --device D            cpu, cuda or auto (default)\n"
    "  --threads N           threads (default: the CPUs this process may use)\n"
    "  --help, --version\n"
    "\n"
    "A picture that cannot be read gets one line on stderr naming it; the others are still\n"
    "classified. Exit codes: 0 every picture classified, 1 a picture or the model could not be\n"
    "read, 2 bad command line.\n";

enum {
    OPT_MODEL = 256,
    OPT_TOP,
    OPT_TTA,
    OPT_JSON,
    OPT_MAX_PIXELS,
    OPT_DEVICE,
    OPT_THREADS,
    OPT_HELP,
    OPT_VERSION
};
static const struct option long_options[] = {
    {"model-file", required_argument, 0, OPT_MODEL},
    {"top", required_argument, 0, OPT_TOP},
    {"tta", required_argument, 0, OPT_TTA},
    {"json", no_argument, 0, OPT_JSON},
    {"max-pixels", required_argument, 0, OPT_MAX_PIXELS},
    {"device", required_argument, 0, OPT_DEVICE},
    {"threads", required_argument, 0, OPT_THREADS},
    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

struct options {
    const char *model_file;
    int top, tta, json, threads;
    long max_pixels;
    enum device_kind device;
};

static void usage_error(const struct err *e) { err_die(2, "%s (try --help)", e->msg); }

/* Flags into o; returns the index of the first IMAGE argument. Exits on --help, --version and
 * usage errors. */
static int parse_args(int argc, char **argv, struct options *o) {
    *o = (struct options){"cifar10-model.safetensors", 3, 0, 0, 0, 64000000, DEVICE_AUTO};
    struct err e = {""};
    int opt, pixels;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":", long_options, NULL)) != -1) {
        int rc = 0;
        switch (opt) {
        case OPT_MODEL: o->model_file = optarg; break;
        case OPT_TOP: rc = options_int("--top", optarg, 1, CIFAR_CLASSES, &o->top, &e); break;
        case OPT_TTA: rc = options_int("--tta", optarg, 0, EVALUATE_TTA_MAX, &o->tta, &e); break;
        case OPT_JSON: o->json = 1; break;
        case OPT_MAX_PIXELS:
            rc = options_int("--max-pixels", optarg, 1, 1 << 30, &pixels, &e);
            o->max_pixels = pixels;
            break;
        case OPT_DEVICE:
            if (device_parse(optarg, &o->device) != 0)
                rc = err_set(&e, "--device: '%s' is not cpu, cuda or auto", optarg);
            break;
        case OPT_THREADS: rc = options_int("--threads", optarg, 1, 4096, &o->threads, &e); break;
        case OPT_HELP: fputs(usage, stdout); exit(0);
        case OPT_VERSION: printf("cifar10-predict %s\n", CIFAR10_DP_VERSION); exit(0);
        case ':': rc = err_set(&e, "%s: missing value", argv[optind - 1]); break;
        default: rc = err_set(&e, "%s: unknown flag", argv[optind - 1]); break;
        }
        if (rc) usage_error(&e);
    }
    if (optind == argc) err_set(&e, "no IMAGE given"), usage_error(&e);
    return optind;
}

/* The pictures as CIFAR-10 records (label byte 0, then the pixels); ok[i] says which loaded. */
struct pictures {
    int n, loaded;
    uint8_t *records;         /* [loaded][1 + 3072] */
    const uint8_t **pointers; /* [loaded] -> records, for struct cifar_set */
    int *ok;                  /* [n]: 1 loaded, 0 failed */
    struct err *errors;       /* [n]: why a picture failed */
};

static void pictures_load(char **files, int n, long max_pixels, struct pictures *p) {
    *p = (struct pictures){n,
                           0,
                           XALLOC((size_t)n * 3073),
                           XALLOC((size_t)n * sizeof(uint8_t *)),
                           XALLOC((size_t)n * sizeof(int)),
                           XALLOC((size_t)n * sizeof(struct err))};
    for (int i = 0; i < n; i++) {
        struct image img;
        p->ok[i] = image_load(files[i], max_pixels, &img, &p->errors[i]) == 0;
        if (!p->ok[i]) {
            fprintf(stderr, "cifar10-predict: %s\n", p->errors[i].msg);
            continue;
        }
        uint8_t *rec = p->records + (size_t)p->loaded * 3073;
        rec[0] = 0;
        image_to_cifar(&img, rec + 1);
        image_free(&img);
        p->pointers[p->loaded++] = rec;
    }
}

/* softmax(z) in double into prob[classes], and the classes ordered by it into order[classes]. */
static void rank_classes(const float *z, int classes, double *prob, int *order) {
    double max = z[0], sum = 0;
    for (int j = 1; j < classes; j++) max = z[j] > max ? z[j] : max;
    for (int j = 0; j < classes; j++) sum += prob[j] = exp((double)z[j] - max);
    for (int j = 0; j < classes; j++) prob[j] /= sum, order[j] = j;
    for (int a = 1; a < classes; a++) /* insertion sort, stable: the lower class first on ties */
        for (int b = a; b > 0 && prob[order[b]] > prob[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1], order[b - 1] = t;
        }
}

static void print_text(const char *file, const double *prob, const int *order, int top) {
    printf("%s:", file);
    for (int j = 0; j < top; j++)
        printf("%s %s %.2f %%", j ? "," : "", cifar_class_names[order[j]], 100 * prob[order[j]]);
    printf("\n");
}

static void json_picture(struct strbuf *b, const char *file, const double *prob, const int *order, int top) {
    strbuf_printf(b, "{\"file\":");
    strbuf_json_string(b, file);
    strbuf_printf(b, ",\"top\":[");
    for (int j = 0; j < top; j++)
        strbuf_printf(b, "%s{\"class\":\"%s\",\"probability\":%.9g}", j ? "," : "",
                      cifar_class_names[order[j]], prob[order[j]]);
    strbuf_printf(b, "],\"probabilities\":{");
    for (int c = 0; c < CIFAR_CLASSES; c++)
        strbuf_printf(b, "%s\"%s\":%.9g", c ? "," : "", cifar_class_names[c], prob[c]);
    strbuf_printf(b, "}}");
}

/* A failed picture's JSON entry. */
static void json_failed(struct strbuf *b, const char *file, const struct err *e) {
    strbuf_printf(b, "{\"file\":");
    strbuf_json_string(b, file);
    strbuf_printf(b, ",\"error\":");
    strbuf_json_string(b, e->msg);
    strbuf_printf(b, "}");
}

/* Scores the loaded pictures and prints every picture in the order given: a line each, or one
 * JSON document (failed pictures included) with --json. */
static void predict(struct model *m, const struct options *o, char **files, const struct pictures *p) {
    float *logits = XALLOC(((size_t)p->loaded + 1) * CIFAR_CLASSES * sizeof(float));
    struct cifar_set set = {.n = p->loaded, .records = p->pointers};
    if (p->loaded) evaluate_logits(m, &set, 0, p->loaded, o->tta, logits);
    struct strbuf b = {0};
    if (o->json) {
        strbuf_printf(&b, "{\"model_file\":");
        strbuf_json_string(&b, o->model_file);
        strbuf_printf(&b, ",\"model\":\"%s\",\"tta\":%d,\"images\":[", m->net->name, o->tta);
    }
    for (int i = 0, k = 0; i < p->n; i++) {
        if (o->json && i) strbuf_printf(&b, ",\n ");
        if (!p->ok[i]) {
            if (o->json) json_failed(&b, files[i], &p->errors[i]);
            continue;
        }
        double prob[CIFAR_CLASSES];
        int order[CIFAR_CLASSES];
        rank_classes(logits + (size_t)k++ * CIFAR_CLASSES, CIFAR_CLASSES, prob, order);
        if (o->json) json_picture(&b, files[i], prob, order, o->top);
        else print_text(files[i], prob, order, o->top);
    }
    if (o->json) {
        strbuf_printf(&b, "]}\n");
        fputs(b.s, stdout);
    }
    strbuf_free(&b);
    free(logits);
}

int main(int argc, char **argv) {
    err_set_progname("cifar10-predict");
    struct options o;
    int first = parse_args(argc, argv, &o);
    char desc[768];
    const struct kernels *k = device_open_fp32(o.device, o.threads, desc, sizeof desc);
    struct err e = {""};
    const struct net_def *net = checkpoint_net(o.model_file, &e);
    if (!net || checkpoint_check_input(o.model_file, &e) != 0) err_die(1, "%s", e.msg);
    CHECK(net->classes == CIFAR_CLASSES);
    struct pictures p;
    pictures_load(argv + first, argc - first, o.max_pixels, &p);
    struct model m;
    model_init(&m, net, k, 64, 0);
    struct model_state st = checkpoint_state_alloc(&m, 0);
    struct run_info info;
    if (checkpoint_read(o.model_file, &m, &st, &info, &e) != 0) err_die(1, "%s", e.msg);
    model_set_state(&m, st.params, NULL, st.buffers);
    predict(&m, &o, argv + first, &p);
    int status = p.loaded == p.n ? 0 : 1;
    free(p.records), free(p.pointers), free(p.ok), free(p.errors);
    checkpoint_state_free(&st);
    model_free(&m);
    k->shutdown();
    return status;
}
