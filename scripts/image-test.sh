#!/usr/bin/env bash
# Builds the CPU flavour of the image with podman and checks it for real:
#   1. the base images debian:12 and debian:12-slim: used as they are where podman has them,
#      pulled where a registry answers, else made with debootstrap (minbase, bookworm) from
#      Debian's mirror and imported under both names;
#   2. podman build --pull=never --network host --build-arg FLAVOUR=cpu (the GPU flavour's base
#      is NVIDIA's CUDA image: tests/test_dockerfile.sh checks it statically);
#   3. inside the image: every program's --help; user mpiuser, uid 1000; no compiler or make;
#      no ssh host keys; the ssh client and server configs in place; every library each binary
#      needs resolved; a 2-rank training run (mpirun -np 2 cifar10-train, synthetic data the
#      test makes) and cifar10-test on its model;
#   4. an ssh launch as mpi-operator's launcher makes it: two containers on a network of their
#      own, the worker running the image's sshd on port 2222 as uid 1000 with a key pair
#      mounted at /home/mpiuser/.ssh, the launcher running mpirun -np 2 over ssh to it.
# Removes its containers, network and images (the base images too when it made them).
# Prints one line per check and "image-test: N passed, N failed"; exit 0 when all passed, 1
# otherwise, 2 on bad usage, 3 when this machine cannot run podman containers (the reason).
#
#   scripts/image-test.sh [--keep]      --keep: leave the images (cifar10-dp:cpu-test, its base)
# Needs root, podman (Debian's 4.3 with runc) and, without a registry, debootstrap.
set -uo pipefail
ME=image-test.sh
SRC=$(cd "$(dirname "$0")/.." && pwd)
keep=0
case ${1:-} in
  --keep) keep=1 ;;
  "") ;;
  *) echo "usage: scripts/image-test.sh [--keep]" >&2; exit 2 ;;
esac
((EUID == 0)) || { echo "$ME: skipped: needs root (podman, debootstrap)"; exit 3; }
command -v podman >/dev/null || { echo "$ME: needs podman (apt-get install podman runc)" >&2; exit 1; }

W=$(mktemp -d /tmp/cifar10-image.XXXXXX)
TAG=cifar10-dp:cpu-test NET=c10-image-$$ made_base=0
passed=0 failed=0
pass() { passed=$((passed + 1)); echo "ok: $*"; }
fail() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { # check WHAT COMMAND...
  local what=$1
  shift
  if "$@" >"$W/check.out" 2>&1; then pass "$what"; else fail "$what: $(head -c 400 "$W/check.out")"; fi
}

