#include "device.h"

#include "../common/cpus.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int device_parse(const char *s, enum device_kind *out) {
    if (strcmp(s, "auto") == 0) *out = DEVICE_AUTO;
    else if (strcmp(s, "cpu") == 0) *out = DEVICE_CPU;
    else if (strcmp(s, "cuda") == 0) *out = DEVICE_CUDA;
    else return -1;
    return 0;
}

int device_graphs_wanted(struct err *e) {
    const char *v = getenv("CIFAR10_CUDA_GRAPHS");
    if (!v || !*v) return 1;
    if (strcmp(v, "off") == 0) return 0;
    if (strcmp(v, "on") == 0) return 2;
    return err_set(e, "CIFAR10_CUDA_GRAPHS=%s: expected on or off", v), -1;
}

/* The node-local rank the launcher gives this process, and the variable that says it; -1 where
 * none does. */
static int launcher_local_rank(const char **var) {
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "MV2_COMM_WORLD_LOCAL_RANK", "PALS_LOCAL_RANKID", "SLURM_LOCALID"};
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (!v || !*v) continue;
        char *end;
        long r = strtol(v, &end, 10);
        if (*end || r < 0 || r > 1 << 20) continue;
        *var = vars[i];
        return (int)r;
    }
    return -1;
}

/* Whether the command line asks for --device cpu (before the flags are parsed). */
static int wants_cpu(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--device=cpu") == 0 ||
            (strcmp(argv[i], "--device") == 0 && i + 1 < argc && strcmp(argv[i + 1], "cpu") == 0))
            return 1;
    return 0;
}

void device_before_mpi(int argc, char **argv, struct device_early *early) {
    *early = (struct device_early){.gpu = -1};
    const char *v = getenv("CIFAR10_CUDA_AWARE_MPI"); /* other values: dist_cuda_aware_wanted's */
    if (!v || strcmp(v, "1") != 0 || wants_cpu(argc, argv)) return;
    early->local_rank = launcher_local_rank(&early->var);
    if (early->local_rank < 0) return;
#if CIFAR10_CUDA
    struct err why;
    early->gpus = kernels_cuda_devices(&why);
    int gpu = early->gpus > 0 ? early->local_rank % early->gpus : -1;
    if (gpu >= 0 && kernels_cuda_make_current(gpu) == 0) early->gpu = gpu;
#endif
}

void device_after_mpi(const struct device_early *early, int local_rank) {
    if (early->gpu < 0 || local_rank % early->gpus == early->gpu) return;
    fprintf(stderr,
            "%s: warning: CIFAR10_CUDA_AWARE_MPI=1: GPU %d was current when MPI started (%s=%d), but this "
            "rank trains on GPU %d (MPI's local rank %d): the MPI library may have set up on the other GPU\n",
            err_progname(), early->gpu, early->var, early->local_rank, local_rank % early->gpus, local_rank);
}

int precision_parse(const char *s, enum precision *out) {
    if (strcmp(s, "auto") == 0) *out = PRECISION_AUTO;
    else if (strcmp(s, "fp32") == 0) *out = PRECISION_FP32;
    else if (strcmp(s, "bf16") == 0) *out = PRECISION_BF16;
    else return -1;
    return 0;
}

const char *precision_name(enum precision p) {
    return p == PRECISION_BF16 ? "bf16" : p == PRECISION_FP32 ? "fp32" : "auto";
}

/* The CPU table for the precision asked for; appends the choice and its reason to desc. auto
 * takes bf16 only on AMX tiles (the bf16 path "amx"), where the recipe allows it: bf16 on
 * AVX512_BF16 alone was measured slower than fp32 (docs/results.md, bf16). An
 * explicit bf16 on a CPU without AVX512_BF16 runs the same sums on AVX2 FMA (to see what bf16
 * does to accuracy: it is no faster than fp32, so auto never takes it), and is refused only
 * without AVX2 too: the plain-C path is a small fraction of the float speed, which no run wants
 * (the tests reach it through kernels_cpu_bf16 directly). */
