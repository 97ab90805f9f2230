/* image: the resize against a plain double-precision reference of the same filter, the fit
 * geometry against torchvision's arithmetic, decoding of small JPEGs and PNGs of every kind
 * made here with TurboJPEG and libpng, refusal of hostile headers before any big
 * allocation, and a replay of the fuzzing corpus (every file must come back, decoded or
 * rejected with a reason, without a crash). */
#include "../check.h"
#include "image.h"
#include "image_internal.h"
#include "rng.h"

#include <dirent.h>
#include <png.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <zlib.h>

static ds_decoder *dec;
static char reason[256];

/* ---- resize ---- */

/* Reference: the same triangle filter in double, one output pixel at a time, no tables. */
static double ref_tap_sum(const uint8_t *in, int in_w, int in_h, int ch, int out_x, int out_y, int rw, int rh)
{
    double sx = (double)in_w / rw, sy = (double)in_h / rh;
    double fx = sx < 1 ? 1 : sx, fy = sy < 1 ? 1 : sy;
    double cx = (out_x + 0.5) * sx, cy = (out_y + 0.5) * sy, acc = 0, wsum = 0;
    for (int y = 0; y < in_h; y++) {
        double wy = 1 - fabs((y + 0.5 - cy) / fy);
        if (wy <= 0) continue;
        for (int x = 0; x < in_w; x++) {
            double wx = 1 - fabs((x + 0.5 - cx) / fx);
            if (wx <= 0) continue;
            acc += wx * wy * in[((size_t)y * in_w + x) * 3 + ch];
            wsum += wx * wy;
        }
    }
    return acc / wsum;
}

static void test_resize_reference(void)
{
    check_begin("resize_matches_double_reference");
    ds_rng r;
    ds_rng_init(&r, 7, DS_RNG_DATA, 1);
    static const int sizes[][4] = {{40, 30, 16, 16}, {17, 53, 9, 31}, {8, 8, 20, 13}, {100, 7, 33, 7}, {5, 90, 5, 12}};
    for (int c = 0; c < 5; c++) {
        int iw = sizes[c][0], ih = sizes[c][1], ow = sizes[c][2], oh = sizes[c][3];
        uint8_t *in = malloc((size_t)iw * ih * 3), *out = malloc((size_t)ow * oh * 3);
        for (int i = 0; i < iw * ih * 3; i++) in[i] = (uint8_t)ds_rng_below(&r, 256);
        ds_fit_geometry g = {ow, oh, 0, 0};
        CHECK(ds_resize_bilinear(dec, out, ow, oh, in, iw, ih, &g, reason, sizeof reason) == 0, "resize");
        double worst = 0;
        for (int y = 0; y < oh; y++)
            for (int x = 0; x < ow; x++)
                for (int ch = 0; ch < 3; ch++) {
                    double e = fabs(out[((size_t)y * ow + x) * 3 + ch] - ref_tap_sum(in, iw, ih, ch, x, y, ow, oh));
                    if (e > worst) worst = e;
                }
        /* Two rounding steps to 8 bits (after each pass): at most ~1 level from the exact value. */
        CHECK(worst <= 1.01, "%dx%d -> %dx%d: worst error %.3f levels", iw, ih, ow, oh, worst);
        free(in);
        free(out);
    }
    check_end();
}

