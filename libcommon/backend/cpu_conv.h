/* cpu_conv: the CPU backend's convolutions (NHWC activations, [K, R, S, C] weights), split
 * from cpu.c. Semantics are those of the conv entries of ds_backend (backend.h). */
#ifndef DS_CONV_CPU_H
#define DS_CONV_CPU_H

#include "backend.h"

size_t ds_cpu_conv_workspace(const ds_conv_desc *d);
void ds_cpu_conv_fwd(float *out, const float *in, const float *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_data(float *din, const float *dout, const float *w, const ds_conv_desc *d, void *ws);
void ds_cpu_conv_bwd_weight(float *dw, const float *dout, const float *in, const ds_conv_desc *d, void *ws);

#endif
