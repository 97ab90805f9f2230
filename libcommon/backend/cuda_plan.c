/* cuda_plan: see cuda_plan.h. */
#include "cuda_plan.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ds_conv_same_shape(const ds_conv_desc *a, const ds_conv_desc *b)
{
    return ds_conv_same_layer(a, b) && a->h == b->h && a->w == b->w && a->p == b->p && a->q == b->q;
}

int ds_conv_same_layer(const ds_conv_desc *a, const ds_conv_desc *b)
{
    return a->c == b->c && a->k == b->k && a->r == b->r && a->s == b->s && a->stride == b->stride &&
           a->pad == b->pad && a->no_dx == b->no_dx && a->in_t == b->in_t && a->out_t == b->out_t &&
           a->w_t == b->w_t;
}

static int same_kind(const ds_conv_plan *p, const ds_conv_desc *d, int precision, int deterministic)
{
    return p->precision == precision && p->deterministic == deterministic && ds_conv_same_shape(&p->d, d);
}

static int same_layer_kind(const ds_conv_plan *p, const ds_conv_desc *d, int precision, int deterministic)
{
    return p->precision == precision && p->deterministic == deterministic && ds_conv_same_layer(&p->d, d);
}

/* A plan covers d when d is no larger in batch, height and width (so in p and q too). */
static int covers(const ds_conv_plan *p, const ds_conv_desc *d)
{
    return d->n <= p->d.n && d->h <= p->d.h && d->w <= p->d.w;
}

static double volume(const ds_conv_desc *d) { return (double)d->n * d->h * d->w; }

ds_conv_plan *ds_conv_plans_exact(const ds_conv_plans *t, const ds_conv_desc *d, int precision,
                                  int deterministic)
{
    for (int i = 0; i < t->count; i++)
        if (same_kind(t->v[i], d, precision, deterministic) && t->v[i]->d.n == d->n) return t->v[i];
    return NULL;
}

ds_conv_plan *ds_conv_plans_add(ds_conv_plans *t, const ds_conv_desc *d, int precision, int deterministic,
                                size_t bytes, void *impl)
{
    if (t->count == t->cap) {
        int cap = t->cap ? 2 * t->cap : 32;
        ds_conv_plan **v = realloc(t->v, (size_t)cap * sizeof *v);
        if (!v) return NULL;
        t->v = v, t->cap = cap;
    }
    ds_conv_plan *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    for (int i = 0; i < t->count; i++)
        if (same_layer_kind(t->v[i], d, precision, deterministic))
            for (int s = 0; s < DS_CONV_PLAN_SLOTS; s++) t->v[i]->slot_n[s] = 0;
    p->d = *d;
    p->precision = precision;
    p->deterministic = deterministic;
    p->bytes = bytes;
    p->impl = impl;
    t->v[t->count++] = p;
    return p;
}

ds_conv_plan *ds_conv_plans_lookup(const ds_conv_plans *t, const ds_conv_desc *d, int precision,
                                   int deterministic, size_t *limit, char *why, size_t why_len)
{
    ds_conv_plan *best = NULL;
    int largest = 0, layer = 0, max_h = 0, max_w = 0;
    size_t lim = 0;
    for (int i = 0; i < t->count; i++) {
        ds_conv_plan *p = t->v[i];
        if (!same_layer_kind(p, d, precision, deterministic)) continue;
        layer = 1;
        if (p->d.h > max_h) max_h = p->d.h;
        if (p->d.w > max_w) max_w = p->d.w;
        if (p->d.h >= d->h && p->d.w >= d->w && p->d.n > largest) largest = p->d.n;
        if (!covers(p, d)) continue;
        if (!best || volume(&p->d) < volume(&best->d)) best = p;
        if (!lim || p->bytes < lim) lim = p->bytes;
    }
    if (best) {
        *limit = lim;
        return best;
    }
    if (largest)
        snprintf(why, why_len, "planned for batches of at most %d, run with %d", largest, d->n);
    else if (layer)
        snprintf(why, why_len, "planned for inputs up to %dx%d, run at %dx%d", max_h, max_w, d->h, d->w);
    else
        snprintf(why, why_len, "never planned with conv_workspace (or the precision changed after planning)");
    return NULL;
}

int ds_conv_plan_slot_for(ds_conv_plans *t, ds_conv_plan *p, const ds_conv_desc *d, int *fresh)
{
    int pick = 0;
    t->clock++;
    for (int s = 0; s < DS_CONV_PLAN_SLOTS; s++)
        if (p->slot_n[s] == d->n && p->slot_h[s] == d->h && p->slot_w[s] == d->w) {
            p->slot_used[s] = t->clock;
            *fresh = 0;
            return s;
        }
    for (int s = 1; s < DS_CONV_PLAN_SLOTS && p->slot_n[pick]; s++)   /* an empty slot, else the oldest */
        if (!p->slot_n[s] || p->slot_used[s] < p->slot_used[pick]) pick = s;
    p->slot_n[pick] = d->n;
    p->slot_h[pick] = d->h;
    p->slot_w[pick] = d->w;
    p->slot_used[pick] = t->clock;
    *fresh = 1;
    return pick;
}

