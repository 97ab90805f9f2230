#!/bin/bash
# The GPU bundle (make gpu-bundle, scripts/gpu-bundle.sh) needs nothing of this machine's
# Debian packages but the C and C++ runtime: in a mount namespace where every file of the
# packages whose libraries the bundle carries (HDF5, libaec, turbojpeg, libpng, libxxhash, zlib,
# libgomp, Open MPI, PMIx, hwloc, libevent, libcurl and its TLS stack, ...) plus openmpi-bin,
# openmpi-common, hdf5-tools and the network stacks Open MPI could reach for (libfabric,
# UCX, PSM, verbs) is hidden (/dev/null mounted over each file, an empty tmpfs over Open
# MPI's and PMIx's folders), the bundle's CPU smoke test runs: synth -> dsplit -> dspack ->
# dstrain 2 steps -> dseval, and dstrain under the bundle's `mpirun -np 2`. The unbundled
# bin/dstrain must fail to start there (the hiding works, so a leak would show). Outside the
# namespace: the library finder of env.sh takes the CUDA libraries from $DS_CUDA_LIB_DIRS,
# then from a python3's site-packages nvidia/*/lib, then from the toolkit, and --report
# names them.
# Builds the bundle first (incremental; the first build compiles the CUDA code once more,
# for the bundle's architectures). Needs root (unshare -m), dpkg and the CUDA build; without
# them it prints SKIP lines.
# LONG: builds the GPU bundle (the CUDA code compiled once more) and runs it in a namespace
. "$(dirname "$0")/lib.sh"
B=$DS_ROOT/${GPU_BUNDLE:-build/gpu-bundle}

