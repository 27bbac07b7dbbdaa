/* Strict number parsing for command-line flags (strtol/strtod: the whole string must be a
 * number within range). On failure: -1 and "--flag: 'value' is not ..." in e. */
#ifndef APP_OPTIONS_H
#define APP_OPTIONS_H

#include "../common/err.h"

#include <stdint.h>

int options_int(const char *flag, const char *arg, long min, long max, int *out, struct err *e);
int options_u64(const char *flag, const char *arg, uint64_t *out, struct err *e);
/* A finite double >= min (> min when min_exclusive). */
int options_double(const char *flag, const char *arg, double min, int min_exclusive, double *out,
                   struct err *e);

#endif
