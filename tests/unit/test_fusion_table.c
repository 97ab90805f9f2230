/* bench/cudnn_fusion_table.h: the plan of bench/cudnn_fusion_probe and the turning of
 * cuDNN's answers into its table, fed made-up answers (no GPU, no cuDNN): the 22 distinct
 * bottleneck shapes and which graphs apply to each; cuDNN's note values named (and one it
 * may add later named by number); a row for each outcome (ran, refused, no plan, not
 * reached); the median; the verdict line per graph. */
#include <stdio.h>
#include <string.h>

#include "../check.h"
#include "../../bench/cudnn_fusion_table.h"

static int has(const char *s, const char *part)
{
    if (strstr(s, part)) return 1;
    fprintf(stderr, "  no '%s' in: %s", part, s);
    return 0;
}

static void test_plan(void)
{
    check_begin("fusion probe: 22 distinct bottleneck shapes, 11 with a prologue, 77 graphs");
    int prologue = 0, graphs = 0;
    for (int i = 0; i < FUSION_SHAPES; i++) {
        const fusion_shape *s = &fusion_shapes[i];
        prologue += s->prologue;
        for (int j = 0; j < i; j++) {
            const fusion_shape *t = &fusion_shapes[j];
            CHECK(!(s->c == t->c && s->h == t->h && s->k == t->k && s->r == t->r && s->stride == t->stride),
                  "shapes %d and %d are the same", i, j);
        }
        for (int g = 0; g < FUSION_GRAPHS; g++) graphs += fusion_applies(g, i);
        /* a 3x3 always follows a norm and a ReLU; a strided 1x1 is a downsample, which never does */
        if (s->r == 3) CHECK(s->prologue, "%s: a 3x3 without a prologue", s->name);
        if (s->r == 1 && s->stride == 2) CHECK(!s->prologue, "%s: a downsample with a prologue", s->name);
    }
    CHECK(FUSION_SHAPES == 22, "%d shapes", FUSION_SHAPES);
    CHECK(prologue == 11, "%d shapes with a prologue", prologue);
    CHECK(graphs == 2 * 22 + 3 * 11, "%d graphs", graphs);
    CHECK(fusion_out_size(&fusion_shapes[5]) == 28 && fusion_out_size(&fusion_shapes[19]) == 7 &&
              fusion_out_size(&fusion_shapes[1]) == 56,
          "output sizes");
    check_end();
}

static void test_notes(void)
{
    check_begin("fusion probe: cuDNN's notes named");
    char buf[256];
    int num[] = {0, 4}, beh[] = {0}, later[] = {2, 12}, junk[] = {-1, 40};
    fusion_notes_text(buf, sizeof buf, fusion_notes_mask(num, 2), fusion_notes_mask(beh, 1));
    CHECK(!strcmp(buf, "tensor-core, NONDETERMINISTIC; runtime-compiled"), "got '%s'", buf);
    fusion_notes_text(buf, sizeof buf, fusion_notes_mask(later, 2), 0);
    CHECK(!strcmp(buf, "reduced-precision reduction, numerical note 12"), "got '%s'", buf);
    fusion_notes_text(buf, sizeof buf, 0, fusion_notes_mask(beh, 1));
    CHECK(!strcmp(buf, "runtime-compiled"), "got '%s'", buf);
    fusion_notes_text(buf, sizeof buf, fusion_notes_mask(junk, 2), 0);
    CHECK(!strcmp(buf, "-"), "values out of range dropped: got '%s'", buf);
    check_end();
}

static fusion_answer ran(int graph, int shape, double fused, double legacy, int chosen_notes)
{
    fusion_answer a = {.graph = graph, .shape = shape, .outcome = FUSION_RAN, .engines = 3, .engines_noted = 3,
                       .chosen = 1, .build_ms = 1234.4, .workspace = 3 << 20, .runs = 20, .legacy_runs = 20,
                       .legacy_algo = 1, .legacy_deterministic = 1, .same_bits = 1};
    for (int i = 0; i < 3; i++) a.engine_index[i] = 10 + i, a.numerical[i] = 1;
    a.numerical[1] = (unsigned)chosen_notes, a.behaviour[1] = 1;
    for (int i = 0; i < 20; i++) a.ms[i] = fused + (i % 5 == 0 ? 5 : 0), a.legacy_ms[i] = legacy + (i == 3 ? 9 : 0);
    return a;
}

