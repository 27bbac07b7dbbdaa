#!/usr/bin/env python3
"""Compares our training steps with PyTorch's (Debian python3-torch, CPU).

usage: torch_reference.py DUMPDIR DATADIR LR

DUMPDIR holds what tests/dump_steps wrote: the initial model file, our checkpoint after every
step (state_S.safetensors), the input batches and our losses. PyTorch loads our model file
strictly into MyCnnModel, reproduces our input tensors from the raw dataset bytes with the
normalisation recorded in the file's metadata, and trains with torch.optim.SGD.

Reference: PyTorch in float64. BN backward cancels heavily, so two float32 implementations
that sum in different orders differ by ~1e-4 even when both are right; float64 is the answer
both approach. PyTorch's own float32 is measured against it too and printed beside ours.

Checks (relative L2 error per tensor):
  inputs reproduced from the metadata                           <= 1e-5 max abs
  step 1 from the common initial weights: loss, every parameter gradient, updated weights,
    momentum buffers, BN running statistics                     <= 1e-4
  step 2, teacher-forced (PyTorch starts from our checkpoint after step 1: weights, momentum,
    BN statistics), the first step with a non-zero momentum buffer: loss, updated weights
    and BN statistics <= 1e-4, momentum buffers <= 1e-2 (a wrong momentum rule, e.g. a
    missing or dampened term, is off by 10% or more)
  losses of all N steps, teacher-forced (PyTorch evaluates the loss of our weights before
    step S on batch S)                                          <= 1e-3 (as the issue asks)
  our final model file in PyTorch, eval mode: logits           <= 1e-4
Why teacher-forced: free-running trajectories of this network diverge chaotically (a ReLU or
max-pool switch decided differently by float32 rounding reroutes a gradient), so PyTorch
float32 itself drifts ~1e-2 from PyTorch float64 within 20 steps at lr 1e-2. For the same
reason a later step's gradient, and so its momentum buffer, can be off by a few 1e-3 where one
such switch happened (seen: 3.9e-3 on synthetic data; 2.6e-4 on real images, where PyTorch
float32 had the identical error). The
free-running drift of ours and of PyTorch float32 (vs each other) is printed for information.
Prints 'torch_reference: N passed, N failed'; exit 1 on any failure."""
import json
import os
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

MOMENTUM, WEIGHT_DECAY = 0.9, 5e-4


def load_safetensors(path):
    """A few lines instead of the safetensors package (Debian does not ship it)."""
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    data = raw[8 + n:]
    meta = header.pop("__metadata__", {})
    dtypes = {"F32": np.float32, "I64": np.int64}
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=dtypes[t["dtype"]]).reshape(t["shape"])
        out[name] = torch.from_numpy(arr.copy())
    return out, meta


class MyCnnModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.network = nn.Sequential(
            nn.Conv2d(3, 32, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(32, 64, kernel_size=3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2, 2), nn.BatchNorm2d(64),
            nn.Conv2d(64, 128, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(128, 128, kernel_size=3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2, 2), nn.BatchNorm2d(128),
            nn.Conv2d(128, 256, kernel_size=3, padding=1), nn.ReLU(),
            nn.Conv2d(256, 256, kernel_size=3, padding=1), nn.ReLU(),
            nn.MaxPool2d(2, 2), nn.BatchNorm2d(256),
            nn.Flatten(),
            nn.Linear(256 * 4 * 4, 512), nn.ReLU(),
            nn.Linear(512, 10))

    def forward(self, x):
        return self.network(x)


passed = failed = 0
worst = {}


def check(ok, what):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
        print("FAIL", what)


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(b.norm(), 1e-30))


def note(key, value):
    worst[key] = max(worst.get(key, 0.0), value)


def raw_images(datadir):
    files = [f"data_batch_{i}.bin" for i in range(1, 6)]
    return np.concatenate([np.fromfile(os.path.join(datadir, f), dtype=np.uint8).reshape(-1, 3073) for f in files])


def step(model, opt, x, y):
    model.train()
    opt.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()


def main():
    dump_dir, data_dir, lr = sys.argv[1], sys.argv[2], float(sys.argv[3])
    torch.set_num_threads(2)
    dump, _ = load_safetensors(os.path.join(dump_dir, "dump.safetensors"))
    init, meta = load_safetensors(os.path.join(dump_dir, "init.safetensors"))
    steps = dump["x"].shape[0]
    xs, ys = dump["x"], dump["labels"]
    check(meta["format"] == "cifar10-dp" and meta["model"] == "workshop-cnn", "metadata format/model")
    check(len(json.loads(meta["classes"])) == 10, "metadata classes")

    # 1. Inputs reproduced from raw bytes and the recorded normalisation.
    mean = torch.tensor(json.loads(meta["normalization_mean"]), dtype=torch.float32).view(3, 1, 1)
    std = torch.tensor(json.loads(meta["normalization_std"]), dtype=torch.float32).view(3, 1, 1)
    raw = raw_images(data_dir)
    idx = dump["indices"].numpy().reshape(-1)
    imgs = torch.from_numpy(raw[idx, 1:].astype(np.float32).reshape(-1, 3, 32, 32)) / 255.0
    err_x = float(((imgs - mean) / std - xs.reshape(-1, 3, 32, 32)).abs().max())
    check(err_x <= 1e-5, f"inputs from metadata: max abs error {err_x:.3g}")
    check(torch.equal(torch.from_numpy(raw[idx, 0].astype(np.int64)), ys.reshape(-1)), "labels")
    note("inputs reproduced from metadata (max abs)", err_x)

    # 2. Step 1 from the common start: gradients, ours and PyTorch float32 vs float64.
    m64 = MyCnnModel()
    m64.load_state_dict(init, strict=True)  # strict: raises on any missing/extra/mis-shaped tensor
    m64 = m64.double().train()
    m32 = MyCnnModel()
    m32.load_state_dict(init, strict=True)
    m32.train()
    loss64 = F.cross_entropy(m64(xs[0].double()), ys[0])
    loss64.backward()
    F.cross_entropy(m32(xs[0]), ys[0]).backward()
    g32 = dict(m32.named_parameters())
    e = abs(dump["losses"][0].item() - loss64.item()) / loss64.item()
    note("step-1 loss", e)
    check(e <= 1e-4, f"step 1 loss relative error {e:.3g}")
    for name, p in m64.named_parameters():
        e, e32 = rel(dump["grad." + name], p.grad), rel(g32[name].grad, p.grad)
        note("step-1 gradients", e)
        note("step-1 gradients of PyTorch float32 (for comparison)", e32)
        check(e <= 1e-4, f"gradient {name}: rel L2 {e:.3g} (PyTorch float32: {e32:.3g})")

    # 3. Steps 1 and 2 in full (step 1 from the initial weights, step 2 from our state after
    #    step 1), and every step's loss from our state before it.
    for s in range(steps):
        model = MyCnnModel().double()
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
        if s == 0:
            model.load_state_dict(init, strict=True)
        else:
            prev, _ = load_safetensors(os.path.join(dump_dir, f"state_{s}.safetensors"))
            model.load_state_dict({k: v for k, v in prev.items() if not k.startswith("optimizer.")}, strict=True)
            for name, p in model.named_parameters():
                opt.state[p]["momentum_buffer"] = prev["optimizer.momentum." + name].double().clone()
        if s >= 2:  # loss only: a float64 forward in train mode (batch statistics)
            with torch.no_grad():
                loss = F.cross_entropy(model.train()(xs[s].double()), ys[s]).item()
        else:
            loss = step(model, opt, xs[s].double(), ys[s])
        e = abs(dump["losses"][s].item() - loss) / loss
        note(f"teacher-forced losses of {steps} steps", e)
        check(e <= (1e-4 if s < 2 else 1e-3), f"step {s + 1} loss: ours {dump['losses'][s].item():.7f}, PyTorch {loss:.7f}")
        if s >= 2:
            continue
        ours, _ = load_safetensors(os.path.join(dump_dir, f"state_{s + 1}.safetensors"))
        for name, t in model.state_dict().items():
            if name.endswith("num_batches_tracked"):
                check(int(ours[name]) == s + 1, f"{name} after step {s + 1}")
                continue
            e = rel(ours[name], t)
            note(f"step-{s + 1} " + ("BN running stats" if "running" in name else "updated weights"), e)
            check(e <= 1e-4, f"after step {s + 1}, {name}: rel L2 {e:.3g}")
        for name, p in model.named_parameters():
            e = rel(ours["optimizer.momentum." + name], opt.state[p]["momentum_buffer"])
            note(f"step-{s + 1} momentum buffers", e)
            check(e <= (1e-4 if s == 0 else 1e-2), f"after step {s + 1}, momentum of {name}: rel L2 {e:.3g}")

    # 4. Free-running drift against PyTorch float32, for information only (see the docstring).
    model = MyCnnModel()
    model.load_state_dict(init, strict=True)
    opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
    torch32 = np.array([step(model, opt, xs[s], ys[s]) for s in range(steps)])
    ours_l = dump["losses"].double().numpy()
    print(f"torch_reference: free-running {steps} steps (information): loss {ours_l[0]:.4f} -> {ours_l[-1]:.4f}, "
          f"largest relative difference from PyTorch float32 {np.max(np.abs(ours_l - torch32) / torch32):.3g}")

    # 5. Our final model file in PyTorch, eval mode: same logits as ours.
    final, _ = load_safetensors(os.path.join(dump_dir, "final.safetensors"))
    m2 = MyCnnModel()
    m2.load_state_dict(final, strict=True)
    m2 = m2.double().eval()
    with torch.no_grad():
        logits = m2(xs[0].double())
    e = rel(dump["eval_logits"], logits)
    note("final model eval logits", e)
    check(e <= 1e-4, f"final model eval logits: rel L2 {e:.3g}")
    for k, v in worst.items():
        print(f"torch_reference: worst {k}: {v:.3g}")
    print(f"torch_reference: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
