/* logits: dseval --logits output, one HDF5 file per evaluation.
 *
 *   /logits   float32 [N, C]       the network's outputs, in data order
 *   /labels   int32 [N]            true labels
 *   /paths    vlen UTF-8 [N]       source paths relative to their root
 *   /classes  vlen UTF-8 [C]
 *   root attrs: ds_format 1, ds_kind "logits"
 * Written without timestamps to NAME.tmp, fsynced and renamed. */
#ifndef DS_LOGITS_H
#define DS_LOGITS_H

#include <stddef.h>
#include <stdint.h>

int ds_logits_write(const char *path, const float *logits, const int32_t *labels, const char *const *paths,
                    size_t n, char *const *classes, int num_classes);

#endif
