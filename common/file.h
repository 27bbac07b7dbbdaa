/* Whole-file reading (the data reader, the model/checkpoint reader) and atomic whole-file writing
 * (metrics, test results). */
#ifndef COMMON_FILE_H
#define COMMON_FILE_H

#include "err.h"

#include <stddef.h>
#include <stdint.h>

/* Reads the regular file `path` into a new malloc'd buffer (*data, *size bytes; the caller
 * frees it). Returns 0, or -1 with "PATH: what is wrong" in e and *data == NULL. */
int file_read_all(const char *path, uint8_t **data, size_t *size, struct err *e);

/* Replaces (or creates) `path` with the `size` bytes at `data` atomically: a temporary file
 * beside it, fsync, rename over it, fsync of the directory; a failure at any point leaves the old
 * file as it was and no temporary file. Returns 0, or -1 with "PATH: what is wrong" in e. */
int file_write_atomic(const char *path, const void *data, size_t size, struct err *e);

#endif
