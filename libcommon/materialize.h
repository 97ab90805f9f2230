/* materialize: builds the DIR/train/<class>/ and DIR/val/<class>/ trees that tools reading
 * class folders expect, from a split's manifests.
 *
 * Every mode can be rerun: an entry whose destination already holds the file (the same
 * link target, the same inode, or a regular file of the same size for copies) counts as
 * done; anything else already at a destination is an error, never overwritten, and so is
 * a file that sits in the other split's tree (an earlier run with another seed).
 * Only `move` touches the source. A copy is written to a hidden temporary name beside
 * the destination and renamed, so a destination is always whole; a move across file
 * systems is fsynced before the source is unlinked, so no interruption loses a file. */
#ifndef DS_MATERIALIZE_H
#define DS_MATERIALIZE_H

#include "log.h"
#include "manifest.h"

#include <stddef.h>

typedef enum {
    DS_MATERIALIZE_SYMLINK,
    DS_MATERIALIZE_HARDLINK,
    DS_MATERIALIZE_COPY,
    DS_MATERIALIZE_MOVE
} ds_materialize_how;

/* "symlink|hardlink|copy|move" -> mode; -1 for anything else. */
int ds_materialize_how_parse(const char *s);
const char *ds_materialize_how_name(ds_materialize_how how);

/* Puts src at dst by `how`. Returns 0 when placed, 1 when dst already held it, -1 (with a
 * message naming the file) on error. `other` is the destination in the other split (or
 * NULL); for a move whose source is gone it tells an earlier run with other options apart
 * from a missing file. */
int ds_materialize_file(const char *src, const char *dst, const char *other, ds_materialize_how how);

/* Places root/<path> at dir/<split>/<path> for every entry, creating dir/<split>/<class>
 * for all classes (an empty one too, so labels read from the folders stay the same).
 * Runs on OpenMP threads; stops at the first error. *placed and *present count the two
 * kinds of success. */
int ds_materialize(const char *dir, const char *split, const char *other_split, const char *root,
                   char *const *classes, int nclasses, const ds_manifest_entry *e, size_t n,
                   ds_materialize_how how, ds_progress *p, size_t *placed, size_t *present);

/* Every check ds_materialize would make for these entries (a different file at a
 * destination, a file in the other split's tree, a missing source, a hard link across file
 * systems), without creating, moving or removing anything: dsplit runs it before it writes
 * its manifests, so a refused run leaves them as they were. 0, or -1 with the first
 * conflict printed. */
int ds_materialize_check(const char *dir, const char *split, const char *other_split, const char *root,
                         const ds_manifest_entry *e, size_t n, ds_materialize_how how);

/* For a rerun after an interrupted move: the paths of the manifests train.txt and val.txt
 * in out_dir (when there are any) whose source root/<path> is gone but which sit at
 * dir/train/<path> or dir/val/<path>. Those files belong to the split although the scan
 * of the source can no longer see them. Caller frees each path and the array. */
int ds_materialize_moved(const char *out_dir, const char *dir, const char *root,
                         char ***paths, size_t *n);

#endif
