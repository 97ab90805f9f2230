/* image_resize FILE SIZE crop|squash OUT: decodes FILE and resizes it exactly as dspack does,
 * writing [SIZE, SIZE, 3] raw RGB bytes to OUT.
 * image_resize --decode FILE OUT: decodes FILE at full size (no DCT scaling, no resize) and
 * writes it to OUT as a binary PPM (P6), the pixels dspack starts its resize from.
 * Either way a rejected file prints "rejected: REASON" on stdout and exits 1. */
#include "image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int decode_full(const char *path, const char *out_path)
{
    FILE *in = fopen(path, "rb");
    if (!in) {
        perror(path);
        return 2;
    }
    size_t cap = 1 << 16, len = 0, n;
    uint8_t *buf = malloc(cap);
    while (buf && (n = fread(buf + len, 1, cap - len, in)) > 0) {
        len += n;
        if (len == cap) {
            uint8_t *b = realloc(buf, cap *= 2);
            if (!b) free(buf);
            buf = b;
        }
    }
    int read_error = ferror(in);
    fclose(in);
    ds_decoder *d = ds_decoder_new();
    if (!buf || read_error || !d) {
        fprintf(stderr, "image_resize: cannot read %s\n", path);
        free(buf);
        ds_decoder_free(d);
        return 2;
    }
    ds_image img;
    char reason[256];
    int rc = 0;
    if (ds_image_decode(d, buf, len, 0, DS_DEFAULT_MAX_PIXELS, &img, reason, sizeof reason)) {
        printf("rejected: %s\n", reason);
        rc = 1;
    } else {
        size_t bytes = (size_t)img.w * img.h * 3;
        FILE *f = fopen(out_path, "wb");
        if (!f || fprintf(f, "P6\n%d %d\n255\n", img.w, img.h) < 0 || fwrite(img.pix, 1, bytes, f) != bytes ||
            fclose(f)) {
            perror(out_path);
            rc = 2;
        }
    }
    free(buf);
    ds_decoder_free(d);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "--decode")) return decode_full(argv[2], argv[3]);
    if (argc != 5) {
        fprintf(stderr, "usage: image_resize FILE SIZE crop|squash OUT\n"
                        "       image_resize --decode FILE OUT.ppm\n");
        return 2;
    }
    int size = atoi(argv[2]), fit = ds_fit_parse(argv[3]);
    if (size <= 0 || size > 4096 || fit < 0) {
        fprintf(stderr, "image_resize: bad size or fit\n");
        return 2;
    }
    ds_decoder *d = ds_decoder_new();
    uint8_t *out = malloc((size_t)size * size * 3);
    char reason[256];
    if (!d || !out) return 2;
    if (ds_image_load_resized(d, argv[1], size, (ds_fit)fit, DS_DEFAULT_MAX_PIXELS, out, reason, sizeof reason)) {
        printf("rejected: %s\n", reason);
        return 1;
    }
    FILE *f = fopen(argv[4], "wb");
    if (!f || fwrite(out, 1, (size_t)size * size * 3, f) != (size_t)size * size * 3 || fclose(f)) {
        perror(argv[4]);
        return 2;
    }
    free(out);
    ds_decoder_free(d);
    return 0;
}
