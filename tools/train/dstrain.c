/* dstrain: trains a ResNet on shards (docs/DESIGN.md §3, §6). This file holds the options and the
 * order of calls; the loop lives in libcommon/train.c. */
#include "backend.h"
#include "checkpoint.h"
#include "cli.h"
#include "comm.h"
#include "compute.h"
#include "evaluate.h"
#include "fsutil.h"
#include "json.h"
#include "loader.h"
#include "log.h"
#include "model.h"
#include "rundir.h"
#include "schedule.h"
#include "signals.h"
#include "source.h"
#include "testhook.h"
#include "train.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The choices' indices (set by ds_cli_parse) follow the order of their lists. */
enum { LR_SCALING_LINEAR, LR_SCALING_NONE };

static const char *train_dir, *val_dir, *out_dir, *arch = "resnet50", *schedule = "cosine",
                  *augment = "standard", *rrc_scale = "0.08,1", *rrc_ratio = "3/4,4/3", *resume, *init,
                  *lr_scaling = "linear";
static int schedule_kind, augment_kind, lr_scaling_kind;
static long long epochs = 90, batch = 64, accum = 1, crop = 224, pad = 0, seed = 42, log_every = 100,
                 ckpt_steps = 0, max_steps = 0, keep = 3, min_crop = 0, ramp_start = 0, ramp_end = 0, crop_step = 32,
                 val_crop = 0, val_every = 1;
static double lr = 0.1, momentum = 0.9, wd = 1e-4, warmup_epochs = 5, step_epochs = 30, step_gamma = 0.1,
              label_smoothing = 0.1, bucket_mb = 25, comm_timeout = DS_COMM_TIMEOUT;
static int nesterov = 1, bn_bias_decay = 1, override, tensorboard;
static ds_compute_options compute = DS_COMPUTE_DEFAULTS;

