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
    meta->data_fit = DS_FIT_UNSET;
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

/* ---- the root attributes: one table (docs/DESIGN.md §2), walked by the writer, the reader,
 * the requirement check and the documentation test; sqlite keeps its pragmas so ---- */

/* How a field is stored in the file and in ds_ckpt_meta. */
typedef enum {
    K_I32,       /* int32 / int */
    K_I64_INT,   /* int64 / int (the file type these had when they were written as extras) */
    K_I64,       /* int64 / int64_t */
    K_U64,       /* uint64 / uint64_t */
    K_F32,       /* float32 / float */
    K_F64,       /* float64 / double */
    K_CHARS,     /* string / char[cap] */
    K_FIT,       /* string "crop" or "squash" / ds_fit */
    K_STRPTR,    /* string / char * (owned; for people: any other type reads as none) */
} attr_kind;

typedef enum {
    R_HEADER,    /* ds_format, ds_kind: every ds file's, written and checked by h5util */
    R_REQUIRED,  /* a file without it is no checkpoint */
    R_OPTIONAL,  /* may be missing (a converted or hand-written file); always written */
    R_ZERO,      /* may be missing, and 0 says "not recorded" as well; always written */
    R_IF_SET,    /* may be missing; written only when set: value[set_index] != unset ("" for strings) */
} attr_rule;

enum { USE_EVAL = 1 << DS_CKPT_FOR_EVAL, USE_INIT = 1 << DS_CKPT_FOR_INIT, USE_RESUME = 1 << DS_CKPT_FOR_RESUME };

typedef struct {
    const char *name;
    attr_kind kind;
    int count;                 /* values; 1: a scalar */
    size_t offset;             /* the member of ds_ckpt_meta */
    size_t cap;                /* K_CHARS: the member's size */
    attr_rule rule;
    double min, max;           /* numbers: each value that is there is finite and in [min, max] */
    int set_index;             /* R_IF_SET: the value that says whether it is set */
    double unset;
    int (*valid)(const char *);/* strings: the values allowed (NULL: any) */
    const char *valid_what;
    unsigned uses;             /* USE_*: the uses that need it */
    int after_extras;          /* written after the extras (the byte order of older files) */
    const char *type, *meaning;/* DESIGN §2's columns */
    const char *used_by;       /* its "needed by" column where no use requires it (NULL: from uses) */
    const char *options[4];    /* the dstrain option each value records, which --resume takes back */
} ckpt_attr;

static int arch_known(const char *arch) { return ds_arch_known(arch); }

