#!/usr/bin/env bash
# Static checks of everything that is not C: yamllint on k8s/ (settings in .yamllint), and
# ShellCheck on every shell script (settings in .shellcheckrc). One check per file.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
cd "$SRC" || exit 1
if command -v yamllint >/dev/null; then
  while IFS= read -r -d '' f; do
    check "yamllint $f: $(yamllint -c .yamllint -f parsable "$f" | head -n 3)" yamllint -c .yamllint -s "$f"
  done < <(find k8s .yamllint -name '*.yaml' -print0 -o -name .yamllint -print0)
else
  fail "yamllint is not installed (scripts/install-deps.sh --test installs it)"
fi
if command -v shellcheck >/dev/null; then
  while IFS= read -r -d '' f; do
    check "shellcheck $f: $(shellcheck "$f" 2>&1 | head -n 5)" shellcheck "$f"
  done < <(find scripts tests .ci -type f \( -name '*.sh' -o -name run -o -name fake-cli \) -print0)
else
  fail "shellcheck is not installed (scripts/install-deps.sh --test installs it)"
fi
summary lint
