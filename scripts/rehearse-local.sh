#!/usr/bin/env bash
# Rehearses the EKS run on this machine, with the command lines taken out of the rendered
# manifests (kubectl kustomize k8s/...), not copied from them. A local directory stands in
# for /efs-shared and a small synthetic CIFAR-10 for the real one:
#   1. the data-prep Job's command, from a local tarball (DATA_URL=file://..., DATA_MD5 = its
#      MD5), then again (it must be a no-op);
#   2. the launcher's wait-for-data init container, then its command (dumb-init, mpirun -np
#      WORKERS x SLOTS_PER_WORKER), killed with SIGKILL once the first epoch's checkpoint exists,
#      then the same command again, sent SIGTERM (as the kubelet sends the pod's PID 1) in its
#      second epoch: it must stop with exit 4 and a mid-epoch checkpoint; then once more: it
#      must resume from that step and finish;
#   3. the test Job's wait-for-model init container and its command with the MIN_ACCURACY gate,
#      which must pass, and with a gate above the achieved accuracy, which must fail (exit 3);
#   4. the TensorBoard Deployment's command (k8s/tensorboard) over the stand-in volume, where the
#      tensorboard package can be imported (TENSORBOARD_PYTHONPATH, as tests/run.sh sets): its
#      HTTP API must list the run and serve epochs 1, 2, 3 once each (the resume's stale points
#      dropped); the port is the only change (a pod has its own network).
# Only settings.env values change (in a copy): DATA_URL, DATA_MD5, MODEL, EPOCHS, BATCH_SIZE,
# RUN_ID and MIN_ACCURACY. MODEL=workshop-cnn keeps the two training runs to seconds (airbench94's
# whitening alone wants 5000 images; its recipe's kill and resume are tests/test_recipe.sh's).
# A wrong flag or value in a manifest fails the rehearsal.
#
#   scripts/rehearse-local.sh [--k8s DIR] [--workdir DIR] [--keep]
#
#   --k8s DIR      the manifests to rehearse (default: k8s/ of this checkout)
#   --workdir DIR  where the stand-in volume and logs go (default: a new /tmp directory)
#   --keep         keep the work directory
# Needs the built binaries (make), kubectl >= 1.21, python3 with PyYAML, Open MPI, dumb-init.
# Exit codes: 0 every step as expected, 1 a step failed (message names it), 2 bad usage.
# Shares die, usage and set_setting with the eks-*.sh scripts; SETTINGS is pointed at a copy.
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
rehearse_args "$@"
kubectl_can_kustomize || die "needs kubectl >= 1.21 (kustomize) to render the manifests"
command -v dumb-init >/dev/null || die "needs dumb-init (the launcher's PID 1; apt-get install dumb-init)"
for b in cifar10-train cifar10-test tests/make_synthetic; do
  [[ -x $BUILD/$b ]] || die "$BUILD/$b is missing: run make test first"
done
if [[ -z $work ]]; then work=$(mktemp -d /tmp/cifar10-rehearse.XXXXXX); fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
((keep)) || trap 'rm -rf "$work"' EXIT
EFS=$work/efs-shared
mkdir -p "$EFS" "$work/bin" "$work/mpi"
step() { echo "== $ME: $*"; }

# The image's PATH: the two binaries and get-data.sh (Dockerfile: /usr/local/bin).
ln -sf "$BUILD/cifar10-train" "$BUILD/cifar10-test" "$ROOT/scripts/get-data.sh" "$work/bin/"
# mpi-operator writes /etc/mpi/hostfile from the workers; here both ranks run on this machine.
echo "localhost slots=64" >"$work/mpi/hostfile"

# Synthetic CIFAR-10 in the official tarball layout: big enough that one epoch takes seconds.
mkdir -p "$work/src"
"$BUILD/tests/make_synthetic" "$work/src/cifar-10-batches-bin" 200 500 >/dev/null
tar -czf "$work/cifar-10-binary.tar.gz" -C "$work/src" cifar-10-batches-bin
md5=$(md5sum "$work/cifar-10-binary.tar.gz" | cut -d' ' -f1)

rm -rf "$work/k8s"
cp -r "$k8s" "$work/k8s"
SETTINGS=$work/k8s/settings/settings.env
render() {
  local part
  for part in data train-cpu test tensorboard; do
    kubectl kustomize "$work/k8s/$part" >"$work/$part.yaml" || die "kubectl kustomize $k8s/$part failed"
  done
}
set_setting DATA_URL "file://$work/cifar-10-binary.tar.gz"
set_setting DATA_MD5 "$md5"
set_setting MODEL workshop-cnn
set_setting EPOCHS 3
set_setting BATCH_SIZE 16
set_setting RUN_ID rehearsal
set_setting MIN_ACCURACY 30
render

