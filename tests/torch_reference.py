#!/usr/bin/env python3
"""Compares our training steps with PyTorch's (Debian python3-torch, CPU).

usage: torch_reference.py DUMPDIR DATADIR LR

DUMPDIR holds what `tests/dump_steps NET DATA OUTDIR STEPS BATCH LR` wrote: the initial model
file, our checkpoint after every step (state_S.safetensors), the input batches and our losses.
A dump made with `--recipe airbench94` is checked against the recipe (see Recipe mode below);
LR is then airbench's learning rate (per 1024 images, the recipe's own is 11.5).
The network is named by the model file's metadata `model`; this file defines each known network
independently of the C code (NETWORKS below):
  workshop-cnn  the workshop's MyCnnModel (state_dict keys network.0 .. network.21): 3x3 convs,
                ReLU, 2x2 max-pools, BatchNorm, Linear(4096, 512), ReLU, Linear(512, 10)
  test-net      a miniature of airbench94, for tests only: a 2x2 conv whose filter is frozen
                (its bias trains), exact GELU, 3x3 convs without bias, 2x2 and 3x3 max-pools,
                BatchNorm (eps 1e-12, momentum 0.4) whose scale is frozen at 1, Linear(400, 10)
                without bias, and a final x * 1/9
  airbench94    airbench94's network (legacy/airbench94.py, state_dict keys 0.*, 2.conv1.* ..
                4.norm2.*, 7.weight): test-net's ops at full width (24, 64, 256, 256)
An unknown name fails. PyTorch loads our model file strictly into that network, reproduces our
input tensors from the raw dataset bytes with the normalisation recorded in the file's metadata,
and trains with torch.optim.SGD over the trainable tensors only. Frozen tensors have no grad.* in
the dump and no momentum in the checkpoints; they are compared after each step like every other
state_dict tensor, which checks that they stayed put.

Reference: PyTorch in float64. BN backward cancels heavily, so two float32 implementations
that sum in different orders differ by ~1e-4 even when both are right; float64 is the answer
both approach. PyTorch's own float32 is measured against it too and printed beside ours.

Checks (relative L2 error per tensor):
  inputs reproduced from the metadata                           <= 1e-5 max abs
  the dump's gradients, checkpoints' momentum buffers and layer outputs name exactly the
    trainable tensors / the decision layers (see Decisions) of the network
  step 1 from the common initial weights: loss, every trainable gradient, updated weights,
    momentum buffers, BN running statistics, frozen tensors    <= 1e-4
  step 2, teacher-forced (PyTorch starts from our checkpoint after step 1: weights, momentum,
    BN statistics), the first step with a non-zero momentum buffer: loss, updated weights,
    BN statistics, momentum buffers, frozen tensors             <= 1e-4
  steps 1 and 2 follow our ReLU/max-pool decisions (see Decisions below); step-1 gradients
    against float64 with PyTorch's own decisions                <= 1e-2
  losses of all N steps, teacher-forced (PyTorch evaluates the loss of our weights before
    step S on batch S)                                          <= 1e-3 (as the issue asks)
  our final model file in PyTorch, eval mode: logits           <= 1e-4
Decisions: each ReLU and max-pool makes a discrete choice (pass or block, which element of a
window); GELU makes none. Where two candidates are closer than float32 rounding (a
pre-activation within ~1e-7 of zero, two window values within ~1e-7 of each other), any float32
implementation may choose differently from float64, and one such choice moves one element's
gradient, ~1e-3 of a layer's gradient norm (seen: a Winograd forward, 4e-7 from exact, flipped
one window here). The reference for steps 1 and 2 therefore runs in float64 with every ReLU mask
and max-pool index taken from our forward, so it measures our arithmetic, not the luck of
near-ties; the same comparison against PyTorch's own float64 decisions is printed. dump_steps
writes act.S.L, our output of layer L in steps S = 0 and 1, for every ReLU layer L (its mask)
and every layer L followed by a max-pool (the pool's input, whatever kind of layer L is, from
which the window indices are taken): workshop-cnn layers 1 3 7 9 13 15 20, test-net 2 8,
airbench94 2 9 16 22.
Why teacher-forced: free-running trajectories of these networks diverge chaotically (a ReLU or
max-pool switch decided differently by float32 rounding reroutes a gradient), so PyTorch
float32 itself drifts ~1e-2 from PyTorch float64 within 20 steps at lr 1e-2 (workshop-cnn). The
free-running drift of ours and of PyTorch float32 (vs each other) is printed for information.
Recipe mode: when dump.safetensors' metadata says recipe "airbench94" (dump_steps --recipe),
the run is legacy/airbench94.py's training loop, which PyTorch reproduces from its own copy of
the recipe (AIRBENCH94 below and Recipe; nothing taken from our config code): for LR, momentum
0.85, weight decay 0.0153 and a batch of B, lr = LR / (1024 (1 + 1/(1 - 0.85))),
wd = 0.0153 B / (1024 (1 + 1/(1 - 0.85))); torch.optim.SGD(nesterov=True, momentum=0.85) with
the groups batch-norm biases (names containing 'norm') at lr x 64, weight_decay wd / (lr x 64)
and the rest at lr, weight_decay wd / lr; LambdaLR with the factor
np.interp(step, [0, int(0.23 T), T], [0.2, 1, 0.07]); the loss
CrossEntropyLoss(label_smoothing=0.2, reduction='none').sum(); after step g (1-based) lookahead
when g % 5 == 0 with decay = 0.95^5 (g / T)^3 (airbench's float32 alpha_schedule) and, when
g == T, decay 1.0: over every floating-point state_dict tensor (running statistics and frozen
tensors included) ema.lerp_(p, 1 - decay); p.copy_(ema) (airbench tests the dtype for
half/float; the reference is float64, so double counts too); the first layer's bias has
requires_grad = epoch < E (E = the dump's bias_epochs, epoch = (g - 1) // K). T, K, E, B and LR
come from the dump's metadata (total_steps, steps_per_epoch, bias_epochs, batch,
learning_rate; LR must equal the command line's). No augmentation; the first layer keeps its
initial filter (whitening is checked by tests/whiten_reference.py).
Every step S is checked teacher-forced in float64, following our ReLU/max-pool decisions of
that step (dump_steps writes act.S.L for every step in recipe mode): PyTorch loads our
checkpoint after step S - 1 (init for S = 1: weights, BN statistics, the optimizer's momentum
buffers, the lookahead averages), sets the first-layer bias's requires_grad and the scheduler at
step S - 1, runs the step and its lookahead, and compares with our checkpoint after S:
  loss of step S, every state_dict tensor (updated weights, BN running statistics, frozen
    tensors, the stopped first-layer bias), momentum buffers, lookahead averages  <= 1e-4
  num_batches_tracked                                                             exact
  the checkpoint's lookahead averages name exactly the float state_dict tensors
  our per-step lr and weight decay of the non-batch-norm group (sgd_lr,
    sgd_weight_decay) against the recipe's                                        <= 1e-6
Step 1's gradients and the final model's logits are checked as above (with the recipe's loss),
and the free-running float32 drift is printed for information. Which of the recipe's events the
run covers (lookahead updates, the final full lookahead, the bias stop, both sides of the
triangle's peak) is printed.
Prints 'torch_reference: N passed, N failed'; exit 1 on any failure."""
import json
import os
import struct
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tally import Tally  # noqa: E402

