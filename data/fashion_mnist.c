/* fashion_mnist: Debian's dataset-fashion-mnist (IDX files) -> class-folder trees
 *   OUT_DIR/train/<class>/NNNNN.png   60,000 28x28 8-bit grayscale images
 *   OUT_DIR/test/<class>/NNNNN.png    10,000
 * NNNNN is the image's index in its IDX file. A marker written last makes a rerun on a
 * complete tree a no-op; an interrupted run is simply redone. */
#include "cli.h"
#include "fsutil.h"
#include "log.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#define MARKER ".fashion-mnist-complete"
#define MARKER_TEXT "fashion-mnist train=60000 test=10000 format=png\n"
#define SIDE 28

/* The dataset's class names (label order), spelled safely for a file system. */
static const char *class_names[10] = {
    "T-shirt_top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal", "Shirt", "Sneaker", "Bag", "Ankle_boot",
};

static const char *src_dir = "/usr/share/datasets/fashion-mnist";

static ds_option opts[] = {
    {.name = "src", .type = DS_OPT_STRING, .value = &src_dir, .arg = "DIR",
     .help = "directory holding the four *-idx?-ubyte.gz files"},
    {0},
};

static ds_cli cli = {
    .prog = "fashion_mnist",
    .args = "[options] OUT_DIR",
    .summary = "Write Fashion-MNIST as OUT_DIR/train/<class>/*.png and OUT_DIR/test/<class>/*.png.",
    .min_pos = 1,
    .max_pos = 1,
    .opts = opts,
};

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a whole gzip file (or a plain one: zlib passes it through). */
static unsigned char *read_gz(const char *path, size_t *len)
{
    gzFile g = gzopen(path, "rb");
    if (!g) {
        ds_err("cannot open %s: %s", path, errno ? strerror(errno) : "out of memory");
        return NULL;
    }
    size_t cap = 1 << 20, n = 0;
    unsigned char *buf = ds_xmalloc(cap);
    for (;;) {
        if (n == cap) buf = ds_xrealloc(buf, cap *= 2);
        unsigned want = cap - n > (1u << 30) ? (1u << 30) : (unsigned)(cap - n);
        int got = gzread(g, buf + n, want);
        if (got < 0) {
            int zerr;
            const char *msg = gzerror(g, &zerr);
            ds_err("cannot read %s: %s", path, zerr == Z_ERRNO ? strerror(errno) : msg);
            gzclose(g);
            free(buf);
            return NULL;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    /* gzread stops quietly at a truncated stream; gzclose_r reports it. */
    int rc = gzclose(g);
    if (rc != Z_OK) {
        ds_err("cannot read %s: %s", path, rc == Z_BUF_ERROR ? "truncated gzip stream" : "gzip error");
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

typedef struct {
    unsigned char *images_buf, *labels_buf;
    const unsigned char *pixels;   /* (N, 28, 28) */
    const unsigned char *labels;   /* (N) */
    uint32_t n;
} idx_set;

/* Loads and validates one images/labels pair: magic numbers, dimensions, exact sizes and
 * label range, so a damaged file is refused with a message naming it. */
static int load_set(idx_set *s, const char *prefix, uint32_t want_n)
{
    memset(s, 0, sizeof *s);
    char name[256];
    snprintf(name, sizeof name, "%s-images-idx3-ubyte.gz", prefix);
    char *ipath = ds_path_join(src_dir, name);
    snprintf(name, sizeof name, "%s-labels-idx1-ubyte.gz", prefix);
    char *lpath = ds_path_join(src_dir, name);
    size_t ilen = 0, llen = 0;
    int rc = -1;
    s->images_buf = read_gz(ipath, &ilen);
    if (s->images_buf) s->labels_buf = read_gz(lpath, &llen);
    if (!s->images_buf || !s->labels_buf) goto out;
    if (ilen < 16 || be32(s->images_buf) != 0x803) {
        ds_err("%s: not an IDX image file (magic %#x, want 0x803)", ipath, ilen >= 4 ? be32(s->images_buf) : 0);
        goto out;
    }
    if (llen < 8 || be32(s->labels_buf) != 0x801) {
        ds_err("%s: not an IDX label file (magic %#x, want 0x801)", lpath, llen >= 4 ? be32(s->labels_buf) : 0);
        goto out;
    }
    uint32_t n = be32(s->images_buf + 4), rows = be32(s->images_buf + 8), cols = be32(s->images_buf + 12);
    if (n != want_n || rows != SIDE || cols != SIDE) {
        ds_err("%s: holds %u images of %ux%u, want %u of %dx%d", ipath, n, rows, cols, want_n, SIDE, SIDE);
        goto out;
    }
    if (ilen != 16 + (size_t)n * SIDE * SIDE) {
        ds_err("%s: %zu bytes, want %zu for %u images", ipath, ilen, 16 + (size_t)n * SIDE * SIDE, n);
        goto out;
    }
    if (be32(s->labels_buf + 4) != n || llen != 8 + (size_t)n) {
        ds_err("%s: does not hold %u labels", lpath, n);
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        if (s->labels_buf[8 + i] >= 10) {
            ds_err("%s: label %u of image %u is not in 0..9", lpath, s->labels_buf[8 + i], i);
            goto out;
        }
    }
    s->pixels = s->images_buf + 16;
    s->labels = s->labels_buf + 8;
    s->n = n;
    rc = 0;
out:
    if (rc) {
        free(s->images_buf);
        free(s->labels_buf);
        memset(s, 0, sizeof *s);
    }
    free(ipath);
    free(lpath);
    return rc;
}

static void free_set(idx_set *s)
{
    free(s->images_buf);
    free(s->labels_buf);
    memset(s, 0, sizeof *s);
}

static void png_error_cb(png_structp png, png_const_charp msg)
{
    ds_err("libpng: %s", msg);
    png_longjmp(png, 1);
}

static void png_warning_cb(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* Writes one 28x28 grayscale PNG. */
static int write_png(const char *path, const unsigned char *pix)
{
    FILE *f = fopen(path, "wb");
    if (!f) return ds_err("cannot write %s: %s", path, strerror(errno));
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, png_error_cb, png_warning_cb);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!png || !info) {
        png_destroy_write_struct(&png, &info);
        fclose(f);
        return ds_err("cannot write %s: libpng out of memory", path);
    }
    /* volatile: read after longjmp lands back here. */
    volatile int rc = 0;
    if (setjmp(png_jmpbuf(png))) {
        rc = ds_err("cannot write %s", path);
    } else {
        png_init_io(png, f);
        /* The images are tiny: the fastest deflate level costs little size and saves time. */
        png_set_compression_level(png, 1);
        png_set_IHDR(png, info, SIDE, SIDE, 8, PNG_COLOR_TYPE_GRAY, PNG_INTERLACE_NONE,
                     PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
        png_write_info(png, info);
        for (int y = 0; y < SIDE; y++) png_write_row(png, (png_const_bytep)(pix + y * SIDE));
        png_write_end(png, NULL);
    }
    png_destroy_write_struct(&png, &info);
    if (fclose(f) && rc == 0) rc = ds_err("cannot write %s: %s", path, strerror(errno));
    return rc;
}

static int write_split(const char *out, const char *split, const idx_set *s)
{
    char *base = ds_path_join(out, split);
    for (int c = 0; c < 10; c++) {
        char *d = ds_path_join(base, class_names[c]);
        int rc = ds_mkdirs(d);
        free(d);
        if (rc) {
            free(base);
            return -1;
        }
    }
    int failed = 0;
    /* Files are independent; each thread encodes and writes its own. */
#pragma omp parallel for schedule(dynamic, 256) reduction(| : failed)
    for (uint32_t i = 0; i < s->n; i++) {
        if (failed) continue;
        char path[4096];
        int len = snprintf(path, sizeof path, "%s/%s/%05u.png", base, class_names[s->labels[i]], i);
        if (len < 0 || (size_t)len >= sizeof path)
            failed |= ds_err("%s: path too long", base) != 0;
        else
            failed |= write_png(path, s->pixels + (size_t)i * SIDE * SIDE) != 0;
    }
    free(base);
    return failed ? -1 : 0;
}

int main(int argc, char **argv)
{
    char **pos;
    ds_cli_parse(&cli, argc, argv, &pos);
    const char *out = pos[0];
    char *marker = ds_path_join(out, MARKER);
    size_t mlen;
    FILE *probe = fopen(marker, "r");
    if (probe) {
        fclose(probe);
        char *text = ds_read_file(marker, &mlen);
        int done = text && !strcmp(text, MARKER_TEXT);
        free(text);
        if (done) {
            ds_info("%s is complete already (remove %s to redo it)", out, MARKER);
            free(marker);
            return 0;
        }
    }
    double t0 = ds_now();
    static const struct { const char *prefix, *split; uint32_t n; } sets[2] = {
        {"train", "train", 60000}, {"t10k", "test", 10000},
    };
    int status = 1;
    for (int k = 0; k < 2; k++) {
        idx_set s;
        if (load_set(&s, sets[k].prefix, sets[k].n)) goto out;
        int rc = write_split(out, sets[k].split, &s);
        free_set(&s);
        if (rc) goto out;
    }
    ds_atomic a;
    if (ds_atomic_open(&a, marker)) goto out;
    fputs(MARKER_TEXT, a.f);
    if (ds_atomic_commit(&a)) goto out;
    ds_info("wrote %s/train (60000) and %s/test (10000) in %.1fs", out, out, ds_now() - t0);
    status = 0;
out:
    free(marker);
    return status;
}
