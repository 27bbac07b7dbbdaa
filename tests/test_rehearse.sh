#!/usr/bin/env bash
# scripts/rehearse-local.sh: the manifests' own command lines run the whole job locally
# (data prep, 2-rank training killed and resumed, stopped by SIGTERM and resumed, the test gate, TensorBoard over the run), and a
# wrong flag or value in a manifest makes the rehearsal fail.
# shellcheck disable=SC2016 # the sed expressions below hold the manifests' $(VAR) references
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
skip_without_kubectl rehearse
REHEARSE=$SRC/scripts/rehearse-local.sh

run "$REHEARSE" --workdir "$T/ok" --keep
expect_rc 0 "rehearsal of k8s/"
expect_out "data step" "ok: data published with MD5 [0-9a-f]{32}; a second run is a no-op"
expect_out "killed mid-run" "killed \(SIGKILL\) after: epoch 1/3"
expect_out "SIGTERM to the launcher's PID 1: stopped, exit 4" "stopped \(SIGTERM to dumb-init, exit 4\): stopped by a signal"
expect_out "resumed mid-epoch" "ok: resuming run .* from $T/ok/efs-shared/runs/rehearsal/cifar10-model.checkpoint.safetensors: [12] of 3 epochs and [0-9]+ of [0-9]+ steps of epoch [23] done"
expect_out "test command from the manifest" "cifar10-test --min-accuracy 30 --json $T/ok/efs-shared/runs/rehearsal/test.json --model-file $T/ok/efs-shared/runs/rehearsal/cifar10-model.safetensors $T/ok/efs-shared/cifar-10-batches-bin"
expect_out "gate passes" "ok: accuracy [0-9]+ % passes MIN_ACCURACY=30"
expect_out "gate fails above the accuracy" "ok: MIN_ACCURACY=[0-9]+ fails the Job \(exit 3\)"
check "model on the stand-in volume" test -s "$T/ok/efs-shared/runs/rehearsal/cifar10-model.safetensors"
check "scores as JSON on the stand-in volume" test -s "$T/ok/efs-shared/runs/rehearsal/test.json"
if PYTHONPATH=${TENSORBOARD_PYTHONPATH:-} python3 -c "import tensorboard" 2>/dev/null; then
  expect_out "TensorBoard's command serves the resumed run, each epoch once" \
    "ok: TensorBoard serves run rehearsal/tensorboard: epochs \[1.0, 2.0, 3.0\]"
else
  expect_out "TensorBoard step says it is skipped" "skipped: python3 cannot import tensorboard"
fi

# Broken manifests must fail the rehearsal, naming the step.
broken() { # broken NAME FILE SED-EXPRESSION WANT-IN-STDERR
  local d=$T/broken$((++nbroken))
  cp -r "$SRC/k8s" "$d"
  sed -i "$3" "$d/$2"
  if cmp -s "$SRC/k8s/$2" "$d/$2"; then fail "$1: the edit changed nothing"; return; fi
  run "$REHEARSE" --k8s "$d" --workdir "$d.work"
  expect_rc 1 "$1"
  expect_err "$1" "$4"
}
nbroken=0
broken "misspelt training flag" base/train/mpijob.yaml 's/--batch-size "$BATCH_SIZE"/--batchsize "$BATCH_SIZE"/' \
  "no checkpoint"
broken "unknown setting in the data Job" data/job.yaml 's/$(DATA_MD5)/$(DATA_SUM)/' \
  "the data-prep command failed"
broken "test Job reads another run's model" test/job.yaml 's|runs/$(RUN_ID)/cifar10-model|runs/run-1/cifar10-model|' \
  "the test Job's command failed (exit 1;"

summary rehearse
