/* image_internal: the decoder's scratch, shared by image.c (decoding) and resize.c (the
 * Pillow-exact resize). Not for use outside those two files. */
#ifndef DS_IMAGE_INTERNAL_H
#define DS_IMAGE_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_isa.h"
#include "image.h"

typedef struct {
    int32_t *kx, *ky;      /* [out, ksize] fixed-point weights per output column / row */
    int *bx, *by;          /* [out, 2]: first input index, number of taps */
    int32_t *kxv;          /* the vector horizontal pass's kx, each tap's weight repeated per lane */
    uint8_t *tmp;          /* horizontal pass result: [rows needed, out_w, 3] */
    double *w;             /* [ksize] one output's taps before normalisation */
    size_t kx_cap, ky_cap, bx_cap, by_cap, kxv_cap, tmp_cap, w_cap;
} ds_resize_scratch;

struct ds_decoder {
    void *tj;              /* tjhandle */
    uint8_t *file;         /* the encoded file */
    uint8_t *pix;          /* decoded RGB [h, w, 3] */
    uint8_t *cmyk;         /* decoded CMYK [h, w, 4] before conversion */
    uint8_t **rows;        /* libpng row pointers into pix */
    size_t file_cap, pix_cap, cmyk_cap, rows_cap;
    ds_resize_scratch rs;
};

/* Grows *p to at least `need` bytes (keeping its contents); -1 when memory runs out. */
int ds_scratch_grow(void **p, size_t *cap, size_t need);
void ds_resize_scratch_free(ds_resize_scratch *s);

/* ds_resize_bilinear with the passes of a given level (one the CPU supports), whatever the
 * process's: lets the tests compare the vector passes with the plain ones. */
int ds_resize_bilinear_isa(ds_cpu_isa isa, ds_decoder *d, uint8_t *out, int out_w, int out_h, const uint8_t *in,
                           int in_w, int in_h, const ds_fit_geometry *g, char *reason, size_t cap);

#endif
