#!/usr/bin/env bash
# CPU training-throughput benchmark: ours against PyTorch's best configuration, side by side in
# one run, and optionally against a base commit (`make bench` runs this after building).
#
#   scripts/bench.sh [--model M] [--threads N] [--rounds K] [--runs N] [--steps N] [--warmup N]
#                    [--base REV] [--no-torch] [--no-compile] [--no-bf16] [--isa avx2] [--out DIR]
#   scripts/bench.sh --summary DIR     the summary again, from an earlier run's --out DIR
#
# Cases, each a full training step on random images (forward, loss, backward, update) at equal
# micro-batch per rank (--model workshop-cnn: 128, airbench94: 512; both by default):
#   ours        build/cifar10-bench, 1 process x N threads and N ranks x 1 thread (mpirun)
#   base        the same two for commit REV (--base: built CPU-only in a temporary worktree)
#   torch       PyTorch eager, 1 process x N threads and N independent processes x 1 thread
#               (each pinned to a core; their images/s summed; per-rank batch norm is PyTorch's
#               gradient accumulation, so no allreduce), each in NHWC and NCHW
#   compile     the same with torch.compile, 1 process x N threads, NHWC and NCHW
#   bf16        ours --precision bf16 against PyTorch's bf16 autocast, 1 x N (CPUs with
#               AVX512_BF16 or AMX only)
# The cases run in rounds (--rounds, default 3): one of each per round, in order, so a drifting
# machine moves all of them alike; each case's figure is the median over the rounds, the ratios
# are ours' best configuration over the peer's best; where PyTorch's bf16 autocast outruns its
# fp32 eager (CPUs whose bf16 rate is twice their FP32 FMA rate), ours in fp32 against autocast
# too. PyTorch's side runs scripts/bench_torch.py as it is at commit 0cefd96 (PEER_REV), so a
# change to the script cannot move the baseline.
# --isa avx2: both sides on their AVX2 code on an AVX-512 CPU, what an AVX2-only CPU runs (ours and
# the base with --isa avx2; PyTorch with ATEN_CPU_CAPABILITY=avx2 and ONEDNN_MAX_CPU_ISA=AVX2, which
# also steer torch.compile's code; no bf16 cases). The same instructions, not the same machine:
# an AMD core gathers, shuffles and caches differently, so this is no substitute for one.
# TORCH_PYTHON: the interpreter whose torch is measured (default /usr/bin/python3; PYTHONPATH
# reaches a PyPI torch). Ours' per-layer table (first round) and every raw log stay in --out
# (default: a temporary directory, removed). Nothing here is a pass/fail test.
set -euo pipefail
cd "$(dirname "$0")/.."

PEER_REV=0cefd96
threads=$(nproc)
rounds=3 runs=3 steps=3 warmup=2
models=(workshop-cnn airbench94)
base="" torch=1 compile=1 bf16=1 out="" isa="" summary_of=""
while (($#)); do
  case $1 in
    --model) models=("$2"); shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --base) base=$2; shift 2 ;;
    --no-torch) torch=0 compile=0; shift ;;
    --no-compile) compile=0; shift ;;
    --no-bf16) bf16=0; shift ;;
    --isa) isa=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --summary) summary_of=$2; shift 2 ;;
    -h | --help) sed -n '2,32s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
