/* backend: choosing and starting the backend a tool runs on (--device, --precision,
 * --deterministic). */
#include "backend.h"
#include "log.h"

#ifdef DS_HAVE_CUDA
#include "backend/cuda.h"
#endif

#include <stdio.h>
#include <string.h>

static const char *const precision_names[] = {"fp32", "tf32", "bf16", "auto"};

const char *ds_precision_name(ds_precision p)
{
    return (unsigned)p < sizeof precision_names / sizeof *precision_names ? precision_names[p] : "?";
}

static const char *const device_names[] = {"auto", "cpu", "cuda"};

const char *ds_device_name(ds_device d)
{
    return (unsigned)d < sizeof device_names / sizeof *device_names ? device_names[d] : "?";
}

int ds_device_parse(const char *name, ds_device *out)
{
    for (unsigned i = 0; i < sizeof device_names / sizeof *device_names; i++)
        if (name && !strcmp(name, device_names[i])) {
            *out = (ds_device)i;
            return 0;
        }
    return ds_err("--device %s: unknown device (expected cpu, cuda or auto)", name ? name : "(none)");
}

size_t ds_dtype_size(ds_dtype t) { return t == DS_BF16 ? 2 : 4; }
const char *ds_dtype_name(ds_dtype t) { return t == DS_BF16 ? "bf16" : "f32"; }

int ds_precision_parse(const char *name, ds_precision *out)
{
    for (unsigned i = 0; i < sizeof precision_names / sizeof *precision_names; i++)
        if (name && !strcmp(name, precision_names[i])) {
            *out = (ds_precision)i;
            return 0;
        }
    return ds_err("--precision %s: unknown (expected fp32, tf32, bf16 or auto)", name ? name : "(none)");
}

/* The CPU backend of a precision: fp32 (also for auto) or bf16; tf32 is refused. */
static const ds_backend *cpu_backend(ds_precision p)
{
    if (p == DS_PRECISION_FP32 || p == DS_PRECISION_AUTO) return &ds_backend_cpu;
    if (p == DS_PRECISION_BF16) return &ds_backend_cpu_bf16;
    ds_err("--precision %s: the CPU computes fp32 or bf16 (tf32 is a GPU tensor-core format)", ds_precision_name(p));
    return NULL;
}

const ds_backend *ds_backend_select(ds_device device, const ds_backend_opts *opts)
{
    static const ds_backend_opts defaults = {.precision = DS_PRECISION_FP32};
    if (!opts) opts = &defaults;
    if (device == DS_DEVICE_CPU) return cpu_backend(opts->precision);
    if (device != DS_DEVICE_AUTO && device != DS_DEVICE_CUDA) {
        ds_err("--device %d: unknown device (expected cpu, cuda or auto)", (int)device);
        return NULL;
    }
#ifdef DS_HAVE_CUDA
    int count = ds_cuda_device_count();
    if (count < 0) return NULL;   /* a GPU that cannot start is an error, never a quiet CPU run */
    if (count > 0) {
        ds_backend_opts o = *opts;
        if (o.precision == DS_PRECISION_AUTO) o.precision = DS_PRECISION_BF16;
        return ds_cuda_select(&o);
    }
    if (device == DS_DEVICE_AUTO) return cpu_backend(opts->precision);
    ds_err("--device cuda: no CUDA device is visible (try --device cpu)");
#else
    if (device == DS_DEVICE_AUTO) return cpu_backend(opts->precision);
    ds_err("--device cuda: this build has no CUDA support (rebuild with nvcc available, or use --device cpu)");
#endif
    return NULL;
}

const char *ds_backend_describe(const ds_backend *be, int threads, char *buf, size_t len)
{
    char kernels[64] = "";
    if (be->kernel_set) snprintf(kernels, sizeof kernels, ", %s kernels", be->kernel_set());
    snprintf(buf, len, "%s in %s (%d thread%s%s)", be->name, ds_precision_name(be->precision), threads,
             threads == 1 ? "" : "s", kernels);
    return buf;
}
