/* test_cuda_plan: the CUDA backend's bookkeeping of convolution plans (backend/cuda_plan.h),
 * which is plain C and runs here without a GPU. A spy backend (the CPU one, with the plan
 * table in front of its convolutions as the CUDA backend has it) runs the real model: plans
 * are made for max_batch only, and every shorter batch must find them. Then the rules one by
 * one: n above the planned batch refused with a message, other shapes, storage types and
 * precisions not matched, the workspace limit over plans of one layer, the slots kept per
 * batch and input size, and inputs smaller than planned (ds_model_set_input_size) served by
 * the plan.
 * Choosing algorithms (ds_conv_choose) against made-up cuDNN answers: no backward-data for the
 * network's input, a bf16 op without a usable algorithm falling back to tf32 or fp32 alone,
 * fp32 refusing tensor-op math, the workspace budget, --deterministic with no deterministic
 * algorithm failing with a message that says what was answered; an algorithm that fails when
 * run replaced by the next usable one from the answers kept (then lower precisions), tf32
 * refusing math that may convert to fp16, a fallback chosen within its own precision's
 * copies; and a model whose backend cannot plan a layer failing to build, naming the layer. */
#include <string.h>

#include "../check.h"
#include "backend.h"
#include "backend/cuda_plan.h"
#include "log.h"
#include "model.h"

static ds_conv_plans table;
static int workspace_calls, runs, misses, fresh_slots;
static char last_why[160];

static size_t spy_workspace(const ds_conv_desc *d)
{
    workspace_calls++;
    size_t bytes = ds_backend_cpu.conv_workspace(d);
    if (!ds_conv_plans_exact(&table, d, 0, 0)) ds_conv_plans_add(&table, d, 0, 0, bytes, NULL);
    return bytes;
}

static void spy_run(const ds_conv_desc *d)
{
    size_t limit = 0;
    runs++;
    ds_conv_plan *p = ds_conv_plans_lookup(&table, d, 0, 0, &limit, last_why, sizeof last_why);
    if (!p) {
        misses++;
        return;
    }
    int fresh;
    ds_conv_plan_slot_for(&table, p, d, &fresh);
    fresh_slots += fresh;
}

static void spy_fwd(void *o, const void *i, const void *w, const ds_conv_desc *d, void *ws)
{
    spy_run(d);
    ds_backend_cpu.conv_fwd(o, i, w, d, ws);
}

static void spy_bwd_data(void *o, const void *i, const void *w, const ds_conv_desc *d, int accumulate, void *ws)
{
    spy_run(d);
    ds_backend_cpu.conv_bwd_data(o, i, w, d, accumulate, ws);
}

static void spy_bwd_weight(float *o, const void *i, const void *w, const ds_conv_desc *d, void *ws)
{
    spy_run(d);
    ds_backend_cpu.conv_bwd_weight(o, i, w, d, ws);
}

static ds_backend spy(void)
{
    ds_backend be = ds_backend_cpu;
    be.conv_workspace = spy_workspace;
    be.conv_fwd = spy_fwd;
    be.conv_bwd_data = spy_bwd_data;
    be.conv_bwd_weight = spy_bwd_weight;
    be.conv_fwd_bn = NULL;  /* as CUDA's: every forward goes through conv_fwd */
    return be;
}

/* resnet20 on 16x16 images planned at 64 (dseval's default batch): forwards of 64, 40 (the
 * last batch of 1000 images) and 1 all find their plans; each new batch size sets up one
 * slot per plan, once. */
