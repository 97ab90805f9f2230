/* model: a built model run: lifecycle, tensors, init, forward / backward walks and the SGD
 * step (the layer lists and plans are model_build.c's). See model.h for the memory layout
 * and the order of calls in a training step. */
#include "model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "log.h"
#include "rng.h"

/* ---- lifecycle ---- */

static void late_free(ds_model *m);
static void step_graphs_free(ds_model *m);

ds_model *ds_model_create(const ds_backend *be, const ds_model_config *cfg)
{
    const ds_arch *A = ds_model_arch_find(cfg->arch);
    if (!A) {
        ds_err("unknown architecture '%s' (known: %s)", cfg->arch ? cfg->arch : "(none)", ds_arch_names());
        return NULL;
    }
    if (cfg->num_classes < 1 || cfg->max_batch < 1 || cfg->height < 1 || cfg->width < 1) {
        ds_err("%s: invalid model size: %d classes, batch %d, input %dx%d", A->name,
               cfg->num_classes, cfg->max_batch, cfg->height, cfg->width);
        return NULL;
    }
    ds_model *m = ds_xcalloc(1, sizeof *m);
    m->be = be;
    m->cfg = *cfg;
    snprintf(m->arch, sizeof m->arch, "%s", A->name);
    m->cfg.arch = m->arch;
    if (ds_model_build_network(m, A) < 0) {
        ds_err("%s: input %dx%d is too small for the network", A->name, cfg->height, cfg->width);
        ds_model_free(m);
        return NULL;
    }
    if (ds_model_plan_memory(m) < 0) {
        ds_model_free(m);
        return NULL;
    }
    m->bn_tracked = ds_xcalloc((size_t)m->nbn, sizeof *m->bn_tracked);
    m->loss_host = ds_xmalloc((size_t)cfg->max_batch * sizeof *m->loss_host);

    size_t pbytes = (m->nparam + m->nbuffer) * sizeof(float);
    m->params = be->alloc(pbytes);
    m->act = be->alloc(m->act_floats * sizeof(float));
    m->ws = be->alloc(m->ws_bytes ? m->ws_bytes : 1);
    int ok = m->params && m->act && m->ws;
    if (m->n16) {
        m->weights16 = be->alloc(m->n16 * ds_dtype_size(DS_BF16));
        m->weights16_stale = 1;
        ok = ok && m->weights16;
    }
    if (cfg->training) {
        m->reduction = be->alloc(pbytes);
        m->momentum = be->alloc(m->nparam * sizeof(float));
        ok = ok && m->reduction && m->momentum;
        ds_model_plan_buckets(m);
    }
    if (!ok) {
        ds_model_memory mm = ds_model_memory_plan(m);
        ds_err("%s: out of %s memory (parameters %.1f MiB, activations %.1f MiB, workspace %.1f MiB)",
               A->name, be->name, mm.params / 1048576.0, mm.activations / 1048576.0, mm.workspace / 1048576.0);
        ds_model_free(m);
        return NULL;
    }
    m->last_n = 0;
    m->in_h = cfg->height;
    m->in_w = cfg->width;
    return m;
}

void ds_model_free(ds_model *m)
{
    if (!m) return;
    if (m->params) m->be->free(m->params);
    if (m->weights16) m->be->free(m->weights16);
    if (m->reduction) m->be->free(m->reduction);
    if (m->momentum) m->be->free(m->momentum);
    if (m->act) m->be->free(m->act);
    if (m->ws) m->be->free(m->ws);
    free(m->layers);
    free(m->acts);
    free(m->tinfo);
    free(m->tloc);
    free(m->bn_tracked);
    free(m->loss_host);
    late_free(m);
    step_graphs_free(m);
    free(m->buckets);
    free(m);
}

/* The layer shapes at h x w come from building the same network at that size: the graph
 * (layer and activation ids, tensors) is the same, only heights and widths change, and no
 * size grows when the input shrinks, so every activation fits the region or slot planned
 * for it at the largest input. */
