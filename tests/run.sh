#!/usr/bin/env bash
# Runs every test suite (make test calls this after building) and ends with the line
# "tests: N passed, N failed". Exit status: 0 only when every suite passed.
# --check (make check): only the fast inner loop (ops, model, cli, docs, the workshop CNN
# against PyTorch float64), ending "check: N passed, N failed".
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
export BUILD=${BUILD:-build}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm=isolated \
  OMPI_MCA_btl_vader_single_copy_mechanism=none
B=$BUILD
# Debian's interpreter: python3-torch installs there (a python3 earlier on PATH may lack it).
PY=/usr/bin/python3
[[ -x $PY ]] || PY=python3
passed=0 failed=0 bad_suites=()
check_only=0
case ${1:-} in
  --check) check_only=1 ;;
  "") ;;
  *) echo "run.sh: unknown argument $1 (--check or nothing)" >&2; exit 2 ;;
esac
# TensorBoard's own event reader for tests/check_tensorboard.py (PyPI only, not in Debian),
# installed once into $BUILD/pylib where pip reaches PyPI, at the versions of
# tests/tensorboard-requirements.txt; the check says skipped otherwise. The install (about 30 s
# on a clean clone, mostly download; 300 s at most) runs beside the first suites;
# tensorboard_ready waits for it before the first suite that reads events.
pip_pid=
if ((!check_only)) && [[ -z ${TENSORBOARD_PYTHONPATH:-} ]]; then
  export TENSORBOARD_PYTHONPATH=$B/pylib
  if [[ ! -d $B/pylib/tensorboard ]]; then
    tests/limit.sh 300 "$PY" -m pip install -q --disable-pip-version-check --target "$B/pylib" \
      -r tests/tensorboard-requirements.txt >/dev/null 2>&1 &
    pip_pid=$!
  fi
fi
tensorboard_ready() {
  [[ -n $pip_pid ]] || return 0
  wait "$pip_pid" || echo "== note: pip could not install tensorboard into $B/pylib; its reader is skipped"
  pip_pid=
}

# Each suite runs under tests/limit.sh, SUITE_LIMIT seconds (900 unless set; the slowest takes
# under 3 minutes on 2 cores): one that hangs is stopped with every process it started and
# counts as failed, so that CI names it rather than running out of time.
SUITE_LIMIT=${SUITE_LIMIT:-900}
export B PY
suite() { # suite NAME COMMAND...: runs it (a function of this file too), adds up every "X: N passed, M failed" line it prints
  local name=$1 log p f found=0 start=$SECONDS
  shift
  log=$(mktemp)
  echo "== $name"
  ! declare -F "$1" >/dev/null || set -- bash -c '"$@"' "$1" "$@" # (exported below)
  tests/limit.sh "$SUITE_LIMIT" "$@" 2>&1 | tee "$log"
  local status=${PIPESTATUS[0]}
  while read -r p f; do
    passed=$((passed + p)) failed=$((failed + f)) found=1
  done < <(sed -nE 's/^.*: ([0-9]+) passed, ([0-9]+) failed$/\1 \2/p' "$log")
  if ((status != 0 || !found)); then
    bad_suites+=("$name")
    ((found)) || failed=$((failed + 1)) # crashed before reporting: count it as a failure
  fi
  echo "== $name: exit $status, $((SECONDS - start)) s"
  rm -f "$log"
}

# Batches of 16: PyTorch's float64 convolutions take most of these suites' time, in proportion.
torch_reference() { # torch_reference NET [STEPS]: our steps (default 20) of network NET against PyTorch float64
  local d
  d=$(mktemp -d /tmp/cifar10-torch.XXXXXX)
  "$B/tests/make_synthetic" "$d/data" 128 16 &&
    "$B/tests/dump_steps" "$1" "$d/data" "$d" "${2:-20}" 16 0.01 &&
    "$PY" tests/torch_reference.py "$d" "$d/data" 0.01
  local status=$?
  rm -rf "$d"
  return $status
}
export -f torch_reference

