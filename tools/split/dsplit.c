/* dsplit: a class-folder tree -> classes.txt, train.txt, val.txt (docs/DESIGN.md §2, §6), and
 * optionally the DIR/train/<class>/, DIR/val/<class>/ trees; or, with --val-images, the
 * ILSVRC2012 validation folder and its ground truth -> val.txt labelled by a training
 * split's classes.txt. */
#include "cli.h"
#include "fsutil.h"
#include "json.h"
#include "log.h"
#include "manifest.h"
#include "materialize.h"
#include "split.h"
#include "valset.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *out_dir, *mat_dir, *how_name = "symlink";
static const char *val_images, *val_labels, *synsets, *devkit, *classes_file;
static double val_fraction = 0.2;
static long long seed = 42;
static int json, subset;

static ds_option opts[] = {
    {.name = "out", .short_name = 'o', .type = DS_OPT_STRING, .value = &out_dir, .arg = "DIR",
     .help = "write classes.txt, train.txt, val.txt here (required)"},
    DS_NUM("val", DS_OPT_DOUBLE, &val_fraction, "FRACTION", "share of each class that goes to val", 0, 1),
    DS_NUM("seed", DS_OPT_INT, &seed, "N", "seed of the per-class shuffle", 0, 9.2e18),
    DS_OPT("materialize", DS_OPT_STRING, &mat_dir, "DIR", "also build DIR/train/<class>/ and DIR/val/<class>/"),
    DS_CHOICE("how", &how_name, "symlink|hardlink|copy|move",
              "how --materialize places files (only move touches ROOT)"),
    DS_OPT("json", DS_OPT_FLAG, &json, NULL, "print the counts as JSON on stdout"),
    DS_OPT("val-images", DS_OPT_STRING, &val_images, "DIR",
           "ILSVRC2012 mode: the validation images folder (no ROOT); -o gets val.txt and classes.txt"),
    DS_OPT("val-labels", DS_OPT_STRING, &val_labels, "FILE",
           "its ground truth: ILSVRC2012_validation_ground_truth.txt or LOC_val_solution.csv"),
    DS_OPT("synsets", DS_OPT_STRING, &synsets, "FILE",
           "ILSVRC2012_ID -> WNID: the devkit's meta.mat or a WNID-per-line list (LOC_synset_mapping.txt)"),
    DS_OPT("devkit", DS_OPT_STRING, &devkit, "DIR", "the unpacked devkit: its data/ground truth and data/meta.mat"),
    DS_OPT("classes", DS_OPT_STRING, &classes_file, "FILE",
           "the training split's classes.txt, whose lines give the labels"),
    DS_OPT("subset", DS_OPT_FLAG, &subset, NULL,
           "leave out validation images of classes not in --classes (else an error)"),
    {0},
};

static ds_cli cli = {
    .prog = "dsplit",
    .args = "[options] ROOT -o DIR | --val-images DIR (--val-labels FILE [--synsets FILE] | --devkit DIR) "
            "--classes FILE -o DIR",
    .summary = "Split a class-folder tree (ROOT/<class>/<image>) into train and val manifests.",
    .epilog =
        "Per class, the file names are sorted, shuffled with Philox keyed by (seed, class name),\n"
        "and min(ceil(n x FRACTION), n - 1) go to val: a class's split depends on nothing else.\n"
        "Images are files named *.jpg, *.jpeg, *.png (any case) directly in a class directory;\n"
        "other entries are skipped and counted (-v lists them).\n"
        "With --how move the manifests point at DIR/train and DIR/val, where the images end\n"
        "up; an interrupted move finishes when rerun with the same options.\n"
        "\n"
        "ILSVRC2012 validation set: the extracted ILSVRC2012_img_val.tar (one folder of\n"
        "ILSVRC2012_val_<8 digits>.JPEG) and its ground truth, either the devkit's ID list with\n"
        "its synset table (--devkit DIR, or --val-labels and --synsets) or Kaggle's\n"
        "LOC_val_solution.csv, become -o DIR/val.txt, labelled by the WNIDs' lines in --classes.\n"
        "Every image must be listed once and every listed image present.",
    .min_pos = 0,
    .max_pos = 1,
    .opts = opts,
};