static void test_model_batches(void)
{
    check_begin("cuda_plan_model_short_batches");
    ds_backend be = spy();
    ds_model_config mc = {.arch = "resnet20", .num_classes = 4, .max_batch = 64, .height = 16, .width = 16,
                          .training = 0};
    ds_model *m = ds_model_create(&be, &mc);
    CHECK(m != NULL, "model");
    ds_model_init(m, 1);
    CHECK(workspace_calls == 21, "%d conv_workspace calls, want resnet20's 21 convolutions", workspace_calls);
    for (int i = 0; i < table.count; i++) CHECK(table.v[i]->d.n == 64, "plan %d made for n=%d", i, table.v[i]->d.n);
    const int batches[] = {64, 40, 1, 40};
    for (int b = 0; b < 4; b++) {
        runs = misses = fresh_slots = 0;
        ds_model_forward(m, batches[b], 0);
        CHECK(runs == 21 && misses == 0, "forward of %d: %d of %d convolutions found no plan (%s)", batches[b],
              misses, runs, last_why);
        /* the shapes repeat within resnet20: one slot per plan and batch size, made once */
        int want = b == 3 ? 0 : table.count;
        CHECK(fresh_slots == want, "forward of %d: %d slots set up, want %d", batches[b], fresh_slots, want);
    }
    /* smaller inputs (progressive resizing, evaluation at another crop) find the plans made
     * at 16x16, one new slot per plan and size, none made again */
    const int sizes[][2] = {{12, 12}, {8, 12}, {12, 12}};
    for (int k = 0; k < 3; k++) {
        runs = misses = fresh_slots = 0;
        int calls = workspace_calls;
        CHECK(ds_model_set_input_size(m, sizes[k][0], sizes[k][1]) == 0, "set_input_size");
        ds_model_forward(m, 64, 0);
        CHECK(runs == 21 && misses == 0, "forward at %dx%d: %d of %d convolutions found no plan (%s)", sizes[k][0],
              sizes[k][1], misses, runs, last_why);
        int want = k < 2 ? table.count : 0;
        CHECK(fresh_slots == want, "forward at %dx%d: %d slots set up, want %d", sizes[k][0], sizes[k][1],
              fresh_slots, want);
        CHECK(workspace_calls == calls, "a smaller input planned again");
    }
    ds_model_free(m);

    /* training: forward and both backward ops of a short micro-batch */
    ds_conv_plans_free(&table);
    workspace_calls = 0;
    mc.training = 1;
    mc.max_batch = 8;
    m = ds_model_create(&be, &mc);
    ds_model_init(m, 1);
    int32_t labels[8] = {0, 1, 2, 3, 0, 1, 2, 3};
    runs = misses = 0;
    ds_model_zero_reduction(m);
    ds_model_forward(m, 3, 1);
    ds_model_backward(m, labels, 3, 1.0f / 3, 0);
    /* 21 forward, 21 weight-gradient, 20 data-gradient (none into the input image) */
    CHECK(runs == 62 && misses == 0, "training step of 3: %d of %d convolutions found no plan (%s)", misses, runs,
          last_why);
    ds_model_free(m);
    ds_conv_plans_free(&table);
    check_end();
}

static ds_conv_desc conv3x3(int n, int hw, int c, int k)
{
    return (ds_conv_desc){.n = n, .h = hw, .w = hw, .c = c, .k = k, .r = 3, .s = 3, .stride = 1, .pad = 1,
                          .p = hw, .q = hw};
}

