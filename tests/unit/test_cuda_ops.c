/* Every op of the CUDA backend against the CPU backend (the reference), over the device rows
 * of the op table (ops_cases.h, which test_ops and ops_bench walk too): fp32 with
 * deterministic cuDNN algorithms; then the convolutions again in tf32 and bf16 (the
 * algorithms cuDNN's Find picks, and the bf16 copies of float32 tensors in the workspace).
 * Backward-data runs both overwriting din and accumulating into it (cuDNN's beta = 1 where
 * din is stored in the type it computes in, the result cast and added where not); the
 * outputs that are overwritten hold garbage first, so a beta that adds shows; and once more
 * with dout uploaded anew between backward-weight and backward-data, which must then not
 * take backward-weight's copy of the old dout.
 * Convolutions are planned at one size and also run at a smaller batch and input (short
 * batches, progressive resizing, validation at another crop), and a conv1-like layer whose
 * input needs no gradient is planned without backward-data. Then bf16 storage against the
 * CPU's bf16 backend: convolutions with bf16 activations and weights (and conv1's float32
 * input) under bf16 arithmetic, where cuDNN takes the bf16 tensors as they are, and under
 * tf32 and fp32, where they are copied to float32 and the results back; batch norm with
 * residual and ReLU, pooling, add and to_bf16 on bf16 tensors. Where no GPU is visible (or
 * the build has no CUDA) the test prints one SKIP line (counted apart by tests/run.sh, not
 * as a pass); a GPU that is there but cannot start is a failure. Also the two streams, marks
 * and page-locked copies the feed and the loss read late rely on, upload's source reused at
 * once (past the staging ring's size), the feed itself (freed with a copy in flight too),
 * and the model's losses read a step late against those read at once. The CUDA table is
 * checked member by member against ops_members (cuda_backend_op_has_a_case). Every device buffer
 * the test allocates carries a canary tail, checked at the end of each case and at its free:
 * a write past an output fails the case on a GPU too, where no sanitizer sees device memory.
 * Batch norm and pooling run again on tensors one float past 16-byte alignment, where the
 * vector kernels must not be taken (the emulated device checks every 16-byte access).
 *
 * Tolerance: |gpu - cpu| <= tol |cpu| + tol max|cpu|, tol = 1e-4 in fp32: both compute in
 * fp32 but sum in different orders; a sum of K products then differs by ~K * 2^-24 of its
 * largest terms, which for the K <= 600 here stays below 1e-4 of the tensor's scale. tf32
 * and bf16 round each product's inputs to 10 and 7 mantissa bits (2^-11, 2^-8 relative): a
 * sum of K such products with random signs stays within ~1e-2 of the tensor's scale.
 * Against the CPU's bf16 backend both sides take the same bf16 values. Float32 results of
 * float arithmetic (statistics, dgamma, dbeta, the average pool) differ only by the order
 * of float sums: 1e-4 as in fp32 (TOL_F32). A result stored in bf16 may be one rounding
 * (2^-8 relative) apart where the float values on the two sides straddle a rounding
 * boundary, a convolution's sums of exact bf16 products differ by their order (and cuDNN
 * rounds a bf16 weight gradient to bf16 before adding it), and the CPU's max-pool backward
 * rounds after each of the (at most 4 here) windows it adds while the GPU's sums them in
 * float and rounds once (a few 2^-9 of the partial sums): 1e-2 (TOL_BF16). to_bf16 and add
 * are defined to the bit (one rounding to nearest even of the float value). */
#include "../check.h"
#include "backend.h"

#include <stdio.h>

#ifndef DS_HAVE_CUDA
int main(void)
{
    printf("SKIP cuda ops: this build has no CUDA\n");
    return 0;
}
#else

#include "backend/cuda.h"
#include "feed.h"
#include "log.h"
#include "model.h"
#include "ops_cases.h"
#include "rng.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const ds_backend *C = &ds_backend_cpu, *G;
static uint64_t next_id = 1;
static double tol = 1e-4;      /* of cmp below: 1e-2 for the tf32 and bf16 convolutions */

#define TOL_F32 1e-4
#define TOL_BF16 1e-2

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) ds_die("out of memory");
    return p;
}

/* n uniform values in [lo, hi) on the host (a fresh stream per call). */
static float *host_rand(size_t n, float lo, float hi)
{
    float *x = xmalloc(n * sizeof *x);
    ds_rng r;
    ds_rng_init(&r, 7, DS_RNG_DATA, next_id++);
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * ds_rng_float(&r);
    return x;
}

typedef uint16_t bf16;   /* the bits of a bfloat16 */

/* x rounded to bf16, to nearest even (no NaN in this test's data) */
static bf16 bf16_round(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    u += 0x7fffu + ((u >> 16) & 1);
    return (bf16)(u >> 16);
}

static float bf16_value(bf16 h)
{
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

/* n uniform values in [lo, hi) stored in t (bf16: rounded) */
static void *host_rand_as(size_t n, float lo, float hi, ds_dtype t)
{
    float *x = host_rand(n, lo, hi);
    if (t == DS_F32) return x;
    bf16 *h = xmalloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) h[i] = bf16_round(x[i]);
    free(x);
    return h;
}

/* n values stored in t, as floats (a new array) */
static float *widen(const void *x, size_t n, ds_dtype t)
{
    float *y = xmalloc(n * sizeof *y);
    for (size_t i = 0; i < n; i++) y[i] = t == DS_BF16 ? bf16_value(((const bf16 *)x)[i]) : ((const float *)x)[i];
    return y;
}

/* Every device buffer the test allocates has a canary tail: CANARY bytes of a pattern after
 * its end, checked when it is freed and at the end of each case, so an op that writes past
 * its output fails its case on a GPU too (where no sanitizer sees device memory). */
#define CANARY 256
static struct { uint8_t *p, *base; size_t bytes; } live[512];
static uint8_t canary[CANARY];
/* bytes every buffer starts past its allocation's (256-byte aligned) start: 4 for the cases
 * that run batch norm and pooling on tensors one float off 16-byte alignment, where the
 * kernels must take their scalar path (a vector access there faults on a GPU) */
static size_t dev_offset;

static const char *offset_words(void) { return dev_offset ? ", tensors 4 bytes off 16-byte alignment" : ""; }

static void *dev_alloc(size_t bytes)
{
    uint8_t *base = G->alloc(bytes + dev_offset + CANARY);
    if (!base) ds_die("GPU allocation of %zu bytes failed", bytes);
    uint8_t *d = base + dev_offset;
    if (!canary[0])
        for (int i = 0; i < CANARY; i++) canary[i] = (uint8_t)(0xa5 ^ i * 29);
    G->upload(d + bytes, canary, CANARY);
    size_t i = 0;
    while (i < sizeof live / sizeof *live && live[i].p) i++;
    if (i == sizeof live / sizeof *live) ds_die("test_cuda_ops: more than %zu live buffers", i);
    live[i].p = d, live[i].base = base, live[i].bytes = bytes;
    return d;
}

/* 1 when the canary after live buffer i is whole; if not, reports it under the current case
 * and puts it back (so that one write past an end is reported once) */
static int canary_whole(size_t i)
{
    uint8_t got[CANARY];
    G->download(got, live[i].p + live[i].bytes, CANARY);
    if (!memcmp(got, canary, CANARY)) return 1;
    CHECK(0, "a device buffer of %zu bytes was written past its end", live[i].bytes);
    G->upload(live[i].p + live[i].bytes, canary, CANARY);
    return 0;
}

static void dev_free(void *p)
{
    void *base = p;
    for (size_t i = 0; p && i < sizeof live / sizeof *live; i++)
        if (live[i].p == p) {
            if (!canary_whole(i)) {
                printf("FAIL %s (a canary, found at its buffer's free)\n", check_case_name);
                check_total_failures++;
            }
            base = live[i].base;
            live[i].p = NULL;
            break;
        }
    G->free(base);
}

/* check_end, once every live buffer's canary is checked */
static void case_end(void)
{
    for (size_t i = 0; i < sizeof live / sizeof *live; i++)
        if (live[i].p) canary_whole(i);
    check_end();
}

static void *to_dev(const void *h, size_t bytes)
{
    void *d = dev_alloc(bytes);
    G->upload(d, h, bytes);
    return d;
}

/* Downloads n values stored in t from the GPU and compares them, as floats, with the CPU's
 * (stored alike), within tl (see the top). */
static void cmp_as(const char *what, const void *dev, const void *ref, size_t n, ds_dtype t, double tl)
{
    void *raw = xmalloc(n * ds_dtype_size(t));
    G->download(raw, dev, n * ds_dtype_size(t));
    float *got = widen(raw, n, t), *want = widen(ref, n, t);
    double scale = 0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(want[i]));
    check_close(what, got, want, n, tl * scale, tl);
    free(raw), free(got), free(want);
}

/* Downloads n floats from the GPU and compares them with the CPU's, within tol. */
static void cmp(const char *what, const float *dev, const float *ref, size_t n)
{
    cmp_as(what, dev, ref, n, DS_F32, tol);
}

/* 1 when n values stored in t on the GPU are bitwise the CPU's */
static int same_bits(const void *dev, const void *ref, size_t n, ds_dtype t)
{
    void *got = xmalloc(n * ds_dtype_size(t));
    G->download(got, dev, n * ds_dtype_size(t));
    int same = memcmp(got, ref, n * ds_dtype_size(t)) == 0;
    free(got);
    return same;
}

static float *dup(const float *x, size_t n)
{
    float *y = xmalloc(n * sizeof *y);
    memcpy(y, x, n * sizeof *y);
    return y;
}

/* A row of the op table (ops_cases.h), planned (conv_workspace) at its planned size and run at
 * its own: the model plans for max_batch at its largest input and runs shorter batches (an
 * evaluation's last one) and smaller inputs too. OPS_NO_DX: the input needs no gradient
 * (conv1), so backward-data is neither planned nor run. */
