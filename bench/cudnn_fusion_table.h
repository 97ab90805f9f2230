/* cudnn_fusion_table.h: the plan of bench/cudnn_fusion_probe (which graphs at which shapes)
 * and the turning of cuDNN's answers into its table, apart from cuDNN itself so that
 * tests/unit/test_fusion_table.c can feed it made-up answers on a machine without a GPU.
 * Nothing here calls CUDA or cuDNN; the note numbers are cuDNN's enum values, which the probe
 * checks against cudnn_graph.h when it is compiled. */
#ifndef DS_CUDNN_FUSION_TABLE_H
#define DS_CUDNN_FUSION_TABLE_H

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The distinct convolutions of ResNet-50's bottlenecks (torchvision's v1.5: the stride on
 * the 3x3), NHWC: c input channels at h x w, k filters r x r, stride; prologue: its input is
 * a batch norm's output through a ReLU with nothing added (the 3x3 and the expanding 1x1 of
 * each block), so the norm's scale, bias and ReLU can run inside the convolution. */
typedef struct {
    const char *name;
    int c, h, k, r, stride, prologue;
} fusion_shape;

static const fusion_shape fusion_shapes[] = {
    {"l1 1x1 64->64 (block 0)", 64, 56, 64, 1, 1, 0},
    {"l1 3x3 64", 64, 56, 64, 3, 1, 1},
    {"l1 1x1 64->256 (and downsample)", 64, 56, 256, 1, 1, 1},
    {"l1 1x1 256->64", 256, 56, 64, 1, 1, 0},
    {"l2 1x1 256->128 (block 0)", 256, 56, 128, 1, 1, 0},
    {"l2 3x3 128 /2", 128, 56, 128, 3, 2, 1},
    {"l2 1x1 128->512", 128, 28, 512, 1, 1, 1},
    {"l2 downsample 256->512 /2", 256, 56, 512, 1, 2, 0},
    {"l2 1x1 512->128", 512, 28, 128, 1, 1, 0},
    {"l2 3x3 128", 128, 28, 128, 3, 1, 1},
    {"l3 1x1 512->256 (block 0)", 512, 28, 256, 1, 1, 0},
    {"l3 3x3 256 /2", 256, 28, 256, 3, 2, 1},
    {"l3 1x1 256->1024", 256, 14, 1024, 1, 1, 1},
    {"l3 downsample 512->1024 /2", 512, 28, 1024, 1, 2, 0},
    {"l3 1x1 1024->256", 1024, 14, 256, 1, 1, 0},
    {"l3 3x3 256", 256, 14, 256, 3, 1, 1},
    {"l4 1x1 1024->512 (block 0)", 1024, 14, 512, 1, 1, 0},
    {"l4 3x3 512 /2", 512, 14, 512, 3, 2, 1},
    {"l4 1x1 512->2048", 512, 7, 2048, 1, 1, 1},
    {"l4 downsample 1024->2048 /2", 1024, 14, 2048, 1, 2, 0},
    {"l4 1x1 2048->512", 2048, 7, 512, 1, 1, 0},
    {"l4 3x3 512", 512, 7, 512, 3, 1, 1},
};
#define FUSION_SHAPES ((int)(sizeof fusion_shapes / sizeof *fusion_shapes))

static inline int fusion_out_size(const fusion_shape *s) { return (s->h + 2 * (s->r / 2) - s->r) / s->stride + 1; }

/* The graphs, each with the legacy call it is timed against (ds's own for that op). */
enum { FG_CONV_STATS, FG_SBR_CONV_STATS, FG_SBR_WGRAD, FG_DGRAD_DRELU_DBN, FG_WGRAD_F32, FUSION_GRAPHS };
enum { FUSION_LEGACY_FWD, FUSION_LEGACY_BWD_FILTER, FUSION_LEGACY_BWD_DATA };
static const struct {
    char letter;
    const char *name;
    int needs_prologue, legacy;
} fusion_graphs[FUSION_GRAPHS] = {
    {'a', "conv + statistics", 0, FUSION_LEGACY_FWD},
    {'b', "scale-bias-ReLU -> conv -> statistics", 1, FUSION_LEGACY_FWD},
    {'c', "scale-bias-ReLU -> wgrad", 1, FUSION_LEGACY_BWD_FILTER},
    {'d', "dgrad -> dReLU -> BN weight gradients", 1, FUSION_LEGACY_BWD_DATA},
    {'e', "wgrad, float32 result", 0, FUSION_LEGACY_BWD_FILTER},
};
static const char *const fusion_legacy_names[] = {"forward", "backward-filter (bf16)", "backward-data"};

static inline int fusion_applies(int graph, int shape)
{
    return !fusion_graphs[graph].needs_prologue || fusion_shapes[shape].prologue;
}

