/* topk: classification metrics from logits — top-1 / top-5 hits, cross-entropy, and
 * per-class counts — accumulated over batches and summed across ranks. */
#ifndef DS_TOPK_H
#define DS_TOPK_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int num_classes;
    int64_t count;               /* samples scored, non-finite ones included */
    int64_t top1, top5;          /* hits */
    int64_t nonfinite;           /* samples whose logits hold a NaN or an Inf (never hits) */
    double loss_sum;             /* sum of cross-entropy (no smoothing), natural log, over the
                                    finite samples */
    int64_t *class_count;        /* [num_classes] samples per true class */
    int64_t *class_top1;         /* [num_classes] top-1 hits per true class */
    int64_t *class_top5;         /* [num_classes] */
} ds_topk;

void ds_topk_init(ds_topk *t, int num_classes);
void ds_topk_free(ds_topk *t);
/* Scores n samples: logits [n, num_classes] on the host. valid (may be NULL) skips samples
 * whose flag is 0. A sample's rank counts the classes with a strictly larger logit, or an
 * equal logit and a smaller index (as a stable sort would place them). A sample with a NaN
 * or an Inf among its logits, the label's or any other, is counted (count, class_count,
 * nonfinite) and is wrong for top-1 and top-5: no comparison with a NaN can make it right
 * (torch.topk ranks NaN above everything), and a score never rises because of one. */
void ds_topk_add(ds_topk *t, const float *logits, const int32_t *labels, const uint8_t *valid, int n);
/* Sums the counts of every rank into each rank's t (comm.h). */
void ds_topk_reduce(ds_topk *t);
/* Fractions over count (0 when count is 0). The loss is the mean cross-entropy, NaN when a
 * sample was non-finite: its cross-entropy is undefined, and a mean over the others would
 * be a number nobody measured. */
double ds_topk_top1(const ds_topk *t);
double ds_topk_top5(const ds_topk *t);
double ds_topk_loss(const ds_topk *t);
/* "class,label,count,top1,top5" lines for --per-class; a class without samples has empty
 * top1 and top5 cells (no accuracy, rather than 0). */
int ds_topk_write_csv(const ds_topk *t, const char *path, char *const *classes);

#endif