# container MANIFEST KIND/NAME[/ROLE] CONTAINER: loads its environment and argv (as the kubelet
# would build them) into the arrays cenv and cargv, with /efs-shared and /etc/mpi/hostfile
# pointing at the stand-ins.
container() {
  python3 "$ROOT/scripts/manifest-command.py" "$work/$1" "$2" "$3" "$work/env" "$work/argv" ||
    die "cannot take $2 $3 out of the rendered $1"
  mapfile -d '' cenv <"$work/env"
  mapfile -d '' cargv <"$work/argv"
  local i
  for i in "${!cargv[@]}"; do
    cargv[i]=${cargv[i]//\/efs-shared/$EFS}
    cargv[i]=${cargv[i]//\/etc\/mpi\/hostfile/$work/mpi/hostfile}
  done
}
# Runs the loaded container with only its own environment (plus PATH, HOME, the Open MPI
# settings of the caller, e.g. to allow root, and tests/limit.sh's marks, so that a time limit
# reaches the job), output to $work/LOG.
launch() {
  local log=$1
  local -a pass=()
  local v
  for v in $(compgen -e); do [[ $v == OMPI_* || $v == CIFAR10_LIMIT_* ]] && pass+=("$v=${!v}"); done
  env -i "PATH=$work/bin:/usr/bin:/bin" "HOME=${HOME:-/tmp}" "${pass[@]}" "${cenv[@]}" "${cargv[@]}" \
    >"$work/$log" 2>&1
}
show() { echo "--- $work/$1 (last lines)"; tail -n "${2:-15}" "$work/$1"; }

step "1. data-prep Job (cifar10-data)"
container data.yaml Job/cifar10-data get-data
echo "   ${cargv[*]}"
launch data1.log || { show data1.log; die "the data-prep command failed"; }
[[ -f $EFS/cifar-10-batches-bin/.complete ]] || die "data prep left no $EFS/cifar-10-batches-bin/.complete"
cmp -s "$work/src/cifar-10-batches-bin/data_batch_3.bin" "$EFS/cifar-10-batches-bin/data_batch_3.bin" ||
  die "data prep: data_batch_3.bin differs from the tarball's"
launch data2.log || { show data2.log; die "the data-prep command failed the second time"; }
grep -q "already complete" "$work/data2.log" || { show data2.log; die "data prep is not idempotent"; }
echo "   ok: data published with MD5 $md5; a second run is a no-op"

step "2. training MPIJob (cifar10-train), killed after epoch 1, restarted, stopped by SIGTERM, restarted"
container train-cpu.yaml MPIJob/cifar10-train/Launcher wait-for-data
timeout 20 env -i PATH=/usr/bin:/bin "${cargv[@]}" >/dev/null || die "the wait-for-data init container did not return"
container train-cpu.yaml MPIJob/cifar10-train/Launcher launcher
run_dir=$EFS/runs/rehearsal
ckpt=$run_dir/cifar10-model.checkpoint.safetensors
model=$run_dir/cifar10-model.safetensors
setsid bash -c "$(declare -p cenv cargv work); $(declare -f launch); launch train1.log" &
pid=$!
# Rank 0 writes the checkpoint before it prints the epoch line, and mpirun forwards that line a
# moment later: wait for both, or a kill between them leaves a log without the line.
for _ in $(seq 1200); do
  [[ -s $ckpt ]] && grep -q "^epoch 1/3" "$work/train1.log" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
[[ -s $ckpt ]] || { show train1.log; die "no checkpoint $ckpt after the first epoch"; }
kill -KILL -- -"$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
# The ranks have process groups of their own: kill them too, or they train on without mpirun and
# overwrite the checkpoint that the restarts below read.
pkill -KILL -f -- "--model-file $model" 2>/dev/null || true
for _ in $(seq 100); do pgrep -f -- "--model-file $model" >/dev/null || break; sleep 0.1; done
[[ ! -e $model ]] || die "training finished before it could be killed (make an epoch longer)"
grep -q "^epoch 1/3" "$work/train1.log" || { show train1.log; die "the first run printed no epoch 1/3 line"; }
echo "   killed (SIGKILL) after: $(grep '^epoch 1/3' "$work/train1.log" | cut -c1-60)..."
# The pod's deletion: SIGTERM to PID 1 (dumb-init) alone, in the middle of epoch 2.
setsid bash -c "$(declare -p cenv cargv work); $(declare -f launch); launch train2.log" &
pid=$!
for _ in $(seq 1200); do
  grep -q "^\[2, *10\]" "$work/train2.log" 2>/dev/null && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.1
done
grep -q "^resuming run .* from $ckpt: [12] of 3 epochs done" "$work/train2.log" ||
  { show train2.log; die "the restarted launcher did not resume from $ckpt"; }
init=$(pgrep -s "$pid" -x dumb-init) || { show train2.log; die "no dumb-init in the launcher's command"; }
kill -TERM "$init"
rc=0
wait "$pid" || rc=$?
((rc == 4)) || { show train2.log 30; die "SIGTERM to the launcher's dumb-init: exit $rc, want 4 (stopped, resumable)"; }
grep -q "^stopped by a signal .* run the same command to resume" "$work/train2.log" ||
  { show train2.log; die "no stop line after SIGTERM"; }
[[ ! -e $model ]] || die "training finished before SIGTERM (make an epoch longer)"
echo "   stopped (SIGTERM to dumb-init, exit 4): $(grep '^stopped by' "$work/train2.log" | cut -c1-100)..."
launch train3.log || { show train3.log 30; die "the restarted launcher command failed"; }
grep -q "^resuming run .* from $ckpt: [12] of 3 epochs and [0-9]* of [0-9]* steps of epoch [23] done" "$work/train3.log" ||
  { show train3.log; die "the restarted launcher did not resume mid-epoch from $ckpt"; }
grep -q "^epoch 3/3" "$work/train3.log" || { show train3.log; die "the restarted run did not reach epoch 3/3"; }
[[ -s $model ]] || die "no model $model after the restarted run"
grep -q "2 ranks" "$work/train3.log" || { show train3.log; die "training did not run 2 ranks"; }
echo "   ok: $(grep '^resuming run' "$work/train3.log")"
echo "   ok: $(grep '^epoch 3/3' "$work/train3.log" | cut -c1-80)..."

step "3. test Job (cifar10-test) with its gate"
container test.yaml Job/cifar10-test wait-for-model
timeout 20 env -i PATH=/usr/bin:/bin "${cenv[@]}" "${cargv[@]}" >/dev/null || die "the wait-for-model init container did not return"
container test.yaml Job/cifar10-test test
echo "   ${cargv[*]}"
rc=0
launch test1.log || rc=$?
((rc == 0)) || { show test1.log; die "the test Job's command failed (exit $rc; MIN_ACCURACY=30)"; }
acc=$(sed -n 's/^Accuracy of the network on the [0-9]* test images: \([0-9]*\) %$/\1/p' "$work/test1.log")
[[ -n $acc ]] || { show test1.log; die "the test Job printed no accuracy"; }
echo "   ok: accuracy $acc % passes MIN_ACCURACY=30"
((acc < 100)) || die "the synthetic model scored 100 %: no gate above it to check"
set_setting MIN_ACCURACY $((acc + 1))
render
container test.yaml Job/cifar10-test test
rc=0
launch test2.log || rc=$?
((rc == 3)) || { show test2.log; die "a gate of $((acc + 1)) % gave exit $rc, want 3"; }
echo "   ok: MIN_ACCURACY=$((acc + 1)) fails the Job (exit 3)"

step "4. TensorBoard Deployment (tensorboard) over the runs"
tb_path=${TENSORBOARD_PYTHONPATH:-}
if ! PYTHONPATH=$tb_path python3 -c "import tensorboard" 2>/dev/null; then
  echo "   skipped: python3 cannot import tensorboard (set TENSORBOARD_PYTHONPATH; tests/run.sh installs it)"
else
  # the image's tensorboard command, from the pip package
  printf '#!/bin/sh\nPYTHONPATH=%s exec python3 -c "import sys; from tensorboard.main import run_main; sys.exit(run_main())" "$@"\n' \
    "$tb_path" >"$work/bin/tensorboard"
  chmod +x "$work/bin/tensorboard"
  container tensorboard.yaml Deployment/tensorboard tensorboard
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for i in "${!cargv[@]}"; do cargv[i]=${cargv[i]/#--port=6006/--port=$port}; done
  echo "   ${cargv[*]}"
  launch tensorboard.log &
  tb_pid=$!
  ok=0
  python3 - "$port" <<'PY' && ok=1
import json, sys, time, urllib.request
base = "http://127.0.0.1:%s/data/plugin/scalars" % sys.argv[1]
run = "rehearsal/tensorboard"
for _ in range(120):
    try:
        tags = json.load(urllib.request.urlopen(base + "/tags", timeout=5))
        if run in tags and "epoch/epoch" in tags[run]:
            break
    except OSError:
        pass
    time.sleep(0.5)
else:
    sys.exit("TensorBoard lists no run %s with epoch/epoch" % run)
q = "/scalars?run=rehearsal%2Ftensorboard&tag="
epochs = [v for _, _, v in json.load(urllib.request.urlopen(base + q + "epoch%2Fepoch"))]
steps = [s for _, s, _ in json.load(urllib.request.urlopen(base + q + "train%2Floss"))]
if epochs != [1, 2, 3] or steps != sorted(set(steps)):
    sys.exit("TensorBoard serves epochs %s and loss steps %s" % (epochs, steps))
print("   ok: TensorBoard serves run %s: epochs %s, %d loss points, steps %d..%d" % (run, epochs, len(steps), steps[0], steps[-1]))
PY
  pkill -P "$tb_pid" 2>/dev/null || true
  kill "$tb_pid" 2>/dev/null || true
  wait "$tb_pid" 2>/dev/null || true
  ((ok)) || { show tensorboard.log; die "the TensorBoard Deployment's command does not serve the run"; }
fi
echo "$ME: the data, training (with a resume), test and TensorBoard commands of the manifests all ran as expected"