#define M(member) offsetof(ds_ckpt_meta, member)
#define BIG 9.2e18
static const ckpt_attr attrs[] = {
    {.name = "ds_format", .kind = K_I32, .count = 1, .rule = R_HEADER, .uses = USE_EVAL | USE_INIT | USE_RESUME,
     .type = "int32", .meaning = "1"},
    {.name = "ds_kind", .kind = K_CHARS, .count = 1, .rule = R_HEADER, .uses = USE_EVAL | USE_INIT | USE_RESUME,
     .type = "string", .meaning = "`checkpoint`"},
    {.name = "arch", .kind = K_CHARS, .count = 1, .offset = M(arch), .cap = sizeof(((ds_ckpt_meta *)0)->arch),
     .rule = R_REQUIRED, .valid = arch_known, .valid_what = "a known architecture",
     .uses = USE_EVAL | USE_INIT | USE_RESUME, .type = "string", .meaning = "`resnet18` ... `resnet20`"},
    {.name = "num_classes", .kind = K_I32, .count = 1, .offset = M(num_classes), .rule = R_REQUIRED, .min = 1,
     .max = 1e9, .uses = USE_EVAL | USE_INIT | USE_RESUME, .type = "int32", .meaning = "outputs of `fc`"},
    {.name = "input_size", .kind = K_I32, .count = 1, .offset = M(input_size), .rule = R_ZERO, .max = 65536,
     .uses = USE_EVAL, .type = "int32", .meaning = "the crop trained at (0: not recorded)"},
    {.name = "mean", .kind = K_F32, .count = 3, .offset = M(mean), .rule = R_OPTIONAL, .min = -1e30, .max = 1e30,
     .uses = USE_EVAL | USE_RESUME, .type = "float32 [3]", .meaning = "input normalisation on the 0..1 scale"},
    {.name = "std", .kind = K_F32, .count = 3, .offset = M(std), .rule = R_OPTIONAL, .min = 1e-30, .max = 1e30,
     .uses = USE_EVAL | USE_RESUME, .type = "float32 [3]", .meaning = "the same, positive"},
    {.name = "epoch", .kind = K_I64, .count = 1, .offset = M(epoch), .rule = R_OPTIONAL, .max = BIG,
     .uses = USE_RESUME, .type = "int64", .meaning = "finished epochs"},
    {.name = "step", .kind = K_I64, .count = 1, .offset = M(step), .rule = R_OPTIONAL, .max = BIG,
     .uses = USE_RESUME, .type = "int64", .meaning = "global optimizer steps"},
    {.name = "seed", .kind = K_U64, .count = 1, .offset = M(seed), .rule = R_OPTIONAL, .max = 2 * BIG,
     .uses = USE_RESUME, .type = "uint64", .meaning = "`--seed`"},
    {.name = "world_size", .kind = K_I32, .count = 1, .offset = M(world_size), .rule = R_ZERO, .max = 2147483647,
     .uses = USE_RESUME, .type = "int32", .meaning = "ranks; 0 or missing: weights that never trained under ds"},
    {.name = "global_batch", .kind = K_I32, .count = 1, .offset = M(global_batch), .rule = R_ZERO,
     .max = 2147483647, .uses = USE_RESUME, .type = "int32", .meaning = "batch × ranks × accum (0: not recorded)"},
    {.name = "config", .kind = K_STRPTR, .count = 1, .offset = M(config), .rule = R_OPTIONAL, .type = "string",
     .meaning = "every dstrain option as JSON", .used_by = "people"},
    {.name = "data_height", .kind = K_I64_INT, .count = 1, .offset = M(data_height), .rule = R_IF_SET, .min = 1,
     .max = 65535, .type = "int64", .meaning = "the training shards' stored height (default: `input_size` × 8/7)",
     .used_by = "dseval on a manifest"},
    {.name = "data_width", .kind = K_I64_INT, .count = 1, .offset = M(data_width), .rule = R_IF_SET, .min = 1,
     .max = 65535, .type = "int64", .meaning = "their width (with `data_height` or not at all)",
     .used_by = "dseval on a manifest"},
    {.name = "data_fit", .kind = K_FIT, .count = 1, .offset = M(data_fit), .rule = R_IF_SET, .unset = DS_FIT_UNSET,
     .valid_what = "'crop' or 'squash'", .type = "string",
     .meaning = "their fit, `crop` or `squash` (default: `crop`)", .used_by = "dseval on a manifest"},
    {.name = "crop_ramp", .kind = K_I64, .count = 4, .offset = M(crop_ramp), .rule = R_IF_SET, .max = BIG,
     .set_index = 3, .after_extras = 1, .options = {"min-crop", "ramp-start", "ramp-end", "crop-step"},
     .type = "int64 [4]",
     .meaning = "`--min-crop` (0: none), `--ramp-start`, `--ramp-end` (start ≤ end), `--crop-step` (≥ 1)",
     .used_by = "`--resume` (taken when not given again)"},
    {.name = "bn_bias_decay", .kind = K_I32, .count = 1, .offset = M(bn_bias_decay), .rule = R_IF_SET, .max = 1,
     .unset = -1, .after_extras = 1, .options = {"bn-bias-decay"}, .type = "int32",
     .meaning = "1: weight decay on every parameter; 0: not on BN weights/biases and `fc.bias`",
     .used_by = "`--resume` (taken when not given again)"},
    {.name = "epoch_loss_sum", .kind = K_F64, .count = 1, .offset = M(epoch_loss_sum), .rule = R_OPTIONAL,
     .min = -1e300, .max = 1e300, .uses = USE_RESUME, .after_extras = 1, .type = "float64",
     .meaning = "the running epoch's sum of step losses, so a resume inside an epoch reports the same epoch line"},
    {.name = "epoch_seconds", .kind = K_F64, .count = 1, .offset = M(epoch_seconds), .rule = R_OPTIONAL,
     .max = 1e300, .uses = USE_RESUME, .after_extras = 1, .type = "float64",
     .meaning = "its training seconds, likewise"},
};
#undef M
#define NATTRS (int)(sizeof attrs / sizeof attrs[0])

