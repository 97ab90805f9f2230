/* checkpoint: the HDF5 checkpoint of docs/DESIGN.md §2, written and read against a model.
 *
 * HDF5's automatic error printing is off while these functions run; each failure becomes one
 * ds_err line naming the file and the object. Loading reads and checks every tensor into
 * host memory before it touches the model, so a refused file leaves the model as it was. */
#include "checkpoint.h"

#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsutil.h"
#include "h5util.h"
#include "log.h"

/* ---- meta ---- */

void ds_ckpt_meta_init(ds_ckpt_meta *meta)
{
    static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f}, imagenet_std[3] = {0.229f, 0.224f, 0.225f};
    memset(meta, 0, sizeof *meta);
    memcpy(meta->mean, imagenet_mean, sizeof meta->mean);
    memcpy(meta->std, imagenet_std, sizeof meta->std);
    meta->world_size = 1;
    meta->bn_bias_decay = -1;
}

void ds_ckpt_meta_free(ds_ckpt_meta *meta)
{
    free(meta->config);
    if (meta->classes)
        for (int i = 0; i < meta->num_classes; i++) free(meta->classes[i]);
    free(meta->classes);
    free(meta->metrics);
    for (int i = 0; i < meta->nextra; i++) free(meta->extra[i].s);
    free(meta->extra);
    memset(meta, 0, sizeof *meta);
}

void ds_ckpt_meta_set_config(ds_ckpt_meta *meta, const char *json)
{
    free(meta->config);
    meta->config = json ? ds_xstrdup(json) : NULL;
}

void ds_ckpt_meta_set_classes(ds_ckpt_meta *meta, char *const *classes, int n)
{
    if (meta->classes)
        for (int i = 0; i < meta->num_classes; i++) free(meta->classes[i]);
    free(meta->classes);
    meta->classes = ds_xcalloc((size_t)(n > 0 ? n : 1), sizeof *meta->classes);
    for (int i = 0; i < n; i++) meta->classes[i] = ds_xstrdup(classes[i]);
    meta->num_classes = n;
}

void ds_ckpt_meta_add_metrics(ds_ckpt_meta *meta, const ds_metrics_row *row)
{
    meta->metrics = ds_xrealloc(meta->metrics, (size_t)(meta->nmetrics + 1) * sizeof *meta->metrics);
    meta->metrics[meta->nmetrics++] = *row;
}

static ds_ckpt_attr *extra_slot(ds_ckpt_meta *meta, const char *name)
{
    for (int i = 0; i < meta->nextra; i++)
        if (!strcmp(meta->extra[i].name, name)) {
            free(meta->extra[i].s);
            meta->extra[i].s = NULL;
            return &meta->extra[i];
        }
    meta->extra = ds_xrealloc(meta->extra, (size_t)(meta->nextra + 1) * sizeof *meta->extra);
    ds_ckpt_attr *a = &meta->extra[meta->nextra++];
    memset(a, 0, sizeof *a);
    snprintf(a->name, sizeof a->name, "%s", name);
    return a;
}

void ds_ckpt_meta_set_int(ds_ckpt_meta *meta, const char *name, int64_t v)
{
    ds_ckpt_attr *a = extra_slot(meta, name);
    a->type = DS_ATTR_INT;
    a->i = v;
}

void ds_ckpt_meta_set_float(ds_ckpt_meta *meta, const char *name, double v)
{
    ds_ckpt_attr *a = extra_slot(meta, name);
    a->type = DS_ATTR_FLOAT;
    a->f = v;
}

void ds_ckpt_meta_set_string(ds_ckpt_meta *meta, const char *name, const char *v)
{
    ds_ckpt_attr *a = extra_slot(meta, name);
    a->type = DS_ATTR_STRING;
    a->s = ds_xstrdup(v);
}

const ds_ckpt_attr *ds_ckpt_meta_get(const ds_ckpt_meta *meta, const char *name)
{
    for (int i = 0; i < meta->nextra; i++)
        if (!strcmp(meta->extra[i].name, name)) return &meta->extra[i];
    return NULL;
}

/* The root attributes of ds_ckpt_meta's members (checkpoint.h); every other one is an extra. */
static const char *const known_attrs[] = {"ds_format", "ds_kind", "arch", "num_classes", "input_size", "mean",
                                          "std", "epoch", "step", "seed", "world_size", "global_batch", "config",
                                          "data_height", "data_width", "data_fit", "epoch_loss_sum",
                                          "epoch_seconds", "crop_ramp", "bn_bias_decay", NULL};

