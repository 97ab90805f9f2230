/* cpu_bf16_amx: cpu_bf16.h's products on AMX (TDPBF16PS), the kernel of the amx level: the
 * tile code of cpu_bf16_amx.inc on the hardware's instructions. Only cpu_isa's amx level calls
 * it, after Linux has granted the process the tile state. */
#include "cpu_bf16.h"

#if defined(__x86_64__) && defined(__linux__)
#include <immintrin.h>
#include <string.h>

#define AMX_NAME ds_bgemm_amx
#define AMX_TARGET __attribute__((target("amx-tile,amx-bf16,avx512f")))
#define AMX_CONFIG(cfg) _tile_loadconfig(cfg)
#define AMX_ZERO(t) _tile_zero(t)
#define AMX_LOAD(t, p, stride) _tile_loadd(t, p, stride)
#define AMX_STORE(t, p, stride) _tile_stored(t, p, stride)
#define AMX_DOT(c, a, b) _tile_dpbf16ps(c, a, b)
#define AMX_RELEASE() _tile_release()
#include "cpu_bf16_amx.inc"
#endif