static int is_known_attr(const char *name)
{
    for (int i = 0; i < NATTRS; i++)
        if (!strcmp(attrs[i].name, name)) return 1;
    return 0;
}

static void *field(const ds_ckpt_meta *meta, const ckpt_attr *a) { return (char *)meta + a->offset; }

/* The member's value i as a double (numbers only). */
static double value_at(const ds_ckpt_meta *meta, const ckpt_attr *a, int i)
{
    const void *v = field(meta, a);
    switch (a->kind) {
    case K_I32: case K_I64_INT: return ((const int *)v)[i];
    case K_I64: return (double)((const int64_t *)v)[i];
    case K_U64: return (double)((const uint64_t *)v)[i];
    case K_F32: return ((const float *)v)[i];
    case K_F64: return ((const double *)v)[i];
    case K_FIT: return *(const ds_fit *)v;
    default: return 0;
    }
}

static int is_set(const ds_ckpt_meta *meta, const ckpt_attr *a)
{
    if (a->rule != R_IF_SET) return 1;
    if (a->kind == K_CHARS) return ((const char *)field(meta, a))[0] != 0;
    double v = value_at(meta, a, a->set_index);
    return a->unset < 0 ? v > a->unset : v != a->unset;
}

/* The HDF5 file and memory types of a number kind. */
static void number_types(attr_kind k, hid_t *file_t, hid_t *mem_t)
{
    switch (k) {
    case K_I32: *file_t = H5T_STD_I32LE, *mem_t = H5T_NATIVE_INT; break;
    case K_I64_INT: *file_t = H5T_STD_I64LE, *mem_t = H5T_NATIVE_INT; break;
    case K_I64: *file_t = H5T_STD_I64LE, *mem_t = H5T_NATIVE_INT64; break;
    case K_U64: *file_t = H5T_STD_U64LE, *mem_t = H5T_NATIVE_UINT64; break;
    case K_F32: *file_t = H5T_IEEE_F32LE, *mem_t = H5T_NATIVE_FLOAT; break;
    default: *file_t = H5T_IEEE_F64LE, *mem_t = H5T_NATIVE_DOUBLE; break;
    }
}

/* Writes the table's attributes of one part (before or after the extras) that are set. */
static int write_attrs(hid_t f, const ds_ckpt_meta *meta, int after_extras, const char **what)
{
    for (int i = 0; i < NATTRS; i++) {
        const ckpt_attr *a = &attrs[i];
        if (a->rule == R_HEADER || a->after_extras != after_extras || !is_set(meta, a)) continue;
        *what = a->name;
        int rc;
        if (a->kind == K_CHARS) rc = ds_h5_attr_write_str(f, a->name, (const char *)field(meta, a));
        else if (a->kind == K_FIT) rc = ds_h5_attr_write_str(f, a->name, ds_fit_name(*(const ds_fit *)field(meta, a)));
        else if (a->kind == K_STRPTR) {
            const char *s = *(char *const *)field(meta, a);
            rc = ds_h5_attr_write_str(f, a->name, s ? s : "{}");
        } else {
            hid_t ft, mt;
            number_types(a->kind, &ft, &mt);
            rc = ds_h5_attr_write(f, a->name, ft, mt, a->count > 1 ? a->count : 0, field(meta, a));
        }
        if (rc) return -1;
    }
    return 0;
}

/* Reads every attribute of the table the file holds into meta (defaults where it does not),
 * checking each value; sets meta->found's bit i for attribute i when it is there (and, for
 * R_ZERO, not 0). */
