#!/usr/bin/env python3
"""PyTorch peer for edp's examples/gpt_text.cpp: the same GPT (pre-norm GPT-2 layout, exact GELU,
LayerNorm eps 1e-5, tied output projection, N(0, 0.02) weights with the residual projections at
0.02/sqrt(2*layers), zero biases), the same data (the token files of scripts/prepare_text_corpus.sh,
windows of --context tokens at stride --context, shuffled per epoch, --batch windows per step), the
same optimizer (AdamW, decay on the 2-D tensors only: not biases or LayerNorms), LR schedule
(linear warmup, then cosine to 0 at the end of the epoch), clipping (global norm 1.0) and
evaluation (the first --eval-windows validation windows, in order). Attention is
torch.nn.functional.scaled_dot_product_attention(is_causal=True), PyTorch's fused CPU kernel.
--bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), the usual mixed
precision on a CPU. Timed like edp: the steps after the first 3. Prints one JSON line."""
import argparse
import json
import math
import resource
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def tokens(path):
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"EDPTOK01", f"{path}: not a token file"
    width, vocab, count = np.frombuffer(head[8:16], "<u4").tolist() + [int(np.frombuffer(head[16:24], "<u8")[0])]
    dt = {1: np.uint8, 2: "<u2", 4: "<u4"}[width]
    return np.memmap(path, dtype=dt, mode="r", offset=24, shape=(count,)), vocab


class Block(nn.Module):
    def __init__(self, d, heads, layers):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc1, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        for lin, std in ((self.qkv, 0.02), (self.proj, 0.02 / math.sqrt(2 * layers)), (self.fc1, 0.02),
                         (self.fc2, 0.02 / math.sqrt(2 * layers))):
            nn.init.normal_(lin.weight, 0.0, std)
            nn.init.zeros_(lin.bias)

    def forward(self, x):
        B, T, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(B, T, 3, self.heads, D // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
        x = x + self.proj(a)
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab, context, layers, d, heads):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, d), nn.Embedding(context, d)
        nn.init.normal_(self.wte.weight, 0.0, 0.02)
        nn.init.normal_(self.wpe.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(d, heads, layers) for _ in range(layers))
        self.ln_f = nn.LayerNorm(d)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for b in self.blocks:
            x = b(x)
        return F.linear(self.ln_f(x), self.wte.weight)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=".cache/corpus")
    for k, v in (("layers", 4), ("dim", 256), ("heads", 4), ("context", 128), ("batch", 16), ("steps", 0),
                 ("warmup-steps", 50), ("threads", 1), ("seed", 1337), ("eval-windows", 256)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta2", type=float, default=0.99)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--device", default="cpu", help="cpu or cuda")
    ap.add_argument("--tf32", type=int, default=1, help="TF32 matrix products on the GPU (edp's default)")
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = bool(a.tf32)
        torch.backends.cudnn.allow_tf32 = bool(a.tf32)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train, vocab = tokens(a.data + "/train.tok")
    val, _ = tokens(a.data + "/val.tok")
    T, B = a.context, a.batch
    n_train = (len(train) - T - 1) // T + 1
    n_val = (len(val) - T - 1) // T + 1
    model = GPT(vocab, T, a.layers, a.dim, a.heads).to(dev)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    total = (n_train + B - 1) // B  # one epoch, cosine to 0 at its end (edp's schedule)
    warm = min(a.warmup_steps, total)
    steps = a.steps if a.steps > 0 else total

    def lr_at(s):
        base = a.lr * 0.5 * (1 + math.cos(math.pi * min(s, total) / total))
        return base * (s + 1) / warm if s < warm else base

    def windows(src, idx):
        x = np.stack([np.asarray(src[i * T:i * T + T + 1], dtype=np.int64) for i in idx])
        return torch.from_numpy(x[:, :-1]).to(dev), torch.from_numpy(x[:, 1:]).to(dev)

    order = np.random.default_rng(a.seed).permutation(n_train)
    amp = torch.autocast(dev.type, dtype=torch.bfloat16) if a.bf16 else torch.autocast(dev.type, enabled=False)
    t0, timed_tokens, loss_v = None, 0, 0.0
    for s in range(steps):
        if s == 3:
            t0 = time.perf_counter()
        x, y = windows(train, order[s * B:(s + 1) * B])
        for g in opt.param_groups:
            g["lr"] = lr_at(s)
        with amp:
            logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, vocab), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if a.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), a.clip)
        opt.step()
        loss_v = loss.item()
        if s >= 3:
            timed_tokens += x.numel()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    secs = time.perf_counter() - t0 if t0 else 0.0
    model.eval()
    n = min(a.eval_windows, n_val) if a.eval_windows > 0 else n_val
    tot, cnt = 0.0, 0
    with torch.no_grad(), amp:
        for first in range(0, n, B):
            idx = range(first, min(first + B, n))
            x, y = windows(val, idx)
            tot += F.cross_entropy(model(x).float().view(-1, vocab), y.reshape(-1), reduction="sum").item()
            cnt += y.numel()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({"model": "gpt_text", "framework": "torch", "torch": torch.__version__, "layers": a.layers,
                      "dim": a.dim, "heads": a.heads, "context": T, "threads": a.threads, "batch": B,
                      "bf16": a.bf16, "device": a.device, "steps": steps, "tokens_per_s": round(timed_tokens / secs, 1) if secs else 0,
                      "train_loss": round(loss_v, 4), "val_loss": round(tot / max(cnt, 1), 4),
                      "peak_rss_mb": round(rss, 1)}))


if __name__ == "__main__":
    main()
