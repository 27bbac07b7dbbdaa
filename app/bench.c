/* cifar10-bench: training-throughput benchmark of the workshop CNN (CPU or CUDA backend).
 *
 *   [mpirun -np N] cifar10-bench [--batch-size N] [--threads N] [--steps N] [--runs N] ...
 *
 * Times full training steps exactly as cifar10-train runs them (forward, backward, one
 * MPI_Allreduce of the gradients, SGD update) on random images, after warm-up, and prints the
 * median throughput of several runs, a per-layer breakdown with achieved GFLOP/s, the machine's
 * FP32 FMA peak measured here per instruction set, and peak resident memory. The last line is
 * machine-readable ("result: key=value ...") for scripts/bench.sh. The per-layer times are
 * timer marks on the compute queue (model_timing): on the CPU the timed runs carry them; on a
 * GPU, where reading a step's marks waits for it, as many steps again are timed one at a time
 * after the timed runs, so the throughput stays that of the pipelined steps. The step time
 * includes the input upload and pipeline exactly as in training. */
#include "../common/cpus.h"
#include "../common/err.h"
#include "../common/rng.h"
#include "../dist/dist.h"
#include "../model/batches.h"
#include "../model/config.h"
#include "../model/model.h"
#include "device.h"
#include "options.h"

#if CIFAR10_CUDA
#include <nvtx3/nvToolsExt.h> /* header-only: a no-op unless a profiler is attached */
#endif
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

static const char usage[] =
    "usage: [mpirun -np N] cifar10-bench [flags]\n"
    "\n"
    "Times full training steps (forward, backward, allreduce, SGD update) of a network.\n"
    "\n"
    "  --model NAME     the network: workshop-cnn (default) or airbench94\n"
    "  --batch-size N   images per rank per step (default 128)\n"
    "  --threads N      threads per rank (default: this process's CPUs / ranks sharing them)\n"
    "  --warmup N       untimed steps first (default 3)\n"
    "  --steps N        steps per timed run (default 5)\n"
    "  --runs N         timed runs; the median is reported (default 5)\n"
    "  --isa NAME       vector path: avx512, avx2 or generic (default: best this CPU has)\n"
    "  --bf16-isa NAME  bf16 path (--precision bf16): amx, avx512bf16, avx2 or generic (default:\n"
    "                   best this CPU has); amx-im2col: AMX tiles, im2col where amx is direct;\n"
    "                   amx times its tiles' loops per layer at the first step, the same\n"
    "                   bits; amx-prefetch, amx-resident, amx-noprefetch fix one of them;\n"
    "                   amx-cost: amx's code without its tile instructions, a timing tool;\n"
    "                   amx-emulated: the tiles' plain-C twin (any CPU; the tests' path)\n"
    "  --device D       cpu, cuda or auto (default: cuda when a GPU is visible)\n"
    "  --precision P    fp32, bf16 or auto: the products of the convolutions and linear layers\n"
    "                   (default fp32; auto: bf16 on AMX tiles, on a GPU with bf16 tensor\n"
    "                   cores; bf16 without AVX512_BF16: the same sums on AVX2 FMA)\n"
    "  --bucket-mb MB   gradient allreduce bucket size (default 2; 0: one after backward)\n"
    "  --first-bias-stopped\n"
    "                   time the steps after the recipe's first epochs, once the first layer's\n"
    "                   bias no longer trains (airbench94: 3 of its 9.9 epochs train it)\n"
    "  --help\n";

struct bench_config {
    int batch, threads, warmup, steps, runs, first_bias_stopped;
    const char *isa, *bf16_isa, *model;
    enum device_kind device;
    enum precision precision;
    double bucket_mb;
};

