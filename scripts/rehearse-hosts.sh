#!/usr/bin/env bash
# Rehearses the MPIJob on three hosts made on this machine, with the command lines taken out of
# the rendered manifests (kubectl kustomize k8s/train-cpu). Each host is a network namespace with
# its own hostname, mount and PID namespaces (so its PID 1 is the container's command, as in a
# pod), joined by a veth pair to a bridge in a fourth namespace, with an address on that link
# only (10.213.0.0/24). As mpi-operator v2 sets up an MPIJob:
#   - worker-0 and worker-1 run the Worker container's command (the image's sshd as uid 1000 on
#     port 2222, k8s/image/sshd_config) with the job's key pair mounted read-only at
#     /home/mpiuser/.ssh, one CPU each (their CPU limit);
#   - the launcher runs the Launcher container's command (dumb-init, mpirun) with the image's ssh
#     client config (k8s/image/ssh_config), mpi-operator's OMPI_MCA_* environment and a hostfile
#     of the workers' service names; mpirun starts the ranks over ssh and they talk over TCP.
# Per host, /etc/passwd (mpiuser = uid 1000), /etc/hosts, /home and /usr/local/bin (the image's
# binaries) are bind mounts; a directory every host sees stands in for /efs-shared. Steps, on
# small synthetic data with MODEL=workshop-cnn, EPOCHS=4, BATCH_SIZE=16:
#   1. an uninterrupted run (RUN_ID reference);
#   2. RUN_ID faults: worker-1's link cut in epoch 2: the job must end, non-zero, within
#      60 s (the smallest adaptive collective timeout) + 30 s, rank 0 saying which collective
#      was left waiting; the link comes back, and worker-1's leftovers of the failed job end;
#   3. the same command again resumes from epoch 1's checkpoint; SIGTERM to the launcher's PID 1
#      (as the kubelet sends it) in epoch 2: exit 4 within 30 s and a mid-epoch checkpoint;
#   4. again: it resumes mid-epoch; worker-0's preStop hook (kubectl delete pod of the worker
#      that holds rank 0) in epoch 3: the hook returns within 30 s and the job exits 4; then
#      SIGTERM to worker-0's PID 1 (sshd) must end the pod, which starts again;
#   5. again, with worker-1's preStop hook, later in epoch 3;
#   6. again: kill -9 of all of worker-1 (its PID 1, so its whole PID namespace) in epoch 3: the
#      job must end within the same bound; the worker pod is started again;
#   7. again: it resumes and finishes; the model must equal the reference run's bit for bit.
# Only settings.env values change (in a copy): MODEL, EPOCHS, BATCH_SIZE, RUN_ID, WORKERS=2 and
# SLOTS_PER_WORKER=1.
#
#   scripts/rehearse-hosts.sh [--k8s DIR] [--workdir DIR] [--keep]
#
#   --k8s DIR      the manifests to rehearse (default: k8s/ of this checkout)
#   --workdir DIR  where the hosts' files, the stand-in volume and the logs go (default: a new
#                  /tmp directory)
#   --keep         keep the work directory
# Needs root (namespaces, mounts), the built binaries (make), kubectl >= 1.21, python3 with
# PyYAML, Open MPI, openssh-server and -client, dumb-init, util-linux (unshare, nsenter,
# setpriv) and iproute2.
# Exit codes: 0 every step as expected, 1 a step failed (message names it), 2 bad usage,
# 3 skipped: this machine does not allow network namespaces (or not as this user).
# shellcheck source=eks-lib.sh
. "$(dirname "$0")/eks-lib.sh"
rehearse_args "$@"
skip() { echo "$ME: skipped: $*"; exit 3; }
((EUID == 0)) || skip "network namespaces and mounts need root"
kubectl_can_kustomize || die "needs kubectl >= 1.21 (kustomize) to render the manifests"
need ip unshare nsenter setpriv taskset ssh ssh-keygen dumb-init mpirun python3
[[ -x /usr/sbin/sshd ]] || die "needs /usr/sbin/sshd (apt-get install openssh-server)"
[[ -d /etc/ssh/ssh_config.d ]] || die "needs /etc/ssh/ssh_config.d (the image's ssh client config goes there)"
for b in cifar10-train cifar10-test tests/make_synthetic; do
  [[ -x $BUILD/$b ]] || die "$BUILD/$b is missing: run make test first"
