#!/usr/bin/env bash
# Checks of the CUDA backend on a GPU machine, one step per call (each fits in 10 minutes):
#
#   scripts/gpu-check.sh prepare   here (with ../shared): fills .gpu-carry/ with the CIFAR-10
#                                  JPEG copy and its converter, and Debian's Open MPI packages
#                                  unpacked (dpkg -x) for a GPU machine that has no Open MPI
#   scripts/gpu-check.sh test      build; GPU tests (tests/test_ops: every op case on the GPU
#                                  against double precision; tests/test_cuda, for every network: a
#                                  training step, 200 steps, bit-identical repeat, cross-device
#                                  checkpoints); 1 and 2 ranks training on one GPU; a GPU-trained
#                                  model scored on the CPU; compute-sanitizer memcheck, racecheck
#                                  and synccheck on a short run
#   scripts/gpu-check.sh bench     images/s at batch 128 and 512: cifar10-bench --device=cuda
#                                  against PyTorch eager and torch.compile on the same GPU
#   scripts/gpu-check.sh train     the default 10 epochs on the real images, then cifar10-test:
#                                  accuracy and wall time
#
# With the repository's device tool: run "scripts/gpu-check.sh STEP" with carry [".gpu-carry"].
# Logs and a summary go to $OUT (the tool's output folder) or to ./gpu-check-out.
# Exit: 0 when the step's checks passed, 1 when one failed, 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "gpu-check.sh: $*" >&2; exit 1; }
[[ $# == 1 ]] || { sed -n '2,21s/^# \{0,1\}//p' "$0" >&2; exit 2; }
step=$1
carry=$PWD/.gpu-carry
out=${OUT:-$PWD/gpu-check-out}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none

prepare() {
  [[ -d ../shared/cifar10 ]] || die "../shared/cifar10 not found (prepare runs on the development machine)"
  rm -rf "$carry" && mkdir -p "$carry/debs"
  cp ../shared/cifar10/cifar10-jpeg.tar.gz ../shared/cifar10/jpg2cifarbin.py ../shared/cifar10/make-cifar10-bin "$carry/"
  # Open MPI and what it links, as Debian ships them (the GPU machine may have none).
  (cd "$carry/debs" && apt-get download openmpi-bin openmpi-common libopenmpi3 libopenmpi-dev libpmix2 \
    libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2 libpsm-infinipath1 \
    libibverbs1 librdmacm1 libnl-3-200 libnl-route-3-200 libltdl7 libnuma1 libxnvctrl0 libgfortran5 >/dev/null)
  du -sh "$carry"
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
  export LD_LIBRARY_PATH=$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/openmpi/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export OMPI_MCA_plm=isolated
}

build() {
  use_mpi
  local arch
  arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n 1 | tr -d .)
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/gpu.txt"
  mpirun --version | head -n 1 | tee -a "$out/gpu.txt"
  make -j"$(nproc)" CUDA=1 CUDA_ARCH="$arch" all "$@" >"$out/build.log" 2>&1 || { tail -n 30 "$out/build.log"; die "build failed"; }
  grep '^CUDA:' "$out/build.log"
}

synthetic() { # synthetic DIR N: a small dataset of N training images
  [[ -d $1 ]] || build/tests/make_synthetic "$1" "$2" 200 >/dev/null
}

check_test() {
  build build/tests/test_ops build/tests/test_cuda build/tests/make_synthetic
  local fails=0 d=/tmp/gpu-check-data
  build/tests/test_ops | tee "$out/test_ops.log" || fails=$((fails + 1))
  grep -q '^test_ops: cuda: skipped' "$out/test_ops.log" && { echo "FAIL: test_ops skipped the GPU"; fails=$((fails + 1)); }
  build/tests/test_cuda | tee "$out/test_cuda.log" || fails=$((fails + 1))
  synthetic $d 2048
  for np in 1 2; do
    echo "== training, $np rank(s) on one GPU"
    mpirun -np "$np" build/cifar10-train --device=cuda --epochs 2 --batch-size 64 --model-file /tmp/m$np.safetensors \
      --resume never $d 2>&1 | tee "$out/train-np$np.log" || fails=$((fails + 1))
  done
  echo "== the 2-rank GPU model scored on the CPU and on the GPU"
  for dev in cpu cuda; do
    build/cifar10-test --device=$dev --model-file /tmp/m2.safetensors $d | tee "$out/test-$dev.log" || fails=$((fails + 1))
  done
  cmp <(grep '^Accuracy' "$out/test-cpu.log") <(grep '^Accuracy' "$out/test-cuda.log") ||
    { echo "FAIL: CPU and GPU scores of one model differ"; fails=$((fails + 1)); }
  for tool in memcheck racecheck synccheck; do
    echo "== compute-sanitizer --tool $tool"
    local extra=()
    [[ $tool == memcheck ]] && extra=(--leak-check full)
    compute-sanitizer --tool $tool "${extra[@]}" --error-exitcode 9 build/cifar10-train --device=cuda --epochs 1 \
      --batch-size 32 --no-eval --print-freq 10 --model-file /tmp/san.safetensors --resume never $d \
      >"$out/sanitizer-$tool.log" 2>&1 || { fails=$((fails + 1)); echo "FAIL: $tool"; }
    tail -n 3 "$out/sanitizer-$tool.log"
  done
  echo "gpu-check test: $fails failure(s)" | tee "$out/summary.txt"
  ((fails == 0))
}

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
  {
    echo "images/s: ours / PyTorch eager / torch.compile"
    for b in 128 512; do
      r() { sed -n 's/^result: images_per_s=\([0-9.]*\).*/\1/p' "$1" | tail -n 1; }
      echo "batch $b: $(r "$out/ours-$b.log") / $(r "$out/torch-eager-$b.log") / $(r "$out/torch-compile-$b.log")"
    done
  } | tee "$out/summary.txt"
}

check_train() {
  build
  local d=/tmp/cifar10-real
  [[ -f $carry/cifar10-jpeg.tar.gz ]] || die ".gpu-carry/cifar10-jpeg.tar.gz missing (run 'prepare' and carry .gpu-carry)"
  [[ -d $d/cifar-10-batches-bin ]] || "$carry/make-cifar10-bin" "$d" >"$out/convert.log" 2>&1 ||
    { tail "$out/convert.log"; die "make-cifar10-bin failed"; }
  local t0=$SECONDS
  build/cifar10-train --device=cuda --model-file /tmp/real.safetensors --resume never "$d" | tee "$out/train.log"
  local train_s=$((SECONDS - t0))
  build/cifar10-test --device=cuda --model-file /tmp/real.safetensors "$d" | tee "$out/test.log"
  {
    echo "10 epochs, default settings, 1 GPU: ${train_s} s wall (process start to model file)"
    grep '^Accuracy of the network' "$out/test.log"
  } | tee "$out/summary.txt"
}

case $step in
  prepare) prepare ;;
  test) check_test ;;
  bench) check_bench ;;
  train) check_train ;;
  *) echo "gpu-check.sh: unknown step '$step' (prepare, test, bench or train)" >&2; exit 2 ;;
esac
