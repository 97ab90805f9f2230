/* model: ResNet layer lists, the memory plan, forward / backward walks, init and the SGD
 * step. See model.h for the memory layout and the order of calls in a training step. */
#include "model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "log.h"
#include "rng.h"

/* ---- architectures ---- */

typedef struct {
    const char *name;
    int bottleneck;        /* 1: 1x1-3x3-1x1 blocks with expansion 4; 0: two 3x3 */
    int cifar;             /* 1: 3x3/1 stem of 16 channels, no max pool */
    int nstages;
    int blocks[4];
} ds_arch;

static const ds_arch arch_table[] = {
    {"resnet18", 0, 0, 4, {2, 2, 2, 2}},
    {"resnet34", 0, 0, 4, {3, 4, 6, 3}},
    {"resnet50", 1, 0, 4, {3, 4, 6, 3}},
    {"resnet101", 1, 0, 4, {3, 4, 23, 3}},
    {"resnet20", 0, 1, 3, {3, 3, 3}},
};
#define NARCH (int)(sizeof arch_table / sizeof arch_table[0])

static const ds_arch *arch_find(const char *name)
{
    for (int i = 0; i < NARCH; i++)
        if (name && !strcmp(arch_table[i].name, name)) return &arch_table[i];
    return NULL;
}

const char *ds_arch_names(void) { return "resnet18, resnet34, resnet50, resnet101, resnet20"; }
int ds_arch_known(const char *name) { return arch_find(name) != NULL; }

/* ---- the graph ---- */

typedef enum { L_CONV, L_BN, L_MAXPOOL, L_AVGPOOL, L_LINEAR } ds_layer_type;

/* An activation tensor [n, h, w, c]; n is the run-time batch. */
typedef struct {
    int h, w, c;
    size_t off;            /* floats into the activation allocation */
    int grad_slot;         /* backward: gradient slot; -1 none (the input), -2 the dlogits buffer */
} ds_act;

typedef struct {
    ds_layer_type type;
    int in, out, res;      /* activation ids; res: BN's residual input, -1 when none */
    int relu;
    int weight, bias;      /* tensor ids: conv weight; BN gamma, beta; linear weight, bias */
    int rmean, rvar, bn;   /* BN: running-stat tensor ids and BN index (num_batches_tracked) */
    ds_conv_desc conv;     /* n set at run time */
    ds_pool_desc pool;
    size_t stats;          /* BN: activation offset of this micro-batch's mean, var, invstd [3, c] */
    int in_acc, res_acc;   /* backward: another consumer already wrote that input's gradient,
                              so this layer writes to the scratch slot and adds */
} ds_layer;

/* Where a named tensor lives: offset in floats into the parameter allocation (the same
 * offset holds its gradient / statistic in the reduction buffer and its momentum). */
typedef struct {
    size_t off;
    int conv;              /* OHWI inside, OIHW in PyTorch */
    int bn;                /* COUNTER: BN index */
} ds_tensor_loc;

struct ds_model {
    const ds_backend *be;
    ds_model_config cfg;   /* the planned (largest) input size */
    char arch[32];
    int in_h, in_w;        /* the input size forward / backward run at now */

    ds_layer *layers;
    int nlayers;
    ds_act *acts;
    int nacts;
    ds_tensor_info *tinfo;
    ds_tensor_loc *tloc;
    int ntensors;
    int nbn;
    int64_t *bn_tracked;   /* [nbn] num_batches_tracked, host */

    size_t nparam, nbuffer;        /* floats: learnables, BN running buffers */
    float *params;                 /* [nparam + nbuffer] */
    float *reduction;              /* [nparam + nbuffer]: gradients, BN statistic sums */
    float *momentum;               /* [nparam] */
    float *act;                    /* activation allocation */
    void *ws;
    size_t act_floats, ws_bytes;
    size_t scratch_off, grads_off;  /* scratch slot; gradient slot k at grads_off + k slot_floats */
    size_t slot_floats;
    size_t dlogits_off, loss_off, labels_off;
    int logits;                    /* act id */
    float *loss_host;              /* [max_batch] */

    int momentum_started;
    int last_n, last_training;     /* the last forward, for backward's checks */