enum {
    OPT_MODEL = 255,
    OPT_BATCH = 256,
    OPT_THREADS,
    OPT_WARMUP,
    OPT_STEPS,
    OPT_RUNS,
    OPT_ISA,
    OPT_BF16_ISA,
    OPT_DEVICE,
    OPT_BUCKET,
    OPT_PRECISION,
    OPT_FIRST_BIAS,
    OPT_HELP
};
static const struct option long_options[] = {{"batch-size", required_argument, 0, OPT_BATCH},
                                             {"threads", required_argument, 0, OPT_THREADS},
                                             {"warmup", required_argument, 0, OPT_WARMUP},
                                             {"steps", required_argument, 0, OPT_STEPS},
                                             {"runs", required_argument, 0, OPT_RUNS},
                                             {"isa", required_argument, 0, OPT_ISA},
                                             {"device", required_argument, 0, OPT_DEVICE},
                                             {"bucket-mb", required_argument, 0, OPT_BUCKET},
                                             {"model", required_argument, 0, OPT_MODEL},
                                             {"help", no_argument, 0, OPT_HELP},
                                             {"precision", required_argument, 0, OPT_PRECISION},
                                             {"bf16-isa", required_argument, 0, OPT_BF16_ISA},
                                             {"first-bias-stopped", no_argument, 0, OPT_FIRST_BIAS},
                                             {0, 0, 0, 0}};

/* One flag's value into c (flag: as the user wrote it): 0, or -1 with one line in e. */
static int parse_flag(int opt, const char *flag, const char *arg, struct bench_config *c, struct err *e) {
    switch (opt) {
    case OPT_BATCH: return options_int("--batch-size", arg, 1, 65536, &c->batch, e);
    case OPT_THREADS: return options_int("--threads", arg, 1, 4096, &c->threads, e);
    case OPT_WARMUP: return options_int("--warmup", arg, 0, 1000000, &c->warmup, e);
    case OPT_STEPS: return options_int("--steps", arg, 1, 1000000, &c->steps, e);
    case OPT_RUNS: return options_int("--runs", arg, 1, 1000, &c->runs, e);
    case OPT_ISA: c->isa = arg; return 0;
    case OPT_BF16_ISA: c->bf16_isa = arg; return 0;
    case OPT_MODEL:
        c->model = arg;
        if (!net_find(arg)) {
            char known[256];
            net_known_names(known, sizeof known);
            return err_set(e, "--model: '%s' is not a network this build knows (%s)", arg, known);
        }
        return 0;
    case OPT_DEVICE:
        if (device_parse(arg, &c->device) != 0)
            return err_set(e, "--device: '%s' is not cpu, cuda or auto", arg);
        return 0;
    case OPT_PRECISION:
        if (precision_parse(arg, &c->precision) != 0)
            return err_set(e, "--precision: '%s' is not fp32, bf16 or auto", arg);
        return 0;
    case OPT_BUCKET: return options_double("--bucket-mb", arg, 0.0, 0, &c->bucket_mb, e);
    case OPT_FIRST_BIAS: c->first_bias_stopped = 1; return 0;
    case ':': return err_set(e, "%s: missing value", flag);
    default: return err_set(e, "%s: unknown flag", flag);
    }
}

/* The flags into c: 0, -1 after --help, 2 with one line in e on a bad command line. */
static int parse(int argc, char **argv, struct bench_config *c, int rank, struct err *e) {
    *c = (struct bench_config){.batch = 128,
                               .warmup = 3,
                               .steps = 5,
                               .runs = 5,
                               .bucket_mb = 2.0,
                               .model = "workshop-cnn",
                               .precision = PRECISION_FP32};
    opterr = 0;
    int opt;
    while ((opt = getopt_long(argc, argv, ":", long_options, NULL)) != -1) {
        if (opt == OPT_HELP) {
            if (rank == 0) fputs(usage, stdout);
            return -1;
        }
        if (parse_flag(opt, argv[optind - 1], optarg, c, e) != 0) return 2;
    }
    if (optind < argc) return err_set(e, "%s: unexpected argument", argv[optind]), 2;
    if (c->isa && kernels_cpu_select(c->isa) != 0)
        return err_set(e, "--isa: '%s' is not a vector path this CPU supports", c->isa), 2;
    if (c->bf16_isa && kernels_cpu_select_bf16(c->bf16_isa) != 0)
        return err_set(e, "--bf16-isa: '%s' is not a bf16 path this CPU supports", c->bf16_isa), 2;
    struct err why;
    if (model_batch_check(net_find(c->model), c->batch, &why))
        return err_set(e, "--batch-size %d: %s", c->batch, why.msg), 2;
    return 0;
}