/* Whether `path` is `dir` or lies below it (both absolute and symlink-free). */
static int inside(const char *path, const char *dir)
{
    size_t l = strlen(dir);
    return !strncmp(path, dir, l) && (path[l] == 0 || path[l] == '/' || (l == 1 && dir[0] == '/'));
}

/* Creates dir (if needed) and returns its absolute path; refuses one inside the root,
 * where the next scan would take it for a class. */
static char *prepare_dir(const char *dir, const char *root, const char *what)
{
    int existed = access(dir, F_OK) == 0;
    if (ds_mkdirs(dir)) return NULL;
    char *abs = ds_realpath(dir);
    if (abs && inside(abs, root)) {
        ds_err("%s %s is inside ROOT %s, where the next run would take it for a class", what, dir, root);
        if (!existed) rmdir(abs);
        free(abs);
        return NULL;
    }
    if (abs && access(abs, W_OK)) {
        ds_err("cannot write to %s: %s", dir, strerror(errno));
        free(abs);
        return NULL;
    }
    return abs;
}

/* Whether file a exists and holds other bytes than file b. */
static int replaced(const char *a, const char *b)
{
    size_t la, lb;
    if (access(a, F_OK)) return 0;
    char *x = ds_read_file(a, &la), *y = ds_read_file(b, &lb);
    int differs = !x || !y || la != lb || memcmp(x, y, la);
    free(x);
    free(y);
    return differs;
}

/* The three files appear together: each is written whole under a ".new" name first, and
 * only when all three exist are they renamed over the old ones. Files of an earlier run
 * that this one changes (another seed, --val or tree) are named in one line: they are
 * cheap to make again, but whatever was packed from them no longer matches. */
static int write_outputs(const char *out_name, const char *out, const ds_split_tree *t, const char *train_root,
                         const char *val_root, const ds_manifest_entry *train, size_t ntrain,
                         const ds_manifest_entry *val, size_t nval)
{
    static const char *names[3] = {"classes.txt", "train.txt", "val.txt"};
    char *final[3], *fresh[3];
    for (int i = 0; i < 3; i++) {
        final[i] = ds_path_join(out, names[i]);
        fresh[i] = ds_xmalloc(strlen(final[i]) + 5);
        sprintf(fresh[i], "%s.new", final[i]);
    }
    char **classes = ds_xmalloc(t->nclasses * sizeof *classes);
    for (int c = 0; c < t->nclasses; c++) classes[c] = t->classes[c].name;
    int rc = ds_classes_write(fresh[0], classes, t->nclasses);
    if (rc == 0) rc = ds_manifest_write(fresh[1], train_root, train, ntrain);
    if (rc == 0) rc = ds_manifest_write(fresh[2], val_root, val, nval);
    char changed[64] = "";
    for (int i = 0; i < 3 && rc == 0; i++)
        if (replaced(final[i], fresh[i])) snprintf(changed + strlen(changed), sizeof changed - strlen(changed), "%s%s",
                                                   changed[0] ? ", " : "", names[i]);
    for (int i = 0; i < 3 && rc == 0; i++) rc = ds_commit_file(fresh[i], final[i]);
    if (rc == 0 && changed[0])
        ds_info("replaced %s in %s: they held another split (an earlier run with other --seed, --val or ROOT)",
                changed, out_name);
    for (int i = 0; i < 3; i++) {
        if (rc) unlink(fresh[i]);
        free(final[i]);
        free(fresh[i]);
    }
    free(classes);
    return rc;
}

