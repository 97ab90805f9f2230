/* backend/cuda: what the CUDA backend offers beyond the ds_backend interface (backend.h).
 *
 * ds_backend_select binds it, once per process, to GPU ds_comm_local_rank() % device
 * count; it runs everything on one stream of that device (cuDNN and cuBLAS are bound to
 * it), and the gradient reduction on a second, through NCCL (comm.h).
 * Memory arguments of the ops are device pointers, including normalize_u8's y0/x0/flip and
 * resized_crop_u8's boxes; their mean[3]/std[3] are host values (constants, passed to the
 * kernel by value).
 *
 * Precision: "fp32" (FMA math in cuDNN and cuBLAS: no tensor cores, matches the CPU to
 * ~1e-5), "tf32" (tensor-core convolutions and GEMMs on fp32 data, 10-bit mantissa
 * products), "bf16" (convolutions cast their fp32 operands to bf16 in the workspace, run
 * on bf16 tensor cores with fp32 accumulation, and cast back; weight gradients are added
 * to the fp32 gradient, as PyTorch's autocast does. BN, loss, optimizer and masters stay
 * fp32). Plans are made per precision and determinism, so reselecting with other options
 * plans afresh. */
#ifndef DS_BACKEND_CUDA_H
#define DS_BACKEND_CUDA_H

#ifdef DS_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible GPUs: 0 when there is no NVIDIA driver or no device (a machine without a
 * GPU); -1, with CUDA's message, when a driver is there but CUDA cannot start (too old for
 * the runtime, a device the sandbox refuses, an initialisation error). */
int ds_cuda_device_count(void);
/* ds_backend_select's CUDA half: binds the device (first call), applies opts, joins NCCL
 * for data_parallel under a launcher. Returns the backend, or NULL with a message. */
const ds_backend *ds_cuda_select(const ds_backend_opts *opts);
/* The compute stream: every op and kernel runs on it. */
cudaStream_t ds_cuda_stream(void);

#ifdef __cplusplus
}
#endif
#endif
#endif
