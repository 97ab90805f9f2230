/* image: JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libpng) decoding to RGB, and the
 * decode -> fit -> resize chain. The resize itself lives in resize.c. */
#include "image.h"
#include "image_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <png.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <unistd.h>

/* A file bigger than this is not an image we will decode (the largest allowed image is
 * ~179 Mpx, a few hundred MB even as an uncompressed PNG). */
#define MAX_FILE_BYTES (1ULL << 30)

/* DCT-domain scaling stops while the decoded image is still this many times the output
 * size (see ds_image_decode_resized). */
#define DCT_MARGIN 4

static int fail(char *reason, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *reason, size_t cap, const char *fmt, ...)
{
    if (reason && cap) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(reason, cap, fmt, ap);
        va_end(ap);
    }
    return -1;
}

int ds_scratch_grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap) return 0;
    size_t n = need + need / 4;
    void *q = realloc(*p, n);
    if (!q) return -1;
    *p = q;
    *cap = n;
    return 0;
}

ds_decoder *ds_decoder_new(void)
{
    ds_decoder *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    if (!(d->tj = tjInitDecompress())) {
        free(d);
        return NULL;
    }
    return d;
}

void ds_decoder_free(ds_decoder *d)
{
    if (!d) return;
    tjDestroy(d->tj);
    free(d->file);
    free(d->pix);
    free(d->cmyk);
    free(d->rows);
    ds_resize_scratch_free(&d->rs);
    free(d);
}

static int too_many_pixels(uint64_t w, uint64_t h, uint64_t max_pixels, char *reason, size_t cap)
{
    if (w * h > max_pixels)
        return fail(reason, cap, "%llux%llu = %llu pixels exceeds the limit of %llu (dspack's --max-pixels)",
                    (unsigned long long)w, (unsigned long long)h, (unsigned long long)(w * h),
                    (unsigned long long)max_pixels);
    return 0;
}

/* ---- JPEG ---- */

/* CMYK -> RGB exactly as Pillow's open + convert("RGB"): Pillow reads every CMYK JPEG with
 * Adobe's inverted polarity (rawmode "CMYK;I", 0 = full ink), Adobe APP14 marker or not, then
 * applies its cmyk2rgb: R = (255 - K) - C * (255 - K) / 255, with its rounded division by 255.
 * libjpeg hands the values over as stored (YCCK already turned into CMYK). */
static void cmyk_to_rgb(uint8_t *rgb, const uint8_t *cmyk, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        int c = 255 - cmyk[4 * i], m = 255 - cmyk[4 * i + 1], y = 255 - cmyk[4 * i + 2], k = 255 - cmyk[4 * i + 3];
        int nk = 255 - k, t;
#define MULDIV255(a, b) (t = (a) * (b) + 128, ((t >> 8) + t) >> 8)
        int r = nk - MULDIV255(c, nk), g = nk - MULDIV255(m, nk), b = nk - MULDIV255(y, nk);
#undef MULDIV255
        rgb[3 * i] = (uint8_t)(r < 0 ? 0 : r);
        rgb[3 * i + 1] = (uint8_t)(g < 0 ? 0 : g);
        rgb[3 * i + 2] = (uint8_t)(b < 0 ? 0 : b);
    }
}

/* TurboJPEG 2.x can leave a handle in a broken state after a failed header read (the next,
 * valid file then fails with the old error), so a handle that failed is replaced. */
static int jpeg_fail(ds_decoder *d, char *reason, size_t cap, const char *what, const char *msg)
{
    fail(reason, cap, "%s: %s", what, msg);
    tjhandle fresh = tjInitDecompress();
    if (fresh) {
        tjDestroy(d->tj);
        d->tj = fresh;
    }
    return -1;
}