int ds_conv_plan_slot(ds_conv_plans *t, ds_conv_plan *p, int n, int *fresh)
{
    ds_conv_desc d = p->d;
    d.n = n;
    return ds_conv_plan_slot_for(t, p, &d, fresh);
}

void ds_conv_plans_free(ds_conv_plans *t)
{
    for (int i = 0; i < t->count; i++) free(t->v[i]);
    free(t->v);
    t->v = NULL;
    t->count = t->cap = 0;
}

/* ---- choosing algorithms ---- */

const char *ds_conv_op_name(ds_conv_op op)
{
    static const char *const names[DS_CONV_OPS] = {"forward", "backward-data", "backward-filter"};
    return op >= 0 && op < DS_CONV_OPS ? names[op] : "?";
}

const char *ds_conv_math_name(ds_conv_math m)
{
    static const char *const names[] = {"default", "tensor-op", "tensor-op-conversion", "fma"};
    return m >= DS_MATH_DEFAULT && m <= DS_MATH_FMA ? names[m] : "?";
}

/* Appends printf-style text to buf[len] at *at, never past its end. */
static void add(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
    if (*at + 1 >= len) return;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    if (k > 0) *at = *at + (size_t)k < len ? *at + (size_t)k : len - 1;
}

int ds_conv_list_rule_out(ds_conv_list *l, int precision, int algo, const char *why)
{
    if (precision < 0 || precision >= DS_CONV_PRECISIONS || algo < 0 || algo >= DS_CONV_ALGO_IDS) return -1;
    if (!l->ruled_out[precision]) snprintf(l->ruled_out_why[precision], sizeof l->ruled_out_why[precision], "%s", why);
    l->ruled_out[precision] |= 1u << algo;
    return 0;
}

/* Why an algorithm is not usable, in the order they are checked (and counted in messages). */
static const char *const reasons[] = {"failed", "ruled out after the answer", "over the workspace budget",
                                      "not deterministic", "not plain FMA math", "may compute in fp16",
                                      "adds into its bf16 result (not deterministic)"};

/* Why algorithm i of l's answer for op at precision p is not usable (NULL: it is), with
 * `room` bytes left for cuDNN's workspace. fp32 means FMA math only. tf32 refuses the math
 * that allows conversion, which may compute its float32 tensors in fp16 (range 65504); bf16's
 * tensors are bf16 already, and its tensor-op math is what it asks for. A bf16 weight
 * gradient comes only from a deterministic algorithm: the others add their partial sums into
 * the result with atomics, which for a bf16 result rounds to 8 bits at every addition (the
 * first GPU run saw 2 of 2,304 weights of a 64x8x8x16 3x3 layer off by 5%: a sum of 64
 * per-image parts, each added in bf16), where the deterministic ones sum in float32 and round
 * once. */
static const char *unusable(const ds_conv_list *l, ds_conv_op op, int p, int i, int deterministic, size_t room)
{
    const ds_conv_algo *a = &l->algo[p][i];
    if (!a->ok) return reasons[0];
    if (a->algo >= 0 && a->algo < DS_CONV_ALGO_IDS && (l->ruled_out[p] >> a->algo & 1)) return reasons[1];
    if (a->memory > room) return reasons[2];
    if (deterministic && !a->deterministic) return reasons[3];
    if (p == DS_PRECISION_FP32 && a->math != DS_MATH_FMA) return reasons[4];
    if (p == DS_PRECISION_TF32 && a->math == DS_MATH_TENSOR_OP_CONVERSION) return reasons[5];
    if (p == DS_PRECISION_BF16 && op == DS_CONV_BWD_FILTER && !a->deterministic) return reasons[6];
    return NULL;
}

/* msg: what was answered at each precision from `precision` down, counted by reason, with
 * the first failure's status and the first ruling out's reason. */
