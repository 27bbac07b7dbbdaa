#!/usr/bin/env bash
# airbench94's recipe end to end on a small synthetic dataset (400 training images, 50 test):
#  - mpirun -np 2 with a global batch of 64 and fractional epochs: the recipe's log lines, the
#    whitening bias stopping, a final score with test-time augmentation, a loss that falls;
#  - 1 rank takes the same steps over the same images (the global batch is kept), and the
#    same again after untimed warm-up steps;
#  - kill -9 mid-run and the same command again (both with untimed warm-up steps) == the
#    uninterrupted run, bit for bit (weights, momentum, BN statistics, lookahead averages), and so is its metrics file (the
#    records past the checkpoint, another run's and a torn line are dropped), and TensorBoard
#    reads the same scalars from its event files (the resume's START drops the stale points);
#  - cifar10-test applies the model's own test-time augmentation, --tta overrides it;
#  - with --precision bf16 (CPUs with AVX512_BF16 or AVX2): learns (with AVX512_BF16: and resumes bit for bit);
#  - bad settings for the recipe: one line, the documented exit code.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

D=$T/data
"$BIN/tests/make_synthetic" "$D" 80 50 || exit 1
# 64 per step: 6 steps per epoch; 3.5 epochs = 21 steps, the fourth epoch cut at 3 steps.
# The float runs say --precision fp32: auto takes bf16 for this recipe on AMX tiles.
RECIPE_ANY=(--model airbench94 --batch-size 64 --epochs 3.5 --whiten-images 300 --threads 1 --print-freq 3 --device cpu)
RECIPE=("${RECIPE_ANY[@]}" --precision fp32)
mpi() { mpirun -np "$1" "${@:2}"; }

# 1. Two ranks.
mkdir -p "$T/A"
run mpi 2 "$BIN/cifar10-train" "${RECIPE[@]}" --model-file "$T/A/model.safetensors" --tensorboard-dir "$T/A/tb" "$D"
expect_rc 0 "airbench94, mpirun -np 2"
expect_out "data line" "400 training images, 50 test images; 6 steps per epoch of 64 images \(2 ranks x 32\), 16 dropped"
expect_out "recipe line" "^starting run .*: airbench94, 3.5 epochs \(21 steps\), lr 11.5 \(triangle, airbench's units\), momentum 0.85 \(Nesterov\), weight decay 0.0153, seed 1, augmentation crop \+ alternating flip\$"
expect_out "recipe details" "^recipe: label smoothing 0.2, summed loss, lookahead every 5 steps, batch-norm lr x 64\$"
expect_out "whitening line" "^first layer: whitening filter of the first 300 training images"
expect_out "bias stops after 3 epochs" "^0.bias stops training after 3 epochs\$"
expect_out "cut last epoch" "^epoch 4/4: loss [0-9.]+, train accuracy [0-9.]+%, test accuracy [0-9.]+%"
expect_out "no step past 21" "^\[4,     3\] loss"
check "the cut epoch ends at its third step" test "$(grep -c '^\[4, ' "$T/out")" = 1
expect_out "final TTA score" "^final test accuracy [0-9.]+% \(test-time augmentation level 2\)\$"
first_loss=$(grep -m1 '^\[1, ' "$T/out" | awk '{print $NF}')
last_loss=$(grep '^\[4, ' "$T/out" | tail -n1 | awk '{print $NF}')
check "loss falls ($first_loss -> $last_loss)" awk -v a="$first_loss" -v b="$last_loss" 'BEGIN { exit !(b < a - 0.3) }'
acc=$(sed -n 's/^final test accuracy \([0-9.]*\)% .*/\1/p' "$T/out")
check "the recipe learns ($acc %)" awk -v a="$acc" 'BEGIN { exit !(a >= 60) }'
tta=$(sed -n 's/^time to accuracy \([0-9.]*\) s (whitening \([0-9.]*\) s, then the run time less \([0-9.]*\) s writing \([0-9]*\) checkpoint(s))$/\1 \2 \3 \4/p' "$T/out")
run_s=$(sed -n 's/^run time .* (\([0-9.]*\) s: training, evaluation, checkpoints)$/\1/p' "$T/out")
# (within the printed figures' rounding: the run time to 0.05 s, the other three to 0.005 s each)
check "time to accuracy = whitening + run time - checkpoints, one per epoch (${tta:-no line}; $run_s)" \
  awk -v t="$tta" -v r="$run_s" 'BEGIN { split(t, a, " "); d = a[1] - a[2] - r + a[3]; exit !(a[2] > 0 && a[3] >= 0 && a[4] >= 4 && d * d <= 0.066 * 0.066) }'
