/* The data pipeline on synthetic data written here in the official format: directory and
 * .tar.gz reading, every kind of bad input, augmentation identities, rank-independence of the
 * random choices, and sharding (disjoint, covering all but the dropped remainder). */
#include "../common/cpus.h"
#include "../common/err.h"
#include "../data/augment.h"
#include "../data/cifar.h"
#include "../data/shard.h"
#include "../kernels/kernels.h"
#include "check.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmp[256];

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL);
    CHECK(fwrite(data, 1, n, f) == n);
    fclose(f);
}

/* File b of a synthetic dataset: `n` records whose label is (b*7 + i) % 10 and pixels a
 * function of (b, i, byte), so any mix-up shows. */
static uint8_t *synth(int b, int n) {
    uint8_t *d = malloc((size_t)n * CIFAR_RECORD_BYTES);
    for (int i = 0; i < n; i++) {
        uint8_t *r = d + (size_t)i * CIFAR_RECORD_BYTES;
        r[0] = (uint8_t)((b * 7 + i) % 10);
        for (int k = 0; k < CIFAR_IMAGE_BYTES;
             k++) { /* hashed: incompressible, so a cut tarball loses data */
            uint32_t h = ((uint32_t)(b * 1000003 + i) * 3072u + (uint32_t)k) * 2654435761u;
            h ^= h >> 15;
            r[1 + k] = (uint8_t)(h * 2246822519u >> 24);
        }
    }
    return d;
}

static const int counts[6] = {3, 4, 2, 5, 1, 6};
static const char *names[6] = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                               "data_batch_4.bin", "data_batch_5.bin", "test_batch.bin"};

static void make_dataset(const char *dir) {
    mkdir(dir, 0755);
    for (int b = 0; b < 6; b++) {
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", dir, names[b]);
        uint8_t *d = synth(b, counts[b]);
        write_file(p, d, (size_t)counts[b] * CIFAR_RECORD_BYTES);
        free(d);
    }
}

static int run(const char *cmd) { return system(cmd); }

static void check_contents(const struct cifar_data *d, const char *what) {
    EXPECT(d->train.n == 15 && d->test.n == 6, "%s: counts %d %d", what, d->train.n, d->test.n);
    int bad = 0, k = 0;
    for (int b = 0; b < 5; b++) {
        uint8_t *ref = synth(b, counts[b]);
        for (int i = 0; i < counts[b]; i++, k++)
            bad += k >= d->train.n ||
                   memcmp(d->train.records[k], ref + (size_t)i * CIFAR_RECORD_BYTES, CIFAR_RECORD_BYTES) != 0;
        free(ref);
    }
    uint8_t *ref = synth(5, 6);
    for (int i = 0; i < 6 && i < d->test.n; i++)
        bad += memcmp(d->test.records[i], ref + (size_t)i * CIFAR_RECORD_BYTES, CIFAR_RECORD_BYTES) != 0 ||
               cifar_label(&d->test, i) != ref[(size_t)i * CIFAR_RECORD_BYTES];
    free(ref);
    EXPECT(bad == 0, "%s: %d records differ from what was written", what, bad);
}

/* Loads `path`, expects failure with every string of `want` in the message. */
static void expect_error(const char *path, unsigned what, const char *want1, const char *want2) {
    struct cifar_data d;
    struct err e = {""};
    int rc = cifar_load(path, what, &d, &e);
    EXPECT(rc == -1, "%s: loaded although bad", path);
    EXPECT(strstr(e.msg, want1) && (!want2 || strstr(e.msg, want2)) && !strchr(e.msg, '\n'),
           "%s: message '%s' lacks '%s' / '%s'", path, e.msg, want1, want2 ? want2 : "");
    EXPECT(d.train.n == 0 && d.test.n == 0, "failed load left data behind");
}