static int decode_jpeg(ds_decoder *d, const uint8_t *data, size_t len, int min_side, uint64_t max_pixels,
                       ds_image *img, char *reason, size_t cap)
{
    int w, h, subsamp, cs;
    if (len > (size_t)0xFFFFFFFFUL) return fail(reason, cap, "JPEG larger than 4 GiB");
    if (tjDecompressHeader3(d->tj, data, (unsigned long)len, &w, &h, &subsamp, &cs))
        return jpeg_fail(d, reason, cap, "bad JPEG header", tjGetErrorStr2(d->tj));
    if (w <= 0 || h <= 0) return fail(reason, cap, "JPEG with no pixels (%dx%d)", w, h);
    if (too_many_pixels((uint64_t)w, (uint64_t)h, max_pixels, reason, cap)) return -1;

    /* Largest reduction (1/8, 1/4, 1/2) that keeps both sides >= min_side; the resize that
     * follows does the rest, so the DCT shortcut only drops detail the resize would drop. */
    tjscalingfactor sf = {1, 1};
    if (min_side > 0) {
        static const tjscalingfactor cand[] = {{1, 8}, {1, 4}, {1, 2}};
        for (int i = 0; i < 3; i++) {
            if (TJSCALED(w, cand[i]) >= min_side && TJSCALED(h, cand[i]) >= min_side) {
                sf = cand[i];
                break;
            }
        }
    }
    int sw = TJSCALED(w, sf), sh = TJSCALED(h, sf);
    int cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    size_t npix = (size_t)sw * sh;
    if (ds_scratch_grow((void **)&d->pix, &d->pix_cap, npix * 3) ||
        (cmyk && ds_scratch_grow((void **)&d->cmyk, &d->cmyk_cap, npix * 4)))
        return fail(reason, cap, "out of memory for a %dx%d image", sw, sh);

    /* Accurate DCT and fancy upsampling are the defaults, the same as Pillow's libjpeg use,
     * so a full-size decode matches Pillow's bit for bit. LIMITSCANS refuses progressive
     * files with absurd scan counts (a known way to make libjpeg spin for minutes). */
    int flags = TJFLAG_LIMITSCANS;
    int rc = tjDecompress2(d->tj, data, (unsigned long)len, cmyk ? d->cmyk : d->pix, sw, 0, sh,
                           cmyk ? TJPF_CMYK : TJPF_RGB, flags);
    if (rc) {
        const char *msg = tjGetErrorStr2(d->tj);
        /* Warnings leave a complete image, except the one that says the data ran out: the
         * rest was filled with grey, and Pillow refuses such a file as truncated. */
        if (tjGetErrorCode(d->tj) != TJERR_WARNING || strstr(msg, "Premature end"))
            return jpeg_fail(d, reason, cap, strstr(msg, "Premature end") ? "truncated JPEG" : "undecodable JPEG", msg);
    }
    if (cmyk) cmyk_to_rgb(d->pix, d->cmyk, npix);
    img->pix = d->pix;
    img->w = sw, img->h = sh;
    img->full_w = w, img->full_h = h;
    return 0;
}

/* ---- PNG ---- */

/* The file as libpng reads it: data[0..len) with `ins` spliced in at offset ins_at (a
 * stand-in PLTE, see missing_plte_at). */
typedef struct {
    const uint8_t *data;
    size_t len, pos;
    const uint8_t *ins;
    size_t ins_at, ins_len;
    char msg[160];
} png_src;

static void png_read_mem(png_structp png, png_bytep out, png_size_t n)
{
    png_src *s = png_get_io_ptr(png);
    if (n > s->len + s->ins_len - s->pos) png_error(png, "truncated PNG (data ends early)");
    while (n) {
        const uint8_t *from;
        size_t avail;
        if (s->pos < s->ins_at) from = s->data + s->pos, avail = s->ins_at - s->pos;
        else if (s->pos < s->ins_at + s->ins_len) from = s->ins + (s->pos - s->ins_at), avail = s->ins_at + s->ins_len - s->pos;
        else from = s->data + (s->pos - s->ins_len), avail = s->len + s->ins_len - s->pos;
        size_t k = n < avail ? n : avail;
        memcpy(out, from, k);
        out += k, n -= k, s->pos += k;
    }
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    png_src *s = png_get_error_ptr(png);
    snprintf(s->msg, sizeof s->msg, "%s", msg);
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg) {}

