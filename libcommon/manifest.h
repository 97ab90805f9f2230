/* manifest: the split files dsplit writes and dspack / dseval read (docs/DESIGN.md §2).
 *
 *   classes.txt   one class name per line, bytewise sorted; line number = label
 *   train.txt     "# ds-manifest 1 root=<absolute root>" then "label<TAB>path" lines,
 *   val.txt       path relative to root, sorted by (label, path)
 */
#ifndef DS_MANIFEST_H
#define DS_MANIFEST_H

#include <stddef.h>
#include <stdint.h>

#define DS_MANIFEST_HEADER "# ds-manifest 1 root="

typedef struct {
    int32_t label;
    char *path;        /* relative to the root */
} ds_manifest_entry;

typedef struct {
    char *root;        /* from the header */
    size_t n;
    ds_manifest_entry *items;
    char *text;        /* owns the strings items point into */
} ds_manifest;

/* Reads and validates a manifest; an error names the file and line. */
int ds_manifest_read(ds_manifest *m, const char *file);
/* The same from memory (text is copied); `name` is used in messages. */
int ds_manifest_parse(ds_manifest *m, const char *text, size_t len, const char *name);
void ds_manifest_free(ds_manifest *m);
/* Writes atomically. */
int ds_manifest_write(const char *file, const char *root, const ds_manifest_entry *items, size_t n);

/* classes.txt. names[i] is label i. */
int ds_classes_read(const char *file, char ***names, int *n);
int ds_classes_parse(const char *text, size_t len, const char *name, char ***names, int *n);
int ds_classes_write(const char *file, char *const *names, int n);
void ds_classes_free(char **names, int n);
/* Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past
 * U+10FFFF): shards and logits files store paths and class names as UTF-8 strings, which
 * h5py and h5dump decode. */
int ds_utf8_valid(const char *s);
/* The classes.txt beside a manifest file (same directory); caller frees. */
char *ds_classes_path_for(const char *manifest_file);

#endif
