/* cuda_nccl: see cuda_nccl.h. Built only with CUDA. */
#ifdef DS_HAVE_CUDA

#include "cuda_nccl.h"

#include "comm.h"
#include "cuda_check.h"
#include "log.h"

#include <cuda_runtime.h>
#include <errno.h>
#include <nccl.h>
#include <pthread.h>
#include <time.h>

static ncclComm_t comm;

/* ncclCommInitRank and ncclCommFinalize block until every rank has come: a peer alive but
 * stuck before either (a hung read, a stopped process) would hang the others without end.
 * A watchdog thread ends the job after --comm-timeout, as ds_nccl_sync's wait does. */
static struct {
    pthread_mutex_t m;
    pthread_cond_t cv;
    int armed;
    const char *what;
    double limit;
    pthread_t thread;
} dog = {.m = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void *dog_main(void *arg)
{
    (void)arg;
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += (time_t)dog.limit;
    deadline.tv_nsec += (long)((dog.limit - (double)(time_t)dog.limit) * 1e9);
    if (deadline.tv_nsec >= 1000000000L) deadline.tv_sec++, deadline.tv_nsec -= 1000000000L;
    pthread_mutex_lock(&dog.m);
    while (dog.armed)
        if (pthread_cond_timedwait(&dog.cv, &dog.m, &deadline) == ETIMEDOUT && dog.armed) {
            ds_err("NCCL: %s did not finish within %.0f s: a rank is stopped or hung (rank %d of %d); ending the "
                   "job (--comm-timeout)", dog.what, dog.limit, ds_comm_rank(), ds_comm_world());
            ds_comm_abort(1);
        }
    pthread_mutex_unlock(&dog.m);
    return NULL;
}

/* Arms the watchdog for `what` (no limit: nothing); dog_disarm before the next. */
static void dog_arm(const char *what)
{
    double limit = ds_comm_timeout();
    if (limit <= 0) return;
    dog.armed = 1, dog.what = what, dog.limit = limit;
    if (pthread_create(&dog.thread, NULL, dog_main, NULL)) dog.armed = 0;   /* no thread: no limit */
}

static void dog_disarm(void)
{
    pthread_mutex_lock(&dog.m);
    int was = dog.armed;
    dog.armed = 0;
    pthread_cond_signal(&dog.cv);
    pthread_mutex_unlock(&dog.m);
    if (was) pthread_join(dog.thread, NULL);
}

#define ncclCheck(call) nccl_check((call), #call, __FILE__, __LINE__)
static void nccl_check(ncclResult_t rc, const char *what, const char *file, int line)
{
    if (rc == ncclSuccess) return;
    const char *detail = ncclGetLastError(comm);   /* NULL comm: the last error of any */
    ds_err("%s:%d: %s: %s%s%s (rank %d of %d)", file, line, what, ncclGetErrorString(rc),
           detail && *detail ? ": " : "", detail ? detail : "", ds_comm_rank(), ds_comm_world());
    ds_comm_abort(1);
}

int ds_nccl_init(void)
{
    if (comm) return 0;
    int device;
    cudaError_t ce = cudaGetDevice(&device);
    if (ce != cudaSuccess) return ds_err("NCCL needs a CUDA device: %s", cudaGetErrorString(ce));
    ncclUniqueId id;
    if (ds_comm_rank() == 0) ncclCheck(ncclGetUniqueId(&id));
    ds_comm_bcast(&id, sizeof id, 0);
    dog_arm("ncclCommInitRank");
    ncclResult_t rc = ncclCommInitRank(&comm, ds_comm_world(), id, ds_comm_rank());
    dog_disarm();
    if (rc != ncclSuccess) {
        /* Two ranks on one GPU are refused before NCCL 2.30 (and from 2.30 without
         * NCCL_MULTI_RANK_GPU_ENABLE=1), with ncclInvalidUsage; say so then, and only then
         * (a /dev/shm or transport failure is ncclSystemError). */
        const char *detail = ncclGetLastError(NULL);
        ds_err("ncclCommInitRank (rank %d of %d, device %d): %s%s%s%s", ds_comm_rank(), ds_comm_world(),
               device, ncclGetErrorString(rc), detail && *detail ? ": " : "", detail ? detail : "",
               rc == ncclInvalidUsage && ds_comm_local_size() > 1 ? "; several ranks on one node: each needs its own GPU"
                                                                   : "");
        comm = NULL;
        return -1;
    }
    ds_comm_set_device_hooks(ds_nccl_abort, ds_nccl_free);
    return 0;
}

void ds_nccl_allreduce_sum_f32(float *dbuf, size_t n, cudaStream_t stream)
{
    if (!comm) {
        ds_err("NCCL allreduce before ds_nccl_init");
        ds_comm_abort(1);
    }
    ncclCheck(ncclAllReduce(dbuf, dbuf, n, ncclFloat32, ncclSum, comm, stream));
}

void ds_nccl_exchange_f32(float *const *send, const size_t *send_n, float *const *recv, const size_t *recv_n,
                          cudaStream_t stream)
{
    if (!comm) {
        ds_err("NCCL send/receive before ds_nccl_init");
        ds_comm_abort(1);
    }
    int w = ds_comm_world(), r = ds_comm_rank();
    ncclCheck(ncclGroupStart());
    for (int j = 0; j < w; j++) {
        if (j == r) continue;
        if (send[j] && send_n[j]) ncclCheck(ncclSend(send[j], send_n[j], ncclFloat32, j, comm, stream));
        if (recv[j] && recv_n[j]) ncclCheck(ncclRecv(recv[j], recv_n[j], ncclFloat32, j, comm, stream));
    }
    ncclCheck(ncclGroupEnd());
}

void ds_nccl_sync(cudaStream_t stream, double timeout_s)
{
    double t0 = ds_now();
    const struct timespec nap = {0, 20000};   /* 20 us: short next to a step, spares a core */
    for (;;) {
        cudaError_t ce = cudaStreamQuery(stream);
        if (ce != cudaSuccess && ce != cudaErrorNotReady) cudaCheck(ce);
        /* asked after the stream is done too: a collective that failed (a peer gone) still
         * completes, and its sums are then not sums */
        if (comm) {
            ncclResult_t async;
            ncclCheck(ncclCommGetAsyncError(comm, &async));
            ncclCheck(async);
        }
        if (ce == cudaSuccess) return;
        if (timeout_s > 0 && ds_now() - t0 > timeout_s) {
            ds_err("NCCL: the reduction did not finish within %.0f s: a rank is stopped or hung (rank %d of "
                   "%d); ending the job (--comm-timeout)", timeout_s, ds_comm_rank(), ds_comm_world());
            ds_comm_abort(1);
        }
        nanosleep(&nap, NULL);
    }
}

void ds_nccl_free(void)
{
    if (!comm) return;
    ncclComm_t c = comm;
    dog_arm("ncclCommFinalize");
    ncclResult_t rc = ncclCommFinalize(c);
    dog_disarm();
    ncclCheck(rc);
    comm = NULL;
    rc = ncclCommDestroy(c);
    if (rc != ncclSuccess) ds_warn("ncclCommDestroy: %s", ncclGetErrorString(rc));
}

void ds_nccl_abort(void)
{
    ncclComm_t c = comm;
    comm = NULL;   /* before the call: an error inside must not come back here */
    if (c) ncclCommAbort(c);
}

#endif