static int fit_known(const char *fit) { return !strcmp(fit, "crop") || !strcmp(fit, "squash"); }

static int is_known_attr(const char *name)
{
    for (int i = 0; known_attrs[i]; i++)
        if (!strcmp(known_attrs[i], name)) return 1;
    return 0;
}

/* The /metrics row type; fields are matched by name on read, so the file's order may differ. */
static hid_t metrics_type(void)
{
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(ds_metrics_row));
    if (t < 0) return -1;
    if (H5Tinsert(t, "epoch", offsetof(ds_metrics_row, epoch), H5T_NATIVE_INT64) < 0 ||
        H5Tinsert(t, "train_loss", offsetof(ds_metrics_row, train_loss), H5T_NATIVE_DOUBLE) < 0 ||
        H5Tinsert(t, "val_top1", offsetof(ds_metrics_row, val_top1), H5T_NATIVE_DOUBLE) < 0 ||
        H5Tinsert(t, "val_top5", offsetof(ds_metrics_row, val_top5), H5T_NATIVE_DOUBLE) < 0 ||
        H5Tinsert(t, "images_per_s", offsetof(ds_metrics_row, images_per_s), H5T_NATIVE_DOUBLE) < 0 ||
        H5Tinsert(t, "seconds", offsetof(ds_metrics_row, seconds), H5T_NATIVE_DOUBLE) < 0) {
        H5Tclose(t);
        return -1;
    }
    return t;
}

/* ---- save ---- */

/* One group of tensors: /model (params, buffers, counters) or /optimizer (momentum). */
static int write_tensors(hid_t f, const char *group, ds_model *m, int momentum, const char **what)
{
    hid_t g = ds_h5_create_group(f, group);
    if (g < 0) return -1;
    int rc = 0;
    size_t cap = 0;
    float *buf = NULL;
    for (int i = 0; i < ds_model_tensor_count(m) && !rc; i++) {
        const ds_tensor_info *t = ds_model_tensor(m, i);
        if (momentum && t->kind != DS_TENSOR_PARAM) continue;
        *what = t->name;
        hsize_t dims[4];
        for (int d = 0; d < t->ndim; d++) dims[d] = (hsize_t)t->shape[d];
        if (t->kind == DS_TENSOR_COUNTER) {
            int64_t v;
            ds_model_tensor_get(m, i, &v);
            rc = ds_h5_write_dataset(g, t->name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, dims, &v);
            continue;
        }
        if (t->count > cap) buf = ds_xrealloc(buf, (cap = t->count) * sizeof *buf);
        if (momentum) rc = ds_model_momentum_get(m, i, buf);
        else ds_model_tensor_get(m, i, buf);
        if (!rc) rc = ds_h5_write_dataset(g, t->name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t->ndim, dims, buf);
    }
    free(buf);
    if (H5Gclose(g) < 0) rc = -1;
    return rc;
}