static void test_resize_properties(void)
{
    check_begin("resize_properties");
    uint8_t in[64 * 48 * 3], out[32 * 32 * 3], win[10 * 10 * 3];
    memset(in, 77, sizeof in);
    ds_fit_geometry g = {32, 32, 0, 0};
    CHECK(ds_resize_bilinear(dec, out, 32, 32, in, 64, 48, &g, reason, sizeof reason) == 0, "resize");
    int flat = 1;
    for (size_t i = 0; i < sizeof out; i++) flat &= out[i] == 77;
    CHECK(flat, "a constant image does not stay constant");
    for (size_t i = 0; i < sizeof in; i++) in[i] = (uint8_t)(i * 31 + i / 7);
    /* Same size: exactly the input. */
    g = (ds_fit_geometry){64, 48, 0, 0};
    uint8_t same[64 * 48 * 3];
    CHECK(ds_resize_bilinear(dec, same, 64, 48, in, 64, 48, &g, reason, sizeof reason) == 0, "identity");
    CHECK(memcmp(same, in, sizeof in) == 0, "identity resize changed pixels");
    /* A window equals the same region of the full resize. */
    uint8_t full[40 * 30 * 3];
    g = (ds_fit_geometry){40, 30, 0, 0};
    CHECK(ds_resize_bilinear(dec, full, 40, 30, in, 64, 48, &g, reason, sizeof reason) == 0, "full");
    g = (ds_fit_geometry){40, 30, 13, 17};
    CHECK(ds_resize_bilinear(dec, win, 10, 10, in, 64, 48, &g, reason, sizeof reason) == 0, "window");
    int same_win = 1;
    for (int y = 0; y < 10; y++) same_win &= !memcmp(win + y * 30, full + ((17 + y) * 40 + 13) * 3, 30);
    CHECK(same_win, "a window differs from the full resize");
    g = (ds_fit_geometry){40, 30, 35, 0};
    CHECK(ds_resize_bilinear(dec, win, 10, 10, in, 64, 48, &g, reason, sizeof reason) != 0, "window outside accepted");
    check_end();
}

/* The vector passes (AVX2) against the plain ones: identical bytes, on odd widths that
 * exercise the tails and windows that touch the input's last pixel. */
static void test_resize_vector_equals_plain(void)
{
    if (!ds_cpu_isa_supported(DS_CPU_AVX2)) {
        printf("SKIP resize_vector_equals_plain: this CPU has no AVX2\n");
        return;
    }
    check_begin("resize_vector_equals_plain");
    ds_rng r;
    ds_rng_init(&r, 11, DS_RNG_DATA, 2);
    /* dspack's usual shapes first (a squash to 224, a DCT-scaled large photo, a crop), then
     * random ones. */
    static const int fixed[][6] = {{400, 350, 224, 224, 224, 224}, {1021, 517, 224, 224, 224, 224},
                                   {483, 480, 225, 224, 224, 224}};
    for (int c = 0; c < 43; c++) {
        int iw = 1 + (int)ds_rng_below(&r, 300), ih = 1 + (int)ds_rng_below(&r, 300);
        int rw = 1 + (int)ds_rng_below(&r, 120), rh = 1 + (int)ds_rng_below(&r, 120);
        int ow = 1 + (int)ds_rng_below(&r, rw), oh = 1 + (int)ds_rng_below(&r, rh);
        if (c < 3) iw = fixed[c][0], ih = fixed[c][1], rw = fixed[c][2], rh = fixed[c][3], ow = fixed[c][4], oh = fixed[c][5];
        ds_fit_geometry g = {rw, rh, rw - ow, rh - oh};
        uint8_t *in = malloc((size_t)iw * ih * 3), *a = malloc((size_t)ow * oh * 3), *b = malloc((size_t)ow * oh * 3);
        for (size_t i = 0; i < (size_t)iw * ih * 3; i++) in[i] = (uint8_t)ds_rng_below(&r, 256);
        int ra = ds_resize_bilinear_isa(DS_CPU_AVX2, dec, a, ow, oh, in, iw, ih, &g, reason, sizeof reason);
        int rb = ds_resize_bilinear_isa(DS_CPU_PLAIN, dec, b, ow, oh, in, iw, ih, &g, reason, sizeof reason);
        CHECK(ra == 0 && rb == 0 && !memcmp(a, b, (size_t)ow * oh * 3), "%dx%d -> %dx%d window %dx%d differs", iw, ih, rw,
              rh, ow, oh);
        free(in), free(a), free(b);
    }
    check_end();
}

