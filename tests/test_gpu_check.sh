#!/usr/bin/env bash
# scripts/gpu-check.sh's window step (what a scarce GPU window runs first) against stand-ins for
# the GPU machine's programs (tests/fake-gpu), so that a mistake of the script shows here and
# not in the window: its three steps and their folders, the gate handed from the test step to
# perf (no second run of the test programs), perf's order (our defaults against PyTorch eager,
# the time to accuracy, torch.compile, the switches, each switch reaching the program), the
# deadline that leaves out what no longer fits, and the tarballs of the logs. Runs in a copy of
# the script with its scratch files under the suite's folder. Then the other steps that run on
# the GPU machine, each alone: sanitize (racecheck's judgement: a hazard in one of our kernels
# fails it, hazards in cuDNN's only do not), rest, bench, profile, base and cpu (the base commit
# benchmarked beside ours; without one, ours only), train: their exit status, their
# summary.txt's lines, their tarballs of the logs; and stamp, in a git checkout of its own.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
R=$T/repo
mkdir -p "$R/scripts" "$R/tests" "$R/build/tests" "$R/.gpu-carry" "$T/fake" "$T/scratch"
cp "$SRC/scripts/gpu-check.sh" "$R/scripts/"
for c in nvidia-smi nvcc make mpirun python3 compute-sanitizer ncu; do ln -s "$SRC/tests/fake-gpu" "$T/fake/$c"; done
for c in cifar10-train cifar10-test cifar10-bench; do ln -s "$SRC/tests/fake-gpu" "$R/build/$c"; done
for c in test_ops test_cuda test_dist make_synthetic; do ln -s "$SRC/tests/fake-gpu" "$R/build/tests/$c"; done
ln -s "$SRC/tests/fake-gpu" "$R/.gpu-carry/make-cifar10-bin"
: >"$R/.gpu-carry/bench_torch_0cefd96.py"
: >"$R/.gpu-carry/cifar10-jpeg.tar.gz"
echo "commit 0000000 (stand-in)" >"$R/.gpu-carry/source.txt"
REAL_PYTHON=$(command -v python3)
export REAL_PYTHON FAKE_LOG=$T/calls GPU_CHECK_TMP=$T/scratch PATH=$T/fake:$PATH