static void test_reader(void) {
    char dir[512], cmd[2048], p[600];
    struct cifar_data d;
    struct err e = {""};
    snprintf(dir, sizeof dir, "%s/cifar-10-batches-bin", tmp);
    make_dataset(dir);
    /* 1. the directory itself; 2. its parent; 3. the tarball; 4. a directory holding the tarball */
    EXPECT(cifar_load(dir, CIFAR_TRAIN | CIFAR_TEST, &d, &e) == 0, "dir: %s", e.msg);
    check_contents(&d, "dir");
    cifar_free(&d);
    EXPECT(cifar_load(tmp, CIFAR_TRAIN | CIFAR_TEST, &d, &e) == 0, "parent dir: %s", e.msg);
    check_contents(&d, "parent dir");
    EXPECT(strstr(d.source, "cifar-10-batches-bin") != NULL, "parent dir source %s", d.source);
    cifar_free(&d);
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/t && cd %s && tar czf t/cifar-10-binary.tar.gz cifar-10-batches-bin", tmp, tmp);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/t/cifar-10-binary.tar.gz", tmp);
    EXPECT(cifar_load(p, CIFAR_TRAIN | CIFAR_TEST, &d, &e) == 0, "tarball: %s", e.msg);
    check_contents(&d, "tarball");
    cifar_free(&d);
    snprintf(p, sizeof p, "%s/t", tmp);
    EXPECT(cifar_load(p, CIFAR_TRAIN | CIFAR_TEST, &d, &e) == 0, "dir with tarball: %s", e.msg);
    check_contents(&d, "dir with tarball");
    cifar_free(&d);
    /* test split only; optional test split */
    EXPECT(cifar_load(dir, CIFAR_TEST, &d, &e) == 0 && d.train.n == 0 && d.test.n == 6, "test only");
    cifar_free(&d);
    snprintf(cmd, sizeof cmd, "mkdir -p %s/notest && cp %s/data_batch_*.bin %s/notest/", tmp, dir, tmp);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/notest", tmp);
    EXPECT(cifar_load(p, CIFAR_TRAIN | CIFAR_TEST_OPTIONAL, &d, &e) == 0 && d.train.n == 15 && d.test.n == 0,
           "optional test");
    cifar_free(&d);
    expect_error(p, CIFAR_TRAIN | CIFAR_TEST, "test_batch.bin", "No such file");

    /* bad inputs */
    snprintf(p, sizeof p, "%s/nonexistent", tmp);
    expect_error(p, CIFAR_TRAIN, "nonexistent", "No such file");
    snprintf(cmd, sizeof cmd, "mkdir -p %s/bad && cp %s/*.bin %s/bad/", tmp, dir, tmp);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/bad/data_batch_4.bin", tmp);
    CHECK(truncate(p, 5 * CIFAR_RECORD_BYTES - 10) == 0);
    snprintf(p, sizeof p, "%s/bad", tmp);
    expect_error(p, CIFAR_TRAIN, "data_batch_4.bin", "not a multiple of the 3073-byte record");
    snprintf(p, sizeof p, "%s/bad/data_batch_4.bin", tmp);
    CHECK(truncate(p, 0) == 0);
    snprintf(p, sizeof p, "%s/bad", tmp);
    expect_error(p, CIFAR_TRAIN, "data_batch_4.bin", "empty file");
    snprintf(cmd, sizeof cmd,
             "cp %s/data_batch_4.bin %s/bad/ && printf '\\014' | dd of=%s/bad/data_batch_2.bin bs=1 seek=%d "
             "conv=notrunc 2>/dev/null",
             dir, tmp, tmp, 2 * CIFAR_RECORD_BYTES);
    CHECK(run(cmd) == 0);
    expect_error(p, CIFAR_TRAIN, "data_batch_2.bin: record 2 (byte offset 6146): label 12 is not in 0..9",
                 NULL);
    snprintf(p, sizeof p, "%s/bad/data_batch_2.bin", tmp);
    expect_error(p, CIFAR_TRAIN, "not a gzip file", NULL); /* a plain file is taken for a tarball */
    /* truncated tarball, non-gzip tarball, corrupted gzip data, tarball missing a member */
    snprintf(cmd, sizeof cmd, "head -c 30000 %s/t/cifar-10-binary.tar.gz > %s/trunc.tar.gz", tmp, tmp);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/trunc.tar.gz", tmp);
    expect_error(p, CIFAR_TRAIN, "trunc.tar.gz", "truncated gzip stream");
    snprintf(cmd, sizeof cmd, "head -c -4 %s/t/cifar-10-binary.tar.gz > %s/trailer.tar.gz", tmp, tmp);
    CHECK(run(cmd) == 0); /* every member intact, only the gzip trailer cut */
    snprintf(p, sizeof p, "%s/trailer.tar.gz", tmp);
    expect_error(p, CIFAR_TEST, "trailer.tar.gz", "truncated gzip stream");
    snprintf(cmd, sizeof cmd, "cd %s && tar cf plain.tar cifar-10-batches-bin", tmp);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/plain.tar", tmp);
    expect_error(p, CIFAR_TRAIN, "plain.tar", "not a gzip file");
    /* a tar cut inside a member, then gzipped whole: the gzip stream ends cleanly, the archive
     * does not */
    snprintf(cmd, sizeof cmd, "head -c 20000 %s/plain.tar | gzip > %s/cut.tar.gz", tmp, tmp);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/cut.tar.gz", tmp);
    expect_error(p, CIFAR_TRAIN, "cut.tar.gz: archive ends at uncompressed offset 20000 in the middle of",
                 NULL);
    snprintf(cmd, sizeof cmd,
             "cp %s/t/cifar-10-binary.tar.gz %s/flip.tar.gz && printf 'XXXX' | dd of=%s/flip.tar.gz bs=1 "
             "seek=2000 conv=notrunc 2>/dev/null",
             tmp, tmp, tmp);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/flip.tar.gz", tmp);
    expect_error(p, CIFAR_TRAIN | CIFAR_TEST, "flip.tar.gz", NULL);
    snprintf(cmd, sizeof cmd,
             "cd %s && tar czf missing.tar.gz cifar-10-batches-bin/data_batch_1.bin "
             "cifar-10-batches-bin/test_batch.bin",
             tmp);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/missing.tar.gz", tmp);
    expect_error(p, CIFAR_TRAIN, "the archive has no data_batch_2.bin", NULL);
    snprintf(cmd, sizeof cmd,
             "cd %s && cp -r cifar-10-batches-bin badlabel && printf '\\377' | dd of=badlabel/test_batch.bin "
             "bs=1 seek=%d conv=notrunc 2>/dev/null && tar czf badlabel.tar.gz badlabel",
             tmp, 3 * CIFAR_RECORD_BYTES);
    CHECK(run(cmd) == 0);
    snprintf(p, sizeof p, "%s/badlabel.tar.gz", tmp);
    expect_error(p, CIFAR_TEST, "badlabel/test_batch.bin: record 3 (byte offset 9219): label 255", NULL);
    snprintf(p, sizeof p, "%s/t/nothing-here", tmp);
    CHECK(mkdir(p, 0755) == 0);
    expect_error(p, CIFAR_TRAIN, "data_batch_1.bin", "No such file");
}