static void test_conv_case(const ops_conv *t)
{
    ds_conv_desc d = ops_conv_desc(t, 1), run = ops_conv_desc(t, 0);
    const int n = run.n, h = run.h, w = run.w, c = t->c, k = t->k;
    char name[192];
    snprintf(name, sizeof name, "cuda %s conv %dx%dx%dx%d k%d %dx%d/%d pad %d (planned for %dx%dx%d)%s",
             ds_precision_name(G->precision), n, h, w, c, k, t->r, t->s, t->stride, t->pad, d.n, d.h, d.w,
             d.no_dx ? " without backward-data" : "");
    check_begin(name);
    size_t cws = C->conv_workspace(&d), gws = G->conv_workspace(&d);
    CHECK(gws != SIZE_MAX, "the GPU could not plan it");
    if (gws == SIZE_MAX) {
        case_end();
        return;
    }
    d = run;
    size_t ni = (size_t)n * h * w * c, nw = (size_t)k * t->r * t->s * c, no = (size_t)n * d.p * d.q * k;
    float *in = host_rand(ni, -1, 1), *wt = host_rand(nw, -0.5f, 0.5f), *dout = host_rand(no, -1, 1);
    float *dw0 = host_rand(nw, -0.1f, 0.1f);   /* bwd_weight must add to what is there */
    float *din0 = host_rand(ni, -1, 1);         /* another consumer's part, which bwd_data adds to */
    void *cw = xmalloc(cws), *gw = dev_alloc(gws ? gws : 1);
    float *out = xmalloc(no * sizeof *out), *din = xmalloc(ni * sizeof *din), *dw = dup(dw0, nw),
          *dacc = dup(din0, ni);
    C->conv_fwd(out, in, wt, &d, cw);
    if (!d.no_dx) C->conv_bwd_data(din, dout, wt, &d, 0, cw);
    if (!d.no_dx) C->conv_bwd_data(dacc, dout, wt, &d, 1, cw);
    C->conv_bwd_weight(dw, dout, in, &d, cw);
    float *g_in = to_dev(in, ni * 4), *g_w = to_dev(wt, nw * 4), *g_dout = to_dev(dout, no * 4);
    /* garbage first: forward and the overwriting backward-data must not add to what is there */
    float *junk_o = host_rand(no, -9, 9), *junk_i = host_rand(ni, -9, 9);
    float *g_out = to_dev(junk_o, no * 4), *g_din = to_dev(junk_i, ni * 4), *g_dw = to_dev(dw0, nw * 4),
          *g_dacc = to_dev(din0, ni * 4);
    G->conv_fwd(g_out, g_in, g_w, &d, gw);
    /* the model's order: weight gradient, then data gradient (the bf16 dout is shared) */
    G->conv_bwd_weight(g_dw, g_dout, g_in, &d, gw);
    if (!d.no_dx) G->conv_bwd_data(g_din, g_dout, g_w, &d, 0, gw);
    /* accumulating: beta = 1 in cuDNN, or (bf16 arithmetic) the bf16 result added */
    if (!d.no_dx) G->conv_bwd_data(g_dacc, g_dout, g_w, &d, 1, gw);
    cmp("conv_fwd", g_out, out, no);
    if (!d.no_dx) cmp("conv_bwd_data", g_din, din, ni);
    if (!d.no_dx) cmp("conv_bwd_data (accumulating)", g_dacc, dacc, ni);
    cmp("conv_bwd_weight (accumulated)", g_dw, dw, nw);
    /* dout uploaded anew between the two backward ops: backward-data takes the new one, not
     * the copy of the old that backward-weight may have left in the workspace */
    if (!d.no_dx) {
        float *dout2 = host_rand(no, -1, 1), *din2 = xmalloc(ni * sizeof *din2);
        C->conv_bwd_data(din2, dout2, wt, &d, 0, cw);
        G->conv_fwd(g_out, g_in, g_w, &d, gw);   /* then backward-weight copies dout afresh */
        G->conv_bwd_weight(g_dw, g_dout, g_in, &d, gw);
        G->upload(g_dout, dout2, no * 4);
        G->conv_bwd_data(g_din, g_dout, g_w, &d, 0, gw);
        cmp("conv_bwd_data of a dout uploaded after backward-weight", g_din, din2, ni);
        free(dout2), free(din2);
    }
    case_end();
    dev_free(g_in), dev_free(g_w), dev_free(g_dout), dev_free(g_out), dev_free(g_din), dev_free(g_dw), dev_free(g_dacc);
    dev_free(gw);
    free(in), free(wt), free(dout), free(dw0), free(din0), free(cw), free(out), free(din), free(dw), free(dacc);
    free(junk_o), free(junk_i);
}

/* The convolutions of one precision: the op table's device rows (short batches, smaller
 * inputs than planned, conv1 without backward-data, sizes whose slot is set up and reused). */
static void test_convs(void)
{
    for (size_t i = 0; i < OPS_COUNT(ops_convs); i++)
        if (ops_convs[i].use & OPS_GPU) test_conv_case(&ops_convs[i]);
}

static void test_bn(const ops_bn *t)
{
    const int m = t->m, c = t->c, relu = t->relu, residual = t->residual;
    const float lo = (float)(t->offset - 2 * t->spread), hi = (float)(t->offset + 2 * t->spread);
    char name[96];
    snprintf(name, sizeof name, "cuda batch norm m=%d c=%d%s%s%s", m, c, relu ? " relu" : "", residual ? " +residual" : "",
             offset_words());
    check_begin(name);
    size_t mc = (size_t)m * c;
    /* a mean far from zero checks the shifted variance sums */
    float *in = host_rand(mc, lo, hi), *res = host_rand(mc, -1, 1), *gam = host_rand(c, 0.5f, 1.5f),
          *bet = host_rand(c, -0.5f, 0.5f), *dout = host_rand(mc, -1, 1), *rm = host_rand(c, 2, 5),
          *rv = host_rand(c, 0.5f, 2), *dg0 = host_rand(c, -1, 1), *db0 = host_rand(c, -1, 1);
    float *out = xmalloc(mc * 4), *mean = xmalloc(c * 4), *var = xmalloc(c * 4), *is = xmalloc(c * 4);
    float *inf = xmalloc(mc * 4), *din = xmalloc(mc * 4), *dres = xmalloc(mc * 4), *dy = dup(dout, mc);
    float *dg = dup(dg0, c), *db = dup(db0, c);
    const float *r = residual ? res : NULL;
    /* the running statistics' sums from rm, rv (any start will do) */
    float *ms = dup(rm, c), *vs = dup(rv, c);
    C->bn_fwd_train(out, NULL, mean, var, is, ms, vs, in, gam, bet, r, relu, m, c, 1e-5f, DS_F32);
    C->bn_fwd_infer(inf, in, gam, bet, rm, rv, r, relu, m, c, 1e-5f, DS_F32);
    C->bn_bwd(din, residual ? dres : NULL, dg, db, dy, out, NULL, in, gam, mean, is, relu, m, c, DS_F32);

    float *g_in = to_dev(in, mc * 4), *g_res = to_dev(res, mc * 4), *g_gam = to_dev(gam, c * 4),
          *g_bet = to_dev(bet, c * 4), *g_dy = to_dev(dout, mc * 4), *g_rm = to_dev(rm, c * 4),
          *g_rv = to_dev(rv, c * 4), *g_dg = to_dev(dg0, c * 4), *g_db = to_dev(db0, c * 4);
    float *g_out = dev_alloc(mc * 4), *g_mean = dev_alloc(c * 4), *g_var = dev_alloc(c * 4),
          *g_is = dev_alloc(c * 4), *g_inf = dev_alloc(mc * 4), *g_din = dev_alloc(mc * 4),
          *g_dres = dev_alloc(mc * 4);
    const float *gr = residual ? g_res : NULL;
    float *g_ms = to_dev(rm, c * 4), *g_vs = to_dev(rv, c * 4);
    G->bn_fwd_train(g_out, NULL, g_mean, g_var, g_is, g_ms, g_vs, g_in, g_gam, g_bet, gr, relu, m, c, 1e-5f, DS_F32);
    G->bn_fwd_infer(g_inf, g_in, g_gam, g_bet, g_rm, g_rv, gr, relu, m, c, 1e-5f, DS_F32);
    G->bn_bwd(g_din, residual ? g_dres : NULL, g_dg, g_db, g_dy, g_out, NULL, g_in, g_gam, g_mean, g_is, relu, m, c,
              DS_F32);
    cmp("bn_fwd_train out", g_out, out, mc);
    cmp("bn mean", g_mean, mean, c);
    cmp("bn var (biased)", g_var, var, c);
    cmp("bn invstd", g_is, is, c);
    cmp("bn mean_sum += mean", g_ms, ms, c);
    cmp("bn var_sum += unbiased var", g_vs, vs, c);
    dev_free(g_ms), dev_free(g_vs), free(ms), free(vs);
    cmp("bn_fwd_infer out", g_inf, inf, mc);
    /* elementwise, with the same coefficient on both sides: the CPU's bits (cuda_kernels.h) */
    CHECK(same_bits(g_inf, inf, mc, DS_F32), "bn_fwd_infer out: not bitwise the CPU's");
    cmp("bn_bwd din", g_din, din, mc);
    cmp("bn_bwd dout after the ReLU mask", g_dy, dy, mc);
    if (residual) cmp("bn_bwd dresidual", g_dres, dres, mc);
    cmp("bn_bwd dgamma (accumulated)", g_dg, dg, c);
    cmp("bn_bwd dbeta (accumulated)", g_db, db, c);
    if (residual) {   /* the memory plan's alias: the residual's gradient is dout itself */
        float *g_dy2 = to_dev(dout, mc * 4), *g_dg2 = to_dev(dg0, c * 4), *g_db2 = to_dev(db0, c * 4);
        G->bn_bwd(g_din, g_dy2, g_dg2, g_db2, g_dy2, g_out, NULL, g_in, g_gam, g_mean, g_is, relu, m, c, DS_F32);
        cmp("bn_bwd din, dresidual == dout", g_din, din, mc);
        cmp("bn_bwd dresidual == dout", g_dy2, dres, mc);
        dev_free(g_dy2), dev_free(g_dg2), dev_free(g_db2);
    }
    case_end();
    float *gs[] = {g_in, g_res, g_gam, g_bet, g_dy, g_rm, g_rv, g_dg, g_db, g_out, g_mean, g_var, g_is, g_inf, g_din, g_dres};
    for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) dev_free(gs[i]);
    float *hs[] = {in, res, gam, bet, dout, rm, rv, dg0, db0, out, mean, var, is, inf, din, dres, dy, dg, db};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) free(hs[i]);
}