static void print_json(const ds_split_tree *t, size_t ntrain, size_t nval, int empty,
                       const char *mat_abs, size_t placed, size_t present)
{
    static const char *keys[DS_SKIP_KINDS] = {
        [DS_SKIP_HIDDEN] = "hidden", [DS_SKIP_BAD_NAME] = "bad_name",
        [DS_SKIP_NOT_IMAGE] = "not_image", [DS_SKIP_DIR] = "nested_dir",
        [DS_SKIP_ROOT_FILE] = "root_file",
    };
    ds_json j;
    ds_json_init(&j, DS_JSON_SPACED);
    ds_json_begin(&j, NULL);
    ds_json_string(&j, "root", t->root);
    ds_json_int(&j, "classes", t->nclasses);
    ds_json_uint(&j, "images", t->nimages);
    ds_json_uint(&j, "train", ntrain);
    ds_json_uint(&j, "val", nval);
    ds_json_int(&j, "empty_classes", empty);
    ds_json_int(&j, "seed", seed);
    ds_json_double(&j, "val_fraction", val_fraction, "%.15g");
    ds_json_begin(&j, "skipped");
    for (int k = 0; k < DS_SKIP_KINDS; k++) ds_json_uint(&j, keys[k], t->skipped[k]);
    ds_json_end(&j);
    if (mat_abs) {
        ds_json_begin(&j, "materialized");
        ds_json_string(&j, "dir", mat_abs);
        ds_json_string(&j, "how", how_name);
        ds_json_uint(&j, "placed", placed);
        ds_json_uint(&j, "present", present);
        ds_json_end(&j);
    } else {
        ds_json_null(&j, "materialized");
    }
    ds_json_end(&j);
    ds_json_print(&j, stdout);
}

/* A file of the output directory that must hold these classes: written when absent, kept
 * when equal, refused when different (it would relabel the manifests beside it). */
static int put_classes(const char *out, char *const *names, int n, const char *from)
{
    char *path = ds_path_join(out, "classes.txt");
    int rc = 0;
    if (access(path, F_OK) == 0) {
        char **have;
        int nhave;
        rc = ds_classes_read(path, &have, &nhave);
        if (rc == 0) {
            int same = nhave == n;
            for (int c = 0; same && c < n; c++) same = !strcmp(have[c], names[c]);
            if (!same) rc = ds_err("%s holds other classes than %s; choose another -o", path, from);
            ds_classes_free(have, nhave);
        }
    } else {
        rc = ds_classes_write(path, names, n);
    }
    free(path);
    return rc;
}

