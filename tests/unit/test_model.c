/* test_model: architectures (parameter counts equal torchvision's), the memory plan, init,
 * refusals, that a training step allocates nothing, every batch size up to the planned one, and
 * the gradient buckets. Numerics against PyTorch are in
 * tests/ref/test_engine_resnet.py. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "../check.h"
#include "backend.h"
#include "log.h"
#include "model.h"
#include "rng.h"

/* Counting allocator: the executable's malloc family overrides libc's for every library,
 * so the walk's allocations are visible. glibc exports the real ones as __libc_*. Under
 * AddressSanitizer (make SAN=1), which owns malloc, its allocation hook counts instead. */
static volatile long alloc_calls;
#ifdef __SANITIZE_ADDRESS__
/* from <sanitizer/allocator_interface.h>, which gcc does not install */
int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void *, size_t),
                                              void (*free_hook)(const volatile void *));
static void count_malloc(const volatile void *p, size_t n) { alloc_calls++; }
static void ignore_free(const volatile void *p) {}
static void count_allocations(void) { __sanitizer_install_malloc_and_free_hooks(count_malloc, ignore_free); }
#else
extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
void *malloc(size_t n) { alloc_calls++; return __libc_malloc(n); }
void *calloc(size_t a, size_t b) { alloc_calls++; return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { alloc_calls++; return __libc_realloc(p, n); }
void *aligned_alloc(size_t al, size_t n) { alloc_calls++; return __libc_memalign(al, n); }
void *memalign(size_t al, size_t n) { alloc_calls++; return __libc_memalign(al, n); }
int posix_memalign(void **p, size_t al, size_t n)
{
    alloc_calls++;
    *p = __libc_memalign(al, n);
    return *p ? 0 : 12;
}
static void count_allocations(void) {}
#endif

static ds_model *make(const char *arch, int classes, int batch, int hw, int training)
{
    ds_model_config cfg = {.arch = arch, .num_classes = classes, .max_batch = batch, .height = hw,
                           .width = hw, .training = training};
    return ds_model_create(&ds_backend_cpu, &cfg);
}

static void test_param_counts(void)
{
    /* torchvision's sum(p.numel() for p in m.parameters()) and len(m.state_dict()) with
     * 1000 classes; resnet20 (10 classes) counted by hand: stem 432 + 32, stage 1 14016,
     * stage 2 51648, stage 3 205696, fc 650. */
    static const struct { const char *arch; int classes; size_t params; int tensors; } want[] = {
        {"resnet18", 1000, 11689512, 122}, {"resnet34", 1000, 21797672, 218},
        {"resnet50", 1000, 25557032, 320}, {"resnet101", 1000, 44549160, 626},
        {"resnet20", 10, 272474, 0},
    };
    check_begin("param_counts");
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ds_model *m = make(want[i].arch, want[i].classes, 1, 32, 0);
        CHECK(m != NULL, "%s: create failed", want[i].arch);
        if (!m) continue;
        CHECK(ds_model_param_count(m) == want[i].params, "%s: %zu parameters, want %zu", want[i].arch,
              ds_model_param_count(m), want[i].params);
        if (want[i].tensors)
            CHECK(ds_model_tensor_count(m) == want[i].tensors, "%s: %d state_dict entries, want %d",
                  want[i].arch, ds_model_tensor_count(m), want[i].tensors);
        ds_model_free(m);
    }
    /* torchvision names and shapes, spot-checked */
    ds_model *m = make("resnet50", 1000, 1, 32, 0);
    int i = ds_model_tensor_find(m, "layer1.0.downsample.0.weight");
    CHECK(i >= 0, "layer1.0.downsample.0.weight missing");
    if (i >= 0) {
        const ds_tensor_info *t = ds_model_tensor(m, i);
        CHECK(t->ndim == 4 && t->shape[0] == 256 && t->shape[1] == 64 && t->shape[2] == 1, "downsample shape");
    }
    i = ds_model_tensor_find(m, "layer2.0.conv2.weight");   /* v1.5: the 3x3 of the bottleneck */
    CHECK(i >= 0 && ds_model_tensor(m, i)->shape[2] == 3 && ds_model_tensor(m, i)->shape[1] == 128, "layer2.0.conv2");
    CHECK(ds_model_tensor_find(m, "bn1.num_batches_tracked") == 5, "bn1 counter after bn1's 4 tensors");
    CHECK(!strcmp(ds_model_tensor(m, 0)->name, "conv1.weight"), "first tensor %s", ds_model_tensor(m, 0)->name);
    CHECK(!strcmp(ds_model_tensor(m, ds_model_tensor_count(m) - 1)->name, "fc.bias"), "last tensor");
    ds_model_free(m);
    check_end();
}

static void test_memory_plan(void)
{
    check_begin("memory_plan");
    ds_model *t = make("resnet20", 10, 8, 32, 1), *e = make("resnet20", 10, 8, 32, 0);
    CHECK(t && e, "create");
    if (t && e) {
        ds_model_memory mt = ds_model_memory_plan(t), me = ds_model_memory_plan(e);
        size_t np = ds_model_param_count(t);
        /* BN buffers: running mean + var of 21 BN layers, 7 per width (16, 32, 64): the
         * stem's or a downsample's, and two per block */
        size_t nbuf = 2 * (16 * 7 + 32 * 7 + 64 * 7);
        CHECK(mt.params == (np + nbuf) * 4, "params %zu bytes, want %zu", mt.params, (np + nbuf) * 4);
        CHECK(mt.reduction == mt.params, "reduction %zu", mt.reduction);
        CHECK(mt.momentum == np * 4, "momentum %zu", mt.momentum);
        size_t count;
        CHECK(ds_model_reduction(t, &count) != NULL && count == np + nbuf, "reduction count %zu", count);
        CHECK(me.reduction == 0 && me.momentum == 0, "inference model has no optimizer memory");
        /* Training keeps every activation: 19 conv + 19 BN outputs at 32x32..8x8. The
         * inference plan reuses a few slots of the largest (8 x 32x32x16 floats). */
        size_t largest = 8 * 32 * 32 * 16 * 4;
        CHECK(mt.activations > 20 * largest / 2, "training activations %zu too small", mt.activations);
        CHECK(me.activations < 6 * largest, "inference activations %zu not reused", me.activations);
        CHECK(me.activations < mt.activations / 3, "inference %zu vs training %zu", me.activations, mt.activations);
        CHECK(mt.workspace > 0, "workspace");
    }
    ds_model_free(t);
    ds_model_free(e);
    check_end();
}

