/* Error reporting for library code: functions that can fail on bad input return -1 and fill a
 * struct err with one human-readable line ("FILE: what is wrong"); the caller decides whether
 * that ends the process (and, under MPI, the job). Nothing here exits. */
#ifndef COMMON_ERR_H
#define COMMON_ERR_H

#include <stddef.h>

struct err {
    char msg[1024]; /* one line, no trailing newline; "" when no error was set */
};

/* Formats msg into e (printf-style; control characters become '?', so it is one line whatever
 * it quotes) and returns -1, so callers can write `return err_set(e, ...)`. */
int err_set(struct err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like err_set, with ": strerror(errno_value)" appended. */
int err_sys(struct err *e, int errno_value, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Fatal-error helpers for the programs (not for library code): print "PROG: message" to stderr
 * and exit with the given code. */
void err_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));

/* The program name used as the prefix of fatal messages (set once from main). */
void err_set_progname(const char *name);
const char *err_progname(void);

/* Aborts with file:line and the failed expression; used by CHECK, which never compiles out
 * (unlike assert under NDEBUG). For internal invariants only, not for bad input. */
void err_check_failed(const char *expr, const char *file, int line) __attribute__((noreturn));
#define CHECK(expr) ((expr) ? (void)0 : err_check_failed(#expr, __FILE__, __LINE__))

/* malloc/calloc that report file:line and exit 1 on failure; aligned to 64 bytes. */
void *err_alloc(size_t bytes, const char *file, int line);
#define XALLOC(bytes) err_alloc((bytes), __FILE__, __LINE__)

#endif