    struct {
        size_t lo, hi;             /* floats of the reduction buffer */
        int ready;                 /* complete once backward has run layer `ready` (nlayers: before) */
    } *buckets;                    /* in start order: from the buffer's end towards its start */
    int nbuckets;
    double last_layer_t;           /* ds_now() as the last reducing backward began layer 0 */
    uint64_t last_layer_event;     /* ds_event_seq() then */
};

#define ALIGN_FLOATS 64            /* 256 bytes: every region starts aligned for any backend */
static size_t align_up(size_t x) { return (x + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

static int add_act(ds_model *m, int h, int w, int c)
{
    m->acts = ds_xrealloc(m->acts, (size_t)(m->nacts + 1) * sizeof *m->acts);
    m->acts[m->nacts] = (ds_act){.h = h, .w = w, .c = c, .grad_slot = -1};
    return m->nacts++;
}

static ds_layer *add_layer(ds_model *m, ds_layer_type type, int in)
{
    m->layers = ds_xrealloc(m->layers, (size_t)(m->nlayers + 1) * sizeof *m->layers);
    ds_layer *L = &m->layers[m->nlayers++];
    *L = (ds_layer){.type = type, .in = in, .res = -1, .weight = -1, .bias = -1, .rmean = -1,
                    .rvar = -1, .bn = -1};
    return L;
}

static int add_tensor(ds_model *m, const char *prefix, const char *suffix, ds_tensor_kind kind,
                      int ndim, const int64_t *shape)
{
    m->tinfo = ds_xrealloc(m->tinfo, (size_t)(m->ntensors + 1) * sizeof *m->tinfo);
    m->tloc = ds_xrealloc(m->tloc, (size_t)(m->ntensors + 1) * sizeof *m->tloc);
    ds_tensor_info *t = &m->tinfo[m->ntensors];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s.%s", prefix, suffix);
    t->kind = kind;
    t->ndim = ndim;
    t->count = 1;
    for (int i = 0; i < ndim; i++) t->shape[i] = shape[i], t->count *= (size_t)shape[i];
    m->tloc[m->ntensors] = (ds_tensor_loc){.off = 0, .conv = 0, .bn = -1};
    return m->ntensors++;
}

/* conv without bias; returns the output activation, -1 when the input is too small. */
static int build_conv(ds_model *m, const char *name, int in, int k, int r, int stride, int pad)
{
    ds_act a = m->acts[in];
    int p = (a.h + 2 * pad - r) / stride + 1, q = (a.w + 2 * pad - r) / stride + 1;
    if (a.h + 2 * pad < r || a.w + 2 * pad < r || p < 1 || q < 1) return -1;
    int64_t shape[4] = {k, a.c, r, r};
    int t = add_tensor(m, name, "weight", DS_TENSOR_PARAM, 4, shape);
    m->tloc[t].conv = 1;
    int out = add_act(m, p, q, k);
    ds_layer *L = add_layer(m, L_CONV, in);
    L->out = out;
    L->weight = t;
    L->conv = (ds_conv_desc){.n = 0, .h = a.h, .w = a.w, .c = a.c, .k = k, .r = r, .s = r,
                             .stride = stride, .pad = pad, .p = p, .q = q, .no_dx = in == 0};
    return out;
}

/* BN tensors in state_dict order; returns the id of the first (weight). They are declared
 * apart from the layer because torchvision lists a block's last BN before its downsample
 * branch, while the fused layer must run after it. */
static int build_bn_tensors(ds_model *m, const char *name, int c)
{
    int64_t shape[1] = {c};
    int first = add_tensor(m, name, "weight", DS_TENSOR_PARAM, 1, shape);
    add_tensor(m, name, "bias", DS_TENSOR_PARAM, 1, shape);
    add_tensor(m, name, "running_mean", DS_TENSOR_BUFFER, 1, shape);
    add_tensor(m, name, "running_var", DS_TENSOR_BUFFER, 1, shape);
    int ctr = add_tensor(m, name, "num_batches_tracked", DS_TENSOR_COUNTER, 0, NULL);
    m->tloc[ctr].bn = m->nbn++;
    return first;
}

static int build_bn_layer(ds_model *m, int tensors, int in, int res, int relu)
{
    ds_act a = m->acts[in];
    int out = add_act(m, a.h, a.w, a.c);
    ds_layer *L = add_layer(m, L_BN, in);
    L->out = out;
    L->res = res;
    L->relu = relu;
    L->weight = tensors;
    L->bias = tensors + 1;
    L->rmean = tensors + 2;
    L->rvar = tensors + 3;
    L->bn = m->tloc[tensors + 4].bn;
    return out;
}

/* One residual block; returns its output activation or -1 when the input is too small. */
static int build_block(ds_model *m, const ds_arch *A, const char *pre, int x, int planes, int stride)
{
    char name[64];
    int cin = m->acts[x].c, cout = A->bottleneck ? planes * 4 : planes, t = x, b = -1;
    /* conv1..convN, each followed by its BN (+ReLU); the last BN waits for the residual.
     * Bottleneck (v1.5: the stride on the 3x3): 1x1, 3x3, 1x1 to 4x planes; basic: 3x3, 3x3. */
    typedef struct { int k, r, stride, pad; } conv_spec;
    const conv_spec bottleneck[] = {{planes, 1, 1, 0}, {planes, 3, stride, 1}, {cout, 1, 1, 0}},
                    basic[] = {{planes, 3, stride, 1}, {cout, 3, 1, 1}};
    const conv_spec *spec = A->bottleneck ? bottleneck : basic;
    const int n = A->bottleneck ? 3 : 2;
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "%s.conv%d", pre, i + 1);
        if ((t = build_conv(m, name, t, spec[i].k, spec[i].r, spec[i].stride, spec[i].pad)) < 0) return -1;
        snprintf(name, sizeof name, "%s.bn%d", pre, i + 1);
        b = build_bn_tensors(m, name, spec[i].k);
        if (i < n - 1) t = build_bn_layer(m, b, t, -1, 1);
    }
    int res = x;
    if (stride != 1 || cin != cout) {
        snprintf(name, sizeof name, "%s.downsample.0", pre);
        if ((res = build_conv(m, name, x, cout, 1, stride, 0)) < 0) return -1;
        snprintf(name, sizeof name, "%s.downsample.1", pre);
        res = build_bn_layer(m, build_bn_tensors(m, name, cout), res, -1, 0);
    }
    return build_bn_layer(m, b, t, res, 1);
}

