/* The CPU backend's ops against plain double-precision loops, and every backward against
 * central finite differences of those loops in double precision.
 *
 * Tolerances: the ops run in fp32 and the references in double, so a sum of T terms of
 * size ~1 may be off by about 1e-7 * T in the worst case; the atol/rtol of each check are a
 * few times that. Finite differences in double with step 1e-5 are accurate to ~1e-9 on
 * these smooth (or piecewise linear, away from kinks) functions. */
#include "../check.h"
#include "backend.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_conv.h"
#include "backend/cpu_kernels.h"
#include "rng.h"
#include "backend/cpu_sgemm.h"
#include "ops_cases.h"

#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <string.h>

static const ds_backend *be = &ds_backend_cpu;
static ds_rng rng;

static float *randn(size_t n, double scale)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    for (size_t i = 0; i < n; i++) x[i] = (float)(ds_rng_normal(&rng) * scale);
    return x;
}

static double *dup_d(const float *x, size_t n)
{
    double *y = malloc((n ? n : 1) * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = x[i];
    return y;
}

static float *dup_f(const float *x, size_t n)
{
    float *y = malloc((n ? n : 1) * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* grad[i] = dL/dx[i] by central differences; x is restored. */
static void fd_grad(double *grad, double *x, size_t n, double (*loss)(void *), void *ctx)
{
    const double h = 1e-5;
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        x[i] = v + h;
        double lp = loss(ctx);
        x[i] = v - h;
        double lm = loss(ctx);
        x[i] = v;
        grad[i] = (lp - lm) / (2 * h);
    }
}

/* ---------------------------------------------------------------- convolution */

static void ref_conv(double *out, const double *in, const double *w, const ds_conv_desc *d)
{
    for (int n = 0; n < d->n; n++)
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++)
                for (int k = 0; k < d->k; k++) {
                    double s = 0;
                    for (int r = 0; r < d->r; r++)
                        for (int t = 0; t < d->s; t++) {
                            int y = p * d->stride - d->pad + r, x = q * d->stride - d->pad + t;
                            if (y < 0 || y >= d->h || x < 0 || x >= d->w) continue;
                            for (int c = 0; c < d->c; c++)
                                s += in[(((long)n * d->h + y) * d->w + x) * d->c + c] *
                                     w[(((long)k * d->r + r) * d->s + t) * d->c + c];
                        }
                    out[(((long)n * d->p + p) * d->q + q) * d->k + k] = s;
                }
}

/* The adjoints of ref_conv, written out as loops (for shapes too big for differences). */
static void ref_conv_bwd(double *din, double *dw, const double *dout, const double *in,
                         const double *w, const ds_conv_desc *d)
{
    memset(din, 0, sizeof(double) * d->n * d->h * d->w * d->c);
    memset(dw, 0, sizeof(double) * d->k * d->r * d->s * d->c);
    for (int n = 0; n < d->n; n++)
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++)
                for (int k = 0; k < d->k; k++) {
                    double g = dout[(((long)n * d->p + p) * d->q + q) * d->k + k];
                    for (int r = 0; r < d->r; r++)
                        for (int t = 0; t < d->s; t++) {
                            int y = p * d->stride - d->pad + r, x = q * d->stride - d->pad + t;
                            if (y < 0 || y >= d->h || x < 0 || x >= d->w) continue;
                            long i = (((long)n * d->h + y) * d->w + x) * d->c;
                            long j = (((long)k * d->r + r) * d->s + t) * d->c;
                            for (int c = 0; c < d->c; c++) {
                                din[i + c] += g * w[j + c];
                                dw[j + c] += g * in[i + c];
                            }
                        }
                }
}

typedef struct {
    const ds_conv_desc *d;
    double *in, *w, *g, *tmp;
} conv_ctx;

static double conv_loss(void *p)
{
    conv_ctx *c = p;
    const ds_conv_desc *d = c->d;
    size_t no = (size_t)d->n * d->p * d->q * d->k;
    ref_conv(c->tmp, c->in, c->w, d);
    double l = 0;
    for (size_t i = 0; i < no; i++) l += c->g[i] * c->tmp[i];
    return l;
}

/* Runs the three conv ops on random data; compares with the double loops, and with finite
 * differences when fd is set. */
static void test_conv(ds_conv_desc d, int fd)
{
    char name[160];
    snprintf(name, sizeof name, "conv n%d %dx%dx%d -> k%d %dx%d/%d pad %d%s", d.n, d.h, d.w, d.c,
             d.k, d.r, d.s, d.stride, d.pad, fd ? " (finite differences)" : "");
    check_begin(name);
    size_t ni = (size_t)d.n * d.h * d.w * d.c, nw = (size_t)d.k * d.r * d.s * d.c,
           no = (size_t)d.n * d.p * d.q * d.k;
    float *in = randn(ni, 1), *w = randn(nw, 1 / sqrt(d.r * d.s * d.c)), *g = randn(no, 1);
    float *out = malloc(no * sizeof *out), *din = malloc(ni * sizeof *din);
    float *dw0 = randn(nw, 1), *dw = dup_f(dw0, nw);
    void *ws = be->alloc(be->conv_workspace(&d));
    CHECK(ws != NULL, "workspace allocation");

    be->conv_fwd(out, in, w, &d, ws);
    be->conv_bwd_data(din, g, w, &d, 0, ws);
    be->conv_bwd_weight(dw, g, in, &d, ws);

    double *ind = dup_d(in, ni), *wd = dup_d(w, nw), *gd = dup_d(g, no);
    double *outd = malloc(no * sizeof *outd), *dind = malloc(ni * sizeof *dind),
           *dwd = malloc(nw * sizeof *dwd), *got = malloc(nw * sizeof *got);
    ref_conv(outd, ind, wd, &d);
    double *outg = dup_d(out, no);
    check_close_d("forward", outg, outd, no, 1e-5 * sqrt(d.r * d.s * d.c), 1e-4);
    if (fd) {
        conv_ctx c = {&d, ind, wd, gd, outd};
        fd_grad(dind, ind, ni, conv_loss, &c);
        fd_grad(dwd, wd, nw, conv_loss, &c);
    } else {
        ref_conv_bwd(dind, dwd, gd, ind, wd, &d);
    }
    double *ding = dup_d(din, ni);
    check_close_d("backward data", ding, dind, ni, 1e-5 * sqrt(d.k * d.r * d.s) + 1e-6, 1e-4);
    // The op accumulates: compare what it added.
    for (size_t i = 0; i < nw; i++) got[i] = (double)dw[i] - dw0[i];
    check_close_d("backward weight (+=)", got, dwd, nw, 2e-6 * sqrt((double)d.n * d.p * d.q) + 1e-5, 1e-4);

    be->free(ws);
    free(in), free(w), free(g), free(out), free(din), free(dw0), free(dw);
    free(ind), free(wd), free(gd), free(outd), free(dind), free(dwd), free(got), free(outg), free(ding);
    check_end();
}

/* ---- convolution under --precision bf16 ---- */

/* x rounded to bf16, as doubles; |x| when take_abs. */
static double *rounded_d(const float *x, size_t n, int take_abs)
{
    double *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++) {
        r[i] = ds_bf16_value(ds_bf16_round(x[i]));
        if (take_abs) r[i] = fabs(r[i]);
    }
    return r;
}

/* got against two truths: `exact`, the double sums of the bf16-rounded operands, within
 * float32 summation error (kd terms, magnitude `mag`: the same sums of |operands|), which
 * only the rule's float32 sums can meet; and `truth`, the double sums of the unrounded
 * operands, within bf16's own error (two roundings of 2^-8 per product). Returns the
 * number of elements off either. */
static size_t bf16_off(const char *what, const float *got, const double *exact, const double *mag,
                       const double *truth, size_t n, long kd, const float *base)
{
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        /* base: what the op added to (got is the difference), whose roundings count too */
        double b = base ? 2.4e-7 * fabs(base[i]) : 0;
        double e1 = fabs(got[i] - exact[i]), e2 = fabs(got[i] - truth[i]);
        if (e1 > 1.2e-7 * (kd + 2) * mag[i] + b + 1e-30 || e2 > 7.9e-3 * mag[i] + b + 1e-30) {
            if (off++ < 3)
                fprintf(stderr, "  %s[%zu]: %.9g, bf16 operands' sum %.9g, exact %.9g (magnitude %.3g)\n", what, i,
                        got[i], exact[i], truth[i], mag[i]);
        }
    }
    return off;
}

/* bf16 backward-weight's pack (cpu_conv.h's ds_cpu_conv_bf16_pack) for the runs that take the
 * table's shapes over several packs: two of the images of OPS_CONV(7, 9, 11, 64, 128, 3, 3, ...),
 * less than one chunk of 1x1 pixels. */
#define OPS_PACK (96L << 10)

/* The three conv ops of the bf16 backend against double sums; backward-weight again over
 * packs of OPS_PACK, bit for bit the same (no sum depends on the pack). */
static void test_conv_bf16(ds_conv_desc d)
{
    const ds_backend *bb = &ds_backend_cpu_bf16;
    char name[160];
    snprintf(name, sizeof name, "bf16 conv n%d %dx%dx%d -> k%d %dx%d/%d pad %d", d.n, d.h, d.w, d.c, d.k, d.r, d.s,
             d.stride, d.pad);
    check_begin(name);
    size_t ni = (size_t)d.n * d.h * d.w * d.c, nw = (size_t)d.k * d.r * d.s * d.c, no = (size_t)d.n * d.p * d.q * d.k;
    float *in = randn(ni, 1), *w = randn(nw, 1 / sqrt(d.r * d.s * d.c)), *g = randn(no, 1);
    float *out = malloc(no * sizeof *out), *din = malloc(ni * sizeof *din), *dw0 = randn(nw, 1),
          *dw = dup_f(dw0, nw);
    void *ws = bb->alloc(bb->conv_workspace(&d));
    CHECK(ws != NULL, "workspace allocation");
    bb->conv_fwd(out, in, w, &d, ws);
    bb->conv_bwd_data(din, g, w, &d, 0, ws);
    bb->conv_bwd_weight(dw, g, in, &d, ws);
    const long pack = ds_cpu_conv_bf16_pack(OPS_PACK);
    void *ws_p = bb->alloc(bb->conv_workspace(&d));
    float *dw_p = dup_f(dw0, nw);
    CHECK(ws_p != NULL, "workspace allocation");
    bb->conv_bwd_weight(dw_p, g, in, &d, ws_p);
    ds_cpu_conv_bf16_pack(pack);
    CHECK(!memcmp(dw, dw_p, nw * sizeof *dw), "backward weight: other bits over packs of %ld elements", OPS_PACK);
    bb->free(ws_p), free(dw_p);
    for (size_t i = 0; i < nw; i++) dw[i] -= dw0[i];  /* what it added */

    double *inr = rounded_d(in, ni, 0), *wr = rounded_d(w, nw, 0), *gr = rounded_d(g, no, 0);
    double *ina = rounded_d(in, ni, 1), *wa = rounded_d(w, nw, 1), *ga = rounded_d(g, no, 1);
    double *ind = dup_d(in, ni), *wd = dup_d(w, nw), *gd = dup_d(g, no);
    double *o1 = malloc(no * sizeof *o1), *o2 = malloc(no * sizeof *o2), *o3 = malloc(no * sizeof *o3);
    double *di1 = malloc(ni * sizeof *di1), *di2 = malloc(ni * sizeof *di2), *di3 = malloc(ni * sizeof *di3);
    double *dw1 = malloc(nw * sizeof *dw1), *dw2 = malloc(nw * sizeof *dw2), *dw3 = malloc(nw * sizeof *dw3);
    ref_conv(o1, inr, wr, &d), ref_conv(o2, ina, wa, &d), ref_conv(o3, ind, wd, &d);
    ref_conv_bwd(di1, dw1, gr, inr, wr, &d), ref_conv_bwd(di2, dw2, ga, ina, wa, &d);
    ref_conv_bwd(di3, dw3, gd, ind, wd, &d);
    size_t f = bf16_off("forward", out, o1, o2, o3, no, (long)d.r * d.s * d.c, NULL);
    size_t bd = d.no_dx ? 0 : bf16_off("backward data", din, di1, di2, di3, ni, (long)d.r * d.s * d.k, NULL);
    size_t bw = bf16_off("backward weight", dw, dw1, dw2, dw3, nw, (long)d.n * d.p * d.q, dw0);
    CHECK(f == 0, "forward: %zu of %zu elements off", f, no);
    CHECK(bd == 0, "backward data: %zu of %zu elements off", bd, ni);
    CHECK(bw == 0, "backward weight: %zu of %zu elements off", bw, nw);
    bb->free(ws);
    free(in), free(w), free(g), free(out), free(din), free(dw0), free(dw);
    free(inr), free(wr), free(gr), free(ina), free(wa), free(ga), free(ind), free(wd), free(gd);
    free(o1), free(o2), free(o3), free(di1), free(di2), free(di3), free(dw1), free(dw2), free(dw3);
    check_end();
}

