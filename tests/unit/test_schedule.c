/* Learning-rate schedules: warmup then cosine, step and constant values at chosen steps
 * against the formulas of schedule.h, ds_schedule_make's conversion of epochs to steps, and
 * the names --schedule accepts. */
#include "../check.h"
#include "schedule.h"

#include <math.h>
#include <string.h>

static void test_values(void)
{
    check_begin("schedule_values");
    ds_schedule s = {.kind = DS_SCHEDULE_COSINE, .base = 0.4, .warmup = 4, .total = 104};
    double got[6] = {ds_schedule_lr(&s, 0), ds_schedule_lr(&s, 3), ds_schedule_lr(&s, 4), ds_schedule_lr(&s, 54),
                     ds_schedule_lr(&s, 103), ds_schedule_lr(&s, 104)};
    double want[6] = {0.1, 0.4, 0.4, 0.2, 0.4 * 0.5 * (1 + cos(M_PI * 99 / 100)), 0.0};
    check_close_d("cosine", got, want, 6, 1e-12, 1e-12);
    ds_schedule st = {.kind = DS_SCHEDULE_STEP, .base = 1.0, .warmup = 0, .total = 100, .every = 30, .gamma = 0.1};
    double g2[4] = {ds_schedule_lr(&st, 0), ds_schedule_lr(&st, 29), ds_schedule_lr(&st, 30), ds_schedule_lr(&st, 95)};
    double w2[4] = {1.0, 1.0, 0.1, 0.001};
    check_close_d("step", g2, w2, 4, 1e-12, 1e-12);
    ds_schedule k = {.kind = DS_SCHEDULE_CONSTANT, .base = 0.01, .warmup = 0, .total = 10};
    CHECK(ds_schedule_lr(&k, 0) == 0.01 && ds_schedule_lr(&k, 9) == 0.01, "constant is not constant");
    CHECK(ds_schedule_parse("cosine") == DS_SCHEDULE_COSINE && ds_schedule_parse("linear") == -1, "parse");
    check_end();
}

/* Epochs become steps by llround (halves away from zero), and every rate is bitwise the one
 * of a schedule filled in by hand. */
static void test_make(void)
{
    check_begin("schedule_make");
    ds_schedule s = ds_schedule_make(&(ds_schedule_spec){DS_SCHEDULE_STEP, 0.2, 2.5, 1.5, 0.1}, 3, 10);
    CHECK(s.kind == DS_SCHEDULE_STEP && s.base == 0.2 && s.gamma == 0.1, "kind, base or gamma not kept");
    CHECK(s.warmup == 8 && s.every == 5 && s.total == 30, "warmup %lld every %lld total %lld, not 8 5 30",
          (long long)s.warmup, (long long)s.every, (long long)s.total);
    /* 0.5 epochs of 12 steps (test_dstrain.sh's run); 5 of ImageNet's 5004 at batch 256. */
    ds_schedule c = ds_schedule_make(&(ds_schedule_spec){DS_SCHEDULE_COSINE, 0.05, 0.5, 30, 0.1}, 12, 3);
    CHECK(c.warmup == 6 && c.total == 36, "warmup %lld total %lld", (long long)c.warmup, (long long)c.total);
    ds_schedule big = ds_schedule_make(&(ds_schedule_spec){DS_SCHEDULE_COSINE, 0.1, 5, 30, 0.1}, 5004, 90);
    ds_schedule hand = {.kind = DS_SCHEDULE_COSINE, .base = 0.1, .warmup = 25020, .total = 450360, .every = 150120,
                        .gamma = 0.1};
    int same = 1;
    for (int64_t g = 0; g < hand.total; g += 997) {
        double a = ds_schedule_lr(&big, g), b = ds_schedule_lr(&hand, g);
        same &= memcmp(&a, &b, sizeof a) == 0;
    }
    CHECK(same, "a made schedule's rates differ from the hand-filled one's");
    ds_schedule none = ds_schedule_make(&(ds_schedule_spec){DS_SCHEDULE_CONSTANT, 0.01, 0, 0, 0}, 7, 2);
    CHECK(none.warmup == 0 && none.every == 0 && ds_schedule_lr(&none, 0) == 0.01, "no warmup, no decay");
    check_end();
}

/* DS_SCHEDULE_CHOICES lists the kinds in enum order: the index of a choice is its kind. */
static void test_choices(void)
{
    check_begin("schedule_choices");
    char names[] = DS_SCHEDULE_CHOICES;
    int i = 0;
    for (char *save, *n = strtok_r(names, "|", &save); n; n = strtok_r(NULL, "|", &save), i++)
        CHECK(ds_schedule_parse(n) == i, "choice %d is '%s', which parses to %d", i, n, ds_schedule_parse(n));
    CHECK(i == 3, "%d choices, not 3", i);
    check_end();
}

/* The crop ramp against values worked by hand from FFCV's get_resolution (numpy.interp, then
 * numpy.round of res / step, which rounds 5.5 to 6 and 4.5 to 4). */
static void test_crop_ramp(void)
{
    check_begin("crop_ramp");
    ds_crop_ramp r = {.min = 160, .start = 10, .end = 20, .step = 32};
    static const struct { int64_t e; int crop; } want[] = {
        {0, 160}, {10, 160}, {11, 160}, {14, 160},   /* 172.8 / 32 = 5.4 */
        {15, 192},                                   /* 176 / 32 = 5.5: to even, 6 */
        {16, 192}, {20, 192}, {89, 192},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        CHECK(ds_crop_for_epoch(&r, 192, want[i].e) == want[i].crop, "epoch %lld: crop %d, want %d", (long long)want[i].e,
              ds_crop_for_epoch(&r, 192, want[i].e), want[i].crop);
    /* 128 + 0.5 x 32 = 144 at epoch 5 of [0, 10]: 4.5 rounds to 4 (even) -> 128 */
    ds_crop_ramp k = {.min = 128, .start = 0, .end = 10, .step = 32};
    CHECK(ds_crop_for_epoch(&k, 160, 5) == 128, "ties to even: %d", ds_crop_for_epoch(&k, 160, 5));
    CHECK(ds_crop_for_epoch(&k, 160, 8) == 160, "epoch 8: %d", ds_crop_for_epoch(&k, 160, 8));   /* 153.6 / 32 = 4.8 */
    /* 136 + 3.2 = 139.2 at epoch 1: 4.35 -> 128, kept within [min, max] -> 136 */
    ds_crop_ramp c = {.min = 136, .start = 0, .end = 10, .step = 32};
    CHECK(ds_crop_for_epoch(&c, 168, 1) == 136, "clamped to min: %d", ds_crop_for_epoch(&c, 168, 1));
    ds_crop_ramp small = {.min = 16, .start = 1, .end = 3, .step = 8};
    int s0 = ds_crop_for_epoch(&small, 32, 0), s2 = ds_crop_for_epoch(&small, 32, 2),
        s3 = ds_crop_for_epoch(&small, 32, 3);
    CHECK(s0 == 16 && s2 == 24 && s3 == 32, "16..32 over epochs 1..3: %d %d %d", s0, s2, s3);
    ds_crop_ramp none = {.min = 0, .start = 0, .end = 5, .step = 32};
    CHECK(ds_crop_for_epoch(&none, 224, 0) == 224 && ds_crop_for_epoch(&none, 224, 3) == 224, "no ramp: not --crop");
    check_end();
}

int main(void)
{
    test_crop_ramp();
    test_values();
    test_make();
    test_choices();
    return check_exit();
}
