/* cifar10-bench: training-throughput benchmark of the workshop CNN (CPU or CUDA backend).
 *
 *   [mpirun -np N] cifar10-bench [--batch-size N] [--threads N] [--steps N] [--runs N] ...
 *
 * Times full training steps exactly as cifar10-train runs them (forward, backward, one
 * MPI_Allreduce of the gradients, SGD update) on random images, after warm-up, and prints the
 * median throughput of several runs, a per-layer breakdown with achieved GFLOP/s, the machine's
 * FP32 FMA peak measured here per instruction set, and peak resident memory. The last line is
 * machine-readable ("result: key=value ...") for scripts/bench.sh. On CUDA, kernels run
 * asynchronously, so the per-layer table (host clock) is left out; the step time includes the
 * input upload and pipeline exactly as in training. */
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
    "                   best this CPU has)\n"
    "  --device D       cpu, cuda or auto (default: cuda when a GPU is visible)\n"
    "  --precision P    fp32, bf16 or auto: the products of the convolutions and linear layers\n"
    "                   (default fp32; auto: bf16 where the CPU has AVX512_BF16; bf16 without\n"
    "                   it: the same sums on AVX2 FMA)\n"
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

static int parse(int argc, char **argv, struct bench_config *c, int rank, struct err *e) {
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
    *c = (struct bench_config){.batch = 128,
                               .warmup = 3,
                               .steps = 5,
                               .runs = 5,
                               .bucket_mb = 2.0,
                               .model = "workshop-cnn",
                               .precision = PRECISION_FP32};
    opterr = 0;
    int opt, rc = 0;
    while (rc == 0 && (opt = getopt_long(argc, argv, ":", long_options, NULL)) != -1) {
        const char *flag = argv[optind - 1];
        switch (opt) {
        case OPT_BATCH: rc = options_int("--batch-size", optarg, 1, 65536, &c->batch, e); break;
        case OPT_THREADS: rc = options_int("--threads", optarg, 1, 4096, &c->threads, e); break;
        case OPT_WARMUP: rc = options_int("--warmup", optarg, 0, 1000000, &c->warmup, e); break;
        case OPT_STEPS: rc = options_int("--steps", optarg, 1, 1000000, &c->steps, e); break;
        case OPT_RUNS: rc = options_int("--runs", optarg, 1, 1000, &c->runs, e); break;
        case OPT_ISA: c->isa = optarg; break;
        case OPT_BF16_ISA: c->bf16_isa = optarg; break;
        case OPT_MODEL:
            c->model = optarg;
            if (!net_find(optarg)) {
                char known[256];
                net_known_names(known, sizeof known);
                rc = err_set(e, "--model: '%s' is not a network this build knows (%s)", optarg, known);
            }
            break;
        case OPT_DEVICE:
            if (device_parse(optarg, &c->device) != 0)
                rc = err_set(e, "--device: '%s' is not cpu, cuda or auto", optarg);
            break;
        case OPT_PRECISION:
            if (precision_parse(optarg, &c->precision) != 0)
                rc = err_set(e, "--precision: '%s' is not fp32, bf16 or auto", optarg);
            break;
        case OPT_BUCKET: rc = options_double("--bucket-mb", optarg, 0.0, 0, &c->bucket_mb, e); break;
        case OPT_FIRST_BIAS: c->first_bias_stopped = 1; break;
        case OPT_HELP:
            if (rank == 0) fputs(usage, stdout);
            return -1;
        case ':': rc = err_set(e, "%s: missing value", flag); break;
        default: rc = err_set(e, "%s: unknown flag", flag); break;
        }
    }
    if (rc == 0 && optind < argc) rc = err_set(e, "%s: unexpected argument", argv[optind]);
    if (rc == 0 && c->isa && kernels_cpu_select(c->isa) != 0)
        rc = err_set(e, "--isa: '%s' is not a vector path this CPU supports", c->isa);
    if (rc == 0 && c->bf16_isa && kernels_cpu_select_bf16(c->bf16_isa) != 0)
        rc = err_set(e, "--bf16-isa: '%s' is not a bf16 path this CPU supports", c->bf16_isa);
    return rc ? 2 : 0;
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

int main(int argc, char **argv) {
    err_set_progname("cifar10-bench");
    struct cpus cpus;
    cpus_detect(&cpus);
    struct dist d;
    dist_init(&argc, &argv, cpus.mask_id, &d);
    struct bench_config c;
    struct err e = {0};
    int rc = parse(argc, argv, &c, d.rank, &e);
    if (rc < 0) {
        dist_finalize();
        return 0;
    }
    dist_agree(rc, e.msg);
    int threads = c.threads ? c.threads : cpus.usable / (d.local_same_mask > 0 ? d.local_same_mask : 1);
    if (threads < 1) threads = 1;
    omp_set_num_threads(threads);

    char device[512];
    const struct kernels *k =
        device_select(c.device, c.precision, 1, d.local_rank, device, sizeof device, &e);
    dist_agree(k ? 0 : 1, e.msg);
    int on_cpu = k->host;
    dist_print_all(device);
    /* The same answer on every rank (the peak measurement below is collective). */
    on_cpu = dist_max_double(on_cpu ? 0.0 : 1.0) == 0.0;

    /* The FMA peak of every path this CPU has: one thread alone, and all threads of all ranks
     * at once (what the training step can use). Not measured for GPU runs, which do not use it. */
    static const char *isas[] = {"avx512", "avx2", "generic"};
    double peak_one[3] = {-1, -1, -1}, peak_all[3] = {-1, -1, -1};
    for (int i = 0; on_cpu && i < 3; i++) {
        peak_one[i] = d.rank == 0 ? kernels_cpu_fma_peak(isas[i], 1, 0.3) : 0.0;
        dist_bcast(&peak_one[i], sizeof peak_one[i], 0);
        double mine = kernels_cpu_fma_peak(isas[i], threads, 0.3);
        peak_all[i] = mine < 0 ? -1.0 : sum_ranks(mine);
    }
    /* The bf16 peak (of the bf16 path in use: AMX tiles or VDPBF16PS) likewise, where the CPU
     * has it; a cpu-bf16 run's fraction of peak is taken against it. */
    double bf16_one = -1.0, bf16_all = -1.0;
    if (on_cpu && kernels_cpu_bf16_native()) {
        bf16_one = d.rank == 0 ? kernels_cpu_bf16_peak(1, 0.3) : 0.0;
        dist_bcast(&bf16_one, sizeof bf16_one, 0);
        bf16_all = sum_ranks(kernels_cpu_bf16_peak(threads, 0.3));
    }
    int bf16 = strcmp(k->name, "cpu-bf16") == 0;
    const char *isa = bf16 ? kernels_cpu_bf16_isa() : kernels_cpu_isa();
    /* A bf16 path without bf16 instructions (avx2) runs on float FMA: its peak is that path's. */
    double peak = bf16 ? bf16_all : -1.0;
    for (int i = 0; i < 3 && peak < 0; i++)
        if (strcmp(isas[i], isa) == 0) peak = peak_all[i];

    struct model m;
    model_init(&m, net_find(c.model), k, c.batch, 1);
    if (c.first_bias_stopped) { /* as cifar10-train after the recipe's first_bias_epochs */
        struct train_config recipe;
        config_defaults(&recipe);
        config_recipe(&recipe, c.model);
        int b = m.layers[0].bias,
            stops = recipe.first_bias_epochs > 0 && b >= 0 && m.tensors[b].home == HOME_PARAMS;
        dist_agree(stops ? 0 : 2,
                   "--first-bias-stopped: this network's recipe trains its first layer's bias throughout");
        model_stop_training(&m, b);
    }
    struct dist_grads *grads = dist_grads_attach(&m, (size_t)(c.bucket_mb * 1048576.0), !on_cpu);
    /* Random images and labels, different per rank: two batches, which then alternate. */
    struct rng r = rng_make(1, RNG_INIT, 1000 + (uint64_t)d.rank, 0);
    struct batches q;
    batches_init(&q, k, c.batch);
    for (int slot = 0; slot < 2; slot++) {
        struct batch *b = batches_next(&q);
        for (size_t i = 0; i < (size_t)c.batch * 3 * 32 * 32; i++)
            b->img[i] = (unsigned char)rng_below(&r, 256);
        for (int i = 0; i < c.batch; i++) {
            b->geom[3 * i] = (int)rng_below(&r, 9), b->geom[3 * i + 1] = (int)rng_below(&r, 9);
            b->geom[3 * i + 2] = (int)rng_below(&r, 2);
            b->labels[i] = (int)rng_below(&r, (uint32_t)m.net->classes);
        }
        batches_submit(&q, c.batch);
    }

    /* One training step, as cifar10-train does it (the next batch is submitted while the
     * device works). Small lr: the weights stay sane for long benchmarks and no step takes a
     * different path (NaNs, denormals). */
    double *run_seconds = XALLOC((size_t)c.runs * sizeof(double));
    for (int run = -1; run < c.runs; run++) {
        int steps = run < 0 ? c.warmup : c.steps;
        if (run == 0)
            for (int i = 0; i < m.nlayers; i++) m.layers[i].seconds[0] = m.layers[i].seconds[1] = 0;
        dist_barrier();
#if CIFAR10_CUDA
        /* The last timed run as NVTX range "timed": what `ncu --nvtx --nvtx-include timed/`
         * profiles (scripts/gpu-check.sh profile), without start-up's cudnnFind* kernels. */
        if (run == c.runs - 1) nvtxRangePushA("timed");
#endif
        double t0 = dist_time();
        for (int s = 0; s < steps; s++) {
            struct model_input in;
            int slot = batches_take(&q, &in);
            model_forward_backward(&m, &in);
            batches_release(&q, slot);
            batches_next(&q); /* same contents again: the host-side gather is not timed */
            batches_submit(&q, c.batch);
            float stats[MODEL_STATS];
            dist_grads_finish(grads, stats);
            model_sgd_step(&m, 1e-4f, 0.9f, 5e-4f, 1.0f / (float)d.world);
        }
        float sync[2];
        k->download(sync, m.params, sizeof sync); /* the device has finished the run */
#if CIFAR10_CUDA
        if (run == c.runs - 1) nvtxRangePop();
#endif
        dist_barrier();
        if (run >= 0) run_seconds[run] = dist_time() - t0;
    }
    qsort(run_seconds, (size_t)c.runs, sizeof(double), compare_double);
    double median = run_seconds[c.runs / 2];
    if (c.runs % 2 == 0) median = 0.5 * (run_seconds[c.runs / 2 - 1] + median);
    double images_per_s = (double)d.world * c.batch * c.steps / median;

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    double rss_max = dist_max_double((double)ru.ru_maxrss / 1024.0); /* ru_maxrss: KiB */

    if (d.rank == 0) {
        printf(
            "cifar10-bench %s: %s, %d rank(s) x %d thread(s), batch %d per rank, device %s, vector path %s\n",
            CIFAR10_DP_VERSION, c.model, d.world, threads, c.batch, k->name, isa);
        printf("gradients: %s, %d bucket(s) per step\n", dist_grads_mode_name(dist_grads_mode(grads)),
               dist_grads_buckets(grads));
        double nsteps = (double)c.runs * c.steps, total = 0.0, flops = 0.0, step = median / c.steps;
        for (int i = 0; i < m.nlayers; i++)
            flops += model_layer_flops(&m, i, c.batch, 0) + model_layer_flops(&m, i, c.batch, 1);
        double gflops = flops * d.world / step * 1e-9;
        if (on_cpu) {
            printf("FP32 FMA peak measured here (GFLOP/s):");
            for (int i = 0; i < 3; i++)
                if (peak_one[i] > 0)
                    printf("  %s %.1f (1 thread) / %.1f (%d x %d threads)", isas[i], peak_one[i], peak_all[i],
                           d.world, threads);
            if (bf16_one > 0)
                printf("\nbf16 multiply-add peak (%s): %.1f (1 thread) / %.1f (%d x %d threads)",
                       kernels_cpu_bf16_isa(), bf16_one, bf16_all, d.world, threads);
            printf("\n\nper layer, rank 0, mean per step (%d runs x %d steps)\n", c.runs, c.steps);
            printf("%-3s %-24s %9s %8s %6s %9s %8s %6s\n", "#", "layer", "fwd ms", "GFLOP/s", "peak",
                   "bwd ms", "GFLOP/s", "peak");
            for (int i = 0; i < m.nlayers; i++) {
                char name[64];
                model_layer_describe(&m, i, name, sizeof name);
                printf("%-3d %-24s", i, name);
                for (int pass = 0; pass < 2; pass++) {
                    double sec = m.layers[i].seconds[pass] / nsteps;
                    double f = model_layer_flops(&m, i, c.batch, pass);
                    total += sec;
                    if (f > 0)
                        printf(" %9.2f %8.1f %5.1f%%", 1e3 * sec, f / sec * 1e-9,
                               100.0 * f / sec * 1e-9 / (peak / d.world));
                    else printf(" %9.2f %8s %6s", 1e3 * sec, "", "");
                }
                printf("\n");
            }
            printf("layers total %.1f ms; whole step %.1f ms (loss, allreduce, SGD update: %.1f ms)\n",
                   1e3 * total, 1e3 * step, 1e3 * (step - total));
        } else {
            printf("whole step %.2f ms (input upload and preparation, forward, backward, allreduce, SGD)\n",
                   1e3 * step);
        }
        printf("\nthroughput: %.1f images/s (median of %d runs; min %.1f, max %.1f)\n", images_per_s, c.runs,
               (double)d.world * c.batch * c.steps / run_seconds[c.runs - 1],
               (double)d.world * c.batch * c.steps / run_seconds[0]);
        if (on_cpu)
            printf("compute: %.2f GFLOP per image, %.1f GFLOP/s, %.1f%% of the %s %s peak (%.1f)\n",
                   flops / c.batch * 1e-9, gflops, 100.0 * gflops / peak, isa,
                   bf16 && bf16_all > 0 ? "bf16" : "FMA", peak);
        else
            printf("compute: %.2f GFLOP per image, %.1f GFLOP/s over %d GPU(s)\n", flops / c.batch * 1e-9,
                   gflops, d.world);
        printf("peak resident memory: %.0f MB (largest rank)\n", rss_max);
        printf("result: images_per_s=%.1f ranks=%d threads=%d batch=%d device=%s isa=%s peak_gflops=%.1f "
               "fraction_of_peak=%.3f rss_mb=%.0f\n",
               images_per_s, d.world, threads, c.batch, k->name, isa, peak, on_cpu ? gflops / peak : 0.0,
               rss_max);
    }
    free(run_seconds);
    dist_grads_free(grads);
    batches_free(&q);
    model_free(&m);
    dist_finalize();
    k->shutdown(); /* last, after MPI_Finalize: see kernels.h */
    return 0;
}
