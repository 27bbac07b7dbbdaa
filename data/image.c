#include "image.h"

#include "../common/file.h"

#include <stdio.h> /* before jpeglib.h, which uses FILE */

#include <jpeglib.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>

/* The EXIF orientation (1..8; 1 when absent or unreadable) of a TIFF-structured EXIF block. */
static int exif_orientation(const uint8_t *t, size_t n) {
    if (n < 8 || !(memcmp(t, "II*\0", 4) == 0 || memcmp(t, "MM\0*", 4) == 0)) return 1;
    int le = t[0] == 'I';
#define U16(p) (le ? (unsigned)(p)[0] | (unsigned)(p)[1] << 8 : (unsigned)(p)[1] | (unsigned)(p)[0] << 8)
#define U32(p)                                                                                               \
    (le ? (uint32_t)U16(p) | (uint32_t)U16((p) + 2) << 16 : (uint32_t)U16((p) + 2) | (uint32_t)U16(p) << 16)
    uint32_t ifd = U32(t + 4);
    if (ifd > n - 2) return 1;
    unsigned count = U16(t + ifd);
    for (unsigned i = 0; i < count && ifd + 2 + 12 * (i + 1) <= n; i++) {
        const uint8_t *entry = t + ifd + 2 + 12 * i;
        if (U16(entry) == 0x0112 && U16(entry + 2) == 3) { /* Orientation, SHORT */
            unsigned v = U16(entry + 8);
            return v >= 1 && v <= 8 ? (int)v : 1;
        }
    }
    return 1;
#undef U16
#undef U32
}

