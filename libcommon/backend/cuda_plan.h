/* cuda_plan: the CUDA backend's bookkeeping of convolution plans, in plain C so that a CPU
 * test can check it (the cuDNN side lives in cuda_conv.cu).
 *
 * The model plans each convolution once, for its largest batch and input (conv_workspace
 * with d.n = max_batch at the planned height and width), and then runs it with any n from 1
 * to that batch (the last batch of an evaluation is usually short) and any smaller input
 * (ds_model_set_input_size: progressive resizing, evaluation at another crop). A plan
 * therefore serves every run of the same layer (channels, window, stride, padding, storage
 * types) with n, h and w no larger than its own. For each (n, h, w) actually run the backend
 * sets up a "slot" (tensor descriptors for that size, and algorithms whose workspace fits);
 * a few slots are kept per plan, the least recently used one is reused.
 *
 * Workspace: conv_workspace returned `bytes` for each plan, and every arena planned with
 * that plan holds at least that much. Several models in one process may plan the same shape
 * with different batches, and a run at n may come from any of them, so a run at n may use
 * at most the smallest `bytes` of the plans of its layer that cover it (the lookup's limit).
 * Adding a plan can lower that limit: it empties the slots of its layer, which are then set
 * up (and checked) again.
 *
 * Choosing algorithms (ds_conv_choose): for each op a convolution needs (backward-data not
 * for the network's input, d.no_dx), the first algorithm cuDNN lists that is usable: it
 * succeeded, fits the workspace budget, is deterministic when the run must be, under fp32
 * runs plain FMA math (any other math type would compute in TF32), and under tf32 does not
 * allow conversion (CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION may compute float32 tensors in
 * fp16, with fp16's range). When the run's precision has none for an op, that op alone
 * falls back to the next precision down (bf16, then tf32, then fp32) and the plan says so;
 * only an op with no usable algorithm at any precision makes planning fail, with a message
 * naming the op and, per precision, what cuDNN answered. The cuDNN calls are the backend's
 * (a query function); a test gives made-up answers.
 *
 * The answers are kept (ds_conv_list), so a later choice for the same op and size asks
 * nothing again: an algorithm the backend rules out after the answer (one that fails when
 * it runs, or whose exact workspace at this size is more than listed) is marked, and the
 * choice made again takes the next usable one, falling back in precision as above. A
 * budget counts, per precision, the copies the op makes in that precision's types ahead of
 * cuDNN's workspace, so a fallback to a precision with larger copies is taken only where
 * they fit. */
#ifndef DS_CUDA_PLAN_H
#define DS_CUDA_PLAN_H

#include <stddef.h>

#include "backend.h"

/* Sizes kept set up per plan: the planned one, an evaluation's last batch, this epoch's
 * training crop, the validation crop ... */
#define DS_CONV_PLAN_SLOTS 4

typedef struct {
    ds_conv_desc d;              /* the shape planned; d.n, d.h, d.w the largest it serves */
    int precision, deterministic;
    size_t bytes;                /* what conv_workspace returned for it */
    int slot_n[DS_CONV_PLAN_SLOTS];            /* batch size each slot is set up for; 0: empty */
    int slot_h[DS_CONV_PLAN_SLOTS], slot_w[DS_CONV_PLAN_SLOTS];   /* and its input size */
    unsigned long slot_used[DS_CONV_PLAN_SLOTS];
    void *impl;                  /* the backend's descriptors and algorithms */
} ds_conv_plan;

typedef struct {
    ds_conv_plan **v;
    int count, cap;
    unsigned long clock;         /* counts slot uses, for least-recently-used reuse */
} ds_conv_plans;

/* 1 when a and b are the same convolution apart from the batch size n. */
int ds_conv_same_shape(const ds_conv_desc *a, const ds_conv_desc *b);
/* 1 when a and b are the same layer (c, k, r, s, stride, pad, no_dx, and the storage types,
 * which decide the copies in the workspace) at any batch and input size. */
int ds_conv_same_layer(const ds_conv_desc *a, const ds_conv_desc *b);

/* The plan made for exactly d (n included) with this precision and determinism, or NULL:
 * conv_workspace asks this before it makes a plan. */
ds_conv_plan *ds_conv_plans_exact(const ds_conv_plans *t, const ds_conv_desc *d, int precision,
                                  int deterministic);

/* Adds the plan for d with its bytes and the backend's impl; empties the slots of the
 * plans of the same layer (their limit may have dropped). NULL when out of memory. */
ds_conv_plan *ds_conv_plans_add(ds_conv_plans *t, const ds_conv_desc *d, int precision, int deterministic,
                                size_t bytes, void *impl);

/* The plan that serves d: same layer, precision and determinism, planned n, h and w each
 * >= d's, the smallest such (by n x h x w). *limit = the workspace bytes a run of d may use
 * (see above). NULL when there is none, with why[] saying whether the layer was never
 * planned, or planned only for smaller batches or inputs. */
ds_conv_plan *ds_conv_plans_lookup(const ds_conv_plans *t, const ds_conv_desc *d, int precision,
                                   int deterministic, size_t *limit, char *why, size_t why_len);

/* The slot of p for d's batch and input size (which p serves): the one set up for it when
 * there is one (*fresh = 0), otherwise an empty or the least recently used slot, now marked
 * as d's (*fresh = 1: the backend sets it up before use). */
