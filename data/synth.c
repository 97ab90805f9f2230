/* synth: a synthetic ImageNet-like class-folder tree, deterministic for a seed.
 *
 *   OUT_DIR/n0XXXXXXX/n0XXXXXXX_NNNN.JPEG
 *
 * Each class has its own look that a small network can learn: a colour pair, a stripe
 * orientation and frequency, and a shape, drawn at a random position and scale with
 * noise. Sizes vary around 400x350 with every tenth image large (>= 1000 px on a side)
 * so DCT-domain downscaling is exercised, and aspect ratios range from tall to wide.
 *
 * --quirks adds ImageNet's awkward files (listed on stdout and in OUT_DIR/.quirks.tsv as
 * "kind<TAB>expect<TAB>path", expect being what a reader should do with it):
 *   gray           ok      a one-channel JPEG
 *   cmyk           ok      a four-channel CMYK (YCCK) JPEG; samples are ink amounts
 *   progressive    ok      a progressive JPEG
 *   png_as_jpeg    ok      a PNG whose name ends in .JPEG
 *   unicode_name   ok      a JPEG whose name has spaces and non-ASCII letters
 *   truncated      reject  a JPEG cut to half its length
 *   zero_bytes     reject  an empty .JPEG
 *   not_image      reject  a text file named .jpg
 *   huge_header    reject  a JPEG whose SOF claims 65000x65000 pixels
 *   hidden         skip    dot-files a scan must not list
 *   empty_class    skip    a class directory with no images (sorts last)
 * The ok/reject files are extra: every class still has --per-class ordinary images. */
#include "cli.h"
#include "fsutil.h"
#include "log.h"
#include "rng.h"

#include <errno.h>
#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

static long long nclasses = 10, per_class = 20, seed = 42, fixed_w, fixed_h;
static int quirks;
static double noise = 0.12;

static ds_option opts[] = {
    {.name = "classes", .type = DS_OPT_INT, .value = &nclasses, .arg = "N", .help = "number of classes",
     .min = 1, .max = 100000},
    {.name = "per-class", .type = DS_OPT_INT, .value = &per_class, .arg = "N", .help = "images per class",
     .min = 0, .max = 1000000},
    {.name = "seed", .type = DS_OPT_INT, .value = &seed, .arg = "S", .help = "seed: same seed, same bytes",
     .min = 0, .max = 9.2e18},
    {.name = "width", .type = DS_OPT_INT, .value = &fixed_w, .arg = "W",
     .help = "every image W pixels wide (with --height; 0: varied sizes)", .min = 0, .max = 16384},
    {.name = "height", .type = DS_OPT_INT, .value = &fixed_h, .arg = "H",
     .help = "every image H pixels high (with --width; 0: varied sizes)", .min = 0, .max = 16384},
    {.name = "noise", .type = DS_OPT_DOUBLE, .value = &noise, .arg = "A",
     .help = "noise: each channel moves by up to +-128 A grey levels (more: larger JPEGs)", .min = 0, .max = 1},
    {.name = "quirks", .type = DS_OPT_FLAG, .value = &quirks,
     .help = "add ImageNet's awkward files (listed on stdout)"},
    {0},
};

static ds_cli cli = {
    .prog = "synth",
    .args = "[options] OUT_DIR",
    .summary = "Generate a synthetic ImageNet-like class-folder tree of JPEGs.",
    .min_pos = 1,
    .max_pos = 1,
    .opts = opts,
};

#define QUALITY 90

/* Synset-like names: fixed for a class index whatever the seed, increasing with it. */
static void class_name(char *buf, size_t len, long long c)
{
    snprintf(buf, len, "n%08lld", 1440764 + c * 2791);
}

typedef struct {
    float fg[3], bg[3];   /* the class's colour pair, 0..255 */
    float angle, freq;    /* stripe direction (radians) and cycles across the short side */
    int shape;            /* 0 disc, 1 square, 2 cross, 3 triangle */
} class_look;

