#!/usr/bin/env python3
"""Compares a `train` run's per-step losses with PyTorch on the same contexts.

Tests/verification only, never part of the product. Builds the model in
PyTorch (tools/oracle/torch_oracle.py's Model) from the run's initial P/M/V
(a raw fp32 file, e.g. `reference_dump`'s initial_pmv.f32 for a fresh run),
trains K steps with torch.optim.AdamW (2-D tensors weight_decay 0.1, the
rest 0; lr 3e-4, betas (0.9, 0.95), eps 1e-8) on contexts c0..c0+K-1 of the
token cache, and compares each step's per-row cross-entropy with the step
windows of our result file (SPEC §7: T fp32 per step at byte 12·V + 4·T·s).

Prints per-step mean losses (ours, torch), the max relative error of the
per-step mean loss and of the per-row losses, and writes --json_out.
"""

import argparse
import json
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_oracle  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--result", required=True, help="our result file")
    ap.add_argument("--cache", required=True, help="the run's token cache")
    ap.add_argument("--pmv", required=True, help="initial P/M/V, raw fp32")
    ap.add_argument("--manifest", required=True,
                    help="a reference_dump manifest.txt of the same config")
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--first_context", type=int, default=0)
    ap.add_argument("--precision", default="autocast",
                    choices=["fp32", "bf16rule", "autocast"])
    ap.add_argument("--json_out", default=None)
    args = ap.parse_args()

    m = torch_oracle.read_manifest(args.manifest)
    cfg = {k: int(m[k]) for k in ("V", "T", "C", "L", "NH", "HS", "hidden", "num_parameters")}
    layout, n = torch_oracle.parameter_layout(cfg)
    T, V, K, c0 = cfg["T"], cfg["V"], args.steps, args.first_context
    pmv = np.fromfile(args.pmv, dtype="<f4", count=n)
    ids_all = np.fromfile(args.cache, dtype="<u4", offset=16)
    ours = np.fromfile(args.result, dtype="<f4", count=K * T, offset=12 * V)
    if ours.size != K * T:
        sys.exit(f"{args.result}: holds {ours.size // T} step windows, expected {K}")
    ours = ours.astype(np.float64).reshape(K, T)

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    params, decayed, rest = {}, [], []
    for name, shape, off in layout:
        cnt = int(np.prod(shape))
        t = torch.tensor(pmv[off:off + cnt].reshape(shape), dtype=torch.float32,
                         device=dev, requires_grad=True)
        params[name] = t
        (decayed if len(shape) == 2 else rest).append(t)
    opt = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    model = torch_oracle.Model(cfg, params, args.precision)
    model.cos, model.sin, model.causal = model.cos.to(dev), model.sin.to(dev), model.causal.to(dev)
    model.cos64, model.sin64 = model.cos64.to(dev), model.sin64.to(dev)

    theirs = []
    for s in range(K):
        c = c0 + s
        window = torch.tensor(ids_all[T * c:T * c + T + 1].astype(np.int64), device=dev)
        opt.zero_grad(set_to_none=True)
        if args.precision == "autocast":
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                logits = model.forward(window[:-1])
        else:
            logits = model.forward(window[:-1])
        rows = F.cross_entropy(logits.float(), window[1:], reduction="none")
        rows.mean().backward()
        opt.step()
        theirs.append(rows.detach().double().cpu().numpy())
    theirs = np.stack(theirs)
    mean_o, mean_t = ours.mean(axis=1), theirs.mean(axis=1)
    mean_rel = np.abs(mean_o - mean_t) / np.abs(mean_t)
    row_rel = np.abs(ours - theirs) / np.abs(theirs)
    report = {"precision": args.precision, "steps": K, "first_context": c0,
              "mean_loss_ours": mean_o.tolist(), "mean_loss_torch": mean_t.tolist(),
              "mean_loss_max_rel": float(mean_rel.max()),
              "mean_loss_max_rel_first10": float(mean_rel[:10].max()),
              "row_loss_max_rel": float(row_rel.max()),
              "row_loss_median_rel": float(np.median(row_rel))}
    print(f"compare_result: precision={args.precision} device={dev} K={K} c0={c0}")
    for s in list(range(min(K, 10))) + ([K - 1] if K > 10 else []):
        print(f"  step {s:4d}: mean loss ours {mean_o[s]:.6f} torch {mean_t[s]:.6f} rel {mean_rel[s]:.2e}")
    print(f"  mean loss over {K} steps: max rel {mean_rel.max():.3e} (first 10: {mean_rel[:10].max():.3e})")
    print(f"  per-row loss: max rel {row_rel.max():.3e}, median {np.median(row_rel):.3e}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
