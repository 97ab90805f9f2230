/* dspack: decode, resize and pack a manifest's images into HDF5 shards (docs/DESIGN.md §2, §6);
 * with --verify, check a shard directory instead. */
#include "cli.h"
#include "cpu_isa.h"
#include "fsutil.h"
#include "image.h"
#include "json.h"
#include "log.h"
#include "manifest.h"
#include "pack.h"
#include "testhook.h"
#include "verify.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* dspack --verify DIR: the summary on stderr (and stdout with --json); 0 when all is good. */
static int verify_dir(const char *dir, int nthreads, int as_json)
{
    ds_verify_result r;
    int rc = ds_verify_shards(dir, nthreads, &r);
    if (rc < 0) return 1;
    double s = r.seconds > 0 ? r.seconds : 1e-9;
    ds_info("verified %s: %d shards, %zu images, %.3g MB in %.2f s (%.3g MB/s, %.0f images/s): %d bad shards, %zu bad "
            "images", dir, r.shards, r.images, r.bytes / 1e6, r.seconds, r.bytes / 1e6 / s, r.images / s, r.shards_bad,
            r.images_bad);
    if (r.shards_unchecked)
        ds_info("%d of %d shards (%zu images) have no /checksums (packed before dspack wrote them): their structure and "
                "labels are checked, their pixels are not (repack them to get checksums)",
                r.shards_unchecked, r.shards, r.images_unchecked);
    if (r.shards_entries_unchecked)
        ds_info("%d of %d shards (%zu images) have no /label_checksums and /path_checksums (packed before dspack wrote "
                "them): their labels are checked for range, their labels and paths are not covered by checksums "
                "(repack them to get those)", r.shards_entries_unchecked, r.shards, r.images_entries_unchecked);
    if (as_json) {
        ds_json j;
        ds_json_init(&j, DS_JSON_SPACED);
        ds_json_begin(&j, NULL);
        ds_json_int(&j, "shards", r.shards);
        ds_json_int(&j, "shards_bad", r.shards_bad);
        ds_json_int(&j, "shards_unchecked", r.shards_unchecked);
        ds_json_uint(&j, "images", r.images);
        ds_json_uint(&j, "images_bad", r.images_bad);
        ds_json_uint(&j, "images_unchecked", r.images_unchecked);
        ds_json_int(&j, "shards_entries_unchecked", r.shards_entries_unchecked);
        ds_json_uint(&j, "images_entries_unchecked", r.images_entries_unchecked);
        ds_json_uint(&j, "bytes", (unsigned long long)r.bytes);
        ds_json_double(&j, "seconds", r.seconds, "%.3f");
        ds_json_string(&j, "dir", dir);
        ds_json_end(&j);
        ds_json_print(&j, stdout);
    }
    if (rc) ds_err("%s: %d bad shards, %zu bad images (each named above)", dir, r.shards_bad, r.images_bad);
    return rc ? 1 : 0;
}

static const char *out, *root, *fit = "crop";
static int fit_index;   /* a ds_fit */
static long long size = 256, shard_size = 1024, compress = 0, threads = 0, seed = 42, max_reject = 100,
                 max_pixels = (long long)DS_DEFAULT_MAX_PIXELS;
static int no_shuffle, resume, overwrite, json, verify;

static ds_option options[] = {
    {.name = "out", .short_name = 'o', .type = DS_OPT_STRING, .value = &out, .arg = "DIR",
     .help = "output directory for shard-NNNNN.h5 and rejected.txt; required"},
    DS_OPT("root", DS_OPT_STRING, &root, "DIR", "image root; none: the root= of the manifest header"),
    DS_NUM("size", DS_OPT_INT, &size, "N", "output images are N x N", 1, 4096),
    DS_CHOICE_INDEX("fit", &fit, &fit_index, DS_FIT_CHOICES, "crop: shorter side to N then centre crop; squash: resize to N x N"),
    DS_NUM("shard-size", DS_OPT_INT, &shard_size, "N", "manifest entries per shard", 1, 1 << 24),
    DS_NUM("compress", DS_OPT_INT, &compress, "LEVEL", "0: contiguous /images; 1-9: chunked per image + deflate", 0, 9),
    DS_NUM("threads", DS_OPT_INT, &threads, "N", "decoding threads (0: OMP_NUM_THREADS or all cores)", 0, 1024),
    DS_NUM("seed", DS_OPT_INT, &seed, "N", "seed of the shuffle of the manifest order", 0, 9.2e18),
    DS_OPT("no-shuffle", DS_OPT_FLAG, &no_shuffle, NULL, "keep the manifest order"),
    DS_NUM("max-reject", DS_OPT_INT, &max_reject, "N", "exit 1 (after writing everything) when more images are "
           "rejected", 0, 9.2e18),
    DS_NUM("max-pixels", DS_OPT_INT, &max_pixels, "N", "reject images with more pixels (read from the header)", 1,
           9.2e18),
    DS_OPT("resume", DS_OPT_FLAG, &resume, NULL, "keep the complete shards of an interrupted run that match this one"),
    DS_OPT("overwrite", DS_OPT_FLAG, &overwrite, NULL, "replace the shards already in -o DIR (else refused)"),
    DS_OPT("json", DS_OPT_FLAG, &json, NULL, "print the summary as JSON on stdout"),
    DS_OPT("verify", DS_OPT_FLAG, &verify, NULL, "check the shard directory DIR instead of packing (see below)"),
    {0},
};