static void hsv_to_rgb(float h, float s, float v, float out[3])
{
    float c = v * s, x = c * (1 - fabsf(fmodf(h * 6, 2) - 1)), m = v - c;
    float r = 0, g = 0, b = 0;
    int k = (int)(h * 6) % 6;
    switch (k) {
    case 0: r = c, g = x; break;
    case 1: r = x, g = c; break;
    case 2: g = c, b = x; break;
    case 3: g = x, b = c; break;
    case 4: r = x, b = c; break;
    default: r = c, b = x; break;
    }
    out[0] = 255 * (r + m), out[1] = 255 * (g + m), out[2] = 255 * (b + m);
}

/* The look is a function of the class index only, spread so that neighbours differ in
 * every attribute (golden-ratio hue steps, prime strides through angles and shapes). */
static class_look look_of(long long c)
{
    class_look l;
    float hue = fmodf(0.137f + 0.618034f * (float)c, 1.0f);
    hsv_to_rgb(hue, 0.85f, 0.95f, l.fg);
    hsv_to_rgb(fmodf(hue + 0.5f, 1.0f), 0.35f, 0.35f + 0.1f * (float)(c % 3), l.bg);
    l.angle = (float)M_PI * (float)((c * 7) % 12) / 12.0f;
    l.freq = 3.0f + 2.5f * (float)(c % 5);
    l.shape = (int)((c / 5 + c) % 4);
    return l;
}

static int inside_shape(int shape, float dx, float dy)  /* dx, dy in [-1, 1] units */
{
    switch (shape) {
    case 0: return dx * dx + dy * dy <= 1;
    case 1: return fabsf(dx) <= 0.8f && fabsf(dy) <= 0.8f;
    case 2: return (fabsf(dx) <= 0.3f && fabsf(dy) <= 1) || (fabsf(dy) <= 0.3f && fabsf(dx) <= 1);
    default: return dy <= 0.9f && dy >= -0.9f + 1.8f * fabsf(dx);
    }
}

/* Renders one image: (h, w, 3) RGB into a new buffer. */
static unsigned char *render(ds_rng *r, const class_look *l, int w, int h)
{
    unsigned char *px = ds_xmalloc((size_t)w * h * 3);
    float side = (float)(w < h ? w : h);
    float ca = cosf(l->angle), sa = sinf(l->angle), phase = 6.2831853f * ds_rng_float(r);
    float k = 6.2831853f * l->freq / side;
    float cx = w * (0.25f + 0.5f * ds_rng_float(r)), cy = h * (0.25f + 0.5f * ds_rng_float(r));
    float rad = side * (0.15f + 0.15f * ds_rng_float(r));
    float light = 0.8f + 0.4f * ds_rng_float(r);  /* per-image exposure */
    for (int y = 0; y < h; y++) {
        for (int x = 0; x < w; x++) {
            float s = 0.5f + 0.5f * sinf(k * (x * ca + y * sa) + phase);
            float dx = (x - cx) / rad, dy = (y - cy) / rad;
            int in = inside_shape(l->shape, dx, dy);
            /* Cheap noise: 4 uniform bytes from one Philox word, centred. */
            uint32_t n = ds_rng_u32(r);
            for (int c = 0; c < 3; c++) {
                float v = in ? l->fg[c] : l->bg[c] * (0.55f + 0.45f * s) + l->fg[c] * 0.25f * s;
                v = v * light + (float)((int)((n >> (8 * c)) & 0xff) - 128) * (float)noise;
                px[((size_t)y * w + x) * 3 + c] = (unsigned char)(v < 0 ? 0 : v > 255 ? 255 : v);
            }
        }
    }
    return px;
}

/* Image size: mostly around 400x350 with aspect from 1:2 to 2:1; every tenth large. */
static void pick_size(ds_rng *r, int *w, int *h)
{
    int large = ds_rng_below(r, 10) == 0;
    double area = large ? 1100.0 * 1000.0 * (1 + ds_rng_double(r)) : 400.0 * 350.0 * (0.6 + 0.8 * ds_rng_double(r));
    double aspect = exp(log(2.0) * (2 * ds_rng_double(r) - 1));  /* w / h */
    *w = (int)sqrt(area * aspect);
    *h = (int)sqrt(area / aspect);
    if (large && *w < 1000 && *h < 1000) *w = 1000 + (int)ds_rng_below(r, 200);
    if (*w < 16) *w = 16;
    if (*h < 16) *h = 16;
}

