/* Whole-file reading for the data reader and the model/checkpoint reader. */
#ifndef COMMON_FILE_H
#define COMMON_FILE_H

#include "err.h"

#include <stddef.h>
#include <stdint.h>

/* Reads the regular file `path` into a new malloc'd buffer (*data, *size bytes; the caller
 * frees it). Returns 0, or -1 with "PATH: what is wrong" in e and *data == NULL. */
int file_read_all(const char *path, uint8_t **data, size_t *size, struct err *e);

#endif