phases=$(sed -n 's/^time to accuracy by phase: whitening \([0-9.]*\) s, training steps \([0-9.]*\) s, per-epoch scores \([0-9.]*\) s, final score \([0-9.]*\) s, the rest \(-\{0,1\}[0-9.]*\) s$/\1 \2 \3 \4 \5/p' "$T/out")
check "the phases add up to the time to accuracy (${phases:-no line})" \
  awk -v p="$phases" -v t="$tta" 'BEGIN { split(p, a, " "); split(t, b, " "); d = a[1] + a[2] + a[3] + a[4] + a[5] - b[1]
    w = a[1] - b[2]
    exit !(w * w < 0.006 * 0.006 && a[2] > a[3] && a[3] > 0 && a[4] > 0 && a[5] > -0.01 && d * d < 0.01 * 0.01) }'
header() { head -c "$((8 + $(od -An -t u8 -N 8 "$1" | tr -d ' ')))" "$1"; }
check "checkpoint holds the lookahead averages" grep -q '"optimizer.lookahead.0.weight"' <(header "$T/A/model.checkpoint.safetensors")
check "checkpoint holds the running statistics' averages" grep -q '"optimizer.lookahead.4.norm2.running_var"' <(header "$T/A/model.checkpoint.safetensors")
check "model file holds no optimizer state" test "$(header "$T/A/model.safetensors" | grep -c optimizer)" = 0
cp "$T/out" "$T/A.log"
check "metrics file against the log" python3 tests/check_metrics.py "$T/A/model.metrics.jsonl" "$T/A.log" 6
check "TensorBoard events == metrics file" python3 tests/check_tensorboard.py "$T/A/tb" "$T/A/model.metrics.jsonl"

# 2. One rank: the same 21 steps of 64 images.
mkdir -p "$T/one"
run "$BIN/cifar10-train" "${RECIPE[@]}" --model-file "$T/one/model.safetensors" "$D"
expect_rc 0 "airbench94, 1 rank"
expect_out "1 rank keeps the global batch" "6 steps per epoch of 64 images \(1 ranks x 64\)"
expect_out "1 rank: 21 steps" "3.5 epochs \(21 steps\)"
# One rank's warm-up steps take the update too (the step graph a GPU records holds it), on
# weights and momentum it puts back: the same model.
mkdir -p "$T/oneW"
run env CIFAR10_WARM_UP=3 "$BIN/cifar10-train" "${RECIPE[@]}" --model-file "$T/oneW/model.safetensors" "$D"
expect_rc 0 "airbench94, 1 rank, warm-up"
check "1 rank: CIFAR10_WARM_UP=3 trains the same model, bit for bit" cmp -s <(st_data "$T/one/model.safetensors") <(st_data "$T/oneW/model.safetensors")

# 3. Killed mid-run, then the same command again: bit-identical to the uninterrupted run.
mkdir -p "$T/B"
# (with 3 untimed warm-up steps, a GPU's default, in both of its processes: they leave nothing,
# so B still equals A, which has none)
B_CMD=(env CIFAR10_WARM_UP=3 mpirun -np 2 "$BIN/cifar10-train" "${RECIPE[@]}" --model-file "$T/B/model.safetensors"
  --tensorboard-dir "$T/B/tb" "$D")