static int build_network(ds_model *m, const ds_arch *A)
{
    int x = add_act(m, m->cfg.height, m->cfg.width, 3);
    int stem = A->cifar ? 16 : 64;
    x = A->cifar ? build_conv(m, "conv1", x, stem, 3, 1, 1) : build_conv(m, "conv1", x, stem, 7, 2, 3);
    if (x < 0) return -1;
    x = build_bn_layer(m, build_bn_tensors(m, "bn1", stem), x, -1, 1);
    if (!A->cifar) {
        ds_act a = m->acts[x];
        int p = (a.h + 2 - 3) / 2 + 1, q = (a.w + 2 - 3) / 2 + 1;
        if (a.h < 2 || a.w < 2) return -1;
        int out = add_act(m, p, q, a.c);
        ds_layer *L = add_layer(m, L_MAXPOOL, x);
        L->out = out;
        L->pool = (ds_pool_desc){.n = 0, .h = a.h, .w = a.w, .c = a.c, .k = 3, .stride = 2,
                                 .pad = 1, .p = p, .q = q};
        x = out;
    }
    for (int s = 0; s < A->nstages; s++) {
        for (int b = 0; b < A->blocks[s]; b++) {
            char pre[32];
            snprintf(pre, sizeof pre, "layer%d.%d", s + 1, b);
            x = build_block(m, A, pre, x, stem << s, b == 0 && s > 0 ? 2 : 1);
            if (x < 0) return -1;
        }
    }
    ds_act a = m->acts[x];
    int pooled = add_act(m, 1, 1, a.c);
    ds_layer *L = add_layer(m, L_AVGPOOL, x);
    L->out = pooled;
    int64_t wshape[2] = {m->cfg.num_classes, a.c}, bshape[1] = {m->cfg.num_classes};
    int w = add_tensor(m, "fc", "weight", DS_TENSOR_PARAM, 2, wshape);
    int bias = add_tensor(m, "fc", "bias", DS_TENSOR_PARAM, 1, bshape);
    m->logits = add_act(m, 1, 1, m->cfg.num_classes);
    L = add_layer(m, L_LINEAR, pooled);
    L->out = m->logits;
    L->weight = w;
    L->bias = bias;
    return 0;
}

