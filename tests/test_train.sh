#!/usr/bin/env bash
# The workshop CNN end to end on a small synthetic dataset in the official format (airbench94's
# recipe, the default: tests/test_recipe.sh):
#  - mpirun -np 2 training: log format, files (the metrics file against the log), cifar10-test
#    output format and exit codes;
#  - bad data under mpirun: one error line, exit 1; a rank-0 write failure ends the whole job;
#  - kill -9 mid-run and the same command again == the uninterrupted run, bit for bit;
#  - a checkpoint with other settings is refused; --resume=require/never; resuming with a
#    different rank count continues the run, and on other kernels (--precision bf16) says so;
#  - one rank: a diverging run, a checkpoint of other --epochs or damaged, too little data and
#    airbench94 with momentum 1 are refused with one line; cifar10-test on classes without
#    test images says n/a (null in --json).
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

D=$T/data
"$BIN/tests/make_synthetic" "$D" 80 200 || exit 1
# 400 training images, 2 ranks x 16 = 12 steps per epoch (16 images dropped).
TRAIN=(--model workshop-cnn --epochs 3 --batch-size 16 --threads 1 --learning-rate 0.02 --device cpu) # GPUs: scripts/gpu-check.sh
mpi() { mpirun -np "$1" "${@:2}"; }

# 1. Uninterrupted run.
mkdir -p "$T/A"
run mpi 2 "$BIN/cifar10-train" "${TRAIN[@]}" --model-file "$T/A/model.safetensors" "$D"
expect_rc 0 "mpirun -np 2 training"
expect_out "reading line" "^reading $D\$"
expect_out "each rank's device" "^rank 1: cpu"
expect_out "gradient reduction" "^gradients: MPI_Iallreduce on host memory, buckets of 2 MiB overlapped with backward\$"
expect_out "workshop loss line" "^\[1,     5\] loss: [0-9]+\.[0-9]{3}\$"
expect_out "loss line at step 10" "^\[3,    10\] loss: [0-9]+\.[0-9]{3}\$"
expect_out "epoch summary" "^epoch 3/3: loss [0-9.]+, train accuracy [0-9.]+%, test accuracy [0-9.]+%, [0-9.]+ images/s, elapsed .+, ETA .+\$"
expect_out "data line" "400 training images, 200 test images; 12 steps per epoch of 32 images \(2 ranks x 16\), 16 dropped"
expect_out "saving model" "^saving model: $T/A/model.safetensors\$"
expect_out "finished" "^Finished Training\$"
check "model and checkpoint written" test -s "$T/A/model.safetensors" -a -s "$T/A/model.checkpoint.safetensors"
check "no temporary files left" test -z "$(find "$T/A" -name '*.tmp.*')"
first_loss=$(grep -m1 '^\[1, ' "$T/out" | awk '{print $NF}')
last_loss=$(grep '^\[3, ' "$T/out" | tail -n1 | awk '{print $NF}')
check "loss falls ($first_loss -> $last_loss)" awk -v a="$first_loss" -v b="$last_loss" 'BEGIN { exit !(b < a) }'
cp "$T/out" "$T/A.log"
check "metrics file (model file's name, .metrics.jsonl) against the log" \
  python3 tests/check_metrics.py "$T/A/model.metrics.jsonl" "$T/A.log" 12

# 2. cifar10-test: the workshop's format, a confusion matrix that adds up, the gate, --json.
run "$BIN/cifar10-test" --json "$T/A/test.json" --model-file "$T/A/model.safetensors" "$D"
expect_rc 0 "cifar10-test"
check "--json says what the text says" python3 tests/check_test_json.py "$T/A/test.json" "$T/out" "$T/A/model.safetensors"
expect_out "test reading" "^reading $D\$"
expect_out "test loading" "^loading model $T/A/model.safetensors\$"
expect_out "the model's kernels" "^model: model of run [0-9TZ]+-[0-9a-f]+ after 3 epochs on cpu, trained with "
expect_out "overall accuracy" "^Accuracy of the network on the 200 test images: [0-9]+ %\$"
for c in plane car bird cat deer dog frog horse ship truck; do
  expect_out "class $c" "^Accuracy for class: $(printf '%-5s' $c) is ([0-9]+\.[0-9]|n/a)"