static int read_attrs(hid_t f, const char *path, ds_ckpt_meta *meta)
{
    for (int i = 0; i < NATTRS; i++) {
        const ckpt_attr *a = &attrs[i];
        if (a->rule == R_HEADER) continue;
        if (a->rule == R_ZERO) memset(field(meta, a), 0, a->kind == K_I64 || a->kind == K_U64 ? 8 : 4);
        if (H5Aexists(f, a->name) <= 0) {
            if (a->rule == R_REQUIRED) return ds_err("%s: %s attribute missing", path, a->name);
            continue;
        }
        if (a->kind == K_STRPTR) {
            *(char **)field(meta, a) = ds_h5_attr_read_str(f, a->name);
            meta->found |= 1u << i;
            continue;
        }
        if (a->kind == K_FIT) {
            char *s = ds_h5_attr_read_str(f, a->name);
            int fit = s ? ds_fit_parse(s) : -1;
            free(s);
            if (fit < 0) return ds_err("%s: %s attribute is not %s", path, a->name, a->valid_what);
            *(ds_fit *)field(meta, a) = (ds_fit)fit;
            meta->found |= 1u << i;
            continue;
        }
        if (a->kind == K_CHARS) {
            char *s = ds_h5_attr_read_str(f, a->name);
            int ok = s && strlen(s) < a->cap && (!a->valid || a->valid(s));
            if (ok) snprintf((char *)field(meta, a), a->cap, "%s", s);
            free(s);
            if (!ok) return ds_err("%s: %s attribute is not %s", path, a->name, a->valid_what ? a->valid_what : "a string");
            meta->found |= 1u << i;
            continue;
        }
        hid_t ft, mt;
        number_types(a->kind, &ft, &mt);
        H5T_class_t cls = a->kind == K_F32 || a->kind == K_F64 ? H5T_FLOAT : H5T_INTEGER;
        if (ds_h5_attr_read(f, a->name, cls, mt, a->count, field(meta, a))) {
            const char *what = cls == H5T_INTEGER ? "integer" : "float";
            if (a->count == 1) return ds_err("%s: %s attribute is not a scalar %s", path, a->name, what);
            return ds_err("%s: %s attribute is not %d %s values", path, a->name, a->count, what);
        }
        for (int k = 0; k < a->count; k++) {
            double v = value_at(meta, a, k);
            if (!isfinite(v) || v < a->min || v > a->max)
                return ds_err("%s: %s attribute %g out of range [%g, %g]", path, a->name, v, a->min, a->max);
        }
        if (a->rule != R_ZERO || value_at(meta, a, 0) != 0) meta->found |= 1u << i;
    }
    return 0;
}

/* The rules between attributes, in one place: a data size has both sides, a crop ramp
 * starts before it ends and steps by at least 1. */
static int check_relations(const char *path, const ds_ckpt_meta *meta)
{
    if ((meta->data_height > 0) != (meta->data_width > 0))
        return ds_err("%s: %s attribute missing beside %s", path, meta->data_height ? "data_width" : "data_height",
                      meta->data_height ? "data_height" : "data_width");
    const int64_t *cr = meta->crop_ramp;
    if (cr[3] && (cr[0] > 65535 || cr[2] < cr[1] || cr[3] < 1 || cr[3] > 65535))
        return ds_err("%s: crop_ramp attribute {%lld, %lld, %lld, %lld} is not a min crop, start <= end and a step",
                      path, (long long)cr[0], (long long)cr[1], (long long)cr[2], (long long)cr[3]);
    return 0;
}

static int attr_index(const char *name)
{
    for (int i = 0; i < NATTRS; i++)
        if (!strcmp(attrs[i].name, name)) return i;
    return -1;
}

/* The attribute that records dstrain's --option, and which of its values. */
static const ckpt_attr *recording(const char *option, int *at)
{
    for (int i = 0; i < NATTRS; i++)
        for (int k = 0; k < 4 && attrs[i].options[k]; k++)
            if (!strcmp(attrs[i].options[k], option)) return *at = k, &attrs[i];
    return NULL;
}

int ds_ckpt_meta_record(ds_ckpt_meta *meta, const char *option, long long value)
{
    int k;
    const ckpt_attr *a = recording(option, &k);
    if (!a) return -1;
    if (a->kind == K_I64) ((int64_t *)field(meta, a))[k] = value;
    else ((int *)field(meta, a))[k] = (int)value;
    return 0;
}