static int compare_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sum of x over ranks. */
static double sum_ranks(double x) {
    dist_allreduce_sum_double(&x, 1);
    return x;
}

static const char *const isas[] = {"avx512", "avx2", "generic"};

/* One benchmark process: its settings, device, measured peaks, model and timings. */
struct bench {
    struct bench_config c;
    struct dist d;
    int threads, on_cpu, bf16;
    int graphs; /* CIFAR10_CUDA_GRAPHS (device_graphs_wanted) */
    const struct kernels *k;
    const char *isa;           /* the vector path in use */
    double peak_one[3];        /* FP32 FMA peak of isas[i]: one thread alone (-1: not here) */
    double peak_all[3];        /* ... all threads of all ranks at once (what a step can use) */
    double bf16_one, bf16_all; /* the bf16 path's peak likewise (-1: no bf16 instructions) */
    double peak;               /* the peak of the path in use, all ranks */
    struct model m;
    struct batches q;
    struct dist_grads *grads;
    double *run_seconds;  /* [c.runs], sorted */
    double median;        /* seconds of a timed run */
    double tile_products; /* TDPBF16PS a timed step of this rank, emulated or left out (amx-cost) */
};

/* The FMA peak of every path this CPU has, and the bf16 peak where it has bf16 instructions
 * (collective). Not measured for GPU runs, which do not use them. */
static void measure_peaks(struct bench *b) {
    for (int i = 0; i < 3; i++) b->peak_one[i] = b->peak_all[i] = -1.0;
    b->bf16_one = b->bf16_all = b->peak = -1.0;
    for (int i = 0; b->on_cpu && i < 3; i++) {
        b->peak_one[i] = b->d.rank == 0 ? kernels_cpu_fma_peak(isas[i], 1, 0.3) : 0.0;
        dist_bcast(&b->peak_one[i], sizeof b->peak_one[i], 0);
        double mine = kernels_cpu_fma_peak(isas[i], b->threads, 0.3);
        b->peak_all[i] = mine < 0 ? -1.0 : sum_ranks(mine);
    }
    if (b->on_cpu && kernels_cpu_bf16_native()) {
        b->bf16_one = b->d.rank == 0 ? kernels_cpu_bf16_peak(1, 0.3) : 0.0;
        dist_bcast(&b->bf16_one, sizeof b->bf16_one, 0);
        b->bf16_all = sum_ranks(kernels_cpu_bf16_peak(b->threads, 0.3));
    }
    /* A cpu-bf16 run is measured against the bf16 peak; a bf16 path without bf16 instructions
     * (avx2) runs on float FMA: its peak is that path's. */
    if (b->bf16) b->peak = b->bf16_all;
    for (int i = 0; i < 3 && b->peak < 0; i++)
        if (strcmp(isas[i], b->isa) == 0) b->peak = b->peak_all[i];
}

/* The model as cifar10-train has it after the recipe's first epochs (--first-bias-stopped). */
static void stop_first_bias(struct model *m, const char *model) {
    struct train_config recipe;
    config_defaults(&recipe);
    config_recipe(&recipe, model);
    int b = m->layers[0].bias,
        stops = recipe.first_bias_epochs > 0 && b >= 0 && m->tensors[b].home == HOME_PARAMS;
    dist_agree(stops ? 0 : 2,
               "--first-bias-stopped: this network's recipe trains its first layer's bias throughout");
    model_stop_training(m, b);
}

/* Random images and labels, different per rank, in both slots of q, the first submitted: they
 * then alternate, one batch queued ahead as in cifar10-train (train_step). */