done
expect_out "finished testing" "^Finished Testing\$"
# shellcheck disable=SC2016 # awk program, not shell
check "confusion matrix sums to 200" awk '/^Confusion/ {m = 1; next} m && NF == 11 && $1 != "" && $2 ~ /^[0-9]+$/ {for (i = 2; i <= 11; i++) s += $i; rows++} END {exit !(rows == 10 && s == 200)}' "$T/out"
acc=$(sed -n 's/^Accuracy of the network on the 200 test images: \([0-9]*\) %$/\1/p' "$T/out")
check "trained model beats chance ($acc %)" test "${acc:-0}" -ge 30
run "$BIN/cifar10-test" --min-accuracy "$acc" --model-file "$T/A/model.safetensors" "$D"
expect_rc 0 "gate at the achieved accuracy"
if ((acc < 100)); then
  run "$BIN/cifar10-test" --min-accuracy $((acc + 1)) --json "$T/A/gate.json" --model-file "$T/A/model.safetensors" "$D"
  expect_rc 3 "gate above the achieved accuracy"
  expect_err "gate message" "is below --min-accuracy $((acc + 1))"
  check "--json is written below the gate too" python3 tests/check_test_json.py "$T/A/gate.json" "$T/out"
fi
run "$BIN/cifar10-test" --model-file "$T/A/model.checkpoint.safetensors" "$D"
expect_rc 0 "a checkpoint scores too"
cp "$T/A/model.safetensors" "$T/bad.safetensors"
printf '\x55' | dd of="$T/bad.safetensors" bs=1 seek=100000 conv=notrunc 2>/dev/null
run "$BIN/cifar10-test" --model-file "$T/bad.safetensors" "$D"
expect_rc 1 "flipped byte in model"
expect_err "flipped byte in model" "$T/bad.safetensors: data checksum mismatch"
head -c 5000 "$T/A/model.safetensors" >"$T/bad.safetensors"
run "$BIN/cifar10-test" --model-file "$T/bad.safetensors" "$D"
expect_rc 1 "truncated model"
expect_err "truncated model" "$T/bad.safetensors: truncated"
touch "$T/file"
run "$BIN/cifar10-test" --json "$T/file/t.json" --model-file "$T/A/model.safetensors" "$D"
expect_rc 1 "--json under a file"
expect_err "--json under a file" "$T/file/t.json: cannot create temporary file $T/file/t.json.tmp."
run "$BIN/cifar10-test" --batch-size 40000 --model-file "$T/A/model.safetensors" "$D"
expect_rc 2 "a batch past the network's limit"
expect_err "a batch past the network's limit" \
  "--batch-size 40000: 40000 images per batch: workshop-cnn takes at most 32767 (its 64x32x32 activation would hold 2^31 values or more)"
run "$BIN/cifar10-test" --model-file "$T/none.safetensors" "$D"
expect_rc 1 "missing model"
expect_err "missing model" "$T/none.safetensors: No such file or directory"
run "$BIN/cifar10-test" --model-file "$T/A/model.safetensors" "$T/nowhere"
expect_rc 1 "missing test data"
expect_err "missing test data" "$T/nowhere: No such file or directory"