static void describe_none(const ds_conv_list *l, ds_conv_op op, int precision, int deterministic,
                          const ds_conv_budget *b, char *msg, size_t msg_len)
{
    size_t at = 0;
    add(msg, msg_len, &at, "no usable %s algorithm%s (cuDNN answered:", ds_conv_op_name(op),
        deterministic ? " that is deterministic" : "");
    for (int p = precision; p >= 0; p--) {
        add(msg, msg_len, &at, "%s %s: ", p == precision ? "" : ";", ds_precision_name((ds_precision)p));
        if (b->copies[p] > b->limit) {
            add(msg, msg_len, &at, "not asked, its copies take %zu bytes of the %zu planned", b->copies[p], b->limit);
            continue;
        }
        int n = l->n[p];
        if (n < 0) {
            add(msg, msg_len, &at, "the query failed: %s", l->why[p]);
            continue;
        }
        add(msg, msg_len, &at, "%d algorithm%s", n, n == 1 ? "" : "s");
        for (size_t r = 0; r < sizeof reasons / sizeof reasons[0]; r++) {
            int count = 0;
            const char *status = NULL;
            for (int i = 0; i < n; i++)
                if (unusable(l, op, p, i, deterministic, b->limit - b->copies[p]) == reasons[r]) {
                    count++;
                    if (!status) status = l->algo[p][i].status;
                }
            if (r == 1) status = l->ruled_out_why[p];
            else if (r != 0) status = NULL;
            if (count)
                add(msg, msg_len, &at, ", %d %s%s%s%s", count, reasons[r], status ? " (" : "", status ? status : "",
                    status ? ")" : "");
        }
    }
    add(msg, msg_len, &at, ")");
}

int ds_conv_choose_op(const ds_conv_desc *d, ds_conv_op op, int precision, int deterministic,
                      const ds_conv_budget *b, ds_conv_query q, void *ctx, ds_conv_list *l, ds_conv_choice *out,
                      char *msg, size_t msg_len)
{
    for (int p = precision; p >= 0; p--) {
        if (b->copies[p] > b->limit) continue;   /* its copies alone do not fit: never asked */
        if (!l->asked[p]) {
            l->why[p][0] = 0;
            int n = q(ctx, d, op, p, l->algo[p], DS_CONV_LIST, l->why[p], sizeof l->why[p]);
            l->n[p] = n > DS_CONV_LIST ? DS_CONV_LIST : n < 0 ? -1 : n;
            l->asked[p] = 1;
        }
        for (int i = 0; i < l->n[p]; i++)
            if (!unusable(l, op, p, i, deterministic, b->limit - b->copies[p])) {
                const ds_conv_algo *a = &l->algo[p][i];
                *out = (ds_conv_choice){.needed = 1, .precision = p, .algo = a->algo, .math = a->math,
                                        .memory = a->memory};
                return 0;
            }
    }
    describe_none(l, op, precision, deterministic, b, msg, msg_len);
    return -1;
}

int ds_conv_choose(const ds_conv_desc *d, int precision, int deterministic, size_t budget, ds_conv_query q,
                   void *ctx, ds_conv_list lists[DS_CONV_OPS], ds_conv_choice choice[DS_CONV_OPS], char *msg,
                   size_t msg_len)
{
    const ds_conv_budget b = {.limit = budget};
    for (int op = 0; op < DS_CONV_OPS; op++) {
        choice[op] = (ds_conv_choice){0};
        memset(&lists[op], 0, sizeof lists[op]);
        if (op == DS_CONV_BWD_DATA && d->no_dx) continue;
        if (ds_conv_choose_op(d, (ds_conv_op)op, precision, deterministic, &b, q, ctx, &lists[op], &choice[op], msg,
                              msg_len))
            return -1;
    }
    return 0;
}

void ds_conv_list_describe(const ds_conv_list *l, int precision, char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    if (!l->asked[precision]) {
        add(buf, len, &at, "not asked");
        return;
    }
    if (l->n[precision] < 0) {
        add(buf, len, &at, "the query failed: %s", l->why[precision]);
        return;
    }
    for (int i = 0; i < l->n[precision]; i++) {
        const ds_conv_algo *a = &l->algo[precision][i];
        add(buf, len, &at, "%s%d", i ? " " : "", a->algo);
        if (!a->ok) add(buf, len, &at, " (%s)", a->status);
        else
            add(buf, len, &at, " (%s%s, %.1f MiB)", ds_conv_math_name(a->math),
                a->deterministic ? "" : ", not deterministic", a->memory / 1048576.0);
    }
}

void ds_conv_choice_describe(const ds_conv_choice choice[DS_CONV_OPS], char *buf, size_t len)
{
    size_t at = 0;
    buf[0] = 0;
    for (int op = 0; op < DS_CONV_OPS; op++) {
        const ds_conv_choice *c = &choice[op];
        if (!c->needed)
            add(buf, len, &at, "%s%s: not planned (never run)", op ? "; " : "", ds_conv_op_name((ds_conv_op)op));
        else
            add(buf, len, &at, "%s%s: algo %d, %s, %s, %.1f MiB", op ? "; " : "", ds_conv_op_name((ds_conv_op)op),
                c->algo, ds_conv_math_name(c->math), ds_precision_name((ds_precision)c->precision),
                c->memory / 1048576.0);
    }
}
