#include "schedule.h"

#include <math.h>
#include <string.h>

int ds_schedule_parse(const char *name)
{
    if (!strcmp(name, "cosine")) return DS_SCHEDULE_COSINE;
    if (!strcmp(name, "step")) return DS_SCHEDULE_STEP;
    if (!strcmp(name, "constant")) return DS_SCHEDULE_CONSTANT;
    return -1;
}

ds_schedule ds_schedule_make(const ds_schedule_spec *spec, int64_t steps_per_epoch, int64_t epochs)
{
    return (ds_schedule){
        .kind = spec->kind,
        .base = spec->base,
        .warmup = (int64_t)llround(spec->warmup_epochs * (double)steps_per_epoch),
        .total = steps_per_epoch * epochs,
        .every = (int64_t)llround(spec->step_epochs * (double)steps_per_epoch),
        .gamma = spec->gamma,
    };
}

double ds_schedule_lr(const ds_schedule *s, int64_t step)
{
    if (step < 0) step = 0;
    if (step < s->warmup) return s->base * (double)(step + 1) / (double)s->warmup;
    int64_t t = step - s->warmup;
    switch (s->kind) {
    case DS_SCHEDULE_COSINE: {
        int64_t span = s->total - s->warmup;
        if (span <= 0) return s->base;
        double x = t >= span ? 1.0 : (double)t / (double)span;
        return s->base * 0.5 * (1.0 + cos(M_PI * x));
    }
    case DS_SCHEDULE_STEP:
        return s->every > 0 ? s->base * pow(s->gamma, (double)(t / s->every)) : s->base;
    case DS_SCHEDULE_CONSTANT:
        break;
    }
    return s->base;
}

int ds_crop_for_epoch(const ds_crop_ramp *r, int max, int64_t epoch)
{
    if (r->min <= 0 || r->min >= max || epoch >= r->end) return max;
    int min = (int)r->min;
    if (epoch <= r->start) return min;
    double t = (double)(epoch - r->start) / (double)(r->end - r->start);
    double res = min + t * (max - min);
    int step = r->step > 0 ? (int)r->step : 1;
    int crop = (int)rint(res / step) * step;   /* rint: to nearest, ties to even (numpy.round) */
    return crop < min ? min : crop > max ? max : crop;
}