/* ---------------------------------------------------------------- bf16 storage
 * Every op on bf16 activations computes in float32 what it computes on float32 ones and
 * rounds each stored result once, so its bits are known exactly: the same op on float32
 * copies of the bf16 values, rounded (cpu_bf16.h's rounding). The exceptions say so. */

/* n bf16 values of random data (widened back in w when not NULL). */
static ds_bf16 *randn16(size_t n, double scale, float **w)
{
    float *x = randn(n, scale);
    ds_bf16 *h = malloc((n ? n : 1) * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = ds_bf16_round(x[i]), x[i] = ds_bf16_value(h[i]);
    if (w) *w = x;
    else free(x);
    return h;
}

/* Elements where got (bf16) is not want (float32) rounded; prints the first few. */
static size_t off16(const char *what, const ds_bf16 *got, const float *want, size_t n)
{
    size_t off = 0;
    for (size_t i = 0; i < n; i++)
        if (got[i] != ds_bf16_round(want[i]) && off++ < 3)
            fprintf(stderr, "  %s[%zu]: 0x%04x, float32's rounded 0x%04x (%.9g)\n", what, i, got[i],
                    ds_bf16_round(want[i]), want[i]);
    return off;
}

static void widen(float *dst, const ds_bf16 *src, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = ds_bf16_value(src[i]);
}

/* A bf16 convolution with bf16 activations (the input bf16 or, as the stem's, float32) and
 * bf16 weights against the same op on float32 copies of the values: the same float32 sums,
 * so the output and din are those rounded and dw is equal. */
static void test_conv_bf16_storage(ds_conv_desc d, ds_dtype in_t)
{
    const ds_backend *bb = &ds_backend_cpu_bf16;
    char name[160];
    snprintf(name, sizeof name, "bf16 storage conv n%d %dx%dx%d -> k%d %dx%d/%d pad %d, %s input", d.n, d.h, d.w,
             d.c, d.k, d.r, d.s, d.stride, d.pad, ds_dtype_name(in_t));
    check_begin(name);
    size_t ni = (size_t)d.n * d.h * d.w * d.c, nw = (size_t)d.k * d.r * d.s * d.c, no = (size_t)d.n * d.p * d.q * d.k;
    float *inf, *wf, *gf, *dw0 = randn(nw, 1);
    ds_bf16 *in16 = randn16(ni, 1, &inf), *w16 = randn16(nw, 1 / sqrt(d.r * d.s * d.c), &wf), *g16 = randn16(no, 1, &gf);
    ds_conv_desc s = d;  /* the storages under test */
    s.in_t = in_t, s.out_t = DS_BF16, s.w_t = DS_BF16;
    void *ws = bb->alloc(bb->conv_workspace(&s)), *wsf = bb->alloc(bb->conv_workspace(&d));
    CHECK(ws && wsf, "workspace allocation");
    ds_bf16 *out = malloc(no * sizeof *out), *din = malloc(ni * sizeof *din);
    float *outf = malloc(no * sizeof *outf), *dinf = malloc(ni * sizeof *dinf), *dw = dup_f(dw0, nw),
          *dwf = dup_f(dw0, nw);
    const void *in = in_t == DS_BF16 ? (const void *)in16 : inf;
    bb->conv_fwd(out, in, w16, &s, ws);
    bb->conv_fwd(outf, inf, wf, &d, wsf);
    bb->conv_bwd_weight(dw, g16, in, &s, ws);
    bb->conv_bwd_weight(dwf, gf, inf, &d, wsf);
    size_t f = off16("forward", out, outf, no), bd = 0, bw = 0;
    if (in_t == DS_BF16 && !d.no_dx) {
        bb->conv_bwd_data(din, g16, w16, &s, 0, ws);
        bb->conv_bwd_data(dinf, gf, wf, &d, 0, wsf);
        bd = off16("backward data", din, dinf, ni);
    }
    for (size_t i = 0; i < nw; i++) bw += memcmp(&dw[i], &dwf[i], sizeof *dw) != 0;
    CHECK(f == 0, "forward: %zu of %zu elements are not the float32 sums rounded", f, no);
    CHECK(bd == 0, "backward data: %zu of %zu elements are not the float32 sums rounded", bd, ni);
    CHECK(bw == 0, "backward weight: %zu of %zu elements differ from the float32-storage run", bw, nw);
    bb->free(ws), bb->free(wsf);
    free(inf), free(wf), free(gf), free(dw0), free(in16), free(w16), free(g16), free(out), free(din), free(outf);
    free(dinf), free(dw), free(dwf);
    check_end();
}

/* n random values stored in t. */
static void *randn_as(size_t n, double scale, ds_dtype t)
{
    return t == DS_BF16 ? (void *)randn16(n, scale, NULL) : (void *)randn(n, scale);
}

/* Backward-data with accumulate = 1 (din +=, an input with two consumers) against the model's
 * former way, the result computed apart (accumulate = 0) and added by the add op: the same
 * bits, on backend cb with every tensor stored in t. */
/* A batch of no images through every convolution op of both CPU backends, on the paths that
 * cut the pixels into chunks (gathered windows, 1x1, strided, 7x7 at 7x7): each returns and
 * leaves dw as it was (the chunking once divided by the zero chunks of no pixels). */
static void test_conv_no_images(void)
{
    check_begin("conv on a batch of no images, fp32 and bf16: returns, dw untouched");
    static const ops_conv shapes[] = {{OPS_CONV(0, 7, 7, 64, 64, 3, 3, 1, 1)}, {OPS_CONV(0, 7, 7, 64, 96, 1, 1, 1, 0)},
                                      {OPS_CONV(0, 14, 14, 16, 32, 3, 3, 2, 1)}, {OPS_CONV(0, 12, 12, 3, 8, 7, 7, 2, 3)}};
    const ds_backend *bes[] = {&ds_backend_cpu, &ds_backend_cpu_bf16};
    for (size_t b = 0; b < 2; b++)
        for (size_t i = 0; i < OPS_COUNT(shapes); i++) {
            ds_conv_desc d = ops_conv_desc(&shapes[i], 0);
            const size_t nw = (size_t)d.k * d.r * d.s * d.c;
            float x[1] = {0}, *w = randn(nw, 1), *dw = randn(nw, 1), *dw0 = dup_f(dw, nw);
            void *ws = bes[b]->alloc(bes[b]->conv_workspace(&d) + 1);
            CHECK(ws != NULL, "workspace allocation");
            bes[b]->conv_fwd(x, x, w, &d, ws);
            bes[b]->conv_bwd_data(x, x, w, &d, 0, ws);
            bes[b]->conv_bwd_weight(dw, x, x, &d, ws);
            CHECK(!memcmp(dw, dw0, nw * sizeof *dw), "%s backend, shape %zu: dw changed", b ? "bf16" : "fp32", i);
            bes[b]->free(ws), free(w), free(dw), free(dw0);
        }
    check_end();
}

static void test_conv_accumulate(const ds_backend *cb, ds_conv_desc d, ds_dtype t)
{
    char name[192];
    snprintf(name, sizeof name, "%s conv backward-data accumulating, %s storage, n%d %dx%dx%d -> k%d %dx%d/%d pad %d: "
             "bitwise a separate result added",
             cb == &ds_backend_cpu ? "fp32" : "bf16", ds_dtype_name(t), d.n, d.h, d.w, d.c, d.k, d.r, d.s, d.stride,
             d.pad);
    check_begin(name);
    d.in_t = d.out_t = d.w_t = t;
    const size_t es = ds_dtype_size(t), ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.k,
                 nw = (size_t)d.k * d.r * d.s * d.c;
    void *w = randn_as(nw, 1 / sqrt(d.r * d.s * d.c), t), *g = randn_as(no, 1, t), *din0 = randn_as(ni, 1, t);
    void *acc = malloc(ni * es), *sum = malloc(ni * es), *part = malloc(ni * es);
    void *ws = cb->alloc(cb->conv_workspace(&d));  /* exactly what it asks for: an overrun shows under ASan */
    CHECK(ws != NULL, "workspace allocation");
    memcpy(acc, din0, ni * es);
    cb->conv_bwd_data(acc, g, w, &d, 1, ws);
    cb->conv_bwd_data(part, g, w, &d, 0, ws);
    memcpy(sum, din0, ni * es);
    cb->add(sum, part, ni, t);
    size_t off = 0, added = 0;
    for (size_t i = 0; i < ni; i++) {
        off += memcmp((char *)acc + i * es, (char *)sum + i * es, es) != 0;
        added += memcmp((char *)acc + i * es, (char *)part + i * es, es) != 0;
    }
    CHECK(off == 0, "%zu of %zu elements differ from the result added apart", off, ni);
    CHECK(added > ni / 2, "only %zu of %zu elements differ from the result alone: din was not added to", added, ni);
    cb->free(ws);
    free(w), free(g), free(din0), free(acc), free(sum), free(part);
    check_end();
}

/* Inference's convolution and batch norm in one pass (conv_fwd_bn) against conv_fwd then
 * bn_fwd_infer: the same bits, on backend cb with the activations and weights stored in t
 * (the input float32 when in_f32: the stem), a ReLU when variant has bit 0, a residual when
 * it has bit 1. */
static void test_conv_bn(const ds_backend *cb, ds_conv_desc d, ds_dtype t, int in_f32, int variant)
{
    const int relu = variant & 1, has_res = variant & 2;
    char name[192];
    snprintf(name, sizeof name, "%s conv and inference batch norm in one pass%s%s, %s storage, n%d %dx%dx%d -> k%d "
             "%dx%d/%d pad %d: bitwise the two ops", cb == &ds_backend_cpu ? "fp32" : "bf16", has_res ? ", residual" : "",
             relu ? ", relu" : "", ds_dtype_name(t), d.n, d.h, d.w, d.c, d.k, d.r, d.s, d.stride, d.pad);
    check_begin(name);
    d.in_t = in_f32 ? DS_F32 : t, d.out_t = d.w_t = t;
    const size_t es = ds_dtype_size(t), ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.k,
                 nw = (size_t)d.k * d.r * d.s * d.c;
    void *in = randn_as(ni, 1, d.in_t), *w = randn_as(nw, 1 / sqrt(d.r * d.s * d.c), t),
         *res = has_res ? randn_as(no, 1, t) : NULL;
    float *gamma = randn(d.k, 0.5), *beta = randn(d.k, 0.5), *mean = randn(d.k, 0.5), *var = randn(d.k, 1);
    for (int j = 0; j < d.k; j++) gamma[j] += 1, var[j] = 0.25f + fabsf(var[j]);
    void *fused = malloc(no * es), *conv = malloc(no * es), *two = malloc(no * es);
    void *ws = cb->alloc(cb->conv_workspace(&d));
    CHECK(ws != NULL, "workspace allocation");
    const ds_conv_bn bn = {gamma, beta, mean, var, res, relu, 1e-5f};
    cb->conv_fwd_bn(fused, in, w, &d, ws, &bn);
    cb->conv_fwd(conv, in, w, &d, ws);
    cb->bn_fwd_infer(two, conv, gamma, beta, mean, var, res, relu, d.n * d.p * d.q, d.k, 1e-5f, t);
    size_t off = 0, normed = 0;
    for (size_t i = 0; i < no; i++) {
        off += memcmp((char *)fused + i * es, (char *)two + i * es, es) != 0;
        normed += memcmp((char *)fused + i * es, (char *)conv + i * es, es) != 0;
    }
    CHECK(off == 0, "%zu of %zu elements differ from conv_fwd then bn_fwd_infer", off, no);
    CHECK(normed > no / 2, "only %zu of %zu elements differ from the convolution alone", normed, no);
    cb->free(ws);
    free(in), free(w), free(res), free(gamma), free(beta), free(mean), free(var), free(fused), free(conv), free(two);
    check_end();
}

/* Batch norm (train forward, backward with residual and ReLU, inference), pooling and the
 * gradient add on bf16 activations against the float32 ops on the same values. */
static void test_ops_bf16_storage(int m, int c)
{
    char name[96];
    snprintf(name, sizeof name, "bf16 storage: batch norm, pooling, add, m%d c%d", m, c);
    check_begin(name);
    size_t n = (size_t)m * c;
    float *xf, *rf, *gf, *gamma = randn(c, 0.5), *beta = randn(c, 0.5);
    ds_bf16 *x = randn16(n, 2, &xf), *r = randn16(n, 1, &rf), *g = randn16(n, 1, &gf);
    for (int j = 0; j < c; j++) gamma[j] += 1;
    ds_bf16 *out = malloc(n * sizeof *out), *din = malloc(n * sizeof *din), *dres = malloc(n * sizeof *dres);
    float *outf = malloc(n * sizeof *outf), *dinf = malloc(n * sizeof *dinf), *dresf = malloc(n * sizeof *dresf);
    float st[5 * c], stf[5 * c];  /* mean, var, invstd, dgamma, dbeta */
    memset(st, 0, sizeof st), memset(stf, 0, sizeof stf);
    be->bn_fwd_train(out, NULL, st, st + c, st + 2 * c, NULL, NULL, x, gamma, beta, r, 1, m, c, 1e-5f, DS_BF16);
    be->bn_fwd_train(outf, NULL, stf, stf + c, stf + 2 * c, NULL, NULL, xf, gamma, beta, rf, 1, m, c, 1e-5f, DS_F32);
    CHECK(memcmp(st, stf, 3 * c * sizeof *st) == 0, "the statistics differ from float32's on the same values");
    size_t off = off16("bn forward", out, outf, n);
    CHECK(off == 0, "bn forward: %zu of %zu elements are not float32's rounded", off, n);
    /* backward from the bf16 forward's output (its ReLU mask), both widened the same; with
     * a few values at the mask's edges planted (NaN, sNaN and -NaN, -0, the smallest
     * denormal, +-Inf): masked where float32's `> 0` is false */
    static const ds_bf16 edge[] = {0x7fc0, 0x7f81, 0xffc0, 0x8000, 0x0001, 0x7f80, 0xff80, 0x0000};
    for (size_t e = 0; e < sizeof edge / sizeof *edge && 3 * e < n; e++) out[3 * e] = edge[e];
    widen(outf, out, n);
    ds_bf16 *g1 = malloc(n * sizeof *g1);
    memcpy(g1, g, n * sizeof *g1);
    float *g1f = dup_f(gf, n);
    be->bn_bwd(din, dres, st + 3 * c, st + 4 * c, g1, out, NULL, x, gamma, st, st + 2 * c, 1, m, c, DS_BF16);
    be->bn_bwd(dinf, dresf, stf + 3 * c, stf + 4 * c, g1f, outf, NULL, xf, gamma, stf, stf + 2 * c, 1, m, c, DS_F32);
    CHECK(memcmp(st + 3 * c, stf + 3 * c, 2 * c * sizeof *st) == 0, "dgamma, dbeta differ from float32's");
    off = off16("bn d input", din, dinf, n) + off16("bn d residual", dres, dresf, n);
    CHECK(off == 0, "bn backward: %zu elements are not float32's rounded", off);
    be->bn_fwd_infer(out, x, gamma, beta, st, st + c, r, 1, m, c, 1e-5f, DS_BF16);
    be->bn_fwd_infer(outf, xf, gamma, beta, stf, stf + c, rf, 1, m, c, 1e-5f, DS_F32);
    off = off16("bn inference", out, outf, n);
    CHECK(off == 0, "bn inference: %zu of %zu elements are not float32's rounded", off, n);

    /* m = 2 images of h x w: max pooling 3x3/2 pad 1, average pooling over each image */
    const int h = 12, w = m / 2 / h, p = (h - 1) / 2 + 1, q = (w - 1) / 2 + 1;
    const size_t np = (size_t)2 * p * q * c;
    ds_pool_desc pd = {2, h, w, c, 3, 2, 1, p, q, DS_BF16}, pdf = pd;
    pdf.t = DS_F32;
    ds_bf16 *po = malloc(np * sizeof *po), *pg = randn16(np, 1, NULL);
    float *pof = malloc(np * sizeof *pof), *pgf = malloc(np * sizeof *pgf), *absg = malloc(np * sizeof *absg);
    uint8_t *pa = malloc(np), *paf = malloc(np);
    be->maxpool_fwd(po, pa, x, &pd);
    be->maxpool_fwd(pof, paf, xf, &pdf);
    off = off16("max pool", po, pof, np);
    CHECK(off == 0, "max pool: %zu of %zu maxima differ", off, np);
    CHECK(!memcmp(pa, paf, np), "max pool: the argmax differs from float32's");
    /* backward: each window's gradient added to din as it comes, each bf16 sum rounded (the
     * first add is exact; at most three more, each within 2^-9 of the sum of the |g| added
     * there, float32's sums of |g|): within 2^-7 of that sum */
    widen(pgf, pg, np);
    for (size_t i = 0; i < np; i++) absg[i] = fabsf(pgf[i]);
    be->maxpool_bwd(din, pg, x, po, pa, &pd);
    be->maxpool_bwd(dinf, pgf, xf, pof, paf, &pdf);
    be->maxpool_bwd(dresf, absg, xf, pof, paf, &pdf);
    free(pa), free(paf);
    off = 0;
    for (size_t i = 0; i < n; i++) off += fabs((double)ds_bf16_value(din[i]) - dinf[i]) > dresf[i] / 128;
    CHECK(off == 0, "max pool backward: %zu of %zu elements further than 2^-7 of their terms", off, n);
    float pooled[2 * c], pooledf[2 * c];
    be->avgpool_fwd(pooled, x, 2, h * w, c, DS_BF16);
    be->avgpool_fwd(pooledf, xf, 2, h * w, c, DS_F32);
    CHECK(memcmp(pooled, pooledf, sizeof pooled) == 0, "average pool: differs from float32's on the same values");
    be->avgpool_bwd(din, pooledf, 2, h * w, c, DS_BF16);
    be->avgpool_bwd(dinf, pooledf, 2, h * w, c, DS_F32);
    off = off16("average pool backward", din, dinf, n);
    CHECK(off == 0, "average pool backward: %zu of %zu elements are not float32's rounded", off, n);

    memcpy(din, x, n * sizeof *din), memcpy(dinf, xf, n * sizeof *dinf);
    be->add(din, g, n, DS_BF16);
    be->add(dinf, gf, n, DS_F32);
    off = off16("add", din, dinf, n);
    CHECK(off == 0, "add: %zu of %zu sums are not float32's rounded", off, n);

    free(xf), free(rf), free(gf), free(gamma), free(beta), free(x), free(r), free(g), free(out), free(din);
    free(dres), free(outf), free(dinf), free(dresf), free(g1), free(g1f), free(po), free(pg), free(pof), free(pgf);
    free(absg);
    check_end();
}

/* ---------------------------------------------------------------- batch norm */

typedef struct {
    int m, c, relu;
    double *in, *gamma, *beta, *res, *g, eps;
} bn_ctx;

/* out = relu?(gamma (x - mean) / sqrt(var + eps) + beta + res?), two-pass statistics */
static void ref_bn(double *out, double *mean, double *var, const bn_ctx *b)
{
    for (int j = 0; j < b->c; j++) {
        double s = 0, v = 0;
        for (int i = 0; i < b->m; i++) s += b->in[(long)i * b->c + j];
        s /= b->m;
        for (int i = 0; i < b->m; i++) {
            double e = b->in[(long)i * b->c + j] - s;
            v += e * e;
        }
        v /= b->m;
        if (mean) mean[j] = s, var[j] = v;
        for (int i = 0; i < b->m; i++) {
            long k = (long)i * b->c + j;
            double y = b->gamma[j] * (b->in[k] - s) / sqrt(v + b->eps) + b->beta[j];
            if (b->res) y += b->res[k];
            out[k] = b->relu && y < 0 ? 0 : y;
        }
    }
}

static double bn_loss(void *p)
{
    bn_ctx *b = p;
    size_t n = (size_t)b->m * b->c;
    double *out = malloc(n * sizeof *out), l = 0;
    ref_bn(out, NULL, NULL, b);
    for (size_t i = 0; i < n; i++) l += b->g[i] * out[i];
    free(out);
    return l;
}

static void test_bn(int m, int c, int residual, int relu, double offset, double spread)
{
    char name[128];
    snprintf(name, sizeof name, "batchnorm m%d c%d%s%s%s", m, c, residual ? " +residual" : "",
             relu ? " +relu" : "", offset != 0 ? " (large mean)" : "");
    check_begin(name);
    size_t n = (size_t)m * c;
    const float eps = 1e-5f;
    float *in = randn(n, spread), *gamma = randn(c, 0.5), *beta = randn(c, 0.5);
    float *res = residual ? randn(n, 1) : NULL, *g = randn(n, 1);
    for (size_t i = 0; i < n; i++) in[i] += (float)(offset * (1 + (int)(i % c)));
    for (int j = 0; j < c; j++) gamma[j] += 1;
    float *out = malloc(n * sizeof *out), *mean = malloc(c * sizeof *mean),
          *var = malloc(c * sizeof *var), *invstd = malloc(c * sizeof *invstd);
    be->bn_fwd_train(out, NULL, mean, var, invstd, NULL, NULL, in, gamma, beta, res, relu, m, c, eps, DS_F32);

    bn_ctx b = {m, c, relu, dup_d(in, n), dup_d(gamma, c), dup_d(beta, c),
                res ? dup_d(res, n) : NULL, dup_d(g, n), eps};
    double *outd = malloc(n * sizeof *outd), *meand = malloc(c * sizeof *meand),
           *vard = malloc(c * sizeof *vard), *isd = malloc(c * sizeof *isd);
    ref_bn(outd, meand, vard, &b);
    for (int j = 0; j < c; j++) isd[j] = 1 / sqrt(vard[j] + eps);
    double *t = dup_d(mean, c);
    check_close_d("mean", t, meand, c, 1e-6 * spread, 1e-6);
    free(t), t = dup_d(var, c);
    check_close_d("var", t, vard, c, 0, 1e-5);
    free(t), t = dup_d(invstd, c);
    check_close_d("invstd", t, isd, c, 0, 1e-5);
    free(t), t = dup_d(out, n);
    // The mean is stored in fp32: with |mean| ~ offset * c, x - mean is off by up to an ulp
    // of the mean, i.e. 6e-8 * |mean| / std after normalisation, times |gamma| < 3.
    check_close_d("forward", t, outd, n, 1e-5 + 2e-7 * offset * c / spread, 1e-4);
    free(t);

    // The running statistics' sums, added by the op: axpy's bits, and nothing else changed.
    {
        float *ms = randn(c, 1), *vs = randn(c, 1), *ms_want = dup_f(ms, c), *vs_want = dup_f(vs, c);
        float *out_s = malloc(n * sizeof *out_s), *st = malloc(3 * c * sizeof *st);
        be->bn_fwd_train(out_s, NULL, st, st + c, st + 2 * c, ms, vs, in, gamma, beta, res, relu, m, c, eps, DS_F32);
        be->axpy(ms_want, 1.0f, mean, (size_t)c);
        be->axpy(vs_want, (float)((double)m / (m - 1)), var, (size_t)c);
        CHECK(!memcmp(ms, ms_want, c * sizeof *ms), "mean_sum: not axpy's bits");
        CHECK(!memcmp(vs, vs_want, c * sizeof *vs), "var_sum: not axpy's bits");
        CHECK(!memcmp(out_s, out, n * sizeof *out) && !memcmp(st, mean, c * sizeof *st) &&
                  !memcmp(st + c, var, c * sizeof *st) && !memcmp(st + 2 * c, invstd, c * sizeof *st),
              "the output or statistics changed with the sums");
        free(ms), free(vs), free(ms_want), free(vs_want), free(out_s), free(st);
    }

    if (m * c <= 2000) {  // backward against finite differences
        float *din = malloc(n * sizeof *din), *dres = residual ? malloc(n * sizeof *dres) : NULL;
        float *dgamma = randn(c, 1), *dbeta = randn(c, 1);
        float *dg0 = dup_f(dgamma, c), *db0 = dup_f(dbeta, c), *dout = dup_f(g, n);
        be->bn_bwd(din, dres, dgamma, dbeta, dout, out, NULL, in, gamma, mean, invstd, relu, m, c, DS_F32);
        double *want = malloc(n * sizeof *want), *got = calloc(n, sizeof *got);
        fd_grad(want, b.in, n, bn_loss, &b);
        for (size_t i = 0; i < n; i++) got[i] = din[i];
        check_close_d("d input", got, want, n, 1e-4, 1e-3);
        if (residual) {
            fd_grad(want, b.res, n, bn_loss, &b);
            for (size_t i = 0; i < n; i++) got[i] = dres[i];
            check_close_d("d residual", got, want, n, 1e-5, 1e-4);
        }
        fd_grad(want, b.gamma, c, bn_loss, &b);
        for (int j = 0; j < c; j++) got[j] = (double)dgamma[j] - dg0[j];
        check_close_d("d gamma (+=)", got, want, c, 1e-4, 1e-4);
        fd_grad(want, b.beta, c, bn_loss, &b);
        for (int j = 0; j < c; j++) got[j] = (double)dbeta[j] - db0[j];
        check_close_d("d beta (+=)", got, want, c, 1e-4, 1e-4);
        free(din), free(dres), free(dgamma), free(dbeta), free(dg0), free(db0), free(dout);
        free(want), free(got);
    }

    // Inference with the batch's own statistics as running stats gives the same output.
    float *out2 = malloc(n * sizeof *out2);
    be->bn_fwd_infer(out2, in, gamma, beta, mean, var, res, relu, m, c, eps, DS_F32);
    check_close("inference = training with the same statistics", out2, out, n, 1e-5, 1e-5);

    free(in), free(gamma), free(beta), free(res), free(g), free(out), free(mean), free(var);
    free(invstd), free(out2), free(b.in), free(b.gamma), free(b.beta), free(b.res), free(b.g);
    free(outd), free(meand), free(vard), free(isd);
    check_end();
}

/* ---------------------------------------------------------------- pooling */

typedef struct {
    const ds_pool_desc *d;
    double *in, *g;
} pool_ctx;

static void ref_maxpool(double *out, const double *in, const ds_pool_desc *d)
{
    for (int n = 0; n < d->n; n++)
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++)
                for (int c = 0; c < d->c; c++) {
                    double m = -INFINITY;
                    for (int r = 0; r < d->k; r++)
                        for (int s = 0; s < d->k; s++) {
                            int y = p * d->stride - d->pad + r, x = q * d->stride - d->pad + s;
                            if (y < 0 || y >= d->h || x < 0 || x >= d->w) continue;
                            double v = in[(((long)n * d->h + y) * d->w + x) * d->c + c];
                            m = v > m ? v : m;
                        }
                    out[(((long)n * d->p + p) * d->q + q) * d->c + c] = m;
                }
}