/* ---- the memory plan ---- */

static size_t act_size(const ds_act *a) { return (size_t)a->h * a->w * a->c; }

/* A pool of equal-size slots handed out by liveness: the smallest free index, else a new one. */
typedef struct {
    int busy[64];
    int n;
} ds_slots;

static int slot_take(ds_slots *s)
{
    for (int i = 0; i < s->n; i++)
        if (!s->busy[i]) return s->busy[i] = 1, i;
    if (s->n == 64) return -1;
    s->busy[s->n] = 1;
    return s->n++;
}

static int plan_memory(ds_model *m)
{
    const ds_backend *be = m->be;
    size_t B = (size_t)m->cfg.max_batch, off = 0, max_act = 0;
    for (int i = 0; i < m->nacts; i++)
        if (act_size(&m->acts[i]) > max_act) max_act = act_size(&m->acts[i]);
    m->slot_floats = align_up(B * max_act);

    /* Parameters first, buffers after, both in state_dict order. */
    m->nparam = m->nbuffer = 0;
    for (int i = 0; i < m->ntensors; i++)
        if (m->tinfo[i].kind == DS_TENSOR_PARAM) m->tloc[i].off = m->nparam, m->nparam += m->tinfo[i].count;
    for (int i = 0; i < m->ntensors; i++)
        if (m->tinfo[i].kind == DS_TENSOR_BUFFER)
            m->tloc[i].off = m->nparam + m->nbuffer, m->nbuffer += m->tinfo[i].count;

    /* Activations. The input has its own region; in training every activation has its own
     * (backward needs them all); inference reuses slots as soon as the last reader ran. */
    m->acts[0].off = off;
    off += align_up(B * act_size(&m->acts[0]));
    if (m->cfg.training) {
        for (int i = 1; i < m->nacts; i++) {
            m->acts[i].off = off;
            off += align_up(B * act_size(&m->acts[i]));
        }
    } else {
        int last_use[m->nacts];
        for (int i = 0; i < m->nacts; i++) last_use[i] = i == m->logits ? m->nlayers : -1;
        for (int l = 0; l < m->nlayers; l++) {
            last_use[m->layers[l].in] = l;
            if (m->layers[l].res >= 0) last_use[m->layers[l].res] = l;
        }
        ds_slots s = {0};
        int slot_of[m->nacts];
        for (int l = 0; l < m->nlayers; l++) {
            ds_layer *L = &m->layers[l];
            if ((slot_of[L->out] = slot_take(&s)) < 0) return ds_err("model: memory plan: too many live tensors");
            if (L->in > 0 && last_use[L->in] == l) s.busy[slot_of[L->in]] = 0;
            if (L->res > 0 && last_use[L->res] == l) s.busy[slot_of[L->res]] = 0;
        }
        for (int i = 1; i < m->nacts; i++) m->acts[i].off = off + (size_t)slot_of[i] * m->slot_floats;
        off += (size_t)s.n * m->slot_floats;
    }

    /* Gradient slots, by liveness over the backward walk: an activation's gradient lives
     * from its first consumer in backward order to its producer. */
    if (m->cfg.training) {
        ds_slots s = {0};
        m->acts[m->logits].grad_slot = -2;
        for (int l = m->nlayers - 1; l >= 0; l--) {
            ds_layer *L = &m->layers[l];
            int ins[2] = {L->in, L->res}, *acc[2] = {&L->in_acc, &L->res_acc};
            for (int j = 0; j < 2; j++) {
                if (ins[j] <= 0) continue;   /* none, or the model input: no gradient */
                ds_act *a = &m->acts[ins[j]];
                *acc[j] = a->grad_slot >= 0;
                if (!*acc[j] && (a->grad_slot = slot_take(&s)) < 0)
                    return ds_err("model: memory plan: too many live gradients");
            }
            if (L->in_acc && L->res_acc) return ds_err("model: memory plan: two accumulating inputs");
            if (m->acts[L->out].grad_slot >= 0) s.busy[m->acts[L->out].grad_slot] = 0;
        }
        m->scratch_off = off;
        off += m->slot_floats;
        m->grads_off = off;
        off += (size_t)s.n * m->slot_floats;
    }

    for (int l = 0; l < m->nlayers; l++) {
        ds_layer *L = &m->layers[l];
        if (L->type != L_BN) continue;
        L->stats = off;
        off += align_up(3 * (size_t)m->acts[L->in].c);
    }
    m->dlogits_off = off;
    off += align_up(B * m->cfg.num_classes);
    m->loss_off = off;
    off += align_up(B);
    m->labels_off = off;
    off += align_up(B);
    m->act_floats = off;

    m->ws_bytes = 0;
    for (int l = 0; l < m->nlayers; l++) {
        if (m->layers[l].type != L_CONV) continue;
        ds_conv_desc d = m->layers[l].conv;
        d.n = m->cfg.max_batch;
        size_t b = be->conv_workspace(&d);
        if (b == SIZE_MAX) {
            const char *w = m->tinfo[m->layers[l].weight].name;
            return ds_err("%s: layer %.*s cannot run on %s (above)", m->arch, (int)(strlen(w) - strlen(".weight")), w,
                          be->name);
        }
        if (b > m->ws_bytes) m->ws_bytes = b;
    }
    return 0;
}

