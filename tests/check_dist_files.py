#!/usr/bin/env python3
"""Checks the files of `test_dist --device D --out DIR` (their layout: tests/test_dist.c).

For every network in DIR/meta.txt:
  - after the steps on different shards, every rank holds the same weights, bit for bit;
  - after the same-batch step, every rank holds the same weights, bit for bit (each applied the
    same summed gradients);
  - each rank's distributed step equals its one-process step on that batch:
      bit for bit when every rank computed the same gradients and the rank count is a power of
      two (the mean of 2^k equal floats is exact);
      otherwise (on a GPU each process times its own cuDNN algorithms, which round differently)
      the difference must be the one the ranks' gradients explain, to float rounding:
        dist - one = -lr (mean over ranks of g - own g)   per weight, within
        2^-23 (|dist| + |one|) + 2^-21 lr (|mean g| + |own g| + 2 weight_decay |w|)
      (twice the worst rounding of the two SGD updates), and the two updates (weights minus
      the initial ones) within a relative L2 distance of 2e-2 in FP32 or 0.3 with TF32: how
      far two processes' gradients may be apart, the GPU-against-CPU gradient tolerances of
      tests/test_cuda.c, whose header gives the reasons.
Prints a line per finding and one summary line; exit status 0 when everything holds.
Usage: check_dist_files.py DIR"""
import array
import math
import sys

UPDATE_TOL = {"off": 2e-2, "n/a": 2e-2, "on": 0.3}


def read_meta(d):
    meta = {}
    with open(f"{d}/meta.txt", encoding="ascii") as f:
        for line in f:
            key, _, value = line.strip().partition(" ")
            meta[key] = value
    return meta


def load(path, n):
    a = array.array("f")
    with open(path, "rb") as f:
        a.frombytes(f.read())
    if sys.byteorder != "little":
        a.byteswap()
    if len(a) != n:
        raise ValueError(f"{path}: {len(a)} floats, expected {n}")
    return a


def rel_l2(a, b):
    num = sum((x - y) ** 2 for x, y in zip(a, b))
    den = sum(y * y for y in b)
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def unexplained(init, dist, one, grads, own, lr, wd):
    """Weights where dist - one is not -lr (mean g - own g) to rounding, and the largest error
    as a multiple of its bound."""
    world = len(grads)
    bad, worst = 0, 0.0
    for i, (w, a, b, g) in enumerate(zip(init, dist, one, own)):
        mean = sum(gr[i] for gr in grads) / world
        bound = 2.0**-23 * (abs(a) + abs(b)) + 2.0**-21 * lr * (abs(mean) + abs(g) + 2 * wd * abs(w))
        err = abs((a - b) + lr * (mean - g))
        bad += err > bound
        worst = max(worst, err / bound if bound else math.inf if err else 0.0)
    return bad, worst


def check_net(d, net, meta, say):
    """Says what it finds; returns (ok, a few words for the summary)."""
    world, lr, wd = int(meta["world"]), float(meta["lr"]), float(meta["weight_decay"])
    with open(f"{d}/{net}.init.f32", "rb") as f:
        P = len(f.read()) // 4
    init = load(f"{d}/{net}.init.f32", P)
    per_rank = {k: [load(f"{d}/{net}.{k}.rank{r}.f32", P + (k == "grads") * 2) for r in range(world)]
                for k in ("dist", "one", "grads", "shards")}
    ok = True
    for kind, what in (("shards", "after the steps on different shards"), ("dist", "after the same-batch step")):
        same = all(a.tobytes() == per_rank[kind][0].tobytes() for a in per_rank[kind])
        say(f"{net}: {world} ranks' weights {what}: {'identical' if same else 'DIFFERENT'}")
        ok &= same
    grads = [g[:P] for g in per_rank["grads"]]
    same_grads = all(g.tobytes() == grads[0].tobytes() for g in grads)
    pow2 = world & (world - 1) == 0
    worst_update = None  # stays None while every step is bit for bit
    for r in range(world):
        dist, one = per_rank["dist"][r], per_rank["one"][r]
        if same_grads and pow2:
            exact = dist.tobytes() == one.tobytes()
            say(f"{net}, rank {r}: the ranks' gradients are identical; distributed step "
                f"{'equals the one-process step bit for bit' if exact else 'DIFFERS from the one-process step'}")
            ok &= exact
            continue
        bad, worst = unexplained(init, dist, one, grads, grads[r], lr, wd)
        upd = rel_l2([a - w for a, w in zip(dist, init)], [b - w for b, w in zip(one, init)])
        tol = UPDATE_TOL[meta["tf32"]]
        say(f"{net}, rank {r}: gradients {'identical' if same_grads else 'differ across ranks'}; "
            f"{bad} of {P} weights off what they explain (largest error {worst:.3g}x its rounding bound); "
            f"updates rel L2 {upd:.3g} (tolerance {tol:g})")
        ok &= bad == 0 and upd <= tol
        worst_update = max(worst_update or 0.0, upd)
    if worst_update is None:
        return ok, f"{net}: bit for bit"
    return ok, f"{net}: explained by the ranks' gradients, updates within {worst_update:.2g}"


def main(argv):
    if len(argv) != 2:
        print(__doc__.rsplit("\n", 1)[-1], file=sys.stderr)
        return 2
    d = argv[1]
    meta = read_meta(d)
    verdict, notes = True, []
    for net in meta["nets"].split():
        try:
            ok, note = check_net(d, net, meta, print)
        except (OSError, ValueError) as e:
            print(f"{net}: {e}")
            ok, note = False, f"{net}: files missing or short"
        verdict &= ok
        notes.append(note)
    print(f"check_dist_files: {meta['world']} rank(s), {meta['device']}, tf32 {meta['tf32']}, {meta['mode']}: "
          f"{'PASS' if verdict else 'FAIL'} ({'; '.join(notes)})")
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