/* maxpool_fwd's argmax by its rule in backend.h, written plainly: the first element in the
 * image seeds, a later one replaces it only when strictly greater */
static void ref_argmax(uint8_t *at, const double *in, const ds_pool_desc *d)
{
    for (int n = 0; n < d->n; n++)
        for (int p = 0; p < d->p; p++)
            for (int q = 0; q < d->q; q++)
                for (int c = 0; c < d->c; c++) {
                    double best = 0;
                    int a = -1;
                    for (int r = 0; r < d->k; r++)
                        for (int s = 0; s < d->k; s++) {
                            int y = p * d->stride - d->pad + r, x = q * d->stride - d->pad + s;
                            if (y < 0 || y >= d->h || x < 0 || x >= d->w) continue;
                            double v = in[(((long)n * d->h + y) * d->w + x) * d->c + c];
                            if (a < 0 || v > best) best = v, a = r * d->k + s;
                        }
                    at[(((long)n * d->p + p) * d->q + q) * d->c + c] = a < 0 ? DS_POOL_NO_ARGMAX : (uint8_t)a;
                }
}

static double maxpool_loss(void *p)
{
    pool_ctx *c = p;
    size_t no = (size_t)c->d->n * c->d->p * c->d->q * c->d->c;
    double *out = malloc(no * sizeof *out), l = 0;
    ref_maxpool(out, c->in, c->d);
    for (size_t i = 0; i < no; i++) l += c->g[i] * out[i];
    free(out);
    return l;
}

