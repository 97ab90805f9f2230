/* test_checkpoint: save -> load gives identical bytes of every tensor, momentum and meta;
 * the typed fields keep the attribute names and types they had as extras, and those left
 * unset are not written; each use asks for its own attributes; the same state saves to the
 * same file bytes; every refusal names the file and leaves the model unchanged; every numeric
 * dataset carries the XXH3-64 of its stored bytes, and a flipped byte, a lost checksum or one
 * of other bytes is named at load while a file with none loads; DESIGN §2's attribute table
 * is the code's. */
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "../check.h"
#include "backend.h"
#include "checkpoint.h"
#include "fsutil.h"
#include "log.h"
#include "model.h"

static char dir[256];

static ds_model *make(const char *arch, int classes)
{
    ds_model_config cfg = {.arch = arch, .num_classes = classes, .max_batch = 2, .height = 16,
                           .width = 16, .training = 1};
    return ds_model_create(&ds_backend_cpu, &cfg);
}

/* One training step so momentum, running stats and counters all hold non-initial values. */
static void train_step(ds_model *m)
{
    size_t count = 2 * 16 * 16 * 3;
    float x[2 * 16 * 16 * 3];
    for (size_t i = 0; i < count; i++) x[i] = (float)((i * 7919) % 101) / 50.0f - 1.0f;
    ds_backend_cpu.upload(ds_model_input(m), x, sizeof x);
    int32_t labels[2] = {1, 3};
    ds_sgd sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 0, .bn_bias_decay = 1};
    ds_model_zero_reduction(m);
    ds_model_forward(m, 2, 1);
    ds_model_backward(m, labels, 2, 0.5f, 0);
    ds_model_step(m, &sgd, 1);
}

/* Number of tensors (model, momentum, counters) whose bytes differ between a and b. */
static int differing(ds_model *a, ds_model *b)
{
    int diff = 0;
    for (int i = 0; i < ds_model_tensor_count(a); i++) {
        const ds_tensor_info *t = ds_model_tensor(a, i);
        size_t bytes = t->kind == DS_TENSOR_COUNTER ? 8 : t->count * 4;
        char *x = malloc(bytes), *y = malloc(bytes);
        ds_model_tensor_get(a, i, x);
        ds_model_tensor_get(b, i, y);
        diff += memcmp(x, y, bytes) != 0;
        if (t->kind == DS_TENSOR_PARAM) {
            ds_model_momentum_get(a, i, (float *)x);
            ds_model_momentum_get(b, i, (float *)y);
            diff += memcmp(x, y, bytes) != 0;
        }
        free(x);
        free(y);
    }
    return diff;
}

