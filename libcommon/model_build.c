/* model_build: the layer list of each architecture, and the plans made once per model: the
 * memory plan (every tensor's place) and the gradient buckets. The run side is model.c. */
#include "model_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "log.h"

/* ---- architectures ---- */

static const ds_arch arch_table[] = {
    {"resnet18", 0, 0, 4, {2, 2, 2, 2}},
    {"resnet34", 0, 0, 4, {3, 4, 6, 3}},
    {"resnet50", 1, 0, 4, {3, 4, 6, 3}},
    {"resnet101", 1, 0, 4, {3, 4, 23, 3}},
    {"resnet20", 0, 1, 3, {3, 3, 3}},
};
#define NARCH (int)(sizeof arch_table / sizeof arch_table[0])

const ds_arch *ds_model_arch_find(const char *name)
{
    for (int i = 0; i < NARCH; i++)
        if (name && !strcmp(arch_table[i].name, name)) return &arch_table[i];
    return NULL;
}

const char *ds_arch_names(void) { return "resnet18, resnet34, resnet50, resnet101, resnet20"; }
int ds_arch_known(const char *name) { return ds_model_arch_find(name) != NULL; }

/* ---- the graph ---- */

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
static int build_block(ds_model *m, const ds_arch *arch, const char *pre, int x, int planes, int stride)
{
    char name[64];
    int cin = m->acts[x].c, cout = arch->bottleneck ? planes * 4 : planes, t = x, b = -1;
    /* conv1..convN, each followed by its BN (+ReLU); the last BN waits for the residual.
     * Bottleneck (v1.5: the stride on the 3x3): 1x1, 3x3, 1x1 to 4x planes; basic: 3x3, 3x3. */
    typedef struct { int k, r, stride, pad; } conv_spec;
    const conv_spec bottleneck[] = {{planes, 1, 1, 0}, {planes, 3, stride, 1}, {cout, 1, 1, 0}},
                    basic[] = {{planes, 3, stride, 1}, {cout, 3, 1, 1}};
    const conv_spec *spec = arch->bottleneck ? bottleneck : basic;
    const int n = arch->bottleneck ? 3 : 2;
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

int ds_model_build_network(ds_model *m, const ds_arch *arch)
{
    int x = add_act(m, m->cfg.height, m->cfg.width, 3);
    int stem = arch->cifar ? 16 : 64;
    x = arch->cifar ? build_conv(m, "conv1", x, stem, 3, 1, 1) : build_conv(m, "conv1", x, stem, 7, 2, 3);
    if (x < 0) return -1;
    x = build_bn_layer(m, build_bn_tensors(m, "bn1", stem), x, -1, 1);
    if (!arch->cifar) {
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
    for (int s = 0; s < arch->nstages; s++) {
        for (int b = 0; b < arch->blocks[s]; b++) {
            char pre[32];
            snprintf(pre, sizeof pre, "layer%d.%d", s + 1, b);
            x = build_block(m, arch, pre, x, stem << s, b == 0 && s > 0 ? 2 : 1);
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

int ds_model_plan_memory(ds_model *m)
{
    const ds_backend *be = m->be;
    size_t B = (size_t)m->cfg.max_batch, off = 0;

    /* Storage: the precision's for every activation the convolutions, batch norm and pooling
     * pass along; float32 for the input, the pooled features and the logits (the fully
     * connected layer and the loss compute in float32). Gradients as their activations. */
    for (int i = 0; i < m->nacts; i++) m->acts[i].t = ds_model_act_type(m);
    m->acts[0].t = m->acts[m->logits].t = DS_F32;
    for (int l = 0; l < m->nlayers; l++)
        if (m->layers[l].type == L_AVGPOOL) m->acts[m->layers[l].out].t = DS_F32;
    m->slot_floats = 0;
    for (int i = 0; i < m->nacts; i++)
        if (act_span(&m->acts[i], B) > m->slot_floats) m->slot_floats = act_span(&m->acts[i], B);

    /* Parameters first, buffers after, both in state_dict order. */
    m->nparam = m->nbuffer = 0;
    for (int i = 0; i < m->ntensors; i++)
        if (m->tinfo[i].kind == DS_TENSOR_PARAM) m->tloc[i].off = m->nparam, m->nparam += m->tinfo[i].count;
    for (int i = 0; i < m->ntensors; i++)
        if (m->tinfo[i].kind == DS_TENSOR_BUFFER)
            m->tloc[i].off = m->nparam + m->nbuffer, m->nbuffer += m->tinfo[i].count;
    /* The bf16 copy of the convolution weights, each aligned to 256 bytes. */
    m->n16 = 0;
    if (ds_model_act_type(m) == DS_BF16)
        for (int i = 0; i < m->ntensors; i++)
            if (m->tloc[i].conv) m->tloc[i].off16 = m->n16, m->n16 += (m->tinfo[i].count + 127) / 128 * 128;

    /* Inference's convolutions with their batch norm in one pass (conv_fwd_bn): a convolution
     * whose output only the next layer, a batch norm, reads. */
    for (int l = 0; l + 1 < m->nlayers; l++) {
        ds_layer *L = &m->layers[l], *N = &m->layers[l + 1];
        int readers = 0;
        for (int j = 0; j < m->nlayers; j++) readers += (m->layers[j].in == L->out) + (m->layers[j].res == L->out);
        L->fuse_bn = be->conv_fwd_bn && L->type == L_CONV && N->type == L_BN && N->in == L->out && readers == 1 &&
                     L->out != m->logits;
    }

    /* Activations. The input has its own region; in training every activation has its own
     * (backward needs them all); inference reuses slots as soon as the last reader ran (a
     * fused convolution's input stays until its batch norm has run: the one pass writes the
     * batch norm's output while it reads the input). */
    m->acts[0].off = off;
    off += act_span(&m->acts[0], B);
    if (m->cfg.training) {
        for (int i = 1; i < m->nacts; i++) {
            m->acts[i].off = off;
            off += act_span(&m->acts[i], B);
        }
    } else {
        int last_use[m->nacts];
        for (int i = 0; i < m->nacts; i++) last_use[i] = i == m->logits ? m->nlayers : -1;
        for (int l = 0; l < m->nlayers; l++) {
            last_use[m->layers[l].in] = l + m->layers[l].fuse_bn;
            if (m->layers[l].res >= 0) last_use[m->layers[l].res] = l;
        }
        ds_slots s = {0};
        int slot_of[m->nacts];
        for (int l = 0; l < m->nlayers; l++) {
            ds_layer *L = &m->layers[l];
            if ((slot_of[L->out] = slot_take(&s)) < 0) return ds_err("model: memory plan: too many live tensors");
            if (L->in > 0 && last_use[L->in] == l) s.busy[slot_of[L->in]] = 0;
            if (L->res > 0 && last_use[L->res] == l) s.busy[slot_of[L->res]] = 0;
            const int fused_in = l > 0 && m->layers[l - 1].fuse_bn ? m->layers[l - 1].in : 0;
            if (fused_in > 0 && last_use[fused_in] == l) s.busy[slot_of[fused_in]] = 0;
        }
        for (int i = 1; i < m->nacts; i++) m->acts[i].off = off + (size_t)slot_of[i] * m->slot_floats;
        off += (size_t)s.n * m->slot_floats;
    }

    /* Gradient slots, by liveness over the backward walk: an activation's gradient lives
     * from its first consumer in backward order to its producer. A batch norm's residual
     * whose gradient this layer is the first to write takes over the output's slot: its
     * gradient is the output's (after the ReLU mask, which bn_bwd writes into dout), and
     * nothing reads the output's gradient after this layer, so bn_bwd is given dresidual ==
     * dout and copies nothing. */
    if (m->cfg.training) {
        ds_slots s = {0};
        m->acts[m->logits].grad_slot = -2;
        for (int l = m->nlayers - 1; l >= 0; l--) {
            ds_layer *L = &m->layers[l];
            int ins[2] = {L->in, L->res}, *acc[2] = {&L->in_acc, &L->res_acc}, out_kept = 0;
            for (int j = 0; j < 2; j++) {
                if (ins[j] <= 0) continue;   /* none, or the model input: no gradient */
                ds_act *a = &m->acts[ins[j]];
                *acc[j] = a->grad_slot >= 0;
                if (*acc[j]) continue;
                if (j == 1 && L->type == L_BN && m->acts[L->out].grad_slot >= 0) {
                    a->grad_slot = m->acts[L->out].grad_slot;
                    out_kept = 1;
                } else if ((a->grad_slot = slot_take(&s)) < 0) {
                    return ds_err("model: memory plan: too many live gradients");
                }
            }
            if (L->in_acc && L->res_acc) return ds_err("model: memory plan: two accumulating inputs");
            if (m->acts[L->out].grad_slot >= 0 && !out_kept) s.busy[m->acts[L->out].grad_slot] = 0;
        }
        /* The scratch slot, for a layer other than a convolution whose input (or BN's residual)
         * has another consumer; a convolution adds into the gradient itself (none in a
         * ResNet: its blocks' inputs meet convolutions and a BN's residual, which writes). */
        int scratch = 0;
        for (int l = 0; l < m->nlayers; l++)
            scratch |= m->layers[l].res_acc || (m->layers[l].in_acc && m->layers[l].type != L_CONV);
        m->scratch_off = off;
        if (scratch) off += m->slot_floats;
        m->grads_off = off;
        off += (size_t)s.n * m->slot_floats;
    }

    for (int l = 0; l < m->nlayers; l++) {
        ds_layer *L = &m->layers[l];
        if (L->type != L_BN) continue;
        L->stats = off;
        off += align_up(3 * (size_t)m->acts[L->in].c);
    }
    /* A batch norm's ReLU bitmask, one byte per 16 bytes of its output, for its backward:
     * training only, where the channels fill whole bytes (ds_relu_mask_bytes; every ResNet
     * layer's do), and only for a backend that reads it instead of the output to mask the
     * gradient (relu_mask: the CPU's backward masks from the output). */
    for (int l = 0; l < m->nlayers; l++) {
        ds_layer *L = &m->layers[l];
        const ds_act *a = &m->acts[L->out];
        const size_t bytes = ds_relu_mask_bytes((int)(B * a->h * a->w), a->c, a->t);
        L->relu_mask = SIZE_MAX;
        if (L->type != L_BN || !L->relu || !m->cfg.training || !m->be->relu_mask || !bytes) continue;
        L->relu_mask = off;
        off += align_up((bytes + 3) / 4);
    }
    /* A max pool's argmax, one byte an output, for its backward: training only. */
    for (int l = 0; l < m->nlayers && m->cfg.training; l++) {
        ds_layer *L = &m->layers[l];
        if (L->type != L_MAXPOOL) continue;
        L->argmax = off;
        off += align_up((B * act_size(&m->acts[L->out]) + 3) / 4);
    }
    m->dlogits_off = off;
    off += align_up(B * m->cfg.num_classes);
    m->loss_off = off;
    off += align_up(B);
    m->labels_off = off;
    off += align_up(B);
    m->step_off = off;
    off += align_up(DS_STEP_SCALARS);
    m->act_floats = off;

    m->ws_bytes = 0;
    for (int l = 0; l < m->nlayers; l++) {
        if (m->layers[l].type != L_CONV) continue;
        ds_conv_desc d = ds_model_conv_desc(m, &m->layers[l], m->cfg.max_batch);
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
void ds_model_plan_buckets(ds_model *m)
{
    size_t cap = (m->cfg.bucket_bytes ? m->cfg.bucket_bytes : DS_BUCKET_BYTES) / sizeof(float);
    int *done = ds_xmalloc((size_t)m->ntensors * sizeof *done);
    for (int t = 0; t < m->ntensors; t++) done[t] = m->nlayers;
    for (int l = 0; l < m->nlayers; l++) {
        if (m->layers[l].weight >= 0) done[m->layers[l].weight] = l;
        if (m->layers[l].bias >= 0) done[m->layers[l].bias] = l;
    }
    /* Offsets grow with the tensor index, parameters first, buffers after (ds_model_plan_memory):
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