static void test_rules(void)
{
    check_begin("cuda_plan_rules");
    ds_conv_plans t = {0};
    char why[160] = "";
    size_t limit = 0;
    ds_conv_desc d = conv3x3(64, 16, 16, 16);
    ds_conv_plan *p64 = ds_conv_plans_add(&t, &d, 0, 0, 1000, NULL);
    CHECK(p64 != NULL, "add");
    for (int n = 1; n <= 64; n++) {
        ds_conv_desc q = conv3x3(n, 16, 16, 16);
        CHECK(ds_conv_plans_lookup(&t, &q, 0, 0, &limit, why, sizeof why) == p64 && limit == 1000,
              "n=%d not served by the plan for 64", n);
    }
    ds_conv_desc big = conv3x3(65, 16, 16, 16);
    CHECK(!ds_conv_plans_lookup(&t, &big, 0, 0, &limit, why, sizeof why) && strstr(why, "at most 64"),
          "n=65 accepted, or refused without saying why (\"%s\")", why);
    ds_conv_desc other = conv3x3(64, 16, 16, 32);
    CHECK(!ds_conv_plans_lookup(&t, &other, 0, 0, &limit, why, sizeof why) && strstr(why, "never planned"),
          "another k matched (\"%s\")", why);
    other = d, other.stride = 2, other.p = other.q = 8;
    CHECK(!ds_conv_plans_lookup(&t, &other, 0, 0, &limit, why, sizeof why), "another stride matched");
    other = d, other.pad = 0, other.p = other.q = 14;
    CHECK(!ds_conv_plans_lookup(&t, &other, 0, 0, &limit, why, sizeof why), "another padding matched");
    /* storage types decide the copies in the workspace: each is part of the plan */
    other = d, other.in_t = DS_BF16;
    CHECK(!ds_conv_plans_lookup(&t, &other, 0, 0, &limit, why, sizeof why), "another input type matched");
    other = d, other.out_t = DS_BF16;
    CHECK(!ds_conv_plans_exact(&t, &other, 0, 0), "another output type matched exactly");
    other = d, other.w_t = DS_BF16;
    CHECK(!ds_conv_plans_lookup(&t, &other, 0, 0, &limit, why, sizeof why), "another weight type matched");
    CHECK(!ds_conv_plans_lookup(&t, &d, 2, 0, &limit, why, sizeof why), "another precision matched");
    CHECK(!ds_conv_plans_lookup(&t, &d, 0, 1, &limit, why, sizeof why), "another determinism matched");
    CHECK(ds_conv_plans_exact(&t, &d, 0, 0) == p64, "exact lookup");
    ds_conv_desc d40 = conv3x3(40, 16, 16, 16);
    CHECK(!ds_conv_plans_exact(&t, &d40, 0, 0), "exact lookup ignored n");

    /* slots: the same n reuses its slot; a new one takes an empty slot, then the oldest */
    int fresh, s64 = ds_conv_plan_slot(&t, p64, 64, &fresh);
    CHECK(fresh, "first use of n=64 not fresh");
    CHECK(ds_conv_plan_slot(&t, p64, 64, &fresh) == s64 && !fresh, "n=64 set up again");
    int s40 = ds_conv_plan_slot(&t, p64, 40, &fresh);
    CHECK(fresh && s40 != s64, "n=40 shares n=64's slot");
    CHECK(ds_conv_plan_slot(&t, p64, 64, &fresh) == s64 && !fresh, "n=64 lost its slot to n=40");
    ds_conv_plan_slot(&t, p64, 3, &fresh);
    ds_conv_plan_slot(&t, p64, 2, &fresh);   /* all DS_CONV_PLAN_SLOTS (4) slots in use */
    ds_conv_plan_slot(&t, p64, 64, &fresh);  /* now n=40's is the oldest */
    int s1 = ds_conv_plan_slot(&t, p64, 1, &fresh);
    CHECK(fresh && s1 == s40, "n=1 took slot %d, want the least recently used (%d)", s1, s40);
    CHECK(ds_conv_plan_slot(&t, p64, 64, &fresh) == s64 && !fresh, "n=64 evicted");
    ds_conv_plan_slot(&t, p64, 40, &fresh);
    CHECK(fresh, "n=40 still set up after its slot was reused");

    /* A second model plans the same shape at 128 with less workspace: a run of n <= 64 may
     * come from either model, so its limit is the smaller; the plans' slots are set up anew. */
    ds_conv_desc d128 = conv3x3(128, 16, 16, 16);
    ds_conv_plan *p128 = ds_conv_plans_add(&t, &d128, 0, 0, 600, NULL);
    ds_conv_plan_slot(&t, p64, 64, &fresh);
    CHECK(fresh, "slots kept after a plan of the same shape was added");
    CHECK(ds_conv_plans_lookup(&t, &d40, 0, 0, &limit, why, sizeof why) == p64 && limit == 600,
          "n=40: the smallest plan that serves it with the smallest limit (limit %zu)", limit);
    ds_conv_desc d100 = conv3x3(100, 16, 16, 16);
    CHECK(ds_conv_plans_lookup(&t, &d100, 0, 0, &limit, why, sizeof why) == p128 && limit == 600,
          "n=100 served by the plan for 128");
    CHECK(!ds_conv_plans_lookup(&t, &(ds_conv_desc){.n = 129, .h = 16, .w = 16, .c = 16, .k = 16, .r = 3,
                                                     .s = 3, .stride = 1, .pad = 1, .p = 16, .q = 16},
                                0, 0, &limit, why, sizeof why) && strstr(why, "at most 128"),
          "n=129 (\"%s\")", why);
    /* smaller inputs: served by the plan of the same layer that covers them */
    ds_conv_desc s12 = conv3x3(64, 12, 16, 16), s16x8 = conv3x3(1, 16, 16, 16), s20 = conv3x3(64, 20, 16, 16);
    s16x8.w = s16x8.q = 8;
    CHECK(ds_conv_plans_lookup(&t, &s12, 0, 0, &limit, why, sizeof why) == p64 && limit == 600,
          "64 at 12x12 not served by the plan for 64 at 16x16");
    CHECK(ds_conv_plans_lookup(&t, &s16x8, 0, 0, &limit, why, sizeof why) == p64, "16x8 not served");
    CHECK(!ds_conv_plans_lookup(&t, &s20, 0, 0, &limit, why, sizeof why) && strstr(why, "inputs up to 16x16"),
          "20x20 accepted, or refused without saying why (\"%s\")", why);
    int a = ds_conv_plan_slot_for(&t, p64, &s12, &fresh);
    CHECK(fresh && a != ds_conv_plan_slot(&t, p64, 64, &fresh), "64 at 12x12 shares the slot of 64 at 16x16");
    CHECK(ds_conv_plan_slot_for(&t, p64, &s12, &fresh) == a && !fresh, "64 at 12x12 set up again");
    /* a plan of the same layer at another size empties the slots (the limit may drop) */
    ds_conv_desc d32 = conv3x3(8, 32, 16, 16);
    ds_conv_plan *p8 = ds_conv_plans_add(&t, &d32, 0, 0, 300, NULL);
    ds_conv_plan_slot_for(&t, p64, &s12, &fresh);
    CHECK(fresh, "slots kept after a plan of the same layer at another size was added");
    CHECK(ds_conv_plans_lookup(&t, &s12, 0, 0, &limit, why, sizeof why) == p64 && limit == 600,
          "64 at 12x12: the plan for 8 at 32x32 does not cover it, its bytes must not count (limit %zu)", limit);
    ds_conv_desc s8 = conv3x3(8, 12, 16, 16);
    CHECK(ds_conv_plans_lookup(&t, &s8, 0, 0, &limit, why, sizeof why) == p8 && limit == 300,
          "8 at 12x12: the smallest covering plan, the smallest limit of all covering (limit %zu)", limit);

    /* plans of other shapes keep their slots */
    ds_conv_plan *po = ds_conv_plans_add(&t, &other, 0, 0, 10, NULL);
    ds_conv_plan_slot(&t, po, 5, &fresh);
    ds_conv_plans_add(&t, &d, 1, 0, 10, NULL);   /* the same shape in another precision */
    ds_conv_plan_slot(&t, po, 5, &fresh);
    CHECK(!fresh, "another shape's slot emptied");
    ds_conv_plans_free(&t);
    check_end();
}

