/* backend/cuda_conv: the CUDA backend's convolutions through cuDNN (NHWC activations,
 * [K, R, S, C] weights), the twin of cpu_conv.c: the plans' cuDNN side (descriptors,
 * algorithms found or guessed per shape and chosen again where a size or a failure asks),
 * the workspace copies where storage and arithmetic differ, and the three ops. The plans'
 * bookkeeping is plain C in cuda_plan.c. Semantics are those of the conv entries of
 * ds_backend (backend.h); precision and storage as cuda.h says. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"
extern "C" {
#include "cuda_kernels.h"
#include "cuda_plan.h"
}

/* Plans (cuda_plan.h): one per (shape and storage types, precision, determinism, planned
 * batch), made by conv_workspace (the model's planning pass) and only looked up afterwards.
 * A plan serves every batch n and input h x w up to its planned ones: each (n, h, w) run
 * gets a slot, with its own tensor and convolution descriptors and the plan's algorithms,
 * or others where those would need more workspace at that size than the arena holds or
 * will not run there (conv_issue). Each op has its own precision: the run's, or a lower one
 * where the run's has no usable algorithm for it (ds_conv_choose); [0] descriptors are fp32
 * tensors (fp32 and tf32 ops), [1] bf16. */
typedef struct {
    cudnnTensorDescriptor_t x[2], y[2];      /* for the slot's n, h, w; [1] only in bf16 runs */
    cudnnConvolutionDescriptor_t conv[DS_CONV_OPS];  /* each with its op's math type */
    ds_conv_choice choice[DS_CONV_OPS];      /* what the slot runs: the plan's, or others that fit */
    size_t cudnn_ws[DS_CONV_OPS];            /* each op's cuDNN workspace at the slot's size */
    size_t limit;                            /* the workspace a run at this size may use */
    ds_conv_list list[DS_CONV_OPS];          /* cuDNN's answers at this size, for other choices */
    int ran[DS_CONV_OPS];                    /* 1: the op has run at this size with its choice */
} conv_slot;

typedef struct {
    cudnnFilterDescriptor_t w[2];            /* fp32, bf16 ([1] only in bf16 runs) */
    ds_conv_choice choice[DS_CONV_OPS];      /* what cuDNN chose at the planned size */
    ds_conv_list list[DS_CONV_OPS];          /* and what it answered there */
    conv_slot slot[DS_CONV_PLAN_SLOTS];
} conv_impl;

static ds_conv_plans plans;

/* An algorithm may use at most this much workspace: the arena is sized from the largest. */
#define CONV_WS_LIMIT ((size_t)1 << 30)

static size_t align256(size_t b) { return (b + 255) / 256 * 256; }

static size_t n_in(const ds_conv_desc *d) { return (size_t)d->n * d->h * d->w * d->c; }
static size_t n_w(const ds_conv_desc *d) { return (size_t)d->k * d->r * d->s * d->c; }
static size_t n_out(const ds_conv_desc *d) { return (size_t)d->n * d->p * d->q * d->k; }

/* The tensors of an op computing in precision p are of this type. */
static ds_dtype op_type(int p) { return p == DS_PRECISION_BF16 ? DS_BF16 : DS_F32; }

/* The workspace of one op of d, at d's n, h and w, computing in type ct: first a copy in ct
 * of each of the op's three tensors stored in the other type (the byte offset of each, or
 * NO_COPY: cuDNN takes the tensor where it is), then for backward-data of a bf16 din
 * computed in float32 the result rounded to bf16 (`sum`, which an accumulating call adds
 * to din), then cuDNN's own workspace at `cudnn`. The three are out (dout), in (din) and the
 * weights: w_t for forward and backward-data, float32 for backward-filter's dw. dout comes
 * first, so two backward ops that copy it into the same type place it alike (see
 * dout_copy). */
#define NO_COPY SIZE_MAX
typedef struct { size_t out, in, w, sum, cudnn; } conv_layout;

static conv_layout layout(const ds_conv_desc *d, int op, ds_dtype ct)
{
    conv_layout l = {NO_COPY, NO_COPY, NO_COPY, NO_COPY, 0};
    size_t es = ds_dtype_size(ct);
    ds_dtype w_t = op == DS_CONV_BWD_FILTER ? DS_F32 : d->w_t;
    if (d->out_t != ct) l.out = l.cudnn, l.cudnn += align256(n_out(d) * es);
    if (d->in_t != ct) l.in = l.cudnn, l.cudnn += align256(n_in(d) * es);
    if (w_t != ct) l.w = l.cudnn, l.cudnn += align256(n_w(d) * es);
    if (op == DS_CONV_BWD_DATA && d->in_t == DS_BF16 && ct == DS_F32)
        l.sum = l.cudnn, l.cudnn += align256(n_in(d) * ds_dtype_size(DS_BF16));
    return l;
}

