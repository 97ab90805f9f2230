/* image_resize FILE SIZE crop|squash OUT: decodes FILE and resizes it exactly as dspack does,
 * writing [SIZE, SIZE, 3] raw RGB bytes to OUT; on a rejected file prints the reason and
 * exits 1. */
#include "image.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: image_resize FILE SIZE crop|squash OUT\n");
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