/* Max pool forward (with its argmax, and without: inference) and backward on the GPU against
 * the CPU's, bitwise (the kernels keep the CPU's bits, test_cuda_bodies), on `in` of
 * d->t with ties, NaN and -inf sprinkled over it: the argmax must be the backward's first
 * maximum, not the forward's maximum. Once with the argmax as the plan places it, once one
 * byte off its alignment. */
static void maxpool_against_cpu(const ds_pool_desc *d, void *in, const void *dout)
{
    const size_t es = ds_dtype_size(d->t), ni = (size_t)d->n * d->h * d->w * d->c,
                 no = (size_t)d->n * d->p * d->q * d->c;
    for (size_t i = 0; i < ni; i += 7) {
        const float v = i % 3 == 0 ? NAN : i % 3 == 1 ? -INFINITY : 0.25f;   /* 0.25: ties */
        if (d->t == DS_BF16) ((bf16 *)in)[i] = isnan(v) ? 0x7fc0 : bf16_round(v);
        else ((float *)in)[i] = v;
    }
    void *out = xmalloc(no * es), *din = xmalloc(ni * es);
    uint8_t *arg = xmalloc(no), *got = xmalloc(no);
    C->maxpool_fwd(out, arg, in, d);
    C->maxpool_bwd(din, dout, in, out, arg, d);
    void *g_in = to_dev(in, ni * es), *g_dout = to_dev(dout, no * es), *g_out = dev_alloc(no * es);
    uint8_t *g_arg = dev_alloc(no + 1);
    for (int off = 0; off <= 1; off++) {
        void *g_din = to_dev(in, ni * es);   /* garbage first: maxpool_bwd must overwrite */
        G->maxpool_fwd(g_out, g_arg + off, g_in, d);
        G->maxpool_bwd(g_din, g_dout, g_in, g_out, g_arg + off, d);
        G->download(got, g_arg + off, no);
        CHECK(same_bits(g_out, out, no, d->t), "maxpool_fwd: not the CPU's bits");
        CHECK(!memcmp(got, arg, no), "maxpool_fwd's argmax%s: not the CPU's", off ? " (unaligned)" : "");
        CHECK(same_bits(g_din, din, ni, d->t), "maxpool_bwd%s: not the CPU's bits", off ? " (unaligned argmax)" : "");
        dev_free(g_din);
    }
    dev_free(g_out);
    g_out = to_dev(in, no * es);
    G->maxpool_fwd(g_out, NULL, g_in, d);
    CHECK(same_bits(g_out, out, no, d->t), "maxpool_fwd without an argmax: not the CPU's bits");
    dev_free(g_in), dev_free(g_dout), dev_free(g_out), dev_free(g_arg);
    free(out), free(din), free(arg), free(got);
}

static void test_pool(const ops_pool *t)
{
    char name[128];
    snprintf(name, sizeof name, "cuda max pool %dx%dx%dx%d %dx%d/%d pad %d and global average pool%s", t->n, t->h,
             t->w, t->c, t->k, t->k, t->stride, t->pad, offset_words());
    check_begin(name);
    ds_pool_desc d = ops_pool_desc(t, DS_F32);
    size_t ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.c;
    float *in = host_rand(ni, -1, 1), *dout = host_rand(no, -1, 1);
    for (size_t i = 0; i < ni; i += 5) in[i] = 0.25f;   /* ties: the first maximum must win */
    float *out = xmalloc(no * 4), *din = xmalloc(ni * 4);
    uint8_t *arg = xmalloc(no);
    C->maxpool_fwd(out, arg, in, &d);
    C->maxpool_bwd(din, dout, in, out, arg, &d);
    float *g_in = to_dev(in, ni * 4), *g_dout = to_dev(dout, no * 4), *g_out = dev_alloc(no * 4),
          *g_din = to_dev(in, ni * 4);   /* garbage first: maxpool_bwd must overwrite */
    uint8_t *g_arg = dev_alloc(no);
    G->maxpool_fwd(g_out, g_arg, g_in, &d);
    G->maxpool_bwd(g_din, g_dout, g_in, g_out, g_arg, &d);
    cmp("maxpool_fwd", g_out, out, no);
    cmp("maxpool_bwd", g_din, din, ni);
    /* a choice and sums in the CPU's order, rounded as the CPU rounds: its bits */
    CHECK(same_bits(g_out, out, no, DS_F32), "maxpool_fwd: not bitwise the CPU's");
    CHECK(same_bits(g_din, din, ni, DS_F32), "maxpool_bwd: not bitwise the CPU's");
    maxpool_against_cpu(&d, in, dout);
    dev_free(g_arg), free(arg);

    int n = d.n, hw = d.h * d.w, c = d.c;
    float *x = host_rand((size_t)n * hw * c, -1, 1), *dy = host_rand((size_t)n * c, -1, 1);
    float *y = xmalloc((size_t)n * c * 4), *dx = xmalloc((size_t)n * hw * c * 4);
    C->avgpool_fwd(y, x, n, hw, c, DS_F32);
    C->avgpool_bwd(dx, dy, n, hw, c, DS_F32);
    float *g_x = to_dev(x, (size_t)n * hw * c * 4), *g_dy = to_dev(dy, (size_t)n * c * 4),
          *g_y = dev_alloc((size_t)n * c * 4), *g_dx = dev_alloc((size_t)n * hw * c * 4);
    G->avgpool_fwd(g_y, g_x, n, hw, c, DS_F32);
    G->avgpool_bwd(g_dx, g_dy, n, hw, c, DS_F32);
    cmp("avgpool_fwd", g_y, y, (size_t)n * c);
    cmp("avgpool_bwd", g_dx, dx, (size_t)n * hw * c);
    case_end();
    dev_free(g_in), dev_free(g_dout), dev_free(g_out), dev_free(g_din), dev_free(g_x), dev_free(g_dy), dev_free(g_y), dev_free(g_dx);
    free(in), free(dout), free(out), free(din), free(x), free(dy), free(y), free(dx);
}

static void test_linear(const ops_linear *t, int with_din)
{
    char title[96];
    snprintf(title, sizeof title, "cuda linear n%d %d -> %d with bias%s", t->n, t->i, t->o, with_din ? "" : ", no din");
    check_begin(title);
    int n = t->n, i = t->i, o = t->o;
    float *x = host_rand((size_t)n * i, -1, 1), *w = host_rand((size_t)o * i, -0.3f, 0.3f),
          *b = host_rand(o, -1, 1), *dy = host_rand((size_t)n * o, -1, 1),
          *dw0 = host_rand((size_t)o * i, -1, 1), *db0 = host_rand(o, -1, 1);
    float *y = xmalloc((size_t)n * o * 4), *dx = xmalloc((size_t)n * i * 4), *dw = dup(dw0, (size_t)o * i), *db = dup(db0, o);
    C->linear_fwd(y, x, w, b, n, i, o);
    C->linear_bwd(with_din ? dx : NULL, dw, db, dy, x, w, n, i, o);
    float *g_x = to_dev(x, (size_t)n * i * 4), *g_w = to_dev(w, (size_t)o * i * 4), *g_b = to_dev(b, o * 4),
          *g_dy = to_dev(dy, (size_t)n * o * 4), *g_dw = to_dev(dw0, (size_t)o * i * 4), *g_db = to_dev(db0, o * 4),
          *g_y = dev_alloc((size_t)n * o * 4), *g_dx = dev_alloc((size_t)n * i * 4);
    G->linear_fwd(g_y, g_x, g_w, g_b, n, i, o);
    G->linear_bwd(with_din ? g_dx : NULL, g_dw, g_db, g_dy, g_x, g_w, n, i, o);
    cmp("linear_fwd", g_y, y, (size_t)n * o);
    if (with_din) cmp("linear_bwd din", g_dx, dx, (size_t)n * i);
    cmp("linear_bwd dw (accumulated)", g_dw, dw, (size_t)o * i);
    cmp("linear_bwd db (accumulated)", g_db, db, o);
    case_end();
    dev_free(g_x), dev_free(g_w), dev_free(g_b), dev_free(g_dy), dev_free(g_dw), dev_free(g_db), dev_free(g_y), dev_free(g_dx);
    free(x), free(w), free(b), free(dy), free(dw0), free(db0), free(y), free(dx), free(dw), free(db);
}