static void test_geometry(void)
{
    check_begin("fit_geometry_like_torchvision");
    /* Resize(S): long = int(S * long / short); CenterCrop: int(round((H - S) / 2)), ties to even. */
    ds_fit_geometry g = ds_fit_geometry_for(400, 350, 224, DS_FIT_CROP);
    CHECK(g.resized_w == 256 && g.resized_h == 224 && g.left == 16 && g.top == 0, "400x350: %d %d %d", g.resized_w, g.left, g.top);
    g = ds_fit_geometry_for(350, 400, 224, DS_FIT_CROP);
    CHECK(g.resized_w == 224 && g.resized_h == 256 && g.top == 16, "350x400");
    g = ds_fit_geometry_for(301, 300, 224, DS_FIT_CROP); /* int(224*301/300) = 224 */
    CHECK(g.resized_w == 224 && g.left == 0, "301x300: %d", g.resized_w);
    g = ds_fit_geometry_for(227, 224, 224, DS_FIT_CROP); /* (227-224)/2 = 1.5 -> 2 */
    CHECK(g.left == 2, "1.5 rounds to %d", g.left);
    g = ds_fit_geometry_for(229, 224, 224, DS_FIT_CROP); /* 2.5 -> 2 */
    CHECK(g.left == 2, "2.5 rounds to %d", g.left);
    g = ds_fit_geometry_for(225, 224, 224, DS_FIT_CROP); /* 0.5 -> 0 */
    CHECK(g.left == 0, "0.5 rounds to %d", g.left);
    g = ds_fit_geometry_for(1000, 10, 224, DS_FIT_SQUASH);
    CHECK(g.resized_w == 224 && g.resized_h == 224 && g.left == 0 && g.top == 0, "squash");
    check_end();
}

/* ---- decoding ---- */

static uint8_t *make_jpeg(const uint8_t *pix, int w, int h, int pf, int subsamp, int flags, unsigned long *len)
{
    tjhandle tj = tjInitCompress();
    uint8_t *buf = NULL;
    *len = 0;
    if (!tj || tjCompress2(tj, pix, w, 0, h, pf, &buf, len, subsamp, 95, flags)) {
        fprintf(stderr, "tjCompress2: %s\n", tjGetErrorStr2(tj));
        buf = NULL;
    }
    tjDestroy(tj);
    return buf;
}

typedef struct {
    uint8_t *data;
    size_t len, cap;
} membuf;

static void png_write_mem(png_structp png, png_bytep p, png_size_t n)
{
    membuf *m = png_get_io_ptr(png);
    if (m->len + n > m->cap) m->data = realloc(m->data, m->cap = (m->len + n) * 2);
    memcpy(m->data + m->len, p, n);
    m->len += n;
}

static void png_flush_mem(png_structp png) {}

/* A PNG from raw rows (each row `bytes_per_row` bytes) of the given type and depth; `trns`:
 * a tRNS chunk too (alpha per palette entry, or for other types the colour of pixel 0). */
static membuf make_png(int w, int h, int color, int depth, int interlace, const uint8_t *rows, size_t bytes_per_row,
                       const png_color *palette, int npal, int trns)
{
    membuf m = {0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_write_struct(&png, &info);
        free(m.data);
        return (membuf){0};
    }
    png_set_write_fn(png, &m, png_write_mem, png_flush_mem);
    png_set_IHDR(png, info, w, h, depth, color, interlace, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
    if (palette) png_set_PLTE(png, info, palette, npal);
    png_byte alpha[4] = {0, 60, 255, 128};
    png_color_16 key = {.gray = depth == 16 ? (png_uint_16)(rows[0] << 8 | rows[1]) : rows[0],
                        .red = rows[0], .green = rows[1], .blue = rows[2]};
    if (trns) png_set_tRNS(png, info, alpha, palette ? npal : 0, &key);
    png_write_info(png, info);
    png_bytep *rp = malloc(h * sizeof *rp);
    for (int y = 0; y < h; y++) rp[y] = (png_bytep)rows + y * bytes_per_row;
    png_write_image(png, rp);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rp);
    return m;
}

static int max_abs_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        int d = abs((int)a[i] - (int)b[i]);
        if (d > worst) worst = d;
    }
    return worst;
}

static void smooth_rgb(uint8_t *p, int w, int h)
{
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *q = p + ((size_t)y * w + x) * 3;
            q[0] = (uint8_t)(x * 255 / (w - 1)), q[1] = (uint8_t)(y * 255 / (h - 1)), q[2] = 128;
        }
}