static void test_refusals(void)
{
    check_begin("refusals");
    ds_log_init("test_model");
    count_allocations();
    CHECK(make("resnet19", 10, 1, 32, 0) == NULL, "unknown arch accepted");
    CHECK(make("resnet20", 0, 1, 32, 0) == NULL, "0 classes accepted");
    ds_model *m = make("resnet18", 10, 1, 32, 1);
    CHECK(m != NULL, "create");
    if (m) {
        /* batch 1 at 32x32 leaves 1x1 in the last stage: one value per channel */
        CHECK(ds_model_forward(m, 1, 1) == NULL, "BN training on one value accepted");
        CHECK(ds_model_forward(m, 2, 0) == NULL, "batch above max accepted");
        CHECK(ds_model_forward(m, 1, 0) != NULL, "eval forward of one image");
        int32_t lab = 10;
        CHECK(isnan(ds_model_loss(m, &lab, 1, 0)), "label out of range accepted");
    }
    ds_model_free(m);
    ds_model *e = make("resnet20", 10, 2, 16, 0);
    CHECK(e && ds_model_forward(e, 2, 1) == NULL, "training forward on an inference model accepted");
    ds_model_free(e);
    check_end();
}

static void test_init(void)
{
    check_begin("init");
    ds_model *a = make("resnet20", 10, 1, 16, 0), *b = make("resnet20", 10, 1, 16, 0);
    ds_model_init(a, 7);
    ds_model_init(b, 7);
    int same = 1, differ = 0;
    for (int i = 0; i < ds_model_tensor_count(a); i++) {
        const ds_tensor_info *t = ds_model_tensor(a, i);
        if (t->kind == DS_TENSOR_COUNTER) continue;
        float *x = malloc(t->count * 4), *y = malloc(t->count * 4);
        ds_model_tensor_get(a, i, x);
        ds_model_tensor_get(b, i, y);
        same &= !memcmp(x, y, t->count * 4);
        const char *leaf = strrchr(t->name, '.') + 1;
        double s = 0, s2 = 0, mx = 0;
        for (size_t j = 0; j < t->count; j++) s += x[j], s2 += (double)x[j] * x[j], mx = fmax(mx, fabs(x[j]));
        if (t->ndim == 4) {
            /* Kaiming normal, fan_out: std sqrt(2 / (K R S)); 20% slack for the sample size */
            double want = sqrt(2.0 / (double)(t->shape[0] * t->shape[2] * t->shape[3]));
            double std = sqrt(s2 / t->count - (s / t->count) * (s / t->count));
            CHECK(fabs(std / want - 1) < 0.2, "%s: std %g, want %g", t->name, std, want);
        } else if (!strncmp(t->name, "fc.", 3)) {
            CHECK(mx <= 0.125 + 1e-7 && mx > 0.05, "%s: max |w| %g, want within 1/sqrt(64)", t->name, mx);
        } else if (!strcmp(leaf, "weight") || !strcmp(leaf, "running_var")) {
            CHECK(s == (double)t->count && mx == 1, "%s not all ones", t->name);
        } else {
            CHECK(mx == 0, "%s not zero", t->name);
        }
        free(x);
        free(y);
    }
    CHECK(same, "same seed, different parameters");
    ds_model_init(b, 8);
    float x[16 * 3 * 9], y[16 * 3 * 9];
    ds_model_tensor_get(a, 0, x);
    ds_model_tensor_get(b, 0, y);
    differ = memcmp(x, y, sizeof x) != 0;
    CHECK(differ, "different seeds, same conv1.weight");
    ds_model_free(a);
    ds_model_free(b);
    check_end();
}

/* A tiny problem everything below runs on: resnet20, 4 images of 16x16. */
static void fill_input(ds_model *m, int n, int hw)
{
    size_t count = (size_t)n * hw * hw * 3;
    float *x = malloc(count * 4);
    for (size_t i = 0; i < count; i++) x[i] = (float)sin(0.37 * (double)i) * 1.5f;
    ds_backend_cpu.upload(ds_model_input(m), x, count * 4);
    free(x);
}

static void fill_input_hw(ds_model *m, int n, int h, int w)
{
    size_t count = (size_t)n * h * w * 3;
    float *x = malloc(count * 4);
    for (size_t i = 0; i < count; i++) x[i] = (float)sin(0.37 * (double)i) * 1.5f;
    ds_backend_cpu.upload(ds_model_input(m), x, count * 4);
    free(x);
}

/* --precision bf16: the plan stores activations and their gradients in bf16 (the input, the
 * pooled features and the logits in float32) and keeps a bf16 copy of the convolution
 * weights, remade whenever the parameters change: after a load, and after every step (a
 * model given the stepped parameters computes the same bits). */