/* ---- choosing algorithms against made-up answers ---- */

/* answers[op][precision]: what the fake cuDNN lists; n < 0: the query fails */
typedef struct {
    ds_conv_algo list[4];
    int n;
} answer;
static answer answers[DS_CONV_OPS][3];
static int queries[DS_CONV_OPS][3];

static int fake_query(void *ctx, const ds_conv_desc *d, ds_conv_op op, int precision, ds_conv_algo *out, int cap,
                      char *why, size_t len)
{
    queries[op][precision]++;
    const answer *a = &answers[op][precision];
    if (a->n < 0) {
        snprintf(why, len, "CUDNN_STATUS_BAD_PARAM: made up");
        return -1;
    }
    for (int i = 0; i < a->n && i < cap; i++) out[i] = a->list[i];
    return a->n;
}

static ds_conv_algo algo(int id, int ok, int det, ds_conv_math math, size_t mem)
{
    return (ds_conv_algo){.algo = id, .ok = ok, .status = ok ? "CUDNN_STATUS_SUCCESS" : "CUDNN_STATUS_NOT_SUPPORTED",
                          .deterministic = det, .math = math, .memory = mem};
}

/* Every op at every precision: one good algorithm (id 10 + precision) of the right math. */
static void answers_all_good(void)
{
    memset(queries, 0, sizeof queries);
    for (int op = 0; op < DS_CONV_OPS; op++)
        for (int p = 0; p < 3; p++) {
            answers[op][p].n = 1;
            answers[op][p].list[0] = algo(10 + p, 1, 1, p == DS_PRECISION_FP32 ? DS_MATH_FMA : DS_MATH_TENSOR_OP, 100);
        }
}

