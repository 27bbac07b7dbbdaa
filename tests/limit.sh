#!/usr/bin/env bash
# limit.sh SECONDS COMMAND...: runs COMMAND under a time limit, so that a hung test ends in a
# named failure rather than in CI's own timeout. Still running after SECONDS, COMMAND gets
# SIGTERM (SIGKILL 30 s later) with its process group (timeout(1)), then every process that
# inherited this call's mark in its environment gets SIGCONT and SIGKILL: MPI ranks and setsid'd
# jobs have process groups of their own, and a stopped one would outlive the group's signal.
# One line on stderr says so; the exit status is timeout's (124, or 137 after SIGKILL), else
# COMMAND's. timeout gives COMMAND a process group that Ctrl-C at a terminal does not reach:
# SIGINT and SIGTERM to limit.sh are passed on to it.
set -u
if (($# < 2)) || [[ ! $1 =~ ^[1-9][0-9]*$ ]]; then
  echo "limit.sh: usage: limit.sh SECONDS COMMAND... (SECONDS a positive whole number)" >&2
  exit 2
fi
limit=$1
shift
mark=CIFAR10_LIMIT_$$
start=$SECONDS
env "$mark=1" timeout -k 30 "$limit" "$@" &
pid=$!
trap 'kill -TERM "$pid" 2>/dev/null' INT TERM
wait "$pid"
rc=$?
# A trap interrupts wait (status > 128) while COMMAND may still run: wait again until it ended.
while ((rc > 128)) && kill -0 "$pid" 2>/dev/null; do
  wait "$pid"
  rc=$?
done
if ((rc == 124 || rc == 137)) && ((SECONDS - start >= limit)); then
  left=()
  for e in /proc/[0-9]*/environ; do
    tr '\0' '\n' <"$e" 2>/dev/null | grep -qx "$mark=1" && left+=("${e//[^0-9]/}")
  done
  if ((${#left[@]})); then
    kill -CONT "${left[@]}" 2>/dev/null
    kill -KILL "${left[@]}" 2>/dev/null
  fi
  echo "limit.sh: $* still ran after $limit s: stopped (and ${#left[@]} processes left behind)" >&2
fi
exit "$rc"