if [ "${1:-}" = --inside ]; then
    # ---- inside the namespace: hide the packages' files, then run from the bundle ----
    while read -r f; do
        [ -f "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"
    done <"$T_OUTER/hide.files"
    for d in /usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/share/openmpi /etc/openmpi; do
        [ -d "$d" ] && mount -t tmpfs none "$d"
    done
    # no remote shell either, as on a bare machine (env.sh then gives mpirun a dummy agent)
    for f in /usr/bin/ssh /usr/bin/rsh; do [ -e "$f" ] && mount --bind /dev/null "$f"; done
    W=$T_OUTER/in
    mkdir -p "$W"
    export PATH=/usr/sbin:/usr/bin:/sbin:/bin
    # The control: the build that links the system's libraries cannot start here.
    if [ ! -x "$DS_ROOT/bin/dstrain" ]; then
        fail bundle_hiding_catches_a_leak "no bin/dstrain to try (make)"
    elif "$DS_ROOT/bin/dstrain" --version >"$W/leak.out" 2>&1; then
        fail bundle_hiding_catches_a_leak "bin/dstrain (linked to the system's libraries) still starts"
    elif grep -q 'error while loading shared libraries' "$W/leak.out"; then
        pass "bundle_hiding_catches_a_leak ($(grep -o 'error while loading[^:]*: [^:]*' "$W/leak.out" | head -1))"
    else
        fail bundle_hiding_catches_a_leak "bin/dstrain failed otherwise: $(head -2 "$W/leak.out")"
    fi
    . "$B/env.sh" || { fail bundle_env "env.sh failed"; finish; }
    [ "${OMPI_MCA_plm_rsh_agent:-}" = false ] || fail bundle_env_without_ssh "env.sh left mpirun's agent as '${OMPI_MCA_plm_rsh_agent:-}'"
    check bundle_env_report sh -c "'$B/env.sh' --report >'$W/report' 2>&1"
    sed 's/^/    /' "$W/report"
    check bundle_versions sh -c "dsplit --version && dspack --version && dstrain --version && dseval --version \
        && synth --version && h5diff --version && h5dump --version && ompi_info --version" >"$W/versions" 2>&1
    # the GPU op test loads (and, without a GPU, says so)
    check bundle_test_cuda_ops_starts sh -c "test_cuda_ops >'$W/ops' 2>&1 || grep -q '^PASS' '$W/ops'"
    check bundle_engine_bench_starts sh -c "engine_bench --help >/dev/null 2>&1; [ \$? -le 2 ]"
    # the cuDNN fusion probe loads, and lists its plan without a GPU
    check bundle_fusion_probe_dry_run sh -c "cudnn_fusion_probe --dry-run >'$W/fusion' 2>&1 &&
        [ \$(grep -c '^([a-e]) ' '$W/fusion') -eq 77 ]"
    check bundle_pipeline sh -c "synth -q --classes 4 --per-class 12 '$W/tree' &&
        dsplit -q --val 0.25 -o '$W/split' '$W/tree' &&
        dspack -q --size 24 -o '$W/train' '$W/split/train.txt' &&
        dspack -q --size 24 -o '$W/val' '$W/split/val.txt'" 2>"$W/pipe.err"
    TRAIN=(--train "$W/train" --arch resnet20 --crop 16 --batch 8 --max-steps 2 --device cpu --threads 1
           --log-every 1 -q)
    check bundle_dstrain_2_steps dstrain "${TRAIN[@]}" -o "$W/run" 2>>"$W/pipe.err"
    check bundle_dseval sh -c "dseval --json --device cpu '$W/run/last.h5' '$W/val' >'$W/eval.json' &&
        grep -q '\"top1\"' '$W/eval.json'" 2>>"$W/pipe.err"
    check bundle_mpirun_np2 sh -c "timeout 120 mpirun --allow-run-as-root --oversubscribe -np 2 \
        dstrain $(printf '%q ' "${TRAIN[@]}") -o '$W/mpi' >'$W/mpi.log' 2>&1 &&
        h5dump -a /world_size '$W/mpi/last.h5' | grep -q '(0): 2$'"
    check bundle_h5diff h5diff -q "$W/run/last.h5" "$W/run/last.h5"
    [ "$_failures" -eq 0 ] || { tail -5 "$W/pipe.err" "$W/mpi.log" "$W/versions" 2>/dev/null | sed 's/^/    /'; }
    finish
fi

# ---- outside: build, find what to hide, the finder, then the namespace ----
[ "${DS_TEST_PASS:-normal}" = san ] && { echo "SKIP bundle: the bundle is the normal build's (checked in the normal pass)"; finish; }
if [ "$(id -u)" != 0 ] || ! unshare -m true 2>/dev/null; then
    echo "SKIP bundle: needs root and unshare -m (a mount namespace) to hide the system's libraries"; finish
fi
command -v dpkg-query >/dev/null || { echo "SKIP bundle: no dpkg to name the packages to hide"; finish; }
t0=$SECONDS
# (a make of its own: under `make test` the parent's MAKEFLAGS name a jobserver this process lacks)
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -C "$DS_ROOT" --no-print-directory gpu-bundle >"$T/make.log" 2>&1; then
    if grep -q 'gpu-bundle: needs the CUDA' "$T/make.log"; then
        echo "SKIP bundle: $(grep -o 'gpu-bundle: needs.*' "$T/make.log")"; finish
    fi
    fail bundle_builds "$(tail -5 "$T/make.log")"; finish
fi
pass "bundle_builds ($((SECONDS - t0)) s; $(grep -o '[0-9.]* MiB' "$T/make.log"))"
grep '^gpu-bundle:' "$T/make.log" | sed 's/^/    /'

# The packages to hide: those owning the originals of the bundle's libraries, and the ones
# named above (where installed).
origs=()
for l in "$B"/lib/*.so*; do
    p=$(/sbin/ldconfig -p | awk -v n="$(basename "$l")" '$1 == n {print $NF; exit}')
    [ -z "$p" ] && p=$(ls /usr/lib/x86_64-linux-gnu/openmpi/lib/"$(basename "$l")" 2>/dev/null)
    [ -n "$p" ] && origs+=("$(readlink -f "$p")")
done
pkgs=$( { dpkg-query -S "${origs[@]}" 2>/dev/null | cut -d: -f1 | tr ',' '\n'
          echo libhdf5-103-1 libhdf5-hl-100 libsz2 libaec0 libturbojpeg0 libpng16-16 libxxhash0 libgomp1 zlib1g \
              libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libhwloc-plugins libfabric1 libucx0 \
              libpsm2-2 libpsm-infinipath1 libibverbs1 ibverbs-providers librdmacm1 hdf5-tools libcurl4 \
              libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 | tr ' ' '\n'; } |
        sed 's/ //g; s/:amd64$//' | grep . | sort -u |
        while read -r p; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' && echo "$p"; done)
for base in libc6 libstdc++6 libgcc-s1; do
    ! printf '%s\n' $pkgs | grep -qx "$base" || { fail bundle_hide_list "$base would be hidden: the bundle carries a base library"; finish; }
done
for p in $pkgs; do dpkg-query -L "$p"; done | grep -v -E '^/usr/share/(doc|man|lintian)/' | sort -u >"$T/hide.files"
echo "    hiding $(wc -l <"$T/hide.files") files of $(echo $pkgs | wc -w) packages: $(echo $pkgs)"

# ---- the finder, with a python3 whose site-packages holds PyTorch-style nvidia/*/lib ----
cuda_lib=/usr/local/cuda/lib64
if [ -e "$cuda_lib/libcudnn.so.9" ] && [ -e "$cuda_lib/libnccl.so.2" ]; then
    mkdir -p "$T/fake/bin" "$T/site/nvidia/cudnn/lib" "$T/first"
    printf '#!/bin/sh\necho %s\n' "$T/site" >"$T/fake/bin/python3"
    chmod +x "$T/fake/bin/python3"
    for f in "$cuda_lib"/libcudnn*.so.9; do ln -s "$f" "$T/site/nvidia/cudnn/lib/"; done
    ln -s "$cuda_lib/libnccl.so.2" "$T/first/"
    PATH=$T/fake/bin:$PATH DS_CUDA_LIB_DIRS=$T/first bash -c ". '$B/env.sh' && ldd '$B/bin/dstrain'" >"$T/ldd" 2>&1
    check bundle_finder_order sh -c "grep -q 'libcudnn.so.9 => $T/site/nvidia/cudnn/lib/libcudnn.so.9' '$T/ldd' &&
        grep -q 'libnccl.so.2 => $T/first/libnccl.so.2' '$T/ldd' &&
        grep -q 'libcudart.so.[0-9]* => $cuda_lib/' '$T/ldd'" || sed 's/^/    /' "$T/ldd"
    # a library found nowhere: --report says so and fails
    PATH=/usr/bin:/bin bash -c "mkdir -p '$T/nolib/bin' '$T/nolib/lib' && cp '$B/env.sh' '$T/nolib/' &&
        cp '$B/lib/cuda-sonames.txt' '$T/nolib/lib/' &&
        cp '$B/bin/dstrain' '$T/nolib/bin/' && patchelf --replace-needed libnccl.so.2 libnccl-absent.so.2 '$T/nolib/bin/dstrain' &&
        patchelf --set-rpath '$B/lib' '$T/nolib/bin/dstrain'" 2>/dev/null
    "$T/nolib/env.sh" --report >"$T/nolib.out" 2>&1
    rc=$?
    check bundle_report_names_a_missing_library sh -c "[ $rc -ne 0 ] && grep -q 'libnccl-absent.so.2 NOT FOUND' '$T/nolib.out'" ||
        sed 's/^/    /' "$T/nolib.out"
else
    echo "SKIP bundle_finder_order: no cuDNN/NCCL under $cuda_lib to stand in for PyTorch's wheels"
fi

# ---- bench/gpu.sh from the bundle, dry run (CPU, toy sizes): its arguments, the bundle's
# environment and the table; the canaries, inference and NCCL stages only, to stay short
# (test_gpu_sh.sh checks the plan, the order and the logs without the bundle). A dry run's
# commands have no limits of their own, only the deadline, set far off here: nothing in it
# depends on how fast this CPU is; the deadline and run.sh's watchdog guard against a hang ----
expect_status gpu_sh_rejects_a_bad_stage 2 bench/gpu.sh --only 20
expect_status gpu_sh_rejects_an_unknown_argument 2 bench/gpu.sh --bogus
expect_status gpu_sh_needs_a_bundle 1 bench/gpu.sh --bundle "$T/no-bundle"
expect_status gpu_sh_hang_only_in_dry_runs 2 env GPU_BENCH_HANG=1 bench/gpu.sh --only 1
(cd "$DS_ROOT" && bench/gpu.sh --dry-run --only 2,6,5 --seconds 3600 --out "$T/gpu-out") >"$T/gpu.log" 2>&1
rc=$?
table=$T/gpu-out/gpu-results.md
check gpu_sh_dry_run_writes_the_table sh -c "[ $rc -eq 0 ] && grep -q '^# GPU benchmark (DRY RUN' '$table' &&
    grep -q '^| libraries | bundle .*every library found' '$table' &&
    [ \$(grep -cE '^\| resnet20 (train|infer) [a-z0-9]+ b[0-9]+( --deterministic)? \| [0-9.]+ \|' '$table') -eq 3 ] &&
    grep -q '^| .*dry run, CPU .* | pass (max rel diff' '$table'" || sed 's/^/    /' "$T/gpu.log" | tail -30
# A stage that ignores SIGTERM (GPU_BENCH_HANG, dry runs only) is still ended: SIGKILL after
# the grace (exit 137), the script goes on to the next stage, the table names every stage,
# and the logs are packed beside it.
(cd "$DS_ROOT" && GPU_BENCH_HANG=1 GPU_BENCH_GRACE=2 bench/gpu.sh --dry-run --only 1,2 --seconds 3600 \
    --out "$T/gpu-hang") >"$T/gpu-hang.log" 2>&1
rc=$?
table=$T/gpu-hang/gpu-results.md
check gpu_sh_stage_ignoring_sigterm_is_killed grep -q '^| 1\. op tests | [0-9]* s | ended by its limit (exit 137 ' "$table"
check gpu_sh_goes_on_after_a_killed_stage sh -c "[ $rc -eq 0 ] && grep -q '^| 2\. planning canaries | [0-9]* s | done ' '$table' &&
    grep -q '^| canary: resnet20 bf16 b8 train, .* | pass ' '$table'"
check gpu_sh_table_names_every_stage test "$(grep -cE '^\| [0-9]+\. ' "$table")" = 20
check gpu_sh_packs_the_logs sh -c "tar -tzf '$T/gpu-hang/gpu-logs.tar.gz' | grep -q '2-canaries/canary-.*\.err'"

# ---- the namespace ----
T_OUTER=$T timeout 300 unshare -m --propagation private bash "$0" --inside
rc=$?
case $rc in
0) ;;
1) _failures=$((_failures + 1)) ;;   # its FAIL lines are printed
*) fail bundle_namespace "exit $rc" ;;
esac
finish
