/* cifar10-train's command line (train_options.h). */
#include "train_options.h"

#include "../model/evaluate.h"
#include "../model/net.h"
#include "options.h"

#include <getopt.h>
#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: [mpirun -np N] cifar10-train [flags] DATA\n"
    "\n"
    "Trains a network on CIFAR-10 with data-parallel SGD over MPI ranks, with its recipe.\n"
    "DATA: a directory with data_batch_1..5.bin (and test_batch.bin), a directory containing\n"
    "cifar-10-batches-bin/, or cifar-10-binary.tar.gz itself.\n"
    "\n"
    "  --model NAME          airbench94 (default) or workshop-cnn; its recipe's defaults\n"
    "                        (below) for these flags:\n";
/* ... the recipes' table (config_print_recipes), then: */
static const char usage_rest[] =
    "                        --epochs: a fraction cuts the last epoch. --batch-size: in all,\n"
    "                        each rank takes N / ranks; per rank, the global batch grows with\n"
    "                        the ranks. per 1024: airbench's units, per 1024 images, decoupled\n"
    "                        from the batch. triangle: 0.2 -> 1 over 23% of the steps -> 0.07.\n"
    "                        --tta: 0, 1 (mirror) or 2 (mirror, 1-pixel translations).\n"
    "                        --whiten-images: the first layer is the whitening filter of the\n"
    "                        first N images (N >= 1); its bias trains the first epochs.\n"
    "  --seed N              seed of initialisation, data order and augmentation (default 1)\n"
    "  --no-augment          no random crop / flip\n"
    "  --no-eval             do not score test_batch.bin after every epoch\n"
    "  --print-freq N        print the running loss every N steps (default 5)\n"
    "  --model-file FILE     final model (default cifar10-model.safetensors)\n"
    "  --checkpoint-file F   checkpoint (default: FILE with .checkpoint.safetensors), written at\n"
    "                        every epoch's end, mid-epoch as --checkpoint-interval says, and on\n"
    "                        SIGTERM, SIGINT or SIGUSR1\n"
    "  --checkpoint-interval S\n"
    "                        seconds between mid-epoch checkpoints (default 300; 0: epoch ends\n"
    "                        only)\n"
    "  --metrics-file F      the run's metrics as JSON Lines, one record per printed loss and per\n"
    "                        epoch (default: FILE with .metrics.jsonl)\n"
    "  --tensorboard-dir DIR the same figures and the run's settings as TensorBoard event files\n"
    "                        in DIR (default: none)\n"
    "  --resume MODE         auto (default): continue from the checkpoint if its settings match;\n"
    "                        never: start over; require: fail without a checkpoint\n"
    "  --device D            cpu, cuda (one GPU per rank: node-local rank modulo the GPUs\n"
    "                        visible) or auto (default: cuda when a GPU is visible, else cpu)\n"
    "  --precision P         the convolutions' and linear layers' products: fp32, bf16 (bfloat16\n"
    "                        operands, float sums; fast with AVX512_BF16, the same sums on AVX2\n"
    "                        FMA without it) or auto (default: bf16 on AMX tiles or bf16\n"
    "                        tensor cores where the recipe allows it, as airbench94's does)\n"
    "  --collective-timeout S\n"
    "                        a collective (the gradient allreduce, ...) that waits longer than S\n"
    "                        seconds ends the job with 5 (default auto: 600 for start-up and the\n"
    "                        first 10 steps, then the larger of 60 and 50 median step times)\n"
    "  --bucket-mb MB        gradient allreduce bucket size, overlapped with backward\n"
    "                        (default 2; 0: one allreduce after the whole backward)\n"
    "  --threads N           threads per rank (default: the CPUs this process may use, divided\n"
    "                        among ranks that share them)\n"
    "  --help, --version\n"
    "\n"
    "SIGTERM, SIGINT or SIGUSR1 to any rank: every rank stops after the step in progress (or the\n"
    "next), rank 0 writes the checkpoint, and the job exits with 4; the same command resumes.\n"
    "mpirun forwards SIGUSR1 to the ranks at once; its own SIGTERM reaches them only after\n"
    "odls_base_sigkill_timeout seconds (default 1), and SIGKILL as long after that.\n"
    "\n"
    "Exit codes: 0 done, 1 runtime error (data, files, resume mismatch, --device=cuda without a\n"
    "GPU, --precision=bf16 without AVX512_BF16 or AVX2), 2 bad command line, 4 stopped by a signal, with\n"
    "the checkpoint written (resumable), 5 a collective timed out (a rank, host or link lost).\n";

