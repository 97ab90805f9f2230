/* compute: the options that say where and how a tool computes — --device, --precision,
 * --deterministic, --threads, --loader-threads — declared once for dstrain and dseval, and
 * the one call that applies them.
 *
 * A tool holds a ds_compute_options (DS_COMPUTE_DEFAULTS), puts DS_COMPUTE_OPTIONS in its
 * option table, and after parsing calls ds_compute_setup where it wants its backend. The
 * default of --loader-threads (0) is the tool's to resolve, so the table takes its help text. */
#ifndef DS_COMPUTE_H
#define DS_COMPUTE_H

#include "backend.h"
#include "cli.h"

/* --precision's choices, in the order of ds_precision: a choice's index is its enum value. */
#define DS_PRECISION_CHOICES "fp32|tf32|bf16|auto"
/* --device's choices, in the order of ds_device. */
#define DS_DEVICE_CHOICES "auto|cpu|cuda"

typedef struct {
    const char *device;        /* the name given (recorded in configs) */
    int device_index;          /* its ds_device (set by ds_cli_parse) */
    const char *precision;     /* the name given (recorded in configs) */
    int precision_index;       /* its ds_precision (set by ds_cli_parse) */
    int deterministic;
    long long threads;         /* compute (OpenMP) threads; 0: every core */
    long long loader_threads;  /* 0: the tool's default */
} ds_compute_options;

#define DS_COMPUTE_DEFAULTS {.device = "auto", .device_index = DS_DEVICE_AUTO, .precision = "auto", .precision_index = DS_PRECISION_AUTO}

/* The five table entries; `c` is the tool's ds_compute_options (static storage). */
#define DS_COMPUTE_OPTIONS(c, loader_threads_help)                                                                 \
    DS_CHOICE_INDEX("device", &(c).device, &(c).device_index, DS_DEVICE_CHOICES,                                   \
                    "where to compute (auto: cuda when a GPU is visible)"),                                         \
    DS_CHOICE_INDEX("precision", &(c).precision, &(c).precision_index, DS_PRECISION_CHOICES,                       \
                    "arithmetic of the convolutions: bf16 (GPU: tensor cores; CPU: bf16 operands, fp32 sums; "    \
                    "BN, loss and training's master weights stay fp32), tf32 (GPU only), fp32 (GPU: without "      \
                    "tensor cores); auto: bf16 on a GPU, fp32 on the CPU"),                                         \
    DS_OPT("deterministic", DS_OPT_FLAG, &(c).deterministic, NULL,                                                 \
           "GPU: only the cuDNN algorithms cuDNN reports as deterministic; on the CPU every run is already "       \
           "bitwise repeatable"),                                                                                  \
    DS_NUM("threads", DS_OPT_INT, &(c).threads, "N", "compute threads (0: every core)", 0, 4096),                  \
    DS_NUM("loader-threads", DS_OPT_INT, &(c).loader_threads, "N", loader_threads_help, 0, 256)

/* Applies --threads to OpenMP, then selects the backend for --device with --precision and
 * --deterministic; data_parallel as ds_backend_opts (1: the tool reduces gradients over the
 * ranks). Returns NULL, with a message, when no backend can be used. */
const ds_backend *ds_compute_setup(const ds_compute_options *c, int data_parallel);

#endif