# 3. Bad data under mpirun: one line naming file and record, exit 1.
cp -r "$D" "$T/baddata"
printf '\x0b' | dd of="$T/baddata/data_batch_3.bin" bs=1 seek=$((3073 * 5)) conv=notrunc 2>/dev/null
run mpi 2 "$BIN/cifar10-train" "${TRAIN[@]}" --model-file "$T/X/model.safetensors" "$T/baddata"
expect_rc 1 "bad label under mpirun"
expect_err "bad label under mpirun" "$T/baddata/data_batch_3.bin: record 5 (byte offset 15365): label 11 is not in 0..9"
# Rank 0 cannot write its checkpoint: the whole job ends, non-zero, no hang.
run timeout 600 mpirun -np 2 "$BIN/cifar10-train" --model workshop-cnn --epochs 1 --batch-size 16 --threads 1 --checkpoint-file "$T/no/such/dir/c.safetensors" --metrics-file "$T/c.metrics.jsonl" --model-file "$T/X/m.safetensors" "$D"
check "write failure ends the job (exit $rc)" test "$rc" -ne 0 -a "$rc" -ne 124
expect_err "write failure message" "$T/no/such/dir/c.safetensors: cannot create temporary file"
# A metrics file that cannot be created stops the run before its first step.
run mpi 2 "$BIN/cifar10-train" "${TRAIN[@]}" --metrics-file "$T/no/such/dir/m.jsonl" --model-file "$T/X/m.safetensors" "$D"
expect_rc 1 "unwritable metrics file"
expect_err "unwritable metrics file" "$T/no/such/dir/m.jsonl: cannot create temporary file"
check "no training without metrics" test ! -e "$T/X/m.checkpoint.safetensors"
run mpi 2 "$BIN/cifar10-train" "${TRAIN[@]}" --tensorboard-dir "$T/file/tb" --metrics-file "$T/c.metrics.jsonl" --model-file "$T/X/m.safetensors" "$D"
expect_rc 1 "TensorBoard directory under a file"
expect_err "TensorBoard directory under a file" "cifar10-train: $T/file/tb: cannot create directory $T/file/tb: Not a directory"
check "no training without TensorBoard events" test ! -e "$T/X/m.checkpoint.safetensors"

# One allreduce after backward instead of buckets during it: the same sums, the same model.
mkdir -p "$T/A0"
run mpi 2 "$BIN/cifar10-train" "${TRAIN[@]}" --bucket-mb 0 --model-file "$T/A0/model.safetensors" "$D"
expect_out "--bucket-mb 0" "^gradients: MPI_Iallreduce on host memory, one allreduce after backward\$"
check "--bucket-mb 0 trains the same model, bit for bit" cmp -s <(st_data "$T/A/model.safetensors") <(st_data "$T/A0/model.safetensors")

# Untimed warm-up steps before the run (a GPU's default; 3 here, so the batch queue's slots end
# shifted): nothing of them stays, the same model bit for bit; a bad count is refused.
mkdir -p "$T/W"
run mpi 2 env CIFAR10_WARM_UP=3 "$BIN/cifar10-train" "${TRAIN[@]}" --model-file "$T/W/model.safetensors" "$D"
expect_out "warm-up line" "^warm-up: 3 steps' forward and backward on zero images, untimed, undone \(CIFAR10_WARM_UP\)\$"
check "CIFAR10_WARM_UP=3 trains the same model, bit for bit" cmp -s <(st_data "$T/A/model.safetensors") <(st_data "$T/W/model.safetensors")
run env CIFAR10_WARM_UP=-1 "$BIN/cifar10-train" "${TRAIN[@]}" --model-file "$T/W/bad.safetensors" "$D"
expect_rc 1 "CIFAR10_WARM_UP=-1"
expect_err "CIFAR10_WARM_UP=-1" "CIFAR10_WARM_UP=-1: expected a count of steps, 0 to 100"

