#include "cifar.h"

#include "../common/file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <zlib.h>

const char *const cifar_class_names[CIFAR_CLASSES] = {"airplane", "automobile", "bird",  "cat",  "deer",
                                                      "dog",      "frog",       "horse", "ship", "truck"};
const char *const cifar_short_names[CIFAR_CLASSES] = {"plane", "car",  "bird",  "cat",  "deer",
                                                      "dog",   "frog", "horse", "ship", "truck"};

/* File slots: 0..4 data_batch_1..5.bin, 5 test_batch.bin. */
#define NSLOTS 6
static const char *const slot_names[NSLOTS] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                               "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};

struct blob {
    uint8_t *data;
    size_t size;
};

static int slot_of(const char *basename) {
    for (int s = 0; s < NSLOTS; s++)
        if (strcmp(basename, slot_names[s]) == 0) return s;
    return -1;
}

/* Checks the record structure of one file's contents; `where` names the file in messages. */
static int validate(const char *where, const struct blob *b, struct err *e) {
    if (b->size == 0) return err_set(e, "%s: empty file (expected 3073-byte records)", where);
    if (b->size % CIFAR_RECORD_BYTES != 0)
        return err_set(e,
                       "%s: size %zu bytes is not a multiple of the 3073-byte record "
                       "(%zu stray bytes after record %zu)",
                       where, b->size, b->size % CIFAR_RECORD_BYTES, b->size / CIFAR_RECORD_BYTES);
    if (b->size / CIFAR_RECORD_BYTES > (size_t)1 << 24)
        return err_set(e, "%s: %zu records is more than this reader accepts", where,
                       b->size / CIFAR_RECORD_BYTES);
    for (size_t r = 0; r < b->size / CIFAR_RECORD_BYTES; r++) {
        uint8_t label = b->data[r * CIFAR_RECORD_BYTES];
        if (label >= CIFAR_CLASSES)
            return err_set(e, "%s: record %zu (byte offset %zu): label %u is not in 0..9", where, r,
                           r * CIFAR_RECORD_BYTES, label);
    }
    return 0;
}

/* --- tar.gz ------------------------------------------------------------------------------ */

struct gz {
    gzFile f;
    const char *path;
    uint64_t offset; /* bytes of the uncompressed tar stream consumed */
};

/* Reads exactly n bytes of the uncompressed stream, or fails naming what went wrong. */
static int gz_read(struct gz *g, void *dst, size_t n, const char *what, struct err *e) {
    uint8_t *p = dst;
    while (n > 0) {
        unsigned chunk = n > (1u << 30) ? 1u << 30 : (unsigned)n;
        int r = gzread(g->f, p, chunk);
        if (r <= 0) {
            int code = Z_OK;
            const char *msg = gzerror(g->f, &code);
            if (r < 0 || code != Z_OK)
                return err_set(e, "%s: %s at uncompressed offset %llu (reading %s)", g->path,
                               code == Z_BUF_ERROR ? "truncated gzip stream" : msg,
                               (unsigned long long)g->offset, what);
            return err_set(e, "%s: archive ends at uncompressed offset %llu in the middle of %s", g->path,
                           (unsigned long long)g->offset, what);
        }
        p += r, n -= (size_t)r, g->offset += (uint64_t)r;
    }
    return 0;
}

/* A member's `size` bytes into *data, in a buffer that grows with what the stream actually
 * delivers (16 MiB at a time), so a header claiming more than the archive holds costs no more
 * memory than the archive's data (tests/fuzz found a 522-byte file whose header asked for a 2 GB
 * buffer up front). */
#define MEMBER_CHUNK ((size_t)1 << 24)
static int gz_read_member(struct gz *g, uint64_t size, uint8_t **data, const char *name, struct err *e) {
    size_t have = 0, cap = 0;
    uint8_t *buf = NULL;
    while (have < size || !buf) {
        size_t chunk = size - have < MEMBER_CHUNK ? (size_t)(size - have) : MEMBER_CHUNK;
        if (have + chunk > cap || !buf) {
            size_t want = cap * 2 > have + chunk ? cap * 2 : have + chunk;
            cap = want < size ? want : (size_t)size;
            uint8_t *grown = realloc(buf, cap ? cap : 1);
            if (!grown) {
                free(buf);
                return err_set(e, "%s: out of memory for %s", g->path, name);
            }
            buf = grown;
        }
        if (chunk && gz_read(g, buf + have, chunk, name, e) != 0) {
            free(buf);
            return -1;
        }
        have += chunk;
    }
    *data = buf;
    return 0;
}

