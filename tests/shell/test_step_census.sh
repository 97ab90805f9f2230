#!/bin/bash
# step_census (tests/drivers): one training step of the real model over a spy backend, counting
# what the CUDA backend's own kernels would launch and move. Run on ResNet-20 at 32 px, batch 8, in bf16 and fp32, and its counts checked
# against what must hold: the categories add up to the totals; bf16 moves fewer bytes than
# fp32 and launches the same kernels but for the casts; batch norm's and the casts' bytes
# and launches, and the elementwise launches, equal a count by hand from ResNet-20's layer
# shapes (no kernel adds a gradient: the convolutions accumulate in cuDNN, the residual's gradient is
# batch norm's masked dout itself, by the memory plan; every ReLU's batch norm has its bitmask).
. "$(dirname "$0")/lib.sh"
census="$BUILD_DIR/drivers/step_census"

N=8
for p in bf16 fp32; do
    if ! timeout 60 "$census" resnet20 32 $N $p >"$T/$p.out" 2>"$T/$p.err"; then
        fail "step_census_runs_$p" "$(head -3 "$T/$p.err")"; finish
    fi
done
pass step_census_runs

# cell FILE ROW launches|bytes: a cell of the category table (rows start at the line's start,
# the kernel table's are indented).
cell() {
    awk -v row="$2" -v col="$3" 'index($0, row " ") == 1 && $(NF - 3) ~ /^[0-9]+$/ {
        print (col == "launches" ? $(NF - 3) : $(NF - 2)); exit }' "$1"
}
cats=("batch norm" casts "optimizer/elementwise" pooling loss other)

# The categories add up to the total, in launches and bytes.
for p in bf16 fp32; do
    for col in launches bytes; do
        sum=0
        for c in "${cats[@]}"; do sum=$((sum + $(cell "$T/$p.out" "$c" $col))); done
        total=$(cell "$T/$p.out" total $col)
        check "categories_sum_to_total_${p}_$col ($sum = $total)" [ "$sum" -eq "$total" ]
    done
done

b16=$(cell "$T/bf16.out" total bytes) b32=$(cell "$T/fp32.out" total bytes)
check "bf16_moves_fewer_bytes ($b16 < $b32)" [ "$b16" -lt "$b32" ]

# The same kernels in both precisions but the casts, which fp32 storage never needs.
for c in "batch norm" "optimizer/elementwise" pooling loss other; do
    a=$(cell "$T/bf16.out" "$c" launches) b=$(cell "$T/fp32.out" "$c" launches)
    check "same_launches_${c// /_} ($a, $b)" [ "$a" -eq "$b" ]
done
a=$(cell "$T/fp32.out" casts launches) b=$(cell "$T/fp32.out" casts bytes)
check "fp32_casts_nothing ($a launches, $b bytes)" [ $((a + b)) -eq 0 ]
check "same_library_calls" [ "$(grep '^library calls' "$T/bf16.out")" = "$(grep '^library calls' "$T/fp32.out")" ]
check "cudnn_calls (21 convolutions; conv1 has no data gradient)" \
    grep -q '^library calls.*cuDNN 62 (forward 21, backward-data 20, backward-filter 21), cuBLAS 3$' "$T/bf16.out"
check "no_host_wait_for_the_step (the loss read a step late)" grep -q "host waits for the step's own work: 0$" "$T/bf16.out"
check "the_loss_copied_back_on_the_stream_and_read_after_the_next_step_is_queued" \
    grep -q "1 copy(ies) back on the stream of $((N * 4)) bytes; 0 download(s) of 0 bytes and 0 be->sync, each waiting for the stream; 1 wait(s) for the step before" "$T/bf16.out"

