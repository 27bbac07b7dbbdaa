/* Pictures from files for cifar10-predict: PNG (libpng) and JPEG (libjpeg-turbo) decoded to
 * 8-bit RGB, then brought to one CIFAR-10 record the way torchvision's Resize(32) followed by
 * CenterCrop(32) does it on a PIL image.
 *
 * Decoding gives what PIL's Image.open(f).convert("RGB") gives: palette and grayscale expanded
 * to RGB, alpha dropped (not composited), 16-bit samples reduced to their high byte, CMYK and
 * YCCK JPEGs converted as PIL converts CMYK (R = (255 - C)(255 - K) / 255 on the un-inverted
 * values; Adobe files store them inverted); progressive JPEGs and interlaced PNGs decode as usual.
 * Unlike a bare Image.open, the EXIF orientation (JPEG APP1, PNG eXIf) is applied, as
 * PIL.ImageOps.exif_transpose does, so a phone photo is upright. */
#ifndef DATA_IMAGE_H
#define DATA_IMAGE_H

#include "../common/err.h"

#include <stdint.h>

struct image {
    int w, h;
    uint8_t *rgb; /* [h][w][3] */
};

/* Decodes PNG or JPEG `path` (told apart by their signatures) into *img (img->rgb malloc'd;
 * image_free releases it). Files with more than max_pixels pixels are refused from their
 * header, before any pixel is decoded (decompression bombs). Returns 0, or -1 with
 * "PATH: what is wrong" in e and nothing allocated. */
int image_load(const char *path, long max_pixels, struct image *img, struct err *e);
void image_free(struct image *img);

/* torchvision's Resize(32) (shorter side to 32, the longer to int(32 * long / short); PIL's
 * bilinear filter with its antialiasing support and its 8-bit fixed-point arithmetic, horizontal
 * pass first) then CenterCrop(32) (offset round((size - 32) / 2), half to even as Python
 * rounds), written as a CIFAR-10 record's pixels: planar [3][32][32]. Only the pixels the crop
 * keeps are computed: for a 1 x 2,000,000 picture kilobytes beside its 6 MB of pixels, not the 6 GB
 * of its whole resize. */
void image_to_cifar(const struct image *img, uint8_t out[3 * 32 * 32]);

#endif