/* A float whose sums depend on their order: a random sign and mantissa over 2^-8 .. 2^12. */
static float wide_value(void)
{
    return (ds_rng_float(&rng) < 0.5f ? -1 : 1) * (1 + ds_rng_float(&rng)) *
           ldexpf(1, (int)(ds_rng_float(&rng) * 20) - 8);
}

/* Batch norm's sums (cpu_loops.h bn_sums, bn_sums_bf16) in their stated order, bit for bit:
 * per channel, float sums over runs of DS_BN_FLUSH rows from r0, each added to the double
 * total; the ReLU mask applied in place (p written back with it; masks of +-0, denormals,
 * +-Inf and NaN among them). Widths of whole 16-channel vectors (16 to 112: one slice, and
 * a full slice with 1 or 3 vectors left over) and one that is not (24); the forward's
 * statistics (the same array and shift as p and pu, as batch norm's forward passes them), the
 * backward's sums with and without the mask; of this CPU's kernel set (test_cpu_kernels.sh
 * runs this under every set). */
static void test_bn_sums_order(void)
{
    const ds_cpu_loops *L = ds_cpu_kernels_for(ds_cpu_isa_get())->loops;
    const int widths[] = {16, 24, 32, 48, 64, 80, 112}, c0 = 8;
    const char *modes[] = {"backward", "backward with relu", "statistics"};
    const long r0 = 3, r1 = 203;
    /* masks on the edge of > 0: +0, -0, the least denormals, +-Inf, NaNs */
    const ds_bf16 edges[8] = {0x0000, 0x8000, 0x0001, 0x8001, 0x7f80, 0xff80, 0x7fc0, 0xffc1};
    check_begin("bn_sums in the stated order (16 to 112 channels; fp32, bf16; statistics, backward with and without relu)");
    for (int wi = 0; wi < (int)(sizeof widths / sizeof *widths); wi++)
        for (int t = 0; t < 2; t++)
            for (int mode = 0; mode < 3; mode++) {
                const int cb = widths[wi], c = cb + 2 * c0, relu = mode == 1, stats = mode == 2;
                const long n = r1 * c;
                float p[n], q[n], mask[n], pu[cb], qv[cb], pr[n], want[n];
                ds_bf16 p16[n], q16[n], mask16[n];
                for (long i = 0; i < n; i++) {
                    p16[i] = ds_bf16_round(wide_value()), q16[i] = ds_bf16_round(wide_value());
                    mask16[i] = ds_bf16_round(ds_rng_float(&rng) - 0.5f);
                    if (i % 7 == 0) mask16[i] = edges[i / 7 % 8];
                    if (stats) q16[i] = p16[i];
                    p[i] = ds_bf16_value(p16[i]), q[i] = ds_bf16_value(q16[i]), mask[i] = ds_bf16_value(mask16[i]);
                }
                for (int j = 0; j < cb; j++) pu[j] = wide_value(), qv[j] = stats ? pu[j] : wide_value();
                double da[cb], db[cb], ra[cb], rb[cb];
                memcpy(want, p, sizeof want);
                for (int j = 0; j < cb; j++) {
                    da[j] = db[j] = ra[j] = rb[j] = 0;
                    for (long i0 = r0; i0 < r1; i0 += DS_BN_FLUSH) {
                        float fa = 0, fb = 0;
                        for (long i = i0; i < r1 && i < i0 + DS_BN_FLUSH; i++) {
                            const long at = i * c + c0 + j;
                            if (relu && !(mask[at] > 0)) want[at] = 0;
                            const float u = want[at] - pu[j], v = (stats ? want[at] : q[at]) - qv[j];
                            fa += u;
                            fb += u * v;
                        }
                        ra[j] += fa, rb[j] += fb;
                    }
                }
                memcpy(pr, p, sizeof pr);
                if (t) {
                    L->bn_sums_bf16(da, db, p16, pu, stats ? p16 : q16, stats ? pu : qv, relu ? mask16 : NULL, r0, r1, c,
                                    c0, cb);
                    for (long i = 0; i < n; i++) pr[i] = ds_bf16_value(p16[i]);
                } else {
                    L->bn_sums(da, db, pr, pu, stats ? pr : q, stats ? pu : qv, relu ? mask : NULL, r0, r1, c, c0, cb);
                }
                int off = 0;
                for (int j = 0; j < cb; j++) off += memcmp(&da[j], &ra[j], 8) != 0 || memcmp(&db[j], &rb[j], 8) != 0;
                CHECK(off == 0, "bn_sums %s, %d channels, %s: %d of %d channels not summed in the stated order",
                      t ? "bf16" : "fp32", cb, modes[mode], off, cb);
                CHECK(!memcmp(pr, want, sizeof want), "bn_sums %s, %d channels, %s: p is not written back masked, "
                      "and only there", t ? "bf16" : "fp32", cb, modes[mode]);
            }
    check_end();
}

/* Backward-weight's group totals (cpu_conv.h ds_cpu_conv_sum_groups): each element the sum
 * of its groups in group order, added to dw, bit for bit; plain and transposed. */
static void test_sum_groups_order(void)
{
    const int k = 40, groups = 16;
    const long rsc = 75, stride = ds_round16(k * rsc);
    check_begin("sum_groups in group order (plain and transposed)");
    for (int tr = 0; tr < 2; tr++) {
        float part[groups * stride], dw[k * rsc], ref[k * rsc];
        for (long i = 0; i < groups * stride; i++) part[i] = wide_value();
        for (long i = 0; i < k * rsc; i++) dw[i] = ref[i] = wide_value();
        for (int j = 0; j < k; j++)
            for (long r = 0; r < rsc; r++) {
                const long at = tr ? r * k + j : j * rsc + r;
                float s = part[at];
                for (int g = 1; g < groups; g++) s += part[g * stride + at];
                ref[j * rsc + r] += s;
            }
        ds_cpu_conv_sum_groups(dw, part, groups, stride, k, rsc, tr);
        CHECK(!memcmp(dw, ref, sizeof dw), "sum_groups%s: not each element's groups in group order",
              tr ? " transposed" : "");
    }
    check_end();
}

static void test_maxpool(int n, int h, int w, int c, int k, int stride, int pad)
{
    char name[128];
    snprintf(name, sizeof name, "maxpool n%d %dx%dx%d %dx%d/%d pad %d", n, h, w, c, k, k, stride, pad);
    check_begin(name);
    ds_pool_desc d = {n, h, w, c, k, stride, pad, (h + 2 * pad - k) / stride + 1,
                      (w + 2 * pad - k) / stride + 1, DS_F32};
    size_t ni = (size_t)n * h * w * c, no = (size_t)n * d.p * d.q * c;
    // The inputs: a shuffled grid of distinct values 0.01 apart, so that no two in a window
    // lie within the finite differences' step (a near tie would split their gradient there).
    float *in = malloc(ni * 4), *g = randn(no, 1), *out = malloc(no * 4), *din = malloc(ni * 4);
    for (size_t i = 0; i < ni; i++) in[i] = (float)(((double)i - ni / 2.0) * 0.01);
    for (size_t i = ni; i > 1; i--) {
        size_t j = ds_rng_below(&rng, i);
        float t = in[i - 1];
        in[i - 1] = in[j], in[j] = t;
    }
    uint8_t *arg = malloc(no), *arg_want = malloc(no);
    be->maxpool_fwd(out, arg, in, &d);
    be->maxpool_bwd(din, g, in, out, arg, &d);
    pool_ctx ctx = {&d, dup_d(in, ni), dup_d(g, no)};
    double *outd = malloc(no * 8), *want = malloc(ni * 8);
    ref_maxpool(outd, ctx.in, &d);
    double *got = dup_d(out, no);
    check_close_d("forward", got, outd, no, 0, 0);
    free(got);
    ref_argmax(arg_want, ctx.in, &d);
    CHECK(!memcmp(arg, arg_want, no), "forward's argmax: not each window's first maximum");
    be->maxpool_fwd(out, NULL, in, &d);   /* inference: no argmax */
    got = dup_d(out, no);
    check_close_d("forward without argmax", got, outd, no, 0, 0);
    free(got), free(arg), free(arg_want);
    fd_grad(want, ctx.in, ni, maxpool_loss, &ctx);
    got = dup_d(din, ni);
    check_close_d("backward", got, want, ni, 1e-6, 1e-6);

    // Ties: the gradient goes to the first maximum of the window only.
    float flat[2 * 2] = {1, 1, 1, 1}, dflat[4], o1, g1 = 1;
    uint8_t a1;
    ds_pool_desc t = {1, 2, 2, 1, 2, 2, 0, 1, 1, DS_F32};
    be->maxpool_fwd(&o1, &a1, flat, &t);
    be->maxpool_bwd(dflat, &g1, flat, &o1, &a1, &t);
    CHECK(dflat[0] == 1 && dflat[1] == 0 && dflat[2] == 0 && dflat[3] == 0,
          "tie: got %g %g %g %g", dflat[0], dflat[1], dflat[2], dflat[3]);
    CHECK(a1 == 0, "tie: argmax %d, not the first", a1);
    free(in), free(g), free(out), free(din), free(ctx.in), free(ctx.g), free(outd), free(want), free(got);
    check_end();
}

