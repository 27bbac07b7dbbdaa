/* libFuzzer target: the CIFAR-10 reader (data/cifar.c) on hostile input. The first byte picks
 * the form of the rest:
 *   0: cifar-10-binary.tar.gz as it is (gzip header, deflate stream, CRC, the tar inside);
 *   1: the tar stream, which this target gzips after fixing each header's checksum, so the
 *      mutations reach the tar headers' names, sizes and types and the members;
 *   2: a batch file, written as every one of data_batch_1..5.bin and test_batch.bin.
 * Every input must end in data whose records all have labels 0..9, or in one line of error;
 * never a crash, a sanitizer report or a multi-line message. Seeds: FUZZ_WRITE_SEEDS=DIR. */
#include "../../data/cifar.h"
#include "fuzz_io.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const char *const batches[] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                      "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};

/* Walks the tar headers as a reader would, writing each one's checksum (bytes 148..155). */
static void fix_tar_checksums(uint8_t *t, size_t n) {
    for (size_t at = 0; at + 512 <= n;) {
        uint8_t *h = t + at;
        unsigned sum = 0;
        for (int i = 0; i < 512; i++) sum += (i >= 148 && i < 156) ? ' ' : h[i];
        if (sum == 8 * ' ') break; /* an all-zero block: the end */
        snprintf((char *)h + 148, 8, "%06o", sum);
        h[155] = ' ';
        char size[13];
        memcpy(size, h + 124, 12);
        size[12] = 0;
        unsigned long long len = strtoull(size, NULL, 8);
        if (len > n) break;
        at += 512 + (len + 511) / 512 * 512;
    }
}

static size_t gzip(const uint8_t *in, size_t n, uint8_t **out) {
    z_stream z;
    memset(&z, 0, sizeof z);
    if (deflateInit2(&z, 1, Z_DEFLATED, 16 + 15, 8, Z_DEFAULT_STRATEGY) != Z_OK) abort();
    size_t cap = deflateBound(&z, n) + 64;
    *out = malloc(cap);
    z.next_in = (Bytef *)in, z.avail_in = (uInt)n, z.next_out = *out, z.avail_out = (uInt)cap;
    if (deflate(&z, Z_FINISH) != Z_STREAM_END) abort();
    size_t len = z.total_out;
    deflateEnd(&z);
    return len;
}

static void load(const char *path) {
    struct cifar_data d;
    struct err e = {""};
    if (cifar_load(path, CIFAR_TRAIN | CIFAR_TEST_OPTIONAL, &d, &e) != 0) {
        fuzz_check_message(e.msg);
        return;
    }
    const struct cifar_set *sets[2] = {&d.train, &d.test};
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < sets[s]->n; i++)
            if (cifar_label(sets[s], i) < 0 || cifar_label(sets[s], i) > 9) abort();
    cifar_free(&d);
}

/* A tar of the six batch files, one record each (a ustar header per member). */
static size_t seed_tar(uint8_t *t) {
    size_t at = 0;
    for (int b = 0; b < 6; b++) {
        uint8_t *h = t + at;
        memset(h, 0, 512);
        snprintf((char *)h, 100, "cifar-10-batches-bin/%s", batches[b]);
        snprintf((char *)h + 100, 8, "0000644");
        snprintf((char *)h + 124, 12, "%011o", CIFAR_RECORD_BYTES);
        h[156] = '0';
        memcpy(h + 257, "ustar", 6);
        at += 512;
        memset(t + at, 0, (CIFAR_RECORD_BYTES + 511) / 512 * 512);
        t[at] = (uint8_t)b; /* the label */
        for (int i = 1; i < CIFAR_RECORD_BYTES; i++) t[at + i] = (uint8_t)(i * 7 + b);
        at += (CIFAR_RECORD_BYTES + 511) / 512 * 512;
    }
    memset(t + at, 0, 1024);
    at += 1024;
    fix_tar_checksums(t, at);
    return at;
}

void fuzz_write_seeds(const char *dir) {
    static uint8_t buf[1 + 6 * (512 + 3584) + 1024];
    size_t n = seed_tar(buf + 1);
    buf[0] = 1;
    fuzz_write_seed(dir, "tar", buf, 1 + n);
    uint8_t *gz;
    size_t gn = gzip(buf + 1, n, &gz);
    uint8_t *raw = malloc(1 + gn);
    raw[0] = 0;
    memcpy(raw + 1, gz, gn);
    fuzz_write_seed(dir, "tar.gz", raw, 1 + gn);
    static uint8_t batch[1 + 2 * CIFAR_RECORD_BYTES]; /* two records, labels 3 and 9 */
    batch[0] = 2;
    for (int i = 0; i < 2 * CIFAR_RECORD_BYTES; i++) batch[1 + i] = (uint8_t)(i * 13);
    batch[1] = 3, batch[1 + CIFAR_RECORD_BYTES] = 9;
    fuzz_write_seed(dir, "batch", batch, sizeof batch);
    free(gz), free(raw);
}

void fuzz_init(void) {}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const uint8_t *p = data + 1;
    size_t n = size - 1;
    if (data[0] == 0) {
        load(fuzz_file(0, "cifar-10-binary.tar.gz", p, n));
    } else if (data[0] == 1) {
        uint8_t *tar = malloc(n ? n : 1), *gz;
        memcpy(tar, p, n);
        fix_tar_checksums(tar, n);
        size_t gn = gzip(tar, n, &gz);
        load(fuzz_file(0, "cifar-10-binary.tar.gz", gz, gn));
        free(tar), free(gz);
    } else if (data[0] == 2) {
        for (int b = 0; b < 6; b++) fuzz_file(b, batches[b], p, n);
        char dir[128];
        snprintf(dir, sizeof dir, "%s", fuzz_dir());
        load(dir);
    }
    return 0;
}
