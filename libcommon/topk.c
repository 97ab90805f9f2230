#include "topk.h"

#include "comm.h"
#include "fsutil.h"
#include "log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ds_topk_init(ds_topk *t, int num_classes)
{
    memset(t, 0, sizeof *t);
    t->num_classes = num_classes;
    t->class_count = ds_xcalloc((size_t)num_classes, sizeof(int64_t));
    t->class_top1 = ds_xcalloc((size_t)num_classes, sizeof(int64_t));
    t->class_top5 = ds_xcalloc((size_t)num_classes, sizeof(int64_t));
}

void ds_topk_free(ds_topk *t)
{
    free(t->class_count);
    free(t->class_top1);
    free(t->class_top5);
    memset(t, 0, sizeof *t);
}

void ds_topk_add(ds_topk *t, const float *logits, const int32_t *labels, const uint8_t *valid, int n)
{
    int C = t->num_classes;
    for (int i = 0; i < n; i++) {
        if (valid && !valid[i]) continue;
        const float *z = logits + (size_t)i * C;
        int y = labels[i];
        float zy = z[y], zmax = z[0];
        int rank = 0, finite = 1;
        for (int c = 0; c < C; c++) {
            if (z[c] > zy || (z[c] == zy && c < y)) rank++;
            if (z[c] > zmax) zmax = z[c];
            finite &= isfinite(z[c]) != 0;
        }
        t->count++;
        t->class_count[y]++;
        if (!finite) {   /* wrong whatever the comparisons said: a NaN label logit has rank 0 */
            t->nonfinite++;
            continue;
        }
        /* log-sum-exp in double: the loss of a confident wrong answer stays finite */
        double s = 0;
        for (int c = 0; c < C; c++) s += exp((double)z[c] - zmax);
        t->loss_sum += log(s) + zmax - zy;
        if (rank < 1) t->top1++, t->class_top1[y]++;
        if (rank < 5) t->top5++, t->class_top5[y]++;
    }
}

void ds_topk_reduce(ds_topk *t)
{
    int C = t->num_classes;
    size_t n = 4 + 3 * (size_t)C;
    int64_t *v = ds_xmalloc(n * sizeof *v);
    v[0] = t->count, v[1] = t->top1, v[2] = t->top5, v[3] = t->nonfinite;
    memcpy(v + 4, t->class_count, (size_t)C * sizeof *v);
    memcpy(v + 4 + C, t->class_top1, (size_t)C * sizeof *v);
    memcpy(v + 4 + 2 * C, t->class_top5, (size_t)C * sizeof *v);
    ds_comm_allreduce_sum_i64(v, n);
    t->count = v[0], t->top1 = v[1], t->top5 = v[2], t->nonfinite = v[3];
    memcpy(t->class_count, v + 4, (size_t)C * sizeof *v);
    memcpy(t->class_top1, v + 4 + C, (size_t)C * sizeof *v);
    memcpy(t->class_top5, v + 4 + 2 * C, (size_t)C * sizeof *v);
    free(v);
    ds_comm_allreduce_sum_f64(&t->loss_sum, 1);
}

double ds_topk_top1(const ds_topk *t) { return t->count ? (double)t->top1 / t->count : 0; }
double ds_topk_top5(const ds_topk *t) { return t->count ? (double)t->top5 / t->count : 0; }
double ds_topk_loss(const ds_topk *t)
{
    if (t->nonfinite) return NAN;
    return t->count ? t->loss_sum / t->count : 0;
}

int ds_topk_write_csv(const ds_topk *t, const char *path, char *const *classes)
{
    ds_atomic a;
    if (ds_atomic_open(&a, path)) return -1;
    fprintf(a.f, "class,label,count,top1,top5\n");
    for (int c = 0; c < t->num_classes; c++) {
        /* class names are directory names: quote them as CSV wants when needed */
        const char *name = classes[c];
        if (strpbrk(name, ",\"\n")) {
            fputc('"', a.f);
            for (const char *p = name; *p; p++) {
                if (*p == '"') fputc('"', a.f);
                fputc(*p, a.f);
            }
            fputc('"', a.f);
        } else {
            fputs(name, a.f);
        }
        int64_t n = t->class_count[c];
        if (n)
            fprintf(a.f, ",%d,%lld,%.6f,%.6f\n", c, (long long)n, (double)t->class_top1[c] / n,
                    (double)t->class_top5[c] / n);
        else
            fprintf(a.f, ",%d,0,,\n", c);
    }
    return ds_atomic_commit(&a);
}
