#!/usr/bin/env bash
# scripts/coverage-summary.py (the table scripts/coverage.sh prints) on a small program built
# with --coverage: counts before and after a run, the lines no run reached, one source built
# into two objects (as the per-ISA files are) counted as run where either ran it, --exclude,
# and bad usage of both scripts.
# shellcheck source=lib.sh
. "$(dirname "$0")/lib.sh"
SRC=$(cd "$(dirname "$0")/.." && pwd)
summary_py=$SRC/scripts/coverage-summary.py
mkdir -p "$T/src" "$T/b/one/src" "$T/b/two/src"
cat >"$T/src/toy.c" <<'C'
#include <stdio.h>
static int twice(int x) {
    return 2 * x;
}
static int thrice(int x) {
    int y = x * 3;
    return y + 1;
}
int main(int argc, char **argv) {
    (void)argv;
    if (argc > 2) return thrice(argc);
    printf("%d\n", twice(argc));
    return 0;
}
C
cd "$T" || exit 1
for v in one two; do
  gcc -O0 --coverage -c src/toy.c -o "b/$v/src/toy.o" && gcc --coverage "b/$v/src/toy.o" -o "b/$v/toy"
done
table() { run "$summary_py" "$@"; }

table b/one --lines
expect_rc 0 "before any run: exit 0"
expect_out "before any run: no line run" "^src/toy\.c 0/9 0\.0%$"
expect_out "before any run: every line listed" "^  not run: 2-3, 5-7, 9, 11-13$"
b/one/toy >/dev/null
table b/one --lines
expect_out "after a run: the lines it ran" "^src/toy\.c 6/9 66\.7%$"
expect_out "after a run: the function it never called" "^  not run: 5-7$"
expect_out "after a run: the total" "^total: 6/9 66\.7% of 1 files$"
b/two/toy x y >/dev/null
table b --lines
expect_out "two objects of one source: run where either ran it" "^src/toy\.c 9/9 100\.0%$"
check "two objects of one source: no line left" bash -c "! grep -q 'not run' '$T/out'"
table b --exclude two
expect_out "--exclude: the other object only" "^src/toy\.c 6/9 66\.7%$"
table b --exclude one --exclude two
expect_rc 1 "--exclude of everything: exit 1"
expect_err "--exclude of everything: says why" "no gcov notes (.gcno): build with --coverage"
table "$T/none"
expect_rc 1 "a missing directory: exit 1"
expect_err "a missing directory: says so" "$T/none: not a directory"
table
expect_rc 1 "no BUILD: exit 1"
expect_err "no BUILD: the usage line" "usage: scripts/coverage-summary.py BUILD [--lines] [--exclude DIR]..."
run "$SRC/scripts/coverage.sh" --bogus
expect_rc 2 "coverage.sh --bogus: usage error"
expect_err "coverage.sh --bogus: one line" "usage: scripts/coverage.sh [--build DIR] [--lines]"
summary coverage