static ds_option options[] = {
    DS_OPT("train", DS_OPT_STRING, &train_dir, "DIR", "training shards (dspack's output directory); required"),
    DS_OPT("val", DS_OPT_STRING, &val_dir, "DIR", "validation shards, evaluated after every epoch"),
    {.name = "out", .short_name = 'o', .type = DS_OPT_STRING, .value = &out_dir, .arg = "RUN_DIR",
     .help = "run directory: checkpoints, last.h5, best.h5, metrics.jsonl (default with --resume: its directory)"},
    DS_OPT("arch", DS_OPT_STRING, &arch, "NAME",
           "network: resnet18, resnet34, resnet50, resnet101, resnet20 (CIFAR-style)"),
    DS_NUM("epochs", DS_OPT_INT, &epochs, "N", "passes over the training set (90: the ImageNet reference length)",
           1, 1e6),
    DS_NUM("batch", DS_OPT_INT, &batch, "N", "micro-batch per rank; global batch G = batch x ranks x accum", 1, 1e6),
    DS_NUM("accum", DS_OPT_INT, &accum, "N", "micro-batches accumulated per step", 1, 1e5),
    DS_NUM("lr", DS_OPT_DOUBLE, &lr, "X", "peak learning rate; with --lr-scaling linear it is the rate for G = 256 "
           "and the run uses lr x G / 256 (Goyal et al. 2017)", 0, 1e3),
    DS_CHOICE_INDEX("lr-scaling", &lr_scaling, &lr_scaling_kind, "linear|none",
                    "linear: scale --lr by G / 256; none: use --lr as given"),
    DS_NUM("momentum", DS_OPT_DOUBLE, &momentum, "X", "SGD momentum", 0, 1),
    DS_OPT("nesterov", DS_OPT_FLAG, &nesterov, NULL, "Nesterov momentum; --no-nesterov: plain (heavy-ball) momentum"),
    DS_NUM("wd", DS_OPT_DOUBLE, &wd, "X", "weight decay (L2 on every parameter, as torch.optim.SGD)", 0, 1),
    {.name = "bn-bias-decay", .type = DS_OPT_FLAG, .value = &bn_bias_decay,
     .help = "weight decay also on BN weights and biases and fc.bias; --no-bn-bias-decay: none on them (NVIDIA's "
             "ResNet-50 recipe)"},
    DS_CHOICE_INDEX("schedule", &schedule, &schedule_kind, DS_SCHEDULE_CHOICES, "learning rate after warmup"),
    DS_NUM("warmup-epochs", DS_OPT_DOUBLE, &warmup_epochs, "X", "linear warmup to the peak lr over X epochs", 0, 1e6),
    DS_NUM("step-epochs", DS_OPT_DOUBLE, &step_epochs, "X", "step schedule: epochs between decays", 0, 1e6),
    DS_NUM("step-gamma", DS_OPT_DOUBLE, &step_gamma, "X", "step schedule: factor per decay", 0, 1),
    DS_NUM("label-smoothing", DS_OPT_DOUBLE, &label_smoothing, "X", "label smoothing of the cross-entropy", 0, 1),
    DS_NUM("min-crop", DS_OPT_INT, &min_crop, "N",
           "progressive resizing (FFCV): train at N x N up to epoch --ramp-start, then at crops rising linearly to "
           "--crop (the largest) at --ramp-end, in multiples of --crop-step (0: --crop throughout)", 0, 65535),
    DS_NUM("ramp-start", DS_OPT_INT, &ramp_start, "E", "--min-crop: the ramp's first epoch (0-based, as FFCV)", 0, 1e6),
    DS_NUM("ramp-end", DS_OPT_INT, &ramp_end, "E", "--min-crop: the epoch (0-based) from which --crop is used", 0, 1e6),
    DS_NUM("crop-step", DS_OPT_INT, &crop_step, "N", "--min-crop: crops inside the ramp are rounded to multiples of N",
           1, 65535),
    DS_NUM("val-every", DS_OPT_INT, &val_every, "N",
           "validation after every N-th epoch and after the last; best.h5 is the best of those (1: each epoch)", 1,
           1e9),
    DS_NUM("val-crop", DS_OPT_INT, &val_crop, "N",
           "per-epoch validation: N x N centre crops (0: --crop; the model is planned for the larger); on val "
           "images stored at 256 by --fit crop, the standard protocol (centre 224) is also measured, apart", 0,
           65535),
    DS_NUM("crop", DS_OPT_INT, &crop, "N", "network input: N x N crops of the stored images", 1, 65535),
    DS_NUM("pad", DS_OPT_INT, &pad, "N", "--augment standard: zero padding around the stored image before random "
           "crops (4: CIFAR-style)", 0, 1024),
    DS_CHOICE_INDEX("augment", &augment, &augment_kind, DS_AUGMENT_CHOICES,
                    "standard: random crop + horizontal flip; rrc: RandomResizedCrop (a random box of the stored "
                    "image, bilinearly resized to the crop) + horizontal flip, as torchvision's ImageNet training; "
                    "none: centre crop. Evaluation always takes the centre crop"),
    DS_OPT("rrc-scale", DS_OPT_STRING, &rrc_scale, "LO,HI",
           "--augment rrc: the box's area as a fraction of the image's, uniform in [LO, HI]"),
    DS_OPT("rrc-ratio", DS_OPT_STRING, &rrc_ratio, "LO,HI",
           "--augment rrc: the box's width / height, log-uniform in [LO, HI] (numbers or fractions A/B)"),
    DS_NUM("seed", DS_OPT_INT, &seed, "N", "seed of initialisation, epoch order and augmentation", 0, 9.2e18),
    DS_OPT("resume", DS_OPT_STRING, &resume, "RUN_DIR|FILE",
           "continue exactly from a checkpoint (a run directory: its last.h5), with the same options"),
    DS_OPT("override", DS_OPT_FLAG, &override, NULL,
           "--resume: continue with options given again that change the run's result (its data, schedule, "
           "seed, ...; each is printed and recorded in the checkpoint's history); without it they are refused"),
    DS_OPT("init", DS_OPT_STRING, &init, "FILE",
           "start from a checkpoint's weights only (fc re-initialised when its class count differs)"),
    DS_COMPUTE_OPTIONS(compute, "background reader threads (0: 2, or threads / 4 past 8 threads)"),
    DS_NUM("bucket-mb", DS_OPT_DOUBLE, &bucket_mb, "X",
           "under mpirun: gradients are summed over the ranks in buckets of about X MiB, each sent as soon as "
           "backward has computed it (the results do not depend on X)", 0.001, 4096),
    DS_NUM("comm-timeout", DS_OPT_DOUBLE, &comm_timeout, "S",
           "under mpirun: a rank that stops without dying (stopped, hung) ends the job with an error naming it "
           "after S seconds of waiting for it, instead of leaving the others waiting forever; 0: wait forever", 0, 1e9),
    DS_NUM("log-every", DS_OPT_INT, &log_every, "N",
           "a log line (and metrics.jsonl line) every N steps; 0: per epoch only", 0, 1e9),
    DS_OPT("tensorboard", DS_OPT_FLAG, &tensorboard, NULL,
           "also write the metrics as TensorBoard event files (events.out.tfevents.*) into RUN_DIR"),
    DS_NUM("ckpt-steps", DS_OPT_INT, &ckpt_steps, "N", "also checkpoint every N steps (0: at epoch ends only)",
           0, 1e12),
    DS_NUM("max-steps", DS_OPT_INT, &max_steps, "N", "stop after global step N, with a checkpoint (0: no limit)",
           0, 1e15),
    DS_NUM("keep", DS_OPT_INT, &keep, "N", "newest checkpoints kept (and best.h5's)", 1, 1e6),
    {0},
};