/* --val-images: the ILSVRC2012 validation folder -> DIR/val.txt (and DIR/classes.txt). */
static int run_valset(int npos, char **pos)
{
    if (npos) ds_usage_error(&cli, "unexpected argument '%s' (--val-images takes no ROOT)", pos[0]);
    if (!val_images)
        ds_usage_error(&cli, "--val-labels, --synsets, --devkit, --classes and --subset need --val-images DIR");
    if (!classes_file) ds_usage_error(&cli, "--val-images needs --classes FILE (the training split's classes.txt)");
    if (devkit && (val_labels || synsets))
        ds_usage_error(&cli, "--devkit DIR names the ground truth: no --val-labels or --synsets with it");
    if (!devkit && !val_labels) ds_usage_error(&cli, "--val-images needs --val-labels FILE or --devkit DIR");
    if (ds_cli_given(&cli, "materialize") || ds_cli_given(&cli, "val") || ds_cli_given(&cli, "seed"))
        ds_usage_error(&cli, "--materialize, --val and --seed split a class-folder tree, not --val-images");
    double t0 = ds_now();
    char *gt = devkit ? ds_path_join(devkit, "data/ILSVRC2012_validation_ground_truth.txt") : NULL;
    char *meta = devkit ? ds_path_join(devkit, "data/meta.mat") : NULL;
    char **classes = NULL;
    int nclasses = 0, rc = ds_classes_read(classes_file, &classes, &nclasses);
    ds_valset v = {0};
    ds_valset_options o = {.images = val_images, .labels = devkit ? gt : val_labels, .synsets = devkit ? meta : synsets,
                           .classes = classes, .nclasses = nclasses, .subset = subset};
    if (rc == 0) rc = ds_valset_build(&v, &o);
    char *out_abs = NULL;
    if (rc == 0 && (ds_mkdirs(out_dir) || !(out_abs = ds_realpath(out_dir)))) rc = -1;
    char *train = out_abs ? ds_path_join(out_abs, "train.txt") : NULL;
    if (rc == 0 && access(train, F_OK) == 0)
        rc = ds_err("%s holds a training split (train.txt), whose val.txt this would replace; choose another -o",
                    out_dir);
    if (rc == 0) rc = put_classes(out_abs, classes, nclasses, classes_file);
    char *val = out_abs ? ds_path_join(out_abs, "val.txt") : NULL;
    if (rc == 0) rc = ds_manifest_write(val, v.root, v.items, v.n);
    if (rc == 0) {
        ds_info("%zu validation images of %d classes -> %s  [%.2fs]", v.n, nclasses - (int)v.unused_classes, val,
                ds_now() - t0);
        if (v.left_out) ds_info("left out %zu images of classes outside %s (--subset)", v.left_out, classes_file);
        if (v.unused_classes) ds_warn("%zu of the %d classes have no validation image", v.unused_classes, nclasses);
        if (json) {
            ds_json j;
            ds_json_init(&j, DS_JSON_SPACED);
            ds_json_begin(&j, NULL);
            ds_json_uint(&j, "images", v.n);
            ds_json_uint(&j, "left_out", v.left_out);
            ds_json_int(&j, "classes", nclasses);
            ds_json_uint(&j, "classes_without_images", v.unused_classes);
            ds_json_string(&j, "root", v.root);
            ds_json_end(&j);
            ds_json_print(&j, stdout);
        }
    }
    ds_valset_free(&v);
    ds_classes_free(classes, nclasses);
    free(gt);
    free(meta);
    free(out_abs);
    free(train);
    free(val);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    char **pos;
    int npos = ds_cli_parse(&cli, argc, argv, &pos);
    if (!out_dir) ds_usage_error(&cli, "missing -o/--out DIR");
    if (val_images || val_labels || synsets || devkit || classes_file || ds_cli_given(&cli, "subset"))
        return run_valset(npos, pos);
    if (npos != 1) ds_usage_error(&cli, npos ? "unexpected argument '%s'" : "missing argument: ROOT", pos[npos > 1]);
    if (ds_cli_given(&cli, "how") && !mat_dir) ds_usage_error(&cli, "--how needs --materialize DIR");
    ds_materialize_how how = (ds_materialize_how)ds_materialize_how_parse(how_name);
    double t0 = ds_now();

    ds_split_tree t;
    if (ds_split_scan(&t, pos[0])) return 1;
    char *out_abs = prepare_dir(out_dir, t.root, "output directory");
    char *mat_abs = NULL;
    if (out_abs && mat_dir) mat_abs = prepare_dir(mat_dir, t.root, "--materialize directory");
    if (!out_abs || (mat_dir && !mat_abs)) {
        ds_split_tree_free(&t);
        free(out_abs);
        return 1;
    }

    if (mat_abs && how == DS_MATERIALIZE_MOVE) {
        /* Files an interrupted move already took out of ROOT still belong to the split. */
        char **moved;
        size_t nmoved;
        if (ds_materialize_moved(out_abs, mat_abs, t.root, &moved, &nmoved)) return 1;
        if (nmoved) ds_info("%zu images were moved by an earlier run; finishing it", nmoved);
        ds_split_tree_add(&t, moved, nmoved);
        for (size_t i = 0; i < nmoved; i++) free(moved[i]);
        free(moved);
    }

    for (size_t i = 0; i < t.nskipped; i++)
        ds_debug("skipped %s/%s (%s)", t.root, t.skipped_paths[i], ds_split_skip_name(t.skipped_kind[i]));
    if (t.skipped[DS_SKIP_BAD_NAME])
        ds_warn("%zu entries are left out because their names hold a TAB, a newline or bytes that are not UTF-8 "
                "(a manifest line and a shard's /paths cannot hold them): rename them to include them%s",
                t.skipped[DS_SKIP_BAD_NAME], ds_verbosity > 0 ? "" : " (-v lists them)");
    int empty = 0;
    for (int c = 0; c < t.nclasses; c++) {
        if (t.classes[c].n) continue;
        empty++;
        ds_warn("class %s has no images; it keeps label %d", t.classes[c].name, c);
    }

    ds_manifest_entry *train, *val;
    size_t ntrain, nval;
    ds_split_assign(&t, val_fraction, (uint64_t)seed, &train, &ntrain, &val, &nval);

    char *train_root = ds_xstrdup(t.root), *val_root = ds_xstrdup(t.root);
    if (mat_abs && how == DS_MATERIALIZE_MOVE) {
        free(train_root);
        free(val_root);
        train_root = ds_path_join(mat_abs, "train");
        val_root = ds_path_join(mat_abs, "val");
    }
    /* Every --materialize conflict is found before the manifests are written, so a refused
     * rerun leaves the earlier run's manifests (and a half-done move's record) as they were. */
    int rc = 0;
    if (mat_abs)
        rc = ds_materialize_check(mat_abs, "train", "val", t.root, train, ntrain, how) ||
                     ds_materialize_check(mat_abs, "val", "train", t.root, val, nval, how)
                 ? -1
                 : 0;
    if (rc == 0) rc = write_outputs(out_dir, out_abs, &t, train_root, val_root, train, ntrain, val, nval);

    size_t placed = 0, present = 0;
    if (rc == 0 && mat_abs) {
        char **classes = ds_xmalloc(t.nclasses * sizeof *classes);
        for (int c = 0; c < t.nclasses; c++) classes[c] = t.classes[c].name;
        ds_progress p;
        ds_progress_start(&p, how_name, "file", (int64_t)(ntrain + nval), ds_verbosity < 0 ? 0 : ds_cli_progress_mode());
        rc = ds_materialize(mat_abs, "train", "val", t.root, classes, t.nclasses, train, ntrain, how, &p,
                            &placed, &present);
        if (rc == 0)
            rc = ds_materialize(mat_abs, "val", "train", t.root, classes, t.nclasses, val, nval, how, &p,
                                &placed, &present);
        ds_progress_end(&p);
        free(classes);
    }

    if (rc == 0) {
        size_t skipped = 0;
        char detail[512] = "";
        int dl = 0;
        for (int k = 0; k < DS_SKIP_KINDS; k++) {
            if (!t.skipped[k]) continue;
            skipped += t.skipped[k];
            dl += snprintf(detail + dl, sizeof detail - dl, "%s%zu %s", dl ? ", " : "", t.skipped[k],
                           ds_split_skip_name(k));
        }
        ds_info("%d classes, %zu images: %zu train, %zu val (seed %lld, val %g) -> %s  [%.2fs]",
                t.nclasses, t.nimages, ntrain, nval, seed, val_fraction, out_dir, ds_now() - t0);
        if (skipped) ds_info("skipped %zu entries: %s%s", skipped, detail, ds_verbosity > 0 ? "" : " (-v lists them)");
        if (mat_abs)
            ds_info("%s: %zu files placed by %s, %zu already there", mat_dir, placed, how_name, present);
        if (json) print_json(&t, ntrain, nval, empty, mat_abs, placed, present);
    }

    ds_split_entries_free(train, ntrain);
    ds_split_entries_free(val, nval);
    free(train_root);
    free(val_root);
    free(out_abs);
    free(mat_abs);
    ds_split_tree_free(&t);
    return rc ? 1 : 0;
}
