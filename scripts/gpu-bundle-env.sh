#!/bin/bash
# env.sh of a ds GPU bundle (made by `make gpu-bundle`, scripts/gpu-bundle.sh):
#   . env.sh              (bash) puts the bundle's bin/ first on PATH, the CUDA libraries on
#                         LD_LIBRARY_PATH and relocates Open MPI into the bundle (OPAL_PREFIX)
#   env.sh --report       the same, then prints which CUDA library files the tools load, with
#                         their versions; exits 1 when one is not found
#   env.sh CMD [ARGS...]  runs CMD in that environment
# The bundle's own libraries come through the programs' RUNPATH ($ORIGIN/../lib); only the
# CUDA libraries (the runtime, cuBLAS, cuDNN, NCCL) are the machine's. Each is taken from the
# first folder that has it, in this order:
#   1. $DS_CUDA_LIB_DIRS (folders separated by ':'), when set
#   2. the nvidia/*/lib folders of the site-packages of the python3 on PATH (PyTorch's CUDA
#      wheels; asked of python3's `site` module, without importing torch)
#   3. $CUDA_HOME/lib64, /usr/local/cuda/lib64
#   4. the system's loader path (ldconfig)
# and the folders chosen go first on LD_LIBRARY_PATH, in that order.

ds_bundle_env() {
    local b name d sp found chosen="" dirs=() cand=()
    b=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd) || return 1
    DS_BUNDLE=$b
    # The CUDA libraries the tools were linked with (their sonames, listed when the bundle was
    # made: the machine may have no readelf).
    DS_CUDA_SONAMES=$(tr '\n' ' ' <"$b/lib/cuda-sonames.txt") || return 1

    local IFS_save=$IFS
    IFS=:
    for d in ${DS_CUDA_LIB_DIRS:-}; do [ -n "$d" ] && cand+=("$d"); done
    IFS=$IFS_save
    if command -v python3 >/dev/null 2>&1; then
        while read -r sp; do
            for d in "$sp"/nvidia/*/lib "$sp"/nvidia/*/lib64; do [ -d "$d" ] && cand+=("$d"); done
        done < <(python3 -c 'import site; print("\n".join(site.getsitepackages()))' 2>/dev/null)
    fi
    [ -n "${CUDA_HOME:-}" ] && cand+=("$CUDA_HOME/lib64")
    cand+=(/usr/local/cuda/lib64)

    DS_CUDA_LIBS=""
    for name in $DS_CUDA_SONAMES; do
        found=""
        for d in "${cand[@]}"; do
            if [ -e "$d/$name" ]; then found=$d/$name; break; fi
        done
        [ -z "$found" ] && found=$(/sbin/ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n {print $NF; exit}')
        DS_CUDA_LIBS="$DS_CUDA_LIBS $name=${found:-missing}"
        [ -n "$found" ] && chosen="$chosen $(dirname "$found") "
    done
    # The chosen folders in the order of the candidates, the loader's own last: no folder
    # then comes before the one a library was chosen from unless it lacks that library, so
    # the loader (and cuDNN, which loads its parts by name) takes each from where it was found.
    for d in "${cand[@]}"; do
        [[ "$chosen" == *" $d "* && " ${dirs[*]-} " != *" $d "* ]] && dirs+=("$d")
    done
    for d in $chosen; do
        [[ " ${dirs[*]-} " == *" $d "* ]] || dirs+=("$d")
    done
    local ld
    ld=$(IFS=:; echo "${dirs[*]-}")
    export LD_LIBRARY_PATH=$ld${LD_LIBRARY_PATH:+${ld:+:}$LD_LIBRARY_PATH}
    export PATH=$b/bin:$PATH DS_BUNDLE DS_CUDA_LIBS

    # Open MPI 4.1 relocated: every folder it would take from its configure-time prefix.
    export OPAL_PREFIX=$b OPAL_EXEC_PREFIX=$b OPAL_BINDIR=$b/bin OPAL_LIBDIR=$b/lib \
           OPAL_PKGLIBDIR=$b/lib/openmpi3 OPAL_DATAROOTDIR=$b/share OPAL_DATADIR=$b/share \
           OPAL_PKGDATADIR=$b/share/openmpi OPAL_SYSCONFDIR=$b/etc/openmpi
    export PMIX_MCA_mca_base_component_path=$b/lib/pmix
    # One machine needs no remote shell; without ssh or rsh mpirun refuses to start unless
    # its agent is something that exists.
    local agent p
    for p in ssh rsh; do
        p=$(type -P "$p") && [ -f "$p" ] && agent=$p
    done
    if [ -z "${OMPI_MCA_plm_rsh_agent:-}" ] && [ -z "${agent:-}" ]; then
        export OMPI_MCA_plm_rsh_agent=false
    fi
}

