/* libFuzzer entry point over the MAT-file reader (ds_mat_parse_struct), asked for the devkit's
 * synsets(i).ILSVRC2012_ID and .WNID. What it accepts must hold its promises: no more rows
 * than the bytes could describe, every string non-NULL, ASCII and without a NUL; what it
 * refuses it must free (LeakSanitizer watches). The refusal messages go to stderr, which
 * scripts/fuzz.sh closes for this harness. */
#include "matfile.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ds_mat_row *rows;
    size_t n;
    if (ds_mat_parse_struct(data, size, "fuzz", "synsets", "ILSVRC2012_ID", "WNID", &rows, &n) == 0) {
        /* Compressed input may inflate, but every row took at least 16 inflated bytes. */
        if (n > (size_t)256 << 20) abort();
        for (size_t i = 0; i < n; i++) {
            if (!rows[i].str) abort();
            for (const char *c = rows[i].str; *c; c++)
                if ((unsigned char)*c > 127) abort();
        }
        ds_mat_rows_free(rows, n);
    }
    return 0;
}
