/* cuda_check: the check macros of the CUDA backend's files (C and C++). A failing CUDA
 * call, or a failed kernel launch, stops the program with the file, line, call and the
 * library's own message (ds_die, which under MPI aborts every rank); cuda_internal.h adds
 * cuDNN's and cuBLAS's beside it (for the two files that call them), NCCL's is in
 * cuda_nccl.c. */
#ifndef DS_CUDA_CHECK_H
#define DS_CUDA_CHECK_H

#include <cuda_runtime.h>

#ifdef __cplusplus
extern "C" {
#endif
#include "log.h"
#ifdef __cplusplus
}
#endif

#define cudaCheck(call)                                                                    \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess)                                                             \
            ds_die("%s:%d: %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(e_));    \
    } while (0)

/* After every kernel launch: a bad configuration is reported here, at the launch site. */
#define launchCheck() cudaCheck(cudaGetLastError())

/* A kernel launch, kernel<<<grid, block, shmem, stream>>>(...). A build that compiles
 * these files without nvcc defines its own DS_LAUNCH before this header is read. */
#ifndef DS_LAUNCH
#define DS_LAUNCH(kernel, grid, block, shmem, stream, ...) kernel<<<grid, block, shmem, stream>>>(__VA_ARGS__)
#endif

/* Grid-stride launch size for n elements: enough blocks to fill the GPU, no more. */
static inline unsigned ds_cuda_blocks(size_t n, int threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

#endif