static ds_cli cli = {
    .prog = "dstrain",
    .args = "[options] --train DIR -o RUN_DIR",
    .summary = "Train a ResNet on dspack shards; checkpoints and metrics go to RUN_DIR.",
    .epilog = "Defaults are the ImageNet ResNet-50 recipe of Goyal et al. (2017) and He et al., \"Bag of Tricks\"\n"
              "(2019): SGD with Nesterov momentum 0.9, lr 0.1 per 256 images scaled linearly with the global\n"
              "batch, 5 warmup epochs, cosine decay, weight decay 1e-4, label smoothing 0.1, 90 epochs, random\n"
              "224 crops + flips from 256-pixel shards (dspack --size 256 --fit crop). torchvision's reference\n"
              "augmentation, RandomResizedCrop(224) + flips: --augment rrc; its boxes come from the stored images,\n"
              "so a larger training set (e.g. dspack --size 320) keeps more detail for small boxes.\n"
              "The recipe of a plain PyTorch script (batch 64, lr 0.01 x ranks, momentum 0.9, no weight decay,\n"
              "10 epochs, Resize((224, 224)), no augmentation): dspack --size 224 --fit squash, then\n"
              "  dstrain --batch 64 --lr 0.04 --no-nesterov --wd 0 --epochs 10 --warmup-epochs 0\n"
              "          --schedule constant --label-smoothing 0 --augment none --crop 224\n"
              "Under mpirun each rank takes one device; only rank 0 writes files.",
    .min_pos = 0,
    .max_pos = 0,
    .opts = options,
};

/* Options that belong to one process, never taken back from a checkpoint by --resume. */
static const char *const per_process[] = {"resume", "init", "out", "override", "max-steps", "threads",
                                          "loader-threads", "comm-timeout", NULL};
/* Options that --resume may change without --override: what is looked at, logged and kept;
 * --train, compared by its images, not its path (check_resume); and how the same global batch
 * is computed, for a run that goes on with fewer GPUs (G itself is checked: check_resume). */
static const char *const free_to_change[] = {"val", "val-every", "val-crop", "log-every", "ckpt-steps", "keep",
                                             "bucket-mb", "tensorboard", "train", "batch", "accum", "device",
                                             "deterministic", NULL};

static int listed(const char *const *list, const char *name)
{
    for (; *list; list++)
        if (!strcmp(*list, name)) return 1;
    return 0;
}

/* --resume: every option of the run that is not given again is taken from the checkpoint's
 * config; one given again with another value is printed, and refused when it changes what is
 * trained unless --override says it is meant. The changes go into the run's history (hist). */
static void restore_options(const char *path, const ds_ckpt_meta *rm, ds_json *hist)
{
    ds_cli_change *ch = NULL;
    int n = ds_cli_restore(&cli, rm->config, per_process, path, &ch);
    if (n < 0) ds_die("cannot resume from %s", path);
    char refused[2048] = "";
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        const char *name = ch[i].opt->name;
        if (!strcmp(name, "train")) {   /* the same directory by another name is no change */
            char *now = ds_realpath(ch[i].now), *was = ds_realpath(ch[i].saved);
            int same = now && was && !strcmp(now, was);
            free(now);
            free(was);
            if (same) continue;
        }
        ds_json_begin(hist, name);
        ds_json_string(hist, "from", ch[i].saved);
        ds_json_string(hist, "to", ch[i].now);
        ds_json_end(hist);
        if (listed(free_to_change, name) || override) {
            ds_warn("resuming with --%s %s (the run had %s)%s", name, ch[i].now, ch[i].saved,
                    listed(free_to_change, name) ? "" : ", by --override");
            continue;
        }
        if (used < sizeof refused)
            used += (size_t)snprintf(refused + used, sizeof refused - used, "%s--%s %s (the run's: %s)", used ? ", " : "",
                                     name, ch[i].now, ch[i].saved);
    }
    free(ch);
    if (used)
        ds_die("%s: %s: an exact resume continues with the run's own options, which it takes from the checkpoint "
               "when they are not given; leave these out, or add --override to continue with them", path, refused);
}