static void fill_random(struct batches *q, int batch, int classes, int rank) {
    struct rng r = rng_make(1, RNG_INIT, 1000 + (uint64_t)rank, 0);
    for (int slot = 0; slot < 2; slot++) {
        struct batch *in = &q->host[slot];
        for (size_t i = 0; i < (size_t)batch * 3 * 32 * 32; i++)
            in->img[i] = (unsigned char)rng_below(&r, 256);
        for (int i = 0; i < batch; i++) {
            in->geom[3 * i] = (int)rng_below(&r, 9), in->geom[3 * i + 1] = (int)rng_below(&r, 9);
            in->geom[3 * i + 2] = (int)rng_below(&r, 2);
            in->labels[i] = (int)rng_below(&r, (uint32_t)classes);
        }
    }
    batches_next(q); /* slot 0 */
    batches_submit(q, batch);
}

/* One training step, as cifar10-train does it (the next batch is submitted while the device
 * works; one rank waits for no step, its results left in the batch slot). Small lr: the
 * weights stay sane for long benchmarks and no step takes a different path (NaNs, denormals). */
static void train_step(struct bench *b) {
    const struct model_update u = {.sgd = {1e-4f, 0.9f, 5e-4f, 1.0f / (float)b->d.world, 1.0f, 0}};
    struct model_input in;
    int slot = batches_take(&b->q, &in);
    if (b->m.grads_ready) in.stats = NULL, model_forward_backward(&b->m, &in);
    else model_train_step(&b->m, &in, &u); /* one rank: the update in the step's graph */
    batches_release(&b->q, slot);
    batches_next(&b->q); /* the other slot, its contents again: the host-side gather is not timed */
    batches_submit(&b->q, b->c.batch);
    if (!b->m.grads_ready) return;
    float stats[MODEL_STATS];
    dist_grads_finish(b->grads, stats);
    model_update(&b->m, &u); /* after the reduction */
}

static void zero_layer_times(struct model *m) {
    for (int i = 0; i < m->nlayers; i++) m->layers[i].seconds[0] = m->layers[i].seconds[1] = 0.0;
}

/* The warm-up, then c.runs timed runs of c.steps steps: their seconds (sorted) and median;
 * on the CPU, the layers' times of the timed runs too. */
static void time_runs(struct bench *b) {
    const struct bench_config *c = &b->c;
    b->run_seconds = XALLOC((size_t)c->runs * sizeof(double));
    unsigned long long products = 0;
    for (int run = -1; run < c->runs; run++) {
        if (run == 0 && b->on_cpu) model_timing(&b->m, 1), zero_layer_times(&b->m);
        if (run == 0) products = kernels_cpu_tile_products();
        dist_barrier();
#if CIFAR10_CUDA
        /* The last timed run as NVTX range "timed": what `ncu --nvtx --nvtx-include timed/`
         * profiles (scripts/gpu-check.sh profile), without start-up's cudnnFind* kernels. */
        if (run == c->runs - 1) nvtxRangePushA("timed");
#endif
        double t0 = dist_time();
        for (int s = 0; s < (run < 0 ? c->warmup : c->steps); s++) {
            train_step(b);
            if (b->m.marks[0]) model_timing_collect(&b->m);
        }
        float sync[2];
        b->k->download(sync, b->m.params, sizeof sync); /* the device has finished the run */
#if CIFAR10_CUDA
        if (run == c->runs - 1) nvtxRangePop();
#endif
        dist_barrier();
        if (run >= 0) b->run_seconds[run] = dist_time() - t0;
    }
    b->tile_products = (double)(kernels_cpu_tile_products() - products) / ((double)c->runs * c->steps);
    qsort(b->run_seconds, (size_t)c->runs, sizeof(double), compare_double);
    b->median = b->run_seconds[c->runs / 2];
    if (c->runs % 2 == 0) b->median = 0.5 * (b->run_seconds[c->runs / 2 - 1] + b->median);
    model_timing(&b->m, 0);
}