/* Cuts the reduction buffer into buckets from its end (the BN statistics, then the last
 * layers' gradients) towards its start (conv1), whole tensors, about bucket_bytes each. A
 * bucket is complete when backward has run every layer that writes a tensor at or above
 * its start: the lowest such layer index (tensors written by forward, the BN statistics,
 * count as complete before backward). */
static void plan_buckets(ds_model *m)
{
    size_t cap = (m->cfg.bucket_bytes ? m->cfg.bucket_bytes : DS_BUCKET_BYTES) / sizeof(float);
    int *done = ds_xmalloc((size_t)m->ntensors * sizeof *done);
    for (int t = 0; t < m->ntensors; t++) done[t] = m->nlayers;
    for (int l = 0; l < m->nlayers; l++) {
        if (m->layers[l].weight >= 0) done[m->layers[l].weight] = l;
        if (m->layers[l].bias >= 0) done[m->layers[l].bias] = l;
    }
    /* Offsets grow with the tensor index, parameters first, buffers after (plan_memory):
     * buffers in reverse, then parameters in reverse, is the buffer from its end down. */
    size_t hi = m->nparam + m->nbuffer, acc = 0;
    int ready = m->nlayers;
    for (int pass = 0; pass < 2; pass++)
        for (int t = m->ntensors - 1; t >= 0; t--) {
            if (m->tinfo[t].kind != (pass ? DS_TENSOR_PARAM : DS_TENSOR_BUFFER)) continue;
            if (done[t] < ready) ready = done[t];
            acc += m->tinfo[t].count;
            size_t lo = m->tloc[t].off;
            if (acc >= cap || lo == 0) {
                m->buckets = ds_xrealloc(m->buckets, (size_t)(m->nbuckets + 1) * sizeof *m->buckets);
                m->buckets[m->nbuckets].lo = lo;
                m->buckets[m->nbuckets].hi = hi;
                m->buckets[m->nbuckets++].ready = ready;
                hi = lo;
                acc = 0;
            }
        }
    free(done);
}

/* ---- lifecycle ---- */

