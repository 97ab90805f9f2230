/* backend/cuda: what the CUDA backend offers beyond the ds_backend interface (backend.h).
 *
 * ds_backend_select binds it, once per process, to GPU ds_comm_local_rank() % device
 * count; it runs everything on one stream of that device (cuDNN and cuBLAS are bound to
 * it), and the gradient reduction on a second, through NCCL (comm.h).
 * Memory arguments of the ops are device pointers, including normalize_u8's y0/x0/flip and
 * resized_crop_u8's boxes; their mean[3]/std[3] are host values (constants, passed to the
 * kernel by value).
 *
 * Precision (the arithmetic of convolutions and GEMMs) and storage (the ds_dtype of each
 * activation, the model's choice: backend.h) are independent; every storage works at every
 * precision.
 *   - "fp32": FMA math in cuDNN and cuBLAS, no tensor cores (on float32 storage it matches
 *     the CPU to ~1e-5); "tf32": tensor-core convolutions and GEMMs on float32 tensors,
 *     10-bit mantissa products; "bf16": convolutions on bf16 tensors, tensor cores with
 *     float32 accumulation (cuBLAS's linear layer stays float32, with tf32 tensor cores).
 *   - A convolution op gives cuDNN each tensor stored in the type it computes in as it is,
 *     and copies the others in its workspace: float32 -> bf16 for a bf16 op (conv1's
 *     float32 input under the model's bf16 storage; every tensor under float32 storage),
 *     bf16 -> float32 for an op computing in float32 (an op of a bf16 run that falls back
 *     to tf32 or fp32 where cuDNN has no bf16 algorithm, or bf16 storage in an fp32 or tf32
 *     run); a result computed in the other type is cast back, rounded once. A bf16 weight
 *     gradient is added to the float32 one, as PyTorch's autocast does.
 *   - Batch norm, pooling and add compute in float32 on the stored values and round a bf16
 *     result once; loss, optimizer, master weights and gradients are float32.
 * Plans are made per precision, determinism and storage types, so reselecting with other
 * options plans afresh. */
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
