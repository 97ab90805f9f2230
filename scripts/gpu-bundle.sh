#!/bin/bash
# scripts/gpu-bundle.sh OBJDIR OUT: makes OUT a folder that runs ds on a machine with a GPU
# but none of ds's libraries (`make gpu-bundle` calls it after building OBJDIR):
#   OUT/bin/      dsplit dspack dstrain dseval, synth (the data generator), test_cuda_ops,
#                 engine_bench, cudnn_fusion_probe, h5diff and h5dump (test_cuda.sh compares
#                 checkpoints), mpirun and orted (Open MPI), ompi_info
#   OUT/lib/      every library those load, found by ldd here, except the base system's
#                 (glibc, libstdc++, libgcc_s) and CUDA's (cudart, cuBLAS, cuDNN, NCCL, the
#                 driver): HDF5 and what it pulls in (libcurl, TLS, ...), turbojpeg, png, xxhash,
#                 zlib, libgomp, Open MPI, PMIx, hwloc, libevent
#   OUT/lib/openmpi3/, OUT/lib/pmix/   Open MPI's and PMIx's plugins (the network stacks
#                 Debian's openmpi-mca-params.conf turns off, UCX, OFI, openib, PSM, and the
#                 OpenSHMEM ones are left out)
#   OUT/share/openmpi/, OUT/share/pmix/, OUT/etc/openmpi/   help texts and settings
#   OUT/env.sh    sets the environment (Open MPI relocated with OPAL_PREFIX and friends) and
#                 finds the CUDA libraries on the machine; `OUT/env.sh --report` says which
# Every program gets the RUNPATH $ORIGIN/../lib and every library $ORIGIN, so nothing of ds's
# comes from outside the folder; tests/shell/test_bundle.sh checks that with the Debian
# packages' files hidden.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 OBJDIR OUT" >&2; exit 2; }
OBJ=$1 OUT=$2
cd "$(dirname "$0")/.."
for t in patchelf ldd readelf; do
    command -v $t >/dev/null || { echo "gpu-bundle: $t is missing (make deps installs patchelf)" >&2; exit 1; }
done
MPI_LIBDIR=$(mpicc --showme:libdirs 2>/dev/null | awk '{print $1}')
[ -d "$MPI_LIBDIR/openmpi3" ] || { echo "gpu-bundle: Open MPI's plugins not found under '$MPI_LIBDIR'" >&2; exit 1; }
PMIX_DIR=$(dirname "$(readlink -f "$(ldconfig -p | awk '/libpmix.so.2 / {print $NF; exit}')")")

rm -rf "$OUT"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
mkdir -p "$OUT"/bin "$OUT"/lib/openmpi3 "$OUT"/lib/pmix "$OUT"/share "$OUT"/etc
# Ours, without their debug sections (they are 3/4 of a CUDA binary's size).
for p in "$OBJ"/bin/ds* "$OBJ"/data/synth "$OBJ"/tests/test_cuda_ops "$OBJ"/bench/engine_bench \
    "$OBJ"/bench/cudnn_fusion_probe; do
    objcopy --strip-debug "$p" "$OUT/bin/$(basename "$p")"