static int write_meta(hid_t f, ds_model *m, const ds_ckpt_meta *meta, const char **what)
{
    const ds_model_config *cfg = ds_model_config_of(m);
    int nc = cfg->num_classes;
    int64_t epoch = meta->epoch, step = meta->step;
    int64_t data_height = meta->data_height, data_width = meta->data_width;
    uint64_t seed = meta->seed;
    int world = meta->world_size, gb = meta->global_batch, input = meta->input_size;
    *what = "attributes";
    if (ds_h5_write_header(f, "checkpoint") || ds_h5_attr_write_str(f, "arch", cfg->arch) ||
        ds_h5_attr_write(f, "num_classes", H5T_STD_I32LE, H5T_NATIVE_INT, 0, &nc) ||
        ds_h5_attr_write(f, "input_size", H5T_STD_I32LE, H5T_NATIVE_INT, 0, &input) ||
        ds_h5_attr_write(f, "mean", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, meta->mean) ||
        ds_h5_attr_write(f, "std", H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, 3, meta->std) ||
        ds_h5_attr_write(f, "epoch", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &epoch) ||
        ds_h5_attr_write(f, "step", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &step) ||
        ds_h5_attr_write(f, "seed", H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, &seed) ||
        ds_h5_attr_write(f, "world_size", H5T_STD_I32LE, H5T_NATIVE_INT, 0, &world) ||
        ds_h5_attr_write(f, "global_batch", H5T_STD_I32LE, H5T_NATIVE_INT, 0, &gb) ||
        ds_h5_attr_write_str(f, "config", meta->config ? meta->config : "{}"))
        return -1;
    /* int64 and float64: the types these had when dstrain wrote them as extras, so files
     * written before they were named read the same. */
    *what = "data_height";
    if (data_height > 0 &&
        (ds_h5_attr_write(f, "data_height", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &data_height) ||
         ds_h5_attr_write(f, "data_width", H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &data_width)))
        return -1;
    *what = "data_fit";
    if (meta->data_fit[0] && ds_h5_attr_write_str(f, "data_fit", meta->data_fit)) return -1;
    for (int i = 0; i < meta->nextra; i++) {
        const ds_ckpt_attr *a = &meta->extra[i];
        *what = a->name;
        if (is_known_attr(a->name)) return -1;
        int rc = a->type == DS_ATTR_INT     ? ds_h5_attr_write(f, a->name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &a->i)
                 : a->type == DS_ATTR_FLOAT ? ds_h5_attr_write(f, a->name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &a->f)
                                            : ds_h5_attr_write_str(f, a->name, a->s ? a->s : "");
        if (rc) return -1;
    }
    /* After the extras: the order a run's first checkpoint had when these were extras too
     * (attribute order is invisible to readers but shows in the file's bytes). */
    *what = "crop_ramp";
    if (meta->crop_ramp[3] > 0 && ds_h5_attr_write(f, "crop_ramp", H5T_STD_I64LE, H5T_NATIVE_INT64, 4, meta->crop_ramp))
        return -1;
    *what = "bn_bias_decay";
    if (meta->bn_bias_decay >= 0 &&
        ds_h5_attr_write(f, "bn_bias_decay", H5T_STD_I32LE, H5T_NATIVE_INT, 0, &meta->bn_bias_decay))
        return -1;
    *what = "epoch_loss_sum";
    if (ds_h5_attr_write(f, "epoch_loss_sum", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &meta->epoch_loss_sum) ||
        ds_h5_attr_write(f, "epoch_seconds", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &meta->epoch_seconds))
        return -1;

    *what = "/classes";
    hid_t st = ds_h5_vlen_utf8();
    if (st < 0) return -1;
    char **names = ds_xcalloc((size_t)nc, sizeof *names);
    char fallback[32];
    int rc = 0;
    for (int i = 0; i < nc; i++) {
        if (meta->classes && i < meta->num_classes) names[i] = meta->classes[i];
        else {
            snprintf(fallback, sizeof fallback, "class%d", i);
            names[i] = ds_xstrdup(fallback);
        }
    }
    hsize_t dims[1] = {(hsize_t)nc};
    rc = ds_h5_write_dataset(f, "classes", st, st, 1, dims, names);
    for (int i = 0; i < nc; i++)
        if (!(meta->classes && i < meta->num_classes)) free(names[i]);
    free(names);
    H5Tclose(st);
    if (rc) return -1;

    *what = "/metrics";
    hid_t mt = metrics_type();
    if (mt < 0) return -1;
    dims[0] = (hsize_t)meta->nmetrics;
    rc = ds_h5_write_dataset(f, "metrics", mt, mt, 1, dims, meta->metrics);
    H5Tclose(mt);
    return rc;
}

int ds_ckpt_save(const char *path, ds_model *m, const ds_ckpt_meta *meta)
{
    if (meta->classes && meta->num_classes != ds_model_config_of(m)->num_classes)
        return ds_err("%s: %d class names for a model of %d classes", path, meta->num_classes,
                      ds_model_config_of(m)->num_classes);
    if (meta->data_height < 0 || meta->data_width < 0 || (meta->data_height > 0) != (meta->data_width > 0))
        return ds_err("%s: data size %dx%d is not a size", path, meta->data_height, meta->data_width);
    if (meta->data_fit[0] && !fit_known(meta->data_fit))
        return ds_err("%s: data_fit '%s' is not 'crop' or 'squash'", path, meta->data_fit);
    char *tmp = ds_tmp_name(path);

    ds_h5_quiet q;
    const char *what = "create";
    hid_t f = ds_h5_file_create(&q, tmp);
    int ok = f >= 0 && !write_meta(f, m, meta, &what) && !write_tensors(f, "model", m, 0, &what) &&
             !(ds_model_momentum_started(m) && write_tensors(f, "optimizer", m, 1, &what));
    int rc = ds_h5_file_finish(&q, f, ok, tmp, "checkpoint", what);
    if (rc == 0) rc = ds_commit_file(tmp, path);
    free(tmp);
    return rc;
}

