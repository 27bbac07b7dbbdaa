#!/usr/bin/env bash
# Behaviour unchanged: a refactoring's check. Builds commit REV and the working tree CPU-only on
# this machine, then runs the same short jobs with both and compares what they leave:
#   - both networks (workshop-cnn, airbench94) for a few steps on 1 and 2 ranks, on a synthetic
#     data set in the official layout;
#   - the model and checkpoint files: every tensor bit for bit, the metadata but for run_id;
#   - the metrics files, but for the run id and the clock (elapsed_s, images_per_s, eta_s);
#   - the logs, once run ids and times are stripped;
#   - cifar10-test --json on each model, and cifar10-predict on a few pictures.
# Prints one line per job and "same behaviour" at the end; exits 1 at the first difference
# (showing it), 2 on bad usage.
#
#   scripts/same-behaviour.sh REV [--keep DIR]
set -euo pipefail

usage() { echo "usage: scripts/same-behaviour.sh REV [--keep DIR]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
rev=$1 keep=""
shift
while [[ $# -gt 0 ]]; do
  case $1 in
    --keep) [[ $# -ge 2 ]] || usage; keep=$2; shift 2 ;;
    *) usage ;;
  esac
done
root=$(cd "$(dirname "$0")/.." && pwd)
sha=$(git -C "$root" rev-parse --verify --quiet "$rev^{commit}") ||
  { echo "same-behaviour.sh: no commit $rev" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1

W=$(mktemp -d /tmp/same-behaviour.XXXXXX)
cleanup() {
  git -C "$root" worktree remove --force "$W/base-src" >/dev/null 2>&1 || true
  if [[ -n $keep ]]; then rm -rf "$keep" && mv "$W" "$keep"; else rm -rf "$W"; fi
}
trap cleanup EXIT

PROGS=(build/cifar10-train build/cifar10-test build/cifar10-predict)
git -C "$root" worktree add --detach "$W/base-src" "$sha" >/dev/null 2>&1
echo "same-behaviour.sh: building base ${sha:0:12} and the working tree (CPU only)"
make -C "$W/base-src" -j"$(nproc)" CUDA=0 "${PROGS[@]}" >"$W/base-build.log" 2>&1 ||
  { echo "same-behaviour.sh: the base does not build (see $W/base-build.log)" >&2; exit 1; }
make -C "$root" -j"$(nproc)" CUDA=0 BUILD="$W/head-build" "${PROGS[@]/build\//$W/head-build/}" \
  "$W/head-build/tests/make_synthetic" >"$W/head-build.log" 2>&1 ||
  { echo "same-behaviour.sh: the working tree does not build (see $W/head-build.log)" >&2; exit 1; }
declare -A BIN=([base]=$W/base-src/build [head]=$W/head-build)

"${BIN[head]}/tests/make_synthetic" "$W/data" 80 200 >/dev/null
# Three test images as PNG pictures (8-bit RGB, no filter), for cifar10-predict.
python3 - "$W/data/test_batch.bin" "$W/pictures" <<'PNG'
import os, struct, sys, zlib
data, out = open(sys.argv[1], "rb").read(), sys.argv[2]
os.makedirs(out)
def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
for i in (0, 7, 13):
    px = data[i * 3073 + 1:(i + 1) * 3073]
    rows = b"".join(b"\0" + bytes(px[c * 1024 + y * 32 + x] for x in range(32) for c in range(3))
                    for y in range(32))
    png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 32, 32, 8, 2, 0, 0, 0))
    png += chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")
    open(os.path.join(out, f"{i}.png"), "wb").write(png)
PNG

# Run ids, clocks and the working directory out of a log or a metrics file.
strip_log() {
  sed -E -e 's/[0-9]{8}T[0-9]{6}Z-[0-9a-f]+/RUN/g' -e 's#'"$W"'/(base|head)#OUT#g' \
    -e 's/[0-9.]+ images\/s/T images\/s/g' -e 's/(elapsed|ETA) [0-9hms.]+/\1 T/g' \
    -e 's/run time .*/run time T/' -e 's/"(elapsed_s|images_per_s|eta_s)":[-0-9.e+]+/"\1":T/g' "$1"
}

compare_files() { # DIR_A DIR_B: safetensors and text files
  python3 - "$1" "$2" <<'EOF'
import json, os, struct, sys
a, b = sys.argv[1], sys.argv[2]
def parts(path):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    header["__metadata__"].pop("run_id", None)
    return header, data[8 + n:]
names = sorted(os.listdir(a))
if names != sorted(os.listdir(b)):
    sys.exit(f"files differ: {names} against {sorted(os.listdir(b))}")
for name in names:
    if not name.endswith(".safetensors"):
        continue
    (ha, da), (hb, db) = parts(os.path.join(a, name)), parts(os.path.join(b, name))
    if sorted(ha) != sorted(hb):
        sys.exit(f"{name}: the tensors differ: {sorted(ha)} against {sorted(hb)}")
    differ = [key for key, t in ha.items() if key != "__metadata__" and
              (t != hb[key] or da[slice(*t["data_offsets"])] != db[slice(*t["data_offsets"])])]
    if differ:
        sys.exit(f"{name}: {len(differ)} tensors differ: {', '.join(differ)}")
    ma, mb = ha["__metadata__"], hb["__metadata__"]
    for key in sorted(set(ma) | set(mb)):
        if ma.get(key) != mb.get(key):
            sys.exit(f"{name}: metadata {key} differs: {ma.get(key)} against {mb.get(key)}")
EOF
}

# job NAME RANKS ARGS...: the same training job with both builds, then cifar10-test and
# cifar10-predict on its model; compares everything.
job() {
  local name=$1 ranks=$2
  shift 2
  for side in base head; do
    local d=$W/$side/$name
    mkdir -p "$d/files"
    (cd "$d" && mpirun -np "$ranks" "${BIN[$side]}/cifar10-train" --threads 1 --device cpu --print-freq 1 \
      --model-file files/model.safetensors "$@" "$W/data" >train.log 2>&1 </dev/null) ||
      { echo "same-behaviour.sh: $name: $side's training failed:" >&2; tail -n 5 "$d/train.log" >&2; exit 1; }
    (cd "$d" && "${BIN[$side]}/cifar10-test" --threads 1 --device cpu --json test.json \
      --model-file files/model.safetensors "$W/data" >test.log 2>&1 &&
      "${BIN[$side]}/cifar10-predict" --threads 1 --device cpu --model-file files/model.safetensors \
      "$W"/pictures/*.png >predict.txt 2>&1) ||
      { echo "same-behaviour.sh: $name: $side's cifar10-test or cifar10-predict failed" >&2; exit 1; }
    for f in train.log files/model.metrics.jsonl test.log test.json predict.txt; do
      strip_log "$d/$f" >"$d/$(basename "$f").stripped"
    done
  done
  local a=$W/base/$name b=$W/head/$name f
  compare_files "$a/files" "$b/files" || { echo "same-behaviour.sh: $name: files differ" >&2; exit 1; }
  for f in train.log model.metrics.jsonl test.log test.json predict.txt; do
    diff -u "$a/$f.stripped" "$b/$f.stripped" >&2 || { echo "same-behaviour.sh: $name: $f differs" >&2; exit 1; }
  done
  echo "  $name ($ranks rank(s)): model, checkpoint, metrics, log, cifar10-test, cifar10-predict: same"
}

WS=(--model workshop-cnn --epochs 2 --batch-size 32 --learning-rate 0.02)
AB=(--model airbench94 --epochs 1.5 --batch-size 64 --whiten-images 100 --tta 2)
job workshop-1 1 "${WS[@]}"
job workshop-2 2 "${WS[@]}"
job airbench94-1 1 "${AB[@]}"
job airbench94-2 2 "${AB[@]}"
echo "same behaviour: ${sha:0:12} and the working tree ($(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD -- . || echo ' + changes'))"