/* The exit code of a run stopped by SIGTERM or SIGINT after writing its checkpoint. */
enum {
    OPT_MODEL_NAME = 255,
    OPT_SMOOTHING = 300,
    OPT_LOOKAHEAD,
    OPT_TTA,
    OPT_WHITEN,
    OPT_EPOCHS = 256,
    OPT_BATCH,
    OPT_LR,
    OPT_SCHEDULE,
    OPT_WARMUP,
    OPT_MOMENTUM,
    OPT_WD,
    OPT_SEED,
    OPT_NO_AUGMENT,
    OPT_NO_EVAL,
    OPT_PRINT_FREQ,
    OPT_MODEL,
    OPT_CHECKPOINT,
    OPT_METRICS,
    OPT_TENSORBOARD,
    OPT_RESUME,
    OPT_THREADS,
    OPT_DEVICE,
    OPT_BUCKET,
    OPT_HELP,
    OPT_VERSION,
    OPT_PRECISION,
    OPT_CHECKPOINT_INTERVAL,
    OPT_COLLECTIVE_TIMEOUT
};

static const struct option long_options[] = {
    {"model", required_argument, 0, OPT_MODEL_NAME},
    {"label-smoothing", required_argument, 0, OPT_SMOOTHING},
    {"lookahead", required_argument, 0, OPT_LOOKAHEAD},
    {"tta", required_argument, 0, OPT_TTA},
    {"whiten-images", required_argument, 0, OPT_WHITEN},
    {"epochs", required_argument, 0, OPT_EPOCHS},
    {"batch-size", required_argument, 0, OPT_BATCH},
    {"learning-rate", required_argument, 0, OPT_LR},
    {"lr-schedule", required_argument, 0, OPT_SCHEDULE},
    {"warmup-epochs", required_argument, 0, OPT_WARMUP},
    {"momentum", required_argument, 0, OPT_MOMENTUM},
    {"weight-decay", required_argument, 0, OPT_WD},
    {"seed", required_argument, 0, OPT_SEED},
    {"no-augment", no_argument, 0, OPT_NO_AUGMENT},
    {"no-eval", no_argument, 0, OPT_NO_EVAL},
    {"print-freq", required_argument, 0, OPT_PRINT_FREQ},
    {"model-file", required_argument, 0, OPT_MODEL},
    {"checkpoint-file", required_argument, 0, OPT_CHECKPOINT},
    {"checkpoint-interval", required_argument, 0, OPT_CHECKPOINT_INTERVAL},
    {"collective-timeout", required_argument, 0, OPT_COLLECTIVE_TIMEOUT},
    {"metrics-file", required_argument, 0, OPT_METRICS},
    {"tensorboard-dir", required_argument, 0, OPT_TENSORBOARD},
    {"resume", required_argument, 0, OPT_RESUME},
    {"threads", required_argument, 0, OPT_THREADS},
    {"device", required_argument, 0, OPT_DEVICE},
    {"bucket-mb", required_argument, 0, OPT_BUCKET},
    {"precision", required_argument, 0, OPT_PRECISION},
    {"help", no_argument, 0, OPT_HELP},
    {"version", no_argument, 0, OPT_VERSION},
    {0, 0, 0, 0},
};

/* The recipe of --model (the last one given), before the other flags override it. */
static int parse_model(int argc, char **argv, struct train_config *c, struct err *e) {
    config_defaults(c);
    opterr = 0;
    optind = 1;
    int opt;
    const char *model = NULL;
    while ((opt = getopt_long(argc, argv, ":", long_options, NULL)) != -1)
        if (opt == OPT_MODEL_NAME) model = optarg;
    if (!model) return 0;
    const struct net_def *net = net_find(model);
    if (!net) {
        char known[256];
        net_known_names(known, sizeof known);
        return err_set(e, "--model: '%s' is not a network this build knows (%s)", model, known);
    }
    config_recipe(c, net->name);
    return 0;
}