/* ---- load ---- */

/* Opens path and checks it is a ds checkpoint of a version we know. */
static hid_t open_checkpoint(const char *path)
{
    struct stat st;
    if (stat(path, &st)) return ds_err("%s: %s", path, strerror(errno));
    if (H5Fis_hdf5(path) <= 0) return ds_err("%s: not a ds checkpoint (not an HDF5 file)", path);
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (f < 0) return ds_err("%s: cannot open the HDF5 file (truncated or damaged)", path);
    char why[128];
    if (ds_h5_check_header(f, "checkpoint", why, sizeof why)) {
        H5Fclose(f);
        return ds_err("%s: not a ds checkpoint: %s", path, why);
    }
    return f;
}

static herr_t collect_extra(hid_t loc, const char *name, const H5A_info_t *info, void *data)
{
    ds_ckpt_meta *meta = data;
    if (is_known_attr(name)) return 0;
    hid_t a = H5Aopen(loc, name, H5P_DEFAULT);
    if (a < 0) return -1;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
    int scalar = sp >= 0 && H5Sget_simple_extent_npoints(sp) == 1;
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    if (!scalar) return 0;   /* arrays are not extras we know how to hold; skip them */
    if (cls == H5T_INTEGER) {
        int64_t v;
        if (ds_h5_attr_read(loc, name, cls, H5T_NATIVE_INT64, 1, &v)) return -1;
        ds_ckpt_meta_set_int(meta, name, v);
    } else if (cls == H5T_FLOAT) {
        double v;
        if (ds_h5_attr_read(loc, name, cls, H5T_NATIVE_DOUBLE, 1, &v)) return -1;
        ds_ckpt_meta_set_float(meta, name, v);
    } else if (cls == H5T_STRING) {
        char *s = ds_h5_attr_read_str(loc, name);
        if (!s) return -1;
        ds_ckpt_meta_set_string(meta, name, s);
        free(s);
    }
    return 0;
}

/* /metrics (optional in converted files) */
static int read_metrics(hid_t f, const char *path, ds_ckpt_meta *meta)
{
    if (H5Lexists(f, "metrics", H5P_DEFAULT) <= 0) return 0;
    hid_t mt = metrics_type(), d = H5Dopen2(f, "metrics", H5P_DEFAULT);
    hid_t sp = d >= 0 ? H5Dget_space(d) : -1;
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    int rc = -1;
    if (mt >= 0 && n >= 0) {
        meta->metrics = ds_xcalloc((size_t)(n ? n : 1), sizeof *meta->metrics);
        meta->nmetrics = (int)n;
        rc = n == 0 || H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, meta->metrics) >= 0 ? 0 : -1;
    }
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (mt >= 0) H5Tclose(mt);
    if (rc) return ds_err("%s: /metrics unreadable", path);
    return 0;
}

/* An attribute a file may lack: 1 when read into v, 0 when absent, -1 with a message naming
 * it when it is there but not n values (1: a scalar) of class cls. */
static int read_optional(hid_t f, const char *path, const char *name, H5T_class_t cls, hid_t mem_t, int n, void *v)
{
    if (H5Aexists(f, name) <= 0) return 0;
    if (ds_h5_attr_read(f, name, cls, mem_t, n, v) == 0) return 1;
    const char *what = cls == H5T_INTEGER ? "integer" : cls == H5T_FLOAT ? "float" : "value";
    if (n == 1) return ds_err("%s: %s attribute is not a scalar %s", path, name, what);
    return ds_err("%s: %s attribute is not %d %s values", path, name, n, what);
}

/* read_optional that records in meta->found (bit) whether the file held the attribute. */
static int read_field(hid_t f, const char *path, ds_ckpt_meta *meta, unsigned bit, const char *name, H5T_class_t cls,
                      hid_t mem_t, int n, void *v)
{
    int got = read_optional(f, path, name, cls, mem_t, n, v);
    if (got > 0) meta->found |= bit;
    return got < 0 ? -1 : 0;
}

