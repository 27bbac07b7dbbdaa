#!/usr/bin/env bash
# Stopping and resuming in the middle of an epoch (airbench94's recipe, 400 synthetic training
# images and 50 test images, 6 steps per epoch, mpirun -np 2), each against the uninterrupted
# run, bit for bit (weights, momentum, every rank's batch-norm statistics, lookahead averages)
# and record for record (metrics file):
#  - --checkpoint-interval (a checkpoint after every step) leaves the run unchanged; kill -9
#    while the checkpoint on disk is a mid-epoch one, and the same command resumes from it;
#  - SIGTERM to one rank: every rank stops after the same step, the checkpoint is written, the
#    job exits 4; SIGUSR1 to mpirun (forwarded at once) likewise; SIGTERM to mpirun reaches the
#    ranks odls_base_sigkill_timeout seconds later (scaled to the machine's load) and still ends
#    in a checkpoint;
#  - one process and SIGINT (Ctrl-C);
#  - a mid-epoch checkpoint of 2 ranks on 1 rank: resumes, averaging the running statistics;
#  - a stalled rank (SIGSTOP): the other's collective times out (--collective-timeout 3), one
#    line naming the rank, step and gradient bucket, exit 5 within the timeout plus a few
#    seconds; kill -9 of one rank: the job ends; after either, the same command resumes and ends
#    as the uninterrupted run;
#  - a stop signal while rank 0 waits on a stalled rank: 1 s into the stall it waits for the
#    rank's return and stops cleanly (exit 4); 11 s into it (past DIST_STALL_STOP) it stops at
#    once with one line (exit 5).
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"

