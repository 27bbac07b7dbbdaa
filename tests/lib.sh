# shellcheck shell=bash
# Helpers for the shell test suites (sourced). Each suite ends with `summary NAME`, which prints
# "NAME: N passed, N failed" and returns non-zero on any failure.
set -uo pipefail
BUILD=${BUILD:-build}
BIN=$(cd "$BUILD" && pwd) # used by the suites that source this file
export BIN
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Open MPI in containers: no ssh launcher needed on one node, keep vader shared memory working.
export OMPI_MCA_plm=isolated OMPI_MCA_btl_vader_single_copy_mechanism=none
T=$(mktemp -d /tmp/cifar10-test.XXXXXX)
trap 'rm -rf "$T"' EXIT
passed=0
failed=0

pass() { passed=$((passed + 1)); }
fail() {
  failed=$((failed + 1))
  echo "FAIL: $*" >&2
}
# check DESCRIPTION COMMAND...: passes when COMMAND succeeds.
check() {
  local what=$1
  shift
  if "$@"; then pass; else fail "$what"; fi
}
# run COMMAND...: runs it with stdout in $T/out, stderr in $T/err, exit status in $rc.
run() {
  "$@" >"$T/out" 2>"$T/err"
  rc=$?
}
expect_rc() { # expect_rc WANT DESCRIPTION
  if [[ $rc == "$1" ]]; then pass; else fail "$2: exit $rc, want $1; stderr: $(head -c 600 "$T/err")"; fi
}
# Lines our programs wrote to stderr (Open MPI's own banners are not ours).
our_err_lines() { grep -cE '^(cifar10-[a-z]+|get-data.sh|eks-[a-z-]+.sh|rehearse-[a-z]+.sh|scaling.sh|scaling-model.py|limit.sh|coverage.sh|coverage-summary.py): ' "$T/err"; }
expect_err() { # expect_err DESCRIPTION TEXT: exactly one error line of ours, containing TEXT
  local n
  n=$(our_err_lines)
  if [[ $n == 1 ]] && grep -qF -- "$2" "$T/err"; then pass; else fail "$1: want one line with '$2', got: $(head -c 600 "$T/err")"; fi
}
expect_out() { # expect_out DESCRIPTION EXTENDED-REGEX
  if grep -qE -- "$2" "$T/out"; then pass; else fail "$1: no line matching '$2' in: $(head -c 800 "$T/out")"; fi
}
# The tensor data of a safetensors file (everything after the header).
st_data() {
  local n
  n=$(od -An -t u8 -N 8 "$1" | tr -d ' ')
  tail -c +$((8 + n + 1)) "$1"
}
summary() {
  echo "$1: $passed passed, $failed failed"
  ((failed == 0))
}
# Prints the path of a kubectl that can render kustomizations (scripts/eks-lib.sh decides), or
# nothing.
kubectl_for_kustomize() {
  # shellcheck disable=SC2016 # $0 is the library's path, expanded by the inner shell
  if bash -c '. "$0" && kubectl_can_kustomize' "$(dirname "${BASH_SOURCE[0]}")/../scripts/eks-lib.sh"; then
    command -v kubectl
  fi
  return 0
}
# skip_without_kubectl NAME: ends the suite NAME as skipped (exit 0, one line) where no kubectl can
# render k8s/.
skip_without_kubectl() {
  if [[ -z $(kubectl_for_kustomize) ]]; then
    echo "$1: skipped: no kubectl >= 1.21 with kustomize to render k8s/ (Debian's kubernetes-client is older)"
    exit 0
  fi
}
