#!/usr/bin/env bash
# Command lines of both programs: usage errors exit 2 with one line naming the flag and
# pointing to --help; --help and --version exit 0; both --flag=value and --flag value parse.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

run "$BIN/cifar10-train" --help
expect_rc 0 "train --help"
expect_out "train --help lists flags" "--learning-rate"
expect_out "train --help lists exit codes" "Exit codes"
# The recipes' defaults come from their tables in model/nets.c, one column per known network.
expect_out "train --help recipe columns" "^ +workshop-cnn +airbench94$"
expect_out "train --help recipe epochs" "^  --epochs E +epochs +10 +9\.9$"
expect_out "train --help recipe batch" "^  --batch-size N +images per step +128 per rank +1024 in all$"
expect_out "train --help recipe momentum" "^  --momentum M +SGD momentum +0\.9 +0\.85, Nesterov$"
expect_out "train --help recipe whitening" "^  --whiten-images N +whitening images +0 +5000$"
run "$BIN/cifar10-train" --version
expect_rc 0 "train --version"
expect_out "train --version" "^cifar10-train [0-9]+\.[0-9]+\.[0-9]+$"

bad=(
  "--bogus|--bogus: unknown flag (try --help)"
  "--epochs abc|--epochs: 'abc' is not a finite number (try --help)"
  "--epochs=0|--epochs: 0 must be > 0"
  "--epochs=12x|--epochs: '12x' is not a finite number"
  "--batch-size 0|--batch-size: 0 is out of range"
  "--learning-rate 0|--learning-rate: 0 must be > 0"
  "--learning-rate=-1|--learning-rate: -1 must be > 0"
  "--learning-rate inf|--learning-rate: 'inf' is not a finite number"
  "--learning-rate nan|--learning-rate: 'nan' is not a finite number"
  "--momentum -0.1|--momentum: -0.1 must be >= 0"
  "--weight-decay x|--weight-decay: 'x' is not a finite number"
  "--print-freq 0|--print-freq: 0 is out of range"
  "--threads 0|--threads: 0 is out of range"
  "--seed -3|--seed: '-3' is not a non-negative integer"
  "--resume maybe|--resume: 'maybe' is not auto, never or require"
  "--lr-schedule steep|--lr-schedule: 'steep' is not cosine, triangle or constant"
  "--warmup-epochs=-1|--warmup-epochs: -1 must be >= 0"
  "--model vgg|--model: 'vgg' is not a network this build knows (workshop-cnn, airbench94) (try --help)"
  "--label-smoothing 1.5|--label-smoothing: 1.5 is above 1"
  "--lookahead -1|--lookahead: -1 is out of range"
  "--tta 3|--tta: 3 is out of range 0..2"
)
for case in "${bad[@]}"; do
  args=${case%%|*} want=${case#*|}
  # shellcheck disable=SC2086 # split the flag and its value
  run "$BIN/cifar10-train" $args "$T/data"
  expect_rc 2 "train $args"
  expect_err "train $args" "$want"
done
run "$BIN/cifar10-train" --epochs
expect_rc 2 "train flag without value"
expect_err "train flag without value" "--epochs: missing value (try --help)"
run "$BIN/cifar10-train"
expect_rc 2 "train without DATA"
expect_err "train without DATA" "missing DATA"
run "$BIN/cifar10-train" a b
expect_rc 2 "train with two DATA"
expect_err "train with two DATA" "b: unexpected extra argument"
# Both spellings parse (the run then fails on the missing data, exit 1, not 2).
run "$BIN/cifar10-train" --epochs 2 --batch-size=8 --learning-rate 0.1 --momentum=0 --seed 9 "$T/nope"
expect_rc 1 "train --flag value and --flag=value"
expect_err "train missing data" "$T/nope: No such file or directory"
# A bad value of a run-time switch: one line naming it, before any data is read.
"$BIN/tests/make_synthetic" "$T/syn" 8 8 >/dev/null || exit 1
run env CIFAR10_CUDA_GRAPHS=maybe "$BIN/cifar10-train" --device cpu --model-file "$T/syn.safetensors" "$T/syn"
expect_rc 1 "train CIFAR10_CUDA_GRAPHS=maybe"
expect_err "train CIFAR10_CUDA_GRAPHS=maybe" "CIFAR10_CUDA_GRAPHS=maybe: expected on or off"
run env CIFAR10_CUDA_AWARE_MPI=yes "$BIN/cifar10-train" --device cpu --model-file "$T/syn.safetensors" "$T/syn"
expect_rc 1 "train CIFAR10_CUDA_AWARE_MPI=yes"
expect_err "train CIFAR10_CUDA_AWARE_MPI=yes" "CIFAR10_CUDA_AWARE_MPI=yes: expected 0 or 1"
run env CIFAR10_CUDA_AWARE_MPI=true "$BIN/cifar10-bench" --device cpu --steps 1 --runs 1 --warmup 0
expect_rc 1 "bench CIFAR10_CUDA_AWARE_MPI=true"
expect_err "bench CIFAR10_CUDA_AWARE_MPI=true" "CIFAR10_CUDA_AWARE_MPI=true: expected 0 or 1"
# A batch whose largest activation would hold 2^31 values (the GPU kernels' 32-bit counts):
# refused before anything is allocated, naming the limit and the activation.
run "$BIN/cifar10-train" --device cpu --batch-size 34917 --model-file "$T/syn.safetensors" "$T/syn"
expect_rc 2 "train batch past airbench94's limit"
expect_err "train batch past airbench94's limit" \
  "--batch-size 34917: 34917 images per batch: airbench94 takes at most 34916 (its 64x31x31 activation would hold 2^31 values or more)"
run "$BIN/cifar10-bench" --device cpu --model workshop-cnn --batch-size 32768
expect_rc 2 "bench batch past the workshop CNN's limit"
expect_err "bench batch past the workshop CNN's limit" \
  "--batch-size 32768: 32768 images per batch: workshop-cnn takes at most 32767 (its 64x32x32 activation would hold 2^31 values or more)"
# Under mpirun: one line for the whole job, same exit code.
run mpirun -np 2 "$BIN/cifar10-train" --epochs=-5 "$T/data"
expect_rc 2 "mpirun train bad flag"
expect_err "mpirun train bad flag" "--epochs: -5 must be > 0"

run "$BIN/cifar10-predict" --help
expect_rc 0 "predict --help"
expect_out "predict --help" "--max-pixels"
run "$BIN/cifar10-predict" --version
expect_out "predict --version" "^cifar10-predict [0-9]+\.[0-9]+\.[0-9]+$"
for case in "|no IMAGE given" "--top 0 x.png|--top: 0 is out of range" "--tta 3 x.png|--tta: 3 is out of range" \
  "--max-pixels abc x.png|--max-pixels: 'abc'" "--device tpu x.png|--device: 'tpu' is not cpu, cuda or auto" \
  "--json=1 x.png|--json=1" "--frobnicate x.png|--frobnicate: unknown flag (try --help)" \
  "--threads 0 x.png|--threads: 0 is out of range" "x.png --top|--top: missing value"; do
  args=${case%%|*} want=${case#*|}
  # shellcheck disable=SC2086
  run "$BIN/cifar10-predict" $args
  expect_rc 2 "predict $args"
  expect_err "predict $args" "$want"
done
run "$BIN/cifar10-predict" --model-file "$T/none.safetensors" x.png
expect_rc 1 "predict without a model file"
expect_err "predict without a model file" "$T/none.safetensors: No such file or directory"

run "$BIN/cifar10-test" --help
expect_rc 0 "test --help"
expect_out "test --help" "--min-accuracy"
run "$BIN/cifar10-test" --version
expect_rc 0 "test --version"
for case in "--min-accuracy 101|--min-accuracy: 101 is above 100" "--min-accuracy x|--min-accuracy: 'x' is not a finite number" \
  "--batch-size 0|--batch-size: 0 is out of range" "--frobnicate|--frobnicate: unknown flag (try --help)" \
  "--threads 0|--threads: 0 is out of range"; do
  args=${case%%|*} want=${case#*|}
  # shellcheck disable=SC2086
  run "$BIN/cifar10-test" $args "$T/data"
  expect_rc 2 "test $args"
  expect_err "test $args" "$want"
done
run "$BIN/cifar10-test" --model-file x.safetensors --tta
expect_rc 2 "test flag without value"
expect_err "test flag without value" "--tta: missing value"
run "$BIN/cifar10-test" --model-file x.safetensors
expect_rc 2 "test without DATA"
expect_err "test without DATA" "missing DATA"
# cifar10-bench: flags, and a tiny run whose accounting must add up (the FLOP count per image
# is the model's, independent of timing: 0.81 GFLOP forward + backward; every layer listed).
run "$BIN/cifar10-bench" --steps 0
expect_rc 2 "bench --steps 0"
expect_err "bench --steps 0" "--steps: 0 is out of range"
run "$BIN/cifar10-bench" --isa sse9
expect_rc 2 "bench --isa sse9"
expect_err "bench --isa sse9" "--isa: 'sse9' is not a vector path this CPU supports"
run "$BIN/cifar10-bench" --bf16-isa sse9
expect_rc 2 "bench --bf16-isa sse9"
expect_err "bench --bf16-isa sse9" "--bf16-isa: 'sse9' is not a bf16 path this CPU supports"
for case in "--model vgg|--model: 'vgg' is not a network this build knows (workshop-cnn, airbench94)" \
  "--bucket-mb x|--bucket-mb: 'x' is not a finite number" "--device tpu|--device: 'tpu' is not cpu, cuda or auto" \
  "--precision fp8|--precision: 'fp8' is not fp32, bf16 or auto" "--frobnicate|--frobnicate: unknown flag" \
  "--runs|--runs: missing value"; do
  args=${case%%|*} want=${case#*|}
  # shellcheck disable=SC2086
  run "$BIN/cifar10-bench" $args
  expect_rc 2 "bench $args"
  expect_err "bench $args" "$want"
done
run "$BIN/cifar10-bench" --help
expect_rc 0 "bench --help"
expect_out "bench --help lists its flags" "--first-bias-stopped"
run "$BIN/cifar10-bench" --batch-size 4 --warmup 0 --steps 1 --runs 1 --threads 1 --precision bf16 --bf16-isa generic
expect_out "bench --bf16-isa generic runs the plain-C bf16 path" "^result: .* device=cpu-bf16 isa=generic "
# The AMX tiles' operations in plain C: a whole step with the convolutions on the tiles' direct
# method, but the first layer (3 channels): its forward by the few-channel direct kernel, as on
# every path, its filter gradient by im2col on the tiles.
# Its loops are timed at each pass's first call (in the untimed step: the products counted
# below are a step's own), three candidates twice each on the batch's 2 images.
run "$BIN/cifar10-bench" --model workshop-cnn --batch-size 2 --warmup 1 --steps 1 --runs 1 --threads 1 --precision bf16 \
  --bf16-isa amx-emulated
expect_out "bench --bf16-isa amx-emulated runs a step" "^result: .* device=cpu-bf16 isa=amx-emulated "
expect_out "bench: tiles run 16+ channel convolutions direct, loops timed" \
  "^2 +conv 32->64 32x32 +backward-filter +direct on tiles, amx-emulated, loops (prefetch|resident|plain) \(ms on 2 images: prefetch [0-9.]+ resident [0-9.]+ plain [0-9.]+\)$"
timed=$(sed -n "s/^the tiles' loops: timed for \([0-9]*\) convolution passes at their first calls, [0-9]* ms in all .*/\1/p" "$T/out")
passes=$(grep -c "direct on tiles, amx-emulated, loops " "$T/out")
check "bench: the loops timed once per pass on the tiles (workshop CNN: 5 convolutions x 3)" \
  test "${timed:-0}" = "$passes" -a "$passes" = 15
expect_out "bench: RGB's forward direct on the tiles' path" "^0 +conv 3->32 32x32 +forward +direct, amx-emulated$"
expect_out "bench: tiles keep im2col for RGB's filter gradient" \
  "^0 +conv 3->32 32x32 +backward-filter +im2col \+ GEMM, amx-emulated$"
# amx-cost (CPUs with AVX512_BF16): amx's code without its tile instructions, a timing tool; it
# leaves out exactly the TDPBF16PS that the plain-C twin carries out for the same step.
products() { sed -n "s/^tile products: \([0-9]*\) TDPBF16PS a step (rank 0), .*, $1\$/\1/p" "$T/out"; }
emulated=$(products "carried out in plain C")
check "bench counts amx-emulated's tile products" test "${emulated:-0}" -gt 0
run "$BIN/cifar10-bench" --model workshop-cnn --batch-size 2 --warmup 0 --steps 1 --runs 1 --threads 1 --precision bf16 \
  --bf16-isa amx-cost
if grep -qw avx512_bf16 /proc/cpuinfo; then
  expect_out "bench --bf16-isa amx-cost runs a step" "^result: .* device=cpu-bf16 isa=amx-cost "
  check "amx-cost leaves out the tile products amx-emulated carries out" \
    test "$(products "left out (amx-cost: the results are meaningless)")" = "$emulated"
else
  expect_rc 2 "bench --bf16-isa amx-cost without AVX512_BF16"
  expect_err "bench --bf16-isa amx-cost without AVX512_BF16" "--bf16-isa: 'amx-cost' is not a bf16 path this CPU supports"
fi
# amx-prefetch, amx-resident and amx-noprefetch (amx with its loops fixed): where amx runs; refused
# elsewhere.
bench_tiles() { run "$BIN/cifar10-bench" --model workshop-cnn --batch-size 2 --warmup 0 --steps 1 --runs 1 --threads 1 --precision bf16 --bf16-isa "$1"; }
bench_tiles amx
amx_rc=$rc
for v in amx-prefetch amx-resident amx-noprefetch; do
  bench_tiles $v
  if [[ $amx_rc == 0 ]]; then
    expect_out "bench --bf16-isa $v runs a step" "^result: .* device=cpu-bf16 isa=$v "
  else
    expect_rc 2 "bench --bf16-isa $v without AMX"
    expect_err "bench --bf16-isa $v without AMX" "--bf16-isa: '$v' is not a bf16 path this CPU supports"
  fi
done
run "$BIN/cifar10-bench" --batch-size 4 --warmup 0 --steps 1 --runs 1 --threads 1 --isa generic
expect_rc 0 "bench tiny run"
expect_out "bench FLOP count per image" "^compute: 0\.81 GFLOP per image"
expect_out "bench lists the last layer" "^21 +linear 512->10"
# Per-layer times from the timer marks: layer 2's convolution has both
# passes timed (non-zero milliseconds); the methods say which code ran each pass.
# shellcheck disable=SC2016 # awk's fields
check "bench times layer 2's forward and backward" awk '$1 == 2 && $2 == "conv" && $5 > 0 && $8 > 0 { ok = 1 } END { exit !ok }' "$T/out"
expect_out "bench names each convolution pass's method" "^0 +conv 3->32 32x32 +forward +direct, generic$"
expect_out "bench names the direct filter gradient" "^0 +conv 3->32 32x32 +backward-filter +direct, generic$"
expect_out "bench names a Winograd pass" "^2 +conv 32->64 32x32 +backward-filter +Winograd F\(4x4\), generic$"
expect_out "bench measured the generic peak" "generic [0-9.]+ \(1 thread\)"
expect_out "bench result line" "^result: images_per_s=[0-9.]+ ranks=1 threads=1 batch=4 device=cpu isa=generic peak_gflops=[0-9.]+ fraction_of_peak=[0-9.]+ rss_mb=[0-9]+$"
# shellcheck disable=SC2016 # an awk program, not shell
check "bench images/s is positive" awk '/^result:/ { split($2, a, "="); exit !(a[2] > 0) }' "$T/out"
# --first-bias-stopped: airbench94's steps once its whitening bias stops (the second convolution's
# input gradient, 0.027 GFLOP per image, is no longer computed); the workshop recipe never stops it.
run "$BIN/cifar10-bench" --model airbench94 --batch-size 2 --warmup 0 --steps 1 --runs 1 --threads 1 --first-bias-stopped
expect_rc 0 "bench --first-bias-stopped"
expect_out "bench FLOP count per image, first bias stopped" "^compute: 0\.68 GFLOP per image"
run "$BIN/cifar10-bench" --first-bias-stopped
expect_rc 2 "bench --first-bias-stopped, workshop-cnn"
expect_err "bench --first-bias-stopped, workshop-cnn" "--first-bias-stopped: this network's recipe trains its first layer's bias throughout"

# scripts/bench.sh: usage errors, and a tiny two-round run (no PyTorch) whose summary figure is
# the median of the rounds' figures it logged.
SRC=$(cd "$(dirname "$0")/.." && pwd)
run env BUILD="$BIN" "$SRC/scripts/bench.sh" --rounds 0
expect_rc 2 "bench.sh --rounds 0"
check "bench.sh --rounds 0 says why" grep -q "^bench.sh: expected a positive integer, got '0'" "$T/err"
run env BUILD="$BIN" "$SRC/scripts/bench.sh" --base no-such-commit --no-torch
expect_rc 2 "bench.sh --base no-such-commit"
check "bench.sh --base names the commit" grep -q "^bench.sh: --base: no commit no-such-commit" "$T/err"
run env BUILD="$BIN" "$SRC/scripts/bench.sh" --model workshop-cnn --threads 1 --rounds 2 --runs 1 --steps 1 \
  --warmup 0 --no-torch --no-bf16 --out "$T/bench"
expect_rc 0 "bench.sh tiny run"
expect_out "bench.sh names the machine" "^== machine: .*, [0-9]+ CPUs"
expect_out "bench.sh ran round 2" "^== round 2 of 2"
expect_out "bench.sh per-layer table" "^21 +linear 512->10"
check "bench.sh logged one figure per round" test "$(grep -c '^workshop-cnn|ours 1x1|' "$T/bench/figures")" = 2
# shellcheck disable=SC2016 # an awk program, not shell
want=$(awk -F'|' '{ s += $3 } END { printf "%.1f", s / 2 }' "$T/bench/figures")
expect_out "bench.sh summary is the median of the rounds" "^  workshop-cnn +ours 1x1 +$want images/s"
# --summary DIR: the summary of a kept run; ratios of the best configurations, and ours in fp32
# against PyTorch's bf16 autocast only where autocast is PyTorch's fastest.
mkdir -p "$T/bench-sum"
printf '%s\n' 'm|ours 1x2|100' 'm|ours 2x1|90' 'm|ours 1x2|130' 'm|ours 2x1|120' 'm|ours 1x2|110' 'm|ours 2x1|80' \
  'm|torch 1x2 channels_last|40' 'm|torch 1x2 channels_last|60' 'm|torch 1x2 channels_last|50' \
  'm|autocast 1x2 channels_last|70' 'm|autocast 1x2 channels_last|90' 'm|autocast 1x2 channels_last|75' \
  'n|ours 1x2|100' 'n|torch 2x1 contiguous|50' 'n|autocast 1x2 contiguous|40' >"$T/bench-sum/figures"
run "$SRC/scripts/bench.sh" --summary "$T/bench-sum"
expect_rc 0 "bench.sh --summary"
expect_out "bench.sh --summary counts the rounds" "^== summary \(median of 3 round"
expect_out "bench.sh --summary: a median" "^  m +ours 2x1 +90.0 images/s"
expect_out "bench.sh --summary: best over best" "^  m: ours \(ours 1x2\) 110.0 / eager PyTorch \(torch 1x2 channels_last\) 50.0 = 2.20"
expect_out "bench.sh --summary: fp32 against a faster autocast" "^  m: ours \(ours 1x2\) 110.0 / PyTorch's fastest, bf16 autocast \(autocast 1x2 channels_last\) 75.0 = 1.47"
check "bench.sh --summary: no autocast line where fp32 eager is PyTorch's fastest" \
  bash -c "! grep -q '^  n: .*bf16 autocast' '$T/out'"
run "$SRC/scripts/bench.sh" --summary "$T/none"
expect_rc 2 "bench.sh --summary of no run"
check "bench.sh --summary says what it expected" grep -q "^bench.sh: --summary: no figures in $T/none" "$T/err"
run env BUILD="$BIN" "$SRC/scripts/bench.sh" --isa avx512 --no-torch
expect_rc 2 "bench.sh --isa avx512"
check "bench.sh --isa says what it takes" grep -q "^bench.sh: --isa takes avx2 (the AVX2-only CPUs' code), not 'avx512'" "$T/err"
if grep -qw avx2 /proc/cpuinfo; then
  run env BUILD="$BIN" "$SRC/scripts/bench.sh" --model workshop-cnn --threads 1 --rounds 1 --runs 1 --steps 1 \
    --warmup 0 --no-torch --isa avx2 --out "$T/bench-avx2"
  expect_rc 0 "bench.sh --isa avx2 tiny run"
  expect_out "bench.sh --isa avx2 says so" "^== both sides on AVX2 code"
  check "bench.sh --isa avx2 runs ours on AVX2" grep -q "^result: .* isa=avx2 " "$T/bench-avx2/workshop-cnn.ours_1x1.1"
fi

# scripts/same-behaviour.sh (a refactoring's check; too slow for the suites: two builds and
# eight short runs): its usage errors.
run "$SRC/scripts/same-behaviour.sh"
expect_rc 2 "same-behaviour.sh without a commit"
check "same-behaviour.sh says how to call it" grep -q "^usage: scripts/same-behaviour.sh REV" "$T/err"
run "$SRC/scripts/same-behaviour.sh" no-such-commit
expect_rc 2 "same-behaviour.sh no-such-commit"
check "same-behaviour.sh names the commit" grep -q "^same-behaviour.sh: no commit no-such-commit" "$T/err"

# The CUDA plugin's loader (kernels/cuda_load.c), on a machine without a GPU. cifar10-test names
# the device it chose before it reads anything, so a missing model file ends each run early.
# Without an NVIDIA driver the plugin is never opened (no cuDNN, no cuBLAS in the process); with
# the toolkit's stub driver (libcuda.so: loads, finds no GPU) it is, and every way the plugin
# can be wrong is one clear reason, a CPU run under auto and exit 1 under --device=cuda.
cuda_plugin_cases() {
  local test_cmd=(--model-file "$T/none.safetensors" "$T/data")
  run env LD_DEBUG=files "$BIN/cifar10-test" "${test_cmd[@]}"
  if grep -q "no GPU visible: no NVIDIA driver" "$T/out"; then
    check "no driver: the plugin is not opened" bash -c "! grep -qE 'libcifar10-cuda|libcudnn|libcublas' '$T/err'"
  else
    echo "test_cli: the no-driver case: skipped: this machine has an NVIDIA driver"
  fi
  local stub=/usr/local/cuda/lib64/stubs/libcuda.so
  if [[ ! -e $stub ]]; then
    echo "test_cli: CUDA plugin cases with the stub driver: skipped: no $stub"
    return
  fi
  mkdir -p "$T/stub" "$T/lone" "$T/bad" "$T/old"
  ln -sf "$stub" "$T/stub/libcuda.so.1"
  run env LD_LIBRARY_PATH="$T/stub" LD_DEBUG=files "$BIN/cifar10-test" "${test_cmd[@]}"
  expect_out "stub driver: the plugin is opened and finds no GPU" "^device: cpu \(auto: no GPU visible: CUDA driver is a stub library\)\$"
  check "stub driver: the plugin brought cuDNN and cuBLAS" grep -q "file=libcudnn.*needed by .*libcifar10-cuda.so" "$T/err"
  # The program alone, without the plugin; beside a file that is not a library; beside a
  # plugin of another interface version.
  cp "$BIN/cifar10-test" "$T/lone/"
  mkdir -p "$T/bad/lib/cifar10-dp" "$T/old/lib/cifar10-dp"
  cp "$BIN/cifar10-test" "$T/bad/" && echo "not a library" >"$T/bad/lib/cifar10-dp/libcifar10-cuda.so"
  cp "$BIN/cifar10-test" "$T/old/"
  printf '#include <stddef.h>\nstatic const int v[2] = {0, 0};\nconst void *cuda_plugin_api(void) { return v; }\n' >"$T/old/p.c"
  cc -shared -fPIC "$T/old/p.c" -o "$T/old/lib/cifar10-dp/libcifar10-cuda.so"
  local dir why
  for dir in lone bad old; do
    case $dir in
      lone) why="no CUDA backend (libcifar10-cuda.so) in $T/lone/lib/cifar10-dp or $T/lone/../lib/cifar10-dp" ;;
      bad) why="the CUDA backend $T/bad/lib/cifar10-dp/libcifar10-cuda.so cannot be loaded: " ;;
      old) why="the CUDA backend $T/old/lib/cifar10-dp/libcifar10-cuda.so was built for another version of this program" ;;
    esac
    run env LD_LIBRARY_PATH="$T/stub" "$T/$dir/cifar10-test" "${test_cmd[@]}"
    check "plugin $dir: auto runs on the CPU and says why" grep -qF "device: cpu (auto: no GPU visible: $why" "$T/out"
    run env LD_LIBRARY_PATH="$T/stub" "$T/$dir/cifar10-test" --device=cuda "${test_cmd[@]}"
    expect_rc 1 "plugin $dir: --device=cuda"
    expect_err "plugin $dir: --device=cuda says why" "--device=cuda: no GPU visible: $why"
  done
}

# Where nvcc and cuDNN are installed (CI: /usr/local/cuda), the binaries must carry the CUDA
# backend: a build that quietly left it out would let a CUDA break pass unnoticed.
if { command -v nvcc || [[ -x /usr/local/cuda/bin/nvcc ]]; } >/dev/null && [[ -e /usr/local/cuda/include/cudnn.h || -e /usr/include/cudnn.h ]]; then
  check "the CUDA backend is built (nvcc and cuDNN are here): the plugin exports its entry point" \
    grep -qw cuda_plugin_api <(nm -D --defined-only "$BIN/lib/cifar10-dp/libcifar10-cuda.so")
  check "cifar10-train carries the plugin's loader" grep -q "kernels_cuda_devices" <(nm "$BIN/cifar10-train")
  check "cifar10-test carries the plugin's loader" grep -q "kernels_cuda_devices" <(nm "$BIN/cifar10-test")
  check "no program links a CUDA library (the plugin does)" \
    bash -c "! ldd '$BIN/cifar10-train' '$BIN/cifar10-test' '$BIN/cifar10-bench' | grep -qE 'libcudnn|libcublas|libcudart'"
  check "the plugin links cuDNN and cuBLAS" \
    bash -c "ldd '$BIN/lib/cifar10-dp/libcifar10-cuda.so' | grep -q libcudnn && ldd '$BIN/lib/cifar10-dp/libcifar10-cuda.so' | grep -q libcublas"
  cuda_plugin_cases
  # The Makefile asks nvcc for the toolkit root, so an nvcc on PATH that is a wrapper script in
  # another directory (as /usr/local/bin/nvcc on CI's machine) still finds cuDNN beside it.
  nvcc_real=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
  mkdir -p "$T/wrap"
  printf '#!/bin/sh\nexec %s "$@"\n' "$nvcc_real" >"$T/wrap/nvcc"
  chmod +x "$T/wrap/nvcc"
  env -u CUDA_HOME PATH="$T/wrap:/usr/bin:/bin" make -n -C "$(dirname "$0")/.." BUILD="$T/wrap-build" >"$T/wrap.log" 2>&1
  check "make finds cuDNN through an nvcc wrapper script on PATH" \
    grep -q "^CUDA: nvcc .* at $T/wrap/nvcc, cuDNN in .*; CUDA backend for" "$T/wrap.log"
fi

# A build's settings changed in the same BUILD (CUDA=0, then the emulated backend) compile its
# objects again: app/device.o decides whether the programs look for a CUDA backend at all.
make_obj() { make -C "$(dirname "$0")/.." BUILD="$T/flags-build" "$@" "$T/flags-build/app/device.o" 2>&1; }
make_obj CUDA=0 >"$T/flags.0" && make_obj CUDA=0 >"$T/flags.1" && make_obj CUDA=emu >"$T/flags.2" &&
  make_obj CUDA=emu >"$T/flags.3"
check "make: app/device.o compiled on the first build" grep -q "CC    app/device.c" "$T/flags.0"
check "make: the same settings again compile nothing" bash -c "! grep -q '  CC ' '$T/flags.1'"
check "make: other settings (CUDA=emu after CUDA=0) compile it again" grep -q "CC    app/device.c" "$T/flags.2"
check "make: ... with the emulated backend's define" grep -q "CIFAR10_CUDA_EMU=1" "$T/flags-build/build-flags"
check "make: and then nothing more" bash -c "! grep -q '  CC ' '$T/flags.3'"

# --device: bad values are usage errors; with no GPU visible (CUDA_VISIBLE_DEVICES= hides any
# this machine has), --device=cuda is one clear line and exit 1 in every program, and auto
# falls back to the CPU and says why.
for prog in train test bench; do
  run "$BIN/cifar10-$prog" --device=tpu "$T/data"
  [[ $prog == bench ]] && run "$BIN/cifar10-$prog" --device=tpu
  expect_rc 2 "$prog --device=tpu"
  expect_err "$prog --device=tpu" "--device: 'tpu' is not cpu, cuda or auto"
  args=("$T/data")
  [[ $prog == bench ]] && args=()
  run env CUDA_VISIBLE_DEVICES= "$BIN/cifar10-$prog" --device=cuda "${args[@]}"
  expect_rc 1 "$prog --device=cuda without a GPU"
  expect_err "$prog --device=cuda without a GPU" "--device=cuda: "
  check "$prog --device=cuda says why" grep -qE -- "--device=cuda: (no GPU visible: |this build has no CUDA backend)" "$T/err"
done
run env CUDA_VISIBLE_DEVICES= "$BIN/cifar10-train" --epochs 1 --batch-size 2 --no-eval --model-file "$T/m.safetensors" "$T/nope"
expect_out "train --device=auto without a GPU says cpu and why" "^rank 0: cpu \(auto: (no GPU visible: |this build has no CUDA backend)"
# --precision: bad values are usage errors; auto names what it chose and why (airbench94's
# recipe allows bf16, which auto takes on AMX tiles, the CPU kernels' line says "bf16: amx"; the
# workshop CNN's stays fp32); bf16 runs where the CPU has AVX512_BF16, runs the same sums on AVX2
# FMA where it has AVX2 (and says so), and is one clear line and exit 1 where it has neither.
for prog in train bench; do
  run "$BIN/cifar10-$prog" --precision fp16 "$T/data"
  expect_rc 2 "$prog --precision fp16"
  expect_err "$prog --precision fp16" "--precision: 'fp16' is not fp32, bf16 or auto"
done
run "$BIN/cifar10-train" --device cpu --epochs 1 --batch-size 2 --no-eval --model-file "$T/m.safetensors" "$T/nope"
if grep -q '(bf16: amx)' "$T/out"; then
  expect_out "train --precision auto on AMX tiles: bf16 and why" "^rank 0: cpu, bf16 products \(auto: AMX tiles, recipe allows\)\$"
else
  expect_out "train --precision auto without AMX tiles: fp32 and why" "^rank 0: cpu, fp32 \(auto: no AMX tiles\)\$"
fi
run "$BIN/cifar10-train" --device cpu --model workshop-cnn --epochs 1 --batch-size 2 --no-eval --model-file "$T/m.safetensors" "$T/nope"
expect_out "train --model workshop-cnn: auto says fp32 and why" "^rank 0: cpu, fp32 \(auto: (no AMX tiles|the recipe is fp32)\)\$"
run "$BIN/cifar10-train" --device cpu --precision bf16 --epochs 1 --batch-size 2 --no-eval --model-file "$T/m.safetensors" "$T/nope"
if grep -qw avx512_bf16 /proc/cpuinfo; then
  expect_out "train --precision bf16 on an AVX512_BF16 CPU" "^rank 0: cpu, bf16 products \(--precision bf16\)\$"
elif grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  expect_out "train --precision bf16 on an AVX2 CPU" \
    "^rank 0: cpu, bf16 products \(--precision bf16; no AVX512_BF16: its sums on AVX2 FMA, no faster than fp32\)\$"
else
  expect_rc 1 "train --precision bf16 without AVX512_BF16 or AVX2"
  expect_err "train --precision bf16 without AVX512_BF16 or AVX2" "--precision=bf16: this CPU has neither AVX512_BF16 nor AVX2"
fi
run "$BIN/cifar10-train" --metrics-file "" "$T/data"
expect_rc 2 "train --metrics-file ''"
expect_err "train --metrics-file ''" "--metrics-file: empty file name"
run "$BIN/cifar10-test" --json "" "$T/data"
expect_rc 2 "test --json ''"
expect_err "test --json ''" "--json: empty file name"
run "$BIN/cifar10-train" --tensorboard-dir "" "$T/data"
expect_rc 2 "train --tensorboard-dir ''"
expect_err "train --tensorboard-dir ''" "--tensorboard-dir: empty directory name"
run "$BIN/cifar10-train" --bucket-mb -1 "$T/data"
expect_rc 2 "train --bucket-mb -1"
expect_err "train --bucket-mb -1" "--bucket-mb: -1 must be >= 0"
run "$BIN/cifar10-train" --bucket-mb 2000 "$T/data"
expect_rc 2 "train --bucket-mb 2000"
expect_err "train --bucket-mb 2000" "--bucket-mb: 2000 is above 1024"

# A timing tool (docs/benchmark.md): a line per loop, and bad usage refused.
run "$BIN/tests/tiles_time" --path amx-emulated --reps 1 2 16 16 4
expect_rc 0 "tiles_time on the tiles' plain-C twin"
expect_out "tiles_time: a line per loop" \
  "^tiles: path=amx-emulated threads=[0-9]+ N=2 C=16 K=16 H=4 loops=resident fwd_ms=[0-9.]+/[0-9.]+ dx_ms=[0-9.]+/[0-9.]+ dw_ms=[0-9.]+/[0-9.]+\$"
run "$BIN/tests/tiles_time" 2 8 16 4
expect_rc 2 "tiles_time with fewer than 16 channels"

summary test_cli