ds_model *ds_model_create(const ds_backend *be, const ds_model_config *cfg)
{
    const ds_arch *A = arch_find(cfg->arch);
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
    if (build_network(m, A) < 0) {
        ds_err("%s: input %dx%d is too small for the network", A->name, cfg->height, cfg->width);
        ds_model_free(m);
        return NULL;
    }
    if (plan_memory(m) < 0) {
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
    if (cfg->training) {
        m->reduction = be->alloc(pbytes);
        m->momentum = be->alloc(m->nparam * sizeof(float));
        ok = ok && m->reduction && m->momentum;
        plan_buckets(m);
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
    int rc = build_network(&t, arch_find(m->arch));
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
}

/* ---- compute ---- */

float *ds_model_input(ds_model *m) { return m->act + m->acts[0].off; }

static float *A(ds_model *m, int a) { return m->act + m->acts[a].off; }
static float *P(ds_model *m, int t) { return m->params + m->tloc[t].off; }
static float *G(ds_model *m, int t) { return m->reduction + m->tloc[t].off; }

/* Gradient buffer of activation a. */
static float *dA(ds_model *m, int a)
{
    int s = m->acts[a].grad_slot;
    if (s == -2) return m->act + m->dlogits_off;
    return m->act + m->grads_off + (size_t)s * m->slot_floats;
}

const float *ds_model_forward(ds_model *m, int n, int training)
{
    const ds_backend *be = m->be;
    if (n < 1 || n > m->cfg.max_batch) {
        ds_err("model: batch of %d images, the model was planned for 1..%d", n, m->cfg.max_batch);
        return NULL;
    }
    if (training && !m->cfg.training) {
        ds_err("model: training forward on an inference-only model");
        return NULL;
    }
    for (int l = 0; l < m->nlayers; l++) {
        ds_layer *L = &m->layers[l];
        const ds_act *in = &m->acts[L->in];
        float *x = A(m, L->in), *y = A(m, L->out);
        switch (L->type) {
        case L_CONV: {
            ds_conv_desc d = L->conv;
            d.n = n;
            be->conv_fwd(y, x, P(m, L->weight), &d, m->ws);
            break;
        }
        case L_BN: {
            int rows = n * in->h * in->w, c = in->c;
            const float *res = L->res >= 0 ? A(m, L->res) : NULL;
            if (!training) {
                be->bn_fwd_infer(y, x, P(m, L->weight), P(m, L->bias), P(m, L->rmean), P(m, L->rvar),
                                 res, L->relu, rows, c, DS_BN_EPS);
                break;
            }
            if (rows < 2) {
                /* PyTorch refuses too: the unbiased variance of one value is undefined. */
                ds_err("model: batch norm in training needs more than 1 value per channel (batch %d, %dx%d)",
                       n, in->h, in->w);
                return NULL;
            }
            float *mean = m->act + L->stats, *var = mean + c, *invstd = var + c;
            be->bn_fwd_train(y, mean, var, invstd, x, P(m, L->weight), P(m, L->bias), res, L->relu,
                             rows, c, DS_BN_EPS);
            /* The step averages these over micro-batches for the running statistics. */
            be->axpy(G(m, L->rmean), 1.0f, mean, (size_t)c);
            be->axpy(G(m, L->rvar), (float)((double)rows / (rows - 1)), var, (size_t)c);
            break;
        }
        case L_MAXPOOL: {
            ds_pool_desc d = L->pool;
            d.n = n;
            be->maxpool_fwd(y, x, &d);
            break;
        }
        case L_AVGPOOL:
            be->avgpool_fwd(y, x, n, in->h * in->w, in->c);
            break;
        case L_LINEAR:
            be->linear_fwd(y, x, P(m, L->weight), P(m, L->bias), n, in->c, m->cfg.num_classes);
            break;
        }
    }
    m->last_n = n;
    m->last_training = training;
    return A(m, m->logits);
}

static double loss_and_dlogits(ds_model *m, const int32_t *labels, int n, float smoothing, float scale)
{
    const ds_backend *be = m->be;
    int32_t *lab = (int32_t *)(m->act + m->labels_off);
    float *loss = m->act + m->loss_off;
    be->upload(lab, labels, (size_t)n * sizeof *labels);
    be->softmax_xent(loss, m->act + m->dlogits_off, A(m, m->logits), lab, n, m->cfg.num_classes,
                     smoothing, scale);
    be->download(m->loss_host, loss, (size_t)n * sizeof *loss);
    double sum = 0;
    for (int i = 0; i < n; i++) sum += m->loss_host[i];
    return sum;
}

double ds_model_loss(ds_model *m, const int32_t *labels, int n, float smoothing)
{
    if (n != m->last_n) return ds_err("model: loss of %d samples after a forward of %d", n, m->last_n), NAN;
    for (int i = 0; i < n; i++)
        if (labels[i] < 0 || labels[i] >= m->cfg.num_classes)
            return ds_err("model: label %d out of range [0, %d)", labels[i], m->cfg.num_classes), NAN;
    return loss_and_dlogits(m, labels, n, smoothing, 1.0f);
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
    const ds_backend *be = m->be;
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
            return ds_err("model: label %d out of range [0, %d)", labels[i], m->cfg.num_classes), NAN;
        }
    double loss = loss_and_dlogits(m, labels, n, smoothing, scale);
    float *scratch = m->act + m->scratch_off;
    if (reduce) start_buckets(m, &next, m->nlayers, to_all);
    for (int l = m->nlayers - 1; l >= 0; l--) {
        ds_layer *L = &m->layers[l];
        const ds_act *in = &m->acts[L->in];
        size_t in_count = (size_t)n * act_size(in);
        if (reduce && l == 0) {
            m->last_layer_t = ds_now();
            m->last_layer_event = ds_event_seq();
        }
        float *dy = dA(m, L->out);
        /* The model input needs no gradient; an input another consumer already wrote
         * gets this layer's part through the scratch slot. */
        float *dx = L->in == 0 ? NULL : L->in_acc ? scratch : dA(m, L->in);
        switch (L->type) {
        case L_CONV: {
            ds_conv_desc d = L->conv;
            d.n = n;
            be->conv_bwd_weight(G(m, L->weight), dy, A(m, L->in), &d, m->ws);
            if (dx) be->conv_bwd_data(dx, dy, P(m, L->weight), &d, m->ws);
            break;
        }
        case L_BN: {
            float *mean = m->act + L->stats, *invstd = mean + 2 * in->c;
            float *dres = L->res < 0 ? NULL : L->res_acc ? scratch : dA(m, L->res);
            be->bn_bwd(dx, dres, G(m, L->weight), G(m, L->bias), dy, A(m, L->out), A(m, L->in),
                       P(m, L->weight), mean, invstd, L->relu, n * in->h * in->w, in->c);
            if (L->res_acc) be->axpy(dA(m, L->res), 1.0f, scratch, in_count);
            break;
        }
        case L_MAXPOOL: {
            ds_pool_desc d = L->pool;
            d.n = n;
            be->maxpool_bwd(dx, dy, A(m, L->in), A(m, L->out), &d);
            break;
        }
        case L_AVGPOOL:
            be->avgpool_bwd(dx, dy, n, in->h * in->w, in->c);
            break;
        case L_LINEAR:
            be->linear_bwd(dx, G(m, L->weight), G(m, L->bias), dy, A(m, L->in), P(m, L->weight), n,
                           in->c, m->cfg.num_classes);
            break;
        }
        if (dx && L->in_acc) be->axpy(dA(m, L->in), 1.0f, scratch, in_count);
        if (reduce) start_buckets(m, &next, l, to_all);
    }
    return loss;
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
    return m->tinfo[i].kind == DS_TENSOR_PARAM && !(sgd->no_bn_bias_decay && param_skips_decay(&m->tinfo[i]));
}

void ds_model_step(ds_model *m, const ds_sgd *sgd, int micro_batches)
{
    const ds_backend *be = m->be;
    if (!m->cfg.training || micro_batches < 1) return;
    if (!sgd->no_bn_bias_decay) {
        be->sgd_step(m->params, m->momentum, m->reduction, m->nparam, sgd->lr, sgd->momentum,
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
                be->sgd_step(m->params + lo, m->momentum + lo, m->reduction + lo, at - lo, sgd->lr, sgd->momentum,
                             run_decays ? sgd->weight_decay : 0.0f, sgd->nesterov, !m->momentum_started);
            lo = at;
            run_decays = decays;
        }
    }
    m->momentum_started = 1;
    /* running = (1 - momentum) running + momentum * average of the micro-batch statistics */
    be->scale(m->params + m->nparam, 1.0f - DS_BN_MOMENTUM, m->nbuffer);
    be->axpy(m->params + m->nparam, DS_BN_MOMENTUM / (float)micro_batches, m->reduction + m->nparam,
             m->nbuffer);
    for (int i = 0; i < m->nbn; i++) m->bn_tracked[i]++;
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
    if (host) m->be->download(host, A(m, m->layers[l].out), count * sizeof *host);
    return count;
}
