/* checkpoint: the HDF5 checkpoint of docs/DESIGN.md §2, written and read against a model; its
 * root attributes are checkpoint_attrs.c's table.
 *
 * HDF5's automatic error printing is off while these functions run; each failure becomes one
 * ds_err line naming the file and the object. Loading reads and checks every tensor into
 * host memory before it touches the model, so a refused file leaves the model as it was.
 *
 * Every numeric dataset (each /model/<name> and /optimizer/<name>, /metrics) carries its
 * checksum, the attribute CHECKSUM_ATTR: XXH3-64 (seed 0) of its elements as the file stores
 * them (its file type, row-major). The writer hashes the buffer it writes, the reader the bytes it
 * reads before any conversion, so a flipped bit anywhere in a tensor is named at load. */
#include "checkpoint_internal.h"

#include <errno.h>
#include <hdf5.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fsutil.h"
#include "h5util.h"
#include "log.h"

#if defined(__x86_64__)
#include <xxh_x86dispatch.h>   /* XXH3 at the widest vector width this CPU has, as shard.c */
#else
#include <xxhash.h>
#endif

#define CHECKSUM_ATTR "xxh3_64"

/* ---- meta ---- */

void ds_ckpt_meta_init(ds_ckpt_meta *meta)
{
    static const float imagenet_mean[3] = {0.485f, 0.456f, 0.406f}, imagenet_std[3] = {0.229f, 0.224f, 0.225f};
    memset(meta, 0, sizeof *meta);
    memcpy(meta->mean, imagenet_mean, sizeof meta->mean);
    memcpy(meta->std, imagenet_std, sizeof meta->std);
    meta->world_size = 1;
    meta->lr_effective = -1;
    meta->bn_bias_decay = -1;
    meta->data_fit = DS_FIT_UNSET;
}

