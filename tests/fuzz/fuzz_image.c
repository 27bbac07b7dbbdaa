/* libFuzzer target: cifar10-predict's pictures (data/image.c) on hostile input: the input is
 * the file. It is decoded as PNG or JPEG (libpng, libjpeg-turbo, our EXIF orientation reader
 * and the rotation it asks for) under a limit of 65,536 pixels, then brought to a CIFAR-10
 * record (the resampling). Every call must end in a picture of at most that many pixels or in
 * one line of error; never a crash, a sanitizer report or a multi-line message. Seeds
 * (FUZZ_WRITE_SEEDS=DIR), written here by libpng and libjpeg: an RGB PNG with an eXIf
 * orientation (little-endian), an interlaced palette PNG with transparency, a JPEG with an
 * EXIF orientation (big-endian), and a progressive CMYK JPEG (Adobe marker). */
#include "../../data/image.h"
#include "fuzz_io.h"

#include <stdio.h> /* before jpeglib.h, which uses FILE */

#include <jpeglib.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_PIXELS = 1 << 16 };

/* A TIFF block (EXIF's layout) whose one IFD entry is Orientation = o. */
static size_t exif_block(uint8_t *t, int little, int o) {
    static const uint8_t le[] = {'I', 'I', 42, 0, 8, 0, 0, 0, 1, 0, 0x12, 1, 3,
                                 0,   1,   0,  0, 0, 0, 0, 0, 0, 0, 0,    0, 0};
    static const uint8_t be[] = {'M', 'M', 0, 42, 0, 0, 0, 8, 0, 1, 1, 0x12, 0,
                                 3,   0,   0, 0,  1, 0, 0, 0, 0, 0, 0, 0,    0};
    memcpy(t, little ? le : be, sizeof le);
    t[little ? 18 : 19] = (uint8_t)o; /* the SHORT value, first in the entry's 4 value bytes */
    return sizeof le;
}

/* A picture's bytes in memory, grown as libpng writes. */
struct buffer {
    uint8_t *p;
    size_t n;
};

static void png_append(png_structp png, png_bytep data, size_t len) {
    struct buffer *b = png_get_io_ptr(png);
    b->p = realloc(b->p, b->n + len);
    if (!b->p) abort();
    memcpy(b->p + b->n, data, len);
    b->n += len;
}

static void png_flush_none(png_structp png) { (void)png; }

/* A w x h PNG: RGB with an eXIf orientation, or (palette) 4 colours, one transparent, interlaced. */
static struct buffer png_seed(int w, int h, int palette) {
    struct buffer b = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info || setjmp(png_jmpbuf(png))) abort();
    png_set_write_fn(png, &b, png_append, png_flush_none);
    png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, 8,
                 palette ? PNG_COLOR_TYPE_PALETTE : PNG_COLOR_TYPE_RGB,
                 palette ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    uint8_t exif[32];
    if (palette) {
        png_color colours[4] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {250, 250, 250}};
        png_byte alpha[1] = {0};
        png_set_PLTE(png, info, colours, 4);
        png_set_tRNS(png, info, alpha, 1, NULL);
    } else {
        png_set_eXIf_1(png, info, (png_uint_32)exif_block(exif, 1, 6), exif);
    }
    png_write_info(png, info);
    int channels = palette ? 1 : 3, passes = png_set_interlace_handling(png);
    uint8_t *row = malloc((size_t)w * channels);
    for (int pass = 0; pass < passes; pass++)
        for (int y = 0; y < h; y++) {
            for (int x = 0; x < w * channels; x++)
                row[x] = (uint8_t)(palette ? (x + y) % 4 : 37 * x + 11 * y);
            png_write_row(png, row);
        }
    png_write_end(png, info);
    png_destroy_write_struct(&png, &info);
    free(row);
    return b;
}

/* A w x h JPEG: YCbCr from RGB with an EXIF orientation, or progressive CMYK. */
static struct buffer jpeg_seed(int w, int h, int cmyk) {
    struct jpeg_compress_struct c;
    struct jpeg_error_mgr err;
    c.err = jpeg_std_error(&err); /* a seed that fails to encode ends the program */
    jpeg_create_compress(&c);
    unsigned char *out = NULL;
    unsigned long n = 0;
    jpeg_mem_dest(&c, &out, &n);
    c.image_width = (JDIMENSION)w, c.image_height = (JDIMENSION)h;
    c.input_components = cmyk ? 4 : 3;
    c.in_color_space = cmyk ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&c);
    jpeg_set_quality(&c, 90, TRUE);
    if (cmyk) jpeg_simple_progression(&c);
    jpeg_start_compress(&c, TRUE);
    if (!cmyk) {
        uint8_t app1[6 + 32] = "Exif";
        size_t len = 6 + exif_block(app1 + 6, 0, 8);
        jpeg_write_marker(&c, JPEG_APP0 + 1, app1, (unsigned)len);
    }
    uint8_t *row = malloc((size_t)w * c.input_components);
    while (c.next_scanline < c.image_height) {
        for (int x = 0; x < w * c.input_components; x++)
            row[x] = (uint8_t)(29 * x + 13 * (int)c.next_scanline);
        JSAMPROW r = row;
        jpeg_write_scanlines(&c, &r, 1);
    }
    jpeg_finish_compress(&c);
    jpeg_destroy_compress(&c);
    free(row);
    return (struct buffer){out, n};
}

void fuzz_write_seeds(const char *dir) {
    struct {
        const char *name;
        struct buffer b;
    } seeds[] = {{"rgb-exif.png", png_seed(7, 5, 0)},
                 {"palette-interlaced.png", png_seed(9, 6, 1)},
                 {"rgb-exif.jpg", jpeg_seed(11, 8, 0)},
                 {"cmyk-progressive.jpg", jpeg_seed(16, 9, 1)}};
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        fuzz_write_seed(dir, seeds[i].name, seeds[i].b.p, seeds[i].b.n);
        free(seeds[i].b.p);
    }
}

void fuzz_init(void) {}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_file(0, "picture", data, size);
    struct image img;
    struct err e = {""};
    if (image_load(path, MAX_PIXELS, &img, &e) != 0) {
        fuzz_check_message(e.msg);
        return 0;
    }
    if (img.w < 1 || img.h < 1 || (long)img.w * img.h > MAX_PIXELS) abort();
    uint8_t record[3 * 32 * 32];
    image_to_cifar(&img, record);
    image_free(&img);
    return 0;
}