# 4. Killed mid-run, then the same command again: bit-identical to the uninterrupted run.
mkdir -p "$T/B"
B_CMD=(mpirun -np 2 "$BIN/cifar10-train" "${TRAIN[@]}" --model-file "$T/B/model.safetensors" "$D")
setsid "${B_CMD[@]}" >"$T/B1.log" 2>&1 &
pid=$!
for _ in $(seq 3000); do [[ -s $T/B/model.checkpoint.safetensors ]] && break; sleep 0.1; done # up to 5 min on a loaded machine
check "first checkpoint appeared before the kill" test -s "$T/B/model.checkpoint.safetensors"
sleep 0.7 # into the second epoch
kill -9 -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
pkill -9 -f -- "--model-file $T/B/model.safetensors" # the ranks have process groups of their own
for _ in $(seq 100); do pgrep -f -- "--model-file $T/B/model.safetensors" >/dev/null || break; sleep 0.1; done
check "killed before finishing" test ! -e "$T/B/model.safetensors"
cp "$T/B/model.checkpoint.safetensors" "$T/partial.safetensors"
run "${B_CMD[@]}"
expect_rc 0 "rerun after kill"
expect_out "rerun resumes" "^resuming run .* from $T/B/model.checkpoint.safetensors: [12] of 3 epochs done\$"
no_kernels_note() { ! grep -q 'written by steps on the' "$T/out"; }
check "a resume on the same kernels has no note of them" no_kernels_note
check "resumed model == uninterrupted model, bit for bit" cmp -s <(st_data "$T/A/model.safetensors") <(st_data "$T/B/model.safetensors")
check "resumed checkpoint == uninterrupted checkpoint" cmp -s <(st_data "$T/A/model.checkpoint.safetensors") <(st_data "$T/B/model.checkpoint.safetensors")
run "${B_CMD[@]}"
expect_rc 0 "rerun of a finished run"
expect_out "finished run is not retrained" "already holds all 3 epochs"

# 5. Different settings are refused under --resume=auto, naming the first difference.
run mpi 2 "$BIN/cifar10-train" "${TRAIN[@]}" --learning-rate 0.05 --model-file "$T/B/model.safetensors" "$D"
expect_rc 1 "changed learning rate"
expect_err "changed learning rate" "$T/B/model.checkpoint.safetensors: cannot resume: --learning-rate: the checkpoint has 0.02, this run has 0.05"
run "$BIN/cifar10-train" "${TRAIN[@]}" --no-augment --model-file "$T/B/model.safetensors" "$D"
expect_rc 1 "changed augmentation"
expect_err "changed augmentation" "cannot resume: augmentation"
run "$BIN/cifar10-train" "${TRAIN[@]}" --resume require --model-file "$T/C/model.safetensors" "$D"
expect_rc 1 "--resume=require without checkpoint"
expect_err "--resume=require without checkpoint" "$T/C/model.checkpoint.safetensors: no checkpoint to resume from"
run "$BIN/cifar10-train" --model workshop-cnn --epochs 1 --batch-size 16 --threads 1 --resume never --model-file "$T/B/model.safetensors" "$D"
expect_rc 0 "--resume=never starts over"
expect_out "--resume=never starts over" "^starting run "

# 6. Resume with a different rank count (1 instead of 2) continues the same run.
mkdir -p "$T/C"
cp "$T/partial.safetensors" "$T/C/model.checkpoint.safetensors"
run "$BIN/cifar10-train" "${TRAIN[@]}" --model-file "$T/C/model.safetensors" "$D"
expect_rc 0 "resume on 1 rank"
expect_out "resume on 1 rank" "^resuming run .*: [12] of 3 epochs done\$"
expect_out "1 rank steps" "25 steps per epoch of 16 images \(1 ranks x 16\)"
run "$BIN/cifar10-test" --model-file "$T/C/model.safetensors" "$D"
expect_rc 0 "model of the 1-rank resume scores"
# ... and on other kernels (--precision bf16: cpu-bf16), saying so.
mkdir -p "$T/Cb"
cp "$T/partial.safetensors" "$T/Cb/model.checkpoint.safetensors"
run "$BIN/cifar10-train" "${TRAIN[@]}" --precision bf16 --model-file "$T/Cb/model.safetensors" "$D"
expect_rc 0 "resume in bf16"
expect_out "resume in bf16 says the kernels changed" \
  "^$T/Cb/model.checkpoint.safetensors: written by steps on the cpu kernels; this run continues on cpu-bf16 \(from the same weights, not bit for bit as a run on either\)\$"
