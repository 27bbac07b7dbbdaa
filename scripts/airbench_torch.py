#!/usr/bin/env python3
"""airbench94 in PyTorch, CPU float32: the side-by-side reference for our C trainer's recipe.

usage: airbench_torch.py [flags] DATADIR

DATADIR holds the official CIFAR-10 binary batches (data_batch_1..5.bin, test_batch.bin), read
with numpy. The recipe is that of K. Jordan, "94% on CIFAR-10 in 3.29 Seconds on a Single GPU"
(2024), github.com/KellerJordan/cifar10-airbench legacy/airbench94.py, here in float32 on the CPU
(the paper: float16 on a GPU):
  network   0 Conv(3, 24, 2x2, bias) 1 GELU 2..4 ConvGroup(24->64, 64->256, 256->256)
            5 MaxPool2d(3) 6 Flatten 7 Linear(256, 10, no bias) 8 x 1/9; ConvGroup = conv1 (3x3,
            no bias) pool (MaxPool2d(2)) norm1 GELU conv2 norm2 GELU; BatchNorm eps 1e-12,
            momentum 0.4, weight frozen at 1; every conv starts as PyTorch's default with its
            bias at 0 and its first C_in outputs Dirac (identity)
  whitening 0.weight (frozen): the eigenvectors of the uncentred covariance of the 2x2 patches
            of the first 5000 normalised training images (float64 eigh), each divided by
            sqrt(eigenvalue + 5e-4), then their negations; 0.bias trains for 3 epochs
  data      normalised by mean (0.4914, 0.4822, 0.4465), std (0.2470, 0.2435, 0.2616); every
            image flipped at random once, then the whole set mirrored on odd epochs (alternating
            flip); reflect padding 2 and a random 32x32 crop each epoch; a new permutation each
            epoch, the last partial batch dropped
  optimizer batch 1024, 9.9 epochs (ceil(48 x 9.9) = 476 steps); SGD, Nesterov, momentum 0.85,
            lr = 11.5 / (1024 (1 + 1 / (1 - 0.85))), wd = 0.0153 x batch / (1024 (1 + 1 / (1 -
            0.85))); BatchNorm biases at lr x 64 with weight decay wd / (lr x 64), the rest at lr
            with weight decay wd / lr; LambdaLR: linear 0.2 -> 1 over the first int(0.23 x
            steps) steps, then 1 -> 0.07; loss: label-smoothed (0.2) cross-entropy, summed
  lookahead every 5 steps: every float state_dict tensor p (BatchNorm statistics and frozen
            tensors included) with its average a: a.lerp_(p, 1 - d); p.copy_(a), d = 0.95^5 x
            (step / steps)^3; a final one with d = 1 after the last step. As in the paper the
            averages are taken before the whitening filter is computed (0.weight's first average
            is then the random init, which moves the filter by ~1e-6 at step 5)
  eval      after every epoch (no test-time augmentation; --no-eval skips it), then once with
            TTA level 2: 0.5 x the mirror average of the plain view + 0.5 x the mean of the mirror
            averages of the two 1-pixel translations (reflect padding 1, crops [0:32, 0:32] and
            [2:34, 2:34])
Timing as the paper's: seconds = whitening + training epochs (data augmentation included) + the
final TTA evaluation; the per-epoch evaluations are not counted. Reading the files is not counted.

--max-steps N stops after N steps, for timing only: no evaluation; step_seconds is the mean step
time without the first step (warm-up), extrapolated_seconds the full run's whitening + training
from the measured parts (whitening, first epoch's data preparation, first step, mean step; later
epochs' data preparation counted as the first epoch's crop), without the final TTA evaluation.

Output: one line per epoch, then a machine-readable last line (accuracies in percent):
  result: tta_accuracy=A accuracy=A seconds=S train_seconds=S tta_seconds=S steps=N torch=V threads=N
(accuracy: the plain view, from the same final evaluation), with --max-steps:
  result: tta_accuracy=nan accuracy=nan seconds=S steps=N torch=V threads=N step_seconds=S extrapolated_seconds=S
Deterministic for a given --seed and thread count (one torch.manual_seed for everything)."""
import argparse
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

