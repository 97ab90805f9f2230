/* backend: choosing the backend a tool runs on (--device). */
#include "backend.h"
#include "log.h"

#ifdef DS_HAVE_CUDA
#include "backend/cuda.h"
#endif

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

int ds_backend_configure(const ds_backend *be, const char *precision, int deterministic)
{
    if (precision && strcmp(precision, "fp32") && strcmp(precision, "tf32") && strcmp(precision, "bf16"))
        return ds_err("--precision %s: unknown (expected fp32, tf32 or bf16)", precision);
    if (strcmp(be->name, "cuda")) return 0;
#ifdef DS_HAVE_CUDA
    if (precision && ds_cuda_set_precision(precision)) return -1;
    ds_cuda_set_deterministic(deterministic);
    return ds_cuda_init();
#else
    return ds_err("the %s backend is not part of this build", be->name);
#endif
}
