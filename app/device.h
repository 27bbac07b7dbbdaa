/* --device=cpu|cuda|auto: which compute backend a process uses, and which GPU. */
#ifndef APP_DEVICE_H
#define APP_DEVICE_H

#include "../common/err.h"
#include "../kernels/kernels.h"

#include <stddef.h>

enum device_kind { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };

/* "cpu", "cuda" or "auto"; -1 for anything else. */
int device_parse(const char *s, enum device_kind *out);

/* --precision: the number format of the convolutions' and linear layers' products. fp32:
 * float throughout; bf16: operands rounded to bfloat16, float accumulation; on the CPU float
 * outputs and everything else float (kernels_cpu_bf16), on the GPU bf16 activations too
 * (kernels_cuda_bf16); auto: bf16 where the CPU has
 * AVX512_BF16 (the GPU bf16 tensor cores) and the network's recipe allows it, else fp32. */
enum precision { PRECISION_AUTO, PRECISION_FP32, PRECISION_BF16 };
int precision_parse(const char *s, enum precision *out);
const char *precision_name(enum precision p);

/* Picks the backend: auto means CUDA when this process sees a GPU, else the CPU. On CUDA the
 * GPU is local_rank modulo the GPUs visible, so ranks on a node spread over its GPUs and
 * several ranks may share one. precision picks the table's number format as enum precision
 * says (bf16_ok: the network's recipe allows bf16 under auto). Returns the table and writes
 * what was chosen and why to desc ("cuda: GPU 1 of 2, NVIDIA H100 ... (local rank 1)",
 * "cpu (auto: no GPU: ...), fp32 (auto: no AMX tiles)"); NULL with one line in e when
 * --device=cuda or --precision=bf16 cannot be honoured. */
const struct kernels *device_select(enum device_kind want, enum precision precision, int bf16_ok,
                                    int local_rank, char *desc, size_t size, struct err *e);

/* For a program that only scores (cifar10-test, cifar10-predict): OpenMP gets threads threads
 * (0: the CPUs this process may use), then device_select in fp32 for local rank 0; exits with
 * its one line when the device cannot be had. */
const struct kernels *device_open_fp32(enum device_kind want, int threads, char *desc, size_t size);

/* Before MPI starts (dist_init), where CIFAR10_CUDA_AWARE_MPI=1 asks for gradients reduced in
 * GPU memory and the command line does not say --device cpu: makes current the GPU that
 * device_select will give this rank, from the launcher's node-local rank
 * (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, MV2_COMM_WORLD_LOCAL_RANK, PALS_LOCAL_RANKID or
 * SLURM_LOCALID, the first set), as a CUDA-aware MPI sets up its CUDA resources (and picks its
 * network adapter) on the current GPU when it starts; otherwise every rank's would sit on GPU
 * 0. Notes in *early what it did (gpu -1: nothing: not asked for, no local rank, no GPU, CUDA
 * refused, a CPU-only build). */
struct device_early {
    int gpu, gpus;   /* the GPU made current, of the GPUs visible */
    const char *var; /* the variable that gave the local rank, and its value */
    int local_rank;
};
void device_before_mpi(int argc, char **argv, struct device_early *early);
/* Once MPI runs, with its node-local rank (device_select's): a warning line on stderr where
 * that picks another GPU than the one made current before MPI started (the launcher's local
 * rank and MPI's disagree), since the MPI library may then have set up on the other one. */
void device_after_mpi(const struct device_early *early, int local_rank);

/* CIFAR10_CUDA_GRAPHS: unset, empty or "on" records training steps as CUDA graphs where the
 * backend can and one rank owns the GPU (struct model's graphs); "off" runs them op by op.
 * 1 by default, 2 when "on" was asked for (a run that cannot honour it says so), 0 for "off";
 * -1 with one line in e for another value. */
int device_graphs_wanted(struct err *e);

#endif
