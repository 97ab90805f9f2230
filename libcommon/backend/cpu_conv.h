/* cpu_conv: the CPU backend's convolutions (NHWC activations, [K, R, S, C] weights), split
 * from cpu.c. Semantics are those of the conv entries of ds_backend (backend.h). */
#ifndef DS_CONV_CPU_H
#define DS_CONV_CPU_H

#include "backend.h"

size_t ds_cpu_conv_workspace(const ds_conv_desc *d);
void ds_cpu_conv_fwd(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_data(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_weight(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws);


/* Under --precision bf16 (cpu_conv_bf16.c): the same three ops with bf16 operands and float32
 * sums (cpu_bf16.h's rule); inputs and outputs stay float32. */
size_t ds_cpu_conv_workspace_bf16(const ds_conv_desc *d);
void ds_cpu_conv_fwd_bf16(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_data_bf16(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_weight_bf16(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws);

/* Shared by the two files. Threads a convolution uses, and its scratch slots (one per
 * processor, at most 16: fixed for the process). */
int ds_cpu_conv_threads(void);
int ds_cpu_conv_slots(void);
/* Backward-data of a stride-1 convolution with a square window is a forward convolution
 * of dout with the weights flipped in space and transposed in channels, padded r-1-pad:
 * 1 and that convolution in *t, or 0. */
int ds_cpu_conv_flipped(const ds_conv_desc *d, ds_conv_desc *t);
/* din += col (rows m0 .. m0+rows-1 of the im2col matrix, r*s*c floats each) scattered back
 * to where im2col gathers them from. */
void ds_cpu_col2im_add(float *din, const float *col, const ds_conv_desc *d, long m0, long rows);
/* dw += the sum of `groups` partial weight gradients part_stride floats apart, in group
 * order ([k, rsc], or [rsc, k] when transposed): the order the bitwise promise rests on. */
void ds_cpu_conv_sum_groups(float *dw, const float *part, int groups, long part_stride, int k, long rsc, int transposed);

#endif
