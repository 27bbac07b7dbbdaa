#include "err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *progname = "cifar10";

void err_set_progname(const char *name) {
    const char *slash = strrchr(name, '/');
    progname = slash ? slash + 1 : name;
}

const char *err_progname(void) { return progname; }

/* A message quotes what it is about (a tar member's name, a settings value), which can hold any
 * byte: control characters become '?', so the message stays one line of the log (found by
 * tests/fuzz: a newline in a hostile tar member name or JSON string). */
static void one_line(char *msg) {
    for (unsigned char *c = (unsigned char *)msg; *c; c++)
        if (*c < 0x20 || *c == 0x7f) *c = '?';
}

int err_set(struct err *e, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    one_line(e->msg);
    return -1;
}

int err_sys(struct err *e, int errno_value, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof e->msg)
        snprintf(e->msg + n, sizeof e->msg - (size_t)n, ": %s", strerror(errno_value));
    one_line(e->msg);
    return -1;
}

void err_die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", progname);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    exit(code);
}

void err_check_failed(const char *expr, const char *file, int line) {
    fprintf(stderr, "%s: internal error at %s:%d: check failed: %s\n", progname, file, line, expr);
    abort();
}

void *err_alloc(size_t bytes, const char *file, int line) {
    void *p = NULL;
    size_t rounded = (bytes + 63) / 64 * 64;
    if (rounded == 0) rounded = 64;
    if (posix_memalign(&p, 64, rounded) != 0) {
        fprintf(stderr, "%s: out of memory allocating %zu bytes at %s:%d\n", progname, bytes, file, line);
        exit(1);
    }
    memset(p, 0, rounded);
    return p;
}