static void test_choose(void)
{
    check_begin("cuda_plan_choose_falls_back_never_dies");
    ds_conv_desc conv1 = {.n = 256, .h = 224, .w = 224, .c = 3, .k = 64, .r = 7, .s = 7, .stride = 2, .pad = 3,
                          .p = 112, .q = 112, .no_dx = 1};
    ds_conv_desc mid = conv3x3(256, 56, 64, 64);
    ds_conv_choice ch[DS_CONV_OPS];
    ds_conv_list lists[DS_CONV_OPS];
    char msg[1024], text[512];

    /* all answered: the run's precision for each op; no backward-data asked for conv1 */
    answers_all_good();
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0,
          "%s", msg);
    CHECK(!ch[DS_CONV_BWD_DATA].needed && queries[DS_CONV_BWD_DATA][2] + queries[DS_CONV_BWD_DATA][1] +
                                                  queries[DS_CONV_BWD_DATA][0] == 0,
          "backward-data of the network's input was planned (%d queries)", queries[DS_CONV_BWD_DATA][2]);
    CHECK(ch[DS_CONV_FWD].precision == DS_PRECISION_BF16 && ch[DS_CONV_FWD].algo == 12 &&
              ch[DS_CONV_BWD_FILTER].precision == DS_PRECISION_BF16,
          "forward %d/%d", ch[DS_CONV_FWD].precision, ch[DS_CONV_FWD].algo);
    ds_conv_choice_describe(ch, text, sizeof text);
    CHECK(strstr(text, "backward-data: not planned") && strstr(text, "forward: algo 12, tensor-op, bf16"), "%s", text);

    /* bf16 has no usable backward-filter (one not supported, one over budget): that op alone
     * computes in tf32; with tf32 failing too, in fp32 */
    answers[DS_CONV_BWD_FILTER][2].n = 2;
    answers[DS_CONV_BWD_FILTER][2].list[0] = algo(1, 0, 1, DS_MATH_TENSOR_OP, 0);
    answers[DS_CONV_BWD_FILTER][2].list[1] = algo(2, 1, 1, DS_MATH_TENSOR_OP, 5000);
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0,
          "%s", msg);
    CHECK(ch[DS_CONV_BWD_FILTER].precision == DS_PRECISION_TF32 && ch[DS_CONV_BWD_FILTER].algo == 11 &&
              ch[DS_CONV_FWD].precision == DS_PRECISION_BF16,
          "backward-filter fell back to %d (algo %d)", ch[DS_CONV_BWD_FILTER].precision, ch[DS_CONV_BWD_FILTER].algo);
    answers[DS_CONV_BWD_FILTER][1].n = 0;
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_BWD_FILTER].precision == DS_PRECISION_FP32 && ch[DS_CONV_BWD_FILTER].math == DS_MATH_FMA,
          "no fp32 fallback: %s", msg);

    /* fp32 takes plain FMA math only: a tensor-op (TF32) answer listed first is passed over */
    answers_all_good();
    answers[DS_CONV_FWD][0].n = 2;
    answers[DS_CONV_FWD][0].list[0] = algo(7, 1, 1, DS_MATH_TENSOR_OP, 10);
    answers[DS_CONV_FWD][0].list[1] = algo(8, 1, 1, DS_MATH_FMA, 10);
    CHECK(ds_conv_choose(&mid, DS_PRECISION_FP32, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_FWD].algo == 8 && ch[DS_CONV_BWD_DATA].needed,
          "fp32 forward took algo %d", ch[DS_CONV_FWD].algo);

    /* --deterministic: a non-deterministic answer is never taken; with none deterministic at
     * any precision the choice fails, saying which op and what cuDNN answered at each */
    answers_all_good();
    for (int p = 0; p < 3; p++) {
        answers[DS_CONV_BWD_FILTER][p].n = 3;
        for (int i = 0; i < 3; i++) answers[DS_CONV_BWD_FILTER][p].list[i] = algo(i, 1, 0, DS_MATH_FMA, 1);
    }
    answers[DS_CONV_BWD_FILTER][1].n = -1;
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 1, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == -1,
          "a non-deterministic algorithm was accepted under --deterministic");
    CHECK(strstr(msg, "backward-filter") && strstr(msg, "deterministic") &&
              strstr(msg, "bf16: 3 algorithms, 3 not deterministic") && strstr(msg, "tf32: the query failed") &&
              strstr(msg, "fp32: 3 algorithms, 3 not deterministic"),
          "message: %s", msg);
    printf("deterministic failure says: %s\n", msg);
    /* the same answers without --deterministic: the first one, except for a bf16 weight
     * gradient, which no non-deterministic algorithm computes (they add into the bf16 result,
     * rounding at every addition): there fp32's first, tf32's query having failed */
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_BWD_FILTER].precision == DS_PRECISION_FP32 && ch[DS_CONV_BWD_FILTER].algo == 0,
          "bf16 backward-filter took algo %d at %d: %s", ch[DS_CONV_BWD_FILTER].algo, ch[DS_CONV_BWD_FILTER].precision,
          msg);
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_TF32, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_BWD_FILTER].precision == DS_PRECISION_FP32 && ch[DS_CONV_BWD_FILTER].algo == 0,
          "tf32 run's backward-filter: algo %d at %d: %s", ch[DS_CONV_BWD_FILTER].algo,
          ch[DS_CONV_BWD_FILTER].precision, msg);
    /* cuDNN's order on the H200 for a 64x8x8x16 3x3 layer: algo 0 (not deterministic) first,
     * then algo 1: a bf16 run takes algo 1; a bf16 forward may be non-deterministic */
    answers[DS_CONV_BWD_FILTER][2].n = 2;
    answers[DS_CONV_BWD_FILTER][2].list[0] = algo(0, 1, 0, DS_MATH_DEFAULT, 0);
    answers[DS_CONV_BWD_FILTER][2].list[1] = algo(1, 1, 1, DS_MATH_TENSOR_OP, 0);
    answers[DS_CONV_FWD][2].list[0] = algo(0, 1, 0, DS_MATH_DEFAULT, 0);
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_BWD_FILTER].precision == DS_PRECISION_BF16 && ch[DS_CONV_BWD_FILTER].algo == 1 &&
              ch[DS_CONV_FWD].algo == 0,
          "bf16: backward-filter algo %d, forward algo %d: %s", ch[DS_CONV_BWD_FILTER].algo, ch[DS_CONV_FWD].algo, msg);
    answers[DS_CONV_BWD_FILTER][2].n = 1;
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_BWD_FILTER].precision == DS_PRECISION_FP32,
          "bf16 backward-filter with only a non-deterministic answer: precision %d", ch[DS_CONV_BWD_FILTER].precision);
    /* --verbose's account of an answer: cuDNN's order, each one's math, determinism,
     * workspace or failed status; a precision not asked, and one whose query failed */
    answers[DS_CONV_BWD_FILTER][2].n = 3;
    answers[DS_CONV_BWD_FILTER][2].list[1] = algo(1, 1, 1, DS_MATH_TENSOR_OP, 2 << 20);
    answers[DS_CONV_BWD_FILTER][2].list[2] = algo(6, 0, 1, DS_MATH_TENSOR_OP, 0);
    answers[DS_CONV_BWD_FILTER][1].n = -1;
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1 << 30, fake_query, NULL, lists, ch, msg, sizeof msg) == 0,
          "%s", msg);
    ds_conv_list_describe(&lists[DS_CONV_BWD_FILTER], DS_PRECISION_BF16, text, sizeof text);
    CHECK(!strcmp(text, "0 (default, not deterministic, 0.0 MiB) 1 (tensor-op, 2.0 MiB) 6 (CUDNN_STATUS_NOT_SUPPORTED)"),
          "bf16 answer described as: %s", text);
    ds_conv_list_describe(&lists[DS_CONV_BWD_FILTER], DS_PRECISION_TF32, text, sizeof text);
    CHECK(!strcmp(text, "not asked"), "tf32, never asked, described as: %s", text);
    answers[DS_CONV_BWD_FILTER][2].n = 1;   /* bf16 has nothing usable: tf32's query fails, fp32's answers */
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1 << 30, fake_query, NULL, lists, ch, msg, sizeof msg) == 0,
          "%s", msg);
    ds_conv_list_describe(&lists[DS_CONV_BWD_FILTER], DS_PRECISION_TF32, text, sizeof text);
    CHECK(!strcmp(text, "the query failed: CUDNN_STATUS_BAD_PARAM: made up"), "tf32's failed query described as: %s",
          text);

    /* nothing usable anywhere: failed statuses are named */
    for (int p = 0; p < 3; p++) answers[DS_CONV_FWD][p].n = 1, answers[DS_CONV_FWD][p].list[0] = algo(0, 0, 1, 0, 0);
    CHECK(ds_conv_choose(&mid, DS_PRECISION_TF32, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == -1 &&
              strstr(msg, "forward") && strstr(msg, "1 failed (CUDNN_STATUS_NOT_SUPPORTED)") && !strstr(msg, "bf16"),
          "message: %s", msg);
    check_end();
}

