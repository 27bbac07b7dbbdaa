#!/usr/bin/env bash
# The AMX tiles' memory traffic without AMX: each pass of airbench94's tile convolutions
# (kernels/cpu/conv_tiles.c) in its plain-C build under cachegrind, with caches shaped as a
# Sapphire / Emerald Rapids core's (L1 data 48 KB 12-way, L2 2 MB 16-way, 64-byte lines), one
# thread. It counts the lines the tile loads miss in L1 and in L2 per TDPBF16PS: a model of
# where the tiles' operands come from, not a timing (no prefetchers, no latencies), for
# comparing layouts and loop orders on machines without AMX.
#
#   scripts/tiles-cache-model.sh [--base REV] [--build DIR] [--only PATTERN] [--resident]
#
# --base REV: the same passes with conv_tiles.c as at commit REV (compiled with that commit's
#   headers), beside this tree's, and whether both give the same result bits.
# --resident: the tiles' loops in their resident order (cpu.h; the bf16 path amx-resident), on
#   each side whose conv_tiles.c has it.
# --build DIR: a build holding libcifar10.a (default build; `make` makes it).
# --only PATTERN: the passes whose line ("fwd 256->256 7x7 ...") matches the grep pattern.
# Each pass runs on a batch of one filter-gradient chunk (2048 grid positions; several chunks of
# the sums'), about 15 minutes for all passes with --base. Needs valgrind.
set -euo pipefail
cd "$(dirname "$0")/.."

base="" build=build only="" resident=""
while [ $# -gt 0 ]; do
    case "$1" in
    --base) base=${2:?--base needs a revision}; shift 2 ;;
    --build) build=${2:?--build needs a directory}; shift 2 ;;
    --only) only=${2:?--only needs a pattern}; shift 2 ;;
    --resident) resident=resident; shift ;;
    *) echo "tiles-cache-model.sh: unknown option '$1' (see the header)" >&2; exit 2 ;;
    esac
done
command -v valgrind >/dev/null || { echo "tiles-cache-model.sh: valgrind not found (apt-get install valgrind)" >&2; exit 1; }
[ -f "$build/libcifar10.a" ] || { echo "tiles-cache-model.sh: $build/libcifar10.a not found (run make)" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
flags=(-O2 -g -std=c11 -D_GNU_SOURCE -fopenmp -ffp-contract=fast -I. -Ikernels/cpu)
# tiles_NAME from the tree at $2: its conv_tiles.c with its headers, not inlined, so that
# cachegrind names the tile loads' misses, and this tree's model calling it as its cpu.h says.
build_model() {
    local tree=$2 conv=$2/kernels/cpu/conv_tiles.c model=$2/scripts/tiles_cache_model.c arg=()
    if grep -q 'int flip, unsigned how' "$tree/kernels/cpu/cpu.h"; then
        arg=(-DTILES_HOW_ARG)
    elif grep -q 'int flip, int resident' "$tree/kernels/cpu/cpu.h"; then
        arg=(-DTILES_RESIDENT_ARG)
    fi
    [ ${#arg[@]} = 0 ] || touch "$tmp/$1.has-resident"
    [ "$tree" = . ] || cp scripts/tiles_cache_model.c "$model"
    gcc "${flags[@]}" -I"$tree" -I"$tree/kernels/cpu" -fno-inline -DCPU_ISA=generic -c "$conv" -o "$tmp/$1-conv.o"
    gcc "${flags[@]}" "${arg[@]}" -c "$model" -o "$tmp/$1-model.o"
    gcc -fopenmp "$tmp/$1-model.o" "$tmp/$1-conv.o" "$build/libcifar10.a" -lm -lz -o "$tmp/tiles_$1"
}
build_model ours .
sides=(ours)
if [ -n "$base" ]; then
    mkdir -p "$tmp/base/scripts"
    git archive "$base" kernels common | tar -x -C "$tmp/base"
    build_model base "$tmp/base"
    sides=(base ours)
fi

# One pass under cachegrind: "TDPBF16PS L1-misses L2-misses bits" of the tile loads.
model() {
    local out="$tmp/cg.$1.$$.$RANDOM"
    local line
    line=$(OMP_NUM_THREADS=1 valgrind --tool=cachegrind --cache-sim=yes --D1=49152,12,64 \
        --LL=2097152,16,64 --I1=32768,8,64 --cachegrind-out-file="$out" "$tmp/tiles_$1" "${@:2}" 2>/dev/null)
    local dps=${line#*: } bits=${line##* }
    dps=${dps%% *}
    cg_annotate "$out" | awk -v dps="$dps" -v bits="$bits" '
        /tiles\.h:tile_load$/ { gsub(/\([^)]*\)/, ""); gsub(/,/, ""); print dps, $5, $6, bits; found = 1 }
        END { if (!found) print dps, "?", "?", bits }'
}

# airbench94's tile layers (C K H k pad) and the batch of one filter-gradient chunk.
layers=("24 64 31 3 1 2" "64 64 15 3 1 8" "64 256 15 3 1 8" "256 256 7 3 1 32" "256 256 3 3 1 128")
printf '%-32s %12s' "pass (batch)" "TDPBF16PS"
for s in "${sides[@]}"; do printf ' %14s %14s' "$s L1/TDP" "$s L2/TDP"; done
[ -n "$base" ] && printf ' %s' "same bits"
printf '\n'
for l in "${layers[@]}"; do
    read -r C K H k pad N <<<"$l"
    for pass in fwd dx dw; do
        name="$pass $C->$K ${H}x$H k$k pad$pad (N $N)"
        if [ -n "$only" ] && ! grep -q -- "$only" <<<"$name"; then continue; fi
        printf '%-32s' "$name"
        first=1 bits0=""
        for s in "${sides[@]}"; do
            r=()
            [ -n "$resident" ] && [ -e "$tmp/$s.has-resident" ] && r=(resident)
            read -r dps l1 l2 bits <<<"$(model "$s" "$C" "$K" "$H" "$k" "$pad" "$N" "$pass" "${r[@]}")"
            [ $first = 1 ] && printf ' %12s' "$dps"
            awk -v d="$dps" -v a="$l1" -v b="$l2" 'BEGIN { if (a == "?") printf " %14s %14s", "?", "?";
                else printf " %14.2f %14.3f", a / d, b / d }'
            [ $first = 0 ] && { [ "$bits" = "$bits0" ] && printf ' yes' || printf ' NO'; }
            first=0 bits0=$bits
        done
        printf '\n'
    done
done
