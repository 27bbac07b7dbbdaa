#!/usr/bin/env python3
"""The scaling study's cost model (docs/scaling.md): how long a data-parallel step takes on N
nodes, fitted to what scripts/scaling.sh measured between namespace hosts.

  scaling-model.py fit ALLREDUCE [--fit-hosts 2,4] [--fit-rates 200mbit,1gbit] [--tolerance 0.15]
      The ring's terms from scaling.sh's allreduce lines: alpha per host count from the small
      allreduce, eta fitted to the fit set; every other point (other host counts, other rates)
      held out and printed beside the model. Exit 1 when a held-out point is off by more than
      the tolerance.
  scaling-model.py overlap ALLREDUCE BENCH_LOG
      Replays the gradient buckets of each step measured by `scaling.sh --bench` (reports
      separated by '# round' lines, '# bucket-mb' naming the bucket size) from that run's own
      per-layer times, under two progress rules, beside the measured step.
  scaling-model.py predict ALLREDUCE BENCH... [--svg FILE] [--rule calls|overlap]
      Step time, efficiency and time to accuracy against node count for named AWS instance
      sizes, from cifar10-bench reports of each model at several batch sizes (airbench94 at
      global batch 1024: strong scaling; the workshop CNN at 128 per node: weak scaling); the
      scaling issue's goal figures; optionally the efficiency plot.

The allreduce (Open MPI's ring, as training runs it): 2 (N - 1) rounds, each moving 1/N of the
buffer over every link at once, so

    T(N, S) = 2 (N - 1) alpha + 2 (N - 1) / N * 8 S / (eta * B)

with alpha the cost of one round (latency and software), B the link's rate in bits per second
(for TCP on AWS: the smaller of the instance's rate and the per-flow limit) and eta the share of
it TCP turns into payload.

Standard library only, so that it runs wherever the tests run.
"""

import argparse
import math
import re
import sys

RATE_UNITS = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1.0}


def fail(msg):
    print(f"scaling-model.py: {msg}", file=sys.stderr)
    sys.exit(2)


def rate_bits(text):
    """'200mbit' -> 2e8 bits per second; None for 'none' (unshaped)."""
    if text == "none":
        return None
    m = re.fullmatch(r"([0-9.]+)(kbit|mbit|gbit|bit)", text)
    if not m:
        fail(f"'{text}' is not a tc rate such as 200mbit")
    return float(m.group(1)) * RATE_UNITS[m.group(2)]


# ---------------------------------------------------------------------------------------------
# Reading what scaling.sh and cifar10-bench printed.

ALLREDUCE_RE = re.compile(
    r"^scaling: hosts=(\d+) rate=(\S+) allreduce: bytes=(\d+) ranks=\d+ mode=\S+ reps=\d+ median_s=([0-9.e-]+)"
)
BENCH_RE = re.compile(r"^scaling: hosts=(\d+) rate=(\S+) bench: images_per_s=([0-9.]+) ranks=(\d+) threads=\d+ batch=(\d+)")


def read_lines(path):
    try:
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError as e:
        fail(f"{path}: cannot read ({e.strerror})")


def read_allreduce(path):
    """[(hosts, rate_bits or None (unshaped), bytes, seconds)] of the allreduce lines in path."""
    points = []
    for line in read_lines(path):
        m = ALLREDUCE_RE.match(line)
        if m:
            points.append((int(m.group(1)), rate_bits(m.group(2)), int(m.group(3)), float(m.group(4))))
    if not any(p[1] for p in points):
        fail(f"{path}: no shaped 'scaling: ... allreduce:' lines")
    return points


def unshaped_rates(points):
    """{N: bits/s} the ring reached between N unshaped hosts on its largest buffer: this
    machine's own limit (its cores carry every host's TCP stack)."""
    best = {}
    for n, rate, nbytes, t in points:
        if rate is None and (n not in best or nbytes > best[n][0]):
            best[n] = (nbytes, 2.0 * (n - 1) / n * 8.0 * nbytes / t)
    return {n: v[1] for n, v in best.items()}


# cifar10-bench's per-layer row: "%-3d %-24s", then per pass (forward, backward) 26 columns
# whose first 10 hold the milliseconds, then " %10.1f" KiB of gradients: read from the right,
# so that a long layer name cannot shift it.
PASS_WIDTH, GRADS_WIDTH = 26, 11