setsid "${B_CMD[@]}" >"$T/B1.log" 2>&1 &
pid=$!
for _ in $(seq 3000); do [[ -s $T/B/model.checkpoint.safetensors ]] && break; sleep 0.1; done
check "first checkpoint appeared before the kill" test -s "$T/B/model.checkpoint.safetensors"
sleep 0.5
kill -9 -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pkill -9 -f -- "--model-file $T/B/model.safetensors" # the ranks have process groups of their own
for _ in $(seq 100); do pgrep -f -- "--model-file $T/B/model.safetensors" >/dev/null || break; sleep 0.1; done
check "killed before finishing" test ! -e "$T/B/model.safetensors"
# what a kill leaves in the metrics file: records past the checkpoint, and a torn last line
run_id=$(sed -n '1s/^{"kind":"step","run":"\([^"]*\)".*/\1/p' "$T/B/model.metrics.jsonl")
check "the killed run's metrics name its run" test -n "$run_id"
printf '{"kind":"step","run":"%s","epoch":4,"step":3,"global_step":21,"loss":9,"lr":1,"images_per_s":1,"elapsed_s":1}\n{"kind":"epoch","run":"another","epoch":1,"global_step":1}\n{"kind":"step","run":' \
  "$run_id" >>"$T/B/model.metrics.jsonl"
check "a stale point past the checkpoint in the killed run's event file" python3 tests/check_tensorboard.py --inject "$T/B/tb" 21
run "${B_CMD[@]}"
expect_rc 0 "rerun after kill"
expect_out "rerun resumes" "^resuming run .* from $T/B/model.checkpoint.safetensors: [123] of 4 epochs done\$"
check "a resumed run has no time to accuracy (its whitening was another process's)" bash -c "! grep -q '^time to accuracy' '$T/out'"
check "resumed model == uninterrupted model, bit for bit" cmp -s <(st_data "$T/A/model.safetensors") <(st_data "$T/B/model.safetensors")
check "resumed checkpoint == uninterrupted checkpoint (lookahead included)" cmp -s <(st_data "$T/A/model.checkpoint.safetensors") <(st_data "$T/B/model.checkpoint.safetensors")
check "same final score" test "$(grep '^final test' "$T/A.log")" = "$(grep '^final test' "$T/out")"
check "resumed metrics == uninterrupted metrics" python3 tests/check_metrics.py --same "$T/A/model.metrics.jsonl" "$T/B/model.metrics.jsonl"
tb_files=("$T"/B/tb/events.out.tfevents.*)
check "two event files after the resume" test "${#tb_files[@]}" = 2
check "resumed TensorBoard events (the START drops the stale points) == metrics file" \
  python3 tests/check_tensorboard.py "$T/B/tb" "$T/B/model.metrics.jsonl"

# 4. cifar10-test: the model's own TTA level by default, --tta overrides.
run "$BIN/cifar10-test" --model-file "$T/A/model.safetensors" "$D"
expect_rc 0 "cifar10-test on airbench94"
expect_out "default TTA of airbench94" "^Overall accuracy: [0-9.]+% \([0-9]+ of 50; test-time augmentation level 2\)\$"
check "cifar10-test matches the training's final score" test "$(sed -n 's/^Overall accuracy: \([0-9.]*\)%.*/\1/p' "$T/out")" = "$acc"
run "$BIN/cifar10-test" --tta 0 --model-file "$T/A/model.safetensors" "$D"
expect_out "--tta 0" "test-time augmentation level 0\)\$"
run "$BIN/cifar10-test" --tta 3 --model-file "$T/A/model.safetensors" "$D"
expect_rc 2 "--tta 3"
expect_err "--tta 3" "--tta: 3 is out of range 0..2"

