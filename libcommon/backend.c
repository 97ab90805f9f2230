/* backend: choosing and starting the backend a tool runs on (--device, --precision,
 * --deterministic). */
#include "backend.h"
#include "log.h"

#ifdef DS_HAVE_CUDA
#include "backend/cuda.h"
#endif

#include <string.h>

static const char *const precision_names[] = {"fp32", "tf32", "bf16"};

const char *ds_precision_name(ds_precision p)
{
    return (unsigned)p < sizeof precision_names / sizeof *precision_names ? precision_names[p] : "?";
}

int ds_precision_parse(const char *name, ds_precision *out)
{
    for (unsigned i = 0; i < sizeof precision_names / sizeof *precision_names; i++)
        if (name && !strcmp(name, precision_names[i])) {
            *out = (ds_precision)i;
            return 0;
        }
    return ds_err("--precision %s: unknown (expected fp32, tf32 or bf16)", name ? name : "(none)");
}

const ds_backend *ds_backend_select(const char *device, const ds_backend_opts *opts)
{
    static const ds_backend_opts defaults = {.precision = DS_PRECISION_FP32};
    if (!opts) opts = &defaults;
    if (!device) device = "auto";
    if (!strcmp(device, "cpu")) return &ds_backend_cpu;
    if (strcmp(device, "auto") && strcmp(device, "cuda")) {
        ds_err("--device %s: unknown device (expected cpu, cuda or auto)", device);
        return NULL;
    }
#ifdef DS_HAVE_CUDA
    int count = ds_cuda_device_count();
    if (count < 0) return NULL;   /* a GPU that cannot start is an error, never a quiet CPU run */
    if (count > 0) return ds_cuda_select(opts);
    if (!strcmp(device, "auto")) return &ds_backend_cpu;
    ds_err("--device cuda: no CUDA device is visible (try --device cpu)");
#else
    if (!strcmp(device, "auto")) return &ds_backend_cpu;
    ds_err("--device cuda: this build has no CUDA support (rebuild with nvcc available, or use --device cpu)");
#endif
    return NULL;
}
