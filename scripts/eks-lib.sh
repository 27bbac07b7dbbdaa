# shellcheck shell=bash
# Shared by scripts/eks-*.sh and rehearse-*.sh (sourced): paths, the cluster's name and region
# (read from k8s/eks/cluster.yaml), the namespace, and reading/writing k8s/settings/settings.env, the one
# place where a deployment is configured.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
K8S=$ROOT/k8s
SETTINGS=$K8S/settings/settings.env
CLUSTER_CONFIG=$K8S/eks/cluster.yaml
# Must match "namespace:" in k8s/settings/kustomization.yaml (tests/test_k8s.py checks).
# shellcheck disable=SC2034 # used by the scripts that source this file
NAMESPACE=cifar10
ME=$(basename "$0")
# Seconds between status polls while waiting for a Job (tests set 0).
POLL_SECONDS=${POLL_SECONDS:-20}

die() { echo "$ME: $*" >&2; exit 1; }
say() { echo "$ME: $*"; }
# usage: prints the script's header comment (lines 2 up to the first line without "#").
usage() { sed -n '2,/^[^#]/{/^#/s/^# \{0,1\}//p}' "$0"; }
bad_usage() { echo "$ME: $* (try --help)" >&2; exit 2; }
need() { # need CMD...: each must be on PATH
  local c
  for c in "$@"; do command -v "$c" >/dev/null || die "$c not found on PATH (see docs/eks.md)"; done
}

# metadata.name and metadata.region of the eksctl ClusterConfig.
cluster_field() {
  awk -v key="$1" '/^metadata:/ {m = 1; next} /^[^ #]/ {m = 0}
    m && $1 == key ":" {gsub(/"/, "", $2); print $2; exit}' "$CLUSTER_CONFIG"
}
CLUSTER=$(cluster_field name)
REGION=$(cluster_field region)
[[ -n $CLUSTER && -n $REGION ]] || die "$CLUSTER_CONFIG: no metadata.name or metadata.region"

# kubectl >= 1.21 renders kustomizations (kustomize v4+); Debian's kubernetes-client is older.
kubectl_can_kustomize() {
  local minor
  minor=$(kubectl version --client -o json 2>/dev/null | sed -n 's/.*"minor": *"\([0-9]*\).*/\1/p' | head -n 1) || true
  [[ -n $minor ]] && ((minor >= 21))
}

setting() { # setting KEY: its value in settings.env
  local v
  v=$(sed -n "s/^$1=//p" "$SETTINGS" | tail -n 1)
  [[ -n $v ]] || die "$SETTINGS: no $1= line"
  printf '%s\n' "$v"
}
set_setting() { # set_setting KEY VALUE: rewrites the KEY= line in settings.env
  [[ $2 =~ ^[A-Za-z0-9._:/@-]+$ ]] || die "refusing to write $1='$2' into $SETTINGS (unexpected characters)"
  grep -q "^$1=" "$SETTINGS" || die "$SETTINGS: no $1= line"
  sed -i "s|^$1=.*|$1=$2|" "$SETTINGS"
  say "set $1=$2 in ${SETTINGS#"$ROOT"/}"
}

# rehearse_args ARGS...: the command line of the rehearse-*.sh scripts (--k8s DIR, --workdir DIR,
# --keep, --help) into k8s, work and keep; BUILD (the binaries) as an absolute path.
# shellcheck disable=SC2034 # used by the scripts that call it
rehearse_args() {
  BUILD=${BUILD:-build}
  [[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
  k8s=$K8S work="" keep=0
  while (($#)); do
    case $1 in
      --k8s) k8s=${2:-}; shift 2 || bad_usage "--k8s needs a value" ;;
      --workdir) work=${2:-}; shift 2 || bad_usage "--workdir needs a value" ;;
      --keep) keep=1; shift ;;
      -h | --help) usage; exit 0 ;;
      *) bad_usage "unknown argument $1" ;;
    esac
  done
  [[ -d $k8s/settings ]] || die "$k8s: not a k8s/ directory (no settings/)"
}
