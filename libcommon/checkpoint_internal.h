/* checkpoint_internal: what the checkpoint module's two files share: checkpoint.c (the meta,
 * the file, its tensors) calls checkpoint_attrs.c (the root attributes' table and what walks
 * it) to write, read and free the table's fields. */
#ifndef DS_CHECKPOINT_INTERNAL_H
#define DS_CHECKPOINT_INTERNAL_H

#include <hdf5.h>

#include "checkpoint.h"

/* 1 when name is one of the table's attributes (then never an extra). */
int ds_ckpt_attr_known(const char *name);
/* Writes the table's attributes of one part (before the extras, or after them: the byte order
 * of older files) that meta sets; *what names the one being written. */
int ds_ckpt_attrs_write(hid_t f, const ds_ckpt_meta *meta, int after_extras, const char **what);
/* Reads every attribute of the table the file holds into meta, checking each value and the
 * rules between them; -1 with a message naming path and the attribute. */
int ds_ckpt_attrs_read(hid_t f, const char *path, ds_ckpt_meta *meta);
/* Frees the table's strings meta owns (config and the ones for people) and clears them. */
void ds_ckpt_attrs_free(ds_ckpt_meta *meta);

#endif
