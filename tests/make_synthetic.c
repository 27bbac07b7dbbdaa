/* make_synthetic OUTDIR TRAIN_PER_FILE TEST_COUNT [SEED]
 * Writes a small dataset in the official CIFAR-10 binary layout (data_batch_1..5.bin,
 * test_batch.bin) whose classes are learnable: each class has its own mean colour and stripe
 * pattern, half-blended with uniform per-pixel noise (so that, as in real photographs, 2x2
 * pooling windows almost never tie). For tests only; real data never comes from here. */
#include "../common/err.h"
#include "../common/rng.h"
#include "../data/cifar.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void write_batch(const char *dir, const char *name, int n, uint64_t seed, int file) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) err_die(1, "%s: %s", path, strerror(errno));
    uint8_t rec[CIFAR_RECORD_BYTES];
    for (int i = 0; i < n; i++) {
        struct rng r = rng_make(seed, RNG_INIT, (uint64_t)file, (uint64_t)i);
        int label = (int)rng_below(&r, CIFAR_CLASSES);
        rec[0] = (uint8_t)label;
        for (int c = 0; c < 3; c++)
            for (int y = 0; y < 32; y++)
                for (int x = 0; x < 32; x++) {
                    int base = 40 + 17 * ((label * (c + 3)) % 10);
                    int stripe = ((label % 2 ? x : y) + (label / 2) * (label % 3 ? x : -x)) / 4 % 2;
                    int v = (base + 50 * stripe + (int)rng_below(&r, 256)) / 2;
                    rec[1 + (c * 32 + y) * 32 + x] = (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
                }
        if (fwrite(rec, 1, sizeof rec, f) != sizeof rec) err_die(1, "%s: write failed", path);
    }
    if (fclose(f) != 0) err_die(1, "%s: %s", path, strerror(errno));
}

int main(int argc, char **argv) {
    err_set_progname("make_synthetic");
    if (argc < 4 || argc > 5) err_die(2, "usage: make_synthetic OUTDIR TRAIN_PER_FILE TEST_COUNT [SEED]");
    int per_file = atoi(argv[2]), test = atoi(argv[3]);
    uint64_t seed = argc == 5 ? strtoull(argv[4], NULL, 10) : 7;
    if (per_file < 1 || test < 1) err_die(2, "counts must be >= 1");
    if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) err_die(1, "%s: %s", argv[1], strerror(errno));
    for (int b = 0; b < 5; b++) {
        char name[32];
        snprintf(name, sizeof name, "data_batch_%d.bin", b + 1);
        write_batch(argv[1], name, per_file, seed, b);
    }
    write_batch(argv[1], "test_batch.bin", test, seed, 5);
    return 0;
}