/* The checkpoint a run resumes from decides the architecture, and must agree with the data
 * and the global batch. */
static int check_resume(const char *path, ds_ckpt_meta *rm, const ds_source *tr, uint64_t digest, int G,
                        ds_json *hist)
{
    if (ds_cli_given(&cli, "arch") && strcmp(arch, rm->arch))
        return ds_err("%s: a %s checkpoint cannot resume an --arch %s run", path, rm->arch, arch);
    arch = rm->arch;
    if (rm->global_batch != G)
        return ds_err("%s: saved with global batch %d, but these options make %d (batch x ranks x accum must match "
                      "to resume)", path, rm->global_batch, G);
    if (rm->seed != (uint64_t)seed && !override)
        return ds_err("%s: saved with --seed %llu, not %lld: an exact resume needs the same seed", path,
                      (unsigned long long)rm->seed, seed);
    /* The training options a checkpoint records as attributes (checkpoint_attrs.c's table says
     * which) are taken from it when not given again, like the config's. */
    for (ds_option *o = options; o->name; o++) {
        long long saved;
        if (ds_ckpt_meta_recorded(rm, o->name, &saved) != 1) continue;
        long long now = o->type == DS_OPT_FLAG ? *(int *)o->value : *(long long *)o->value;
        if (ds_cli_given(&cli, o->name) && now != saved) {
            if (override) continue;
            if (o->type == DS_OPT_FLAG)
                return ds_err("%s: saved with --%s%s: an exact resume needs the same", path, saved ? "" : "no-",
                              o->name);
            return ds_err("%s: saved with --%s %lld, not %lld: an exact resume needs the same", path, o->name, saved,
                          now);
        }
        if (o->type == DS_OPT_FLAG) *(int *)o->value = (int)saved;
        else *(long long *)o->value = saved;
    }
    if (ds_classes_match(tr->classes, tr->num_classes, tr->name, rm->classes, rm->num_classes, path)) return -1;
    /* the images themselves: another set (or the same one changed) is a change like any option */
    if (!rm->train_digest) {
        ds_info("%s records no digest of its training set (an older dstrain): --train %s is not checked", path,
                tr->name);
    } else if (rm->train_digest != digest) {
        char was[24], now[24];
        snprintf(was, sizeof was, "%016llx", (unsigned long long)rm->train_digest);
        snprintf(now, sizeof now, "%016llx", (unsigned long long)digest);
        ds_json_begin(hist, "train_digest");
        ds_json_string(hist, "from", was);
        ds_json_string(hist, "to", now);
        ds_json_end(hist);
        if (!override)
            return ds_err("%s: --train %s holds other images than the run trained on (%zu images, digest %s; the "
                          "run's: %s): add --override to continue on them", path, tr->name, tr->n, now, was);
        ds_warn("resuming on another training set (%zu images, digest %s; the run's: %s), by --override", tr->n, now,
                was);
    }
    return 0;
}

/* A class the training set has no image of (an empty class folder) still has an output. */
static void warn_empty_classes(const ds_source *tr)
{
    size_t *count = ds_xcalloc((size_t)tr->num_classes, sizeof *count);
    for (size_t i = 0; i < tr->n; i++) count[tr->labels[i]]++;
    char names[512] = "";
    size_t used = 0;
    int empty = 0;
    for (int c = 0; c < tr->num_classes; c++)
        if (!count[c]) {
            empty++;
            if (used < sizeof names)
                used += (size_t)snprintf(names + used, sizeof names - used, "%s%s", used ? ", " : "", tr->classes[c]);
        }
    if (empty)
        ds_warn("%d of the %d classes of --train %s have no training image (%s): the network still has an output "
                "for each, which nothing teaches", empty, tr->num_classes, tr->name, names);
    free(count);
}

