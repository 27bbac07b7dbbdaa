#!/usr/bin/env python3
"""Checks cifar10-test's --json file against its text output.

    check_test_json.py JSON LOG [MODEL_FILE]

The JSON must say what the text says: overall correct/total and accuracy, the TTA level, the
model line's run, epochs and kernels, each class's accuracy (the text's one-decimal figure) with
its correct and total counts matching the confusion matrix's diagonal and row sums, and the
confusion matrix itself, cell for cell.
"""
import json
import re
import sys

CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
SHORT = ["plane", "car", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def main():
    j = json.load(open(sys.argv[1]))
    log = open(sys.argv[2]).read().splitlines()
    m = next(re.match(r"Overall accuracy: ([0-9.]+)% \(([0-9]+) of ([0-9]+); test-time augmentation level ([0-9])\)$", l)
             for l in log if l.startswith("Overall accuracy:"))
    assert (j["correct"], j["total"], j["tta"]) == (int(m[2]), int(m[3]), int(m[4])), (j["correct"], j["total"], m.groups())
    assert f"{j['accuracy']:.2f}" == m[1], (j["accuracy"], m[1])
    assert abs(j["accuracy"] - 100 * j["correct"] / j["total"]) < 1e-4
    if len(sys.argv) > 3:
        assert j["model_file"] == sys.argv[3], j["model_file"]
    model = next(l for l in log if l.startswith("model: "))
    on = f" on {j['kernels']}" if j["kernels"] is not None else ""
    assert f"of run {j['run']} after {j['epochs_completed']} epochs{on}, trained with" in model, (model, j["run"])
    at = log.index("Confusion matrix (rows: true class, columns: predicted class):")
    assert log[at + 1].split() == SHORT, log[at + 1]
    matrix = []
    for t, row in enumerate(log[at + 2 : at + 12]):
        cells = row.split()
        assert cells[0] == SHORT[t], row
        matrix.append([int(c) for c in cells[1:]])
    assert j["confusion"] == matrix, "confusion matrix differs from the text"
    assert [c["name"] for c in j["classes"]] == CLASSES
    for t, c in enumerate(j["classes"]):
        assert c["total"] == sum(matrix[t]) and c["correct"] == matrix[t][t], (c, matrix[t])
        line = next(l for l in log if l.startswith(f"Accuracy for class: {SHORT[t]:<5s} is "))
        text = line.split(" is ")[1]
        if c["total"]:
            assert f"{c['accuracy']:.1f} %" == text, (c, line)
        else:
            assert c["accuracy"] is None and text.startswith("n/a"), (c, line)
    assert sum(map(sum, matrix)) == j["total"]
    print(f"test json: {j['total']} images, {j['accuracy']:.2f} %, 10 classes and the confusion matrix equal the text")


if __name__ == "__main__":
    try:
        main()
    except (AssertionError, StopIteration, KeyError, ValueError) as exc:
        print(f"check_test_json.py: {sys.argv[1]} disagrees with {sys.argv[2]}: {exc!r}")
        sys.exit(1)
