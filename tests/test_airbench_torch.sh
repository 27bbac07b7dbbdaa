#!/usr/bin/env bash
# scripts/airbench_torch.py (airbench94 in PyTorch) on a small synthetic dataset (400 training
# images, 50 test images), in seconds:
#  - 2 epochs at batch 64: the epoch lines, the final TTA score and the result line, a score
#    above chance;
#  - --max-steps: the extrapolated time on the result line; the same seed twice gives the same
#    losses;
#  - a missing data file, a batch larger than the training set: one line, the documented exit
#    code.
# Python: $PY (default /usr/bin/python3, where Debian's python3-torch installs); without torch
# and numpy the suite reports nothing run.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.." || exit 1

PY=${PY:-/usr/bin/python3}
[[ -x $PY ]] || PY=python3
if ! "$PY" -c 'import torch, numpy' 2>/dev/null; then
  echo "airbench-torch: skipped: $PY cannot import torch and numpy"
  summary airbench-torch
  exit
fi
D=$T/data
"$BIN/tests/make_synthetic" "$D" 80 50 || exit 1
AB=("$PY" scripts/airbench_torch.py --threads 2)

# 1. Two short epochs: 400 / 64 = 6 steps per epoch, 12 steps.
run "${AB[@]}" --batch-size 64 --epochs 2 --seed 1 "$D"
expect_rc 0 "2 epochs at batch 64"
expect_out "data line" "^400 training images, 50 test images; 6 steps per epoch of 64, 2 epochs = 12 steps\$"
for e in 1 2; do
  expect_out "epoch $e line" "^epoch $e/2: train loss [0-9]+\.[0-9]{4}, train accuracy [0-9.]+%, test accuracy [0-9.]+%, [0-9.]+ s, total [0-9.]+ s\$"
done
expect_out "final TTA line" "^final test accuracy [0-9.]+% with test-time augmentation \(level 2\), [0-9.]+% without"
expect_out "result line" "^result: tta_accuracy=[0-9.]+ accuracy=[0-9.]+ seconds=[0-9.]+ train_seconds=[0-9.]+ tta_seconds=[0-9.]+ steps=12 torch=[^ ]+ threads=2\$"
tta=$(sed -n 's/^result: tta_accuracy=\([0-9.]*\) .*/\1/p' "$T/out")
echo "airbench-torch: 2 epochs on synthetic data: $(grep '^final test accuracy' "$T/out")"
check "learns: TTA accuracy ${tta:-?}% > 30% (10 classes)" awk -v a="${tta:-0}" 'BEGIN { exit !(a > 30) }'

# 2. --max-steps: timing only; deterministic for a seed.
run "${AB[@]}" --batch-size 64 --max-steps 4 --seed 5 "$D"
expect_rc 0 "--max-steps 4"
expect_out "stopped line" "^stopped after step 4 of 60 \(epoch 1\): train loss [0-9.]+"
expect_out "result line with the extrapolation" "^result: tta_accuracy=nan accuracy=nan seconds=[0-9.]+ steps=4 torch=[^ ]+ threads=2 step_seconds=[0-9.]+ extrapolated_seconds=[0-9.]+\$"
first=$(grep '^stopped after' "$T/out" | sed 's/; whitening.*//')
run "${AB[@]}" --batch-size 64 --max-steps 4 --seed 5 "$D"
second=$(grep '^stopped after' "$T/out" | sed 's/; whitening.*//')
check "same seed, same losses ('$first' vs '$second')" test -n "$first" -a "$first" = "$second"

# 3. Bad input.
run "${AB[@]}" "$T/nowhere"
expect_rc 1 "missing data"
check "missing data: one line naming the file: $(head -c 300 "$T/err")" \
  test "$(grep -c "^airbench_torch.py: $T/nowhere/data_batch_1.bin: " "$T/err")" = 1
run "${AB[@]}" --batch-size 500 "$D"
expect_rc 2 "batch larger than the training set"
check "batch larger than the training set: one line: $(head -c 300 "$T/err")" \
  test "$(grep -c '^airbench_torch.py: --batch-size 500 exceeds the 400 training images$' "$T/err")" = 1
summary airbench-torch
