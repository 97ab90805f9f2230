#!/bin/bash
# bench/gpu_profile.sh's plumbing, without a GPU: its usage errors; with a stand-in bundle
# (env.sh, an engine_bench that prints a row), then the same engine_bench as a folder of tools
# (--tools, as bench/gpu.sh's stage 11 passes it), and a stand-in ncu that writes Nsight
# Compute's csv (a preamble line, a header, kernel names with commas inside quotes, times in
# ns): the per-kernel table (ms per step over the 1 + N steps, launches per step, longest
# first), the groups in profile.md, and PyTorch's side failing (no CUDA torch here, or the
# Python named does not exist), which profile.md states while ds's side is still there.
. "$(dirname "$0")/lib.sh"
cd "$DS_ROOT" || exit 1
P=bench/gpu_profile.sh

expect_status gpu_profile_rejects_zero_steps 2 bash "$P" --steps 0
expect_status gpu_profile_rejects_an_unknown_option 2 bash "$P" --what
expect_status gpu_profile_needs_a_bundle 1 bash "$P" --bundle "$T/none" --out "$T/o0"

B=$T/bundle
mkdir -p "$B/bin" "$T/path"
printf 'DS_CUDA_LIBS=\n' >"$B/env.sh"
cat >"$B/bin/engine_bench" <<'EOF'
#!/bin/bash
echo "${@: -5:1} ${@: -4:1} ${@: -3:1} train 123.4"
EOF
# Nsight Compute's csv for 3 launches of one kernel and 1 of another
{
    echo '==PROF== Connected to process 1'
    echo '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"'
    for ns in 1,000,000 2000000 3000000; do
        echo "\"0\",\"1\",\"engine_bench\",\"h\",\"void bn_stats_vec_kernel<float>(double *, float *, int)\",\"1\",\"7\",\"(256, 1, 1)\",\"(64, 1, 1)\",\"0\",\"9.0\",\"Command line profiler metrics\",\"gpu__time_duration.sum\",\"nsecond\",\"$ns\""
    done
    echo '"3","1","engine_bench","h","sm90_xmma_fprop_implicit_gemm_bf16","1","7","(128, 1, 1)","(8, 1, 1)","0","9.0","Command line profiler metrics","gpu__time_duration.sum","nsecond","9000000"'
} >"$T/ncu.csv"
standin_ncu "$T/path/ncu" "$T/ncu.csv"
chmod +x "$B/bin/engine_bench"

PATH="$T/path:$PATH" DS_BUNDLE= bash "$P" --bundle "$B" --out "$T/o" --steps 2 resnet20 32 8 bf16 >"$T/run" 2>&1
check gpu_profile_runs_without_a_gpu test -s "$T/o/profile.md"
printf '3.000\t0.333333\tsm90_xmma_fprop_implicit_gemm_bf16\n2.000\t1\tvoid bn_stats_vec_kernel<float>(double *, float *, int)\n' >"$T/want.tsv"
check gpu_profile_per_kernel_ms_per_step_longest_first diff "$T/want.tsv" "$T/o/ds-kernels.tsv"
check gpu_profile_groups grep -q '^| batch norm | 2.00 | 0.00 |$' "$T/o/profile.md"
check gpu_profile_groups_convolutions grep -q '^| convolutions and GEMMs | 3.00 | 0.00 |$' "$T/o/profile.md"
check gpu_profile_states_ds_rate grep -q '^ds: exit 0; resnet20 32 8 train 123.4$' "$T/o/profile.md"
check gpu_profile_states_torch_failing grep -q '^PyTorch: exit [1-9]' "$T/o/profile.md"
check gpu_profile_keeps_its_logs sh -c "tar -tzf '$T/o/profile-logs.tar.gz' | grep -q 'logs/ds-ncu.csv'"
# --tools (bench/gpu.sh's stage 11: the programs in a folder, their environment set up
# already) and --python: the same table, PyTorch's side from the Python named
PATH="$T/path:$PATH" bash "$P" --tools "$B/bin" --python "$T/no-python" --out "$T/o2" --steps 2 resnet20 32 8 bf16 \
    >"$T/run2" 2>&1
check gpu_profile_tools_folder diff "$T/want.tsv" "$T/o2/ds-kernels.tsv"
check gpu_profile_python_named grep -q '^PyTorch: exit 127' "$T/o2/profile.md"
expect_status gpu_profile_tools_need_engine_bench 1 bash "$P" --tools "$T/path" --out "$T/o3"
finish
