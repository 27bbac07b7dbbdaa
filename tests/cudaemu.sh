#!/usr/bin/env bash
# The CUDA backend on its CPU emulation (make CUDA=emu; tests/cudaemu/cudaemu.h says what it
# emulates and what it cannot): every op against double precision (test_ops' CUDA columns),
# the training steps as CUDA graphs (test_cuda --graphs), gradients reduced through dist_grads
# with the steps as graphs split at the buckets (test_dist, 1 and 2 ranks), and airbench94
# trained for 24 steps on the emulated GPU with 1 and 2 ranks against the same runs on the CPU
# backend (losses within 2 %). The streams' work runs lazily (CUDAEMU_STREAMS, cudaemu.h);
# test_dist runs again with it in a random order, and each training run's model is the same bit
# for bit with it run at issue and in a random order, with the kernels' blocks and threads run
# in reverse and in shuffled order (CUDAEMU_THREADS: a race between them would change the
# bits); test_ops runs again in reverse order, and with CIFAR10_CUDA_ALGOS=fastest. From
# test_dist on, device memory is closed to host code (CUDAEMU_DEVICE_MEMORY=guarded). Ends with
# "cudaemu: N passed, M failed"; exit status 0 only when all passed. BUILD: a CUDA=emu build (make emu builds build-emu and
# runs this).
cd "$(dirname "$0")/.." || exit 1
export BUILD=${BUILD:-build-emu}
# shellcheck source=lib.sh
. tests/lib.sh # pass, fail, check, summary; $T; the Open MPI settings
B=$BIN

# Each suite under tests/limit.sh, as in tests/run.sh: SUITE_LIMIT s (900 unless set).
SUITE_LIMIT=${SUITE_LIMIT:-900}
suite() { # suite NAME COMMAND...: runs a C test program, adds up its "N passed, M failed" lines
  local name=$1 log=$T/suite.log p f found=0 start=$SECONDS
  shift
  echo "== $name"
  tests/limit.sh "$SUITE_LIMIT" "$@" 2>&1 | tee "$log"
  local status=${PIPESTATUS[0]}
  while read -r p f; do
    passed=$((passed + p)) failed=$((failed + f)) found=1
  done < <(sed -nE 's/^.*: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/p' "$log")
  ((status == 0 && found)) || fail "$name: exit $status"
  echo "== $name: exit $status, $((SECONDS - start)) s"
}

# The loss of step 20 ("[1,    20] loss: X") in log $1.
loss20() { sed -nE 's/^\[1, +20\] loss: ([0-9.]+)$/\1/p' "$1"; }
# Whether the losses at step 20 of logs $1 and $2 are within 2 % of each other.
close_losses() {
  local a b
  a=$(loss20 "$1") b=$(loss20 "$2")
  [[ -n $a && -n $b ]] && awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(d * d <= (0.02 * b) ^ 2) }'
}

# Every stream's work waits until something needs it (CUDAEMU_STREAMS=lazy, cudaemu.h), so a
# missing wait between streams, or host memory reused while a copy of it is pending, shows.
export CUDAEMU_STREAMS=lazy
for order in lazy eager random:1; do
  suite "the emulation's streams, $order" env "CUDAEMU_STREAMS=$order" "$B/tests/cudaemu/test_streams"
done
suite "the emulation's streams, lazy, device memory guarded" \
  env CUDAEMU_DEVICE_MEMORY=guarded "$B/tests/cudaemu/test_streams"
for threads in reverse shuffle:1; do
  suite "the emulation's threads, $threads" env "CUDAEMU_THREADS=$threads" "$B/tests/cudaemu/test_streams"
done
suite "ops on the emulated GPU" "$B/tests/test_ops"
# Each kernel's blocks, and its threads between barriers, in the reverse order: a thread or block
# reading what a later one writes, with no barrier between, gives wrong values.
suite "ops on the emulated GPU, threads in reverse order" env CUDAEMU_THREADS=reverse "$B/tests/test_ops"
# Under CIFAR10_CUDA_ALGOS=fastest, conv reruns are compared within tolerance, not bit for bit
# (each comparison copies its outputs to the host): that path's bookkeeping, as a GPU runs it.
suite "ops on the emulated GPU, reruns within tolerance (ALGOS=fastest)" \
  env CIFAR10_CUDA_ALGOS=fastest "$B/tests/test_ops"
suite "graphs on the emulated GPU" "$B/tests/test_cuda" --graphs
# From here on, device memory is closed to host code (CUDAEMU_DEVICE_MEMORY=guarded, cudaemu.h):
# the programs' own paths (trainer, evaluator, gradients) touching it would fault. (test_ops above,
# with its many small synchronisations, took 119 s guarded against 36 s on the heap; test_cuda
# stays on the heap too.)
export CUDAEMU_DEVICE_MEMORY=guarded
for order in lazy random:1; do
  suite "dist on the emulated GPU, 1 process, $order" env "CUDAEMU_STREAMS=$order" "$B/tests/test_dist" --device cuda
  suite "dist on the emulated GPU, mpirun -np 2, $order" \
    mpirun -np 2 -x "CUDAEMU_STREAMS=$order" "$B/tests/test_dist" --device cuda
