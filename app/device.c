#include "device.h"

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

const struct kernels *device_select(enum device_kind want, int local_rank, char *desc, size_t size,
                                    struct err *e) {
    if (want == DEVICE_CPU) {
        snprintf(desc, size, "cpu");
        return kernels_cpu();
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
        return kernels_cpu();
    }
    int gpu = local_rank % gpus;
    const struct kernels *k = kernels_cuda(gpu);
    char name[256];
    kernels_cuda_describe(name, sizeof name);
    snprintf(desc, size, "cuda: GPU %d of %d visible, %s (local rank %d)%s", gpu, gpus, name, local_rank,
             want == DEVICE_AUTO ? " (auto)" : "");
    return k;
#else
    (void)local_rank;
    if (want == DEVICE_CUDA)
        return err_set(e, "--device=cuda: this build has no CUDA backend (built with CUDA=0 or without nvcc)"), NULL;
    snprintf(desc, size, "cpu (auto: this build has no CUDA backend)");
    return kernels_cpu();
#endif
}
