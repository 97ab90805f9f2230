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
 *   root attributes, as written (a reader takes any integer or float width, fixed or
 *   variable-length strings):
 *     ds_format int32 1, ds_kind "checkpoint"    the header of every ds file (h5util.h)
 *     arch string, num_classes int32             the network
 *     input_size int32                           the crop it was trained at (0: not recorded)
 *     mean, std float32[3]                       input normalisation, on the 0..1 scale
 *     epoch int64, step int64                    finished epochs, global optimizer steps
 *     seed uint64                                --seed
 *     world_size int32, global_batch int32       ranks, batch x ranks x accum (0: not recorded;
 *                                                world_size 0: weights that never trained here)
 *     config string                              JSON of every dstrain option
 *     data_height int64, data_width int64        the training shards' stored size, at which
 *     data_fit string ("crop" or "squash")       dseval decodes a manifest (dstrain writes them)
 *     epoch_loss_sum float64                     the running epoch's sum of step losses and
 *     epoch_seconds float64                      its training seconds (resume inside an epoch)
 *     crop_ramp int64[4]                         progressive resizing: --min-crop (0: none),
 *                                                --ramp-start, --ramp-end, --crop-step
 *     bn_bias_decay int32                        1: weight decay on BN weights / biases and
 *                                                fc.bias too, 0: not on them
 *                                                (these two: dstrain; --resume takes them)
 *     anything else                              extras: kept and rewritten, read by no tool
 *                                                (dstrain adds lr_effective, device, precision)
 *
 * What a use needs (ds_ckpt_meta_require; the rest may be missing, as a converted or
 * hand-written file often has it, but what is there must be well formed):
 *   every use     ds_format, ds_kind, arch, num_classes, /model (loading checks each tensor)
 *   evaluation    + input_size (non-zero), mean, std
 *   --init        nothing more
 *   --resume      + mean, std, epoch, step, seed, world_size and global_batch (non-zero),
 *                 epoch_loss_sum, epoch_seconds, /classes
 *
 * Files are written with object time tracking off to NAME.tmp, then fsynced and renamed:
 * the same state gives the same bytes, and a crash never leaves a half checkpoint.
 * Loading checks everything against the model and refuses, naming the file, a file that is
 * not a ds checkpoint, a kind or version it does not know, another architecture or class
 * count, a missing or misshapen tensor, a malformed attribute, or a truncated file. */
#ifndef DS_CHECKPOINT_H
#define DS_CHECKPOINT_H

#include <stdint.h>

#include "model.h"

typedef struct {
    int64_t epoch;
    double train_loss, val_top1, val_top5, images_per_s, seconds;
} ds_metrics_row;

/* An extra root attribute: one no tool reads (dstrain's lr_effective, device, precision),
 * kept for people and rewritten on resume. A field a tool reads is a member of ds_ckpt_meta. */
typedef enum { DS_ATTR_INT, DS_ATTR_FLOAT, DS_ATTR_STRING } ds_attr_type;
typedef struct {
    char name[48];
    ds_attr_type type;
    int64_t i;
    double f;
    char *s;               /* owned by the meta */
} ds_ckpt_attr;

/* Which of the root attributes that may be missing the file held (ds_ckpt_meta.found). */
enum {
    DS_CKPT_HAS_INPUT_SIZE = 1 << 0,
    DS_CKPT_HAS_MEAN = 1 << 1,
    DS_CKPT_HAS_STD = 1 << 2,
    DS_CKPT_HAS_EPOCH = 1 << 3,
    DS_CKPT_HAS_STEP = 1 << 4,
    DS_CKPT_HAS_SEED = 1 << 5,
    DS_CKPT_HAS_WORLD_SIZE = 1 << 6,
    DS_CKPT_HAS_GLOBAL_BATCH = 1 << 7,
    DS_CKPT_HAS_EPOCH_SUMS = 1 << 8,   /* epoch_loss_sum and epoch_seconds, both */
    DS_CKPT_HAS_CLASSES = 1 << 9,
};

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
    char data_fit[8];      /* the training shards' fit, "crop" or "squash"; "": not recorded */
    double epoch_loss_sum; /* sum of the step losses of the running epoch so far */
    double epoch_seconds;  /* training seconds of the running epoch so far */
    int64_t crop_ramp[4];  /* --min-crop (0: no ramp), --ramp-start, --ramp-end, --crop-step;
                              step 0: not recorded, not written */
    int bn_bias_decay;     /* 1 / 0 (--[no-]bn-bias-decay); -1: not recorded, not written */
    unsigned found;        /* DS_CKPT_HAS_* bits, set by reading; the writer ignores them */
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
/* Setters copy their arguments; a second set of the same name replaces the value. An extra
 * may not take the name of a member's attribute (the save fails). */
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

/* Reads only the metadata (to create the right model before loading): validates kind,
 * version and every attribute that is there, fills meta (classes, metrics, extra
 * attributes included) and meta->found. */
int ds_ckpt_read_meta(const char *path, ds_ckpt_meta *meta);

/* What a checkpoint is read for; each needs its own attributes (the table above). */
typedef enum { DS_CKPT_FOR_EVAL, DS_CKPT_FOR_INIT, DS_CKPT_FOR_RESUME } ds_ckpt_use;
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