D=$T/data
"$BIN/tests/make_synthetic" "$D" 80 50 || exit 1
RECIPE=(--model airbench94 --precision fp32 --batch-size 64 --epochs 2.5 --whiten-images 300 --threads 1 --print-freq 1 --device cpu)
header() { head -c "$((8 + $(od -An -t u8 -N 8 "$1" | tr -d ' ')))" "$1" | tail -c +9; } # the JSON
# The step_in_epoch a checkpoint's metadata records (0 at an epoch's end).
step_in_epoch() { header "$1" | sed -n 's/.*"step_in_epoch":"\([0-9]*\)".*/\1/p'; }
# cmd DIR [FLAGS...]: CMD becomes the training command line of a 2-rank run writing into DIR.
cmd() { CMD=(mpirun -np 2 "$BIN/cifar10-train" "${RECIPE[@]}" --model-file "$1/model.safetensors" "$D" "${@:2}"); }
# same_as REF DIR WHAT: DIR's model, checkpoint and metrics equal those of the uninterrupted
# run in REF; same_as_a DIR WHAT: against run A's.
same_as() {
  check "$3: model == uninterrupted, bit for bit" cmp -s <(st_data "$1/model.safetensors") <(st_data "$2/model.safetensors")
  check "$3: checkpoint == uninterrupted (lookahead included)" \
    cmp -s <(st_data "$1/model.checkpoint.safetensors") <(st_data "$2/model.checkpoint.safetensors")
  check "$3: metrics == uninterrupted" python3 tests/check_metrics.py --same "$1/model.metrics.jsonl" "$2/model.metrics.jsonl"
}
same_as_a() { same_as "$T/A" "$@"; }
# wait_line FILE REGEX: until FILE has a matching line (60 s at most).
wait_line() { for _ in $(seq 600); do grep -qE "$2" "$1" && return 0; sleep 0.1; done; return 1; }
# start_job DIR COMMAND...: starts DIR's job in the background, output in $T/out and $T/err, its pid
# in $pid, DIR in $job. The logs are emptied first: the job's own redirection may come after a
# wait_line that would find the previous job's line.
start_job() {
  : >"$T/out"
  : >"$T/err"
  "${@:2}" >"$T/out" 2>"$T/err" &
  pid=$! job=$1
}
# launch DIR LINE [FLAGS...]: starts DIR's 2-rank run and returns once its log has LINE.
launch() {
  mkdir -p "$1"
  cmd "$1" "${@:3}"
  start_job "$1" "${CMD[@]}"
  wait_line "$T/out" "$2"
}
# job_pids DIR: the pids of DIR's job (mpirun and its ranks, or the one process).
job_pids() { pgrep -f -- "--model-file $1/model.safetensors"; }
# signal_rank SIGNAL N DIR: sends SIGNAL to rank N of DIR's job, found by the OMPI_COMM_WORLD_RANK
# in its environment: pids say nothing of the order (they wrap around, and CI once hung for good
# after stopping mpirun in place of rank 1). A rank not found fails the check.
signal_rank() {
  local p
  for p in $(job_pids "$3"); do
    if grep -qxzF "OMPI_COMM_WORLD_RANK=$2" "/proc/$p/environ" 2>/dev/null; then
      kill -"$1" "$p"
      return
    fi
  done
  fail "no rank $2 in $3's job to send SIG$1 to (pids: $(job_pids "$3" | tr '\n' ' '))"
}
# finish: waits for $job's run (FINISH_LIMIT s at most: then its processes are sent SIGCONT and
# SIGKILL, and the check fails); rc = its exit status, took = seconds since $start.
FINISH_LIMIT=${FINISH_LIMIT:-180}
finish() {
  rm -f "$T/watchdog"
  (
    s=''
    trap '[[ -z $s ]] || kill "$s" 2>/dev/null; exit 0' TERM
    sleep "$FINISH_LIMIT" &
    s=$!
    wait "$s"
    procs=$(job_pids "$job")
    echo "test_faults: $job's job still ran $FINISH_LIMIT s on: killed (pids $procs)" | tr '\n' ' ' >"$T/watchdog"
    # shellcheck disable=SC2086 # a list of pids
    kill -CONT $procs 2>/dev/null
    # shellcheck disable=SC2086
    kill -KILL $procs 2>/dev/null
  ) >/dev/null 2>&1 &
  local watchdog=$!
  wait "$pid"
  rc=$?
  took=$(awk -v a="${start:-0}" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  kill -TERM "$watchdog" 2>/dev/null
  wait "$watchdog"
  check "$job's job ended by itself$([[ -e $T/watchdog ]] && echo ": $(cat "$T/watchdog")")" test ! -e "$T/watchdog"
}

# 1. The uninterrupted run: epoch-end checkpoints only.
mkdir -p "$T/A"
cmd "$T/A" --checkpoint-interval 0
run "${CMD[@]}"
expect_rc 0 "uninterrupted run"
check "no mid-epoch checkpoint at the end" test "$(step_in_epoch "$T/A/model.checkpoint.safetensors")" = 0

# 2. A checkpoint after every step changes nothing; kill -9 on a mid-epoch one, then resume.
mkdir -p "$T/B"
cmd "$T/B" --checkpoint-interval 1e-6
run "${CMD[@]}"
expect_rc 0 "a checkpoint after every step"
same_as_a "$T/B" "checkpoints after every step"
mkdir -p "$T/C"
cmd "$T/C" --checkpoint-interval 1e-6
setsid "${CMD[@]}" >"$T/C1.log" 2>&1 &
pid=$!
mid=0
# Freeze mpirun and both ranks (they have process groups of their own) while reading the
# checkpoint; kill them all on a mid-epoch one. A write caught half-way leaves the previous file.
for _ in $(seq 600); do
  sleep 0.05
  procs=$(pgrep -f -- "--model-file $T/C/model.safetensors") || break
  # shellcheck disable=SC2086 # a list of pids
  kill -STOP $procs 2>/dev/null
  s=$(step_in_epoch "$T/C/model.checkpoint.safetensors" 2>/dev/null)
  if [[ -n $s && $s != 0 && $(grep -c '^\[2, ' "$T/C1.log") -gt 0 ]]; then mid=$s; break; fi
  # shellcheck disable=SC2086
  kill -CONT $procs 2>/dev/null
done
# shellcheck disable=SC2086
kill -9 $procs 2>/dev/null
wait "$pid" 2>/dev/null
check "killed on a mid-epoch checkpoint (step $mid)" test "$mid" -gt 0
cmd "$T/C" --checkpoint-interval 1e-6
run "${CMD[@]}"
expect_rc 0 "rerun after kill -9"
expect_out "resumes mid-epoch" "^resuming run .*: [0-9] of 3 epochs and $mid of 6 steps of epoch [0-9] done\$"
same_as_a "$T/C" "kill -9 mid-epoch, resumed"

# stopped_run DIR LOG: checks a run a signal stopped (exit 4, one line, a checkpoint), reruns it.
stopped_run() {
  local dir=$1 what=$2
  expect_out "$what: the stop line" "^stopped by a signal \(SIGTERM, SIGINT or SIGUSR1 on [12] of [12] ranks\) after step [0-9]+ .*run the same command to resume\$"
  check "$what: no model file" test ! -e "$dir/model.safetensors"
  check "$what: checkpoint written" test -s "$dir/model.checkpoint.safetensors"
}

# 3. SIGTERM to rank 1 during epoch 2: all ranks stop after the same step, exit 4.
launch "$T/E" '^\[2,     2\]' --checkpoint-interval 0
signal_rank TERM 1 "$T/E"
finish
expect_rc 4 "SIGTERM to rank 1"
stopped_run "$T/E" "SIGTERM to rank 1"
check "SIGTERM to rank 1: stopped mid-epoch" test "$(step_in_epoch "$T/E/model.checkpoint.safetensors")" -gt 0
cmd "$T/E" --checkpoint-interval 0
run "${CMD[@]}"
expect_rc 0 "rerun after SIGTERM"
expect_out "rerun resumes mid-epoch" "^resuming run .*: 1 of 3 epochs and [1-6] of 6 steps of epoch 2 done\$"
same_as_a "$T/E" "SIGTERM, resumed"

# 4. SIGUSR1 to mpirun: forwarded to every rank at once; mpirun passes on their exit code 4.
launch "$T/F" '^\[2,     3\]' --checkpoint-interval 0
kill -USR1 "$pid"
finish
expect_rc 4 "SIGUSR1 to mpirun"
stopped_run "$T/F" "SIGUSR1 to mpirun"
cmd "$T/F" --checkpoint-interval 0
run "${CMD[@]}"
expect_rc 0 "rerun after SIGUSR1"
same_as_a "$T/F" "SIGUSR1, resumed"

# 5. SIGTERM to mpirun: the ranks get it S s later (odls_base_sigkill_timeout), SIGKILL S s
# after that. Both windows scale with the machine's load, so S is 0.4 of an uninterrupted run's
# time (at least 2 s). That run is 6 epochs (36 steps), not A's 15 steps: after the signal, sent
# at step 2, the run must outlast S by several steps, and with fast steps a short run is mostly
# start-up (A: about 1 s of start-up and 2 s of steps on 2 cores, too little left after S).
LONG=("${RECIPE[@]/#2.5/6}") # RECIPE with --epochs 6
# long_cmd DIR [MPIRUN FLAGS...]: CMD becomes the 6-epoch run writing into DIR.
long_cmd() { CMD=(mpirun "${@:2}" -np 2 "$BIN/cifar10-train" "${LONG[@]}" --checkpoint-interval 0 --model-file "$1/model.safetensors" "$D"); }
mkdir -p "$T/G0" "$T/G"
long_cmd "$T/G0"
g_start=$(date +%s.%N)
run "${CMD[@]}"
g_took=$(awk -v a="$g_start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')
expect_rc 0 "uninterrupted 6-epoch run"
kill_after=$(awk -v a="$g_took" 'BEGIN { s = int(0.4 * a + 0.5); print s < 2 ? 2 : s }')
long_cmd "$T/G" --mca odls_base_sigkill_timeout "$kill_after"
start_job "$T/G" "${CMD[@]}"
wait_line "$T/out" '^\[1,     2\]'
kill -TERM "$pid"
finish
check "SIGTERM to mpirun ($kill_after s window): non-zero exit ($rc)" test "$rc" != 0
stopped_run "$T/G" "SIGTERM to mpirun"
long_cmd "$T/G"
run "${CMD[@]}"
expect_rc 0 "rerun after SIGTERM to mpirun"
same_as "$T/G0" "$T/G" "SIGTERM to mpirun, resumed"

# 6. One process, SIGINT; then its mid-epoch checkpoint of 1 rank and one of 2 ranks (from 3.)
# on the other rank count.
ONE=("$BIN/cifar10-train" "${RECIPE[@]}" --checkpoint-interval 0)
mkdir -p "$T/H"
start_job "$T/H" "${ONE[@]}" --model-file "$T/H/model.safetensors" "$D"
wait_line "$T/out" '^\[2,     2\]'
kill -INT "$pid"
finish
expect_rc 4 "SIGINT to one process"
stopped_run "$T/H" "SIGINT"
run "${ONE[@]}" --model-file "$T/H/model.safetensors" "$D"
expect_rc 0 "one process resumed after SIGINT"
# (The uninterrupted one-process run it is compared with runs beside the stalls of 7.)
launch "$T/J" '^\[2,     2\]' --checkpoint-interval 0
kill -USR1 "$pid"
finish
run "${ONE[@]}" --model-file "$T/J/model.safetensors" "$D"
expect_rc 0 "2-rank mid-epoch checkpoint resumed on 1 rank"
expect_out "running statistics averaged" "written mid-epoch by 2 ranks, resumed on 1: their batch-norm running statistics averaged\$"

# stall DIR TIMEOUT: DIR's run launched with --collective-timeout TIMEOUT, its rank 1 stopped
# (SIGSTOP) in epoch 2, so rank 0 waits in the gradient allreduce; start = then.
stall() {
  launch "$1" '^\[2,     2\]' --checkpoint-interval 0 --collective-timeout "$2"
  start=$(date +%s.%N)
  signal_rank STOP 1 "$1"
}
# stall_exit WHAT WHY SECONDS: the job exited 5 within SECONDS of $start, with rank 0's one line
# naming the gradient bucket and WHY (a regex). The stalled rank may add its own such line: when
# rank 0 exits, mpirun sends the others SIGCONT, then SIGTERM, and whether rank 1 prints before
# it is killed is a race (seen once in CI); no other line of ours.
stall_exit() {
  expect_rc 5 "$1"
  local ours r0 r1
  ours=$(our_err_lines)
  r0=$(grep -c '^cifar10-train: rank 0, after step ' "$T/err")
  r1=$(grep -cE '^cifar10-train: rank 1, after step [0-9]+: the gradient allreduce ' "$T/err")
  check "$1: rank 0's one line, and at most the stalled rank's own (stderr: $(head -c 600 "$T/err"))" \
    test "$r0" = 1 -a "$r1" -le 1 -a "$ours" = $((r0 + r1))
  check "$1: the line names the gradient bucket and why" \
    grep -qE "the gradient allreduce \(bucket [0-9]+ of [0-9]+, [0-9.]+ MiB\) $2" "$T/err"
  check "$1: the job ended within $3 s ($took s)" awk -v t="$took" -v m="$3" 'BEGIN { exit !(t < m) }'
  echo "test_faults: $1: exit $rc after $took s"
}

# The uninterrupted one-process run for 6 runs in the background through 7 and 7b, whose
# stalled ranks leave the cores idle (a waiting rank sleeps between polls after a second): it
# has no time bound, and theirs are seconds above what one more thread changes.
mkdir -p "$T/one"
"${ONE[@]}" --model-file "$T/one/model.safetensors" "$D" >"$T/one/out" 2>"$T/one/err" &
one_pid=$!

# 7. A stalled rank: rank 0 waits in the gradient allreduce until --collective-timeout.
stall "$T/K" 3
finish
stall_exit "stalled rank, --collective-timeout 3" "made no progress for 3 s \(collective timeout 3 s\)" 13
cmd "$T/K" --checkpoint-interval 0
run "${CMD[@]}"
expect_rc 0 "rerun after a stall"
same_as_a "$T/K" "stall, resumed"

# 7b. A stop signal while a collective waits on a stalled rank: under DIST_STALL_STOP (10 s) of
# waiting it waits on, and once the rank comes back the stop is the clean one (exit 4, the
# checkpoint); past that wait the rank stops at once with a line saying so (exit 5), as when
# mpirun, having lost a host, signals the ranks it still reaches before killing them.
stall "$T/M" 60
sleep 1
signal_rank TERM 0 "$T/M"
sleep 2
signal_rank CONT 1 "$T/M"
finish
expect_rc 4 "a stop signal 1 s into a stall, the rank back 2 s later: the clean stop"
stall "$T/N" 60
sleep 11
start=$(date +%s.%N)
signal_rank TERM 0 "$T/N"
finish
stall_exit "stop signal 11 s into a stall" "had waited 1[0-9] s when a stop signal came" 5
wait "$one_pid"
one_rc=$?
check "one process, uninterrupted: exit 0 ($one_rc; $(tail -n 1 "$T/one/err"))" test "$one_rc" = 0
check "one process: resumed == uninterrupted" cmp -s <(st_data "$T/one/model.safetensors") <(st_data "$T/H/model.safetensors")

# 8. kill -9 of one rank: Open MPI ends the job.
launch "$T/L" '^\[2,     2\]' --checkpoint-interval 0
start=$(date +%s.%N)
signal_rank KILL 1 "$T/L"
finish
check "kill -9 of rank 1: non-zero exit ($rc)" test "$rc" != 0
check "kill -9 of rank 1: the job ended within 10 s ($took s)" awk -v t="$took" 'BEGIN { exit !(t < 10) }'
echo "test_faults: kill -9 of rank 1: exit $rc after $took s"
run "${CMD[@]}"
expect_rc 0 "rerun after kill -9 of one rank"
same_as_a "$T/L" "kill -9 of one rank, resumed"

summary test_faults