/* Whether the run directory is the one the checkpoint resumed from lies in. */
static int same_dir(const char *dir, const char *ckpt)
{
    char *parent = ds_xstrdup(ckpt), *slash = strrchr(parent, '/');
    if (slash) *slash = 0;
    else strcpy(parent, ".");
    char *a = ds_realpath(dir), *b = ds_realpath(parent);
    int same = a && b && !strcmp(a, b);
    free(a);
    free(b);
    free(parent);
    return same;
}

/* srun without an MPI plugin (or an array of jobs) starts copies that each see a world of
 * one: N runs into one directory. A task of a Slurm step of several that sees itself alone
 * says so instead. */
static void check_launcher(int world)
{
    const char *procid = getenv("SLURM_PROCID"), *tasks = getenv("SLURM_STEP_NUM_TASKS");
    if (!tasks) tasks = getenv("SLURM_NTASKS");
    if (world != 1 || !procid || !tasks || atoi(tasks) <= 1) return;
    ds_die("Slurm started this step as %s tasks (SLURM_PROCID %s), but MPI sees this process alone: each task "
           "would train a run of its own into the same directory. Launch with srun --mpi=pmix (or pmi2), or "
           "mpirun, so the tasks form one job", tasks, procid);
}

/* --resume's first half, before any check: the checkpoint's meta, the run's options taken back
 * (restore_options) and, on another number of ranks, --accum derived. The history line of
 * this resume is opened in hist. Returns the checkpoint's path. */
static char *start_resume(int world, ds_ckpt_meta *meta, ds_json *hist)
{
    char *resume_path = ds_rundir_resolve(resume);
    if (!resume_path) ds_die("cannot resume");
    if (ds_ckpt_read_meta(resume_path, meta) || ds_ckpt_meta_require(meta, resume_path, DS_CKPT_FOR_RESUME))
        ds_die("cannot resume from %s", resume_path);
    const char *base = strrchr(resume_path, '/');
    ds_json_begin(hist, NULL);
    ds_json_int(hist, "step", meta->step);
    ds_json_string(hist, "checkpoint", base ? base + 1 : resume_path);
    ds_json_begin(hist, "changed");
    restore_options(resume_path, meta, hist);
    /* On another number of ranks the run's global batch needs another --accum: derived when
     * not given and the micro-batch divides it (Continuing on fewer GPUs, docs/TOOLS.md). */
    long long a = ds_loader_accum_for((int)batch, world, meta->global_batch);
    if (meta->world_size != world && !ds_cli_given(&cli, "accum") && a && a != accum) {
        ds_info("the run's global batch of %d on %d rank%s: --accum %lld (the run had %lld on %d)",
                meta->global_batch, world, world > 1 ? "s" : "", a, accum, meta->world_size);
        accum = a;
    }
    return resume_path;
}

/* --resume's second half, once the model holds the checkpoint: later checkpoints of the same
 * directory kept apart and said, and this resume's line added to the run's history. */
static void finish_resume(const char *resume_path, int64_t start_step, int rank, ds_ckpt_meta *meta, ds_json *hist)
{
    int moved = 0;
    char *aside = rank == 0 ? ds_rundir_set_aside(out_dir, start_step, &moved) : NULL;
    if (ds_comm_any(moved < 0)) ds_die("cannot resume from %s", resume_path);
    ds_json_end(hist);   /* "changed" */
    if (aside) {
        ds_warn("%s went on past step %lld: its %d later checkpoint%s and metrics.jsonl as they were are moved "
                "to %s; this run continues from step %lld", out_dir, (long long)start_step, moved,
                moved == 1 ? "" : "s", aside, (long long)start_step);
        const char *base = strrchr(aside, '/');
        ds_json_string(hist, "moved_aside", base ? base + 1 : aside);
    }
    free(aside);
    ds_json_end(hist);
    ds_ckpt_meta_add_history(meta, ds_json_text(hist));
}