static void test_rows(void)
{
    check_begin("fusion probe: a row for each outcome");
    char row[2048];
    fusion_answer a = ran(FG_SBR_CONV_STATS, 1, 1.0, 0.8, 1 | 1 << FUSION_NOTE_NONDETERMINISTIC);
    fusion_row(row, sizeof row, &a, 256);
    CHECK(has(row, "| b | l1 3x3 64: 256x56x56x64 -> 64 3x3/1 (out 56x56) | yes | 3: #10 (tensor-core), "
                   "#11* (tensor-core, NONDETERMINISTIC; runtime-compiled), #12 (tensor-core) | 1234 | 3.0 | 1.000 "
                   "| 0.800; algo 1 | 1.25x | same |"),
          "a graph that ran");
    a.same_bits = 0, a.legacy_deterministic = 0;
    fusion_row(row, sizeof row, &a, 256);
    CHECK(has(row, "| 0.800; algo 1 (nondeterministic) | 1.25x | DIFFER |"), "bits that differ");
    fusion_answer r = {.graph = FG_DGRAD_DRELU_DBN, .shape = 2, .outcome = FUSION_REFUSED, .chosen = -1, .same_bits = -1};
    snprintf(r.where, sizeof r.where, "the graph's finalize");
    snprintf(r.status, sizeof r.status, "CUDNN_STATUS_NOT_SUPPORTED");
    fusion_row(row, sizeof row, &r, 256);
    CHECK(has(row, "| d | l1 1x1 64->256 (and downsample): 256x56x56x64 -> 256 1x1/1 (out 56x56) "
                   "| no: CUDNN_STATUS_NOT_SUPPORTED at the graph's finalize | 0 |  |  |  |  |  |  |\n"),
          "a refused graph");
    r.outcome = FUSION_NO_PLAN, r.engines = 2, r.engines_noted = 2;
    snprintf(r.where, sizeof r.where, "every plan's finalize");
    fusion_row(row, sizeof row, &r, 256);
    CHECK(has(row, "| no plan: CUDNN_STATUS_NOT_SUPPORTED at every plan's finalize | 2: #0 (-), #0 (-) |"),
          "engines offered, no plan");
    fusion_answer n = {.graph = FG_WGRAD_F32, .shape = 21, .chosen = -1, .same_bits = -1};
    fusion_row(row, sizeof row, &n, 256);
    CHECK(has(row, "| e | l4 3x3 512: 256x7x7x512 -> 512 3x3/1 (out 7x7) | not reached (deadline) |"), "not reached");
    double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2};
    CHECK(fusion_median(odd, 3) == 3 && fusion_median(even, 4) == 2.5 && fusion_median(odd, 0) == -1, "median");
    check_end();
}

static void test_summary(void)
{
    check_begin("fusion probe: the verdict line of a graph");
    fusion_answer all[5] = {
        ran(FG_CONV_STATS, 0, 1.0, 1.0, 1),
        ran(FG_CONV_STATS, 1, 2.2, 2.0, 1 << FUSION_NOTE_NONDETERMINISTIC),   /* no tensor-core note */
        ran(FG_CONV_STATS, 2, 3.6, 3.0, 1),
        {.graph = FG_CONV_STATS, .shape = 3, .outcome = FUSION_REFUSED, .chosen = -1, .same_bits = -1},
        {.graph = FG_CONV_STATS, .shape = 4, .chosen = -1, .same_bits = -1},
    };
    all[2].same_bits = 0;
    char line[512];
    fusion_summary(line, sizeof line, all, 5, FG_CONV_STATS);
    CHECK(!strcmp(line, "fusion (a) conv + statistics: 3 of 5 shapes ran (1 not reached), fused / legacy median 1.10x "
                        "over 3, 1 nondeterministic and 3 runtime-compiled plans, bits repeat in 2 of 3\n"),
          "got '%s'", line);
    fusion_summary(line, sizeof line, all, 5, FG_WGRAD_F32);
    CHECK(has(line, "0 of 0 shapes ran (0 not reached), fused / legacy median n/a over 0"), "a graph with no answers");
    check_end();
}

int main(void)
{
    test_plan();
    test_notes();
    test_rows();
    test_summary();
    return check_exit();
}
