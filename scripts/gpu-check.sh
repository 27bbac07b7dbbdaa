#!/usr/bin/env bash
# Checks of the CUDA backend on a GPU machine, one step per call (each within a device call of
# 10 minutes); every check prints one line, "check: NAME: PASS|FAIL|TIMEOUT|SKIPPED (S s)", and
# its log goes to NAME.log:
#
#   scripts/gpu-check.sh prepare   here (with ../shared): fills .gpu-carry/ with the CIFAR-10
#                                  JPEG copy and its converter, and Debian's Open MPI packages
#                                  unpacked (dpkg -x) for a GPU machine that has no Open MPI
#   scripts/gpu-check.sh stamp     here, just before each device call (prepare does it too):
#                                  names this tree's commit in .gpu-carry/source.txt, which
#                                  about.txt and keep's folder name take it from
#   scripts/gpu-check.sh base REV  here, after prepare: puts commit REV's source in .gpu-carry/
#                                  (git archive), which the cpu step then benchmarks beside this
#                                  tree, in the same call: instances of one machine type differ
#                                  up to 2x in speed, so only a side-by-side run compares two
#                                  versions
#   scripts/gpu-check.sh keep DIR  here, after a device call: the call's results (DIR: the folder
#                                  the tool put them in) into docs/data/gpu/DATE-COMMIT/ to be
#                                  committed: summary.txt and every text log of the step but the
#                                  build's and those over 256 KiB, with about.txt (date, commit,
#                                  GPU, driver, CUDA, cuDNN, Open MPI, PyTorch, CPU)
#   scripts/gpu-check.sh test      build; tests/test_ops (every op case on the GPU, and on every
#                                  CPU path that machine has, AMX tiles included, against double
#                                  precision, activations in NHWC and NCHW, bf16 activations, and
#                                  again with any cuDNN algorithm, CIFAR10_CUDA_ALGOS=fastest);
#                                  tests/test_cuda with TF32 off and on, in NCHW, and cuda-bf16
#                                  against its CPU twin (--bf16): for every network, steps at
#                                  batch 1, 32, 127 and 512, 200 steps, the input pipeline
#                                  overlapping compute, partial batches, cross-device
#                                  checkpoints, steps as CUDA graphs against op by op, GPU 1 when
#                                  there is one; tests/test_dist on the GPU with 1 and 2 ranks,
#                                  TF32 off and on, its files compared by
#                                  tests/check_dist_files.py; 1 and 2 ranks training on one GPU,
#                                  the workshop network and airbench94's recipe (and 2 ranks of
#                                  it with --precision bf16, bf16 needing sm_80+; 1 rank with
#                                  CUDA graphs, the default, past the first bias's stop, and 1
#                                  with CIFAR10_CUDA_GRAPHS=off; 2 ranks with graphs split at
#                                  the gradient buckets, the default); GPU-trained models
#                                  scored on the CPU. Within window, not TF32 on, NCHW or
#                                  test_dist in TF32
#   scripts/gpu-check.sh sanitize  compute-sanitizer memcheck (with leak check), racecheck and
#                                  synccheck on a 10-step training run (after its 4 warm-up
#                                  steps; racecheck on 4 steps without them), and memcheck on
#                                  2 ranks of test_dist through the staged path (racecheck on
#                                  our own kernels, within 4 minutes, failing on a hazard in one
#                                  of them; the others within 2)
#   scripts/gpu-check.sh rest      the test step's checks a window leaves out (TF32 on, the NCHW
#                                  lock step, test_dist in TF32), then the sanitize step's: after
#                                  a window, in a second device call, the rest of test and
#                                  sanitize (about 5 minutes)
#   scripts/gpu-check.sh bench     images/s at batch 128 and 512: cifar10-bench --device=cuda
#                                  against PyTorch eager and torch.compile on the same GPU; and
#                                  airbench94 at batch 1024 against PyTorch eager, in fp32 and
#                                  in bf16 (--precision bf16 against bf16 autocast), ours also
#                                  with CIFAR10_CUDA_LAYOUT=nchw
#   scripts/gpu-check.sh perf      the GPU issue's step, in the order of what its targets need
#                                  first: test_ops and test_cuda as a gate (in a window, the
#                                  test step's verdict); our defaults against PyTorch eager
#                                  (scripts/bench_torch.py as at commit 0cefd96, carried by
#                                  prepare), 100 timed steps x 3 runs: airbench94 at 1024 in
#                                  bf16 and fp32, the workshop CNN at 512; airbench94's time to
#                                  accuracy on the real images, 5 bf16 seeds and 1 fp32; the
#                                  defaults against torch.compile (airbench94 in bf16, the
#                                  workshop CNN); PyTorch's time per operator (torch.profiler)
#                                  for both, beside our per-layer tables in the default runs'
#                                  logs; ours with each switch (CIFAR10_CUDA_ALGOS
#                                  fastest, CIFAR10_CUDA_LAYOUT=nchw, airbench94's steps after
#                                  the first bias stops, CIFAR10_CUDA_GRAPHS=off,
#                                  CIFAR10_CUDA_SMALL_CONV=cudnn, and for bf16
#                                  CIFAR10_CUDA_BF16=copies, CIFAR10_CUDA_FILTERS=per-call); 1
#                                  bf16 run to accuracy op by op. The lines in perf.txt (and
#                                  summary.txt) as they come; with GPU_CHECK_DEADLINE (epoch
#                                  seconds) a part that would not end by then is left out,
#                                  with a "skipped:" line, and no run goes 60 s past it. Alone,
#                                  with everything, 8 - 10 minutes
#   scripts/gpu-check.sh window    what a GPU window runs first, in one device call of at most
#                                  GPU_CHECK_WINDOW_S (default 560 s): test (no check started in
#                                  the last 250 s, each stopped after GPU_CHECK_CHECK_S, default
#                                  180 s: a deadlock costs one check, not the window), then perf
#                                  with the test step's verdict as its gate and a deadline 75 s
#                                  before the end (each run stopped after GPU_CHECK_RUN_S,
#                                  default 150 s), then cpu-quick when 60 s are left, each in a
#                                  folder of its own under the output folder (test/, perf/,
#                                  cpu/); a failed build ends it after the test step. Its own
#                                  summary counts the steps that failed. (431 s on an H200 at
#                                  cf9bb0e, everything included)
#   scripts/gpu-check.sh cpu-quick airbench94's bf16 step on that machine's AMX tiles against
#                                  PyTorch's bf16 autocast, ours without the tile arithmetic
#                                  (amx-cost: the tiles' share of the step and fraction of their
#                                  peak; amx times its loops per layer and names them), then
#                                  with each loop fixed (amx-prefetch, amx-resident,
#                                  amx-noprefetch), in fp32 and with the tiles' im2col
#                                  (amx-im2col) (2
#                                  threads, batch 512, 2 steps): the cpu step's core in about a
#                                  minute
#   scripts/gpu-check.sh profile   where the GPU time goes, ours against PyTorch's, for the
#                                  workshop CNN at batch 512 and airbench94 at 1024 (fp32, bf16):
#                                  ncu's per-kernel summary of cifar10-bench's last timed run
#                                  (NVTX range "timed"), torch.profiler's table of PyTorch's
#                                  steps, and PyTorch's images/s in NCHW and with deterministic
#                                  cuDNN algorithms (ours runs both), to apportion the gap
#   scripts/gpu-check.sh cpu       bf16 on that machine's CPU (its Xeon has AMX; neither
#                                  development machine has), 2 threads as on a 2-core machine:
#                                  cifar10-bench in fp32, in bf16 on AMX tiles (direct,
#                                  its loops found, amx-prefetch, amx-resident,
#                                  amx-noprefetch and amx-im2col) and on
#                                  AVX512_BF16, against PyTorch's CPU fp32 and bf16 autocast
#                                  (NHWC), for airbench94 at batch 512 and the workshop CNN at
#                                  128, and the base commit's cifar10-bench (step "base") in
#                                  fp32 and on the tiles, each run next to ours; then 20 steps
#                                  of airbench94 in bf16 on the tiles
#   scripts/gpu-check.sh train     the default 10 epochs on the real images, then cifar10-test:
#                                  accuracy and wall time; then airbench94's whole recipe
#                                  (9.9 epochs, final TTA score) and its wall time, in fp32 and
#                                  in bf16
#
# With the repository's device tool: run "scripts/gpu-check.sh STEP" with carry [".gpu-carry"].
# summary.txt (the check lines) and STEP-logs.tar.gz (every log; the tool returns 8 files at
# most) go to $OUT (the tool's output folder) or to ./gpu-check-out. Needs python3 for the test
# step's file checks. Where the GPU machine lacks Open MPI, the zlib/libpng/libjpeg headers or
# cuDNN beside nvcc, the carried Debian packages and PyTorch's cuDNN stand in (prepare). The
# data, models and test files go to GPU_CHECK_TMP (default /tmp). tests/test_gpu_check.sh runs
# the window step here against stand-ins for the GPU machine's programs (tests/fake-gpu).
# Exit: 0 when the step's checks passed, 1 when one failed, 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "gpu-check.sh: $*" >&2; exit 1; }
[[ ($# == 1 && $1 != base && $1 != keep) || ($# == 2 && ($1 == base || $1 == keep)) ]] ||
  { sed -n '2,/^set /s/^# \{0,1\}//p' "$0" >&2; exit 2; }
step=$1
carry=$PWD/.gpu-carry

# keep DIR: the results of a device call, from the folder the tool returned them in, into
# docs/data/gpu/DATE-COMMIT/ (DATE and COMMIT from its about.txt): each step's summary.txt and
# the text files of its tarball, but build.log and any file over 256 KiB (listed in
# not-kept.txt). A window's steps (test/, perf/) keep their folder names.
keep() {
  local from=$1 about tmp dest date commit sub f
  [[ -d $from ]] || die "keep: $from is not a folder"
  about=$(find "$from" -name '*-logs.tar.gz' -exec tar -xzOf {} about.txt \; 2>/dev/null | head -n 20)
  date=$(sed -n 's/^date: \([0-9-]*\).*/\1/p' <<<"$about" | head -n 1)
  commit=$(sed -n 's/^source: commit \([0-9a-f]\{7\}\).*/\1/p' <<<"$about" | head -n 1)
  [[ -n $date && -n $commit ]] || die "keep: no about.txt with a date and a commit in $from's tarballs (made by a gpu-check.sh older than keep?)"
  dest=docs/data/gpu/$date-$commit
  mkdir -p "$dest"
  tmp=$(mktemp -d)
  while IFS= read -r f; do
    sub=$(dirname "${f#"$from"/}")
    [[ $sub == . ]] && sub= || sub=$sub/
    mkdir -p "$tmp/$sub" "$dest/$sub"
    tar -xzf "$f" -C "$tmp/$sub"
    [[ -f $(dirname "$f")/summary.txt ]] && cp "$(dirname "$f")/summary.txt" "$dest/${sub}summary.txt"
  done < <(find "$from" -name '*-logs.tar.gz' | sort)
  [[ -f $from/summary.txt ]] && cp "$from/summary.txt" "$dest/summary.txt"
  while IFS= read -r f; do
    local rel=${f#"$tmp"/}
    if [[ $(basename "$f") == build.log || $(stat -c %s "$f") -gt 262144 ]]; then
      echo "$rel ($(stat -c %s "$f") bytes)" >>"$dest/not-kept.txt"
    else
      cp "$f" "$dest/$rel"
    fi
  done < <(find "$tmp" -type f \( -name '*.log' -o -name '*.txt' \) | sort)
  rm -rf "$tmp"
  echo "gpu-check.sh: kept in $dest: $(find "$dest" -type f | wc -l) files, $(du -sh "$dest" | cut -f1)"
}
# stamp: the source the GPU machine gets, named in .gpu-carry/source.txt (the device tool copies
# the working tree, not .git); run it just before each device call, or about.txt names the
# commit of the last prepare.
stamp() {
  [[ -d $carry ]] || die "stamp: no $carry (run prepare)"
  local head dirty=
  head=$(git rev-parse --verify HEAD 2>/dev/null) || die "stamp: $PWD is not a git checkout with a commit"
  git status --porcelain --untracked-files=no | grep -q . && dirty=' with uncommitted changes'
  echo "commit $head$dirty" >"$carry/source.txt"
  cat "$carry/source.txt"
}
[[ $step == keep ]] && { keep "$2"; exit 0; }
[[ $step == stamp ]] && { stamp; exit 0; }

out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
: >"$out/summary.txt"
# On exit, however the step ends: our cuDNN as the programs logged it into about.txt, then
# every log but summary.txt into one tarball.
pack_logs() {
  local logs=() line
  if [[ -f $out/about.txt ]]; then
    line=$(grep -h -m 1 -o 'driver for CUDA [0-9.]*, cuDNN [0-9.]*' "$out"/*.log 2>/dev/null | head -n 1) || true
    echo "ours: ${line:-no program logged its cuDNN in this step}" >>"$out/about.txt"
  fi
  mapfile -t logs < <(cd "$out" && find . -maxdepth 1 -type f \( -name '*.log' -o -name '*.txt' \) ! -name summary.txt -printf '%f\n')
  ((${#logs[@]})) || return 0
  (cd "$out" && tar -czf "$step-logs.tar.gz" "${logs[@]}" && rm -f "${logs[@]}")
}
trap pack_logs EXIT
# The machine's scratch folder (the data, models and test files the checks write).
scratch=${GPU_CHECK_TMP:-/tmp}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

prepare() {
  [[ -d ../shared/cifar10 ]] || die "../shared/cifar10 not found (prepare runs on the development machine)"
  rm -rf "$carry" && mkdir -p "$carry/debs"
  cp ../shared/cifar10/cifar10-jpeg.tar.gz ../shared/cifar10/jpg2cifarbin.py ../shared/cifar10/make-cifar10-bin "$carry/"
  # Open MPI and what it links, as Debian ships them (the GPU machine may have none).
  (cd "$carry/debs" && apt-get download openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 \
    libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2 libpsm-infinipath1 \
    libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libltdl7 libnuma1 libxnvctrl0 libgfortran5 >/dev/null)
  # zlib, libpng and libjpeg with their headers, for a GPU machine without the -dev packages.
  mkdir -p "$carry/devdebs"
  (cd "$carry/devdebs" && apt-get download zlib1g zlib1g-dev libpng16-16 libpng-dev libjpeg62-turbo \
    libjpeg62-turbo-dev >/dev/null 2>&1)
  # The GPU issue's baseline: PyTorch's benchmark script as it was at commit 0cefd96 (and the
  # airbench94 model it imports from beside itself), so a change of the harness cannot move it.
  git show 0cefd96:scripts/bench_torch.py >"$carry/bench_torch_0cefd96.py"
  git show 0cefd96:scripts/airbench_torch.py >"$carry/airbench_torch.py"
  stamp
  du -sh "$carry"
}

# base REV: commit REV's tree as .gpu-carry/base.tar.gz, its full hash in .gpu-carry/base.rev.
base() {
  [[ -d $carry ]] || die "no .gpu-carry (run 'prepare' first)"
  local rev
  rev=$(git rev-parse --verify "$1^{commit}" 2>/dev/null) || die "base: '$1' is not a commit of this repository"
  git archive --format=tar.gz --prefix=base/ -o "$carry/base.tar.gz" "$rev"
  echo "$rev" >"$carry/base.rev"
  echo "gpu-check.sh: the cpu step will benchmark $rev beside this tree ($(du -h "$carry/base.tar.gz" | cut -f1))"
}

# zlib, libpng, libjpeg: the machine's own when it has their headers, else the carried Debian
# packages unpacked beside the tree (CPATH and LIBRARY_PATH for gcc, LD_LIBRARY_PATH to run).
use_libs() {
  local probe='#include <zlib.h>\n#include <stdio.h>\n#include <png.h>\n#include <jpeglib.h>\nint main(void){return 0;}'
  if printf '%b' "$probe" | gcc -x c - -lz -lpng -ljpeg -o /dev/null 2>/dev/null; then return; fi
  [[ -d $carry/devdebs ]] || die "no zlib/libpng/libjpeg headers here and no .gpu-carry/devdebs (run 'prepare')"
  local root=$carry/sys
  if [[ ! -d $root ]]; then
    for f in "$carry"/devdebs/*.deb; do dpkg -x "$f" "$root"; done
    # zlib1g-dev's libz.so points at /lib/...; point it at the unpacked library instead.
    ln -sfn "$root"/lib/x86_64-linux-gnu/libz.so.1 "$root/usr/lib/x86_64-linux-gnu/libz.so"
  fi
  export CPATH=$root/usr/include:$root/usr/include/x86_64-linux-gnu${CPATH:+:$CPATH}
  export LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "using the carried zlib, libpng, libjpeg ($root)"
}

# cuDNN: wherever the Makefile finds it (beside nvcc or in /usr: asked with a dry run, which
# stops on "CUDA=1 but cuDNN ... was not found"), else PyTorch's wheel (nvidia/cudnn), handed
# to make as CUDNN_INC and CUDNN_LIB with a libcudnn.so link made for the linker.
use_cudnn() {
  if make -n CUDA=1 CUDA_ARCH=90 build/cifar10-train >/dev/null 2>&1; then return; fi
  local d
  d=$(python3 -c 'import nvidia.cudnn as m; print(list(m.__path__)[0])' 2>/dev/null) || true
  [[ -n $d && -f $d/include/cudnn.h ]] || die "cuDNN not found (the Makefile found none beside nvcc or in /usr, nor is there one in python3's nvidia.cudnn)"
  local lib=$carry/cudnn-lib
  mkdir -p "$lib"
  ln -sfn "$d"/lib/libcudnn.so.* "$lib/"
  ln -sfn "$(find "$d/lib" -name 'libcudnn.so.[0-9]*' | sort | head -n 1)" "$lib/libcudnn.so"
  export MAKEFLAGS="${MAKEFLAGS:+$MAKEFLAGS }CUDNN_INC=$d/include CUDNN_LIB=$lib"
  export LD_LIBRARY_PATH=$d/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  echo "using PyTorch's cuDNN ($d)"
}

# Open MPI: the machine's own, else the carried Debian packages unpacked beside the tree.
use_mpi() {
  if command -v mpicc >/dev/null && command -v mpirun >/dev/null; then return; fi
  [[ -d $carry/debs ]] || die "no Open MPI here and no .gpu-carry/debs (run 'prepare' and carry .gpu-carry)"
  local root=$carry/mpi
  if [[ ! -d $root ]]; then
    for f in "$carry"/debs/*.deb; do dpkg -x "$f" "$root"; done
    # Debian names the programs mpicc.openmpi etc. and links mpicc to them at install time.
    for p in mpicc mpirun mpiexec; do ln -sfn "$p.openmpi" "$root/usr/bin/$p"; done
  fi
  export OPAL_PREFIX=$root/usr PATH=$root/usr/bin:$PATH
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMPI_MCA_plm=isolated
}

# What a step ran on, for its results page: date, source, GPU, driver, CUDA, Open MPI, PyTorch
# and its cuDNN, CPU (pack_logs adds our cuDNN as the programs log it).
about() {
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "source: $(cat "$carry/source.txt" 2>/dev/null || echo 'unknown (.gpu-carry/source.txt missing: run prepare)')"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1) (name, driver, memory)"
  echo "nvcc: $(nvcc --version | tail -n 1)"
  echo "mpi: $(mpirun --version | head -n 1)"
  echo "pytorch: $(python3 -c 'import torch; print(torch.__version__, "cuDNN", torch.backends.cudnn.version())' 2>/dev/null || echo none)"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1), $(nproc) CPUs"
}

build() {
  use_mpi
  use_libs
  use_cudnn
  local arch
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
  about | tee "$out/about.txt"
  make -j"$(nproc)" CUDA=1 CUDA_ARCH="$arch" all "$@" >"$out/build.log" 2>&1 ||
    { tail -n 30 "$out/build.log"; echo "gpu-check.sh: build failed" >&2; exit 3; }
  grep '^CUDA:' "$out/build.log"
}

synthetic() { # synthetic DIR N: a small dataset, 5 x N training images and 200 test images
  [[ -d $1 ]] || build/tests/make_synthetic "$1" "$2" 200 >/dev/null
}

fails=0
# Time limits, so that a hang (a deadlock in code that never ran on a GPU) costs one check or
# one run and not the window: GPU_CHECK_CHECK_S for each check (unset: none; window sets it),
# GPU_CHECK_RUN_S (default 150 s) for each program perf runs, twice that for torch.compile's.
# GPU_CHECK_DEADLINE (epoch seconds; window sets it): no check or part of perf starts after it
# (perf: none that would not end by it), and none runs more than 60 s past it.
run_s=${GPU_CHECK_RUN_S:-150}
# limit S: S, or less where the deadline leaves less (at least 5).
limit() {
  local l=$1
  if [[ -n ${GPU_CHECK_DEADLINE:-} ]]; then
    local left=$((GPU_CHECK_DEADLINE + 60 - $(date +%s)))
    ((left < l)) && l=$left
    ((l >= 5)) || l=5
  fi
  echo "$l"
}
# check NAME COMMAND...: runs COMMAND (a program or one of this script's functions) with its
# output in $out/NAME.log (spaces as -) and prints "check: NAME: PASS|FAIL|TIMEOUT|SKIPPED (S
# s)" (TIMEOUT: stopped at its limit; SKIPPED: not started, past the deadline: counted as a
# failure, the gate being incomplete), also to summary.txt; on anything but PASS, the log's tail
# too. Under GPU_CHECK_CHECK_S it runs in a child bash given this script's functions (declare
# -f) under timeout; -u and pipefail as here, but not -e, which is off here too for a command
# on the left of ||.
check() {
  local name=$1 t0=$SECONDS verdict=PASS status=0
  shift
  local log=$out/${name// /-}.log
  if [[ -n ${GPU_CHECK_DEADLINE:-} ]] && (($(date +%s) >= GPU_CHECK_DEADLINE)); then
    verdict=SKIPPED
    echo "not started: the deadline had passed" >"$log"
  elif [[ -n ${GPU_CHECK_CHECK_S:-} ]]; then
    timeout -k 10 "$(limit "$GPU_CHECK_CHECK_S")" bash -uo pipefail -c "$(declare -f)"$'\n''"$@"' check "$@" \
      >"$log" 2>&1 </dev/null || status=$?
  else
    "$@" >"$log" 2>&1 </dev/null || status=$?
  fi
  ((status == 0)) || verdict=FAIL
  ((status != 124 && status != 137)) || verdict=TIMEOUT
  echo "check: $name: $verdict ($((SECONDS - t0)) s)" | tee -a "$out/summary.txt"
  [[ $verdict == PASS ]] || { tail -n 20 "$log"; fails=$((fails + 1)); }
}

# step_done STEP: the step's last line; its exit status.
step_done() {
  echo "gpu-check $1: $fails check(s) failed" | tee -a "$out/summary.txt"
  ((fails == 0))
}

# on_gpu COMMAND...: runs it; fails when it fails or says it skipped the GPU.
on_gpu() {
  local o status=0
  o=$("$@" 2>&1) || status=$?
  printf '%s\n' "$o"
  ((status == 0)) && ! grep -Eq 'skipped: (no GPU|this build has no CUDA)' <<<"$o"
}

# window_left_out: the test step's checks a window leaves out: TF32 on, the NCHW lock step,
# test_dist in TF32.
window_left_out() {
  check "test_cuda tf32=on" on_gpu build/tests/test_cuda --tf32
  check "test_cuda nchw tf32=off" on_gpu env CIFAR10_CUDA_LAYOUT=nchw build/tests/test_cuda
  local np
  for np in 1 2; do check "test_dist np=$np tf32=on" dist_gpu "$np" on; done
}

# dist_gpu NP TF32: test_dist's steps on NP ranks sharing the GPU(s), TF32 off or on, then the
# files they wrote (the same-batch step of every rank against its one-process step) checked.
dist_gpu() {
  local np=$1 tf32=$2 dir=$scratch/gpu-check-dist
  local env=(NVIDIA_TF32_OVERRIDE=0)
  [[ $tf32 == on ]] && env=(-u NVIDIA_TF32_OVERRIDE)
  rm -rf "$dir" && mkdir -p "$dir" &&
    env "${env[@]}" mpirun -np "$np" build/tests/test_dist --device cuda --out "$dir" &&
    python3 tests/check_dist_files.py "$dir"
}

# train_ranks NP: the workshop CNN, 2 epochs of the synthetic set on NP ranks sharing one GPU.
train_ranks() {
  mpirun -np "$1" build/cifar10-train --device=cuda --model workshop-cnn --epochs 2 --batch-size 64 --model-file "$scratch/m$1.safetensors" \
    --resume never "$scratch/gpu-check-data"
}

# airbench_ranks NP [FLAGS...]: airbench94's recipe (whitening, Nesterov, lookahead, TTA, reflect
# crops) for 2.5 epochs of the synthetic set on NP ranks sharing one GPU, global batch 256; in
# fp32 unless FLAGS say --precision (auto would take bf16 for this recipe).
airbench_ranks() {
  local precision=(--precision fp32)
  [[ " ${*:2} " == *" --precision "* ]] && precision=()
  mpirun -np "$1" build/cifar10-train --device=cuda --model airbench94 "${precision[@]}" --epochs 2.5 --batch-size 256 \
    --whiten-images 2000 --model-file "$scratch/a$1${2:+-flags}.safetensors" --resume never "${@:2}" "$scratch/gpu-check-data"
}

# airbench_graphs: airbench94's recipe on 1 rank with its training steps as CUDA graphs (the
# default; its log says so), 3.5 epochs: past the first bias's stop after epoch 3, which retires
# the graphs.
airbench_graphs() {
  build/cifar10-train --device=cuda --model airbench94 --precision fp32 --epochs 3.5 --batch-size 256 \
    --whiten-images 2000 --model-file "$scratch/a1-graphs.safetensors" --resume never "$scratch/gpu-check-data" |
    tee "$out/airbench-graphs.log" || return 1
  grep -q 'training steps as CUDA graphs' "$out/airbench-graphs.log"
}

# airbench_op_by_op: the same recipe on 1 rank op by op (CIFAR10_CUDA_GRAPHS=off), 2.5 epochs.
airbench_op_by_op() {
  CIFAR10_CUDA_GRAPHS=off airbench_ranks 1 | tee "$out/airbench-op-by-op.log" || return 1
  ! grep -q 'CUDA graphs' "$out/airbench-op-by-op.log"
}

# same_scores MODEL: a 2-rank GPU model scored on the CPU and on the GPU: the same accuracy
# lines (airbench94: at its own TTA level 2).
same_scores() {
  local dev
  for dev in cpu cuda; do
    build/cifar10-test --device=$dev --model-file "$1" "$scratch/gpu-check-data" >"$out/test-$dev.log" 2>&1 ||
      { cat "$out/test-$dev.log"; return 1; }
  done
  grep '^Accuracy\|^Overall' "$out/test-cpu.log" &&
    cmp <(grep '^Accuracy\|^Overall' "$out/test-cpu.log") <(grep '^Accuracy\|^Overall' "$out/test-cuda.log")
}

check_test() {
  build build/tests/test_ops build/tests/test_cuda build/tests/test_dist build/tests/make_synthetic
  check test_ops on_gpu build/tests/test_ops
  # any cuDNN algorithm (not only deterministic ones): test_ops' tolerances hold either way
  check "test_ops fastest" on_gpu env CIFAR10_CUDA_ALGOS=fastest build/tests/test_ops
  check "test_cuda tf32=off" on_gpu build/tests/test_cuda
  check "test_cuda bf16" on_gpu build/tests/test_cuda --bf16
  local np
  for np in 1 2; do check "test_dist np=$np tf32=off" dist_gpu "$np" off; done
  # Within a window (test, then perf, in one device call of 10 minutes) the checks that passed
  # on every build so far and change least are left out (the rest step runs them).
  ((${GPU_CHECK_WINDOW:-0})) || window_left_out
  synthetic "$scratch/gpu-check-data" 2048
  for np in 1 2; do check "train np=$np" train_ranks "$np"; done
  check "scores cpu=cuda" same_scores "$scratch/m2.safetensors"
  for np in 1 2; do check "airbench94 train np=$np" airbench_ranks "$np"; done
  # (its steps were CUDA graphs split at the gradient buckets: the default with several ranks)
  check "airbench94 np=2 as graphs between buckets" grep -q 'CUDA graphs, one between two gradient hand-overs' \
    "$out/airbench94-train-np=2.log"
  check "airbench94 scores cpu=cuda" same_scores "$scratch/a2.safetensors"
  check "airbench94 train np=1, CUDA graphs past the bias stop" airbench_graphs
  check "airbench94 train np=1, CIFAR10_CUDA_GRAPHS=off" airbench_op_by_op
  # bf16 (cuda-bf16: bf16 activations, cuDNN's bf16 convolutions, cuBLAS's bf16 GEMMs); its
  # accuracy line is printed
  check "airbench94 bf16 train np=2" airbench_ranks 2 --precision bf16
  step_done test
}

# sanitized SECONDS TOOL ARGS...: an epoch of the workshop CNN at batch 16 (data: $san_data,
# default the 160 images of gpu-check-small, 10 steps; and the untimed warm-up steps unless
# CIFAR10_WARM_UP says otherwise) under compute-sanitizer, stopped after SECONDS (the step must
# end within 10 minutes).
sanitized() {
  local limit=$1 tool=$2
  shift 2
  timeout "$limit" compute-sanitizer --tool "$tool" "$@" --error-exitcode 9 build/cifar10-train --device=cuda \
    --model workshop-cnn --epochs 1 --batch-size 16 --no-eval --print-freq 5 --model-file "$scratch/san.safetensors" \
    --resume never "${san_data:-$scratch/gpu-check-small}"
}

# racecheck_ours: racecheck on the kernels named *_kernel, which are all of ours and some of
# cuDNN's (sm_90 NHWC: "..._on_kernel__5x_cudnn"), over 4 steps (50 images: 3 of 16 and a
# partial one, each kernel of a step run at least 3 times); instrumenting every kernel, 10
# steps did not finish in 120 s on an H200 (2026-11-26), and over ours 10 steps took 159 s
# (2026-11-27) and more than 158 s with graphs (2026-11-30). Fails when the run does not finish
# or a hazard names a kernel not cuDNN's. cuDNN's are counted, not judged: excluding them
# (--kernel-name-exclude kns=cudnn) crashed the sanitizer in cudnnFind (2026-11-27).
racecheck_ours() {
  local log=$out/racecheck-raw.log
  local -x CIFAR10_WARM_UP=0 # the 4 steps only: racecheck is slow (memcheck sees the warm-up)
  san_data=$scratch/gpu-check-race sanitized 240 racecheck --kernel-name kns=_kernel >"$log" 2>&1
  cat "$log"
  grep -q '^Finished Training' "$log" || { echo "racecheck: the run did not finish"; return 1; }
  local sites ours=0 theirs=0
  sites=$(grep -E '(Race reported between|and) (Read|Write) access at' "$log" || true)
  if [[ -n $sites ]]; then
    ours=$(grep -vc cudnn <<<"$sites" || true) theirs=$(grep -c cudnn <<<"$sites" || true)
  fi
  echo "racecheck: $theirs access site(s) of hazards in cuDNN's kernels, $ours in ours"
  ((ours == 0))
}

# sanitizer_checks: the sanitize step's checks, after a build with test_dist and make_synthetic.
sanitizer_checks() {
  synthetic "$scratch/gpu-check-small" 32
  synthetic "$scratch/gpu-check-race" 10
  check "memcheck train" sanitized 120 memcheck --leak-check full
  check "racecheck train" racecheck_ours
  check "synccheck train" sanitized 90 synccheck
  check "memcheck test_dist np=2" timeout 90 mpirun -np 2 compute-sanitizer --tool memcheck --error-exitcode 9 \
    build/tests/test_dist --device cuda
}

check_sanitize() {
  build build/tests/test_dist build/tests/make_synthetic
  sanitizer_checks
  step_done sanitize
}

# rest: what a window's test step leaves out (TF32 on, the NCHW lock step, test_dist in TF32),
# then the sanitize step's checks: with a window, the test and sanitize steps whole, in a
# second device call.
check_rest() {
  build build/tests/test_cuda build/tests/test_dist build/tests/make_synthetic
  window_left_out
  sanitizer_checks
  step_done rest
}

# images_per_s LOG: the images/s of the last "result:" line (cifar10-bench's, bench_torch.py's).
images_per_s() { sed -n 's/^result: images_per_s=\([0-9.]*\).*/\1/p' "$1" | tail -n 1; }

check_bench() {
  build
  local py=python3
  for b in 128 512; do
    echo "== batch $b"
    build/cifar10-bench --device=cuda --batch-size "$b" --warmup 10 --steps 20 --runs 5 | tee "$out/ours-$b.log"
    $py scripts/bench_torch.py --device cuda --batch-size "$b" --warmup 10 --steps 20 --runs 5 | tee "$out/torch-eager-$b.log"
    $py scripts/bench_torch.py --device cuda --compile --batch-size "$b" --warmup 10 --steps 20 --runs 5 2>&1 |
      tail -n 2 | tee "$out/torch-compile-$b.log"
  done
  echo "== airbench94, batch 1024"
  build/cifar10-bench --device=cuda --model airbench94 --batch-size 1024 --warmup 10 --steps 20 --runs 5 | tee "$out/ours-airbench94.log"
  CIFAR10_CUDA_LAYOUT=nchw build/cifar10-bench --device=cuda --model airbench94 --batch-size 1024 --warmup 10 \
    --steps 20 --runs 5 | tee "$out/ours-nchw-airbench94.log"
  $py scripts/bench_torch.py --device cuda --model airbench94 --batch-size 1024 --warmup 10 --steps 20 --runs 5 |
    tee "$out/torch-eager-airbench94.log"
  echo "== airbench94, batch 1024, bf16: ours --precision bf16 against PyTorch's bf16 autocast"
  build/cifar10-bench --device=cuda --precision bf16 --model airbench94 --batch-size 1024 --warmup 10 --steps 20 \
    --runs 5 | tee "$out/ours-airbench94-bf16.log"
  CIFAR10_CUDA_LAYOUT=nchw build/cifar10-bench --device=cuda --precision bf16 --model airbench94 --batch-size 1024 \
    --warmup 10 --steps 20 --runs 5 | tee "$out/ours-nchw-airbench94-bf16.log"
  $py scripts/bench_torch.py --device cuda --bf16 --model airbench94 --batch-size 1024 --warmup 10 --steps 20 --runs 5 |
    tee "$out/torch-eager-airbench94-bf16.log"
  {
    echo "images/s: ours / PyTorch eager / torch.compile"
    for b in 128 512; do
      echo "batch $b: $(images_per_s "$out/ours-$b.log") / $(images_per_s "$out/torch-eager-$b.log") / $(images_per_s "$out/torch-compile-$b.log")"
    done
    echo "airbench94, batch 1024: $(images_per_s "$out/ours-airbench94.log") / $(images_per_s "$out/torch-eager-airbench94.log") / -"
    echo "airbench94, batch 1024, bf16: $(images_per_s "$out/ours-airbench94-bf16.log") / $(images_per_s "$out/torch-eager-airbench94-bf16.log") / -"
    echo "ours in NCHW (CIFAR10_CUDA_LAYOUT=nchw), airbench94 at 1024: $(images_per_s "$out/ours-nchw-airbench94.log"), bf16: $(images_per_s "$out/ours-nchw-airbench94-bf16.log")"
  } | tee "$out/summary.txt"
}

# profile_pair NAME OURS-FLAGS -- TORCH-FLAGS: one configuration, both sides.
profile_pair() {
  local name=$1 ours=() torch=()
  shift
  while [[ $# -gt 0 && $1 != -- ]]; do ours+=("$1"); shift; done
  shift
  torch=("$@")
  echo "== $name"
  timeout 240 ncu --clock-control none --nvtx --nvtx-include "timed/" --metrics gpu__time_duration.sum \
    --print-summary per-kernel build/cifar10-bench --device=cuda "${ours[@]}" --warmup 5 --steps 2 --runs 1 \
    >"$out/ncu-$name.log" 2>&1 || echo "ncu failed ($?): see ncu-$name.log"
  python3 scripts/bench_torch.py --device cuda "${torch[@]}" --warmup 10 --steps 20 --runs 3 --profile 2 \
    >"$out/torch-profile-$name.log" 2>&1 || echo "torch profile failed: see torch-profile-$name.log"
  grep '^PyTorch' "$out/torch-profile-$name.log" || true
  local fmt
  for fmt in "--memory-format contiguous" "--deterministic" "--memory-format contiguous --deterministic"; do
    # shellcheck disable=SC2086 # two words each
    python3 scripts/bench_torch.py --device cuda "${torch[@]}" $fmt --warmup 10 --steps 20 --runs 5 | grep '^PyTorch'
  done
}

check_profile() {
  build
  command -v ncu >/dev/null || echo "ncu not found: PyTorch's side only"
  {
    profile_pair workshop-512 --batch-size 512 -- --batch-size 512
    profile_pair airbench94-1024 --model airbench94 --batch-size 1024 -- --model airbench94 --batch-size 1024
    profile_pair airbench94-1024-bf16 --model airbench94 --batch-size 1024 --precision bf16 -- \
      --model airbench94 --batch-size 1024 --bf16
  } | tee "$out/summary.txt"
}

# real_data: the real images in the official layout at $scratch/cifar10-real (made once per machine).
real_data() {
  local d=$scratch/cifar10-real
  [[ -f $carry/cifar10-jpeg.tar.gz ]] || die ".gpu-carry/cifar10-jpeg.tar.gz missing (run 'prepare' and carry .gpu-carry)"
  [[ -d $d/cifar-10-batches-bin ]] || timeout -k 10 120 "$carry/make-cifar10-bin" "$d" >"$out/convert.log" 2>&1 ||
    { tail "$out/convert.log"; die "make-cifar10-bin failed"; }
}

# perf_torch NAME FLAGS...: PyTorch eager (the 0cefd96 script), 100 steps x 3 runs; prints img/s.
perf_torch() {
  local name=$1
  shift
  local l=$run_s
  [[ " $* " == *" --compile "* ]] && l=$((2 * run_s))
  timeout -k 10 "$(limit "$l")" python3 "$carry/bench_torch_0cefd96.py" --device cuda --warmup 10 --steps 100 --runs 3 "$@" \
    >"$out/perf-torch-$name.log" 2>&1
  images_per_s "$out/perf-torch-$name.log"
}

# perf_ours NAME LAYOUT ALGOS TORCH FLAGS...: cifar10-bench with the switches, 100 steps x 3
# runs, and its line in perf.txt: images/s and the ratio to TORCH (PyTorch's images/s).
perf_ours() {
  local name=$1 layout=$2 algos=$3 peer=$4
  shift 4
  CIFAR10_CUDA_LAYOUT=$layout CIFAR10_CUDA_ALGOS=$algos timeout -k 10 "$(limit "$run_s")" build/cifar10-bench --device=cuda \
    --warmup 10 --steps 100 --runs 3 "$@" >"$out/perf-$name-$layout-$algos.log" 2>&1 ||
    { echo "cifar10-bench failed: perf-$name-$layout-$algos.log"; fails=$((fails + 1)); }
  local ours ratio='?'
  ours=$(images_per_s "$out/perf-$name-$layout-$algos.log")
  [[ -n $ours && -n $peer ]] && ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$ours" "$peer")
  echo "$name, $layout, $algos: ours ${ours:-?} img/s, PyTorch eager ${peer:-?}, ours / eager $ratio" |
    tee -a "$out/perf.txt" "$out/summary.txt"
}

# perf_compile NAME OURS FLAGS...: PyTorch with torch.compile (the 0cefd96 script, 100 steps x 3
# runs, the compilation in its warm-up) beside OURS (images/s of our default run): one line in
# perf.txt with the ratio.
perf_compile() {
  local name=$1 ours=$2 peer ratio='?'
  shift 2
  peer=$(perf_torch "$name-compile" --compile "$@")
  [[ -n $ours && -n $peer ]] && ratio=$(python3 -c "import sys; print(f'{float(sys.argv[1]) / float(sys.argv[2]):.2f}')" "$ours" "$peer")
  echo "$name: ours ${ours:-?} img/s, PyTorch torch.compile ${peer:-?}, ours / compile $ratio" | tee -a "$out/perf.txt" "$out/summary.txt"
}

# perf_profile NAME FLAGS...: PyTorch's own time per operator (torch.profiler, 2 steps after 20
# timed; scripts/bench_torch.py as it is now, the 0cefd96 copy has no --profile) in
# perf-torch-profile-NAME.log, beside our per-layer table in the default run's log: which side's
# convolutions, and which of its other kernels, take the time. Informative: a failed run is
# said, not counted.
perf_profile() {
  local name=$1
  shift
  if timeout -k 10 "$(limit "$run_s")" python3 scripts/bench_torch.py --device cuda --warmup 10 --steps 20 --runs 1 \
    --profile 2 "$@" >"$out/perf-torch-profile-$name.log" 2>&1; then
    echo "$name: PyTorch's time per operator in perf-torch-profile-$name.log, ours per layer in the default run's log"
  else
    echo "$name: PyTorch's profile failed: perf-torch-profile-$name.log"
  fi | tee -a "$out/perf.txt" "$out/summary.txt"
}

# fits SECONDS WHAT: whether SECONDS more fit before GPU_CHECK_DEADLINE (the epoch second a
# window's perf step must end by; unset: always); if not, a "skipped" line in perf.txt. A
# window's call ends at a hard limit, so the step runs what matters most first and leaves out
# what no longer fits rather than being cut off in the middle of it.
fits() {
  [[ -n ${GPU_CHECK_DEADLINE:-} ]] || return 0
  local left=$((GPU_CHECK_DEADLINE - $(date +%s)))
  ((left >= $1)) && return 0
  echo "skipped: $2 (about $1 s needed, $left s left before the deadline)" | tee -a "$out/perf.txt" "$out/summary.txt"
  return 1
}

# tta_run PREC SEED [ENV...]: airbench94's whole recipe on the real images, its final accuracy
# and time to accuracy as one line of perf.txt.
tta_run() {
  local prec=$1 seed=$2 log=$out/tta-$1-$2${3:+-op-by-op}.log what="airbench94 $1 seed $2"
  [[ -n ${3:-} ]] && what+=", op by op ($3)"
  env "${@:3}" timeout -k 10 "$(limit "$run_s")" build/cifar10-train --device=cuda --model airbench94 --precision "$prec" --no-eval --seed "$seed" \
    --model-file "$scratch/tta.safetensors" --resume never "$scratch/cifar10-real" >"$log" 2>&1 ||
    { echo "training failed: $log"; fails=$((fails + 1)); }
  echo "$what: $(grep -h '^final test accuracy' "$log"); $(grep -h -m 1 '^time to accuracy [0-9]' "$log")" | tee -a "$out/perf.txt" "$out/summary.txt"
}

# check_perf: the GPU issue's step, its results in perf.txt as they come, in the order of what
# the issue's targets need: a gate (test_ops, and test_cuda in lock step in FP32; within a
# window, the test step's verdict, GPU_CHECK_GATE, instead of running them again); when it
# fails, the step fails and perf.txt says so first, but the timings still run. Then our
# defaults against PyTorch eager at 100 timed steps (airbench94 at 1024 in bf16 and fp32, the
# workshop CNN at 512); airbench94's time to accuracy on the real images (5 bf16 seeds, 1
# fp32); our defaults against torch.compile; PyTorch's time per operator; ours with each
# switch (CIFAR10_CUDA_ALGOS, CIFAR10_CUDA_LAYOUT, CIFAR10_CUDA_GRAPHS, CIFAR10_CUDA_SMALL_CONV,
# CIFAR10_CUDA_BF16, CIFAR10_CUDA_FILTERS, and airbench94's steps once the first bias stops); 1
# bf16 run to accuracy op by op. From the time to accuracy on, each part runs only when it fits
# (fits). Every line goes to summary.txt too as it comes: a call cut off at its limit still brings
# back the figures so far in the few files the device tool returns.
check_perf() {
  build build/tests/test_ops build/tests/test_cuda
  [[ -f $carry/bench_torch_0cefd96.py ]] || die ".gpu-carry/bench_torch_0cefd96.py missing (run 'prepare')"
  case ${GPU_CHECK_GATE:-} in
    passed) echo "gate: this window's test step passed" | tee -a "$out/summary.txt" ;;
    failed) echo "gate: this window's test step failed" | tee -a "$out/summary.txt"; fails=$((fails + 1)) ;;
    *)
      check test_ops on_gpu build/tests/test_ops
      check "test_cuda tf32=off" on_gpu build/tests/test_cuda
      ;;
  esac
  : >"$out/perf.txt"
  # The gate fails the step but does not stop it: a GPU window is too scarce to come back with
  # nothing, so the figures come with a warning and are not results.
  ((fails == 0)) ||
    echo "GATE FAILED (summary.txt): the timings below are of a build that failed its checks, not results" |
    tee -a "$out/perf.txt" "$out/summary.txt"
  local prec name run
  local -A eager=()
  local -a air=(--model airbench94 --batch-size 1024) ours=() torch=()
  for prec in bf16 fp32; do
    [[ $prec == bf16 ]] && ours=(--precision bf16) torch=(--bf16) || ours=() torch=()
    fits 30 "PyTorch eager, airbench94 $prec" && eager[$prec]=$(perf_torch "airbench94-$prec" "${air[@]}" "${torch[@]}")
    fits 20 "ours, airbench94 $prec" &&
      perf_ours "airbench94-1024-$prec" nhwc deterministic "${eager[$prec]:-}" "${air[@]}" "${ours[@]}"
  done
  fits 30 "PyTorch eager, workshop CNN" && eager[workshop]=$(perf_torch workshop-512 --batch-size 512)
  fits 20 "ours, workshop CNN" && perf_ours workshop-512 nhwc deterministic "${eager[workshop]:-}" --batch-size 512
  local real=0
  if fits 40 "the real images for the runs to accuracy"; then
    if (real_data); then
      real=1
    else
      echo "skipped: the runs to accuracy (the real images could not be made)" | tee -a "$out/perf.txt" "$out/summary.txt"
    fi
  fi
  for run in bf16:1 bf16:2 bf16:3 bf16:4 bf16:5 fp32:1; do
    ((real)) && fits 20 "time to accuracy, ${run%:*} seed ${run#*:}" && tta_run "${run%:*}" "${run#*:}"
  done
  # (none when every run to accuracy was left out)
  grep -q '^airbench94 bf16 seed' "$out/perf.txt" &&
    grep '^airbench94 bf16 seed' "$out/perf.txt" | sed -n 's/.*accuracy \([0-9.]*\)%.*time to accuracy \([0-9.]*\) s.*/\1 \2/p' |
      awk '{a += $1; s += $2; n++} END {if (n) printf "airbench94 bf16, %d seeds: mean accuracy %.2f %%, mean time to accuracy %.2f s\n", n, a / n, s / n}' |
      tee -a "$out/perf.txt" "$out/summary.txt"
  # against torch.compile: airbench94 in bf16 (the issue's target; fp32 would cost 40 s more)
  # and the workshop CNN
  fits 150 "torch.compile, airbench94 bf16" &&
    perf_compile airbench94-1024-bf16 "$(images_per_s "$out/perf-airbench94-1024-bf16-nhwc-deterministic.log")" \
      "${air[@]}" --bf16
  fits 120 "torch.compile, workshop CNN" &&
    perf_compile workshop-512 "$(images_per_s "$out/perf-workshop-512-nhwc-deterministic.log")" --batch-size 512
  # where PyTorch's step goes, to set beside ours: what the next kernels to write should be
  fits 40 "PyTorch's profile, airbench94 bf16" && perf_profile airbench94-1024-bf16 "${air[@]}" --bf16
  fits 40 "PyTorch's profile, workshop CNN" && perf_profile workshop-512 --batch-size 512
  # ours with each switch, against the same eager figures
  for prec in bf16 fp32; do
    [[ $prec == bf16 ]] && ours=(--precision bf16) || ours=()
    name=airbench94-1024-$prec
    variant "$name" nhwc fastest "${eager[$prec]:-}" - "${air[@]}" "${ours[@]}"
    variant "$name" nchw deterministic "${eager[$prec]:-}" - "${air[@]}" "${ours[@]}"
    variant "$name-first-bias-stopped" nhwc deterministic "${eager[$prec]:-}" - "${air[@]}" "${ours[@]}" \
      --first-bias-stopped
    # training steps op by op (one rank's default: CUDA graphs)
    variant "$name-op-by-op" nhwc deterministic "${eager[$prec]:-}" CIFAR10_CUDA_GRAPHS=off "${air[@]}" "${ours[@]}"
    # the whitening layer's forward by cuDNN instead of ours (small_conv_kernel)
    variant "$name-small-conv-cudnn" nhwc deterministic "${eager[$prec]:-}" CIFAR10_CUDA_SMALL_CONV=cudnn \
      "${air[@]}" "${ours[@]}"
  done
  # bf16 with float activations and bf16 copies for the products; the filters converted at each
  # call instead of made ready per update
  variant airbench94-1024-bf16-copies nhwc deterministic "${eager[bf16]:-}" CIFAR10_CUDA_BF16=copies "${air[@]}" \
    --precision bf16
  variant airbench94-1024-bf16-filters-per-call nhwc deterministic "${eager[bf16]:-}" CIFAR10_CUDA_FILTERS=per-call \
    "${air[@]}" --precision bf16
  variant workshop-512 nhwc fastest "${eager[workshop]:-}" - --batch-size 512
  variant workshop-512 nchw deterministic "${eager[workshop]:-}" - --batch-size 512
  variant workshop-512-op-by-op nhwc deterministic "${eager[workshop]:-}" CIFAR10_CUDA_GRAPHS=off --batch-size 512
  # the first layer's forward (3 -> 32, 3x3) by cuDNN instead of ours
  variant workshop-512-small-conv-cudnn nhwc deterministic "${eager[workshop]:-}" CIFAR10_CUDA_SMALL_CONV=cudnn \
    --batch-size 512
  ((real)) && fits 20 "time to accuracy, bf16 seed 1 op by op" && tta_run bf16 1 CIFAR10_CUDA_GRAPHS=off
  step_done perf
}

# variant NAME LAYOUT ALGOS TORCH ENV FLAGS...: perf_ours with ENV (VAR=VALUE, or - for none)
# in its environment, when it fits.
variant() {
  local what="ours, $1, $2, $3"
  [[ $5 == - ]] || what+=", $5"
  fits 15 "$what" || return 0
  [[ $5 == - ]] || local -x "$5"
  perf_ours "$1" "$2" "$3" "$4" "${@:6}"
}

# The base commit's cifar10-bench (step "base"), built for the CPU only, else nothing.
base_bench=
build_base() {
  [[ -f $carry/base.tar.gz ]] || return 0
  local d=$scratch/gpu-check-base
  rm -rf "$d" && mkdir -p "$d" && tar -xzf "$carry/base.tar.gz" -C "$d"
  make -C "$d/base" -j"$(nproc)" CUDA=0 build/cifar10-bench >"$out/base-build.log" 2>&1 ||
    { tail -n 20 "$out/base-build.log"; die "the base commit's build failed"; }
  base_bench=$d/base/build/cifar10-bench
  echo "base: $(cat "$carry/base.rev")"
}

# base_run NAME LABEL ARGS...: the base's cifar10-bench with ARGS into $out/NAME-base.log, right
# after ours wrote $out/NAME.log; one line with both and their ratio.
base_run() {
  [[ -n $base_bench ]] || return 0
  local name=$1 label=$2 ours theirs
  shift 2
  "$base_bench" "$@" >"$out/$name-base.log" 2>&1 || { echo "$label: base failed: $(tail -n 1 "$out/$name-base.log")"; return 0; }
  ours=$(images_per_s "$out/$name.log") theirs=$(images_per_s "$out/$name-base.log")
  echo "$label: ours $ours images/s, base $theirs: $(awk -v a="$ours" -v b="$theirs" 'BEGIN { printf "%.3fx", a / b }')"
}

# cpu_pair MODEL BATCH: ours in fp32, in bf16 on each bf16 instruction path the CPU has, and
# PyTorch's fp32 and bf16 autocast, all on 2 threads; one images/s line each.; with a base commit
# (step "base"), its fp32 and amx runs beside ours.
cpu_pair() {
  local args=(--device cpu --model "$1" --batch-size "$2" --threads 2 --warmup 2 --steps 3 --runs 3) v
  build/cifar10-bench "${args[@]}" --precision fp32 >"$out/cpu-$1-fp32.log" 2>&1
  echo "$1, batch $2, 2 threads: ours fp32 $(images_per_s "$out/cpu-$1-fp32.log") images/s ($(sed -n 's/.*isa=\([a-z0-9]*\).*/\1/p' "$out/cpu-$1-fp32.log"))"
  base_run "cpu-$1-fp32" "$1, batch $2, fp32, against the base" "${args[@]}" --precision fp32
  for v in amx amx-prefetch amx-resident amx-noprefetch amx-im2col avx512bf16; do
    if build/cifar10-bench "${args[@]}" --precision bf16 --bf16-isa $v >"$out/cpu-$1-$v.log" 2>&1; then
      echo "$1, batch $2, 2 threads: ours bf16 on $v $(images_per_s "$out/cpu-$1-$v.log") images/s"
      [[ $v != amx ]] || base_run "cpu-$1-amx" "$1, batch $2, bf16 on amx, against the base" "${args[@]}" --precision bf16 --bf16-isa amx
    else
      echo "$1, batch $2: ours bf16 on $v: $(tail -n 1 "$out/cpu-$1-$v.log")"
    fi
  done
  for v in "" --bf16; do
    python3 scripts/bench_torch.py --device cpu --model "$1" --batch-size "$2" --threads 2 --warmup 2 --steps 3 \
      --runs 3 $v >"$out/cpu-$1-torch$v.log" 2>&1 || echo "PyTorch ${v:-fp32} failed: see cpu-$1-torch$v.log"
    grep '^PyTorch' "$out/cpu-$1-torch$v.log" || true
  done
}

check_cpu() {
  build build/tests/make_synthetic
  build_base
  lscpu | grep -E '^Model name|^CPU\(s\)|^Thread|^Flags' | sed 's/^Flags:.*/flags: '"$(grep -ow -E 'avx512_bf16|amx_bf16|amx_tile' /proc/cpuinfo | sort -u | tr '\n' ' ')"'/' |
    tee "$out/cpu.txt"
  {
    cpu_pair airbench94 512
    cpu_pair workshop-cnn 128
  } | tee "$out/summary.txt"
  synthetic "$scratch/gpu-check-data" 2048
  # airbench94 in bf16 on the tiles: 20 steps of the recipe (its loss in the log).
  check "airbench94 bf16 on the CPU, 20 steps" build/cifar10-train --device cpu --precision bf16 --threads 2 \
    --model airbench94 --epochs 0.5 --batch-size 256 --whiten-images 2000 --print-freq 4 \
    --model-file "$scratch/cpu-bf16.safetensors" --resume never "$scratch/gpu-check-data"
  step_done cpu
}

check_train() {
  build
  local d=$scratch/cifar10-real
  real_data
  local t0=$SECONDS
  build/cifar10-train --device=cuda --model workshop-cnn --model-file "$scratch/real.safetensors" --resume never "$d" | tee "$out/train.log"
  local train_s=$((SECONDS - t0))
  build/cifar10-test --device=cuda --model-file "$scratch/real.safetensors" "$d" | tee "$out/test.log"
  t0=$SECONDS
  build/cifar10-train --device=cuda --model airbench94 --precision fp32 --no-eval --model-file "$scratch/airbench94.safetensors" \
    --resume never "$d" | tee "$out/train-airbench94.log"
  local airbench_s=$((SECONDS - t0))
  t0=$SECONDS
  build/cifar10-train --device=cuda --model airbench94 --precision bf16 --no-eval \
    --model-file "$scratch/airbench94-bf16.safetensors" --resume never "$d" | tee "$out/train-airbench94-bf16.log"
  local bf16_s=$((SECONDS - t0))
  {
    echo "workshop-cnn, 10 epochs, its recipe, 1 GPU: ${train_s} s wall (process start to model file)"
    grep '^Accuracy of the network' "$out/test.log"
    echo "airbench94, 9.9 epochs, no per-epoch evaluation, 1 GPU: ${airbench_s} s wall (process start to model file)"
    grep '^final test accuracy' "$out/train-airbench94.log"
    echo "airbench94 --precision bf16, the same: ${bf16_s} s wall"
    grep '^final test accuracy' "$out/train-airbench94-bf16.log"
  } | tee "$out/summary.txt"
}

# cpu-quick: what a window's spare time measures of the CPU issue: airbench94's step on that
# machine's AMX tiles (amx: each convolution pass times its loops at its first call, in the
# warm-up step, and keeps the fastest; the per-layer table names them with each candidate's
# time) against PyTorch's bf16 autocast (the current bench_torch.py, as the cpu step runs it),
# ours also without the tile arithmetic (amx-cost: the step less the tiles' time, hence their
# share and their fraction of the peak); then, as time allows, amx with each loop fixed (the
# same bits: amx-prefetch, the loops before the find; amx-resident, each block of sums resident
# in the tiles through its whole sum; amx-noprefetch), in fp32 and with the tiles' earlier
# method (amx-im2col); 2 threads, batch 512, one run of 2 steps after 1 warm-up; the per-layer
# tables in cpu-quick-*.log.
check_cpu_quick() {
  build
  local args=(--device cpu --model airbench94 --batch-size 512 --threads 2 --warmup 1 --steps 2 --runs 1) p
  local -A how=([bf16]="--precision bf16 --bf16-isa amx" [cost]="--precision bf16 --bf16-isa amx-cost"
    [prefetch]="--precision bf16 --bf16-isa amx-prefetch" [resident]="--precision bf16 --bf16-isa amx-resident"
    [noprefetch]="--precision bf16 --bf16-isa amx-noprefetch" [fp32]="--precision fp32"
    [im2col]="--precision bf16 --bf16-isa amx-im2col")
  {
    for p in bf16 cost torch prefetch resident noprefetch fp32 im2col; do
      if [[ $p == torch ]]; then
        python3 scripts/bench_torch.py --device cpu --model airbench94 --batch-size 512 --threads 2 --warmup 1 \
          --steps 2 --runs 1 --bf16 >"$out/cpu-quick-torch-bf16.log" 2>&1 || echo "PyTorch bf16 failed: see cpu-quick-torch-bf16.log"
        grep '^PyTorch' "$out/cpu-quick-torch-bf16.log" || true
        continue
      fi
      # shellcheck disable=SC2086 # how's words
      if build/cifar10-bench "${args[@]}" ${how[$p]} >"$out/cpu-quick-$p.log" 2>&1; then
        echo "airbench94, batch 512, 2 threads: ours ${how[$p]#--precision } $(images_per_s "$out/cpu-quick-$p.log") images/s"
      else
        echo "airbench94, ours $p: $(tail -n 1 "$out/cpu-quick-$p.log")"
      fi
      if [[ $p == cost ]]; then tiles_share "$out/cpu-quick-bf16.log" "$out/cpu-quick-cost.log"; fi
    done
  } | tee -a "$out/summary.txt"
  step_done cpu-quick
}

# tiles_share AMX_LOG COST_LOG (cifar10-bench logs at batch 512): the tiles' time (their loads,
# which amx-cost drops, and their arithmetic), as the step on the tiles less the step without
# them (amx-cost), against the tile products amx-cost counted and the tiles' peak the amx run
# measured (a probe from registers: no loads).
tiles_share() {
  local amx cost gflop peak
  amx=$(images_per_s "$1") cost=$(images_per_s "$2")
  gflop=$(sed -n 's/^tile products: [0-9]* TDPBF16PS a step (rank 0), \([0-9.]*\) GFLOP.*/\1/p' "$2")
  peak=$(sed -n 's/^bf16 multiply-add peak (amx): .* \/ \([0-9.]*\) (.*/\1/p' "$1")
  if [[ -z $amx || -z $cost || -z $gflop || -z $peak || $amx == 0.0 || $cost == 0.0 ]]; then
    echo "the tiles' share: not known (a run failed or printed no tile products or peak)"
    return
  fi
  awk -v a="$amx" -v c="$cost" -v g="$gflop" -v p="$peak" 'BEGIN {
    t = 512 / a - 512 / c; r = 512 / c
    if (t <= 0) { printf "the tiles'"'"' share: none measurable (the step on them %.1f ms, without them %.1f ms)\n", 512000 / a, 1000 * r; exit }
    printf "the tiles'"'"' loads and arithmetic: %.1f ms of the %.1f ms step (the rest %.1f ms), %.1f GFLOP: %.0f GFLOP/s, %.1f%% of their peak (%.1f)\n",
      1000 * t, 512000 / a, 1000 * r, g, g / t, 100 * g / t / p, p }'
}

# The variables this script's functions read, for check's child bash (GPU_CHECK_CHECK_S).
export out scratch carry

case $step in
  prepare) prepare ;;
  base) base "$2" ;;
  test) check_test ;;
  sanitize) check_sanitize ;;
  rest) check_rest ;;
  bench) check_bench ;;
  train) check_train ;;
  profile) check_profile ;;
  cpu) check_cpu ;;
  cpu-quick) check_cpu_quick ;;
  perf) check_perf ;;
  window)
    # The call's limit: GPU_CHECK_WINDOW_S (default 560 s: the device call's "timeout -s TERM
    # 570" less a margin). The test step starts no check in its last 250 s (perf's core, the
    # runs to accuracy and cpu-quick need them), each check at most 180 s; perf starts nothing
    # that would not end 75 s before the limit; cpu-quick (about a minute) runs when 60 s are
    # left, stopped 3 s before the limit. A failed build (exit 3) ends the window: building
    # again in perf and cpu-quick would only fail again. (This script from the repository
    # root, where it runs, whatever the caller's directory.)
    window_end=$(($(date +%s) + ${GPU_CHECK_WINDOW_S:-560})) gate=passed rc=0
    OUT=$out/test GPU_CHECK_WINDOW=1 GPU_CHECK_CHECK_S=${GPU_CHECK_CHECK_S:-180} \
      GPU_CHECK_DEADLINE=$((window_end - 250)) bash scripts/gpu-check.sh test || rc=$?
    ((rc == 0)) || fails=$((fails + 1)) gate=failed
    if ((rc == 3)); then
      echo "window: the build failed (test/summary.txt): perf and cpu-quick not run" | tee -a "$out/summary.txt"
    else
      OUT=$out/perf GPU_CHECK_GATE=$gate GPU_CHECK_DEADLINE=$((window_end - 75)) bash scripts/gpu-check.sh perf ||
        fails=$((fails + 1))
      left=$((window_end - $(date +%s)))
      if ((left >= 60)); then
        OUT=$out/cpu timeout -k 2 $((left - 3)) bash scripts/gpu-check.sh cpu-quick || fails=$((fails + 1))
      else
        echo "window: cpu-quick skipped: $left s left" | tee -a "$out/summary.txt"
      fi
    fi
    step_done window # (its count: the steps that failed)
    ;;
  *) echo "gpu-check.sh: unknown step '$step' (prepare, stamp, base, keep, test, sanitize, rest, bench, perf, window, profile, cpu, cpu-quick or train)" >&2; exit 2 ;;
esac
