/* A small, strict JSON reader (RFC 8259 values; depth-limited; never crashes on malformed
 * input) and a growable string buffer for writing JSON. Used for safetensors headers and the
 * training configuration recorded in files. */
#ifndef IO_JSON_H
#define IO_JSON_H

#include "../common/err.h"

#include <stddef.h>

enum json_type { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };

struct json {
    enum json_type type;
    int boolean;
    double number;
    char *string;       /* JSON_STRING: decoded UTF-8, NUL-terminated */
    int count;          /* JSON_ARRAY / JSON_OBJECT: number of items */
    struct json *items; /* [count] */
    char **keys;        /* [count], JSON_OBJECT only */
};

/* Parses exactly one value spanning text[0..len) (surrounding white space allowed). On error
 * returns -1 with "byte N: what" in e. */
int json_parse(const char *text, size_t len, struct json *out, struct err *e);
void json_free(struct json *j);
/* The member `key` of an object, or NULL. */
const struct json *json_get(const struct json *obj, const char *key);

struct strbuf {
    char *s;
    size_t len, cap;
};
void strbuf_printf(struct strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends src as a quoted, escaped JSON string. */
void strbuf_json_string(struct strbuf *b, const char *src);
void strbuf_free(struct strbuf *b);

#endif
