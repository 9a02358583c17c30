#!/usr/bin/env python3
"""PyTorch baseline for the Coppelius step (benchmark only, never the product).

The same model as SPEC §4 written the ordinary PyTorch way (nn.Linear,
F.layer_norm, RoPE, F.scaled_dot_product_attention(is_causal=True), SwiGLU,
tied embedding), batch 1 × 1024, bf16 autocast, torch.optim.AdamW(fused=True)
with the 2-D tensors decayed. Times ms/step (synchronised wall time over
--steps steps after --warmup steps) in each mode: eager, torch.compile,
torch.compile(mode="reduce-overhead"). Prints one line per mode.

reduce-overhead: an earlier version compiled the whole step and failed with
torch 2.11 ("accessing tensor output of CUDAGraphs that has been
overwritten", at the tied embedding's gradient addition): on the first
step .grad was None, so autograd kept the CUDA graph's gradient output
itself as .grad, which the next replay overwrote. Now the model is compiled
(forward and backward graphs CUDA-graphed), the gradients exist from the
start (zeros, accumulated into in place) and the backward and the fused
AdamW run eagerly. Not yet run on a GPU (2026-11-30); a mode that fails
prints one line and the others still run.
"""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

V, T, C, L, NH, HS, H = 12288, 1024, 512, 16, 8, 64, 1408


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C, bias=False)
        self.output = nn.Linear(C, C, bias=False)
        self.mlp_norm = nn.LayerNorm(C, eps=1e-5)
        self.gate = nn.Linear(C, H, bias=False)
        self.up = nn.Linear(C, H, bias=False)
        self.down = nn.Linear(H, C, bias=False)

    def forward(self, x, cos, sin):
        h = self.attention_norm(x)
        q, k, v = self.qkv(h).view(1, T, 3, NH, HS).permute(2, 0, 3, 1, 4)

        def rope(t):
            a, b = t[..., : HS // 2], t[..., HS // 2:]
            return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)

        o = F.scaled_dot_product_attention(rope(q), rope(k), v, is_causal=True)
        x = x + self.output(o.transpose(1, 2).reshape(1, T, C))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Parameter(torch.randn(V, C) * 0.02)
        self.blocks = nn.ModuleList(Block() for _ in range(L))
        self.final_norm = nn.LayerNorm(C, eps=1e-5)
        ang = torch.arange(T)[:, None] * 10000.0 ** (-2.0 * torch.arange(HS // 2) / HS)
        self.register_buffer("cos", torch.cos(ang))
        self.register_buffer("sin", torch.sin(ang))

    def forward(self, ids, targets):
        x = self.embedding[ids]
        for b in self.blocks:
            x = b(x, self.cos, self.sin)
        logits = self.final_norm(x) @ self.embedding.t()
        return F.cross_entropy(logits.float().view(-1, V), targets.view(-1))


def bench(mode, steps, warmup):
    torch.manual_seed(0)
    model = Model().cuda()
    assert sum(p.numel() for p in model.parameters()) == 57_705_472
    decayed = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decayed, "weight_decay": 0.1},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8, fused=True)

    def make_step(forward, mark_step_begin=False):
        def step(ids, targets):
            if mark_step_begin:
                # CUDA-graph trees: each call is a new iteration (the graphs'
                # outputs of the previous one may be overwritten).
                torch.compiler.cudagraph_mark_step_begin()
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = forward(ids, targets)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)
            return loss
        return step

    step = make_step(model)
    if mode == "compile":
        step = torch.compile(step)
    elif mode == "reduce-overhead":
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
        step = make_step(torch.compile(model, mode="reduce-overhead"),
                         mark_step_begin=True)
    data = torch.randint(0, V, (steps + warmup, 1, T + 1), device="cuda")
    t0 = time.time()
    for s in range(warmup):
        step(data[s, :, :-1], data[s, :, 1:])
    torch.cuda.synchronize()
    t1 = time.time()
    for s in range(warmup, warmup + steps):
        loss = step(data[s, :, :-1], data[s, :, 1:])
    loss = float(loss)  # read before the next graph replay can overwrite it
    torch.cuda.synchronize()
    t2 = time.time()
    return (t2 - t1) * 1e3 / steps, t1 - t0, loss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--modes", default="eager,compile,reduce-overhead")
    args = ap.parse_args()
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
    for mode in args.modes.split(","):
        try:
            ms, warm_s, loss = bench(mode, args.steps, args.warmup)
        except Exception as e:  # report the mode's failure, run the others
            first = str(e).strip().splitlines()[0] if str(e).strip() else ""
            print(f"pytorch {mode:16s}   failed: {type(e).__name__}: {first[:200]}", flush=True)
            continue
        print(f"pytorch {mode:16s} {ms:8.3f} ms/step  (warm-up incl. compile {warm_s:.1f} s, loss {loss:.3f})", flush=True)


if __name__ == "__main__":
    main()
