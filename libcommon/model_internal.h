/* model_internal: the model's inside, shared by its two files (private to them): model_build.c
 * makes the layer list of an architecture and plans memory and buckets once; model.c runs
 * it (lifecycle, tensors, init, forward, backward, the step). */
#ifndef DS_MODEL_INTERNAL_H
#define DS_MODEL_INTERNAL_H

#include "model.h"

typedef struct {
    const char *name;
    int bottleneck;        /* 1: 1x1-3x3-1x1 blocks with expansion 4; 0: two 3x3 */
    int cifar;             /* 1: 3x3/1 stem of 16 channels, no max pool */
    int nstages;
    int blocks[4];
} ds_arch;

/* The architecture named, or NULL. */
const ds_arch *ds_model_arch_find(const char *name);

typedef enum { L_CONV, L_BN, L_MAXPOOL, L_AVGPOOL, L_LINEAR } ds_layer_type;

/* An activation tensor [n, h, w, c]; n is the run-time batch. */
typedef struct {
    int h, w, c;
    ds_dtype t;            /* storage, of the tensor and of its gradient (the plan's table) */
    size_t off;            /* floats into the activation allocation (a bf16 tensor takes half
                              as many) */
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
    size_t argmax;         /* max pool in training: activation offset of the bytes [n, p, q, c]
                              maxpool_fwd leaves for maxpool_bwd (each window's maximum's index) */
    size_t relu_mask;      /* BN with ReLU in training: activation offset of the ReLU bitmask
                              bn_fwd_train leaves for bn_bwd (backend.h); SIZE_MAX: none */
    int in_acc, res_acc;   /* backward: another consumer already wrote that input's gradient,
                              so this layer adds its part: a convolution's conv_bwd_data
                              accumulates, the others write to the scratch slot and add */
    int fuse_bn;           /* conv: an inference forward runs it and the next layer, the batch
                              norm that alone reads its output, as one conv_fwd_bn (the
                              backend has one), writing the batch norm's output */
} ds_layer;

/* Where a named tensor lives: offset in floats into the parameter allocation (the same
 * offset holds its gradient / statistic in the reduction buffer and its momentum). */
typedef struct {
    size_t off;
    size_t off16;          /* conv weights in a bf16 run: offset in the bf16 copy (elements, each
                              tensor 256-byte aligned, as a GPU library's fast paths want) */
    int conv;              /* OHWI inside, OIHW in PyTorch */
    int bn;                /* COUNTER: BN index */
} ds_tensor_loc;

/* One step's losses on their way to the host (ds_model_defer_loss). */
typedef struct {
    int mark;              /* the backend mark after the step; -1: not ended */
    int count, bad;        /* micro-batches queued; a backward refused one */
    int *n;                /* [micro] each one's samples */
    ds_clock *clock[2];    /* the step's start and end (NULL: the backend has no clocks) */
    int timed;             /* begun by ds_model_begin_step: clock[0] holds its start */
} ds_late_step;

/* What a step recorded as a graph took by value (ds_model_train_step): 4-byte fields only,
 * compared whole */
typedef struct {
    int n, h, w, micro;
    float scale, smoothing, momentum, wd;
    int nesterov, bn_bias_decay;
} ds_step_key;

#define DS_STEP_GRAPHS 8           /* step shapes kept recorded (input sizes, a short last batch) */

typedef struct {
    ds_step_key key;
    uint64_t used;                 /* when last asked for (0: the slot is free) */
    int ran;                       /* a step of this shape has run as calls */
    ds_graph *graph;               /* recorded on the second step of the shape; NULL: not yet */
} ds_step_graph;

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
    void *weights16;               /* bf16 runs: the bf16 copy of the convolution weights, which
                                      the convolutions read ([n16], tloc's off16); NULL otherwise */
    size_t n16;
    int weights16_stale;           /* the parameters changed since the copy was made */
    float *reduction;              /* [nparam + nbuffer]: gradients, BN statistic sums */
    float *momentum;               /* [nparam] */
    float *act;                    /* activation allocation */
    void *ws;
    size_t act_floats, ws_bytes;
    size_t scratch_off, grads_off;  /* scratch slot (when a layer needs it); gradient slot k at
                                       grads_off + k slot_floats */
    size_t slot_floats;
    size_t dlogits_off, loss_off, labels_off;
    size_t step_off;               /* the step's scalars (DS_STEP_SCALARS floats): what changes
                                      from step to step is read from here by the kernels, never
                                      passed by value, so a recorded step replays right */
    int logits;                    /* act id */
    float *loss_host;              /* [max_batch] */
    /* Losses read late (ds_model_defer_loss): two steps' per-sample losses in host memory
     * the backend copies into (host_alloc), [2][micro][max_batch]; step k in slot k % 2. */
    struct {
        int micro;                 /* micro-batches per step at most; 0: losses are read at once */
        float *host;
        ds_late_step step[2];
        int steps;                 /* steps begun: the one filling is steps - 1 */
        int filling;               /* step steps - 1 is open (begun, or a backward queued into
                                      it) and not yet ended */
    } late;

    int momentum_started;
    int last_n, last_training;     /* the last forward, for backward's checks */
    ds_step_graph graphs[DS_STEP_GRAPHS];
    uint64_t graph_uses;
    int graphs_off;                /* the backend would not record a step: every step runs as calls */

    struct {
        size_t lo, hi;             /* floats of the reduction buffer */
        int ready;                 /* complete once backward has run layer `ready` (nlayers: before) */
    } *buckets;                    /* in start order: from the buffer's end towards its start */
    int nbuckets;
    double last_layer_t;           /* ds_now() as the last reducing backward began layer 0 */
    uint64_t last_layer_event;     /* ds_event_seq() then */
};