/* An algorithm that fails when it runs (cuda_conv.cu rules it out of the slot's list on the op's
 * first run and chooses again): the next usable one of the same answer, without asking cuDNN
 * again; with the run's precision used up, the next precision down (asked once); with none
 * left, a message naming the op and why each was ruled out. An algorithm ruled out at one
 * precision stays usable at another. */
static void test_next_after_failure(void)
{
    check_begin("cuda_plan_next_algorithm_after_a_run_failure");
    ds_conv_desc mid = conv3x3(32, 28, 64, 64);
    const ds_conv_budget b = {.limit = 1000};
    ds_conv_list list = {0};
    ds_conv_choice c;
    char msg[1024] = "";
    answers_all_good();
    answers[DS_CONV_FWD][2].n = 3;
    for (int i = 0; i < 3; i++) answers[DS_CONV_FWD][2].list[i] = algo(i, 1, 1, DS_MATH_TENSOR_OP, 100);
    CHECK(ds_conv_choose_op(&mid, DS_CONV_FWD, DS_PRECISION_BF16, 0, &b, fake_query, NULL, &list, &c, msg,
                            sizeof msg) == 0 && c.algo == 0 && c.precision == DS_PRECISION_BF16,
          "first choice algo %d (%s)", c.algo, msg);
    for (int next = 1; next < 3; next++) {
        const char *why = "algo failed when run: CUDNN_STATUS_EXECUTION_FAILED";
        CHECK(ds_conv_list_rule_out(&list, c.precision, c.algo, why) == 0, "rule out");
        CHECK(ds_conv_choose_op(&mid, DS_CONV_FWD, DS_PRECISION_BF16, 0, &b, fake_query, NULL, &list, &c, msg,
                                sizeof msg) == 0 && c.algo == next && c.precision == DS_PRECISION_BF16,
              "after algo %d failed: algo %d at %d, want algo %d in bf16 (%s)", next - 1, c.algo, c.precision, next,
              msg);
    }
    CHECK(queries[DS_CONV_FWD][2] == 1 && queries[DS_CONV_FWD][1] == 0, "cuDNN asked again: bf16 %d, tf32 %d times",
          queries[DS_CONV_FWD][2], queries[DS_CONV_FWD][1]);
    /* bf16 used up: tf32's algorithm, its answer asked once; the same id ruled out in bf16 is
     * another precision's algorithm there */
    answers[DS_CONV_FWD][1].list[0] = algo(2, 1, 1, DS_MATH_TENSOR_OP, 100);
    ds_conv_list_rule_out(&list, c.precision, c.algo, "algo 2 failed when run: CUDNN_STATUS_NOT_SUPPORTED");
    CHECK(ds_conv_choose_op(&mid, DS_CONV_FWD, DS_PRECISION_BF16, 0, &b, fake_query, NULL, &list, &c, msg,
                            sizeof msg) == 0 && c.precision == DS_PRECISION_TF32 && c.algo == 2,
          "bf16 used up: algo %d at %d (%s)", c.algo, c.precision, msg);
    ds_conv_list_rule_out(&list, c.precision, c.algo, "algo 2 failed when run: CUDNN_STATUS_BAD_PARAM");
    CHECK(ds_conv_choose_op(&mid, DS_CONV_FWD, DS_PRECISION_BF16, 0, &b, fake_query, NULL, &list, &c, msg,
                            sizeof msg) == 0 && c.precision == DS_PRECISION_FP32 && c.algo == 10,
          "tf32 used up: algo %d at %d (%s)", c.algo, c.precision, msg);
    CHECK(queries[DS_CONV_FWD][1] == 1 && queries[DS_CONV_FWD][0] == 1, "asked tf32 %d, fp32 %d times",
          queries[DS_CONV_FWD][1], queries[DS_CONV_FWD][0]);
    ds_conv_list_rule_out(&list, c.precision, c.algo, "algo 10 failed when run: CUDNN_STATUS_EXECUTION_FAILED");
    CHECK(ds_conv_choose_op(&mid, DS_CONV_FWD, DS_PRECISION_BF16, 0, &b, fake_query, NULL, &list, &c, msg,
                            sizeof msg) == -1,
          "a choice with every algorithm ruled out");
    CHECK(strstr(msg, "forward") &&
              strstr(msg, "bf16: 3 algorithms, 3 ruled out after the answer (algo failed when run: "
                          "CUDNN_STATUS_EXECUTION_FAILED)") &&
              strstr(msg, "tf32: 1 algorithm, 1 ruled out after the answer (algo 2 failed when run: "
                          "CUDNN_STATUS_BAD_PARAM)") &&
              strstr(msg, "fp32: 1 algorithm, 1 ruled out"),
          "message: %s", msg);
    printf("every algorithm failing says: %s\n", msg);
    /* a planning choice starts from empty lists: nothing ruled out carries over */
    ds_conv_list lists[DS_CONV_OPS];
    ds_conv_choice ch[DS_CONV_OPS];
    lists[DS_CONV_FWD] = list;
    CHECK(ds_conv_choose(&mid, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_FWD].algo == 0 && ch[DS_CONV_FWD].precision == DS_PRECISION_BF16,
          "planning kept what a slot ruled out (algo %d, %s)", ch[DS_CONV_FWD].algo, msg);
    CHECK(ds_conv_list_rule_out(&list, 0, DS_CONV_ALGO_IDS, "x") == -1 && ds_conv_list_rule_out(&list, 3, 0, "x") == -1,
          "an id or a precision a list cannot hold was taken");
    check_end();
}