int ds_ckpt_meta_recorded(const ds_ckpt_meta *meta, const char *option, long long *value)
{
    int k;
    const ckpt_attr *a = recording(option, &k);
    if (!a) return -1;
    if (!ds_ckpt_meta_has(meta, a->name)) return 0;
    *value = (long long)value_at(meta, a, k);
    return 1;
}

int ds_ckpt_meta_has(const ds_ckpt_meta *meta, const char *name)
{
    if (!strcmp(name, "/classes")) return meta->has_classes;
    int i = attr_index(name);
    return i >= 0 && (meta->found >> i & 1);
}

void ds_ckpt_attributes_doc(FILE *out)
{
    for (int i = 0; i < NATTRS; i++) {
        const ckpt_attr *a = &attrs[i];
        unsigned u = a->uses;
        char needed[96] = "";
        if (a->used_by) snprintf(needed, sizeof needed, "%s", a->used_by);
        else if (u == (USE_EVAL | USE_INIT | USE_RESUME)) snprintf(needed, sizeof needed, "every use");
        else
            snprintf(needed, sizeof needed, "%s%s%s%s", u & USE_EVAL ? "dseval" : "",
                     (u & USE_EVAL) && (u & USE_RESUME) ? ", " : "", u & USE_RESUME ? "`--resume`" : "",
                     a->rule == R_ZERO ? " (non-zero)" : "");
        fprintf(out, "| `%s` | %s | %s | %s |\n", a->name, a->type, a->meaning, needed);
    }
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
    ds_ckpt_meta w = *meta;   /* arch and num_classes are the model's */
    snprintf(w.arch, sizeof w.arch, "%s", cfg->arch);
    w.num_classes = nc;
    *what = "attributes";
    if (ds_h5_write_header(f, "checkpoint") || write_attrs(f, &w, 0, what)) return -1;
    for (int i = 0; i < meta->nextra; i++) {
        const ds_ckpt_attr *a = &meta->extra[i];
        *what = a->name;
        if (is_known_attr(a->name)) return -1;
        int rc = a->type == DS_ATTR_INT     ? ds_h5_attr_write(f, a->name, H5T_STD_I64LE, H5T_NATIVE_INT64, 0, &a->i)
                 : a->type == DS_ATTR_FLOAT ? ds_h5_attr_write(f, a->name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &a->f)
                                            : ds_h5_attr_write_str(f, a->name, a->s ? a->s : "");
        if (rc) return -1;
    }
    if (write_attrs(f, &w, 1, what)) return -1;

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

static int read_meta(hid_t f, const char *path, ds_ckpt_meta *meta)
{
    ds_ckpt_meta_init(meta);
    /* What is there must be well formed and in range, whether a use needs it or not (a
     * hostile 0 would size a model or divide); ds_ckpt_meta_require says which use needs
     * what. */
    if (read_attrs(f, path, meta) || check_relations(path, meta)) return -1;
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

int ds_ckpt_meta_require(const ds_ckpt_meta *meta, const char *path, ds_ckpt_use use)
{
    static const char *const use_names[] = {"evaluation", "--init", "--resume"};
    const char *why = use == DS_CKPT_FOR_RESUME && !ds_ckpt_meta_has(meta, "world_size")
                          ? " (world_size 0 or missing: weights that never trained under ds, which --init can "
                            "start from)"
                          : "";
    for (int i = 0; i < NATTRS; i++) {
        const ckpt_attr *a = &attrs[i];
        if (a->rule == R_HEADER || !(a->uses & (1u << use)) || (meta->found >> i & 1)) continue;
        return ds_err("%s: %s needs the %s attribute%s, which this checkpoint lacks%s", path, use_names[use], a->name,
                      a->rule == R_ZERO ? " (non-zero)" : "", why);
    }
    if (use == DS_CKPT_FOR_RESUME && !meta->has_classes)
        return ds_err("%s: --resume needs the /classes dataset, which this checkpoint lacks%s", path, why);
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
