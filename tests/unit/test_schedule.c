/* Learning-rate schedules: warmup then cosine, step and constant values at chosen steps
 * against the formulas of schedule.h, and the names --schedule accepts. */
#include "../check.h"
#include "schedule.h"

#include <math.h>

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

int main(void)
{
    test_values();
    return check_exit();
}