def read_bench(path, lines=None):
    """One cifar10-bench report (the file path, or its lines): {'model', 'ranks', 'threads',
    'batch', 'step_s', 'ips', 'layers': [(name, fwd_s, bwd_s, grad_bytes)]} in forward order;
    from scaling.sh --bench also 'rate' (bits/s, None unshaped) and a '# bucket-mb' line's
    'bucket_mb'."""
    out = {"layers": []}
    in_table = False
    for line in lines if lines is not None else read_lines(path):
        b = re.match(r"^# bucket-mb ([0-9.]+)", line)
        if b:
            out["bucket_mb"] = float(b.group(1))
        v = re.match(r"^# variant (\S+)", line)
        if v:
            out["variant"] = v.group(1)
        m = BENCH_RE.match(line)
        if m:
            out["rate"] = rate_bits(m.group(2))
        m = re.match(r"^cifar10-bench \S+: (\S+), (\d+) rank\(s\) x (\d+) thread\(s\), batch (\d+) per rank", line)
        if m:
            out.update(model=m.group(1), ranks=int(m.group(2)), threads=int(m.group(3)), batch=int(m.group(4)))
        if line.startswith("#   layer"):
            if not line.rstrip().endswith("grads KiB"):
                fail(f"{path}: the per-layer table has no 'grads KiB' column (cifar10-bench older than this script)")
            in_table = True
            continue
        if in_table and re.match(r"^\d+\s", line):
            line = line.rstrip()
            g = len(line) - GRADS_WIDTH
            bwd, fwd = line[g - PASS_WIDTH:g], line[g - 2 * PASS_WIDTH:g - PASS_WIDTH]
            name = line[4:g - 2 * PASS_WIDTH].strip()
            try:
                row = (name, float(fwd[:10]) / 1e3, float(bwd[:10]) / 1e3, float(line[g:]) * 1024.0)
            except ValueError:
                fail(f"{path}: cannot read the per-layer row '{line}'")
            out["layers"].append(row)
            continue
        in_table = False
        m = re.match(r"^layers total [0-9.]+ ms; whole step ([0-9.]+) ms", line)
        if m:
            out["step_s"] = float(m.group(1)) / 1e3
        m = re.match(r"^(?:result|scaling: \S+ \S+ bench): images_per_s=([0-9.]+)", line)
        if m:
            out["ips"] = float(m.group(1))
    for key in ("model", "layers", "step_s", "ips"):
        if not out.get(key):
            fail(f"{path}: not a cifar10-bench report with its per-layer table (no {key})")
    return out


# ---------------------------------------------------------------------------------------------
# The ring allreduce.


class Ring:
    """T(N, S, rate) = 2 (N - 1) alpha(N) + 2 (N - 1) / N * 8 S / (eta * rate); rate in bits/s.
    alpha: seconds per round, a number or {N: seconds} (measured per host count)."""

    def __init__(self, alpha, eta):
        self.alpha, self.eta = alpha, eta

    def alpha_at(self, n):
        if not isinstance(self.alpha, dict):
            return self.alpha
        if n not in self.alpha:
            fail(f"no latency measurement (the small allreduce) for {n} hosts")
        return self.alpha[n]

    def rounds(self, n):
        return 2 * (n - 1)

    def round_seconds(self, n, nbytes, rate):
        """One round: alpha and 1/n of the buffer over every link."""
        return self.alpha_at(n) + 8.0 * nbytes / n / (self.eta * rate)

    def seconds(self, n, nbytes, rate):
        return 0.0 if n < 2 else self.rounds(n) * self.round_seconds(n, nbytes, rate)