static void test_bf16_plan(void)
{
    check_begin("bf16_plan");
    ds_model_config cfg = {.arch = "resnet20", .num_classes = 10, .max_batch = 4, .height = 16, .width = 16,
                           .training = 1};
    ds_model *f = ds_model_create(&ds_backend_cpu, &cfg), *b = ds_model_create(&ds_backend_cpu_bf16, &cfg),
             *c = ds_model_create(&ds_backend_cpu_bf16, &cfg);
    CHECK(f && b && c, "create");
    if (!f || !b || !c) goto out;
    ds_model_memory mf = ds_model_memory_plan(f), mb = ds_model_memory_plan(b);
    size_t conv = 0, conv16 = 0;
    for (int i = 0; i < ds_model_tensor_count(b); i++) {
        const ds_tensor_info *t = ds_model_tensor(b, i);
        if (t->ndim == 4) conv += t->count, conv16 += (t->count + 127) / 128 * 128;
    }
    CHECK(mf.weight_copy == 0 && mb.weight_copy == conv16 * 2, "weight copy %zu / %zu bytes, want 0 / %zu",
          mf.weight_copy, mb.weight_copy, conv16 * 2);
    CHECK(mb.params == mf.params && mb.reduction == mf.reduction && mb.momentum == mf.momentum,
          "parameters, gradients and momentum stay float32");
    CHECK(mb.activations < mf.activations * 6 / 10, "bf16 activations %zu bytes against float32's %zu",
          mb.activations, mf.activations);
    ds_model_init(f, 3), ds_model_init(b, 3), ds_model_init(c, 9);
    fill_input(f, 4, 16), fill_input(b, 4, 16), fill_input(c, 4, 16);
    float lf[40], lb[40], l2[40];
    memcpy(lf, ds_model_forward(f, 4, 1), sizeof lf);
    memcpy(lb, ds_model_forward(b, 4, 1), sizeof lb);
    double err = 0, mag = 0;
    for (int i = 0; i < 40; i++) err = fmax(err, fabs(lb[i] - lf[i])), mag = fmax(mag, fabs(lf[i]));
    CHECK(err < 0.05 * mag, "bf16 logits %.3g off float32's (magnitude %.3g)", err, mag);
    size_t n = ds_model_relu_output(b, 0, NULL), odd = 0;
    float *r = malloc(n * sizeof *r);
    ds_model_relu_output(b, 0, r);
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &r[i], sizeof u);
        odd += (u & 0xffff) != 0 || r[i] < 0;
    }
    CHECK(n > 0 && odd == 0, "%zu of %zu ReLU outputs are not non-negative bf16 values", odd, n);
    free(r);

    /* c gets b's parameters: its copy is remade, so it computes b's bits */
    int nt = ds_model_tensor_count(b);
    float *v = malloc(64 * 64 * 9 * sizeof *v);
    for (int i = 0; i < nt; i++) {
        ds_model_tensor_get(b, i, v);
        ds_model_tensor_set(c, i, v);
    }
    memcpy(l2, ds_model_forward(c, 4, 1), sizeof l2);
    CHECK(!memcmp(l2, lb, sizeof lb), "a model loaded with the same parameters computes other logits");
    /* a step: b's next forward uses the stepped weights' copy, the same as c given them */
    int32_t labels[4] = {1, 2, 3, 4};
    ds_sgd sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f, .bn_bias_decay = 1};
    ds_model_zero_reduction(b);
    ds_model_backward(b, labels, 4, 0.25f, 0);
    ds_model_step(b, &sgd, 1);
    for (int i = 0; i < nt; i++) {
        ds_model_tensor_get(b, i, v);
        ds_model_tensor_set(c, i, v);
    }
    memcpy(lb, ds_model_forward(b, 4, 1), sizeof lb);
    memcpy(l2, ds_model_forward(c, 4, 1), sizeof l2);
    CHECK(!memcmp(l2, lb, sizeof lb), "after a step the model computes other logits than its parameters give");
    CHECK(memcmp(lb, lf, sizeof lb) != 0, "the step changed nothing");
    free(v);
out:
    ds_model_free(f), ds_model_free(b), ds_model_free(c);
    check_end();
}

static void test_step_allocates_nothing(void)
{
    check_begin("step_allocates_nothing");
    long probe = alloc_calls;
    void *volatile one = malloc(16);
    free(one);
    CHECK(alloc_calls > probe, "the allocation counter does not count");
    ds_model *m = make("resnet20", 10, 4, 16, 1);
    ds_model_init(m, 1);
    fill_input(m, 4, 16);
    int32_t labels[4] = {0, 3, 9, 3};
    ds_sgd sgd = {.lr = 0.1f, .momentum = 0.9f, .weight_decay = 1e-4f, .nesterov = 1, .bn_bias_decay = 1};
    double first = 0, last = 0;
    for (int it = 0; it < 4; it++) {
        long before = alloc_calls;
        ds_model_zero_reduction(m);
        const float *logits = ds_model_forward(m, 4, 1);
        double loss = ds_model_backward(m, labels, 4, 0.25f, 0.1f);
        ds_model_step(m, &sgd, 1);
        long calls = alloc_calls - before;
        /* the first pass may warm up the thread pool */
        if (it > 0) CHECK(calls == 0, "step %d: %ld allocations", it, calls);
        CHECK(logits != NULL && isfinite(loss), "step %d: loss %g", it, loss);
        if (it == 0) first = loss;
        last = loss;
    }
    /* training on a fixed batch lowers its loss */
    CHECK(last < first, "loss %g -> %g", first, last);
    int c = ds_model_tensor_find(m, "layer3.2.bn2.num_batches_tracked");
    int64_t tracked = 0;
    ds_model_tensor_get(m, c, &tracked);
    CHECK(tracked == 4, "num_batches_tracked %lld", (long long)tracked);
    CHECK(ds_model_momentum_started(m), "momentum not started");
    ds_model_free(m);
    check_end();
}

/* Backward must not depend on what earlier passes left in the activation and gradient
 * buffers: two identical passes give identical gradients, bit for bit. */
/* A ReLU bitmask is planned only for a backend that reads it (backend.h's relu_mask): the
 * CPU's plan holds none, and a CPU backend told it reads them plans one per training ReLU
 * (and computes the same bits: the CPU masks from the output either way). */
static void test_relu_mask_plan(void)
{
    check_begin("relu_mask_plan");
    ds_backend masked = ds_backend_cpu;
    masked.relu_mask = 1;
    ds_model_config cfg = {.arch = "resnet20", .num_classes = 10, .max_batch = 8, .height = 32, .width = 32,
                           .training = 1};
    ds_model *plain = ds_model_create(&ds_backend_cpu, &cfg), *with = ds_model_create(&masked, &cfg);
    CHECK(plain && with, "create");
    if (plain && with) {
        /* resnet20's 19 ReLUs: 7 of 16 channels at 32x32, 6 of 32 at 16x16, 6 of 64 at 8x8;
         * a byte per 4 float32 elements, each mask a multiple of 256 bytes */
        size_t want = ds_relu_mask_bytes(8 * 32 * 32, 16, DS_F32) * 7 + ds_relu_mask_bytes(8 * 16 * 16, 32, DS_F32) * 6 +
                      ds_relu_mask_bytes(8 * 8 * 8, 64, DS_F32) * 6;
        size_t got = ds_model_memory_plan(with).activations - ds_model_memory_plan(plain).activations;
        CHECK(got == want, "the masks take %zu bytes, want %zu", got, want);
        int32_t labels[8] = {1, 4, 0, 2, 9, 3, 3, 7};
        size_t count = 0;
        float *g[2];
        ds_model *ms[2] = {plain, with};
        for (int k = 0; k < 2; k++) {
            ds_model_init(ms[k], 5);
            fill_input(ms[k], 8, 32);
            ds_model_zero_reduction(ms[k]);
            ds_model_forward(ms[k], 8, 1);
            ds_model_backward(ms[k], labels, 8, 1.0f / 8, 0);
            float *red = ds_model_reduction(ms[k], &count);
            g[k] = malloc(count * 4);
            ds_backend_cpu.download(g[k], red, count * 4);
        }
        CHECK(!memcmp(g[0], g[1], count * 4), "the gradients differ with the masks planned");
        free(g[0]);
        free(g[1]);
    }
    ds_model_free(plain);
    ds_model_free(with);
    check_end();
}

