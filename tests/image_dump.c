/* image_dump FILE OUT [MAX_PIXELS]: data/image.c's view of a picture, for tests/test_predict.py
 * to compare with PIL's: prints "W H" of the decoded (and EXIF-oriented) picture and writes
 * OUT.rgb ([H][W][3] bytes) and OUT.cifar (the 32x32 record pixels, planar [3][32][32]).
 * Exit 1 with the loader's one-line error otherwise. */
#include "../common/err.h"
#include "../data/image.h"

#include <stdio.h>
#include <stdlib.h>

static void write_file(const char *out, const char *ext, const void *data, size_t n) {
    char path[4096];
    snprintf(path, sizeof path, "%s%s", out, ext);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, n, f) != n || fclose(f) != 0) err_die(1, "%s: cannot write", path);
}

int main(int argc, char **argv) {
    err_set_progname("image_dump");
    if (argc < 3 || argc > 4) err_die(2, "usage: image_dump FILE OUT [MAX_PIXELS]");
    struct image img;
    struct err e;
    if (image_load(argv[1], argc == 4 ? atol(argv[3]) : 64000000L, &img, &e) != 0) err_die(1, "%s", e.msg);
    uint8_t rec[3 * 32 * 32];
    image_to_cifar(&img, rec);
    write_file(argv[2], ".rgb", img.rgb, (size_t)img.w * img.h * 3);
    write_file(argv[2], ".cifar", rec, sizeof rec);
    printf("%d %d\n", img.w, img.h);
    image_free(&img);
    return 0;
}