/* Every chunk libpng does not know is skipped, as Pillow skips it; without this libpng
 * refuses a file with an unknown critical chunk (uppercase first letter). */
static int png_skip_unknown(png_structp png, png_unknown_chunkp chunk) { return 1; }

static uint32_t be32(const uint8_t *p) { return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3]; }

/* A palette PNG whose first IDAT comes before any PLTE is illegal, and libpng refuses it;
 * Pillow reads it with its default palette (the grey ramp, below). Returns the offset of that
 * IDAT, where a stand-in PLTE goes so that libpng reads on (its colours are never used), or
 * 0 when the file has a PLTE or is no such palette PNG (libpng then judges it). */
static size_t missing_plte_at(const uint8_t *p, size_t len)
{
    if (len < 33 || memcmp(p + 12, "IHDR", 4) || p[25] != PNG_COLOR_TYPE_PALETTE) return 0;
    for (size_t i = 8; i + 12 <= len;) {
        uint32_t n = be32(p + i);
        if (!memcmp(p + i + 4, "PLTE", 4)) return 0;
        if (!memcmp(p + i + 4, "IDAT", 4)) return i;
        if (n > len - i - 12) return 0;
        i += 12 + (size_t)n;
    }
    return 0;
}

/* What a decoded row holds before it becomes RGB. */
typedef enum {
    PNG_ROWS_RGB,      /* 8-bit RGB: libpng's transforms did everything */
    PNG_ROWS_INDEX,    /* palette indices, one byte each */
    PNG_ROWS_GRAY16,   /* 16-bit grey, big-endian */
} png_rows;

/* Turns [n] samples of `kind` at the start of pix into [n, 3] RGB in place, back to front
 * (pixel i is read at i * bytes and written at 3 * i, never over one still unread). */
static void png_rows_to_rgb(uint8_t *pix, size_t n, png_rows kind, const uint8_t lut[256][3])
{
    for (size_t i = n; i-- > 0;) {
        uint8_t r, g, b;
        if (kind == PNG_ROWS_INDEX) {
            const uint8_t *c = lut[pix[i]];
            r = c[0], g = c[1], b = c[2];
        } else {
            /* Pillow opens 16-bit grey as mode "I" and its convert("RGB") clips to 0..255 (it
             * does not scale): 0..255 stay, everything above is white. */
            r = g = b = pix[2 * i] ? 255 : pix[2 * i + 1];
        }
        pix[3 * i] = r, pix[3 * i + 1] = g, pix[3 * i + 2] = b;
    }
}

