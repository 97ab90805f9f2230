/* matfile: the little of MATLAB's level 5 MAT-file format that the ILSVRC devkit's meta.mat
 * needs (docs/DESIGN.md §2): one field of numbers and one of strings from a struct array.
 *
 * A level 5 file is a 128-byte header (text starting "MATLAB 5.0 MAT-file", version 0x0100,
 * endian mark "IM" for little-endian) and a list of data elements: a tag (type, byte count;
 * or the small form, count and type in one word with at most 4 bytes of data beside them)
 * and the data, padded to 8 bytes. A variable is a miMATRIX element (array flags, dimensions,
 * name, then the class's parts); a struct array holds, after its field names, one miMATRIX
 * per element and field, element-major. MATLAB 7 compresses each variable with zlib
 * (miCOMPRESSED). MATLAB stores a double's values in the smallest integer type that holds
 * them, so any numeric type may carry a number.
 *
 * Every count and offset is checked against the bytes that hold it: a truncated or hostile
 * file is refused with a message naming it, never read past. Big-endian files are refused. */
#ifndef DS_MATFILE_H
#define DS_MATFILE_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t num;   /* the numeric field: a real integer-valued scalar */
    char *str;     /* the string field: a 1 x N (or empty) char array, ASCII */
} ds_mat_row;

/* Reads every element of the struct array variable `var` of the MAT-file in buf[0, len):
 * rows[i] holds element i's `num_field` and `str_field`. `name` is used in messages. */
int ds_mat_parse_struct(const unsigned char *buf, size_t len, const char *name, const char *var,
                        const char *num_field, const char *str_field, ds_mat_row **rows, size_t *n);
/* The same from a file. */
int ds_mat_read_struct(const char *file, const char *var, const char *num_field, const char *str_field,
                       ds_mat_row **rows, size_t *n);
void ds_mat_rows_free(ds_mat_row *rows, size_t n);

/* Whether buf starts as a level 5 MAT-file does ("MATLAB 5.0 MAT-file"). */
int ds_mat_is_matfile(const unsigned char *buf, size_t len);

#endif
