#include "train.h"

#include "comm.h"
#include "evaluate.h"
#include "feed.h"
#include "fsutil.h"
#include "loader.h"
#include "log.h"
#include "rundir.h"
#include "signals.h"
#include "testhook.h"
#include "topk.h"

#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

typedef struct {
    const ds_train_plan *p;
    ds_model *m;
    const ds_backend *be;
    ds_loader *train_loader, *val_loader;
    ds_feed train_feed, val_feed;
    ds_metrics_log log;
    int64_t S;               /* steps per epoch (the training loader's) */
    int64_t total;           /* steps of the whole run */
    int64_t G;               /* global batch */
    ds_schedule schedule;    /* the plan's, over S x epochs steps */
    int crop;                /* the running epoch's training crop */
    char protocol[96];       /* what validation measures (ds_eval_protocol) */
    double best_top1;        /* best val top-1 of any finished epoch, -1 before the first */
    double epoch_loss_sum;   /* sum of step losses in the running epoch (saved, for resume) */
    double epoch_seconds;    /* training seconds in the running epoch (saved) */
    int64_t saved_step;      /* global step of the newest checkpoint, -1: none this run */
    double epoch_t0, epoch_wait0; /* wall clock and loader wait when this process began the epoch */
    char last_path[4096];    /* newest checkpoint written (or resumed from), for messages */
    ds_progress bar;         /* images of the steps this process runs, on a terminal */
    double t_start;          /* when this process began training */
    int said_first;          /* the first progress line (before --log-every's) is out */
} run;

/* The reduction queue's record (comm.h), or zeros where the backend reduces out of the
 * host's sight (NCCL). */
static ds_comm_reduce_record reduce_record(const run *r)
{
    ds_comm_reduce_record rec = {0};
    if (r->be->reduce_stats) r->be->reduce_stats(&rec);
    return rec;
}

/* The step's last backward has handed its buckets (gradients + BN statistics) to the
 * backend's reduction as it went; waits for their sums (the loss is summed over the ranks
 * when it is read: finish_step). Where the host reduction ran them, --verbose says in what
 * order the first bucket was queued, backward began its last layer, and comm's thread
 * began that bucket (process-wide event numbers), and how long before that layer the
 * thread began (negative: only after it; bench/overlap_bench.sh reads these). */
static void reduce_step(run *r, int64_t g, uint64_t queued0)
{
    ds_model_reduce_wait(r->m);
    ds_comm_reduce_record rec = reduce_record(r);
    if (rec.queued > queued0)
        ds_debug("step %lld: %llu gradient buckets reduced; events: first queued #%llu, backward's last layer "
                 "#%llu, first begun #%llu (%.3f ms before that layer)",
                 (long long)g + 1, (unsigned long long)(rec.queued - queued0),
                 (unsigned long long)rec.first_queued_event, (unsigned long long)ds_model_last_layer_event(r->m),
                 (unsigned long long)rec.first_begun_event,
                 1e3 * (ds_model_last_layer_time(r->m) - rec.first_begun_time));
}

/* A fingerprint of a tensor's bits: XXH3-64, the hash shards already carry. */
static uint64_t fingerprint(const void *data, size_t bytes) { return XXH3_64bits(data, bytes); }

/* docs/DESIGN.md §3: every rank holds the same weights, BN running statistics and momentum, so rank
 * 0's checkpoint stands for all. Checked before each checkpoint: every rank fingerprints
 * each tensor and compares with rank 0's; a rank that differs names the first tensor and
 * the run fails instead of saving one rank's view. Costs one pass over the state. */