static void test_jpeg_kinds(void)
{
    check_begin("decode_jpeg_kinds");
    enum { W = 48, H = 40 };
    uint8_t rgb[W * H * 3], gray[W * H], cmyk[W * H * 4];
    smooth_rgb(rgb, W, H);
    ds_image img;
    unsigned long len;

    uint8_t *j = make_jpeg(rgb, W, H, TJPF_RGB, TJSAMP_444, 0, &len);
    CHECK(j && ds_image_decode(dec, j, len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) == 0, "baseline: %s", reason);
    if (j) CHECK(img.w == W && img.h == H && max_abs_diff(img.pix, rgb, sizeof rgb) <= 8, "baseline pixels off by %d",
                 max_abs_diff(img.pix, rgb, sizeof rgb));
    tjFree(j);

    j = make_jpeg(rgb, W, H, TJPF_RGB, TJSAMP_420, TJFLAG_PROGRESSIVE, &len);
    CHECK(j && ds_image_decode(dec, j, len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) == 0, "progressive: %s", reason);
    if (j) CHECK(max_abs_diff(img.pix, rgb, sizeof rgb) <= 12, "progressive pixels off by %d", max_abs_diff(img.pix, rgb, sizeof rgb));
    tjFree(j);

    for (int i = 0; i < W * H; i++) gray[i] = (uint8_t)(i % W * 5);
    j = make_jpeg(gray, W, H, TJPF_GRAY, TJSAMP_GRAY, 0, &len);
    CHECK(j && ds_image_decode(dec, j, len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) == 0, "gray: %s", reason);
    int gray_ok = 1;
    for (int i = 0; j && i < W * H; i++)
        gray_ok &= img.pix[3 * i] == img.pix[3 * i + 1] && img.pix[3 * i] == img.pix[3 * i + 2] &&
                   abs(img.pix[3 * i] - gray[i]) <= 6;
    CHECK(gray_ok, "gray not replicated to RGB");
    tjFree(j);

    /* CMYK in Adobe polarity (stored = 255 - ink), as Photoshop and Pillow write it: pure
     * cyan ink must come back as (0, 255, 255), 50% black as ~(128, 128, 128). */
    for (int i = 0; i < W * H; i++) {
        int left = i % W < W / 2;
        cmyk[4 * i] = left ? 0 : 255;
        cmyk[4 * i + 1] = 255, cmyk[4 * i + 2] = 255;
        cmyk[4 * i + 3] = left ? 255 : 127;
    }
    j = make_jpeg(cmyk, W, H, TJPF_CMYK, TJSAMP_444, 0, &len);
    CHECK(j && ds_image_decode(dec, j, len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) == 0, "cmyk: %s", reason);
    if (j) {
        const uint8_t *a = img.pix + (H / 2 * W + 4) * 3, *b = img.pix + (H / 2 * W + W - 4) * 3;
        CHECK(a[0] <= 6 && a[1] >= 249 && a[2] >= 249, "cyan came back as %d,%d,%d", a[0], a[1], a[2]);
        CHECK(abs(b[0] - 127) <= 6 && abs(b[1] - 127) <= 6 && abs(b[2] - 127) <= 6, "50%% black came back as %d,%d,%d",
              b[0], b[1], b[2]);
    }
    tjFree(j);

    /* DCT scaling: 400x320 with min_side 100 decodes at 1/2 (200x160), never below 100. */
    uint8_t *big = malloc(400 * 320 * 3);
    smooth_rgb(big, 400, 320);
    j = make_jpeg(big, 400, 320, TJPF_RGB, TJSAMP_420, 0, &len);
    CHECK(j && ds_image_decode(dec, j, len, 100, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) == 0, "big");
    CHECK(img.w == 200 && img.h == 160 && img.full_w == 400 && img.full_h == 320, "scaled to %dx%d", img.w, img.h);
    CHECK(ds_image_decode(dec, j, len, 40, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) == 0 && img.w == 50,
          "1/8 scale gave %d", img.w);
    CHECK(ds_image_decode(dec, j, len, 161, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) == 0 && img.w == 400,
          "min side 161 must decode at full size, got %d", img.w);

    /* Truncated: refused, and the decoder still works on the next good file. */
    CHECK(ds_image_decode(dec, j, len / 2, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) != 0, "truncated accepted");
    CHECK(strstr(reason, "truncated") != NULL, "reason: %s", reason);
    uint8_t junk[64];
    memcpy(junk, j, 3);
    memset(junk + 3, 0x67, sizeof junk - 3);
    CHECK(ds_image_decode(dec, junk, sizeof junk, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) != 0, "junk accepted");
    CHECK(ds_image_decode(dec, j, len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) == 0, "decoder broken after an error: %s", reason);

    /* Hostile header: patch the SOF to 65000 x 65000; refused from the header alone. */
    for (unsigned long i = 2; i + 8 < len; i++)
        if (j[i] == 0xFF && j[i + 1] == 0xC0) {
            j[i + 5] = 65000 >> 8, j[i + 6] = 65000 & 255, j[i + 7] = 65000 >> 8, j[i + 8] = 65000 & 255;
            break;
        }
    CHECK(ds_image_decode(dec, j, len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) != 0, "65000^2 accepted");
    CHECK(strstr(reason, "max-pixels") != NULL, "reason: %s", reason);
    tjFree(j);
    free(big);
    check_end();
}