static int write_bytes(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f) return ds_err("cannot write %s: %s", path, strerror(errno));
    int rc = len && fwrite(data, 1, len, f) != len ? ds_err("cannot write %s: %s", path, strerror(errno)) : 0;
    if (fclose(f) && rc == 0) rc = ds_err("cannot write %s: %s", path, strerror(errno));
    return rc;
}

/* Encodes pixels (pf = TJPF_RGB, TJPF_GRAY or TJPF_CMYK) as a JPEG in *out (tjFree it). */
static int encode_jpeg(const unsigned char *px, int w, int h, int pf, int flags,
                       unsigned char **out, unsigned long *len)
{
    tjhandle tj = tjInitCompress();
    if (!tj) return ds_err("libturbojpeg: %s", tjGetErrorStr2(NULL));
    int subsamp = pf == TJPF_GRAY ? TJSAMP_GRAY : TJSAMP_420;
    *out = NULL;
    *len = 0;
    int rc = 0;
    if (tjCompress2(tj, px, w, 0, h, pf, out, len, subsamp, QUALITY, flags))
        rc = ds_err("libturbojpeg: %s", tjGetErrorStr2(tj));
    tjDestroy(tj);
    return rc;
}

static int write_jpeg(const char *path, const unsigned char *px, int w, int h, int pf, int flags)
{
    unsigned char *buf;
    unsigned long len;
    if (encode_jpeg(px, w, h, pf, flags, &buf, &len)) return ds_err("cannot encode %s", path);
    int rc = write_bytes(path, buf, len);
    tjFree(buf);
    return rc;
}

static void png_error_cb(png_structp png, png_const_charp msg)
{
    ds_err("libpng: %s", msg);
    png_longjmp(png, 1);
}

static int write_png_rgb(const char *path, const unsigned char *px, int w, int h)
{
    FILE *f = fopen(path, "wb");
    if (!f) return ds_err("cannot write %s: %s", path, strerror(errno));
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, png_error_cb, NULL);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    volatile int rc = 0;
    if (!png || !info) {
        rc = ds_err("cannot write %s: libpng out of memory", path);
    } else if (setjmp(png_jmpbuf(png))) {
        rc = ds_err("cannot write %s", path);
    } else {
        png_init_io(png, f);
        png_set_IHDR(png, info, w, h, 8, PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
                     PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (int y = 0; y < h; y++) png_write_row(png, (png_const_bytep)(px + (size_t)y * w * 3));
        png_write_end(png, NULL);
    }
    png_destroy_write_struct(&png, &info);
    if (fclose(f) && rc == 0) rc = ds_err("cannot write %s: %s", path, strerror(errno));
    return rc;
}

static int write_class_images(const char *out, long long c)
{
    char name[32], file[64];
    class_name(name, sizeof name, c);
    char *dir = ds_path_join(out, name);
    int rc = ds_mkdirs(dir);
    class_look l = look_of(c);
    for (long long i = 0; i < per_class && rc == 0; i++) {
        ds_rng r;
        ds_rng_init(&r, (uint64_t)seed, DS_RNG_DATA, (uint64_t)c << 32 | (uint64_t)i);
        int w, h;
        pick_size(&r, &w, &h);
        if (fixed_w) w = (int)fixed_w, h = (int)fixed_h;
        unsigned char *px = render(&r, &l, w, h);
        snprintf(file, sizeof file, "%s_%lld.JPEG", name, 10 * i + 1 + (long long)ds_rng_below(&r, 10));
        char *path = ds_path_join(dir, file);
        rc = write_jpeg(path, px, w, h, TJPF_RGB, 0);
        free(path);
        free(px);
    }
    free(dir);
    return rc;
}

/* ---- quirks ------------------------------------------------------------------------- */

static FILE *quirk_list;

