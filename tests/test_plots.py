#!/usr/bin/env python3
"""scripts/plot-run.py on fixed metrics and test-score files: what the figures hold (panels,
titles, axis labels, one line per run and series with the files' values, legends), the PNG and
SVG files written (SVG with its text kept, so the titles can be read back), the confusion
matrix's cells, and the errors (missing file, a bad record, wrong arguments: one line, exit 1 or
2). Ends with "plots: N passed, N failed"."""
import contextlib
import importlib.util
import io
import json
import os
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
matplotlib.rcParams["svg.fonttype"] = "none"  # text stays text in the SVG

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("plot_run", os.path.join(HERE, "..", "scripts", "plot-run.py"))
plot_run = importlib.util.module_from_spec(spec)
spec.loader.exec_module(plot_run)
sys.path.insert(0, HERE)
from tally import Tally  # noqa: E402

tally = Tally("plots")
check = tally.check


def write_run(path, run, steps_per_epoch, epochs, print_freq, test, final):
    """A metrics file as cifar10-train writes it: loss 2.3 - 0.01 g, lr 0.1 g / total, ..."""
    total = steps_per_epoch * epochs
    with open(path, "w") as f:
        for e in range(1, epochs + 1):
            for s in range(print_freq, steps_per_epoch + 1, print_freq):
                g = (e - 1) * steps_per_epoch + s
                f.write(json.dumps({"kind": "step", "run": run, "epoch": e, "step": s, "global_step": g,
                                    "loss": 2.3 - 0.01 * g, "lr": 0.1 * g / total, "images_per_s": 100.0,
                                    "elapsed_s": 6.0 * g}) + "\n")
            g = e * steps_per_epoch
            f.write(json.dumps({"kind": "epoch", "run": run, "epoch": e, "global_step": g, "train_loss": 2 - 0.1 * e,
                                "train_accuracy": 40.0 + e, "test_accuracy": 50.0 + e if test else None,
                                "images_per_s": 100.0, "elapsed_s": 6.0 * g, "eta_s": 1.0}) + "\n")
        if final:
            f.write(json.dumps({"kind": "final", "run": run, "global_step": total, "test_accuracy": 90.5, "tta": 2,
                                "elapsed_s": 6.0 * total + 30}) + "\n")


def run_main(args):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = plot_run.main(args)
        except SystemExit as exc:  # argparse errors
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