static const struct kernels *cpu_table(enum precision p, int bf16_ok, char *desc, size_t size,
                                       struct err *e) {
    size_t used = strlen(desc);
    int native = kernels_cpu_bf16_native(), tiles = strcmp(kernels_cpu_bf16_isa(), "amx") == 0;
    if (p == PRECISION_BF16 && !native && !kernels_cpu_bf16_vector())
        return err_set(e, "--precision=bf16: this CPU has neither AVX512_BF16 nor AVX2 (use fp32 or auto)"),
               NULL;
    if (p == PRECISION_BF16 || (p == PRECISION_AUTO && tiles && bf16_ok)) {
        snprintf(desc + used, size - used, ", bf16 products (%s)",
                 p == PRECISION_AUTO ? "auto: AMX tiles, recipe allows"
                 : native            ? "--precision bf16"
                          : "--precision bf16; no AVX512_BF16: its sums on AVX2 FMA, no faster than fp32");
        return kernels_cpu_bf16();
    }
    if (p == PRECISION_AUTO)
        snprintf(desc + used, size - used, ", fp32 (auto: %s)",
                 !tiles ? "no AMX tiles" : "the recipe is fp32");
    return kernels_cpu();
}

const struct kernels *device_select(enum device_kind want, enum precision precision, int bf16_ok,
                                    int local_rank, char *desc, size_t size, struct err *e) {
    if (want == DEVICE_CPU) {
        snprintf(desc, size, "cpu");
        return cpu_table(precision, bf16_ok, desc, size, e);
    }
#if CIFAR10_CUDA
    struct err why;
    int gpus = kernels_cuda_devices(&why);
    if (gpus == 0) {
        if (want == DEVICE_CUDA)
            return err_set(e, "--device=cuda: no GPU visible: %s (CUDA_VISIBLE_DEVICES=%s)", why.msg,
                           getenv("CUDA_VISIBLE_DEVICES") ? getenv("CUDA_VISIBLE_DEVICES") : "unset"),
                   NULL;
        snprintf(desc, size, "cpu (auto: no GPU visible: %s)", why.msg);
        return cpu_table(precision, bf16_ok, desc, size, e);
    }
    int gpu = local_rank % gpus;
    const struct kernels *k = kernels_cuda(gpu);
    char name[512];
    kernels_cuda_describe(name, sizeof name);
    snprintf(desc, size, "cuda: GPU %d of %d visible, %s (local rank %d)%s", gpu, gpus, name, local_rank,
             want == DEVICE_AUTO ? " (auto)" : "");
    int native = kernels_cuda_bf16_native();
    if (precision == PRECISION_BF16 && !native)
        return err_set(e, "--precision=bf16: GPU %d has no bf16 tensor cores (compute capability < 8.0)",
                       gpu),
               NULL;
    size_t used = strlen(desc);
    if (precision == PRECISION_BF16 || (precision == PRECISION_AUTO && native && bf16_ok)) {
        const struct kernels *b = kernels_cuda_bf16(gpu);
        snprintf(desc + used, size - used, ", bf16 %s (%s)",
                 b->act_size == 2 ? "activations"
                                  : "products on float activations (CIFAR10_CUDA_BF16=copies)",
                 precision == PRECISION_BF16 ? "--precision bf16" : "auto: bf16 tensor cores, recipe allows");
        return b;
    }
    if (precision == PRECISION_AUTO)
        snprintf(desc + used, size - used, ", fp32 (auto: %s)",
                 !native ? "no bf16 tensor cores" : "the recipe is fp32");
    return k;
#else
    (void)local_rank;
    if (want == DEVICE_CUDA)
        return err_set(e,
                       "--device=cuda: this build has no CUDA backend (built with CUDA=0 or without nvcc)"),
               NULL;
    snprintf(desc, size, "cpu (auto: this build has no CUDA backend)");
    return cpu_table(precision, bf16_ok, desc, size, e);
#endif
}

const struct kernels *device_open_fp32(enum device_kind want, int threads, char *desc, size_t size) {
    if (!threads) {
        struct cpus c;
        cpus_detect(&c);
        threads = c.usable;
    }
    omp_set_num_threads(threads);
    struct err e = {""};
    const struct kernels *k = device_select(want, PRECISION_FP32, 0, 0, desc, size, &e);
    if (!k) err_die(1, "%s", e.msg);
    return k;
}