# podman's settings for this run only: runc (crun needs a cgroup v2 or RLIMIT_NPROC setup these
# machines may lack), cgroupfs (no systemd), and limits runc can set (podman's defaults exceed
# what these machines grant, and runc cannot start a container then): this shell's open files,
# 4096 processes.
lim() { ulimit "$1" | sed 's/unlimited/-1/'; }
cat >"$W/containers.conf" <<EOF
[containers]
default_ulimits = ["nofile=$(lim -Sn):$(lim -Hn)", "nproc=4096:4096"]
[engine]
cgroup_manager = "cgroupfs"
events_logger = "file"
runtime = "runc"
EOF
export CONTAINERS_CONF=$W/containers.conf
P=(podman)
# Every image this run adds (the base it made, the build stage, layers, the image) goes at the
# end, unless --keep.
images() { "${P[@]}" images -aq --no-trunc | sort -u; }
cleanup() {
  "${P[@]}" rm -f -t 0 c10-worker c10-launcher >/dev/null 2>&1
  "${P[@]}" network rm -f "$NET" >/dev/null 2>&1
  if ((!keep)); then
    "${P[@]}" rmi -f "$TAG" >/dev/null 2>&1
    ((made_base)) && "${P[@]}" untag debian:12 debian:12-slim >/dev/null 2>&1
    local added
    mapfile -t added < <(comm -13 "$W/images.before" <(images))
    ((${#added[@]} == 0)) || "${P[@]}" rmi -f "${added[@]}" >/dev/null 2>&1
  fi
  rm -rf "$W"
}
images >"$W/images.before"
trap cleanup EXIT

start=$SECONDS

# 1. The base images.
if "${P[@]}" image exists debian:12 && "${P[@]}" image exists debian:12-slim; then
  echo "base: debian:12 and debian:12-slim present"
elif timeout 60 "${P[@]}" pull -q docker.io/library/debian:12 >/dev/null 2>&1 &&
  timeout 60 "${P[@]}" pull -q docker.io/library/debian:12-slim >/dev/null 2>&1; then
  echo "base: pulled from docker.io"
else
  command -v debootstrap >/dev/null || { echo "$ME: no registry and no debootstrap (apt-get install debootstrap)" >&2; exit 1; }
  echo "base: no registry; debootstrap --variant=minbase bookworm from deb.debian.org"
  debootstrap --variant=minbase bookworm "$W/rootfs" http://deb.debian.org/debian >"$W/debootstrap.log" 2>&1 ||
    { tail -n 5 "$W/debootstrap.log"; echo "$ME: debootstrap failed" >&2; exit 1; }
  if ! tar -C "$W/rootfs" -c . | "${P[@]}" import - debian:12 >/dev/null ||
    ! "${P[@]}" tag debian:12 debian:12-slim; then
    echo "$ME: podman import failed" >&2
    exit 1
  fi
  made_base=1
  rm -rf "$W/rootfs"
fi
"${P[@]}" run --rm --network none debian:12 true >"$W/run.log" 2>&1 ||
  { echo "$ME: skipped: podman cannot run a container here: $(tail -n 1 "$W/run.log")"; exit 3; }

# 2. The build.
t0=$SECONDS
if "${P[@]}" build --pull=never --network host --build-arg FLAVOUR=cpu -t "$TAG" "$SRC" >"$W/build.log" 2>&1; then
  pass "podman build of the CPU flavour ($((SECONDS - t0)) s)"
else
  fail "podman build: $(tail -n 5 "$W/build.log")"
  echo "image-test: $passed passed, $failed failed"
  exit 1
fi
size=$("${P[@]}" image inspect "$TAG" --format '{{.Size}}')
echo "image: $TAG, $((size / 1000000)) MB"

# 3. Inside the image.
# The single-quoted commands below run in the container's shell (shellcheck's SC2016).
in_image() { "${P[@]}" run --rm --network none "$TAG" "$@"; }
for p in cifar10-train cifar10-test cifar10-predict get-data.sh; do
  check "$p --help" in_image "$p" --help
done
# shellcheck disable=SC2016
check "runs as mpiuser, uid 1000" in_image sh -c 'test "$(id -un):$(id -u)" = mpiuser:1000'
check "no compiler or make" in_image sh -c '! command -v gcc && ! command -v cc && ! command -v make'
check "no ssh host keys" in_image sh -c '! ls /etc/ssh/ssh_host_* 2>/dev/null'
check "ssh client config in place" in_image grep -q '^  Port 2222' /etc/ssh/ssh_config.d/mpi-operator.conf
check "sshd config in place" in_image grep -q '^Port 2222' /home/mpiuser/.sshd_config
# shellcheck disable=SC2016
check "every library the binaries need is there" in_image sh -c \
  'for b in /usr/local/bin/cifar10-*; do ldd "$b" | grep "not found" && exit 1; done; exit 0'

# Data and a model, made here with the host's build (the image has no tests/).
mkdir -p "$W/efs" && chmod 777 "$W/efs"
"$SRC/build/tests/make_synthetic" "$W/efs/data" 80 50 >/dev/null || { echo "$ME: run make first" >&2; exit 1; }
chmod -R a+rwX "$W/efs"
t0=$SECONDS
check "mpirun -np 2 cifar10-train inside one container" "${P[@]}" run --rm --network none -v "$W/efs:/efs" "$TAG" \
  mpirun --mca btl self,vader -np 2 cifar10-train --model workshop-cnn --epochs 1 --batch-size 16 --threads 1 \
  --device cpu --model-file /efs/model.safetensors /efs/data
echo "   (training: $((SECONDS - t0)) s)"
check "cifar10-test on its model" "${P[@]}" run --rm --network none -v "$W/efs:/efs" "$TAG" \
  cifar10-test --device cpu --model-file /efs/model.safetensors /efs/data

# 4. An ssh launch between two containers.
mkdir -p "$W/ssh"
ssh-keygen -q -t rsa -b 3072 -N '' -f "$W/ssh/id_rsa" && cp "$W/ssh/id_rsa.pub" "$W/ssh/authorized_keys"
chmod 755 "$W/ssh" && chmod 644 "$W/ssh/"*
"${P[@]}" network create --disable-dns "$NET" >/dev/null
"${P[@]}" run -d --name c10-worker --hostname worker --network "$NET" -v "$W/ssh:/home/mpiuser/.ssh:ro" \
  -v "$W/efs:/efs" "$TAG" /usr/sbin/sshd -De -f /home/mpiuser/.sshd_config >/dev/null 2>&1
for _ in $(seq 100); do
  "${P[@]}" exec c10-worker sh -c 'test -s /home/mpiuser/sshd.pid' 2>/dev/null && break
  sleep 0.1
done
# shellcheck disable=SC2016
check "the worker's sshd serves as uid 1000 on port 2222" "${P[@]}" exec c10-worker sh -c \
  'test "$(ps -o uid= -p "$(cat /home/mpiuser/sshd.pid)" | tr -d " ")" = 1000'
ip=$("${P[@]}" inspect c10-worker --format "{{(index .NetworkSettings.Networks \"$NET\").IPAddress}}")
launcher() {
  "${P[@]}" run --rm --name c10-launcher --hostname launcher --network "$NET" --add-host "worker:$ip" \
    -v "$W/ssh:/home/mpiuser/.ssh:ro" -v "$W/efs:/efs" "$TAG" "$@"
}
hosts=$(launcher mpirun --host worker:2 -np 2 hostname 2>&1 | sort | uniq -c | tr -s ' ')
check "launcher: mpirun over ssh starts both ranks on the worker (got: $hosts)" test "$hosts" = " 2 worker"
check "launcher: mpirun -np 2 over ssh to the worker trains and writes the model" \
  launcher mpirun --host worker:2 -np 2 cifar10-train --model workshop-cnn --epochs 1 --batch-size 16 --threads 1 \
  --device cpu --model-file /efs/ssh-model.safetensors /efs/data
check "the ssh-launched run's model exists" test -s "$W/efs/ssh-model.safetensors"

echo "image-test: $((SECONDS - start)) s in all"
echo "image-test: $passed passed, $failed failed"
((failed == 0))
