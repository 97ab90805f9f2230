/* fsutil: files that appear whole or not at all, and small path helpers.
 *
 * Every output is written to "NAME.tmp", flushed, fsynced and renamed into place, and the
 * directory is fsynced so the rename survives a power cut: a crash never leaves a half
 * file under the final name. */
#ifndef DS_FSUTIL_H
#define DS_FSUTIL_H

#include <stdio.h>

typedef struct {
    char *path;  /* final name */
    char *tmp;   /* path + ".tmp" */
    FILE *f;
} ds_atomic;

/* "path.tmp", the name every output has until it is complete; caller frees. */
char *ds_tmp_name(const char *path);

/* Opens path.tmp for writing (truncating a stale one). */
int ds_atomic_open(ds_atomic *a, const char *path);
/* Flushes, fsyncs, closes and renames into place; frees a. On failure removes the tmp file,
 * leaves any previous file under the final name untouched, and returns -1 with a message
 * naming the file. */
int ds_atomic_commit(ds_atomic *a);
/* Closes and removes the tmp file; frees a. */
void ds_atomic_abort(ds_atomic *a);

/* For files written by a library that takes a path (HDF5): fsync `tmp`, rename it to
 * `path`, fsync the directory. */
int ds_commit_file(const char *tmp, const char *path);
/* fsync the directory that holds `path`. */
int ds_fsync_dir_of(const char *path);

/* mkdir -p; 0 when the directory exists afterwards. */
int ds_mkdirs(const char *dir);
/* Joins a and b with one '/'; caller frees. */
char *ds_path_join(const char *a, const char *b);
/* Absolute, symlink-free form of an existing path; caller frees; NULL + message on error. */
char *ds_realpath(const char *path);
/* Reads a whole file; *len gets its size; a NUL is appended. Caller frees. */
char *ds_read_file(const char *path, size_t *len);
/* xmalloc-style helpers: print "out of memory" and exit 1 (allocation failure is not a
 * recoverable input error). */
void *ds_xmalloc(size_t n);
void *ds_xcalloc(size_t n, size_t size);
void *ds_xrealloc(void *p, size_t n);
char *ds_xstrdup(const char *s);

#endif