static void note(const char *kind, const char *expect, const char *rel)
{
    printf("%s\t%s\t%s\n", kind, expect, rel);
    fprintf(quirk_list, "%s\t%s\t%s\n", kind, expect, rel);
}

/* A class's image for a quirk: its own look, a fixed small size, its own random stream. */
static unsigned char *quirk_pixels(long long c, int q, int w, int h)
{
    ds_rng r;
    ds_rng_init(&r, (uint64_t)seed, DS_RNG_DATA, 0xffffffffull << 32 | (uint64_t)q);
    class_look l = look_of(c);
    return render(&r, &l, w, h);
}

/* The 2-byte big-endian height and width after a SOFn marker, set to 65000 each. */
static int fake_huge_header(unsigned char *j, unsigned long len)
{
    for (unsigned long i = 2; i + 9 < len; i++) {
        if (j[i] != 0xff) continue;
        unsigned m = j[i + 1];
        if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
            /* FF Cn, length(2), precision(1), height(2), width(2) */
            j[i + 5] = 65000 >> 8, j[i + 6] = 65000 & 0xff;
            j[i + 7] = 65000 >> 8, j[i + 8] = 65000 & 0xff;
            return 0;
        }
    }
    return ds_err("no SOF marker found in the JPEG to edit");
}

