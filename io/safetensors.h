/* safetensors files (https://github.com/huggingface/safetensors, format as of v0.4):
 *   8-byte little-endian header size N | N bytes of JSON header, space-padded to a multiple
 *   of 8 | raw little-endian tensor data.
 * The header maps tensor names to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
 * relative to the data section) and "__metadata__" to a string-to-string map.
 *
 * Our files add metadata "crc32" (zlib CRC-32 of the whole data section, 8 hex digits), which
 * safetensors_read verifies. Writes are atomic: a temporary file in the same directory,
 * fsync, rename over the target, fsync of the directory; on any failure the previous file is
 * left untouched and the temporary file removed. */
#ifndef IO_SAFETENSORS_H
#define IO_SAFETENSORS_H

#include "../common/err.h"
#include "json.h"

#include <stddef.h>
#include <stdint.h>

enum st_dtype { ST_F32, ST_I64 };

struct st_tensor {
    const char *name;
    enum st_dtype dtype;
    int ndim;
    int64_t shape[8];
    const void *data; /* numel * dtype size bytes, little-endian (the host is x86-64) */
};

struct st_meta {
    const char *key, *value;
};

int safetensors_write(const char *path, const struct st_tensor *tensors, int ntensors,
                      const struct st_meta *meta, int nmeta, struct err *e);

struct safetensors {
    char path[4096];
    uint8_t *file; /* the whole file */
    size_t size;
    size_t data_start; /* 8 + header size */
    struct json header;
};

/* Reads and validates structure (sizes, offsets, dtypes, JSON) and the crc32; returns -1 with
 * "PATH: what is wrong" otherwise. */
int safetensors_read(const char *path, struct safetensors *st, struct err *e);
void safetensors_free(struct safetensors *st);

/* A metadata value, or NULL when absent. */
const char *safetensors_meta(const struct safetensors *st, const char *key);

/* Finds tensor `name`, checks its dtype and shape against the expected ones and returns a
 * pointer to its data (inside st->file; may be unaligned: copy it out with memcpy). */
int safetensors_tensor(const struct safetensors *st, const char *name, enum st_dtype dtype, int ndim,
                       const int *shape, const void **data, struct err *e);

#endif