static int read_meta(hid_t f, const char *path, ds_ckpt_meta *meta)
{
    ds_ckpt_meta_init(meta);
    char *arch = ds_h5_attr_read_str(f, "arch");
    const char *bad = NULL;
    int nc = 0;
    if (!arch || strlen(arch) >= sizeof meta->arch) bad = "arch attribute missing";
    else if (!ds_arch_known(arch)) bad = "arch attribute names no known architecture";
    else if (ds_h5_attr_read(f, "num_classes", H5T_INTEGER, H5T_NATIVE_INT, 1, &nc) || nc < 1)
        bad = "num_classes attribute missing or not positive";
    if (bad) {
        free(arch);
        return ds_err("%s: %s", path, bad);
    }
    snprintf(meta->arch, sizeof meta->arch, "%s", arch);
    free(arch);
    /* The rest may be missing (ds_ckpt_meta_require says which use needs what); a field
     * that is there must be well formed and in range (a hostile 0 would size a model or
     * divide). */
    if (read_field(f, path, meta,
                   DS_CKPT_HAS_INPUT_SIZE, "input_size", H5T_INTEGER, H5T_NATIVE_INT, 1, &meta->input_size))
        return -1;
    if (meta->input_size < 0 || meta->input_size > 65536)  /* 0: not recorded */
        return ds_err("%s: input_size attribute %d out of range [0, 65536]", path, meta->input_size);
    if (!meta->input_size) meta->found &= ~(unsigned)DS_CKPT_HAS_INPUT_SIZE;
    if (read_field(f, path, meta, DS_CKPT_HAS_MEAN, "mean", H5T_FLOAT, H5T_NATIVE_FLOAT, 3, meta->mean)) return -1;
    if (!(isfinite(meta->mean[0]) && isfinite(meta->mean[1]) && isfinite(meta->mean[2])))
        return ds_err("%s: mean attribute not finite", path);
    if (read_field(f, path, meta, DS_CKPT_HAS_STD, "std", H5T_FLOAT, H5T_NATIVE_FLOAT, 3, meta->std)) return -1;
    if (!(meta->std[0] > 0 && meta->std[1] > 0 && meta->std[2] > 0) ||
        !(isfinite(meta->std[0]) && isfinite(meta->std[1]) && isfinite(meta->std[2])))
        return ds_err("%s: std attribute not positive", path);
    if (read_field(f, path, meta,
                   DS_CKPT_HAS_EPOCH, "epoch", H5T_INTEGER, H5T_NATIVE_INT64, 1, &meta->epoch))
        return -1;
    if (meta->epoch < 0) return ds_err("%s: epoch attribute %lld is negative", path, (long long)meta->epoch);
    if (read_field(f, path, meta, DS_CKPT_HAS_STEP, "step", H5T_INTEGER, H5T_NATIVE_INT64, 1, &meta->step)) return -1;
    if (meta->step < 0) return ds_err("%s: step attribute %lld is negative", path, (long long)meta->step);
    if (read_field(f, path, meta, DS_CKPT_HAS_SEED, "seed", H5T_INTEGER, H5T_NATIVE_UINT64, 1, &meta->seed)) return -1;
    /* world_size 0 is how a file says its weights never trained under ds (an import). */
    meta->world_size = 0;
    if (read_field(f, path, meta,
                   DS_CKPT_HAS_WORLD_SIZE, "world_size", H5T_INTEGER, H5T_NATIVE_INT, 1, &meta->world_size))
        return -1;
    if (meta->world_size < 0)
        return ds_err("%s: world_size attribute %d is negative", path, meta->world_size);
    if (!meta->world_size) meta->found &= ~(unsigned)DS_CKPT_HAS_WORLD_SIZE;
    if (read_field(f, path, meta,
                   DS_CKPT_HAS_GLOBAL_BATCH, "global_batch", H5T_INTEGER, H5T_NATIVE_INT, 1, &meta->global_batch))
        return -1;
    if (meta->global_batch < 0)
        return ds_err("%s: global_batch attribute %d is negative", path, meta->global_batch);
    if (!meta->global_batch) meta->found &= ~(unsigned)DS_CKPT_HAS_GLOBAL_BATCH;
    meta->config = ds_h5_attr_read_str(f, "config");  /* for people: any other type reads as none */

    int64_t dh = 0, dw = 0;
    int nsize = read_optional(f, path, "data_height", H5T_INTEGER, H5T_NATIVE_INT64, 1, &dh);
    if (nsize < 0) return -1;
    int nw = read_optional(f, path, "data_width", H5T_INTEGER, H5T_NATIVE_INT64, 1, &dw);
    if (nw < 0) return -1;
    if (nsize != nw) return ds_err("%s: %s attribute missing beside %s", path, nsize ? "data_width" : "data_height",
                                   nsize ? "data_height" : "data_width");
    if (nsize && (dh < 1 || dh > 65535 || dw < 1 || dw > 65535))
        return ds_err("%s: data_height/data_width attributes %lldx%lld out of range [1, 65535]", path, (long long)dh,
                      (long long)dw);
    meta->data_height = (int)dh;
    meta->data_width = (int)dw;
    if (H5Aexists(f, "data_fit") > 0) {
        char *fit = ds_h5_attr_read_str(f, "data_fit");
        int ok = fit && fit_known(fit);
        if (ok) snprintf(meta->data_fit, sizeof meta->data_fit, "%s", fit);
        free(fit);
        if (!ok) return ds_err("%s: data_fit attribute is not 'crop' or 'squash'", path);
    }
    int nramp = read_optional(f, path, "crop_ramp", H5T_INTEGER, H5T_NATIVE_INT64, 4, meta->crop_ramp);
    if (nramp < 0) return -1;
    const int64_t *cr = meta->crop_ramp;
    if (nramp && (cr[0] < 0 || cr[0] > 65535 || cr[1] < 0 || cr[2] < cr[1] || cr[3] < 1 || cr[3] > 65535))
        return ds_err("%s: crop_ramp attribute {%lld, %lld, %lld, %lld} is not a min crop, start <= end and a step",
                      path, (long long)cr[0], (long long)cr[1], (long long)cr[2], (long long)cr[3]);
    int nbbd = read_optional(f, path, "bn_bias_decay", H5T_INTEGER, H5T_NATIVE_INT, 1, &meta->bn_bias_decay);
    if (nbbd < 0) return -1;
    if (nbbd && meta->bn_bias_decay != 0 && meta->bn_bias_decay != 1)
        return ds_err("%s: bn_bias_decay attribute %d is not 0 or 1", path, meta->bn_bias_decay);
    int nloss = read_optional(f, path, "epoch_loss_sum", H5T_FLOAT, H5T_NATIVE_DOUBLE, 1, &meta->epoch_loss_sum);
    if (nloss < 0) return -1;
    int nsecs = read_optional(f, path, "epoch_seconds", H5T_FLOAT, H5T_NATIVE_DOUBLE, 1, &meta->epoch_seconds);
    if (nsecs < 0) return -1;
    if (!isfinite(meta->epoch_loss_sum)) return ds_err("%s: epoch_loss_sum attribute not finite", path);
    if (!(meta->epoch_seconds >= 0) || !isfinite(meta->epoch_seconds))
        return ds_err("%s: epoch_seconds attribute not a finite duration", path);
    if (nloss && nsecs) meta->found |= DS_CKPT_HAS_EPOCH_SUMS;

    hsize_t idx = 0;
    if (H5Aiterate2(f, H5_INDEX_NAME, H5_ITER_INC, &idx, collect_extra, meta) < 0)
        return ds_err("%s: cannot read the root attributes", path);

    /* /classes (optional in converted files: their classes are then known by count only) */
    meta->num_classes = nc;
    if (H5Lexists(f, "classes", H5P_DEFAULT) <= 0) return read_metrics(f, path, meta);
    hid_t d = H5Dopen2(f, "classes", H5P_DEFAULT);
    if (d < 0) return ds_err("%s: /classes is not a dataset", path);
    hid_t sp = H5Dget_space(d), st = ds_h5_vlen_utf8();
    hssize_t n = sp >= 0 ? H5Sget_simple_extent_npoints(sp) : -1;
    int rc = -1;
    if (n == nc && st >= 0) {
        char **raw = ds_xcalloc((size_t)nc, sizeof *raw);
        if (H5Dread(d, st, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) >= 0) {
            meta->classes = ds_xcalloc((size_t)nc, sizeof *meta->classes);
            for (int i = 0; i < nc; i++) {
                meta->classes[i] = ds_xstrdup(raw[i] ? raw[i] : "");
                H5free_memory(raw[i]);
            }
            rc = 0;
        }
        free(raw);
    }
    if (st >= 0) H5Tclose(st);
    if (sp >= 0) H5Sclose(sp);
    H5Dclose(d);
    if (rc) return ds_err("%s: /classes unreadable or not [num_classes] strings", path);
    meta->found |= DS_CKPT_HAS_CLASSES;
    return read_metrics(f, path, meta);
}

