#!/usr/bin/env python3
"""Draws training curves from cifar10-train metrics files, and confusion matrices from
cifar10-test --json files, as PNG (or SVG, by the output's extension).

    plot-run.py [--out curves.png] [--label NAME]... METRICS.jsonl...
    plot-run.py --confusion TEST.json [--out confusion.png]

Curves: two rows of three panels, the first against epochs, the second against wall time
(minutes; the run's elapsed time, continued across resumes): the training loss of the logged
steps, the learning rate after the schedule, and accuracy (train accuracy per epoch dashed, test
accuracy per epoch solid where measured, the final test-time-augmented score as a star). One
colour per metrics file, named by --label (in order) or the file's name, so several runs (two
networks, several seeds) overlay. Uses matplotlib (Debian's python3-matplotlib), no display.
"""
import argparse
import json
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 (after choosing the backend)


class MetricsError(Exception):
    pass


def load_metrics(path):
    """{'steps': [...], 'epochs': [...], 'final': record or None} of one metrics file; each step
    and epoch record gets its place in epochs as 'x_epoch'."""
    steps, epochs, final = [], [], None
    try:
        lines = open(path).read().splitlines()
    except OSError as exc:
        raise MetricsError(f"{path}: {exc.strerror}")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            kind = r["kind"]
        except (ValueError, KeyError, TypeError):
            if n == len(lines):  # a torn last line of a run being written
                continue
            raise MetricsError(f"{path}:{n}: not a metrics record")
        if kind == "step":
            steps.append(r)
        elif kind == "epoch":
            epochs.append(r)
        elif kind == "final":
            final = r
    if not steps and not epochs:
        raise MetricsError(f"{path}: no step or epoch records")
    # steps per epoch: the first epoch record's global step, else the largest step seen so far
    per_epoch = epochs[0]["global_step"] / epochs[0]["epoch"] if epochs else max(s["step"] for s in steps)
    for r in steps + epochs:  # a cut last epoch (fractional --epochs) ends where its steps end
        r["x_epoch"] = r["global_step"] / per_epoch
    return {"steps": steps, "epochs": epochs, "final": final}


def plot_runs(runs, labels):
    """The curves figure of several runs (dicts from load_metrics) with their labels."""
    fig, axes = plt.subplots(2, 3, figsize=(15, 8), constrained_layout=True)
    for row, (xkey, xlabel) in enumerate((("epoch", "epoch"), ("time", "wall time (min)"))):
        loss_ax, lr_ax, acc_ax = axes[row]
        for i, (run, label) in enumerate(zip(runs, labels)):
            color = f"C{i % 10}"
            sx = [s["x_epoch"] if xkey == "epoch" else s["elapsed_s"] / 60 for s in run["steps"]]
            ex = [e["x_epoch"] if xkey == "epoch" else e["elapsed_s"] / 60 for e in run["epochs"]]
            loss_ax.plot(sx, [s["loss"] for s in run["steps"]], color=color, label=label)
            lr_ax.plot(sx, [s["lr"] for s in run["steps"]], color=color, label=label)
            acc_ax.plot(ex, [e["train_accuracy"] for e in run["epochs"]], color=color, linestyle="--",
                        marker=".", label=f"{label}: train")
            tested = [(x, e["test_accuracy"]) for x, e in zip(ex, run["epochs"]) if e["test_accuracy"] is not None]
            if tested:
                acc_ax.plot(*zip(*tested), color=color, marker="o", label=f"{label}: test")
            if run["final"] and run["epochs"]:
                fx = ex[-1] if xkey == "epoch" else run["final"]["elapsed_s"] / 60
                acc_ax.plot([fx], [run["final"]["test_accuracy"]], color=color, marker="*", markersize=12,
                            linestyle="none", label=f"{label}: final, TTA {run['final']['tta']}")
        for ax, title, ylabel in ((loss_ax, "training loss", "loss per image"),
                                  (lr_ax, "learning rate", "lr (after the schedule)"),
                                  (acc_ax, "accuracy", "accuracy (%)")):
            ax.set_title(f"{title} against {xlabel.split(' (')[0]}")
            ax.set_xlabel(xlabel)
            ax.set_ylabel(ylabel)
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
    return fig


def plot_confusion(scores):
    """The confusion matrix of a cifar10-test --json file, counts in the cells."""
    names = [c["name"] for c in scores["classes"]]
    m = scores["confusion"]
    fig, ax = plt.subplots(figsize=(8, 7), constrained_layout=True)
    im = ax.imshow(m, cmap="Blues")
    fig.colorbar(im, ax=ax, label="images")
    ax.set_xticks(range(len(names)), names, rotation=45, ha="right")
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("predicted class")
    ax.set_ylabel("true class")
    ax.set_title(f"{scores['model']}: {scores['accuracy']:.2f} % of {scores['total']} "
                 f"(test-time augmentation level {scores['tta']})")
    top = max(max(row) for row in m) or 1
    for t, row in enumerate(m):
        for p, v in enumerate(row):
            ax.text(p, t, str(v), ha="center", va="center", fontsize=8, color="white" if v > top / 2 else "black")
    return fig


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="*", metavar="METRICS.jsonl")
    ap.add_argument("--confusion", metavar="TEST.json", help="draw the confusion matrix of a cifar10-test --json file")
    ap.add_argument("--label", action="append", default=[], help="legend name of the next metrics file")
    ap.add_argument("--out", help="output file, .png or .svg (default curves.png or confusion.png)")
    a = ap.parse_intermixed_args(argv)  # --label A a.jsonl --label B b.jsonl
    if bool(a.confusion) == bool(a.files):
        ap.error("give metrics files, or --confusion TEST.json")
    if len(a.label) > len(a.files):
        ap.error(f"{len(a.label)} labels for {len(a.files)} metrics files")
    try:
        if a.confusion:
            try:
                scores = json.load(open(a.confusion))
                fig = plot_confusion(scores)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise MetricsError(f"{a.confusion}: not a cifar10-test --json file ({exc})")
            out = a.out or "confusion.png"
        else:
            runs = [load_metrics(f) for f in a.files]
            labels = a.label + [os.path.basename(f).replace(".metrics.jsonl", "") for f in a.files[len(a.label):]]
            fig = plot_runs(runs, labels)
            out = a.out or "curves.png"
        fig.savefig(out, dpi=80)
    except MetricsError as exc:
        print(f"plot-run.py: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"plot-run.py: {out}: {exc.strerror}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
