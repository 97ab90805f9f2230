/* ops_bench: times the CPU backend's convolutions (and batch norm) on the shapes of
 * resnet20 at 32x32 batch 128, resnet18 and resnet50 at 224x224 batch 16 (the network rows of
 * the op table, tests/unit/ops_cases.h), and prints GFLOP/s next to the machine's measured
 * peak for the precision: float32 FMAs, or under bf16 the products' instruction (VDPBF16PS,
 * two multiply-adds a lane, on a set that has it; else the FMA forms, one FMA each).
 *
 *   ops_bench [--precision fp32|bf16] [resnet20|resnet18|resnet50|all] [repeats]
 *   ops_bench step ARCH BATCH SIZE [steps]    whole training steps of the engine (model.c):
 *                                             forward, backward, SGD; images/s
 *   ops_bench infer ARCH BATCH SIZE [steps]   inference forward passes
 *   ops_bench gemm [repeats]                  the GEMM kernels of the kernel set (float32 and
 *                                             bf16) on one thread, on convolution shapes:
 *                                             GFLOP/s and the share of one thread's peak
 *   ops_bench input [repeats]                 the input ops on 64 images of 256x256 to 224:
 *                                             normalize_u8 (a crop) and resized_crop_u8
 *                                             (RandomResizedCrop boxes, scale 0.08-1, ratio
 *                                             3/4-4/3, half flipped); ms per image, best of
 *                                             repeats (DS_CPU_KERNELS picks the kernel set)
 *
 * Each line: the shape, how many times the network uses it, and for forward, backward-data
 * and backward-weight the best time of `repeats` runs in ms and its GFLOP/s (2 flops per
 * multiply-add); the stem's backward-data is not run (the network's input takes no gradient).
 * The totals weight each shape by its count: the convolution time of one training step. */
