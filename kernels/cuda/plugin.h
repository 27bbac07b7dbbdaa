/* The CUDA backend as a plugin: libcifar10-cuda.so (the kernels/cuda/ sources, cuDNN, cuBLAS, the CUDA
 * runtime) is built beside the programs, which link none of it. kernels/cuda_load.c opens it
 * the first time kernels_cuda_devices() (kernels/kernels.h) finds an NVIDIA driver, so runs on
 * machines without one (CPU nodes, CI) never load cuDNN and cuBLAS, whose initialisers cost
 * each process about 0.25 s and 200 MB of memory before it does anything.
 *
 * The plugin exports cuda_plugin_api() only. It takes err_set, err_die, err_progname,
 * err_check_failed (common/err.h), kernels_check and kernels_conv_out (kernels/kernels.h) from
 * the program that opens it (the Makefile exports those six from every program), so its
 * messages carry the program's name. The six functions behind the API are those of
 * kernels/kernels.h (kernels_cuda_devices ... kernels_cuda_make_current), with the same contracts;
 * devices() may assume that libcuda.so.1 loads. */
#ifndef KERNELS_CUDA_PLUGIN_H
#define KERNELS_CUDA_PLUGIN_H

#include "../../common/err.h"
#include "../kernels.h"

#include <stddef.h>

/* Raised whenever struct cuda_plugin_api or the contract of one of its functions changes. */
#define CUDA_PLUGIN_VERSION 4
#define CUDA_PLUGIN_FILE    "libcifar10-cuda.so"

struct cuda_plugin_api {
    int version;         /* CUDA_PLUGIN_VERSION as the plugin was built */
    size_t kernels_size; /* sizeof(struct kernels) as the plugin was built */
    int (*devices)(struct err *e);
    const struct kernels *(*table)(int device);
    int (*bf16_native)(void);
    const struct kernels *(*bf16_table)(int device);
    void (*describe)(char *buf, size_t size);
    int (*make_current)(int device);
};

/* (backend.cu includes this inside extern "C".) */
const struct cuda_plugin_api *cuda_plugin_api(void);

#endif