done
cp "$(command -v h5diff)" "$(command -v h5dump)" "$OUT/bin/"
cp "$(command -v orterun)" "$OUT/bin/mpirun"
cp "$(command -v orted)" "$(command -v ompi_info)" "$OUT/bin/"
for p in "$MPI_LIBDIR"/openmpi3/*.so; do
    case $(basename "$p") in
    *ucx* | *ofi* | *openib* | *psm* | *verbs* | mca_atomic_* | mca_memheap_* | mca_scoll_* | mca_spml_* | mca_sshmem_*) ;;
    *) cp "$p" "$OUT/lib/openmpi3/" ;;
    esac
done
cp "$PMIX_DIR"/pmix/*.so "$OUT/lib/pmix/"
cp -r /usr/share/openmpi "$OUT/share/openmpi"
[ -d "$PMIX_DIR/../share/pmix" ] && cp -r "$PMIX_DIR/../share/pmix" "$OUT/share/pmix"
cp -r /etc/openmpi "$OUT/etc/openmpi"
rm -f "$OUT/etc/openmpi/openmpi-totalview.tcl"

# The libraries every ELF file loads, to a fixed point. Left to the machine: glibc's
# (libc, libm, libdl, libpthread, librt, libresolv, libutil, the loader), the C++ runtime,
# and CUDA's (found by env.sh).
is_machines() {
    case $1 in
    linux-vdso.so.* | ld-linux-* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | \
        libresolv.so.* | libutil.so.* | libstdc++.so.* | libgcc_s.so.* | \
        libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libcudnn*.so.* | libnccl.so.*) return 0 ;;
    esac
    return 1
}
elfs() {
    local f
    find "$OUT/bin" "$OUT/lib" -type f \( -perm -u+x -o -name '*.so*' \) | while read -r f; do
        [ "$(head -c4 "$f" | tr -d '\0')" = $'\x7fELF' ] && echo "$f"
    done
}
# deps: for the ELF files named on stdin, one line "FILE SONAME PATH" per library each loads
# (PATH "-" when not found; "/x/../" folded), ldd run on batches in parallel.
# Each batch writes its own file: parallel writers into one pipe could split lines.
deps() {
    local d
    d=$(mktemp -d)
    xargs -r -n 16 -P "$(nproc)" sh -c 'for f; do ldd "$f" 2>/dev/null | sed "s|^|$f |"; done >"$0/$$"' "$d"
    cat "$d"/* 2>/dev/null |
        awk '$3 == "=>" { p = ($4 == "not" ? "-" : $4); while (sub(/[^\/]+\/\.\.\//, "", p)) ; print $1, $2, p }'
    rm -rf "$d"
}
# Each round runs ldd on the files the last round added (ldd resolves through the system; the
# plugins' dependencies on Open MPI's own libraries through its library directory).
todo=$(elfs)
while [ -n "$todo" ]; do
    new=""
    while read -r name path; do
        is_machines "$name" && continue
        [ -e "$OUT/lib/$name" ] && continue
        [ -f "$path" ] || { echo "gpu-bundle: $name not found here" >&2; exit 1; }
        cp -L "$path" "$OUT/lib/$name"
        new="$new$OUT/lib/$name"$'\n'
    done < <(printf '%s\n' "$todo" | LD_LIBRARY_PATH=$MPI_LIBDIR:/usr/local/cuda/lib64 deps | cut -d' ' -f2- | sort -u)
    todo=${new%$'\n'}
done
chmod u+w "$OUT"/lib/*.so* "$OUT"/bin/*
for f in "$OUT"/bin/*; do patchelf --set-rpath '$ORIGIN/../lib' "$f"; done
for f in "$OUT"/lib/*.so*; do patchelf --set-rpath '$ORIGIN' "$f"; done
for f in "$OUT"/lib/openmpi3/*.so "$OUT"/lib/pmix/*.so; do patchelf --set-rpath '$ORIGIN/..' "$f"; done
# The CUDA sonames the programs need, for env.sh to look for on the machine.
for f in "$OUT"/bin/*; do readelf -d "$f"; done |
    sed -n 's/.*Shared library: \[\(lib\(cudart\|cublas\|cublasLt\|cudnn\|nccl\)\.so\.[0-9]*\)\].*/\1/p' |
    sed 'p; s/^libcublas\.so/libcublasLt.so/' | sort -u >"$OUT/lib/cuda-sonames.txt"
[ -s "$OUT/lib/cuda-sonames.txt" ] || { echo "gpu-bundle: the programs link no CUDA library (a CPU-only build?)" >&2; exit 1; }
cp scripts/gpu-bundle-env.sh "$OUT/env.sh"
chmod +x "$OUT/env.sh"

# Nothing of ours may resolve outside the folder (the CUDA libraries aside, which env.sh finds).
bad=$(elfs | deps | while read -r f name path; do
          is_machines "$name" && continue
          case $path in "$OUT"/*) ;; -) echo "$f: $name not found" ;; *) echo "$f: $name => $path" ;; esac
      done)
[ -z "$bad" ] || { printf 'gpu-bundle: from outside the folder:\n%s\n' "$bad" >&2; exit 1; }
size=$(du -sb "$OUT" | cut -f1)
syms=$(elfs | xargs objdump -T 2>/dev/null | grep -o 'GLIBC_[0-9.]*\|GLIBCXX_[0-9.]*\|CXXABI_[0-9.]*' | sort -u)
# The newest glibc version any file needs, and which files, for env.sh --report to check.
elfs | while read -r f; do
    v=$(objdump -T "$f" 2>/dev/null | grep -o 'GLIBC_2\.[0-9]*' | sort -t. -k2,2n -u | tail -1) || true
    [ -n "$v" ] || continue
    echo "${v#GLIBC_} ${f#"$OUT"/}"
done | sort -t. -k2,2n | awk '{ if ($1 != v) { v = $1; n = "" } n = n " " $2 } END { print v n }' >"$OUT/lib/glibc-needed.txt"
newest() { printf '%s\n' "$syms" | grep "^$1_" | sort -t. -k1,1V -k2,2n -k3,3n | tail -1; }
printf 'gpu-bundle: %s: %d programs, %d libraries, %d plugins, %s MiB; the machine must have %s %s %s\n' \
    "$OUT" "$(ls "$OUT/bin" | wc -l)" "$(ls "$OUT"/lib/*.so* | wc -l)" \
    "$(ls "$OUT"/lib/openmpi3 "$OUT"/lib/pmix | grep -c '\.so$')" "$(awk -v s="$size" 'BEGIN {printf "%.1f", s / 1048576}')" \
    "$(newest GLIBC)" "$(newest GLIBCXX)" "$(newest CXXABI)"
[ "$size" -le $((48 << 20)) ] || { echo "gpu-bundle: larger than 48 MiB" >&2; exit 1; }