/* NaN and -inf, where the forward's maximum (x > y from -inf: a NaN never wins) and the
 * backward's first maximum (the first element seeds: a NaN there keeps it) part: the argmax
 * must be the backward's, in float32 and bf16. One 4 x 4 image of 3 channels, 3x3/2 pad 1:
 * windows (0, 0) and (1, 1) start at window index 4 and 0. Channel 0: a NaN first in
 * window (0, 0) (index 4), the larger values after it. Channel 1: window (1, 1) all -inf.
 * Channel 2: a NaN after the first element, and a -NaN first in window (1, 1). */
static void test_maxpool_nan(ds_dtype type)
{
    char name[96];
    snprintf(name, sizeof name, "maxpool %s: NaN and -inf, the argmax is the backward's first maximum",
             ds_dtype_name(type));
    check_begin(name);
    ds_pool_desc d = {1, 4, 4, 3, 3, 2, 1, 2, 2, type};
    enum { NI = 4 * 4 * 3, NO = 2 * 2 * 3 };
    float in[NI], g[NO], out[NO], din[NI];
    for (int i = 0; i < NI; i++) in[i] = (float)(i % 7) - 3;
    in[(0 * 4 + 0) * 3 + 0] = NAN;
    for (int y = 1; y < 4; y++)
        for (int x = 1; x < 4; x++) in[(y * 4 + x) * 3 + 1] = -INFINITY;
    in[(1 * 4 + 0) * 3 + 2] = NAN;
    in[(1 * 4 + 1) * 3 + 2] = -NAN;
    for (int i = 0; i < NO; i++) g[i] = (float)(i + 1);
    /* the storage's values (bf16 keeps these exactly) */
    ds_bf16 in16[NI], g16[NO], out16[NO], din16[NI];
    for (int i = 0; i < NI; i++) in16[i] = ds_bf16_from(in[i]);
    for (int i = 0; i < NO; i++) g16[i] = ds_bf16_from(g[i]);
    uint8_t arg[NO], want[NO];
    if (type == DS_BF16) {
        be->maxpool_fwd(out16, arg, in16, &d);
        be->maxpool_bwd(din16, g16, in16, out16, arg, &d);
        for (int i = 0; i < NO; i++) out[i] = ds_bf16_value(out16[i]);
        for (int i = 0; i < NI; i++) din[i] = ds_bf16_value(din16[i]);
    } else {
        be->maxpool_fwd(out, arg, in, &d);
        be->maxpool_bwd(din, g, in, out, arg, &d);
    }
    double ind[NI], outd[NO], dref[NI] = {0};
    for (int i = 0; i < NI; i++) ind[i] = in[i];
    ref_maxpool(outd, ind, &d);
    ref_argmax(want, ind, &d);
    int off = 0;
    for (int i = 0; i < NO; i++) off += !(out[i] == outd[i]);
    CHECK(off == 0, "forward: %d of %d maxima are not the largest non-NaN", off, NO);
    CHECK(arg[0] == 4 && want[0] == 4, "channel 0, window (0, 0): argmax %d, not the NaN first (4)", arg[0]);
    CHECK(arg[9 + 1] == 0 && out[9 + 1] == -INFINITY, "channel 1, window (1, 1) of -inf: argmax %d, not 0", arg[10]);
    CHECK(!memcmp(arg, want, NO), "argmax: not each window's first maximum by the backward's rule");
    /* the gradient: each window's g to its argmax's element */
    for (int p = 0; p < 2; p++)
        for (int q = 0; q < 2; q++)
            for (int c = 0; c < 3; c++) {
                const int a = want[(p * 2 + q) * 3 + c], y = p * 2 - 1 + a / 3, x = q * 2 - 1 + a % 3;
                dref[(y * 4 + x) * 3 + c] += g[(p * 2 + q) * 3 + c];
            }
    off = 0;
    for (int i = 0; i < NI; i++) off += !(din[i] == dref[i]);
    CHECK(off == 0, "backward: %d of %d gradients not at the windows' first maxima", off, NI);
    check_end();
}

typedef struct {
    int n, hw, c;
    double *in, *g;
} avg_ctx;

static double avgpool_loss(void *p)
{
    avg_ctx *a = p;
    double l = 0;
    for (int i = 0; i < a->n; i++)
        for (int j = 0; j < a->c; j++) {
            double s = 0;
            for (int k = 0; k < a->hw; k++) s += a->in[((long)i * a->hw + k) * a->c + j];
            l += a->g[i * a->c + j] * s / a->hw;
        }
    return l;
}

static void test_avgpool(int n, int hw, int c)
{
    char name[96];
    snprintf(name, sizeof name, "global average pool n%d hw%d c%d", n, hw, c);
    check_begin(name);
    size_t ni = (size_t)n * hw * c, no = (size_t)n * c;
    float *in = randn(ni, 1), *g = randn(no, 1), *out = malloc(no * 4), *din = malloc(ni * 4);
    be->avgpool_fwd(out, in, n, hw, c, DS_F32);
    be->avgpool_bwd(din, g, n, hw, c, DS_F32);
    avg_ctx a = {n, hw, c, dup_d(in, ni), dup_d(g, no)};
    double *want = malloc(ni * 8), *got = malloc(ni * 8);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < c; j++) {
            double s = 0;
            for (int k = 0; k < hw; k++) s += a.in[((long)i * hw + k) * c + j];
            want[i * c + j] = s / hw, got[i * c + j] = out[i * c + j];
        }
    check_close_d("forward", got, want, no, 1e-6, 1e-5);
    fd_grad(want, a.in, ni, avgpool_loss, &a);
    for (size_t i = 0; i < ni; i++) got[i] = din[i];
    check_close_d("backward", got, want, ni, 1e-6, 1e-5);
    free(in), free(g), free(out), free(din), free(a.in), free(a.g), free(want), free(got);
    check_end();
}

/* ---------------------------------------------------------------- linear */

typedef struct {
    int n, i, o;
    double *in, *w, *b, *g;
} lin_ctx;

static double linear_loss(void *p)
{
    lin_ctx *L = p;
    double l = 0;
    for (int r = 0; r < L->n; r++)
        for (int k = 0; k < L->o; k++) {
            double s = L->b[k];
            for (int j = 0; j < L->i; j++) s += L->in[(long)r * L->i + j] * L->w[(long)k * L->i + j];
            l += L->g[(long)r * L->o + k] * s;
        }
    return l;
}

static void test_linear(int n, int i, int o)
{
    char name[64];
    snprintf(name, sizeof name, "linear n%d %d -> %d", n, i, o);
    check_begin(name);
    float *in = randn((size_t)n * i, 1), *w = randn((size_t)o * i, 1 / sqrt(i)), *b = randn(o, 1);
    float *g = randn((size_t)n * o, 1), *out = malloc((size_t)n * o * 4), *din = malloc((size_t)n * i * 4);
    float *dw0 = randn((size_t)o * i, 1), *dw = dup_f(dw0, (size_t)o * i), *db0 = randn(o, 1),
          *db = dup_f(db0, o);
    be->linear_fwd(out, in, w, b, n, i, o);
    be->linear_bwd(din, dw, db, g, in, w, n, i, o);
    lin_ctx L = {n, i, o, dup_d(in, (size_t)n * i), dup_d(w, (size_t)o * i), dup_d(b, o), dup_d(g, (size_t)n * o)};
    size_t big = (size_t)(n * i > o * i ? n * i : o * i) + n * o;
    double *want = malloc(big * 8), *got = malloc(big * 8);
    for (int r = 0; r < n; r++)
        for (int k = 0; k < o; k++) {
            double s = L.b[k];
            for (int j = 0; j < i; j++) s += L.in[(long)r * i + j] * L.w[(long)k * i + j];
            want[r * o + k] = s, got[r * o + k] = out[r * o + k];
        }
    check_close_d("forward", got, want, (size_t)n * o, 1e-5, 1e-4);
    fd_grad(want, L.in, (size_t)n * i, linear_loss, &L);
    for (size_t k = 0; k < (size_t)n * i; k++) got[k] = din[k];
    check_close_d("d input", got, want, (size_t)n * i, 1e-5, 1e-4);
    fd_grad(want, L.w, (size_t)o * i, linear_loss, &L);
    for (size_t k = 0; k < (size_t)o * i; k++) got[k] = (double)dw[k] - dw0[k];
    check_close_d("d weight (+=)", got, want, (size_t)o * i, 1e-5, 1e-4);
    fd_grad(want, L.b, o, linear_loss, &L);
    for (int k = 0; k < o; k++) got[k] = (double)db[k] - db0[k];
    check_close_d("d bias (+=)", got, want, o, 1e-5, 1e-4);
    free(in), free(w), free(b), free(g), free(out), free(din), free(dw0), free(dw), free(db0), free(db);
    free(L.in), free(L.w), free(L.b), free(L.g), free(want), free(got);
    check_end();
}

/* ---------------------------------------------------------------- loss */

typedef struct {
    int n, c;
    double *z, eps;
    const int32_t *y;
} xent_ctx;

/* sum over samples of -sum_j target_j log softmax_j, in double */
static double xent_loss_each(const xent_ctx *x, int i)
{
    const double *z = x->z + (long)i * x->c;
    if (x->y[i] < 0 || x->y[i] >= x->c) return 0;
    double m = z[0], s = 0, l = 0;
    for (int j = 1; j < x->c; j++) m = z[j] > m ? z[j] : m;
    for (int j = 0; j < x->c; j++) s += exp(z[j] - m);
    for (int j = 0; j < x->c; j++) {
        double t = x->eps / x->c + (j == x->y[i] ? 1 - x->eps : 0);
        l -= t * (z[j] - m - log(s));
    }
    return l;
}

static double xent_loss(void *p)
{
    xent_ctx *x = p;
    double l = 0;
    for (int i = 0; i < x->n; i++) l += xent_loss_each(x, i);
    return l;
}

static void test_xent(const ops_xent *t)
{
    char name[96];
    snprintf(name, sizeof name, "softmax cross-entropy n%d c%d, smoothing %g", t->n, t->c, t->smoothing);
    check_begin(name);
    const int n = t->n, c = t->c;
    const float scale = 1.0f / 32;
    float *z = randn((size_t)n * c, 3), *loss = malloc(n * sizeof *loss), *dz = malloc((size_t)n * c * sizeof *dz);
    int32_t *y = malloc(n * sizeof *y);
    for (int i = 0; i < n; i++)  /* the first and last class, padding samples (-1), the rest at random */
        y[i] = i == 0 ? 0 : i == 1 ? c - 1 : ops_xent_padding(t, i) ? -1 : (int32_t)ds_rng_below(&rng, c);
    z[(size_t)c * (n - 2) + 1] += 80;  // a large logit must not overflow
    be->softmax_xent(loss, dz, z, y, n, c, t->smoothing, scale);
    xent_ctx x = {n, c, dup_d(z, (size_t)n * c), t->smoothing, y};
    double *want = malloc((size_t)n * c * sizeof *want), *got = malloc((size_t)n * c * sizeof *got);
    for (int i = 0; i < n; i++) want[i] = xent_loss_each(&x, i), got[i] = loss[i];
    check_close_d("loss", got, want, n, 1e-6, 1e-5);
    fd_grad(want, x.z, (size_t)n * c, xent_loss, &x);
    for (int i = 0; i < n * c; i++) want[i] *= scale, got[i] = dz[i];
    check_close_d("d logits", got, want, (size_t)n * c, 1e-7, 1e-4);
    free(z), free(x.z), free(loss), free(dz), free(y), free(want), free(got);
    check_end();
}

