/* h5util: the small HDF5 helpers every file writer and reader of ds shares (shards,
 * checkpoints, logits files), and the header every one of those files starts with.
 *
 * Writers create objects without timestamps (object time tracking off), so the same
 * content gives byte-identical files. Readers check an object's class and size before
 * reading it, so a hostile file is refused rather than read out of bounds. All return -1
 * (or NULL) on failure without printing; callers name the file and field in their message. */
#ifndef DS_H5UTIL_H
#define DS_H5UTIL_H

#include <hdf5.h>
#include <stddef.h>

/* Every ds HDF5 file carries two root attributes (docs/DESIGN.md §2): ds_format (int32, this
 * version) and ds_kind (a fixed-length UTF-8 string: "shard", "checkpoint" or "logits").
 * A reader refuses a file of another kind or of a version it does not know. */
#define DS_FORMAT_VERSION 1

/* Writes ds_format = DS_FORMAT_VERSION and ds_kind = kind on the root of f. */
int ds_h5_write_header(hid_t f, const char *kind);
/* Checks f's ds_format and ds_kind against this version and kind. On a mismatch returns -1
 * and puts in why a reason naming the attribute ("no ds_format attribute (not a ds file)",
 * "unknown ds_format version 2 (this build reads version 1)", "ds_kind is 'checkpoint', not
 * 'shard'"); the caller prefixes the file name. */
int ds_h5_check_header(hid_t f, const char *kind, char *why, size_t why_len);

/* Silences HDF5's automatic error-stack printing between begin and end: ds reports one
 * line naming the file and object instead. */
typedef struct {
    H5E_auto2_t func;
    void *data;
} ds_h5_quiet;

void ds_h5_quiet_begin(ds_h5_quiet *q);
void ds_h5_quiet_end(const ds_h5_quiet *q);

/* A file written whole: ds_h5_file_create silences HDF5's error printing (into q) and
 * creates tmp with object time tracking off; ds_h5_file_finish closes it and restores the
 * printing. When ok is 0 or the close fails, finish prints "TMP: cannot write KIND (WHAT
 * failed in HDF5: <errno's reason>)", removes tmp and returns -1; the caller renames a
 * finished tmp into place (ds_commit_file). */
hid_t ds_h5_file_create(ds_h5_quiet *q, const char *tmp);
int ds_h5_file_finish(ds_h5_quiet *q, hid_t f, int ok, const char *tmp, const char *kind, const char *what);

/* A variable-length UTF-8 string type (caller closes it). */
hid_t ds_h5_vlen_utf8(void);

/* A numeric attribute of n values of file type file_t from memory type mem_t; n == 0 makes
 * a scalar. */
int ds_h5_attr_write(hid_t loc, const char *name, hid_t file_t, hid_t mem_t, int n, const void *v);
/* A fixed-length UTF-8 string attribute: h5dump shows plain text and h5py reads str. */
int ds_h5_attr_write_str(hid_t loc, const char *name, const char *v);
/* Reads a numeric attribute of class cls holding exactly n values (1 for a scalar). */
int ds_h5_attr_read(hid_t loc, const char *name, H5T_class_t cls, hid_t mem_t, int n, void *v);
/* Reads a scalar string attribute, fixed or variable length; caller frees. */
char *ds_h5_attr_read_str(hid_t loc, const char *name);

/* A dataset of the given rank and dims (rank 0: a scalar) written from data. */
int ds_h5_write_dataset(hid_t loc, const char *name, hid_t file_t, hid_t mem_t, int rank,
                        const hsize_t *dims, const void *data);
/* A group without timestamps. */
hid_t ds_h5_create_group(hid_t loc, const char *name);
/* Reads the n variable-length strings of dataset d into malloc'd copies (NULL entries
 * become ""); free each and the array. */
char **ds_h5_read_strings(hid_t d, size_t n);

#endif