/* tf32 refuses math that allows conversion (it may compute float32 tensors in fp16), also
 * when bf16 falls back to it; plain tensor-op math it takes. */
static void test_tf32_no_conversion(void)
{
    check_begin("cuda_plan_tf32_refuses_fp16_conversion");
    ds_conv_desc conv1 = {.n = 256, .h = 224, .w = 224, .c = 3, .k = 64, .r = 7, .s = 7, .stride = 2, .pad = 3,
                          .p = 112, .q = 112, .no_dx = 1};
    ds_conv_choice ch[DS_CONV_OPS];
    ds_conv_list lists[DS_CONV_OPS];
    char msg[1024] = "";
    answers_all_good();
    answers[DS_CONV_FWD][1].n = 2;
    answers[DS_CONV_FWD][1].list[0] = algo(1, 1, 1, DS_MATH_TENSOR_OP_CONVERSION, 10);
    answers[DS_CONV_FWD][1].list[1] = algo(2, 1, 1, DS_MATH_TENSOR_OP, 10);
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_TF32, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_FWD].algo == 2 && ch[DS_CONV_FWD].math == DS_MATH_TENSOR_OP,
          "tf32 took algo %d with math %s", ch[DS_CONV_FWD].algo, ds_conv_math_name(ch[DS_CONV_FWD].math));
    /* bf16 with nothing usable, tf32 with conversion only: the op computes in fp32 */
    answers[DS_CONV_FWD][2].list[0] = algo(0, 0, 1, DS_MATH_TENSOR_OP, 0);
    answers[DS_CONV_FWD][1].n = 1;
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_FWD].precision == DS_PRECISION_FP32 && ch[DS_CONV_FWD].math == DS_MATH_FMA,
          "bf16's fallback took %s math in %s", ds_conv_math_name(ch[DS_CONV_FWD].math),
          ds_precision_name((ds_precision)ch[DS_CONV_FWD].precision));
    /* bf16's own tensor-op answer is what bf16 asks for */
    answers[DS_CONV_FWD][2].list[0] = algo(3, 1, 1, DS_MATH_TENSOR_OP, 0);
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == 0 &&
              ch[DS_CONV_FWD].precision == DS_PRECISION_BF16 && ch[DS_CONV_FWD].algo == 3,
          "bf16 refused its tensor-op algorithm");
    answers[DS_CONV_FWD][0].n = 0;
    answers[DS_CONV_FWD][2].list[0] = algo(0, 0, 1, DS_MATH_TENSOR_OP, 0);
    CHECK(ds_conv_choose(&conv1, DS_PRECISION_BF16, 0, 1000, fake_query, NULL, lists, ch, msg, sizeof msg) == -1 &&
              strstr(msg, "tf32: 1 algorithm, 1 may compute in fp16"),
          "message: %s", msg);
    check_end();
}