done

echo "== airbench94, 24 steps, emulated GPU against CPU, 1 and 2 ranks"
check "make_synthetic failed" "$B/tests/make_synthetic" "$T/data" 1000 200 >/dev/null
TRAIN=(--model airbench94 --precision fp32 --batch-size 64 --epochs 0.3 --print-freq 5 --threads 1)
for ranks in 1 2; do
  for dev in cpu cuda; do
    mpirun -np $ranks "$B/cifar10-train" --device $dev "${TRAIN[@]}" --model-file "$T/$dev$ranks.safetensors" \
      "$T/data" >"$T/$dev$ranks.log" 2>&1
    rc=$? # (before any expansion below: a command substitution resets $?)
    check "$ranks rank(s) on $dev: cifar10-train exit $rc ($(tail -n 1 "$T/$dev$ranks.log"))" test $rc = 0
  done
  grep -E '^\[1, +20\]|^final' "$T/cpu$ranks.log" "$T/cuda$ranks.log"
  check "$ranks rank(s): the emulated GPU's loss of step 20 is not within 2 % of the CPU's" \
    close_losses "$T/cuda$ranks.log" "$T/cpu$ranks.log"
  # The same run with the streams' work in other orders, and the kernels' blocks and threads in
  # others: the same model, bit for bit. (each its own model file: a run resumes from the
  # checkpoint beside it)
  for orders in "eager reverse" "random:$ranks shuffle:$ranks"; do
    read -r order threads <<<"$orders"
    f=$T/$order-$ranks
    mpirun -np $ranks -x "CUDAEMU_STREAMS=$order" -x "CUDAEMU_THREADS=$threads" "$B/cifar10-train" --device cuda \
      "${TRAIN[@]}" --model-file "$f.safetensors" "$T/data" >"$f.log" 2>&1
    rc=$?
    check "$ranks rank(s), CUDAEMU_STREAMS=$order CUDAEMU_THREADS=$threads: cifar10-train exit $rc ($(tail -n 1 "$f.log"))" \
      test $rc = 0
    check "$ranks rank(s): the model trained with CUDAEMU_STREAMS=$order CUDAEMU_THREADS=$threads differs from the lazy run's" \
      cmp -s <(st_data "$f.safetensors") <(st_data "$T/cuda$ranks.safetensors")
  done
done
check "1 rank: the steps did not run as one CUDA graph each" \
  grep -q 'training steps as CUDA graphs (' "$T/cuda1.log"
check "2 ranks: the steps did not run as CUDA graphs between the buckets" \
  grep -q 'training steps as CUDA graphs, one between two gradient hand-overs' "$T/cuda2.log"
# The 2-rank model scored on both: the same count of correct images, give or take one near-tie.
for dev in cpu cuda; do
  "$B/cifar10-test" --device $dev --model-file "$T/cuda2.safetensors" "$T/data" >"$T/test-$dev.log" 2>&1
  rc=$?
  check "cifar10-test --device $dev exit $rc ($(tail -n 1 "$T/test-$dev.log"))" test $rc = 0
done
correct() { sed -nE 's/^Overall accuracy: .*\(([0-9]+) of [0-9]+;.*$/\1/p' "$1"; }
grep '^Overall' "$T/test-cpu.log" "$T/test-cuda.log"
a=$(correct "$T/test-cpu.log") b=$(correct "$T/test-cuda.log")
check "cifar10-test: $b correct on the emulated GPU, $a on the CPU" \
  test -n "$a" -a -n "$b" -a $((a - b)) -le 1 -a $((b - a)) -le 1

# What one bf16 step launches (CUDAEMU_TRACE, named by tests/cudaemu/trace.sh): every kernel
# named, the convolutions on cuDNN, the update one kernel in the step's graph, the filters
# made ready by one kernel after it (none converted per call).
echo "== the kernels of a bf16 training step (CUDAEMU_TRACE)"
# traced_step OUT [VAR=VALUE...]: the last step of a short bf16 airbench94 bench (from its last
# input_kernel on), the kernels named, in OUT; the bench run in the environment given.
traced_step() {
  local out=$1 rc
  shift
  env "$@" CUDAEMU_TRACE="$out.raw" "$B/cifar10-bench" --device cuda --model airbench94 --batch-size 16 \
    --precision bf16 --warmup 2 --steps 1 --runs 1 >"$out.log" 2>&1
  rc=$?
  check "cifar10-bench under CUDAEMU_TRACE $*: exit $rc ($(tail -n 1 "$out.log"))" test $rc = 0
  # shellcheck disable=SC2016
  tests/cudaemu/trace.sh "$out.raw" | sed -n '/^kernel input_kernel/h; /^kernel input_kernel/!H; ${x;p}' >"$out"
}
count() { grep -c "$1" "$2"; } # count PATTERN FILE: its matching lines
traced_step "$T/step.txt"
sort "$T/step.txt" | sed -E 's/ grid.*| x .*//' | uniq -c | sort -rn
check "the step's kernels are not all named" test "$(count '^kernel .*+0x' "$T/step.txt")" = 0
check "the step has no cuDNN forward" grep -q '^cudnn forward x 16x256x7x7' "$T/step.txt"
check "the step's update is not one sgd_kernel" test "$(count '^kernel sgd_kernel' "$T/step.txt")" = 1
check "the step's filters are not made ready by one kernel after the update" \
  test "$(count '^kernel filters_pack_kernel' "$T/step.txt")" = 1 -a "$(count '^kernel filter_pack_kernel' "$T/step.txt")" = 0