MOMENTUM, WEIGHT_DECAY = 0.9, 5e-4
# legacy/airbench94.py's hyp['opt'] (what recipe mode needs of it; lr comes from the command line)
AIRBENCH94 = dict(momentum=0.85, weight_decay=0.0153, bias_scaler=64.0, label_smoothing=0.2, lookahead=5)
RECIPE = None  # recipe mode: the Recipe (main sets it from the dump's metadata)


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


class Net(nn.Module):
    """A network given as its leaves in order, (state_dict prefix, module): each leaf is
    registered under its dotted prefix (a child "2" holding a child "conv1" for "2.conv1"), so
    the state_dict keys are the prefixes plus the modules' own keys; forward runs the leaves in
    order. Layer L of our dumps is leaf L."""

    def __init__(self, leaves):
        super().__init__()
        self.prefixes = [prefix for prefix, _ in leaves]
        if len(set(self.prefixes)) != len(self.prefixes) or any(
                q.startswith(p + ".") for p in self.prefixes for q in self.prefixes):
            raise ValueError(f"leaf prefixes must be unique and not nested: {self.prefixes}")
        for prefix, module in leaves:
            parent = self
            *path, last = prefix.split(".")
            for part in path:
                if part not in parent._modules:
                    parent.add_module(part, nn.Module())
                parent = parent._modules[part]
            parent.add_module(last, module)

    def layers(self):
        return [self.get_submodule(prefix) for prefix in self.prefixes]

    def forward(self, x):
        for layer in self.layers():
            x = layer(x)
        return x