run "$BIN/cifar10-test" --model-file "$T/Cb/model.safetensors" "$D"
expect_out "the bf16 model's kernels" "^model: model of run .* after 3 epochs on cpu-bf16, trained with "
# 7. What a run refuses, and what it says, on one rank.
# A learning rate that blows the weights up: one line naming the step, exit 1, no model written.
mkdir -p "$T/Dv"
run "$BIN/cifar10-train" "${TRAIN[@]}" --epochs 1 --learning-rate 1e30 --model-file "$T/Dv/model.safetensors" "$D"
expect_rc 1 "a diverging run"
expect_err "a diverging run" "at epoch 1 step"
expect_err "a diverging run says what to do" "training diverged (lower --learning-rate)"
check "a diverging run writes no model" test ! -e "$T/Dv/model.safetensors"
# A checkpoint of a run with other --epochs, and a damaged one, are refused by name.
mkdir -p "$T/E"
cp "$T/A/model.checkpoint.safetensors" "$T/E/model.checkpoint.safetensors"
run "$BIN/cifar10-train" "${TRAIN[@]}" --epochs 2 --model-file "$T/E/model.safetensors" "$D"
expect_rc 1 "a checkpoint of 3 epochs, --epochs 2"
expect_err "a checkpoint of 3 epochs, --epochs 2" \
  "$T/E/model.checkpoint.safetensors: cannot resume: --epochs: the checkpoint has 3, this run has 2"
printf '\x55' | dd of="$T/E/model.checkpoint.safetensors" bs=1 seek=100000 conv=notrunc 2>/dev/null
run "$BIN/cifar10-train" "${TRAIN[@]}" --model-file "$T/E/model.safetensors" "$D"
expect_rc 1 "a damaged checkpoint"
expect_err "a damaged checkpoint" "$T/E/model.checkpoint.safetensors: data checksum mismatch"
expect_err "a damaged checkpoint: the way out" "the file is corrupt (use --resume=never to start over)"
check "a refused resume writes no model" test ! -e "$T/E/model.safetensors"
# Too little data for one step; airbench94's learning-rate units with momentum 1.
"$BIN/tests/make_synthetic" "$T/few" 2 5 >/dev/null || exit 1
run "$BIN/cifar10-train" "${TRAIN[@]}" --model-file "$T/E/model.safetensors" "$T/few"
expect_rc 1 "fewer images than one batch"
expect_err "fewer images than one batch" "$T/few: 10 training images, fewer than one global batch (1 ranks x 16)"
run "$BIN/cifar10-train" --model airbench94 --momentum 1 --threads 1 --device cpu --model-file "$T/E/model.safetensors" "$D"
expect_rc 2 "airbench94 with momentum 1"
expect_err "airbench94 with momentum 1" "--momentum 1: airbench94's learning-rate units need a momentum below 1"
# cifar10-test on 5 test images: the classes without one say n/a, and null in --json.
run "$BIN/cifar10-test" --threads 1 --json "$T/few.json" --model-file "$T/A/model.safetensors" "$T/few"
expect_rc 0 "cifar10-test on 5 images"
expect_out "a class without test images" "^Accuracy for class: .{5} is n/a \(no test images\)\$"
check "--json: null for those classes, the rest as the text" python3 tests/check_test_json.py "$T/few.json" "$T/out"
check "--json: null accuracy" grep -q '"accuracy": *null' "$T/few.json"
run "$BIN/cifar10-test" --model-file "$T" "$D"
expect_rc 1 "a directory as the model file"
expect_err "a directory as the model file" "$T: not a regular file"
summary test_train
