/* Reader for the official CIFAR-10 binary release.
 *
 * DATA may be
 *   - a directory holding data_batch_1.bin .. data_batch_5.bin and test_batch.bin,
 *   - a directory holding cifar-10-batches-bin/ (or cifar-10-binary.tar.gz),
 *   - the cifar-10-binary.tar.gz file itself, streamed through zlib (no extraction).
 * A record is 1 label byte (0..9) and 3072 pixel bytes: 1024 R, 1024 G, 1024 B, each 32x32
 * row-major. Every file is validated (size a positive multiple of 3073, every label 0..9) and
 * any problem is reported as one line naming the file and the record/offset. */
#ifndef DATA_CIFAR_H
#define DATA_CIFAR_H

#include "../common/err.h"

#include <stdint.h>

#define CIFAR_CLASSES      10
#define CIFAR_SIDE         32
#define CIFAR_CHANNELS     3
#define CIFAR_IMAGE_BYTES  (CIFAR_CHANNELS * CIFAR_SIDE * CIFAR_SIDE) /* 3072 */
#define CIFAR_RECORD_BYTES (1 + CIFAR_IMAGE_BYTES)                    /* 3073 */

/* The official class names (batches.meta.txt) and the workshop's short display names. */
extern const char *const cifar_class_names[CIFAR_CLASSES];
extern const char *const cifar_short_names[CIFAR_CLASSES];

struct cifar_set {
    int n;                   /* images */
    const uint8_t **records; /* [n] -> record: label byte then [3][32][32] pixels */
    uint8_t *buffers[6];     /* the file contents the records point into */
    int nbuffers;
};

/* What to load. */
enum {
    CIFAR_TRAIN = 1,         /* data_batch_1..5.bin, required */
    CIFAR_TEST = 2,          /* test_batch.bin, required */
    CIFAR_TEST_OPTIONAL = 4, /* test_batch.bin if present (test->n = 0 otherwise) */
};

struct cifar_data {
    struct cifar_set train, test;
    char source[4400]; /* the directory or tarball actually read */
};

/* Loads the parts named by `what` from `path` into *out (zeroed first). Returns 0, or -1 with
 * one line in e (out is then empty). */
int cifar_load(const char *path, unsigned what, struct cifar_data *out, struct err *e);
void cifar_free(struct cifar_data *d);

/* Label (0..9) and pixels ([3][32][32]) of image i of a set. */
int cifar_label(const struct cifar_set *s, int i);
const uint8_t *cifar_pixels(const struct cifar_set *s, int i);

#endif
