/* image: decode a JPEG or PNG (recognised by content, not by name) to RGB and resize it to
 * a square the way torchvision + Pillow do, so that dspack (which stores the result) and
 * dseval (which decodes a manifest on the fly) see the same pixels as a Python user would.
 *
 *   --fit crop    Resize(S) + CenterCrop(S): the shorter side becomes S (the longer one
 *                 int(S * long / short)), then the centre S x S is kept
 *   --fit squash  Resize((S, S)): both sides become S
 *
 * Resizing is Pillow's BILINEAR: a triangle filter whose support grows with the reduction
 * (antialiased), coefficients precomputed per output pixel, horizontal pass then vertical
 * pass, 22-bit fixed point rounded exactly as Pillow's Resample.c rounds.
 *
 * Decoding: a file Pillow (9.4, the reference) opens and converts with
 * Image.open(f).convert("RGB") decodes to exactly its pixels; a file Pillow refuses is
 * rejected with a reason. tests/ref/test_decode_matrix.py checks every layout below.
 *
 *   PNG, any colour type, bit depth, interlacing (Adam7 or not) and ancillary chunks:
 *     palette (1/2/4/8-bit)  the PLTE colour of each index; tRNS ignored; an index past
 *                            the PLTE's end gives grey (i, i, i), as does every index of a
 *                            palette file with no PLTE (Pillow's default palette)
 *     grey 1/2/4/8-bit       scaled to 0..255 and replicated; tRNS ignored
 *     grey 16-bit            clipped, not scaled: v > 255 gives 255 (Pillow opens it as mode
 *                            "I", whose convert("RGB") clips)
 *     RGB, grey+alpha, RGBA  16-bit reduced to the high byte; alpha dropped, not composited
 *     gAMA, cHRM, sRGB, iCCP, sBIT, bKGD: not applied (Pillow ignores them on convert)
 *     unknown chunks, critical or not, skipped; a bad CRC in a chunk before the image data
 *     refuses the file, a bad IDAT CRC does not (Pillow checks the former only)
 *   JPEG (libjpeg-turbo, 8-bit samples): baseline, progressive, arithmetic coding, restart
 *     markers, any chroma subsampling, grey, RGB, CMYK and YCCK; accurate integer DCT and
 *     fancy upsampling, as Pillow's libjpeg use, so the pixels are libjpeg-turbo's, the same
 *     on both sides. CMYK is read in Adobe's inverted polarity whether or not the file has
 *     the Adobe marker (Pillow's "CMYK;I" for every CMYK JPEG), then Pillow's cmyk2rgb.
 *     EXIF orientation and ICC profiles are ignored. 12-bit and lossless JPEGs are refused
 *     ("Unsupported JPEG data precision 12"), as by Pillow.
 *
 * Hostile input never crashes: every failure returns -1 with a one-line reason
 * ("truncated JPEG", "12000x16000 = 192000000 pixels exceeds --max-pixels 178956970"). The
 * pixel count is checked from the header, before any buffer the size of the image exists. */
#ifndef DS_IMAGE_H
#define DS_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* How an image is fitted to its stored size: one type wherever a fit is held (dspack's
 * options, a shard, a source, a checkpoint's data_fit); the file formats spell it "crop" or
 * "squash". DS_FIT_UNSET: a record that names none (a checkpoint without data_fit, dseval
 * without --fit). DS_FIT_CHOICES lists the names in the enum's order, for DS_CHOICE_INDEX. */
typedef enum { DS_FIT_UNSET = -1, DS_FIT_CROP = 0, DS_FIT_SQUASH = 1 } ds_fit;
#define DS_FIT_CHOICES "crop|squash"

/* Pillow's Image.MAX_IMAGE_PIXELS. */
#define DS_DEFAULT_MAX_PIXELS 178956970ULL

/* Per-thread decoding state: a TurboJPEG handle and scratch buffers that grow to the largest
 * image seen and are reused, so a thread allocates nothing per image in the steady state. */
typedef struct ds_decoder ds_decoder;

ds_decoder *ds_decoder_new(void);
void ds_decoder_free(ds_decoder *d);

/* A decoded RGB image; pix points into the decoder's scratch (valid until its next call). */
typedef struct {
    uint8_t *pix;      /* [h, w, 3] */
    int w, h;          /* as decoded (after DCT scaling) */
    int full_w, full_h;/* as stored in the file */
} ds_image;

/* Decodes data[0..len). min_side > 0 lets a JPEG decode at 1/2, 1/4 or 1/8 scale in the DCT
 * domain: the smallest scale whose both sides stay >= min_side. 0: full size. */
int ds_image_decode(ds_decoder *d, const uint8_t *data, size_t len, int min_side,
                    uint64_t max_pixels, ds_image *img, char *reason, size_t reason_len);

/* Output geometry of a fit for a (w, h) source: the resized size and the crop window's
 * top-left corner within it (0, 0 for squash). */
typedef struct {
    int resized_w, resized_h;
    int left, top;
} ds_fit_geometry;

ds_fit_geometry ds_fit_geometry_for(int w, int h, int size, ds_fit fit);

/* Resizes in ([in_h, in_w, 3]) to (resized_w, resized_h) with Pillow's BILINEAR and writes
 * the window [top, top + out_h) x [left, left + out_w) of the result to out ([out_h, out_w, 3]).
 * Only the window is computed. Returns -1 (with reason) only when scratch memory runs out. */
int ds_resize_bilinear(ds_decoder *d, uint8_t *out, int out_w, int out_h, const uint8_t *in, int in_w,
                       int in_h, const ds_fit_geometry *g, char *reason, size_t reason_len);

/* decode + fit + resize: out gets [size, size, 3]. Large JPEGs are DCT-scaled while their
 * shorter side stays >= 4 x size (closer, and block averaging shows against Pillow's
 * result); the geometry is computed from the file's full size and mapped onto the decoded
 * image. */
int ds_image_decode_resized(ds_decoder *d, const uint8_t *data, size_t len, int size, ds_fit fit,
                            uint64_t max_pixels, uint8_t *out, char *reason, size_t reason_len);

/* The same from a file. */
int ds_image_load_resized(ds_decoder *d, const char *path, int size, ds_fit fit, uint64_t max_pixels,
                          uint8_t *out, char *reason, size_t reason_len);

/* "crop" / "squash" <-> ds_fit; -1 (DS_FIT_UNSET) for an unknown name. */
int ds_fit_parse(const char *name);
const char *ds_fit_name(ds_fit fit);

#endif