torch_recipe() { # torch_recipe NET STEPS K E: airbench94's recipe for STEPS steps (the whole run, K per epoch, the first layer's bias for E epochs) against PyTorch float64
  local d
  d=$(mktemp -d /tmp/cifar10-torch.XXXXXX)
  "$B/tests/make_synthetic" "$d/data" 128 16 &&
    "$B/tests/dump_steps" "$1" "$d/data" "$d" "$2" 16 11.5 --recipe airbench94 --total-steps "$2" --steps-per-epoch "$3" --bias-epochs "$4" &&
    "$PY" tests/torch_reference.py "$d" "$d/data" 11.5
  local status=$?
  rm -rf "$d"
  return $status
}
export -f torch_recipe

if ((check_only)); then
  suite "ops, every backend" "$B/tests/test_ops"
  suite model "$B/tests/test_model"
  suite cli tests/test_cli.sh
  suite "docs against the programs and the tree" "$PY" tests/test_docs.py "$B"
  if "$PY" -c 'import torch, numpy' 2>/dev/null; then
    suite "pytorch reference, workshop-cnn" torch_reference workshop-cnn 8
  else
    echo "== pytorch reference: skipped: $PY cannot import torch and numpy (scripts/install-deps.sh --test installs python3-torch)"
  fi
  ((${#bad_suites[@]} == 0)) || echo "failing suites: ${bad_suites[*]}"
  echo "check: $passed passed, $failed failed"
  ((failed == 0 && ${#bad_suites[@]} == 0))
  exit
fi

# lane_start NAME FUNCTION: FUNCTION's suites run in the background, beside the rest, with
# counts of their own; lane_join waits for every lane, then prints each one's output in one
# piece and adds its counts.
lane_dirs=() lane_pids=() lane_names=()
# shellcheck disable=SC2030 # the lane's counts start at 0 in its subshell, on purpose
lane_start() {
  local dir
  dir=$(mktemp -d /tmp/cifar10-lane.XXXXXX)
  (
    passed=0 failed=0 bad_suites=()
    "$2"
    echo "$passed $failed" >"$dir/counts"
    printf '%s\n' "${bad_suites[@]}" >"$dir/bad"
  ) >"$dir/log" 2>&1 &
  lane_pids+=($!) lane_dirs+=("$dir") lane_names+=("$1")
}
# shellcheck disable=SC2031 # the parent's counts, which the lanes' subshells never touch
lane_join() {
  local i p f name
  for i in "${!lane_pids[@]}"; do
    wait "${lane_pids[$i]}"
    cat "${lane_dirs[$i]}/log"
    if read -r p f <"${lane_dirs[$i]}/counts"; then
      passed=$((passed + p)) failed=$((failed + f))
      while read -r name; do [[ -n $name ]] && bad_suites+=("$name"); done <"${lane_dirs[$i]}/bad"
    else
      bad_suites+=("${lane_names[$i]} lane (ended without its counts)")
    fi
    rm -rf "${lane_dirs[$i]}"
  done
  lane_pids=() lane_dirs=() lane_names=()
}

# The light suites (one core at most, no time bounds, no files or ports shared with the others)
# run in a second lane beside the rest: CI has two cores, and the suites below leave one of them
# idle much of the time.
light_lane() {
  suite cli tests/test_cli.sh
  suite lint tests/test_lint.sh
  suite "docs against the programs and the tree" "$PY" tests/test_docs.py "$B"
  suite "time limits (tests/limit.sh)" tests/test_limit.sh
  suite dockerfile tests/test_dockerfile.sh
  suite "k8s manifests" "$PY" tests/test_k8s.py
  suite "eks scripts" tests/test_eks_scripts.sh
  suite "gpu-check.sh steps (stand-ins)" tests/test_gpu_check.sh
  suite "scaling model (scripts/scaling-model.py)" tests/test_scaling_model.sh
  suite "coverage table (scripts/coverage-summary.py)" tests/test_coverage.sh
  if "$PY" -c 'import matplotlib' 2>/dev/null; then
    suite "plots (scripts/plot-run.py)" "$PY" tests/test_plots.py
  else
    echo "== plots: skipped: $PY cannot import matplotlib (scripts/install-deps.sh --test installs python3-matplotlib)"
  fi
  if "$PY" -c 'import torch, numpy, PIL' 2>/dev/null; then
    suite "cifar10-predict vs PIL and pytorch" "$PY" tests/test_predict.py "$B"
  else
    echo "== cifar10-predict vs PIL: skipped: $PY cannot import PIL, torch and numpy (scripts/install-deps.sh --test installs python3-pil and python3-torch)"
  fi
}
lane_start light light_lane

suite "ops, every backend" "$B/tests/test_ops"
suite model "$B/tests/test_model"
suite "cuda models vs cpu" "$B/tests/test_cuda"
suite data "$B/tests/test_data"
suite checkpoint "$B/tests/test_checkpoint"
suite whiten "$B/tests/test_whiten"
suite "dist, 1 process" "$B/tests/test_dist"
suite "dist, mpirun -np 2" mpirun -np 2 "$B/tests/test_dist"
dist_files() { # the files of a 2-rank test_dist through dist_grads, judged by the GPU checker
  local d status
  d=$(mktemp -d /tmp/cifar10-dist.XXXXXX)
  mpirun -np 2 "$B/tests/test_dist" --device cpu --out "$d" && "$PY" tests/check_dist_files.py "$d"
  status=$?
  rm -rf "$d"
  return $status
}
export -f dist_files

suite "dist files, mpirun -np 2, checked as on a GPU" dist_files
suite "staged allreduce, 1 process" "$B/tests/test_staged"
suite "staged allreduce, mpirun -np 2" mpirun -np 2 "$B/tests/test_staged"
suite get-data tests/test_get_data.sh
# The rehearsal on three hosts waits out a 60 s collective timeout with the cores idle (the
# waiting ranks sleep between polls), and its bounds (90 s, 30 s) are far above what load
# changes: it runs beside the training suites, which have no time bounds, and ends before the
# faults suite, whose time windows assume the same load throughout.
hosts_lane() {
  suite "rehearse on three hosts (network namespaces)" tests/test_rehearse_hosts.sh
  suite "scaling harness on three hosts (scripts/scaling.sh)" tests/test_scaling.sh
}
lane_start "rehearse on three hosts" hosts_lane
suite train tests/test_train.sh
tensorboard_ready
suite "airbench94 recipe" tests/test_recipe.sh
lane_join
suite "faults: signals, mid-epoch checkpoints, stalls" tests/test_faults.sh
# The PyTorch references (no time bounds) run beside the local rehearsal (none either).
torch_lane() {
  if "$PY" -c 'import torch, numpy' 2>/dev/null; then
    # 8 steps: step 1 and 2 in full, then teacher-forced losses
    suite "pytorch reference, workshop-cnn" torch_reference workshop-cnn 8
    suite "pytorch reference, test-net" torch_reference test-net
    # 14 steps, 4 per epoch: lookahead after steps 5 and 10, the final one after 14, the bias stops at step 13, lr peak at step 4
    suite "pytorch reference, test-net, airbench94 recipe" torch_recipe test-net 14 4 3
    # 3 steps, 1 per epoch: the final lookahead after step 3, the bias stops at step 3; ~30 s on 2
    # cores. The network's own step (loss, every gradient, the updated state) is checked here too,
    # so airbench94 needs no run of its own with plain SGD (the workshop CNN and the test network
    # cover that optimizer).
    suite "pytorch reference, airbench94, airbench94 recipe" torch_recipe airbench94 3 1 2
    suite "airbench94 in pytorch (scripts/airbench_torch.py)" env PY="$PY" tests/test_airbench_torch.sh
  else
    echo "== pytorch reference: skipped: $PY cannot import torch and numpy (scripts/install-deps.sh --test installs python3-torch)"
  fi
}
lane_start "pytorch references" torch_lane
suite rehearse tests/test_rehearse.sh
lane_join
((${#bad_suites[@]} == 0)) || echo "failing suites: ${bad_suites[*]}"
echo "tests: $passed passed, $failed failed"
((failed == 0 && ${#bad_suites[@]} == 0))
