#!/bin/bash
# The CPU kernel sets (libcommon/cpu_isa.h: plain, avx2, avx512, avx512bf16) compute bitwise
# the same results, so a run gives the same numbers on every CPU, in fp32 and in bf16 (the
# bf16 products' exact rule: backend/cpu_bf16.h). Each set this CPU can run is forced with
# DS_CPU_KERNELS and compared with the plain one: every op of both precisions (test_ops
# --bits, and test_ops's and test_bf16's own checks under that set), dspack's shards (the
# resize passes), a short resnet20 training run with validation in fp32 and in bf16 and two
# resnet50 training steps (checkpoints value for value), and dseval's logits. A set the CPU
# lacks is a SKIP line, never a pass.
# amx, the one set that is not exact (its bf16 products are AMX's own sums), is never the
# default; where the CPU has it, its fp32 is compared bit for bit like the others and its bf16
# evaluation of the same checkpoint within a tolerance of the exact sets' (tests/unit/test_bf16.c
# holds the kernel to its bound).
# Also: the tools name the set in use, and an unknown or unsupported DS_CPU_KERNELS is a
# clear error (exit 1), never a crash. The long tier adds test_ops's own checks under each
# set and the resnet50 steps (together ~25 s of the test's ~35 s).
. "$(dirname "$0")/lib.sh"

# A set's name in DS_CPU_KERNELS, and as the tools print it.
long_name() {
    case $1 in avx2) echo avx2+fma ;; avx512bf16) echo avx512+bf16 ;; amx) echo avx512+bf16+amx ;; *) echo "$1" ;; esac
}

# The sets this CPU can run, as `--version` reports them under each setting; best: the best
# exact one, the default.
levels=() amx=0
for k in plain avx2 avx512 avx512bf16 amx; do
    if DS_CPU_KERNELS=$k dsplit --version 2>/dev/null | grep -q "^cpu kernels: $(long_name $k)\$"; then
        if [ $k = amx ]; then amx=1; else levels+=("$k"); fi
    else
        echo "SKIP kernels_$k: this CPU cannot run the $k kernels"
    fi