static void test_loss(const ops_xent *t)
{
    char name[96];
    const float smoothing = t->smoothing;
    snprintf(name, sizeof name, "cuda softmax cross-entropy n%d c%d, smoothing %.1f", t->n, t->c, smoothing);
    check_begin(name);
    int n = t->n, c = t->c;
    float *z = host_rand((size_t)n * c, -8, 8);
    int32_t *lab = xmalloc(n * sizeof *lab);   /* the first and last class; -1: a padding sample */
    for (int i = 0; i < n; i++)
        lab[i] = i == 0 ? 0 : i == 1 ? c - 1 : ops_xent_padding(t, i) ? -1 : (int32_t)((i * 7919u + 17) % (unsigned)c);
    float *loss = xmalloc(n * 4), *dz = xmalloc((size_t)n * c * 4);
    C->softmax_xent(loss, dz, z, lab, n, c, smoothing, 1.0f / 24);
    float *g_z = to_dev(z, (size_t)n * c * 4), *g_loss = dev_alloc(n * 4), *g_dz = dev_alloc((size_t)n * c * 4);
    int32_t *g_lab = to_dev(lab, n * sizeof *lab);
    G->softmax_xent(g_loss, g_dz, g_z, g_lab, n, c, smoothing, 1.0f / 24);
    cmp("loss", g_loss, loss, n);
    cmp("dlogits", g_dz, dz, (size_t)n * c);
    case_end();
    dev_free(g_z), dev_free(g_loss), dev_free(g_dz), dev_free(g_lab);
    free(z), free(loss), free(dz), free(lab);
}

static void test_sgd_elementwise(void)
{
    check_begin("cuda sgd, scale, axpy, add");
    size_t n = 100003;
    float *w = host_rand(n, -1, 1), *buf = host_rand(n, -1, 1), *grad = host_rand(n, -1, 1), *x = host_rand(n, -1, 1);
    float *g_w = to_dev(w, n * 4), *g_buf = to_dev(buf, n * 4), *g_grad = to_dev(grad, n * 4), *g_x = to_dev(x, n * 4);
    /* the op table's rules in turn on one tensor: first step, nesterov with weight decay,
     * plain momentum, no momentum; the rate in device memory, read when the kernel runs
     * (backend.h), written before each */
    float *g_lr = dev_alloc(sizeof(float));
    for (size_t s = 0; s < OPS_COUNT(ops_sgds); s++) {
        const ops_sgd *t = &ops_sgds[s];
        if (!(t->use & OPS_GPU)) continue;
        G->upload(g_lr, &t->lr, sizeof t->lr);
        C->sgd_step(w, buf, grad, n, &t->lr, t->momentum, t->wd, t->nesterov, t->first);
        G->sgd_step(g_w, g_buf, g_grad, n, g_lr, t->momentum, t->wd, t->nesterov, t->first);
    }
    cmp("sgd weights", g_w, w, n);
    cmp("sgd momentum", g_buf, buf, n);
    dev_free(g_lr);
    C->scale(x, 0.37f, n);
    G->scale(g_x, 0.37f, n);
    cmp("scale", g_x, x, n);
    C->axpy(x, -1.5f, grad, n);
    G->axpy(g_x, -1.5f, g_grad, n);
    cmp("axpy", g_x, x, n);
    C->add(x, grad, n, DS_F32);
    G->add(g_x, g_grad, n, DS_F32);
    cmp("add", g_x, x, n);
    /* memory ops: zero, copy, and alloc hands out zeroed memory */
    float *g_z = dev_alloc(n * 4);
    cmp("alloc is zeroed", g_z, memset(x, 0, n * 4), n);
    G->copy(g_z, g_grad, n * 4);
    cmp("copy", g_z, grad, n);
    G->zero(g_z, n * 4);
    cmp("zero", g_z, x, n);
    case_end();
    dev_free(g_w), dev_free(g_buf), dev_free(g_grad), dev_free(g_x), dev_free(g_z);
    free(w), free(buf), free(grad), free(x);
}

static void test_normalize(const ops_input *t)
{
    char title[96];
    snprintf(title, sizeof title, "cuda normalize_u8 %dx%d to %dx%d with crop and flip", t->H, t->W, t->ch, t->cw);
    check_begin(title);
    int n = t->n, H = t->H, W = t->W, ch = t->ch, cw = t->cw;
    size_t nin = (size_t)n * H * W * 3, nout = (size_t)n * ch * cw * 3;
    uint8_t *in = xmalloc(nin);
    for (size_t i = 0; i < nin; i++) in[i] = (uint8_t)(i * 131 + i / 7);
    int32_t y0[5], x0[5];   /* crops at the corners and between */
    uint8_t flip[5];
    for (int i = 0; i < n; i++)
        y0[i] = i * 5 % (H - ch + 1), x0[i] = (i * 7 + (i == 1) * (W - cw)) % (W - cw + 1), flip[i] = i % 3 != 0;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    float *out = xmalloc(nout * 4);
    C->normalize_u8(out, in, n, H, W, ch, cw, y0, x0, flip, mean, std);
    uint8_t *g_in = to_dev(in, nin), *g_flip = to_dev(flip, sizeof flip);
    int32_t *g_y0 = to_dev(y0, sizeof y0), *g_x0 = to_dev(x0, sizeof x0);
    float *g_out = dev_alloc(nout * 4);
    G->normalize_u8(g_out, g_in, n, H, W, ch, cw, g_y0, g_x0, g_flip, mean, std);
    cmp("normalize_u8", g_out, out, nout);
    C->normalize_u8(out, in, n, H, W, ch, cw, y0, x0, NULL, mean, std);
    G->normalize_u8(g_out, g_in, n, H, W, ch, cw, g_y0, g_x0, NULL, mean, std);
    cmp("normalize_u8 without flips", g_out, out, nout);
    case_end();
    dev_free(g_in), dev_free(g_flip), dev_free(g_y0), dev_free(g_x0), dev_free(g_out);
    free(in), free(out);
}

/* n (at most 5) images of H x W to ch x cw crops: boxes that scale down and up, the whole
 * image, thin boxes (placed within the image whatever its size). */
static void test_resized_crop(const ops_input *t)
{
    const int n = t->n, H = t->H, W = t->W, ch = t->ch, cw = t->cw;
    char title[128];
    snprintf(title, sizeof title, "cuda resized_crop_u8 %dx%d to %dx%d against the CPU; a crop-sized box is normalize_u8",
             H, W, ch, cw);
    check_begin(title);
    size_t nin = (size_t)n * H * W * 3, nout = (size_t)n * ch * cw * 3;
    uint8_t *in = xmalloc(nin);
    for (size_t i = 0; i < nin; i++) in[i] = (uint8_t)(i * 131 + i / 7);
    int32_t y0[5] = {0, H / 3, H / 7, H - 1, 0}, x0[5] = {0, W / 3, W / 13, 1, W - 1};
    int32_t bh[5] = {H, H / 4 + 1, H - H / 7, 1, H / 2}, bw[5] = {W, W / 2 + 4, 3, W - 6, 1};
    uint8_t flip[5] = {0, 1, 1, 0, 1};
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    float *out = xmalloc(nout * 4), *got = xmalloc(nout * 4), *same = xmalloc(nout * 4);
    C->resized_crop_u8(out, in, n, H, W, ch, cw, y0, x0, bh, bw, flip, mean, std);
    uint8_t *g_in = to_dev(in, nin), *g_flip = to_dev(flip, sizeof flip);
    int32_t *g_y0 = to_dev(y0, sizeof y0), *g_x0 = to_dev(x0, sizeof x0);
    int32_t *g_bh = to_dev(bh, sizeof bh), *g_bw = to_dev(bw, sizeof bw);
    float *g_out = dev_alloc(nout * 4), *g_same = dev_alloc(nout * 4);
    G->resized_crop_u8(g_out, g_in, n, H, W, ch, cw, g_y0, g_x0, g_bh, g_bw, g_flip, mean, std);
    cmp("resized_crop_u8", g_out, out, nout);
    /* the same float operations, each rounded explicitly: bitwise the CPU's (reported, not required) */
    G->download(got, g_out, nout * 4);
    size_t off = 0;
    for (size_t i = 0; i < nout; i++) off += memcmp(&got[i], &out[i], 4) != 0;
    fprintf(stderr, "  resized_crop_u8: %zu of %zu values differ from the CPU's in their bits\n", off, nout);
    /* weights 1 and 0: the GPU's normalize_u8 crop, bit for bit */
    for (int i = 0; i < n; i++) bh[i] = ch, bw[i] = cw, y0[i] = i * 2, x0[i] = i * 3;
    G->upload(g_y0, y0, sizeof y0), G->upload(g_x0, x0, sizeof x0);
    G->upload(g_bh, bh, sizeof bh), G->upload(g_bw, bw, sizeof bw);
    G->resized_crop_u8(g_out, g_in, n, H, W, ch, cw, g_y0, g_x0, g_bh, g_bw, g_flip, mean, std);
    G->normalize_u8(g_same, g_in, n, H, W, ch, cw, g_y0, g_x0, g_flip, mean, std);
    G->download(got, g_out, nout * 4), G->download(same, g_same, nout * 4);
    CHECK(memcmp(got, same, nout * 4) == 0, "a %dx%d box is not bitwise normalize_u8's crop", ch, cw);
    case_end();
    dev_free(g_in), dev_free(g_flip), dev_free(g_y0), dev_free(g_x0), dev_free(g_bh), dev_free(g_bw);
    dev_free(g_out), dev_free(g_same);
    free(in), free(out), free(got), free(same);
}

/* ---- bf16 storage, against the CPU's bf16 backend ---- */

/* A convolution with bf16 output and weights and its input stored in in_t (bf16, or float32
 * as conv1's), planned and run as in test_conv_case; dw float32, accumulated. */