static void test_backward_repeatable(const char *arch, int n, int hw)
{
    char name[64];
    snprintf(name, sizeof name, "backward_repeatable_%s", arch);
    check_begin(name);
    ds_model *m = make(arch, 5, n, hw, 1);
    ds_model_init(m, 3);
    int32_t labels[4] = {1, 4, 0, 2};
    size_t count;
    float *red = ds_model_reduction(m, &count);
    float *g[2];
    for (int pass = 0; pass < 2; pass++) {
        /* the eval forward between passes overwrites activations with other values */
        fill_input(m, n, hw);
        ds_model_forward(m, n, 0);
        ds_model_zero_reduction(m);
        ds_model_forward(m, n, 1);
        ds_model_backward(m, labels, n, 1.0f / n, 0);
        g[pass] = malloc(count * 4);
        ds_backend_cpu.download(g[pass], red, count * 4);
        /* scribble over the input: the next pass must not see it either */
        fill_input(m, n, hw);
    }
    size_t diff = 0;
    for (size_t i = 0; i < count; i++) diff += g[0][i] != g[1][i];
    CHECK(diff == 0, "%zu of %zu gradient values differ between identical passes", diff, count);
    free(g[0]);
    free(g[1]);
    ds_model_free(m);
    check_end();
}

/* The loss read late (ds_model_defer_loss): the same training, step by step, with the
 * losses read at once and read a step late gives bitwise the same losses (each step's
 * micro-batches added in order, as the caller adds backward's returns) and the same
 * parameters; a third step ended while two are unread, a refused label (NaN) and a mark
 * that is no step's are refused. */
static void test_loss_late(void)
{
    check_begin("loss_late");
    enum { N = 3, HW = 16, MICRO = 2, STEPS = 4 };
    ds_model *now = make("resnet20", 5, N, HW, 1), *late = make("resnet20", 5, N, HW, 1);
    ds_model_init(now, 7);
    ds_model_init(late, 7);
    CHECK(ds_model_end_step(late) < 0, "ended a step before losses were deferred");
    CHECK(ds_model_defer_loss(late, MICRO) == 0, "refused to defer");
    ds_sgd sgd = {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 1e-4f, .bn_bias_decay = 1};
    size_t count = (size_t)N * HW * HW * 3;
    float *x = malloc(count * 4);
    double want[STEPS], got[STEPS];
    int mark[STEPS];
    for (int k = 0; k < STEPS; k++) {
        want[k] = 0;
        ds_model_zero_reduction(now);
        ds_model_zero_reduction(late);
        for (int a = 0; a < MICRO; a++) {
            int32_t labels[N] = {(k + a) % 5, (2 * k + 1) % 5, (3 * a + k) % 5};
            for (size_t i = 0; i < count; i++) x[i] = (float)sin(0.37 * (double)i + k + 0.5 * a) * 1.5f;
            ds_backend_cpu.upload(ds_model_input(now), x, count * 4);
            ds_backend_cpu.upload(ds_model_input(late), x, count * 4);
            ds_model_forward(now, N, 1);
            ds_model_forward(late, N, 1);
            want[k] += ds_model_backward(now, labels, N, 1.0f / (N * MICRO), 0.1f);
            CHECK(ds_model_backward(late, labels, N, 1.0f / (N * MICRO), 0.1f) == 0, "step %d: a late loss returned", k);
        }
        ds_model_step(now, &sgd, MICRO);
        ds_model_step(late, &sgd, MICRO);
        mark[k] = ds_model_end_step(late);
        CHECK(mark[k] >= 0, "step %d not ended", k);
        if (k > 0) got[k - 1] = ds_model_step_loss(late, mark[k - 1]);   /* a step late */
    }
    got[STEPS - 1] = ds_model_step_loss(late, mark[STEPS - 1]);
    for (int k = 0; k < STEPS; k++)
        CHECK(got[k] == want[k] && isfinite(want[k]), "step %d: late loss %.17g, at once %.17g", k, got[k], want[k]);
    CHECK(isnan(ds_model_step_loss(late, mark[0])), "a step's loss read twice");
    size_t diff = 0;
    for (int i = 0; i < ds_model_tensor_count(now); i++) {
        size_t bytes = ds_model_tensor(now, i)->count * 4 + 8;   /* a counter is an int64 */
        float *pa = calloc(1, bytes), *pb = calloc(1, bytes);
        ds_model_tensor_get(now, i, pa);
        ds_model_tensor_get(late, i, pb);
        diff += memcmp(pa, pb, bytes) != 0;
        free(pa);
        free(pb);
    }
    CHECK(diff == 0, "%zu tensors differ", diff);

    /* two steps ended, none read: a third is refused until one is */
    int32_t labels[N] = {0, 1, 2};
    int m2[2];
    for (int k = 0; k < 2; k++) {
        ds_model_forward(late, N, 1);
        ds_model_backward(late, labels, N, 1.0f / N, 0);
        m2[k] = ds_model_end_step(late);
    }
    ds_model_forward(late, N, 1);
    CHECK(isnan(ds_model_backward(late, labels, N, 1.0f / N, 0)), "a third open step's backward ran");
    CHECK(ds_model_end_step(late) < 0, "a third step was ended while two are unread");
    CHECK(isfinite(ds_model_step_loss(late, m2[0])) && isfinite(ds_model_step_loss(late, m2[1])),
          "the two open steps' losses");
    /* a label out of range: backward says NaN now, and the step's loss is NaN */
    int32_t bad[N] = {0, 9, 1};
    ds_model_forward(late, N, 1);
    CHECK(isnan(ds_model_backward(late, bad, N, 1.0f / N, 0)), "a label out of range was taken");
    int mb = ds_model_end_step(late);
    CHECK(isnan(ds_model_step_loss(late, mb)), "the refused step's loss is finite");
    CHECK(isnan(ds_model_step_loss(late, 12345)), "a mark that is no step's gave a loss");
    free(x);
    ds_model_free(now);
    ds_model_free(late);
    check_end();
}

/* ---- step times over a backend whose marks are a ring (the CUDA backend's rule) ----
 * Mark k of stream s is 2k + s and is held while it is among the last DS_MARKS of its
 * stream (cuda.cu records it into event k % DS_MARKS, recorded again DS_MARKS marks later);
 * mark_seconds is NAN for one no longer held. Clocks are held until recorded again. The CPU
 * computes everything at once, so every point is passed as it is made; the device's "time"
 * of a point is the number of marks and clocks made before it (no time is measured). */
