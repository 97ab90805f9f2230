/* model: a built model run: lifecycle, tensors, init, and the forward and backward walks
 * through the layers (the layer lists and plans are model_build.c's; the loss, the SGD step
 * and the recorded step model_step.c's). See model.h for the memory layout and the order of
 * calls in a training step. */
#include "model_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "log.h"
#include "rng.h"

/* ---- lifecycle ---- */

ds_model *ds_model_create(const ds_backend *be, const ds_model_config *cfg)
{
    const ds_arch *arch = ds_model_arch_find(cfg->arch);
    if (!arch) {
        ds_err("unknown architecture '%s' (known: %s)", cfg->arch ? cfg->arch : "(none)", ds_arch_names());
        return NULL;
    }
    if (cfg->num_classes < 1 || cfg->max_batch < 1 || cfg->height < 1 || cfg->width < 1) {
        ds_err("%s: invalid model size: %d classes, batch %d, input %dx%d", arch->name,
               cfg->num_classes, cfg->max_batch, cfg->height, cfg->width);
        return NULL;
    }
    ds_model *m = ds_xcalloc(1, sizeof *m);
    m->be = be;
    m->cfg = *cfg;
    snprintf(m->arch, sizeof m->arch, "%s", arch->name);
    m->cfg.arch = m->arch;
    if (ds_model_build_network(m, arch) < 0) {
        ds_err("%s: input %dx%d is too small for the network", arch->name, cfg->height, cfg->width);
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
               arch->name, be->name, mm.params / 1048576.0, mm.activations / 1048576.0, mm.workspace / 1048576.0);
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
    ds_model_late_free(m);
    ds_model_step_graphs_free(m);
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

/* The bf16 copy of the convolution weights, made when they changed (once per step: after
 * SGD), every convolution's tensor a run of one to_bf16 call. */
void ds_model_weights16_update(ds_model *m)
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
    ds_model_weights16_update(m);
    if (ds_model_forward_queue(m, n, training)) return NULL;
    m->last_n = n;
    m->last_training = training;
    return act_f32(m, m->logits);
}

/* Forward's ops on the first n images; -1 (with a message) when batch norm cannot train on
 * so few values. */
int ds_model_forward_queue(ds_model *m, int n, int training)
{
    const ds_backend *be = m->be;
    for (int l = 0; l < m->nlayers; l++) {
        ds_layer *L = &m->layers[l];
        const ds_act *in = &m->acts[L->in];
        void *x = act(m, L->in), *y = act(m, L->out);
        switch (L->type) {
        case L_CONV: {
            ds_conv_desc d = ds_model_conv_desc(m, L, n);
            if (!training && L->fuse_bn) {  /* and the batch norm after it: bn_fwd_infer's bits */
                const ds_layer *N = &m->layers[++l];
                const ds_conv_bn bn = {param(m, N->weight), param(m, N->bias), param(m, N->rmean), param(m, N->rvar),
                                       N->res >= 0 ? act(m, N->res) : NULL, N->relu, DS_BN_EPS};
                be->conv_fwd_bn(act(m, N->out), x, conv_weights(m, L->weight), &d, m->ws, &bn);
                break;
            }
            be->conv_fwd(y, x, conv_weights(m, L->weight), &d, m->ws);
            break;
        }
        case L_BN: {
            int rows = n * in->h * in->w, c = in->c;
            const void *res = L->res >= 0 ? act(m, L->res) : NULL;
            if (!training) {
                be->bn_fwd_infer(y, x, param(m, L->weight), param(m, L->bias), param(m, L->rmean), param(m, L->rvar),
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
            be->bn_fwd_train(y, relu_mask(m, L), mean, var, invstd, grad(m, L->rmean), grad(m, L->rvar), x,
                             param(m, L->weight), param(m, L->bias), res, L->relu, rows, c, DS_BN_EPS, in->t);
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
            be->linear_fwd(y, x, param(m, L->weight), param(m, L->bias), n, in->c, m->cfg.num_classes);
            break;
        }
    }
    return 0;
}

/* Starts every bucket not yet started that is complete once layer l has run backward. */
static void start_buckets(ds_model *m, int *next, int l, int to_all)
{
    for (; *next < m->nbuckets && m->buckets[*next].ready >= l; ++*next)
        m->be->reduce_start(m->reduction + m->buckets[*next].lo, m->buckets[*next].hi - m->buckets[*next].lo,
                            to_all);
}

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
                ds_late_step *s = ds_model_late_step(m);
                if (s) s->bad = 1;
            }
            return ds_err("model: label %d out of range [0, %d)", labels[i], m->cfg.num_classes), NAN;
        }
    double loss = ds_model_loss_and_dlogits(m, labels, n, smoothing, scale, m->late.micro > 0);
    ds_model_backward_queue(m, n, reduce, to_all);
    return loss;
}

