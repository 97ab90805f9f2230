/* checkpoint: a model, its optimizer state and the run's metadata in one HDF5 file
 * (docs/DESIGN.md §2).
 *
 *   /model/<name>       every parameter and BN buffer, PyTorch state_dict names and layouts
 *                       (float32; num_batches_tracked int64 scalar)
 *   /optimizer/<name>   SGD momentum buffers (same names as the parameters), present once
 *                       the optimizer has taken a step
 *   /classes            vlen UTF-8 string [num_classes], class names in label order
 *   /metrics            compound [epochs]: epoch, train_loss, val_top1, val_top5,
 *                       images_per_s, seconds (one row per finished epoch)
 *   root attributes     ds_format 1, ds_kind "checkpoint", arch, num_classes, input_size,
 *                       mean[3], std[3], epoch, step, seed, world_size, global_batch,
 *                       config (JSON), plus any extra attributes the caller adds
 *
 * Files are written with object time tracking off to NAME.tmp, then fsynced and renamed:
 * the same state gives the same bytes, and a crash never leaves a half checkpoint.
 * Loading checks everything against the model and refuses, naming the file, a file that is
 * not a ds checkpoint, a kind or version it does not know, another architecture or class
 * count, a missing or misshapen tensor, or a truncated file. */
#ifndef DS_CHECKPOINT_H
#define DS_CHECKPOINT_H

#include <stdint.h>

#include "model.h"

typedef struct {
    int64_t epoch;
    double train_loss, val_top1, val_top5, images_per_s, seconds;
} ds_metrics_row;

/* An extra root attribute (dstrain's data size, fit, ...). */
typedef enum { DS_ATTR_INT, DS_ATTR_FLOAT, DS_ATTR_STRING } ds_attr_type;
typedef struct {
    char name[48];
    ds_attr_type type;
    int64_t i;
    double f;
    char *s;               /* owned by the meta */
} ds_ckpt_attr;

typedef struct {
    char arch[32];
    int num_classes;
    int input_size;        /* the crop the network was trained at */
    float mean[3], std[3]; /* input normalisation, on the 0..1 scale */
    int64_t epoch;         /* finished epochs */
    int64_t step;          /* global optimizer steps taken */
    uint64_t seed;
    int world_size;
    int global_batch;
    char *config;          /* JSON of the full option set; NULL: "{}" */
    char **classes;        /* [num_classes] or NULL (then "class<i>" names are written) */
    ds_metrics_row *metrics;
    int nmetrics;
    ds_ckpt_attr *extra;
    int nextra;
} ds_ckpt_meta;

/* Zeroes meta and sets the defaults (ImageNet mean/std, world_size 1). */
void ds_ckpt_meta_init(ds_ckpt_meta *meta);
/* Frees everything meta owns (config, classes, metrics, extra) and zeroes it. */
void ds_ckpt_meta_free(ds_ckpt_meta *meta);
/* Setters copy their arguments; a second set of the same name replaces the value. */
void ds_ckpt_meta_set_config(ds_ckpt_meta *meta, const char *json);
void ds_ckpt_meta_set_classes(ds_ckpt_meta *meta, char *const *classes, int n);
void ds_ckpt_meta_add_metrics(ds_ckpt_meta *meta, const ds_metrics_row *row);
void ds_ckpt_meta_set_int(ds_ckpt_meta *meta, const char *name, int64_t v);
void ds_ckpt_meta_set_float(ds_ckpt_meta *meta, const char *name, double v);
void ds_ckpt_meta_set_string(ds_ckpt_meta *meta, const char *name, const char *v);
/* The extra attribute with this name, or NULL. */
const ds_ckpt_attr *ds_ckpt_meta_get(const ds_ckpt_meta *meta, const char *name);

/* Writes model tensors, momentum (when started) and meta to path atomically. meta->arch
 * and num_classes are taken from the model. */
int ds_ckpt_save(const char *path, ds_model *m, const ds_ckpt_meta *meta);

/* Reads only the metadata (to create the right model before loading): validates kind and
 * version, fills meta (classes, metrics, extra attributes included). */
int ds_ckpt_read_meta(const char *path, ds_ckpt_meta *meta);

enum {
    DS_CKPT_OPTIMIZER = 1,   /* also load /optimizer (resume); absent group = not started */
    DS_CKPT_SKIP_FC = 2,     /* weights only, leave fc.* as they are (--init with another
                                class count); the class count is then not checked */
};
/* Loads /model (and /optimizer with DS_CKPT_OPTIMIZER) into m, checking arch, class count
 * and every tensor's presence and shape first; on error m is left unchanged. meta may be
 * NULL; otherwise it is filled as ds_ckpt_read_meta does. */
int ds_ckpt_load(const char *path, ds_model *m, ds_ckpt_meta *meta, int flags);

#endif