int ds_model_set_input_size(ds_model *m, int h, int w)
{
    if (h == m->in_h && w == m->in_w) return 0;
    if (h < 1 || w < 1 || h > m->cfg.height || w > m->cfg.width)
        return ds_err("%s: input %dx%d: the model was planned for inputs up to %dx%d", m->arch, h, w, m->cfg.height,
                      m->cfg.width);
    ds_model t = {.cfg = m->cfg};
    t.cfg.height = h;
    t.cfg.width = w;
    int rc = ds_model_build_network(&t, ds_model_arch_find(m->arch));
    if (rc < 0)
        ds_err("%s: input %dx%d is too small for the network", m->arch, h, w);
    else if (t.nacts != m->nacts || t.nlayers != m->nlayers)
        rc = ds_err("%s: internal error: the network at %dx%d has another graph", m->arch, h, w);
    if (rc == 0) {
        for (int i = 0; i < m->nacts; i++) m->acts[i].h = t.acts[i].h, m->acts[i].w = t.acts[i].w;
        for (int l = 0; l < m->nlayers; l++) m->layers[l].conv = t.layers[l].conv, m->layers[l].pool = t.layers[l].pool;
        m->in_h = h;
        m->in_w = w;
        m->last_n = 0;   /* backward needs a forward at this size first */
    }
    free(t.layers);
    free(t.acts);
    free(t.tinfo);
    free(t.tloc);
    return rc;
}

void ds_model_input_size(const ds_model *m, int *h, int *w)
{
    *h = m->in_h;
    *w = m->in_w;
}

const ds_backend *ds_model_backend(const ds_model *m) { return m->be; }
const ds_model_config *ds_model_config_of(const ds_model *m) { return &m->cfg; }
size_t ds_model_param_count(const ds_model *m) { return m->nparam; }

ds_model_memory ds_model_memory_plan(const ds_model *m)
{
    size_t pbytes = (m->nparam + m->nbuffer) * sizeof(float);
    return (ds_model_memory){
        .params = pbytes,
        .weight_copy = m->n16 * ds_dtype_size(DS_BF16),
        .reduction = m->cfg.training ? pbytes : 0,
        .momentum = m->cfg.training ? m->nparam * sizeof(float) : 0,
        .activations = m->act_floats * sizeof(float),
        .workspace = m->ws_bytes,
    };
}

/* ---- tensors ---- */

int ds_model_tensor_count(const ds_model *m) { return m->ntensors; }
const ds_tensor_info *ds_model_tensor(const ds_model *m, int i) { return &m->tinfo[i]; }

int ds_model_tensor_find(const ds_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tinfo[i].name, name)) return i;
    return -1;
}

/* PyTorch [k, c, r, s] <-> engine [k, r, s, c]: to_torch copies src [k, r, s, c] into
 * dst [k, c, r, s], else the other way. */
static void permute_conv(float *dst, const float *src, const int64_t *shape, int to_torch)
{
    int64_t K = shape[0], C = shape[1], R = shape[2], S = shape[3];
    for (int64_t k = 0; k < K; k++)
        for (int64_t c = 0; c < C; c++)
            for (int64_t r = 0; r < R; r++)
                for (int64_t s = 0; s < S; s++) {
                    int64_t torch = ((k * C + c) * R + r) * S + s, engine = ((k * R + r) * S + s) * C + c;
                    if (to_torch)
                        dst[torch] = src[engine];
                    else
                        dst[engine] = src[torch];
                }
}

/* Copies base[off..] of tensor i to host in PyTorch's layout. */
static void tensor_download(ds_model *m, int i, const float *base, float *host)
{
    const ds_tensor_info *t = &m->tinfo[i];
    const float *src = base + m->tloc[i].off;
    if (!m->tloc[i].conv) {
        m->be->download(host, src, t->count * sizeof(float));
        return;
    }
    float *tmp = ds_xmalloc(t->count * sizeof *tmp);
    m->be->download(tmp, src, t->count * sizeof(float));
    permute_conv(host, tmp, t->shape, 1);
    free(tmp);
}

static void tensor_upload(ds_model *m, int i, float *base, const float *host)
{
    const ds_tensor_info *t = &m->tinfo[i];
    float *dst = base + m->tloc[i].off;
    if (!m->tloc[i].conv) {
        m->be->upload(dst, host, t->count * sizeof(float));
        return;
    }
    float *tmp = ds_xmalloc(t->count * sizeof *tmp);
    permute_conv(tmp, host, t->shape, 0);
    m->be->upload(dst, tmp, t->count * sizeof(float));
    free(tmp);
}

void ds_model_tensor_get(ds_model *m, int i, void *host)
{
    if (m->tinfo[i].kind == DS_TENSOR_COUNTER) *(int64_t *)host = m->bn_tracked[m->tloc[i].bn];
    else tensor_download(m, i, m->params, host);
}

