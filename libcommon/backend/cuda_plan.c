/* cuda_plan: see cuda_plan.h. */
#include "cuda_plan.h"

#include <stdio.h>
#include <stdlib.h>

int ds_conv_same_shape(const ds_conv_desc *a, const ds_conv_desc *b)
{
    return a->h == b->h && a->w == b->w && a->c == b->c && a->k == b->k && a->r == b->r && a->s == b->s &&
           a->stride == b->stride && a->pad == b->pad && a->p == b->p && a->q == b->q;
}

int ds_conv_same_layer(const ds_conv_desc *a, const ds_conv_desc *b)
{
    return a->c == b->c && a->k == b->k && a->r == b->r && a->s == b->s && a->stride == b->stride &&
           a->pad == b->pad;
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