/* cuDNN's notes on an engine (cudnnBackendNumericalNote_t, cudnnBackendBehaviorNote_t:
 * the values, in order), as the table names them. */
static const char *const fusion_numerical_names[] = {"tensor-core", "down-converts inputs", "reduced-precision reduction",
                                                     "FFT", "NONDETERMINISTIC", "Winograd", "Winograd 4x4",
                                                     "Winograd 6x6", "Winograd 13x13", "strict NaN propagation"};
static const char *const fusion_behaviour_names[] = {"runtime-compiled", "int8x32 filter reorder", "int8x32 bias reorder",
                                                     "CUDA graph native", "cuBLASLt"};
#define FUSION_NOTE_NONDETERMINISTIC 4
#define FUSION_NOTE_RUNTIME_COMPILATION 0

/* A mask of the notes cuDNN listed (n values); values past 31 are dropped, values past the
 * names above are kept and named by number. */
static inline unsigned fusion_notes_mask(const int *notes, int n)
{
    unsigned m = 0;
    for (int i = 0; i < n; i++)
        if (notes[i] >= 0 && notes[i] < 32) m |= 1u << notes[i];
    return m;
}

/* "tensor-core, NONDETERMINISTIC; runtime-compiled", or "-" for no notes at all */
static inline void fusion_notes_text(char *buf, size_t size, unsigned numerical, unsigned behaviour)
{
    size_t at = 0;
    buf[0] = 0;
    for (int set = 0; set < 2; set++) {
        unsigned m = set ? behaviour : numerical;
        int known = set ? (int)(sizeof fusion_behaviour_names / sizeof *fusion_behaviour_names)
                        : (int)(sizeof fusion_numerical_names / sizeof *fusion_numerical_names);
        const char *const *names = set ? fusion_behaviour_names : fusion_numerical_names;
        int first = 1;
        for (int b = 0; b < 32 && at < size; b++) {
            if (!(m & (1u << b))) continue;
            const char *sep = first ? (set && at ? "; " : "") : ", ";
            at += b < known ? (size_t)snprintf(buf + at, size - at, "%s%s", sep, names[b])
                            : (size_t)snprintf(buf + at, size - at, "%s%s note %d", sep, set ? "behaviour" : "numerical", b);
            first = 0;
        }
    }
    if (!buf[0]) snprintf(buf, size, "-");
}

/* What the probe learned of one graph at one shape. */
#define FUSION_MAX_ENGINES 64
#define FUSION_MAX_RUNS 20
typedef enum {
    FUSION_NOT_REACHED = 0,  /* the deadline came first */
    FUSION_REFUSED,          /* the graph or cuDNN's heuristics refused: `where` and `status` say */
    FUSION_NO_PLAN,          /* engines offered, none finalized into a plan */
    FUSION_RUN_FAILED,       /* a plan, but executing it failed */
    FUSION_RAN,
} fusion_outcome;
typedef struct {
    int graph, shape;
    fusion_outcome outcome;
    char where[48], status[48];  /* the step cuDNN refused and its status name */
    int engines;                 /* configurations the heuristics offered */
    int engines_noted;           /* how many of those have notes below */
    long engine_index[FUSION_MAX_ENGINES];
    unsigned numerical[FUSION_MAX_ENGINES], behaviour[FUSION_MAX_ENGINES];
    int chosen;                  /* the offered configuration that made the plan, -1 none */
    double build_ms;             /* the plan's finalize (a runtime-compiled engine compiles here) */
    long long workspace;
    double ms[FUSION_MAX_RUNS];
    int runs;
    double legacy_ms[FUSION_MAX_RUNS];
    int legacy_runs, legacy_algo;
    int legacy_deterministic;
    int same_bits;               /* 3 runs: 1 bitwise the same, 0 not, -1 not checked */
} fusion_answer;

static inline int fusion_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* the median of n times (the mean of the middle two for even n); -1 for none */
static inline double fusion_median(const double *v, int n)
{
    if (n <= 0) return -1;
    double s[FUSION_MAX_RUNS];
    if (n > FUSION_MAX_RUNS) n = FUSION_MAX_RUNS;
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, fusion_cmp_double);
    return n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
}

static const char fusion_table_head[] =
    "| graph | shape (batch N, NHWC bf16) | finalizes | engines offered (their notes; * the plan's) | build ms "
    "| workspace MiB | fused ms (median) | legacy ms (median; algo) | fused / legacy | same bits in 3 runs |\n"
    "|---|---|---|---|---|---|---|---|---|---|\n";