/* The CPU input pipeline (kernels' input_prepare) on one image with crop/flip a; unnormalised
 * (scale 1, shift 0) unless norm. */
static void prepare_one(const uint8_t *img, struct augment_choice a, int norm, float *out) {
    int geom[3] = {a.dx, a.dy, a.flip};
    float scale[3] = {1, 1, 1}, shift[3] = {0, 0, 0};
    if (norm) augment_scale_shift(scale, shift);
    kernels_cpu()->input_prepare(img, geom, out, 1, scale, shift, 0);
}

/* Pixels where out differs from img */
static int differ(const float *out, const uint8_t *img) {
    int bad = 0;
    for (int i = 0; i < CIFAR_IMAGE_BYTES; i++) bad += out[i] != (float)img[i];
    return bad;
}

static void test_augment(void) {
    uint8_t *img = synth(3, 1) + 1, flipped[CIFAR_IMAGE_BYTES];
    float out[CIFAR_IMAGE_BYTES], twice[CIFAR_IMAGE_BYTES];
    prepare_one(img, (struct augment_choice){4, 4, 0}, 0, out);
    EXPECT(differ(out, img) == 0, "crop at (4,4) without flip is not the identity");
    prepare_one(img, (struct augment_choice){4, 4, 1}, 0, out);
    for (int i = 0; i < CIFAR_IMAGE_BYTES; i++) flipped[i] = (uint8_t)out[i];
    prepare_one(flipped, (struct augment_choice){4, 4, 1}, 0, twice);
    EXPECT(differ(twice, img) == 0, "flip twice is not the identity");
    EXPECT(differ(out, img) != 0 && out[5] == img[26] && out[32 * 32 + 31] == img[32 * 32],
           "flip does not mirror rows");
    /* dx = 6, dy = 1: output (y, x) = input (y - 3, x + 2), zero where that leaves the image */
    prepare_one(img, (struct augment_choice){6, 1, 0}, 0, out);
    int bad = 0;
    for (int c = 0; c < 3; c++)
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++) {
                int sy = y - 3, sx = x + 2;
                uint8_t want = sy >= 0 && sx < 32 ? img[(c * 32 + sy) * 32 + sx] : 0;
                bad += out[(c * 32 + y) * 32 + x] != want;
            }
    EXPECT(bad == 0, "crop offset semantics: %d wrong pixels", bad);
    /* flip after crop: dx = 6 flipped: output (y, x) = input (y, (31 - x) + 2) */
    prepare_one(img, (struct augment_choice){6, 4, 1}, 0, out);
    bad = 0;
    for (int y = 0; y < 32; y++)
        for (int x = 0; x < 32; x++) {
            int sx = 31 - x + 2;
            bad += out[y * 32 + x] != (sx < 32 ? img[y * 32 + sx] : 0);
        }
    EXPECT(bad == 0, "crop then flip: %d wrong pixels", bad);
    float *f = out;
    prepare_one(img, (struct augment_choice){4, 4, 0}, 1, f);
    EXPECT(f[0] == img[0] * (1.0f / (255.0f * augment_std[0])) - augment_mean[0] / augment_std[0] &&
               fabsf(f[2048 + 7] - ((img[2048 + 7] / 255.0f) - 0.4465f) / 0.2616f) < 1e-5f,
           "normalisation");
    /* the draws cover every offset and both flips, and depend on (seed, epoch, index) only */
    int seen[9][9][2] = {{{0}}};
    for (int i = 0; i < 20000; i++) {
        struct augment_choice a = augment_draw(AUGMENT_CROP_FLIP, 7, 2, i);
        CHECK(a.dx >= 0 && a.dx <= 8 && a.dy >= 0 && a.dy <= 8 && (a.flip == 0 || a.flip == 1));
        seen[a.dy][a.dx][a.flip]++;
    }
    int missing = 0;
    for (int i = 0; i < 162; i++) missing += ((int *)seen)[i] == 0;
    EXPECT(missing == 0, "%d of 162 crop/flip choices never drawn", missing);
    struct augment_choice a1 = augment_draw(AUGMENT_CROP_FLIP, 7, 2, 99),
                          a2 = augment_draw(AUGMENT_CROP_FLIP, 7, 2, 99),
                          a3 = augment_draw(AUGMENT_CROP_FLIP, 7, 3, 99);
    EXPECT(a1.dx == a2.dx && a1.dy == a2.dy && a1.flip == a2.flip, "draw not reproducible");
    EXPECT(a1.dx != a3.dx || a1.dy != a3.dy || a1.flip != a3.flip ||
               augment_draw(AUGMENT_CROP_FLIP, 7, 3, 98).dx != augment_draw(AUGMENT_CROP_FLIP, 7, 2, 98).dx,
           "epochs give identical draws");
    free(img - 1);
}

