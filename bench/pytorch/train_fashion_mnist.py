#!/usr/bin/env python3
"""PyTorch peer for edp's Fashion-MNIST examples: the same model, data, normalisation, batch,
optimizer (SGD, Nesterov momentum 0.9, weight decay 5e-4) and LR schedule (linear warmup, then
cosine), timed the same way (training loop only, evaluation excluded). Prints one JSON line in
the examples' format. Optionally data-parallel with torch.distributed (gloo) when launched with
--ddp under torchrun-style environment variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

Runs with Debian's python3-torch 1.13 (/usr/bin/python3) and with a PyTorch 2.x from PyPI (the
virtual environment bench/cpu_vs_pytorch.sh makes). Threads: torch.set_num_threads(--threads), and
the caller sets OMP_NUM_THREADS / MKL_NUM_THREADS / OPENBLAS_NUM_THREADS to the same count. The test
set is evaluated once at the end in chunks of --eval-batch samples (256, as edp's train::evaluate).

--device cuda trains on the GPU. --bench-steps S times S steps (after --bench-warmup steps) on
synthetic batches uploaded from pinned host memory every step, reading the loss once per step:
the loop bench/gpu/bench_gpu.cpp runs in edp (bench/gpu/run.sh compares the two).

--model resnet18 is edp's cifar_resnet18 (examples/common/models.cpp), layer for layer, for the
GPU benchmark on 3x32x32 inputs; it has no data loader here (CIFAR-10 is not packaged for
Debian), so it runs only with --bench-steps."""
import argparse
import gzip
import json
import math
import os
import resource
import struct
import time
from collections import OrderedDict

import torch
import torch.nn as nn


def read_idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read()
    magic = struct.unpack(">I", raw[:4])[0]
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    data = torch.frombuffer(bytearray(raw[4 + 4 * ndim:]), dtype=torch.uint8)
    return data.reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    def find(kind):
        for name in (f"{prefix}-{kind}-idx{3 if kind == 'images' else 1}-ubyte.gz",
                     f"{prefix}-{kind}-idx{3 if kind == 'images' else 1}-ubyte"):
            p = os.path.join(data_dir, name)
            if os.path.exists(p):
                return p
        raise FileNotFoundError(f"{data_dir}: no {prefix} {kind} IDX file")
    x = read_idx(find("images")).float().div_(255.0).sub_(0.2860).div_(0.3530).unsqueeze(1)
    y = read_idx(find("labels")).long()
    return x, y


def mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def cnn():
    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
                         nn.Linear(3136, 128), nn.ReLU(), nn.Linear(128, 10))


class BasicBlock(nn.Module):
    """edp's nn::ResidualBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), 3x3 convs
    without bias, the shortcut the identity or conv1x1(stride, no bias)+BN when the shape changes."""

    def __init__(self, cin, cout, stride):
        super().__init__()
        self.main = nn.Sequential(OrderedDict([
            ("conv1", nn.Conv2d(cin, cout, 3, stride, 1, bias=False)), ("bn1", nn.BatchNorm2d(cout)),
            ("relu", nn.ReLU(inplace=True)),
            ("conv2", nn.Conv2d(cout, cout, 3, 1, 1, bias=False)), ("bn2", nn.BatchNorm2d(cout))]))
        self.shortcut = None
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(OrderedDict([
                ("conv", nn.Conv2d(cin, cout, 1, stride, 0, bias=False)), ("bn", nn.BatchNorm2d(cout))]))

    def forward(self, x):
        h = self.main(x)
        h += x if self.shortcut is None else self.shortcut(x)
        return torch.relu_(h)


def resnet18(num_classes=10):
    """edp's examples::cifar_resnet18: conv3x3(3->64, no bias)-BN-ReLU, four stages of two basic
    blocks (64, 128, 256, 512 channels; strides 1, 2, 2, 2), global average pool, linear(512->10)."""
    layers = [("conv1", nn.Conv2d(3, 64, 3, 1, 1, bias=False)), ("bn1", nn.BatchNorm2d(64)),
              ("relu", nn.ReLU(inplace=True))]
    cin = 64
    for stage, cout in enumerate([64, 128, 256, 512]):
        # edp's "layer1.0" etc.; a PyTorch module name cannot hold a dot.
        layers.append((f"layer{stage + 1}_0", BasicBlock(cin, cout, 1 if stage == 0 else 2)))
        layers.append((f"layer{stage + 1}_1", BasicBlock(cout, cout, 1)))
        cin = cout
    layers += [("pool", nn.AdaptiveAvgPool2d(1)), ("flatten", nn.Flatten()), ("fc", nn.Linear(512, num_classes))]
    return nn.Sequential(OrderedDict(layers))


def build(name):
    return {"mlp": mlp, "cnn": cnn, "resnet18": resnet18}[name]()