void ds_model_tensor_set(ds_model *m, int i, const void *host)
{
    if (m->tinfo[i].kind == DS_TENSOR_COUNTER) m->bn_tracked[m->tloc[i].bn] = *(const int64_t *)host;
    else tensor_upload(m, i, m->params, host);
    m->weights16_stale = 1;
}

static int check_param(const ds_model *m, int i, const char *what)
{
    if (i < 0 || i >= m->ntensors || m->tinfo[i].kind != DS_TENSOR_PARAM)
        return ds_err("model: tensor %d has no %s", i, what);
    if (!m->cfg.training) return ds_err("model: an inference-only model has no %s", what);
    return 0;
}

int ds_model_grad_get(ds_model *m, int i, float *host)
{
    if (check_param(m, i, "gradient") < 0) return -1;
    tensor_download(m, i, m->reduction, host);
    return 0;
}

int ds_model_momentum_get(ds_model *m, int i, float *host)
{
    if (check_param(m, i, "momentum buffer") < 0) return -1;
    tensor_download(m, i, m->momentum, host);
    return 0;
}

int ds_model_momentum_set(ds_model *m, int i, const float *host)
{
    if (check_param(m, i, "momentum buffer") < 0) return -1;
    tensor_upload(m, i, m->momentum, host);
    return 0;
}

int ds_model_momentum_started(const ds_model *m) { return m->momentum_started; }
void ds_model_set_momentum_started(ds_model *m, int started) { m->momentum_started = started != 0; }

/* ---- init ---- */

void ds_model_init(ds_model *m, uint64_t seed)
{
    for (int i = 0; i < m->ntensors; i++) {
        const ds_tensor_info *t = &m->tinfo[i];
        if (t->kind == DS_TENSOR_COUNTER) {
            m->bn_tracked[m->tloc[i].bn] = 0;
            continue;
        }
        float *v = ds_xmalloc(t->count * sizeof *v);
        const char *leaf = strrchr(t->name, '.') + 1;
        ds_rng r;
        ds_rng_init(&r, seed, DS_RNG_INIT, (uint64_t)i);
        if (m->tloc[i].conv) {
            /* kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / fan_out) */
            double std = sqrt(2.0 / (double)(t->shape[0] * t->shape[2] * t->shape[3]));
            for (size_t j = 0; j < t->count; j++) v[j] = (float)(std * ds_rng_normal(&r));
        } else if (!strncmp(t->name, "fc.", 3)) {
            /* nn.Linear: kaiming_uniform_(a=sqrt(5)) gives bound 1/sqrt(fan_in); the bias
             * uses the same bound. */
            int64_t fan_in = m->tinfo[ds_model_tensor_find(m, "fc.weight")].shape[1];
            double bound = 1.0 / sqrt((double)fan_in);
            for (size_t j = 0; j < t->count; j++) v[j] = (float)(bound * (2.0 * ds_rng_double(&r) - 1.0));
        } else {
            /* BN: weight 1, bias 0, running mean 0, running var 1 */
            float fill = !strcmp(leaf, "weight") || !strcmp(leaf, "running_var") ? 1.0f : 0.0f;
            for (size_t j = 0; j < t->count; j++) v[j] = fill;
        }
        tensor_upload(m, i, m->params, v);
        free(v);
    }
    if (m->cfg.training) {
        m->be->zero(m->momentum, m->nparam * sizeof(float));
        m->be->zero(m->reduction, (m->nparam + m->nbuffer) * sizeof(float));
    }
    m->momentum_started = 0;
    m->weights16_stale = 1;
}

/* ---- compute ---- */

float *ds_model_input(ds_model *m) { return m->act + m->acts[0].off; }

/* Activation a (its storage acts[a].t); Af for the float32 ones (features, logits). */
static void *A(ds_model *m, int a) { return m->act + m->acts[a].off; }
static float *Af(ds_model *m, int a) { return m->act + m->acts[a].off; }
static float *P(ds_model *m, int t) { return m->params + m->tloc[t].off; }
static float *G(ds_model *m, int t) { return m->reduction + m->tloc[t].off; }
/* A training batch norm's ReLU bitmask, or NULL where the plan gave it none. */
static uint8_t *relu_mask(ds_model *m, const ds_layer *L)
{
    return L->relu_mask == SIZE_MAX ? NULL : (uint8_t *)(m->act + L->relu_mask);
}