int ds_conv_plan_slot_for(ds_conv_plans *t, ds_conv_plan *p, const ds_conv_desc *d, int *fresh);
/* The same at the plan's own input size and batch n (1 <= n <= p->d.n). */
int ds_conv_plan_slot(ds_conv_plans *t, ds_conv_plan *p, int n, int *fresh);

/* Frees the bookkeeping (not the impls: the caller frees those first). */
void ds_conv_plans_free(ds_conv_plans *t);

/* ---- choosing algorithms ---- */

typedef enum { DS_CONV_FWD, DS_CONV_BWD_DATA, DS_CONV_BWD_FILTER, DS_CONV_OPS } ds_conv_op;
/* "forward", "backward-data", "backward-filter" */
const char *ds_conv_op_name(ds_conv_op op);

/* The math type an algorithm runs with, as cuDNN reports it. */
typedef enum { DS_MATH_DEFAULT, DS_MATH_TENSOR_OP, DS_MATH_TENSOR_OP_CONVERSION, DS_MATH_FMA } ds_conv_math;
/* "default", "tensor-op", "tensor-op-conversion", "fma" */
const char *ds_conv_math_name(ds_conv_math m);

/* One algorithm of cuDNN's answer (a cudnnConvolution*AlgoPerf_t), best first. */
typedef struct {
    int algo;
    int ok;                   /* its status was success */
    const char *status;       /* cuDNN's name for the status when not ok */
    int deterministic;
    ds_conv_math math;
    size_t memory;            /* workspace bytes */
} ds_conv_algo;

/* Lists op's algorithms for d at precision (a ds_precision): at most cap into out, best
 * first; returns how many, or -1 when the question itself failed (why[] says how). */
typedef int (*ds_conv_query)(void *ctx, const ds_conv_desc *d, ds_conv_op op, int precision, ds_conv_algo *out,
                             int cap, char *why, size_t why_len);

#define DS_CONV_PRECISIONS 3   /* fp32, tf32, bf16: the ds_precision values an op computes in */
#define DS_CONV_LIST 16        /* algorithms kept per precision: more than cuDNN has for any op */
#define DS_CONV_ALGO_IDS 32    /* algorithm ids a list can rule out (cuDNN's enums are below 10) */

/* One op's answers at one size, per precision, asked once each and only when needed (a
 * precision below the run's is asked only when the ones above have nothing usable). Zeroed:
 * nothing asked yet. */
typedef struct {
    int asked[DS_CONV_PRECISIONS];
    int n[DS_CONV_PRECISIONS];                 /* algorithms answered; -1: the question failed */
    ds_conv_algo algo[DS_CONV_PRECISIONS][DS_CONV_LIST];
    char why[DS_CONV_PRECISIONS][160];         /* the question's failure */
    unsigned ruled_out[DS_CONV_PRECISIONS];    /* bit a: algorithm a ruled out after the answer */
    char ruled_out_why[DS_CONV_PRECISIONS][160];   /* the first of those, why */
} ds_conv_list;

/* buf: l's answer at `precision`, in cuDNN's order ("1 (tensor-op, 0.0 MiB) 0 (tensor-op, not
 * deterministic, 2.0 MiB) 6 (CUDNN_STATUS_NOT_SUPPORTED)"), or that it was not asked or failed. */
void ds_conv_list_describe(const ds_conv_list *l, int precision, char *buf, size_t len);

/* Rules algorithm `algo` at `precision` out of l's later choices, for `why` ("failed when
 * run: CUDNN_STATUS_..."); -1 when algo is not an id a list can hold. */
int ds_conv_list_rule_out(ds_conv_list *l, int precision, int algo, const char *why);

/* What an op may use: its copies at precision p take copies[p] bytes (the tensors it makes
 * in p's types), then cuDNN's workspace; both within limit. A precision whose copies alone
 * exceed limit is passed over. */
typedef struct {
    size_t limit;
    size_t copies[DS_CONV_PRECISIONS];
} ds_conv_budget;

typedef struct {
    int needed;               /* 0: never run (backward-data of the network's input) */
    int precision;            /* what it computes in: the run's or, falling back, a lower one */
    int algo;
    ds_conv_math math;
    size_t memory;
} ds_conv_choice;

/* Chooses an algorithm for op at `precision` or below (see above) within budget b, from
 * list (asking q for the precisions it has not asked yet): 0 with *out set, or -1 with
 * msg[] naming the op and what was answered at each precision. */
int ds_conv_choose_op(const ds_conv_desc *d, ds_conv_op op, int precision, int deterministic,
                      const ds_conv_budget *b, ds_conv_query q, void *ctx, ds_conv_list *list, ds_conv_choice *out,
                      char *msg, size_t msg_len);
/* The same for every op d needs (choice[DS_CONV_BWD_DATA].needed = 0 with d->no_dx), each
 * with `budget` bytes of cuDNN workspace and its copies not counted (planning: the arena is
 * sized from the choice); lists[] are emptied first and keep the answers. */
int ds_conv_choose(const ds_conv_desc *d, int precision, int deterministic, size_t budget, ds_conv_query q,
                   void *ctx, ds_conv_list lists[DS_CONV_OPS], ds_conv_choice choice[DS_CONV_OPS], char *msg,
                   size_t msg_len);
/* "forward: algo 1, tensor-op, bf16, 12.5 MiB; backward-data: ...": for --verbose. */
void ds_conv_choice_describe(const ds_conv_choice choice[DS_CONV_OPS], char *buf, size_t len);

#endif
