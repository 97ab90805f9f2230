/* comm: the processes of one job, one per device, and the reductions between them.
 *
 * Run without a launcher, a tool is a world of one: no MPI call is made at all, so no MPI
 * daemon is started or needed, and every collective below is a no-op (or the identity).
 * Started by `mpirun` (or srun/PMI), ranks come from MPI_COMM_WORLD and the local rank (the
 * GPU index on this node) from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED). A build without
 * MPI (DS_HAVE_MPI undefined) is always a world of one.
 *
 * Failure model: collectives cannot fail halfway on one rank and go on elsewhere, so a
 * failing MPI (or NCCL) call prints `prog: error: file:line: call: library message` and
 * aborts the whole job (MPI_Abort), instead of returning an error that would leave the
 * other ranks waiting forever. ds_comm_init installs the same abort as ds_die's hook, so a
 * ds_die on any rank stops every rank. A rank killed from outside is noticed by mpirun,
 * which then ends the others.
 *
 * Threads: MPI is initialised with MPI_THREAD_SERIALIZED; call these from one thread at
 * a time. comm's own worker thread (ds_comm_reduce_start) calls MPI only between a start
 * and the wait that follows it, when the caller makes no comm call. */
#ifndef DS_COMM_H
#define DS_COMM_H

#include <stddef.h>
#include <stdint.h>

/* Joins the job. Call once, early in main, before other threads start. Returns 0, or -1
 * with a message when MPI could not be initialised. */
int ds_comm_init(int *argc, char ***argv);
/* Leaves the job (MPI_Finalize when it was initialised). Every rank must call it. */
void ds_comm_free(void);

int ds_comm_rank(void);        /* 0 .. world-1 */
int ds_comm_world(void);       /* number of ranks */
int ds_comm_local_rank(void);  /* rank among the processes on this node: the device index */
int ds_comm_local_size(void);  /* processes on this node */
/* 1 when the tool was started by a launcher and MPI is live (even for a world of 1). */
int ds_comm_launched(void);

/* In-place sums over all ranks. Every rank ends with bitwise the same result: the sum is
 * formed once, on rank 0, then broadcast, since MPI_Allreduce does not promise identical
 * floating-point results on every rank. Rank 0 adds the ranks' buffers in rank order,
 * ((b0 + b1) + b2) + ..., as one process accumulating micro-batches would. Sizes may
 * exceed INT_MAX elements (chunked). */
void ds_comm_allreduce_sum_f32(float *buf, size_t n);
void ds_comm_allreduce_sum_f64(double *buf, size_t n);
/* The same sum, asynchronous: the gradient buckets a data-parallel backward hands over as
 * it completes them. ds_comm_reduce_start queues the in-place sum of buf[0, n) and returns
 * at once (to_all = 0: the sum stays on rank 0, the others' buffers as they were: one
 * micro-batch of several in a step); comm's worker thread carries the queue out in order, each bucket with the
 * rank-ordered sum above, while the caller goes on computing (it polls MPI with short
 * naps instead of spinning, so it leaves the cores to that computation).
 * ds_comm_reduce_wait returns when every queued sum is complete. Between the two the
 * caller makes no other comm call and touches none of the queued buffers; every rank
 * queues the same sums in the same order. In a world of one both do nothing. */
void ds_comm_reduce_start(float *buf, size_t n, int to_all);
void ds_comm_reduce_wait(void);
/* What the worker's queue has seen: the sums queued since the process started, and for the
 * latest round (the sums queued since the last wait) the events (ds_event_seq) of its first
 * sum being queued and being begun by the worker, and when that began (ds_now()); 0: not yet.
 * Set beside backward's own events, they tell whether the reduction was handed over, and
 * began, while backward was still computing (test_dstrain_mpi.sh, --verbose): the host
 * backends' reduce_stats (backend.h). */
typedef struct ds_comm_reduce_record {
    uint64_t queued;
    uint64_t first_queued_event, first_begun_event;
    double first_begun_time;
} ds_comm_reduce_record;
void ds_comm_reduce_stats(ds_comm_reduce_record *rec);
/* Integer sums (exact in any order), through the same path. */
void ds_comm_allreduce_sum_i64(int64_t *buf, size_t n);
/* Copies `bytes` from root's buf to every other rank's buf. */
void ds_comm_bcast(void *buf, size_t bytes, int root);
void ds_comm_barrier(void);
/* Logical OR of flag over all ranks: 1 when any rank passed non-zero. All ranks get the
 * same answer, so they agree on stopping (a signal, --max-steps, a NaN loss). */
int ds_comm_any(int flag);
/* Largest element count sent in one MPI call (default 2^26). Only tests change it, to
 * exercise the chunked path with small buffers. */
void ds_comm_set_chunk(size_t elems);

/* Stalled ranks: a rank that stops without dying (SIGSTOP, a hung read, a wedged GPU) is
 * not noticed by mpirun and would leave the others waiting forever. Every wait of comm (MPI)
 * and of a device backend's reduction (NCCL) gives up after `seconds` (0: never; default
 * DS_COMM_TIMEOUT) and ends the job with an error naming where it was (ds_comm_set_where)
 * and, when rank 0 knows them, the ranks that did not arrive. Choose it above the longest legitimate wait (rank 0
 * writing a checkpoint while the others wait). */
#define DS_COMM_TIMEOUT 300.0
void ds_comm_set_timeout(double seconds);
double ds_comm_timeout(void);
/* What the job is doing now ("step 1234"), printf-style: the stall message names it. */
void ds_comm_set_where(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Ends every rank of the job with `status` (the device hook's abort first, then
 * MPI_Abort). In a world of one without MPI: exit(status). Never returns. */
void ds_comm_abort(int status) __attribute__((noreturn));

/* A device backend that joins the ranks over a link of its own (NCCL) registers what ends
 * it: on_abort runs first in ds_comm_abort (a rank blocked in a device kernel would never
 * reach MPI again), on_free in ds_comm_free before MPI finishes. One pair; NULL: none. */
void ds_comm_set_device_hooks(void (*on_abort)(void), void (*on_free)(void));

#endif
