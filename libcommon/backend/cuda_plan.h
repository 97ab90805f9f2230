/* cuda_plan: the CUDA backend's bookkeeping of convolution plans, in plain C so that a CPU
 * test can check it (the cuDNN side lives in cuda.cu).
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
 * succeeded, fits the workspace budget, is deterministic when the run must be, and under
 * fp32 runs plain FMA math (any other math type would compute in TF32). When the run's
 * precision has none for an op, that op alone falls back to the next precision down (bf16,
 * then tf32, then fp32) and the plan says so; only an op with no usable algorithm at any
 * precision makes planning fail, with a message naming the op and, per precision, what cuDNN
 * answered. The cuDNN calls are the backend's (a query function); a test gives made-up
 * answers. */
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

typedef struct {
    int needed;               /* 0: never run (backward-data of the network's input) */
    int precision;            /* what it computes in: the run's or, falling back, a lower one */
    int algo;
    ds_conv_math math;
    size_t memory;
} ds_conv_choice;

/* Chooses an algorithm for op at `precision` or below (see above) within `budget` bytes:
 * 0 with *out set, or -1 with msg[] naming the op and what was answered at each precision. */
int ds_conv_choose_op(const ds_conv_desc *d, ds_conv_op op, int precision, int deterministic, size_t budget,
                      ds_conv_query q, void *ctx, ds_conv_choice *out, char *msg, size_t msg_len);
/* The same for every op d needs (choice[DS_CONV_BWD_DATA].needed = 0 with d->no_dx). */
int ds_conv_choose(const ds_conv_desc *d, int precision, int deterministic, size_t budget, ds_conv_query q,
                   void *ctx, ds_conv_choice choice[DS_CONV_OPS], char *msg, size_t msg_len);
/* "forward: algo 1, tensor-op, bf16, 12.5 MiB; backward-data: ...": for --verbose. */
void ds_conv_choice_describe(const ds_conv_choice choice[DS_CONV_OPS], char *buf, size_t len);

#endif