static int ring_marks[2];
static double ring_time[2][DS_MARKS], ring_now;

static int ring_mark(int stream)
{
    int s = stream == DS_STREAM_INPUT, k = ring_marks[s]++;
    ring_time[s][k % DS_MARKS] = ring_now++;
    return 2 * k + s;
}

static int ring_held(int mark)
{
    int s = mark & 1, k = mark >> 1;
    return mark >= 0 && k < ring_marks[s] && k >= ring_marks[s] - DS_MARKS;
}

static double ring_mark_seconds(int from, int to)
{
    if ((from & 1) || (to & 1) || !ring_held(from) || !ring_held(to)) return NAN;
    return ring_time[0][(to >> 1) % DS_MARKS] - ring_time[0][(from >> 1) % DS_MARKS];
}

struct ds_clock { double t; };
static ds_clock *ring_clock_alloc(void)
{
    ds_clock *c = malloc(sizeof *c);
    c->t = NAN;
    return c;
}
static void ring_clock_free(ds_clock *c) { free(c); }
static void ring_clock_record(ds_clock *c) { c->t = ring_now++; }
static double ring_clock_seconds(const ds_clock *from, const ds_clock *to) { return to->t - from->t; }

/* Training steps of 31 to 40 micro-batches in train.c's order: the step begun, per
 * micro-batch the feed's mark after its input (feed.h: consumed), forward and backward (for
 * the first and last micro-batch only: they make no marks, and each costs time here), SGD,
 * the step ended, then the step before's seconds and loss read. 1 + accum + 1 marks a step,
 * and the step before's start is read only after the next step is queued: beyond the ring
 * from accum 31 on. Every step's seconds must be finite. */
static void test_step_seconds_many_micro_batches(void)
{
    check_begin("step_seconds_with_31_to_40_micro_batches");
    enum { N = 2, HW = 8, MAX_ACCUM = 40 };
    ds_backend be = ds_backend_cpu;
    be.mark = ring_mark, be.mark_seconds = ring_mark_seconds;
    be.clock_alloc = ring_clock_alloc, be.clock_free = ring_clock_free;
    be.clock_record = ring_clock_record, be.clock_seconds = ring_clock_seconds;
    ds_model_config cfg = {.arch = "resnet20", .num_classes = 3, .max_batch = N, .height = HW, .width = HW,
                           .training = 1};
    ds_model *m = ds_model_create(&be, &cfg);
    CHECK(m != NULL, "model");
    ds_model_init(m, 3);
    CHECK(ds_model_defer_loss(m, MAX_ACCUM) == 0, "defer");
    ds_sgd sgd = {.lr = 0.01f, .momentum = 0.9f, .bn_bias_decay = 1};
    int32_t labels[N] = {0, 2};
    int bad = 0, steps = 0, ring_nan = 0;
    for (int accum = 31; accum <= MAX_ACCUM; accum++) {
        int last = -1, last_start = -1;
        for (int k = 0; k < 3; k++) {
            int start = ring_mark(DS_STREAM_COMPUTE);   /* where a ring mark would have begun it */
            CHECK(ds_model_begin_step(m) == 0, "accum %d step %d not begun", accum, k);
            ds_model_zero_reduction(m);
            for (int a = 0; a < accum; a++) {
                ring_mark(DS_STREAM_COMPUTE);
                if (a > 0 && a < accum - 1) continue;   /* forward and backward make no marks: two suffice */
                ds_model_forward(m, N, 1);
                ds_model_backward(m, labels, N, 1.0f / (N * accum), 0);
            }
            ds_model_step(m, &sgd, accum);
            int end = ds_model_end_step(m);
            if (last >= 0) {
                ring_nan += isnan(ring_mark_seconds(last_start, last));
                double sec = ds_model_step_seconds(m, last), loss = ds_model_step_loss(m, last);
                steps++;
                if (!isfinite(sec) || !(sec > 0) || !isfinite(loss)) {
                    if (!bad) fprintf(stderr, "  accum %d step %d: %g seconds, loss %g\n", accum, k - 1, sec, loss);
                    bad++;
                }
            }
            last = end, last_start = start;
        }
        double sec = ds_model_step_seconds(m, last);
        bad += !isfinite(sec) || !(sec > 0);
        steps++;
        ds_model_step_loss(m, last);
    }
    CHECK(bad == 0, "%d of %d steps have no finite seconds", bad, steps);
    /* the mock's marks are the ring's: timed by marks, these steps would have none */
    CHECK(ring_nan == 20, "%d of 20 steps timed by ring marks were NAN (the mock does not hold marks as the "
                          "device does)", ring_nan);
    /* a step opened by backward, not begun, has no seconds; nor does a mark that is no step's */
    ds_model_forward(m, N, 1);
    ds_model_backward(m, labels, N, 1.0f / N, 0);
    CHECK(ds_model_begin_step(m) < 0, "a step begun while one is open");
    int end = ds_model_end_step(m);
    CHECK(isnan(ds_model_step_seconds(m, end)) && isfinite(ds_model_step_loss(m, end)), "an unbegun step was timed");
    CHECK(isnan(ds_model_step_seconds(m, 12345)), "a mark that is no step's was timed");
    ds_model_free(m);
    check_end();
}

/* Every batch size from 1 to max_batch runs (the last batch of an evaluation is short): an
 * inference forward of n images gives bitwise the first n rows of the full batch's logits
 * (every inference op works per image), and a training step of n >= 2 images gives a finite
 * loss and finite, not all zero, gradients. */