done

# The namespaces: $pfx-sw (the switch), $pfx-l (launcher), $pfx-w0, $pfx-w1.
pfx=c10h$$
NODES=(l w0 w1)
declare -A ADDR=([l]=10.213.0.1 [w0]=10.213.0.2 [w1]=10.213.0.3)
# mpi-operator v2: pod names JOB-launcher and JOB-worker-I, workers reachable as
# JOB-worker-I.JOB.NAMESPACE.svc (the hostfile's names).
JOB=cifar10-train
declare -A HOST=([l]=$JOB-launcher [w0]=$JOB-worker-0 [w1]=$JOB-worker-1)
fqdn() { echo "${HOST[$1]}.$JOB.$NAMESPACE.svc"; }
declare -A POD=() # node -> PID of the unshare that holds its pod (its child is the pod's PID 1)

# Stderr is dropped: bash reports each pod it sees killed.
cleanup() {
  local ns
  for ns in "${NODES[@]}" sw; do ip netns pids "$pfx-$ns" | xargs -r kill -KILL; done
  wait
  for ns in "${NODES[@]}" sw; do ip netns del "$pfx-$ns"; done
  ((keep)) || rm -rf "$work"
} 2>/dev/null
if [[ -z $work ]]; then work=$(mktemp -d /tmp/cifar10-hosts.XXXXXX); fi
mkdir -p "$work"
work=$(cd "$work" && pwd)
trap cleanup EXIT
step() { echo "== $ME: $*"; }
show() { echo "--- $work/$1 (last lines)"; grep -v "loss:" "$work/$1" | tail -n "${2:-15}"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

step "0. network: switch + launcher, worker-0, worker-1 (veth pairs, ${ADDR[l]}/24 ...)"
ip netns add "$pfx-sw" 2>"$work/netns.err" || skip "cannot create a network namespace: $(head -n 1 "$work/netns.err")"
ip -n "$pfx-sw" link add br0 type bridge
ip -n "$pfx-sw" link set br0 up
for n in "${NODES[@]}"; do
  ip netns add "$pfx-$n"
  ip -n "$pfx-sw" link add "p-$n" type veth peer name eth0 netns "$pfx-$n"
  ip -n "$pfx-sw" link set "p-$n" master br0 up
  ip -n "$pfx-$n" addr add "${ADDR[$n]}/24" dev eth0
  ip -n "$pfx-$n" link set eth0 up
  ip -n "$pfx-$n" link set lo up
done

# Files of the image and of mpi-operator, as each pod sees them.
chmod 755 "$work"
setpriv --reuid 1000 --regid 1000 --clear-groups test -x "$work" ||
  die "$work: uid 1000 (the pods' user) cannot reach it: a parent directory is not searchable by others"
mkdir -p "$work/etc" "$work/ssh_config.d" "$work/ssh" "$work/bin" "$work/mpi"
# The image's user mpiuser is uid 1000 (which may have another name on this machine).
grep -vE '^[^:]*:[^:]*:1000:' /etc/passwd >"$work/etc/passwd"
echo "mpiuser:x:1000:1000::/home/mpiuser:/bin/bash" >>"$work/etc/passwd"
grep -vE '^[^:]*:[^:]*:1000:' /etc/group >"$work/etc/group"
echo "mpiuser:x:1000:" >>"$work/etc/group"
{
  echo "127.0.0.1 localhost"
  for n in "${NODES[@]}"; do echo "${ADDR[$n]} $(fqdn "$n") ${HOST[$n]}"; done
} >"$work/etc/hosts"
cp "$k8s/image/ssh_config" "$work/ssh_config.d/mpi-operator.conf"
# The job's key pair, as mpi-operator's Secret mount: root's files, world-readable, read-only.
ssh-keygen -q -t ecdsa -N '' -C "$JOB" -f "$work/ssh/id_rsa"
cp "$work/ssh/id_rsa.pub" "$work/ssh/authorized_keys"
chmod 644 "$work/ssh/"*
for n in "${NODES[@]}"; do
  mkdir -p "$work/home/$n/mpiuser/.ssh"
  cp "$k8s/image/sshd_config" "$work/home/$n/mpiuser/.sshd_config"
  chown -R 1000:1000 "$work/home/$n/mpiuser"
done
cp "$BUILD/cifar10-train" "$BUILD/cifar10-test" "$ROOT/scripts/get-data.sh" "$work/bin/"
for n in w0 w1; do echo "$(fqdn "$n") slots=1"; done >"$work/mpi/hostfile"
EFS=$work/efs-shared
mkdir -p "$EFS"
"$BUILD/tests/make_synthetic" "$EFS/cifar-10-batches-bin" 200 500 >/dev/null
touch "$EFS/cifar-10-batches-bin/.complete"
chown -R 1000:1000 "$EFS"

rm -rf "$work/k8s"
cp -r "$k8s" "$work/k8s"
SETTINGS=$work/k8s/settings/settings.env
set_setting MODEL workshop-cnn >/dev/null
set_setting EPOCHS 4 >/dev/null
set_setting BATCH_SIZE 16 >/dev/null
set_setting WORKERS 2 >/dev/null
set_setting SLOTS_PER_WORKER 1 >/dev/null

# container KIND/NAME/ROLE CONTAINER[:preStop] OUT: the container's environment and argv from
# the rendered MPIJob into OUT.env and OUT.argv (NUL-separated), with /efs-shared and
# /etc/mpi/hostfile pointing at the stand-ins.
container() {
  kubectl kustomize "$work/k8s/train-cpu" >"$work/train-cpu.yaml" || die "kubectl kustomize $k8s/train-cpu failed"
  python3 "$ROOT/scripts/manifest-command.py" "$work/train-cpu.yaml" "$1" "$2" "$work/$3.env" "$work/$3.argv" ||
    die "cannot take $1 $2 out of the rendered MPIJob"
  sed -i -z -e "s|/efs-shared|$EFS|g" -e "s|/etc/mpi/hostfile|$work/mpi/hostfile|g" "$work/$3.argv"
}
# The image's environment (Dockerfile: Debian's PATH, HOME of USER 1000, ENV), then what
# mpi-operator adds for Open MPI, then the container's own (OUT.env).
image_env() { # image_env ROLE OUT
  {
    printf '%s\0' PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/home/mpiuser \
      OMPI_MCA_btl_vader_single_copy_mechanism=none "K_MPI_JOB_ROLE=$1"
    if [[ $1 == launcher ]]; then
      printf '%s\0' OMPI_MCA_orte_keep_fqdn_hostnames=true "OMPI_MCA_orte_default_hostfile=$work/mpi/hostfile" \
        "OMPI_MCA_plm_rsh_args=-o ConnectionAttempts=10" OMPI_MCA_orte_set_default_slots=1
    fi
    cat "$work/$2.env"
  } >"$work/$2.fullenv"
}

# boot WORK NODE HOSTNAME ENVFILE ARGV...: runs as root inside the pod's new UTS, mount and PID
# namespaces (PID 1 there): the pod's files, then ARGV as uid 1000 with only ENVFILE's variables.
boot() {
  local work=$1 node=$2 envf=$4
  hostname "$3"
  shift 4
  mount --bind "$work/etc/passwd" /etc/passwd
  mount --bind "$work/etc/group" /etc/group
  mount --bind "$work/etc/hosts" /etc/hosts
  mount --bind "$work/ssh_config.d" /etc/ssh/ssh_config.d
  mount --bind "$work/home/$node" /home
  mount --bind -o ro "$work/ssh" /home/mpiuser/.ssh
  mount --bind -o ro "$work/bin" /usr/local/bin
  local -a env
  mapfile -d '' env <"$envf"
  cd /home/mpiuser
  exec setpriv --reuid 1000 --regid 1000 --clear-groups env -i "${env[@]}" "$@"
}
# pod_start NODE CPUS OUT LOG: starts NODE's pod running OUT.argv with OUT.fullenv, pinned to
# CPUS (its CPU limit), output to LOG.
pod_start() {
  local -a argv
  mapfile -d '' argv <"$work/$3.argv"
  setsid taskset -c "$2" ip netns exec "$pfx-$1" unshare --uts --mount --pid --fork --mount-proc \
    --propagation private bash -c "$(declare -f boot); boot \"\$@\"" boot "$work" "$1" "${HOST[$1]}" \
    "$work/$3.fullenv" "${argv[@]}" >"$work/$4" 2>&1 &
  POD[$1]=$!
}
pid1() { pgrep -P "${POD[$1]}"; } # the pod's PID 1, as this (the host's) PID namespace sees it
# worker_start I: worker-I's pod, its sshd listening (the Worker's readiness probe: TCP 2222).
worker_start() {
  pod_start "w$1" "${cpus[$1 % ${#cpus[@]}]}" worker "worker-$1.log"
  local _
  for _ in $(seq 100); do
    ip netns exec "$pfx-l" bash -c "exec 3<>/dev/tcp/${ADDR[w$1]}/2222" 2>/dev/null && return 0
    sleep 0.1
  done
  show "worker-$1.log"
  die "worker-$1's sshd does not accept connections on ${ADDR[w$1]}:2222"
}
# The CPUs this script may use; worker I gets the (I mod count)-th.
mapfile -t cpus < <(taskset -cp $$ | sed 's/.*: //' | tr ',' '\n' |
  awk -F- '{ for (c = $1; c <= ($2 == "" ? $1 : $2); c++) print c }')

container "MPIJob/$JOB/Worker" worker worker
image_env worker worker
echo "   worker: $(tr '\0' ' ' <"$work/worker.argv")"
worker_start 0
worker_start 1
echo "   ok: worker-0 and worker-1 accept ssh on port 2222 ($(fqdn w0), $(fqdn w1))"

# launcher_start RUN_ID LOG: the launcher pod with that RUN_ID; LAUNCHER = its unshare's PID.
launcher_start() {
  set_setting RUN_ID "$1" >/dev/null
  container "MPIJob/$JOB/Launcher" launcher launcher
  image_env launcher launcher
  pod_start l "$(IFS=,; echo "${cpus[*]}")" launcher "$2"
  LAUNCHER=${POD[l]}
}
# until_line LOG REGEX SECONDS: waits for a line of the launcher's LOG; fails if it exits first.
until_line() {
  local i
  for ((i = 0; i < $3 * 10; i++)); do
    grep -qE -- "$2" "$work/$1" 2>/dev/null && return 0
    kill -0 "$LAUNCHER" 2>/dev/null || { show "$1"; die "the launcher exited before printing '$2'"; }
    sleep 0.1
  done
  show "$1"
  die "no line '$2' after $3 s"
}
# launcher_wait SECONDS: waits for the launcher pod to end (its exit code in RC); fails past
# SECONDS.
launcher_wait() {
  local i
  for ((i = 0; i < $1 * 10; i++)); do
    kill -0 "$LAUNCHER" 2>/dev/null || break
    sleep 0.1
  done
  kill -0 "$LAUNCHER" 2>/dev/null && die "the launcher still runs $1 s later"
  RC=0
  wait "$LAUNCHER" || RC=$?
}
run_dir=$EFS/runs/faults
model=$run_dir/cifar10-model.safetensors
ckpt=$run_dir/cifar10-model.checkpoint.safetensors
step_line() { printf '^\\[%d, +%d\\] loss' "$1" "$2"; } # the launcher's line after step $2 of epoch $1

step "1. uninterrupted run"
launcher_start reference reference.log
echo "   launcher: $(tr '\0' ' ' <"$work/launcher.argv")"
launcher_wait 300
((RC == 0)) || { show reference.log; die "the uninterrupted run failed (exit $RC)"; }
[[ -s $EFS/runs/reference/cifar10-model.safetensors ]] || die "the uninterrupted run wrote no model"
grep -q "^cifar10-train .*: 2 rank(s) x 1 thread(s)" "$work/reference.log" ||
  { show reference.log; die "the run is not 2 ranks of 1 thread each"; }
echo "   ok: exit 0, $(grep '^epoch 4/4' "$work/reference.log" | cut -d, -f1-3)"

step "2. worker-1's link cut in epoch 2"
launcher_start faults cut.log
until_line cut.log "$(step_line 2 5)" 120
[[ -s $ckpt ]] || die "no checkpoint after epoch 1"
ip -n "$pfx-sw" link set p-w1 down
t=$(now)
launcher_wait 150
secs=$(since "$t")
((RC != 0)) || { show cut.log; die "the job exited 0 after a cut link"; }
awk -v s="$secs" 'BEGIN { exit !(s <= 90) }' || { show cut.log; die "the job ended ${secs} s after the cut (bound: 90 s)"; }
# mpirun, having lost worker-1, signals rank 0 and kills it a second later: rank 0's line says
# which collective was left waiting.
why=$(grep -m1 -E "^cifar10-train: rank 0, after step [0-9]+: .* had waited [0-9]+ s when a stop signal came" "$work/cut.log") ||
  { show cut.log; die "after the cut, the launcher's log has no line of rank 0 naming the collective left waiting"; }
echo "   ok: the job ended ${secs} s after the cut, exit $RC: $why"
ip -n "$pfx-sw" link set p-w1 up
t=$(now)
# worker-1's daemon and rank of the failed job outlive it while the link is down (nothing tells
# them); once it is back, the launcher's host answers their next packet with a reset and they
# exit. The rerun waits for that: mpirun names the job after the launcher's host name and PID,
# which a restarted launcher pod repeats, and an old daemon that exits removes its job's
# session directory, the same path the new job's daemon on that worker uses. Their next packet
# comes when TCP's retransmission backs off to it: up to about as long again as the link was
# down (some 40 s), hence 180 s.
left() { nsenter -t "$(pid1 w1)" -p -m pgrep -c -x 'orted|cifar10-train'; }
for ((i = 0; i < 1800; i++)); do (($(left) == 0)) && break; sleep 0.1; done
(($(left) == 0)) || die "worker-1's processes of the failed job still run 180 s after the link came back"
echo "   ok: link restored; worker-1's processes of the failed job ended $(since "$t") s later"

step "3. the same command again: resumes; SIGTERM to the launcher's PID 1 in epoch 2"
launcher_start faults sigterm.log
until_line sigterm.log "$(step_line 2 15)" 120
grep -qE "^resuming run .*: 1 of 4 epochs done" "$work/sigterm.log" ||
  { show sigterm.log; die "the rerun did not resume from epoch 1's checkpoint"; }
kill -TERM "$(pid1 l)"
t=$(now)
launcher_wait 60
secs=$(since "$t")
((RC == 4)) || { show sigterm.log; die "SIGTERM to the launcher: exit $RC, want 4 (stopped, resumable)"; }
awk -v s="$secs" 'BEGIN { exit !(s <= 30) }' || die "SIGTERM to the launcher: ${secs} s to exit (grace period: 30 s)"
echo "   ok: resumed after epoch 1; exit 4 ${secs} s after SIGTERM: $(grep -m1 'stopped by a signal' "$work/sigterm.log")"

# prestop I LOG EPOCH STEP RESUMED: a rerun that must resume as RESUMED (regex) says; after
# STEP of EPOCH, worker-I's preStop hook runs in worker-I as the kubelet runs it, as uid 1000.
prestop() {
  container "MPIJob/$JOB/Worker" worker:preStop prestop
  image_env worker prestop
  launcher_start faults "$2"
  until_line "$2" "$(step_line "$3" "$4")" 120
  grep -qE "^resuming run .*: $5 done" "$work/$2" || { show "$2"; die "the rerun did not resume after $5"; }
  local -a hook henv
  mapfile -d '' hook <"$work/prestop.argv"
  mapfile -d '' henv <"$work/prestop.fullenv"
  local t secs
  t=$(now)
  nsenter -t "$(pid1 "w$1")" -n -m -u -p setpriv --reuid 1000 --regid 1000 --clear-groups env -i "${henv[@]}" \
    "${hook[@]}" >"$work/$2.hook" 2>&1 || die "worker-$1's preStop hook failed: $(head -c 300 "$work/$2.hook")"
  secs=$(since "$t")
  launcher_wait 60
  ((RC == 4)) || { show "$2"; die "worker-$1's preStop hook: the job exited $RC, want 4"; }
  awk -v s="$secs" 'BEGIN { exit !(s <= 30) }' || die "worker-$1's preStop hook took ${secs} s (grace period: 30 s)"
  echo "   ok: resumed after $(grep -m1 -oE "$5" "$work/$2"); worker-$1's hook returned after ${secs} s, the job exited 4"
  # Then the kubelet sends the container's PID 1 (sshd) SIGTERM, and the operator recreates
  # the pod.
  kill -TERM "$(pid1 "w$1")"
  local i
  for ((i = 0; i < 100; i++)); do kill -0 "${POD[w$1]}" 2>/dev/null || break; sleep 0.1; done
  kill -0 "${POD[w$1]}" 2>/dev/null && die "worker-$1's sshd (its PID 1) still runs 10 s after SIGTERM"
  wait "${POD[w$1]}" 2>/dev/null || true
  worker_start "$1"
  echo "   ok: worker-$1's sshd ended on SIGTERM; its pod started again"
}
step "4. again: worker-0's preStop hook (rank 0's pod) in epoch 3"
prestop 0 prestop0.log 3 5 "1 of 4 epochs and [0-9]+ of 31 steps of epoch 2"

step "5. again: worker-1's preStop hook in epoch 3"
prestop 1 prestop1.log 3 15 "2 of 4 epochs and [0-9]+ of 31 steps of epoch 3"

step "6. again: kill -9 of all of worker-1 in epoch 3"
launcher_start faults hostkill.log
until_line hostkill.log "$(step_line 3 25)" 120
kill -KILL "$(pid1 w1)"
t=$(now)
launcher_wait 150
secs=$(since "$t")
((RC != 0)) || { show hostkill.log; die "the job exited 0 after losing worker-1"; }
awk -v s="$secs" 'BEGIN { exit !(s <= 90) }' || die "the job ended ${secs} s after worker-1 died (bound: 90 s)"
echo "   ok: the job ended ${secs} s after worker-1 died, exit $RC"
wait "${POD[w1]}" 2>/dev/null || true
worker_start 1
echo "   worker-1's pod started again"

step "7. again: resumes and finishes"
launcher_start faults final.log
launcher_wait 300
((RC == 0)) || { show final.log; die "the last rerun failed (exit $RC)"; }
grep -qE "^resuming run .*: 2 of 4 epochs and [0-9]+ of 31 steps of epoch 3 done" "$work/final.log" ||
  { show final.log; die "the last rerun did not resume mid-epoch 3"; }
st_data() { # the tensor data of a safetensors file (after its header)
  tail -c +$(($(od -An -t u8 -N 8 "$1" | tr -d ' ') + 9)) "$1"
}
cmp -s <(st_data "$EFS/runs/reference/cifar10-model.safetensors") <(st_data "$model") ||
  die "the model after the faults and resumes differs from the uninterrupted run's"
echo "   ok: resumed after $(grep -m1 -oE '[0-9]+ of 4 epochs and [0-9]+ of 31 steps of epoch 3' "$work/final.log"), exit 0; model == uninterrupted run's, bit for bit"
echo "$ME: the MPIJob survived a cut link, SIGTERM, both workers' preStop hooks and a lost worker, and resumed bit for bit"
