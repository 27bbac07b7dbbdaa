#!/usr/bin/env bash
# Training-throughput benchmark (`make bench` runs this after building).
#
#   scripts/bench.sh [--threads N] [--runs N] [--steps N] [--no-torch] [--no-airbench] [--no-bf16]
#
# (CPU backend; GPUs: scripts/gpu-check.sh bench)
# 1. build/cifar10-bench: 1 rank x N threads (N: the CPUs this process may use), full training
#    steps of the workshop CNN at batch 128, per-layer times and GFLOP/s, the FP32 FMA peak
#    measured in the same program per vector path, peak resident memory;
# 2. the same with mpirun: N ranks x 1 thread (when N >= 2);
# 3. PyTorch (when python3 can import torch): same model, batch and thread count, in both
#    memory layouts (NHWC, `channels_last`, and NCHW); the ratio takes PyTorch's faster one
#    (TORCH_PYTHON: the interpreter whose torch is measured, default Debian's /usr/bin/python3);
# 4. airbench94 (unless --no-airbench): 1 to 3 again with --model airbench94 at batch 512 per
#    rank (PyTorch: scripts/bench_torch.py --model airbench94, batch 512, N threads);
# 5. bf16 (unless --no-bf16; only where the CPU has AVX512_BF16): both networks again, 1 rank x
#    N threads, with --precision bf16, against PyTorch's bf16 autocast (bench_torch.py --bf16);
# then a summary with the ratios. Nothing here is a pass/fail test: the figures are printed.
set -euo pipefail
cd "$(dirname "$0")/.."

threads=$(nproc)
runs=5
steps=5
torch=1
airbench=1
bf16=1
ab_batch=512 # airbench94's images per rank per step
while (($#)); do
  case $1 in
    --threads) threads=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --no-torch) torch=0; shift ;;
    --no-airbench) airbench=0; shift ;;
    --no-bf16) bf16=0; shift ;;
    -h | --help) sed -n '2,16s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
build=${BUILD:-build}
[[ -x $build/cifar10-bench ]] || { echo "bench.sh: $build/cifar10-bench missing: run make first" >&2; exit 1; }
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT

# The value of KEY on the "result:" line of a log.
result() { sed -n "s/^result: .*\b$2=\([^ ]*\).*/\1/p" "$1" | tail -n 1; }
# faster BASE: copies the faster of BASE-channels_last and BASE-contiguous to BASE (PyTorch at
# its best on this machine); layout_of BASE names the one it took.
faster() {
  local a b
  a=$(result "$1-channels_last" images_per_s) b=$(result "$1-contiguous" images_per_s)
  if awk -v a="$a" -v b="$b" 'BEGIN { exit !(a >= b) }'; then cp "$1-channels_last" "$1"; else cp "$1-contiguous" "$1"; fi
}
layout_of() { grep -q ", NHWC" "$1" && echo NHWC || echo NCHW; }

echo "== cifar10-bench: 1 rank x $threads thread(s)"
"$build/cifar10-bench" --device cpu --threads "$threads" --runs "$runs" --steps "$steps" | tee "$log/one"

if ((threads >= 2)); then
  echo
  echo "== cifar10-bench: $threads ranks x 1 thread (mpirun)"
  mpi=(mpirun -np "$threads" --bind-to core)
  if ((EUID == 0)); then mpi+=(--allow-run-as-root); fi
  "${mpi[@]}" "$build/cifar10-bench" --device cpu --threads 1 --runs "$runs" --steps "$steps" | tee "$log/ranks"
fi

# Debian's python3-torch installs for /usr/bin/python3; TORCH_PYTHON=/path/to/venv/bin/python
# measures another PyTorch (e.g. 2.x from PyPI) instead.
py=${TORCH_PYTHON:-/usr/bin/python3}
[[ -x $py ]] || py=python3
if ((torch)) && "$py" -c 'import torch' 2>/dev/null; then
  echo
  for layout in channels_last contiguous; do
    echo "== PyTorch: same model, batch 128, $threads thread(s), $layout"
    "$py" scripts/bench_torch.py --threads "$threads" --runs "$runs" --steps "$steps" --memory-format "$layout" |
      tee "$log/torch-$layout"
  done
  faster "$log/torch"
elif ((torch)); then
  echo
  echo "== PyTorch: skipped ($py cannot import torch; scripts/install-deps.sh --test installs it)"
fi

if ((airbench)); then
  echo
  echo "== cifar10-bench: airbench94, 1 rank x $threads thread(s), batch $ab_batch"
  "$build/cifar10-bench" --model airbench94 --batch-size "$ab_batch" --device cpu --threads "$threads" --runs "$runs" \
    --steps "$steps" | tee "$log/ab-one"
  if ((threads >= 2)); then
    echo
    echo "== cifar10-bench: airbench94, $threads ranks x 1 thread (mpirun), batch $ab_batch per rank"
    "${mpi[@]}" "$build/cifar10-bench" --model airbench94 --batch-size "$ab_batch" --device cpu --threads 1 \
      --runs "$runs" --steps "$steps" | tee "$log/ab-ranks"
  fi
  if ((torch)) && "$py" -c 'import torch, numpy' 2>/dev/null; then
    echo
    for layout in channels_last contiguous; do
      echo "== PyTorch: airbench94, batch $ab_batch, $threads thread(s), $layout"
      "$py" scripts/bench_torch.py --model airbench94 --batch-size "$ab_batch" --threads "$threads" --runs "$runs" \
        --steps "$steps" --memory-format "$layout" | tee "$log/ab-torch-$layout"
    done
    faster "$log/ab-torch"
  elif ((torch)); then
    echo
    echo "== PyTorch: airbench94 skipped ($py cannot import torch and numpy)"
  fi
