#!/usr/bin/env bash
# Installs what building and running cifar10-dp needs on Debian/Ubuntu (apt-get; as root or
# through sudo). --test adds what `make test` needs: PyTorch, NumPy, matplotlib, pip (the
# references, plots, TensorBoard's reader from PyPI), PyYAML, yamllint, ShellCheck, clang-format,
# sshd and iproute2 (the k8s/Dockerfile checks and the multi-host rehearsal; kubectl >= 1.21 is
# used when present), dumb-init and procps (the rehearsals), clang (fuzzing). --image adds what
# scripts/image-test.sh needs: podman with runc, netavark and aardvark-dns, iptables,
# debootstrap. Nothing is fetched twice.
set -euo pipefail
pkgs=(build-essential make libopenmpi-dev openmpi-bin openssh-client zlib1g-dev libpng-dev libjpeg-dev curl ca-certificates)
for arg in "$@"; do
  case $arg in
    --test) pkgs+=(python3 python3-pip python3-matplotlib python3-pil python3-torch python3-numpy python3-yaml yamllint shellcheck clang-format openssh-server iproute2 dumb-init procps clang libclang-rt-14-dev) ;;
    --image) pkgs+=(podman runc netavark aardvark-dns iptables debootstrap openssh-client) ;;
    -h | --help) sed -n '2,8s/^# \{0,1\}//p' "$0"; exit 0 ;;
    *) echo "install-deps.sh: unknown argument $arg (try --help)" >&2; exit 2 ;;
  esac
done
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  echo "install-deps.sh: all dependencies present"
  exit 0
fi
sudo=""
if ((EUID != 0)); then sudo=sudo; fi
echo "install-deps.sh: installing ${missing[*]}"
$sudo apt-get update -q
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