# The switch back: CIFAR10_CUDA_FILTERS=per-call converts each convolution's filter per call.
traced_step "$T/step2.txt" CIFAR10_CUDA_FILTERS=per-call
check "CIFAR10_CUDA_FILTERS=per-call: not 12 filter conversions and no set packed in the step" \
  test "$(count '^kernel filter_pack_kernel' "$T/step2.txt")" = 12 -a "$(count '^kernel filters_pack_kernel' "$T/step2.txt")" = 0

# CIFAR10_CUDA_AWARE_MPI=1: each rank's GPU is made current before MPI starts (a CUDA-aware MPI
# sets up on it), from the launcher's local rank; two emulated GPUs, a trace per rank
# (CUDAEMU_TRACE's "set device" lines say whether MPI had started).
aware_bench() { # aware_bench LOG NP TRACE [VAR=VALUE...] -- BENCH-FLAGS...: mpirun, one trace per rank
  local log=$1 np=$2 trace=$3 env=()
  shift 3
  while [[ $1 != -- ]]; do env+=(-x "$1") && shift; done
  shift
  # shellcheck disable=SC2016 # (expanded by each rank's shell)
  mpirun -np "$np" -x CUDAEMU_GPUS=2 "${env[@]}" sh -c 'exec env CUDAEMU_TRACE="$0.$OMPI_COMM_WORLD_RANK" "$@"' \
    "$trace" "$B/cifar10-bench" --model workshop-cnn --batch-size 2 --warmup 0 --steps 1 --runs 1 "$@" >"$log" 2>&1
}
first_device() { grep -m1 '^set device' "$1"; } # first_device TRACE: its first cudaSetDevice
for opt_in in 1 0; do
  aware_bench "$T/aware$opt_in.log" 2 "$T/aware$opt_in" CIFAR10_CUDA_AWARE_MPI=$opt_in -- --device cuda
  rc=$?
  check "CIFAR10_CUDA_AWARE_MPI=$opt_in, 2 ranks: cifar10-bench exit $rc ($(tail -n 1 "$T/aware$opt_in.log"))" test $rc = 0
done
for r in 0 1; do
  check "CIFAR10_CUDA_AWARE_MPI=1: rank $r's GPU $r not made current before MPI started" \
    test "$(first_device "$T/aware1.$r")" = "set device $r (before MPI)"
  check "CIFAR10_CUDA_AWARE_MPI=0: rank $r's GPU made current before MPI started" \
    test "$(first_device "$T/aware0.$r")" = "set device $r (MPI started)"
done
aware_bench "$T/aware-cpu.log" 1 "$T/aware-cpu" CIFAR10_CUDA_AWARE_MPI=1 -- --device cpu
check "CIFAR10_CUDA_AWARE_MPI=1 --device cpu: exit 0 and no GPU made current" \
  bash -c "grep -q '^result: ' '$T/aware-cpu.log' && ! grep -qs '^set device' '$T/aware-cpu.0'"
# A launcher's local rank that MPI's does not match (here a singleton's 0): a warning line.
run env MPI_LOCALRANKID=1 CUDAEMU_GPUS=2 CIFAR10_CUDA_AWARE_MPI=1 "$B/cifar10-bench" --device cuda \
  --model workshop-cnn --batch-size 2 --warmup 0 --steps 1 --runs 1
expect_rc 0 "local ranks that disagree"
expect_err "local ranks that disagree" "cifar10-bench: warning: CIFAR10_CUDA_AWARE_MPI=1: GPU 1 was current when MPI \
started (MPI_LOCALRANKID=1), but this rank trains on GPU 0 (MPI's local rank 0): the MPI library may have set up on the other GPU"

# A capture that a library call broke on a GPU (CUDAEMU_CAPTURE=invalidated: every graph's end
# fails as CUDA's does) stops the run with one line that names the way round it.
run env CUDAEMU_CAPTURE=invalidated "$B/cifar10-bench" --device cuda --model workshop-cnn --batch-size 2 \
  --warmup 2 --steps 1 --runs 1
expect_rc 1 "a broken capture"
expect_err "a broken capture" \
  "cudaStreamEndCapture(compute_stream, &graph): operation failed due to a previous error during capture at "
expect_err "a broken capture names the switch" \
  "(recording or launching a CUDA graph: CIFAR10_CUDA_GRAPHS=off runs the steps without graphs)"
run env CUDAEMU_CAPTURE=invalidated CIFAR10_CUDA_GRAPHS=off "$B/cifar10-bench" --device cuda \
  --model workshop-cnn --batch-size 2 --warmup 2 --steps 1 --runs 1
expect_rc 0 "the same without graphs"

summary cudaemu