static int check_replicas(run *r, int64_t g)
{
    if (r->p->loader.world == 1) return 0;
    ds_model *m = r->m;
    int nt = ds_model_tensor_count(m);
    size_t most = 1;
    for (int i = 0; i < nt; i++)
        if (ds_model_tensor(m, i)->count > most) most = ds_model_tensor(m, i)->count;
    float *host = ds_xmalloc(most * sizeof *host + sizeof(int64_t));
    uint64_t *mine = ds_xcalloc(2 * (size_t)nt, sizeof *mine), *root = ds_xmalloc(2 * (size_t)nt * sizeof *root);
    for (int i = 0; i < nt; i++) {
        const ds_tensor_info *t = ds_model_tensor(m, i);
        ds_model_tensor_get(m, i, host);
        mine[2 * i] = fingerprint(host, t->kind == DS_TENSOR_COUNTER ? sizeof(int64_t) : t->count * sizeof *host);
        if (t->kind == DS_TENSOR_PARAM && ds_model_momentum_started(m) && ds_model_momentum_get(m, i, host) == 0)
            mine[2 * i + 1] = fingerprint(host, t->count * sizeof *host);
    }
    memcpy(root, mine, 2 * (size_t)nt * sizeof *root);
    ds_comm_bcast(root, 2 * (size_t)nt * sizeof *root, 0);
    int bad = -1;
    for (int i = 0; i < 2 * nt && bad < 0; i++)
        if (mine[i] != root[i]) bad = i;
    if (bad >= 0)
        ds_err("step %lld: rank %d's %s%s differs from rank 0's: the ranks have diverged", (long long)g, r->p->loader.rank,
               ds_model_tensor(m, bad / 2)->name, bad % 2 ? " momentum" : "");
    free(host);
    free(mine);
    free(root);
    if (ds_comm_any(bad >= 0)) return -1;
    ds_debug("step %lld: the %d ranks hold identical weights, BN running statistics and momentum", (long long)g,
             r->p->loader.world);
    return 0;
}

/* Writes the checkpoint for global step g (rank 0), moves last.h5 (and best.h5 when
 * `best`), prunes old ones. Every rank returns the same status. */
static int save(run *r, int64_t g, int best)
{
    const ds_train_plan *p = r->p;
    int rc = 0;
    ds_comm_set_where("checkpoint of step %lld", (long long)g);
    if (check_replicas(r, g)) return -1;
    if (p->loader.rank == 0) {
        ds_ckpt_meta *meta = p->meta;
        meta->epoch = g / r->S;
        meta->step = g;
        meta->epoch_loss_sum = r->epoch_loss_sum;
        meta->epoch_seconds = r->epoch_seconds;
        char *path = ds_rundir_ckpt_path(p->out, g);
        const char *name = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        rc = ds_ckpt_save(path, r->m, meta);
        if (!rc) rc = ds_rundir_link(p->out, "last.h5", name);
        if (!rc && best) rc = ds_rundir_link(p->out, "best.h5", name);
        if (!rc) rc = ds_rundir_prune(p->out, p->keep);
        if (!rc) snprintf(r->last_path, sizeof r->last_path, "%s", path);
        free(path);
    }
    if (ds_comm_any(rc != 0)) return -1;
    r->saved_step = g;
    return 0;
}

/* metrics.jsonl is rank 0's; a row it cannot write is said, and training goes on. */
static int logging(const run *r) { return r->p->loader.rank == 0 && r->log.f; }
static void log_failed(void) { ds_warn("metrics.jsonl could not be written; training goes on"); }

/* One validation pass at crop x crop centre crops into t (summed over the ranks); nan_first:
 * the test hook's poisoned first image. */
static int validate(run *r, ds_topk *t, int crop, int nan_first)
{
    const ds_train_plan *p = r->p;
    ds_eval_options o = {.progress = 0, .nan_first = nan_first};
    if (ds_loader_set_crop(r->val_loader, crop)) return -1;
    memcpy(o.mean, p->meta->mean, sizeof o.mean);
    memcpy(o.std, p->meta->std, sizeof o.std);
    double secs;
    int rc = ds_evaluate(r->m, r->val_loader, &r->val_feed, &o, t, &secs);
    if (ds_comm_any(rc != 0)) return -1;
    ds_topk_reduce(t);
    return 0;
}

/* Resident memory (VmRSS in /proc/self/status) in kB, 0 where there is none: printed each
 * epoch, so a run that grows over days shows it (test_long_run checks it stays flat). */
