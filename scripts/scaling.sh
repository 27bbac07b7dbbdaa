#!/usr/bin/env bash
# Measures allreduce time between simulated hosts on this machine, for the scaling study
# (docs/scaling.md): N network namespaces ("hosts"), each joined by a veth pair to a bridge in
# a switch namespace, with an address on that link only (10.215.0.1 - N/24); each link shaped
# with tc's token bucket (tbf) to RATE in both directions, like a NIC of that rate; one rank per
# host, Open MPI over TCP only (btl tcp,self: no shared memory between hosts), started by
# mpirun in host 1 through a launch agent that enters a host's namespace (ip netns exec) where
# a cluster would use ssh, unbound (each host's daemon would bind its rank to "its" first core,
# the same core for every host). Each size is timed by tests/allreduce_time (the slowest rank per
# repetition, median over the repetitions), and its lines are printed with the settings:
#   scaling: hosts=N rate=RATE allreduce: bytes=B ranks=N mode=M reps=K median_s=S min_s=S max_s=S
# With --bench, the hosts run cifar10-bench instead (whole training steps: forward, backward
# with the gradient buckets reduced as they fill, SGD update); its report passes through, with
# its result line as
#   scaling: hosts=N rate=RATE bench: images_per_s=X ranks=N ...
#
#   scripts/scaling.sh [--hosts N] [--rate RATE] [--mode poll|sleep|block] [--reps N] [BYTES...]
#   scripts/scaling.sh [--hosts N] [--rate RATE] --bench "BENCH FLAGS"
#
#   --hosts N      hosts, one rank each, 2 to 8 (default 2)
#   --rate RATE    tc rate of every link, e.g. 1gbit or 200mbit; none: unshaped (default none)
#   --mode M       poll: MPI_Iallreduce polled with sched_yield, as training waits for a
#                  bucket; sleep: polled with 20 us sleeps; block: MPI_Allreduce (default
#                  sleep: polling ranks keep the packets' softirq work off their cores, and
#                  on veth that adds about 4 ms to every message, which a NIC does not)
#   --reps N       timed repetitions per size (default 20, after 3 untimed)
#   BYTES...       message sizes (default 4096 65536 1048576 4194304 16777216)
#   --bench FLAGS  run cifar10-bench FLAGS (one word list, e.g. "--model airbench94 --threads 1")
#                  on every host instead; the hosts share this machine's cores, so give
#                  --threads (each rank sees a node of its own and would take all of them)
# Needs root (namespaces), iproute2 (ip, tc), Open MPI and the built tests (make).
# Exit codes: 0 measured, 1 a step failed (message names it), 2 bad usage, 3 skipped: this
# machine does not allow network namespaces.
set -euo pipefail
ME=scaling.sh
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-$ROOT/build}
die() { echo "$ME: $*" >&2; exit 1; }
usage() {
  echo "$ME: $* (usage: scripts/scaling.sh [--hosts N] [--rate RATE] [--mode poll|sleep|block] [--reps N] [BYTES... | --bench FLAGS])" >&2
  exit 2
}
hosts=2 rate=none mode=sleep reps=20 sizes=() bench='' bench_given=''
while (($#)); do
  case $1 in
    --hosts | --rate | --mode | --reps | --bench) (($# >= 2)) || usage "$1 needs a value" ;;&
    --bench) bench=$2 bench_given=1; shift 2 ;;
    --hosts) hosts=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    -*) usage "unknown option $1" ;;
    *) sizes+=("$1"); shift ;;
  esac
