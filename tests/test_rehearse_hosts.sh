#!/usr/bin/env bash
# scripts/rehearse-hosts.sh: the MPIJob's launcher and two workers on three network namespaces
# (sshd as uid 1000, mpirun over ssh, ranks over TCP): a cut link, SIGTERM to the launcher, a
# worker's preStop hook and a lost worker all end in a resumable state, and the resumed run's
# model equals the uninterrupted run's; a worker that cannot serve ssh fails the rehearsal.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
skip_without_kubectl rehearse-hosts
REHEARSE=$SRC/scripts/rehearse-hosts.sh
chmod 755 "$T" # the pods run as uid 1000 and must reach their files under it

run "$REHEARSE" --workdir "$T/ok"
if [[ $rc == 3 ]]; then
  echo "rehearse-hosts: skipped: $(cat "$T/out")"
  exit 0
fi
expect_rc 0 "rehearsal on three network namespaces"
((rc == 0)) || { echo "rehearse-hosts: the script's last output lines:"; tail -n 40 "$T/out"; }
# The measured times, for the record.
grep -E '^   ok: .*[0-9] s' "$T/out" | sed 's/^   ok: /rehearse-hosts: /' | cut -c1-200
expect_out "workers' sshd up" "ok: worker-0 and worker-1 accept ssh on port 2222"
expect_out "2 ranks of 1 thread, to the end" "^   ok: exit 0, epoch 4/4"
expect_out "cut link ends the job within 90 s, rank 0 naming the collective" \
  "ok: the job ended [0-9.]+ s after the cut, exit [1-9][0-9]*: cifar10-train: rank 0, after step [0-9]+: the gradient allreduce \(bucket [0-9]+ of [0-9]+, [0-9.]+ MiB\) had waited [0-9]+ s when a stop signal came"
expect_out "the failed job's processes on worker-1 end once the link is back" "ok: link restored; worker-1's processes of the failed job ended [0-9.]+ s later"
expect_out "rerun resumes, SIGTERM to the launcher's PID 1 exits 4" \
  "ok: resumed after epoch 1; exit 4 [0-9.]+ s after SIGTERM: stopped by a signal .* after step [0-9]+ \(epoch 2, step [0-9]+ of 31\)"
expect_out "worker-0's preStop hook stops the job" \
  "ok: resumed after 1 of 4 epochs and [0-9]+ of 31 steps of epoch 2; worker-0's hook returned after [0-9.]+ s, the job exited 4"
expect_out "worker pods end on SIGTERM to sshd and start again" "ok: worker-1's sshd ended on SIGTERM; its pod started again"
expect_out "worker-1's preStop hook stops the job" \
  "ok: resumed after 2 of 4 epochs and [0-9]+ of 31 steps of epoch 3; worker-1's hook returned after [0-9.]+ s, the job exited 4"
expect_out "lost worker ends the job" "ok: the job ended [0-9.]+ s after worker-1 died, exit [1-9][0-9]*"
expect_out "resumed model == uninterrupted model" "model == uninterrupted run's, bit for bit"
check "work directory removed" test ! -e "$T/ok"

# A worker whose sshd listens elsewhere must fail the rehearsal at once, naming it.
cp -r "$SRC/k8s" "$T/k8s-bad"
sed -i 's/^Port 2222/Port 2223/' "$T/k8s-bad/image/sshd_config"
run "$REHEARSE" --k8s "$T/k8s-bad" --workdir "$T/bad"
expect_rc 1 "worker sshd on the wrong port"
expect_err "worker sshd on the wrong port" "worker-0's sshd does not accept connections on 10.213.0.2:2222"
check "no namespace left behind" bash -c '! ip netns list | grep -q "^c10h"'

summary rehearse-hosts
