#!/usr/bin/env python3
"""PyTorch side of `make bench`: the workshop CNN, one full training step (forward, backward,
SGD update with momentum and weight decay) on random images, same batch and thread count as
cifar10-bench; prints the median throughput of several runs and a machine-readable last line."""
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
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--runs", type=int, default=5)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1)
    model = workshop_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(a.batch_size, 3, 32, 32) * 2 - 1
    y = torch.randint(0, 10, (a.batch_size,))

    def step():
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    times = []
    for _ in range(a.runs):
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        times.append(time.perf_counter() - t0)
    ips = a.batch_size * a.steps / statistics.median(times)
    print(f"PyTorch {torch.__version__}: {a.threads} thread(s), batch {a.batch_size}: "
          f"{ips:.1f} images/s (median of {a.runs} runs)")
    print(f"result: images_per_s={ips:.1f}")


if __name__ == "__main__":
    main()