static void test_conv_bf16(const ops_conv *t)
{
    const ds_dtype in_t = t->use & OPS_F32_IN ? DS_F32 : DS_BF16;
    ds_conv_desc d = ops_conv_desc(t, 1), run = ops_conv_desc(t, 0);
    d.in_t = run.in_t = in_t, d.out_t = run.out_t = DS_BF16, d.w_t = run.w_t = DS_BF16;
    const int n = run.n, h = run.h, w = run.w, c = t->c, k = t->k;
    char name[224];
    snprintf(name, sizeof name,
             "cuda %s conv, in %s out bf16 w bf16, %dx%dx%dx%d k%d %dx%d/%d pad %d (planned for %dx%dx%d)%s "
             "against the CPU's bf16",
             ds_precision_name(G->precision), ds_dtype_name(in_t), n, h, w, c, k, t->r, t->s, t->stride, t->pad, d.n,
             d.h, d.w, d.no_dx ? " without backward-data" : "");
    check_begin(name);
    size_t cws = C->conv_workspace(&d), gws = G->conv_workspace(&d);
    CHECK(cws != SIZE_MAX && gws != SIZE_MAX, "could not plan it (CPU %zu, GPU %zu bytes)", cws, gws);
    if (cws == SIZE_MAX || gws == SIZE_MAX) {
        case_end();
        return;
    }
    d = run;
    size_t ni = (size_t)n * h * w * c, nw = (size_t)k * t->r * t->s * c, no = (size_t)n * d.p * d.q * k;
    size_t ei = ds_dtype_size(in_t);
    void *in = host_rand_as(ni, -1, 1, in_t), *wt = host_rand_as(nw, -0.5f, 0.5f, DS_BF16);
    void *dout = host_rand_as(no, -1, 1, DS_BF16);
    float *dw0 = host_rand(nw, -0.1f, 0.1f), *dw = dup(dw0, nw);
    void *din0 = host_rand_as(ni, -1, 1, in_t);   /* another consumer's part, which bwd_data adds to */
    void *cw = xmalloc(cws), *gw = dev_alloc(gws ? gws : 1), *out = xmalloc(no * 2), *din = xmalloc(ni * ei),
         *dacc = xmalloc(ni * ei);
    memcpy(dacc, din0, ni * ei);
    C->conv_fwd(out, in, wt, &d, cw);
    if (!d.no_dx) C->conv_bwd_data(din, dout, wt, &d, 0, cw);
    if (!d.no_dx) C->conv_bwd_data(dacc, dout, wt, &d, 1, cw);
    C->conv_bwd_weight(dw, dout, in, &d, cw);
    void *g_in = to_dev(in, ni * ei), *g_w = to_dev(wt, nw * 2), *g_dout = to_dev(dout, no * 2);
    /* garbage first: forward and the overwriting backward-data must not add to what is there */
    void *junk_o = host_rand_as(no, -9, 9, DS_BF16), *junk_i = host_rand_as(ni, -9, 9, in_t);
    void *g_out = to_dev(junk_o, no * 2), *g_din = to_dev(junk_i, ni * ei), *g_dacc = to_dev(din0, ni * ei);
    float *g_dw = to_dev(dw0, nw * 4);
    G->conv_fwd(g_out, g_in, g_w, &d, gw);
    /* the model's order: weight gradient, then data gradient (a copy of dout may be shared) */
    G->conv_bwd_weight(g_dw, g_dout, g_in, &d, gw);
    if (!d.no_dx) G->conv_bwd_data(g_din, g_dout, g_w, &d, 0, gw);
    /* accumulating: beta = 1 in cuDNN under bf16 arithmetic; under tf32 and fp32 the float32
     * result rounded to bf16 in the workspace, then added */
    if (!d.no_dx) G->conv_bwd_data(g_dacc, g_dout, g_w, &d, 1, gw);
    cmp_as("conv_fwd", g_out, out, no, DS_BF16, TOL_BF16);
    if (!d.no_dx) cmp_as("conv_bwd_data", g_din, din, ni, in_t, TOL_BF16);
    if (!d.no_dx) cmp_as("conv_bwd_data (accumulating)", g_dacc, dacc, ni, in_t, TOL_BF16);
    cmp_as("conv_bwd_weight (accumulated)", g_dw, dw, nw, DS_F32, TOL_BF16);
    /* dout uploaded anew between the two backward ops (see test_conv_case) */
    if (!d.no_dx) {
        void *dout2 = host_rand_as(no, -1, 1, DS_BF16), *din2 = xmalloc(ni * ei);
        C->conv_bwd_data(din2, dout2, wt, &d, 0, cw);
        G->conv_fwd(g_out, g_in, g_w, &d, gw);   /* then backward-weight copies dout afresh */
        G->conv_bwd_weight(g_dw, g_dout, g_in, &d, gw);
        G->upload(g_dout, dout2, no * 2);
        G->conv_bwd_data(g_din, g_dout, g_w, &d, 0, gw);
        cmp_as("conv_bwd_data of a dout uploaded after backward-weight", g_din, din2, ni, in_t, TOL_BF16);
        free(dout2), free(din2);
    }
    case_end();
    dev_free(g_in), dev_free(g_w), dev_free(g_dout), dev_free(g_out), dev_free(g_din), dev_free(g_dw), dev_free(g_dacc);
    dev_free(gw);
    free(in), free(wt), free(dout), free(dw0), free(dw), free(din0), free(cw), free(out), free(din), free(dacc);
    free(junk_o), free(junk_i);
}

/* The op table's bf16-storage device rows (a 3x3, a strided 1x1 at a short batch, conv1 with
 * its float32 input and no backward-data), at the selected precision. */
static void test_convs_bf16(void)
{
    for (size_t i = 0; i < OPS_COUNT(ops_convs); i++)
        if (ops_convs[i].use & OPS_GPU_BF16_IO) test_conv_bf16(&ops_convs[i]);
}

/* Batch norm (training forward, inference forward, backward) with in, residual, out and
 * their gradients in bf16. */
static void test_bn_bf16(const ops_bn *t)
{
    const int m = t->m, c = t->c, relu = t->relu, residual = t->residual;
    const float lo = (float)(t->offset - 2 * t->spread), hi = (float)(t->offset + 2 * t->spread);
    char name[128];
    snprintf(name, sizeof name, "cuda batch norm, bf16 storage, m=%d c=%d%s%s against the CPU's bf16%s", m, c,
             relu ? " relu" : "", residual ? " +residual" : "", offset_words());
    check_begin(name);
    size_t mc = (size_t)m * c;
    /* a mean far from zero checks the shifted variance sums */
    bf16 *in = host_rand_as(mc, lo, hi, DS_BF16), *res = host_rand_as(mc, -1, 1, DS_BF16),
         *dout = host_rand_as(mc, -1, 1, DS_BF16);
    float *gam = host_rand(c, 0.5f, 1.5f), *bet = host_rand(c, -0.5f, 0.5f), *rm = host_rand(c, 2, 5),
          *rv = host_rand(c, 0.5f, 2), *dg0 = host_rand(c, -1, 1), *db0 = host_rand(c, -1, 1);
    bf16 *out = xmalloc(mc * 2), *inf = xmalloc(mc * 2), *din = xmalloc(mc * 2), *dres = xmalloc(mc * 2),
         *dy = xmalloc(mc * 2);
    float *mean = xmalloc(c * 4), *var = xmalloc(c * 4), *is = xmalloc(c * 4), *dg = dup(dg0, c), *db = dup(db0, c);
    memcpy(dy, dout, mc * 2);
    const bf16 *r = residual ? res : NULL;
    float *ms = dup(rm, c), *vs = dup(rv, c);
    C->bn_fwd_train(out, NULL, mean, var, is, ms, vs, in, gam, bet, r, relu, m, c, 1e-5f, DS_BF16);
    C->bn_fwd_infer(inf, in, gam, bet, rm, rv, r, relu, m, c, 1e-5f, DS_BF16);
    C->bn_bwd(din, residual ? dres : NULL, dg, db, dy, out, NULL, in, gam, mean, is, relu, m, c, DS_BF16);

    void *g_in = to_dev(in, mc * 2), *g_res = to_dev(res, mc * 2), *g_dy = to_dev(dout, mc * 2);
    float *g_gam = to_dev(gam, c * 4), *g_bet = to_dev(bet, c * 4), *g_rm = to_dev(rm, c * 4),
          *g_rv = to_dev(rv, c * 4), *g_dg = to_dev(dg0, c * 4), *g_db = to_dev(db0, c * 4);
    void *g_out = dev_alloc(mc * 2), *g_inf = dev_alloc(mc * 2), *g_din = dev_alloc(mc * 2),
         *g_dres = dev_alloc(mc * 2);
    float *g_mean = dev_alloc(c * 4), *g_var = dev_alloc(c * 4), *g_is = dev_alloc(c * 4);
    const void *gr = residual ? g_res : NULL;
    float *g_ms = to_dev(rm, c * 4), *g_vs = to_dev(rv, c * 4);
    G->bn_fwd_train(g_out, NULL, g_mean, g_var, g_is, g_ms, g_vs, g_in, g_gam, g_bet, gr, relu, m, c, 1e-5f, DS_BF16);
    G->bn_fwd_infer(g_inf, g_in, g_gam, g_bet, g_rm, g_rv, gr, relu, m, c, 1e-5f, DS_BF16);
    G->bn_bwd(g_din, residual ? g_dres : NULL, g_dg, g_db, g_dy, g_out, NULL, g_in, g_gam, g_mean, g_is, relu, m, c,
              DS_BF16);
    cmp_as("bn_fwd_train out", g_out, out, mc, DS_BF16, TOL_BF16);
    cmp_as("bn mean", g_mean, mean, c, DS_F32, TOL_F32);
    cmp_as("bn var (biased)", g_var, var, c, DS_F32, TOL_F32);
    cmp_as("bn invstd", g_is, is, c, DS_F32, TOL_F32);
    cmp_as("bn mean_sum += mean", g_ms, ms, c, DS_F32, TOL_F32);
    cmp_as("bn var_sum += unbiased var", g_vs, vs, c, DS_F32, TOL_F32);
    dev_free(g_ms), dev_free(g_vs), free(ms), free(vs);
    cmp_as("bn_fwd_infer out", g_inf, inf, mc, DS_BF16, TOL_BF16);
    CHECK(same_bits(g_inf, inf, mc, DS_BF16), "bn_fwd_infer out: not bitwise the CPU's");
    cmp_as("bn_bwd din", g_din, din, mc, DS_BF16, TOL_BF16);
    cmp_as("bn_bwd dout after the ReLU mask", g_dy, dy, mc, DS_BF16, TOL_BF16);
    if (residual) cmp_as("bn_bwd dresidual", g_dres, dres, mc, DS_BF16, TOL_BF16);
    cmp_as("bn_bwd dgamma (accumulated)", g_dg, dg, c, DS_F32, TOL_F32);
    cmp_as("bn_bwd dbeta (accumulated)", g_db, db, c, DS_F32, TOL_F32);
    if (residual) {   /* the memory plan's alias: the residual's gradient is dout itself */
        void *g_dy2 = to_dev(dout, mc * 2);
        float *g_dg2 = to_dev(dg0, c * 4), *g_db2 = to_dev(db0, c * 4);
        G->bn_bwd(g_din, g_dy2, g_dg2, g_db2, g_dy2, g_out, NULL, g_in, g_gam, g_mean, g_is, relu, m, c, DS_BF16);
        cmp_as("bn_bwd din, dresidual == dout", g_din, din, mc, DS_BF16, TOL_BF16);
        cmp_as("bn_bwd dresidual == dout", g_dy2, dres, mc, DS_BF16, TOL_BF16);
        dev_free(g_dy2), dev_free(g_dg2), dev_free(g_db2);
    }
    case_end();
    void *gs[] = {g_in, g_res, g_dy, g_gam, g_bet, g_rm, g_rv, g_dg, g_db, g_out, g_inf, g_din, g_dres,
                  g_mean, g_var, g_is};
    for (size_t i = 0; i < sizeof gs / sizeof *gs; i++) dev_free(gs[i]);
    void *hs[] = {in, res, dout, gam, bet, rm, rv, dg0, db0, out, inf, din, dres, dy, mean, var, is, dg, db};
    for (size_t i = 0; i < sizeof hs / sizeof *hs; i++) free(hs[i]);
}

