#!/bin/bash
# DS_CUDA_VEC=0, the switch that runs the scalar twins of the vector kernels everywhere
# (libcommon/backend/cuda_kernels.cu, vec_allowed; docs/TOOLS.md, Environment), on the emulated
# CUDA device (tests/run.sh runs this file only in its emulated passes):
#   - with every launch of a vector kernel failing (DS_EMU_FAULT=launch_fail=_vec_),
#     test_cuda_ops passes under DS_CUDA_VEC=0: no vector kernel is launched, and the scalar
#     twins pass every op test; without the switch the same fault fails it (the control: the
#     vector kernels do run by default);
#   - two bf16 training runs, --deterministic, with and without the switch, end with the same
#     model and optimizer, bitwise (the vector kernels give the scalar ones' bits; on a GPU,
#     bench/gpu.sh's device-bits stage runs the same pair).
. "$(dirname "$0")/lib.sh"
OPS=$BUILD_DIR/tests/test_cuda_ops
[ -x "$OPS" ] || { echo "SKIP emu_scalar_twins: no $OPS (make emu)"; finish; }
command -v h5diff >/dev/null || { echo "SKIP emu_scalar_twins: needs h5diff"; finish; }

DS_CUDA_VEC=0 DS_EMU_FAULT=launch_fail=_vec_ "$OPS" >"$T/scalar.log" 2>&1
rc=$?
check emu_scalar_twins_no_vector_launch_and_ops_pass sh -c "[ $rc -eq 0 ] && ! grep -q '^FAIL' '$T/scalar.log' &&
    [ \$(grep -c '^PASS' '$T/scalar.log') -gt 100 ]" || tail -5 "$T/scalar.log" | sed 's/^/    /'
DS_EMU_FAULT=launch_fail=_vec_ "$OPS" >"$T/vector.log" 2>&1
rc=$?
check emu_scalar_twins_vector_kernels_run_by_default sh -c "[ $rc -ne 0 ] && grep -q 'too many resources requested' '$T/vector.log'" ||
    tail -3 "$T/vector.log" | sed 's/^/    /'

make_bar_images "$T/tree" 8 4 32 && split_pack "$T/tree" 0.25 "$T/split" "$T/train" ||
    { fail data "cannot make the synthetic set"; finish; }
# bf16 at 16 px: the stem's 16 channels, the stages' 16, 32, 64: every vector kernel serves them
RUN=(--train "$T/train" --arch resnet20 --crop 16 --batch 4 --max-steps 3 --lr 0.05 --log-every 0 --threads 1
     --loader-threads 1 --device cuda --precision bf16 --deterministic -q)
dstrain "${RUN[@]}" -o "$T/vec" 2>"$T/vec.err" && DS_CUDA_VEC=0 dstrain "${RUN[@]}" -o "$T/scalar" 2>"$T/scalar.err"
rc=$?
check emu_scalar_twins_training_bitwise sh -c "[ $rc -eq 0 ] && h5diff -q '$T/vec/last.h5' '$T/scalar/last.h5' /model /model &&
    h5diff -q '$T/vec/last.h5' '$T/scalar/last.h5' /optimizer /optimizer" || cat "$T/vec.err" "$T/scalar.err" | tail -5
finish