static int write_quirks(const char *out)
{
    char *lp = ds_path_join(out, ".quirks.tsv");
    quirk_list = fopen(lp, "w");
    if (!quirk_list) {
        ds_err("cannot write %s: %s", lp, strerror(errno));
        free(lp);
        return -1;
    }
    int rc = 0, q = 0;
    char cls[32], rel[256];
    const int W = 320, H = 240;
#define QPATH(fmt, ...)                                                  \
    (class_name(cls, sizeof cls, q % nclasses),                          \
     snprintf(rel, sizeof rel, "%s/" fmt, cls, __VA_ARGS__), ds_path_join(out, rel))

    /* gray: luminance of a class image */
    {
        unsigned char *px = quirk_pixels(q % nclasses, q, W, H), *g = ds_xmalloc((size_t)W * H);
        for (size_t i = 0; i < (size_t)W * H; i++)
            g[i] = (unsigned char)((299 * px[3 * i] + 587 * px[3 * i + 1] + 114 * px[3 * i + 2]) / 1000);
        char *p = QPATH("%s_gray.JPEG", cls);
        rc |= write_jpeg(p, g, W, H, TJPF_GRAY, 0);
        note("gray", "ok", rel);
        free(p), free(px), free(g);
        q++;
    }
    /* cmyk: naive RGB -> CMYK ink amounts */
    {
        unsigned char *px = quirk_pixels(q % nclasses, q, W, H), *k4 = ds_xmalloc((size_t)W * H * 4);
        for (size_t i = 0; i < (size_t)W * H; i++) {
            int r = px[3 * i], g = px[3 * i + 1], b = px[3 * i + 2];
            int mx = r > g ? (r > b ? r : b) : (g > b ? g : b), k = 255 - mx;
            int den = mx ? mx : 1;
            k4[4 * i + 0] = (unsigned char)(mx ? 255 * (mx - r) / den : 0);
            k4[4 * i + 1] = (unsigned char)(mx ? 255 * (mx - g) / den : 0);
            k4[4 * i + 2] = (unsigned char)(mx ? 255 * (mx - b) / den : 0);
            k4[4 * i + 3] = (unsigned char)k;
        }
        char *p = QPATH("%s_cmyk.JPEG", cls);
        rc |= write_jpeg(p, k4, W, H, TJPF_CMYK, 0);
        note("cmyk", "ok", rel);
        free(p), free(px), free(k4);
        q++;
    }
    /* progressive */
    {
        unsigned char *px = quirk_pixels(q % nclasses, q, W, H);
        char *p = QPATH("%s_progressive.JPEG", cls);
        rc |= write_jpeg(p, px, W, H, TJPF_RGB, TJFLAG_PROGRESSIVE);
        note("progressive", "ok", rel);
        free(p), free(px);
        q++;
    }
    /* a PNG named .JPEG */
    {
        unsigned char *px = quirk_pixels(q % nclasses, q, W, H);
        char *p = QPATH("%s_png.JPEG", cls);
        rc |= write_png_rgb(p, px, W, H);
        note("png_as_jpeg", "ok", rel);
        free(p), free(px);
        q++;
    }
    /* spaces and non-ASCII in the name */
    {
        unsigned char *px = quirk_pixels(q % nclasses, q, W, H);
        char *p = QPATH("%s caf\xc3\xa9 \xc3\xbc" "ber \xe6\x97\xa5.JPEG", cls);
        rc |= write_jpeg(p, px, W, H, TJPF_RGB, 0);
        note("unicode_name", "ok", rel);
        free(p), free(px);
        q++;
    }
    /* truncated and huge-header JPEGs start from the same kind of valid file */
    {
        unsigned char *px = quirk_pixels(q % nclasses, q, W, H), *j;
        unsigned long len;
        rc |= encode_jpeg(px, W, H, TJPF_RGB, 0, &j, &len);
        if (rc == 0) {
            char *p = QPATH("%s_truncated.JPEG", cls);
            rc |= write_bytes(p, j, len / 2);
            note("truncated", "reject", rel);
            free(p);
            q++;
            rc |= fake_huge_header(j, len);
            p = QPATH("%s_huge.JPEG", cls);
            rc |= write_bytes(p, j, len);
            note("huge_header", "reject", rel);
            free(p);
            q++;
            tjFree(j);
        }
        free(px);
    }
    {
        char *p = QPATH("%s_empty.JPEG", cls);
        rc |= write_bytes(p, "", 0);
        note("zero_bytes", "reject", rel);
        free(p);
        q++;
        static const char text[] = "This is not an image, whatever its name says.\n";
        p = QPATH("%s_text.jpg", cls);
        rc |= write_bytes(p, text, sizeof text - 1);
        note("not_image", "reject", rel);
        free(p);
        q++;
    }
    /* hidden files: an AppleDouble companion and a dot-file, both with image names */
    {
        unsigned char *px = quirk_pixels(0, q, 32, 32);
        char *p = QPATH("._%s_1.JPEG", cls);
        rc |= write_bytes(p, "\x00\x05\x16\x07", 4);
        note("hidden", "skip", rel);
        free(p);
        q++;
        p = QPATH(".%s_hidden.JPEG", cls);
        rc |= write_jpeg(p, px, 32, 32, TJPF_RGB, 0);
        note("hidden", "skip", rel);
        free(p), free(px);
        q++;
    }
    /* an empty class that sorts after every generated one, so labels stay 0..N-1 */
    {
        snprintf(rel, sizeof rel, "n09999999");
        char *p = ds_path_join(out, rel);
        rc |= ds_mkdirs(p);
        note("empty_class", "skip", rel);
        free(p);
    }
#undef QPATH
    if (fclose(quirk_list) && rc == 0) rc = ds_err("cannot write %s: %s", lp, strerror(errno));
    free(lp);
    return rc ? -1 : 0;
}

int main(int argc, char **argv)
{
    char **pos;
    ds_cli_parse(&cli, argc, argv, &pos);
    const char *out = pos[0];
    if (!fixed_w != !fixed_h) ds_usage_error(&cli, "--width and --height go together (or neither: varied sizes)");
    if (ds_mkdirs(out)) return 1;
    double t0 = ds_now();
    int failed = 0;
    /* One class per task: each class's files come from its own Philox streams, so the
     * bytes do not depend on the thread count. */
#pragma omp parallel for schedule(dynamic, 1) reduction(| : failed)
    for (long long c = 0; c < nclasses; c++)
        if (!failed) failed |= write_class_images(out, c) != 0;
    if (failed) return 1;
    if (quirks && write_quirks(out)) return 1;
    ds_info("%lld classes x %lld images%s -> %s  [%.1fs]", nclasses, per_class, quirks ? " + quirks" : "", out,
            ds_now() - t0);
    return 0;
}