# ---- by hand, from ResNet-20's shapes (model_build.c) ----
# Batch-norm layers as "rows channels relu residual": the stem, 3 stages of 3 basic blocks;
# each stage's first block (but the first stage's) has a downsample BN without ReLU.
bn=("$((N * 32 * 32)) 16 1 0")
for b in 1 2 3; do bn+=("$((N * 32 * 32)) 16 1 0" "$((N * 32 * 32)) 16 1 1"); done
for s in 16:32 8:64; do
    m=$((N * ${s%:*} * ${s%:*})) c=${s#*:}
    bn+=("$m $c 1 0" "$m $c 0 0" "$m $c 1 1")
    for b in 1 2; do bn+=("$m $c 1 0" "$m $c 1 1"); done
done

# One layer's bytes in storage of es bytes (cuda_kernels.cu), E = m c elements, and with a ReLU
# its bitmask of M = E es / 16 bytes (the memory plan gives one to every ReLU's batch norm here):
#   forward: in read by the partial sums and by apply, the residual read, out written: 3 + res,
#             and the mask written: M
#   backward: in and dout read by the partial sums, dout and in read and din written by dx: 5;
#             with a ReLU the mask read by the partial sums (M), and then either dout written
#             back there (1: the residual's gradient is dout itself, the memory plan's alias,
#             nothing copied) or, with no residual, the mask read by dx instead (M):
#   in all 8 + 2 res, and 3 - res masks with a ReLU
#   the partial sums, [2][chunks][c] doubles, written and read (by each slice's last block)
#             in each pass: 4 x 16 chunks c
#   per channel: in's row 0 (the shift), and 26 float32 vectors read or written: 104 bytes
#             (the running statistics' two sums read and written by the statistics' final
#             among them)
# chunks = 8 x min(256, ceil(m / 256)) (bn_chunks; the scratch is far from full here).
bn_bytes() {
    local es=$1 total=0 m c relu res g
    for l in "${bn[@]}"; do
        read -r m c relu res <<<"$l"
        g=$(((m + 255) / 256)); [ $g -gt 256 ] && g=256
        total=$((total + es * m * c * (8 + 2 * res) + relu * (3 - res) * es * m * c / 16 + 64 * 8 * g * c +
            c * (es + 104)))
    done
    echo $total
}
for p in bf16:2 fp32:4; do
    want=$(bn_bytes ${p#*:}) got=$(cell "$T/${p%:*}.out" "batch norm" bytes)
    check "bn_bytes_by_hand_${p%:*} ($got = $want)" [ "$got" -eq "$want" ]
done
# Four kernels a layer: the sums with their final, then apply; the gradients' sums with their
# final, then dx (no final kernel, no copy for the residual's gradient).
check "bn_launches_by_hand (4 x 21)" [ "$(cell "$T/bf16.out" "batch norm" launches)" -eq 84 ]
# The final sums' serial depth: 32 rows a channel, each adding every 32nd chunk, then a tree
# of 5 levels (cuda_kernels.h): 7 layers each of 256, 64 and 16 chunks, 8 + 5, 2 + 5 and
# 1 + 5 adds.
check "bn_depth_by_hand (7 x (13 + 7 + 6))" \
    grep -q '^bn depth: max 13, sum over the 21 layers 182 ' "$T/bf16.out"

# bf16 casts: conv1's float32 input copied to bf16 by its forward and its weight gradient
# (4 + 2 bytes an element); every convolution's bf16 weight gradient added into the float32
# one (2 + 4 + 4) and its bf16 weight copy made after SGD (4 + 2), every tensor a run of one
# launch: 2 + 21 + 1 launches.
weights=$((16 * 3 * 9 + 6 * 16 * 16 * 9 + 32 * 16 * 9 + 5 * 32 * 32 * 9 + 32 * 16 + 64 * 32 * 9 + 5 * 64 * 64 * 9 + 64 * 32))
want=$((2 * N * 32 * 32 * 3 * 6 + weights * (10 + 6))) got=$(cell "$T/bf16.out" casts bytes)
check "cast_bytes_by_hand ($got = $want)" [ "$got" -eq "$want" ]
check "cast_launches_by_hand" [ "$(cell "$T/bf16.out" casts launches)" -eq 24 ]

# Elementwise: one SGD step, the running statistics' scale and axpy, the gradients zeroed:
# 1 + 1 + 1 + 1 (batch norm's statistics go into the running sums within its final kernel,
# not by two axpy a layer).
# The first convolution of each block adds its data gradient to the one its shortcut wrote
# within cuDNN (beta = 1), so no add kernel runs.
for p in bf16 fp32; do
    check "elementwise_launches_by_hand_$p" [ "$(cell "$T/$p.out" "optimizer/elementwise" launches)" -eq 4 ]
    check "no_gradient_add_$p" sh -c "! grep -q add_bf16_kernel '$T/$p.out'"
done

expect_status step_census_refuses_auto 2 "$census" resnet20 32 $N auto
expect_status step_census_usage 2 "$census" resnet20 32
expect_status step_census_unknown_arch 1 "$census" resnet21 32 $N bf16
finish