void ds_ckpt_meta_free(ds_ckpt_meta *meta)
{
    ds_ckpt_attrs_free(meta);
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

void ds_ckpt_meta_add_history(ds_ckpt_meta *meta, const char *json)
{
    size_t had = meta->history ? strlen(meta->history) : 0, len = strlen(json);
    meta->history = ds_xrealloc(meta->history, had + len + 2);
    if (had) meta->history[had++] = '\n';
    memcpy(meta->history + had, json, len + 1);
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

/* *to = a copy of v (NULL: none) */
static void set_text(char **to, const char *v)
{
    free(*to);
    *to = v ? ds_xstrdup(v) : NULL;
}

void ds_ckpt_meta_set_backend(ds_ckpt_meta *meta, const ds_backend *be)
{
    set_text(&meta->device, be->name);
    set_text(&meta->precision, ds_precision_name(be->precision));
    set_text(&meta->kernels, be->kernel_set ? be->kernel_set() : NULL);
    set_text(&meta->reduction, be->reduction ? be->reduction() : NULL);
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

/* ---- checksums ---- */

/* *h = XXH3-64 of the n elements of mem_t at data as a file stores them in file_t. */
static int stored_hash(hid_t file_t, hid_t mem_t, const void *data, size_t n, uint64_t *h)
{
    size_t fs = H5Tget_size(file_t), ms = H5Tget_size(mem_t);
    htri_t same = H5Tequal(file_t, mem_t);
    if (!fs || !ms || same < 0) return -1;
    if (n == 0 || same) {
        *h = XXH3_64bits(n ? data : "", n * fs);
        return 0;
    }
    /* the file's byte order or width is not the host's: hash what HDF5 will store */
    void *buf = ds_xmalloc(n * (fs > ms ? fs : ms));
    memcpy(buf, data, n * ms);
    int rc = H5Tconvert(mem_t, file_t, n, buf, NULL, H5P_DEFAULT) < 0 ? -1 : 0;
    if (!rc) *h = XXH3_64bits(buf, n * fs);
    free(buf);
    return rc;
}

/* ds_h5_write_dataset, and the dataset's checksum attribute. */
static int write_checked(hid_t loc, const char *name, hid_t file_t, hid_t mem_t, int rank, const hsize_t *dims,
                         const void *data)
{
    size_t n = 1;
    for (int i = 0; i < rank; i++) n *= (size_t)dims[i];
    uint64_t h;
    if (stored_hash(file_t, mem_t, data, n, &h) || ds_h5_write_dataset(loc, name, file_t, mem_t, rank, dims, data))
        return -1;
    hid_t d = H5Dopen2(loc, name, H5P_DEFAULT);
    if (d < 0) return -1;
    int rc = ds_h5_attr_write(d, CHECKSUM_ATTR, H5T_STD_U64LE, H5T_NATIVE_UINT64, 0, &h);
    if (H5Dclose(d) < 0) rc = -1;
    return rc;
}

/* Reads the n elements of dataset d (/obj of path) into out as mem_t. When d carries a
 * checksum, the stored bytes are read unconverted, hashed and compared before they are
 * converted into out; *checked says whether it had one. -1 with a message naming the file
 * and the dataset. */
static int read_checked(hid_t d, const char *path, const char *obj, hid_t mem_t, size_t n, void *out, int *checked)
{
    htri_t has = H5Aexists(d, CHECKSUM_ATTR);
    *checked = has > 0;
    if (has < 0) return ds_err("%s: cannot read /%s (truncated or damaged file)", path, obj);
    if (!has) {
        if (n && H5Dread(d, mem_t, H5S_ALL, H5S_ALL, H5P_DEFAULT, out) < 0)
            return ds_err("%s: cannot read /%s (truncated or damaged file)", path, obj);
        return 0;
    }
    uint64_t want;
    if (ds_h5_attr_read(d, CHECKSUM_ATTR, H5T_INTEGER, H5T_NATIVE_UINT64, 1, &want))
        return ds_err("%s: /%s: its %s attribute is not an integer scalar", path, obj, CHECKSUM_ATTR);
    hid_t ft = H5Dget_type(d);
    size_t fs = ft >= 0 ? H5Tget_size(ft) : 0, ms = H5Tget_size(mem_t);
    htri_t same = ft >= 0 ? H5Tequal(ft, mem_t) : -1;
    int rc = 0;
    void *raw = same > 0 ? out : ds_xmalloc(n * (fs > ms ? fs : ms) + 1);
    if (same < 0 || !fs || !ms || (n && H5Dread(d, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, raw) < 0))
        rc = ds_err("%s: cannot read /%s (truncated or damaged file)", path, obj);
    uint64_t got = rc ? 0 : XXH3_64bits(raw, n * fs);
    if (!rc && got != want)
        rc = ds_err("%s: /%s is corrupt: its stored bytes hash to %llu, its %s attribute holds %llu (the file "
                    "changed after dstrain wrote it: restore it from a copy)",
                    path, obj, (unsigned long long)got, CHECKSUM_ATTR, (unsigned long long)want);
    if (!rc && same == 0 && n) {   /* another width or byte order than the host's */
        void *bkg = ds_xcalloc(n, ms);
        if (H5Tconvert(ft, mem_t, n, raw, bkg, H5P_DEFAULT) < 0)
            rc = ds_err("%s: cannot convert /%s from its stored type", path, obj);
        else
            memcpy(out, raw, n * ms);
        free(bkg);
    }
    if (raw != out) free(raw);
    if (ft >= 0) H5Tclose(ft);
    return rc;
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
            rc = write_checked(g, t->name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, dims, &v);
            continue;
        }
        if (t->count > cap) buf = ds_xrealloc(buf, (cap = t->count) * sizeof *buf);
        if (momentum) rc = ds_model_momentum_get(m, i, buf);
        else ds_model_tensor_get(m, i, buf);
        if (!rc) rc = write_checked(g, t->name, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT, t->ndim, dims, buf);
    }
    free(buf);
    if (H5Gclose(g) < 0) rc = -1;
    return rc;
}

static int write_meta(hid_t f, ds_model *m, const ds_ckpt_meta *meta, const char **what)
{
    const ds_model_config *cfg = ds_model_config_of(m);
    int nc = cfg->num_classes;
    ds_ckpt_meta w = *meta;   /* arch and num_classes are the model's */
    snprintf(w.arch, sizeof w.arch, "%s", cfg->arch);
    w.num_classes = nc;
    *what = "attributes";
    if (ds_h5_write_header(f, "checkpoint") || ds_ckpt_attrs_write(f, &w, 0, what)) return -1;
    for (int i = 0; i < meta->nextra; i++) {
        const ds_ckpt_attr *a = &meta->extra[i];
        *what = a->name;
        if (ds_ckpt_attr_known(a->name)) return -1;
        int rc = a->type == DS_ATTR_INT     ? ds_h5_attr_write(f, a->name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &a->i)
                 : a->type == DS_ATTR_FLOAT ? ds_h5_attr_write(f, a->name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &a->f)
                                            : ds_h5_attr_write_str(f, a->name, a->s ? a->s : "");
        if (rc) return -1;
    }
    if (ds_ckpt_attrs_write(f, &w, 1, what)) return -1;

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
    rc = write_checked(f, "metrics", mt, mt, 1, dims, meta->metrics);
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
    if (meta->data_fit != DS_FIT_UNSET && meta->data_fit != DS_FIT_CROP && meta->data_fit != DS_FIT_SQUASH)
        return ds_err("%s: data_fit %d is not crop or squash", path, (int)meta->data_fit);
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
    if (ds_ckpt_attr_known(name)) return 0;
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
    int rc = -1, checked;
    if (mt >= 0 && n >= 0) {
        meta->metrics = ds_xcalloc((size_t)(n ? n : 1), sizeof *meta->metrics);
        meta->nmetrics = (int)n;
        rc = read_checked(d, path, "metrics", mt, (size_t)n, meta->metrics, &checked) ? -2 : 0;
    }
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    if (mt >= 0) H5Tclose(mt);
    if (rc == -1) return ds_err("%s: /metrics unreadable", path);
    return rc ? -1 : 0;
}

static int read_meta(hid_t f, const char *path, ds_ckpt_meta *meta)
{
    ds_ckpt_meta_init(meta);
    /* What is there must be well formed and in range, whether a use needs it or not (a
     * hostile 0 would size a model or divide); ds_ckpt_meta_require says which use needs
     * what. */
    if (ds_ckpt_attrs_read(f, path, meta)) return -1;
    int nc = meta->num_classes;

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
    meta->has_classes = 1;
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

/* Reads /group/<name> into host (float[count], or int64 for a counter) after checking it
 * exists with the tensor's shape and type class, and its checksum where it has one (*checked). */
static int read_tensor(hid_t f, const char *path, const char *group, const ds_tensor_info *t, void *host,
                       int *checked)
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
    if (ok)
        ok = read_checked(d, path, obj, counter ? H5T_NATIVE_INT64 : H5T_NATIVE_FLOAT, counter ? 1 : t->count, host,
                          checked) ? -1 : 1;
    if (sp >= 0) H5Sclose(sp);
    if (ty >= 0) H5Tclose(ty);
    H5Dclose(d);
    if (ok == -1) return -1;
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
    int with_mom = 0, checked, nchecked = 0, nunchecked = 0;
    char unchecked[160] = "";   /* the first tensor without a checksum */
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
        if (read_tensor(f, path, "model", t, host[i], &checked)) goto out;
        nchecked += checked, nunchecked += !checked;
        if (!checked && !unchecked[0]) snprintf(unchecked, sizeof unchecked, "/model/%s", t->name);
        if (with_mom && t->kind == DS_TENSOR_PARAM) {
            mom[i] = ds_xmalloc(t->count * sizeof(float));
            if (read_tensor(f, path, "optimizer", t, mom[i], &checked)) goto out;
            nchecked += checked, nunchecked += !checked;
            if (!checked && !unchecked[0]) snprintf(unchecked, sizeof unchecked, "/optimizer/%s", t->name);
        }
    }
    /* dstrain checksums every tensor it writes: one without, beside others with, lost its
     * attribute to damage. A file with none (an older build's, or an import) loads unverified. */
    if (nchecked && nunchecked) {
        ds_err("%s: tensor %s has no %s checksum where %d others have one (the file changed after dstrain wrote "
               "it: restore it from a copy)", path, unchecked, CHECKSUM_ATTR, nchecked);
        goto out;
    }
    if (nunchecked)
        ds_debug("%s: its tensors carry no %s checksums (written by an older build or an import): loaded unverified",
                 path, CHECKSUM_ATTR);
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
