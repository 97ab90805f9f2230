/* Scoring (topk.c): top-1 / top-5 with ties broken as a stable sort would, samples marked
 * invalid left out, cross-entropy against a plain double-precision softmax (and finite for a
 * confident wrong answer), samples with a NaN or an Inf logit counted wrong, per-class
 * counts, and the --per-class CSV with quoted names and empty cells for an empty class.
 * ds_topk_reduce's sum across ranks is tested by test_dstrain_mpi.sh (dseval under 1-3
 * ranks). */
#include "../check.h"
#include "fsutil.h"
#include "topk.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define C 7

/* -log softmax(z)[y], computed directly: fine for the small logits it is given here. */
static double xent(const float *z, int y)
{
    double s = 0;
    for (int c = 0; c < C; c++) s += exp(z[c]);
    return log(s) - z[y];
}

static void test_ranks(void)
{
    check_begin("top1_top5_ties_and_invalid_samples");
    /* rank of the label = classes with a larger logit, or an equal one at a smaller index */
    const float z[6][C] = {
        {0.1f, 0.2f, 3.0f, 0.4f, 0.5f, 0.6f, 0.7f},   /* label 2, rank 0 */
        {0.0f, 2.0f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f},   /* label 3 ties class 1 before it: rank 1 */
        {0.0f, 2.0f, 0.0f, 2.0f, 0.0f, 0.0f, 0.0f},   /* label 1 ties class 3 after it: rank 0 */
        {0.5f, 0.6f, 0.7f, 0.8f, 0.9f, 0.2f, 0.3f},   /* label 6, five above: rank 5 */
        {0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.0f, 0.05f},  /* label 0, four above: rank 4 */
        {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 9.0f, 0.0f},   /* label 5, invalid: not counted */
    };
    const int32_t labels[6] = {2, 3, 1, 6, 0, 5};
    const uint8_t valid[6] = {1, 1, 1, 1, 1, 0};
    ds_topk t;
    ds_topk_init(&t, C);
    ds_topk_add(&t, &z[0][0], labels, valid, 3);       /* two batches: counts accumulate */
    ds_topk_add(&t, &z[3][0], labels + 3, valid + 3, 3);
    CHECK(t.count == 5 && t.top1 == 2 && t.top5 == 4, "count %lld top1 %lld top5 %lld, want 5 2 4",
          (long long)t.count, (long long)t.top1, (long long)t.top5);
    double got[2] = {ds_topk_top1(&t), ds_topk_top5(&t)}, want[2] = {2.0 / 5, 4.0 / 5};
    check_close_d("fractions", got, want, 2, 0, 1e-15);
    const int64_t count[C] = {1, 1, 1, 1, 0, 0, 1}, top1[C] = {0, 1, 1, 0, 0, 0, 0}, top5[C] = {1, 1, 1, 1, 0, 0, 0};
    for (int c = 0; c < C; c++)
        CHECK(t.class_count[c] == count[c] && t.class_top1[c] == top1[c] && t.class_top5[c] == top5[c],
              "class %d: %lld %lld %lld, want %lld %lld %lld", c, (long long)t.class_count[c],
              (long long)t.class_top1[c], (long long)t.class_top5[c], (long long)count[c], (long long)top1[c],
              (long long)top5[c]);
    /* mean cross-entropy of the five valid samples; topk sums in double from float logits, so
     * only rounding separates the two (1e-12 relative) */
    double loss = 0;
    for (int i = 0; i < 5; i++) loss += xent(z[i], labels[i]);
    double gl = ds_topk_loss(&t), wl = loss / 5;
    check_close_d("loss", &gl, &wl, 1, 0, 1e-12);
    ds_topk_free(&t);
    check_end();
}

static void test_extremes(void)
{
    check_begin("loss_finite_for_confident_wrong_answer_and_empty_is_zero");
    ds_topk t;
    ds_topk_init(&t, C);
    double zero[3] = {ds_topk_top1(&t), ds_topk_top5(&t), ds_topk_loss(&t)}, want0[3] = {0, 0, 0};
    check_close_d("empty", zero, want0, 3, 0, 0);
    /* exp(1000) overflows a double: the loss must still be 1000 (log-sum-exp from the max) */
    float z[C] = {1000.0f, 0, 0, 0, 0, 0, 0};
    int32_t y = 3;
    ds_topk_add(&t, z, &y, NULL, 1);
    double got = ds_topk_loss(&t), want = 1000.0;
    check_close_d("loss", &got, &want, 1, 0, 1e-12);
    CHECK(t.top1 == 0 && t.top5 == 1, "top1 %lld top5 %lld, want 0 1 (label 3 ties 1, 2 before it)",
          (long long)t.top1, (long long)t.top5);
    ds_topk_free(&t);
    check_end();
}

