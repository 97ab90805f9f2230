/* dseval: top-1 / top-5 / loss of a checkpoint on a shard directory or a manifest. This file
 * holds the options and the order of calls; the pass itself is libcommon/evaluate.c. */
#include "backend.h"
#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "compute.h"
#include "evaluate.h"
#include "feed.h"
#include "fsutil.h"
#include "json.h"
#include "loader.h"
#include "log.h"
#include "logits.h"
#include "manifest.h"
#include "model.h"
#include "source.h"
#include "testhook.h"
#include "topk.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char *per_class, *logits_file, *fit, *tta = "none";
static int fit_index;   /* a ds_fit; DS_FIT_UNSET without --fit */
static int tta_index;   /* 0 none, 1 flip */
static long long batch = 64, size = 0, crop = 0;
static int json;
static ds_compute_options compute = DS_COMPUTE_DEFAULTS;

static ds_option options[] = {
    DS_NUM("batch", DS_OPT_INT, &batch, "N", "images per forward pass (per rank)", 1, 1e6),
    DS_COMPUTE_OPTIONS(compute, "reading / decoding threads (0: 2, or every core for a manifest)"),
    DS_OPT("json", DS_OPT_FLAG, &json, NULL,
           "print one JSON object (top1, top5, loss, count, nonfinite, images_per_sec) on stdout"),
    DS_OPT("per-class", DS_OPT_STRING, &per_class, "FILE.csv", "write per-class counts and accuracies"),
    DS_OPT("logits", DS_OPT_STRING, &logits_file, "FILE.h5", "write /logits [N, C], /labels, /paths in data order"),
    DS_NUM("crop", DS_OPT_INT, &crop, "N",
           "network input: N x N centre crops (0: the checkpoint's input size); any size the stored images hold", 0,
           65535),
    DS_NUM("size", DS_OPT_INT, &size, "N", "manifest decoding size (0: the checkpoint's data size, else input size x "
           "8/7)", 0, 65535),
    DS_CHOICE_INDEX("fit", &fit, &fit_index, DS_FIT_CHOICES, "manifest decoding fit (none: the checkpoint's, else crop)"),
    DS_CHOICE_INDEX("tta", &tta, &tta_index, "none|flip",
                    "test-time augmentation: flip also runs each image mirrored left to right and scores the mean "
                    "of its two logits (twice the work)"),
    {0},
};

static ds_cli cli = {
    .prog = "dseval",
    .args = "[options] CHECKPOINT|RUN_DIR DATA",
    .summary = "Evaluate a checkpoint on DATA: a shard directory, or a manifest decoded on the fly.",
    .epilog = "A manifest is decoded exactly as dspack would store it, at the size and fit recorded in the\n"
              "checkpoint (dstrain records its training shards'), then centre-cropped to the network's input.\n"
              "The result names its protocol from the stored size, fit and crop: shards of --size 256 --fit crop\n"
              "at --crop 224 are \"resize 256, centre crop 224\", torchvision's Resize(256) + CenterCrop(224).\n"
              "Accuracies are fractions in [0, 1]; the loss is the mean cross-entropy without smoothing.\n"
              "An image whose logits hold a NaN or an Inf counts as wrong and leaves the loss undefined;\n"
              "the result is printed, then an error names how many there were, and dseval exits 1.\n"
              "Undecodable images of a manifest are skipped with a warning and not counted.",
    .min_pos = 2,
    .max_pos = 2,
    .opts = options,
};

/* A path that is not UTF-8 as ASCII: each byte past 0x7f written \xNN. Caller frees. */
static char *escape_bytes(const char *p)
{
    char *out = ds_xmalloc(4 * strlen(p) + 1), *o = out;
    for (const unsigned char *c = (const unsigned char *)p; *c; c++)
        o += *c < 0x80 ? sprintf(o, "%c", *c) : sprintf(o, "\\x%02x", *c);
    *o = 0;
    return out;
}

/* CHECKPOINT as given: a file, or a run directory, whose best.h5 (the checkpoint the run chose
 * by validation) or, without one, last.h5 is taken and named. Caller frees. */