# summary FIGURES: per case the median over its rounds ("MODEL|CASE|images/s" lines); per side its
# best configuration; the ratios of ours' best to each other side's best.
summary() {
  awk -F'|' '
  function median(list,   a, n, i, j, t) {
    n = split(list, a, " ")
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  { key = $1 "|" $2; vals[key] = vals[key] " " $3; if (++runs[key] > rounds) rounds = runs[key]
    if (!(key in seen)) { seen[key] = 1; order[++n] = key } }
  END {
    printf "== summary (median of %d round(s); ratios: ours'"'"' best configuration / the other'"'"'s best)\n", rounds
    for (i = 1; i <= n; i++) {
      split(order[i], k, "|"); med = median(vals[order[i]])
      printf "  %-13s %-28s %8.1f images/s\n", k[1], k[2], med
      split(k[2], w, " "); side = k[1] SUBSEP w[1]
      if (!(side in best) || med > best[side]) { best[side] = med; bestcfg[side] = k[2] }
      models[k[1]] = 1
    }
    for (m in models) {
      o = m SUBSEP "ours"
      if (!(o in best)) continue
      line(m, "eager PyTorch", m SUBSEP "torch", o)
      line(m, "torch.compile", m SUBSEP "compile", o)
      line(m, "base", m SUBSEP "base", o)
      line(m, "bf16 vs autocast", m SUBSEP "autocast", m SUBSEP "ours-bf16")
      a = m SUBSEP "autocast"; t = m SUBSEP "torch"
      if ((a in best) && (!(t in best) || best[a] > best[t])) line(m, "PyTorch'"'"'s fastest, bf16 autocast", a, o)
    }
  }
  function line(m, what, peer, us) {
    if (!(peer in best) || !(us in best)) return
    printf "  %s: ours (%s) %.1f / %s (%s) %.1f = %.2f\n", m, bestcfg[us], best[us], what, bestcfg[peer], best[peer], best[us] / best[peer]
  }' "$1"
}
if [[ -n $summary_of ]]; then
  [[ -s $summary_of/figures ]] || { echo "bench.sh: --summary: no figures in $summary_of (expected the --out DIR of a run)" >&2; exit 2; }
  summary "$summary_of/figures"
  exit 0
fi
for n in "$threads" "$rounds" "$runs" "$steps"; do
  [[ $n =~ ^[1-9][0-9]*$ ]] || { echo "bench.sh: expected a positive integer, got '$n'" >&2; exit 2; }
done
[[ $warmup =~ ^[0-9]+$ ]] || { echo "bench.sh: --warmup expects an integer, got '$warmup'" >&2; exit 2; }
for m in "${models[@]}"; do
  [[ $m == workshop-cnn || $m == airbench94 ]] || { echo "bench.sh: unknown model $m" >&2; exit 2; }
done
ours_isa="" torch_env=""
if [[ -n $isa ]]; then
  [[ $isa == avx2 ]] || { echo "bench.sh: --isa takes avx2 (the AVX2-only CPUs' code), not '$isa'" >&2; exit 2; }
  grep -qw avx2 /proc/cpuinfo || { echo "bench.sh: --isa avx2: this CPU has no AVX2" >&2; exit 2; }
  ours_isa=" --isa avx2" bf16=0
fi
build=${BUILD:-build}
[[ -x $build/cifar10-bench ]] || { echo "bench.sh: $build/cifar10-bench missing: run make first" >&2; exit 1; }
if [[ -n $out ]]; then
  mkdir -p "$out"
  log=$(cd "$out" && pwd)
else
  log=$(mktemp -d)
fi
cleanup() {
  [[ -n ${base_dir:-} ]] && git worktree remove --force "$base_dir" >/dev/null 2>&1
  [[ -z $out ]] && rm -rf "$log"
  return 0
}
trap cleanup EXIT
# torch.compile's cache keys leave out ATEN_CPU_CAPABILITY: PyTorch 2.15 reused AVX-512 code built
# by an earlier run and failed ("index ... is out of bounds"), so the AVX2 cases get a cache of
# their own.
[[ -n $isa ]] && torch_env="env ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 TORCHINDUCTOR_CACHE_DIR=$log/inductor-avx2 "

mpi=(mpirun -np "$threads" --bind-to core)
((EUID == 0)) && mpi+=(--allow-run-as-root)
py=${TORCH_PYTHON:-/usr/bin/python3}
[[ -x $py ]] || py=python3
if ((torch)) && ! "$py" -c 'import torch, numpy' 2>/dev/null; then
  echo "bench.sh: PyTorch skipped ($py cannot import torch and numpy; scripts/install-deps.sh --test installs Debian's)"
  torch=0 compile=0
fi
if ((bf16)) && ! grep -qwE 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  bf16=0 # without AVX512_BF16, bf16 runs its sums on float FMA: no faster than fp32
fi

# The peer's script, as at PEER_REV (with the airbench94 network it imports).
peer=$log/peer
mkdir -p "$peer"
if git cat-file -e "$PEER_REV:scripts/bench_torch.py" 2>/dev/null; then
  git show "$PEER_REV:scripts/bench_torch.py" >"$peer/bench_torch.py"
  git show "$PEER_REV:scripts/airbench_torch.py" >"$peer/airbench_torch.py"
  peer_from="scripts/bench_torch.py at $PEER_REV"
else
  cp scripts/bench_torch.py scripts/airbench_torch.py "$peer/"
  peer_from="scripts/bench_torch.py of the working tree ($PEER_REV is not in this clone's history)"
fi

if [[ -n $base ]]; then
  base_sha=$(git rev-parse --verify --quiet "$base^{commit}") || { echo "bench.sh: --base: no commit $base" >&2; exit 2; }
  base_dir=$(mktemp -d /tmp/cifar10-bench-base.XXXXXX)
  rmdir "$base_dir"
  git worktree add --detach "$base_dir" "$base_sha" >/dev/null 2>&1
  echo "bench.sh: building base ${base_sha:0:12} (CPU only) in $base_dir"
  make -C "$base_dir" -j"$(nproc)" CUDA=0 BUILD=build build/cifar10-bench >"$log/base-build.log" 2>&1 ||
    { echo "bench.sh: the base commit does not build (see $log/base-build.log)" >&2; exit 1; }
fi

# The machine, the commits and the peer.
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
fam=$(sed -n 's/^cpu family[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
mod=$(sed -n 's/^model[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
cpu_isa=$(grep -m1 -owE 'avx2|avx512f|avx512_bf16|avx512_fp16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ' || true)
echo "== machine: $cpu (family $fam, model $mod), $(nproc) CPUs, ${cpu_isa:-no AVX2}"
[[ -n $isa ]] && echo "== both sides on AVX2 code: ours with --isa avx2, PyTorch with ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 (torch.compile with a cache of its own)"
echo "== ours: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' + uncommitted changes')${base:+; base: ${base_sha:0:12}}"
if ((torch)); then
  echo "== peer: PyTorch $("$py" -c 'import torch; print(torch.__version__)' 2>/dev/null), $peer_from"
fi
echo "== $(date -u '+%Y-%m-%d %H:%M UTC'); $rounds round(s) of every case; each case $runs runs of $steps steps after $warmup warm-up, median"

# Cases of one model: NAME|COMMAND (COMMAND run by bash; it must print "result: images_per_s=").
cases_of() {
  local m=$1 b=128 common
  [[ $m == airbench94 ]] && b=512
  common="--model $m --batch-size $b --device cpu --runs $runs --steps $steps --warmup $warmup$ours_isa"
  local tcommon="$peer/bench_torch.py --model $m --batch-size $b --runs $runs --steps $steps --warmup $warmup"
  echo "ours 1x$threads|$build/cifar10-bench $common --threads $threads"
  ((threads > 1)) && echo "ours ${threads}x1|${mpi[*]} $build/cifar10-bench $common --threads 1"
  if [[ -n $base ]]; then
    echo "base 1x$threads|$base_dir/build/cifar10-bench $common --threads $threads"
    ((threads > 1)) && echo "base ${threads}x1|${mpi[*]} $base_dir/build/cifar10-bench $common --threads 1"
  fi
  if ((torch)); then
    local f
    for f in channels_last contiguous; do
      echo "torch 1x$threads $f|$torch_env$py $tcommon --threads $threads --memory-format $f"
      ((threads > 1)) && echo "torch ${threads}x1 $f|procs $torch_env$py $tcommon --threads 1 --memory-format $f"
    done
  fi
  if ((compile)); then
    for f in channels_last contiguous; do
      echo "compile 1x$threads $f|$torch_env$py $tcommon --threads $threads --memory-format $f --compile"
    done
  fi
  if ((bf16)); then
    echo "ours-bf16 1x$threads|$build/cifar10-bench $common --threads $threads --precision bf16"
    ((torch)) && for f in channels_last contiguous; do
      echo "autocast 1x$threads $f|$py $tcommon --threads $threads --memory-format $f --bf16"
    done
  fi
  return 0
}

# procs CMD...: $threads copies of CMD at once, copy i pinned to CPU i; prints their summed result.
procs() {
  local i pids=() sum=0 v
  for ((i = 0; i < threads; i++)); do
    taskset -c "$i" "$@" >"$log/procs.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
  for ((i = 0; i < threads; i++)); do
    v=$(sed -n 's/^result: images_per_s=\([0-9.]*\).*/\1/p' "$log/procs.$i")
    [[ -n $v ]] || { cat "$log/procs.$i"; return 1; }
    sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { print a + b }')
  done
  echo "result: images_per_s=$sum"
}

# run_case MODEL ROUND NAME CMD: runs it, appends "MODEL|NAME|images/s" to $log/figures.
run_case() {
  local f v
  f="$log/$1.${3// /_}.$2"
  if ! eval "$4" >"$f" 2>&1 </dev/null; then
    echo "bench.sh: $1, $3 failed (log: $f):" >&2
    tail -n 5 "$f" >&2
    return 0
  fi
  v=$(sed -n 's/^result: images_per_s=\([0-9.]*\).*/\1/p' "$f" | tail -n 1)
  [[ -n $v ]] && echo "$1|$3|$v" >>"$log/figures"
  printf '  %-13s %-28s %8.1f images/s\n' "$1" "$3" "${v:-0}"
}

: >"$log/figures"
for ((r = 1; r <= rounds; r++)); do
  echo "== round $r of $rounds"
  for m in "${models[@]}"; do
    while IFS='|' read -r name cmd; do
      run_case "$m" "$r" "$name" "$cmd"
    done < <(cases_of "$m")
  done
done

for m in "${models[@]}"; do
  f="$log/$m.ours_1x$threads.1"
  [[ -f $f ]] || continue
  echo
  echo "== ours, $m, 1 x $threads threads, round 1"
  sed -n '/^FP32 FMA peak/p; /^per layer/,/^result/p' "$f"
done

echo
summary "$log/figures"