/* airbench94's alternating augmentation: offsets 2..6 (at most 2 pixels), every one drawn;
 * an image's flip is one random choice for the run, mirrored on odd epochs; about half of the
 * images flipped; none without a choice: AUGMENT_NONE is the identity. */
static void test_alternating(void) {
    int seen[5][5] = {{0}}, flipped = 0, bad = 0, n = 20000;
    for (int i = 0; i < n; i++) {
        struct augment_choice e0 = augment_draw(AUGMENT_ALTERNATING, 7, 0, i);
        for (int epoch = 1; epoch < 4; epoch++) {
            struct augment_choice a = augment_draw(AUGMENT_ALTERNATING, 7, epoch, i);
            bad += a.flip != (e0.flip ^ (epoch & 1));
            bad += a.dx < 2 || a.dx > 6 || a.dy < 2 || a.dy > 6;
            if (a.dx >= 2 && a.dx <= 6 && a.dy >= 2 && a.dy <= 6) seen[a.dy - 2][a.dx - 2]++;
        }
        flipped += e0.flip;
    }
    EXPECT(bad == 0, "alternating flip: %d draws break the rule or leave the 2-pixel range", bad);
    int missing = 0;
    for (int i = 0; i < 25; i++) missing += ((int *)seen)[i] == 0;
    EXPECT(missing == 0, "%d of 25 translations never drawn", missing);
    EXPECT(flipped > n * 0.48 && flipped < n * 0.52, "%d of %d images flipped in epoch 0", flipped, n);
    EXPECT(augment_reflects(AUGMENT_ALTERNATING) && !augment_reflects(AUGMENT_CROP_FLIP), "padding modes");
    struct augment_choice none = augment_draw(AUGMENT_NONE, 7, 3, 5);
    EXPECT(none.dx == 4 && none.dy == 4 && none.flip == 0, "AUGMENT_NONE is not the identity");
}