/* The math an op computing in precision p asks for: fp32 FMA only (DEFAULT would allow TF32
 * on Ampere and later); tf32 and bf16 tensor cores. */
static cudnnMathType_t base_math(int p) { return p == DS_PRECISION_FP32 ? CUDNN_FMA_MATH : CUDNN_TENSOR_OP_MATH; }
static int type_index(int p) { return p == DS_PRECISION_BF16; }

static ds_conv_math math_of(cudnnMathType_t m)
{
    switch (m) {
    case CUDNN_TENSOR_OP_MATH: return DS_MATH_TENSOR_OP;
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION: return DS_MATH_TENSOR_OP_CONVERSION;
    case CUDNN_FMA_MATH: return DS_MATH_FMA;
    default: return DS_MATH_DEFAULT;
    }
}

static cudnnMathType_t cudnn_math(ds_conv_math m)
{
    switch (m) {
    case DS_MATH_TENSOR_OP: return CUDNN_TENSOR_OP_MATH;
    case DS_MATH_TENSOR_OP_CONVERSION: return CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
    case DS_MATH_FMA: return CUDNN_FMA_MATH;
    default: return CUDNN_DEFAULT_MATH;
    }
}

/* "64x56x56x64 -> 64 (3x3/1; in bf16, out bf16, w bf16)" */
#define CONV_NAME 128
static const char *conv_name(const ds_conv_desc *d, char *buf, size_t len)
{
    snprintf(buf, len, "%dx%dx%dx%d -> %d (%dx%d/%d; in %s, out %s, w %s)", d->n, d->h, d->w, d->c, d->k, d->r,
             d->s, d->stride, ds_dtype_name(d->in_t), ds_dtype_name(d->out_t), ds_dtype_name(d->w_t));
    return buf;
}

