#!/usr/bin/env python3
"""PyTorch peer of bench/zero/zero.cpp: the same GPT (train_gpt.py's), trained data-parallel on the
CPU by N processes (gloo) with DistributedDataParallel, the AdamW state sharded by
torch.distributed.optim.ZeroRedundancyOptimizer (--zero 1) or not (--zero 0); random tokens; one
thread per process. Prints one JSON line like edp_bench_zero's: the largest optimizer-state bytes
and peak RSS over the ranks and the slowest rank's median step time.
  zero_gpt.py --ranks 2 --zero 1 [--layers 4 --dim 256 --heads 4 --context 128 --batch 8 --steps 20]"""
import argparse
import json
import os
import resource
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_gpt import GPT  # noqa: E402


def state_bytes(opt):
    inner = opt.optim if isinstance(opt, ZeroRedundancyOptimizer) else opt
    return sum(t.numel() * t.element_size() for s in inner.state.values() for t in s.values()
               if torch.is_tensor(t) and t.dim() > 0)


def worker(rank, a, init, out):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=a.ranks)
    torch.manual_seed(1)
    model = GPT(256, a.context, a.layers, a.dim, a.heads)
    net = DDP(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    other = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": 0.1}, {"params": other, "weight_decay": 0.0}]
    if a.zero:
        opt = ZeroRedundancyOptimizer(decay, optimizer_class=torch.optim.AdamW, lr=3e-4, weight_decay=0.1)
        opt.add_param_group({"params": other, "weight_decay": 0.0})
    else:
        opt = torch.optim.AdamW(groups, lr=3e-4)
    g = torch.Generator().manual_seed(7 + rank)
    times = []
    for s in range(a.warmup + a.steps):
        x = torch.randint(0, 256, (a.batch, a.context), generator=g)
        y = torch.randint(0, 256, (a.batch, a.context), generator=g)
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(net(x).view(-1, 256), y.view(-1))
        loss.backward()
        opt.step()
        if s >= a.warmup:
            times.append(time.perf_counter() - t0)
    times.sort()
    med = times[len(times) // 2]
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    vals = torch.tensor([float(state_bytes(opt)), float(rss), med], dtype=torch.float64)
    dist.all_reduce(vals, op=dist.ReduceOp.MAX)
    if rank == 0:
        params = sum(p.numel() for p in model.parameters())
        with open(out, "w") as f:
            f.write(json.dumps({"bench": "zero", "impl": "pytorch", "torch": torch.__version__, "zero": a.zero,
                                "ranks": a.ranks, "threads": 1, "parameters": params, "batch_per_rank": a.batch,
                                "steps": a.steps, "optimizer_state_mib_per_rank": vals[0].item() / 1048576,
                                "peak_rss_mib_per_rank": vals[1].item() / 1048576, "step_ms": vals[2].item() * 1e3}))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--zero", type=int, choices=[0, 1], default=1)
    for k, v in (("layers", 4), ("dim", 256), ("heads", 4), ("context", 128), ("batch", 8), ("steps", 20), ("warmup", 3)):
        ap.add_argument("--" + k, type=int, default=v)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "result.json")
        mp.spawn(worker, args=(a, "file://" + os.path.join(d, "rendezvous"), out), nprocs=a.ranks)
        print(open(out).read())


if __name__ == "__main__":
    main()
