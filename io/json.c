#include "json.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DEPTH 32

struct parser {
    const char *s;
    size_t len, pos;
    struct err *e;
};

static int fail(struct parser *p, const char *what) { return err_set(p->e, "byte %zu: %s", p->pos, what); }

static void skip_ws(struct parser *p) {
    while (p->pos < p->len &&
           (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' || p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int parse_value(struct parser *p, struct json *v, int depth);

static int hex4(struct parser *p, unsigned *out) {
    if (p->len - p->pos < 4) return fail(p, "short \\u escape");
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p->s[p->pos++];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return fail(p, "bad hex digit in \\u escape");
    }
    *out = v;
    return 0;
}

/* The escape after a backslash (p at its letter) into *cp: a \u pair of UTF-16 surrogates gives
 * one code point. */
static int parse_escape(struct parser *p, unsigned *cp) {
    if (p->pos >= p->len) return fail(p, "unterminated escape");
    switch (p->s[p->pos++]) {
    case '"': *cp = '"'; return 0;
    case '\\': *cp = '\\'; return 0;
    case '/': *cp = '/'; return 0;
    case 'b': *cp = '\b'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 't': *cp = '\t'; return 0;
    case 'u': break;
    default: return fail(p, "bad escape in string");
    }
    if (hex4(p, cp) != 0) return -1;
    if (*cp >= 0xd800 && *cp < 0xdc00 && p->len - p->pos >= 6 && p->s[p->pos] == '\\' &&
        p->s[p->pos + 1] == 'u') {
        unsigned lo;
        p->pos += 2;
        if (hex4(p, &lo) != 0) return -1;
        if (lo >= 0xdc00 && lo < 0xe000) *cp = 0x10000 + ((*cp - 0xd800) << 10) + (lo - 0xdc00);
    }
    return 0;
}

/* Code point cp (below 0x110000) as UTF-8 at buf (room for 4 bytes); the bytes written. */
static size_t utf8_put(char *buf, unsigned cp) {
    if (cp < 0x80) return buf[0] = (char)cp, 1;
    size_t n = 0;
    if (cp < 0x800) {
        buf[n++] = (char)(0xc0 | cp >> 6);
    } else if (cp < 0x10000) {
        buf[n++] = (char)(0xe0 | cp >> 12);
        buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
    } else {
        buf[n++] = (char)(0xf0 | cp >> 18);
        buf[n++] = (char)(0x80 | ((cp >> 12) & 0x3f));
        buf[n++] = (char)(0x80 | ((cp >> 6) & 0x3f));
    }
    buf[n++] = (char)(0x80 | (cp & 0x3f));
    return n;
}

/* The string at p (at its opening quote) into *out (malloc'd, NUL-terminated): bytes as they
 * are, escapes decoded to UTF-8. */
static int parse_string(struct parser *p, char **out) {
    p->pos++; /* opening quote */
    size_t cap = 16, n = 0;
    char *buf = XALLOC(cap);
    for (;;) {
        const char *why = p->pos >= p->len ? "unterminated string" : NULL;
        unsigned char c = why ? 0 : (unsigned char)p->s[p->pos++];
        if (!why && c == '"') break;
        if (!why && c < 0x20) why = "control character in string";
        unsigned cp = c;
        if (why || (c == '\\' && parse_escape(p, &cp) != 0)) {
            free(buf);
            return why ? fail(p, why) : -1;
        }
        if (n + 5 > cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            CHECK(buf != NULL);
        }
        if (c == '\\') n += utf8_put(buf + n, cp);
        else buf[n++] = (char)c;
    }
    buf[n] = '\0';
    *out = buf;
    return 0;
}

static int parse_number(struct parser *p, struct json *v) {
    size_t start = p->pos;
    if (p->pos < p->len && p->s[p->pos] == '-') p->pos++;
    size_t digits = p->pos;
    while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
    if (p->pos == digits) return fail(p, "expected a value");
    if (p->pos < p->len && p->s[p->pos] == '.') {
        p->pos++;
        size_t f = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
        if (p->pos == f) return fail(p, "bad number");
    }
    if (p->pos < p->len && (p->s[p->pos] == 'e' || p->s[p->pos] == 'E')) {
        p->pos++;
        if (p->pos < p->len && (p->s[p->pos] == '+' || p->s[p->pos] == '-')) p->pos++;
        size_t f = p->pos;
        while (p->pos < p->len && p->s[p->pos] >= '0' && p->s[p->pos] <= '9') p->pos++;
        if (p->pos == f) return fail(p, "bad number");
    }
    char tmp[64];
    size_t n = p->pos - start;
    if (n >= sizeof tmp) return fail(p, "number too long");
    memcpy(tmp, p->s + start, n);
    tmp[n] = '\0';
    v->type = JSON_NUMBER;
    v->number = strtod(tmp, NULL);
    if (!isfinite(v->number)) return fail(p, "number out of range");
    return 0;
}

static int parse_container(struct parser *p, struct json *v, int depth, int object) {
    char close = object ? '}' : ']';
    v->type = object ? JSON_OBJECT : JSON_ARRAY;
    p->pos++;
    skip_ws(p);
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        return 0;
    }
    int cap = 0;
    for (;;) {
        if (v->count == cap) {
            cap = cap ? cap * 2 : 8;
            v->items = realloc(v->items, (size_t)cap * sizeof *v->items);
            CHECK(v->items != NULL);
            if (object) {
                v->keys = realloc(v->keys, (size_t)cap * sizeof *v->keys);
                CHECK(v->keys != NULL);
            }
        }
        skip_ws(p);
        if (object) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, "expected a string key");
            if (parse_string(p, &v->keys[v->count]) != 0) return -1;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') {
                free(v->keys[v->count]);
                return fail(p, "expected ':'");
            }
            p->pos++;
        }
        memset(&v->items[v->count], 0, sizeof v->items[0]);
        if (parse_value(p, &v->items[v->count], depth + 1) != 0) {
            json_free(&v->items[v->count]);
            if (object) free(v->keys[v->count]);
            return -1;
        }
        v->count++;
        skip_ws(p);
        if (p->pos < p->len && p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->pos < p->len && p->s[p->pos] == close) {
            p->pos++;
            return 0;
        }
        return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static int parse_value(struct parser *p, struct json *v, int depth) {
    if (depth > MAX_DEPTH) return fail(p, "nested too deeply");
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, "unexpected end");
    char c = p->s[p->pos];
    if (c == '{' || c == '[') return parse_container(p, v, depth, c == '{');
    if (c == '"') {
        v->type = JSON_STRING;
        return parse_string(p, &v->string);
    }
    static const struct {
        const char *word;
        enum json_type type;
        int boolean;
    } words[] = {{"true", JSON_BOOL, 1}, {"false", JSON_BOOL, 0}, {"null", JSON_NULL, 0}};
    for (size_t i = 0; i < 3; i++) {
        size_t n = strlen(words[i].word);
        if (p->len - p->pos >= n && memcmp(p->s + p->pos, words[i].word, n) == 0) {
            p->pos += n;
            v->type = words[i].type;
            v->boolean = words[i].boolean;
            return 0;
        }
    }
    return parse_number(p, v);
}