/* One flag's value into c: 0, or 2 with one line in e. */
static int parse_flag(int opt, const char *flag, const char *arg, struct train_config *c, struct err *e) {
    int rc = 0;
    switch (opt) {
    case OPT_MODEL_NAME: break; /* parse_model */
    case OPT_SMOOTHING:
        rc = options_double(flag, arg, 0.0, 0, &c->label_smoothing, e);
        if (!rc && c->label_smoothing > 1) rc = err_set(e, "%s: %s is above 1", flag, arg);
        break;
    case OPT_LOOKAHEAD: rc = options_int(flag, arg, 0, 1000000, &c->lookahead, e); break;
    case OPT_TTA: rc = options_int(flag, arg, 0, EVALUATE_TTA_MAX, &c->tta, e); break;
    case OPT_WHITEN:
        if (c->whiten_images == 0) rc = err_set(e, "%s: %s has no whitening layer", flag, c->model);
        else rc = options_int(flag, arg, 1, 1 << 30, &c->whiten_images, e);
        break;
    case OPT_EPOCHS:
        rc = options_double(flag, arg, 0.0, 1, &c->epochs, e);
        if (!rc && c->epochs > 1000000) rc = err_set(e, "%s: %s is above 1000000", flag, arg);
        break;
    case OPT_BATCH: rc = options_int(flag, arg, 1, 65536, &c->batch_size, e); break;
    case OPT_LR: rc = options_double(flag, arg, 0.0, 1, &c->learning_rate, e); break;
    case OPT_SCHEDULE:
        if (config_schedule_parse(arg, &c->schedule) != 0)
            rc = err_set(e, "%s: '%s' is not cosine, triangle or constant", flag, arg);
        break;
    case OPT_WARMUP: rc = options_double(flag, arg, 0.0, 0, &c->warmup_epochs, e); break;
    case OPT_MOMENTUM: rc = options_double(flag, arg, 0.0, 0, &c->momentum, e); break;
    case OPT_WD: rc = options_double(flag, arg, 0.0, 0, &c->weight_decay, e); break;
    case OPT_SEED: rc = options_u64(flag, arg, &c->seed, e); break;
    case OPT_NO_AUGMENT: c->augment = AUGMENT_NONE; break;
    case OPT_NO_EVAL: c->eval = 0; break;
    case OPT_PRINT_FREQ: rc = options_int(flag, arg, 1, 1 << 30, &c->print_freq, e); break;
    case OPT_MODEL: c->model_file = arg; break;
    case OPT_CHECKPOINT: c->checkpoint_file = arg; break;
    case OPT_CHECKPOINT_INTERVAL: rc = options_double(flag, arg, 0.0, 0, &c->checkpoint_interval, e); break;
    case OPT_COLLECTIVE_TIMEOUT:
        if (strcmp(arg, "auto") == 0) c->collective_timeout = 0;
        else rc = options_double(flag, arg, 0.0, 1, &c->collective_timeout, e);
        break;
    case OPT_METRICS: c->metrics_file = arg; break;
    case OPT_TENSORBOARD: c->tensorboard_dir = arg; break;
    case OPT_RESUME:
        if (strcmp(arg, "auto") == 0) c->resume = RESUME_AUTO;
        else if (strcmp(arg, "never") == 0) c->resume = RESUME_NEVER;
        else if (strcmp(arg, "require") == 0) c->resume = RESUME_REQUIRE;
        else rc = err_set(e, "%s: '%s' is not auto, never or require", flag, arg);
        break;
    case OPT_THREADS: rc = options_int(flag, arg, 1, 4096, &c->threads, e); break;
    case OPT_DEVICE:
        if (device_parse(arg, &c->device) != 0)
            rc = err_set(e, "%s: '%s' is not cpu, cuda or auto", flag, arg);
        break;
    case OPT_PRECISION:
        if (precision_parse(arg, &c->precision) != 0)
            rc = err_set(e, "%s: '%s' is not fp32, bf16 or auto", flag, arg);
        break;
    case OPT_BUCKET:
        rc = options_double(flag, arg, 0.0, 0, &c->bucket_mb, e);
        if (!rc && c->bucket_mb > 1024) rc = err_set(e, "%s: %s is above 1024", flag, arg);
        break;
    case ':': rc = err_set(e, "%s: missing value", flag); break;
    default: rc = err_set(e, "%s: unknown flag", flag); break;
    }
    return rc ? 2 : 0;
}

/* DATA, the one argument after the flags, and the file names no flag may leave empty. */
static int parse_rest(int argc, char **argv, struct train_config *c, struct err *e) {
    if (optind == argc) return err_set(e, "missing DATA (the CIFAR-10 directory or tarball)"), 2;
    if (optind + 1 < argc)
        return err_set(e, "%s: unexpected extra argument (DATA is %s)", argv[optind + 1], argv[optind]), 2;
    c->data = argv[optind];
    if (!c->model_file[0]) return err_set(e, "--model-file: empty file name"), 2;
    if (c->metrics_file && !c->metrics_file[0]) return err_set(e, "--metrics-file: empty file name"), 2;
    if (c->tensorboard_dir && !c->tensorboard_dir[0])
        return err_set(e, "--tensorboard-dir: empty directory name"), 2;
    return 0;
}

int train_options_parse(int argc, char **argv, struct train_config *c, int rank, struct err *e) {
    if (parse_model(argc, argv, c, e) != 0) return 2;
    opterr = 0;
    optind = 1;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", long_options, NULL)) != -1) {
        if (opt == OPT_HELP || opt == OPT_VERSION) {
            if (rank == 0 && opt == OPT_HELP) {
                fputs(usage, stdout);
                config_print_recipes(stdout);
                fputs(usage_rest, stdout);
            }
            if (rank == 0 && opt == OPT_VERSION) printf("cifar10-train %s\n", CIFAR10_DP_VERSION);
            return -1;
        }
        /* The flag as the user wrote it for '?' and ':', else its full name (getopt takes
         * prefixes). */
        const char *flag = optind > 1 ? argv[optind - 1] : "?";
        char name[64];
        if (opt != '?' && opt != ':') {
            for (const struct option *o = long_options; o->name; o++)
                if (o->val == opt) snprintf(name, sizeof name, "--%s", o->name);
            flag = name;
        }
        if (parse_flag(opt, flag, optarg, c, e) != 0) return 2;
    }
    return parse_rest(argc, argv, c, e);
}
