#!/usr/bin/env python3
"""Checks a cifar10-train metrics file (JSON Lines, io/metrics.h).

  check_metrics.py FILE LOG STEPS_PER_EPOCH
      every line is a JSON object of a known kind with its fields; one run id; global steps and
      elapsed times never go back; each step record is a "[E, S] loss: x" line of the log and
      each epoch record an "epoch E/N: ..." line (same values at the log's precision), the final
      record the "final test accuracy" line; global_step = (E - 1) x STEPS_PER_EPOCH + S.
  check_metrics.py --same A B
      the two files hold the same records (kinds, epochs, steps, losses, lrs, accuracies) in the
      same order: a resumed run's file against the uninterrupted run's, which train bit-identically.

Prints "metrics: N passed, M failed"; exit status 1 when anything failed.
"""
import json
import re
import os
import sys

FIELDS = {
    "step": ["run", "epoch", "step", "global_step", "loss", "lr", "images_per_s", "elapsed_s"],
    "epoch": ["run", "epoch", "global_step", "train_loss", "train_accuracy", "test_accuracy", "images_per_s",
              "elapsed_s", "eta_s"],
    "final": ["run", "global_step", "test_accuracy", "tta", "elapsed_s"],
}
# what must agree between an uninterrupted and a resumed run (timings may not)
SAME = ["kind", "epoch", "step", "global_step", "loss", "lr", "train_loss", "train_accuracy", "test_accuracy",
        "tta"]

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import Tally  # noqa: E402

tally = Tally("metrics")
check = tally.check


def load(path):
    with open(path) as f:
        text = f.read()
    check(path + " ends with a newline", text.endswith("\n"))
    records = []
    for n, line in enumerate(text.splitlines(), 1):
        try:
            r = json.loads(line)
        except ValueError as e:
            check("%s line %d is JSON" % (path, n), False, str(e))
            continue
        kind = r.get("kind") if isinstance(r, dict) else None
        check("%s line %d: known kind" % (path, n), kind in FIELDS, line)
        if kind in FIELDS:
            missing = [k for k in FIELDS[kind] if k not in r]
            check("%s line %d: fields" % (path, n), not missing and len(r) == len(FIELDS[kind]) + 1, line)
            records.append(r)
    return records


def log_lines(path):
    with open(path) as f:
        log = f.read()
    steps = [(int(e), int(s), float(l)) for e, s, l in re.findall(r"^\[(\d+), +(\d+)\] loss: ([0-9.]+)$", log, re.M)]
    epochs = re.findall(r"^epoch (\d+)/\d+: loss ([0-9.]+), train accuracy ([0-9.]+)%(?:, test accuracy ([0-9.]+)%)?",
                        log, re.M)
    final = re.findall(r"^final test accuracy ([0-9.]+)% \(test-time augmentation level (\d)\)$", log, re.M)
    return steps, [(int(e), float(l), float(a), float(t) if t else None) for e, l, a, t in epochs], final


def against_log(path, log, steps_per_epoch):
    records = load(path)
    check("one run id", len({r["run"] for r in records}) == 1, str({r["run"] for r in records}))
    g = [r["global_step"] for r in records]
    check("global steps never go back", g == sorted(g), str(g))
    t = [r["elapsed_s"] for r in records]
    check("elapsed time never goes back", t == sorted(t), str(t))
    steps, epochs, final = log_lines(log)
    srec = [r for r in records if r["kind"] == "step"]
    check("a step record per printed loss (%d)" % len(steps), len(srec) == len(steps), "%d records" % len(srec))
    for r, (e, s, loss) in zip(srec, steps):
        check("step record [%d, %d]" % (e, s),
              (r["epoch"], r["step"]) == (e, s) and abs(r["loss"] - loss) <= 5e-4 and r["lr"] > 0 and
              r["global_step"] == (e - 1) * steps_per_epoch + s and r["images_per_s"] > 0, json.dumps(r))
    erec = [r for r in records if r["kind"] == "epoch"]
    check("an epoch record per epoch line (%d)" % len(epochs), len(erec) == len(epochs), "%d records" % len(erec))
    for r, (e, loss, acc, test) in zip(erec, epochs):
        test_ok = r["test_accuracy"] is None if test is None else abs(r["test_accuracy"] - test) <= 5e-3
        check("epoch record %d" % e,
              r["epoch"] == e and abs(r["train_loss"] - loss) <= 5e-5 and abs(r["train_accuracy"] - acc) <= 5e-3 and
              test_ok and r["global_step"] <= e * steps_per_epoch and r["eta_s"] >= 0, json.dumps(r))
    frec = [r for r in records if r["kind"] == "final"]
    check("a final record per final line", len(frec) == len(final))
    for r, (acc, tta) in zip(frec, final):
        check("final record", abs(r["test_accuracy"] - float(acc)) <= 5e-3 and r["tta"] == int(tta) and
              r is records[-1], json.dumps(r))


def same(a, b):
    ra, rb = load(a), load(b)
    check("same number of records (%d, %d)" % (len(ra), len(rb)), len(ra) == len(rb))
    for n, (x, y) in enumerate(zip(ra, rb), 1):
        fx = {k: x.get(k) for k in SAME}
        fy = {k: y.get(k) for k in SAME}
        check("record %d agrees" % n, fx == fy, "%s vs %s" % (fx, fy))
    check("one run id in " + b, len({r["run"] for r in rb}) == 1, str({r["run"] for r in rb}))
    tb = [r["elapsed_s"] for r in rb]
    check("elapsed time continues across the resume", tb == sorted(tb), str(tb))


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--same":
        same(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 4:
        against_log(sys.argv[1], sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit(__doc__)
    sys.exit(tally.report())


if __name__ == "__main__":
    main()