static int decode_png(ds_decoder *d, const uint8_t *data, size_t len, uint64_t max_pixels, ds_image *img,
                      char *reason, size_t cap)
{
    /* 1-entry PLTE chunk (length, type, one black entry, CRC) for missing_plte_at. */
    static const uint8_t stand_in_plte[15] = {0, 0, 0, 3, 'P', 'L', 'T', 'E', 0, 0, 0, 0xA7, 0x7A, 0x3D, 0xDA};
    png_src src = {.data = data, .len = len, .ins = stand_in_plte};
    src.ins_at = missing_plte_at(data, len);
    src.ins_len = src.ins_at ? sizeof stand_in_plte : 0;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    if (!png) return fail(reason, cap, "out of memory (libpng)");
    png_infop info = png_create_info_struct(png);
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return fail(reason, cap, "out of memory (libpng)");
    }
    /* Everything a longjmp can skip over lives in `src` or `d`, not in locals. */
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &info, NULL);
        return fail(reason, cap, "undecodable PNG: %s", src.msg);
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_read_user_chunk_fn(png, NULL, png_skip_unknown);
    /* libpng's own limit is 1e6 x 1e6; ours is --max-pixels, checked below. */
    png_set_user_limits(png, 0x7fffffff, 0x7fffffff);
    /* CRCs as Pillow checks them: every chunk before the image data (Pillow refuses a file
     * with a bad one, ancillary or not; libpng would drop an ancillary chunk and go on)... */
    png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
    png_read_info(png, info);
    /* ... and no IDAT's (Pillow never reads them). */
    png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_ERROR_QUIT);
    png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if (too_many_pixels(w, h, max_pixels, reason, cap)) {
        png_destroy_read_struct(&png, &info, NULL);
        return -1;
    }
    int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
    /* To 8-bit RGB the way Pillow's convert("RGB") gets there (image.h has the rules). No
     * gamma, colour profile, sBIT or background is applied: libpng applies those only when
     * asked (png_set_gamma, png_set_background, ...), and Pillow ignores them too. */
    png_rows kind = PNG_ROWS_RGB;
    size_t bytes = 3;
    uint8_t lut[256][3];
    if (color == PNG_COLOR_TYPE_PALETTE) {
        /* Indices, looked up here rather than by libpng: Pillow's palette is the grey ramp
         * (i, i, i) under the PLTE's entries, so an index past the PLTE (or any index, with
         * no PLTE) is grey where libpng would give black; and tRNS is never looked at. */
        png_set_packing(png);
        kind = PNG_ROWS_INDEX, bytes = 1;
        for (int i = 0; i < 256; i++) lut[i][0] = lut[i][1] = lut[i][2] = (uint8_t)i;
        png_colorp plte;
        int nplte = 0;
        if (!src.ins_len && png_get_PLTE(png, info, &plte, &nplte) == PNG_INFO_PLTE)
            for (int i = 0; i < nplte && i < 256; i++)
                lut[i][0] = plte[i].red, lut[i][1] = plte[i].green, lut[i][2] = plte[i].blue;
    } else if (color == PNG_COLOR_TYPE_GRAY && depth == 16) {
        kind = PNG_ROWS_GRAY16, bytes = 2;
    } else {
        /* Grey 1/2/4-bit scaled to 0..255 (Pillow's "1", "L;2", "L;4"), 16-bit reduced to the
         * high byte (Pillow's "RGB;16B", "RGBA;16B", "LA;16B"), grey replicated, alpha
         * dropped (not composited). Stripping alpha also drops any tRNS libpng expanded. */
        if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
        if (depth == 16) png_set_strip_16(png);
        png_set_strip_alpha(png);
        if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    }
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * bytes) png_error(png, "unsupported PNG layout");
    if (ds_scratch_grow((void **)&d->pix, &d->pix_cap, (size_t)w * h * 3) ||
        ds_scratch_grow((void **)&d->rows, &d->rows_cap, (size_t)h * sizeof *d->rows))
        png_error(png, "out of memory");
    for (png_uint_32 y = 0; y < h; y++) d->rows[y] = d->pix + (size_t)y * w * bytes;
    png_read_image(png, d->rows);
    png_destroy_read_struct(&png, &info, NULL);
    if (kind != PNG_ROWS_RGB) png_rows_to_rgb(d->pix, (size_t)w * h, kind, (const uint8_t(*)[3])lut);
    img->pix = d->pix;
    img->w = img->full_w = (int)w;
    img->h = img->full_h = (int)h;
    return 0;
}

/* ---- by content ---- */

int ds_image_decode(ds_decoder *d, const uint8_t *data, size_t len, int min_side, uint64_t max_pixels,
                    ds_image *img, char *reason, size_t cap)
{
    static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
    if (len == 0) return fail(reason, cap, "empty file");
    if (len >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF)
        return decode_jpeg(d, data, len, min_side, max_pixels, img, reason, cap);
    if (len >= 8 && memcmp(data, png_sig, 8) == 0) return decode_png(d, data, len, max_pixels, img, reason, cap);
    return fail(reason, cap, "not a JPEG or PNG image");
}