#include "backend.h"
#include "backend/cpu_bf16.h"
#include "backend/cpu_sgemm.h"
#include "cpu_isa.h"
#include "log.h"
#include "model.h"
#include "rng.h"
#include "../tests/unit/ops_cases.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* With DS_BENCH_CLOCK=cpu, times are CPU seconds of the process divided by the thread
 * count: on a machine shared with other jobs that is closer to what the ops would take
 * alone than the wall clock (still inflated by the others' use of caches and memory). */
static int cpu_clock;

static double bench_now(void)
{
    if (!cpu_clock) return ds_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (ts.tv_sec + ts.tv_nsec * 1e-9) / omp_get_max_threads();
}

/* Peak fp32 FMA rate of one thread on the instruction set in use: 12 independent FMA
 * chains, best of 5. The empty asm keeps the accumulators in registers and the loop from
 * being folded away. */
#if defined(__x86_64__) || defined(__i386__)
#define PEAK_LOOP(NAME, T, SET1, FMA, LANES, attr)                                                       \
    static attr double NAME(long iters)                                                       \
    {                                                                                             \
        double best = 0;                                                                          \
        for (int rep = 0; rep < 5; rep++) {                                                       \
            double t0 = ds_now();                                                                 \
            T x = SET1(1.0000001f), y = SET1(0.999f);                                             \
            T a0 = x, a1 = x, a2 = x, a3 = x, a4 = x, a5 = x, a6 = x, a7 = x, a8 = x, a9 = x, a10 = x, a11 = x; \
            for (long it = 0; it < iters; it++) {                                                 \
                a0 = FMA(a0, x, y), a1 = FMA(a1, x, y), a2 = FMA(a2, x, y), a3 = FMA(a3, x, y);   \
                a4 = FMA(a4, x, y), a5 = FMA(a5, x, y), a6 = FMA(a6, x, y), a7 = FMA(a7, x, y);   \
                a8 = FMA(a8, x, y), a9 = FMA(a9, x, y), a10 = FMA(a10, x, y), a11 = FMA(a11, x, y); \
                __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), \
                                 "+x"(a6), "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));   \
            }                                                                                     \
            double rate = (double)iters * 12 * (LANES) * 2 / (ds_now() - t0) / 1e9;               \
            best = rate > best ? rate : best;                                                     \
        }                                                                                         \
        return best;                                                                              \
    }
PEAK_LOOP(peak_avx512, __m512, _mm512_set1_ps, _mm512_fmadd_ps, 16, __attribute__((target("avx512f"))))
PEAK_LOOP(peak_avx2, __m256, _mm256_set1_ps, _mm256_fmadd_ps, 8, __attribute__((target("avx2,fma"))))

/* VDPBF16PS's rate the same way: the accumulators' bits read as bf16 pairs, each instruction
 * 16 lanes of two multiply-adds into a float32 sum, so LANES 32 counts its flops as the FMA
 * loops count theirs. */
#define DPBF16(acc, x, y) _mm512_dpbf16_ps(acc, (__m512bh)(x), (__m512bh)(y))
PEAK_LOOP(peak_avx512bf16, __m512, _mm512_set1_ps, DPBF16, 32, __attribute__((target("avx512f,avx512bf16"))))
#endif

/* The plain kernels' rate: scalar fmaf chains, as cpu_sgemm.c's plain loop runs them. */
static double peak_plain(long iters)
{
    double best = 0;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = ds_now();
        volatile float seed = 1.0000001f;
        float x = seed, y = 0.999f, a[12];
        for (int k = 0; k < 12; k++) a[k] = x;
        for (long it = 0; it < iters; it++)
            for (int k = 0; k < 12; k++) a[k] = fmaf(a[k], x, y);
        double rate = (double)iters * 12 * 2 / (ds_now() - t0) / 1e9;
        best = rate > best ? rate : best;
        seed = a[0];
    }
    return best;
}

/* Summed over the threads, each timing its own loop: a thread that starts late or is
 * briefly descheduled by a hypervisor does not halve the figure, as timing them together
 * did. bf16: the rate of the products' instruction where the kernel set has VDPBF16PS, else
 * the FMA peak (the FMA forms take one FMA per multiply-add). */
static double measure_peak(int bf16)
{
    const ds_cpu_isa isa = ds_cpu_isa_get();
    double total = 0;
#pragma omp parallel reduction(+ : total)
    {
#if defined(__x86_64__) || defined(__i386__)
        if (bf16 && ds_cpu_isa_has(isa, DS_CPU_F_AVX512BF16))
            total += peak_avx512bf16(20000000);
        else if (ds_cpu_isa_has(isa, DS_CPU_F_AVX512F))
            total += peak_avx512(20000000);
        else if (ds_cpu_isa_has(isa, DS_CPU_F_AVX2))
            total += peak_avx2(20000000);
        else
#endif
            total += peak_plain(2000000);
    }
    return total;
}

static float *randn(size_t n, ds_rng *r)
{
    float *x = ds_backend_cpu.alloc(n * sizeof *x);
    if (!x) ds_die("out of memory (%zu floats)", n);
    for (size_t i = 0; i < n; i++) x[i] = (float)ds_rng_normal(r);
    return x;
}

/* n random values in storage t: float32, or rounded to bf16. */
static void *rand_as(size_t n, ds_dtype t, ds_rng *r)
{
    float *x = randn(n, r);
    if (t == DS_F32) return x;
    void *h = ds_backend_cpu.alloc(n * ds_dtype_size(t));
    if (!h) ds_die("out of memory (%zu values)", n);
    ds_backend_cpu.to_bf16(h, x, &(ds_bf16_run){0, 0, n}, 1);
    ds_backend_cpu.free(x);
    return h;
}

/* Best of `reps` runs, in seconds. */
#define TIME_BEST(best, reps, stmt)                                \
    do {                                                           \
        best = INFINITY;                                           \
        for (int rep_ = 0; rep_ < (reps); rep_++) {                \
            double t0_ = bench_now();                              \
            stmt;                                                  \
            double dt_ = bench_now() - t0_;                        \
            best = dt_ < best ? dt_ : best;                        \
        }                                                          \
    } while (0)

/* The CPU backend of --precision. */
static const ds_backend *be_run = &ds_backend_cpu;

/* The op table's rows of one network (ops_cases.h: OPS_RESNET20, OPS_RESNET18, OPS_RESNET50). */
static void bench_net(const char *net, unsigned which, int reps, double peak)
{
    const ds_backend *be = be_run;
    ds_rng r;
    ds_rng_init(&r, 1, DS_RNG_DATA, 0);
    printf("\n%s (%d threads)\n%-26s %5s | %8s %6s | %8s %6s | %8s %6s\n", net, omp_get_max_threads(),
           "conv", "count", "fwd ms", "GF/s", "bwdD ms", "GF/s", "bwdW ms", "GF/s");
    double tot[3] = {0, 0, 0}, flops_all = 0, bn_total = 0;
    int batch = 0;
    for (size_t i = 0; i < OPS_COUNT(ops_convs); i++) {
        const ops_conv *s = &ops_convs[i];
        if (!(s->use & which)) continue;
        batch = s->n;
        /* The model's storage (docs/DESIGN.md §4): under bf16, bf16 activations and weights but
         * the stem's float32 input. */
        const ds_dtype at = be->precision == DS_PRECISION_BF16 ? DS_BF16 : DS_F32;
        ds_conv_desc d = ops_conv_desc(s, 0);
        d.in_t = s->c == 3 ? DS_F32 : at, d.out_t = d.w_t = at;
        d.no_dx = s->c == 3;  /* the network's input */
        size_t ni = (size_t)d.n * d.h * d.w * d.c, no = (size_t)d.n * d.p * d.q * d.k,
               nw = (size_t)d.k * d.r * d.s * d.c, sa = ds_dtype_size(at);
        void *in = rand_as(ni, d.in_t, &r), *w = rand_as(nw, at, &r), *g = rand_as(no, at, &r);
        void *out = be->alloc(no * sa), *din = be->alloc(ni * ds_dtype_size(d.in_t));
        float *dw = be->alloc(nw * 4);
        void *ws = be->alloc(be->conv_workspace(&d));
        if (!out || !din || !dw || !ws) ds_die("out of memory");
        double flops = 2.0 * no * d.r * d.s * d.c, t[3];
        TIME_BEST(t[0], reps, be->conv_fwd(out, in, w, &d, ws));
        t[1] = 0;
        if (!d.no_dx) TIME_BEST(t[1], reps, be->conv_bwd_data(din, g, w, &d, 0, ws));
        TIME_BEST(t[2], reps, be->conv_bwd_weight(dw, g, in, &d, ws));
        char bwd_data[32] = "       -      -";  /* not run: the network's input takes no gradient */
        if (!d.no_dx) snprintf(bwd_data, sizeof bwd_data, "%8.3f %6.1f", t[1] * 1e3, flops / t[1] / 1e9);
        printf("%-26s %5d | %8.3f %6.1f | %s | %8.3f %6.1f\n", s->name, s->count, t[0] * 1e3, flops / t[0] / 1e9,
               bwd_data, t[2] * 1e3, flops / t[2] / 1e9);
        for (int k = 0; k < 3; k++) tot[k] += t[k] * s->count;
        flops_all += (d.no_dx ? 2 : 3) * flops * s->count;

        // batch norm + ReLU on this conv's output, forward and backward (count times)
        float *mean = be->alloc(d.k * 4), *var = be->alloc(d.k * 4), *is = be->alloc(d.k * 4),
              *gam = randn(d.k, &r), *bet = randn(d.k, &r), *dg = be->alloc(d.k * 4),
              *db = be->alloc(d.k * 4);
        void *bno = be->alloc(no * sa), *bnd = be->alloc(no * sa), *bndin = be->alloc(no * sa);
        int m = d.n * d.p * d.q;
        double tb[2];
        TIME_BEST(tb[0], reps,
                  be->bn_fwd_train(bno, NULL, mean, var, is, NULL, NULL, out, gam, bet, NULL, 1, m, d.k, 1e-5f, at));
        TIME_BEST(tb[1], reps, (memcpy(bnd, g, no * sa),
                                be->bn_bwd(bndin, NULL, dg, db, bnd, bno, NULL, out, gam, mean, is, 1, m, d.k, at)));
        bn_total += (tb[0] + tb[1]) * s->count;
        be->free(mean), be->free(var), be->free(is), be->free(gam), be->free(bet), be->free(dg);
        be->free(db), be->free(bno), be->free(bnd), be->free(bndin);
        be->free(in), be->free(w), be->free(g), be->free(out), be->free(din), be->free(dw), be->free(ws);
    }
    double all = tot[0] + tot[1] + tot[2];
    printf("%-26s       | %8.2f        | %8.2f        | %8.2f\n", "total per step (ms)", tot[0] * 1e3,
           tot[1] * 1e3, tot[2] * 1e3);
    printf("convolutions: %.1f ms per training step (%.1f GFLOP), %.1f GFLOP/s = %.0f%% of the %.0f GFLOP/s peak\n",
           all * 1e3, flops_all / 1e9, flops_all / all / 1e9, 100 * flops_all / all / 1e9 / peak, peak);
    printf("batch norm + relu (fwd + bwd, after every conv): %.1f ms per step\n", bn_total * 1e3);
    printf("=> conv + bn bound: %.0f images/s (batch %d)\n", batch / (all + bn_total), batch);
}

/* Whole training steps: what the ops add up to inside the engine. */
static int bench_step(const char *arch, int batch, int size, int steps, int training)
{
    ds_model_config cfg = {.arch = arch, .num_classes = strcmp(arch, "resnet20") ? 1000 : 10, .max_batch = batch,
                           .height = size, .width = size, .training = training};
    ds_model *m = ds_model_create(be_run, &cfg);
    if (!m) return 1;
    ds_model_init(m, 1);
    ds_rng r;
    ds_rng_init(&r, 1, DS_RNG_DATA, 1);
    float *x = ds_model_input(m);
    for (size_t i = 0; i < (size_t)batch * size * size * 3; i++) x[i] = (float)ds_rng_normal(&r);
    int32_t *labels = malloc(batch * sizeof *labels);
    if (!labels) ds_die("out of memory");
    for (int i = 0; i < batch; i++) labels[i] = (int32_t)ds_rng_below(&r, cfg.num_classes);
    ds_sgd sgd = {.lr = 0.01f, .momentum = 0.9f, .weight_decay = 1e-4f, .bn_bias_decay = 1};
    double best = INFINITY, best_cpu = INFINITY;
    for (int s = 0; s < steps + 1; s++) {  // the first step warms caches and page tables
        int saved = cpu_clock;
        cpu_clock = 1;
        double c0 = bench_now() * omp_get_max_threads(), t0 = ds_now();
        if (training) {
            ds_model_zero_reduction(m);
            ds_model_forward(m, batch, 1);
            ds_model_backward(m, labels, batch, 1.0f / batch, 0);
            ds_model_step(m, &sgd, 1);
        } else {
            ds_model_forward(m, batch, 0);
        }
        double t = ds_now() - t0, c = bench_now() * omp_get_max_threads() - c0;
        cpu_clock = saved;
        if (s > 0 && t < best) best = t;
        if (s > 0 && c < best_cpu) best_cpu = c;
    }
    printf("%s %s %dx%d batch %d, %s, %d threads, cpu kernels %s: best step %.1f ms = %.0f images/s (wall); "
           "%.1f CPU-ms per step = %.0f images per CPU-second\n",
           training ? "training" : "inference", arch, size, size, batch, ds_precision_name(be_run->precision),
           omp_get_max_threads(),
           ds_cpu_isa_name(ds_cpu_isa_get()), best * 1e3, batch / best, best_cpu * 1e3,
           batch / best_cpu);
    free(labels);
    ds_model_free(m);
    return 0;
}

/* The input ops of a batch, as dstrain's CPU feed runs them. */
static int bench_input(int reps)
{
    enum { N = 64, H = 256, W = 256, C = 224 };
    uint8_t *in = malloc((size_t)N * H * W * 3), flip[N];
    float *out = malloc(sizeof(float) * N * C * C * 3);
    if (!in || !out) return ds_err("out of memory"), 1;
    ds_rng r;
    ds_rng_init(&r, 1, DS_RNG_DATA, 0);
    for (size_t i = 0; i < (size_t)N * H * W * 3; i++) in[i] = (uint8_t)ds_rng_below(&r, 256);
    int32_t y0[N], x0[N], bh[N], bw[N], cy[N], cx[N];
    for (int i = 0; i < N; i++) {   /* RandomResizedCrop's boxes */
        double area = H * W * (0.08 + 0.92 * ds_rng_double(&r));
        double ratio = exp(log(3.0 / 4) + (log(4.0 / 3) - log(3.0 / 4)) * ds_rng_double(&r));
        int w = (int)lround(sqrt(area * ratio)), h = (int)lround(sqrt(area / ratio));
        bw[i] = w > W ? W : w, bh[i] = h > H ? H : h;
        x0[i] = (int32_t)ds_rng_below(&r, (uint64_t)(W - bw[i] + 1));
        y0[i] = (int32_t)ds_rng_below(&r, (uint64_t)(H - bh[i] + 1));
        cx[i] = (int32_t)ds_rng_below(&r, W - C + 1), cy[i] = (int32_t)ds_rng_below(&r, H - C + 1);
        flip[i] = (uint8_t)(ds_rng_u32(&r) & 1);
    }
    const float mean[3] = {0.485f, 0.456f, 0.406f}, sd[3] = {0.229f, 0.224f, 0.225f};
    double best_n = INFINITY, best_r = INFINITY;
    for (int k = 0; k < reps; k++) {
        double t = bench_now();
        ds_backend_cpu.normalize_u8(out, in, N, H, W, C, C, cy, cx, flip, mean, sd);
        if ((t = bench_now() - t) < best_n) best_n = t;
        t = bench_now();
        ds_backend_cpu.resized_crop_u8(out, in, N, H, W, C, C, y0, x0, bh, bw, flip, mean, sd);
        if ((t = bench_now() - t) < best_r) best_r = t;
    }
    printf("input ops, %d images of %dx%d to %dx%d, %d threads (cpu kernels: %s), best of %d:\n", N, H, W, C, C,
           omp_get_max_threads(), ds_cpu_isa_name(ds_cpu_isa_get()), reps);
    printf("  %-38s %.3f ms per image\n", "normalize_u8 (crop, flip)", 1e3 * best_n / N);
    printf("  %-38s %.3f ms per image\n", "resized_crop_u8 (RandomResizedCrop)", 1e3 * best_r / N);
    free(in), free(out);
    return 0;
}

/* The kernel set's GEMMs (cpu_sgemm.h, cpu_bf16.h) on one thread, on the products the
 * convolutions hand them: a 3x3 convolution's implicit GEMM (the rows are a padded image's
 * pixels, c apart; the segments its three window rows, a padded row apart) and a 1x1's, over a
 * chunk of 512 pixels of a 16x16 image; best of `reps` runs of about 0.1 s each. Each rate
 * against one thread's peak for its precision (measure_peak). */
static int bench_gemm(int reps)
{
    static const struct { int r, c, k; } shapes[] = {{3, 16, 16}, {3, 32, 32}, {3, 64, 64}, {1, 64, 64}, {1, 256, 64}, {1, 64, 256}};
    const ds_cpu_isa isa = ds_cpu_isa_get();
    omp_set_num_threads(1);
    const double peak = measure_peak(0), peak16 = measure_peak(1);
    printf("gemm kernels of the %s set, one thread (peak: fp32 %.1f GFLOP/s, bf16 %.1f), best of %d:\n",
           ds_cpu_isa_name(isa), peak, peak16, reps);
    ds_rng rng;
    ds_rng_init(&rng, 1, DS_RNG_DATA, 2);
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        const int r = shapes[s].r, c = shapes[s].c, n = shapes[s].k, q = 16;
        const long m = 512, row = (long)(q + r - 1) * c, nseg = r, kseg = (long)r * c;
        const long seg_a = r == 1 ? 0 : row, a_len = m * c + nseg * row + kseg, kd = nseg * kseg;
        const long ldb = 2L * n, seg_b = ldb * kseg / 2;
        float *Af = randn((size_t)a_len, &rng), *Bf = randn((size_t)(kd * n), &rng), *C = randn((size_t)(m * n), &rng);
        ds_bf16 *A16 = ds_backend_cpu.alloc((size_t)a_len * sizeof *A16), *B16 = ds_backend_cpu.alloc((size_t)(kd * n) * sizeof *B16);
        if (!A16 || !B16) ds_die("out of memory");
        ds_bf16_round_n(A16, Af, (size_t)a_len);
        ds_bf16_round_n(B16, Bf, (size_t)(kd * n));
        const double flop = 2.0 * m * n * kd;
        double best[2] = {1e30, 1e30};
        for (int prec = 0; prec < 2; prec++) {
            long iters = 1;
            for (int rep = 0; rep < reps + 1; rep++) {
                double t = ds_now();
                for (long it = 0; it < iters; it++)
                    if (prec == 0)
                        ds_sgemm_seg_isa(isa, m, n, nseg, kseg, Af, c, 1, seg_a, Bf, n, (long)n * kseg, C, n, 0);
                    else
                        ds_bgemm_seg_isa(isa, m, n, nseg, kseg, A16, c, seg_a, B16, ldb, seg_b, C, n, 0);
                t = (ds_now() - t) / iters;
                if (rep == 0) iters = (long)(0.1 / t) + 1;  /* the first run sizes the others */
                else if (t < best[prec]) best[prec] = t;
            }
        }
        char shape[64];
        snprintf(shape, sizeof shape, "%dx%d %d->%d (m %ld, %ld x %ld)", r, r, c, n, m, nseg, kseg);
        printf("  %-30s fp32 %6.1f GFLOP/s (%3.0f%%)  bf16 %6.1f GFLOP/s (%3.0f%%)\n", shape, flop / best[0] / 1e9,
               100 * flop / best[0] / 1e9 / peak, flop / best[1] / 1e9, 100 * flop / best[1] / 1e9 / peak16);
        ds_backend_cpu.free(Af), ds_backend_cpu.free(Bf), ds_backend_cpu.free(C);
        ds_backend_cpu.free(A16), ds_backend_cpu.free(B16);
    }
    return 0;
}

int main(int argc, char **argv)
{
    ds_log_init("ops_bench");
    if (ds_cpu_isa_init()) return 1;
    const char *clk = getenv("DS_BENCH_CLOCK");
    cpu_clock = clk && !strcmp(clk, "cpu");
    if (argc > 2 && !strcmp(argv[1], "--precision")) {
        ds_backend_opts o = {0};
        if (ds_precision_parse(argv[2], &o.precision) || !(be_run = ds_backend_select(DS_DEVICE_CPU, &o))) return 2;
        argc -= 2, argv += 2;
    }
    const char *which = argc > 1 ? argv[1] : "all";
    if (!strcmp(which, "step") || !strcmp(which, "infer")) {
        if (argc < 5) {
            fprintf(stderr, "usage: ops_bench step|infer ARCH BATCH SIZE [steps]\n");
            return 2;
        }
        return bench_step(argv[2], atoi(argv[3]), atoi(argv[4]), argc > 5 ? atoi(argv[5]) : 5,
                          !strcmp(which, "step"));
    }
    int reps = argc > 2 ? atoi(argv[2]) : 3;
    if (reps < 1) reps = 1;
    if (!strcmp(which, "input")) return bench_input(reps < 5 ? 5 : reps);
    if (!strcmp(which, "gemm")) return bench_gemm(reps);
    static const struct { const char *arg, *name; unsigned use; } nets[] = {
        {"resnet20", "resnet20 32x32 batch 128", OPS_RESNET20},
        {"resnet18", "resnet18 224x224 batch 16", OPS_RESNET18},
        {"resnet50", "resnet50 224x224 batch 16", OPS_RESNET50},
    };
    int known = !strcmp(which, "all");
    for (size_t i = 0; i < sizeof nets / sizeof *nets; i++) known |= !strcmp(which, nets[i].arg);
    if (!known) {
        fprintf(stderr, "ops_bench: unknown network '%s' (resnet20, resnet18, resnet50 or all)\n", which);
        return 2;
    }
    const int bf16 = be_run->precision == DS_PRECISION_BF16, native = ds_cpu_isa_has(ds_cpu_isa_get(), DS_CPU_F_AVX512BF16);
    const double peak = measure_peak(bf16);
    printf("peak %s: %.0f GFLOP/s on %d threads (cpu kernels: %s; convolutions in %s)\n",
           !bf16 ? "fp32 FMA" : native ? "bf16 VDPBF16PS" : "bf16 by FMAs", peak, omp_get_max_threads(),
           ds_cpu_isa_name(ds_cpu_isa_get()), ds_precision_name(be_run->precision));
    for (size_t i = 0; i < sizeof nets / sizeof *nets; i++)
        if (!strcmp(which, nets[i].arg) || !strcmp(which, "all")) bench_net(nets[i].name, nets[i].use, reps, peak);
    return 0;
}