static void test_every_batch_size(void)
{
    check_begin("every_batch_size");
    enum { MAXB = 5, HW = 16, CLASSES = 10 };
    ds_model *e = make("resnet20", CLASSES, MAXB, HW, 0);
    ds_model_init(e, 5);
    fill_input(e, MAXB, HW);
    float full[MAXB * CLASSES], part[MAXB * CLASSES];
    const float *logits = ds_model_forward(e, MAXB, 0);
    CHECK(logits != NULL, "full batch");
    if (logits) ds_backend_cpu.download(full, logits, sizeof full);
    for (int n = 1; n <= MAXB && logits; n++) {
        fill_input(e, MAXB, HW);
        const float *l = ds_model_forward(e, n, 0);
        CHECK(l != NULL, "inference forward of %d images", n);
        if (!l) continue;
        ds_backend_cpu.download(part, l, (size_t)n * CLASSES * sizeof(float));
        CHECK(!memcmp(part, full, (size_t)n * CLASSES * sizeof(float)),
              "inference of %d images differs from the first rows of the full batch", n);
    }
    ds_model_free(e);

    ds_model *t = make("resnet20", CLASSES, MAXB, HW, 1);
    ds_model_init(t, 5);
    int32_t labels[MAXB] = {3, 1, 4, 1, 5};
    size_t count;
    float *red = ds_model_reduction(t, &count), *g = malloc(count * sizeof *g);
    for (int n = 2; n <= MAXB; n++) {
        fill_input(t, MAXB, HW);
        ds_model_zero_reduction(t);
        const float *l = ds_model_forward(t, n, 1);
        double loss = l ? ds_model_backward(t, labels, n, 1.0f / n, 0.1f) : NAN;
        CHECK(l != NULL && isfinite(loss), "training step of %d images: loss %g", n, loss);
        ds_backend_cpu.download(g, red, count * sizeof *g);
        size_t bad = 0, nonzero = 0;
        for (size_t i = 0; i < count; i++) bad += !isfinite(g[i]), nonzero += g[i] != 0;
        CHECK(bad == 0 && nonzero > count / 2, "%d images: %zu gradients not finite, %zu of %zu non-zero", n,
              bad, nonzero, count);
    }
    free(g);
    ds_model_free(t);
    check_end();
}

/* Inference with each convolution and its batch norm in one conv_fwd_bn (the CPU backends)
 * gives bitwise the logits of the same backend running conv_fwd then bn_fwd_infer (its
 * conv_fwd_bn removed), in an inference-only model (whose memory plan reuses activations:
 * the fused convolution's input must outlive it) and in a training model's evaluation
 * forward; with batch norm's parameters and running statistics away from their start. */
static void test_fused_inference(const char *arch, int hw, const ds_backend *base)
{
    char name[96];
    snprintf(name, sizeof name, "fused_inference_%s_%s", arch, ds_precision_name(base->precision));
    check_begin(name);
    enum { N = 3, CLASSES = 5 };
    ds_backend apart = *base;
    apart.conv_fwd_bn = NULL;
    const ds_backend *bes[3] = {base, &apart, base};
    ds_model *ms[3] = {NULL, NULL, NULL};
    float logits[3][N * CLASSES];
    ds_rng r;
    for (int j = 0; j < 3; j++) {
        ds_model_config cfg = {.arch = arch, .num_classes = CLASSES, .max_batch = N, .height = hw, .width = hw,
                               .training = j == 2};
        ms[j] = ds_model_create(bes[j], &cfg);
        CHECK(ms[j] != NULL, "create");
        if (!ms[j]) goto out;
        ds_model_init(ms[j], 5);
        ds_rng_init(&r, 9, DS_RNG_DATA, 0);
        for (int i = 0; i < ds_model_tensor_count(ms[j]); i++) {  /* gamma, beta, running mean and var */
            const ds_tensor_info *t = ds_model_tensor(ms[j], i);
            if (t->ndim != 1 || strstr(t->name, "fc.")) continue;
            const int var = strstr(t->name, "running_var") != NULL, gamma = strstr(t->name, ".weight") != NULL;
            float v[t->count];
            for (size_t e = 0; e < t->count; e++) {
                const double x = ds_rng_normal(&r);
                v[e] = (float)(var ? 0.3 + fabs(x) : gamma ? 1 + 0.3 * x : 0.3 * x);
            }
            ds_model_tensor_set(ms[j], i, v);
        }
        fill_input_hw(ms[j], N, hw, hw);
        const float *l = ds_model_forward(ms[j], N, 0);
        CHECK(l != NULL, "forward");
        if (l) ds_backend_cpu.download(logits[j], l, sizeof logits[j]);
    }
    CHECK(!memcmp(logits[0], logits[1], sizeof logits[0]), "inference model: fused logits differ from the two ops'");
    CHECK(!memcmp(logits[2], logits[1], sizeof logits[0]), "training model's evaluation: fused logits differ");
out:
    for (int j = 0; j < 3; j++) ds_model_free(ms[j]);
    check_end();
}

/* A model planned at `planned` and run at a smaller h x w gives bitwise the logits (training
 * and inference forward) and gradients (with the BN statistics) of a model created at h x w:
 * the layer shapes are those of the smaller network, and activations planned larger hold
 * them unchanged. The sizes are visited in the order given, so going back up is covered. */
static void test_input_size(const char *arch, int n, int planned, const int (*hw)[2], int count_hw)
{
    char name[64];
    snprintf(name, sizeof name, "input_size_%s", arch);
    check_begin(name);
    enum { CLASSES = 7 };
    ds_model *big = make(arch, CLASSES, n, planned, 1);
    ds_model_init(big, 11);
    int32_t labels[4] = {6, 0, 3, 5};
    size_t count;
    float *red_big = ds_model_reduction(big, &count);
    float *g_big = malloc(count * 4), *g_ref = malloc(count * 4);
    float l_big[4 * CLASSES], l_ref[4 * CLASSES];
    for (int k = 0; k < count_hw; k++) {
        int h = hw[k][0], w = hw[k][1];
        ds_model_config cfg = {.arch = arch, .num_classes = CLASSES, .max_batch = n, .height = h, .width = w,
                               .training = 1};
        ds_model *ref = ds_model_create(&ds_backend_cpu, &cfg);
        ds_model_init(ref, 11);
        CHECK(ds_model_set_input_size(big, h, w) == 0, "set_input_size(%d, %d)", h, w);
        int gh = 0, gw = 0;
        ds_model_input_size(big, &gh, &gw);
        CHECK(gh == h && gw == w, "input size %dx%d, set %dx%d", gh, gw, h, w);
        for (int training = 1; training >= 0; training--) {
            ds_model *ms[2] = {big, ref};
            float *ls[2] = {l_big, l_ref};
            for (int j = 0; j < 2; j++) {
                fill_input_hw(ms[j], n, h, w);
                ds_model_zero_reduction(ms[j]);
                const float *l = ds_model_forward(ms[j], n, training);
                CHECK(l != NULL, "%dx%d forward", h, w);
                if (!l) continue;
                ds_backend_cpu.download(ls[j], l, (size_t)n * CLASSES * 4);
                if (training) ds_model_backward(ms[j], labels, n, 1.0f / n, 0.1f);
            }
            CHECK(!memcmp(l_big, l_ref, (size_t)n * CLASSES * 4), "%dx%d: %s logits differ from a model made at it",
                  h, w, training ? "training" : "inference");
            if (!training) continue;
            ds_backend_cpu.download(g_big, red_big, count * 4);
            ds_backend_cpu.download(g_ref, ds_model_reduction(ref, NULL), count * 4);
            size_t diff = 0;
            for (size_t i = 0; i < count; i++) diff += memcmp(&g_big[i], &g_ref[i], 4) != 0;
            CHECK(diff == 0, "%dx%d: %zu of %zu gradients differ from a model made at it", h, w, diff, count);
        }
        ds_model_free(ref);
    }
    /* out of range: larger than planned, empty; the size is then unchanged */
    int gh, gw, last_h = hw[count_hw - 1][0], last_w = hw[count_hw - 1][1];
    CHECK(ds_model_set_input_size(big, planned + 1, planned) < 0, "larger than planned accepted");
    CHECK(ds_model_set_input_size(big, 0, planned) < 0, "height 0 accepted");
    ds_model_input_size(big, &gh, &gw);
    CHECK(gh == last_h && gw == last_w, "a refused size changed the input size to %dx%d", gh, gw);
    free(g_big);
    free(g_ref);
    ds_model_free(big);
    check_end();
}

