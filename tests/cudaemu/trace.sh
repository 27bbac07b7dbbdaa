#!/usr/bin/env bash
# tests/cudaemu/trace.sh FILE: a CUDAEMU_TRACE file (cudaemu.cc) with its kernels named, to
# standard output: "kernel OBJECT+0xOFFSET ..." becomes "kernel NAME<TEMPLATE ARGS> ...".
# What a step launches, in order, and with which grids, without a GPU, e.g.
#   CUDAEMU_TRACE=/tmp/t build-emu/cifar10-bench --device cuda --model airbench94 \
#     --batch-size 64 --precision bf16 --warmup 1 --steps 1 --runs 1
#   tests/cudaemu/trace.sh /tmp/t
set -euo pipefail
[[ $# == 1 && -r $1 ]] || {
  echo "usage: tests/cudaemu/trace.sh CUDAEMU_TRACE-FILE" >&2
  exit 2
}
names=$(mktemp)
trap 'rm -f "$names"' EXIT
# Each object's offsets through addr2line, one "OBJECT+0xOFFSET NAME" line each.
while read -r obj; do
  mapfile -t offs < <(awk -v o="$obj" '$1 == "kernel" { split($2, a, "+"); if (a[1] == o) print a[2] }' "$1" |
    sort -u)
  ((${#offs[@]})) || continue
  addr2line -f -C -e "$obj" "${offs[@]}" | paste - - | cut -f1 |
    perl -pe 's/(\((?:[^()]++|(?1))*\))$//; s/^void //; s/ //g' | paste -d' ' <(printf '%s\n' "${offs[@]/#/$obj+}") -
done < <(awk '$1 == "kernel" { split($2, a, "+"); print a[1] }' "$1" | sort -u) >"$names"
awk 'NR == FNR { name[$1] = $2; next } $1 == "kernel" && ($2 in name) { $2 = name[$2] } { print }' \
  "$names" "$1"
