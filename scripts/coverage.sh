#!/usr/bin/env bash
# Line coverage of the C sources by the suites of `make test` (tests/run.sh): builds the
# programs and the test programs with gcc's --coverage at -O1 into their own build directory,
# runs tests/run.sh there (about as long as make test's suites, more for the -O1 code), and
# prints scripts/coverage-summary.py's table (a line per source file, then the total) of the
# programs' and library's sources, the test programs left out. The sanitizer, fuzzing and
# emulation runs of make test are other builds and not counted. Lines built only for hardware
# this machine lacks (AVX-512, AMX, the GPU) show as not run.
#
#   scripts/coverage.sh [--build DIR] [--lines]
#
# --build DIR: the build directory (default build-coverage; its old counts are cleared first);
# --lines: also the line ranges that no suite ran. Exit status: the suites' (the table is
# printed either way), 2 on bad usage.
set -euo pipefail
usage() { echo "coverage.sh: usage: scripts/coverage.sh [--build DIR] [--lines]" >&2; exit 2; }
build=build-coverage lines=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --build) [[ $# -ge 2 ]] || usage; build=$2; shift 2 ;;
    --lines) lines=(--lines); shift ;;
    *) usage ;;
  esac
done
cd "$(dirname "$0")/.."
command -v gcov >/dev/null || { echo "coverage.sh: gcov not found (it comes with gcc)" >&2; exit 1; }
# OPT reaches every compile and link (CFLAGS is built from it), in sub-makes too.
export OPT="-O1 -g --coverage"
# The CUDA plugin (nvcc, not instrumented) for one GPU generation only: it is built to be loaded.
make --no-print-directory BUILD="$build" CUDA_ARCH=90 test-build
find "$build" -name '*.gcda' -delete
status=0
BUILD=$build tests/run.sh || status=$?
echo "== line coverage (tests/run.sh; scripts/coverage-summary.py $build --exclude tests)"
scripts/coverage-summary.py "$build" --exclude tests "${lines[@]}"
exit $status
