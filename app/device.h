/* --device=cpu|cuda|auto: which compute backend a process uses, and which GPU. */
#ifndef APP_DEVICE_H
#define APP_DEVICE_H

#include "../common/err.h"
#include "../kernels/kernels.h"

#include <stddef.h>

enum device_kind { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA };

/* "cpu", "cuda" or "auto"; -1 for anything else. */
int device_parse(const char *s, enum device_kind *out);

/* Picks the backend: auto means CUDA when this process sees a GPU, else the CPU. On CUDA the
 * GPU is local_rank modulo the GPUs visible, so ranks on a node spread over its GPUs and
 * several ranks may share one. Returns the table and writes what was chosen and why to desc
 * ("cuda: GPU 1 of 2, NVIDIA H100 ... (local rank 1)", "cpu (auto: no GPU: ...)"); NULL with
 * one line in e when --device=cuda cannot be honoured. */
const struct kernels *device_select(enum device_kind want, int local_rank, char *desc, size_t size,
                                    struct err *e);

#endif