/* The step's scalars at step_off: [0] the learning rate (sgd_step's lr). The other values a
 * step passes by value (the loss scale 1/G, the smoothing, momentum, weight decay, the
 * running statistics' 0.1 / micro-batches) are the run's, fixed from step to step. */
#define DS_STEP_SCALARS 1

#define ALIGN_FLOATS 64            /* 256 bytes: every region starts aligned for any backend */
static inline size_t align_up(size_t x) { return (x + ALIGN_FLOATS - 1) / ALIGN_FLOATS * ALIGN_FLOATS; }

static inline size_t act_size(const ds_act *a) { return (size_t)a->h * a->w * a->c; }
/* Floats (the allocation's unit) that n of a take, aligned. */
static inline size_t act_span(const ds_act *a, size_t n) { return align_up((n * act_size(a) * ds_dtype_size(a->t) + 3) / 4); }

/* The storage of the activations the model's precision rounds (docs/DESIGN.md §4): bf16
 * under bf16, float32 otherwise. The input, the pooled features and the logits are float32. */
static inline ds_dtype ds_model_act_type(const ds_model *m)
{
    return m->be->precision == DS_PRECISION_BF16 ? DS_BF16 : DS_F32;
}

/* A convolution or pooling layer's descriptor for a batch of n, with the plan's storages. */
static inline ds_conv_desc ds_model_conv_desc(const ds_model *m, const ds_layer *L, int n)
{
    ds_conv_desc d = L->conv;
    d.n = n;
    d.in_t = m->acts[L->in].t;
    d.out_t = m->acts[L->out].t;
    d.w_t = ds_model_act_type(m);
    return d;
}

static inline ds_pool_desc ds_model_pool_desc(const ds_model *m, const ds_layer *L, int n)
{
    ds_pool_desc d = L->pool;
    d.n = n;
    d.t = m->acts[L->in].t;
    return d;
}

/* The model's memory by name (model.h's layout): activation a in its storage acts[a].t,
 * act_f32 for the float32 ones (features, logits); tensor t's parameters and gradients. */
static inline void *act(ds_model *m, int a) { return m->act + m->acts[a].off; }
static inline float *act_f32(ds_model *m, int a) { return m->act + m->acts[a].off; }
static inline float *param(ds_model *m, int t) { return m->params + m->tloc[t].off; }
static inline float *grad(ds_model *m, int t) { return m->reduction + m->tloc[t].off; }
/* A training batch norm's ReLU bitmask, or NULL where the plan gave it none. */
static inline uint8_t *relu_mask(ds_model *m, const ds_layer *L)
{
    return L->relu_mask == SIZE_MAX ? NULL : (uint8_t *)(m->act + L->relu_mask);
}

/* The weights a convolution reads: the bf16 copy in a bf16 run, else the parameters. */
static inline void *conv_weights(ds_model *m, int t)
{
    return m->weights16 ? (void *)((char *)m->weights16 + m->tloc[t].off16 * ds_dtype_size(DS_BF16)) : param(m, t);
}

/* Gradient buffer of activation a (the storage of a). */
static inline void *act_grad(ds_model *m, int a)
{
    int s = m->acts[a].grad_slot;
    if (s == -2) return m->act + m->dlogits_off;
    return m->act + m->grads_off + (size_t)s * m->slot_floats;
}

/* model.c: the walks through the layers, and the bf16 weight copy they read. */
/* Forward's ops on the first n images; -1 (with a message) when batch norm cannot train on
 * so few values. */
int ds_model_forward_queue(ds_model *m, int n, int training);
/* Backward's ops through the layers, from the dlogits the loss wrote; reduce: each bucket
 * started as it completes, to_all as given. */
void ds_model_backward_queue(ds_model *m, int n, int reduce, int to_all);
/* The bf16 copy of the convolution weights, made when they changed (once per step). */
void ds_model_weights16_update(ds_model *m);

/* model_step.c: the loss, the losses read late, the SGD step and the recorded step. */
/* The loss of the last forward's logits against labels, and the dlogits backward starts
 * from; late: queued into the step's slot, 0 returned. */
double ds_model_loss_and_dlogits(ds_model *m, const int32_t *labels, int n, float smoothing, float scale, int late);
/* The slot of the step being filled (opened if none is); NULL with a message when none can
 * take another backward. */
ds_late_step *ds_model_late_step(ds_model *m);
void ds_model_late_free(ds_model *m);
void ds_model_step_graphs_free(ds_model *m);

/* Builds m's layer list and tensors for architecture arch at m->cfg's input size (m->acts[0]
 * the input); -1 when the input is too small for the network. */
int ds_model_build_network(ds_model *m, const ds_arch *arch);
/* Places parameters, buffers, activations and the workspace (asking the backend for each
 * convolution's); -1 with a message when a layer cannot be planned. */
int ds_model_plan_memory(ds_model *m);
/* Cuts the reduction buffer into the buckets of a reducing backward. */
void ds_model_plan_buckets(ds_model *m);

#endif
