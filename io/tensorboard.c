#include "tensorboard.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* A growing byte buffer for protocol-buffer encoding. */
struct pb {
    uint8_t *p;
    size_t len, cap;
};

static void pb_put(struct pb *b, const void *data, size_t n) {
    if (b->len + n > b->cap) {
        b->cap = 2 * (b->len + n) + 64;
        b->p = realloc(b->p, b->cap);
        CHECK(b->p);
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
}

static void pb_varint(struct pb *b, uint64_t v) {
    uint8_t out[10];
    size_t n = 0;
    do {
        out[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        v >>= 7;
    } while (v);
    pb_put(b, out, n);
}

/* Wire types of the protobuf encoding. */
enum { VARINT = 0, FIXED64 = 1, LENGTH = 2, FIXED32 = 5 };

static void pb_key(struct pb *b, int field, int wire) { pb_varint(b, (uint64_t)field << 3 | (uint64_t)wire); }

static void pb_bytes(struct pb *b, int field, const void *data, size_t n) {
    pb_key(b, field, LENGTH);
    pb_varint(b, n);
    pb_put(b, data, n);
}

static void pb_string(struct pb *b, int field, const char *s) { pb_bytes(b, field, s, strlen(s)); }

/* An embedded message (its encoding in `m`, which is freed). */
static void pb_message(struct pb *b, int field, struct pb *m) {
    pb_bytes(b, field, m->p, m->len);
    free(m->p);
    *m = (struct pb){0};
}

static void put_le(struct pb *b, uint64_t v, int bytes) {
    uint8_t le[8];
    for (int i = 0; i < bytes; i++) le[i] = (uint8_t)(v >> (8 * i));
    pb_put(b, le, (size_t)bytes);
}

/* A fixed-width field (fixed64: a double's bits, fixed32: a float's), little-endian. */
static void pb_fixed(struct pb *b, int field, int wire, uint64_t bits, int bytes) {
    pb_key(b, field, wire);
    put_le(b, bits, bytes);
}

/* CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), bit by bit: records are short. */
static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t crc = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82f63b78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

/* TFRecord's masked CRC: rotated right by 15 and offset, so a CRC stored inside data that is
 * itself checksummed does not cancel out. */
static uint32_t masked_crc(const uint8_t *p, size_t n) {
    uint32_t c = crc32c(p, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* Writes one Event (its fields after wall_time and step in `body`, which is freed) in TFRecord
 * framing; flushes, and fsyncs when asked. */
static int write_event(struct tensorboard *tb, long step, struct pb *body, int sync, struct err *e) {
    struct timeval now;
    gettimeofday(&now, NULL);
    double wall = (double)now.tv_sec + 1e-6 * (double)now.tv_usec;
    uint64_t wall_bits;
    memcpy(&wall_bits, &wall, sizeof wall_bits);
    struct pb event = {0}, rec = {0};
    pb_fixed(&event, 1, FIXED64, wall_bits, 8); /* Event.wall_time */
    pb_key(&event, 2, VARINT);                  /* Event.step */
    pb_varint(&event, (uint64_t)step);
    pb_put(&event, body->p, body->len);
    put_le(&rec, event.len, 8);
    put_le(&rec, masked_crc(rec.p, 8), 4);
    pb_put(&rec, event.p, event.len);
    put_le(&rec, masked_crc(event.p, event.len), 4);
    int rc = 0;
    if (tb->f) {
        if (fwrite(rec.p, 1, rec.len, tb->f) != rec.len || fflush(tb->f) != 0)
            rc = err_sys(e, errno, "%s: write failed; no more TensorBoard events are written", tb->path);
        else if (sync && fsync(fileno(tb->f)) != 0)
            rc = err_sys(e, errno, "%s: fsync failed; no more TensorBoard events are written", tb->path);
        if (rc) fclose(tb->f), tb->f = NULL;
    }
    free(body->p), free(event.p), free(rec.p);
    *body = (struct pb){0};
    return rc;
}

/* Summary.Value {tag, simple_value} appended to a Summary under construction. */
static void add_scalar(struct pb *summary, const char *tag, double v) {
    struct pb value = {0};
    float f = (float)v;
    uint32_t bits;
    memcpy(&bits, &f, sizeof bits);
    pb_string(&value, 1, tag);             /* Value.tag */
    pb_fixed(&value, 2, FIXED32, bits, 4); /* Value.simple_value */
    pb_message(summary, 1, &value);        /* Summary.value */
}

/* Writes the Summary in `summary` (freed) as Event.summary at `step`. */
static int write_summary(struct tensorboard *tb, long step, struct pb *summary, int sync, struct err *e) {
    struct pb body = {0};
    pb_message(&body, 5, summary);
    return write_event(tb, step, &body, sync, e);
}

/* The text plugin's summary: a scalar DT_STRING tensor with plugin_name "text". */
static int write_text(struct tensorboard *tb, long step, const char *tag, const char *text, struct err *e) {
    struct pb plugin = {0}, meta = {0}, tensor = {0}, value = {0}, summary = {0};
    pb_string(&plugin, 1, "text"); /* PluginData.plugin_name; content: TextPluginData{} */
    pb_message(&meta, 1, &plugin); /* SummaryMetadata.plugin_data */
    pb_key(&tensor, 1, VARINT);    /* TensorProto.dtype = DT_STRING */
    pb_varint(&tensor, 7);
    pb_string(&tensor, 8, text);    /* TensorProto.string_val; no tensor_shape: a scalar */
    pb_string(&value, 1, tag);      /* Value.tag */
    pb_message(&value, 9, &meta);   /* Value.metadata */
    pb_message(&value, 8, &tensor); /* Value.tensor */
    pb_message(&summary, 1, &value);
    return write_summary(tb, step, &summary, 1, e);
}

/* mkdir -p: every missing directory of `dir`. */
static int make_dirs(const char *dir, struct err *e) {
    char *p = strdup(dir);
    CHECK(p);
    int rc = 0;
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST)
            rc = err_sys(e, errno, "%s: cannot create directory %s", dir, p);
        *s = c;
        if (rc || !c) break;
    }
    free(p);
    return rc;
}

/* A new file events.out.tfevents.SECONDS.HOST.PID[.N] in dir, never an existing one. */
static int create_file(struct tensorboard *tb, const char *dir, struct err *e) {
    char host[256] = "localhost";
    gethostname(host, sizeof host - 1);
    for (int n = 0; n < 100; n++) {
        size_t size = strlen(dir) + strlen(host) + 96;
        free(tb->path);
        tb->path = malloc(size);
        CHECK(tb->path);
        int len = snprintf(tb->path, size, "%s/events.out.tfevents.%010ld.%s.%ld", dir, (long)time(NULL),
                           host, (long)getpid());
        if (n) snprintf(tb->path + len, size - (size_t)len, ".%d", n);
        int fd = open(tb->path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) return err_sys(e, errno, "%s: cannot create TensorBoard event file", tb->path);
        tb->f = fdopen(fd, "w");
        CHECK(tb->f);
        return 0;
    }
    return err_set(e, "%s: cannot create TensorBoard event file: 100 names taken", tb->path);
}

int tensorboard_open(struct tensorboard *tb, const char *dir, long first_step, const char *settings,
                     struct err *e) {
    memset(tb, 0, sizeof *tb);
    int rc = make_dirs(dir, e);
    if (!rc) rc = create_file(tb, dir, e);
    struct pb body = {0}, session = {0};
    if (!rc) {
        pb_string(&body, 3, "brain.Event:2"); /* Event.file_version */
        rc = write_event(tb, 0, &body, 0, e);
    }
    if (!rc) {
        pb_key(&session, 1, VARINT); /* SessionLog.status = START */
        pb_varint(&session, 1);
        pb_message(&body, 7, &session); /* Event.session_log */
        rc = write_event(tb, first_step, &body, 0, e);
    }
    if (!rc) rc = write_text(tb, first_step, "settings", settings, e);
    if (rc) tensorboard_close(tb);
    return rc;
}

int tensorboard_step(struct tensorboard *tb, const struct metrics_step *r, struct err *e) {
    if (!tb->f) return 0;
    struct pb s = {0};
    add_scalar(&s, "train/loss", r->loss);
    add_scalar(&s, "train/learning_rate", r->lr);
    add_scalar(&s, "train/images_per_s", r->images_per_s);
    return write_summary(tb, r->global_step, &s, 0, e);
}

int tensorboard_epoch(struct tensorboard *tb, const struct metrics_epoch *r, struct err *e) {
    if (!tb->f) return 0;
    struct pb s = {0};
    add_scalar(&s, "epoch/epoch", r->epoch);
    add_scalar(&s, "epoch/train_loss", r->train_loss);
    add_scalar(&s, "epoch/train_accuracy", r->train_accuracy);
    if (r->test_accuracy >= 0) add_scalar(&s, "epoch/test_accuracy", r->test_accuracy);
    add_scalar(&s, "epoch/images_per_s", r->images_per_s);
    return write_summary(tb, r->global_step, &s, 1, e);
}

int tensorboard_final(struct tensorboard *tb, long global_step, double test_accuracy, struct err *e) {
    if (!tb->f) return 0;
    struct pb s = {0};
    add_scalar(&s, "final/test_accuracy", test_accuracy);
    return write_summary(tb, global_step, &s, 1, e);
}

void tensorboard_close(struct tensorboard *tb) {
    if (tb->f) fclose(tb->f);
    free(tb->path);
    tb->f = NULL, tb->path = NULL;
}
