#!/usr/bin/env bash
# Puts CIFAR-10 (binary version) into DIR/cifar-10-batches-bin, ready for cifar10-train DIR.
#
#   get-data.sh [--url URL] [--md5 SUM] [--from PATH] [--stall S] [DIR]  (DIR: ./cifar10-data)
#
# Downloads the official cifar-10-binary.tar.gz (or takes --from: a local copy of that tarball,
# or a directory that already holds the batches), verifies its MD5, and extracts it. A download
# that receives nothing for S seconds (--stall, default 60) fails, retried twice. Idempotent:
# a complete DIR/cifar-10-batches-bin (marked by .complete) is left as it is. A failed download,
# a checksum mismatch or an interrupted run leave no partial DIR/cifar-10-batches-bin behind.
# Exit codes: 0 done (or already there), 1 failure (message on stderr), 2 bad usage.
set -euo pipefail

URL=https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz
MD5=c32a1d4ab5d03f1284b67883e8d87530 # of the official tarball, 170052171 bytes
FROM=""
STALL=60
DIR=./cifar10-data
FILES=(data_batch_1.bin data_batch_2.bin data_batch_3.bin data_batch_4.bin data_batch_5.bin test_batch.bin)

usage() { sed -n '2,12s/^# \{0,1\}//p' "$0"; }
die() { echo "get-data.sh: $*" >&2; exit 1; }

while (($#)); do
  case $1 in
    --url) URL=${2:?--url needs a value}; shift 2 ;;
    --url=*) URL=${1#*=}; shift ;;
    --md5) MD5=${2:?--md5 needs a value}; shift 2 ;;
    --md5=*) MD5=${1#*=}; shift ;;
    --from) FROM=${2:?--from needs a value}; shift 2 ;;
    --from=*) FROM=${1#*=}; shift ;;
    --stall) STALL=${2:?--stall needs a value}; shift 2 ;;
    --stall=*) STALL=${1#*=}; shift ;;
    -h | --help) usage; exit 0 ;;
    -*) echo "get-data.sh: unknown flag $1 (try --help)" >&2; exit 2 ;;
    *) DIR=$1; shift ;;
  esac
done

[[ $STALL =~ ^[1-9][0-9]{0,5}$ ]] || { echo "get-data.sh: --stall takes whole seconds (1 or more), not '$STALL'" >&2; exit 2; }

OUT=$DIR/cifar-10-batches-bin
if [[ -f $OUT/.complete ]]; then
  missing=0
  for f in "${FILES[@]}"; do [[ -s $OUT/$f ]] || missing=1; done
  if ((!missing)); then
    echo "get-data.sh: $OUT is already complete ($(cat "$OUT/.complete"))"
    exit 0
  fi
fi
mkdir -p "$DIR" || die "cannot create $DIR"

work=$(mktemp -d "$DIR/.get-data.XXXXXX") || die "cannot write in $DIR"
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

# 1. A directory that already holds the batches: copy them (no tarball to checksum).
if [[ -n $FROM && -d $FROM ]]; then
  src=$FROM
  [[ -f $src/data_batch_1.bin ]] || src=$FROM/cifar-10-batches-bin
  for f in "${FILES[@]}"; do
    [[ -s $src/$f ]] || die "$src/$f: missing or empty"
    (($(stat -c %s "$src/$f") % 3073 == 0)) || die "$src/$f: size is not a multiple of 3073-byte records"
  done
  mkdir "$work/cifar-10-batches-bin"
  for f in "${FILES[@]}"; do cp "$src/$f" "$work/cifar-10-batches-bin/"; done
  echo "copied from $src" >"$work/cifar-10-batches-bin/.complete"
else
  # 2. The tarball: a local copy, or downloaded.
  tarball=$work/cifar-10-binary.tar.gz
  if [[ -n $FROM ]]; then
    [[ -f $FROM ]] || die "$FROM: no such file or directory"
    cp "$FROM" "$tarball" || die "$FROM: cannot read"
    origin=$FROM
  else
    echo "get-data.sh: downloading $URL"
    if command -v curl >/dev/null; then
      progress=(-sS)
      if [[ -t 2 ]]; then progress=(--progress-bar); fi
      # Below 1 byte/s for STALL s once connected: a stalled transfer (curl's exit 28, as for a
      # connect timeout, told apart by the connect time, 0 without a connection), retried like
      # the others.
      got=$(curl -fL "${progress[@]}" --retry 2 --connect-timeout 20 --speed-limit 1 --speed-time "$STALL" \
        -w '%{time_connect}' -o "$tarball" "$URL") || {
        rc=$?
        if ((rc == 28)) && awk -v t="${got:-0}" 'BEGIN { exit !(t > 0) }'; then
          die "download of $URL stalled: nothing received for $STALL s (--stall)"
        fi
        die "download of $URL failed (offline? pass a local copy with --from FILE)"
      }
    elif command -v wget >/dev/null; then
      wget -q --tries=3 --connect-timeout=20 --read-timeout="$STALL" -O "$tarball" "$URL" ||
        die "download of $URL failed (offline? pass a local copy with --from FILE)"
    else
      die "neither curl nor wget is installed (apt-get install curl), or pass a local copy with --from FILE"
    fi
    origin=$URL
  fi
  got=$(md5sum "$tarball" | cut -d' ' -f1)
  [[ $got == "$MD5" ]] || die "checksum mismatch for $origin: MD5 $got, expected $MD5 (damaged or interrupted download?)"
  tar -xzf "$tarball" -C "$work" || die "$origin: cannot extract (not a valid tar.gz)"
  for f in "${FILES[@]}"; do
    [[ -s $work/cifar-10-batches-bin/$f ]] || die "$origin: the archive has no cifar-10-batches-bin/$f"
  done
  echo "md5 $MD5 from $origin" >"$work/cifar-10-batches-bin/.complete"
fi

# Publish in one rename, so DIR/cifar-10-batches-bin is either complete or absent.
rm -rf "$OUT"
mv "$work/cifar-10-batches-bin" "$OUT" || die "cannot move the data into $OUT"
echo "get-data.sh: CIFAR-10 ready in $OUT"