# 6. bf16 products (--precision bf16), where the CPU has AVX512_BF16 (or AVX2, which runs the
#    same sums on float FMA): the recipe still learns, the model differs from the float one (the
#    bf16 table is in use); and, with AVX512_BF16, kill -9 + rerun is bit-identical to the
#    uninterrupted bf16 run (on AVX2 the emulated products take twice fp32's time, and the
#    resume is the same code as fp32's, tested above: CI's 15 minutes keep it to one run).
if grep -qw avx512_bf16 /proc/cpuinfo || { grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; }; then
  mkdir -p "$T/C" "$T/D"
  run mpi 2 "$BIN/cifar10-train" "${RECIPE_ANY[@]}" --precision bf16 --model-file "$T/C/model.safetensors" "$D"
  expect_rc 0 "airbench94 in bf16, mpirun -np 2"
  expect_out "bf16 named" "^rank 1: cpu, bf16 products \(--precision bf16(; no AVX512_BF16: its sums on AVX2 FMA, no faster than fp32)?\)\$"
  bf16_acc=$(sed -n 's/^final test accuracy \([0-9.]*\)% .*/\1/p' "$T/out")
  check "the recipe learns in bf16 ($bf16_acc %, float $acc %)" awk -v a="$bf16_acc" 'BEGIN { exit !(a >= 60) }'
  differ() { ! cmp -s "$1" "$2"; }
  check "bf16 model != float model" differ <(st_data "$T/A/model.safetensors") <(st_data "$T/C/model.safetensors")
fi
if grep -qw avx512_bf16 /proc/cpuinfo; then
  D_CMD=(mpirun -np 2 "$BIN/cifar10-train" "${RECIPE_ANY[@]}" --precision bf16 --model-file "$T/D/model.safetensors" "$D")
  setsid "${D_CMD[@]}" >"$T/D1.log" 2>&1 &
  pid=$!
  for _ in $(seq 3000); do [[ -s $T/D/model.checkpoint.safetensors ]] && break; sleep 0.1; done
  sleep 0.5
  kill -9 -- -"$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  pkill -9 -f -- "--model-file $T/D/model.safetensors"
  for _ in $(seq 100); do pgrep -f -- "--model-file $T/D/model.safetensors" >/dev/null || break; sleep 0.1; done
  check "bf16: killed before finishing" test ! -e "$T/D/model.safetensors"
  run "${D_CMD[@]}"
  expect_rc 0 "bf16: rerun after kill"
  check "bf16: resumed model == uninterrupted model, bit for bit" cmp -s <(st_data "$T/C/model.safetensors") <(st_data "$T/D/model.safetensors")
else
  echo "test_recipe: bf16 resume skipped: this CPU lacks AVX512_BF16"
fi

# 5. Settings the recipe cannot take.
run mpi 2 "$BIN/cifar10-train" "${RECIPE[@]}" --batch-size 63 --model-file "$T/X/m.safetensors" "$D"
expect_rc 2 "global batch not divisible"
expect_err "global batch not divisible" "--batch-size 63 (the global batch of airbench94) does not split evenly over 2 ranks"
run "$BIN/cifar10-train" "${RECIPE[@]}" --whiten-images 1000 --model-file "$T/X/m.safetensors" "$D"
expect_rc 1 "whitening beyond the data"
expect_err "whitening beyond the data" "whitening needs 1000 training images, the set has 400 ($D)"
run "$BIN/cifar10-train" --model workshop-cnn --whiten-images 10 "$D"
expect_rc 2 "--whiten-images on the workshop network"
expect_err "--whiten-images on the workshop network" "--whiten-images: workshop-cnn has no whitening layer"
run "$BIN/cifar10-train" --model resnet "$D"
expect_rc 2 "unknown model"
expect_err "unknown model" "--model: 'resnet' is not a network this build knows (workshop-cnn, airbench94)"
run "$BIN/cifar10-train" "${RECIPE[@]}" --epochs 0 "$D"
expect_rc 2 "--epochs 0"
run "$BIN/cifar10-train" "${RECIPE[@]}" --label-smoothing 0.1 --model-file "$T/A/model.safetensors" "$D"
expect_rc 1 "changed label smoothing"
expect_err "changed label smoothing" "cannot resume: --label-smoothing: the checkpoint has 0.2, this run has 0.1"
summary test_recipe