static ds_cli cli = {
    .prog = "dspack",
    .args = "[options] MANIFEST  |  --verify [--threads N] [--json] DIR",
    .summary = "Decode, resize and pack the images of a dsplit manifest into HDF5 shards.",
    .epilog = "Images are recognised by content (JPEG, PNG). Undecodable ones are skipped and listed in\n"
              "OUT/rejected.txt with the reason; packed + rejected = manifest entries. An OUT that already\n"
              "holds shards is refused unless --overwrite (replace them) or --resume. The output does not\n"
              "depend on --threads, and a --resume'd run equals an uninterrupted one byte for byte.\n"
              "--verify DIR reads every shard in DIR: structure, the set's agreement, every image's label and\n"
              "path against /label_checksums and /path_checksums, and its pixels against /checksums (XXH3-64\n"
              "each); exit 1 naming each bad shard, image and field.",
    .min_pos = 1,
    .max_pos = 1,
    .opts = options,
};

int main(int argc, char **argv)
{
    char **pos;
    ds_cli_parse(&cli, argc, argv, &pos);
    if (verify) {
        if (out) ds_usage_error(&cli, "--verify checks the directory given as its argument: no -o/--out");
        return verify_dir(pos[0], (int)threads, json);
    }
    if (!out) ds_usage_error(&cli, "-o/--out DIR is required");
    const char *manifest_file = pos[0];

    ds_manifest m;
    if (ds_manifest_read(&m, manifest_file)) return 1;
    if (m.n == 0) {
        ds_err("%s lists no images: nothing to pack", manifest_file);
        ds_manifest_free(&m);
        return 1;
    }
    char *classes_file = ds_classes_path_for(manifest_file);
    char **classes = NULL;
    int num_classes = 0, status = 1;
    ds_pack_result r;
    if (ds_classes_read(classes_file, &classes, &num_classes)) goto out;
    if (num_classes <= 0) {
        ds_err("%s: no classes", classes_file);
        goto out;
    }
    for (size_t i = 0; i < m.n; i++)
        if (m.items[i].label >= num_classes) {
            ds_err("%s:%zu: label %d is out of range for the %d classes of %s", manifest_file, i + 2,
                   m.items[i].label, num_classes, classes_file);
            goto out;
        }
    if (!root) root = m.root;
    struct stat st;
    if (stat(root, &st) || !S_ISDIR(st.st_mode)) {
        ds_err("image root %s: %s", root, stat(root, &st) ? strerror(errno) : "not a directory");
        goto out;
    }

    ds_pack_options o = {
        .root = root, .out = out, .size = (int)size, .fit = (ds_fit)fit_index,
        .shard_size = (size_t)shard_size, .compress = (int)compress, .threads = (int)threads,
        .seed = (uint64_t)seed, .shuffle = !no_shuffle, .max_pixels = (uint64_t)max_pixels, .resume = resume,
        .overwrite = overwrite,
        .progress = ds_cli_progress_mode(),
    };
    if (ds_pack_run(&o, &m, classes, num_classes, &r)) goto out;
    if (ds_test_hooks_get()->pause_before_exit) ds_test_pause("dspack is done");

    double rate = r.seconds > 0 ? r.packed / r.seconds : 0;
    ds_info("packed %zu, rejected %zu (listed in %s/rejected.txt) into %d shards in %.1f s, %.1f images/s (%s kernels)",
            r.packed, r.rejected, out, r.shards, r.seconds, rate, ds_cpu_isa_name(ds_cpu_isa_get()));
    if (resume) ds_info("resume: kept %d of %d shards", r.shards_kept, r.shards);
    if (json) {
        ds_json j;
        ds_json_init(&j, DS_JSON_SPACED);
        ds_json_begin(&j, NULL);
        ds_json_uint(&j, "packed", r.packed);
        ds_json_uint(&j, "rejected", r.rejected);
        ds_json_int(&j, "shards", r.shards);
        ds_json_int(&j, "shards_kept", r.shards_kept);
        ds_json_double(&j, "seconds", r.seconds, "%.3f");
        ds_json_double(&j, "images_per_second", rate, "%.1f");
        ds_json_string(&j, "out", out);
        ds_json_end(&j);
        ds_json_print(&j, stdout);
    }
    status = 0;
    if (r.packed == 0) {
        ds_err("none of the %zu images of %s could be packed (see %s/rejected.txt)", r.rejected, manifest_file, out);
        status = 1;
    } else if ((long long)r.rejected > max_reject) {
        ds_err("%zu images rejected, more than --max-reject %lld (see %s/rejected.txt)", r.rejected, max_reject, out);
        status = 1;
    }
out:
    if (classes) ds_classes_free(classes, num_classes);
    free(classes_file);
    ds_manifest_free(&m);
    return status;
}