def curves(d):
    a, b = os.path.join(d, "a.metrics.jsonl"), os.path.join(d, "b.metrics.jsonl")
    write_run(a, "A", 10, 3, 5, test=True, final=True)   # steps at g = 5, 10, ..., 30
    write_run(b, "B", 20, 2, 4, test=False, final=False)  # --no-eval, still running
    runs = [plot_run.load_metrics(a), plot_run.load_metrics(b)]
    fig = plot_run.plot_runs(runs, ["workshop", "airbench"])
    axes = fig.axes
    check("six panels", len(axes) == 6)
    titles = [ax.get_title() for ax in axes]
    check(f"titles {titles}", titles == [f"{t} against {x}" for x in ("epoch", "wall time")
                                         for t in ("training loss", "learning rate", "accuracy")])
    check("x labels", [ax.get_xlabel() for ax in axes] == ["epoch"] * 3 + ["wall time (min)"] * 3)
    check("y labels", [ax.get_ylabel() for ax in axes[:3]] == ["loss per image", "lr (after the schedule)", "accuracy (%)"])
    for row in (0, 1):
        loss_ax, lr_ax, acc_ax = axes[3 * row: 3 * row + 3]
        check(f"row {row}: one loss line per run", [ln.get_label() for ln in loss_ax.lines] == ["workshop", "airbench"])
        check(f"row {row}: one lr line per run", len(lr_ax.lines) == 2)
        check(f"row {row}: accuracy lines (A: train, test, final; B: train)",
              [ln.get_label() for ln in acc_ax.lines] ==
              ["workshop: train", "workshop: test", "workshop: final, TTA 2", "airbench: train"])
        legend = [t.get_text() for t in loss_ax.get_legend().get_texts()]
        check(f"row {row}: legend {legend}", legend == ["workshop", "airbench"])
    la = axes[0].lines[0]
    check("run A's losses", list(la.get_ydata()) == [2.3 - 0.01 * g for g in range(5, 31, 5)])
    check("run A's fractional epochs", list(la.get_xdata()) == [g / 10 for g in range(5, 31, 5)])
    lb = axes[1].lines[1]
    check("run B's learning rates", list(lb.get_ydata()) == [0.1 * g / 40 for g in range(4, 41, 4)])
    check("run B's fractional epochs", list(lb.get_xdata()) == [g / 20 for g in range(4, 41, 4)])
    check("run A's wall time in minutes", list(axes[3].lines[0].get_xdata()) == [6.0 * g / 60 for g in range(5, 31, 5)])
    test_line = axes[2].lines[1]
    check("run A's test accuracy per epoch", list(test_line.get_xdata()) == [1, 2, 3] and
          list(test_line.get_ydata()) == [51.0, 52.0, 53.0])
    check("final star at the last epoch", list(axes[2].lines[2].get_xdata()) == [3] and
          list(axes[2].lines[2].get_ydata()) == [90.5])
    check("final star at its wall time", list(axes[5].lines[2].get_xdata()) == [(6.0 * 30 + 30) / 60])

    cut = os.path.join(d, "cut.metrics.jsonl")  # --epochs 1.5: the second epoch ends at step 15
    with open(cut, "w") as f:
        for e, g in ((1, 10), (2, 15)):
            f.write(json.dumps({"kind": "epoch", "run": "C", "epoch": e, "global_step": g, "train_loss": 1.0,
                                "train_accuracy": 50.0, "test_accuracy": None, "images_per_s": 1.0,
                                "elapsed_s": 1.0 * g, "eta_s": 0.0}) + "\n")
    check("a cut last epoch ends at 1.5", [r["x_epoch"] for r in plot_run.load_metrics(cut)["epochs"]] == [1.0, 1.5])
    png, svg = os.path.join(d, "c.png"), os.path.join(d, "c.svg")
    rc, out, _ = run_main(["--out", png, "--label", "workshop", a, b])
    check(f"PNG written ({rc}, {out!r})", rc == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
          and os.path.getsize(png) > 10000)
    rc, _, _ = run_main(["--out", png, "--label", "A", a, "--label", "B", b])
    check(f"labels between the files, as the README shows ({rc})", rc == 0)
    rc, _, _ = run_main(["--out", svg, a, b])
    text = open(svg).read() if rc == 0 else ""
    check("SVG keeps the titles and the default labels (file names)",
          "training loss against wall time" in text and ">a<" in text and ">b<" in text)
    # a torn last line (a run being written) is skipped; a bad line before it is an error
    with open(a, "a") as f:
        f.write('{"kind":"step","ru')
    check("torn last line skipped", len(plot_run.load_metrics(a)["steps"]) == 6)
    bad = os.path.join(d, "bad.metrics.jsonl")
    with open(bad, "w") as f:
        f.write("not json\n" + open(b).read())
    rc, _, err = run_main([bad])
    check(f"bad record: exit 1, one line naming file:line ({err!r})", rc == 1 and err == f"plot-run.py: {bad}:1: not a metrics record\n")
    rc, _, err = run_main([os.path.join(d, "none.jsonl")])
    check(f"missing file: exit 1, one line ({err!r})", rc == 1 and err.count("\n") == 1 and "No such file" in err)
    rc, _, _ = run_main([])
    check("no files: usage error, exit 2", rc == 2)
    rc, _, _ = run_main(["--label", "x", "--label", "y", a])
    check("more labels than files: exit 2", rc == 2)


def confusion(d):
    names = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
    m = [[90 if t == p else (t + p) % 3 for p in range(10)] for t in range(10)]
    scores = {"model": "airbench94", "accuracy": 90.0, "total": sum(map(sum, m)), "tta": 2,
              "classes": [{"name": n} for n in names], "confusion": m}
    path = os.path.join(d, "test.json")
    json.dump(scores, open(path, "w"))
    fig = plot_run.plot_confusion(scores)
    ax = fig.axes[0]
    check("confusion image holds the matrix", ax.images[0].get_array().tolist() == m)
    check("one text per cell, the counts", [t.get_text() for t in ax.texts] == [str(v) for row in m for v in row])
    check("tick labels are the class names", [t.get_text() for t in ax.get_xticklabels()] == names and
          [t.get_text() for t in ax.get_yticklabels()] == names)
    check("axis labels", (ax.get_xlabel(), ax.get_ylabel()) == ("predicted class", "true class"))
    check(f"title {ax.get_title()!r}", ax.get_title() == f"airbench94: 90.00 % of {scores['total']} (test-time augmentation level 2)")
    out = os.path.join(d, "conf.png")
    rc, _, _ = run_main(["--confusion", path, "--out", out])
    check("confusion PNG written", rc == 0 and open(out, "rb").read(4) == b"\x89PNG")
    with open(path, "w") as f:
        f.write("{}")
    rc, _, err = run_main(["--confusion", path, "--out", out])
    check(f"not a test file: exit 1, one line ({err!r})", rc == 1 and err.count("\n") == 1 and "not a cifar10-test --json file" in err)


with tempfile.TemporaryDirectory() as d:
    curves(d)
    confusion(d)
sys.exit(tally.report())
