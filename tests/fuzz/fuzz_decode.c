/* libFuzzer entry point over the whole decode + resize path, from memory: sniffing, JPEG
 * (TurboJPEG) and PNG (libpng) decoding, DCT scaling, CMYK conversion and both fits.
 * The input is the file as is (so corpus files are real images); its length picks the output
 * size and fit, so the fuzzer explores the resize tables too. --max-pixels is lowered to
 * keep each run fast. */
#include "image.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static ds_decoder *dec;
    static uint8_t out[64 * 64 * 3];
    if (!dec && !(dec = ds_decoder_new())) abort();
    int out_size = 1 + (int)(size * 7 % 64);
    ds_fit fit = size & 1 ? DS_FIT_SQUASH : DS_FIT_CROP;
    char reason[256];
    reason[0] = 0;
    int rc = ds_image_decode_resized(dec, data, size, out_size, fit, 1u << 22, out, reason, sizeof reason);
    /* A rejection must always say why. */
    if (rc && !reason[0]) abort();
    return 0;
}