static void test_nonfinite(void)
{
    check_begin("nonfinite_logits_count_wrong");
    /* each of the first five would score as right (top-1) or within top-5 if a comparison with
     * a NaN or an Inf decided it: a NaN label logit has no larger class, a NaN elsewhere is
     * larger than nothing */
    const float z[6][C] = {
        {0.1f, NAN, 0.3f, 0.2f, 0.0f, 0.0f, 0.0f},        /* label 1 is the NaN */
        {0.1f, 5.0f, NAN, 0.2f, 0.0f, 0.0f, 0.0f},        /* label 1 largest of the finite */
        {INFINITY, 5.0f, 0.3f, 0.2f, 0.0f, 0.0f, 0.0f},   /* label 1 second: a top-5 hit */
        {0.1f, INFINITY, 0.3f, 0.2f, 0.0f, 0.0f, 0.0f},   /* label 1 is +Inf */
        {0.1f, 5.0f, 0.3f, 0.2f, 0.0f, -INFINITY, 0.0f},  /* label 1 largest, a -Inf elsewhere */
        {0.1f, 5.0f, 0.3f, 0.2f, 0.0f, 0.0f, 0.0f},       /* finite, label 1 right */
    };
    const int32_t labels[6] = {1, 1, 1, 1, 1, 1};
    ds_topk t;
    ds_topk_init(&t, C);
    ds_topk_add(&t, &z[0][0], labels, NULL, 6);
    CHECK(t.count == 6 && t.top1 == 1 && t.top5 == 1 && t.nonfinite == 5,
          "count %lld top1 %lld top5 %lld nonfinite %lld, want 6 1 1 5", (long long)t.count, (long long)t.top1,
          (long long)t.top5, (long long)t.nonfinite);
    CHECK(t.class_count[1] == 6 && t.class_top1[1] == 1 && t.class_top5[1] == 1,
          "class 1: %lld %lld %lld, want 6 1 1", (long long)t.class_count[1], (long long)t.class_top1[1],
          (long long)t.class_top5[1]);
    CHECK(isfinite(t.loss_sum), "loss_sum %g: the finite sample's alone", t.loss_sum);
    CHECK(isnan(ds_topk_loss(&t)), "loss %g, want NaN (undefined for a non-finite sample)", ds_topk_loss(&t));
    double got[2] = {ds_topk_top1(&t), ds_topk_top5(&t)}, want[2] = {1.0 / 6, 1.0 / 6};
    check_close_d("fractions", got, want, 2, 0, 1e-15);
    ds_topk_reduce(&t);   /* one process: the sum over ranks is the identity, nonfinite kept */
    CHECK(t.count == 6 && t.top1 == 1 && t.top5 == 1 && t.nonfinite == 5 && t.class_count[1] == 6,
          "after reduce: count %lld top1 %lld top5 %lld nonfinite %lld class_count[1] %lld", (long long)t.count,
          (long long)t.top1, (long long)t.top5, (long long)t.nonfinite, (long long)t.class_count[1]);
    ds_topk_free(&t);
    check_end();
}

static void test_csv(const char *dir)
{
    check_begin("per_class_csv_quotes_names");
    ds_topk t;
    ds_topk_init(&t, 3);
    const float z[2][3] = {{2, 1, 0}, {2, 1, 0}};
    const int32_t labels[2] = {0, 1};
    ds_topk_add(&t, &z[0][0], labels, NULL, 2);
    char *names[3] = {"plain", "a,b", "say \"hi\""};
    char *path = ds_path_join(dir, "per_class.csv");
    CHECK(ds_topk_write_csv(&t, path, names) == 0, "write %s", path);
    size_t len = 0;
    char *text = ds_read_file(path, &len);
    const char *want = "class,label,count,top1,top5\n"
                       "plain,0,1,1.000000,1.000000\n"
                       "\"a,b\",1,1,0.000000,1.000000\n"
                       "\"say \"\"hi\"\"\",2,0,,\n";   /* no images: no accuracy */
    CHECK(text && !strcmp(text, want), "got:\n%s\nwant:\n%s", text ? text : "(unreadable)", want);
    if (text) unlink(path);
    free(text);
    free(path);
    ds_topk_free(&t);
    check_end();
}

int main(void)
{
    char tmpl[PATH_MAX];
    snprintf(tmpl, sizeof tmpl, "%s/topk.XXXXXX", getenv("DS_TEST_TMP") ? getenv("DS_TEST_TMP") : "/tmp");
    char *dir = mkdtemp(tmpl);
    if (!dir) return 1;
    test_ranks();
    test_extremes();
    test_nonfinite();
    test_csv(dir);
    rmdir(dir);
    return check_exit();
}