/* A fallback to a lower precision is chosen within that precision's own budget: its copies
 * (float32 copies of bf16 tensors are twice as large) come first, cuDNN's workspace in what
 * is left; a precision whose copies alone exceed the limit is not even asked. */
static void test_budget_per_precision(void)
{
    check_begin("cuda_plan_fallback_within_its_own_copies");
    ds_conv_desc mid = conv3x3(32, 28, 64, 64);
    ds_conv_list list = {0};
    ds_conv_choice c;
    char msg[1024] = "";
    answers_all_good();
    answers[DS_CONV_FWD][2].list[0] = algo(0, 0, 1, DS_MATH_TENSOR_OP, 0);   /* bf16: nothing usable */
    answers[DS_CONV_FWD][1].list[0] = algo(5, 1, 1, DS_MATH_TENSOR_OP, 300);
    answers[DS_CONV_FWD][0].list[0] = algo(6, 1, 1, DS_MATH_FMA, 150);
    /* bf16 storage computed in bf16 copies nothing; in tf32 or fp32 every tensor is copied */
    const ds_conv_budget b = {.limit = 1000, .copies = {800, 800, 0}};
    CHECK(ds_conv_choose_op(&mid, DS_CONV_FWD, DS_PRECISION_BF16, 0, &b, fake_query, NULL, &list, &c, msg,
                            sizeof msg) == 0 && c.precision == DS_PRECISION_FP32 && c.algo == 6,
          "took algo %d in %s: tf32's 300 bytes do not fit beside its 800 of copies", c.algo,
          ds_precision_name((ds_precision)c.precision));
    const ds_conv_budget tight = {.limit = 1000, .copies = {1200, 1200, 0}};
    memset(&list, 0, sizeof list);
    memset(queries, 0, sizeof queries);
    CHECK(ds_conv_choose_op(&mid, DS_CONV_FWD, DS_PRECISION_BF16, 0, &tight, fake_query, NULL, &list, &c, msg,
                            sizeof msg) == -1 &&
              queries[DS_CONV_FWD][1] == 0 && queries[DS_CONV_FWD][0] == 0,
          "a precision whose copies exceed the limit was chosen or asked (tf32 %d, fp32 %d)", queries[DS_CONV_FWD][1],
          queries[DS_CONV_FWD][0]);
    CHECK(strstr(msg, "tf32: not asked, its copies take 1200 bytes of the 1000 planned"), "message: %s", msg);
    check_end();
}

/* A backend that cannot plan one layer (conv_workspace returns SIZE_MAX): the model is not
 * built, and the message names the layer. */
static size_t refusing_workspace(const ds_conv_desc *d)
{
    if (d->c == 3) {
        ds_err("no algorithm (made up)");
        return SIZE_MAX;
    }
    return ds_backend_cpu.conv_workspace(d);
}

static void test_unplannable_layer(void)
{
    check_begin("cuda_plan_unplannable_layer_stops_the_model");
    ds_backend be = ds_backend_cpu;
    be.conv_workspace = refusing_workspace;
    ds_model_config mc = {.arch = "resnet20", .num_classes = 4, .max_batch = 4, .height = 16, .width = 16,
                          .training = 1};
    fprintf(stderr, "(an error naming conv1 is expected here)\n");
    ds_model *m = ds_model_create(&be, &mc);
    CHECK(m == NULL, "a model was built around a layer its backend cannot run");
    ds_model_free(m);
    check_end();
}

int main(void)
{
    ds_log_init("test_cuda_plan");
    test_model_batches();
    test_rules();
    test_choose();
    test_next_after_failure();
    test_tf32_no_conversion();
    test_budget_per_precision();
    test_unplannable_layer();
    return check_exit();
}
