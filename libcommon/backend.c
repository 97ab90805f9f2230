/* backend: choosing the backend a tool runs on (--device). */
#include "backend.h"
#include "log.h"

#include <string.h>

const ds_backend *ds_backend_select(const char *device)
{
    if (!device || !strcmp(device, "auto")) {
#ifdef DS_HAVE_CUDA
        if (ds_cuda_device_count() > 0) return &ds_backend_cuda;
#endif
        return &ds_backend_cpu;
    }
    if (!strcmp(device, "cpu")) return &ds_backend_cpu;
    if (!strcmp(device, "cuda")) {
#ifdef DS_HAVE_CUDA
        if (ds_cuda_device_count() > 0) return &ds_backend_cuda;
        ds_err("--device cuda: no CUDA device is visible (try --device cpu)");
#else
        ds_err("--device cuda: this build has no CUDA support (rebuild with nvcc available, or use --device cpu)");
#endif
        return NULL;
    }
    ds_err("--device %s: unknown device (expected cpu, cuda or auto)", device);
    return NULL;
}