static int parse_octal(const char *field, size_t len, uint64_t *out) {
    uint64_t v = 0;
    size_t i = 0;
    if ((unsigned char)field[0] & 0x80) { /* GNU base-256 for large sizes */
        v = (unsigned char)field[0] & 0x7f;
        for (i = 1; i < len; i++) {
            if (v >> 55) return -1;
            v = (v << 8) | (unsigned char)field[i];
        }
        *out = v;
        return 0;
    }
    while (i < len && field[i] == ' ') i++;
    int digits = 0;
    for (; i < len && field[i] >= '0' && field[i] <= '7'; i++, digits++) {
        if (v >> 60) return -1;
        v = v * 8 + (uint64_t)(field[i] - '0');
    }
    for (; i < len; i++)
        if (field[i] != ' ' && field[i] != '\0') return -1;
    if (!digits) return -1;
    *out = v;
    return 0;
}

static int read_tarball(const char *path, unsigned need_mask, unsigned optional_mask,
                        struct blob blobs[NSLOTS], struct err *e) {
    FILE *probe = fopen(path, "rb");
    if (!probe) return err_sys(e, errno, "%s", path);
    unsigned char magic[2] = {0, 0};
    size_t m = fread(magic, 1, 2, probe);
    fclose(probe);
    if (m < 2 || magic[0] != 0x1f || magic[1] != 0x8b)
        return err_set(e, "%s: not a gzip file (expected cifar-10-binary.tar.gz or a directory)", path);
    struct gz g = {.f = gzopen(path, "rb"), .path = path};
    if (!g.f) return err_sys(e, errno, "%s", path);
    gzbuffer(g.f, 1 << 17);
    char longname[1024] = "";
    int rc = 0, ended = 0;
    while (!ended) {
        unsigned char h[512];
        uint64_t header_at = g.offset;
        if ((rc = gz_read(&g, h, sizeof h, "a tar header", e)) != 0) break;
        int zero = 1;
        for (int i = 0; i < 512 && zero; i++) zero = h[i] == 0;
        if (zero) {
            ended = 1;
            break;
        }
        unsigned sum = 0;
        for (int i = 0; i < 512; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
        uint64_t stored_sum, size;
        if (parse_octal((char *)h + 148, 8, &stored_sum) != 0 || stored_sum != sum ||
            parse_octal((char *)h + 124, 12, &size) != 0) {
            rc = err_set(e, "%s: corrupt tar header at uncompressed offset %llu", path,
                         (unsigned long long)header_at);
            break;
        }
        char type = (char)h[156];
        char name[512];
        if (longname[0]) {
            snprintf(name, sizeof name, "%s", longname);
            longname[0] = '\0';
        } else if (memcmp(h + 257, "ustar", 5) == 0 && h[345]) {
            snprintf(name, sizeof name, "%.155s/%.100s", (char *)h + 345, (char *)h);
        } else {
            snprintf(name, sizeof name, "%.100s", (char *)h);
        }
        uint64_t padded = (size + 511) / 512 * 512;
        const char *base = strrchr(name, '/');
        base = base ? base + 1 : name;
        int slot = (type == '0' || type == '\0') ? slot_of(base) : -1;
        if (type == 'L' && size < sizeof longname) { /* GNU long name for the next member */
            char buf[1024];
            if ((rc = gz_read(&g, buf, (size_t)padded, "a long file name", e)) != 0) break;
            memcpy(longname, buf, (size_t)size);
            longname[size] = '\0';
            continue;
        }
        if (slot >= 0 && ((need_mask | optional_mask) >> slot & 1) && !blobs[slot].data) {
            if (size > (uint64_t)1 << 36) {
                rc = err_set(e, "%s: %s: member size %llu is implausible", path, name,
                             (unsigned long long)size);
                break;
            }
            if ((rc = gz_read_member(&g, size, &blobs[slot].data, name, e)) != 0) break;
            blobs[slot].size = (size_t)size;
            char where[4800];
            snprintf(where, sizeof where, "%s: %s", path, name);
            if ((rc = validate(where, &blobs[slot], e)) != 0) break;
            size_t pad = (size_t)(padded - size);
            unsigned char zeros[512];
            if (pad && (rc = gz_read(&g, zeros, pad, name, e)) != 0) break;
        } else {
            unsigned char skip[1 << 14];
            while (padded > 0) {
                size_t n = padded > sizeof skip ? sizeof skip : (size_t)padded;
                if ((rc = gz_read(&g, skip, n, name, e)) != 0) break;
                padded -= n;
            }
            if (rc) break;
        }
    }
    if (rc == 0) { /* drain to the end so that the gzip CRC and length trailer get checked */
        unsigned char skip[1 << 14];
        int r;
        while ((r = gzread(g.f, skip, sizeof skip)) > 0) g.offset += (uint64_t)r;
        int code = Z_OK;
        const char *msg = gzerror(g.f, &code);
        if (r < 0 || code != Z_OK)
            rc = err_set(e, "%s: %s at uncompressed offset %llu", path,
                         code == Z_BUF_ERROR ? "truncated gzip stream" : msg, (unsigned long long)g.offset);
    }
    gzclose(g.f);
    for (int s = 0; rc == 0 && s < NSLOTS; s++)
        if ((need_mask >> s & 1) && !blobs[s].data)
            rc = err_set(e, "%s: the archive has no %s", path, slot_names[s]);
    return rc;
}

int cifar_label(const struct cifar_set *s, int i) { return s->records[i][0]; }
const uint8_t *cifar_pixels(const struct cifar_set *s, int i) { return s->records[i] + 1; }

/* --- assembling -------------------------------------------------------------------------- */

static void set_add(struct cifar_set *set, uint8_t *buffer, size_t size) {
    int n = (int)(size / CIFAR_RECORD_BYTES);
    set->buffers[set->nbuffers++] = buffer;
    set->records = realloc(set->records, (size_t)(set->n + n) * sizeof *set->records);
    CHECK(set->records != NULL);
    for (int i = 0; i < n; i++) set->records[set->n + i] = buffer + (size_t)i * CIFAR_RECORD_BYTES;
    set->n += n;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

int cifar_load(const char *path, unsigned what, struct cifar_data *out, struct err *e) {
    memset(out, 0, sizeof *out);
    unsigned need = 0, optional = 0;
    if (what & CIFAR_TRAIN) need |= 0x1f;
    if (what & CIFAR_TEST) need |= 0x20;
    if (what & CIFAR_TEST_OPTIONAL) optional |= 0x20;
    struct blob blobs[NSLOTS] = {{0}};
    struct stat st;
    if (stat(path, &st) != 0) return err_sys(e, errno, "%s", path);
    if (strlen(path) > 4000) return err_set(e, "%.100s...: path too long", path);
    char dir[4400];
    int rc;
    const char *probe_name = (what & CIFAR_TRAIN) ? "data_batch_1.bin" : "test_batch.bin";
    char probe[4200], sub[4200], tgz[4200];
    snprintf(probe, sizeof probe, "%s/%s", path, probe_name);
    snprintf(sub, sizeof sub, "%s/cifar-10-batches-bin", path);
    snprintf(tgz, sizeof tgz, "%s/cifar-10-binary.tar.gz", path);
    if (S_ISREG(st.st_mode) || (S_ISDIR(st.st_mode) && !exists(probe) && !is_dir(sub) && exists(tgz))) {
        const char *tarball = S_ISREG(st.st_mode) ? path : tgz;
        snprintf(out->source, sizeof out->source, "%s", tarball);
        rc = read_tarball(tarball, need, optional, blobs, e);
    } else if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", exists(probe) || !is_dir(sub) ? path : sub);
        snprintf(out->source, sizeof out->source, "%s", dir);
        rc = 0;
        for (int s = 0; s < NSLOTS && rc == 0; s++) {
            char file[4500];
            snprintf(file, sizeof file, "%s/%s", dir, slot_names[s]);
            if (!((need >> s) & 1) && !(((optional >> s) & 1) && exists(file))) continue;
            if ((rc = file_read_all(file, &blobs[s].data, &blobs[s].size, e)) == 0)
                rc = validate(file, &blobs[s], e);
        }
    } else {
        return err_set(e, "%s: neither a directory nor a file", path);
    }
    if (rc != 0) {
        for (int s = 0; s < NSLOTS; s++) free(blobs[s].data);
        return -1;
    }
    for (int s = 0; s < 5; s++)
        if (blobs[s].data) set_add(&out->train, blobs[s].data, blobs[s].size);
    if (blobs[5].data) set_add(&out->test, blobs[5].data, blobs[5].size);
    return 0;
}

static void set_free(struct cifar_set *s) {
    for (int i = 0; i < s->nbuffers; i++) free(s->buffers[i]);
    free(s->records);
    memset(s, 0, sizeof *s);
}

void cifar_free(struct cifar_data *d) {
    set_free(&d->train);
    set_free(&d->test);
}
