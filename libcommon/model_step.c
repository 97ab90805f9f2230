/* model_step: a training step's ends, around model.c's walks through the layers: the loss and
 * the dlogits backward starts from, the losses read a step late, the SGD step with the
 * running statistics, and the whole step of one micro-batch recorded once and replayed as a
 * graph. See model.h for the order of calls in a training step. */
#include "model_internal.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "log.h"

/* ---- the loss read late (model.h) ---- */

int ds_model_defer_loss(ds_model *m, int micro)
{
    if (!m->cfg.training || micro < 1) return ds_err("model: losses read late need a training model and micro >= 1");
    if (m->late.micro) return ds_err("model: losses are already read late");
    m->late.micro = micro;
    m->late.host = m->be->host_alloc((size_t)2 * micro * m->cfg.max_batch * sizeof(float));
    if (!m->late.host) return m->late.micro = 0, ds_err("%s: no host memory for the losses", m->be->name);
    for (int k = 0; k < 2; k++) {
        m->late.step[k].mark = -1;
        m->late.step[k].n = ds_xcalloc((size_t)micro, sizeof(int));
    }
    for (int k = 0; k < 2 && m->be->clock_alloc; k++)
        for (int j = 0; j < 2; j++)
            if (!(m->late.step[k].clock[j] = m->be->clock_alloc())) {
                ds_model_late_free(m);
                return ds_err("%s: no clocks to time the steps", m->be->name);
            }
    return 0;
}

void ds_model_late_free(ds_model *m)
{
    if (!m->late.micro) return;
    m->be->host_free(m->late.host);
    for (int k = 0; k < 2; k++) {
        free(m->late.step[k].n);
        for (int j = 0; j < 2; j++)
            if (m->late.step[k].clock[j]) m->be->clock_free(m->late.step[k].clock[j]);
    }
    memset(&m->late, 0, sizeof m->late);
}

/* Opens the next step's slot; NULL when both still hold steps not read. */
static ds_late_step *late_open(ds_model *m)
{
    ds_late_step *s = &m->late.step[m->late.steps % 2];
    if (s->mark >= 0 || s->count) {
        ds_err("model: two steps' losses are not read yet (ds_model_step_loss)");
        return NULL;
    }
    m->late.steps++;
    m->late.filling = 1;
    s->timed = 0;
    return s;
}

int ds_model_begin_step(ds_model *m)
{
    if (!m->late.micro) return ds_err("model: losses are not read late (ds_model_defer_loss)");
    if (m->late.filling) return ds_err("model: a step is open already (ds_model_end_step ends it)");
    ds_late_step *s = late_open(m);
    if (!s) return -1;
    if (s->clock[0]) {
        m->be->clock_record(s->clock[0]);
        s->timed = 1;
    }
    return 0;
}

/* The slot of the step being filled, opened by ds_model_begin_step or else by the first
 * backward after an end; NULL when both slots still hold steps not read, or the step has
 * had its `micro` backward calls. */
ds_late_step *ds_model_late_step(ds_model *m)
{
    if (!m->late.filling && !late_open(m)) return NULL;
    ds_late_step *s = &m->late.step[(m->late.steps - 1) % 2];
    if (s->count == m->late.micro) {
        ds_err("model: more than %d backward calls in one step (ds_model_end_step)", m->late.micro);
        return NULL;
    }
    return s;
}

int ds_model_end_step(ds_model *m)
{
    if (!m->late.micro) return ds_err("model: losses are not read late (ds_model_defer_loss)");
    if (!m->late.filling && !ds_model_late_step(m)) return -1;   /* a step without backward: ended empty */
    ds_late_step *s = &m->late.step[(m->late.steps - 1) % 2];
    /* the clock before the mark: waiting for the mark then waits for the clock too */
    if (s->timed) m->be->clock_record(s->clock[1]);
    s->mark = m->be->mark(DS_STREAM_COMPUTE);
    m->late.filling = 0;
    return s->mark;
}