static char *checkpoint_of(const char *arg)
{
    struct stat st;
    if (stat(arg, &st) || !S_ISDIR(st.st_mode)) return ds_xstrdup(arg);
    for (int i = 0; i < 2; i++) {
        char *link = ds_path_join(arg, i == 0 ? "best.h5" : "last.h5");
        if (stat(link, &st) == 0) {
            char *real = ds_realpath(link);
            ds_info("%s is a run directory: evaluating its %s (%s)", arg, i == 0 ? "best.h5" : "last.h5",
                    real ? real : link);
            free(real);
            return link;
        }
        free(link);
    }
    ds_die("%s is a directory with neither best.h5 nor last.h5: give a checkpoint file", arg);
}

int main(int argc, char **argv)
{
    if (ds_comm_init(&argc, &argv)) return 1;
    char **pos;
    ds_cli_parse(&cli, argc, argv, &pos);
    const char *data = pos[1];
    int world = ds_comm_world(), rank = ds_comm_rank();
    if (rank != 0) ds_verbosity = -1;
    if (logits_file && world > 1) ds_usage_error(&cli, "--logits needs a single process (run without mpirun)");
    struct stat st;
    if ((size || fit) && stat(data, &st) == 0 && S_ISDIR(st.st_mode))
        ds_usage_error(&cli, "--size and --fit say how to decode a manifest; the shards of %s are evaluated as stored",
                       data);
    char *ckpt = checkpoint_of(pos[0]);

    ds_ckpt_meta meta;
    ds_ckpt_meta_init(&meta);
    if (ds_ckpt_read_meta(ckpt, &meta) || ds_ckpt_meta_require(&meta, ckpt, DS_CKPT_FOR_EVAL))
        ds_die("cannot evaluate %s", ckpt);
    int input = crop ? (int)crop : meta.input_size;
    int dsize = size ? (int)size : meta.data_height ? meta.data_height : (input * 8 + 6) / 7;
    ds_fit dfit = fit_index != DS_FIT_UNSET ? (ds_fit)fit_index : meta.data_fit != DS_FIT_UNSET ? meta.data_fit : DS_FIT_CROP;

    ds_source src;
    if (ds_source_open(&src, data, dsize, dfit)) ds_die("cannot evaluate on %s", data);
    /* A checkpoint without class names (an import) is checked by count only. */
    if (meta.classes ? ds_classes_match(meta.classes, meta.num_classes, ckpt, src.classes, src.num_classes, data)
                     : meta.num_classes != src.num_classes ? ds_err("%s has %d classes, %s has %d", ckpt,
                                                                    meta.num_classes, data, src.num_classes) : 0)
        ds_die("cannot evaluate %s on %s: the checkpoint was trained on other classes", ckpt, data);
    /* Decoding a manifest's JPEGs is the slow part of such a run: every core reads. */
    if (compute.loader_threads == 0) compute.loader_threads = src.decodes ? omp_get_num_procs() : 2;

    const ds_backend *be = ds_compute_setup(&compute, 0);
    if (!be) ds_die("no usable --device %s", compute.device);
    ds_model_config mc = {.arch = meta.arch, .num_classes = meta.num_classes, .max_batch = (int)batch,
                          .height = input, .width = input, .training = 0};
    ds_model *m = ds_model_create(be, &mc);
    if (!m) ds_die("cannot build the %s model of %s", meta.arch, ckpt);
    if (ds_ckpt_load(ckpt, m, NULL, 0)) ds_die("cannot evaluate %s", ckpt);

    ds_loader_config lc = {.batch = (int)batch, .world = world, .rank = rank, .accum = 1, .crop = input,
                           .train = 0, .seed = meta.seed, .threads = (int)compute.loader_threads,
                           .read_delay_ms = (int)ds_test_hooks_get()->read_delay_ms};
    ds_loader *L = ds_loader_new(&src, &lc);
    if (!L) ds_die("cannot evaluate %s on %s", ckpt, data);
    ds_feed feed;
    if (ds_feed_init(&feed, be, ds_loader_batch_shape(L))) ds_die("cannot evaluate");
    size_t count = ds_loader_eval_count(L);
    char computes[128];
    ds_info("%s (%s, %d classes) on %s: %zu images, %s", ckpt, meta.arch, meta.num_classes, data, src.n,
            ds_backend_describe(be, omp_get_max_threads(), computes, sizeof computes));
    ds_eval_options eo = {.progress = ds_cli_progress_mode(), .flip = tta_index == 1};
    char protocol[128];
    int standard = ds_eval_protocol(protocol, sizeof protocol, &src, input, eo.flip);
    memcpy(eo.mean, meta.mean, sizeof eo.mean);
    memcpy(eo.std, meta.std, sizeof eo.std);
    if (logits_file) {
        eo.logits = ds_xmalloc(count * (size_t)meta.num_classes * sizeof *eo.logits);
        eo.valid = ds_xmalloc(count);
    }
    ds_topk t;
    ds_topk_init(&t, meta.num_classes);
    double secs;
    int rc = ds_evaluate(m, L, &feed, &eo, &t, &secs);
    if (ds_comm_any(rc != 0)) ds_die("evaluation of %s on %s failed", ckpt, data);
    int64_t local = (int64_t)count;
    ds_comm_allreduce_sum_i64(&local, 1);
    ds_topk_reduce(&t);
    int64_t skipped = local - t.count;
    double ips = secs > 0 ? (double)local / secs : 0;

    if (rank == 0) {
        if (per_class && ds_topk_write_csv(&t, per_class, src.classes)) ds_die("cannot write --per-class");
        if (logits_file) {
            const char **paths = ds_xmalloc(count * sizeof *paths);
            char **escaped = ds_xcalloc(count, sizeof *escaped);
            size_t odd = 0;
            for (size_t i = 0; i < count; i++) {
                paths[i] = src.path(&src, i);
                if (!ds_utf8_valid(paths[i])) paths[i] = escaped[i] = escape_bytes(paths[i]), odd++;
            }
            if (odd)
                ds_warn("%zu path%s of %s %s not UTF-8: --logits' /paths (UTF-8 strings) holds %s with each byte past "
                        "0x7f written as \\xNN", odd, odd == 1 ? "" : "s", data, odd == 1 ? "is" : "are",
                        odd == 1 ? "it" : "them");
            if (ds_logits_write(logits_file, eo.logits, src.labels, paths, count, src.classes, src.num_classes))
                ds_die("cannot write --logits");
            for (size_t i = 0; i < count; i++) free(escaped[i]);
            free(escaped);
            free(paths);
        }
        if (skipped) ds_warn("%lld undecodable image%s skipped (not counted)", (long long)skipped, skipped == 1 ? "" : "s");
        if (json) {
            ds_json j;
            ds_json_init(&j, DS_JSON_SPACED);
            ds_json_begin(&j, NULL);
            ds_json_double(&j, "top1", ds_topk_top1(&t), "%.6f");
            ds_json_double(&j, "top5", ds_topk_top5(&t), "%.6f");
            ds_json_double(&j, "loss", ds_topk_loss(&t), "%.6f");
            ds_json_int(&j, "count", (long long)t.count);
            ds_json_int(&j, "nonfinite", (long long)t.nonfinite);
            ds_json_double(&j, "images_per_sec", ips, "%.1f");
            ds_json_int(&j, "skipped", (long long)skipped);
            ds_json_int(&j, "crop", input);
            ds_json_string(&j, "protocol", protocol);
            ds_json_string(&j, "tta", tta);
            ds_json_bool(&j, "standard_protocol", standard);
            ds_json_end(&j);
            ds_json_print(&j, stdout);
        } else
            printf("top-1 %.2f%%  top-5 %.2f%%  loss %.4f  count %lld  %.0f images/s  protocol: %s%s\n",
                   100 * ds_topk_top1(&t), 100 * ds_topk_top5(&t), ds_topk_loss(&t), (long long)t.count, ips, protocol,
                   standard ? " (the standard ImageNet evaluation)" : "");
        if (fflush(stdout)) ds_die("cannot write the result");
        /* after the result, so a script sees both; no score of such a model is one */
        if (t.nonfinite)
            ds_err("%lld of %lld images gave non-finite outputs (NaN or Inf logits), counted as wrong: the weights "
                   "of %s are broken (a diverged run or a damaged file)",
                   (long long)t.nonfinite, (long long)t.count, ckpt);
    }
    int status = t.nonfinite ? 1 : 0;   /* reduced: the same on every rank */
    ds_topk_free(&t);
    free(eo.logits);
    free(eo.valid);
    ds_feed_free(&feed);
    ds_loader_free(L);
    ds_model_free(m);
    ds_source_close(&src);
    ds_ckpt_meta_free(&meta);
    free(ckpt);
    ds_comm_free();
    return status;
}