/* ---------------------------------------------------------------- optimizer */

static void test_sgd(const ops_sgd *t)
{
    char name[96];
    const float lr = t->lr, momentum = t->momentum, wd = t->wd;
    const int nesterov = t->nesterov;
    snprintf(name, sizeof name, "sgd lr %g momentum %g wd %g%s, 3 steps", lr, momentum, wd, nesterov ? " nesterov" : "");
    check_begin(name);
    const size_t n = 1000;
    float *w = randn(n, 1), *buf = randn(n, 1);  // buf garbage: the first step must ignore it
    double *wd_ = dup_d(w, n), *bd = calloc(n, sizeof *bd), *got = malloc(n * 8);
    for (int step = 0; step < 3; step++) {
        float *g = randn(n, 1);
        be->sgd_step(w, buf, g, n, &lr, momentum, wd, nesterov, step == 0);
        // torch.optim.SGD, dampening 0
        for (size_t i = 0; i < n; i++) {
            double d = g[i] + wd * wd_[i];
            if (momentum != 0) {
                bd[i] = step == 0 ? d : momentum * bd[i] + d;
                d = nesterov ? d + momentum * bd[i] : bd[i];
            }
            wd_[i] -= lr * d;
        }
        free(g);
    }
    for (size_t i = 0; i < n; i++) got[i] = w[i];
    check_close_d("weights", got, wd_, n, 1e-6, 1e-5);
    if (momentum != 0) {
        for (size_t i = 0; i < n; i++) got[i] = buf[i];
        check_close_d("momentum buffer", got, bd, n, 1e-6, 1e-5);
    }
    free(w), free(buf), free(wd_), free(bd), free(got);
    check_end();
}

static void test_elementwise(void)
{
    check_begin("scale and axpy");
    const size_t n = 1003;
    float *x = randn(n, 1), *y = randn(n, 1), *x0 = dup_f(x, n), *y0 = dup_f(y, n);
    be->axpy(y, 0.5f, x, n);
    be->scale(x, -2.0f, n);
    int bad = 0;
    for (size_t i = 0; i < n; i++) bad += y[i] != y0[i] + 0.5f * x0[i] || x[i] != -2.0f * x0[i];
    CHECK(bad == 0, "%d elements off", bad);
    free(x), free(y), free(x0), free(y0);
    check_end();
}

static void test_normalize(void)
{
    check_begin("normalize_u8: crop, flip, (x/255 - mean)/std");
    const int n = 3, H = 9, W = 11, ch = 5, cw = 6;
    uint8_t *in = malloc((size_t)n * H * W * 3);
    for (size_t i = 0; i < (size_t)n * H * W * 3; i++) in[i] = (uint8_t)ds_rng_below(&rng, 256);
    int32_t y0[3] = {0, 4, 2}, x0[3] = {5, 0, 3};
    uint8_t flip[3] = {0, 1, 1};
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    size_t no = (size_t)n * ch * cw * 3;
    float *out = malloc(no * 4);
    double *want = malloc(no * 8), *got = malloc(no * 8);
    be->normalize_u8(out, in, n, H, W, ch, cw, y0, x0, flip, mean, std);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < ch; y++)
            for (int x = 0; x < cw; x++)
                for (int k = 0; k < 3; k++) {
                    int sx = x0[i] + (flip[i] ? cw - 1 - x : x);
                    double v = in[(((size_t)i * H + y0[i] + y) * W + sx) * 3 + k] / 255.0;
                    size_t o = (((size_t)i * ch + y) * cw + x) * 3 + k;
                    want[o] = (v - mean[k]) / std[k], got[o] = out[o];
                }
    check_close_d("pixels", got, want, no, 1e-6, 1e-6);
    /* Bitwise the float expression (x / 255.0f - mean) / std: the CPU backend's table must
     * not change a bit of what per-pixel arithmetic gave (and other backends round alike). */
    size_t differ = 0;
    for (int i = 0; i < n; i++)
        for (int y = 0; y < ch; y++)
            for (int x = 0; x < cw; x++)
                for (int k = 0; k < 3; k++) {
                    int sx = x0[i] + (flip[i] ? cw - 1 - x : x);
                    float v = ((float)in[(((size_t)i * H + y0[i] + y) * W + sx) * 3 + k] / 255.0f - mean[k]) / std[k];
                    differ += memcmp(&v, &out[(((size_t)i * ch + y) * cw + x) * 3 + k], sizeof v) != 0;
                }
    CHECK(differ == 0, "%zu of %zu values differ in their bits from (x / 255.0f - mean) / std", differ, no);
    free(in), free(out), free(want), free(got);
    check_end();
}

/* The bilinear resize of PyTorch (align_corners=False, no antialias) in double, written
 * from its definition: output pixel d samples the input at (d + 1/2) in / out - 1/2, clamped
 * to [0, in - 1], between its two neighbours. */
static double ref_bilinear_1d(int d, int in, int out, int *i0, int *i1)
{
    double s = (d + 0.5) * in / out - 0.5;
    if (s < 0) s = 0;
    *i0 = (int)s < in - 1 ? (int)s : in - 1;
    *i1 = *i0 + 1 < in ? *i0 + 1 : in - 1;
    return s - *i0 > 1 ? 1 : s - *i0;
}

static void test_resized_crop(void)
{
    check_begin("resized_crop_u8: bilinear box resize, flip, normalise; a crop-sized box is normalize_u8");
    enum { n = 6, H = 23, W = 31, ch = 9, cw = 11 };
    uint8_t *in = malloc((size_t)n * H * W * 3);
    for (size_t i = 0; i < (size_t)n * H * W * 3; i++) in[i] = (uint8_t)ds_rng_below(&rng, 256);
    /* down and up in each direction, the whole image, one-pixel-thin boxes */
    int32_t y0[n] = {0, 4, 2, 22, 0, 7}, x0[n] = {0, 3, 10, 1, 30, 5}, bh[n] = {23, 5, 18, 1, 12, 9},
            bw[n] = {31, 20, 4, 29, 1, 11};
    uint8_t flip[n] = {0, 1, 0, 1, 1, 0};
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    size_t no = (size_t)n * ch * cw * 3;
    float *out = malloc(no * 4), *same = malloc(no * 4);
    double *want = malloc(no * 8), *got = malloc(no * 8);
    be->resized_crop_u8(out, in, n, H, W, ch, cw, y0, x0, bh, bw, flip, mean, std);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < ch; y++)
            for (int x = 0; x < cw; x++) {
                int r0, r1, c0, c1;
                double ly = ref_bilinear_1d(y, bh[i], ch, &r0, &r1);
                double lx = ref_bilinear_1d(flip[i] ? cw - 1 - x : x, bw[i], cw, &c0, &c1);
                for (int k = 0; k < 3; k++) {
#define PX(r, c) (double)in[(((size_t)i * H + y0[i] + (r)) * W + x0[i] + (c)) * 3 + k]
                    double v = (1 - ly) * ((1 - lx) * PX(r0, c0) + lx * PX(r0, c1)) +
                               ly * ((1 - lx) * PX(r1, c0) + lx * PX(r1, c1));
#undef PX
                    size_t o = (((size_t)i * ch + y) * cw + x) * 3 + k;
                    want[o] = (v / 255 - mean[k]) / std[k], got[o] = out[o];
                }
            }
    /* float weights and sums against double: values 0..255 to ~1e-5, |normalised| < 3 */
    check_close_d("resized pixels", got, want, no, 2e-5, 1e-5);
    for (int i = 0; i < n; i++) bh[i] = ch, bw[i] = cw, y0[i] = i % 3 * 5, x0[i] = i * 4;
    be->resized_crop_u8(out, in, n, H, W, ch, cw, y0, x0, bh, bw, flip, mean, std);
    be->normalize_u8(same, in, n, H, W, ch, cw, y0, x0, flip, mean, std);
    CHECK(memcmp(out, same, no * 4) == 0, "a %dx%d box is not bitwise normalize_u8's crop", ch, cw);
    be->resized_crop_u8(out, in, n, H, W, ch, cw, y0, x0, bh, bw, NULL, mean, std);
    be->normalize_u8(same, in, n, H, W, ch, cw, y0, x0, NULL, mean, std);
    CHECK(memcmp(out, same, no * 4) == 0, "without flips, a %dx%d box is not bitwise normalize_u8's crop", ch, cw);
    free(in), free(out), free(same), free(want), free(got);
    check_end();
}

/* The resize's direct form, one output value at a time (the expressions of the separable
 * one, in its order): the same bits, also for crops wider than one tile of columns. */
static void direct_tap(float scale, int d, int in, int *i0, int *i1, float *l)
{
    float src = scale * ((float)d + 0.5f) - 0.5f;
    if (src < 0) src = 0;
    int i = (int)src;
    if (i > in - 1) i = in - 1;
    float f = src - (float)i;
    *i0 = i, *i1 = i + (i < in - 1), *l = f > 1 ? 1 : f;
}

static void test_resized_crop_wide(void)
{
    check_begin("resized_crop_u8: separable, bitwise its direct form (crops wider than a tile, boxes up and down)");
    enum { n = 5, H = 330, W = 340, ch = 301, cw = 517 };
    uint8_t *in = malloc((size_t)n * H * W * 3);
    for (size_t i = 0; i < (size_t)n * H * W * 3; i++) in[i] = (uint8_t)ds_rng_below(&rng, 256);
    int32_t y0[n] = {0, 10, 3, 300, 0}, x0[n] = {0, 7, 200, 1, 339}, bh[n] = {330, 120, 327, 30, 1},
            bw[n] = {340, 333, 140, 339, 1};
    uint8_t flip[n] = {0, 1, 1, 0, 1};
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    size_t no = (size_t)n * ch * cw * 3;
    float *out = malloc(no * 4), *want = malloc(no * 4);
    be->resized_crop_u8(out, in, n, H, W, ch, cw, y0, x0, bh, bw, flip, mean, std);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < ch; y++) {
            int r0, r1;
            float ly;
            direct_tap((float)bh[i] / (float)ch, y, bh[i], &r0, &r1, &ly);
            const uint8_t *row0 = in + (((long)i * H + y0[i] + r0) * W + x0[i]) * 3;
            const uint8_t *row1 = in + (((long)i * H + y0[i] + r1) * W + x0[i]) * 3;
            for (int x = 0; x < cw; x++) {
                int c0, c1;
                float lx;
                direct_tap((float)bw[i] / (float)cw, flip[i] ? cw - 1 - x : x, bw[i], &c0, &c1, &lx);
                for (int k = 0; k < 3; k++) {
                    float t0 = (float)row0[c0 * 3 + k] * (1 - lx) + (float)row0[c1 * 3 + k] * lx;
                    float t1 = (float)row1[c0 * 3 + k] * (1 - lx) + (float)row1[c1 * 3 + k] * lx;
                    float v = t0 * (1 - ly) + t1 * ly;
                    want[(((size_t)i * ch + y) * cw + x) * 3 + k] = (v / 255.0f - mean[k]) / std[k];
                }
            }
        }
    size_t diff = 0;
    for (size_t o = 0; o < no; o++) diff += memcmp(&out[o], &want[o], 4) != 0;
    CHECK(diff == 0, "%zu of %zu values differ from the direct form", diff, no);
    free(in), free(out), free(want);
    check_end();
}

/* ---------------------------------------------------------------- determinism */

/* The results ops append to: one zeroed block per take, so that what an earlier take returned
 * stays where it is while the op that writes it takes more (a growing buffer would move it). */
typedef struct {
    float **blk;
    size_t *size, n, cap, len;
} results;

static float *take(results *r, size_t n)
{
    if (r->n == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->blk = realloc(r->blk, r->cap * sizeof *r->blk);
        r->size = realloc(r->size, r->cap * sizeof *r->size);
    }
    float *p = calloc(n ? n : 1, sizeof *p);
    r->blk[r->n] = p, r->size[r->n++] = n, r->len += n;
    return p;
}

/* Every result in take order, as one array of *len floats (the blocks freed). */
static float *results_join(results *r, size_t *len)
{
    float *v = malloc((r->len ? r->len : 1) * sizeof *v), *at = v;
    for (size_t i = 0; i < r->n; i++) {
        memcpy(at, r->blk[i], r->size[i] * sizeof *at);
        at += r->size[i];
        free(r->blk[i]);
    }
    free(r->blk), free(r->size);
    *len = r->len;
    return v;
}

