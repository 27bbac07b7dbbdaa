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

# SIGTERM to limit.sh reaches the command at once, and limit.sh dies of it, so that its caller
# stops too; SIGINT (Ctrl-C) likewise, with limit.sh's SIGINT not ignored (as at a terminal).
cat >"$T/send_signal.py" <<'PY'
import signal, subprocess, sys, time
limit, sig, mark = sys.argv[1], getattr(signal, sys.argv[2]), sys.argv[3]
p = subprocess.Popen([limit, "60", "sleep", mark], preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
seen = 0
for _ in range(100):  # until the command runs
    if subprocess.run(["pgrep", "-fx", "sleep " + mark], capture_output=True).returncode == 0:
        seen = 1
        break
    time.sleep(0.05)
t0 = time.time()
p.send_signal(sig)
rc = p.wait()
print(rc, round(time.time() - t0, 1), seen)
PY
for s in TERM:296 INT:295; do
  read -r rc took seen < <(python3 "$T/send_signal.py" "$L" "SIG${s%:*}" "${s#*:}")
  check "SIG${s%:*}: the command ran before the signal" test "$seen" = 1
  check "SIG${s%:*} passed on: limit.sh died of it (return code $rc)" test "$rc" = "-$(kill -l "${s%:*}")"
  check "SIG${s%:*} passed on: ended at once ($took s)" awk -v t="$took" 'BEGIN { exit !(t != "" && t < 5) }'
  check "SIG${s%:*} passed on: the command gone" bash -c "! pgrep -fx 'sleep ${s#*:}' >/dev/null"
done

summary test_limit