def alpha_by_hosts(points, small):
    """{N: seconds per round} from the allreduce of `small` bytes (within tbf's burst, so
    latency and software, not the rate): its time over 2 (N - 1) rounds, median over rates."""
    per = {}
    for n, _, nbytes, t in points:
        if nbytes == small:
            per.setdefault(n, []).append(t / (2 * (n - 1)))
    return {n: sorted(v)[len(v) // 2] for n, v in per.items()}


def fit_eta(points, alpha):
    """eta by least squares of the relative error over points [(n, rate, bytes, seconds)]:
    T - 2 (N - 1) alpha(N) = x / eta, with x the ring's traffic time at the full rate."""
    num = den = 0.0
    for n, rate, nbytes, t in points:
        x = 2.0 * (n - 1) / n * 8.0 * nbytes / rate / t
        num += x * (1.0 - 2.0 * (n - 1) * alpha[n] / t)
        den += x * x
    if not points or den <= 0:
        fail("the fit set is empty")
    return den / num


def fit_flags(p):
    p.add_argument("--fit-hosts", default="2,4", help="host counts fitted (default 2,4)")
    p.add_argument("--fit-rates", default="200mbit,1gbit", help="rates fitted (default 200mbit,1gbit)")
    p.add_argument("--small", type=int, default=16,
                   help="the size whose time gives each host count's alpha (default 16 bytes)")
    p.add_argument("--min-bytes", type=int, default=2 << 20,
                   help="smallest size fitted and checked (default 2 MiB, the bucket training sends)")


def fit_ring(path, args, report=True):
    """The Ring of path: alpha per host count from the small allreduce, eta fitted to the fit
    set; prints every point (when report) and returns (ring, worst held-out relative error)."""
    hosts = {int(h) for h in args.fit_hosts.split(",")}
    rates = {rate_bits(r) for r in args.fit_rates.split(",")}
    everything = read_allreduce(path)
    unshaped = unshaped_rates(everything)
    points = [p for p in everything if p[1] is not None]
    alpha = alpha_by_hosts(points, args.small)

    def in_range(p):  # shaped to at most a third of what this machine reaches unshaped
        return p[2] >= args.min_bytes and (p[0] not in unshaped or p[1] <= unshaped[p[0]] / 3.0)

    fitted = [p for p in points if p[0] in hosts and p[1] in rates and in_range(p)]
    ring = Ring(alpha, fit_eta(fitted, alpha))
    worst = 0.0
    if report:
        print(f"alpha per round, from the {args.small}-byte allreduce: " +
              ", ".join(f"{n} hosts {a * 1e3:.3f} ms" for n, a in sorted(alpha.items())))
        if unshaped:
            print("unshaped, the ring reached: " +
                  ", ".join(f"{n} hosts {r / 1e9:.2f} Gbit/s" for n, r in sorted(unshaped.items())) +
                  " (a rate above a third of it measures this machine's CPU, not the link)")
        print(f"eta fitted to {len(fitted)} points (hosts {args.fit_hosts}, rates {args.fit_rates}, "
              f">= {args.min_bytes} bytes): {ring.eta:.3f}")
        print(f"{'hosts':>5} {'rate':>9} {'bytes':>10} {'measured s':>11} {'model s':>9} {'error':>7}  set")
    for p in sorted(points):
        n, rate, nbytes, t = p
        if nbytes < args.min_bytes:
            continue
        model = ring.seconds(n, nbytes, rate)
        err = model / t - 1.0
        kind = "fit" if p in fitted else ("held out" if in_range(p) else "CPU-bound here")
        if kind == "held out":
            worst = max(worst, abs(err))
        if report:
            print(f"{n:5d} {rate / 1e6:6.0f} Mb {nbytes:10d} {t:11.4f} {model:9.4f} {100 * err:+6.1f}%  {kind}")
    return ring, worst


def cmd_fit(args):
    _, worst = fit_ring(args.allreduce, args)
    ok = worst <= args.tolerance
    print(f"worst held-out error {100 * worst:.1f}% ({'within' if ok else 'beyond'} {100 * args.tolerance:.0f}%)")
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------------
# One training step: forward, then backward layer by layer (last first) handing its gradients
# to the buckets as dist/dist.c does, each bucket's ring starting once its gradients exist and
# the previous bucket is through, then the SGD update.

STATS_BYTES = 16  # (loss, correct, stop, checkpoint) ride in the first bucket


def buckets_of(layers, bucket_bytes):
    """[(backward seconds until ready, bytes)] of the buckets of one step, in the order they
    close: a bucket closes when it holds bucket_bytes or the first layer's gradients (0: one
    bucket after the whole backward). layers: [(name, fwd_s, bwd_s, grad_bytes)]."""
    out, t, open_bytes = [], 0.0, STATS_BYTES
    with_grads = [i for i, layer in enumerate(layers) if layer[3] > 0]
    for i in range(len(layers) - 1, -1, -1):
        t += layers[i][2]
        if layers[i][3] <= 0:
            continue
        open_bytes += layers[i][3]
        if i == with_grads[0] or (bucket_bytes > 0 and open_bytes >= bucket_bytes):
            out.append((t, open_bytes))
            open_bytes = 0
    return out


def progress_times(layers):
    """Backward seconds at which the trainer calls into MPI while backward runs: after every
    layer that hands over gradients (dist.c's grads_ready). After backward it polls without
    pause."""
    out, t = [], 0.0
    for i in range(len(layers) - 1, -1, -1):
        t += layers[i][2]
        if layers[i][3] > 0:
            out.append(t)
    return out


# How a started ring moves while backward runs. Each of its 2 (N - 1) rounds starts only inside
# an MPI call (Open MPI moves nonblocking collectives over TCP only then):
#   calls:   the calls at layer ends only (Open MPI alone);
#   thread:  also dist.c's progress thread's, every DIST_PROGRESS_NS (training now);
#   overlap: at once (a progress engine that never sleeps: the bound).
# After backward the trainer polls without pause.
RULES = ("calls", "thread", "overlap")
THREAD_POLL_S = 200e-6  # dist.h DIST_PROGRESS_NS


def next_call(t, calls, backward, rule, poll):
    """The first MPI call at or after t while backward runs."""
    if rule == "overlap" or t >= backward:
        return t
    c = next((c for c in calls if c >= t - 1e-12), backward)
    if rule == "thread":
        c = min(c, math.ceil(t / poll - 1e-9) * poll)
    return c


def ring_schedule(layers, bucket_bytes, ring, n, rate, rule, poll=THREAD_POLL_S):
    """(backward seconds, [(start, done)] of each bucket's ring) under `rule`. The rings run one
    after the other; dist.c starts every closed bucket at once and each MPI call advances all
    of them, so under `calls` this overstates what stays exposed."""
    backward = sum(layer[2] for layer in layers)
    calls = progress_times(layers)
    done, out = 0.0, []
    for ready, nbytes in buckets_of(layers, bucket_bytes):
        t = start = max(ready, done)
        step = ring.round_seconds(n, nbytes, rate)
        for _ in range(ring.rounds(n)):
            t = next_call(t, calls, backward, rule, poll) + step
        done = t
        out.append((start, done))
    return backward, out


def exposed_seconds(layers, bucket_bytes, ring, n, rate, rule, poll=THREAD_POLL_S):
    """Seconds the step waits for the reduction after its backward ends, under `rule`."""
    if n < 2:
        return 0.0
    backward, rings = ring_schedule(layers, bucket_bytes, ring, n, rate, rule, poll)
    return max(0.0, rings[-1][1] - backward)


def armed_seconds(layers, bucket_bytes, ring, n, rate):
    """Seconds of backward during which the progress thread is armed (a ring in flight)."""
    if n < 2:
        return 0.0
    backward, rings = ring_schedule(layers, bucket_bytes, ring, n, rate, "thread")
    armed, reach = 0.0, 0.0
    for start, done in rings:
        lo, hi = max(start, reach), min(done, backward)
        armed += max(0.0, hi - lo)
        reach = max(reach, done)
    return armed


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if len(xs) % 2 else 0.5 * (xs[len(xs) // 2 - 1] + xs[len(xs) // 2])


def per_image_layers(reports):
    """{batch: ([(name, fwd_s, bwd_s, grad_bytes)], rest_s)} from bench reports of one model and
    thread count at several batch sizes (the node's compute model); several reports of one
    batch size (rounds) give each layer's median."""
    by_batch = {}
    for r in reports:
        by_batch.setdefault(r["batch"], []).append(r)
    out = {}
    for batch, reps in by_batch.items():
        first = reps[0]["layers"]
        layers = [(first[i][0], median([r["layers"][i][1] for r in reps]), median([r["layers"][i][2] for r in reps]),
                   first[i][3]) for i in range(len(first))]
        # the step is the median run's, the layers the mean over all runs: a small negative
        # difference is that, not time
        out[batch] = (layers, max(0.0, median([r["step_s"] - sum(l[1] + l[2] for l in r["layers"]) for r in reps])))
    return out


def layers_at(table, x):
    """Per-layer times at micro-batch x (images per bench run's thread group), linear between
    the measured batches; below the smallest, proportional to it (marked by the caller)."""
    batches = sorted(table)
    lo = max([b for b in batches if b <= x] or [batches[0]])
    hi = min([b for b in batches if b >= x] or [batches[-1]])
    (l_lo, r_lo), (l_hi, r_hi) = table[lo], table[hi]
    if lo == hi:
        f = x / lo
        return [(a[0], a[1] * f, a[2] * f, a[3]) for a in l_lo], r_lo
    w = (x - lo) / (hi - lo)
    mix = [(a[0], a[1] + w * (b[1] - a[1]), a[2] + w * (b[2] - a[2]), a[3]) for a, b in zip(l_lo, l_hi)]
    return mix, r_lo + w * (r_hi - r_lo)


def read_bench_runs(path):
    """[(round, report)] of a scaling.sh --bench log whose reports are separated by '# round N'
    lines; a run that did not finish (no result line) is left out."""
    chunks, cur = [], []
    for line in read_lines(path):
        if line.startswith("# round") and cur:
            chunks.append(cur)
            cur = []
        cur.append(line)
    chunks.append(cur)
    runs = []
    for c in chunks:
        if any(BENCH_RE.match(line) for line in c):
            rnd = next((int(line.split()[2]) for line in c if line.startswith("# round")), 0)
            runs.append((rnd, read_bench(path, c)))
    return runs


def run_key(rnd, r):
    """Runs that share an unshaped reference: same round, bucket size and build."""
    return rnd, r["bucket_mb"], r.get("variant", "")


def cmd_overlap(args):
    """Each measured step of a scaling.sh --bench log beside its replay: that run's own layer
    times, the rest of the step (loss, SGD update) from the unshaped run of its round, bucket
    size and build, and the reduction exposed after backward under each progress rule; then
    the median exposed reduction per rate, bucket size and rule."""
    ring, _ = fit_ring(args.allreduce, args, report=False)
    runs = read_bench_runs(args.log)
    rest = {run_key(rnd, r): r["step_s"] - sum(l[1] + l[2] for l in r["layers"])
            for rnd, r in runs if r.get("rate") is None}
    print(f"{'round':>5} {'variant':>8} {'rate':>8} {'bucket':>6} {'layers ms':>9} {'step ms':>8} {'exposed':>8} "
          f"{'calls':>8} {'thread':>8} {'overlap':>8} {'error':>8}")
    worst, groups = 0.0, {}
    for rnd, r in runs:
        if r.get("rate") is None:
            continue
        layers_s, rest_s = sum(l[1] + l[2] for l in r["layers"]), rest[run_key(rnd, r)]
        measured = r["step_s"] - layers_s - rest_s
        pred = {rule: exposed_seconds(r["layers"], r["bucket_mb"] * 1048576, ring, r["ranks"], r["rate"], rule)
                for rule in RULES}
        rule = "thread" if r.get("variant") == "thread" else "calls"
        err = (layers_s + rest_s + pred[rule]) / r["step_s"] - 1.0
        worst = max(worst, abs(err))
        groups.setdefault((r["rate"], r["bucket_mb"], rule), []).append((measured, pred[rule]))
        print(f"{rnd:5d} {r.get('variant', '-'):>8} {r['rate'] / 1e6:5.0f} Mb {r['bucket_mb']:6g} {1e3 * layers_s:9.1f} "
              f"{1e3 * r['step_s']:8.1f} {1e3 * measured:8.1f} {1e3 * pred['calls']:8.1f} {1e3 * pred['thread']:8.1f} "
              f"{1e3 * pred['overlap']:8.1f} {100 * err:+7.1f}%")
    print(f"worst step-time error (runs with the progress thread against the 'thread' rule, the others "
          f"against 'calls'): {100 * worst:.1f}%")
    # One run's exposed time scatters by up to 100 ms here (the machine's drift lands in it),
    # so the exposed reduction is compared by the median of each group of runs.
    print("exposed reduction, median of each rate, bucket size and rule (ms): measured, replay, difference")
    for (rate, mb, rule), v in sorted(groups.items(), key=lambda kv: (-kv[0][0], -kv[0][1], kv[0][2])):
        m, p = median([x[0] for x in v]), median([x[1] for x in v])
        print(f"  {rate / 1e6:5.0f} Mb {mb:4g} MiB {rule:>6} ({len(v)} runs): {1e3 * m:7.1f} {1e3 * p:7.1f} {1e3 * (m - p):+7.1f}")
    return 0


# ---------------------------------------------------------------------------------------------
# Named AWS instance sizes (published figures; docs/scaling.md cites them): vCPUs (two per
# core), baseline and burst network bandwidth in Gbit/s, each direction. Sizes of 4xlarge and
# below have a baseline and burst to the higher rate "for a limited time, typically from 5 to 60
# minutes". One TCP flow is limited to 5 Gbit/s, to 10 inside a cluster placement group.
INSTANCES = [
    ("c7i.2xlarge", 8, 3.125, 12.5),
    ("c7i.4xlarge", 16, 6.25, 12.5),
    ("c7i.8xlarge", 32, 12.5, 12.5),
    ("c7i.16xlarge", 64, 25.0, 25.0),
    ("c7i.48xlarge", 192, 50.0, 50.0),
]
FLOW_LIMIT = {"placement group": 10.0, "no placement group": 5.0}

# The recipes: airbench94 keeps a global batch of 1024 (strong scaling), 476 steps, an
# evaluation of the 10,000 test images after each of its 10 epochs and a 6-view TTA at the end;
# the workshop CNN takes 128 images per rank (weak scaling), 10 epochs, one evaluation each.
RECIPES = {
    "airbench94": {"batch": 1024, "per_node": False, "steps": 476, "eval_images": 10000 * (10 + 6)},
    "workshop-cnn": {"batch": 128, "per_node": True, "epochs": 10, "eval_images": 10000 * 10},
}
TRAIN_IMAGES = 50000


class Node:
    """A node of `cores` cores running one rank (slotsPerWorker: 1) with a thread per core:
    each pair of cores takes its share of the node's batch as the measured bench runs (2
    threads) took theirs, i.e. per-core speed as measured here at the same images per core."""

    def __init__(self, table, cores, bench_threads):
        self.table, self.cores, self.threads = table, cores, bench_threads

    def layers(self, node_batch):
        """(layers at this node's batch, the rest of a step, extrapolated?)"""
        x = node_batch * self.threads / self.cores
        layers, rest = layers_at(self.table, x)
        return layers, rest, x < min(self.table)


BUCKETS_MB = [0.5, 1, 2, 4, 8, 16, 32]


# The progress thread's cost: the layers ran 9 % longer with it armed through a whole backward
# (docs/scaling.md, the medians at 100 Mbit/s); charged on the backward seconds it is armed.
THREAD_COST = 0.09


def step_seconds(node, node_batch, nodes, ring, rate, bucket_mb, rule):
    """(compute, exposed reduction, bucket MiB) seconds of one step on `nodes` nodes, the
    compute including the progress thread's cost; bucket_mb None: the size of BUCKETS_MB that
    makes the shortest step."""
    layers, rest, _ = node.layers(node_batch)
    compute = sum(l[1] + l[2] for l in layers) + rest

    def cost(mb):
        b = mb * 1048576
        extra = THREAD_COST * armed_seconds(layers, b, ring, nodes, rate) if rule == "thread" else 0.0
        return compute + extra, exposed_seconds(layers, b, ring, nodes, rate, rule), mb

    sizes = BUCKETS_MB if bucket_mb is None else [bucket_mb]
    return min((cost(mb) for mb in sizes), key=lambda c: c[0] + c[1])


def time_to_accuracy(model, node, nodes, ring, rate, bucket_mb, rule):
    """{tta: seconds of training and evaluation, step, exposed: seconds per step, bucket: MiB,
    extrapolated: the node's batch per pair of cores is below the smallest measured}."""
    r = RECIPES[model]
    node_batch = r["batch"] if r["per_node"] else r["batch"] / nodes
    compute, exposed, bucket = step_seconds(node, node_batch, nodes, ring, rate, bucket_mb, rule)
    steps = r["steps"] if "steps" in r else r["epochs"] * (TRAIN_IMAGES // (r["batch"] * nodes))
    layers, _, extrapolated = node.layers(node_batch)
    fwd_per_image = sum(l[1] for l in layers) / node_batch
    evaluate = r["eval_images"] / nodes * fwd_per_image
    return dict(tta=steps * (compute + exposed) + evaluate, step=compute + exposed, exposed=exposed,
                bucket=bucket, extrapolated=extrapolated)


def scenarios(vcpus, baseline, burst):
    """[(label, link Gbit/s)] for an instance: the rate a ring's one TCP flow per neighbour
    gets, in a cluster placement group (burst, and baseline where it is lower) and outside."""
    out = [("placement group", min(burst, FLOW_LIMIT["placement group"]))]
    if baseline < burst:
        out.append(("placement group, baseline", min(baseline, FLOW_LIMIT["placement group"])))
    out.append(("no placement group", min(burst, FLOW_LIMIT["no placement group"])))
    return out


NODES = [1, 2, 4, 8, 16, 32, 64]


def predict_rows(reports, ring, bucket_mb, rule):
    """Every prediction: time_to_accuracy's dicts with model, instance, scenario, gbit, nodes,
    speedup (time to accuracy on 1 node / on N) and efficiency (strong scaling: speedup / N;
    weak: one node's step time / N nodes')."""
    rows = []
    for model, reps in sorted(reports.items()):
        table = per_image_layers(reps)
        threads = reps[0]["threads"]
        for name, vcpus, baseline, burst in INSTANCES:
            node = Node(table, vcpus // 2, threads)
            for label, gbit in scenarios(vcpus, baseline, burst):
                base = None
                for n in NODES:
                    r = time_to_accuracy(model, node, n, ring, gbit * 1e9, bucket_mb, rule)
                    base = base or r
                    weak = RECIPES[model]["per_node"]
                    r.update(model=model, instance=name, scenario=label, gbit=gbit, nodes=n,
                             speedup=base["tta"] / r["tta"],
                             efficiency=base["step"] / r["step"] if weak else base["tta"] / r["tta"] / n)
                    rows.append(r)
    return rows


def svg_plot(rows, path):
    """Efficiency against nodes (log2 axis), one panel per model, one line per instance size
    in a cluster placement group."""
    w, h, m = 360, 240, 48
    colors = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e"]
    models = sorted({r["model"] for r in rows})
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w * len(models)}" height="{h + 70}" '
           'font-family="sans-serif" font-size="11">', '<rect width="100%" height="100%" fill="white"/>']
    for k, model in enumerate(models):
        x0 = k * w

        def px(n):
            return x0 + m + (w - m - 12) * math.log2(n) / math.log2(NODES[-1])

        def py(e):
            return 20 + (h - 20 - 30) * (1.0 - e)

        title = f"{model}: {'weak' if RECIPES[model]['per_node'] else 'strong'} scaling efficiency"
        out.append(f'<text x="{x0 + m}" y="14">{title}</text>')
        for e in (0.0, 0.25, 0.5, 0.75, 1.0):
            out.append(f'<line x1="{px(1):.1f}" y1="{py(e):.1f}" x2="{px(NODES[-1]):.1f}" y2="{py(e):.1f}" stroke="#ddd"/>')
            out.append(f'<text x="{x0 + m - 6}" y="{py(e) + 4:.1f}" text-anchor="end">{e:.2f}</text>')
        for n in NODES:
            out.append(f'<text x="{px(n):.1f}" y="{h - 14}" text-anchor="middle">{n}</text>')
        out.append(f'<text x="{x0 + m + (w - m) / 2:.0f}" y="{h}" text-anchor="middle">nodes</text>')
        for j, (name, *_rest) in enumerate(INSTANCES):
            pts = [r for r in rows if r["model"] == model and r["instance"] == name and r["scenario"] == "placement group"]
            line = " ".join(f"{px(r['nodes']):.1f},{py(min(r['efficiency'], 1.05)):.1f}" for r in pts)
            out.append(f'<polyline fill="none" stroke="{colors[j]}" stroke-width="2" points="{line}"/>')
            if k == 0:
                out.append(f'<text x="{m + 140 * (j % 3)}" y="{h + 24 + 16 * (j // 3)}" fill="{colors[j]}">{name}</text>')
    out.append("</svg>")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")


def print_matrices(rows):
    """Per model: time to accuracy and efficiency against nodes, a row per instance and network."""
    for model in sorted({r["model"] for r in rows}):
        weak = RECIPES[model]["per_node"]
        print(f"\n{model} ({'weak' if weak else 'strong'} scaling): time to accuracy in seconds (efficiency)")
        print("| instance | network | " + " | ".join(f"{n} node{'s' if n > 1 else ''}" for n in NODES) + " |")
        print("| --- | --- |" + " --- |" * len(NODES))
        keys = []
        for r in rows:
            if r["model"] == model and (r["instance"], r["scenario"]) not in keys:
                keys.append((r["instance"], r["scenario"]))
        for inst, scen in keys:
            cells = [r for r in rows if r["model"] == model and r["instance"] == inst and r["scenario"] == scen]
            gbit = cells[0]["gbit"]
            print(f"| {inst} | {scen}, {gbit:g} Gbit/s | " + " | ".join(
                f"{r['tta']:.0f}{'*' if r['extrapolated'] else ''} ({r['efficiency']:.2f})" for r in cells) + " |")


def cmd_predict(args):
    ring, _ = fit_ring(args.allreduce, args, report=False)
    ring.alpha = args.alpha_us * 1e-6  # the cluster's, not the harness's: see --alpha-us
    reports = {}
    for path in args.bench:
        r = read_bench(path)
        reports.setdefault(r["model"], []).append(r)
    bucket_mb = None if args.bucket_mb == "best" else float(args.bucket_mb)
    rows = predict_rows(reports, ring, bucket_mb, args.rule)
    print(f"ring: alpha {ring.alpha * 1e6:.0f} us per round, eta {ring.eta:.3f}; buckets: "
          f"{args.bucket_mb} MiB; progress rule '{args.rule}'")
    if args.detail:
        print("| model | instance | network | nodes | step ms | exposed ms | bucket MiB | time to accuracy s "
              "| speedup | efficiency |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            print(f"| {r['model']} | {r['instance']} | {r['scenario']}, {r['gbit']:g} Gbit/s | {r['nodes']} | "
                  f"{1e3 * r['step']:.1f}{' *' if r['extrapolated'] else ''} | {1e3 * r['exposed']:.1f} | "
                  f"{r['bucket']:g} | {r['tta']:.1f} | {r['speedup']:.2f} | {r['efficiency']:.2f} |")
    else:
        print_matrices(rows)
    print("*: the node's batch per pair of cores is below the smallest measured; its compute is scaled "
          "down in proportion (optimistic)")
    goal = {(r["model"], r["nodes"]): r for r in rows
            if r["instance"] == "c7i.8xlarge" and r["scenario"] == "placement group"}
    a, w = goal[("airbench94", 8)], goal[("workshop-cnn", 16)]
    ok_a, ok_w = a["speedup"] >= 6.0, w["efficiency"] >= 0.90
    print(f"goal: airbench94 time to accuracy, 1 -> 8 nodes of c7i.8xlarge: {a['speedup']:.2f}x "
          f"({'meets' if ok_a else 'misses'} >= 6x)")
    print(f"goal: workshop CNN weak-scaling efficiency at 16 nodes of c7i.8xlarge: {100 * w['efficiency']:.1f}% "
          f"({'meets' if ok_w else 'misses'} >= 90%)")
    if args.svg:
        svg_plot(rows, args.svg)
    return 0


def main():
    p = argparse.ArgumentParser(prog="scaling-model.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit", help="fit the ring to scaling.sh's allreduce lines; check the held-out ones")
    f.add_argument("allreduce")
    f.add_argument("--tolerance", type=float, default=0.15, help="largest held-out relative error (default 0.15)")
    fit_flags(f)
    o = sub.add_parser("overlap", help="replay measured steps (scaling.sh --bench) under both progress rules")
    o.add_argument("allreduce")
    o.add_argument("log")
    fit_flags(o)
    q = sub.add_parser("predict", help="step time, efficiency and time to accuracy on AWS instance sizes")
    q.add_argument("allreduce")
    q.add_argument("bench", nargs="+", help="cifar10-bench reports (one model and thread count, several batches)")
    q.add_argument("--bucket-mb", default="2", help="gradient bucket size in MiB (default 2, training's), or "
                   "'best': per row, the size of %s that makes the shortest step" % BUCKETS_MB)
    q.add_argument("--rule", choices=RULES, default="thread",
                   help="when a started ring moves while backward runs (default thread: training's)")
    q.add_argument("--alpha-us", type=float, default=50.0,
                   help="one ring round's latency on the cluster in us (default 50, assumed: docs/scaling.md)")
    q.add_argument("--svg", help="write the efficiency plot here")
    q.add_argument("--detail", action="store_true", help="a row per prediction (step, exposed reduction, bucket)")
    fit_flags(q)
    args = p.parse_args()
    return {"fit": cmd_fit, "overlap": cmd_overlap, "predict": cmd_predict}[args.cmd](args)


if __name__ == "__main__":
    sys.exit(main())
