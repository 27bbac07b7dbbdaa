#!/usr/bin/env bash
# The main job end to end on one machine: install dependencies, build, get CIFAR-10, train
# airbench94 (cifar10-train's default network and recipe) with `mpirun -np NP`, then score the
# model with cifar10-test.
#
#   scripts/run-example.sh [--data PATH] [--np N] [--epochs N] [--workdir DIR] [-- TRAIN FLAGS]
#
#   --data PATH    an existing cifar-10-binary.tar.gz or a directory with the batches
#                  (default: download the official tarball)
#   --np N         MPI ranks (default 2)
#   --epochs N     epochs (default: the recipe's, 9.9 for airbench94, 10 for workshop-cnn)
#   --workdir DIR  where data, checkpoint and model go (default ./run)
# Flags after -- go to cifar10-train unchanged (e.g. -- --model workshop-cnn).
set -euo pipefail
cd "$(dirname "$0")/.."
data="" np=2 epochs="" workdir=./run extra=()
while (($#)); do
  case $1 in
    --data) data=$2; shift 2 ;;
    --np) np=$2; shift 2 ;;
    --epochs) epochs=$2; shift 2 ;;
    --workdir) workdir=$2; shift 2 ;;
    -h | --help) sed -n '2,15s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --) shift; extra=("$@"); break ;;
    *) echo "run-example.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
scripts/install-deps.sh
make -j"$(nproc)"
mkdir -p "$workdir"
scripts/get-data.sh ${data:+--from "$data"} "$workdir/data"
mpi=(mpirun -np "$np")
if ((EUID == 0)); then mpi+=(--allow-run-as-root); fi
"${mpi[@]}" build/cifar10-train ${epochs:+--epochs "$epochs"} --model-file "$workdir/cifar10-model.safetensors" \
  "${extra[@]}" "$workdir/data"
build/cifar10-test --model-file "$workdir/cifar10-model.safetensors" "$workdir/data"
