"""The documentation against the tree and the programs it describes.

    python3 tests/test_docs.py BUILD_DIR

- Links: every relative link of README.md and docs/*.md names a file that exists, and its
  #anchor a heading of that file (GitHub's anchors: lower case, punctuation but - and _
  dropped, spaces as -, a repeated heading's -1, -2, ...).
- Paths: every path of the tree the pages name in code spans exists (or is a built program's
  source).
- Flags: for each program, the flags docs/programs.md documents (its table's first column, or
  the usage lines of a section without a table) are the flags the program's --help lists; for
  get-data.sh, run-example.sh and bench.sh, the options their case statements take are the ones
  their documentation's synopsis and table give.
- Environment: the CIFAR10_* variables the programs' sources read are the ones the pages name.
- Make: every `make TARGET` the pages name is a target of the Makefile.
- Layout: every file name README.md's Layout block gives under a folder exists in that folder.

Each check can fail: a renamed heading, a flag added to one side only, a file moved.
"""

import os
import re
import subprocess
import sys

from tally import Tally

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T = Tally("docs")


def read(path):
    with open(os.path.join(ROOT, path), encoding="utf-8") as f:
        return f.read()


def without_code_blocks(text):
    """text with its fenced and indented code blocks blanked (links there are not links)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if line.startswith("```"):
            fenced = not fenced
            out.append("")
        elif fenced or line.startswith("    "):
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # \w keeps letters, digits and _
    return s.replace(" ", "-")


def anchors(text):
    seen, out = {}, set()
    for line in without_code_blocks(text).split("\n"):
        m = re.match(r"#{1,6} (.*)", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


TREE = ("scripts", "tests", "kernels", "app", "docs", "k8s", "model", "io", "dist", "data", "common", ".ci")


def check_paths(pages):
    """Every path of the tree the pages name in code spans (`scripts/bench.sh`, `tests/test_ops`)
    exists: as it is, or as the source of a program the build makes (+ .c or .cc). Placeholders
    (a capitalised part such as DATE-COMMIT) and name prefixes (`scripts/eks-`) are left out."""
    for page in pages:
        for path in sorted(set(re.findall(rf"`((?:{'|'.join(re.escape(t) for t in TREE)})/[\w./-]*)", read(page)))):
            if re.search(r"[A-Z]{2,}", path) or path.endswith("-"):
                continue
            bare = path.rstrip("/")
            found = any(os.path.exists(os.path.join(ROOT, bare + end)) for end in ("", ".c", ".cc"))
            T.check(f"{page}: path {path}", found, "no such file or folder")


def check_links(pages):
    for page in pages:
        text = without_code_blocks(read(page))
        here = os.path.dirname(page)
        links = re.findall(r"\]\(([^)\s]+)\)", text)
        for link in links:
            if re.match(r"[a-z]+://|mailto:", link):
                continue
            path, _, anchor = link.partition("#")
            target = os.path.normpath(os.path.join(here, path)) if path else page
            exists = os.path.exists(os.path.join(ROOT, target))
            T.check(f"{page}: link {link}", exists, f"{target} does not exist")
            if exists and anchor and target.endswith(".md"):
                T.check(f"{page}: link {link}", anchor in anchors(read(target)), f"no heading of {target} has #{anchor}")


def section(text, title):
    """The lines of the section whose heading is exactly title, up to the next heading."""
    m = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## )", text, re.S | re.M)
    return m.group(1) if m else ""


def documented_flags(body):
    """The flags of a section's table (first column), else of its usage line."""
    table = re.findall(r"^\| `(--[a-z0-9-]+)[^|]*\|", body, re.M)
    if table:
        flags = set(table)
        for row in re.findall(r"^\| (`--[^|]*)\|", body, re.M):  # "`--help`, `--version`"
            flags |= set(re.findall(r"`(--[a-z0-9-]+)", row))
        return flags
    usage = re.findall(r"^    (?:\[mpirun[^]]*\] )?(?:cifar10-|scripts/)\S+ +(\[.*|--.*)$", body, re.M)
    usage += re.findall(r"^ {10,}(\[--.*)$", body, re.M)  # a usage line's continuation
    return set(re.findall(r"(--[a-z0-9-]+)", " ".join(usage)))


def help_flags(build, program):
    r = subprocess.run([os.path.join(build, program), "--help"], capture_output=True, text=True, timeout=60)
    T.check(f"{program} --help exits 0", r.returncode == 0, r.stderr.strip())
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", r.stdout + r.stderr))


def check_flags(build):
    text = read("docs/programs.md")
    for program in ["cifar10-train", "cifar10-test", "cifar10-predict", "cifar10-bench"]:
        docs = documented_flags(section(text, program))
        T.check(f"docs/programs.md documents {program}'s flags", len(docs) > 3, f"found {sorted(docs)}")
        helped = help_flags(build, program) | {"--help"}
        if program != "cifar10-bench":
            helped.add("--version")
        T.check(f"{program}: every flag of --help in docs/programs.md", helped <= docs, f"missing {sorted(helped - docs)}")
        T.check(f"{program}: every flag of docs/programs.md in --help", docs <= helped, f"not in --help: {sorted(docs - helped)}")