static long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    long kb = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "VmRSS:", 6)) {
            kb = strtol(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

/* The share of the wall time since (t0, wait0) that training spent blocked on the loader. */
static double data_wait(const run *r, double t0, double wait0)
{
    double dt = ds_now() - t0, w = ds_loader_wait_seconds(r->train_loader) - wait0;
    double f = dt > 0 ? w / dt : 0;
    return f < 0 ? 0 : f > 1 ? 1 : f;
}

/* Said on the progress lines when the loader holds training back by more than 10%. */
static const char *input_bound_note(char *buf, size_t len, double wait)
{
    if (wait > 0.10)
        snprintf(buf, len, "  input-bound: %.0f%% of step time waiting for data", 100 * wait);
    else
        buf[0] = 0;
    return buf;
}

/* End of epoch e (0-based; the global step is g): validation, the epoch's lines, the
 * metrics row and the checkpoint. */
static int end_epoch(run *r, int64_t e, int64_t g, double lr)
{
    const ds_train_plan *p = r->p;
    double wait = data_wait(r, r->epoch_t0, r->epoch_wait0);  /* before validation's time counts */
    char note[96];
    input_bound_note(note, sizeof note, wait);
    ds_topk t, st;
    ds_topk_init(&t, ds_model_config_of(r->m)->num_classes);
    ds_topk_init(&st, ds_model_config_of(r->m)->num_classes);
    int have_val = p->val != NULL && (p->val_every <= 1 || (e + 1) % p->val_every == 0 || e + 1 == p->epochs);
    int have_std = have_val && p->standard_crop > 0;
    ds_comm_set_where("validation of epoch %lld", (long long)e + 1);
    if ((have_val && validate(r, &t, p->val_crop, p->nan_val_epoch == e + 1)) ||
        (have_std && validate(r, &st, p->standard_crop, 0))) {
        ds_topk_free(&t);
        ds_topk_free(&st);
        return -1;
    }
    double loss = r->epoch_loss_sum / (double)r->S;
    double ips = r->epoch_seconds > 0 ? (double)(r->S * r->G) / r->epoch_seconds : 0;
    ds_metrics_row row = {.epoch = e + 1, .train_loss = loss, .val_top1 = have_val ? ds_topk_top1(&t) : NAN,
                          .val_top5 = have_val ? ds_topk_top5(&t) : NAN, .images_per_s = ips,
                          .seconds = r->epoch_seconds};
    ds_metrics_epoch er = {.step = g, .epoch = e + 1, .crop = r->crop, .loss = loss, .lr = lr, .images_per_sec = ips,
                           .seconds = r->epoch_seconds, .data_wait = wait, .rss_kb = rss_kb(), .have_val = have_val};
    /* the standard protocol, when measured beside another, in its own words and field */
    char std_text[160] = "", std_name[96] = "";
    if (have_std) {
        ds_eval_protocol(std_name, sizeof std_name, p->val, p->standard_crop, 0);
        snprintf(std_text, sizeof std_text, "  standard (%s): top-1 %.2f%%  top-5 %.2f%%", std_name,
                 100 * ds_topk_top1(&st), 100 * ds_topk_top5(&st));
        er.have_standard = 1, er.std_protocol = std_name;
        er.std_top1 = ds_topk_top1(&st), er.std_top5 = ds_topk_top5(&st), er.std_loss = ds_topk_loss(&st);
        er.std_nonfinite = st.nonfinite;
    }
    int64_t nonfinite = t.nonfinite + st.nonfinite, scored = t.count + st.count;
    ds_topk_free(&st);
    if (have_val) {
        er.val_top1 = row.val_top1, er.val_top5 = row.val_top5, er.val_loss = ds_topk_loss(&t);
        er.val_nonfinite = t.nonfinite;
        er.val_crop = p->val_crop, er.protocol = r->protocol;
        ds_info("epoch %lld/%lld  crop %d  train loss %.4f  val top-1 %.2f%%  top-5 %.2f%%  loss %.4f  (%lld images, "
                "%s; %.0f img/s, %.0f s, RSS %.1f MB)%s%s",
                (long long)(e + 1), (long long)p->epochs, r->crop, loss, 100 * row.val_top1, 100 * row.val_top5,
                ds_topk_loss(&t), (long long)t.count, r->protocol, ips, r->epoch_seconds, er.rss_kb / 1024.0, std_text,
                note);
    } else {
        ds_info("epoch %lld/%lld  crop %d  train loss %.4f  (%.0f img/s, %.0f s, RSS %.1f MB)%s", (long long)(e + 1),
                (long long)p->epochs, r->crop, loss, ips, r->epoch_seconds, er.rss_kb / 1024.0, note);
    }
    if (nonfinite)
        ds_warn("epoch %lld: %lld of %lld validation images gave non-finite outputs (NaN or Inf logits), counted "
                "as wrong: this epoch has no val score and never becomes best.h5",
                (long long)(e + 1), (long long)nonfinite, (long long)scored);
    if (logging(r) && ds_metrics_log_epoch(&r->log, &er)) log_failed();
    /* the checkpoint's row records no score for such a validation, so a resume never takes it
     * for the best either */
    if (nonfinite) row.val_top1 = row.val_top5 = NAN;
    ds_ckpt_meta_add_metrics(p->meta, &row);
    int best = have_val && !nonfinite && row.val_top1 > r->best_top1;
    if (best) r->best_top1 = row.val_top1;
    ds_topk_free(&t);
    r->epoch_loss_sum = r->epoch_seconds = 0;
    return save(r, g, best);
}

/* DS_TESTHOOK_PAUSE_AFTER_STEP: step g is done and written; a signal that arrives now stops the
 * run at g, however fast the machine would have gone on. */
static void pause_if_asked(const run *r, int64_t g)
{
    if (r->p->pause_after_step <= 0 || g != r->p->pause_after_step) return;
    char what[64];
    snprintf(what, sizeof what, "step %lld is done", (long long)g);
    ds_test_pause(what);
}

/* The steps since the last progress line. */
typedef struct {
    double t_run;          /* when this process began training, at step g_run */
    int64_t g_run;
    double t0, wait0;      /* when the window began, and the loader's wait then */
    double loss;           /* the window's summed step losses */
    int64_t steps;
} window;

/* Every --log-every steps: the progress line and the metrics row of the window, which then
 * starts again. */
static void log_progress(run *r, window *w, int64_t e, int64_t g, double lr, double now)
{
    const ds_train_plan *p = r->p;
    double ips = (double)(w->steps * r->G) / (now - w->t0);
    double per_step = (now - w->t_run) / (double)(g - w->g_run);
    int64_t end = p->max_steps > 0 && p->max_steps < r->total ? p->max_steps : r->total;
    double wait = data_wait(r, w->t0, w->wait0);
    char eta[32], note[96];
    ds_format_duration(eta, sizeof eta, per_step * (double)(end - g));
    ds_info("epoch %lld/%lld  step %lld/%lld  crop %d  loss %.4f  lr %.5f  %.0f img/s  ETA %s%s", (long long)(e + 1),
            (long long)p->epochs, (long long)(g - e * r->S), (long long)r->S, r->crop, w->loss / w->steps, lr, ips, eta,
            input_bound_note(note, sizeof note, wait));
    ds_metrics_step row = {.step = g, .epoch = (double)g / (double)r->S, .crop = r->crop, .loss = w->loss / w->steps,
                           .lr = lr, .images_per_sec = ips, .data_wait = wait};
    if (logging(r) && ds_metrics_log_step(&r->log, &row)) log_failed();
    w->loss = 0;
    w->steps = 0;
    w->t0 = now;
    w->wait0 = ds_loader_wait_seconds(r->train_loader);
}

/* Without a bar, the first progress line comes after this many seconds of training even when
 * --log-every's first is further away (ResNet-50 on a CPU: 100 steps are tens of minutes). */
#define FIRST_LINE_SECONDS 10.0

/* That line: the step, its loss, the rate so far and the run's ETA (no metrics row: the
 * rows keep --log-every's cadence). */
static void first_line(run *r, const window *w, int64_t g, int64_t e, double loss, double now)
{
    const ds_train_plan *p = r->p;
    int64_t end = p->max_steps > 0 && p->max_steps < r->total ? p->max_steps : r->total;
    double per_step = (now - w->t_run) / (double)(g - w->g_run);
    char eta[32];
    ds_format_duration(eta, sizeof eta, per_step * (double)(end - g));
    char then[48];
    if (p->log_every > 0) snprintf(then, sizeof then, "then a line every %d steps", p->log_every);
    else snprintf(then, sizeof then, "then a line per epoch");
    ds_info("epoch %lld/%lld  step %lld/%lld  crop %d  loss %.4f  %.0f img/s  ETA %s  (%s)", (long long)(e + 1),
            (long long)p->epochs, (long long)(g - e * r->S), (long long)r->S, r->crop, loss,
            (double)((g - w->g_run) * r->G) / (now - w->t_run), eta, then);
    r->said_first = 1;
}

/* A step whose work is queued and whose loss is not read yet: the device runs it while the
 * host queues the next one (model.h: the loss read late). */
typedef struct {
    int open;              /* 1: a step is waiting to be read */
    int64_t g;             /* its number (1-based: the steps done once it is) */
    int64_t e;             /* its epoch (0-based) */
    int end;               /* the backend mark after its last op (ds_model_end_step) */
    double lr;
} open_step;

/* Reads step s's loss (waiting for the device to finish that step, not the one queued
 * after it), summed over the ranks: the stop on a loss that is not finite, the epoch's and
 * the window's sums and time, and the progress line every --log-every steps. */
static int finish_step(run *r, window *w, open_step *s)
{
    if (!s->open) return 0;
    s->open = 0;
    const ds_train_plan *p = r->p;
    double seconds = ds_model_step_seconds(r->m, s->end);   /* before the loss frees the step */
    double loss = ds_model_step_loss(r->m, s->end);
    ds_comm_allreduce_sum_f64(&loss, 1);
    double step_loss = loss / (double)r->G;
    if (!isfinite(step_loss)) {
        ds_loader_stop(r->train_loader);
        return ds_err("step %lld (epoch %lld): the loss is %g; stopping. %s%s", (long long)s->g, (long long)(s->e + 1),
                      step_loss,
                      r->last_path[0] ? "The last good checkpoint is kept: " : "No checkpoint was written yet",
                      r->last_path);
    }
    r->epoch_seconds += seconds;
    r->epoch_loss_sum += step_loss;
    w->loss += step_loss;
    w->steps++;
    double now = ds_now();
    ds_progress_update(&r->bar, (s->g - w->g_run) * r->G);
    if (p->log_every > 0 && s->g % p->log_every == 0) {
        log_progress(r, w, s->e, s->g, s->lr, now);
        r->said_first = 1;
    } else if (!r->said_first && !r->bar.enabled && now - r->t_start >= FIRST_LINE_SECONDS) {
        first_line(r, w, s->g, s->e, step_loss, now);
    }
    return 0;
}

/* After step s when it ends no epoch: the checkpoint every --ckpt-steps; then, all ranks
 * agreeing, a stop (with a checkpoint) on a signal or at --max-steps. Either reads the
 * step's loss first, so that no checkpoint follows a step whose loss is not finite. 1:
 * stop; 0: go on; -1: an error. */
static int after_step(run *r, window *w, open_step *s)
{
    const ds_train_plan *p = r->p;
    int64_t g = s->g;
    int ckpt_due = p->ckpt_steps > 0 && g % p->ckpt_steps == 0;
    if (ckpt_due && (finish_step(r, w, s) || save(r, g, 0))) return -1;
    pause_if_asked(r, g);
    if (!ds_comm_any(ds_signals_pending() || (p->max_steps > 0 && g >= p->max_steps))) return 0;
    ds_loader_stop(r->train_loader);
    if (finish_step(r, w, s)) return -1;
    return !ckpt_due && save(r, g, 0) ? -1 : 1;
}

static int setup(run *r, ds_model *m, const ds_train_plan *p)
{
    memset(r, 0, sizeof *r);
    r->p = p;
    r->m = m;
    r->be = ds_model_backend(m);
    r->saved_step = -1;
    r->best_top1 = -1;
    for (int i = 0; i < p->meta->nmetrics; i++) {   /* NaN: not validated, or no score (non-finite) */
        double v = p->meta->metrics[i].val_top1;
        if (v >= 0 && v <= 1 && v > r->best_top1) r->best_top1 = v;
    }
    const ds_loader_config *tc = &p->loader;
    if (!(r->train_loader = ds_loader_new(p->train, tc))) return -1;
    ds_loader_config vc = *tc;
    vc.train = 0;
    vc.accum = 1;
    vc.augment = 0;
    vc.pad = 0;
    vc.crop = p->val_crop;
    if (p->val && !(r->val_loader = ds_loader_new(p->val, &vc))) return -1;
    if (p->val) ds_eval_protocol(r->protocol, sizeof r->protocol, p->val, p->val_crop, 0);
    r->S = ds_loader_steps_per_epoch(r->train_loader);
    r->G = (int64_t)ds_loader_global_batch(tc);
    r->total = r->S * p->epochs;
    r->schedule = ds_schedule_make(&p->schedule, r->S, p->epochs);
    if (ds_feed_init(&r->train_feed, r->be, ds_loader_batch_shape(r->train_loader))) return -1;
    if (p->val && ds_feed_init(&r->val_feed, r->be, ds_loader_batch_shape(r->val_loader))) return -1;
    if (ds_model_defer_loss(m, tc->accum)) return -1;
    r->epoch_loss_sum = p->start_step % r->S ? p->meta->epoch_loss_sum : 0;
    r->epoch_seconds = p->start_step % r->S ? p->meta->epoch_seconds : 0;
    if (p->loader.rank == 0) {
        if (ds_mkdirs(p->out)) return ds_err("%s: cannot create the run directory", p->out);
        if (ds_metrics_log_truncate(p->out, p->start_step) || ds_metrics_log_open(&r->log, p->out, p->tensorboard, p->start_step)) return -1;
    }
    return 0;
}

static void teardown(run *r)
{
    ds_feed_free(&r->train_feed);   /* before the loaders: it unlocks their buffers */
    ds_feed_free(&r->val_feed);
    ds_loader_free(r->train_loader);
    ds_loader_free(r->val_loader);
    ds_metrics_log_close(&r->log);
}

static int train_loop(run *r)
{
    const ds_train_plan *p = r->p;
    ds_model *m = r->m;
    const ds_loader_config *lc = &p->loader;
    int64_t g = p->start_step;
    if (g >= r->total) {
        ds_info("the run has already finished its %lld steps (%lld epochs)", (long long)r->total, (long long)p->epochs);
        return 0;
    }
    ds_info("training: %lld epochs of %lld steps, global batch %lld (batch %d x world %d x accum %d), from step %lld",
            (long long)p->epochs, (long long)r->S, (long long)r->G, lc->batch, lc->world, lc->accum, (long long)g);
    double lr = 0;
    window w = {.t_run = ds_now(), .g_run = g, .t0 = ds_now(), .wait0 = ds_loader_wait_seconds(r->train_loader)};
    r->t_start = w.t_run;
    int64_t end = p->max_steps > 0 && p->max_steps < r->total ? p->max_steps : r->total;
    ds_progress_start(&r->bar, "train", "img", (end - g) * r->G, lc->rank == 0 ? p->progress : 0);
    open_step last = {0};
    for (int64_t e = g / r->S; e < p->epochs; e++) {
        /* progressive resizing: the crop is a function of e alone (resume and ranks agree) */
        r->crop = ds_crop_for_epoch(&p->ramp, lc->crop, e);
        if (ds_loader_set_crop(r->train_loader, r->crop)) return -1;   /* the batches carry it to the model */
        if (ds_loader_start(r->train_loader, e, g % r->S)) return -1;
        r->epoch_t0 = ds_now();
        r->epoch_wait0 = ds_loader_wait_seconds(r->train_loader);
        ds_batch *b;
        int rc;
        /* Several micro-batches per rank under an ordered reduction: each is summed into rank
         * 0's buffer as it ends, so the step is bitwise W x A micro-batches in one process
         * (model.h); rank 0's next micro-batch adds on top only once the sums are in, and the
         * other ranks start each one from zero. */
        int each_micro = lc->world > 1 && lc->accum > 1 && r->be->ordered_reduce;
        ds_comm_reduce_record rec0 = {0};
        while ((rc = ds_loader_next(r->train_loader, &b)) == 1) {
            if (b->micro == 0) {
                ds_comm_set_where("step %lld", (long long)g + 1);
                if (ds_model_begin_step(m)) {
                    ds_loader_release(r->train_loader, b);
                    return -1;
                }
                if (lc->accum > 1) ds_model_zero_reduction(m);   /* ds_model_train_step's own otherwise */
                rec0 = reduce_record(r);
            } else if (each_micro) {
                ds_model_reduce_wait(m);
                if (lc->rank != 0) ds_model_zero_reduction(m);
            }
            if (ds_feed_batch(&r->train_feed, m, b, p->meta->mean, p->meta->std)) {
                ds_feed_release(&r->train_feed, r->train_loader, b);
                return -1;
            }
            lr = ds_schedule_lr(&r->schedule, g);
            ds_sgd sgd = p->sgd;
            sgd.lr = (float)lr;
            /* the losses are read with the step's (finish_step) */
            if (lc->accum == 1) {
                /* one call: on a device, the step recorded as a graph once and replayed */
                ds_model_train_step(m, b->labels, b->n, 1.0f / (float)r->G, p->smoothing, &sgd, lc->world);
                ds_feed_release(&r->train_feed, r->train_loader, b);
                reduce_step(r, g, rec0.queued);
            } else {
                ds_model_forward(m, b->n, 1);
                if (b->micro < lc->accum - 1) {
                    if (each_micro)
                        ds_model_backward_reduce(m, b->labels, b->n, 1.0f / (float)r->G, p->smoothing,
                                                 DS_REDUCE_TO_ROOT);
                    else
                        ds_model_backward(m, b->labels, b->n, 1.0f / (float)r->G, p->smoothing);
                    ds_feed_release(&r->train_feed, r->train_loader, b);
                    continue;
                }
                ds_model_backward_reduce(m, b->labels, b->n, 1.0f / (float)r->G, p->smoothing, DS_REDUCE_TO_ALL);
                ds_feed_release(&r->train_feed, r->train_loader, b);
                reduce_step(r, g, rec0.queued);
                ds_model_step(m, &sgd, lc->accum * lc->world);
            }
            g++;
            /* Step g is queued: the previous one's loss is read now, while the device runs
             * this one; this one's is read after the next is queued, or now where what
             * follows needs it (the epoch's end, a checkpoint, a stop). */
            open_step now = {.open = 1, .g = g, .e = e, .end = ds_model_end_step(m), .lr = lr};
            if (now.end < 0 || finish_step(r, &w, &last)) return -1;
            last = now;
            if (g % r->S == 0) {
                if (finish_step(r, &w, &last)) return -1;
                continue;  /* the epoch's end follows: validation, checkpoint */
            }
            int stop = after_step(r, &w, &last);
            if (stop) return stop;
        }
        if (rc < 0) return -1;
        if (finish_step(r, &w, &last)) return -1;
        if (end_epoch(r, e, g, lr)) return -1;
        pause_if_asked(r, g);
        if (ds_comm_any(ds_signals_pending() || (p->max_steps > 0 && g >= p->max_steps))) return 1;
    }
    return 0;
}

/* The run's last line: where it ended, its best validation and how long this process took. */
static void summary(const run *r)
{
    const ds_train_plan *p = r->p;
    const ds_ckpt_meta *meta = p->meta;
    char took[32], best[160] = "";
    ds_format_duration(took, sizeof took, ds_now() - r->t_start);
    int b = -1;
    for (int i = 0; i < meta->nmetrics; i++)
        if (isfinite(meta->metrics[i].val_top1) && (b < 0 || meta->metrics[i].val_top1 > meta->metrics[b].val_top1))
            b = i;
    if (b >= 0)
        snprintf(best, sizeof best, "; best val top-1 %.2f%% (top-5 %.2f%%) after epoch %lld: %s/best.h5",
                 100 * meta->metrics[b].val_top1, 100 * meta->metrics[b].val_top5, (long long)meta->metrics[b].epoch,
                 p->out);
    ds_info("done: %lld epochs, %lld steps, in %s%s; the last checkpoint: %s", (long long)p->epochs,
            (long long)r->total, took, best, r->last_path);
}

int ds_train(ds_model *m, const ds_train_plan *p)
{
    run r;
    int rc = setup(&r, m, p);
    if (!rc) rc = train_loop(&r);
    ds_progress_close(&r.bar);
    if (rc == 0 && r.saved_step >= 0) summary(&r);
    if (rc == 1) {
        /* The ranks stop together, but a signal may have reached another rank only. */
        int sig = ds_signals_pending();
        const char *why = sig == SIGINT ? "on SIGINT" : sig == SIGHUP ? "on SIGHUP" : sig ? "on SIGTERM"
                          : p->max_steps > 0 && r.saved_step >= p->max_steps ? "(--max-steps)"
                                                                             : "on a signal to another rank";
        ds_info("stopped at step %lld %s; checkpoint %s (continue with --resume %s)", (long long)r.saved_step, why,
                r.last_path, p->out);
    }
    teardown(&r);
    return rc;
}
