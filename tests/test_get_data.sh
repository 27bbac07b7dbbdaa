#!/usr/bin/env bash
# scripts/get-data.sh with local files only: a local tarball with --md5, a file:// "download",
# idempotence, a checksum mismatch, an interrupted HTTP download (a loopback server that
# promises more bytes than it sends), stalled ones (--stall), an unreachable server, a
# directory source. A failure must leave no DIR/cifar-10-batches-bin and no temporary files
# behind.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
GET=$(cd "$(dirname "$0")/.." && pwd)/scripts/get-data.sh

mkdir -p "$T/src"
"$BIN/tests/make_synthetic" "$T/src/cifar-10-batches-bin" 10 10 || exit 1
tar -czf "$T/cifar-10-binary.tar.gz" -C "$T/src" cifar-10-batches-bin
MD5=$(md5sum "$T/cifar-10-binary.tar.gz" | cut -d' ' -f1)
clean() { # clean DIR: no published data, no leftovers
  [[ ! -e $1/cifar-10-batches-bin ]] && [[ -z $(find "$1" -name '.get-data.*' 2>/dev/null) ]]
}

run "$GET" --from "$T/cifar-10-binary.tar.gz" --md5 "$MD5" "$T/d1"
expect_rc 0 "local tarball"
check "local tarball extracted" cmp -s "$T/src/cifar-10-batches-bin/test_batch.bin" "$T/d1/cifar-10-batches-bin/test_batch.bin"
check "no leftovers" test -z "$(find "$T/d1" -name '.get-data.*')"
stamp=$(stat -c %Y "$T/d1/cifar-10-batches-bin/data_batch_1.bin")
run "$GET" --from "$T/cifar-10-binary.tar.gz" --md5 "$MD5" "$T/d1"
expect_rc 0 "second run"
expect_out "second run is a no-op" "already complete"
check "second run left files alone" test "$(stat -c %Y "$T/d1/cifar-10-batches-bin/data_batch_1.bin")" = "$stamp"
run "$BIN/cifar10-test" --model-file /nonexistent "$T/d1"
expect_err "trainer finds the extracted data" "/nonexistent: No such file"

run "$GET" --url "file://$T/cifar-10-binary.tar.gz" --md5 "$MD5" "$T/d2"
expect_rc 0 "file:// download"
check "downloaded data complete" test -s "$T/d2/cifar-10-batches-bin/data_batch_5.bin"

run "$GET" --from "$T/cifar-10-binary.tar.gz" "$T/d3"
expect_rc 1 "official checksum on another file"
expect_err "checksum mismatch" "checksum mismatch for $T/cifar-10-binary.tar.gz: MD5 $MD5, expected c32a1d4ab5d03f1284b67883e8d87530"
check "mismatch leaves nothing" clean "$T/d3"

# Interrupted download: the server announces the full length and sends half.
size=$(stat -c %s "$T/cifar-10-binary.tar.gz")
cat >"$T/server.py" <<PY
import socket, sys
data = open(sys.argv[1], "rb").read()
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
print(s.getsockname()[1], flush=True)
s.settimeout(60)
for _ in range(4):  # curl retries
    try:
        c, _ = s.accept()
    except OSError:
        break
    c.recv(65536)
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(data) + data[: len(data) // 2])
    c.close()
PY
python3 "$T/server.py" "$T/cifar-10-binary.tar.gz" >"$T/port" &
server=$!
for _ in $(seq 100); do [[ -s $T/port ]] && break; sleep 0.05; done
run "$GET" --url "http://127.0.0.1:$(cat "$T/port")/cifar-10-binary.tar.gz" --md5 "$MD5" "$T/d4"
kill "$server" 2>/dev/null
wait "$server" 2>/dev/null
expect_rc 1 "interrupted download ($size bytes promised, half sent)"
expect_err "interrupted download" "download of http://127.0.0.1:"
check "interrupted download leaves nothing" clean "$T/d4"

# Stalled downloads, side by side: a server that answers, sends 3 bytes of the promised
# million, then nothing, and one that accepts and never answers (connections held open). With
# --stall 1 curl gives each of its 3 attempts up a few seconds in (it averages the speed over a
# window of a few seconds).
cat >"$T/stall.py" <<'PY'
import socket, sys
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4)
print(s.getsockname()[1], flush=True)
s.settimeout(60)
held = []
for _ in range(4):
    try:
        c, _ = s.accept()
    except OSError:
        break
    c.recv(65536)
    if sys.argv[1] == "answer":
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000000\r\n\r\nabc")
    held.append(c)
PY
servers=() gets=()
t0=$SECONDS
for mode in answer silent; do
  python3 "$T/stall.py" $mode >"$T/port.$mode" &
  servers+=($!)
  for _ in $(seq 100); do [[ -s $T/port.$mode ]] && break; sleep 0.05; done
  "$GET" --stall 1 --url "http://127.0.0.1:$(cat "$T/port.$mode")/cifar-10-binary.tar.gz" --md5 "$MD5" \
    "$T/stall-$mode" >"$T/out.$mode" 2>"$T/err.$mode" &
  gets+=($!)
done
for i in 0 1; do
  wait "${gets[$i]}"
  echo $? >"$T/rc.$i"
done
took=$((SECONDS - t0))
kill "${servers[@]}" 2>/dev/null
wait "${servers[@]}" 2>/dev/null
echo "test_get_data: stalled downloads: exit $(cat "$T/rc.0") and $(cat "$T/rc.1") after $took s"
for i in 0 1; do
  mode=$([[ $i == 0 ]] && echo answer || echo silent)
  check "stalled download ($mode): exit 1" test "$(cat "$T/rc.$i")" = 1
  check "stalled download ($mode): the stall line: $(head -c 300 "$T/err.$mode")" \
    grep -qx "get-data.sh: download of http://127.0.0.1:[0-9]*/cifar-10-binary.tar.gz stalled: nothing received for 1 s (--stall)" "$T/err.$mode"
  check "stalled download ($mode) leaves nothing" clean "$T/stall-$mode"
done
check "stalled downloads: given up after 3 attempts, not hanging ($took s)" test "$took" -lt 40
run "$GET" --stall 0 "$T/d9"
expect_rc 2 "--stall 0"
expect_err "--stall 0" "--stall takes whole seconds (1 or more), not '0'"

run "$GET" --url "http://127.0.0.1:9/cifar-10-binary.tar.gz" "$T/d5"
expect_rc 1 "offline"
grep -q "offline? pass a local copy with --from FILE" "$T/err"
check "offline message" test $? -eq 0
check "offline leaves nothing" clean "$T/d5"

run "$GET" --from "$T/src" "$T/d6"
expect_rc 0 "directory source"
check "directory copied" cmp -s "$T/src/cifar-10-batches-bin/data_batch_2.bin" "$T/d6/cifar-10-batches-bin/data_batch_2.bin"
tar -czf "$T/partial.tar.gz" -C "$T/src" cifar-10-batches-bin/data_batch_1.bin
run "$GET" --from "$T/partial.tar.gz" --md5 "$(md5sum "$T/partial.tar.gz" | cut -d' ' -f1)" "$T/d7"
expect_rc 1 "tarball without all batches"
check "incomplete tarball leaves nothing" clean "$T/d7"
run "$GET" --frobnicate
expect_rc 2 "unknown flag"
summary test_get_data