done
[[ $hosts =~ ^[2-8]$ ]] || usage "--hosts: '$hosts' is not a number from 2 to 8"
[[ $rate == none || $rate =~ ^[1-9][0-9]*(k|m|g)?bit$ ]] || usage "--rate: '$rate' is not none or a tc rate such as 1gbit or 200mbit"
[[ $mode == poll || $mode == block || $mode == sleep ]] || usage "--mode: '$mode' is not poll, sleep or block"
[[ $reps =~ ^[1-9][0-9]*$ ]] || usage "--reps: '$reps' is not a positive whole number"
[[ -z $bench_given || ${#sizes[@]} -eq 0 ]] || usage "--bench times training steps, not sizes: drop '${sizes[0]}'"
((${#sizes[@]})) || sizes=(4096 65536 1048576 4194304 16777216)
for s in "${sizes[@]}"; do [[ $s =~ ^[1-9][0-9]*$ ]] || usage "'$s' is not a size in bytes"; done
read -r -a bench_flags <<<"$bench"
if [[ -n $bench_given ]]; then
  ((${#bench_flags[@]})) || usage "--bench: no flags given"
  prog=("$BUILD/cifar10-bench" "${bench_flags[@]}") what="cifar10-bench"
else
  prog=("$BUILD/tests/allreduce_time" --mode "$mode" --reps "$reps" "${sizes[@]}") what="the allreduce"
fi
skip() { echo "$ME: skipped: $*"; exit 3; }
((EUID == 0)) || skip "network namespaces need root"
{ command -v ip && command -v tc; } >/dev/null || die "needs ip and tc (apt-get install iproute2)"
command -v mpirun >/dev/null || die "needs Open MPI's mpirun"
[[ -x ${prog[0]} ]] || die "${prog[0]} is missing: run make test first"

pfx=c10s$$
work=$(mktemp -d /tmp/cifar10-scaling.XXXXXX)
addr() { echo "10.215.0.$1"; }
cleanup() {
  local i
  for ((i = 1; i <= hosts; i++)); do ip netns pids "$pfx-$i" | xargs -r kill -KILL; done
  for ((i = 1; i <= hosts; i++)); do ip netns del "$pfx-$i"; done
  ip netns del "$pfx-sw"
  rm -rf "$work"
} 2>/dev/null
trap cleanup EXIT

ip netns add "$pfx-sw" 2>"$work/netns.err" || skip "cannot create a network namespace: $(head -n 1 "$work/netns.err")"
ip -n "$pfx-sw" link add br0 type bridge
ip -n "$pfx-sw" link set br0 up
# shape NS DEV: DEV's egress in NS at $rate (a burst of 1 ms of traffic, at least 64 KiB).
shape() {
  [[ $rate == none ]] && return 0
  tc -n "$1" qdisc add dev "$2" root tbf rate "$rate" burst 256kb latency 100ms ||
    die "tc cannot shape $2 to $rate (tbf)"
}
for ((i = 1; i <= hosts; i++)); do
  ip netns add "$pfx-$i"
  ip -n "$pfx-sw" link add "p$i" type veth peer name eth0 netns "$pfx-$i"
  ip -n "$pfx-sw" link set "p$i" master br0 up
  ip -n "$pfx-$i" addr add "$(addr "$i")/24" dev eth0
  ip -n "$pfx-$i" link set eth0 up
  ip -n "$pfx-$i" link set lo up
  shape "$pfx-$i" eth0    # host -> switch
  shape "$pfx-sw" "p$i"   # switch -> host
  echo "$(addr "$i") slots=1" >>"$work/hostfile"
done
# The launch agent: mpirun calls it as `agent HOST COMMAND...`, as it would call ssh. Each host
# gets a host name and a temporary directory of its own (UTS namespace, TMPDIR), as a real host
# has: Open MPI names its session directories after the host, and daemons of one job sharing
# one would trip over each other.
cat >"$work/agent" <<EOF
#!/bin/sh
host=\$1
shift
i=\${host##*.}
mkdir -p "$work/tmp/\$i"
exec ip netns exec "$pfx-\$i" unshare --uts env TMPDIR="$work/tmp/\$i" /bin/sh -c "hostname host\$i && \$*"
EOF
chmod 755 "$work/agent"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_plm=rsh OMPI_MCA_plm_rsh_agent=$work/agent OMPI_MCA_pml=ob1 OMPI_MCA_btl=tcp,self \
  OMPI_MCA_btl_tcp_if_include=10.215.0.0/24 OMPI_MCA_oob_tcp_if_include=10.215.0.0/24
mkdir -p "$work/tmp/1"
if ! ip netns exec "$pfx-1" unshare --uts env TMPDIR="$work/tmp/1" sh -c 'hostname host1 && exec "$@"' sh mpirun -np "$hosts" --hostfile "$work/hostfile" --map-by node --bind-to none \
  "${prog[@]}" >"$work/out" 2>"$work/err"; then
  cat "$work/err" >&2
  die "$what between $hosts hosts failed (its output above)"
fi
sed -E "s/^(allreduce: )/scaling: hosts=$hosts rate=$rate \1/; s/^result: /scaling: hosts=$hosts rate=$rate bench: /" "$work/out"