static char *path_in(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void test_round_trip(void)
{
    check_begin("round_trip");
    ds_model *a = make("resnet20", 5), *b = make("resnet20", 5);
    ds_model_init(a, 1);
    ds_model_init(b, 2);
    train_step(a);
    ds_ckpt_meta meta;
    ds_ckpt_meta_init(&meta);
    char *classes[5] = {"cat", "dog", "ünï", "b", "e"};
    ds_ckpt_meta_set_classes(&meta, classes, 5);
    ds_ckpt_meta_set_config(&meta, "{\"lr\": 0.1}");
    meta.epoch = 3;
    meta.step = 1234;
    meta.seed = 0xfedcba9876543210ull;
    meta.input_size = 16;
    meta.global_batch = 64;
    meta.world_size = 2;
    ds_metrics_row row = {.epoch = 1, .train_loss = 2.5, .val_top1 = 0.25, .val_top5 = 0.75,
                          .images_per_s = 100, .seconds = 9};
    ds_ckpt_meta_add_metrics(&meta, &row);
    row.epoch = 2;
    ds_ckpt_meta_add_metrics(&meta, &row);
    ds_ckpt_meta_set_string(&meta, "fit", "crop");
    ds_ckpt_meta_set_int(&meta, "data_size", 256);
    ds_ckpt_meta_set_float(&meta, "best_top1", 0.5);
    meta.data_height = 20;
    meta.data_width = 24;
    meta.data_fit = DS_FIT_SQUASH;
    meta.epoch_loss_sum = 12.25;
    meta.epoch_seconds = 3.5;
    meta.lr_effective = 0.025;
    ds_ckpt_meta_set_backend(&meta, &ds_backend_cpu);
    CHECK(ds_ckpt_save(path_in("a.h5"), a, &meta) == 0, "save");
    CHECK(access(path_in("a.h5.tmp"), F_OK) != 0, "tmp file left behind");

    ds_ckpt_meta got;
    CHECK(ds_ckpt_load(path_in("a.h5"), b, &got, DS_CKPT_OPTIMIZER) == 0, "load");
    CHECK(differing(a, b) == 0, "%d tensors differ after load", differing(a, b));
    CHECK(ds_model_momentum_started(b), "momentum state not restored");
    CHECK(!strcmp(got.arch, "resnet20") && got.num_classes == 5 && got.epoch == 3 && got.step == 1234 &&
          got.seed == meta.seed && got.input_size == 16 && got.global_batch == 64 && got.world_size == 2,
          "scalar meta");
    CHECK(got.classes && !strcmp(got.classes[2], "ünï") && !strcmp(got.classes[4], "e"), "classes");
    CHECK(got.config && !strcmp(got.config, "{\"lr\": 0.1}"), "config");
    CHECK(got.nmetrics == 2 && got.metrics[1].epoch == 2 && got.metrics[0].val_top5 == 0.75, "metrics");
    const ds_ckpt_attr *fit = ds_ckpt_meta_get(&got, "fit"), *size = ds_ckpt_meta_get(&got, "data_size"),
                       *best = ds_ckpt_meta_get(&got, "best_top1");
    CHECK(fit && fit->type == DS_ATTR_STRING && !strcmp(fit->s, "crop"), "extra string");
    CHECK(size && size->type == DS_ATTR_INT && size->i == 256, "extra int");
    CHECK(best && best->type == DS_ATTR_FLOAT && best->f == 0.5, "extra float");
    CHECK(fabs(got.mean[0] - 0.485f) < 1e-7 && fabs(got.std[2] - 0.225f) < 1e-7, "mean/std");
    CHECK(got.data_height == 20 && got.data_width == 24 && got.data_fit == DS_FIT_SQUASH, "data size and fit");
    CHECK(got.epoch_loss_sum == 12.25 && got.epoch_seconds == 3.5, "epoch sums");
    CHECK(got.lr_effective == 0.025 && got.device && !strcmp(got.device, "cpu") && got.precision &&
              !strcmp(got.precision, "fp32") && got.kernels && !strcmp(got.kernels, ds_backend_cpu.kernel_set()) &&
              got.reduction && !strcmp(got.reduction, "ordered"),
          "what computed the run");
    CHECK(!ds_ckpt_meta_get(&got, "data_height") && !ds_ckpt_meta_get(&got, "epoch_seconds") &&
              !ds_ckpt_meta_get(&got, "device") && !ds_ckpt_meta_get(&got, "lr_effective"),
          "a typed field also read as an extra");
    static const char *const held[] = {"arch", "num_classes", "input_size", "mean", "std", "epoch", "step", "seed",
                                       "world_size", "global_batch", "config", "data_height", "data_width",
                                       "data_fit", "lr_effective", "device", "precision", "kernels", "reduction",
                                       "epoch_loss_sum", "epoch_seconds", "/classes"};
    for (size_t i = 0; i < sizeof held / sizeof *held; i++)
        CHECK(ds_ckpt_meta_has(&got, held[i]), "%s not seen in the file", held[i]);
    CHECK(!ds_ckpt_meta_has(&got, "crop_ramp") && !ds_ckpt_meta_has(&got, "bn_bias_decay"),
          "settings the run did not record seen as held");
    for (int use = DS_CKPT_FOR_EVAL; use <= DS_CKPT_FOR_RESUME; use++)
        CHECK(ds_ckpt_meta_require(&got, "a.h5", (ds_ckpt_use)use) == 0, "a full checkpoint refused for use %d", use);
    ds_ckpt_meta_free(&got);

    /* The file format: the names and types these fields had when dstrain wrote them as
     * extras (int64, fixed string, float64), so old and new files read alike. */
    hid_t h = H5Fopen(path_in("a.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
    static const struct {
        const char *name;
        H5T_class_t cls;
        size_t size;
    } typed[] = {{"data_height", H5T_INTEGER, 8}, {"data_width", H5T_INTEGER, 8}, {"data_fit", H5T_STRING, 6},
                 {"lr_effective", H5T_FLOAT, 8},      {"device", H5T_STRING, 3},       {"precision", H5T_STRING, 4},
                 {"reduction", H5T_STRING, 7},        {"epoch_loss_sum", H5T_FLOAT, 8}, {"epoch_seconds", H5T_FLOAT, 8}};
    for (size_t i = 0; i < sizeof typed / sizeof *typed; i++) {
        hid_t at = H5Aexists(h, typed[i].name) > 0 ? H5Aopen(h, typed[i].name, H5P_DEFAULT) : -1;
        hid_t ty = at >= 0 ? H5Aget_type(at) : -1;
        CHECK(ty >= 0 && H5Tget_class(ty) == typed[i].cls && H5Tget_size(ty) == typed[i].size &&
                  (typed[i].cls != H5T_STRING || H5Tis_variable_str(ty) == 0),
              "attribute %s missing or of another type", typed[i].name);
        if (ty >= 0) H5Tclose(ty);
        if (at >= 0) H5Aclose(at);
    }
    H5Fclose(h);

    /* same state, same bytes */
    CHECK(ds_ckpt_save(path_in("b.h5"), b, &meta) == 0, "save b");
    size_t la, lb;
    char *fa = ds_read_file(path_in("a.h5"), &la), *fb = ds_read_file(path_in("b.h5"), &lb);
    CHECK(fa && fb && la == lb && !memcmp(fa, fb, la), "two saves of one state differ (%zu vs %zu bytes)", la, lb);
    free(fa);
    free(fb);
    ds_ckpt_meta_free(&meta);
    ds_model_free(a);
    ds_model_free(b);
    check_end();
}

/* A checkpoint with only the attributes every use needs: --init takes it, evaluation and
 * --resume each name what they miss; world_size 0 counts as missing. */
static void test_uses(void)
{
    check_begin("uses");
    hid_t h = H5Fcreate(path_in("bare.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    hid_t str = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR);
    H5Tset_size(str, H5T_VARIABLE);  /* as h5py writes a Python str */
    const char *kind = "checkpoint", *arch = "resnet20";
    int one = 1, nc = 5, zero = 0;
    hid_t at = H5Acreate2(h, "ds_format", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_INT, &one), H5Aclose(at);
    at = H5Acreate2(h, "ds_kind", str, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, str, &kind), H5Aclose(at);
    at = H5Acreate2(h, "arch", str, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, str, &arch), H5Aclose(at);
    at = H5Acreate2(h, "num_classes", H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_INT, &nc), H5Aclose(at);
    at = H5Acreate2(h, "world_size", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_INT, &zero), H5Aclose(at);
    H5Sclose(sp), H5Tclose(str), H5Fclose(h);

    ds_ckpt_meta meta;
    CHECK(ds_ckpt_read_meta(path_in("bare.h5"), &meta) == 0, "a bare checkpoint's metadata refused");
    CHECK(!ds_ckpt_meta_has(&meta, "world_size") && !ds_ckpt_meta_has(&meta, "input_size") &&
              !ds_ckpt_meta_has(&meta, "/classes") && meta.world_size == 0 && !meta.classes && meta.num_classes == 5,
          "a bare file's fields seen as held");
    fprintf(stderr, "  ");
    CHECK(ds_ckpt_meta_require(&meta, "bare.h5", DS_CKPT_FOR_INIT) == 0, "--init refused");
    CHECK(ds_ckpt_meta_require(&meta, "bare.h5", DS_CKPT_FOR_EVAL) != 0, "evaluation accepted");
    fprintf(stderr, "  ");
    CHECK(ds_ckpt_meta_require(&meta, "bare.h5", DS_CKPT_FOR_RESUME) != 0, "--resume accepted");
    ds_ckpt_meta_free(&meta);
    /* with input_size, mean and std it evaluates (and still does not resume) */
    h = H5Fopen(path_in("bare.h5"), H5F_ACC_RDWR, H5P_DEFAULT);
    int input = 16;
    float three[3] = {0.5f, 0.5f, 0.5f};
    hsize_t d3[1] = {3};
    hid_t sp3 = H5Screate_simple(1, d3, NULL);
    sp = H5Screate(H5S_SCALAR);
    at = H5Acreate2(h, "input_size", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_INT, &input), H5Aclose(at);
    at = H5Acreate2(h, "mean", H5T_IEEE_F32LE, sp3, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_FLOAT, three), H5Aclose(at);
    at = H5Acreate2(h, "std", H5T_IEEE_F32LE, sp3, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(at, H5T_NATIVE_FLOAT, three), H5Aclose(at);
    H5Sclose(sp3), H5Sclose(sp), H5Fclose(h);
    CHECK(ds_ckpt_read_meta(path_in("bare.h5"), &meta) == 0, "bare + input_size, mean, std refused");
    CHECK(ds_ckpt_meta_require(&meta, "bare.h5", DS_CKPT_FOR_EVAL) == 0, "evaluation refused");
    fprintf(stderr, "  ");
    CHECK(ds_ckpt_meta_require(&meta, "bare.h5", DS_CKPT_FOR_RESUME) != 0, "--resume accepted");
    ds_ckpt_meta_free(&meta);
    check_end();
}

/* Rewrites one tensor of a copy of a.h5 with another shape. */
static int write_misshapen(const char *src, const char *dst, const char *tensor, int remove_only)
{
    size_t len;
    char *bytes = ds_read_file(src, &len);
    FILE *f = fopen(dst, "wb");
    if (!bytes || !f || fwrite(bytes, 1, len, f) != len) return -1;
    fclose(f);
    free(bytes);
    hid_t h = H5Fopen(dst, H5F_ACC_RDWR, H5P_DEFAULT);
    if (h < 0) return -1;
    char name[128];
    snprintf(name, sizeof name, "model/%s", tensor);
    if (H5Ldelete(h, name, H5P_DEFAULT) < 0) return -1;
    if (!remove_only) {
        hsize_t dims[1] = {3};
        float v[3] = {0};
        hid_t sp = H5Screate_simple(1, dims, NULL);
        hid_t d = H5Dcreate2(h, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (d < 0 || H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) < 0) return -1;
        H5Dclose(d);
        H5Sclose(sp);
    }
    return H5Fclose(h) < 0 ? -1 : 0;
}

static void expect_refused(ds_model *m, ds_model *orig, const char *path, int flags, const char *what)
{
    /* the message goes to stderr; the test checks the return and that nothing changed */
    fprintf(stderr, "  [%s] ", what);
    CHECK(ds_ckpt_load(path, m, NULL, flags) != 0, "%s accepted", what);
    CHECK(differing(m, orig) == 0, "%s: model changed by a refused load", what);
}

static void test_refusals(void)
{
    check_begin("refusals");
    ds_model *src = make("resnet20", 5), *m = make("resnet20", 5), *orig = make("resnet20", 5);
    ds_model_init(src, 1);
    ds_model_init(m, 9);
    ds_model_init(orig, 9);
    ds_ckpt_meta meta;
    ds_ckpt_meta_init(&meta);
    CHECK(ds_ckpt_save(path_in("src.h5"), src, &meta) == 0, "save");
    /* a meta that records nothing for people writes none of those attributes */
    ds_ckpt_meta bare;
    CHECK(ds_ckpt_read_meta(path_in("src.h5"), &bare) == 0, "read back");
    static const char *const unset[] = {"lr_effective", "device", "precision", "kernels", "reduction"};
    for (size_t i = 0; i < sizeof unset / sizeof *unset; i++)
        CHECK(!ds_ckpt_meta_has(&bare, unset[i]), "%s written, never set", unset[i]);
    CHECK(bare.lr_effective < 0 && !bare.device && !bare.kernels, "unset fields read back set");
    ds_ckpt_meta_free(&bare);

    FILE *f = fopen(path_in("text.h5"), "w");
    fputs("hello\n", f);
    fclose(f);
    expect_refused(m, orig, path_in("text.h5"), 0, "not HDF5");
    expect_refused(m, orig, path_in("nonexistent.h5"), 0, "missing file");

    hid_t h = H5Fcreate(path_in("plain.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    H5Fclose(h);
    expect_refused(m, orig, path_in("plain.h5"), 0, "HDF5 without ds_format");

    ds_model *r18 = make("resnet18", 5);
    ds_model_init(r18, 1);
    CHECK(ds_ckpt_save(path_in("r18.h5"), r18, &meta) == 0, "save r18");
    ds_model_free(r18);
    expect_refused(m, orig, path_in("r18.h5"), 0, "another architecture");

    ds_model *c7 = make("resnet20", 7);
    ds_model_init(c7, 1);
    CHECK(ds_ckpt_save(path_in("c7.h5"), c7, &meta) == 0, "save c7");
    expect_refused(m, orig, path_in("c7.h5"), 0, "another class count");
    /* ... which --init may take without its fc */
    CHECK(ds_ckpt_load(path_in("c7.h5"), m, NULL, DS_CKPT_SKIP_FC) == 0, "skip-fc load refused");
    float a[16 * 3 * 9], b[16 * 3 * 9];
    ds_model_tensor_get(m, 0, a);
    ds_model_tensor_get(c7, 0, b);
    CHECK(!memcmp(a, b, sizeof a), "skip-fc load did not load conv1");
    ds_model_init(m, 9);
    ds_model_free(c7);

    CHECK(write_misshapen(path_in("src.h5"), path_in("shape.h5"), "layer2.0.bn1.running_var", 0) == 0, "edit");
    expect_refused(m, orig, path_in("shape.h5"), 0, "misshapen tensor");
    CHECK(write_misshapen(path_in("src.h5"), path_in("gone.h5"), "fc.bias", 1) == 0, "edit");
    expect_refused(m, orig, path_in("gone.h5"), 0, "missing tensor");

    size_t len;
    char *bytes = ds_read_file(path_in("src.h5"), &len);
    f = fopen(path_in("trunc.h5"), "wb");
    fwrite(bytes, 1, len / 2, f);
    fclose(f);
    free(bytes);
    expect_refused(m, orig, path_in("trunc.h5"), 0, "truncated");
    fputc('\n', stderr);

    ds_ckpt_meta_free(&meta);
    ds_model_free(src);
    ds_model_free(m);
    ds_model_free(orig);
    check_end();
}

/* A copy of src at dst. */
static int copy_file(const char *src, const char *dst)
{
    size_t len;
    char *bytes = ds_read_file(src, &len);
    FILE *f = fopen(dst, "wb");
    int rc = bytes && f && fwrite(bytes, 1, len, f) == len ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    free(bytes);
    return rc;
}

/* The stored bytes of dataset d (its own type, unconverted): what the checksum covers. */
static void *stored_bytes(hid_t d, size_t *len)
{
    hid_t t = H5Dget_type(d), sp = H5Dget_space(d);
    *len = (size_t)H5Sget_simple_extent_npoints(sp) * H5Tget_size(t);
    void *buf = malloc(*len + 1);
    if (*len && H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) *len = 0;
    H5Tclose(t);
    H5Sclose(sp);
    return buf;
}

/* Checks every dataset of group g: its xxh3_64 attribute is the XXH3-64 of its stored bytes. */
static int checked_datasets(hid_t f, const char *group)
{
    hid_t g = H5Gopen2(f, group, H5P_DEFAULT);
    hsize_t n = 0;
    H5Gget_num_objs(g, &n);
    int good = 0;
    for (hsize_t i = 0; i < n; i++) {
        char name[128];
        H5Gget_objname_by_idx(g, i, name, sizeof name);
        hid_t d = H5Dopen2(g, name, H5P_DEFAULT);
        size_t len;
        void *bytes = stored_bytes(d, &len);
        uint64_t want = XXH3_64bits(bytes, len), got = 0;
        int has = H5Aexists(d, "xxh3_64") > 0;
        if (has) {
            hid_t a = H5Aopen(d, "xxh3_64", H5P_DEFAULT);
            H5Aread(a, H5T_NATIVE_UINT64, &got);
            H5Aclose(a);
        }
        CHECK(has && got == want, "/%s/%s: xxh3_64 %s %llu, its stored bytes hash to %llu", group, name,
              has ? "holds" : "missing", (unsigned long long)got, (unsigned long long)want);
        good += has && got == want;
        free(bytes);
        H5Dclose(d);
    }
    H5Gclose(g);
    return good;
}

/* Flips bits `mask` of byte `at` of dataset obj's data where the file holds it (a contiguous
 * dataset's offset): a disk's or a copy's damage, below HDF5. */
static int flip_stored_byte(const char *path, const char *obj, size_t at, unsigned char mask)
{
    hid_t h = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = h >= 0 ? H5Dopen2(h, obj, H5P_DEFAULT) : -1;
    haddr_t off = d >= 0 ? H5Dget_offset(d) : HADDR_UNDEF;
    if (d >= 0) H5Dclose(d);
    if (h >= 0) H5Fclose(h);
    int fd = open(path, O_RDWR);
    unsigned char c;
    int rc = off == HADDR_UNDEF || fd < 0 || pread(fd, &c, 1, (off_t)(off + at)) != 1 ? -1 : 0;
    c ^= mask;
    if (!rc && pwrite(fd, &c, 1, (off_t)(off + at)) != 1) rc = -1;
    if (fd >= 0) close(fd);
    return rc;
}

/* Runs the load, expecting a refusal whose message holds `want`; the model unchanged. */
static void refused_saying(ds_model *m, ds_model *orig, const char *path, int flags, const char *want)
{
    char *msg_path = path_in("stderr.txt");
    fflush(stderr);
    int saved = dup(2), fd = open(msg_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 2);
    close(fd);
    int rc = ds_ckpt_load(path, m, NULL, flags);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    size_t len;
    char *msg = ds_read_file(msg_path, &len);
    fprintf(stderr, "  %s", msg ? msg : "(no message)\n");
    CHECK(rc != 0, "%s accepted", path);
    CHECK(msg && strstr(msg, want), "the message does not say '%s'", want);
    CHECK(differing(m, orig) == 0, "%s: model changed by a refused load", path);
    free(msg);
}

/* Removes the checksum attribute of every dataset of group (all: a file of an older build) or of
 * one dataset. */
static int drop_checksums(const char *path, const char *group, const char *only)
{
    hid_t h = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = h >= 0 ? H5Gopen2(h, group, H5P_DEFAULT) : -1;
    hsize_t n = 0;
    int rc = g >= 0 && H5Gget_num_objs(g, &n) >= 0 ? 0 : -1;
    for (hsize_t i = 0; !rc && i < n; i++) {
        char name[128];
        H5Gget_objname_by_idx(g, i, name, sizeof name);
        if (only && strcmp(name, only)) continue;
        if (H5Adelete_by_name(g, name, "xxh3_64", H5P_DEFAULT) < 0) rc = -1;
    }
    if (g >= 0) H5Gclose(g);
    if (h >= 0 && H5Fclose(h) < 0) rc = -1;
    return rc;
}

/* Rewrites /model/<tensor> as float64 (as an importer may store it) with a checksum of
 * `bytes_of`'s bytes: the float64 ones stored, or the float32 ones the reader converts to. */
static int store_as_double(const char *path, const char *tensor, int hash_float32)
{
    hid_t h = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    char obj[160];
    snprintf(obj, sizeof obj, "model/%s", tensor);
    hid_t d = H5Dopen2(h, obj, H5P_DEFAULT), sp = H5Dget_space(d);
    size_t n = (size_t)H5Sget_simple_extent_npoints(sp);
    float *f32 = malloc(n * sizeof *f32);
    double *f64 = malloc(n * sizeof *f64);
    int rc = H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, f32) < 0 ? -1 : 0;
    H5Dclose(d);
    for (size_t i = 0; i < n; i++) f64[i] = f32[i];
    if (!rc && H5Ldelete(h, obj, H5P_DEFAULT) < 0) rc = -1;
    d = rc ? -1 : H5Dcreate2(h, obj, H5T_IEEE_F64LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0 || H5Dwrite(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, f64) < 0) rc = -1;
    uint64_t sum = hash_float32 ? XXH3_64bits(f32, n * sizeof *f32) : XXH3_64bits(f64, n * sizeof *f64);
    hsize_t one = 1;
    hid_t asp = H5Screate_simple(1, &one, NULL);
    hid_t a = d >= 0 ? H5Acreate2(d, "xxh3_64", H5T_STD_U64LE, asp, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (a < 0 || H5Awrite(a, H5T_NATIVE_UINT64, &sum) < 0) rc = -1;
    if (a >= 0) H5Aclose(a);
    H5Sclose(asp);
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    free(f32);
    free(f64);
    if (H5Fclose(h) < 0) rc = -1;
    return rc;
}

static void test_checksums(void)
{
    check_begin("tensor_checksums");
    ds_model *src = make("resnet20", 5), *m = make("resnet20", 5), *orig = make("resnet20", 5);
    ds_model_init(src, 1);
    train_step(src);   /* momentum written too */
    ds_model_init(m, 9);
    ds_model_init(orig, 9);
    ds_ckpt_meta meta;
    ds_ckpt_meta_init(&meta);
    ds_metrics_row row = {.epoch = 1, .train_loss = 2.5, .val_top1 = 0.25, .val_top5 = 0.75};
    ds_ckpt_meta_add_metrics(&meta, &row);
    char ck[512];   /* path_in's buffers turn over */
    snprintf(ck, sizeof ck, "%s", path_in("sums.h5"));
    CHECK(ds_ckpt_save(ck, src, &meta) == 0, "save");

    /* every dataset's attribute is the hash of its stored bytes, computed here apart */
    int nparams = 0;
    for (int i = 0; i < ds_model_tensor_count(src); i++) nparams += ds_model_tensor(src, i)->kind == DS_TENSOR_PARAM;
    hid_t h = H5Fopen(ck, H5F_ACC_RDONLY, H5P_DEFAULT);
    int nm = checked_datasets(h, "model"), no = checked_datasets(h, "optimizer");
    CHECK(nm == ds_model_tensor_count(src) && no == nparams, "%d of %d model and %d of %d optimizer tensors checked",
          nm, ds_model_tensor_count(src), no, nparams);
    hid_t d = H5Dopen2(h, "metrics", H5P_DEFAULT);
    size_t len;
    void *bytes = stored_bytes(d, &len);
    uint64_t got = 0;
    hid_t a = H5Aexists(d, "xxh3_64") > 0 ? H5Aopen(d, "xxh3_64", H5P_DEFAULT) : -1;
    if (a >= 0) H5Aread(a, H5T_NATIVE_UINT64, &got), H5Aclose(a);
    CHECK(len == sizeof row && got == XXH3_64bits(bytes, len), "/metrics: checksum %llu", (unsigned long long)got);
    free(bytes);
    H5Dclose(d);
    H5Fclose(h);
    CHECK(ds_ckpt_load(ck, m, NULL, DS_CKPT_OPTIMIZER) == 0 && differing(m, src) == 0, "a checked load differs");
    ds_model_init(m, 9);
    ds_model_set_momentum_started(m, 0);
    ds_model_set_momentum_started(orig, 0);

    /* one flipped exponent bit in a weight, a momentum buffer, a counter: named, nothing loaded */
    CHECK(copy_file(ck, path_in("flip_w.h5")) == 0 && flip_stored_byte(path_in("flip_w.h5"),
          "model/layer1.0.conv1.weight", 7, 0x40) == 0, "edit");
    refused_saying(m, orig, path_in("flip_w.h5"), 0, "/model/layer1.0.conv1.weight is corrupt");
    CHECK(copy_file(ck, path_in("flip_m.h5")) == 0 && flip_stored_byte(path_in("flip_m.h5"), "optimizer/fc.weight",
          3, 0x01) == 0, "edit");
    refused_saying(m, orig, path_in("flip_m.h5"), DS_CKPT_OPTIMIZER, "/optimizer/fc.weight is corrupt");
    CHECK(copy_file(ck, path_in("flip_c.h5")) == 0 && flip_stored_byte(path_in("flip_c.h5"),
          "model/bn1.num_batches_tracked", 0, 0x02) == 0, "edit");
    refused_saying(m, orig, path_in("flip_c.h5"), 0, "/model/bn1.num_batches_tracked is corrupt");
    CHECK(copy_file(ck, path_in("flip_r.h5")) == 0 && flip_stored_byte(path_in("flip_r.h5"), "metrics", 16, 0x10) == 0,
          "edit");
    refused_saying(m, orig, path_in("flip_r.h5"), 0, "/metrics is corrupt");
    ds_ckpt_meta rm;
    fprintf(stderr, "  ");
    CHECK(ds_ckpt_read_meta(path_in("flip_r.h5"), &rm) != 0, "a damaged /metrics read");

    /* a file of an older build (no checksum anywhere) loads; one missing beside others does not */
    CHECK(copy_file(ck, path_in("old.h5")) == 0 && drop_checksums(path_in("old.h5"), "model", NULL) == 0 &&
          drop_checksums(path_in("old.h5"), "optimizer", NULL) == 0 && drop_checksums(path_in("old.h5"), "/", "metrics") == 0,
          "edit");
    CHECK(ds_ckpt_load(path_in("old.h5"), m, NULL, DS_CKPT_OPTIMIZER) == 0 && differing(m, src) == 0,
          "a file without checksums refused or loaded otherwise");
    ds_model_init(m, 9);
    ds_model_set_momentum_started(m, 0);
    CHECK(copy_file(ck, path_in("lost.h5")) == 0 && drop_checksums(path_in("lost.h5"), "model", "fc.bias") == 0,
          "edit");
    refused_saying(m, orig, path_in("lost.h5"), 0, "/model/fc.bias has no xxh3_64 checksum");

    /* the checksum is of the stored bytes: a float64 tensor with the hash of its float64 bytes
     * loads, one with the hash of the float32 values it converts to does not */
    CHECK(copy_file(ck, path_in("f64.h5")) == 0 && store_as_double(path_in("f64.h5"), "fc.weight", 0) == 0, "edit");
    CHECK(ds_ckpt_load(path_in("f64.h5"), m, NULL, 0) == 0, "float64 tensor with its stored bytes' hash refused");
    ds_model_init(m, 9);
    CHECK(copy_file(ck, path_in("f64b.h5")) == 0 && store_as_double(path_in("f64b.h5"), "fc.weight", 1) == 0,
          "edit");
    refused_saying(m, orig, path_in("f64b.h5"), 0, "/model/fc.weight is corrupt");

    ds_ckpt_meta_free(&meta);
    ds_model_free(src);
    ds_model_free(m);
    ds_model_free(orig);
    check_end();
}

/* DESIGN §2's attribute table is the code's: the rows checkpoint_attrs.c prints from its table
 * are the document's rows, in order, every one of them to the table's end. */
static void test_design_table(void)
{
    check_begin("design_table_is_the_codes");
    char path[512], *doc = NULL, *mine = NULL;
    snprintf(path, sizeof path, "%s/docs/DESIGN.md", getenv("DS_ROOT") ? getenv("DS_ROOT") : ".");
    size_t len = 0, mlen = 0;
    char *text = ds_read_file(path, &len);
    CHECK(text != NULL, "%s unreadable", path);
    const char *head = text ? strstr(text, "| attribute | type | meaning | needed by |\n|---|---|---|---|\n") : NULL;
    CHECK(head != NULL, "no attribute table in %s", path);
    if (head) {
        head = strchr(strchr(head, '\n') + 1, '\n') + 1;
        const char *end = head;
        while (*end == '|') end = strchrnul(end, '\n') + (strchr(end, '\n') != NULL);
        doc = strndup(head, (size_t)(end - head));
    }
    FILE *f = open_memstream(&mine, &mlen);
    ds_ckpt_attributes_doc(f);
    fclose(f);
    CHECK(doc && !strcmp(doc, mine), "DESIGN §2 differs from checkpoint_attrs.c's table; the code's rows:\n%s", mine);
    free(doc);
    free(mine);
    free(text);
    check_end();
}

int main(void)
{
    ds_log_init("test_checkpoint");
    test_design_table();
    snprintf(dir, sizeof dir, "%s/test_checkpoint.XXXXXX", getenv("DS_TEST_TMP") ? getenv("DS_TEST_TMP") : "/tmp");
    if (!mkdtemp(dir)) return 1;
    test_round_trip();
    test_uses();
    test_refusals();
    test_checksums();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) return 1;
    return check_exit();
}
