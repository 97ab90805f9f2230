/* cuda_nccl: NCCL between the ranks' GPUs, for the CUDA backend (private to backend/).
 *
 * One communicator per process, bound to the device current at ds_nccl_init; the unique id
 * is made on rank 0 and sent through comm (MPI). Collectives are enqueued on the caller's
 * stream and return at once; ds_nccl_sync waits while watching for asynchronous NCCL
 * errors, so a dead peer ends the job instead of hanging it; ncclCommInitRank and
 * ncclCommFinalize, which wait for every rank, end the job after ds_comm_timeout() (a
 * watchdog thread), so a peer stuck before them does too. Any failure aborts the
 * communicator and then the MPI job. ds_nccl_init registers ds_nccl_abort and ds_nccl_free
 * with comm (ds_comm_set_device_hooks), so comm itself knows nothing of devices. */
#ifndef DS_CUDA_NCCL_H
#define DS_CUDA_NCCL_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Call after ds_comm_init and after the current CUDA device has been set. Returns 0, or -1
 * with a message (no NCCL, no device). Collective: every rank calls it. */
int ds_nccl_init(void);
/* In-place sum of a device buffer of n floats on `stream`; returns at once, the result is
 * ready when the stream reaches it. Every rank must enqueue the same reductions in the same
 * order. NCCL's ring/tree sums give all ranks the same bits. */
void ds_nccl_allreduce_sum_f32(float *dbuf, size_t n, cudaStream_t stream);
/* Moves floats between the ranks in one NCCL group (ncclGroupStart, a send and a receive
 * per peer, ncclGroupEnd) on `stream`: to each rank j != this one, send[j] (send_n[j]
 * floats) and from it into recv[j] (recv_n[j] floats); a count of 0 (or a NULL pointer) is
 * no operation toward that peer. Arrays of ds_comm_world() entries; this rank's own are
 * ignored. Data moves bit for bit. Every rank must call it at the same place in its order. */
void ds_nccl_exchange_f32(float *const *send, const size_t *send_n, float *const *recv, const size_t *recv_n,
                          cudaStream_t stream);
/* Waits for `stream`, polling NCCL for asynchronous errors (a peer that died or a broken
 * link) instead of blocking in cudaStreamSynchronize forever; such an error, or a wait past
 * timeout_s (<= 0: no limit; callers pass ds_comm_timeout()), aborts the job. */
void ds_nccl_sync(cudaStream_t stream, double timeout_s);
/* Destroys the communicator (collective). */
void ds_nccl_free(void);
/* Aborts the communicator without waiting for peers; safe at any time, also when it was
 * never created. */
void ds_nccl_abort(void);

#ifdef __cplusplus
}
#endif
#endif
