/* emu_device.h: what nvcc gives device code, for the host compilation of ds's .cu files on
 * the emulated device (force-included by `make emu` before everything else in the file).
 *   - __global__, __device__, __host__ mean nothing on the host; __shared__ is per block: a
 *     block's threads all run as fibers of one CPU thread, one block at a time, so a static
 *     thread_local variable is exactly one copy per running block;
 *   - threadIdx, blockIdx, blockDim, gridDim are the running fiber's, set by the block's
 *     scheduler before it switches to the fiber; __syncthreads() suspends the fiber until
 *     every thread of the block has arrived (or exited);
 *   - DS_LAUNCH, defined here (backend/cuda_check.h keeps only nvcc's <<<...>>> form, under
 *     #ifndef DS_LAUNCH), calls emu::launch_kernel, which copies the arguments
 *     at the launch (as a real launch does), checks that every pointer argument is NULL or
 *     inside live device memory, and queues the grid on the stream: each thread calls the
 *     kernel with the copied arguments. The launch limits of sm_90 are enforced in
 *     emu::launch (threads per block, block and grid dimensions, dynamic shared memory);
 *   - DS_EMU_VEC16 makes backend/cuda_bodies.h compile load16/store16's device branch (uint4
 *     and make_uint4 are host types too) and check each 16-byte access's alignment;
 *   - atomicAdd and atomicExch on unsigned int are atomic and, as CUDA's, order nothing else
 *     (relaxed); __threadfence() is what orders a block's memory accesses for other blocks:
 *     here an acquire-release step on one variable every fence of every block takes, so
 *     ThreadSanitizer (blocks run on several CPU threads) sees the accesses before one fence
 *     happen before those after a later fence, and names a missing fence as the race it is
 *     on the GPU. */
#ifndef DS_EMU_DEVICE_H
#define DS_EMU_DEVICE_H

#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local

#include <cuda_runtime.h>

#include <type_traits>
#include <utility>
#include <vector>

#include "emu.h"

namespace emu {

extern thread_local uint3 k_thread, k_block;
extern thread_local dim3 k_block_dim, k_grid_dim;

/* __syncthreads: a defect outside a kernel's fiber. */
void syncthreads();

/* Queues body as the grid (grid, block) on stream s; sets the launch's error (what
 * cudaGetLastError then returns) and queues nothing when the configuration is over sm_90's
 * limits. ptrs: the kernel's pointer arguments, in order (for the checks and the queue's
 * listing). */
void launch(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t s, std::function<void()> body,
            std::vector<const void *> ptrs);

/* __threadfence (see the top) */
void threadfence();

/* A kernel's 16-byte vector access at p (load16/store16 of backend/cuda_bodies.h): a defect,
 * naming the kernel, when p is not 16-byte aligned, where the GPU faults
 * (cudaErrorMisalignedAddress). */
void check_vector_access(const void *p);

template <typename A>
inline void collect_pointer(std::vector<const void *> &ptrs, const A &a)
{
    if constexpr (std::is_pointer_v<A>) ptrs.push_back((const void *)a);
}

template <typename F, typename... A>
void launch_kernel(const char *name, dim3 grid, dim3 block, size_t shmem, cudaStream_t s, F kernel, A... a)
{
    std::vector<const void *> ptrs;
    (collect_pointer(ptrs, a), ...);
    launch(name, grid, block, shmem, s, [kernel, a...]() { kernel(a...); }, std::move(ptrs));
}

}  // namespace emu

/* A kernel launch on the emulated device: the same grid queued on the emulator's stream,
 * each thread calling the kernel with the arguments copied at the launch. */
#define DS_LAUNCH(kernel, grid, block, shmem, stream, ...) \
    ::emu::launch_kernel(#kernel, grid, block, shmem, stream, [](auto... a_) { kernel(a_...); }, __VA_ARGS__)

#define threadIdx (::emu::k_thread)
#define blockIdx (::emu::k_block)
#define blockDim (::emu::k_block_dim)
#define gridDim (::emu::k_grid_dim)
#define __syncthreads() ::emu::syncthreads()
#define __threadfence() ::emu::threadfence()
inline unsigned atomicAdd(unsigned *p, unsigned v) { return __atomic_fetch_add(p, v, __ATOMIC_RELAXED); }
inline unsigned atomicExch(unsigned *p, unsigned v) { return __atomic_exchange_n(p, v, __ATOMIC_RELAXED); }
/* the vector bodies' device branch, compiled here too, with each address checked */
#define DS_EMU_VEC16(p) ::emu::check_vector_access(p)

#endif