/* The ReLU bitmask (backend.h) on the device, in storage dt: bn_fwd_train leaves the
 * definition's bytes of the out it stores, and bn_bwd reading them gives the bits of bn_bwd
 * reading out (din, dresidual, dgamma, dbeta; dresidual of its own, and dout itself, which
 * then ends masked). The residual holds NaN and +-Inf every 7th element, so out does too (and
 * zeros from -Inf). With tensors off alignment (dev_offset) the scalar kernels run, and the
 * mask's own kernel after the apply. */
static void test_bn_mask(const ops_bn *t, ds_dtype dt)
{
    const int m = t->m, c = t->c;
    const size_t es = ds_dtype_size(dt), mc = (size_t)m * c, bytes = ds_relu_mask_bytes(m, c, dt);
    if (!t->relu || !bytes) return;
    char name[128];
    snprintf(name, sizeof name, "cuda batch norm's ReLU bitmask, %s m=%d c=%d%s%s", ds_dtype_name(dt), m, c,
             t->residual ? " +residual" : "", offset_words());
    check_begin(name);
    const float lo = (float)(t->offset - 2 * t->spread), hi = (float)(t->offset + 2 * t->spread);
    void *in = host_rand_as(mc, lo, hi, dt), *res = host_rand_as(mc, -1, 1, dt), *dout = host_rand_as(mc, -1, 1, dt);
    static const float edge[3] = {NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < mc; i += 7) {
        const float e = edge[i / 7 % 3];
        if (dt == DS_BF16) ((bf16 *)res)[i] = bf16_round(e);
        else ((float *)res)[i] = e;
    }
    float *gam = host_rand(c, 0.5f, 1.5f), *bet = host_rand(c, -0.5f, 0.5f), *dg0 = host_rand(c, -1, 1),
          *db0 = host_rand(c, -1, 1);
    void *g_in = to_dev(in, mc * es), *g_res = t->residual ? to_dev(res, mc * es) : NULL;
    float *g_gam = to_dev(gam, c * 4), *g_bet = to_dev(bet, c * 4), *g_mean = dev_alloc(c * 4),
          *g_var = dev_alloc(c * 4), *g_is = dev_alloc(c * 4);
    void *g_out = dev_alloc(mc * es), *g_out2 = dev_alloc(mc * es);
    uint8_t *g_mask = dev_alloc(bytes);
    G->bn_fwd_train(g_out, NULL, g_mean, g_var, g_is, NULL, NULL, g_in, g_gam, g_bet, g_res, 1, m, c, 1e-5f, dt);
    G->bn_fwd_train(g_out2, g_mask, g_mean, g_var, g_is, NULL, NULL, g_in, g_gam, g_bet, g_res, 1, m, c, 1e-5f, dt);
    void *out = xmalloc(mc * es);
    uint8_t *mask = xmalloc(bytes), *want = calloc(bytes, 1);
    G->download(out, g_out, mc * es);
    G->download(mask, g_mask, bytes);
    float *outf = widen(out, mc, dt);
    for (size_t i = 0; i < mc; i++) want[i / (mc / bytes)] |= (uint8_t)((outf[i] > 0) << (i % (mc / bytes)));
    CHECK(same_bits(g_out2, out, mc, dt), "bn_fwd_train's out with the mask: not the bits of out without it");
    size_t bad = 0, first = 0;
    for (size_t g = 0; g < bytes; g++)
        if (mask[g] != want[g]) first = bad++ ? first : g;
    CHECK(!bad, "%zu of %zu mask bytes are not out's; first [%zu] 0x%02x, want 0x%02x", bad, bytes, first,
          bad ? mask[first] : 0, bad ? want[first] : 0);
    /* the backward without the mask, then with it; dresidual: 0 none, 1 its own, 2 dout */
    for (int dres = 0; dres <= (t->residual ? 2 : 0); dres++) {
        void *d[2], *dr[2], *dn[2];
        float *dg[2], *db[2];
        for (int k = 0; k < 2; k++) {
            d[k] = to_dev(dout, mc * es), dn[k] = dev_alloc(mc * es), dg[k] = to_dev(dg0, c * 4),
            db[k] = to_dev(db0, c * 4);
            dr[k] = dres == 1 ? dev_alloc(mc * es) : dres == 2 ? d[k] : NULL;
            G->bn_bwd(dn[k], dr[k], dg[k], db[k], d[k], g_out, k ? g_mask : NULL, g_in, g_gam, g_mean, g_is, 1, m, c,
                      dt);
        }
        void *h = xmalloc(mc * es);
        const char *how = dres == 0 ? "" : dres == 1 ? ", dresidual its own" : ", dresidual == dout";
        G->download(h, dn[0], mc * es);
        CHECK(same_bits(dn[1], h, mc, dt), "bn_bwd's din with the mask%s: not the bits without it", how);
        if (dres) {
            G->download(h, dr[0], mc * es);
            CHECK(same_bits(dr[1], h, mc, dt), "bn_bwd's dresidual with the mask%s: not the bits without it", how);
        }
        G->download(h, dg[0], c * 4);
        CHECK(same_bits(dg[1], h, c, DS_F32), "bn_bwd's dgamma with the mask%s: not the bits without it", how);
        G->download(h, db[0], c * 4);
        CHECK(same_bits(db[1], h, c, DS_F32), "bn_bwd's dbeta with the mask%s: not the bits without it", how);
        free(h);
        for (int k = 0; k < 2; k++) {
            dev_free(d[k]), dev_free(dn[k]), dev_free(dg[k]), dev_free(db[k]);
            if (dres == 1) dev_free(dr[k]);
        }
    }
    case_end();
    void *gs[] = {g_in, g_res, g_gam, g_bet, g_mean, g_var, g_is, g_out, g_out2, g_mask};
    for (size_t i = 0; i < sizeof gs / sizeof *gs; i++)
        if (gs[i]) dev_free(gs[i]);
    free(in), free(res), free(dout), free(gam), free(bet), free(dg0), free(db0), free(out), free(mask), free(want);
    free(outf);
}

/* Max pool on bf16 activations; the global average pool from bf16 activations to float32
 * features, and back. */