/* GPU: the layers' times of c.runs x c.steps further steps, each read before the next. */
static void time_layers(struct bench *b) {
    model_timing(&b->m, 1);
    zero_layer_times(&b->m);
    for (int s = 0; s < b->c.runs * b->c.steps; s++) {
        train_step(b);
        model_timing_collect(&b->m);
    }
    model_timing(&b->m, 0);
}

/* Rank 0: how each convolution runs each of its passes (the backend's words). */
static void print_conv_methods(const struct model *m) {
    static const enum conv_pass passes[] = {CONV_FORWARD, CONV_BACKWARD_DATA, CONV_BACKWARD_FILTER};
    static const char *const names[] = {"forward", "backward-data", "backward-filter"};
    printf("\nconvolutions, how each pass runs\n");
    for (int i = 0; i < m->nlayers; i++)
        for (int p = 0; p < 3; p++) {
            char layer[64], how[128];
            if (!model_conv_describe(m, i, passes[p], how, sizeof how)) continue;
            model_layer_describe(m, i, layer, sizeof layer);
            printf("%-3d %-24s %-16s %s\n", i, layer, names[p], how);
        }
}

/* Rank 0, CPU: the FMA and bf16 peaks measured. */
static void print_peaks(const struct bench *b) {
    printf("FP32 FMA peak measured here (GFLOP/s):");
    for (int i = 0; i < 3; i++)
        if (b->peak_one[i] > 0)
            printf("  %s %.1f (1 thread) / %.1f (%d x %d threads)", isas[i], b->peak_one[i], b->peak_all[i],
                   b->d.world, b->threads);
    if (b->bf16_one > 0)
        printf("\nbf16 multiply-add peak (%s): %.1f (1 thread) / %.1f (%d x %d threads)",
               kernels_cpu_bf16_isa(), b->bf16_one, b->bf16_all, b->d.world, b->threads);
    printf("\n\n");
}

/* Floats of m->grads that layer i's backward hands the gradient buckets (model_grads_ready_fn):
 * from its grads_begin up to the next trained layer's, alignment padding included. */
static size_t layer_grad_floats(const struct model *m, int i) {
    if (m->layers[i].grads_begin == SIZE_MAX) return 0;
    size_t end = m->nparams;
    for (int j = i + 1; j < m->nlayers && end == m->nparams; j++)
        if (m->layers[j].grads_begin != SIZE_MAX) end = m->layers[j].grads_begin;
    return end - m->layers[i].grads_begin;
}

/* Rank 0: per layer the mean forward and backward time per step, GFLOP/s and (CPU) share of
 * the per-rank peak, and the KiB of gradients it produces (scripts/scaling-model.py reads the
 * table to place the gradient buckets); step: seconds of one step of the timed runs. */
static void print_layers(const struct bench *b, double step) {
    const struct bench_config *c = &b->c;
    const struct model *m = &b->m;
    printf("per layer, rank 0, mean per step (%d x %d steps%s)\n", c->runs, c->steps,
           b->on_cpu ? "" : ", after the timed runs, one at a time");
    printf("%-3s %-24s %9s %8s %6s %9s %8s %6s %10s\n", "#", "layer", "fwd ms", "GFLOP/s", "peak", "bwd ms",
           "GFLOP/s", "peak", "grads KiB");
    double nsteps = (double)c->runs * c->steps, total = 0.0;
    for (int i = 0; i < m->nlayers; i++) {
        char name[64];
        model_layer_describe(m, i, name, sizeof name);
        printf("%-3d %-24s", i, name);
        for (int pass = 0; pass < 2; pass++) {
            double sec = m->layers[i].seconds[pass] / nsteps, f = model_layer_flops(m, i, c->batch, pass);
            total += sec;
            if (f > 0 && b->peak > 0)
                printf(" %9.2f %8.1f %5.1f%%", 1e3 * sec, f / sec * 1e-9,
                       100.0 * f / sec * 1e-9 / (b->peak / b->d.world));
            else if (f > 0) printf(" %9.2f %8.1f %6s", 1e3 * sec, f / sec * 1e-9, "");
            else printf(" %9.2f %8s %6s", 1e3 * sec, "", "");
        }
        printf(" %10.1f\n", (double)layer_grad_floats(m, i) * sizeof(float) / 1024.0);
    }
    if (b->on_cpu)
        printf("layers total %.1f ms; whole step %.1f ms (loss, allreduce, SGD update: %.1f ms)\n",
               1e3 * total, 1e3 * step, 1e3 * (step - total));
    else
        printf("layers total %.2f ms of GPU time; whole step %.2f ms in the timed runs (input, loss, "
               "allreduce, SGD update, launch gaps: %.2f ms)\n",
               1e3 * total, 1e3 * step, 1e3 * (step - total));
    print_conv_methods(m);
}