/* Backward's ops through the layers, from the dlogits xent_queue wrote; reduce: each bucket
 * started as it completes, to_all as given. */
void ds_model_backward_queue(ds_model *m, int n, int reduce, int to_all)
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
        void *dy = act_grad(m, L->out);
        /* The model input needs no gradient. An input another consumer already wrote gets
         * this layer's part added: a convolution adds it itself (on a GPU without a pass of
         * its own over the gradient), the other layers write it to the scratch slot, added
         * below. */
        int scratch_acc = L->in_acc && L->type != L_CONV;
        void *dx = L->in == 0 ? NULL : scratch_acc ? scratch : act_grad(m, L->in);
        switch (L->type) {
        case L_CONV: {
            ds_conv_desc d = ds_model_conv_desc(m, L, n);
            be->conv_bwd_weight(grad(m, L->weight), dy, act(m, L->in), &d, m->ws);
            if (dx) be->conv_bwd_data(dx, dy, conv_weights(m, L->weight), &d, L->in_acc, m->ws);
            break;
        }
        case L_BN: {
            float *mean = m->act + L->stats, *invstd = mean + 2 * in->c;
            void *dres = L->res < 0 ? NULL : L->res_acc ? scratch : act_grad(m, L->res);
            be->bn_bwd(dx, dres, grad(m, L->weight), grad(m, L->bias), dy, act(m, L->out), relu_mask(m, L), act(m, L->in),
                       param(m, L->weight), mean, invstd, L->relu, n * in->h * in->w, in->c, in->t);
            if (L->res_acc) be->add(act_grad(m, L->res), scratch, in_count, in->t);
            break;
        }
        case L_MAXPOOL: {
            ds_pool_desc d = ds_model_pool_desc(m, L, n);
            be->maxpool_bwd(dx, dy, act(m, L->in), act(m, L->out), (const uint8_t *)(m->act + L->argmax), &d);
            break;
        }
        case L_AVGPOOL:
            be->avgpool_bwd(dx, dy, n, in->h * in->w, in->c, in->t);
            break;
        case L_LINEAR:
            be->linear_bwd(dx, grad(m, L->weight), grad(m, L->bias), dy, act(m, L->in), param(m, L->weight), n,
                           in->c, m->cfg.num_classes);
            break;
        }
        if (dx && scratch_acc) be->add(act_grad(m, L->in), scratch, in_count, in->t);
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
        m->be->download(host, act(m, m->layers[l].out), count * sizeof *host);
        return count;
    }
    /* bf16: the values, exactly, as float32 (the bf16 bits are float32's upper half) */
    uint16_t *h16 = ds_xmalloc(count * sizeof *h16);
    m->be->download(h16, act(m, m->layers[l].out), count * sizeof *h16);
    for (size_t j = 0; j < count; j++) {
        uint32_t u = (uint32_t)h16[j] << 16;
        memcpy(&host[j], &u, sizeof u);
    }
    free(h16);
    return count;
}
