#!/bin/bash
# The build's CUDA probe (Makefile): the toolkit is found through nvcc itself, also when
# nvcc on PATH is a wrapper script outside the toolkit, and a toolkit that lacks cuDNN,
# cuBLAS or NCCL gives a CPU-only build that names what is missing, never a failed compile.
# CUDA_HOME, when set (in the environment or on make's command line), is taken as it is.
# cuDNN and NCCL outside the toolkit are found through CUDNN_HOME and NCCL_HOME, and in pip
# wheels (nvidia/cudnn, nvidia/nccl, only a versioned libcudnn.so.9) of $VIRTUAL_ENV.
# And every C source compiles for each x86-64 level the CPU kernels come in (make
# check-march), so an instruction-set intrinsic outside its target attribute fails here on
# any CPU, not only on the one that lacks the instructions. Changed compiler flags rebuild
# the objects (the build/.flags stamp).
. "$(dirname "$0")/lib.sh"

config() { make -s -C "$DS_ROOT" config SAN=0 "$@" 2>&1 | head -n 1; }

nvcc=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
if [ -z "$nvcc" ]; then
    pass "build probe: no nvcc here, nothing to probe"
else
    home=$("$nvcc" --dryrun -x cu /dev/null 2>&1 | sed -n 's/^#\$ _HERE_=//p' | head -n 1)
    home=${home%/bin}
    mkdir -p "$T/wrap"
    printf '#!/bin/sh\nexec %s "$@"\n' "$nvcc" >"$T/wrap/nvcc" && chmod +x "$T/wrap/nvcc"
    line=$(unset CUDA_HOME; PATH="$T/wrap:/usr/bin:/bin" config)
    case "$line" in
        *"CUDA=1 ($home,"*) pass "build probe: a wrapper nvcc on PATH leads to its toolkit ($home)" ;;
        *"CUDA=0 (not in $home"*) pass "build probe: the toolkit behind the wrapper lacks a library, said so" ;;
        *) fail "build probe: wrapper nvcc" "$line" ;;
    esac
    # CUDA_HOME from the environment wins over the probe (the usual way to point at a toolkit).
    line=$(CUDA_HOME="$T/elsewhere" config)
    case "$line" in
        *"CUDA=0 (not in $T/elsewhere"*) pass "build probe: CUDA_HOME in the environment is used as it is" ;;
        *) fail "build probe: CUDA_HOME from the environment" "$line" ;;
    esac
fi

# A toolkit directory with headers but none of the libraries: CPU-only, and the line says why.
mkdir -p "$T/toolkit/include" && : >"$T/toolkit/include/cudnn.h"
line=$(config CUDA_HOME="$T/toolkit")
case "$line" in
    *CUDA=0*"not in $T/toolkit"*cuda_runtime_api.h*libnccl.so*) pass "build probe: missing parts named, CPU-only" ;;
    *) if [ -z "$nvcc" ]; then pass "build probe: no nvcc, CPU-only"; else fail "build probe: missing parts" "$line"; fi ;;
esac
# A toolkit with the runtime and cuBLAS but without cuDNN and NCCL (links into the real one):
# CPU-only, naming the two; CUDNN_HOME and NCCL_HOME, or a wheel layout, complete it.
if [ -n "$nvcc" ] && [ -f "$home/include/cudnn.h" ] && [ -f "$home/include/nccl.h" ]; then
    mkdir -p "$T/bare/include" "$T/bare/lib64"
    for f in "$home"/include/*; do
        case "${f##*/}" in cudnn*|nccl*) ;; *) ln -s "$f" "$T/bare/include/";; esac
    done
    for f in "$home"/lib64/libcudart.so* "$home"/lib64/libcublas*; do ln -s "$f" "$T/bare/lib64/"; done
    line=$(VIRTUAL_ENV= config PYTHON_SITES= CUDA_HOME="$T/bare")
    case "$line" in
        *CUDA=0*"not in $T/bare"*"cudnn.h nccl.h libcudnn.so libnccl.so)"*) pass "build probe: a toolkit without cuDNN and NCCL names them" ;;
        *) fail "build probe: toolkit without cuDNN and NCCL" "$line" ;;
    esac
    line=$(VIRTUAL_ENV= config PYTHON_SITES= CUDA_HOME="$T/bare" CUDNN_HOME="$home" NCCL_HOME="$home")
    case "$line" in
        *"CUDA=1 ($T/bare,"*"cudnn $home/lib64/libcudnn.so"*"nccl $home/lib64/libnccl.so"*) pass "build probe: CUDNN_HOME and NCCL_HOME" ;;
        *) fail "build probe: CUDNN_HOME and NCCL_HOME" "$line" ;;
    esac
    # pip wheels: nvidia/<part>/{include,lib}, the library only as its versioned file
    sp=$T/venv/lib/python3.12/site-packages/nvidia
    mkdir -p "$sp/cudnn/include" "$sp/cudnn/lib" "$sp/nccl/include" "$sp/nccl/lib"
    : >"$sp/cudnn/include/cudnn.h" && : >"$sp/cudnn/lib/libcudnn.so.9" && : >"$sp/cudnn/lib/libcudnn.so.9.1.0"
    : >"$sp/nccl/include/nccl.h" && : >"$sp/nccl/lib/libnccl.so.2"
    line=$(VIRTUAL_ENV="$T/venv" config PYTHON_SITES= CUDA_HOME="$T/bare")
    case "$line" in
        *"CUDA=1 ($T/bare,"*"cudnn $sp/cudnn/lib/libcudnn.so.9 "*"nccl $sp/nccl/lib/libnccl.so.2)"*) pass "build probe: cuDNN and NCCL from pip wheels" ;;
        *) fail "build probe: pip wheels" "$line" ;;
    esac
    check "build probe: a wheel's versioned library is linked by its file name" \
        sh -c "VIRTUAL_ENV='$T/venv' make -n -C '$DS_ROOT' SAN=0 PYTHON_SITES= CUDA_HOME='$T/bare' bin/dseval 2>/dev/null | grep -q -- '-l:libcudnn.so.9 '"
fi
# (the same compile twice would test nothing new: not in the sanitizer pass; ~12 s: long)
if [ "${DS_TEST_PASS:-normal}" != san ] && long check_march; then
    for m in x86-64 x86-64-v3 x86-64-v4; do
        check "every source compiles for -march=$m" make -s -C "$DS_ROOT" check-march MARCH_LEVELS=$m
    done
fi
# The objects depend on the flags they were built with (build/.flags): other flags, here
# another version string, must recompile the library (shown by make -n, nothing is built).
check "changed flags recompile the library" \
    sh -c "make -n -C '$DS_ROOT' SAN=0 VERSION=0.0.0-flags-probe build/libcommon.a | grep -q 'flags-probe.*-c libcommon/'"
line=$(config CUDA=0)
case "$line" in *"CUDA=0  SAN=0"*) pass "build probe: CUDA=0 is CPU-only" ;; *) fail "build probe: CUDA=0" "$line" ;; esac
finish