class Mul(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale


def frozen_weight(module):
    """The module with its weight frozen (no gradient, no optimizer state; still in the
    state_dict)."""
    module.weight.requires_grad_(False)
    return module


def workshop_cnn():
    def conv(cin, cout):
        return nn.Conv2d(cin, cout, kernel_size=3, padding=1)
    layers = [
        conv(3, 32), nn.ReLU(), conv(32, 64), nn.ReLU(), nn.MaxPool2d(2), nn.BatchNorm2d(64),
        conv(64, 128), nn.ReLU(), conv(128, 128), nn.ReLU(), nn.MaxPool2d(2), nn.BatchNorm2d(128),
        conv(128, 256), nn.ReLU(), conv(256, 256), nn.ReLU(), nn.MaxPool2d(2), nn.BatchNorm2d(256),
        nn.Flatten(), nn.Linear(256 * 4 * 4, 512), nn.ReLU(), nn.Linear(512, 10)]
    return Net([(f"network.{i}", layer) for i, layer in enumerate(layers)])


def test_net():
    def bn(c):
        return frozen_weight(nn.BatchNorm2d(c, eps=1e-12, momentum=0.4))
    return Net([
        ("0", frozen_weight(nn.Conv2d(3, 8, kernel_size=2, padding=0, bias=True))),  # 32 -> 31
        ("1", nn.GELU()),
        ("2.conv1", nn.Conv2d(8, 12, kernel_size=3, padding=1, bias=False)),
        ("2.pool", nn.MaxPool2d(2)),  # 31 -> 15
        ("2.norm1", bn(12)),
        ("2.act1", nn.GELU()),
        ("2.conv2", nn.Conv2d(12, 16, kernel_size=3, padding=1, bias=False)),
        ("2.norm2", bn(16)),
        ("2.act2", nn.GELU()),
        ("3", nn.MaxPool2d(3)),  # 15 -> 5
        ("4", nn.Flatten()),  # 16 * 5 * 5 = 400
        ("5", nn.Linear(400, 10, bias=False)),
        ("6", Mul(1 / 9)),
    ])


def airbench94():
    """legacy/airbench94.py's make_net: nn.Sequential(0 whitening Conv, 1 GELU, 2..4 ConvGroup,
    5 MaxPool2d(3), 6 Flatten, 7 Linear, 8 Mul). A ConvGroup calls its one GELU module
    `activ` twice; as leaves (which are unique) the two calls are "activ" and "activ2", neither
    with tensors, so the state_dict is the paper's."""
    def bn(c):
        return frozen_weight(nn.BatchNorm2d(c, eps=1e-12, momentum=1 - 0.6))

    def group(n, cin, cout):
        return [(f"{n}.conv1", nn.Conv2d(cin, cout, kernel_size=3, padding=1, bias=False)),
                (f"{n}.pool", nn.MaxPool2d(2)), (f"{n}.norm1", bn(cout)), (f"{n}.activ", nn.GELU()),
                (f"{n}.conv2", nn.Conv2d(cout, cout, kernel_size=3, padding=1, bias=False)),
                (f"{n}.norm2", bn(cout)), (f"{n}.activ2", nn.GELU())]
    return Net([
        ("0", frozen_weight(nn.Conv2d(3, 24, kernel_size=2, padding=0, bias=True))),  # 32 -> 31
        ("1", nn.GELU()),
        *group(2, 24, 64),  # 31 -> 15
        *group(3, 64, 256),  # 15 -> 7
        *group(4, 256, 256),  # 7 -> 3
        ("5", nn.MaxPool2d(3)),  # 3 -> 1
        ("6", nn.Flatten()),
        ("7", nn.Linear(256, 10, bias=False)),
        ("8", Mul(1 / 9)),
    ])


NETWORKS = {"workshop-cnn": workshop_cnn, "test-net": test_net, "airbench94": airbench94}


def decision_layers(model):
    """The layers whose outputs dump_steps writes: every ReLU, and every layer followed by a
    max-pool (the pool's input)."""
    layers = model.layers()
    return {i for i, layer in enumerate(layers)
            if isinstance(layer, nn.ReLU) or (i + 1 < len(layers) and isinstance(layers[i + 1], nn.MaxPool2d))}


def trainable(model):
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def sgd(model, lr):
    return torch.optim.SGD([p for _, p in trainable(model)], lr=lr, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)


tally = Tally("torch_reference")
worst = {}


def check(ok, what):
    return tally.check(what, ok)


def expect_entries(state, prefix, want, what, of):
    """The tensor names under `prefix` in a checkpoint must be exactly `want`; returns them."""
    got = sorted(k[len(prefix):] for k in state if k.startswith(prefix))
    check(got == sorted(want), f"{what} for {got}, {of} {sorted(want)}")
    return got


def rel(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / max(b.norm(), 1e-30))


def note(key, value):
    worst[key] = max(worst.get(key, 0.0), value)


def raw_images(datadir):
    files = [f"data_batch_{i}.bin" for i in range(1, 6)]
    return np.concatenate([np.fromfile(os.path.join(datadir, f), dtype=np.uint8).reshape(-1, 3073) for f in files])


def forward_following(model, x, acts):
    """model on x, with every ReLU mask and max-pool index taken from our layer outputs
    acts[layer] (no acts: PyTorch's own decisions). ReLU layer i passes where our output
    acts[i] is positive; max-pool layer i takes the window indices of our output of layer i-1
    (its input) and gathers them from x. Every other layer (GELU included: no discrete
    decision) is the layer itself."""
    if acts is None:
        return model(x)
    for i, layer in enumerate(model.layers()):
        if isinstance(layer, nn.ReLU):
            x = x * (acts[i] > 0).to(x.dtype)
        elif isinstance(layer, nn.MaxPool2d):
            _, idx = F.max_pool2d(acts[i - 1], layer.kernel_size, layer.stride, return_indices=True)
            x = x.flatten(2).gather(2, idx.flatten(2)).view(idx.shape)
        else:
            x = layer(x)
    return x


def our_acts(dump, s):
    """Our decision-layer outputs of step s (0 or 1), by layer index."""
    prefix = f"act.{s}."
    return {int(k[len(prefix):]): v for k, v in dump.items() if k.startswith(prefix)}


def loss_fn(outputs, y):
    """The training loss: the workshop's mean cross-entropy, or in recipe mode airbench94's
    CrossEntropyLoss(label_smoothing=0.2, reduction='none').sum() (main sets RECIPE)."""
    if RECIPE is None:
        return F.cross_entropy(outputs, y)
    return F.cross_entropy(outputs, y, label_smoothing=AIRBENCH94["label_smoothing"], reduction="none").sum()


def step(model, opt, x, y, acts=None):
    model.train()
    opt.zero_grad()
    loss = loss_fn(forward_following(model, x, acts), y)
    loss.backward()
    opt.step()
    return loss.item()


class Recipe:
    """legacy/airbench94.py's optimizer, schedule, lookahead and whitening-bias epochs for a run
    of `total` steps of `per_epoch` steps with `batch` images, bias training for `bias_epochs`
    epochs, learning rate lr_hyp (per 1024 images)."""

    def __init__(self, lr_hyp, batch, total, per_epoch, bias_epochs):
        h = AIRBENCH94
        kilostep_scale = 1024 * (1 + 1 / (1 - h["momentum"]))
        self.lr = lr_hyp / kilostep_scale
        self.wd = h["weight_decay"] * batch / kilostep_scale
        self.lr_biases = self.lr * h["bias_scaler"]
        self.total, self.per_epoch, self.bias_epochs = total, per_epoch, bias_epochs
        self.peak = int(0.23 * total)
        self.lr_schedule = np.interp(np.arange(1 + total), [0, self.peak, total], [0.2, 1, 0.07])
        self.alpha_schedule = 0.95**5 * (torch.arange(total + 1) / total) ** 3  # float32, as airbench's

    def optimizer(self, model, step):
        """SGD and LambdaLR over model's trainable tensors, the scheduler at global step `step`
        (0-based: the next optimizer.step() is step `step`'s)."""
        named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
        norm_biases = [p for k, p in named if "norm" in k]
        other_params = [p for k, p in named if "norm" not in k]
        opt = torch.optim.SGD([dict(params=norm_biases, lr=self.lr_biases, weight_decay=self.wd / self.lr_biases),
                               dict(params=other_params, lr=self.lr, weight_decay=self.wd / self.lr)],
                              momentum=AIRBENCH94["momentum"], nesterov=True)
        sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: self.lr_schedule[i])
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": on purpose
            warnings.simplefilter("ignore")
            for _ in range(step):
                sched.step()
        return opt, sched

    def bias_trains(self, step):
        """Whether the first layer's bias trains in global step `step` (0-based):
        model[0].bias.requires_grad = (epoch < whiten_bias_epochs)."""
        return step // self.per_epoch < self.bias_epochs

    @staticmethod
    def lookahead_update(model, ema, decay):
        """LookaheadState.update over every floating-point state_dict tensor (float64 here)."""
        for k, p in model.state_dict().items():
            if p.dtype in (torch.half, torch.float, torch.double):
                ema[k].lerp_(p, 1 - decay)
                p.copy_(ema[k])

    def step(self, model, opt, sched, ema, step, x, y, acts=None):
        """airbench94's training-loop body for global step `step` (0-based); returns the loss."""
        model.get_submodule("0").bias.requires_grad_(self.bias_trains(step))
        model.train()
        loss = loss_fn(forward_following(model, x, acts), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        current_steps = step + 1
        with torch.no_grad():
            if current_steps % AIRBENCH94["lookahead"] == 0:
                self.lookahead_update(model, ema, self.alpha_schedule[current_steps].item())
            if current_steps >= self.total:
                self.lookahead_update(model, ema, 1.0)
        return loss.item()


def check_state(ours, model, s, label, kind, lookahead=None):
    """Our state after step s + 1 against model's, tensor by tensor (rel L2 within 1e-4), noted
    under label + kind(name, requires_grad) (the tensor's category); with lookahead (name ->
    PyTorch's average), our averages of those names too."""
    params = dict(model.named_parameters())
    for name, t in model.state_dict().items():
        if name.endswith("num_batches_tracked"):
            check(int(ours[name]) == s + 1, f"{name} after step {s + 1}")
            continue
        e = rel(ours[name], t)
        note(f"{label} {kind(name, params[name].requires_grad if name in params else None)}", e)
        check(e <= 1e-4, f"after step {s + 1}, {name}: rel L2 {e:.3g}")
        if lookahead is not None and name in lookahead:
            e = rel(ours["optimizer.lookahead." + name], lookahead[name])
            note(f"{label} lookahead averages", e)
            check(e <= 1e-4, f"after step {s + 1}, lookahead average of {name}: rel L2 {e:.3g}")


def recipe_steps(dump, dump_dir, recipe, new_model, init, names, acts_all):
    """Recipe mode's teacher-forced steps (see the docstring)."""
    xs, ys = dump["x"], dump["labels"]
    steps = xs.shape[0]
    T, K = recipe.total, recipe.per_epoch
    looks = [g for g in range(1, steps + 1) if g % AIRBENCH94["lookahead"] == 0]
    stop = recipe.bias_epochs * K  # the first 0-based step without the bias
    final = f"after step {T}" if T <= steps else "not reached"
    stops = f"from step {stop + 1}" if stop < steps else "not reached"
    print(f"torch_reference: recipe airbench94, {steps} of T = {T} steps, K = {K} per epoch, batch {xs.shape[1]}: "
          f"lookahead after steps {looks}, final full lookahead {final}, first-layer bias stops {stops}, "
          f"lr factor peaks (1.0) at step {recipe.peak + 1} of {T}")
    for s in range(steps):
        model = new_model().double()
        if s == 0:
            state, prev = init, None
        else:
            prev, _ = load_safetensors(os.path.join(dump_dir, f"state_{s}.safetensors"))
            state = {k: v for k, v in prev.items() if not k.startswith("optimizer.")}
        model.load_state_dict(state, strict=True)
        opt, sched = recipe.optimizer(model, s)
        ema = {k: v.clone() for k, v in model.state_dict().items()}
        if prev is not None:
            for name, p in model.named_parameters():
                if p.requires_grad:
                    opt.state[p]["momentum_buffer"] = prev["optimizer.momentum." + name].double().clone()
            for k, v in ema.items():
                if v.is_floating_point():
                    v.copy_(prev["optimizer.lookahead." + k].double())
        lrs = [g["lr"] for g in opt.param_groups]
        e_lr = abs(dump["sgd_lr"][s].item() - lrs[1]) / lrs[1]
        wd_other = opt.param_groups[1]["weight_decay"]
        e_wd = abs(dump["sgd_weight_decay"][s].item() - wd_other) / wd_other
        note("per-step lr and weight decay (non-batch-norm group)", max(e_lr, e_wd))
        check(e_lr <= 1e-6 and e_wd <= 1e-6,
              f"step {s + 1}: lr ours {dump['sgd_lr'][s].item():.8g}, recipe {lrs[1]:.8g}; weight decay ours "
              f"{dump['sgd_weight_decay'][s].item():.8g}, recipe {wd_other:.8g}")
        loss = recipe.step(model, opt, sched, ema, s, xs[s].double(), ys[s], acts_all[s])
        e = abs(dump["losses"][s].item() - loss) / loss
        note("teacher-forced step losses", e)
        check(e <= 1e-4, f"step {s + 1} loss: ours {dump['losses'][s].item():.7f}, PyTorch {loss:.7f}")
        ours, _ = load_safetensors(os.path.join(dump_dir, f"state_{s + 1}.safetensors"))
        expect_entries(ours, "optimizer.momentum.", names, f"after step {s + 1}, momentum buffers",
                       "trainable tensors")
        floats = sorted(k for k, v in model.state_dict().items() if v.is_floating_point())
        las = expect_entries(ours, "optimizer.lookahead.", floats, f"after step {s + 1}, lookahead averages",
                             "float tensors")
        check_state(ours, model, s, "teacher-forced",
                    lambda name, grad: "BN running stats" if "running" in name
                    else "frozen tensors" if name not in names
                    else "stopped first-layer bias" if not grad else "updated weights",
                    {name: ema[name] for name in las})
        params = dict(model.named_parameters())
        for name in names:
            p = params[name]
            if "optimizer.momentum." + name not in ours or "momentum_buffer" not in opt.state[p]:
                check(False, f"after step {s + 1}, no momentum buffer for {name}")
                continue
            e = rel(ours["optimizer.momentum." + name], opt.state[p]["momentum_buffer"])
            note("teacher-forced momentum buffers", e)
            check(e <= 1e-4, f"after step {s + 1}, momentum of {name}: rel L2 {e:.3g}")

    # Free-running drift against PyTorch float32, for information only.
    model = new_model()
    model.load_state_dict(init, strict=True)
    opt, sched = recipe.optimizer(model, 0)
    ema = {k: v.clone() for k, v in model.state_dict().items()}
    torch32 = np.array([recipe.step(model, opt, sched, ema, s, xs[s], ys[s]) for s in range(steps)])
    ours_l = dump["losses"].double().numpy()
    print(f"torch_reference: free-running {steps} steps (information): loss {ours_l[0]:.4f} -> {ours_l[-1]:.4f}, "
          f"largest relative difference from PyTorch float32 {np.max(np.abs(ours_l - torch32) / torch32):.3g}")


def main():
    global RECIPE
    dump_dir, data_dir, lr = sys.argv[1], sys.argv[2], float(sys.argv[3])
    torch.set_num_threads(2)
    dump, dump_meta = load_safetensors(os.path.join(dump_dir, "dump.safetensors"))
    init, meta = load_safetensors(os.path.join(dump_dir, "init.safetensors"))
    steps = dump["x"].shape[0]
    xs, ys = dump["x"], dump["labels"]
    check(meta.get("format") == "cifar10-dp", f"metadata format {meta.get('format')!r}")
    net = meta.get("model")
    if net not in NETWORKS:
        check(False, f"metadata model {net!r} is not a known network (known: {', '.join(NETWORKS)})")
        return tally.report()
    check(True, f"metadata model {net}")
    new_model = NETWORKS[net]
    print(f"torch_reference: network {net}")
    check(len(json.loads(meta["classes"])) == 10, "metadata classes")
    recipe_name = dump_meta.get("recipe", "")
    if recipe_name:
        if recipe_name != "airbench94":
            check(False, f"dump recipe {recipe_name!r} is not known (known: airbench94)")
            return tally.report()
        T, K = int(dump_meta["total_steps"]), int(dump_meta["steps_per_epoch"])
        check(float(dump_meta["learning_rate"]) == lr, f"dump learning rate {dump_meta['learning_rate']}, LR {lr}")
        check(int(dump_meta["batch"]) == xs.shape[1], f"dump batch {dump_meta['batch']}, x {xs.shape[1]}")
        check(T >= steps, f"total steps {T} >= {steps} steps")
        RECIPE = Recipe(lr, xs.shape[1], T, K, int(dump_meta["bias_epochs"]))

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

    # What the dump names: gradients of the trainable tensors, outputs of the decision layers.
    shape = new_model()
    names = [name for name, _ in trainable(shape)]
    grads = sorted(k[len("grad."):] for k in dump if k.startswith("grad."))
    dumped_ok = grads == sorted(names)
    check(dumped_ok, f"gradients dumped for {grads}, trainable tensors {sorted(names)}")
    want = sorted(decision_layers(shape))
    acts = [{k: v.double() for k, v in our_acts(dump, s).items()} for s in range(steps if RECIPE else min(steps, 2))]
    for s, a in enumerate(acts):
        dumped_ok &= sorted(a) == want
        check(sorted(a) == want, f"step {s + 1}: our layer outputs dumped for layers {sorted(a)}, want {want}")
    if not dumped_ok:  # another network's dump, or the wrong format: nothing below would be meaningful
        return tally.report()

    # 2. Step 1 from the common start: gradients, ours and PyTorch float32 vs float64.
    models = {}
    for kind in ("ours", "torch64", "torch32"):  # float64 with our decisions / its own; float32
        m = new_model()
        m.load_state_dict(init, strict=True)  # strict: raises on any missing/extra/mis-shaped tensor
        m = (m if kind == "torch32" else m.double()).train()
        x = xs[0] if kind == "torch32" else xs[0].double()
        loss = loss_fn(forward_following(m, x, acts[0] if kind == "ours" else None), ys[0])
        loss.backward()
        models[kind] = (m, loss.item())
    m64, loss64 = models["ours"]
    e = abs(dump["losses"][0].item() - loss64) / loss64
    note("step-1 loss", e)
    check(e <= 1e-4, f"step 1 loss relative error {e:.3g}")
    own64 = dict(models["torch64"][0].named_parameters())
    g32 = dict(models["torch32"][0].named_parameters())
    for name, p in trainable(m64):
        e, e32 = rel(dump["grad." + name], p.grad), rel(g32[name].grad, own64[name].grad)
        note("step-1 gradients", e)
        note("step-1 gradients of PyTorch float32 (for comparison, vs its own float64)", e32)
        e_own = rel(dump["grad." + name], own64[name].grad)
        note("step-1 gradients vs float64 with PyTorch's own decisions", e_own)
        # Near-ties move single elements (~1e-3 each); a wrong rule (say, the last maximum of a
        # window) would move thousands.
        check(e_own <= 1e-2, f"gradient {name} with PyTorch's own ReLU/max-pool decisions: rel L2 {e_own:.3g}")
        check(e <= 1e-4, f"gradient {name}: rel L2 {e:.3g} (PyTorch float32: {e32:.3g})")

    if RECIPE is not None:  # 3 and 4 for the recipe: every step in full
        recipe_steps(dump, dump_dir, RECIPE, new_model, init, names, acts)
    # 3. Steps 1 and 2 in full (step 1 from the initial weights, step 2 from our state after
    #    step 1), and every step's loss from our state before it.
    for s in range(steps if RECIPE is None else 0):
        model = new_model().double()
        opt = sgd(model, lr)
        if s == 0:
            model.load_state_dict(init, strict=True)
        else:
            prev, _ = load_safetensors(os.path.join(dump_dir, f"state_{s}.safetensors"))
            model.load_state_dict({k: v for k, v in prev.items() if not k.startswith("optimizer.")}, strict=True)
            for name, p in trainable(model):
                opt.state[p]["momentum_buffer"] = prev["optimizer.momentum." + name].double().clone()
        if s >= 2:  # loss only: a float64 forward in train mode (batch statistics)
            with torch.no_grad():
                loss = F.cross_entropy(model.train()(xs[s].double()), ys[s]).item()
        else:
            loss = step(model, opt, xs[s].double(), ys[s], acts[s])
        e = abs(dump["losses"][s].item() - loss) / loss
        note(f"teacher-forced losses of {steps} steps", e)
        check(e <= (1e-4 if s < 2 else 1e-3), f"step {s + 1} loss: ours {dump['losses'][s].item():.7f}, PyTorch {loss:.7f}")
        if s >= 2:
            continue
        ours, _ = load_safetensors(os.path.join(dump_dir, f"state_{s + 1}.safetensors"))
        expect_entries(ours, "optimizer.momentum.", names, f"after step {s + 1}, momentum buffers",
                       "trainable tensors")
        check_state(ours, model, s, f"step-{s + 1}",
                    lambda name, grad: "BN running stats" if "running" in name
                    else "frozen tensors" if not grad else "updated weights")
        for name, p in trainable(model):
            if "optimizer.momentum." + name not in ours:
                continue  # failed above
            e = rel(ours["optimizer.momentum." + name], opt.state[p]["momentum_buffer"])
            note(f"step-{s + 1} momentum buffers", e)
            check(e <= 1e-4, f"after step {s + 1}, momentum of {name}: rel L2 {e:.3g}")

    # 4. Free-running drift against PyTorch float32, for information only (see the docstring).
    if RECIPE is None:
        model = new_model()
        model.load_state_dict(init, strict=True)
        opt = sgd(model, lr)
        torch32 = np.array([step(model, opt, xs[s], ys[s]) for s in range(steps)])
        ours_l = dump["losses"].double().numpy()
        print(f"torch_reference: free-running {steps} steps (information): loss {ours_l[0]:.4f} -> {ours_l[-1]:.4f}, "
              f"largest relative difference from PyTorch float32 {np.max(np.abs(ours_l - torch32) / torch32):.3g}")

    # 5. Our final model file in PyTorch, eval mode: same logits as ours.
    final, _ = load_safetensors(os.path.join(dump_dir, "final.safetensors"))
    m2 = new_model()
    m2.load_state_dict(final, strict=True)
    m2 = m2.double().eval()
    with torch.no_grad():
        logits = m2(xs[0].double())
    e = rel(dump["eval_logits"], logits)
    note("final model eval logits", e)
    check(e <= 1e-4, f"final model eval logits: rel L2 {e:.3g}")
    for k, v in worst.items():
        print(f"torch_reference: worst {k}: {v:.3g}")
    return tally.report()


if __name__ == "__main__":
    sys.exit(main())