/* bn_bias_decay 0: after one step from the same state (so the same gradients), every one-dimensional parameter (BN
 * weight and bias, fc.bias) is bitwise what a step without weight decay gives, every other
 * one what a step with it gives; and the two differ on both kinds (the test can see it). */
static void test_bn_bias_decay_off(void)
{
    check_begin("bn_bias_decay_off");
    enum { N = 3, HW = 16 };
    const ds_sgd with = {.lr = 0.5f, .momentum = 0.9f, .weight_decay = 0.1f, .nesterov = 1, .bn_bias_decay = 1},
                 without = {.lr = 0.5f, .momentum = 0.9f, .weight_decay = 0.0f, .nesterov = 1, .bn_bias_decay = 1},
                 skip = {.lr = 0.5f, .momentum = 0.9f, .weight_decay = 0.1f, .nesterov = 1, .bn_bias_decay = 0};
    const ds_sgd *sgd[3] = {&skip, &with, &without};
    ds_model *ms[3];
    int32_t labels[N] = {2, 0, 1};
    for (int j = 0; j < 3; j++) {
        ms[j] = make("resnet20", 3, N, HW, 1);
        ds_model_init(ms[j], 21);
        fill_input(ms[j], N, HW);
        ds_model_zero_reduction(ms[j]);
        ds_model_forward(ms[j], N, 1);
        ds_model_backward(ms[j], labels, N, 1.0f / N, 0);
        ds_model_step(ms[j], sgd[j], 1);
    }
    int decayed = 0, skipped = 0;
    for (int i = 0; i < ds_model_tensor_count(ms[0]); i++) {
        const ds_tensor_info *t = ds_model_tensor(ms[0], i);
        if (t->kind != DS_TENSOR_PARAM) continue;
        int one_dim = t->ndim == 1;
        CHECK(ds_model_param_decays(ms[0], i, &skip) == !one_dim, "%s: decays %d", t->name,
              ds_model_param_decays(ms[0], i, &skip));
        CHECK(ds_model_param_decays(ms[0], i, &with), "%s: no decay with bn_bias_decay 1", t->name);
        float *v[3];
        for (int j = 0; j < 3; j++) v[j] = malloc(t->count * 4), ds_model_tensor_get(ms[j], i, v[j]);
        int same_as = one_dim ? 2 : 1, other = one_dim ? 1 : 2;
        CHECK(!memcmp(v[0], v[same_as], t->count * 4), "%s: not the step %s weight decay", t->name,
              one_dim ? "without" : "with");
        if (memcmp(v[1], v[2], t->count * 4)) {
            CHECK(memcmp(v[0], v[other], t->count * 4), "%s: also the step %s weight decay", t->name,
                  one_dim ? "with" : "without");
            one_dim ? skipped++ : decayed++;
        }
        for (int j = 0; j < 3; j++) free(v[j]);
    }
    CHECK(decayed > 10 && skipped > 10, "weight decay visible on %d decayed and %d skipped tensors", decayed, skipped);
    for (int j = 0; j < 3; j++) ds_model_free(ms[j]);
    check_end();
}

/* ---- gradient buckets: a recording backend (the CPU one, with reduce_start logging what
 * it was handed and when) ---- */

#define MAX_STARTS 256
static struct {
    const float *base;          /* the model's reduction buffer */
    int starts, to_all;
    size_t lo[MAX_STARTS], n[MAX_STARTS];
    float *copy[MAX_STARTS];    /* the bucket as it was when started */
    int bwd_ops_at[MAX_STARTS]; /* backward convolution ops run before it */
    int bwd_ops;
} rec;

static void rec_conv_bwd_weight(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws)
{
    rec.bwd_ops++;
    ds_backend_cpu.conv_bwd_weight(dw, dout, in, d, ws);
}

static void rec_reduce_start(float *buf, size_t n, int to_all)
{
    rec.to_all += to_all;
    if (rec.starts == MAX_STARTS) return;
    int i = rec.starts++;
    rec.lo[i] = (size_t)(buf - rec.base);
    rec.n[i] = n;
    rec.copy[i] = malloc(n * sizeof *buf);
    memcpy(rec.copy[i], buf, n * sizeof *buf);
    rec.bwd_ops_at[i] = rec.bwd_ops;
}

static void rec_reduce_wait(void) {}

/* The plan covers the reduction buffer once, from its end down, in buckets of at least the
 * asked size (but the last); the last backward of a step starts each bucket once, in
 * order, only when every value in it is final (what it held then equals what it holds
 * after backward), the first one before backward is done; a plain backward starts none. */
