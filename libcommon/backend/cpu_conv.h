/* cpu_conv: the CPU backend's convolutions (NHWC activations, [K, R, S, C] weights), split
 * from cpu.c. Semantics are those of the conv entries of ds_backend (backend.h). */
#ifndef DS_CONV_CPU_H
#define DS_CONV_CPU_H

#include "backend.h"

/* fp32 (cpu_conv.c): every tensor float32 (conv_workspace refuses other types). Backward-data
 * here always overwrites din; the backend's accumulating form (cpu.c) is built on it. */
size_t ds_cpu_conv_workspace(const ds_conv_desc *d);
void ds_cpu_conv_fwd(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_data(void *din, const void *dout, const void *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_weight(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws);

/* conv_fwd_bn's batch norm (backend.h) as the convolutions apply it, the scale made by cpu.c
 * as bn_fwd_infer makes it: out = relu?((x - mean) * a + beta + residual?) over the output
 * channels, cpu_loops' bn_apply on the output's stored values x, so the bits are those of the
 * two ops. Each forward below takes one (NULL: none) and applies it to a block of output
 * pixels as soon as their sums are done, while the block is in cache. */
typedef struct {
    const float *mean, *a, *beta;
    const void *residual;  /* d->out_t, or NULL */
    int relu;
} ds_cpu_conv_bn;
void ds_cpu_conv_fwd_bn(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws,
                        const ds_cpu_conv_bn *bn);
void ds_cpu_conv_fwd_bn_bf16(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws,
                             const ds_cpu_conv_bn *bn);
/* bn on a float32 output in place: `rows` pixels from pixel m0, channels k0 .. k0+cols-1. */
void ds_cpu_conv_bn_f32(float *out, long m0, int k0, long rows, int cols, const ds_conv_desc *d,
                        const ds_cpu_conv_bn *bn);

/* Under --precision bf16 (cpu_conv_bf16.c): the same three ops with bf16 operands and float32
 * sums (cpu_bf16.h's rule); activations of either storage (float32 ones rounded as they are
 * read, bf16 results rounded once from the float32 sums), weights of either. */
size_t ds_cpu_conv_workspace_bf16(const ds_conv_desc *d);
void ds_cpu_conv_fwd_bf16(void *out, const void *in, const void *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_data_bf16(void *din, const void *dout, const void *w, const ds_conv_desc *d, void *ws);
/* din += backward-data's result, bitwise as computing it elsewhere and adding it with the add
 * op would: 1 where this shape's product rounds its sums into a bf16 din as it stores them
 * (a stride-1 backward-data, the forward of the flipped weights), which then adds them there;
 * 0, touching nothing, for the others. */
int ds_cpu_conv_bwd_data_add_bf16(void *din, const void *dout, const void *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_weight_bf16(float *dw, const void *dout, const void *in, const ds_conv_desc *d, void *ws);
/* bf16 backward-weight's pack, in bf16 elements: how many images or chunks of pixels a big
 * gradient's threads lay out at once (4M by default; elements <= 0 restores it); returns the
 * previous size. It sizes the scratch, so it is set before a workspace is planned. No sum
 * depends on it (the units are added in order whatever the pack): tests shrink it to take
 * small shapes over several packs. */
long ds_cpu_conv_bf16_pack(long elements);

/* 3x3 stride-1 convolutions with pad 1, in fp32 (cpu_winograd.c): Winograd's F(2x2, 3x3).
 * ds_cpu_wino_ok is the rule cpu_conv.c takes them by; the workspace covers all three ops. */
int ds_cpu_wino_ok(const ds_conv_desc *d);
size_t ds_cpu_wino_workspace(const ds_conv_desc *d);
void ds_cpu_wino_fwd(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws,
                     const ds_cpu_conv_bn *bn);
void ds_cpu_wino_bwd_data(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws);
void ds_cpu_wino_bwd_weight(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws);

/* Shared by the files. x rounded up to a multiple of 16 floats (64 bytes). */
static inline long ds_round16(long x) { return (x + 15) / 16 * 16; }
/* The row stride of a copy with rows of k elements that a register tile walks down: k plus a
 * cache line from 128 on, since rows a multiple of 512 bytes apart fall in a fraction of L1's
 * sets and a panel of them would not stay there. The layout only, never the sums. */
static inline long ds_conv_row_ld(long k) { return k >= 128 ? k + 16 : k; }
/* Backward-weight's per-group partial gradients: at most this many groups, in at most this
 * many floats (big layers use fewer groups). */
#define DS_CONV_GROUPS 16
#define DS_CONV_GROUP_FLOATS (8L << 20)

/* Threads a convolution uses, and its scratch slots (one per
 * processor, at most 16: fixed for the process). */
int ds_cpu_conv_threads(void);
int ds_cpu_conv_slots(void);
/* Backward-data of a stride-1 convolution with a square window is a forward convolution
 * of dout with the weights flipped in space and transposed in channels, padded r-1-pad (its
 * input the storage of dout, its output that of din):
 * 1 and that convolution in *t, or 0. */
int ds_cpu_conv_flipped(const ds_conv_desc *d, ds_conv_desc *t);
/* din += col (rows m0 .. m0+rows-1 of the im2col matrix, r*s*c floats each) scattered back
 * to where im2col gathers them from. */
void ds_cpu_col2im_add(float *din, const float *col, const ds_conv_desc *d, long m0, long rows);
/* dw += the sum of `groups` partial weight gradients part_stride floats apart, in group
 * order ([k, rsc], or [rsc, k] when transposed): the order the bitwise promise rests on. */
void ds_cpu_conv_sum_groups(float *dw, const float *part, int groups, long part_stride, int k, long rsc, int transposed);

#endif
