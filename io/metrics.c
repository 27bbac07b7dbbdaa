#include "metrics.h"

#include "../common/file.h"
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A number member ("key":value) or null where the value is not finite (JSON has no NaN). */
static void put_number(struct strbuf *b, const char *key, double v) {
    if (isfinite(v)) strbuf_printf(b, ",\"%s\":%.9g", key, v);
    else strbuf_printf(b, ",\"%s\":null", key);
}

static void begin_record(struct strbuf *b, const char *kind, const char *run) {
    strbuf_printf(b, "{\"kind\":\"%s\",\"run\":", kind);
    strbuf_json_string(b, run);
}

/* Whether the complete line text[0..len) is a record of `run` at or before the resume point. */
static int keep_line(const char *text, size_t len, const char *run, long global_step, int epochs) {
    struct json j;
    struct err ignored;
    if (json_parse(text, len, &j, &ignored) != 0) return 0;
    const struct json *kind = json_get(&j, "kind"), *r = json_get(&j, "run");
    const struct json *g = json_get(&j, "global_step"), *ep = json_get(&j, "epoch");
    int keep = j.type == JSON_OBJECT && kind && kind->type == JSON_STRING && r && r->type == JSON_STRING &&
               strcmp(r->string, run) == 0 && g && g->type == JSON_NUMBER && g->number <= (double)global_step;
    if (keep && strcmp(kind->string, "epoch") == 0)
        keep = ep && ep->type == JSON_NUMBER && ep->number <= epochs;
    else if (keep) keep = strcmp(kind->string, "step") == 0;
    json_free(&j);
    return keep;
}

/* The elapsed_s of a kept line (0 when it has none). */
static double line_elapsed(const char *text, size_t len) {
    struct json j;
    struct err ignored;
    if (json_parse(text, len, &j, &ignored) != 0) return 0;
    const struct json *t = json_get(&j, "elapsed_s");
    double v = t && t->type == JSON_NUMBER ? t->number : 0;
    json_free(&j);
    return v;
}

/* The kept lines of the existing file (none when it does not exist) into out. */
static int read_kept(struct metrics *m, long global_step, int epochs, struct strbuf *out, struct err *e) {
    if (access(m->path, F_OK) != 0) return 0;
    uint8_t *data;
    size_t size;
    if (file_read_all(m->path, &data, &size, e) != 0) return -1;
    const char *s = (const char *)data;
    for (size_t at = 0; at < size;) {
        const char *nl = memchr(s + at, '\n', size - at);
        if (!nl) break; /* a torn last line */
        size_t len = (size_t)(nl - (s + at));
        if (keep_line(s + at, len, m->run, global_step, epochs)) {
            strbuf_printf(out, "%.*s\n", (int)len, s + at);
            m->elapsed0 = line_elapsed(s + at, len);
        }
        at += len + 1;
    }
    free(data);
    return 0;
}

int metrics_open(struct metrics *m, const char *path, const char *run, long global_step, int epochs,
                 struct err *e) {
    memset(m, 0, sizeof *m);
    m->path = strdup(path);
    snprintf(m->run, sizeof m->run, "%s", run);
    struct strbuf kept = {0};
    strbuf_printf(&kept, "%s", ""); /* an empty file for a fresh start still has a buffer */
    int rc = read_kept(m, global_step, epochs, &kept, e);
    if (!rc) rc = file_write_atomic(path, kept.s, kept.len, e);
    strbuf_free(&kept);
    if (!rc && !(m->f = fopen(path, "a"))) rc = err_sys(e, errno, "%s: cannot open for appending", path);
    if (rc) metrics_close(m);
    return rc;
}

/* Appends the record in b (a '}' and newline are added), flushes it, fsyncs when asked. */
static int append(struct metrics *m, struct strbuf *b, int sync, struct err *e) {
    int rc = 0;
    strbuf_printf(b, "}\n");
    if (m->f) {
        if (fwrite(b->s, 1, b->len, m->f) != b->len || fflush(m->f) != 0)
            rc = err_sys(e, errno, "%s: write failed; no more metrics are written", m->path);
        else if (sync && fsync(fileno(m->f)) != 0)
            rc = err_sys(e, errno, "%s: fsync failed; no more metrics are written", m->path);
        if (rc) fclose(m->f), m->f = NULL;
    }
    strbuf_free(b);
    return rc;
}

int metrics_step(struct metrics *m, const struct metrics_step *r, struct err *e) {
    struct strbuf b = {0};
    begin_record(&b, "step", m->run);
    strbuf_printf(&b, ",\"epoch\":%d,\"step\":%d,\"global_step\":%ld", r->epoch, r->step, r->global_step);
    put_number(&b, "loss", r->loss);
    put_number(&b, "lr", r->lr);
    put_number(&b, "images_per_s", r->images_per_s);
    put_number(&b, "elapsed_s", m->elapsed0 + r->elapsed_s);
    return append(m, &b, 0, e);
}

int metrics_epoch(struct metrics *m, const struct metrics_epoch *r, struct err *e) {
    struct strbuf b = {0};
    begin_record(&b, "epoch", m->run);
    strbuf_printf(&b, ",\"epoch\":%d,\"global_step\":%ld", r->epoch, r->global_step);
    put_number(&b, "train_loss", r->train_loss);
    put_number(&b, "train_accuracy", r->train_accuracy);
    put_number(&b, "test_accuracy", r->test_accuracy < 0 ? NAN : r->test_accuracy);
    put_number(&b, "images_per_s", r->images_per_s);
    put_number(&b, "elapsed_s", m->elapsed0 + r->elapsed_s);
    put_number(&b, "eta_s", r->eta_s);
    return append(m, &b, 1, e);
}

int metrics_final(struct metrics *m, long global_step, double test_accuracy, int tta, double elapsed_s,
                  struct err *e) {
    struct strbuf b = {0};
    begin_record(&b, "final", m->run);
    strbuf_printf(&b, ",\"global_step\":%ld", global_step);
    put_number(&b, "test_accuracy", test_accuracy);
    strbuf_printf(&b, ",\"tta\":%d", tta);
    put_number(&b, "elapsed_s", m->elapsed0 + elapsed_s);
    return append(m, &b, 1, e);
}

void metrics_close(struct metrics *m) {
    if (m->f) fclose(m->f);
    free(m->path);
    m->f = NULL, m->path = NULL;
}
