#!/usr/bin/env python3
"""Line coverage of this repository's C sources from a --coverage build's gcov data.

    scripts/coverage-summary.py BUILD [--lines] [--exclude DIR]...

Reads every object's notes (.gcno) below BUILD, with its counts (.gcda) where the object ran,
through gcc's gcov (JSON), from the current directory (the repository root, so the paths are
the sources'). One source compiled into several objects (a file built once per ISA) counts a
line as run when any of its objects ran it. Prints a line per source file, "PATH RUN/LINES
PCT%", then "total: RUN/LINES PCT% of N files"; with --lines, after each file the line ranges no
object ran. Sources outside the current directory (system headers) are left out, and so is
every object below BUILD/DIR for each --exclude DIR (tests/: the test programs themselves).
"""
import gzip
import json
import os
import subprocess
import sys

USAGE = "coverage-summary.py: usage: scripts/coverage-summary.py BUILD [--lines] [--exclude DIR]..."


def objects(build, exclude):
    for d, _, files in os.walk(build):
        rel = os.path.relpath(d, build)
        if any(rel == e or rel.startswith(e + os.sep) for e in exclude):
            continue
        for f in sorted(files):
            if f.endswith(".gcno"):
                yield os.path.join(d, f[:-5] + ".o")


def gcov_json(obj):
    """gcov's JSON for one object (its notes, and counts where it ran)."""
    r = subprocess.run(["gcov", "--json-format", "--stdout", "--object-directory", os.path.dirname(obj), obj],
                       capture_output=True, text=True)
    if r.returncode != 0 or not r.stdout.strip():
        sys.exit(f"coverage-summary.py: gcov failed on {obj}: {r.stderr.strip()[:300]}")
    out = r.stdout
    if out[:2] == "\x1f\x8b":  # some gcov versions compress even to stdout
        out = gzip.decompress(out.encode("latin-1")).decode()
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def merge(build, exclude):
    """{source: {line: count}}, the largest count any object gave each line."""
    root = os.getcwd()
    lines = {}
    for obj in objects(build, exclude):
        for doc in gcov_json(obj):
            for f in doc["files"]:
                path = os.path.normpath(os.path.join(root, f["file"]))
                if not path.startswith(root + os.sep):
                    continue
                mine = lines.setdefault(os.path.relpath(path, root), {})
                for ln in f["lines"]:
                    n = ln["line_number"]
                    mine[n] = max(mine.get(n, 0), ln["count"])
    return lines


def ranges(numbers):
    """[3, 4, 5, 9] -> "3-5, 9"."""
    out, start, prev = [], None, None
    for n in sorted(numbers) + [None]:
        if start is not None and (n is None or n != prev + 1):
            out.append(str(start) if start == prev else f"{start}-{prev}")
            start = None
        if start is None:
            start = n
        prev = n
    return ", ".join(out)


def main(argv):
    show_lines, exclude, build = False, [], None
    args = list(argv)
    while args:
        a = args.pop(0)
        if a == "--lines":
            show_lines = True
        elif a == "--exclude" and args:
            exclude.append(os.path.normpath(args.pop(0)))
        elif build is None and not a.startswith("-"):
            build = a
        else:
            sys.exit(USAGE)
    if build is None:
        sys.exit(USAGE)
    if not os.path.isdir(build):
        sys.exit(f"coverage-summary.py: {build}: not a directory")
    lines = merge(build, exclude)
    if not lines:
        sys.exit(f"coverage-summary.py: {build}: no gcov notes (.gcno): build with --coverage")
    run_all = total_all = 0
    for src in sorted(lines):
        counts = lines[src]
        run = sum(1 for c in counts.values() if c > 0)
        run_all, total_all = run_all + run, total_all + len(counts)
        print(f"{src} {run}/{len(counts)} {100.0 * run / max(len(counts), 1):.1f}%")
        missed = [n for n, c in counts.items() if c == 0]
        if show_lines and missed:
            print(f"  not run: {ranges(missed)}")
    print(f"total: {run_all}/{total_all} {100.0 * run_all / max(total_all, 1):.1f}% of {len(lines)} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