int json_parse(const char *text, size_t len, struct json *out, struct err *e) {
    struct parser p = {text, len, 0, e};
    memset(out, 0, sizeof *out);
    if (parse_value(&p, out, 0) != 0) {
        json_free(out);
        return -1;
    }
    skip_ws(&p);
    if (p.pos != len) {
        json_free(out);
        return fail(&p, "trailing characters after the value");
    }
    return 0;
}

void json_free(struct json *j) {
    for (int i = 0; i < j->count; i++) {
        json_free(&j->items[i]);
        if (j->keys) free(j->keys[i]);
    }
    free(j->items);
    free(j->keys);
    free(j->string);
    memset(j, 0, sizeof *j);
}

const struct json *json_get(const struct json *obj, const char *key) {
    if (!obj || obj->type != JSON_OBJECT) return NULL;
    for (int i = 0; i < obj->count; i++)
        if (strcmp(obj->keys[i], key) == 0) return &obj->items[i];
    return NULL;
}

void strbuf_printf(struct strbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    CHECK(n >= 0);
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->s = realloc(b->s, b->cap);
        CHECK(b->s != NULL);
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void strbuf_json_string(struct strbuf *b, const char *src) {
    strbuf_printf(b, "\"");
    for (const unsigned char *c = (const unsigned char *)src; *c; c++) {
        if (*c == '"' || *c == '\\') strbuf_printf(b, "\\%c", *c);
        else if (*c < 0x20) strbuf_printf(b, "\\u%04x", *c);
        else strbuf_printf(b, "%c", *c);
    }
    strbuf_printf(b, "\"");
}

void strbuf_free(struct strbuf *b) {
    free(b->s);
    memset(b, 0, sizeof *b);
}