# The report: each CUDA library the loader gives dstrain, its file and its version as the
# library itself reports it (through python3's ctypes when there is one; else the file name).
ds_bundle_report() {
    local rc=0 line name path deps
    echo "ds bundle: $DS_BUNDLE"
    if ! deps=$(ldd "$DS_BUNDLE/bin/dstrain" 2>&1); then
        echo "  ldd of dstrain failed:"
        printf '%s\n' "$deps" | sed 's/^/    /'
        rc=1
    fi
    local need have files
    read -r need files <"$DS_BUNDLE/lib/glibc-needed.txt"
    have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
    if [ -n "$have" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
        echo "  glibc $have here, but $need is needed (by$files): the bundle is for Debian 12's glibc or later"
        rc=1
    else
        echo "glibc: ${have:-unknown} here, $need needed"
    fi
    echo "chosen:$DS_CUDA_LIBS" | tr ' ' '\n' | sed '1!s/^/  /'
    echo "dstrain loads:"
    while read -r line; do
        name=${line%% *}
        path=${line##* }
        if [ "$path" = found ]; then echo "  $name NOT FOUND"; rc=1; continue; fi
        echo "  $name => $(readlink -f "$path")"
    done < <(printf '%s\n' "$deps" | awk '$2 == "=>" {print $1, $3, ($3 == "not" ? "found" : $3)}' |
                 grep -E '^lib(cudart|cublas|cublasLt|cudnn|nccl|cuda)\.so|not found' | awk '{print $1, $NF}')
    # Anything else from outside the bundle but the base system's C and C++ runtime is a leak.
    printf '%s\n' "$deps" | awk -v b="$DS_BUNDLE/" '$2 == "=>" && $3 != "not" && index($3, b) != 1 {print $1}' |
        grep -vE '^(libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcudart|libcublas|libcublasLt|libcudnn|libnccl|libcuda)\.so' |
        sed 's/^/  from outside the bundle: /' | grep . && rc=1
    if command -v python3 >/dev/null 2>&1; then
        # Informative only: the loader's answer above is what counts.
        python3 - $DS_CUDA_LIBS <<'EOF' || echo "  (python3 could not ask the libraries)"
import ctypes, sys
def load(name):
    for item in sys.argv[1:]:
        soname, _, path = item.partition("=")
        if soname.startswith(name + ".so"):
            return ctypes.CDLL(path if path != "missing" else soname)
    return None
def ver(name, call):
    try:
        lib = load(name)
        print("  %-10s %s" % (name, call(lib) if lib else "not linked"))
    except OSError as e:
        print("  %-10s cannot load: %s" % (name, e))
def int_out(fn):
    v = ctypes.c_int()
    rc = fn(ctypes.byref(v))
    return v.value if rc == 0 else "error %d" % rc
def cublas(lib):
    parts = []
    for prop in range(3):   # MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL
        v = ctypes.c_int()
        lib.cublasGetProperty(prop, ctypes.byref(v))
        parts.append(str(v.value))
    return ".".join(parts)
print("versions:")
ver("libcudart", lambda l: "runtime %s" % int_out(l.cudaRuntimeGetVersion))
ver("libcublas", cublas)
ver("libcudnn", lambda l: "%d" % l.cudnnGetVersion())
ver("libnccl", lambda l: int_out(l.ncclGetVersion))
try:
    drv = ctypes.CDLL("libcuda.so.1")
    print("  %-10s driver API %s" % ("libcuda", int_out(drv.cuDriverGetVersion)))
except OSError:
    print("  %-10s not found (no NVIDIA driver on this machine)" % "libcuda")
EOF
    fi
    return $rc
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
    ds_bundle_env
else
    ds_bundle_env || exit 1
    case ${1:-} in
    --report) ds_bundle_report; exit $? ;;
    "" | -h | --help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) exec "$@" ;;
    esac
fi