static void test_pool_bf16(const ops_pool *t)
{
    char name[160];
    snprintf(name, sizeof name,
             "cuda max pool %dx%dx%dx%d %dx%d/%d pad %d and global average pool, bf16 storage, against the CPU's bf16%s",
             t->n, t->h, t->w, t->c, t->k, t->k, t->stride, t->pad, offset_words());
    check_begin(name);
    ds_pool_desc d = ops_pool_desc(t, DS_BF16);
    size_t ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.c;
    bf16 *in = host_rand_as(ni, -1, 1, DS_BF16), *dout = host_rand_as(no, -1, 1, DS_BF16);
    for (size_t i = 0; i < ni; i += 5) in[i] = bf16_round(0.25f);   /* ties: the first maximum must win */
    bf16 *out = xmalloc(no * 2), *din = xmalloc(ni * 2);
    uint8_t *arg = xmalloc(no);
    C->maxpool_fwd(out, arg, in, &d);
    C->maxpool_bwd(din, dout, in, out, arg, &d);
    void *g_in = to_dev(in, ni * 2), *g_dout = to_dev(dout, no * 2), *g_out = dev_alloc(no * 2),
         *g_din = to_dev(in, ni * 2);   /* garbage first: maxpool_bwd must overwrite */
    uint8_t *g_arg = dev_alloc(no);
    G->maxpool_fwd(g_out, g_arg, g_in, &d);
    G->maxpool_bwd(g_din, g_dout, g_in, g_out, g_arg, &d);
    cmp_as("maxpool_fwd", g_out, out, no, DS_BF16, TOL_BF16);
    cmp_as("maxpool_bwd", g_din, din, ni, DS_BF16, TOL_BF16);
    CHECK(same_bits(g_out, out, no, DS_BF16), "maxpool_fwd: not bitwise the CPU's");
    CHECK(same_bits(g_din, din, ni, DS_BF16), "maxpool_bwd: not bitwise the CPU's");
    maxpool_against_cpu(&d, in, dout);
    dev_free(g_arg), free(arg);

    int n = d.n, hw = d.h * d.w, c = d.c;
    bf16 *x = host_rand_as((size_t)n * hw * c, -1, 1, DS_BF16), *dx = xmalloc((size_t)n * hw * c * 2);
    float *dy = host_rand((size_t)n * c, -1, 1), *y = xmalloc((size_t)n * c * 4);
    C->avgpool_fwd(y, x, n, hw, c, DS_BF16);
    C->avgpool_bwd(dx, dy, n, hw, c, DS_BF16);
    void *g_x = to_dev(x, (size_t)n * hw * c * 2), *g_dx = dev_alloc((size_t)n * hw * c * 2);
    float *g_dy = to_dev(dy, (size_t)n * c * 4), *g_y = dev_alloc((size_t)n * c * 4);
    G->avgpool_fwd(g_y, g_x, n, hw, c, DS_BF16);
    G->avgpool_bwd(g_dx, g_dy, n, hw, c, DS_BF16);
    cmp_as("avgpool_fwd (float32 features)", g_y, y, (size_t)n * c, DS_F32, TOL_F32);
    cmp_as("avgpool_bwd", g_dx, dx, (size_t)n * hw * c, DS_BF16, TOL_BF16);
    case_end();
    dev_free(g_in), dev_free(g_dout), dev_free(g_out), dev_free(g_din), dev_free(g_x), dev_free(g_dy), dev_free(g_y);
    dev_free(g_dx);
    free(in), free(dout), free(out), free(din), free(x), free(dy), free(y), free(dx);
}

/* add on bf16 gradients, and to_bf16 (the model's weight copy): both defined to the bit. */
static void test_elementwise_bf16(void)
{
    check_begin("cuda add and to_bf16, bf16 storage, against the CPU's bf16");
    size_t n = 100003;
    bf16 *y = host_rand_as(n, -1, 1, DS_BF16), *x = host_rand_as(n, -1, 1, DS_BF16), *h = xmalloc(n * 2);
    float *f = host_rand(n, -3, 3);
    void *g_y = to_dev(y, n * 2), *g_x = to_dev(x, n * 2), *g_h = dev_alloc(n * 2);
    float *g_f = to_dev(f, n * 4);
    C->add(y, x, n, DS_BF16);
    G->add(g_y, g_x, n, DS_BF16);
    cmp_as("add", g_y, y, n, DS_BF16, TOL_BF16);
    CHECK(same_bits(g_y, y, n, DS_BF16), "add: not bitwise the CPU's");
    C->to_bf16(h, f, &(ds_bf16_run){0, 0, n}, 1);
    G->to_bf16(g_h, g_f, &(ds_bf16_run){0, 0, n}, 1);
    CHECK(same_bits(g_h, h, n, DS_BF16), "to_bf16: not bitwise the CPU's");
    /* runs as the model's weight copy has them, more than one launch takes (a second launch
     * past DS_CUDA_BF16_RUNS), some of no values, into a buffer whose gaps keep their bits */
    enum { NRUNS = 70 };
    ds_bf16_run runs[NRUNS];
    size_t at = 0, from = 0;
    for (int k = 0; k < NRUNS; k++) {
        size_t len = k % 9 == 4 ? 0 : 17 * (size_t)k + 1;
        runs[k] = (ds_bf16_run){at, from, len};
        at += (len + 127) / 128 * 128 + 128, from += len + 3;
    }
    CHECK(at <= n && from <= n, "the runs fit the case's buffers");
    memcpy(h, y, n * 2);
    G->upload(g_h, y, n * 2);
    C->to_bf16(h, f, runs, NRUNS);
    G->to_bf16(g_h, g_f, runs, NRUNS);
    CHECK(same_bits(g_h, h, n, DS_BF16), "to_bf16 over %d runs: not bitwise the CPU's", NRUNS);
    case_end();
    dev_free(g_y), dev_free(g_x), dev_free(g_h), dev_free(g_f);
    free(y), free(x), free(h), free(f);
}

/* Streams and marks (backend.h): 32 MiB of page-locked host memory copied on the input
 * stream, the compute stream told to wait for that copy's mark, then copied back into
 * host_alloc'd memory on the compute stream: the bytes arrive whole once the host waits
 * for a later mark (without the stream wait the second copy could start before the first
 * is done). mark_seconds gives an interval for held marks and NAN for one DS_MARKS marks
 * old (which marks are held, not a time, is what is checked). */
static void test_streams(void)
{
    check_begin("cuda streams and marks");
    size_t bytes = (size_t)32 << 20;
    uint8_t *src = NULL;
    if (posix_memalign((void **)&src, 4096, bytes)) ds_die("out of memory");
    for (size_t i = 0; i < bytes; i++) src[i] = (uint8_t)(i * 2654435761u >> 13);
    uint8_t *back = G->host_alloc(bytes), *dev = dev_alloc(bytes);
    CHECK(back && dev, "allocations");
    CHECK(G->host_register(src, bytes) == 0, "page-locking 32 MiB");
    /* alloc zeroes dev on the compute stream: the copy on the input stream waits for it */
    int t0 = G->mark(DS_STREAM_COMPUTE);
    G->stream_wait(DS_STREAM_INPUT, t0);
    G->upload_async(dev, src, bytes);
    int copied = G->mark(DS_STREAM_INPUT);
    G->stream_wait(DS_STREAM_COMPUTE, copied);
    G->download_async(back, dev, bytes);
    int done = G->mark(DS_STREAM_COMPUTE);
    G->mark_wait(done);
    CHECK(memcmp(back, src, bytes) == 0, "the bytes came back changed");
    /* whether a mark is held, not how long anything took: no time is compared */
    CHECK(!isnan(G->mark_seconds(t0, done)), "two held, passed marks have no interval");
    for (int i = 0; i < DS_MARKS; i++) G->mark(DS_STREAM_COMPUTE);
    CHECK(isnan(G->mark_seconds(t0, done)), "a mark %d marks old is still held", DS_MARKS);
    G->sync();
    G->host_unregister(src);
    G->host_free(back);
    dev_free(dev);
    free(src);
    case_end();
}

/* upload's contract (backend.h): src may be reused as soon as upload returns, the copy still
 * queued. Three uploads of 30 MiB from one host buffer, refilled between them, with nothing
 * waited for in between: they pass through the backend's page-locked staging ring (64 MiB),
 * so the third lands where the first copy reads, and must wait for that copy first. Under
 * the lazy schedule (test_emu_sched.sh) the first copy is still queued then, every time. */
static void test_upload_reuse(void)
{
    check_begin("cuda upload: the source reused at once, past the staging ring's size");
    enum { COPIES = 3 };
    size_t bytes = (size_t)30 << 20;
    uint8_t *src = xmalloc(bytes), *back = xmalloc(bytes);
    void *dev[COPIES];
    for (int t = 0; t < COPIES; t++) {
        dev[t] = dev_alloc(bytes);
        CHECK(dev[t] != NULL, "allocation");
    }
    for (int t = 0; t < COPIES; t++) {
        memset(src, 0x11 * (t + 1), bytes);
        G->upload(dev[t], src, bytes);
    }
    for (int t = 0; t < COPIES; t++) {
        G->download(back, dev[t], bytes);
        size_t off = 0;
        for (size_t i = 0; i < bytes; i++) off += back[i] != (uint8_t)(0x11 * (t + 1));
        CHECK(off == 0, "upload %d: %zu of %zu bytes are not its source's", t, off, bytes);
        dev_free(dev[t]);
    }
    free(src), free(back);
    case_end();
}

/* The feed (feed.h) on the device: three batches of page-locked pixels through its two
 * buffers, each normalised as the CPU does, and the feed freed with the last batch's copy not
 * yet waited for (as a run that stops between feeding a batch and releasing it): ds_feed_free
 * must wait for that copy before it unlocks the batch's pixels. Under the emulated device's
 * lazy schedule (test_emu_sched.sh) the copy is still queued when the feed is freed, so an
 * unlock under it is a defect there every time. */
static void test_feed(void)
{
    check_begin("cuda feed: batches through both buffers, freed with a copy in flight");
    enum { B = 3, H = 10, W = 9, CROP = 8 };
    size_t pixels = (size_t)B * H * W * 3, nout = (size_t)B * CROP * CROP * 3;
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    ds_batch b[2];
    int32_t y0[B] = {0, 2, 1}, x0[B] = {1, 0, 1};
    uint8_t flip[B] = {0, 1, 1};
    for (int k = 0; k < 2; k++) {
        b[k] = (ds_batch){.n = B, .height = H, .width = W, .y0 = y0, .x0 = x0, .flip = flip, .crop = CROP,
                          .capacity = B};
        if (posix_memalign((void **)&b[k].images, 4096, pixels)) ds_die("out of memory");
    }
    float *want = xmalloc(nout * 4), *g_out = dev_alloc(nout * 4);
    ds_feed f;
    CHECK(ds_feed_init(&f, G, (ds_batch_shape){.capacity = B, .height = H, .width = W}) == 0, "feed init");
    for (int t = 0; t < 3; t++) {
        ds_batch *bt = &b[t % 2];
        for (size_t i = 0; i < pixels; i++) bt->images[i] = (uint8_t)(i * 131 + t * 71 + i / 7);
        C->normalize_u8(want, bt->images, B, H, W, CROP, CROP, y0, x0, flip, mean, std);
        ds_feed_input(&f, g_out, bt, mean, std);
        if (t == 2) break;   /* the last: neither waited for nor released */
        cmp("feed batch", g_out, want, nout);
        ds_feed_done(&f, bt);
    }
    ds_feed_free(&f);
    cmp("feed batch normalised before the feed was freed", g_out, want, nout);
    case_end();
    dev_free(g_out);
    free(want), free(b[0].images), free(b[1].images);
}