/* Rank 0: the report, ending with the machine-readable "result:" line; rss_max: MB. */
static void report(const struct bench *b, double rss_max) {
    const struct bench_config *c = &b->c;
    int world = b->d.world;
    double images = (double)world * c->batch * c->steps, step = b->median / c->steps, flops = 0.0;
    for (int i = 0; i < b->m.nlayers; i++)
        flops += model_layer_flops(&b->m, i, c->batch, 0) + model_layer_flops(&b->m, i, c->batch, 1);
    double gflops = flops * world / step * 1e-9, images_per_s = images / b->median;
    printf("cifar10-bench %s: %s, %d rank(s) x %d thread(s), batch %d per rank, device %s, vector path %s\n",
           CIFAR10_DP_VERSION, c->model, world, b->threads, c->batch, b->k->name, b->isa);
    printf("gradients: %s", dist_grads_mode_name(dist_grads_mode(b->grads)));
    if (dist_grads_refusal(b->grads)) printf(" (%s)", dist_grads_refusal(b->grads));
    printf(", %d bucket(s) per step\n", dist_grads_buckets(b->grads));
    if (b->on_cpu) print_peaks(b);
    print_layers(b, step);
    printf("\nthroughput: %.1f images/s (median of %d runs; min %.1f, max %.1f)\n", images_per_s, c->runs,
           images / b->run_seconds[c->runs - 1], images / b->run_seconds[0]);
    if (b->on_cpu && b->peak <= 0) /* a path without a probe of its own (amx-emulated, amx-cost) */
        printf("compute: %.2f GFLOP per image, %.1f GFLOP/s (no peak measured for %s)\n",
               flops / c->batch * 1e-9, gflops, b->isa);
    else if (b->on_cpu)
        printf("compute: %.2f GFLOP per image, %.1f GFLOP/s, %.1f%% of the %s %s peak (%.1f)\n",
               flops / c->batch * 1e-9, gflops, 100.0 * gflops / b->peak, b->isa,
               b->bf16 && b->bf16_all > 0 ? "bf16" : "FMA", b->peak);
    else
        printf("compute: %.2f GFLOP per image, %.1f GFLOP/s over %d GPU(s)\n", flops / c->batch * 1e-9,
               gflops, world);
    if (b->tile_products > 0) /* 16 x 16 x 32 multiply-adds each */
        printf("tile products: %.0f TDPBF16PS a step (rank 0), %.3f GFLOP, %s\n", b->tile_products,
               b->tile_products * 16384.0 * 1e-9,
               strcmp(b->isa, "amx-cost") == 0 ? "left out (amx-cost: the results are meaningless)"
                                               : "carried out in plain C");
    double find_seconds;
    int found = b->on_cpu ? kernels_cpu_tiles_find(&find_seconds) : 0;
    if (found > 0)
        printf("the tiles' loops: timed for %d convolution passes at their first calls, %.0f ms in all "
               "(rank 0, in the first step)\n",
               found, find_seconds * 1e3);
    printf("peak resident memory: %.0f MB (largest rank)\n", rss_max);
    printf("result: images_per_s=%.1f ranks=%d threads=%d batch=%d device=%s isa=%s peak_gflops=%.1f "
           "fraction_of_peak=%.3f rss_mb=%.0f\n",
           images_per_s, world, b->threads, c->batch, b->k->name, b->isa, b->peak,
           b->on_cpu && b->peak > 0 ? gflops / b->peak : 0.0, rss_max);
}