/* The slot of the ended, unread step with this mark, or -1 (with a message). */
static int ended_step(const ds_model *m, int mark)
{
    for (int k = 0; k < 2; k++)
        if (m->late.micro && m->late.step[k].mark == mark && mark >= 0) return k;
    return ds_err("model: no ended step has mark %d", mark);
}

double ds_model_step_seconds(ds_model *m, int mark)
{
    int k = ended_step(m, mark);
    if (k < 0 || !m->late.step[k].timed) return NAN;
    m->be->mark_wait(mark);
    return m->be->clock_seconds(m->late.step[k].clock[0], m->late.step[k].clock[1]);
}

double ds_model_step_loss(ds_model *m, int mark)
{
    int k = ended_step(m, mark);
    if (k < 0) return NAN;
    ds_late_step *s = &m->late.step[k];
    m->be->mark_wait(mark);
    /* as each backward would have returned it, and the caller added those */
    double loss = 0;
    for (int i = 0; i < s->count; i++) {
        const float *l = m->late.host + ((size_t)k * m->late.micro + i) * m->cfg.max_batch;
        double sum = 0;
        for (int j = 0; j < s->n[i]; j++) sum += l[j];
        loss += sum;
    }
    if (s->bad) loss = NAN;
    s->mark = -1;
    s->count = s->bad = s->timed = 0;
    return loss;
}

static void labels_write(ds_model *m, const int32_t *labels, int n)
{
    m->be->upload(m->act + m->labels_off, labels, (size_t)n * sizeof *labels);
}

/* The per-sample losses and dlogits of the last forward's logits against the labels written */
static void xent_queue(ds_model *m, int n, float smoothing, float scale)
{
    m->be->softmax_xent(m->act + m->loss_off, m->act + m->dlogits_off, act_f32(m, m->logits),
                        (const int32_t *)(m->act + m->labels_off), n, m->cfg.num_classes, smoothing, scale);
}

/* The summed loss of the last xent_queue; late (a model whose losses are read late): a copy
 * into the step's slot is queued and 0 returned. */
static double loss_fetch(ds_model *m, int n, int late)
{
    const ds_backend *be = m->be;
    float *loss = m->act + m->loss_off;
    if (late) {
        ds_late_step *s = ds_model_late_step(m);
        if (!s) return NAN;
        int k = (int)(s - m->late.step);
        be->download_async(m->late.host + ((size_t)k * m->late.micro + s->count) * m->cfg.max_batch, loss,
                           (size_t)n * sizeof *loss);
        s->n[s->count++] = n;
        return 0;
    }
    be->download(m->loss_host, loss, (size_t)n * sizeof *loss);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += m->loss_host[i];
    return sum;
}

double ds_model_loss_and_dlogits(ds_model *m, const int32_t *labels, int n, float smoothing, float scale, int late)
{
    labels_write(m, labels, n);
    xent_queue(m, n, smoothing, scale);
    return loss_fetch(m, n, late);
}

double ds_model_loss(ds_model *m, const int32_t *labels, int n, float smoothing)
{
    if (n != m->last_n) return ds_err("model: loss of %d samples after a forward of %d", n, m->last_n), NAN;
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= m->cfg.num_classes)
            return ds_err("model: label %d out of range [0, %d)", labels[i], m->cfg.num_classes), NAN;
    return ds_model_loss_and_dlogits(m, labels, n, smoothing, 1.0f, 0);
}

/* ---- optimizer ---- */

float *ds_model_reduction(ds_model *m, size_t *count)
{
    if (count) *count = m->reduction ? m->nparam + m->nbuffer : 0;
    return m->reduction;
}

void ds_model_zero_reduction(ds_model *m)
{
    if (m->reduction) m->be->zero(m->reduction, (m->nparam + m->nbuffer) * sizeof(float));
}

/* BN weights and biases and every bias are the one-dimensional parameters. */
static int param_skips_decay(const ds_tensor_info *t) { return t->kind == DS_TENSOR_PARAM && t->ndim == 1; }