static void test_buckets(const char *arch, int n, int hw, size_t bucket_bytes)
{
    char name[96];
    snprintf(name, sizeof name, "buckets_%s_%zu_bytes", arch, bucket_bytes);
    check_begin(name);
    ds_backend be = ds_backend_cpu;
    be.conv_bwd_weight = rec_conv_bwd_weight;
    be.reduce_start = rec_reduce_start;
    be.reduce_wait = rec_reduce_wait;
    ds_model_config cfg = {.arch = arch, .num_classes = 5, .max_batch = n, .height = hw, .width = hw,
                           .training = 1, .bucket_bytes = bucket_bytes};
    ds_model *m = ds_model_create(&be, &cfg);
    ds_model_init(m, 5);
    size_t count, lo = 0, hi = 0, want_hi;
    float *red = ds_model_reduction(m, &count);
    int nb = ds_model_bucket(m, 0, &lo, &hi);
    want_hi = count;
    for (int i = 0; i < nb; i++) {
        ds_model_bucket(m, i, &lo, &hi);
        CHECK(hi == want_hi && lo < hi, "bucket %d is [%zu, %zu), expected to end at %zu", i, lo, hi, want_hi);
        CHECK(i == nb - 1 || (hi - lo) * sizeof(float) >= bucket_bytes, "bucket %d holds %zu bytes, below %zu", i,
              (hi - lo) * sizeof(float), bucket_bytes);
        want_hi = lo;
    }
    CHECK(nb > 0 && want_hi == 0, "the %d buckets stop at %zu, not at the buffer's start", nb, want_hi);

    int32_t labels[4] = {1, 4, 0, 2};
    memset(&rec, 0, sizeof rec);
    rec.base = red;
    fill_input(m, n, hw);
    ds_model_zero_reduction(m);
    ds_model_forward(m, n, 1);
    ds_model_backward(m, labels, n, 1.0f / n, 0);
    CHECK(rec.starts == 0, "a plain backward started %d buckets", rec.starts);
    int total_ops = rec.bwd_ops;
    rec.bwd_ops = 0;
    ds_model_forward(m, n, 1);
    ds_model_backward_reduce(m, labels, n, 1.0f / n, 0, DS_REDUCE_TO_ALL);
    ds_model_reduce_wait(m);
    CHECK(rec.starts == nb, "%d buckets started, %d planned", rec.starts, nb);
    CHECK(rec.to_all == nb, "%d of the %d buckets asked for a sum on every rank", rec.to_all, nb);
    for (int i = 0; i < rec.starts && i < nb; i++) {
        ds_model_bucket(m, i, &lo, &hi);
        CHECK(rec.lo[i] == lo && rec.n[i] == hi - lo, "start %d was [%zu, +%zu), bucket %d is [%zu, %zu)", i,
              rec.lo[i], rec.n[i], i, lo, hi);
        size_t changed = 0;
        for (size_t j = 0; j < rec.n[i] && rec.lo[i] + j < count; j++)
            changed += memcmp(&rec.copy[i][j], &red[rec.lo[i] + j], sizeof(float)) != 0;
        CHECK(changed == 0, "bucket %d: %zu of %zu values changed after it was started", i, changed, rec.n[i]);
    }
    if (nb > 1)
        CHECK(rec.starts > 0 && rec.bwd_ops_at[0] < total_ops,
              "the first bucket started after all %d backward convolutions", total_ops);
    if (nb > 1)
        CHECK(rec.bwd_ops_at[nb - 2] < total_ops, "only the last bucket started before backward was done");
    for (int i = 0; i < rec.starts; i++) free(rec.copy[i]);
    ds_model_free(m);
    check_end();
}

/* The default plan: about 25 MiB per bucket, as DDP's. */
static void test_bucket_default(void)
{
    check_begin("buckets_default_resnet50");
    ds_model_config cfg = {.arch = "resnet50", .num_classes = 1000, .max_batch = 1, .height = 32, .width = 32,
                           .training = 1};
    ds_model *m = ds_model_create(&ds_backend_cpu, &cfg);
    size_t count, lo = 0, hi = 0;
    ds_model_reduction(m, &count);
    int nb = ds_model_bucket(m, 0, &lo, &hi);
    CHECK(nb == (int)(count * sizeof(float) / DS_BUCKET_BYTES) ||
              nb == (int)(count * sizeof(float) / DS_BUCKET_BYTES) + 1,
          "%d buckets for %zu bytes", nb, count * sizeof(float));
    CHECK((hi - lo) * sizeof(float) >= DS_BUCKET_BYTES && (hi - lo) * sizeof(float) < DS_BUCKET_BYTES + (10 << 20),
          "the first bucket holds %zu bytes", (hi - lo) * sizeof(float));
    ds_model_free(m);
    check_end();
}

int main(void)
{
    ds_log_init("test_model");
    count_allocations();
    test_param_counts();
    test_memory_plan();
    test_relu_mask_plan();
    test_refusals();
    test_init();
    test_step_allocates_nothing();
    test_bf16_plan();
    test_every_batch_size();
    test_loss_late();
    test_step_seconds_many_micro_batches();
    test_backward_repeatable("resnet20", 4, 16);
    test_backward_repeatable("resnet18", 2, 64);
    static const int r20[][2] = {{48, 48}, {32, 32}, {64, 64}, {40, 24}}, r50[][2] = {{32, 32}};
    test_fused_inference("resnet20", 16, &ds_backend_cpu);
    test_fused_inference("resnet20", 16, &ds_backend_cpu_bf16);
    test_fused_inference("resnet50", 64, &ds_backend_cpu);
    test_fused_inference("resnet50", 64, &ds_backend_cpu_bf16);
    test_input_size("resnet20", 3, 64, r20, 4);
    test_input_size("resnet50", 2, 64, r50, 1);
    test_bn_bias_decay_off();
    /* bucket edges at many places */
    for (size_t bytes = 4; bytes <= (1 << 16); bytes *= 2) test_buckets("resnet20", 4, 16, bytes + 4 * (bytes > 4));
    /* and one right at a block's last BN: the buffer holds the block's shortcut (downsample)
     * after that BN, but backward runs the BN first, so the bucket from there up is complete
     * only once the shortcut is done too. Parameters are packed in state_dict order, so the
     * BN weight's offset is the sum of the parameters before it. */
    ds_model *m = make("resnet20", 5, 4, 16, 1);
    size_t off = 0, count;
    ds_model_reduction(m, &count);
    for (int i = 0; i < ds_model_tensor_count(m) && strcmp(ds_model_tensor(m, i)->name, "layer2.0.bn2.weight"); i++)
        if (ds_model_tensor(m, i)->kind == DS_TENSOR_PARAM) off += ds_model_tensor(m, i)->count;
    ds_model_free(m);
    test_buckets("resnet20", 4, 16, (count - off) * sizeof(float));
    test_buckets("resnet18", 2, 64, 4 << 20);
    test_buckets("resnet20", 4, 16, DS_BUCKET_BYTES);
    test_bucket_default();
    return check_exit();
}
