/* checkpoint_attrs: the root attributes of a checkpoint (docs/DESIGN.md §2) as one table,
 * walked by the writer, the reader, the requirement check, dstrain's recorded options and
 * the documentation test (sqlite keeps its pragmas so). */
#include "checkpoint_internal.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5util.h"
#include "log.h"

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
    K_STRPTR,    /* string / char * (owned, NULL: unset; for people: any other type reads as
                    none) */
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
/* crop_ramp's row reads and writes the struct as the int64[4] of its options' order. */
_Static_assert(sizeof(ds_crop_ramp) == 4 * sizeof(int64_t) && offsetof(ds_crop_ramp, min) == 0 &&
                   offsetof(ds_crop_ramp, start) == 8 && offsetof(ds_crop_ramp, end) == 16 &&
                   offsetof(ds_crop_ramp, step) == 24,
               "ds_crop_ramp is the crop_ramp attribute's four int64 values in order");
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
     .meaning = "every dstrain option as JSON (`train`, `val` as absolute paths)",
     .used_by = "`--resume` (taken when not given again)"},
    {.name = "data_height", .kind = K_I64_INT, .count = 1, .offset = M(data_height), .rule = R_IF_SET, .min = 1,
     .max = 65535, .type = "int64", .meaning = "the training shards' stored height (default: `input_size` × 8/7)",
     .used_by = "dseval on a manifest"},
    {.name = "data_width", .kind = K_I64_INT, .count = 1, .offset = M(data_width), .rule = R_IF_SET, .min = 1,
     .max = 65535, .type = "int64", .meaning = "their width (with `data_height` or not at all)",
     .used_by = "dseval on a manifest"},
    {.name = "data_fit", .kind = K_FIT, .count = 1, .offset = M(data_fit), .rule = R_IF_SET, .unset = DS_FIT_UNSET,
     .valid_what = "'crop' or 'squash'", .type = "string",
     .meaning = "their fit, `crop` or `squash` (default: `crop`)", .used_by = "dseval on a manifest"},
    {.name = "lr_effective", .kind = K_F64, .count = 1, .offset = M(lr_effective), .rule = R_IF_SET, .max = 1e300,
     .unset = -1, .type = "float64", .meaning = "the peak learning rate the run used (`--lr` after `--lr-scaling`)",
     .used_by = "people"},
    {.name = "device", .kind = K_STRPTR, .count = 1, .offset = M(device), .rule = R_IF_SET, .type = "string",
     .meaning = "the backend that trained, `cpu` or `cuda`", .used_by = "people"},
    {.name = "precision", .kind = K_STRPTR, .count = 1, .offset = M(precision), .rule = R_IF_SET, .type = "string",
     .meaning = "what it computed in, `fp32`, `tf32` or `bf16`", .used_by = "people"},
    {.name = "kernels", .kind = K_STRPTR, .count = 1, .offset = M(kernels), .rule = R_IF_SET, .type = "string",
     .meaning = "its CPU kernel set, `plain` ... `avx512+bf16+amx` (none on a GPU)", .used_by = "people"},
    {.name = "reduction", .kind = K_STRPTR, .count = 1, .offset = M(reduction), .rule = R_IF_SET, .type = "string",
     .meaning = "how it summed the gradients, `ordered`, `nccl-allreduce` or `accumulate`", .used_by = "people"},
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
    {.name = "train_digest", .kind = K_U64, .count = 1, .offset = M(train_digest), .rule = R_IF_SET,
     .max = 18446744073709551616.0,
     .after_extras = 1, .type = "uint64",
     .meaning = "XXH3-64 of the training set: its count, size, fit, classes, labels, paths and pixel checksums",
     .used_by = "`--resume` (another training set is a change)"},
    {.name = "history", .kind = K_STRPTR, .count = 1, .offset = M(history), .rule = R_IF_SET, .after_extras = 1,
     .type = "string",
     .meaning = "one JSON line per resume: its step, the checkpoint it took, the options it changed (`from`, `to`), "
                "the later checkpoints it moved aside",
     .used_by = "people"},
};
#undef M
#define NATTRS (int)(sizeof attrs / sizeof attrs[0])
_Static_assert(sizeof attrs / sizeof attrs[0] <= 8 * sizeof(unsigned), "ds_ckpt_meta.found has a bit per attribute");

int ds_ckpt_attr_known(const char *name)
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
    if (a->kind == K_STRPTR) return *(char *const *)field(meta, a) != NULL;
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

int ds_ckpt_attrs_write(hid_t f, const ds_ckpt_meta *meta, int after_extras, const char **what)
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
    const ds_crop_ramp *r = &meta->crop_ramp;
    if (r->step && (r->min > 65535 || r->end < r->start || r->step < 1 || r->step > 65535))
        return ds_err("%s: crop_ramp attribute {%lld, %lld, %lld, %lld} is not a min crop, start <= end and a step",
                      path, (long long)r->min, (long long)r->start, (long long)r->end, (long long)r->step);
    return 0;
}

int ds_ckpt_attrs_read(hid_t f, const char *path, ds_ckpt_meta *meta)
{
    return read_attrs(f, path, meta) || check_relations(path, meta) ? -1 : 0;
}

void ds_ckpt_attrs_free(ds_ckpt_meta *meta)
{
    for (int i = 0; i < NATTRS; i++)
        if (attrs[i].kind == K_STRPTR) {
            char **s = (char **)field(meta, &attrs[i]);
            free(*s);
            *s = NULL;
        }
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
    fprintf(out, "| anything else | | an extra: kept and rewritten, read by no tool | people |\n");
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
