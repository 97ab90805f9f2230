/* backend/cuda: what the CUDA backend offers beyond the ds_backend interface (backend.h).
 *
 * The backend binds lazily, on its first call, to GPU ds_comm_local_rank() % device count,
 * and runs everything on one stream of that device (cuDNN and cuBLAS are bound to it).
 * Memory arguments of the ops are device pointers, including normalize_u8's y0/x0/flip;
 * its mean[3]/std[3] are host values (constants, passed to the kernel by value).
 *
 * Precision: "fp32" (FMA math in cuDNN and cuBLAS: no tensor cores, matches the CPU to
 * ~1e-5), "tf32" (tensor-core convolutions and GEMMs on fp32 data, 10-bit mantissa
 * products), "bf16" (convolutions cast their fp32 operands to bf16 in the workspace, run
 * on bf16 tensor cores with fp32 accumulation, and cast back; weight gradients are added
 * to the fp32 gradient, as PyTorch's autocast does. BN, loss, optimizer and masters stay
 * fp32). Set it before the first conv_workspace: plans are made per precision. */
#ifndef DS_BACKEND_CUDA_H
#define DS_BACKEND_CUDA_H

#ifdef DS_HAVE_CUDA
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Binds the backend to a device now (instead of on first use), so a tool can report a
 * missing GPU as an error. Returns 0, or -1 with a message. */
int ds_cuda_init(void);
/* "fp32", "tf32" or "bf16". Returns 0, or -1 with a message for an unknown name. */
int ds_cuda_set_precision(const char *name);
/* 1: only deterministic cuDNN algorithms, chosen by cuDNN's heuristics (the same in every
 * process) instead of by timing (--deterministic). Set before planning. */
void ds_cuda_set_deterministic(int on);
/* The stream every op runs on: NCCL reductions of gradients are queued behind it. */
cudaStream_t ds_cuda_stream(void);

#ifdef __cplusplus
}
#endif
#endif
#endif