fi

# bf16: NAME BATCH MODEL: ours with --precision bf16, and PyTorch's bf16 autocast (faster layout).
bf16_pair() {
  echo
  echo "== cifar10-bench --precision bf16: $3, 1 rank x $threads thread(s), batch $2"
  "$build/cifar10-bench" --model "$3" --precision bf16 --batch-size "$2" --device cpu --threads "$threads" \
    --runs "$runs" --steps "$steps" | tee "$log/$1-bf16"
  if ((torch)) && "$py" -c 'import torch, numpy' 2>/dev/null; then
    for layout in channels_last contiguous; do
      echo "== PyTorch bf16 autocast: $3, batch $2, $threads thread(s), $layout"
      "$py" scripts/bench_torch.py --bf16 --model "$3" --batch-size "$2" --threads "$threads" --runs "$runs" \
        --steps "$steps" --memory-format "$layout" | tee "$log/$1-bf16-torch-$layout"
    done
    faster "$log/$1-bf16-torch"
  fi
}
if ((bf16)) && grep -qw avx512_bf16 /proc/cpuinfo; then
  bf16_pair one 128 workshop-cnn
  ((airbench)) && bf16_pair ab-one "$ab_batch" airbench94
elif ((bf16)); then
  echo
  echo "== bf16: skipped (this CPU lacks AVX512_BF16: bf16 would run its sums on float FMA, no faster than fp32)"
fi

# bf16_summary NAME LABEL: ours in bf16 against ours in float and against PyTorch's autocast.
bf16_summary() {
  [[ -f $log/$1-bf16 ]] || return 0
  local b f t
  b=$(result "$log/$1-bf16" images_per_s) f=$(result "$log/$1" images_per_s)
  echo "cifar10-dp $2 bf16: $b images/s, $(result "$log/$1-bf16" fraction_of_peak | awk '{printf "%.1f", 100 * $1}')% of the measured bf16 peak; bf16 / fp32 = $(awk -v a="$b" -v b="$f" 'BEGIN { printf "%.2f", a / b }')"
  if [[ -f $log/$1-bf16-torch ]]; then
    t=$(result "$log/$1-bf16-torch" images_per_s)
    echo "PyTorch $2 bf16 autocast ($(layout_of "$log/$1-bf16-torch")): $t images/s; ours / PyTorch = $(awk -v a="$b" -v b="$t" 'BEGIN { printf "%.2f", a / b }')"
  fi
}

ours=$(result "$log/one" images_per_s)
echo
echo "== summary"
echo "cifar10-dp, 1 rank x $threads threads: $ours images/s, $(result "$log/one" fraction_of_peak | awk '{printf "%.1f", 100 * $1}')% of the measured FP32 FMA peak, peak RSS $(result "$log/one" rss_mb) MB"
if [[ -f $log/ranks ]]; then
  r=$(result "$log/ranks" images_per_s)
  echo "cifar10-dp, $threads ranks x 1 thread: $r images/s ($(awk -v a="$r" -v b="$ours" 'BEGIN { printf "%+.1f", 100 * (a / b - 1) }')% against 1 rank x $threads threads), peak RSS $(result "$log/ranks" rss_mb) MB per rank"
fi
if [[ -f $log/torch ]]; then
  t=$(result "$log/torch" images_per_s)
  echo "PyTorch ($(layout_of "$log/torch")), $threads threads: $t images/s; ours / PyTorch = $(awk -v a="$ours" -v b="$t" 'BEGIN { printf "%.2f", a / b }')"
fi
if [[ -f $log/ab-one ]]; then
  ab=$(result "$log/ab-one" images_per_s)
  echo "cifar10-dp airbench94, 1 rank x $threads threads, batch $ab_batch: $ab images/s, $(result "$log/ab-one" fraction_of_peak | awk '{printf "%.1f", 100 * $1}')% of the measured FP32 FMA peak, peak RSS $(result "$log/ab-one" rss_mb) MB"
  if [[ -f $log/ab-ranks ]]; then
    r=$(result "$log/ab-ranks" images_per_s)
    echo "cifar10-dp airbench94, $threads ranks x 1 thread, batch $ab_batch per rank: $r images/s ($(awk -v a="$r" -v b="$ab" 'BEGIN { printf "%+.1f", 100 * (a / b - 1) }')% against 1 rank x $threads threads), peak RSS $(result "$log/ab-ranks" rss_mb) MB per rank"
  fi
  if [[ -f $log/ab-torch ]]; then
    t=$(result "$log/ab-torch" images_per_s)
    echo "PyTorch airbench94 ($(layout_of "$log/ab-torch")), $threads threads, batch $ab_batch: $t images/s; ours / PyTorch = $(awk -v a="$ab" -v b="$t" 'BEGIN { printf "%.2f", a / b }')"
  fi
fi
bf16_summary one "workshop-cnn, 1 rank x $threads threads, batch 128"
bf16_summary ab-one "airbench94, 1 rank x $threads threads, batch $ab_batch"
