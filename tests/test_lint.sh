#!/usr/bin/env bash
# Static checks: every C, header and CUDA file as .clang-format lays it out (clang-format 14,
# Debian 12's: other versions lay out a few constructs differently; `make format` applies it),
# yamllint on k8s/ (settings in .yamllint), and ShellCheck on every shell script (settings in
# .shellcheckrc). One check per file; each tool runs once per file.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
cd "$SRC" || exit 1
# lint TOOL FILE COMMAND...: one check, passing when COMMAND succeeds; its first lines on failure.
lint() {
  local out status
  out=$("${@:3}" 2>&1)
  status=$?
  if ((status == 0)); then pass; else fail "$1 $2: $(head -n 5 <<<"$out")"; fi
}
CLANG_FORMAT=$(command -v clang-format-14 || command -v clang-format || true)
if [[ -n $CLANG_FORMAT ]] && "$CLANG_FORMAT" --version | grep -q "version 14\."; then
  while IFS= read -r f; do
    lint clang-format "$f" "$CLANG_FORMAT" --dry-run --Werror "$f"
  done < <(git ls-files '*.c' '*.h' '*.cu' '*.cc' 2>/dev/null || find . -name '*.[ch]' -o -name '*.cu' -o -name '*.cc')
else
  fail "clang-format 14 is not installed (scripts/install-deps.sh --test installs it)"
fi
if command -v yamllint >/dev/null; then
  while IFS= read -r -d '' f; do
    lint yamllint "$f" yamllint -c .yamllint -f parsable -s "$f"
  done < <(find k8s .yamllint -name '*.yaml' -print0 -o -name .yamllint -print0)
else
  fail "yamllint is not installed (scripts/install-deps.sh --test installs it)"
fi
if command -v shellcheck >/dev/null; then
  while IFS= read -r -d '' f; do
    lint shellcheck "$f" shellcheck "$f"
  done < <(find scripts tests .ci -type f \( -name '*.sh' -o -name run -o -name fake-cli -o -name fake-gpu \) -print0)
else
  fail "shellcheck is not installed (scripts/install-deps.sh --test installs it)"
fi
# The GPU's element-wise kernels divide without its (software) integer and double divides: at
# most 12 div/rem instructions in the PTX of batchnorm, elementwise, maxpool and reduce (sm_90),
# the GPU issue's bound (there were 48). Needs nvcc, which builds PTX without a GPU.
NVCC=$(command -v nvcc || command -v /usr/local/cuda/bin/nvcc || true)
if [[ -n $NVCC ]]; then
  ptx=$(mktemp -d /tmp/cifar10-ptx.XXXXXX)
  divides=0
  for f in batchnorm elementwise maxpool reduce; do
    "$NVCC" -arch=sm_90 -ptx -O3 "kernels/cuda/$f.cu" -o "$ptx/$f.ptx" || fail "nvcc -ptx kernels/cuda/$f.cu"
    divides=$((divides + $(grep -cE '^[[:space:]]*(div|rem)[.]' "$ptx/$f.ptx")))
  done
  rm -rf "$ptx"
  check "element-wise PTX holds $divides div/rem instructions (at most 12)" test "$divides" -le 12
  echo "lint: element-wise PTX (sm_90): $divides div/rem instructions"
else
  echo "lint: element-wise PTX: skipped (no nvcc)"
fi
summary lint