/* The checks of the options among themselves (usage errors, exit 2); the --rrc-* ranges parsed. */
static void check_usage(double scale_range[2], double ratio_range[2])
{
    if (!train_dir) ds_usage_error(&cli, "--train DIR is required%s", resume ? " (the checkpoint records none)" : "");
    if (!out_dir && !resume) ds_usage_error(&cli, "-o/--out RUN_DIR is required");
    if (!ds_arch_known(arch)) ds_usage_error(&cli, "unknown --arch '%s' (known: %s)", arch, ds_arch_names());
    if (nesterov && momentum == 0) ds_usage_error(&cli, "--nesterov needs a non-zero --momentum");
    if (ds_cli_range(rrc_scale, scale_range) || !(scale_range[0] > 0 && scale_range[0] <= scale_range[1]))
        ds_usage_error(&cli, "--rrc-scale wants LO,HI with 0 < LO <= HI, not '%s'", rrc_scale);
    if (ds_cli_range(rrc_ratio, ratio_range) || !(ratio_range[0] > 0 && ratio_range[0] <= ratio_range[1]))
        ds_usage_error(&cli, "--rrc-ratio wants LO,HI with 0 < LO <= HI, not '%s'", rrc_ratio);
    if (augment_kind == DS_AUGMENT_RRC && pad != 0)
        ds_usage_error(&cli, "--pad is for --augment standard; --augment rrc takes its boxes from the unpadded image");
    if (augment_kind != DS_AUGMENT_RRC && (ds_cli_given(&cli, "rrc-scale") || ds_cli_given(&cli, "rrc-ratio")))
        ds_usage_error(&cli, "--rrc-scale and --rrc-ratio need --augment rrc");
    if (min_crop > crop) ds_usage_error(&cli, "--min-crop %lld is larger than --crop %lld", min_crop, crop);
    if (min_crop && ramp_end < ramp_start)
        ds_usage_error(&cli, "--ramp-end %lld is before --ramp-start %lld", ramp_end, ramp_start);
    if (!min_crop && (ds_cli_given(&cli, "ramp-start") || ds_cli_given(&cli, "ramp-end")))
        ds_usage_error(&cli, "--ramp-start and --ramp-end need --min-crop");
    if (!val_crop) val_crop = crop;
}

/* --init: the weights of a checkpoint, fc kept when the class count matches. */
static void load_init(ds_model *m, const ds_source *tr)
{
    ds_ckpt_meta im;
    ds_ckpt_meta_init(&im);
    if (ds_ckpt_read_meta(init, &im) || ds_ckpt_meta_require(&im, init, DS_CKPT_FOR_INIT))
        ds_die("cannot use --init %s", init);
    int same = im.num_classes == tr->num_classes;
    if (ds_ckpt_load(init, m, NULL, same ? 0 : DS_CKPT_SKIP_FC)) ds_die("cannot use --init %s", init);
    if (same && im.classes &&
        ds_classes_match(tr->classes, tr->num_classes, train_dir, im.classes, im.num_classes, init) == 0)
        ds_info("initialised from %s", init);
    else if (same)
        ds_info("initialised from %s (same class count; its class names differ, the fc layer is kept)", init);
    else
        ds_info("initialised from %s; fc re-initialised: %d classes there, %d here", init, im.num_classes,
                tr->num_classes);
    ds_ckpt_meta_free(&im);
}

/* What every checkpoint of this run records besides the tensors. */
static void record_run(ds_ckpt_meta *meta, const ds_source *tr, const ds_backend *be, int world, int G,
                       double base_lr, uint64_t digest)
{
    char *config = ds_cli_json(&cli);
    ds_ckpt_meta_set_config(meta, config);
    free(config);
    ds_ckpt_meta_set_classes(meta, tr->classes, tr->num_classes);
    meta->input_size = (int)crop;
    meta->seed = (uint64_t)seed;
    meta->world_size = world;
    meta->global_batch = G;
    meta->data_height = tr->height;
    meta->data_width = tr->width;
    meta->data_fit = tr->fit;
    meta->lr_effective = base_lr;
    meta->train_digest = digest;
    ds_ckpt_meta_set_backend(meta, be);
    for (const ds_option *o = options; o->name; o++)   /* the settings a checkpoint records */
        if (o->type == DS_OPT_FLAG || o->type == DS_OPT_INT)
            ds_ckpt_meta_record(meta, o->name, o->type == DS_OPT_FLAG ? *(int *)o->value : *(long long *)o->value);
}

/* The start line (what computes, the data, how the lr was derived) and a warmup that cannot
 * end within the run. */
