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
 *   root attributes: one table in checkpoint_attrs.c (name, file and memory type, range, when
 *   it may be missing, which uses need it), which the writer, the reader, the requirement
 *   check and DESIGN §2's table (checked by test_checkpoint) all follow. A reader takes any
 *   integer or float width and fixed or variable-length strings; an attribute outside the
 *   table is an extra: kept and rewritten, read by no tool.
 *
 * Files are written with object time tracking off to NAME.tmp, then fsynced and renamed:
 * the same state gives the same bytes, and a crash never leaves a half checkpoint.
 * Loading checks everything against the model and refuses, naming the file, a file that is
 * not a ds checkpoint, a kind or version it does not know, another architecture or class
 * count, a missing or misshapen tensor, a malformed attribute, or a truncated file. */
#ifndef DS_CHECKPOINT_H
#define DS_CHECKPOINT_H

#include <stdint.h>
#include <stdio.h>

#include "image.h"
#include "loader.h"
#include "model.h"

typedef struct {
    int64_t epoch;
    double train_loss, val_top1, val_top5, images_per_s, seconds;
} ds_metrics_row;

/* An extra root attribute: one outside the table (a file written by another program or by
 * hand), kept and rewritten on resume, read by no tool. Each attribute of the table is a
 * member of ds_ckpt_meta. */
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
    int input_size;        /* the crop the network was trained at; 0: not recorded */
    float mean[3], std[3]; /* input normalisation, on the 0..1 scale */
    int64_t epoch;         /* finished epochs */
    int64_t step;          /* global optimizer steps taken */
    uint64_t seed;
    int world_size;        /* 0: not recorded (weights that never trained under ds) */
    int global_batch;      /* 0: not recorded */
    int data_height, data_width;  /* the training shards' stored size (dseval decodes a manifest
                                     at it); 0: not recorded, not written */
    ds_fit data_fit;       /* the training shards' fit; DS_FIT_UNSET: not recorded */
    double epoch_loss_sum; /* sum of the step losses of the running epoch so far */
    double epoch_seconds;  /* training seconds of the running epoch so far */
    ds_crop_ramp crop_ramp; /* the run's progressive resizing (loader.h); step 0: not recorded,
                              not written */
    int bn_bias_decay;     /* 1 / 0 (--[no-]bn-bias-decay); -1: not recorded, not written */
    unsigned found;        /* which attributes the file held, by reading (ds_ckpt_meta_has) */
    int has_classes;       /* the file held /classes */
    char *config;          /* JSON of the full option set; NULL: "{}" */
    double lr_effective;   /* for people: the run's peak learning rate (--lr after --lr-scaling);
                              < 0: not recorded, not written */
    char *device, *precision, *kernels, *reduction;  /* for people: what computed the run
                              (ds_ckpt_meta_set_backend); NULL: not recorded, not written */
    uint64_t train_digest; /* ds_source_digest of the training set; 0: not recorded, not written */
    char *history;         /* JSON lines, one per resume (dstrain); NULL: none, not written */
    char **classes;        /* [num_classes] or NULL (then "class<i>" names are written) */
    ds_metrics_row *metrics;
    int nmetrics;
    ds_ckpt_attr *extra;
    int nextra;
} ds_ckpt_meta;

/* Zeroes meta and sets the defaults (ImageNet mean/std, world_size 1, nothing recorded). */
void ds_ckpt_meta_init(ds_ckpt_meta *meta);
/* Frees everything meta owns (config and the strings for people, classes, metrics, extra) and
 * zeroes it. */
void ds_ckpt_meta_free(ds_ckpt_meta *meta);
/* Setters copy their arguments; a second set of the same name replaces the value. An extra
 * may not take the name of a member's attribute (the save fails). */
void ds_ckpt_meta_set_config(ds_ckpt_meta *meta, const char *json);
void ds_ckpt_meta_set_classes(ds_ckpt_meta *meta, char *const *classes, int n);
/* Appends one line (a JSON object) to the run's history. */
void ds_ckpt_meta_add_history(ds_ckpt_meta *meta, const char *json);
/* Records what computes the run: the backend's name, its precision, its CPU kernel set (none
 * where it has none) and how it sums the gradients. */
void ds_ckpt_meta_set_backend(ds_ckpt_meta *meta, const ds_backend *be);
void ds_ckpt_meta_add_metrics(ds_ckpt_meta *meta, const ds_metrics_row *row);
void ds_ckpt_meta_set_int(ds_ckpt_meta *meta, const char *name, int64_t v);
void ds_ckpt_meta_set_float(ds_ckpt_meta *meta, const char *name, double v);
void ds_ckpt_meta_set_string(ds_ckpt_meta *meta, const char *name, const char *v);
/* The extra attribute with this name, or NULL. */
const ds_ckpt_attr *ds_ckpt_meta_get(const ds_ckpt_meta *meta, const char *name);

/* Writes model tensors, momentum (when started) and meta to path atomically. meta->arch
 * and num_classes are taken from the model. */
int ds_ckpt_save(const char *path, ds_model *m, const ds_ckpt_meta *meta);

/* Reads only the metadata (to create the right model before loading): validates kind,
 * version and every attribute that is there, fills meta (classes, metrics, extra
 * attributes included) and meta->found. */
int ds_ckpt_read_meta(const char *path, ds_ckpt_meta *meta);

/* What a checkpoint is read for; each needs its own attributes (the table above). */
typedef enum { DS_CKPT_FOR_EVAL, DS_CKPT_FOR_INIT, DS_CKPT_FOR_RESUME } ds_ckpt_use;
/* 1 when the file meta was read from held the attribute (for those where 0 means "not
 * recorded": a non-zero value), or "/classes" the dataset. */
int ds_ckpt_meta_has(const ds_ckpt_meta *meta, const char *name);
/* The run settings a checkpoint records for --resume to take back, by dstrain's option name
 * (the crop ramp's four, bn-bias-decay): record sets the value a save will write (-1: no
 * attribute records that option); recorded gives it back from a file that was read: 1 with
 * *value, 0 when the file lacks it, -1 when no attribute records that option. */
int ds_ckpt_meta_record(ds_ckpt_meta *meta, const char *option, long long value);
int ds_ckpt_meta_recorded(const ds_ckpt_meta *meta, const char *option, long long *value);
/* Prints the attribute table as the rows of DESIGN §2's (name, type, meaning, needed by). */
void ds_ckpt_attributes_doc(FILE *out);
/* 0 when meta (as read from path) has what `use` needs; else -1 and a message naming the
 * file, the use and the missing attribute. */
int ds_ckpt_meta_require(const ds_ckpt_meta *meta, const char *path, ds_ckpt_use use);

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