/* The weights a convolution reads: the bf16 copy in a bf16 run, else the parameters. */
static void *W(ds_model *m, int t)
{
    return m->weights16 ? (void *)((char *)m->weights16 + m->tloc[t].off16 * ds_dtype_size(DS_BF16)) : P(m, t);
}

/* The bf16 copy of the convolution weights, made when they changed (once per step: after
 * SGD), every convolution's tensor a run of one to_bf16 call. */
static void weights16_update(ds_model *m)
{
    if (!m->weights16 || !m->weights16_stale) return;
    ds_bf16_run *runs = ds_xmalloc((size_t)m->ntensors * sizeof *runs);
    int n = 0;
    for (int i = 0; i < m->ntensors; i++)
        if (m->tloc[i].conv) runs[n++] = (ds_bf16_run){m->tloc[i].off16, m->tloc[i].off, m->tinfo[i].count};
    m->be->to_bf16(m->weights16, m->params, runs, n);
    free(runs);
    m->weights16_stale = 0;
}

/* Gradient buffer of activation a (the storage of a). */
static void *dA(ds_model *m, int a)
{
    int s = m->acts[a].grad_slot;
    if (s == -2) return m->act + m->dlogits_off;
    return m->act + m->grads_off + (size_t)s * m->slot_floats;
}

static int forward_queue(ds_model *m, int n, int training);

const float *ds_model_forward(ds_model *m, int n, int training)
{
    if (n < 1 || n > m->cfg.max_batch) {
        ds_err("model: batch of %d images, the model was planned for 1..%d", n, m->cfg.max_batch);
        return NULL;
    }
    if (training && !m->cfg.training) {
        ds_err("model: training forward on an inference-only model");
        return NULL;
    }
    weights16_update(m);
    if (forward_queue(m, n, training)) return NULL;
    m->last_n = n;
    m->last_training = training;
    return Af(m, m->logits);
}

/* Forward's ops on the first n images; -1 (with a message) when batch norm cannot train on
 * so few values. */
static int forward_queue(ds_model *m, int n, int training)
{
    const ds_backend *be = m->be;
    for (int l = 0; l < m->nlayers; l++) {
        ds_layer *L = &m->layers[l];
        const ds_act *in = &m->acts[L->in];
        void *x = A(m, L->in), *y = A(m, L->out);
        switch (L->type) {
        case L_CONV: {
            ds_conv_desc d = ds_model_conv_desc(m, L, n);
            if (!training && L->fuse_bn) {  /* and the batch norm after it: bn_fwd_infer's bits */
                const ds_layer *N = &m->layers[++l];
                const ds_conv_bn bn = {P(m, N->weight), P(m, N->bias), P(m, N->rmean), P(m, N->rvar),
                                       N->res >= 0 ? A(m, N->res) : NULL, N->relu, DS_BN_EPS};
                be->conv_fwd_bn(A(m, N->out), x, W(m, L->weight), &d, m->ws, &bn);
                break;
            }
            be->conv_fwd(y, x, W(m, L->weight), &d, m->ws);
            break;
        }
        case L_BN: {
            int rows = n * in->h * in->w, c = in->c;
            const void *res = L->res >= 0 ? A(m, L->res) : NULL;
            if (!training) {
                be->bn_fwd_infer(y, x, P(m, L->weight), P(m, L->bias), P(m, L->rmean), P(m, L->rvar),
                                 res, L->relu, rows, c, DS_BN_EPS, in->t);
                break;
            }
            if (rows < 2) {
                /* PyTorch refuses too: the unbiased variance of one value is undefined. */
                return ds_err("model: batch norm in training needs more than 1 value per channel (batch %d, %dx%d)",
                              n, in->h, in->w);
            }
            float *mean = m->act + L->stats, *var = mean + c, *invstd = var + c;
            /* The batch's mean and unbiased variance are added into the reduction buffer: the
             * step averages them over micro-batches for the running statistics. */
            be->bn_fwd_train(y, relu_mask(m, L), mean, var, invstd, G(m, L->rmean), G(m, L->rvar), x,
                             P(m, L->weight), P(m, L->bias), res, L->relu, rows, c, DS_BN_EPS, in->t);
            break;
        }
        case L_MAXPOOL: {
            ds_pool_desc d = ds_model_pool_desc(m, L, n);
            be->maxpool_fwd(y, training ? (uint8_t *)(m->act + L->argmax) : NULL, x, &d);
            break;
        }
        case L_AVGPOOL:
            be->avgpool_fwd(y, x, n, in->h * in->w, in->c, in->t);
            break;
        case L_LINEAR:
            be->linear_fwd(y, x, P(m, L->weight), P(m, L->bias), n, in->c, m->cfg.num_classes);
            break;
        }
    }
    return 0;
}

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
                late_free(m);
                return ds_err("%s: no clocks to time the steps", m->be->name);
            }
    return 0;
}