/* Applies EXIF orientation o to img as PIL.ImageOps.exif_transpose does. */
static void orient(struct image *img, int o) {
    if (o <= 1) return;
    int W = img->w, H = img->h, swap = o >= 5, w = swap ? H : W, h = swap ? W : H;
    uint8_t *out = XALLOC((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            int sx, sy; /* the source pixel of output (x, y) */
            switch (o) {
            case 2: sx = W - 1 - x, sy = y; break;         /* mirror */
            case 3: sx = W - 1 - x, sy = H - 1 - y; break; /* rotate 180 */
            case 4: sx = x, sy = H - 1 - y; break;         /* flip */
            case 5: sx = y, sy = x; break;                 /* transpose */
            case 6: sx = y, sy = H - 1 - x; break;         /* rotate 90 clockwise */
            case 7: sx = W - 1 - y, sy = H - 1 - x; break; /* transverse */
            default: sx = W - 1 - y, sy = x; break;        /* 8: rotate 90 counter-clockwise */
            }
            memcpy(out + ((size_t)y * w + x) * 3, img->rgb + ((size_t)sy * W + sx) * 3, 3);
        }
    free(img->rgb);
    img->rgb = out, img->w = w, img->h = h;
}

static int too_big(const char *path, unsigned long w, unsigned long h, long max_pixels, struct err *e) {
    if (w == 0 || h == 0) return err_set(e, "%s: image of %lux%lu pixels", path, w, h);
    if ((double)w * (double)h > (double)max_pixels)
        return err_set(e, "%s: %lux%lu pixels is more than the limit of %ld (--max-pixels)", path, w, h,
                       max_pixels);
    return 0;
}

/* PNG through libpng, reading from memory; its errors longjmp back with their message. */
struct png_mem {
    const uint8_t *p;
    size_t n, at;
    char msg[256];
};

static void png_mem_read(png_structp png, png_bytep out, size_t len) {
    struct png_mem *s = png_get_io_ptr(png);
    if (len > s->n - s->at) png_error(png, "the file ends early");
    memcpy(out, s->p + s->at, len);
    s->at += len;
}

static void png_fail(png_structp png, png_const_charp msg) {
    struct png_mem *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_quiet(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

static int decode_png(const char *path, const uint8_t *data, size_t size, long max_pixels, struct image *img,
                      struct err *e) {
    struct png_mem src = {data, size, 0, ""};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_quiet);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    CHECK(png && info);
    uint8_t *volatile rgb = NULL;
    png_bytep *volatile rows = NULL;
    volatile int rc = -1;
    if (setjmp(png_jmpbuf(png))) {
        err_set(e, "%s: not a valid PNG file (libpng: %s)", path, src.msg);
        goto done;
    }
    png_set_read_fn(png, &src, png_mem_read);
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff); /* PNG's own; max_pixels guards instead */
    png_read_info(png, info);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (too_big(path, w, h, max_pixels, e)) goto done;
    png_set_expand(png);      /* palette -> RGB, gray < 8 bits -> 8, tRNS -> alpha */
    png_set_strip_16(png);    /* 16 -> 8 bits: the high byte, as PIL */
    png_set_strip_alpha(png); /* dropped, as PIL's convert("RGB") */
    png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    CHECK(png_get_rowbytes(png, info) == (size_t)w * 3);
    rgb = XALLOC((size_t)w * h * 3);
    rows = XALLOC(h * sizeof *rows);
    for (png_uint_32 y = 0; y < h; y++) rows[y] = rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
    png_read_end(png, info);
    int o = 1;
    png_uint_32 exif_len;
    png_bytep exif;
    if (png_get_eXIf_1(png, info, &exif_len, &exif)) o = exif_orientation(exif, exif_len);
    *img = (struct image){(int)w, (int)h, rgb};
    rgb = NULL;
    orient(img, o);
    rc = 0;
done:
    png_destroy_read_struct(&png, &info, NULL);
    free(rgb), free(rows);
    return rc;
}

/* JPEG through libjpeg(-turbo): errors longjmp back with libjpeg's message; warnings (corrupt
 * but decodable data) are ignored, as PIL ignores them. */
struct jpeg_fail {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char msg[JMSG_LENGTH_MAX];
};

static void jpeg_fail_exit(j_common_ptr c) {
    struct jpeg_fail *f = (struct jpeg_fail *)c->err;
    c->err->format_message(c, f->msg);
    longjmp(f->jump, 1);
}

static void jpeg_quiet(j_common_ptr c, int level) { (void)c, (void)level; }

/* (a * b) / 255 rounded, as PIL's MULDIV255. */
static int muldiv255(int a, int b) {
    int t = a * b + 128;
    return ((t >> 8) + t) >> 8;
}

/* One decoded row into RGB: copied, or CMYK converted as PIL's cmyk2rgb (inverted: Adobe). */
static void jpeg_row(const uint8_t *in, int w, int cmyk, int inverted, uint8_t *out) {
    if (!cmyk) {
        memcpy(out, in, (size_t)w * 3);
        return;
    }
    for (int x = 0; x < w; x++, in += 4, out += 3) {
        int k = inverted ? 255 - in[3] : in[3], nk = 255 - k;
        for (int c = 0; c < 3; c++) out[c] = (uint8_t)(nk - muldiv255(inverted ? 255 - in[c] : in[c], nk));
    }
}

static int decode_jpeg(const char *path, const uint8_t *data, size_t size, long max_pixels, struct image *img,
                       struct err *e) {
    struct jpeg_decompress_struct cinfo;
    struct jpeg_fail fail;
    cinfo.err = jpeg_std_error(&fail.pub);
    fail.pub.error_exit = jpeg_fail_exit;
    fail.pub.emit_message = jpeg_quiet;
    uint8_t *volatile rgb = NULL, *volatile row = NULL;
    volatile int rc = -1;
    jpeg_create_decompress(&cinfo);
    if (setjmp(fail.jump)) {
        err_set(e, "%s: not a valid JPEG file (libjpeg: %s)", path, fail.msg);
        goto done;
    }
    jpeg_mem_src(&cinfo, data, (unsigned long)size);
    jpeg_save_markers(&cinfo, JPEG_APP0 + 1, 0xffff);
    jpeg_read_header(&cinfo, TRUE);
    if (too_big(path, cinfo.image_width, cinfo.image_height, max_pixels, e)) goto done;
    int cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
    cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB; /* grayscale too: libjpeg-turbo expands it */
    jpeg_start_decompress(&cinfo);
    int w = (int)cinfo.output_width, h = (int)cinfo.output_height;
    CHECK(cinfo.output_components == (cmyk ? 4 : 3));
    rgb = XALLOC((size_t)w * h * 3);
    row = XALLOC((size_t)w * 4);
    while (cinfo.output_scanline < cinfo.output_height) {
        JSAMPROW r = row;
        int y = (int)cinfo.output_scanline;
        jpeg_read_scanlines(&cinfo, &r, 1);
        jpeg_row(row, w, cmyk, cinfo.saw_Adobe_marker, rgb + (size_t)y * w * 3);
    }
    int o = 1;
    for (jpeg_saved_marker_ptr m = cinfo.marker_list; m; m = m->next)
        if (m->marker == JPEG_APP0 + 1 && m->data_length >= 6 && memcmp(m->data, "Exif\0\0", 6) == 0)
            o = exif_orientation(m->data + 6, m->data_length - 6);
    jpeg_finish_decompress(&cinfo);
    *img = (struct image){w, h, rgb};
    rgb = NULL;
    orient(img, o);
    rc = 0;
done:
    jpeg_destroy_decompress(&cinfo);
    free(rgb), free(row);
    return rc;
}

int image_load(const char *path, long max_pixels, struct image *img, struct err *e) {
    memset(img, 0, sizeof *img);
    uint8_t *data;
    size_t size;
    if (file_read_all(path, &data, &size, e) != 0) return -1;
    int rc;
    if (size >= 8 && png_sig_cmp(data, 0, 8) == 0) rc = decode_png(path, data, size, max_pixels, img, e);
    else if (size >= 3 && data[0] == 0xff && data[1] == 0xd8 && data[2] == 0xff)
        rc = decode_jpeg(path, data, size, max_pixels, img, e);
    else rc = err_set(e, "%s: neither a PNG nor a JPEG file", path);
    free(data);
    return rc;
}

void image_free(struct image *img) {
    free(img->rgb);
    img->rgb = NULL;
}

/* PIL's resampling (Resample.c) with its bilinear filter, coefficients in 8-bit fixed point. */
enum { PRECISION_BITS = 32 - 8 - 2 };

struct axis {
    int ksize;
    int *bounds; /* [out][2]: first input index, count */
    int32_t *k;  /* [out][ksize] fixed-point weights */
};

static double triangle(double x) {
    x = fabs(x);
    return x < 1.0 ? 1.0 - x : 0.0;
}

/* The weights of output samples [first, first + n) of the resampling that takes in_size samples
 * to out_size, as PIL's precompute_coeffs and normalize_coeffs_8bpc compute them (the support
 * widens with the reduction: antialiasing). Each output's weights depend on its index alone, so
 * a window of them is what the whole axis would hold there. */
static struct axis axis_coeffs(int in_size, long out_size, long first, int n) {
    double scale = (double)in_size / out_size, filterscale = scale < 1.0 ? 1.0 : scale, support = filterscale;
    struct axis a = {(int)ceil(support) * 2 + 1, NULL, NULL};
    a.bounds = XALLOC((size_t)n * 2 * sizeof(int));
    a.k = XALLOC((size_t)n * a.ksize * sizeof(int32_t));
    double *kd = XALLOC((size_t)a.ksize * sizeof(double));
    for (int i = 0; i < n; i++) {
        double center = ((double)(first + i) + 0.5) * scale, ww = 0.0, ss = 1.0 / filterscale;
        int xmin = (int)(center - support + 0.5), xmax = (int)(center + support + 0.5);
        if (xmin < 0) xmin = 0;
        if (xmax > in_size) xmax = in_size;
        xmax -= xmin;
        for (int x = 0; x < xmax; x++) ww += kd[x] = triangle((x + xmin - center + 0.5) * ss);
        for (int x = 0; x < a.ksize; x++) {
            double v = x < xmax && ww != 0.0 ? kd[x] / ww : 0.0;
            a.k[(size_t)i * a.ksize + x] =
                (int32_t)(v < 0 ? -0.5 + v * (1 << PRECISION_BITS) : 0.5 + v * (1 << PRECISION_BITS));
        }
        a.bounds[2 * i] = xmin, a.bounds[2 * i + 1] = xmax;
    }
    free(kd);
    return a;
}

static uint8_t clip8(int32_t v) {
    v >>= PRECISION_BITS;
    return (uint8_t)(v < 0 ? 0 : v > 255 ? 255 : v);
}

/* One pass along an axis: out has `n_out` samples per line, `lines` lines; `step` is the
 * distance between neighbouring samples of a line and `stride` between lines (in pixels), for
 * input and output alike (`in_step`/`in_stride` for the input). */
static void resample(const uint8_t *in, int in_step, int in_stride, uint8_t *out, int out_step,
                     int out_stride, int lines, int n_out, const struct axis *a) {
    for (int l = 0; l < lines; l++)
        for (int i = 0; i < n_out; i++) {
            const int32_t *k = a->k + (size_t)i * a->ksize;
            int xmin = a->bounds[2 * i], xmax = a->bounds[2 * i + 1];
            for (int c = 0; c < 3; c++) {
                int32_t ss = 1 << (PRECISION_BITS - 1);
                for (int x = 0; x < xmax; x++)
                    ss += in[((size_t)l * in_stride + (size_t)(x + xmin) * in_step) * 3 + c] * k[x];
                out[((size_t)l * out_stride + (size_t)i * out_step) * 3 + c] = clip8(ss);
            }
        }
}

/* torchvision's Resize(32) then CenterCrop(32), as PIL's Image.resize((ow, oh), BILINEAR) (the
 * horizontal pass, then the vertical one, each only when that side changes; 8-bit results after
 * each) and the crop at (left, top), computing only what the crop keeps: the horizontal pass
 * for the crop's 32 columns over the input rows the vertical pass reads, then the vertical pass
 * for its 32 rows. The same values as the whole resize (each output sample depends on its own
 * weights alone), without a resized picture 32 x (32 long / short) pixels large: a 1 x
 * 64,000,000 picture's (cifar10-predict's default --max-pixels) would take 196 GB. out:
 * [32][32][3]. */
static void resize_crop(const struct image *img, long ow, long oh, long left, long top, uint8_t *out) {
    int w = img->w, h = img->h, y0 = (int)top, y1 = (int)top + 32; /* the input rows read */
    struct axis v = {0, NULL, NULL};
    if (oh != h) {
        v = axis_coeffs(h, oh, top, 32);
        y0 = v.bounds[0], y1 = v.bounds[2 * 31] + v.bounds[2 * 31 + 1]; /* windows move forward */
        for (int i = 0; i < 32; i++) v.bounds[2 * i] -= y0;
    }
    /* cols: the crop's 32 columns of rows [y0, y1), row stride `stride` pixels */
    const uint8_t *cols;
    uint8_t *tmp = NULL;
    int stride = w;
    if (ow != w) {
        struct axis a = axis_coeffs(w, ow, left, 32);
        tmp = XALLOC((size_t)32 * (y1 - y0) * 3);
        resample(img->rgb + (size_t)y0 * w * 3, 1, w, tmp, 1, 32, y1 - y0, 32, &a);
        free(a.bounds), free(a.k);
        cols = tmp, stride = 32;
    } else {
        cols = img->rgb + ((size_t)y0 * w + (size_t)left) * 3;
    }
    if (oh != h) {
        resample(cols, stride, 1, out, 32, 1, 32, 32, &v); /* lines are columns here */
        free(v.bounds), free(v.k);
    } else {
        for (int y = 0; y < 32; y++) memcpy(out + (size_t)y * 32 * 3, cols + (size_t)y * stride * 3, 32 * 3);
    }
    free(tmp);
}

void image_to_cifar(const struct image *img, uint8_t out[3 * 32 * 32]) {
    long w = img->w, h = img->h, shorter = w <= h ? w : h, longer = w <= h ? h : w;
    long new_long = (long)(32.0 * longer / shorter), ow = w <= h ? 32 : new_long, oh = w <= h ? new_long : 32;
    /* torchvision's center_crop: int(round((size - 32) / 2.0)), Python rounding half to even */
    long top = lrint((oh - 32) / 2.0), left = lrint((ow - 32) / 2.0);
    uint8_t rgb[32 * 32 * 3];
    resize_crop(img, ow, oh, left, top, rgb);
    for (int c = 0; c < 3; c++)
        for (int p = 0; p < 32 * 32; p++) out[c * 32 * 32 + p] = rgb[p * 3 + c];
}