int ds_ckpt_read_meta(const char *path, ds_ckpt_meta *meta)
{
    ds_h5_quiet q;
    ds_h5_quiet_begin(&q);
    ds_ckpt_meta_init(meta);
    hid_t f = open_checkpoint(path);
    int rc = f < 0 ? -1 : read_meta(f, path, meta);
    if (f >= 0) H5Fclose(f);
    ds_h5_quiet_end(&q);
    if (rc) ds_ckpt_meta_free(meta);
    return rc;
}

/* What each use needs beyond arch, num_classes and /model (checkpoint.h's table). */
enum { FOR_EVAL = 1 << DS_CKPT_FOR_EVAL, FOR_INIT = 1 << DS_CKPT_FOR_INIT, FOR_RESUME = 1 << DS_CKPT_FOR_RESUME };
static const struct {
    unsigned bit;
    const char *name;
    unsigned uses;
} needed[] = {
    {DS_CKPT_HAS_INPUT_SIZE, "input_size attribute (non-zero)", FOR_EVAL},
    {DS_CKPT_HAS_MEAN, "mean attribute", FOR_EVAL | FOR_RESUME},
    {DS_CKPT_HAS_STD, "std attribute", FOR_EVAL | FOR_RESUME},
    {DS_CKPT_HAS_EPOCH, "epoch attribute", FOR_RESUME},
    {DS_CKPT_HAS_STEP, "step attribute", FOR_RESUME},
    {DS_CKPT_HAS_SEED, "seed attribute", FOR_RESUME},
    {DS_CKPT_HAS_WORLD_SIZE, "world_size attribute (non-zero)", FOR_RESUME},
    {DS_CKPT_HAS_GLOBAL_BATCH, "global_batch attribute (non-zero)", FOR_RESUME},
    {DS_CKPT_HAS_EPOCH_SUMS, "epoch_loss_sum and epoch_seconds attributes", FOR_RESUME},
    {DS_CKPT_HAS_CLASSES, "/classes dataset", FOR_RESUME},
};