def model_name(name):
    return "cifar_resnet18" if name == "resnet18" else f"fashion_mnist_{name}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn", "resnet18"], default="cnn")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--warmup-steps", type=int, default=100)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--eval-batch", type=int, default=256, help="test-set evaluation chunk")
    ap.add_argument("--ddp", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--tf32", type=int, default=1, help="TF32 matmul/conv on the GPU (edp's default)")
    ap.add_argument("--bench-steps", type=int, default=0, help="time this many steps on synthetic data")
    ap.add_argument("--bench-warmup", type=int, default=20)
    a = ap.parse_args()
    if a.bench_steps:
        return bench(a)
    if a.model == "resnet18":
        ap.error("--model resnet18 trains only on synthetic batches here (CIFAR-10 is not packaged "
                 "for Debian): give --bench-steps N")

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rank, world = 0, 1
    if a.ddp:
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank, world = dist.get_rank(), dist.get_world_size()

    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "test")
    if a.limit:
        xtr, ytr = xtr[:a.limit], ytr[:a.limit]
    device = torch.device(a.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = bool(a.tf32)
        torch.backends.cudnn.allow_tf32 = bool(a.tf32)
        torch.backends.cudnn.benchmark = True
    model = build(a.model).to(device)
    if a.ddp:
        model = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    loss_fn = nn.CrossEntropyLoss()

    n = xtr.shape[0]
    shard = n // world  # each rank its own contiguous share of a shared permutation
    steps_per_epoch = math.ceil(shard / a.batch)
    total = steps_per_epoch * a.epochs
    warm = min(a.warmup_steps, total)

    def lr_at(step):
        base = 0.5 * a.lr * (1 + math.cos(math.pi * min(step, total) / total))
        return base * (step + 1) / warm if step < warm else base

    step, seen, train_s, last_loss = 0, 0, 0.0, 0.0
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed + epoch)
        perm = torch.randperm(n, generator=g)[rank * shard:(rank + 1) * shard]
        model.train()
        t0 = time.perf_counter()
        loss_sum, count = 0.0, 0
        for i in range(0, shard, a.batch):
            idx = perm[i:i + a.batch]
            xb, yb = xtr[idx].to(device, non_blocking=True), ytr[idx].to(device, non_blocking=True)
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            step += 1
            loss_sum += loss.item() * len(idx)
            count += len(idx)
        train_s += time.perf_counter() - t0
        seen += count
        last_loss = loss_sum / max(count, 1)

    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, xte.shape[0], a.eval_batch):
            chunk = slice(i, i + a.eval_batch)
            correct += (model(xte[chunk].to(device)).argmax(1).cpu() == yte[chunk]).sum().item()
    if rank == 0:
        print(json.dumps({
            "model": f"fashion_mnist_{a.model}", "impl": "pytorch", "torch": torch.__version__,
            "world_size": world, "threads": a.threads, "intra_op_threads": torch.get_num_threads(),
            "batch": a.batch, "epochs": a.epochs,
            "samples_per_s": round(seen * world / train_s, 1), "test_acc": round(correct / xte.shape[0], 4),
            "final_loss": round(last_loss, 4), "train_seconds": round(train_s, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}))
    if a.ddp:
        torch.distributed.destroy_process_group()


def bench(a):
    """Training throughput on synthetic batches (the values do not change the work)."""
    device = torch.device(a.device)
    torch.manual_seed(a.seed)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = bool(a.tf32)
        torch.backends.cudnn.allow_tf32 = bool(a.tf32)
        torch.backends.cudnn.benchmark = True
    else:
        torch.set_num_threads(a.threads)
    model = build(a.model).to(device)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    loss_fn = nn.CrossEntropyLoss()
    pin = device.type == "cuda"
    sample = (3, 32, 32) if a.model == "resnet18" else (1, 28, 28)
    xs = [torch.randn(a.batch, *sample) for _ in range(16)]
    ys = [torch.randint(0, 10, (a.batch,)) for _ in range(16)]
    if pin:
        xs = [x.pin_memory() for x in xs]
        ys = [y.pin_memory() for y in ys]

    def step(i):
        xb = xs[i % 16].to(device, non_blocking=True)
        yb = ys[i % 16].to(device, non_blocking=True)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        return loss.item()

    for i in range(a.bench_warmup):
        step(i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    last = 0.0
    for i in range(a.bench_steps):
        last = step(a.bench_warmup + i)
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    print(json.dumps({
        "model": model_name(a.model), "impl": "pytorch", "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "parameters": params, "batch": a.batch, "steps": a.bench_steps, "warmup": a.bench_warmup,
        "samples_per_s": round(a.bench_steps * a.batch / secs, 1),
        "step_ms": round(1e3 * secs / a.bench_steps, 4), "final_loss": round(last, 4), "tf32": bool(a.tf32)}))


if __name__ == "__main__":
    main()