int ds_model_param_decays(const ds_model *m, int i, const ds_sgd *sgd)
{
    return m->tinfo[i].kind == DS_TENSOR_PARAM && (sgd->bn_bias_decay || !param_skips_decay(&m->tinfo[i]));
}

/* The step's learning rate in backend memory (model_internal.h's step scalars) */
static float *step_lr(ds_model *m) { return m->act + m->step_off; }

/* Writes the step's scalars, queued before the work that reads them. */
static void step_scalars_write(ds_model *m, const ds_sgd *sgd)
{
    m->be->upload(step_lr(m), &sgd->lr, sizeof sgd->lr);
}

/* The step's device work: SGD on every learnable tensor with the rate at step_lr, the
 * running statistics, the bf16 weight copy. */
static void step_queue(ds_model *m, const ds_sgd *sgd, int micro_batches)
{
    const ds_backend *be = m->be;
    const float *lr = step_lr(m);
    if (sgd->bn_bias_decay) {
        be->sgd_step(m->params, m->momentum, m->reduction, m->nparam, lr, sgd->momentum,
                     sgd->weight_decay, sgd->nesterov, !m->momentum_started);
    } else {
        /* The parameters lie packed in state_dict order, so the tensors with and without
         * decay form runs; the update is elementwise, so a run gives what the whole would. */
        size_t lo = 0;
        int run_decays = 1;
        for (int i = 0; i <= m->ntensors; i++) {
            const ds_tensor_info *t = i < m->ntensors ? &m->tinfo[i] : NULL;
            if (t && t->kind != DS_TENSOR_PARAM) continue;
            int decays = t ? !param_skips_decay(t) : !run_decays;
            size_t at = t ? m->tloc[i].off : m->nparam;
            if (decays == run_decays && t) continue;
            if (at > lo)
                be->sgd_step(m->params + lo, m->momentum + lo, m->reduction + lo, at - lo, lr, sgd->momentum,
                             run_decays ? sgd->weight_decay : 0.0f, sgd->nesterov, !m->momentum_started);
            lo = at;
            run_decays = decays;
        }
    }
    /* running = (1 - momentum) running + momentum * average of the micro-batch statistics */
    be->scale(m->params + m->nparam, 1.0f - DS_BN_MOMENTUM, m->nbuffer);
    be->axpy(m->params + m->nparam, DS_BN_MOMENTUM / (float)micro_batches, m->reduction + m->nparam,
             m->nbuffer);
    m->weights16_stale = 1;
    ds_model_weights16_update(m);
}

/* The step's host state, once its work is queued. */
static void step_count(ds_model *m)
{
    m->momentum_started = 1;
    for (int i = 0; i < m->nbn; i++) m->bn_tracked[i]++;
}

void ds_model_step(ds_model *m, const ds_sgd *sgd, int micro_batches)
{
    if (!m->cfg.training || micro_batches < 1) return;
    step_scalars_write(m, sgd);
    step_queue(m, sgd, micro_batches);
    step_count(m);
}

/* ---- a whole step of one micro-batch, recorded once and replayed (model.h) ---- */

/* What a recorded step's ops take by value: a step that differs in any of them is another
 * graph. The learning rate is not here: the step's scalars in backend memory (step_lr). */
static ds_step_key step_key(const ds_model *m, int n, float scale, float smoothing, const ds_sgd *sgd, int micro)
{
    ds_step_key k;
    memset(&k, 0, sizeof k);
    k.n = n, k.h = m->in_h, k.w = m->in_w, k.micro = micro;
    k.scale = scale, k.smoothing = smoothing, k.momentum = sgd->momentum, k.wd = sgd->weight_decay;
    k.nesterov = sgd->nesterov, k.bn_bias_decay = sgd->bn_bias_decay;
    return k;
}

/* The slot for key k: found, or made (the least recently used one given up when all are
 * taken). */
