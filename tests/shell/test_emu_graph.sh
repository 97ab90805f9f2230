#!/bin/bash
# The training step as a CUDA graph, on the emulated CUDA device (tests/emu, make emu; tests/run.sh
# runs this file only in its emulated passes): the first step of each shape runs as calls,
# the second is recorded (stream capture) and every later one replays it. The emulated
# device records kernels with the arguments of their launch and refuses what CUDA refuses
# during a capture, so a value the step passes by value and that changes from step to step
# (the learning rate) shows as a run that differs from the calls.
#   - fp32 and bf16, three epochs with a cosine rate (it changes every step) and a crop ramp
#     (12, then 16: a second shape, recorded again): the checkpoints with graphs (the
#     default) equal those of DS_CUDA_GRAPHS=0 (calls) bitwise, and the graphs did replay
#     (the emulated device's notes count the launches);
#   - --verbose says why a run records no graph (DS_CUDA_GRAPHS=0), and a bad value is an
#     error before any work;
#   - --accum 2 (the step is not one call) runs as before and equals itself with
#     DS_CUDA_GRAPHS=0.
. "$(dirname "$0")/lib.sh"

make_bar_images "$T/tree" 12 4 31 || { fail data "cannot make the synthetic set"; finish; }
split_pack "$T/tree" 0.25 "$T/split" "$T/train" "$T/val" || { fail pack "dsplit/dspack failed"; finish; }

# 36 training images: steps of 8, 4 an epoch
RUN=(--train "$T/train" --arch resnet20 --crop 16 --batch 8 --lr 0.05 --lr-scaling none --warmup-epochs 0
     --schedule cosine --epochs 3 --augment rrc --min-crop 12 --ramp-start 1 --ramp-end 2 --crop-step 4
     --log-every 100 -q --threads 2 --loader-threads 1 --device cuda --deterministic)

bitwise() {  # A B: /model and /optimizer identical
    h5diff -q "$1" "$2" /model /model && h5diff -q "$1" "$2" /optimizer /optimizer
}

for prec in fp32 bf16; do
    DS_EMU_VERBOSE=1 dstrain "${RUN[@]}" --precision $prec -o "$T/graph-$prec" 2>"$T/graph-$prec.err" ||
        { fail "emu_graph_${prec}_runs" "$(tail -5 "$T/graph-$prec.err")"; continue; }
    # 12 steps, two shapes: each one's first as calls, the other 10 replayed
    launches=$(grep -c "cudaGraphLaunch:" "$T/graph-$prec.err")
    check "emu_graph_${prec}_replays_10_steps" test "$launches" -eq 10
    DS_CUDA_GRAPHS=0 dstrain "${RUN[@]}" --precision $prec -o "$T/calls-$prec" 2>"$T/calls-$prec.err" ||
        { fail "emu_graph_${prec}_calls_run" "$(tail -5 "$T/calls-$prec.err")"; continue; }
    last=$(ls "$T/graph-$prec"/ckpt-*.h5 | tail -1)
    check "emu_graph_${prec}_equals_calls_bitwise" bitwise "$last" "$T/calls-$prec/$(basename "$last")"
done

DS_CUDA_GRAPHS=0 dstrain "${RUN[@]}" --precision fp32 --epochs 1 --max-steps 2 --verbose -o "$T/said" 2>"$T/said.err"
check emu_graph_switch_said grep -q "not a CUDA graph: DS_CUDA_GRAPHS=0" "$T/said.err"
DS_CUDA_GRAPHS=yes dstrain "${RUN[@]}" --precision fp32 --max-steps 1 -o "$T/bad" 2>"$T/bad.err"
check emu_graph_switch_bad_value_refused grep -q "DS_CUDA_GRAPHS=yes: expected 0 or 1" "$T/bad.err"

ACC=("${RUN[@]}" --precision fp32 --batch 4 --accum 2 --epochs 1)
dstrain "${ACC[@]}" -o "$T/acc" 2>"$T/acc.err" && DS_CUDA_GRAPHS=0 dstrain "${ACC[@]}" -o "$T/acc0" 2>"$T/acc0.err" ||
    fail emu_graph_accum_runs "$(tail -5 "$T/acc.err" "$T/acc0.err")"
last=$(ls "$T/acc"/ckpt-*.h5 | tail -1)
check emu_graph_accum_unchanged bitwise "$last" "$T/acc0/$(basename "$last")"
finish