static void test_png_kinds(void)
{
    check_begin("decode_png_kinds");
    enum { W = 13, H = 9 };
    uint8_t rgb[W * H * 3], rgba[W * H * 4], rgb16[W * H * 6], gray[W * H], gray16[W * H * 2], pal_idx[W * H];
    uint8_t want[W * H * 3];
    ds_image img;
    for (int i = 0; i < W * H; i++) {
        rgb[3 * i] = (uint8_t)(i * 3), rgb[3 * i + 1] = (uint8_t)(i * 7), rgb[3 * i + 2] = (uint8_t)(255 - i);
        memcpy(rgba + 4 * i, rgb + 3 * i, 3);
        rgba[4 * i + 3] = (uint8_t)(i * 11); /* alpha is dropped, not composited */
        for (int c = 0; c < 3; c++) rgb16[6 * i + 2 * c] = rgb[3 * i + c], rgb16[6 * i + 2 * c + 1] = 0xA5;
        gray[i] = (uint8_t)(i * 2);
        pal_idx[i] = (uint8_t)(i % 4);
        gray16[2 * i] = (uint8_t)(i * 5 >> 8), gray16[2 * i + 1] = (uint8_t)(i * 5);
    }
    struct {
        const char *name;
        int color, depth, interlace;
        const uint8_t *rows;
        size_t bpr;
        int trns;
    } cases[] = {
        {"rgb", PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, rgb, W * 3, 0},
        {"rgb interlaced", PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_ADAM7, rgb, W * 3, 0},
        {"rgba", PNG_COLOR_TYPE_RGB_ALPHA, 8, PNG_INTERLACE_NONE, rgba, W * 4, 0},
        {"rgb 16-bit", PNG_COLOR_TYPE_RGB, 16, PNG_INTERLACE_NONE, rgb16, W * 6, 0},
        {"rgb tRNS", PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, rgb, W * 3, 1},
        {"gray", PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_NONE, gray, W, 0},
        {"gray tRNS", PNG_COLOR_TYPE_GRAY, 8, PNG_INTERLACE_ADAM7, gray, W, 1},
        /* Pillow's "I" mode: convert("RGB") clips at 255 rather than taking the high byte. */
        {"gray 16-bit", PNG_COLOR_TYPE_GRAY, 16, PNG_INTERLACE_NONE, gray16, W * 2, 1},
        {"palette", PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE, pal_idx, W, 0},
        /* tRNS is dropped: the palette's colours, as Pillow's convert("RGB") gives them. */
        {"palette tRNS", PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE, pal_idx, W, 1},
        {"palette tRNS interlaced", PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_ADAM7, pal_idx, W, 1},
    };
    png_color pal[4] = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {10, 20, 30}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        membuf m = make_png(W, H, cases[c].color, cases[c].depth, cases[c].interlace, cases[c].rows, cases[c].bpr,
                            cases[c].color == PNG_COLOR_TYPE_PALETTE ? pal : NULL, 4, cases[c].trns);
        for (int i = 0; i < W * H; i++)
            for (int k = 0; k < 3; k++)
                want[3 * i + k] = cases[c].color == PNG_COLOR_TYPE_GRAY      ? (cases[c].depth == 16 ? (i * 5 > 255 ? 255 : i * 5) : gray[i])
                                  : cases[c].color == PNG_COLOR_TYPE_PALETTE ? ((uint8_t *)&pal[i % 4])[k]
                                                                             : rgb[3 * i + k];
        int rc = ds_image_decode(dec, m.data, m.len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason);
        CHECK(rc == 0, "%s: %s", cases[c].name, reason);
        if (!rc) CHECK(img.w == W && img.h == H && !memcmp(img.pix, want, sizeof want), "%s: pixels differ", cases[c].name);
        if (c == 0) {
            CHECK(ds_image_decode(dec, m.data, m.len - 20, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) != 0,
                  "truncated PNG accepted");
            /* IHDR of 65000 x 65000 with a correct CRC: refused before decoding. */
            uint8_t *ihdr = m.data + 8;
            ihdr[8] = 0, ihdr[9] = 0, ihdr[10] = 65000 >> 8, ihdr[11] = 65000 & 255;
            ihdr[12] = 0, ihdr[13] = 0, ihdr[14] = 65000 >> 8, ihdr[15] = 65000 & 255;
            uint32_t crc = (uint32_t)crc32(0, ihdr + 4, 17);
            ihdr[21] = crc >> 24, ihdr[22] = crc >> 16, ihdr[23] = crc >> 8, ihdr[24] = crc;
            CHECK(ds_image_decode(dec, m.data, m.len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason) != 0 &&
                      strstr(reason, "max-pixels"),
                  "65000^2 PNG: %s", reason);
            CHECK(ds_image_decode(dec, m.data, m.len, 0, 100, &img, reason, sizeof reason) != 0, "max-pixels 100");
        }
        free(m.data);
    }
    CHECK(ds_image_decode(dec, (const uint8_t *)"", 0, 0, 1000, &img, reason, sizeof reason) != 0 &&
              !strcmp(reason, "empty file"), "empty: %s", reason);
    CHECK(ds_image_decode(dec, (const uint8_t *)"GIF89a.....", 11, 0, 1000, &img, reason, sizeof reason) != 0 &&
              strstr(reason, "not a JPEG or PNG"), "gif: %s", reason);
    check_end();
}