/* MPI, the flags, the threads and the device (exits on bad flags; returns 0 after --help). */
static int bench_start(struct bench *b, int argc, char **argv) {
    struct cpus cpus;
    cpus_detect(&cpus);
    struct device_early early; /* a CUDA-aware MPI sets up on the GPU current when it starts */
    device_before_mpi(argc, argv, &early);
    dist_init(&argc, &argv, cpus.mask_id, &b->d);
    struct err e = {0};
    int rc = parse(argc, argv, &b->c, b->d.rank, &e);
    if (rc < 0) return 0;
    dist_agree(rc, e.msg);
    int sharing = b->d.local_same_mask > 0 ? b->d.local_same_mask : 1;
    b->threads = b->c.threads ? b->c.threads : cpus.usable / sharing;
    if (b->threads < 1) b->threads = 1;
    omp_set_num_threads(b->threads);
    char device[768];
    b->k = device_select(b->c.device, b->c.precision, 1, b->d.local_rank, device, sizeof device, &e);
    dist_agree(b->k ? 0 : 1, e.msg);
    if (!b->k->host) device_after_mpi(&early, b->d.local_rank);
    b->graphs = device_graphs_wanted(&e);
    dist_agree(b->graphs < 0 ? 1 : 0, e.msg);
    dist_agree(dist_cuda_aware_wanted(&e) < 0 ? 1 : 0, e.msg);
    dist_print_all(device);
    /* The same answer on every rank (the peak measurement is collective). */
    b->on_cpu = dist_max_double(b->k->host ? 0.0 : 1.0) == 0.0;
    b->bf16 = strcmp(b->k->name, "cpu-bf16") == 0;
    b->isa = b->bf16 ? kernels_cpu_bf16_isa() : kernels_cpu_isa();
    return 1;
}

int main(int argc, char **argv) {
    err_set_progname("cifar10-bench");
    struct bench b = {0};
    if (!bench_start(&b, argc, argv)) {
        dist_finalize();
        return 0;
    }
    const struct bench_config *c = &b.c;
    measure_peaks(&b);
    model_init(&b.m, net_find(c->model), b.k, c->batch, 1);
    if (c->first_bias_stopped) stop_first_bias(&b.m, c->model);
    b.grads = dist_grads_attach(&b.m, (size_t)(c->bucket_mb * 1048576.0), !b.on_cpu);
    b.m.graphs = b.graphs; /* used where the backend records them: model.h */
    batches_init(&b.q, b.k, c->batch);
    fill_random(&b.q, c->batch, b.m.net->classes, b.d.rank);
    time_runs(&b);
    if (b.graphs && !b.on_cpu && b.d.rank == 0) { /* whether the timed steps ran as graphs */
        int recorded = 0, segs = 0;
        for (int i = 0; i < b.m.ngraphs; i++) recorded += b.m.graph[i].nsegs > 0, segs += b.m.graph[i].nsegs;
        printf("CUDA graphs: %d step(s) recorded in %d graph(s)%s\n", recorded, segs,
               recorded ? " (CIFAR10_CUDA_GRAPHS=off: op by op)" : "");
    }
    if (!b.on_cpu) time_layers(&b);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_max = dist_max_double((double)ru.ru_maxrss / 1024.0); /* ru_maxrss: KiB */
    if (b.d.rank == 0) report(&b, rss_max);
    free(b.run_seconds);
    dist_grads_free(b.grads);
    batches_free(&b.q);
    model_free(&b.m);
    dist_finalize();
    b.k->shutdown(); /* last, after MPI_Finalize: see kernels.h */
    return 0;
}
