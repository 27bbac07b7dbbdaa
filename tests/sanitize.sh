#!/usr/bin/env bash
# The C test programs and the programs themselves under AddressSanitizer + UndefinedBehaviorSanitizer
# (`make sanitize` builds them into build-sanitize with SANITIZE=1 and runs this): every report
# is fatal (-fno-sanitize-recover=all, and ASan exits non-zero), so a clean pass means no
# out-of-bounds access, use after free, undefined behaviour or leak of ours on these paths:
#  - test_model, test_data, test_checkpoint, test_whiten, test_ops, test_staged, test_dist (1
#    process and mpirun -np 2);
#  - airbench94's recipe on synthetic data with mpirun -np 2: stopped by SIGUSR1 mid-epoch
#    (mid-epoch checkpoint), resumed to the end (TTA, model file); cifar10-test on the model;
#    cifar10-bench, 2 steps;
#  - the CUDA backend on its emulation (make sanitize builds with CUDA=emu: its kernels, its
#    host code and the emulation instrumented, device memory exact heap blocks): test_ops' CUDA
#    columns, airbench94 trained on the emulated GPU with 1 rank and with 2 (steps as CUDA
#    graphs, gradients staged through the host), cifar10-test on it.
# Leaks: only Open MPI's own allocations are suppressed (tests/lsan.supp, each entry explained);
# test_model runs without the leak check, since its bad-definition cases fork a process with
# OpenMP threads, where LeakSanitizer cannot stop the threads and says so on stderr, which
# those cases compare. Usage: BUILD=build-sanitize tests/sanitize.sh
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
# DWARF unwinding (fast_unwind_on_malloc=0): Open MPI is built without frame pointers, and the
# frame-pointer unwinder stops inside it before reaching the library the suppressions name.
export ASAN_OPTIONS=fast_unwind_on_malloc=0:detect_leaks=1:abort_on_error=0
export LSAN_OPTIONS=suppressions=$SRC/tests/lsan.supp:print_suppressions=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
reports() { grep -cE '^==[0-9]+==ERROR|runtime error:' "$1"; }
# verdict DESCRIPTION LOG RC: RC is 0 and no sanitizer reported anything in LOG.
verdict() {
  if [[ $3 == 0 && $(reports "$2") == 0 ]]; then pass; else fail "$1: exit $3; $(grep -m3 -E 'ERROR|runtime error|FAIL' "$2")"; fi
}
# clean DESCRIPTION COMMAND...: runs COMMAND, then its verdict.
clean() {
  local what=$1 log
  shift
  log=$T/log.$((passed + failed))
  "$@" >"$log" 2>&1
  verdict "$what" "$log" $?
}

# The C test programs run in a lane of their own beside the programs' runs below (one core each
# most of the time); their verdicts come at the end, in this order.
LANE=(test_data test_checkpoint test_whiten test_ops test_staged test_dist "test_model (no leak check: see the top)"
  "test_dist, mpirun -np 2" "test_staged, mpirun -np 2")
lane_run() { # lane_run I COMMAND...: output in $T/lane.I, exit status in $T/lane.I.rc
  local i=$1
  shift
  "$@" >"$T/lane.$i" 2>&1
  echo $? >"$T/lane.$i.rc"
}
lane() {
  local i
  for i in 0 1 2 3 4 5; do lane_run $i "$BIN/tests/${LANE[$i]}"; done
  ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 lane_run 6 "$BIN/tests/test_model"
  lane_run 7 mpirun -np 2 "$BIN/tests/test_dist"
  lane_run 8 mpirun -np 2 "$BIN/tests/test_staged"
}
lane &
lane_pid=$!

D=$T/data
"$BIN/tests/make_synthetic" "$D" 80 50 >/dev/null || exit 1
TRAIN=(mpirun -np 2 "$BIN/cifar10-train" --model airbench94 --precision fp32 --batch-size 64 --epochs 2.5 --whiten-images 300
  --threads 1 --print-freq 1 --device cpu --checkpoint-interval 0 --model-file "$T/m.safetensors" "$D")
"${TRAIN[@]}" >"$T/train1.log" 2>&1 &
pid=$!
for _ in $(seq 1200); do grep -q '^\[2,     2\]' "$T/train1.log" && break; sleep 0.1; done
kill -USR1 "$pid"
wait "$pid"
rc=$?
if [[ $rc == 4 && $(reports "$T/train1.log") == 0 ]]; then pass; else fail "training stopped by SIGUSR1: exit $rc; $(grep -m3 -E 'ERROR|runtime error' "$T/train1.log")"; fi
clean "training resumed mid-epoch to the end (TTA, model file)" "${TRAIN[@]}"
check "the resumed run started mid-epoch" grep -q "steps of epoch 2 done" "$T/log.$((passed + failed - 1))"
clean "cifar10-test" "$BIN/cifar10-test" --model-file "$T/m.safetensors" "$D"
clean "cifar10-bench, 2 steps" "$BIN/cifar10-bench" --model airbench94 --batch-size 32 --threads 1 --warmup 1 --steps 1 --runs 2
if [[ -e $BIN/lib/cifar10-dp/libcifar10-cuda.so ]]; then
  GPU=(--model airbench94 --precision fp32 --batch-size 32 --epochs 0.5 --whiten-images 300 --threads 1 --device cuda "$D")
  clean "cifar10-train on the emulated GPU, 1 rank" "$BIN/cifar10-train" "${GPU[@]}" --model-file "$T/g1.safetensors"
  clean "cifar10-train on the emulated GPU, mpirun -np 2" \
    mpirun -np 2 "$BIN/cifar10-train" "${GPU[@]}" --model-file "$T/g2.safetensors"
  clean "cifar10-test on the emulated GPU" "$BIN/cifar10-test" --device cuda --model-file "$T/g2.safetensors" "$D"
fi
wait "$lane_pid"
for i in "${!LANE[@]}"; do
  verdict "${LANE[$i]}" "$T/lane.$i" "$(cat "$T/lane.$i.rc" 2>/dev/null || echo "none (the lane ended early)")"
done
summary sanitize