/* The bf16 backend's convolutions and the ops on bf16 activations, as run_ops, each result
 * widened into res. */
static void run_ops_bf16_storage(results *res, const ds_conv_desc *cs, size_t ncs)
{
    const ds_backend *bb = &ds_backend_cpu_bf16;
    for (size_t k = 0; k < ncs; k++) {
        ds_conv_desc d = cs[k];
        d.in_t = d.c == 3 ? DS_F32 : DS_BF16, d.out_t = d.w_t = DS_BF16;  /* the stem: a float32 input */
        size_t ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.k,
               nw = (size_t)d.k * d.r * d.s * d.c;
        float *inf;
        ds_bf16 *in16 = randn16(ni, 1, &inf), *w = randn16(nw, 0.1, NULL), *g = randn16(no, 1, NULL);
        ds_bf16 *o = malloc((no > ni ? no : ni) * sizeof *o);
        const void *in = d.in_t == DS_BF16 ? (const void *)in16 : inf;
        void *ws = bb->alloc(bb->conv_workspace(&d));
        bb->conv_fwd(o, in, w, &d, ws);
        widen(take(res, no), o, no);
        if (d.in_t == DS_BF16) {
            bb->conv_bwd_data(o, g, w, &d, 0, ws);
            widen(take(res, ni), o, ni);
        }
        float *dw = take(res, nw);
        memset(dw, 0, nw * sizeof *dw);
        bb->conv_bwd_weight(dw, g, in, &d, ws);
        bb->free(ws), free(inf), free(in16), free(w), free(g), free(o);
    }
    const int m = 6 * 12 * 12, c = 64;
    const size_t n = (size_t)m * c, np = (size_t)6 * 6 * 6 * c;
    ds_bf16 *x = randn16(n, 2, NULL), *rs = randn16(n, 1, NULL), *g = randn16(n, 1, NULL), *o = malloc(n * sizeof *o),
            *o2 = malloc(n * sizeof *o2), *po = malloc(np * sizeof *po);
    float *gm = randn(c, 1), *bt = randn(c, 1), *st = take(res, 5 * c);
    memset(st, 0, 5 * c * sizeof *st);
    be->bn_fwd_train(o, NULL, st, st + c, st + 2 * c, NULL, NULL, x, gm, bt, rs, 1, m, c, 1e-5f, DS_BF16);
    widen(take(res, n), o, n);
    be->bn_bwd(o2, rs, st + 3 * c, st + 4 * c, g, o, NULL, x, gm, st, st + 2 * c, 1, m, c, DS_BF16);
    widen(take(res, n), o2, n), widen(take(res, n), rs, n);
    be->bn_fwd_infer(o, x, gm, bt, st, st + c, NULL, 1, m, c, 1e-5f, DS_BF16);
    widen(take(res, n), o, n);
    ds_pool_desc pd = {6, 12, 12, c, 3, 2, 1, 6, 6, DS_BF16};
    uint8_t pa[np];
    be->maxpool_fwd(po, pa, x, &pd);
    widen(take(res, np), po, np);
    float *paf = take(res, np);
    for (size_t i = 0; i < np; i++) paf[i] = pa[i];
    be->maxpool_bwd(o, g, x, po, pa, &pd);  /* the first np of g as dout */
    widen(take(res, n), o, n);
    be->avgpool_fwd(take(res, 6 * c), x, 6, 144, c, DS_BF16);
    be->avgpool_bwd(o, gm, 1, 144, c, DS_BF16);
    widen(take(res, 144 * c), o, 144 * c);
    be->add(x, g, n, DS_BF16);
    widen(take(res, n), x, n);
    free(x), free(rs), free(g), free(o), free(o2), free(po), free(gm), free(bt);
}

/* Backward-data accumulating into din (random values) on both backends, each of cs's shapes,
 * the bf16 backend on float32 and on bf16 storage: after everything else (the results of the
 * ops before keep their place in --bits files). */
static void run_ops_accumulate(results *res, const ds_conv_desc *cs, size_t ncs)
{
    const struct { const ds_backend *b; ds_dtype t; } runs[] = {
        {&ds_backend_cpu, DS_F32}, {&ds_backend_cpu_bf16, DS_F32}, {&ds_backend_cpu_bf16, DS_BF16}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs; r++)
        for (size_t k = 0; k < ncs; k++) {
            const ds_backend *cb = runs[r].b;
            ds_conv_desc d = cs[k];
            d.in_t = d.out_t = d.w_t = runs[r].t;
            size_t ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.k,
                   nw = (size_t)d.k * d.r * d.s * d.c;
            void *w = randn_as(nw, 0.1, d.w_t), *g = randn_as(no, 1, d.out_t), *din = randn_as(ni, 1, d.in_t);
            void *ws = cb->alloc(cb->conv_workspace(&d));
            cb->conv_bwd_data(din, g, w, &d, 1, ws);
            if (d.in_t == DS_BF16) widen(take(res, ni), din, ni);
            else memcpy(take(res, ni), din, ni * sizeof(float));
            cb->free(ws), free(w), free(g), free(din);
        }
}

/* Runs every op of the backend with t threads on fixed random data (a convolution of each
 * kind of main's list: implicit, row by row, im2col with blocked reductions, pointwise,
 * strided backward-data, transposed weight tiles) into one buffer of results: for the
 * thread-count test here, and with --bits for the comparison of the kernel sets across
 * processes (tests/shell/test_cpu_kernels.sh). bf16 backward-weight takes packs of OPS_PACK,
 * so that big gradients cross several. */
static float *run_ops(int threads, size_t *len)
{
    omp_set_num_threads(threads);
    const long pack = ds_cpu_conv_bf16_pack(OPS_PACK);  /* big bf16 gradients over several packs */
    ds_rng_init(&rng, 7, DS_RNG_DATA, 99);
    results res = {0};
    ds_conv_desc cs[OPS_COUNT(ops_convs)];
    size_t ncs = 0;
    for (size_t k = 0; k < OPS_COUNT(ops_convs); k++)
        if (ops_convs[k].use & OPS_BITS) cs[ncs++] = ops_conv_desc(&ops_convs[k], 0);
    // Both CPU backends' convolutions: fp32, and bf16 (whose kernel sets promise the same bits).
    const ds_backend *const convs[2] = {&ds_backend_cpu, &ds_backend_cpu_bf16};
    for (int b = 0; b < 2; b++)
        for (size_t k = 0; k < ncs; k++) {
            const ds_backend *cb = convs[b];
            const ds_conv_desc *d = &cs[k];
            size_t ni = (size_t)d->n * d->h * d->w * d->c, no = (size_t)d->n * d->p * d->q * d->k,
                   nw = (size_t)d->k * d->r * d->s * d->c;
            float *in = randn(ni, 1), *w = randn(nw, 0.1), *g = randn(no, 1);
            void *ws = cb->alloc(cb->conv_workspace(d));
            cb->conv_fwd(take(&res, no), in, w, d, ws);
            cb->conv_bwd_data(take(&res, ni), g, w, d, 0, ws);
            float *dw = take(&res, nw);
            memcpy(dw, w, nw * sizeof *dw);  // accumulates into what is there
            cb->conv_bwd_weight(dw, g, in, d, ws);
            cb->free(ws), free(in), free(w), free(g);
        }
    for (size_t k = 0; k < OPS_COUNT(ops_bns); k++) {   /* batch norm; pooling on its input */
        const ops_bn *t = &ops_bns[k];
        if (!(t->use & OPS_BITS)) continue;
        const int m = t->m, c = t->c;
        float *x = randn((size_t)m * c, t->spread), *gm = randn(c, 1), *bt = randn(c, 1),
              *g = randn((size_t)m * c, 1), *rs = t->residual ? randn((size_t)m * c, 1) : NULL;
        float *out = take(&res, (size_t)m * c), *st = take(&res, 5 * c);
        be->bn_fwd_train(out, NULL, st, st + c, st + 2 * c, NULL, NULL, x, gm, bt, rs, t->relu, m, c, 1e-5f, DS_F32);
        be->bn_bwd(take(&res, (size_t)m * c), rs ? take(&res, (size_t)m * c) : NULL, st + 3 * c, st + 4 * c, g, out,
                   NULL, x, gm, st, st + 2 * c, t->relu, m, c, DS_F32);
        be->bn_fwd_infer(take(&res, (size_t)m * c), x, gm, bt, st, st + c, rs, t->relu, m, c, 1e-5f, DS_F32);
        for (size_t j = 0; j < OPS_COUNT(ops_pools); j++) {
            const ops_pool *pt = &ops_pools[j];
            if (!(pt->use & OPS_BITS) || (size_t)pt->n * pt->h * pt->w * pt->c != (size_t)m * c) continue;
            ds_pool_desc pd = ops_pool_desc(pt, DS_F32);
            float *po = take(&res, (size_t)pd.n * pd.p * pd.q * pd.c);
            uint8_t *pa = malloc(pd.n * pd.p * pd.q * pd.c);
            be->maxpool_fwd(po, pa, x, &pd);
            be->maxpool_bwd(take(&res, (size_t)m * c), g, x, po, pa, &pd);
            float *paf = take(&res, (size_t)pd.n * pd.p * pd.q * pd.c);
            for (long i = 0; i < (long)pd.n * pd.p * pd.q * pd.c; i++) paf[i] = pa[i];
            free(pa);
            be->avgpool_fwd(take(&res, (size_t)pd.n * pd.c), x, pd.n, pd.h * pd.w, pd.c, DS_F32);
            be->avgpool_bwd(take(&res, (size_t)m * c), g, pd.n, pd.h * pd.w, pd.c, DS_F32);
        }
        free(x), free(gm), free(bt), free(g), free(rs);
    }
    for (size_t k = 0; k < OPS_COUNT(ops_linears); k++) {   /* linear, the loss on its shape, SGD on its weights */
        const ops_linear *t = &ops_linears[k];
        if (!(t->use & OPS_BITS)) continue;
        const int n = t->n, i = t->i, o = t->o;
        const size_t nw = (size_t)o * i;
        float *li = randn((size_t)n * i, 1), *lw = randn(nw, 1), *lb = randn(o, 1), *lg = randn((size_t)n * o, 1);
        be->linear_fwd(take(&res, (size_t)n * o), li, lw, lb, n, i, o);
        float *ldw = take(&res, nw), *ldb = take(&res, o);
        be->linear_bwd(take(&res, (size_t)n * i), ldw, ldb, lg, li, lw, n, i, o);
        for (size_t j = 0; j < OPS_COUNT(ops_xents); j++) {
            const ops_xent *xt = &ops_xents[j];
            if (!(xt->use & OPS_BITS) || xt->n != n || xt->c != o) continue;
            int32_t *labels = malloc(n * sizeof *labels);
            for (int r = 0; r < n; r++)
                labels[r] = ops_xent_padding(xt, r) ? -1 : (int32_t)ds_rng_below(&rng, o);
            be->softmax_xent(take(&res, n), take(&res, (size_t)n * o), lg, labels, n, o, xt->smoothing, 1.0f / n);
            free(labels);
        }
        float *sw = take(&res, nw), *sb = take(&res, nw);
        memcpy(sw, lw, nw * sizeof *sw);
        size_t first = 1;
        for (size_t j = 0; j < OPS_COUNT(ops_sgds); j++) {
            const ops_sgd *st = &ops_sgds[j];
            if (!(st->use & OPS_BITS)) continue;
            /* the first step on the first n x i weights only (li their gradient), then all */
            size_t len = first ? (nw < (size_t)n * i ? nw : (size_t)n * i) : nw;
            be->sgd_step(sw, sb, first ? li : lw, len, &st->lr, st->momentum, st->wd, st->nesterov, st->first);
            first = 0;
        }
        be->scale(sw, 0.37f, nw);
        be->axpy(sw, -1.3f, lw, nw);
        free(li), free(lw), free(lb), free(lg);
    }
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    for (size_t k = 0; k < OPS_COUNT(ops_inputs); k++) {   /* the input ops: crops and resized boxes */
        const ops_input *t = &ops_inputs[k];
        if (!(t->use & OPS_BITS)) continue;
        const int n = t->n, H = t->H, W = t->W, ch = t->ch, cw = t->cw;
        uint8_t *px = malloc((size_t)n * H * W * 3), *flip = malloc(n);
        int32_t *y0 = malloc(4 * n * sizeof *y0), *x0 = y0 + n, *bh = y0 + 2 * n, *bw = y0 + 3 * n;
        for (size_t i = 0; i < (size_t)n * H * W * 3; i++) px[i] = (uint8_t)ds_rng_below(&rng, 256);
        for (int i = 0; i < n; i++) {
            flip[i] = (uint8_t)(i % 3 != 0);
            y0[i] = (int32_t)ds_rng_below(&rng, (uint64_t)(H - ch + 1));
            x0[i] = (int32_t)ds_rng_below(&rng, (uint64_t)(W - cw + 1));
        }
        be->normalize_u8(take(&res, (size_t)n * ch * cw * 3), px, n, H, W, ch, cw, y0, x0, flip, mean, sd);
        for (int i = 0; i < n; i++) {  /* boxes smaller and larger than the crop, thin ones */
            bh[i] = 1 + (int32_t)ds_rng_below(&rng, (uint64_t)(H - y0[i]));
            bw[i] = 1 + (int32_t)ds_rng_below(&rng, (uint64_t)(W - x0[i]));
        }
        be->resized_crop_u8(take(&res, (size_t)n * ch * cw * 3), px, n, H, W, ch, cw, y0, x0, bh, bw, flip, mean, sd);
        free(px), free(flip), free(y0);
    }
    run_ops_bf16_storage(&res, cs, ncs);
    run_ops_accumulate(&res, cs, ncs);
    ds_cpu_conv_bf16_pack(pack);
    return results_join(&res, len);
}

