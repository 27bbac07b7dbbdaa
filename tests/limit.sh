#!/usr/bin/env bash
# limit.sh SECONDS COMMAND...: runs COMMAND under a time limit, so that a hung test ends in a
# named failure rather than in CI's own timeout. Still running after SECONDS, COMMAND gets
# SIGTERM (SIGKILL 30 s later) with its process group (timeout(1)); then every process that
# inherited this call's mark in its environment gets SIGCONT and SIGTERM, and SIGKILL if it
# still runs 10 s later: MPI ranks and setsid'd jobs have process groups of their own, and a
# stopped one would outlive the group's signal. One line on stderr says so; the exit status is
# timeout's (124, or 137 after SIGKILL), else COMMAND's. timeout gives COMMAND a process group
# that Ctrl-C at a terminal does not reach: SIGINT and SIGTERM to limit.sh stop COMMAND, then
# limit.sh dies of the same signal, so that its caller stops too.
set -u
if (($# < 2)) || [[ ! $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "limit.sh: usage: limit.sh SECONDS COMMAND... (SECONDS a positive whole number)" >&2
  exit 2
fi
limit=$1
shift
mark=CIFAR10_LIMIT_$$
start=$SECONDS
pid='' sig=''
trap 'sig=INT; [[ -z $pid ]] || kill -TERM "$pid" 2>/dev/null' INT
trap 'sig=TERM; [[ -z $pid ]] || kill -TERM "$pid" 2>/dev/null' TERM
env "$mark=1" timeout -k 30 "$limit" "$@" &
pid=$!
[[ -z $sig ]] || kill -TERM "$pid" 2>/dev/null # a signal before $pid was known
wait "$pid"
rc=$?
# A trap interrupts wait (status > 128) while COMMAND may still run: wait again until it ended.
while ((rc > 128)) && kill -0 "$pid" 2>/dev/null; do
  wait "$pid"
  rc=$?
done
# marked: the pids of the processes that carry this call's mark.
marked() {
  local e
  for e in /proc/[0-9]*/environ; do
    grep -qxzF "$mark=1" "$e" 2>/dev/null && echo "${e//[^0-9]/}"
  done
}
if [[ -n $sig ]] || { ((rc == 124 || rc == 137)) && ((SECONDS - start >= limit)); }; then
  mapfile -t left < <(marked)
  if ((${#left[@]})); then
    kill -CONT "${left[@]}" 2>/dev/null
    kill -TERM "${left[@]}" 2>/dev/null
    for _ in $(seq 100); do
      mapfile -t still < <(marked)
      ((${#still[@]})) || break
      sleep 0.1
    done
    ((${#still[@]} == 0)) || kill -KILL "${still[@]}" 2>/dev/null
  fi
  if [[ -z $sig ]]; then
    echo "limit.sh: $* still ran after $limit s: stopped (and ${#left[@]} processes left behind)" >&2
  else
    trap - "$sig"
    kill -"$sig" $$
  fi
fi
exit "$rc"
