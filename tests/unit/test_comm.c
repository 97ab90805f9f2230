/* comm in a world of one, started without a launcher: no MPI is initialised (so no daemon
 * is needed), ranks are trivial, and every collective is the identity. */
#include "../check.h"
#include "comm.h"

#include <stdlib.h>
#include <string.h>
#ifdef DS_HAVE_MPI
#include <mpi.h>
#endif

int main(int argc, char **argv)
{
    /* The suite may itself run under a process manager; this test is about the bare run. */
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("PMIX_RANK");
    unsetenv("PMI_SIZE");
    unsetenv("PMI_RANK");

    check_begin("comm: a bare run is a world of one without MPI");
    CHECK(ds_comm_init(&argc, &argv) == 0, "init failed");
    CHECK(ds_comm_rank() == 0 && ds_comm_world() == 1, "rank %d world %d", ds_comm_rank(), ds_comm_world());
    CHECK(ds_comm_local_rank() == 0 && ds_comm_local_size() == 1, "local %d of %d",
          ds_comm_local_rank(), ds_comm_local_size());
    CHECK(!ds_comm_launched(), "reports a launcher");
#ifdef DS_HAVE_MPI
    int inited = 1;
    MPI_Initialized(&inited);
    CHECK(!inited, "MPI was initialised without a launcher");
#endif
    check_end();

    check_begin("comm: collectives are the identity in a world of one");
    float f[5] = {1.5f, -2.25f, 3e-8f, 1e30f, 0.1f}, f0[5];
    memcpy(f0, f, sizeof f);
    ds_comm_set_chunk(2);
    ds_comm_allreduce_sum_f32(f, 5);
    CHECK(memcmp(f, f0, sizeof f) == 0, "f32 sum changed the buffer");
    double d[3] = {0.1, 0.2, 0.3};
    ds_comm_allreduce_sum_f64(d, 3);
    CHECK(d[0] == 0.1 && d[1] == 0.2 && d[2] == 0.3, "f64 sum changed the buffer");
    int64_t q[2] = {INT64_MAX, -7};
    ds_comm_allreduce_sum_i64(q, 2);
    CHECK(q[0] == INT64_MAX && q[1] == -7, "i64 sum changed the buffer");
    char s[6] = "hello";
    ds_comm_bcast(s, sizeof s, 0);
    CHECK(strcmp(s, "hello") == 0, "bcast changed the buffer");
    ds_comm_barrier();
    CHECK(ds_comm_any(0) == 0, "any(0) is true");
    CHECK(ds_comm_any(5) == 1, "any(5) is not 1");
    ds_comm_free();
    check_end();
    return check_exit();
}
