#!/usr/bin/env bash
# scripts/scaling.sh on three namespace hosts: usage errors (one line, exit 2); an unshaped and a
# 100 Mbit/s run of the allreduce between the hosts, one rank each (exit 0: every sum right),
# whose lines name 3 ranks and each size; the shaped 1 MiB allreduce takes at least the time
# its ring's traffic needs at that rate (2 x 2/3 of 1 MiB, less tbf's 256 KiB burst: 0.09 s)
# and longer than the unshaped one, so the shaping is in effect. Then --bench on two hosts:
# training steps whose buckets go between them, and the report the cost model reads.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
SCALING=$SRC/scripts/scaling.sh

run "$SCALING" --hosts 9
expect_rc 2 "--hosts 9"
expect_err "--hosts 9" "--hosts: '9' is not a number from 2 to 8"
run "$SCALING" --rate fast
expect_rc 2 "--rate fast"
expect_err "--rate fast" "--rate: 'fast' is not none or a tc rate such as 1gbit or 200mbit"
run "$SCALING" 12x
expect_rc 2 "a bad size"
expect_err "a bad size" "'12x' is not a size in bytes"
run "$SCALING" --bench ""
expect_rc 2 "--bench without flags"
expect_err "--bench without flags" "--bench: no flags given"
run "$SCALING" --bench "--model airbench94" 4096
expect_rc 2 "--bench with a size"
expect_err "--bench with a size" "--bench times training steps, not sizes: drop '4096'"

# median SIZE, fastest SIZE: the median, the least seconds of the SIZE-byte line in $T/out.
# Other suites share the cores, and load only ever adds time: a floor is checked on the
# median, an order between two runs on their fastest reps.
median() { sed -n "s/.* bytes=$1 .*median_s=\([0-9.]*\) .*/\1/p" "$T/out"; }
fastest() { sed -n "s/.* bytes=$1 .*min_s=\([0-9.]*\) .*/\1/p" "$T/out"; }
run env BUILD="$BIN" "$SCALING" --hosts 3 --reps 3 16 1048576
if [[ $rc == 3 ]]; then
  echo "scaling: skipped: $(cat "$T/out")"
  summary scaling
  exit
fi
expect_rc 0 "3 hosts, unshaped"
expect_out "3 hosts, unshaped: 16 bytes" "^scaling: hosts=3 rate=none allreduce: bytes=16 ranks=3 mode=sleep reps=3 median_s=[0-9.]+ "
unshaped=$(fastest 1048576)
run env BUILD="$BIN" "$SCALING" --hosts 3 --rate 100mbit --reps 3 16 1048576
expect_rc 0 "3 hosts at 100mbit"
expect_out "3 hosts at 100mbit: 1 MiB" "^scaling: hosts=3 rate=100mbit allreduce: bytes=1048576 ranks=3 mode=sleep reps=3 median_s=[0-9.]+ "
shaped=$(fastest 1048576) shaped_median=$(median 1048576)
check "1 MiB at 100mbit takes at least 0.09 s ($shaped_median s, the median)" \
  awk -v t="$shaped_median" 'BEGIN { exit !(t >= 0.09) }'
check "1 MiB at 100mbit ($shaped s) is slower than unshaped ($unshaped s)" \
  awk -v s="$shaped" -v u="$unshaped" 'BEGIN { exit !(s > u) }'
echo "scaling: 1 MiB among 3 hosts, the fastest of 3: $unshaped s unshaped, $shaped s at 100 Mbit/s"

# --bench: whole training steps on 2 hosts, their gradients reduced between them.
run env BUILD="$BIN" "$SCALING" --hosts 2 --rate 200mbit --bench "--model workshop-cnn --threads 1 --batch-size 8 --warmup 1 --steps 2 --runs 1"
expect_rc 0 "--bench on 2 hosts"
expect_out "--bench: 2 ranks of 1 thread" "^cifar10-bench .*: workshop-cnn, 2 rank\\(s\\) x 1 thread\\(s\\), batch 8 per rank"
expect_out "--bench: their buckets reduced between them" "^gradients: MPI_Iallreduce on host memory, [0-9]+ bucket\\(s\\) per step$"
expect_out "--bench: the per-layer table with the gradient column" "^19 +linear 4096->512 .* 8194\.0$"
expect_out "--bench: the result line" "^scaling: hosts=2 rate=200mbit bench: images_per_s=[0-9.]+ ranks=2 threads=1 batch=8 "
summary scaling