/* Every file the fuzzer kept must come back decoded or rejected, never crash (run the SAN
 * build of this test to check memory safety too). */
static void test_fuzz_corpus(void)
{
    check_begin("fuzz_corpus_replay");
    const char *root = getenv("DS_ROOT") ? getenv("DS_ROOT") : ".";
    char dir[1024];
    snprintf(dir, sizeof dir, "%s/tests/fuzz/corpus/decode", root);
    DIR *d = opendir(dir);
    CHECK(d != NULL, "cannot open %s", dir);
    int files = 0;
    struct dirent *e;
    uint8_t *out = malloc(64 * 64 * 3);
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        /* Both fits at 64, and the size fuzz_decode.c derived from the file's length. */
        struct stat st;
        int derived = stat(p, &st) ? 1 : 1 + (int)((size_t)st.st_size * 7 % 64);
        for (int run = 0; run < 3; run++) {
            reason[0] = 0;
            int rc = ds_image_load_resized(dec, p, run == 2 ? derived : 64, run == 2 ? (ds_fit)(st.st_size & 1) : (ds_fit)run,
                                           1u << 22, out, reason, sizeof reason);
            CHECK(rc == 0 || reason[0], "%s: rejected without a reason", e->d_name);
        }
        files++;
    }
    if (d) closedir(d);
    CHECK(files >= 5, "only %d corpus files", files);
    free(out);
    check_end();
}

int main(void)
{
    dec = ds_decoder_new();
    if (!dec) return 1;
    test_resize_reference();
    test_resize_properties();
    test_resize_vector_equals_plain();
    test_geometry();
    test_jpeg_kinds();
    test_png_kinds();
    test_fuzz_corpus();
    ds_decoder_free(dec);
    return check_exit();
}