/* Sets the slot's descriptors for d (its n, h, w); creates them the first time. */
static void slot_describe(conv_slot *s, const ds_conv_desc *d)
{
    int types = g.precision == DS_PRECISION_BF16 ? 2 : 1;
    static const cudnnDataType_t type[2] = {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16};
    for (int t = 0; t < types; t++) {
        if (!s->x[t]) {
            cudnnCheck(cudnnCreateTensorDescriptor(&s->x[t]));
            cudnnCheck(cudnnCreateTensorDescriptor(&s->y[t]));
        }
        /* x [n,h,w,c], y [n,p,q,k] */
        cudnnCheck(cudnnSetTensor4dDescriptor(s->x[t], CUDNN_TENSOR_NHWC, type[t], d->n, d->c, d->h, d->w));
        cudnnCheck(cudnnSetTensor4dDescriptor(s->y[t], CUDNN_TENSOR_NHWC, type[t], d->n, d->k, d->p, d->q));
    }
    for (int i = 0; i < DS_CONV_OPS; i++) {
        if (!s->conv[i]) cudnnCheck(cudnnCreateConvolutionDescriptor(&s->conv[i]));
        cudnnCheck(cudnnSetConvolution2dDescriptor(s->conv[i], d->pad, d->pad, d->stride, d->stride, 1, 1,
                                                   CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    }
}

/* ds_conv_query for cuDNN: op's algorithms for the slot's size at precision p, by cudnnFind*
 * (find = 1: every algorithm run once on buffers cuDNN allocates itself, fastest first) or
 * by the heuristics of cudnnGet*_v7 (best guess first). */
typedef struct { conv_impl *p; conv_slot *s; int find; } conv_query_ctx;

#define TO_ALGOS(perf, count, out, cap)                                                            \
    do {                                                                                           \
        for (int i_ = 0; i_ < (count) && i_ < (cap); i_++) {                                       \
            (out)[i_].algo = (int)(perf)[i_].algo;                                                 \
            (out)[i_].ok = (perf)[i_].status == CUDNN_STATUS_SUCCESS;                              \
            (out)[i_].status = cudnnGetErrorString((perf)[i_].status);                             \
            (out)[i_].deterministic = (perf)[i_].determinism == CUDNN_DETERMINISTIC;               \
            (out)[i_].math = math_of((perf)[i_].mathType);                                         \
            (out)[i_].memory = (perf)[i_].memory;                                                  \
        }                                                                                          \
    } while (0)

static int cudnn_query(void *ctx, const ds_conv_desc *d, ds_conv_op op, int p, ds_conv_algo *out, int cap,
                       char *why, size_t why_len)
{
    conv_query_ctx *c = (conv_query_ctx *)ctx;
    conv_slot *s = c->s;   /* its descriptors hold d's sizes */
    (void)d;
    int t = type_index(p), n = 0;
    cudnnFilterDescriptor_t w = c->p->w[t];
    cudnnStatus_t st = cudnnSetConvolutionMathType(s->conv[op], base_math(p));
#define ASK(kind, ...) (c->find ? cudnnFind##kind##Algorithm(__VA_ARGS__) : cudnnGet##kind##Algorithm_v7(__VA_ARGS__))
    if (st == CUDNN_STATUS_SUCCESS && op == DS_CONV_FWD) {
        cudnnConvolutionFwdAlgoPerf_t r[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        st = ASK(ConvolutionForward, g.cudnn, s->x[t], w, s->conv[op], s->y[t], CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, r);
        if (st == CUDNN_STATUS_SUCCESS) TO_ALGOS(r, n, out, cap);
    } else if (st == CUDNN_STATUS_SUCCESS && op == DS_CONV_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        st = ASK(ConvolutionBackwardData, g.cudnn, w, s->y[t], s->conv[op], s->x[t],
                 CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, r);
        if (st == CUDNN_STATUS_SUCCESS) TO_ALGOS(r, n, out, cap);
    } else if (st == CUDNN_STATUS_SUCCESS) {
        cudnnConvolutionBwdFilterAlgoPerf_t r[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        st = ASK(ConvolutionBackwardFilter, g.cudnn, s->x[t], s->y[t], s->conv[op], w,
                 CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, r);
        if (st == CUDNN_STATUS_SUCCESS) TO_ALGOS(r, n, out, cap);
    }
#undef ASK
    if (st != CUDNN_STATUS_SUCCESS) {
        char last[256] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(why, why_len, "%s%s%s", cudnnGetErrorString(st), last[0] ? ": " : "", last);
        return -1;
    }
    return n < cap ? n : cap;
}

/* Gives each op of slot s the math type of its choice. */
static void slot_set_math(conv_slot *s)
{
    for (int i = 0; i < DS_CONV_OPS; i++)
        if (s->choice[i].needed) cudnnCheck(cudnnSetConvolutionMathType(s->conv[i], cudnn_math(s->choice[i].math)));
}

/* The workspace op i of slot s needs with its chosen algorithm at the slot's size;
 * SIZE_MAX when cuDNN cannot say (the algorithm does not run at this size). */
static size_t op_workspace(const conv_impl *p, const conv_slot *s, int i)
{
    const ds_conv_choice *c = &s->choice[i];
    int t = type_index(c->precision);
    size_t need = 0;
    cudnnStatus_t st;
    if (i == DS_CONV_FWD)
        st = cudnnGetConvolutionForwardWorkspaceSize(g.cudnn, s->x[t], p->w[t], s->conv[i], s->y[t],
                                                     (cudnnConvolutionFwdAlgo_t)c->algo, &need);
    else if (i == DS_CONV_BWD_DATA)
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(g.cudnn, p->w[t], s->y[t], s->conv[i], s->x[t],
                                                          (cudnnConvolutionBwdDataAlgo_t)c->algo, &need);
    else
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(g.cudnn, s->x[t], s->y[t], s->conv[i], p->w[t],
                                                            (cudnnConvolutionBwdFilterAlgo_t)c->algo, &need);
    return st == CUDNN_STATUS_SUCCESS ? need : SIZE_MAX;
}

/* Says once per plan which ops compute below the run's precision, and at --verbose what
 * each op of the plan runs. */
static void plan_report(const ds_conv_desc *d, const ds_conv_choice choice[DS_CONV_OPS],
                        const ds_conv_list lists[DS_CONV_OPS], const char *where)
{
    char name[CONV_NAME], text[512];
    conv_name(d, name, sizeof name);
    for (int i = 0; i < DS_CONV_OPS; i++)
        if (choice[i].needed && choice[i].precision != g.precision)
            ds_warn("CUDA conv %s: cuDNN has no usable %s %s algorithm%s; that op computes in %s", name,
                    ds_precision_name(g.precision), ds_conv_op_name((ds_conv_op)i),
                    g.deterministic ? " that is deterministic" : "", ds_precision_name((ds_precision)choice[i].precision));
    ds_conv_choice_describe(choice, text, sizeof text);
    ds_debug("CUDA conv %s, %s: %s", name, where, text);
    if (ds_verbosity < 1 || !lists) return;
    for (int i = 0; i < DS_CONV_OPS; i++) {
        if (!choice[i].needed) continue;
        ds_conv_list_describe(&lists[i], choice[i].precision, text, sizeof text);
        ds_debug("CUDA conv %s, %s %s: cuDNN answered (%s, best first): %s", name, where,
                 ds_conv_op_name((ds_conv_op)i), ds_precision_name((ds_precision)choice[i].precision), text);
    }
}

/* Chooses the plan's algorithms at the planned size: NULL, with a message, when an op d
 * needs has none at any precision. */
static conv_impl *plan_make(const ds_conv_desc *d, size_t *bytes)
{
    conv_impl *p = (conv_impl *)calloc(1, sizeof *p);
    if (!p) ds_die("out of memory for a convolution plan");
    int types = g.precision == DS_PRECISION_BF16 ? 2 : 1;
    static const cudnnDataType_t type[2] = {CUDNN_DATA_FLOAT, CUDNN_DATA_BFLOAT16};
    for (int t = 0; t < types; t++) {
        /* w [k,r,s,c]: cuDNN's NHWC filter layout is exactly KRSC */
        cudnnCheck(cudnnCreateFilterDescriptor(&p->w[t]));
        cudnnCheck(cudnnSetFilter4dDescriptor(p->w[t], type[t], CUDNN_TENSOR_NHWC, d->k, d->c, d->r, d->s));
    }
    conv_slot *s = &p->slot[0];   /* describes the planned size for the search */
    slot_describe(s, d);
    /* Find times every algorithm: exact choices for this GPU, paid once per shape at planning
     * time. Timing can rank two algorithms either way from one process to the next, so under
     * --deterministic the choice comes from cuDNN's heuristics instead: a pure function of the
     * shape, the GPU and the cuDNN version, so a resumed run computes as the first run did. */
    conv_query_ctx ctx = {p, s, !g.deterministic};
    char msg[1024], name[CONV_NAME];
    if (ds_conv_choose(d, g.precision, g.deterministic, CONV_WS_LIMIT, cudnn_query, &ctx, p->list, p->choice, msg,
                       sizeof msg)) {
        ds_err("CUDA conv %s, --precision %s%s: %s", conv_name(d, name, sizeof name), ds_precision_name(g.precision),
               g.deterministic ? " --deterministic" : "", msg);
        return NULL;   /* the model stops before anything runs; the plan's few descriptors are not freed */
    }
    plan_report(d, p->choice, p->list, "planned");
    /* the ops run one at a time: the largest of their copies plus cuDNN workspace */
    *bytes = 0;
    for (int i = 0; i < DS_CONV_OPS; i++) {
        const ds_conv_choice *c = &p->choice[i];
        size_t need = c->needed ? layout(d, i, op_type(c->precision)).cudnn + c->memory : 0;
        if (need > *bytes) *bytes = need;
    }
    return p;
}

size_t ds_cuda_conv_workspace(const ds_conv_desc *d)
{
    ds_conv_plan *p = ds_conv_plans_exact(&plans, d, g.precision, g.deterministic);
    if (p) return p->bytes;
    size_t bytes = 0;
    conv_impl *impl = plan_make(d, &bytes);
    if (!impl) return SIZE_MAX;
    if (!ds_conv_plans_add(&plans, d, g.precision, g.deterministic, bytes, impl))
        ds_die("out of memory for convolution plans");
    return bytes;
}

/* The bytes of copies op i of d makes at each precision it could compute in. */
static ds_conv_budget op_budget(const ds_conv_desc *d, int i, size_t limit)
{
    ds_conv_budget b = {limit, {0}};
    for (int p = 0; p < DS_CONV_PRECISIONS; p++) b.copies[p] = layout(d, i, op_type(p)).cudnn;
    return b;
}

/* Chooses op i of slot s again, from its precision in the plan down: the first usable
 * algorithm of the slot's lists (cuDNN's heuristics at this size, asked when first needed)
 * whose copies and listed workspace fit the slot's limit, and then whose exact workspace at
 * this size fits too (one over it is ruled out, and the next one taken). Sets the op's math
 * type. -1 with msg when none is left. */
static int slot_choose(conv_impl *p, conv_slot *s, const ds_conv_desc *d, int i, char *msg, size_t len)
{
    const ds_conv_budget b = op_budget(d, i, s->limit);
    conv_query_ctx ctx = {p, s, 0};
    for (;;) {
        if (ds_conv_choose_op(d, (ds_conv_op)i, p->choice[i].precision, g.deterministic, &b, cudnn_query, &ctx,
                              &s->list[i], &s->choice[i], msg, len))
            return -1;
        const ds_conv_choice *c = &s->choice[i];
        cudnnCheck(cudnnSetConvolutionMathType(s->conv[i], cudnn_math(c->math)));
        size_t need = op_workspace(p, s, i), room = s->limit - b.copies[c->precision];
        if (need <= room) {
            s->cudnn_ws[i] = need;
            return 0;
        }
        char why[160];
        snprintf(why, sizeof why, "algo %d needs %zu bytes of workspace at this size, %zu listed", c->algo, need,
                 c->memory);
        if (ds_conv_list_rule_out(&s->list[i], c->precision, c->algo, why))
            ds_die("CUDA conv: algorithm id %d is beyond what a plan can rule out", c->algo);
    }
}

/* Sets up slot s of plan p (planned for `planned`) for d's n, h and w within `limit`
 * workspace bytes: descriptors for that size, and for each op the plan's algorithm when its
 * copies and workspace at this size fit, else another (slot_choose: a short batch or a
 * smaller input can change what an algorithm needs). A slot of the planned size keeps the
 * plan's answers for later choices. */
static void slot_set_up(conv_impl *p, conv_slot *s, const ds_conv_desc *d, const ds_conv_desc *planned,
                        size_t limit)
{
    char name[CONV_NAME];
    slot_describe(s, d);
    memcpy(s->choice, p->choice, sizeof s->choice);
    s->limit = limit;
    int same = d->n == planned->n && d->h == planned->h && d->w == planned->w;
    for (int i = 0; i < DS_CONV_OPS; i++) {
        s->ran[i] = 0;
        if (same) s->list[i] = p->list[i];
        else memset(&s->list[i], 0, sizeof s->list[i]);
    }
    slot_set_math(s);
    int changed = 0;
    for (int i = 0; i < DS_CONV_OPS; i++) {
        s->cudnn_ws[i] = 0;
        if (!s->choice[i].needed) continue;
        /* the op's copies at this size, then cuDNN's workspace in what is left */
        size_t lead = layout(d, i, op_type(s->choice[i].precision)).cudnn;
        size_t need = op_workspace(p, s, i);
        if (lead <= limit && need <= limit - lead) {
            s->cudnn_ws[i] = need;
            continue;
        }
        char msg[1024];
        if (slot_choose(p, s, d, i, msg, sizeof msg))
            ds_die("CUDA conv %s, --precision %s: within the %zu bytes planned: %s", conv_name(d, name, sizeof name),
                   ds_precision_name(g.precision), limit, msg);
        changed = 1;
    }
    if (changed) plan_report(d, s->choice, s->list, "at this size");
}

/* cuDNN's answer when an algorithm cannot run this call although it was listed (the
 * heuristics' guess was wrong for this configuration, or it refuses a setting such as beta
 * = 1): the next one may. */
static int runs_elsewhere(cudnnStatus_t st)
{
    int cat = CUDNN_STATUS_CATEGORY(st);
    return cat == CUDNN_STATUS_NOT_SUPPORTED || cat == CUDNN_STATUS_EXECUTION_FAILED || cat == CUDNN_STATUS_BAD_PARAM;
}

/* The plan and slot that run d (its n), set up on first use. */
typedef struct { conv_impl *p; conv_slot *s; } conv_run;

static conv_run plan_get(const ds_conv_desc *d)
{
    char why[160], name[CONV_NAME];
    size_t limit = 0;
    ds_conv_plan *plan = ds_conv_plans_lookup(&plans, d, g.precision, g.deterministic, &limit, why, sizeof why);
    if (!plan)   /* its workspace was never counted: running it could overrun the arena */
        ds_die("CUDA conv %s: %s", conv_name(d, name, sizeof name), why);
    int fresh = 0, k = ds_conv_plan_slot_for(&plans, plan, d, &fresh);
    conv_run run = {(conv_impl *)plan->impl, &((conv_impl *)plan->impl)->slot[k]};
    if (fresh) slot_set_up(run.p, run.s, d, &plan->d, limit);
    return run;
}

/* Issues op i of run r: issue() makes the op's copies for its choice of the moment and calls
 * cuDNN once. On the op's first run at the slot's size, an algorithm cuDNN will not run
 * (runs_elsewhere) is ruled out and the next usable one is issued, with a warning naming the
 * convolution, the op and both algorithms; issuing again computes what the first would have
 * (NOT_SUPPORTED and BAD_PARAM come before anything runs; EXECUTION_FAILED is a kernel that
 * could not launch, which writes nothing: only an algorithm of several kernels whose later
 * one failed could have added part of a result into an output it accumulates into, beta =
 * 1, and that is not undone). Stops the program when none is left, and on any failure once
 * the op has run at this size. */
template <typename Issue>
static void conv_issue(conv_run *r, const ds_conv_desc *d, int i, Issue issue)
{
    char name[CONV_NAME], msg[1024], last[512];
    for (;;) {
        cudnnStatus_t st = issue();
        if (st == CUDNN_STATUS_SUCCESS) {
            r->s->ran[i] = 1;
            return;
        }
        last[0] = 0;
        cudnnGetLastErrorString(last, sizeof last);
        const ds_conv_choice old = r->s->choice[i];
        const char *op = ds_conv_op_name((ds_conv_op)i);
        conv_name(d, name, sizeof name);
        if (r->s->ran[i] || !runs_elsewhere(st))
            ds_die("CUDA conv %s: %s algo %d (%s): %s%s%s", name, op, old.algo,
                   ds_precision_name((ds_precision)old.precision), cudnnGetErrorString(st), last[0] ? ": " : "", last);
        /* a launch that failed inside cuDNN leaves its error for the next launch's check:
         * cleared here; a fault of the context itself (every later call fails) is not the
         * algorithm's, and stops here with both messages */
        cudaError_t e = cudaGetLastError(), q = cudaStreamQuery(g.stream);
        if (q != cudaSuccess && q != cudaErrorNotReady)
            ds_die("CUDA conv %s: %s algo %d failed when run (%s%s%s), and the device then: %s", name, op, old.algo,
                   cudnnGetErrorString(st), e != cudaSuccess ? ", " : "", e != cudaSuccess ? cudaGetErrorString(e) : "",
                   cudaGetErrorString(q));
        char why[160];
        snprintf(why, sizeof why, "algo %d failed when run: %s", old.algo, cudnnGetErrorString(st));
        if (ds_conv_list_rule_out(&r->s->list[i], old.precision, old.algo, why))
            ds_die("CUDA conv %s: %s algo %d failed when run (%s), an id beyond what a plan can rule out", name, op,
                   old.algo, cudnnGetErrorString(st));
        if (slot_choose(r->p, r->s, d, i, msg, sizeof msg))
            ds_die("CUDA conv %s, --precision %s%s: %s algo %d (%s) failed when run (%s%s%s), and no other is left "
                   "within the %zu bytes planned: %s",
                   name, ds_precision_name(g.precision), g.deterministic ? " --deterministic" : "", op, old.algo,
                   ds_precision_name((ds_precision)old.precision), cudnnGetErrorString(st), last[0] ? ": " : "",
                   last, r->s->limit, msg);
        const ds_conv_choice *now = &r->s->choice[i];
        ds_warn("CUDA conv %s: %s algo %d (%s, %s math) failed when run (%s%s%s); running algo %d (%s, %s math) "
                "instead",
                name, op, old.algo, ds_precision_name((ds_precision)old.precision), ds_conv_math_name(old.math),
                cudnnGetErrorString(st), last[0] ? ": " : "", last, now->algo,
                ds_precision_name((ds_precision)now->precision), ds_conv_math_name(now->math));
    }
}

/* One op of a run: its algorithm, the type it computes in, the descriptor index of that
 * type, and its workspace layout for the batch actually run. */
typedef struct {
    const ds_conv_choice *c;
    ds_dtype ct;
    int t;
    conv_layout l;
    char *ws;
} conv_op_run;

static conv_op_run op_run(const conv_run *r, const ds_conv_desc *d, int op, void *ws)
{
    const ds_conv_choice *c = &r->s->choice[op];
    ds_dtype ct = op_type(c->precision);
    conv_op_run o = {c, ct, type_index(c->precision), layout(d, op, ct), (char *)ws};
    return o;
}

/* dst (n elements of type `to`) = src (the other type), rounded to nearest even into bf16 */
static void cast(void *dst, ds_dtype to, const void *src, size_t n)
{
    if (to == DS_BF16) ds_cuda_to_bf16(dst, (const float *)src, n);
    else ds_cuda_from_bf16((float *)dst, src, n, 0);
}

/* What cuDNN reads for an input of n elements: x where it is, or its copy at `at`, made now. */
static const void *read_as(const conv_op_run *o, const void *x, size_t at, size_t n)
{
    if (at == NO_COPY) return x;
    cast(o->ws + at, o->ct, x, n);
    return o->ws + at;
}

/* Where cuDNN writes an output: y itself, or its copy at `at` (cast back by write_back). */
static void *write_to(const conv_op_run *o, void *y, size_t at) { return at == NO_COPY ? y : o->ws + at; }

static void write_back(const conv_op_run *o, void *y, ds_dtype y_t, size_t at, size_t n)
{
    if (at != NO_COPY) cast(y, y_t, o->ws + at, n);
}

/* The two backward ops of a convolution take the same dout, and the model calls one right
 * after the other (conv_bwd_weight, then conv_bwd_data) with the same workspace. When both
 * compute in a type dout is not stored in (float32 dout under bf16 arithmetic, or a bf16
 * dout under float32 arithmetic), the first copies dout to the start of the workspace and
 * leaves a note; the second, seeing the same dout, convolution (types included), workspace
 * and type, skips the copy. The model's bf16 storage under bf16 arithmetic copies no dout,
 * and leaves no note. Every other call that could change the copy or dout (any other
 * convolution op, upload, zero, copy) drops the note, and it is used only once. */
static struct { const void *dout; void *ws; ds_conv_desc d; ds_dtype ct; } dout_copy;

void ds_cuda_dout_copy_drop(void) { dout_copy.dout = NULL; }

static const void *dout_read(const conv_op_run *o, const void *dout, const ds_conv_desc *d)
{
    if (o->l.out == NO_COPY) {
        ds_cuda_dout_copy_drop();
        return dout;
    }
    if (dout_copy.dout == dout && dout_copy.ws == o->ws && dout_copy.ct == o->ct &&
        !memcmp(&dout_copy.d, d, sizeof *d)) {
        ds_cuda_dout_copy_drop();
        return o->ws + o->l.out;
    }
    dout_copy.dout = dout, dout_copy.ws = o->ws, dout_copy.d = *d, dout_copy.ct = o->ct;
    return read_as(o, dout, o->l.out, n_out(d));
}

/* out [n,p,q,k] = conv(in [n,h,w,c], w [k,r,s,c]) */
void ds_cuda_conv_fwd(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws)
{
    conv_run r = plan_get(d);
    const float one = 1, zero = 0;
    ds_cuda_dout_copy_drop();
    conv_issue(&r, d, DS_CONV_FWD, [&]() {
        conv_op_run o = op_run(&r, d, DS_CONV_FWD, ws);
        const void *x = read_as(&o, in, o.l.in, n_in(d)), *k = read_as(&o, w, o.l.w, n_w(d));
        void *y = write_to(&o, out, o.l.out);
        cudnnStatus_t st = cudnnConvolutionForward(g.cudnn, &one, r.s->x[o.t], x, r.p->w[o.t], k,
                                                   r.s->conv[DS_CONV_FWD], (cudnnConvolutionFwdAlgo_t)o.c->algo,
                                                   o.ws + o.l.cudnn, r.s->cudnn_ws[DS_CONV_FWD], &zero, r.s->y[o.t], y);
        if (st == CUDNN_STATUS_SUCCESS) write_back(&o, out, d->out_t, o.l.out, n_out(d));
        return st;
    });
}

/* din [n,h,w,c] = conv_transpose(dout [n,p,q,k], w), or += with accumulate */
void ds_cuda_conv_bwd_data(void *din, const void *dout, const void *w, const ds_conv_desc *d, int accumulate,
                            void *ws)
{
    conv_run r = plan_get(d);
    char name[CONV_NAME];
    if (!r.s->choice[DS_CONV_BWD_DATA].needed)
        ds_die("CUDA conv %s: backward-data asked of a convolution planned without it (its input needs no "
               "gradient)", conv_name(d, name, sizeof name));
    const float one = 1, zero = 0;
    conv_issue(&r, d, DS_CONV_BWD_DATA, [&]() {
        conv_op_run o = op_run(&r, d, DS_CONV_BWD_DATA, ws);
        const void *dy = dout_read(&o, dout, d), *k = read_as(&o, w, o.l.w, n_w(d));
        void *dx = write_to(&o, din, o.l.in);
        /* din stored in the type cuDNN computes in: beta = 1 adds the result to it in cuDNN's
         * own epilogue, with no pass of ours over din */
        const float *beta = accumulate && o.l.in == NO_COPY ? &one : &zero;
        cudnnStatus_t st = cudnnConvolutionBackwardData(
            g.cudnn, &one, r.p->w[o.t], k, r.s->y[o.t], dy, r.s->conv[DS_CONV_BWD_DATA],
            (cudnnConvolutionBwdDataAlgo_t)o.c->algo, o.ws + o.l.cudnn, r.s->cudnn_ws[DS_CONV_BWD_DATA], beta,
            r.s->x[o.t], dx);
        if (st != CUDNN_STATUS_SUCCESS) return st;
        if (!accumulate || o.l.in == NO_COPY) {
            write_back(&o, din, d->in_t, o.l.in, n_in(d));
        } else if (d->in_t == DS_F32) {
            /* computed in the other type: the result rounded to din's storage, then added; a
             * bf16 result widens exactly, so it is added in one pass */
            ds_cuda_from_bf16((float *)din, o.ws + o.l.in, n_in(d), 1);
        } else {
            cast(o.ws + o.l.sum, DS_BF16, o.ws + o.l.in, n_in(d));
            ds_cuda_add(din, o.ws + o.l.sum, n_in(d), DS_BF16);
        }
        return st;
    });
}

/* dw [k,r,s,c] (float32) += correlation(in, dout) */
void ds_cuda_conv_bwd_weight(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws)
{
    conv_run r = plan_get(d);
    const float one = 1, zero = 0;
    conv_issue(&r, d, DS_CONV_BWD_FILTER, [&]() {
        conv_op_run o = op_run(&r, d, DS_CONV_BWD_FILTER, ws);
        const cudnnConvolutionBwdFilterAlgo_t algo = (cudnnConvolutionBwdFilterAlgo_t)o.c->algo;
        const void *dy = dout_read(&o, dout, d), *x = read_as(&o, in, o.l.in, n_in(d));
        if (o.l.w == NO_COPY && !g.deterministic)   /* float32 arithmetic: beta = 1 accumulates */
            return cudnnConvolutionBackwardFilter(g.cudnn, &one, r.s->x[o.t], x, r.s->y[o.t], dy,
                                                  r.s->conv[DS_CONV_BWD_FILTER], algo, o.ws + o.l.cudnn,
                                                  r.s->cudnn_ws[DS_CONV_BWD_FILTER], &one, r.p->w[o.t], dw);
        if (o.l.w == NO_COPY) {   /* --deterministic: this micro-batch's gradient, then added (grad_tmp) */
            float *tmp = ds_cuda_grad_tmp(n_w(d));
            cudnnStatus_t st = cudnnConvolutionBackwardFilter(g.cudnn, &one, r.s->x[o.t], x, r.s->y[o.t], dy,
                                                              r.s->conv[DS_CONV_BWD_FILTER], algo, o.ws + o.l.cudnn,
                                                              r.s->cudnn_ws[DS_CONV_BWD_FILTER], &zero, r.p->w[o.t],
                                                              tmp);
            if (st == CUDNN_STATUS_SUCCESS) ds_cuda_add(dw, tmp, n_w(d), DS_F32);
            return st;
        }
        /* bf16: this micro-batch's gradient in bf16, added to the float32 gradient (autocast's rule) */
        cudnnStatus_t st = cudnnConvolutionBackwardFilter(g.cudnn, &one, r.s->x[o.t], x, r.s->y[o.t], dy,
                                                          r.s->conv[DS_CONV_BWD_FILTER], algo, o.ws + o.l.cudnn,
                                                          r.s->cudnn_ws[DS_CONV_BWD_FILTER], &zero, r.p->w[o.t],
                                                          o.ws + o.l.w);
        if (st == CUDNN_STATUS_SUCCESS) ds_cuda_from_bf16(dw, o.ws + o.l.w, n_w(d), 1);
        return st;
    });
}
