/* split: the class-folder scan and the train/val rule dsplit applies (docs/DESIGN.md §2).
 *
 * A class is a directory directly under the root; its images are the regular files
 * directly inside it whose names end in .jpg/.jpeg/.png (any case). Everything else is
 * skipped and counted: hidden entries, other files, nested directories, and names with a
 * TAB or newline (they cannot be written as a manifest line) or that are not UTF-8 (a
 * shard's /paths and /classes are UTF-8 strings).
 *
 * The split of a class is a pure function of (seed, fraction, class name, its file names):
 * the names are sorted bytewise, shuffled with Philox keyed by (seed, class name), and the
 * first val_count(n) go to val. No other class, directory order or thread count enters. */
#ifndef DS_SPLIT_H
#define DS_SPLIT_H

#include "manifest.h"

#include <stddef.h>
#include <stdint.h>

/* Why an entry was left out of the image set. */
enum {
    DS_SKIP_HIDDEN,     /* name starts with '.' */
    DS_SKIP_BAD_NAME,   /* contains TAB or newline, or is not UTF-8 */
    DS_SKIP_NOT_IMAGE,  /* a file without an image extension, a dangling link, a socket ... */
    DS_SKIP_DIR,        /* a directory inside a class directory */
    DS_SKIP_ROOT_FILE,  /* a non-directory directly under the root */
    DS_SKIP_KINDS
};

typedef struct {
    char *name;         /* directory name = class name */
    char **files;       /* image file names (no directory part), sorted bytewise */
    size_t n;
    char *buf;          /* owns the strings files point into */
} ds_split_class;

typedef struct {
    char *root;                 /* absolute, symlink-free */
    ds_split_class *classes;    /* sorted bytewise by name; index = label */
    int nclasses;
    size_t nimages;
    size_t skipped[DS_SKIP_KINDS];
    char **skipped_paths;       /* "class/name" of every skipped entry, sorted */
    int *skipped_kind;          /* parallel to skipped_paths */
    size_t nskipped;
} ds_split_tree;

/* Scans root. Errors (missing or unreadable root, a class directory that cannot be read,
 * no class directory at all) print a message naming the path and return -1. Class
 * directories are read in parallel; the result does not depend on the thread count. */
int ds_split_scan(ds_split_tree *t, const char *root);
void ds_split_tree_free(ds_split_tree *t);

/* Adds images that are not (or no longer) in the tree: `names` holds n "class/file" paths.
 * Unknown classes are created; names already present are ignored. Keeps every order. */
void ds_split_tree_add(ds_split_tree *t, char *const *paths, size_t n);

/* Whether a directory entry name is an image by the rule above (extension only). */
int ds_split_is_image_name(const char *name);

/* min(ceil(n × fraction), n − 1), 0 for n = 0; fraction in [0, 1]. The ceiling forgives
 * the float error of the product (15 × 0.2 = 3.0000000000000004 gives 3, not 4). */
size_t ds_split_val_count(size_t n, double fraction);

/* is_val[i] (i indexes the class's sorted names) = 1 when file i goes to val. */
void ds_split_class_assign(unsigned char *is_val, const char *class_name, size_t n,
                           double fraction, uint64_t seed);

/* The two manifests' entries, each sorted by (label, path); paths are "class/file" and
 * owned by the returned arrays (free with ds_split_entries_free). */
void ds_split_assign(const ds_split_tree *t, double fraction, uint64_t seed,
                     ds_manifest_entry **train, size_t *ntrain,
                     ds_manifest_entry **val, size_t *nval);
void ds_split_entries_free(ds_manifest_entry *e, size_t n);

/* "hidden", "bad name", ... for messages. */
const char *ds_split_skip_name(int kind);

#endif