static void late_free(ds_model *m)
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
static ds_late_step *late_step(ds_model *m)
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
    if (!m->late.filling && !late_step(m)) return -1;   /* a step without backward: ended empty */
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
    m->be->softmax_xent(m->act + m->loss_off, m->act + m->dlogits_off, Af(m, m->logits),
                        (const int32_t *)(m->act + m->labels_off), n, m->cfg.num_classes, smoothing, scale);
}

/* The summed loss of the last xent_queue; late (a model whose losses are read late): a copy
 * into the step's slot is queued and 0 returned. */
static double loss_fetch(ds_model *m, int n, int late)
{
    const ds_backend *be = m->be;
    float *loss = m->act + m->loss_off;
    if (late) {
        ds_late_step *s = late_step(m);
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

static double loss_and_dlogits(ds_model *m, const int32_t *labels, int n, float smoothing, float scale, int late)
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
    return loss_and_dlogits(m, labels, n, smoothing, 1.0f, 0);
}

/* Starts every bucket not yet started that is complete once layer l has run backward. */
static void start_buckets(ds_model *m, int *next, int l, int to_all)
{
    for (; *next < m->nbuckets && m->buckets[*next].ready >= l; ++*next)
        m->be->reduce_start(m->reduction + m->buckets[*next].lo, m->buckets[*next].hi - m->buckets[*next].lo,
                            to_all);
}

static void backward_queue(ds_model *m, int n, int reduce, int to_all);

/* reduce: 0 none; else buckets are started as they complete, to_all as given */
static double backward(ds_model *m, const int32_t *labels, int n, float scale, float smoothing, int reduce,
                       int to_all)
{
    int next = 0;
    if (!m->cfg.training || !m->last_training || n != m->last_n) {
        ds_err("model: backward needs a training forward of the same %d samples", n);
        return NAN;
    }
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= m->cfg.num_classes) {
            /* The other ranks' buckets wait for this rank's: send them (the NaN loss
             * discards the step everywhere) rather than leave the job hanging. */
            if (reduce) start_buckets(m, &next, -1, to_all);
            if (m->late.micro) {
                ds_late_step *s = late_step(m);
                if (s) s->bad = 1;
            }
            return ds_err("model: label %d out of range [0, %d)", labels[i], m->cfg.num_classes), NAN;
        }
    double loss = loss_and_dlogits(m, labels, n, smoothing, scale, m->late.micro > 0);
    backward_queue(m, n, reduce, to_all);
    return loss;
}

/* Backward's ops through the layers, from the dlogits xent_queue wrote; reduce: each bucket
 * started as it completes, to_all as given. */