static void test_sharding(void) {
    /* A 103-image set: rank-count independence of batches and augmentation, disjoint cover. */
    struct cifar_set set = {0};
    uint8_t *d = synth(0, 103);
    set.n = 103;
    set.records = malloc(103 * sizeof *set.records);
    for (int i = 0; i < 103; i++) set.records[i] = d + (size_t)i * CIFAR_RECORD_BYTES;
    int perm[103], perm2[103];
    shard_permutation(5, 1, 103, perm);
    shard_permutation(5, 1, 103, perm2);
    EXPECT(memcmp(perm, perm2, sizeof perm) == 0, "permutation not reproducible");
    shard_permutation(5, 2, 103, perm2);
    EXPECT(memcmp(perm, perm2, sizeof perm) != 0, "epochs share a permutation");
    for (int world = 1; world <= 4; world++) {
        int batch = 8 / world + (world == 3); /* 8, 4, 3, 2 */
        int steps = shard_steps(103, world, batch);
        EXPECT(steps == 103 / (world * batch), "steps");
        int hits[103] = {0};
        for (int s = 0; s < steps; s++)
            for (int r = 0; r < world; r++) {
                const int *idx = shard_slice(perm, s, r, world, batch);
                for (int i = 0; i < batch; i++) hits[idx[i]]++;
            }
        int twice = 0, covered = 0;
        for (int i = 0; i < 103; i++) twice += hits[i] > 1, covered += hits[i] == 1;
        EXPECT(twice == 0 && covered == steps * world * batch && 103 - covered < world * batch,
               "world %d: %d images twice, %d covered", world, twice, covered);
    }
    /* world 1 x batch 8 and world 2 x batch 4: same global batches, same pixels, crops, flips
     * and labels per image */
    static uint8_t x1[8 * CIFAR_IMAGE_BYTES], x2[4 * CIFAR_IMAGE_BYTES];
    int l1[8], l2[4], g1[8 * 3], g2[4 * 3], bad = 0, augmented = 0;
    for (int s = 0; s < shard_steps(103, 1, 8); s++) {
        augment_gather(&set, shard_slice(perm, s, 0, 1, 8), 8, 5, 1, 1, x1, g1, l1);
        for (int i = 0; i < 8; i++) augmented += g1[3 * i] != 4 || g1[3 * i + 1] != 4 || g1[3 * i + 2] != 0;
        for (int r = 0; r < 2; r++) {
            augment_gather(&set, shard_slice(perm, s, r, 2, 4), 4, 5, 1, 1, x2, g2, l2);
            bad += memcmp(x2, x1 + (size_t)r * 4 * CIFAR_IMAGE_BYTES, sizeof x2) != 0 ||
                   memcmp(l2, l1 + r * 4, sizeof l2) != 0 || memcmp(g2, g1 + r * 12, sizeof g2) != 0;
        }
    }
    EXPECT(augmented > 0, "no image was augmented");
    augment_gather(&set, perm, 8, 5, 1, 0, x1, g1, l1);
    for (int i = 0; i < 8; i++) bad += g1[3 * i] != 4 || g1[3 * i + 1] != 4 || g1[3 * i + 2] != 0;
    EXPECT(bad == 0, "augmented batches differ between 1 and 2 ranks in %d cases", bad);
    free(set.records);
    free(d);
}

static void test_cpus(void) {
    EXPECT(cpus_parse_cpu_max("max 100000\n") == 0, "cpu.max unlimited");
    EXPECT(cpus_parse_cpu_max("150000 100000\n") == 1.5, "cpu.max 1.5");
    EXPECT(cpus_parse_cpu_max("garbage") == 0, "cpu.max garbage");
    struct cpus c;
    cpus_detect(&c);
    EXPECT(c.usable >= 1 && c.usable <= c.affinity, "usable CPUs %d of %d", c.usable, c.affinity);
}

int main(void) {
    check_tmpdir("test-data", tmp, sizeof tmp);
    test_reader();
    test_augment();
    test_alternating();
    test_sharding();
    test_cpus();
    check_rmdir(tmp);
    return check_summary("test_data");
}