# window SECONDS [FAIL-GLOB [HANG-GLOB]]: the window step with a budget of SECONDS, its results
# in $T/w.
window() {
  rm -rf "$T/w" "$T/scratch"/*
  : >"$FAKE_LOG"
  FAKE_FAIL=${2:-} FAKE_HANG=${3:-} GPU_CHECK_WINDOW_S=$1 OUT=$T/w run bash "$R/scripts/gpu-check.sh" window
  # perf.txt as the step packed it with its logs
  tar -xzOf "$T/w/perf/perf-logs.tar.gz" perf.txt >"$P" 2>/dev/null || : >"$P"
}
P=$T/perf.txt
has() { # has DESCRIPTION FILE EXTENDED-REGEX
  if grep -qE -- "$3" "$2" 2>/dev/null; then pass; else fail "$1: no line matching '$3' in $2: $(head -c 1500 "$2" 2>&1)"; fi
}
lacks() { # lacks DESCRIPTION FILE EXTENDED-REGEX
  if ! grep -qE -- "$3" "$2" 2>/dev/null; then pass; else fail "$1: a line matches '$3' in $2"; fi
}
calls() { grep -c -- "^$1 " "$FAKE_LOG"; }
# line N FILE: line N of FILE.
line() { sed -n "${1}p" "$2"; }
expect_line() { # expect_line DESCRIPTION FILE N EXTENDED-REGEX
  if [[ $(line "$3" "$2") =~ $4 ]]; then pass; else fail "$1: line $3 of $2 is '$(line "$3" "$2")', want /$4/"; fi
}

# Everything fits.
window 1000
expect_rc 0 "window, everything fits"
has "test step: its checks" "$T/w/test/summary.txt" '^check: test_ops: PASS'
has "test step: training with graphs between buckets" "$T/w/test/summary.txt" \
  '^check: airbench94 np=2 as graphs between buckets: PASS'
has "test step: op by op" "$T/w/test/summary.txt" '^check: airbench94 train np=1, CIFAR10_CUDA_GRAPHS=off: PASS'
has "test step: its count" "$T/w/test/summary.txt" '^gpu-check test: 0 check\(s\) failed$'
has "perf: the test step's verdict as its gate" "$T/w/perf/summary.txt" "^gate: this window's test step passed$"
check "perf runs test_ops and test_cuda no second time (test_ops twice, test_cuda twice: the test step's)" \
  test "$(calls test_ops)-$(calls test_cuda)" = 2-2
expect_line "perf: airbench94 bf16 first" "$P" 1 '^airbench94-1024-bf16, nhwc, deterministic: ours 1200.0 img/s, PyTorch eager 1000.0, ours / eager 1.20$'
expect_line "perf: then fp32" "$P" 2 '^airbench94-1024-fp32, nhwc, deterministic: ours 1200.0'
expect_line "perf: then the workshop CNN" "$P" 3 '^workshop-512, nhwc, deterministic: ours 1200.0 img/s, PyTorch eager 1000.0'
for i in 1 2 3 4 5; do
  expect_line "perf: bf16 seed $i to accuracy" "$P" $((3 + i)) \
    "^airbench94 bf16 seed $i: final test accuracy 90.50% .*; time to accuracy 2.00 s$"
done
expect_line "perf: fp32 to accuracy" "$P" 9 '^airbench94 fp32 seed 1: final test accuracy 90.50% .*; time to accuracy 3.00 s$'
expect_line "perf: the seeds' means" "$P" 10 '^airbench94 bf16, 5 seeds: mean accuracy 90.50 %, mean time to accuracy 2.00 s$'
expect_line "perf: torch.compile, airbench94" "$P" 11 '^airbench94-1024-bf16: ours 1200.0 img/s, PyTorch torch.compile 1100.0, ours / compile 1.09$'
expect_line "perf: torch.compile, workshop" "$P" 12 '^workshop-512: ours 1200.0 img/s, PyTorch torch.compile 1100.0'
expect_line "perf: PyTorch's profile, airbench94" "$P" 13 \
  "^airbench94-1024-bf16: PyTorch's time per operator in perf-torch-profile-airbench94-1024-bf16.log, ours per layer"
expect_line "perf: PyTorch's profile, workshop" "$P" 14 "^workshop-512: PyTorch's time per operator in"
has "perf: the profile by the current script, airbench94 in bf16" "$FAKE_LOG" \
  '^python3 scripts/bench_torch.py --device cuda --warmup 10 --steps 20 --runs 1 --profile 2 --model airbench94 --batch-size 1024 --bf16 '
has "perf: CIFAR10_CUDA_ALGOS=fastest reached the program" "$P" '^airbench94-1024-bf16, nhwc, fastest: ours 1250.0'
has "perf: CIFAR10_CUDA_LAYOUT=nchw reached the program" "$P" '^airbench94-1024-fp32, nchw, deterministic: ours 900.0'
has "perf: --first-bias-stopped reached the program" "$P" '^airbench94-1024-fp32-first-bias-stopped, nhwc, deterministic: ours 1300.0'
has "perf: CIFAR10_CUDA_GRAPHS=off reached the program" "$P" '^airbench94-1024-bf16-op-by-op, nhwc, deterministic: ours 1150.0'
has "perf: the bf16 switches' runs" "$FAKE_LOG" '^cifar10-bench .*--precision bf16.* \| .*CIFAR10_CUDA_FILTERS=per-call'
has "perf: bf16 copies" "$FAKE_LOG" '^cifar10-bench .*--precision bf16.* \| .*CIFAR10_CUDA_BF16=copies'
has "perf: the small-conv switch in fp32, without --precision" "$FAKE_LOG" \
  '^cifar10-bench --device=cuda --warmup 10 --steps 100 --runs 3 --model airbench94 --batch-size 1024 \| .*CIFAR10_CUDA_SMALL_CONV=cudnn'
check "perf: 19 runs of ours at 100 steps (3 defaults, 16 switched)" test "$(grep -c '^cifar10-bench --device=cuda --warmup 10 --steps 100' "$FAKE_LOG")" = 19
has "perf: the workshop CNN's first layer by cuDNN" "$FAKE_LOG" \
  '^cifar10-bench --device=cuda --warmup 10 --steps 100 --runs 3 --batch-size 512 \| .*CIFAR10_CUDA_SMALL_CONV=cudnn'
check "perf: a switch is set for its own run only (3 benches, 1 run to accuracy, the test step's 1 op by op)" test "$(grep -c '^cifar10-.*CIFAR10_CUDA_GRAPHS=off' "$FAKE_LOG")" = 5
expect_line "perf: op by op to accuracy last" "$P" "$(wc -l <"$P")" \
  '^airbench94 bf16 seed 1, op by op \(CIFAR10_CUDA_GRAPHS=off\): final test accuracy'
lacks "perf: nothing skipped" "$P" '^skipped'
has "perf: its count" "$T/w/perf/summary.txt" '^gpu-check perf: 0 check\(s\) failed$'
has "cpu-quick ran" "$T/w/cpu/summary.txt" '^airbench94, batch 512, 2 threads: ours bf16 --bf16-isa amx 50.0 images/s$'
# the stand-in: 512 images at 50/s on the tiles, at 100/s without their arithmetic: 5.12 s of
# tiles for 16.384 GFLOP, 3.2 GFLOP/s, 16 % of the stand-in's peak of 20
has "cpu-quick: ours without the tile arithmetic" "$T/w/cpu/summary.txt" '^airbench94, batch 512, 2 threads: ours bf16 --bf16-isa amx-cost 100.0 images/s$'
has "cpu-quick: the tiles' share" "$T/w/cpu/summary.txt" \
  "^the tiles' loads and arithmetic: 5120.0 ms of the 10240.0 ms step \\(the rest 5120.0 ms\\), 16.4 GFLOP: 3 GFLOP/s, 16.0% of their peak \\(20.0\\)$"
has "cpu-quick: amx with its loops fixed as before the find" "$T/w/cpu/summary.txt" '^airbench94, batch 512, 2 threads: ours bf16 --bf16-isa amx-prefetch 50.0 images/s$'
check "cpu-quick: PyTorch's autocast before the fixed loops (a window's end cuts those first)" \
  test "$(grep -n '^PyTorch' "$T/w/cpu/summary.txt" | cut -d: -f1)" -lt "$(grep -n 'amx-prefetch' "$T/w/cpu/summary.txt" | cut -d: -f1)"
has "window: its count" "$T/w/summary.txt" '^gpu-check window: 0 check\(s\) failed$'
for f in test/test-logs.tar.gz perf/perf-logs.tar.gz cpu/cpu-quick-logs.tar.gz; do
  check "the logs packed: $f" test -s "$T/w/$f"
done
check "the logs in the perf tarball" bash -c "tar -tzf '$T/w/perf/perf-logs.tar.gz' | grep -qx tta-bf16-1.log"
check "perf's lines in its summary.txt too (the device tool returns 8 files at most)" \
  cmp -s <(grep -v '^gate:\|^gpu-check perf:' "$T/w/perf/summary.txt") "$P"
check "scratch files under GPU_CHECK_TMP" test -d "$T/scratch/cifar10-real/cifar-10-batches-bin" -a -e "$T/scratch/tta.safetensors"

# keep: the call's returned folder into docs/data/gpu/DATE-COMMIT/ of the copy, to commit.
run bash "$R/scripts/gpu-check.sh" keep "$T/w"
expect_rc 0 "keep"
K=$(find "$R/docs/data/gpu" -mindepth 1 -maxdepth 1 -type d -name '*-0000000' | head -n 1)
check "keep: a folder named by the date and the commit of about.txt" test -n "$K"
for f in summary.txt test/summary.txt test/test_ops.log perf/perf.txt perf/tta-bf16-1.log cpu/summary.txt; do
  check "keep: $f" test -s "$K/$f"
done
check "keep: perf.txt as the window wrote it" cmp -s "$K/perf/perf.txt" "$P"
has "keep: the build logs left out, listed" "$K/not-kept.txt" '^perf/build.log '

# perf alone, 39 s before its deadline: each part runs only if its usual time fits (the eager
# runs 30 s, ours 20, the real images 40, a switch 15), one "skipped" line for each other; 9 s
# to spare for the stand-ins on a loaded machine (and 9 s at 29).
perf_alone() {
  rm -rf "$T/p" "$T/scratch"/*
  : >"$FAKE_LOG"
  GPU_CHECK_GATE=passed GPU_CHECK_DEADLINE=$(($(date +%s) + $1)) OUT=$T/p run bash "$R/scripts/gpu-check.sh" perf
  tar -xzOf "$T/p/perf-logs.tar.gz" perf.txt >"$P" 2>/dev/null || : >"$P"
}
perf_alone 39
expect_rc 0 "perf 39 s before its deadline"
expect_line "deadline: airbench94 bf16 against eager" "$P" 1 '^airbench94-1024-bf16, nhwc, deterministic: ours 1200.0 img/s, PyTorch eager 1000.0'
expect_line "deadline: the real images skipped" "$P" 4 \
  '^skipped: the real images for the runs to accuracy \(about 40 s needed, [23][0-9] s left before the deadline\)$'
has "deadline: torch.compile skipped" "$P" '^skipped: torch.compile, airbench94 bf16 '
check "deadline: no run to accuracy" test "$(grep -c '^cifar10-train' "$FAKE_LOG")" = 0
has "deadline: the switches ran (15 s each)" "$P" '^airbench94-1024-fp32-op-by-op, nhwc, deterministic: ours 1150.0'
perf_alone 29
expect_line "29 s: the eager run skipped" "$P" 1 '^skipped: PyTorch eager, airbench94 bf16 '
expect_line "29 s: ours without a peer" "$P" 2 '^airbench94-1024-bf16, nhwc, deterministic: ours 1200.0 img/s, PyTorch eager \?, ours / eager \?$'

# The test step past its deadline: no check starts; each says SKIPPED and counts as failed.
rm -rf "$T/t" && GPU_CHECK_DEADLINE=$(($(date +%s) - 1)) OUT=$T/t run bash "$R/scripts/gpu-check.sh" test
expect_rc 1 "test past its deadline"
has "test past its deadline: skipped" "$T/t/summary.txt" '^check: test_ops: SKIPPED \([0-9]+ s\)$'
check "test past its deadline: nothing ran" test "$(grep -c '^test_ops\|^cifar10-train' "$FAKE_LOG")" = 0

# A window of 70 s: the test step's checks all past its deadline (250 s before the end), so
# the gate fails; perf's deadline (75 s before the end) has passed too: everything skipped;
# cpu-quick (60 s) still runs.
window 70
expect_rc 1 "window of 70 s"
has "short window: the test step skipped" "$T/w/test/summary.txt" '^check: test_ops: SKIPPED'
expect_line "short window: perf's gate" "$P" 1 '^GATE FAILED'
expect_line "short window: perf skipped" "$P" 2 '^skipped: PyTorch eager, airbench94 bf16 '
check "short window: no run of ours at 100 steps" test "$(grep -c '^cifar10-bench --device=cuda --warmup 10 --steps 100' "$FAKE_LOG")" = 0
has "short window: cpu-quick ran" "$T/w/cpu/summary.txt" '^gpu-check cpu-quick: 0 check\(s\) failed$'

# 50 s: not even cpu-quick's 60.
window 50
has "shorter window: cpu-quick skipped" "$T/w/summary.txt" '^window: cpu-quick skipped: [0-9]+ s left$'

# A failed profile of PyTorch's: said, not counted, and the rest runs.
window 1000 'python3 scripts/bench_torch.py *--profile 2*'
expect_rc 0 "window with PyTorch's profile failing"
has "failed profile: said" "$P" "^workshop-512: PyTorch's profile failed: perf-torch-profile-workshop-512.log$"
has "failed profile: the switches still ran" "$P" '^workshop-512-op-by-op, nhwc, deterministic: ours 1150.0'

# A failed build (exit 3): the window stops there, without building again for perf and cpu-quick.
window 1000 'make -j*'
expect_rc 1 "window with a failed build"
has "failed build: said" "$T/w/summary.txt" '^window: the build failed \(test/summary.txt\): perf and cpu-quick not run$'
check "failed build: one build tried" test "$(grep -c '^make -j' "$FAKE_LOG")" = 1
check "failed build: no perf, no cpu-quick" test ! -e "$T/w/perf" -a ! -e "$T/w/cpu"

# A failed test step: perf still times, under its warning, and the window fails.
window 1000 'test_cuda --bf16*'
expect_rc 1 "window with a failed test step"
has "failed test step: the check" "$T/w/test/summary.txt" '^check: test_cuda bf16: FAIL'
expect_line "failed test step: perf's warning first" "$P" 1 '^GATE FAILED'
expect_line "failed test step: perf's figures after it" "$P" 2 '^airbench94-1024-bf16, nhwc, deterministic: ours 1200.0'
has "failed test step: the window's count" "$T/w/summary.txt" '^gpu-check window: 2 check\(s\) failed$'

# Hangs (a deadlock's stand-in) in a check of the test step and in one of perf's runs: each
# costs its time limit (3 s here, 180 s and 150 s by default), its processes are stopped, and
# the rest runs.
t0=$SECONDS
GPU_CHECK_CHECK_S=3 GPU_CHECK_RUN_S=3 window 1000 '' '@(cifar10-train *--epochs 2.5 *--precision bf16 *|cifar10-bench *--first-bias-stopped*)'
check "hangs: the window ends within its limits, not the hang's 987 s ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -lt 120
expect_rc 1 "hangs: the window fails"
has "hangs: the check that hung" "$T/w/test/summary.txt" '^check: airbench94 bf16 train np=2: TIMEOUT \([0-9]+ s\)$'
has "hangs: the checks after it ran" "$T/w/test/summary.txt" '^gpu-check test: 1 check\(s\) failed$'
has "hangs: the run that hung has no figure" "$P" '^airbench94-1024-bf16-first-bias-stopped, nhwc, deterministic: ours \? img/s'
has "hangs: the runs after it have theirs" "$P" '^workshop-512-op-by-op, nhwc, deterministic: ours 1150.0'
check "hangs: no stand-in left hanging" bash -c '! pgrep -f "sleep 98[7]" >/dev/null'

# step NAME [FAIL-GLOB]: step NAME alone, its results in $T/s/NAME, its summary.txt as $S and
# its tarball's files under $T/l.
step() {
  rm -rf "$T/s" "$T/l" "$T/scratch"/*
  mkdir -p "$T/l"
  : >"$FAKE_LOG"
  FAKE_FAIL=${2:-} OUT=$T/s/$1 run bash "$R/scripts/gpu-check.sh" "$1"
  S=$T/s/$1/summary.txt
  tar -xzf "$T/s/$1/$1-logs.tar.gz" -C "$T/l" 2>/dev/null
  check "$1: its logs packed" test -s "$T/s/$1/$1-logs.tar.gz"
}

# sanitize: hazards in cuDNN's kernels only (racecheck exits 9 for them too): counted, passed.
FAKE_RACE="sm90_xmma_fprop_nhwc_on_kernel__5x_cudnn" step sanitize
expect_rc 0 "sanitize, hazards in cuDNN's kernels only"
for c in "memcheck train" "racecheck train" "synccheck train" "memcheck test_dist np=2"; do
  has "sanitize: $c" "$S" "^check: $c: PASS"
done
has "sanitize: its count" "$S" '^gpu-check sanitize: 0 check\(s\) failed$'
has "sanitize: cuDNN's hazards counted" "$T/l/racecheck-train.log" \
  "^racecheck: 2 access site\(s\) of hazards in cuDNN's kernels, 0 in ours$"
has "sanitize: memcheck with the leak check" "$FAKE_LOG" \
  '^compute-sanitizer --tool memcheck --leak-check full --error-exitcode 9 build/cifar10-train --device=cuda '
has "sanitize: racecheck on the kernels named *_kernel" "$FAKE_LOG" \
  '^compute-sanitizer --tool racecheck --kernel-name kns=_kernel --error-exitcode 9 build/cifar10-train '
has "sanitize: racecheck on its 50 images (4 steps)" "$FAKE_LOG" \
  '^compute-sanitizer --tool racecheck .* --resume never [^ ]*/gpu-check-race \|'
has "sanitize: memcheck on the 160 images" "$FAKE_LOG" \
  '^compute-sanitizer --tool memcheck --leak-check full .* --resume never [^ ]*/gpu-check-small \|'
has "sanitize: test_dist on 2 ranks" "$FAKE_LOG" \
  '^mpirun -np 2 compute-sanitizer --tool memcheck --error-exitcode 9 build/tests/test_dist --device cuda '
# the same with each check in a child bash under a time limit (as the window's test step runs
# them): a function's failing command on its own line must not end it early there either
FAKE_RACE="sm90_xmma_fprop_nhwc_on_kernel__5x_cudnn" GPU_CHECK_CHECK_S=60 step sanitize
expect_rc 0 "sanitize under GPU_CHECK_CHECK_S, hazards in cuDNN's kernels only"
has "sanitize under GPU_CHECK_CHECK_S: racecheck's verdict" "$S" '^check: racecheck train: PASS'
# a hazard in one of ours: the racecheck check fails, the others run and pass
FAKE_RACE="sm90_xmma_fprop_nhwc_on_kernel__5x_cudnn conv_bias_kernel" step sanitize
expect_rc 1 "sanitize, a hazard in our kernel"
has "sanitize: our hazard fails racecheck" "$S" '^check: racecheck train: FAIL'
has "sanitize: synccheck after it" "$S" '^check: synccheck train: PASS'
has "sanitize: our hazard's count" "$S" '^gpu-check sanitize: 1 check\(s\) failed$'
has "sanitize: our hazards counted" "$T/l/racecheck-train.log" \
  "^racecheck: 2 access site\(s\) of hazards in cuDNN's kernels, 2 in ours$"
# a racecheck run that does not finish (no "Finished Training")
step sanitize 'compute-sanitizer --tool racecheck *'
expect_rc 1 "sanitize, racecheck's run failed"
has "sanitize: an unfinished run fails racecheck" "$T/l/racecheck-train.log" '^racecheck: the run did not finish$'
has "sanitize: an unfinished run's verdict" "$S" '^check: racecheck train: FAIL'

# test alone (not in a window): the checks a window leaves out too
step test
expect_rc 0 "test alone"
for c in "test_ops fastest" "test_dist np=2 tf32=off" "test_cuda tf32=on" "test_cuda nchw tf32=off" \
  "test_dist np=1 tf32=on" "test_dist np=2 tf32=on" "airbench94 bf16 train np=2"; do
  has "test alone: $c" "$S" "^check: $c: PASS"
done

# rest: the test checks a window leaves out, then the sanitize step's, in one step
FAKE_RACE="sm90_xmma_fprop_nhwc_on_kernel__5x_cudnn" step rest
expect_rc 0 rest
for c in "test_cuda tf32=on" "test_cuda nchw tf32=off" "test_dist np=1 tf32=on" "test_dist np=2 tf32=on" \
  "memcheck train" "racecheck train" "synccheck train" "memcheck test_dist np=2"; do
  has "rest: $c" "$S" "^check: $c: PASS"
done
check "rest: nothing the window runs (no test_ops, no TF32-off test_dist)" \
  test "$(grep -Ec '^check: (test_ops|test_dist np=[12] tf32=off)' "$S")" = 0
has "rest: its count" "$S" '^gpu-check rest: 0 check\(s\) failed$'
has "rest: test_cuda in NCHW" "$FAKE_LOG" '^test_cuda \|.*CIFAR10_CUDA_LAYOUT=nchw'

# bench: ours against PyTorch eager and torch.compile; NCHW reached ours
step bench
expect_rc 0 bench
for b in 128 512; do has "bench: batch $b" "$S" "^batch $b: 1200.0 / 1000.0 / 1100.0$"; done
has "bench: its heading" "$S" '^images/s: ours / PyTorch eager / torch.compile$'
has "bench: airbench94" "$S" '^airbench94, batch 1024: 1200.0 / 1000.0 / -$'
has "bench: airbench94 bf16" "$S" '^airbench94, batch 1024, bf16: 1200.0 / 1000.0 / -$'
has "bench: ours in NCHW" "$S" '^ours in NCHW \(CIFAR10_CUDA_LAYOUT=nchw\), airbench94 at 1024: 900.0, bf16: 900.0$'
has "bench: ours in bf16" "$FAKE_LOG" '^cifar10-bench --device=cuda --precision bf16 --model airbench94 .*CIFAR10_CUDA_LAYOUT=nchw'
has "bench: PyTorch in bf16" "$FAKE_LOG" '^python3 scripts/bench_torch.py --device cuda --bf16 --model airbench94 '

# profile: ncu's summary of ours, PyTorch's profile and its 3 other settings, each configuration
step profile
expect_rc 0 profile
for c in workshop-512 airbench94-1024 airbench94-1024-bf16; do
  has "profile: $c" "$S" "^== $c$"
  has "profile: ncu's summary of $c" "$T/l/ncu-$c.log" '^  conv_kernel \(stand-in\)'
done
check "profile: 4 PyTorch lines a configuration" test "$(grep -c '^PyTorch' "$S")" = 12
lacks "profile: ncu ran" "$S" 'ncu failed|ncu not found'
has "profile: ncu on ours' timed range, bf16" "$FAKE_LOG" \
  '^ncu .*--nvtx-include timed/ .* build/cifar10-bench --device=cuda --model airbench94 --batch-size 1024 --precision bf16 --warmup 5 '
has "profile: PyTorch in NCHW with deterministic algorithms" "$FAKE_LOG" \
  '^python3 scripts/bench_torch.py --device cuda --model airbench94 --batch-size 1024 --bf16 --memory-format contiguous --deterministic '
step profile 'ncu *'
expect_rc 0 "profile, ncu failed"
has "profile: ncu's failure said" "$S" '^ncu failed \(1\): see ncu-workshop-512.log$'
check "profile: PyTorch's side all the same" test "$(grep -c '^PyTorch' "$S")" = 12
# torch.profiler's run failed: said, and the rest runs
step profile 'python3 scripts/bench_torch.py *--profile 2'
expect_rc 0 "profile, PyTorch's profile failed"
has "profile: PyTorch's profile's failure said" "$S" '^torch profile failed: see torch-profile-airbench94-1024-bf16.log$'
check "profile: PyTorch's 3 other settings a configuration" test "$(grep -c '^PyTorch' "$S")" = 9

# base: a commit of the copy (a repository of its own) as .gpu-carry/base.tar.gz; cpu then
# builds it (the stand-in make) and runs it beside ours.
git -C "$R" init -q && git -C "$R" add scripts &&
  git -C "$R" -c user.name=t -c user.email=t@t.invalid -c commit.gpgsign=false commit -qm base
rev=$(git -C "$R" rev-parse HEAD)
OUT=$T/b run bash "$R/scripts/gpu-check.sh" base HEAD
expect_rc 0 base
check "base: its tree" bash -c "tar -tzf '$R/.gpu-carry/base.tar.gz' | grep -qx base/scripts/gpu-check.sh"
check "base: its commit" test "$(cat "$R/.gpu-carry/base.rev")" = "$rev"
step cpu
expect_rc 0 "cpu with a base"
expect_out "cpu: the base's commit" "^base: $rev$"
for m in "airbench94, batch 512" "workshop-cnn, batch 128"; do
  has "cpu: $m, fp32 and its path" "$S" "^$m, 2 threads: ours fp32 50.0 images/s \(avx512\)$"
  has "cpu: $m, fp32 against the base" "$S" "^$m, fp32, against the base: ours 50.0 images/s, base 40.0: 1.250x$"
  for v in amx amx-prefetch amx-resident amx-noprefetch amx-im2col avx512bf16; do has "cpu: $m, bf16 on $v" "$S" "^$m, 2 threads: ours bf16 on $v 50.0 images/s$"; done
  has "cpu: $m, amx against the base" "$S" "^$m, bf16 on amx, against the base: ours 50.0 images/s, base 40.0: 1.250x$"
done
check "cpu: PyTorch fp32 and bf16 a model" test "$(grep -c '^PyTorch' "$S")" = 4
has "cpu: 20 steps of airbench94" "$S" '^check: airbench94 bf16 on the CPU, 20 steps: PASS'
has "cpu: its count" "$S" '^gpu-check cpu: 0 check\(s\) failed$'
check "cpu: the base's logs" test -s "$T/l/cpu-airbench94-amx-base.log" -a -e "$T/l/base-build.log"
has "cpu: the CPU" "$T/l/cpu.txt" '^flags: '
# without a base, ours only; a bf16 path the CPU lacks and a failed PyTorch said, not fatal
rm "$R/.gpu-carry/base.tar.gz"
step cpu '@(cifar10-bench *--bf16-isa avx512bf16*|python3 scripts/bench_torch.py --device cpu --model workshop-cnn *)'
expect_rc 0 "cpu without a base"
lacks "cpu without a base: no base" "$S" 'against the base'
check "cpu without a base: no base line" bash -c "! grep -q '^base:' '$T/out'"
has "cpu without a base: ours" "$S" '^workshop-cnn, batch 128, 2 threads: ours bf16 on amx 50.0 images/s$'
has "cpu: a path that failed" "$S" '^airbench94, batch 512: ours bf16 on avx512bf16: cifar10-bench: a planted failure$'
has "cpu: PyTorch's failure said" "$S" '^PyTorch fp32 failed: see cpu-workshop-cnn-torch.log$'
has "cpu: the checks after PyTorch's failure" "$S" '^gpu-check cpu: 0 check\(s\) failed$'

# train: the workshop CNN's 10 epochs, scored; airbench94's recipe in fp32 and bf16
step train
expect_rc 0 train
expect_line "train: the workshop CNN's time" "$S" 1 '^workshop-cnn, 10 epochs, its recipe, 1 GPU: [0-9]+ s wall \(process start to model file\)$'
expect_line "train: its score" "$S" 2 '^Accuracy of the network on the 10000 test images: 90 %$'
expect_line "train: airbench94's time" "$S" 3 '^airbench94, 9.9 epochs, no per-epoch evaluation, 1 GPU: [0-9]+ s wall'
expect_line "train: airbench94's score" "$S" 4 '^final test accuracy 90.50% '
expect_line "train: bf16's time" "$S" 5 '^airbench94 --precision bf16, the same: [0-9]+ s wall$'
expect_line "train: bf16's score" "$S" 6 '^final test accuracy 90.50% '
has "train: bf16 reached the program" "$FAKE_LOG" '^cifar10-train --device=cuda --model airbench94 --precision bf16 --no-eval '
check "train: the logs" test -s "$T/l/train-airbench94-bf16.log" -a -s "$T/l/test.log"

# stamp: the checkout's commit into .gpu-carry/source.txt, "with uncommitted changes" when a
# tracked file differs; refused outside a git checkout and without .gpu-carry.
G=$T/stamp
mkdir -p "$G/scripts" "$G/.gpu-carry"
cp "$SRC/scripts/gpu-check.sh" "$G/scripts/"
cd "$G" || exit 1
run bash scripts/gpu-check.sh stamp
expect_rc 1 "stamp outside a git checkout"
has "stamp: says why" "$T/err" 'is not a git checkout with a commit$'
git init -q && git add scripts && git -c user.name=t -c user.email=t@t commit -qm t
run bash scripts/gpu-check.sh stamp
expect_rc 0 "stamp"
has "stamp: the commit" .gpu-carry/source.txt "^commit $(git rev-parse HEAD)\$"
echo "# a change" >>scripts/gpu-check.sh
run bash scripts/gpu-check.sh stamp
has "stamp: an uncommitted change said" .gpu-carry/source.txt "^commit $(git rev-parse HEAD) with uncommitted changes\$"
rm -rf .gpu-carry
run bash scripts/gpu-check.sh stamp
expect_rc 1 "stamp without .gpu-carry"
cd "$SRC" || exit 1

summary "gpu-check.sh (stand-ins)"