CIFAR_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR_STD = (0.2470, 0.2435, 0.2616)
RECORD = 1 + 3 * 32 * 32
# legacy/airbench94.py's hyp
LR, MOMENTUM, WEIGHT_DECAY, BIAS_SCALER = 11.5, 0.85, 0.0153, 64.0
LABEL_SMOOTHING, WHITEN_BIAS_EPOCHS, TRANSLATE = 0.2, 3, 2
WIDTHS, BN_MOMENTUM, SCALE = (64, 256, 256), 0.6, 1 / 9
WHITEN_EPS, LOOKAHEAD_EVERY, EVAL_CHUNK = 5e-4, 5, 1000


def prog():
    return os.path.basename(sys.argv[0])


class DataError(Exception):
    pass


# ---------------------------------------------------------------- data

def read_batches(datadir, names):
    """uint8 images [N, 3, 32, 32] and int64 labels [N] from official CIFAR-10 binary files."""
    parts = []
    for name in names:
        path = os.path.join(datadir, name)
        try:
            raw = np.fromfile(path, dtype=np.uint8)
        except OSError as exc:
            raise DataError(f"{path}: {exc.strerror or exc}") from None
        if raw.size == 0 or raw.size % RECORD:
            raise DataError(f"{path}: {raw.size} bytes, not a whole number of {RECORD}-byte records")
        parts.append(raw.reshape(-1, RECORD))
    raw = np.concatenate(parts)
    if raw[:, 0].max() > 9:
        raise DataError(f"{datadir}: label {raw[:, 0].max()} out of range 0..9")
    images = torch.from_numpy(np.ascontiguousarray(raw[:, 1:]).reshape(-1, 3, 32, 32))
    return images, torch.from_numpy(raw[:, 0].astype(np.int64))


def normalize(images):
    mean = torch.tensor(CIFAR_MEAN).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR_STD).view(1, 3, 1, 1)
    return (images.float() / 255 - mean) / std


def random_flip(images):
    """Each image mirrored left-right with probability 1/2."""
    mask = (torch.rand(len(images)) < 0.5).view(-1, 1, 1, 1)
    return torch.where(mask, images.flip(-1), images)


def random_crop(padded, size):
    """A size x size window of each image at a uniformly random offset (each of the
    (pad + 1)^2 offsets copied as one block per image set)."""
    n, span = len(padded), padded.shape[-1] - size + 1
    offsets = torch.randint(0, span, (n, 2))
    out = torch.empty(n, padded.shape[1], size, size, dtype=padded.dtype)
    for dy in range(span):
        rows = offsets[:, 0] == dy
        for dx in range(span):
            idx = torch.nonzero(rows & (offsets[:, 1] == dx)).flatten()
            if len(idx):
                out[idx] = padded[idx, :, dy:dy + size, dx:dx + size]
    return out


class TrainLoader:
    """legacy/airbench94.py's CifarLoader for training: on the first epoch the images are
    normalised, each flipped at random and reflect-padded; every epoch takes random crops, mirrors
    them all on odd epochs and yields a random permutation in batches (drop_last)."""

    def __init__(self, images, labels, batch_size):
        self.images, self.labels, self.batch_size = images, labels, batch_size
        self.padded = None
        self.epoch = 0
        self.crop_seconds = 0.0

    def __len__(self):
        return len(self.images) // self.batch_size

    def __iter__(self):
        if self.epoch == 0:
            self.padded = F.pad(random_flip(normalize(self.images)), (TRANSLATE,) * 4, mode="reflect")
        t0 = time.perf_counter()
        images = random_crop(self.padded, 32)
        if self.epoch % 2 == 1:
            images = images.flip(-1)
        self.epoch += 1
        order = torch.randperm(len(images))
        self.crop_seconds = time.perf_counter() - t0
        for i in range(len(self)):
            idx = order[i * self.batch_size:(i + 1) * self.batch_size]
            yield images[idx], self.labels[idx]


# ---------------------------------------------------------------- network