done
best=${levels[${#levels[@]}-1]}
# the default: the best exact set, but avx512 before avx512bf16 on Intel's cores, where the
# native bf16 products ran slower than their FMA form (libcommon/cpu_isa.c)
default=$best
[ "$best" = avx512bf16 ] && grep -q '^vendor_id.*GenuineIntel' /proc/cpuinfo && default=avx512
check default_is_fastest_supported sh -c "env -u DS_CPU_KERNELS dsplit --version | grep -q '^cpu kernels: $(long_name "$default")$'"

# Errors: an unknown name everywhere; a set this CPU lacks where there is one.
expect_status unknown_set_refused 1 env DS_CPU_KERNELS=sse9 dspack -o "$T/none" "$T/none.txt"
check unknown_set_message grep -q 'DS_CPU_KERNELS=sse9: unknown kernel set' "$T/err"
missing=""
for k in avx2 avx512 avx512bf16 amx; do
    [[ " ${levels[*]} " == *" $k "* ]] || [ $k = amx -a $amx = 1 ] || { missing=$k; break; }
done
if [ -n "$missing" ]; then
    expect_status unsupported_set_refused 1 env DS_CPU_KERNELS=$missing dstrain --train "$T/none" -o "$T/none"
    check unsupported_set_message grep -q "DS_CPU_KERNELS=$missing: this CPU cannot run" "$T/err"
else
    echo "SKIP unsupported_set_refused: this CPU runs every kernel set"
fi

# Portable binaries: no instruction of the tools is VEX or EVEX encoded (AVX, AVX2, FMA,
# AVX-512 and AMX all are) outside the functions compiled for an instruction set, which say so in
# their names (avx2_tile_nv2, ds_cpu_loops_avx512_bn_sums, pass_vertical_avx2, ds_bgemm_amx, ...) and which only
# the run-time choice of cpu_isa calls; so the tools start and run on any x86-64 CPU.
if ! command -v objdump >/dev/null || [ "$(uname -m)" != x86_64 ]; then
    echo "SKIP binaries_baseline_x86_64: needs objdump on x86-64"
elif grep -q -- '-march=' "$BUILD_DIR/.flags" 2>/dev/null; then
    echo "SKIP binaries_baseline_x86_64: this build was made with -march (NATIVE=1)"
else
    for t in dsplit dspack dstrain dseval; do
        objdump -d --no-show-raw-insn "$DS_ROOT/$BIN/$t" |
            awk '/^[0-9a-f]+ <.*>:$/ { fn = $2 } $2 ~ /^v/ { print fn }' | sort -u |
            grep -v -E '^<[^>]*(avx(2|512)|amx)[^>]*>:$' >"$T/vex-$t"
        check "binary_${t}_baseline_x86_64" test ! -s "$T/vex-$t"
        [ -s "$T/vex-$t" ] && sed 's/^/      AVX outside the kernels: /' "$T/vex-$t" | head -5
    done
fi

make_bar_images "$T/tree" 12 4 3 || { fail data "cannot make the synthetic set"; finish; }
dsplit -q --val 0.25 -o "$T/split" "$T/tree" >/dev/null || { fail split "dsplit failed"; finish; }

TRAIN=(--arch resnet20 --crop 16 --pad 2 --batch 6 --epochs 2 --lr 0.05 --lr-scaling none --warmup-epochs 0.5
       --threads 2 --log-every 0)
R50=(--arch resnet50 --crop 32 --batch 3 --max-steps 2 --lr 0.05 --lr-scaling none --threads 2 --log-every 0 -q)
long_ops=0 long_r50=0
long test_ops_under_each_set && long_ops=1
long resnet50_steps_under_each_set && long_r50=1
for k in "${levels[@]}"; do
    export DS_CPU_KERNELS=$k
    [ $long_ops = 1 ] && check "test_ops_$k" sh -c "'$BUILD_DIR/tests/test_ops' >'$T/ops-$k.log' 2>&1"
    check "test_bf16_$k" sh -c "'$BUILD_DIR/tests/test_bf16' >'$T/bf16-$k.log' 2>&1"
    "$BUILD_DIR/tests/test_ops" --bits "$T/bits-$k"
    dspack -q --size 16 -o "$T/p16-$k/train" "$T/split/train.txt" &&
        dspack -q --size 16 -o "$T/p16-$k/val" "$T/split/val.txt" &&
        dspack -q --size 36 -o "$T/p36-$k" "$T/split/train.txt" 2>"$T/pack-$k.err"
    dstrain "${TRAIN[@]}" --train "$T/p16-plain/train" --val "$T/p16-plain/val" -o "$T/r20-$k" 2>"$T/r20-$k.err"
    dstrain "${TRAIN[@]}" --precision bf16 --train "$T/p16-plain/train" --val "$T/p16-plain/val" -o "$T/b20-$k" \
        2>"$T/b20-$k.err"
    [ $long_r50 = 1 ] && dstrain "${R50[@]}" --train "$T/p36-plain" -o "$T/r50-$k" 2>"$T/r50-$k.err"
    dseval -q --json --logits "$T/logits-$k.h5" "$T/r20-$k/last.h5" "$T/split/val.txt" |
        sed 's/"images_per_sec": [0-9.]*//' >"$T/eval-$k.txt"
    unset DS_CPU_KERNELS
    [ "$k" = plain ] && continue
    check "ops_bits_${k}_equal_plain" cmp -s "$T/bits-plain" "$T/bits-$k"
    check "dspack_${k}_shards_equal_plain" sh -c "cmp -s '$T/p16-plain/train/shard-00000.h5' '$T/p16-$k/train/shard-00000.h5' &&
        cmp -s '$T/p36-plain/shard-00000.h5' '$T/p36-$k/shard-00000.h5'"
    check "resnet20_run_${k}_equal_plain" same_state "$T/r20-plain/last.h5" "$T/r20-$k/last.h5"
    check "resnet20_bf16_run_${k}_equal_plain" same_state "$T/b20-plain/last.h5" "$T/b20-$k/last.h5"
    [ $long_r50 = 1 ] && check "resnet50_steps_${k}_equal_plain" same_state "$T/r50-plain/last.h5" "$T/r50-$k/last.h5"
    check "dseval_logits_${k}_equal_plain" sh -c "h5diff '$T/logits-plain.h5' '$T/logits-$k.h5' /logits /logits >/dev/null &&
        cmp -s '$T/eval-plain.txt' '$T/eval-$k.txt'"
done
# amx: fp32 is avx512bf16's, bit for bit; bf16 evaluates the exact sets' bf16 checkpoint to
# logits within 1e-2 of theirs (a tile read from the wrong place is off by far more).
if [ $amx = 1 ]; then
    export DS_CPU_KERNELS=amx
    check test_bf16_amx sh -c "'$BUILD_DIR/tests/test_bf16' >'$T/bf16-amx.log' 2>&1"
    dstrain "${TRAIN[@]}" --train "$T/p16-plain/train" --val "$T/p16-plain/val" -o "$T/r20-amx" 2>"$T/r20-amx.err"
    dstrain "${TRAIN[@]}" --precision bf16 --train "$T/p16-plain/train" --val "$T/p16-plain/val" -o "$T/b20-amx" \
        2>"$T/b20-amx.err"
    dseval -q --precision bf16 --logits "$T/blogits-amx.h5" "$T/b20-plain/last.h5" "$T/split/val.txt" >/dev/null
    unset DS_CPU_KERNELS
    dseval -q --precision bf16 --logits "$T/blogits-plain.h5" "$T/b20-plain/last.h5" "$T/split/val.txt" >/dev/null
    check resnet20_run_amx_equal_plain same_state "$T/r20-plain/last.h5" "$T/r20-amx/last.h5"
    check resnet20_bf16_run_amx_trains sh -c "test -f '$T/b20-amx/last.h5' &&
        h5dump -a /kernels '$T/b20-amx/last.h5' | grep -q 'avx512+bf16+amx'"
    check startup_line_names_amx grep -q "cpu in bf16 (2 threads, avx512+bf16+amx kernels)" "$T/b20-amx.err"
    check bf16_eval_amx_close_to_exact sh -c "test -s '$T/blogits-amx.h5' &&
        h5diff -d 0.01 '$T/blogits-plain.h5' '$T/blogits-amx.h5' /logits /logits >/dev/null"
    check bf16_eval_amx_not_exact sh -c "! h5diff '$T/blogits-plain.h5' '$T/blogits-amx.h5' /logits /logits >/dev/null"
else
    echo "SKIP kernels_amx_runs: this CPU has no AMX (the kernel is checked on a model of the tiles in test_bf16)"
fi
# The runs really ran: a checkpoint per run, and the start-up line names the set.
check runs_wrote_checkpoints test -f "$T/r20-plain/last.h5" -a -f "$T/b20-plain/last.h5" -a \
    \( $long_r50 = 0 -o -f "$T/r50-plain/last.h5" \)
check startup_line_names_set grep -q "cpu in fp32 (2 threads, $(long_name "$best") kernels)" "$T/r20-$best.err"
check startup_line_names_bf16 grep -q "cpu in bf16 (2 threads, $(long_name "$best") kernels)" "$T/b20-$best.err"
# bf16 is a different computation, not fp32 under another name; its checkpoint says so.
check bf16_run_differs_from_fp32 sh -c "! h5diff '$T/r20-plain/last.h5' '$T/b20-plain/last.h5' /model /model >/dev/null"
# tf32 is a tensor-core format: on the CPU it is an error, not an fp32 run under its name.
expect_status tf32_refused_on_cpu 1 dstrain "${TRAIN[@]}" --precision tf32 --device cpu \
    --train "$T/p16-plain/train" -o "$T/tf32"
check tf32_refused_message grep -q 'tf32: the CPU computes fp32 or bf16' "$T/err"
check checkpoint_records_precision sh -c "h5dump -a /precision '$T/b20-plain/last.h5' | grep -q bf16 &&
    h5dump -a /kernels '$T/b20-$best/last.h5' | grep -q '$(long_name "$best")'"
finish
