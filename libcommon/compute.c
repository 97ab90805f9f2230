#include "compute.h"

#include <omp.h>

const ds_backend *ds_compute_setup(const ds_compute_options *c, int data_parallel)
{
    if (c->threads > 0) omp_set_num_threads((int)c->threads);
    ds_backend_opts bo = {.precision = (ds_precision)c->precision_index, .deterministic = c->deterministic,
                          .data_parallel = data_parallel};
    return ds_backend_select((ds_device)c->device_index, &bo);
}