int ds_ckpt_meta_require(const ds_ckpt_meta *meta, const char *path, ds_ckpt_use use)
{
    static const char *const use_names[] = {"evaluation", "--init", "--resume"};
    for (size_t i = 0; i < sizeof needed / sizeof *needed; i++) {
        if (!(needed[i].uses & (1u << use)) || (meta->found & needed[i].bit)) continue;
        const char *why = use == DS_CKPT_FOR_RESUME && !(meta->found & DS_CKPT_HAS_WORLD_SIZE)
                              ? " (world_size 0 or missing: weights that never trained under ds, which "
                                "--init can start from)"
                              : "";
        return ds_err("%s: %s needs the %s, which this checkpoint lacks%s", path, use_names[use], needed[i].name,
                      why);
    }
    return 0;
}

/* Reads /group/<name> into host (float[count], or int64 for a counter) after checking it
 * exists with the tensor's shape and type class. */
static int read_tensor(hid_t f, const char *path, const char *group, const ds_tensor_info *t, void *host)
{
    char obj[160];
    snprintf(obj, sizeof obj, "%s/%s", group, t->name);
    if (H5Lexists(f, group, H5P_DEFAULT) <= 0 || H5Lexists(f, obj, H5P_DEFAULT) <= 0)
        return ds_err("%s: tensor /%s missing", path, obj);
    hid_t d = H5Dopen2(f, obj, H5P_DEFAULT);
    if (d < 0) return ds_err("%s: /%s is not a dataset", path, obj);
    hid_t ty = H5Dget_type(d), sp = H5Dget_space(d);
    int counter = t->kind == DS_TENSOR_COUNTER;
    int rank = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1;
    hsize_t dims[H5S_MAX_RANK];
    int ok = ty >= 0 && rank >= 0 && H5Tget_class(ty) == (counter ? H5T_INTEGER : H5T_FLOAT);
    char want[80] = "", got[80] = "";
    if (ok) {
        H5Sget_simple_extent_dims(sp, dims, NULL);
        if (counter) ok = H5Sget_simple_extent_npoints(sp) == 1;
        else {
            ok = rank == t->ndim;
            for (int i = 0; ok && i < rank; i++) ok = dims[i] == (hsize_t)t->shape[i];
            for (int i = 0, o = 0; i < t->ndim; i++)
                o += snprintf(want + o, sizeof want - o, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
            for (int i = 0, o = 0; i < rank && i < 8; i++)
                o += snprintf(got + o, sizeof got - o, "%s%llu", i ? ", " : "", (unsigned long long)dims[i]);
        }
    }
    if (ok) ok = H5Dread(d, counter ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, host) >= 0 ? 1 : -1;
    if (sp >= 0) H5Sclose(sp);
    if (ty >= 0) H5Tclose(ty);
    H5Dclose(d);
    if (ok == -1) return ds_err("%s: cannot read /%s (truncated or damaged file)", path, obj);
    if (!ok && counter) return ds_err("%s: /%s is not an integer scalar", path, obj);
    if (!ok && !got[0] && !want[0]) return ds_err("%s: /%s is not a float dataset", path, obj);
    if (!ok) return ds_err("%s: /%s has shape [%s], the model expects float [%s]", path, obj, got, want);
    return 0;
}

int ds_ckpt_load(const char *path, ds_model *m, ds_ckpt_meta *meta_out, int flags)
{
    ds_h5_quiet q;
    ds_h5_quiet_begin(&q);
    ds_ckpt_meta meta;
    ds_ckpt_meta_init(&meta);
    const ds_model_config *cfg = ds_model_config_of(m);
    int nt = ds_model_tensor_count(m), rc = -1;
    void **host = ds_xcalloc((size_t)nt, sizeof *host);
    void **mom = ds_xcalloc((size_t)nt, sizeof *mom);
    int with_mom = 0;
    hid_t f = open_checkpoint(path);
    if (f < 0 || read_meta(f, path, &meta)) goto out;
    if (strcmp(meta.arch, cfg->arch)) {
        ds_err("%s: architecture %s, expected %s", path, meta.arch, cfg->arch);
        goto out;
    }
    if (!(flags & DS_CKPT_SKIP_FC) && meta.num_classes != cfg->num_classes) {
        ds_err("%s: %d classes, the model has %d", path, meta.num_classes, cfg->num_classes);
        goto out;
    }
    with_mom = (flags & DS_CKPT_OPTIMIZER) && H5Lexists(f, "optimizer", H5P_DEFAULT) > 0;
    if (with_mom && !cfg->training) with_mom = 0;
    for (int i = 0; i < nt; i++) {
        const ds_tensor_info *t = ds_model_tensor(m, i);
        if ((flags & DS_CKPT_SKIP_FC) && !strncmp(t->name, "fc.", 3)) continue;
        host[i] = ds_xmalloc(t->kind == DS_TENSOR_COUNTER ? sizeof(int64_t) : t->count * sizeof(float));
        if (read_tensor(f, path, "model", t, host[i])) goto out;
        if (with_mom && t->kind == DS_TENSOR_PARAM) {
            mom[i] = ds_xmalloc(t->count * sizeof(float));
            if (read_tensor(f, path, "optimizer", t, mom[i])) goto out;
        }
    }
    /* Everything is read and checked: now the model changes. */
    for (int i = 0; i < nt; i++) {
        if (host[i]) ds_model_tensor_set(m, i, host[i]);
        if (mom[i]) ds_model_momentum_set(m, i, mom[i]);
    }
    if (flags & DS_CKPT_OPTIMIZER) ds_model_set_momentum_started(m, with_mom);
    rc = 0;
out:
    if (f >= 0) H5Fclose(f);
    ds_h5_quiet_end(&q);
    for (int i = 0; i < nt; i++) free(host[i]), free(mom[i]);
    free(host);
    free(mom);
    if (rc == 0 && meta_out) *meta_out = meta;
    else ds_ckpt_meta_free(&meta);
    return rc;
}
