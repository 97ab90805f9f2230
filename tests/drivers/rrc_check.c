/* rrc_check: the RandomResizedCrop pieces, for tests/ref/test_rrc.py.
 *
 *   rrc_check boxes H W N SEED SCALE RATIO
 *     prints N lines "top left h w fallback": ds_rrc_box on an H x W image from the stream the
 *     loader uses for sample i of epoch 0 (Philox (SEED, DS_RNG_AUGMENT, i)), i = 0..N-1;
 *     SCALE and RATIO are "LO,HI" as dstrain's --rrc-scale / --rrc-ratio.
 *   rrc_check pixels N H W CROP IN OUT
 *     reads N uint8 images [N, H, W, 3] from IN and N lines "top left h w flip" from stdin,
 *     runs the CPU backend's resized_crop_u8 with ImageNet's mean/std, writes the float
 *     output [N, CROP, CROP, 3] to OUT. */
#include "backend.h"
#include "cli.h"
#include "loader.h"
#include "rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int boxes(char **a)
{
    int H = atoi(a[0]), W = atoi(a[1]);
    long n = atol(a[2]);
    uint64_t seed = strtoull(a[3], NULL, 10);
    double scale[2], ratio[2];
    if (H <= 0 || W <= 0 || n <= 0 || ds_cli_range(a[4], scale) || ds_cli_range(a[5], ratio)) {
        fprintf(stderr, "rrc_check: bad arguments\n");
        return 2;
    }
    for (long i = 0; i < n; i++) {
        ds_rng r;
        int32_t box[4];
        ds_rng_init(&r, seed, DS_RNG_AUGMENT, (uint64_t)i);
        int fb = ds_rrc_box(&r, H, W, scale, ratio, box);
        printf("%d %d %d %d %d\n", box[0], box[1], box[2], box[3], fb);
    }
    return 0;
}

static int pixels(char **a)
{
    int n = atoi(a[0]), H = atoi(a[1]), W = atoi(a[2]), crop = atoi(a[3]);
    if (n <= 0 || H <= 0 || W <= 0 || crop <= 0) {
        fprintf(stderr, "rrc_check: bad arguments\n");
        return 2;
    }
    size_t img = (size_t)n * H * W * 3, no = (size_t)n * crop * crop * 3;
    uint8_t *in = malloc(img), *flip = malloc((size_t)n);
    int32_t *y0 = malloc(n * sizeof *y0), *x0 = malloc(n * sizeof *x0), *bh = malloc(n * sizeof *bh),
            *bw = malloc(n * sizeof *bw);
    float *out = malloc(no * sizeof *out);
    FILE *f = fopen(a[4], "rb");
    if (!in || !flip || !y0 || !x0 || !bh || !bw || !out || !f || fread(in, 1, img, f) != img) {
        fprintf(stderr, "rrc_check: cannot read %s\n", a[4]);
        return 2;
    }
    fclose(f);
    for (int i = 0; i < n; i++) {
        int fl;
        if (scanf("%d %d %d %d %d", &y0[i], &x0[i], &bh[i], &bw[i], &fl) != 5 || y0[i] < 0 || x0[i] < 0 ||
            bh[i] <= 0 || bw[i] <= 0 || y0[i] + bh[i] > H || x0[i] + bw[i] > W) {
            fprintf(stderr, "rrc_check: box %d missing or outside the image\n", i);
            return 2;
        }
        flip[i] = (uint8_t)(fl != 0);
    }
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    ds_backend_cpu.resized_crop_u8(out, in, n, H, W, crop, crop, y0, x0, bh, bw, flip, mean, std);
    f = fopen(a[5], "wb");
    if (!f || fwrite(out, sizeof *out, no, f) != no || fclose(f)) {
        fprintf(stderr, "rrc_check: cannot write %s\n", a[5]);
        return 2;
    }
    free(in), free(flip), free(y0), free(x0), free(bh), free(bw), free(out);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 8 && !strcmp(argv[1], "boxes")) return boxes(argv + 2);
    if (argc == 8 && !strcmp(argv[1], "pixels")) return pixels(argv + 2);
    fprintf(stderr, "usage: rrc_check boxes H W N SEED SCALE RATIO\n"
                    "       rrc_check pixels N H W CROP IN OUT  (boxes \"top left h w flip\" on stdin)\n");
    return 2;
}