/* --bits FILE: the raw results of run_ops on 2 threads. */
static int write_bits(const char *path)
{
    size_t n;
    float *v = run_ops(2, &n);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(v, sizeof *v, n, f) == n;
    if (f && fclose(f)) ok = 0;
    free(v);
    if (!ok) fprintf(stderr, "test_ops: cannot write %s\n", path);
    return ok ? 0 : 1;
}

static void test_thread_independence(void)
{
    check_begin("every op is bitwise the same for 1, 2 and 3 threads");
    int saved = omp_get_max_threads();
    size_t n1, n2, n3;
    float *a = run_ops(1, &n1), *b = run_ops(2, &n2), *c = run_ops(3, &n3);
    size_t d2 = 0, d3 = 0;
    for (size_t i = 0; i < n1; i++) d2 += memcmp(&a[i], &b[i], 4) != 0, d3 += memcmp(&a[i], &c[i], 4) != 0;
    CHECK(d2 == 0 && d3 == 0, "%zu (2 threads) and %zu (3 threads) of %zu values differ", d2, d3, n1);
    omp_set_num_threads(saved);
    free(a), free(b), free(c);
    check_end();
}

static void test_select(void)
{
    check_begin("backend selection");
    ds_backend_opts bf16 = {.precision = DS_PRECISION_BF16}, tf32 = {.precision = DS_PRECISION_TF32},
                    fp32 = {.precision = DS_PRECISION_FP32}, any = {.precision = DS_PRECISION_AUTO};
    const ds_backend *cpu = ds_backend_select(DS_DEVICE_CPU, &bf16);
    CHECK(cpu == &ds_backend_cpu_bf16 && cpu->precision == DS_PRECISION_BF16, "cpu in bf16");
    CHECK(cpu->host_memory && cpu->deterministic, "the CPU backend says host memory and deterministic");
    CHECK(ds_backend_select(DS_DEVICE_CPU, &fp32) == &ds_backend_cpu && ds_backend_cpu.precision == DS_PRECISION_FP32,
          "cpu in fp32");
    CHECK(ds_backend_select(DS_DEVICE_CPU, NULL) == &ds_backend_cpu, "cpu with default options: fp32");
    CHECK(ds_backend_select(DS_DEVICE_CPU, &any) == &ds_backend_cpu, "cpu with precision auto: fp32");
    fprintf(stderr, "  (an error message about tf32 on the CPU is expected here)\n");
    CHECK(ds_backend_select(DS_DEVICE_CPU, &tf32) == NULL, "tf32 on the CPU is refused, not computed in fp32");
    CHECK(ds_backend_select(DS_DEVICE_AUTO, NULL) != NULL, "auto always finds one");
    fprintf(stderr, "  (error messages about an unknown device and precision are expected here)\n");
    ds_device dev = DS_DEVICE_AUTO;
    CHECK(ds_device_parse("tpu", &dev) < 0, "unknown device accepted");
    CHECK(!ds_device_parse("cuda", &dev) && dev == DS_DEVICE_CUDA && !strcmp(ds_device_name(DS_DEVICE_CPU), "cpu"),
          "device names and the enum");
#ifndef DS_HAVE_CUDA
    CHECK(ds_backend_select(DS_DEVICE_CUDA, NULL) == NULL, "cuda in a build without CUDA");
#endif
    ds_precision pr = DS_PRECISION_FP32;
    CHECK(ds_precision_parse("bf16", &pr) == 0 && pr == DS_PRECISION_BF16 && ds_precision_parse("tf32", &pr) == 0 &&
              pr == DS_PRECISION_TF32 && ds_precision_parse("fp32", &pr) == 0 && pr == DS_PRECISION_FP32,
          "precision names parse to their enums");
    CHECK(ds_precision_parse("fp16", &pr) == -1 && pr == DS_PRECISION_FP32, "an unknown precision is refused");
    CHECK(!strcmp(ds_precision_name(DS_PRECISION_BF16), "bf16") && !strcmp(ds_precision_name(DS_PRECISION_TF32), "tf32") &&
              !strcmp(ds_precision_name(DS_PRECISION_AUTO), "auto"),
          "precision names");
    float *p = be->alloc(100);
    CHECK(p && ((uintptr_t)p & 63) == 0, "alloc is 64-byte aligned");
    int nz = 0;
    for (int i = 0; p && i < 25; i++) nz += p[i] != 0;
    CHECK(nz == 0, "alloc is zeroed");
    be->free(p);
    check_end();
}

/* ds_backend's members against ops_members (ops_cases.h): a member with no row there (the rows
 * must cover the struct, member by member, in its order), an op whose family has no case, an
 * op family that one of the two backend tests does not walk, or a member not there on the CPU
 * backend fails. */
static void test_every_member_has_a_row(void)
{
    check_begin("every_backend_op_has_a_case");
    const unsigned cpu_walks = OPS_FD | OPS_REF | OPS_BF16 | OPS_BF16_IO | OPS_ACC | OPS_BITS | OPS_FUSED,
                   gpu_walks = OPS_GPU | OPS_GPU_BF16_IO;
    size_t end = 0;
    const char *last = "the start";
    for (size_t i = 0; i < OPS_COUNT(ops_members); i++) {
        const ops_member *m = &ops_members[i];
        CHECK(m->offset >= end && m->offset - end < sizeof(void *), "ds_backend has a member between %s and %s with no row",
              last, m->member);
        end = m->offset + m->size, last = m->member;
        void *fn = NULL;
        memcpy(&fn, (const char *)&ds_backend_cpu + m->offset, m->size < sizeof fn ? m->size : sizeof fn);
        if (m->family == OPS_FAMILY_NONE) continue;
        if (m->family == OPS_FAMILY_GRAPH) {   /* the CPU has none: the model then calls the ops */
            CHECK(fn == NULL && m->tested_by && *m->tested_by, "%s: the CPU backend has one, or no test is named",
                  m->member);
            continue;
        }
        CHECK(m->size == sizeof fn && fn != NULL, "%s: the CPU backend has none", m->member);
        if (m->family == OPS_FAMILY_HOST) {
            CHECK(m->tested_by && *m->tested_by, "%s: no test named", m->member);
            continue;
        }
        CHECK(ops_family_rows(m->family) > 0, "%s: its family has no case", m->member);
    }
    CHECK(sizeof(ds_backend) - end < sizeof(void *), "ds_backend has members after %s with no row", last);
    /* each family of op rows is walked by test_ops and by test_cuda_ops */
    struct { const char *family; unsigned use; } walks[] = {{"conv", 0}, {"bn", 0}, {"pool", 0}, {"linear", 0},
                                                           {"xent", 0}, {"sgd", 0}, {"input", 0}};
    for (size_t i = 0; i < OPS_COUNT(ops_convs); i++) walks[0].use |= ops_convs[i].use;
    for (size_t i = 0; i < OPS_COUNT(ops_bns); i++) walks[1].use |= ops_bns[i].use;
    for (size_t i = 0; i < OPS_COUNT(ops_pools); i++) walks[2].use |= ops_pools[i].use;
    for (size_t i = 0; i < OPS_COUNT(ops_linears); i++) walks[3].use |= ops_linears[i].use;
    for (size_t i = 0; i < OPS_COUNT(ops_xents); i++) walks[4].use |= ops_xents[i].use;
    for (size_t i = 0; i < OPS_COUNT(ops_sgds); i++) walks[5].use |= ops_sgds[i].use;
    for (size_t i = 0; i < OPS_COUNT(ops_inputs); i++) walks[6].use |= ops_inputs[i].use;
    for (size_t i = 0; i < OPS_COUNT(walks); i++) {
        CHECK(walks[i].use & cpu_walks, "no %s row for test_ops", walks[i].family);
        CHECK(walks[i].use & gpu_walks, "no %s row for test_cuda_ops", walks[i].family);
    }
    check_end();
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "--bits")) return write_bits(argv[2]);
    if (argc != 1) {
        fprintf(stderr, "usage: test_ops [--bits FILE]\n");
        return 2;
    }
    ds_rng_init(&rng, 42, DS_RNG_DATA, 4);

    // The op table (ops_cases.h): each walk takes the rows marked for it.
    for (size_t i = 0; i < OPS_COUNT(ops_convs); i++) {
        const ops_conv *t = &ops_convs[i];
        ds_conv_desc d = ops_conv_desc(t, 0);
        if (t->use & (OPS_FD | OPS_REF)) test_conv(d, !!(t->use & OPS_FD));
        if (t->use & OPS_BF16) test_conv_bf16(d);
        if (t->use & OPS_BF16_IO) test_conv_bf16_storage(d, t->use & OPS_F32_IN ? DS_F32 : DS_BF16);
        if (t->use & OPS_ACC) {
            test_conv_accumulate(&ds_backend_cpu, d, DS_F32);
            test_conv_accumulate(&ds_backend_cpu_bf16, d, DS_F32);
            test_conv_accumulate(&ds_backend_cpu_bf16, d, DS_BF16);
        }
        if (t->use & OPS_FUSED) {  /* the variants in turn down the table */
            test_conv_bn(&ds_backend_cpu, d, DS_F32, 0, (int)i % 4);
            test_conv_bn(&ds_backend_cpu_bf16, d, DS_F32, 0, (int)(i + 1) % 4);
            test_conv_bn(&ds_backend_cpu_bf16, d, DS_BF16, !!(t->use & OPS_F32_IN), (int)(i + 2) % 4);
        }
    }
    for (size_t i = 0; i < OPS_COUNT(ops_bns); i++) {
        const ops_bn *t = &ops_bns[i];
        if (t->use & OPS_REF) test_bn(t->m, t->c, t->residual, t->relu, t->offset, t->spread);
        if (t->use & OPS_BF16_IO) test_ops_bf16_storage(t->m, t->c);
    }
    test_bn_sums_order();
    test_sum_groups_order();
    for (size_t i = 0; i < OPS_COUNT(ops_pools); i++) {
        const ops_pool *t = &ops_pools[i];
        if (!(t->use & OPS_REF)) continue;
        test_maxpool(t->n, t->h, t->w, t->c, t->k, t->stride, t->pad);
        test_avgpool(t->n, t->h * t->w, t->c);
    }
    test_maxpool_nan(DS_F32);
    test_maxpool_nan(DS_BF16);
    for (size_t i = 0; i < OPS_COUNT(ops_linears); i++)
        if (ops_linears[i].use & OPS_REF) test_linear(ops_linears[i].n, ops_linears[i].i, ops_linears[i].o);
    for (size_t i = 0; i < OPS_COUNT(ops_xents); i++)
        if (ops_xents[i].use & OPS_REF) test_xent(&ops_xents[i]);
    for (size_t i = 0; i < OPS_COUNT(ops_sgds); i++)
        if (ops_sgds[i].use & OPS_REF) test_sgd(&ops_sgds[i]);
    test_elementwise();
    test_normalize();
    test_resized_crop();
    test_resized_crop_wide();
    test_thread_independence();
    test_conv_no_images();
    test_select();
    test_every_member_has_a_row();
    return check_exit();
}
