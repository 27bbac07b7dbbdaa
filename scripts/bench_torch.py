#!/usr/bin/env python3
"""PyTorch side of `make bench` and scripts/gpu-check.sh: one full training step of a network on
random images, same batch and thread count as cifar10-bench; prints the median throughput of
several runs and a machine-readable last line. --model workshop-cnn (default): forward,
cross-entropy, backward, SGD update with momentum and weight decay. --model airbench94
(scripts/airbench_torch.py's network and optimizer): forward, label-smoothed cross-entropy summed
over the batch, backward, Nesterov SGD update with the recipe's two parameter groups at the
schedule's first step (lr x 0.2), the frozen whitening filter computed from the random batch.
--memory-format channels_last (default) holds images, activations and filters as NHWC, PyTorch's
faster layout for convolutions on the CPU (oneDNN) and on tensor cores; contiguous: NCHW.
--device cuda runs on the GPU (batch already on the device, PyTorch's defaults: TF32 for cuDNN
convolutions, FP32 matmuls); --compile adds torch.compile. --bf16 runs the forward and the loss
under torch.autocast(dtype=torch.bfloat16) (bf16 convolutions and matmuls with float32
accumulation, float32 weights and optimizer): PyTorch's mixed precision, the peer of
cifar10-bench --precision bf16. --deterministic keeps cuDNN to deterministic algorithms, as
ours does. --profile N: after the timing, N more steps under torch.profiler, and its table of
the operators that took the most device (or, on the CPU, CPU) time."""
import argparse
import statistics
import time

import torch
import torch.nn as nn


def workshop_cnn():
    return nn.Sequential(
        nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.BatchNorm2d(64),
        nn.Conv2d(64, 128, 3, padding=1), nn.ReLU(), nn.Conv2d(128, 128, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.BatchNorm2d(128),
        nn.Conv2d(128, 256, 3, padding=1), nn.ReLU(), nn.Conv2d(256, 256, 3, padding=1), nn.ReLU(),
        nn.MaxPool2d(2), nn.BatchNorm2d(256),
        nn.Flatten(), nn.Linear(4096, 512), nn.ReLU(), nn.Linear(512, 10))


def main():
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--model", default="workshop-cnn", choices=["workshop-cnn", "airbench94"])
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: PyTorch's)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--bf16", action="store_true", help="bf16 autocast of the forward and loss")
    p.add_argument("--memory-format", default="channels_last", choices=["channels_last", "contiguous"])
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--deterministic", action="store_true", help="deterministic cuDNN algorithms only")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="then N steps under torch.profiler")
    a = p.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    dev = torch.device(a.device)
    if a.model == "airbench94":
        import airbench_torch  # beside this file (it needs numpy too)
        model = airbench_torch.make_net()
        xent = airbench_torch.make_loss()

        def loss_fn(out, labels):
            return xent(out, labels).sum()
    else:
        model = workshop_cnn()
        loss_fn = nn.CrossEntropyLoss()
    x = (torch.rand(a.batch_size, 3, 32, 32) * 2 - 1).to(dev)
    y = torch.randint(0, 10, (a.batch_size,)).to(dev)
    if a.model == "airbench94":
        with torch.no_grad():  # the frozen whitening filter, of this batch
            model[0].weight.copy_(airbench_torch.whitening_filter(x.cpu()))
        model = model.to(dev)
        opt = airbench_torch.make_optimizer(model, a.batch_size)
        for group in opt.param_groups:
            group["lr"] *= 0.2  # the schedule's factor at step 0
    else:
        model = model.to(dev)
        opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    layout = torch.channels_last if a.memory_format == "channels_last" else torch.contiguous_format
    model = model.to(memory_format=layout)
    x = x.contiguous(memory_format=layout)
    if a.device == "cuda":
        torch.backends.cudnn.benchmark = True  # cuDNN picks algorithms, as ours does
        torch.backends.cudnn.deterministic = a.deterministic
    fwd = torch.compile(model) if a.compile else model

    def sync():
        if a.device == "cuda":
            torch.cuda.synchronize()

    def step():
        opt.zero_grad()
        with torch.autocast(device_type=a.device, dtype=torch.bfloat16, enabled=a.bf16):
            loss = loss_fn(fwd(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    sync()
    times = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        sync()
        times.append(time.perf_counter() - t0)
    ips = a.batch_size * a.steps / statistics.median(times)
    where = torch.cuda.get_device_name() if a.device == "cuda" else f"{torch.get_num_threads()} thread(s)"
    mode = ("torch.compile" if a.compile else "eager") + ", " + ("NHWC" if a.memory_format == "channels_last" else "NCHW")
    mode += ", bf16 autocast" if a.bf16 else ""
    mode += ", deterministic" if a.deterministic else ""
    net = "" if a.model == "workshop-cnn" else f", {a.model}"
    print(f"PyTorch {torch.__version__} ({mode}{net}): {where}, batch {a.batch_size}: "
          f"{ips:.1f} images/s (median of {a.runs} runs)")
    if a.profile:
        profile(step, sync, a.device, a.profile)
    print(f"result: images_per_s={ips:.1f}")


def profile(step, sync, device, steps):
    """steps more steps under torch.profiler; prints the operators by their own time."""
    from torch.profiler import ProfilerActivity
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(steps):
            step()
        sync()
    key = "self_device_time_total" if device == "cuda" else "self_cpu_time_total"
    print(f"torch.profiler, {steps} step(s), by {key}:")
    print(prof.key_averages().table(sort_by=key, row_limit=30))


if __name__ == "__main__":
    main()