int ds_fit_parse(const char *name)
{
    if (!strcmp(name, "crop")) return DS_FIT_CROP;
    if (!strcmp(name, "squash")) return DS_FIT_SQUASH;
    return -1;
}

const char *ds_fit_name(ds_fit fit) { return fit == DS_FIT_SQUASH ? "squash" : "crop"; }

/* Python's round() on a half-integer: ties go to the even neighbour. */
static int half_round_even(int twice)
{
    int q = twice / 2;
    return twice % 2 && q % 2 ? q + 1 : q;
}

ds_fit_geometry ds_fit_geometry_for(int w, int h, int size, ds_fit fit)
{
    ds_fit_geometry g = {size, size, 0, 0};
    if (fit == DS_FIT_SQUASH) return g;
    /* torchvision: new_long = int(size * long / short), computed in double. */
    int shorter = w <= h ? w : h, longer = w <= h ? h : w;
    int nl = (int)((double)((long long)size * longer) / shorter);
    if (w <= h) g.resized_h = nl;
    else g.resized_w = nl;
    /* CenterCrop: top = int(round((H - S) / 2.0)). */
    g.left = half_round_even(g.resized_w - size);
    g.top = half_round_even(g.resized_h - size);
    return g;
}

int ds_image_decode_resized(ds_decoder *d, const uint8_t *data, size_t len, int size, ds_fit fit,
                            uint64_t max_pixels, uint8_t *out, char *reason, size_t cap)
{
    ds_image img;
    if (size <= 0 || size > (1 << 20)) return fail(reason, cap, "bad output size %d", size);
    /* Both fits need the shorter side >= size (crop keeps it at size, squash shrinks both
     * sides to size). DCT scaling is a block average, which aliases fine texture the way the
     * triangle filter does not; leaving the triangle a reduction of at least DCT_MARGIN keeps
     * the result within a fraction of a level of Pillow's full-size resize (at a margin of 1,
     * textured photos differed by up to 4 levels on average). The entropy decoding, which
     * dominates a scaled decode, costs the same at any scale. */
    if (ds_image_decode(d, data, len, DCT_MARGIN * size, max_pixels, &img, reason, cap)) return -1;
    ds_fit_geometry g = ds_fit_geometry_for(img.full_w, img.full_h, size, fit);
    return ds_resize_bilinear(d, out, size, size, img.pix, img.w, img.h, &g, reason, cap);
}

int ds_image_load_resized(ds_decoder *d, const char *path, int size, ds_fit fit, uint64_t max_pixels,
                          uint8_t *out, char *reason, size_t cap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fail(reason, cap, "cannot open: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st)) {
        int e = errno;
        close(fd);
        return fail(reason, cap, "cannot stat: %s", strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return fail(reason, cap, "not a regular file");
    }
    if ((unsigned long long)st.st_size > MAX_FILE_BYTES) {
        close(fd);
        return fail(reason, cap, "file larger than 1 GiB (%lld bytes)", (long long)st.st_size);
    }
    size_t len = (size_t)st.st_size, got = 0;
    if (ds_scratch_grow((void **)&d->file, &d->file_cap, len ? len : 1)) {
        close(fd);
        return fail(reason, cap, "out of memory reading %zu bytes", len);
    }
    while (got < len) {
        ssize_t r = read(fd, d->file + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            int e = errno;
            close(fd);
            return fail(reason, cap, "read error: %s", strerror(e));
        }
        if (r == 0) break; /* shrank while reading: decode what is there */
        got += (size_t)r;
    }
    close(fd);
    return ds_image_decode_resized(d, d->file, got, size, fit, max_pixels, out, reason, cap);
}