def script_flags(script):
    """The long options a script's case statement takes (--help aside)."""
    labels = re.findall(r"^\s+((?:-[a-z]\|)?--[a-z0-9-]+(?:\|--[a-z0-9-]+)*)\)", read(script), re.M)
    return {f for label in labels for f in label.split("|") if f.startswith("--")} - {"--help"}


def check_script_flags():
    programs = read("docs/programs.md")
    docs = {
        "scripts/get-data.sh": section(programs, "scripts/get-data.sh"),
        "scripts/run-example.sh": section(programs, "scripts/run-example.sh"),
        "scripts/bench.sh": section(read("docs/benchmark.md"), "Running it"),
    }
    for script, body in docs.items():
        synopsis = re.findall(rf"`{re.escape(script)} (\[[^`]*)`", body)
        documented = documented_flags(body) | set(re.findall(r"(--[a-z0-9-]+)", " ".join(synopsis)))
        documented -= {"--help"}
        taken = script_flags(script)
        T.check(f"{script}: its options found", len(taken) >= 3, f"{sorted(taken)}")
        T.check(f"{script}: every option documented", taken <= documented, f"missing {sorted(taken - documented)}")
        T.check(f"{script}: every documented option taken", documented <= taken, f"not taken: {sorted(documented - taken)}")


def check_environment():
    """The CIFAR10_* variables the programs read are the ones the documentation names."""
    read_by_code = set()
    for top in ("app", "common", "data", "dist", "io", "kernels", "model"):
        for folder, _, files in os.walk(os.path.join(ROOT, top)):
            for f in files:
                if f.endswith((".c", ".h", ".cu")):
                    read_by_code |= set(re.findall(r'"(CIFAR10_[A-Z0-9_]+)"', read(os.path.join(folder, f))))
    pages = ["README.md"] + ["docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md")]
    documented = set()
    for page in pages:
        documented |= set(re.findall(r"\b(CIFAR10_[A-Z0-9_]+)", read(page)))
    T.check("the programs read CIFAR10_* variables", len(read_by_code) >= 5, f"{sorted(read_by_code)}")
    T.check("every CIFAR10_* variable read is documented", read_by_code <= documented,
            f"undocumented: {sorted(read_by_code - documented)}")
    T.check("every CIFAR10_* variable documented is read", documented <= read_by_code,
            f"read nowhere: {sorted(documented - read_by_code)}")


def check_make_targets(pages):
    """Every make target the pages name (`make X` in code spans and code blocks; not VAR=value
    settings or file paths) is a target of the Makefile."""
    makefile = read("Makefile")
    targets = set(re.findall(r"^([a-z][\w-]*):", makefile, re.M))
    for line in re.findall(r"^\.PHONY:(.*)$", makefile, re.M):
        targets |= set(line.split())
    named = set()
    for page in pages:
        text = read(page)
        spans = re.findall(r"`make ([^`]*)`", text) + re.findall(r"^ {4}make ([^#\n]*)", text, re.M)
        for span in spans:
            named |= {w for w in span.split() if re.fullmatch(r"[a-z][\w-]*", w)}
    T.check("the pages name make targets", len(named) >= 8, f"{sorted(named)}")
    for name in sorted(named):
        T.check(f"make {name} (named in the docs) is a Makefile target", name in targets)


def check_layout():
    text = read("README.md")
    m = re.search(r"^## Layout\n\n(.*?)^## ", text, re.S | re.M)
    T.check("README.md has a Layout block", m is not None)
    if not m:
        return
    folder, names = None, 0
    for line in m.group(1).split("\n"):
        head = re.match(r"    (\S+/)\s+|    (\S+)\s{2,}", line)
        if head and head.group(1):
            folder = head.group(1)
            T.check(f"README.md Layout: {folder}", os.path.isdir(os.path.join(ROOT, folder)))
        elif head:
            folder = None  # a file of the root (Dockerfile, Makefile, .ci/run)
            T.check(f"README.md Layout: {head.group(2)}", os.path.exists(os.path.join(ROOT, head.group(2))))
        if folder is None:
            continue
        for name in re.findall(r"(?<![\w./-])([\w-]+\.(?:c|h|cu|cc|sh|py|yaml|env))\b", line[len("    ") :]):
            candidates = [os.path.join(ROOT, folder, name)]
            if folder == "kernels/cpu/" or folder == "kernels/cuda/":
                candidates.append(os.path.join(ROOT, "kernels", name))
            if folder == "tests/":
                candidates += [os.path.join(ROOT, "tests", d, name) for d in ("fuzz", "cudaemu")]
            if folder == "k8s/":
                candidates += [os.path.join(ROOT, "k8s", d, name) for d in os.listdir(os.path.join(ROOT, "k8s"))]
                candidates += [os.path.join(ROOT, "k8s", "settings", name)]
            names += 1
            T.check(f"README.md Layout: {folder}{name}", any(os.path.exists(c) for c in candidates))
    T.check("README.md Layout names files", names > 40, f"{names} names")


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: test_docs.py BUILD_DIR")
    pages = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(ROOT, "docs")) if f.endswith(".md"))
    check_links(pages)
    check_paths(pages)
    check_flags(sys.argv[1])
    check_script_flags()
    check_environment()
    check_make_targets(pages)
    check_layout()
    return T.report()


if __name__ == "__main__":
    sys.exit(main())