class Conv(nn.Conv2d):
    """The paper's Conv: PyTorch's default init, then bias 0 and the first C_in outputs as
    identities (dirac_)."""

    def __init__(self, cin, cout, kernel_size=3, padding=1, bias=False):
        super().__init__(cin, cout, kernel_size=kernel_size, padding=padding, bias=bias)

    def reset_parameters(self):
        super().reset_parameters()
        if self.bias is not None:
            self.bias.data.zero_()
        w = self.weight.data
        nn.init.dirac_(w[:w.size(1)])


class BatchNorm(nn.BatchNorm2d):
    def __init__(self, channels):
        super().__init__(channels, eps=1e-12, momentum=1 - BN_MOMENTUM)
        self.weight.requires_grad = False  # stays 1


class ConvGroup(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.conv1 = Conv(cin, cout)
        self.pool = nn.MaxPool2d(2)
        self.norm1 = BatchNorm(cout)
        self.conv2 = Conv(cout, cout)
        self.norm2 = BatchNorm(cout)
        self.activ = nn.GELU()

    def forward(self, x):
        x = self.activ(self.norm1(self.pool(self.conv1(x))))
        return self.activ(self.norm2(self.conv2(x)))


class Mul(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x):
        return x * self.scale


def make_net():
    """state_dict keys 0.weight, 0.bias, {2,3,4}.{conv1,norm1,conv2,norm2}.*, 7.weight: ours."""
    w1, w2, w3 = WIDTHS
    net = nn.Sequential(
        Conv(3, 24, kernel_size=2, padding=0, bias=True), nn.GELU(),
        ConvGroup(24, w1), ConvGroup(w1, w2), ConvGroup(w2, w3),
        nn.MaxPool2d(3), nn.Flatten(), nn.Linear(w3, 10, bias=False), Mul(SCALE))
    net[0].weight.requires_grad = False
    # NHWC, as the paper's code: PyTorch's CPU (oneDNN) convolutions run it about 1.4x faster
    # than NCHW at batch 512 on 2 cores (scripts/bench_torch.py --memory-format).
    return net.to(memory_format=torch.channels_last)


def whitening_filter(images, eps=WHITEN_EPS):
    """The [24, 3, 2, 2] whitening filter of normalised images [N, 3, 32, 32]: eigh (float64) of
    the uncentred covariance of all 2x2 patches, eigenvectors by decreasing eigenvalue, each over
    sqrt(eigenvalue + eps), then their negations."""
    cov = torch.zeros(12, 12, dtype=torch.float64)
    count = 0
    for chunk in images.split(500):
        patches = F.unfold(chunk.double(), kernel_size=2).transpose(1, 2).reshape(-1, 12)  # (c, y, x) order
        cov += patches.T @ patches
        count += len(patches)
    eigenvalues, eigenvectors = torch.linalg.eigh(cov / count, UPLO="U")
    eigenvalues, eigenvectors = eigenvalues.flip(0), eigenvectors.T.flip(0)
    scaled = (eigenvectors / torch.sqrt(eigenvalues + eps).view(-1, 1)).view(12, 3, 2, 2)
    return torch.cat((scaled, -scaled)).float()


# ---------------------------------------------------------------- optimizer

def hyperparameters(batch_size):
    """PyTorch SGD's lr and decoupled weight decay (the paper's 'per 1024 images' units)."""
    kilostep_scale = 1024 * (1 + 1 / (1 - MOMENTUM))
    return LR / kilostep_scale, WEIGHT_DECAY * batch_size / kilostep_scale


def make_optimizer(model, batch_size):
    lr, wd = hyperparameters(batch_size)
    lr_biases = lr * BIAS_SCALER
    named = [(k, p) for k, p in model.named_parameters() if p.requires_grad]
    norm_biases = [p for k, p in named if "norm" in k]
    others = [p for k, p in named if "norm" not in k]
    return torch.optim.SGD([dict(params=norm_biases, lr=lr_biases, weight_decay=wd / lr_biases),
                            dict(params=others, lr=lr, weight_decay=wd / lr)], momentum=MOMENTUM, nesterov=True)


def make_loss():
    return nn.CrossEntropyLoss(label_smoothing=LABEL_SMOOTHING, reduction="none")


class Lookahead:
    def __init__(self, model):
        self.averages = {k: v.clone() for k, v in model.state_dict().items()}

    @torch.no_grad()
    def update(self, model, decay):
        for k, p in model.state_dict().items():
            if p.dtype in (torch.float16, torch.float32, torch.float64):
                self.averages[k].lerp_(p, 1 - decay)
                p.copy_(self.averages[k])


# ---------------------------------------------------------------- evaluation

@torch.no_grad()
def evaluate(model, images, labels, tta):
    """Accuracy in percent of the plain view and, with tta, of TTA level 2 (the plain view's
    logits come out of the mirror average for free)."""
    model.eval()
    plain_hits = tta_hits = 0
    for x, y in zip(images.split(EVAL_CHUNK), labels.split(EVAL_CHUNK)):
        x = x.contiguous(memory_format=torch.channels_last)
        plain = model(x)
        plain_hits += int((plain.argmax(1) == y).sum())
        if not tta:
            continue

        def mirror(v, first=None):
            return 0.5 * (model(v) if first is None else first) + 0.5 * model(v.flip(-1))
        padded = F.pad(x, (1,) * 4, mode="reflect")
        translated = torch.stack([mirror(padded[:, :, 0:32, 0:32]), mirror(padded[:, :, 2:34, 2:34])]).mean(0)
        logits = 0.5 * mirror(x, plain) + 0.5 * translated
        tta_hits += int((logits.argmax(1) == y).sum())
    return 100.0 * plain_hits / len(labels), 100.0 * tta_hits / len(labels)


# ---------------------------------------------------------------- training

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("datadir")
    p.add_argument("--seed", type=int, default=0, help="torch.manual_seed (default 0)")
    p.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (default: PyTorch's)")
    p.add_argument("--epochs", type=float, default=9.9, help="epochs, fractions allowed (default 9.9)")
    p.add_argument("--batch-size", type=int, default=1024, help="default 1024")
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps, for timing only (see above)")
    p.add_argument("--no-eval", action="store_true", help="skip the per-epoch evaluations")
    p.add_argument("--whiten-images", type=int, default=5000,
                   help="the whitening filter's images, the first N of the training set (default 5000)")
    a = p.parse_args()
    for flag, value, low in (("--threads", a.threads, 0), ("--batch-size", a.batch_size, 1),
                             ("--max-steps", a.max_steps, 0), ("--whiten-images", a.whiten_images, 1)):
        if value < low:
            p.error(f"{flag} must be >= {low}")
    if not (a.epochs > 0 and math.isfinite(a.epochs)):
        p.error("--epochs must be > 0")
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        train_images, train_labels = read_batches(a.datadir, [f"data_batch_{i}.bin" for i in range(1, 6)])
        test_images, test_labels = read_batches(a.datadir, ["test_batch.bin"])
    except DataError as exc:
        print(f"{prog()}: {exc}", file=sys.stderr)
        return 1
    torch.manual_seed(a.seed)
    loader = TrainLoader(train_images, train_labels, a.batch_size)
    if len(loader) == 0:
        print(f"{prog()}: --batch-size {a.batch_size} exceeds the {len(train_images)} training images", file=sys.stderr)
        return 2
    test_x = normalize(test_images)
    total_steps = math.ceil(len(loader) * a.epochs)
    epochs = math.ceil(a.epochs)
    cut = 0 < a.max_steps < total_steps
    lr, wd = hyperparameters(a.batch_size)
    whiten_n = min(a.whiten_images, len(train_images))
    threads = torch.get_num_threads()
    print(f"airbench94, PyTorch {torch.__version__}, CPU float32, {threads} thread(s), seed {a.seed}")
    print(f"{len(train_images)} training images, {len(test_images)} test images; {len(loader)} steps per epoch of "
          f"{a.batch_size}, {a.epochs:g} epochs = {total_steps} steps"
          + (f" (stopping after {a.max_steps})" if cut else ""))
    print(f"SGD lr {lr:.6g} (BatchNorm biases x {BIAS_SCALER:g}), weight decay {wd:.6g}, Nesterov momentum {MOMENTUM}; "
          f"whitening filter of the first {whiten_n} training images, 0.bias trains for {WHITEN_BIAS_EPOCHS} epochs")

    model = make_net()
    optimizer = make_optimizer(model, a.batch_size)
    warmup = int(0.23 * total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: float(np.interp(step, [0, warmup, total_steps], [0.2, 1.0, 0.07])))
    loss_fn = make_loss()
    lookahead = Lookahead(model)  # before the whitening filter, as the paper's code

    t0 = time.perf_counter()
    with torch.no_grad():
        model[0].weight.copy_(whitening_filter(normalize(train_images[:whiten_n])))
    whiten_seconds = time.perf_counter() - t0
    train_seconds = whiten_seconds
    step = 0
    first_step_end = first_step_seconds = prep_seconds = None
    for epoch in range(epochs):
        model[0].bias.requires_grad = epoch < WHITEN_BIAS_EPOCHS
        model.train()
        t0 = time.perf_counter()
        batches = iter(loader)
        for inputs, labels in batches:
            if prep_seconds is None:
                prep_seconds = time.perf_counter() - t0  # the first epoch's normalise, flip, pad, crop
            outputs = model(inputs.contiguous(memory_format=torch.channels_last))
            loss = loss_fn(outputs, labels).sum()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            scheduler.step()
            step += 1
            if step % LOOKAHEAD_EVERY == 0:
                lookahead.update(model, 0.95 ** 5 * (step / total_steps) ** 3)
            if step >= total_steps:
                lookahead.update(model, 1.0)
            if step == 1:
                first_step_end = time.perf_counter()
                first_step_seconds = first_step_end - t0 - prep_seconds
            if step >= total_steps or (cut and step >= a.max_steps):
                break
        now = time.perf_counter()
        train_seconds += now - t0
        train_acc = 100.0 * float((outputs.detach().argmax(1) == labels).float().mean())
        train_loss = loss.item() / len(labels)
        if cut and step >= a.max_steps:
            step_seconds = (now - first_step_end) / (step - 1) if step > 1 else first_step_seconds
            extrapolated = (whiten_seconds + prep_seconds + (epochs - 1) * loader.crop_seconds
                            + first_step_seconds + (total_steps - 1) * step_seconds)
            print(f"stopped after step {step} of {total_steps} (epoch {epoch + 1}): train loss {train_loss:.4f}, "
                  f"train accuracy {train_acc:.2f}%; whitening {whiten_seconds:.2f} s, first epoch's data "
                  f"{prep_seconds:.2f} s, first step {first_step_seconds:.2f} s, then {step_seconds:.3f} s per step")
            print(f"extrapolated: {total_steps} steps, {epochs} epochs: {extrapolated:.1f} s "
                  f"(whitening + training, without the final TTA evaluation)")
            print(f"result: tta_accuracy=nan accuracy=nan seconds={train_seconds:.3f} steps={step} "
                  f"torch={torch.__version__} threads={threads} step_seconds={step_seconds:.4f} "
                  f"extrapolated_seconds={extrapolated:.1f}")
            return 0
        test = "-"
        if not a.no_eval:
            test = f"{evaluate(model, test_x, test_labels, tta=False)[0]:.2f}%"
        print(f"epoch {epoch + 1}/{epochs}: train loss {train_loss:.4f}, train accuracy {train_acc:.2f}%, "
              f"test accuracy {test}, {now - t0:.2f} s, total {train_seconds:.2f} s", flush=True)

    t0 = time.perf_counter()
    accuracy, tta_accuracy = evaluate(model, test_x, test_labels, tta=True)
    tta_seconds = time.perf_counter() - t0
    seconds = train_seconds + tta_seconds
    print(f"final test accuracy {tta_accuracy:.2f}% with test-time augmentation (level 2), {accuracy:.2f}% without; "
          f"{seconds:.2f} s (whitening {whiten_seconds:.2f} s, training {train_seconds - whiten_seconds:.2f} s, "
          f"TTA evaluation {tta_seconds:.2f} s)")
    print(f"result: tta_accuracy={tta_accuracy:.2f} accuracy={accuracy:.2f} seconds={seconds:.3f} "
          f"train_seconds={train_seconds:.3f} tta_seconds={tta_seconds:.3f} steps={step} "
          f"torch={torch.__version__} threads={threads}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
