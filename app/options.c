#include "options.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

int options_int(const char *flag, const char *arg, long min, long max, int *out, struct err *e) {
    char *end;
    errno = 0;
    long v = strtol(arg, &end, 10);
    if (end == arg || *end != '\0' || errno == ERANGE)
        return err_set(e, "%s: '%s' is not an integer", flag, arg);
    if (v < min || v > max) return err_set(e, "%s: %ld is out of range %ld..%ld", flag, v, min, max);
    *out = (int)v;
    return 0;
}

int options_u64(const char *flag, const char *arg, uint64_t *out, struct err *e) {
    char *end;
    errno = 0;
    if (arg[0] == '-') return err_set(e, "%s: '%s' is not a non-negative integer", flag, arg);
    unsigned long long v = strtoull(arg, &end, 10);
    if (end == arg || *end != '\0' || errno == ERANGE)
        return err_set(e, "%s: '%s' is not a non-negative integer", flag, arg);
    *out = (uint64_t)v;
    return 0;
}

int options_double(const char *flag, const char *arg, double min, int min_exclusive, double *out,
                   struct err *e) {
    char *end;
    errno = 0;
    double v = strtod(arg, &end);
    if (end == arg || *end != '\0' || errno == ERANGE || !isfinite(v))
        return err_set(e, "%s: '%s' is not a finite number", flag, arg);
    if (min_exclusive ? !(v > min) : !(v >= min))
        return err_set(e, "%s: %s must be %s %g", flag, arg, min_exclusive ? ">" : ">=", min);
    *out = v;
    return 0;
}