static ds_step_graph *step_graph(ds_model *m, const ds_step_key *k)
{
    ds_step_graph *oldest = &m->graphs[0];
    for (int i = 0; i < DS_STEP_GRAPHS; i++) {
        ds_step_graph *s = &m->graphs[i];
        if (s->used && !memcmp(&s->key, k, sizeof *k)) {
            s->used = ++m->graph_uses;
            return s;
        }
        if (s->used < oldest->used) oldest = s;
    }
    if (oldest->graph) m->be->graph_free(oldest->graph);
    memset(oldest, 0, sizeof *oldest);
    oldest->key = *k;
    oldest->used = ++m->graph_uses;
    return oldest;
}

void ds_model_step_graphs_free(ds_model *m)
{
    for (int i = 0; i < DS_STEP_GRAPHS; i++)
        if (m->graphs[i].graph) m->be->graph_free(m->graphs[i].graph);
    memset(m->graphs, 0, sizeof m->graphs);
}

/* The step's ops between its writes (labels, the step's scalars) and its loss read: what a
 * graph records. -1 when forward refused the batch. */
static int train_step_queue(ds_model *m, int n, float scale, float smoothing, const ds_sgd *sgd, int micro)
{
    ds_model_zero_reduction(m);
    if (ds_model_forward_queue(m, n, 1)) return -1;
    xent_queue(m, n, smoothing, scale);
    ds_model_backward_queue(m, n, 0, 1);
    step_queue(m, sgd, micro);
    return 0;
}

/* The step as calls: what a training loop does for a step of one micro-batch. */
static double train_step_calls(ds_model *m, const int32_t *labels, int n, float scale, float smoothing,
                               const ds_sgd *sgd, int micro)
{
    ds_model_zero_reduction(m);
    if (!ds_model_forward(m, n, 1)) return NAN;
    double loss = ds_model_backward_reduce(m, labels, n, scale, smoothing, DS_REDUCE_TO_ALL);
    ds_model_reduce_wait(m);
    ds_model_step(m, sgd, micro);
    return loss;
}

double ds_model_train_step(ds_model *m, const int32_t *labels, int n, float scale, float smoothing,
                           const ds_sgd *sgd, int micro_batches)
{
    const ds_backend *be = m->be;
    int usable = be->graph_begin && !m->graphs_off && m->cfg.training && n >= 1 && n <= m->cfg.max_batch &&
                 micro_batches >= 1;
    for (int i = 0; usable && i < n; i++) usable = labels[i] >= 0 && labels[i] < m->cfg.num_classes;
    if (!usable) return train_step_calls(m, labels, n, scale, smoothing, sgd, micro_batches);
    ds_step_key k = step_key(m, n, scale, smoothing, sgd, micro_batches);
    ds_step_graph *s = step_graph(m, &k);
    /* the first step of a shape runs as calls: a convolution's first run at a size may
     * choose another algorithm, a scratch buffer grow (backend.h); so does the first step
     * of the momentum (SGD's first-step rule, an argument) */
    if (!s->ran || !m->momentum_started) {
        s->ran = 1;
        return train_step_calls(m, labels, n, scale, smoothing, sgd, micro_batches);
    }
    ds_model_weights16_update(m);   /* after a tensor load: as calls, before the recorded ops */
    if (!s->graph) {
        if (be->graph_begin()) {
            m->graphs_off = 1;
            return train_step_calls(m, labels, n, scale, smoothing, sgd, micro_batches);
        }
        int rc = train_step_queue(m, n, scale, smoothing, sgd, micro_batches);
        s->graph = be->graph_end();
        if (rc || !s->graph) {
            if (s->graph) be->graph_free(s->graph);
            s->graph = NULL;
            m->graphs_off = 1;
            m->weights16_stale = 1;   /* the recorded copy never ran */
            return train_step_calls(m, labels, n, scale, smoothing, sgd, micro_batches);
        }
    }
    labels_write(m, labels, n);
    step_scalars_write(m, sgd);
    be->graph_launch(s->graph);
    m->last_n = n;
    m->last_training = 1;
    m->weights16_stale = 0;
    step_count(m);
    return loss_fetch(m, n, m->late.micro > 0);
}