static void backward_queue(ds_model *m, int n, int reduce, int to_all)
{
    const ds_backend *be = m->be;
    int next = 0;
    void *scratch = m->act + m->scratch_off;
    if (reduce) start_buckets(m, &next, m->nlayers, to_all);
    for (int l = m->nlayers - 1; l >= 0; l--) {
        ds_layer *L = &m->layers[l];
        const ds_act *in = &m->acts[L->in];
        size_t in_count = (size_t)n * act_size(in);
        if (reduce && l == 0) {
            m->last_layer_t = ds_now();
            m->last_layer_event = ds_event_seq();
        }
        void *dy = dA(m, L->out);
        /* The model input needs no gradient. An input another consumer already wrote gets
         * this layer's part added: a convolution adds it itself (on a GPU without a pass of
         * its own over the gradient), the other layers write it to the scratch slot, added
         * below. */
        int scratch_acc = L->in_acc && L->type != L_CONV;
        void *dx = L->in == 0 ? NULL : scratch_acc ? scratch : dA(m, L->in);
        switch (L->type) {
        case L_CONV: {
            ds_conv_desc d = ds_model_conv_desc(m, L, n);
            be->conv_bwd_weight(G(m, L->weight), dy, A(m, L->in), &d, m->ws);
            if (dx) be->conv_bwd_data(dx, dy, W(m, L->weight), &d, L->in_acc, m->ws);
            break;
        }
        case L_BN: {
            float *mean = m->act + L->stats, *invstd = mean + 2 * in->c;
            void *dres = L->res < 0 ? NULL : L->res_acc ? scratch : dA(m, L->res);
            be->bn_bwd(dx, dres, G(m, L->weight), G(m, L->bias), dy, A(m, L->out), relu_mask(m, L), A(m, L->in),
                       P(m, L->weight), mean, invstd, L->relu, n * in->h * in->w, in->c, in->t);
            if (L->res_acc) be->add(dA(m, L->res), scratch, in_count, in->t);
            break;
        }
        case L_MAXPOOL: {
            ds_pool_desc d = ds_model_pool_desc(m, L, n);
            be->maxpool_bwd(dx, dy, A(m, L->in), A(m, L->out), (const uint8_t *)(m->act + L->argmax), &d);
            break;
        }
        case L_AVGPOOL:
            be->avgpool_bwd(dx, dy, n, in->h * in->w, in->c, in->t);
            break;
        case L_LINEAR:
            be->linear_bwd(dx, G(m, L->weight), G(m, L->bias), dy, A(m, L->in), P(m, L->weight), n,
                           in->c, m->cfg.num_classes);
            break;
        }
        if (dx && scratch_acc) be->add(dA(m, L->in), scratch, in_count, in->t);
        if (reduce) start_buckets(m, &next, l, to_all);
    }
}

double ds_model_backward(ds_model *m, const int32_t *labels, int n, float scale, float smoothing)
{
    return backward(m, labels, n, scale, smoothing, 0, 1);
}

double ds_model_backward_reduce(ds_model *m, const int32_t *labels, int n, float scale, float smoothing,
                                ds_reduce_round round)
{
    if (round == DS_REDUCE_TO_ROOT && !m->be->ordered_reduce) {
        ds_err("model: the %s backend sums over the ranks in its own order; only whole sums", m->be->name);
        return NAN;
    }
    return backward(m, labels, n, scale, smoothing, 1, round == DS_REDUCE_TO_ALL);
}

void ds_model_reduce_wait(ds_model *m) { m->be->reduce_wait(); }

double ds_model_last_layer_time(const ds_model *m) { return m->last_layer_t; }
uint64_t ds_model_last_layer_event(const ds_model *m) { return m->last_layer_event; }

int ds_model_bucket(const ds_model *m, int i, size_t *lo, size_t *hi)
{
    if (i >= 0 && i < m->nbuckets) *lo = m->buckets[i].lo, *hi = m->buckets[i].hi;
    return m->nbuckets;
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
    weights16_update(m);
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

static void step_graphs_free(ds_model *m)
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
    if (forward_queue(m, n, 1)) return -1;
    xent_queue(m, n, smoothing, scale);
    backward_queue(m, n, 0, 1);
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
    weights16_update(m);   /* after a tensor load: as calls, before the recorded ops */
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

/* The index of the layer that is the i-th to end in a ReLU, or -1. */
static int relu_layer(const ds_model *m, int i)
{
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].type == L_BN && m->layers[l].relu && i-- == 0) return l;
    return -1;
}

int ds_model_relu_count(const ds_model *m)
{
    int count = 0;
    while (relu_layer(m, count) >= 0) count++;
    return count;
}

size_t ds_model_relu_output(ds_model *m, int i, float *host)
{
    int l = relu_layer(m, i);
    if (l < 0) return 0;
    const ds_act *a = &m->acts[m->layers[l].out];
    size_t count = (size_t)m->last_n * a->h * a->w * a->c;
    if (!host) return count;
    if (a->t == DS_F32) {
        m->be->download(host, A(m, m->layers[l].out), count * sizeof *host);
        return count;
    }
    /* bf16: the values, exactly, as float32 (the bf16 bits are float32's upper half) */
    uint16_t *h16 = ds_xmalloc(count * sizeof *h16);
    m->be->download(h16, A(m, m->layers[l].out), count * sizeof *h16);
    for (size_t j = 0; j < count; j++) {
        uint32_t u = (uint32_t)h16[j] << 16;
        memcpy(&host[j], &u, sizeof u);
    }
    free(h16);
    return count;
}