/* One row of the table for answer a, at batch n. The engines column lists at most 6. */
static inline void fusion_row(char *buf, size_t size, const fusion_answer *a, int n)
{
    const fusion_shape *s = &fusion_shapes[a->shape];
    char shape[96], fin[128], eng[512], build[24] = "", ws[24] = "", fused[24] = "", leg[48] = "", ratio[16] = "",
         bits[24] = "";
    int p = fusion_out_size(s);
    snprintf(shape, sizeof shape, "%s: %dx%dx%dx%d -> %d %dx%d/%d (out %dx%d)", s->name, n, s->h, s->h, s->c, s->k, s->r,
             s->r, s->stride, p, p);
    switch (a->outcome) {
    case FUSION_NOT_REACHED: snprintf(fin, sizeof fin, "not reached (deadline)"); break;
    case FUSION_REFUSED: snprintf(fin, sizeof fin, "no: %s at %s", a->status, a->where); break;
    case FUSION_NO_PLAN: snprintf(fin, sizeof fin, "no plan: %s at %s", a->status, a->where); break;
    case FUSION_RUN_FAILED: snprintf(fin, sizeof fin, "yes; run failed: %s", a->status); break;
    case FUSION_RAN: snprintf(fin, sizeof fin, "yes"); break;
    }
    size_t at = (size_t)snprintf(eng, sizeof eng, "%d", a->engines);
    for (int i = 0; i < a->engines_noted && i < 6 && at < sizeof eng; i++) {
        char notes[160];
        fusion_notes_text(notes, sizeof notes, a->numerical[i], a->behaviour[i]);
        at += (size_t)snprintf(eng + at, sizeof eng - at, "%s#%ld%s (%s)", i ? ", " : ": ", a->engine_index[i],
                               i == a->chosen ? "*" : "", notes);
    }
    if (a->engines_noted > 6 && at < sizeof eng) snprintf(eng + at, sizeof eng - at, ", ...");
    if (a->outcome >= FUSION_RUN_FAILED) {
        snprintf(build, sizeof build, "%.0f", a->build_ms);
        snprintf(ws, sizeof ws, "%.1f", a->workspace / 1048576.0);
    }
    double f = fusion_median(a->ms, a->runs), l = fusion_median(a->legacy_ms, a->legacy_runs);
    if (f >= 0) snprintf(fused, sizeof fused, "%.3f", f);
    if (l >= 0)
        snprintf(leg, sizeof leg, "%.3f; algo %d%s", l, a->legacy_algo, a->legacy_deterministic ? "" : " (nondeterministic)");
    if (f >= 0 && l > 0) snprintf(ratio, sizeof ratio, "%.2fx", f / l);
    if (a->same_bits >= 0) snprintf(bits, sizeof bits, "%s", a->same_bits ? "same" : "DIFFER");
    snprintf(buf, size, "| %c | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", fusion_graphs[a->graph].letter, shape,
             fin, eng, build, ws, fused, leg, ratio, bits);
}

/* The verdict line of one graph over its shapes: how many finalize and ran, the median of
 * fused / legacy over the shapes that ran, how many plans took a nondeterministic or a
 * runtime-compiled engine, how many repeated their bits. */
static inline void fusion_summary(char *buf, size_t size, const fusion_answer *all, int count, int graph)
{
    int shapes = 0, reached = 0, ran = 0, nondet = 0, rtc = 0, same = 0;
    double ratios[FUSION_SHAPES];
    int nr = 0;
    for (int i = 0; i < count; i++) {
        const fusion_answer *a = &all[i];
        if (a->graph != graph) continue;
        shapes++;
        if (a->outcome == FUSION_NOT_REACHED) continue;
        reached++;
        if (a->outcome != FUSION_RAN) continue;
        ran++;
        if (a->chosen >= 0 && a->chosen < a->engines_noted) {
            nondet += !!(a->numerical[a->chosen] & (1u << FUSION_NOTE_NONDETERMINISTIC));
            rtc += !!(a->behaviour[a->chosen] & (1u << FUSION_NOTE_RUNTIME_COMPILATION));
        }
        same += a->same_bits == 1;
        double f = fusion_median(a->ms, a->runs), l = fusion_median(a->legacy_ms, a->legacy_runs);
        if (f >= 0 && l > 0 && nr < FUSION_SHAPES) ratios[nr++] = f / l;
    }
    char r[32] = "n/a";
    if (nr) {
        qsort(ratios, (size_t)nr, sizeof *ratios, fusion_cmp_double);
        snprintf(r, sizeof r, "%.2fx", nr % 2 ? ratios[nr / 2] : (ratios[nr / 2 - 1] + ratios[nr / 2]) / 2);
    }
    snprintf(buf, size,
             "fusion (%c) %s: %d of %d shapes ran (%d not reached), fused / legacy median %s over %d, "
             "%d nondeterministic and %d runtime-compiled plans, bits repeat in %d of %d\n",
             fusion_graphs[graph].letter, fusion_graphs[graph].name, ran, shapes, shapes - reached, r, nr, nondet, rtc, same,
             ran);
}

#endif
