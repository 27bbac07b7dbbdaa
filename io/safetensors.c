#include "safetensors.h"

#include "../common/file.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#define MAX_HEADER (100u << 20) /* the safetensors limit */

static const char *dtype_name(enum st_dtype d) { return d == ST_F32 ? "F32" : "I64"; }
static size_t dtype_size(enum st_dtype d) { return d == ST_F32 ? 4 : 8; }

static size_t numel(const struct st_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

static int write_all(int fd, const void *buf, size_t n, const char *path, struct err *e) {
    const uint8_t *p = buf;
    while (n > 0) {
        ssize_t w = write(fd, p, n > (1u << 30) ? 1u << 30 : n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return err_sys(e, errno, "%s: write failed", path);
        p += w, n -= (size_t)w;
    }
    return 0;
}

static uint32_t crc_update(uint32_t crc, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? 1u << 30 : (uInt)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk, n -= chunk;
    }
    return crc;
}

int safetensors_write(const char *path, const struct st_tensor *tensors, int ntensors,
                      const struct st_meta *meta, int nmeta, struct err *e) {
    uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
    for (int i = 0; i < ntensors; i++)
        crc = crc_update(crc, tensors[i].data, numel(&tensors[i]) * dtype_size(tensors[i].dtype));
    struct strbuf h = {0};
    strbuf_printf(&h, "{\"__metadata__\":{");
    for (int i = 0; i < nmeta; i++) {
        strbuf_json_string(&h, meta[i].key);
        strbuf_printf(&h, ":");
        strbuf_json_string(&h, meta[i].value);
        strbuf_printf(&h, ",");
    }
    strbuf_printf(&h, "\"crc32\":\"%08" PRIx32 "\"}", crc);
    size_t off = 0;
    for (int i = 0; i < ntensors; i++) {
        size_t bytes = numel(&tensors[i]) * dtype_size(tensors[i].dtype);
        strbuf_printf(&h, ",");
        strbuf_json_string(&h, tensors[i].name);
        strbuf_printf(&h, ":{\"dtype\":\"%s\",\"shape\":[", dtype_name(tensors[i].dtype));
        for (int d = 0; d < tensors[i].ndim; d++)
            strbuf_printf(&h, "%s%" PRId64, d ? "," : "", tensors[i].shape[d]);
        strbuf_printf(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + bytes);
        off += bytes;
    }
    strbuf_printf(&h, "}");
    while (h.len % 8) strbuf_printf(&h, " ");
    uint8_t size_le[8];
    for (int i = 0; i < 8; i++) size_le[i] = (uint8_t)((uint64_t)h.len >> (8 * i));

    char tmp[4200], dir[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    snprintf(dir, sizeof dir, "%s", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        strbuf_free(&h);
        return err_sys(e, errno, "%s: cannot create temporary file %s", path, tmp);
    }
    int rc = write_all(fd, size_le, 8, path, e);
    if (!rc) rc = write_all(fd, h.s, h.len, path, e);
    for (int i = 0; i < ntensors && !rc; i++)
        rc = write_all(fd, tensors[i].data, numel(&tensors[i]) * dtype_size(tensors[i].dtype), path, e);
    strbuf_free(&h);
    if (!rc && fsync(fd) != 0) rc = err_sys(e, errno, "%s: fsync failed", path);
    if (close(fd) != 0 && !rc) rc = err_sys(e, errno, "%s: close failed", path);
    if (!rc && rename(tmp, path) != 0) rc = err_sys(e, errno, "%s: cannot rename %s over it", path, tmp);
    if (rc) {
        unlink(tmp);
        return rc;
    }
    int dfd = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* make the rename durable; some filesystems refuse fsync on directories */
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

static int get_offsets(const struct json *t, size_t *b, size_t *en) {
    const struct json *o = json_get(t, "data_offsets");
    if (!o || o->type != JSON_ARRAY || o->count != 2) return -1;
    for (int i = 0; i < 2; i++)
        if (o->items[i].type != JSON_NUMBER || o->items[i].number < 0 || o->items[i].number > 9.0e15 ||
            o->items[i].number != (double)(uint64_t)o->items[i].number)
            return -1;
    *b = (size_t)o->items[0].number;
    *en = (size_t)o->items[1].number;
    return *b <= *en ? 0 : -1;
}

static int cmp_size(const void *a, const void *b) {
    const size_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The 8-byte header length and the JSON header after it into st->header and st->data_start. */
static int header_parse(struct safetensors *st, struct err *e) {
    const char *path = st->path;
    if (st->size < 8) return err_set(e, "%s: truncated: %zu bytes, not a safetensors file", path, st->size);
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)st->file[i] << (8 * i);
    if (hlen > MAX_HEADER || hlen < 2)
        return err_set(e, "%s: header size %" PRIu64 " is invalid: not a safetensors file", path, hlen);
    if (8 + hlen > st->size)
        return err_set(e, "%s: truncated: header needs %" PRIu64 " bytes, file has %zu", path, 8 + hlen,
                       st->size);
    struct err je;
    if (json_parse((const char *)st->file + 8, (size_t)hlen, &st->header, &je) != 0)
        return err_set(e, "%s: corrupt header: %s", path, je.msg);
    if (st->header.type != JSON_OBJECT) return err_set(e, "%s: header is not a JSON object", path);
    st->data_start = 8 + (size_t)hlen;
    return 0;
}

/* The bytes of one element of safetensors dtype name, 0 for a name it does not define. */
static size_t dtype_name_size(const char *name) {
    static const struct {
        const char *name;
        size_t size;
    } known[] = {{"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"I16", 2},
                 {"I8", 1},  {"U8", 1},  {"BOOL", 1}, {"U16", 2},  {"U32", 4}, {"U64", 8}};
    for (size_t k = 0; k < sizeof known / sizeof known[0]; k++)
        if (strcmp(name, known[k].name) == 0) return known[k].size;
    return 0;
}

/* The element count of a shape (at most 8 non-negative integer dimensions, 2^40 elements), or
 * -1 for anything else. */
static int shape_count(const struct json *sh, size_t *n) {
    if (!sh || sh->type != JSON_ARRAY || sh->count > 8) return -1;
    *n = 1;
    for (int d = 0; d < sh->count; d++) {
        double v = sh->items[d].number;
        if (sh->items[d].type != JSON_NUMBER || v < 0 || v > 1e12 || v != (double)(int64_t)v) return -1;
        *n *= (size_t)v;
        if (*n > ((size_t)1 << 40)) return -1;
    }
    return 0;
}

/* Header entry name: __metadata__ maps strings to strings; a tensor has a known dtype, an
 * integer shape, and offsets inside the data section of its byte count (numel x dtype size),
 * stored in range[2]. 1 for __metadata__, 0 for a tensor, -1 with one line in e. */
static int entry_check(const struct safetensors *st, const char *name, const struct json *t, size_t range[2],
                       struct err *e) {
    const char *path = st->path;
    if (strcmp(name, "__metadata__") == 0) {
        if (t->type != JSON_OBJECT) return err_set(e, "%s: __metadata__ must be an object", path);
        for (int k = 0; k < t->count; k++)
            if (t->items[k].type != JSON_STRING)
                return err_set(e, "%s: __metadata__ must map strings to strings", path);
        return 1;
    }
    const struct json *dt = json_get(t, "dtype");
    size_t elsize = dt && dt->type == JSON_STRING ? dtype_name_size(dt->string) : 0, n, b, en;
    size_t data_len = st->size - st->data_start;
    if (!elsize) return err_set(e, "%s: tensor %s: missing or unknown dtype", path, name);
    if (shape_count(json_get(t, "shape"), &n) != 0) return err_set(e, "%s: tensor %s: bad shape", path, name);
    if (get_offsets(t, &b, &en) != 0) return err_set(e, "%s: tensor %s: bad data_offsets", path, name);
    if (en > data_len)
        return err_set(e, "%s: truncated: tensor %s ends at data byte %zu, data section has %zu", path, name,
                       en, data_len);
    if (en - b != n * elsize)
        return err_set(e, "%s: tensor %s: %zu bytes for %zu elements of %s", path, name, en - b, n,
                       dt->string);
    range[0] = b, range[1] = en;
    return 0;
}

/* Every header entry checked (entry_check), and the tensors' byte ranges tiling the data
 * section exactly: no overlap, no gap, nothing after the last. */
static int entries_check(const struct safetensors *st, struct err *e) {
    size_t(*ranges)[2] = XALLOC(sizeof *ranges * (size_t)(st->header.count + 1));
    int nr = 0, rc = 0;
    for (int i = 0; !rc && i < st->header.count; i++) {
        rc = entry_check(st, st->header.keys[i], &st->header.items[i], ranges[nr], e);
        if (rc == 0) nr++;
        rc = rc < 0 ? -1 : 0;
    }
    qsort(ranges, (size_t)nr, sizeof *ranges, cmp_size);
    size_t at = 0, data_len = st->size - st->data_start;
    for (int i = 0; i < nr && !rc; i++) {
        if (ranges[i][0] != at)
            rc = err_set(e, "%s: tensor data overlaps or leaves a gap at data byte %zu", st->path, at);
        at = ranges[i][1];
    }
    if (!rc && at != data_len)
        rc = err_set(e, "%s: %zu bytes after the last tensor: file damaged or not a safetensors file",
                     st->path, data_len - at);
    free(ranges);
    return rc;
}

/* The data section's CRC-32 against the metadata's "crc32" (8 hex digits), which cifar10-dp
 * writes in every file. */
static int crc_check(const struct safetensors *st, struct err *e) {
    const char *stored = safetensors_meta(st, "crc32");
    uint32_t crc =
        crc_update((uint32_t)crc32(0L, Z_NULL, 0), st->file + st->data_start, st->size - st->data_start);
    char hex[16];
    snprintf(hex, sizeof hex, "%08" PRIx32, crc);
    if (!stored) return err_set(e, "%s: no crc32 in the metadata: not written by cifar10-dp", st->path);
    if (strcmp(stored, hex) != 0)
        return err_set(e, "%s: data checksum mismatch (crc32 %s stored, %s computed): the file is corrupt",
                       st->path, stored, hex);
    return 0;
}

int safetensors_read(const char *path, struct safetensors *st, struct err *e) {
    memset(st, 0, sizeof *st);
    snprintf(st->path, sizeof st->path, "%s", path);
    if (file_read_all(path, &st->file, &st->size, e) != 0) return -1;
    int rc = header_parse(st, e);
    if (!rc) rc = entries_check(st, e);
    if (!rc) rc = crc_check(st, e);
    if (rc) safetensors_free(st);
    return rc;
}

void safetensors_free(struct safetensors *st) {
    free(st->file);
    json_free(&st->header);
    st->file = NULL;
}

const char *safetensors_meta(const struct safetensors *st, const char *key) {
    const struct json *v = json_get(json_get(&st->header, "__metadata__"), key);
    return v && v->type == JSON_STRING ? v->string : NULL;
}

int safetensors_tensor(const struct safetensors *st, const char *name, enum st_dtype dtype, int ndim,
                       const int *shape, const void **data, struct err *e) {
    const struct json *t = json_get(&st->header, name);
    if (!t || strcmp(name, "__metadata__") == 0)
        return err_set(e, "%s: no tensor %s: not a %s file for this model", st->path, name, "cifar10-dp");
    const struct json *dt = json_get(t, "dtype"), *sh = json_get(t, "shape");
    char want[64] = "", have[64] = "";
    for (int d = 0; d < ndim; d++)
        snprintf(want + strlen(want), sizeof want - strlen(want), "%s%d", d ? "," : "", shape[d]);
    int same = sh->count == ndim;
    for (int d = 0; d < sh->count; d++) {
        snprintf(have + strlen(have), sizeof have - strlen(have), "%s%.0f", d ? "," : "",
                 sh->items[d].number);
        if (d < ndim && sh->items[d].number != shape[d]) same = 0;
    }
    if (strcmp(dt->string, dtype_name(dtype)) != 0)
        return err_set(e, "%s: tensor %s has dtype %s, expected %s", st->path, name, dt->string,
                       dtype_name(dtype));
    if (!same)
        return err_set(e, "%s: tensor %s has shape [%s], expected [%s]: a different model architecture",
                       st->path, name, have, want);
    size_t b, en;
    CHECK(get_offsets(t, &b, &en) == 0); /* validated by safetensors_read */
    *data = st->file + st->data_start + b;
    return 0;
}
