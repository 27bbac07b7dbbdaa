#!/usr/bin/env bash
# tests/limit.sh, the time limit every suite runs under: the command's own exit status when it
# ends in time; past the limit exit 124, one line, and nothing left running, a stopped process
# in a session of its own included (as a SIGSTOPped MPI rank would be); SIGTERM passed on.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
L=$(dirname "$0")/limit.sh

run "$L" 5 bash -c 'exit 7'
expect_rc 7 "a command that ends in time: its exit status"
run "$L" 5 true
expect_rc 0 "true in time"
check "in time: nothing said" test ! -s "$T/err"
run "$L" 0 true
expect_rc 2 "0 seconds"
expect_err "0 seconds" "usage: limit.sh SECONDS COMMAND..."
run "$L" 5
expect_rc 2 "no command"

# A hang: a shell waiting on a child, and a stopped sleep in a session of its own that the
# process group's signal does not reach. The marks (sleep 297 and 298) name them for pgrep.
left() { pgrep -f 'sleep 29[78]' | wc -l; }
t0=$SECONDS
run "$L" 2 bash -c 'setsid sleep 298 & sleep 0.2; kill -STOP $!; sleep 297'
took=$((SECONDS - t0))
expect_rc 124 "a hang"
expect_err "a hang: one line" "still ran after 2 s: stopped (and 1 processes left behind)"
check "a hang: stopped at its limit, not SIGKILL's 30 s later ($took s)" test "$took" -lt 10
for _ in $(seq 50); do (($(left) == 0)) && break; sleep 0.1; done
check "a hang: nothing left running ($(left) left)" test "$(left)" = 0

# SIGTERM to limit.sh reaches the command at once.
"$L" 60 sleep 296 >"$T/out" 2>"$T/err" &
pid=$!
sleep 0.5
t0=$SECONDS
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM passed on: a non-zero exit ($rc)" test "$rc" != 0
check "SIGTERM passed on: ended at once ($((SECONDS - t0)) s)" test $((SECONDS - t0)) -lt 5
check "SIGTERM passed on: the command gone" bash -c '! pgrep -f "sleep 29[6]" >/dev/null'

summary test_limit