static void say_start(const ds_backend *be, const ds_source *tr, int world, int G, double base_lr)
{
    if (warmup_epochs >= (double)epochs && warmup_epochs > 0)
        ds_warn("--warmup-epochs %g is not shorter than the %lld-epoch run: the learning rate rises all run long and "
                "never reaches its peak %g; a short run wants a short warmup (e.g. --warmup-epochs %g)", warmup_epochs,
                epochs, base_lr, epochs / 10.0);
    char computes[128], lr_how[96];
    if (lr_scaling_kind == LR_SCALING_LINEAR)
        snprintf(lr_how, sizeof lr_how, " = %g x %d/256 (--lr-scaling linear)", lr, G);
    else
        snprintf(lr_how, sizeof lr_how, " (--lr as given)");
    ds_info("%s on %s, %d rank%s, gradients summed %s; %zu training images of %dx%d, %d classes; lr %g%s", arch,
            ds_backend_describe(be, omp_get_max_threads(), computes, sizeof computes), world, world > 1 ? "s" : "",
            be->reduction ? be->reduction() : "?", tr->n, tr->height, tr->width, tr->num_classes, base_lr, lr_how);
}

int main(int argc, char **argv)
{
    if (ds_comm_init(&argc, &argv)) return 1;
    char **pos;
    ds_cli_parse(&cli, argc, argv, &pos);
    ds_comm_set_timeout(comm_timeout);
    int world = ds_comm_world(), rank = ds_comm_rank();
    if (rank != 0) ds_verbosity = -1;
    check_launcher(world);
    if (resume && init) ds_usage_error(&cli, "--resume and --init exclude each other");

    /* --resume first: the run's own options fill in what is not given again, before any check */
    ds_ckpt_meta meta;
    ds_ckpt_meta_init(&meta);
    ds_json hist;   /* this resume's line of the run's history */
    ds_json_init(&hist, DS_JSON_COMPACT);
    char *resume_path = resume ? start_resume(world, &meta, &hist) : NULL;

    double scale_range[2], ratio_range[2];
    check_usage(scale_range, ratio_range);

    ds_source tr, va;
    int have_val = val_dir != NULL;
    if (ds_source_open_shards(&tr, train_dir)) ds_die("cannot use --train %s", train_dir);
    if (have_val && ds_source_open_shards(&va, val_dir)) ds_die("cannot use --val %s", val_dir);
    if (have_val && ds_classes_match(tr.classes, tr.num_classes, train_dir, va.classes, va.num_classes, val_dir))
        ds_die("--train and --val must hold the same classes");
    /* The training batches' shape, the one source of the global batch and of what the model
     * and the feed are planned for; the thread count follows the backend's set-up. */
    ds_loader_config lc = {.batch = (int)batch, .world = world, .rank = rank, .accum = (int)accum, .crop = (int)crop,
                           .pad = (int)pad, .train = 1, .seed = (uint64_t)seed,
                           .augment = augment_kind,
                           .rrc_scale = {scale_range[0], scale_range[1]},
                           .rrc_ratio = {ratio_range[0], ratio_range[1]},
                           .read_delay_ms = (int)ds_test_hooks_get()->read_delay_ms};
    /* before the model is planned for it (a crop of 1000 would first ask for 100 GB) */
    if (ds_loader_check_crop(&lc, &tr)) ds_die("cannot use --train %s", train_dir);
    if (have_val && (val_crop > va.height || val_crop > va.width))
        ds_die("--val-crop %lld is larger than the %dx%d images of --val %s", val_crop, va.height, va.width, val_dir);
    /* The standard protocol is always measured where the val images allow it: beside
     * --val-crop when that is another crop. */
    int standard_crop = have_val ? ds_eval_standard_crop(&va) : 0;
    if (standard_crop == val_crop) standard_crop = 0;
    int G = (int)ds_loader_global_batch(&lc);
    uint64_t digest = ds_source_digest(&tr);
    if (have_val && ds_source_digest(&va) == digest)
        ds_warn("--val %s holds the same images as --train: validation measures the training set", val_dir);
    warn_empty_classes(&tr);
    /* The config records the data by absolute paths, so that --resume RUN alone finds them
     * from any directory. */
    train_dir = ds_realpath(train_dir);
    if (have_val) val_dir = ds_realpath(val_dir);

    if (resume) {
        if (check_resume(resume_path, &meta, &tr, digest, G, &hist)) ds_die("cannot resume from %s", resume_path);
        if (!out_dir) {
            char *dir = ds_xstrdup(resume_path), *slash = strrchr(dir, '/');
            if (slash) *slash = 0;
            else strcpy(dir, ".");
            out_dir = dir;
        }
    }

    /* Again after --resume: it may have taken --min-crop from the checkpoint beside a --crop
     * given now (the check above saw the command line only, a usage error). */
    if (min_crop > crop) ds_die("--min-crop %lld is larger than --crop %lld", min_crop, crop);

    if (rank == 0 && ds_rundir_lock(out_dir)) ds_die("cannot use -o %s", out_dir);
    if ((!resume || !same_dir(out_dir, resume_path)) && ds_rundir_has_checkpoints(out_dir))
        ds_die("%s already holds a run's checkpoints: continue it with --resume %s, or choose another -o", out_dir,
               out_dir);

    const ds_backend *be = ds_compute_setup(&compute, 1);
    if (!be) ds_die("no usable --device %s", compute.device);
    int nthreads = omp_get_max_threads();
    if (compute.loader_threads == 0) compute.loader_threads = nthreads > 8 ? nthreads / 4 : 2;
    lc.threads = (int)compute.loader_threads;
    /* Planned once for the largest input: training crops never exceed --crop. */
    int planned = (int)(have_val && val_crop > crop ? val_crop : crop);
    if (standard_crop > planned) planned = standard_crop;
    ds_model_config mc = {.arch = arch, .num_classes = tr.num_classes, .max_batch = lc.batch,
                          .height = planned, .width = planned, .training = 1,
                          .bucket_bytes = (size_t)(bucket_mb * 1048576.0)};
    ds_model *m = ds_model_create(be, &mc);
    if (!m) ds_die("cannot build the %s model", arch);
    ds_model_init(m, (uint64_t)seed);
    int64_t start_step = 0;
    if (resume) {
        ds_ckpt_meta_free(&meta);
        if (ds_ckpt_load(resume_path, m, &meta, DS_CKPT_OPTIMIZER)) ds_die("cannot resume from %s", resume_path);
        start_step = meta.step;
        ds_info("resuming from %s: step %lld, %lld epochs done", resume_path, (long long)meta.step,
                (long long)meta.epoch);
    } else if (init) {
        load_init(m, &tr);
    }

    if (resume) finish_resume(resume_path, start_step, rank, &meta, &hist);
    ds_json_free(&hist);

    double base_lr = lr_scaling_kind == LR_SCALING_LINEAR ? lr * G / 256.0 : lr;
    record_run(&meta, &tr, be, world, G, base_lr, digest);

    ds_train_plan plan = {
        .train = &tr, .val = have_val ? &va : NULL, .out = out_dir, .epochs = epochs, .loader = lc,
        .schedule = {.kind = (ds_schedule_kind)schedule_kind, .base = base_lr, .warmup_epochs = warmup_epochs,
                     .step_epochs = step_epochs, .gamma = step_gamma},
        .ramp = meta.crop_ramp,   /* as the walk above recorded it from --min-crop .. --crop-step */
        .val_crop = (int)val_crop,
        .val_every = (int)val_every,
        .standard_crop = standard_crop,
        .sgd = {.momentum = (float)momentum, .weight_decay = (float)wd, .nesterov = nesterov,
                .bn_bias_decay = bn_bias_decay},
        .smoothing = (float)label_smoothing, .log_every = (int)log_every, .ckpt_steps = ckpt_steps,
        .max_steps = max_steps, .keep = (int)keep, .start_step = start_step, .meta = &meta,
        .pause_after_step = ds_test_hooks_get()->pause_after_step,
        .progress = ds_cli_progress_mode(),
        .nan_val_epoch = ds_test_hooks_get()->nan_val_epoch,
        .tensorboard = tensorboard,
    };
    say_start(be, &tr, world, G, base_lr);
    if (ds_signals_install()) ds_die("cannot handle signals");
    int rc = ds_train(m, &plan);
    if (rc >= 0 && ds_test_hooks_get()->pause_before_exit) ds_test_pause("dstrain is done");
    int sig = ds_signals_pending();

    ds_model_free(m);
    ds_ckpt_meta_free(&meta);
    ds_source_close(&tr);
    if (have_val) ds_source_close(&va);
    free(resume_path);
    if (rc < 0) ds_comm_abort(1);
    ds_comm_free();
    return rc == 1 && sig ? 128 + sig : 0;
}