/* The loss read late (model.h) on the device: each micro-batch's losses come back by a copy
 * into page-locked memory queued behind its backward, read only once the step's mark has
 * passed. The same training read at once (every backward waits for its loss) and read a step
 * late gives bitwise the same losses (one device, deterministic fp32). The late model runs
 * alone, nothing else waiting for the stream: under the lazy schedule (test_emu_sched.sh) its
 * copies are still queued whenever a read does not wait for its mark. */
/* steps x micro micro-batches of 3 8x8 images; loss[k]: step k's, read at once or (late) a
 * step late */
static void step_losses(ds_model *m, int late, double *loss, int steps, int micro)
{
    enum { N = 3, HW = 8 };
    ds_sgd sgd = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f, .bn_bias_decay = 1};
    size_t count = (size_t)N * HW * HW * 3;
    float *x = xmalloc(count * 4);
    int mark = -1;
    for (int k = 0; k < steps; k++) {
        loss[k] = 0;
        ds_model_zero_reduction(m);
        for (int a = 0; a < micro; a++) {
            int32_t labels[N] = {(k + a) % 5, (2 * k + 1) % 5, (3 * a + k) % 5};
            for (size_t i = 0; i < count; i++) x[i] = (float)sin(0.37 * (double)i + k + 0.5 * a) * 1.5f;
            G->upload(ds_model_input(m), x, count * 4);
            ds_model_forward(m, N, 1);
            loss[k] += ds_model_backward(m, labels, N, 1.0f / (N * micro), 0.1f);
        }
        ds_model_step(m, &sgd, micro);
        if (!late) continue;
        int next = ds_model_end_step(m);
        if (k > 0) loss[k - 1] = ds_model_step_loss(m, mark);   /* a step late */
        mark = next;
    }
    if (late) loss[steps - 1] = ds_model_step_loss(m, mark);
    free(x);
}

static void test_loss_late(void)
{
    check_begin("cuda model: losses read a step late are those read at once");
    enum { MICRO = 2, STEPS = 3 };
    ds_model_config cfg = {.arch = "resnet20", .num_classes = 5, .max_batch = 3, .height = 8, .width = 8,
                           .training = 1};
    ds_model *now = ds_model_create(G, &cfg), *late = ds_model_create(G, &cfg);
    CHECK(now && late, "resnet20 on the device");
    if (!now || !late) {
        case_end();
        return;
    }
    ds_model_init(now, 7);
    ds_model_init(late, 7);
    CHECK(ds_model_defer_loss(late, MICRO) == 0, "refused to defer");
    double want[STEPS], got[STEPS];
    step_losses(now, 0, want, STEPS, MICRO);
    step_losses(late, 1, got, STEPS, MICRO);
    for (int k = 0; k < STEPS; k++)
        CHECK(got[k] == want[k] && isfinite(want[k]), "step %d: late loss %.17g, at once %.17g", k, got[k], want[k]);
    ds_model_free(now);
    ds_model_free(late);
    case_end();
}

/* The CUDA table member by member, as test_ops's every_backend_op_has_a_case does the CPU's:
 * every op is there but for those whose row excuses it (cuda_none, which then must really
 * be NULL: an op the backend gains needs its walk here), and each op's family has rows for
 * this test's walks; a host or graph member names its test. */
static void test_cuda_members(void)
{
    check_begin("cuda_backend_op_has_a_case");
    const unsigned gpu_walks = OPS_GPU | OPS_GPU_BF16_IO;
    for (size_t i = 0; i < OPS_COUNT(ops_members); i++) {
        const ops_member *m = &ops_members[i];
        if (m->family == OPS_FAMILY_NONE) continue;
        void *fn = NULL;
        memcpy(&fn, (const char *)G + m->offset, m->size < sizeof fn ? m->size : sizeof fn);
        CHECK(m->size == sizeof fn, "%s: not a function", m->member);
        if (m->cuda_none) {
            CHECK(fn == NULL, "%s: the CUDA backend has one now, but its row says \"%s\"", m->member, m->cuda_none);
            continue;
        }
        CHECK(fn != NULL, "%s: the CUDA backend has none", m->member);
        if (m->family == OPS_FAMILY_HOST || m->family == OPS_FAMILY_GRAPH)
            CHECK(m->tested_by && *m->tested_by, "%s: no test named", m->member);
        else
            CHECK(ops_family_use(m->family) & gpu_walks, "%s: its family has no row for test_cuda_ops", m->member);
    }
    check_end();
}

int main(int argc, char **argv)
{
    ds_log_init("test_cuda_ops");
    /* --verbose: each convolution's plan and cuDNN's answers, on stderr */
    if (argc == 2 && !strcmp(argv[1], "--verbose")) ds_verbosity = 1;
    else if (argc != 1) {
        fprintf(stderr, "usage: test_cuda_ops [--verbose]\n");
        return 2;
    }
    int count = ds_cuda_device_count();
    if (count < 0) {   /* a GPU that cannot start: CUDA's message is above */
        printf("FAIL cuda ops: CUDA could not start\n");
        return 1;
    }
    if (count == 0) {
        printf("SKIP cuda ops: no GPU\n");
        return 0;
    }
    ds_backend_opts opts = {.precision = DS_PRECISION_FP32, .deterministic = 1};
    if (!(G = ds_backend_select(DS_DEVICE_CUDA, &opts))) return 1;
    test_cuda_members();
    test_convs();
    for (size_t i = 0; i < OPS_COUNT(ops_bns); i++)
        if (ops_bns[i].use & OPS_GPU) test_bn(&ops_bns[i]), test_bn_mask(&ops_bns[i], DS_F32);
    for (size_t i = 0; i < OPS_COUNT(ops_pools); i++)
        if (ops_pools[i].use & OPS_GPU) test_pool(&ops_pools[i]);
    /* again one float off 16-byte alignment: the channel counts the vector path takes */
    dev_offset = 4;
    for (size_t i = 0; i < OPS_COUNT(ops_bns); i++)
        if ((ops_bns[i].use & OPS_GPU) && ops_bns[i].c % 4 == 0)
            test_bn(&ops_bns[i]), test_bn_mask(&ops_bns[i], DS_F32);
    for (size_t i = 0; i < OPS_COUNT(ops_pools); i++)
        if ((ops_pools[i].use & OPS_GPU) && ops_pools[i].c % 4 == 0) test_pool(&ops_pools[i]);
    dev_offset = 0;
    for (size_t i = 0; i < OPS_COUNT(ops_linears); i++)
        if (ops_linears[i].use & OPS_GPU) test_linear(&ops_linears[i], 1), test_linear(&ops_linears[i], 0);
    for (size_t i = 0; i < OPS_COUNT(ops_xents); i++)
        if (ops_xents[i].use & OPS_GPU) test_loss(&ops_xents[i]);
    test_sgd_elementwise();
    for (size_t i = 0; i < OPS_COUNT(ops_inputs); i++)
        if (ops_inputs[i].use & OPS_GPU) test_normalize(&ops_inputs[i]), test_resized_crop(&ops_inputs[i]);
    test_streams();
    test_upload_reuse();
    test_feed();
    test_loss_late();
    /* tf32 and bf16 convolutions, Find's choices (selecting again plans afresh) */
    tol = 1e-2;
    opts = (ds_backend_opts){.precision = DS_PRECISION_TF32};
    if (!(G = ds_backend_select(DS_DEVICE_CUDA, &opts))) return 1;
    test_convs();
    opts.precision = DS_PRECISION_BF16;
    if (!(G = ds_backend_select(DS_DEVICE_CUDA, &opts))) return 1;
    test_convs();
    /* bf16 storage against the CPU's bf16 backend: bf16 arithmetic, then the convolutions
     * under tf32 and fp32 (bf16 tensors copied to float32 in the workspace, results back) */
    C = &ds_backend_cpu_bf16;
    test_convs_bf16();
    for (size_t i = 0; i < OPS_COUNT(ops_bns); i++)
        if (ops_bns[i].use & OPS_GPU_BF16_IO) test_bn_bf16(&ops_bns[i]), test_bn_mask(&ops_bns[i], DS_BF16);
    for (size_t i = 0; i < OPS_COUNT(ops_pools); i++)
        if (ops_pools[i].use & OPS_GPU_BF16_IO) test_pool_bf16(&ops_pools[i]);
    dev_offset = 4;
    for (size_t i = 0; i < OPS_COUNT(ops_bns); i++)
        if ((ops_bns[i].use & OPS_GPU_BF16_IO) && ops_bns[i].c % 8 == 0)
            test_bn_bf16(&ops_bns[i]), test_bn_mask(&ops_bns[i], DS_BF16);
    for (size_t i = 0; i < OPS_COUNT(ops_pools); i++)
        if ((ops_pools[i].use & OPS_GPU_BF16_IO) && ops_pools[i].c % 8 == 0) test_pool_bf16(&ops_pools[i]);
    dev_offset = 0;
    test_elementwise_bf16();
    opts.precision = DS_PRECISION_TF32;
    if (!(G = ds_backend_select(DS_DEVICE_CUDA, &opts))) return 1;
    test_convs_bf16();
    opts.precision = DS_PRECISION_FP32;
    if (!(G = ds_backend_select(DS_DEVICE_CUDA, &opts))) return 1;
    test_convs_bf16();
    return check_exit();
}
#endif
