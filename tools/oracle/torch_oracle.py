#!/usr/bin/env python3
"""PyTorch oracle for the Coppelius reference backend (tests only).

Builds the Coppelius model (SPEC §4) in PyTorch from a P/M/V image, trains K
steps with torch.optim.AdamW on the same contexts of a token cache, and
compares with what `//trainer:reference_dump` wrote:

  * per-step, per-row cross-entropy (losses.f32),
  * per-tensor gradients of step 0 (gradients_step0.f32),
  * the final P plane (final_pmv.f32).

It prints max relative errors and exits non-zero if any exceeds the bound
given for the chosen precision (--max_loss_rel, --max_grad_rel,
--max_param_rel). Never part of the product.

Precision modes (--precision):
  fp64      everything in float64: the exact model. Compare with a dump made
            with --bf16=false.
  fp32      float32 tensors, PyTorch's own matmuls (fp32 accumulation).
            Compare with --bf16=false.
  bf16rule  float32 tensors; every matrix product goes through BF16MatMul, a
            transcription of the reference's documented rule: both operands
            rounded to bf16 at the product (forward), and in backward
            dA = bf16(dY)·bf16(B)ᵀ, dB = bf16(A)ᵀ·bf16(dY); results fp32.
            Compare with the default dump (--bf16=true). With
            --elementwise_double the non-matmul ops are also evaluated as the
            reference evaluates them (double, rounded to fp32 at the same
            places: ReferenceLayerNorm, ReferenceSoftmax, ReferenceGateUp), so
            bf16 rounding sees the same fp32 operands; at the Coppelius scale
            a single 1-ulp fp32 difference upstream of a bf16 rounding flips
            it and spreads through attention, so without this the comparison
            is only good to ~1e-3.
  autocast  float32 parameters under torch.autocast(bfloat16) (matmul
            outputs bf16): the usual mixed-precision recipe; looser.

Files (all little-endian fp32, no header; see trainer/reference_dump.h):
  <dump>/manifest.txt, initial_pmv.f32, losses.f32, gradients_step0.f32,
  final_pmv.f32. The token cache is SPEC §2's: 16-byte header, u32 LE ids.
  --pmv may instead name a checkpoint envelope with --pmv_offset giving the
  payload's byte offset (the envelope states it).
"""

import argparse
import json
import math
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_manifest(path):
    out = {}
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and "=" in line:
                k, v = line.split("=", 1)
                out[k] = v
    return out


def parameter_layout(cfg):
    """SPEC §4's P-plane order: (name, shape) in order; offsets follow."""
    V, C, H, L = cfg["V"], cfg["C"], cfg["hidden"], cfg["L"]
    layout = [("embedding", (V, C))]
    for l in range(L):
        p = f"blocks.{l}."
        layout += [
            (p + "attention_norm.weight", (C,)),
            (p + "attention_norm.bias", (C,)),
            (p + "attention.qkv", (3 * C, C)),
            (p + "attention.output", (C, C)),
            (p + "mlp_norm.weight", (C,)),
            (p + "mlp_norm.bias", (C,)),
            (p + "mlp.gate", (H, C)),
            (p + "mlp.up", (H, C)),
            (p + "mlp.down", (C, H)),
        ]
    layout += [("final_norm.weight", (C,)), ("final_norm.bias", (C,))]
    offsets, off = [], 0
    for name, shape in layout:
        offsets.append((name, shape, off))
        off += int(np.prod(shape))
    return offsets, off


def bf16_round(x):
    return x.to(torch.bfloat16).to(x.dtype)


class BF16MatMul(torch.autograd.Function):
    """Y = A·B with the reference's rule (trainer/reference_backend.h)."""

    @staticmethod
    def forward(ctx, a, b):
        ar, br = bf16_round(a), bf16_round(b)
        ctx.save_for_backward(ar, br)
        # bf16·bf16 products are exact in fp32; accumulate in float64 to
        # mirror the reference's double accumulation, result fp32.
        return (ar.double() @ br.double()).to(a.dtype)

    @staticmethod
    def backward(ctx, dy):
        ar, br = ctx.saved_tensors
        dyr = bf16_round(dy).double()
        da = (dyr @ br.double().transpose(-1, -2)).to(dy.dtype)
        db = (ar.double().transpose(-1, -2) @ dyr).to(dy.dtype)
        return da, db


F32_EPS = float(np.float32(1e-5))


class ReferenceLayerNorm(torch.autograd.Function):
    """--elementwise_double: LayerNorm as the reference evaluates it.

    Returns (x, y): x passes through so that the residual gradient and the
    LayerNorm gradient are summed as the reference sums them (in double,
    rounded once). Statistics: double sums, mean and rstd rounded to fp32;
    y = fp32((x − mean)·rstd·w + b). Backward (the usual LayerNorm formula
    with xhat from the fp32 statistics): dx = fp32(dx_residual + rstd·(dxhat −
    mean(dxhat) − xhat·mean(dxhat·xhat))); dw, db double sums, rounded.
    """

    @staticmethod
    def forward(ctx, x, w, b):
        xx = x.double()
        mean = xx.mean(dim=-1, keepdim=True)
        var = ((xx - mean) ** 2).mean(dim=-1, keepdim=True)
        mean = mean.float().double()
        rstd = (1.0 / torch.sqrt(var + F32_EPS)).float().double()
        xhat = (xx - mean) * rstd
        ctx.save_for_backward(xhat, rstd, w)
        return x.clone(), (xhat * w.double() + b.double()).float()

    @staticmethod
    def backward(ctx, dx_residual, dy):
        xhat, rstd, w = ctx.saved_tensors
        dyy = dy.double()
        dxhat = dyy * w.double()
        d = rstd * (dxhat - dxhat.mean(dim=-1, keepdim=True)
                    - xhat * (dxhat * xhat).mean(dim=-1, keepdim=True))
        if dx_residual is not None:
            d = d + dx_residual.double()
        return d.float(), (dyy * xhat).sum(0).float(), dyy.sum(0).float()


class ReferenceSoftmax(torch.autograd.Function):
    """--elementwise_double: p = fp32(softmax in double); backward from the
    fp32 p: ds = fp32(p·(dp − Σ p·dp)) in double."""

    @staticmethod
    def forward(ctx, scores):
        p = torch.softmax(scores.double(), dim=-1).float()
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, dp):
        (p,) = ctx.saved_tensors
        pp, dd = p.double(), dp.double()
        return (pp * (dd - (pp * dd).sum(dim=-1, keepdim=True))).float()


class ReferenceGateUp(torch.autograd.Function):
    """--elementwise_double: gate = h·gateᵀ, up = h·upᵀ under the bf16 rule;
    dh = fp32(fp32(dgate·gate) + dup·up) (the second product accumulated onto
    the first's fp32 result, as the reference)."""

    @staticmethod
    def forward(ctx, h, wg, wu):
        hr, wgr, wur = bf16_round(h), bf16_round(wg), bf16_round(wu)
        ctx.save_for_backward(hr, wgr, wur)
        return ((hr.double() @ wgr.double().t()).float(),
                (hr.double() @ wur.double().t()).float())

    @staticmethod
    def backward(ctx, dg, du):
        hr, wgr, wur = ctx.saved_tensors
        dgr, dur = bf16_round(dg).double(), bf16_round(du).double()
        dh = (dgr @ wgr.double()).float().double() + dur @ wur.double()
        return (dh.float(), (dgr.t() @ hr.double()).float(),
                (dur.t() @ hr.double()).float())


class Model:
    def __init__(self, cfg, params, precision, elementwise_double=False):
        self.cfg = cfg
        self.p = params
        self.precision = precision
        # Evaluate non-matmul ops in float64 and round the result to the
        # parameters' dtype, as the reference does (its rule), so bf16
        # rounding boundaries see the same fp32 operands.
        self.ew = elementwise_double
        T, HS = cfg["T"], cfg["HS"]
        half = HS // 2
        dtype = params["embedding"].dtype
        pos = torch.arange(T, dtype=torch.float64)[:, None]
        inv = 10000.0 ** (-2.0 * torch.arange(half, dtype=torch.float64) / HS)
        ang = pos * inv  # [T, HS/2]
        self.cos = torch.cos(ang).to(dtype)
        self.sin = torch.sin(ang).to(dtype)
        self.cos64, self.sin64 = torch.cos(ang), torch.sin(ang)
        self.causal = torch.ones(T, T, dtype=torch.bool).tril()

    def mm(self, a, b):
        if self.precision == "bf16rule":
            return BF16MatMul.apply(a, b)
        return a @ b

    def linear(self, x, w):  # y = x·Wᵀ, W [out, in]
        return self.mm(x, w.t())

    def ew_in(self, *xs):
        return [x.double() for x in xs] if self.ew else list(xs)

    def ew_out(self, y, like):
        return y.to(like.dtype) if self.ew else y

    def ln(self, x, w, b):
        return F.layer_norm(x, (x.shape[-1],), w, b, eps=1e-5)

    def rope(self, x):  # x [NH, T, HS]
        half = x.shape[-1] // 2
        (xx,) = self.ew_in(x)
        cos, sin = (self.cos64, self.sin64) if self.ew else (self.cos, self.sin)
        a, b = xx[..., :half], xx[..., half:]
        return self.ew_out(torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1), x)

    def add(self, x, y):
        xx, yy = self.ew_in(x, y)
        return self.ew_out(xx + yy, x)

    def norm(self, x, w, b):
        """Returns (x, LayerNorm(x)); see ReferenceLayerNorm."""
        if self.ew:
            return ReferenceLayerNorm.apply(x, w, b)
        return x, self.ln(x, w, b)

    def forward(self, ids):
        cfg, p = self.cfg, self.p
        T, C, NH, HS = cfg["T"], cfg["C"], cfg["NH"], cfg["HS"]
        x = p["embedding"][ids]
        for l in range(cfg["L"]):
            q_ = f"blocks.{l}."
            x, h = self.norm(x, p[q_ + "attention_norm.weight"], p[q_ + "attention_norm.bias"])
            qkv = self.linear(h, p[q_ + "attention.qkv"])
            q, k, v = qkv.split(C, dim=-1)
            q = self.rope(q.view(T, NH, HS).transpose(0, 1))
            k = self.rope(k.view(T, NH, HS).transpose(0, 1))
            v = v.view(T, NH, HS).transpose(0, 1)
            scores = self.mm(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(HS))
            scores = scores.masked_fill(~self.causal, float("-inf"))
            if self.ew:
                probs = ReferenceSoftmax.apply(scores)
            else:
                probs = torch.softmax(scores.float() if self.precision == "autocast" else scores, dim=-1)
            o = self.mm(probs, v).transpose(0, 1).reshape(T, C)
            x = self.add(x, self.linear(o, p[q_ + "attention.output"]))
            x, h = self.norm(x, p[q_ + "mlp_norm.weight"], p[q_ + "mlp_norm.bias"])
            if self.ew:
                g, u = ReferenceGateUp.apply(h, p[q_ + "mlp.gate"], p[q_ + "mlp.up"])
                g, u = g.double(), u.double()
            else:
                g, u = self.linear(h, p[q_ + "mlp.gate"]), self.linear(h, p[q_ + "mlp.up"])
            a = self.ew_out(F.silu(g) * u, h)
            x = self.add(x, self.linear(a, p[q_ + "mlp.down"]))
        _, xf = self.norm(x, p["final_norm.weight"], p["final_norm.bias"])
        return self.linear(xf, p["embedding"]).float()


def adamw_on_our_gradient(layout, n, pmv, ours_g, ours_final, t0):
    """torch.optim.AdamW applied to OUR step-0 gradient from the initial
    image (one update, number t0 + 1), against our P/M/V after step 0: checks
    the optimizer alone. Valid only for a K = 1 dump."""
    params, decayed, rest = {}, [], []
    for name, shape, off in layout:
        cnt = int(np.prod(shape))
        t = torch.tensor(pmv[off:off + cnt].reshape(shape), requires_grad=True)
        t.grad = torch.tensor(ours_g[off:off + cnt].reshape(shape), dtype=torch.float32)
        params[name] = t
        (decayed if len(shape) == 2 else rest).append(t)
    opt = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    if t0 > 0:
        for name, shape, off in layout:
            cnt = int(np.prod(shape))
            opt.state[params[name]] = {
                "step": torch.tensor(float(t0)),
                "exp_avg": torch.tensor(pmv[n + off:n + off + cnt].reshape(shape)),
                "exp_avg_sq": torch.tensor(pmv[2 * n + off:2 * n + off + cnt].reshape(shape))}
    opt.step()
    out = {}
    for plane, key in ((0, None), (1, "exp_avg"), (2, "exp_avg_sq")):
        theirs = np.concatenate([
            (params[nm].detach() if key is None else opt.state[params[nm]][key]).numpy().ravel()
            for nm, _, _ in layout]).astype(np.float64)
        ours = ours_final[plane * n:(plane + 1) * n]
        diff = np.abs(ours - theirs)
        out["PMV"[plane]] = {"bitwise_equal_fraction": float(np.mean(diff == 0)),
                            "max_abs": float(diff.max()),
                            "max_rel": float(np.max(diff / np.maximum(np.abs(theirs), 1e-30)))}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dump", required=True, help="reference_dump output directory")
    ap.add_argument("--cache", required=True, help="token cache used for the dump")
    ap.add_argument("--pmv", default=None, help="P/M/V source (default <dump>/initial_pmv.f32)")
    ap.add_argument("--pmv_offset", type=int, default=0, help="payload byte offset in --pmv")
    ap.add_argument("--precision", default="bf16rule",
                    choices=["fp64", "fp32", "bf16rule", "autocast"])
    ap.add_argument("--elementwise_double", action="store_true",
                    help="bf16rule: evaluate LayerNorm, RoPE, softmax, SiLU·up and "
                         "residual adds in float64, rounded to fp32 (as the reference)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--max_loss_rel", type=float, default=None)
    ap.add_argument("--max_grad_rel", type=float, default=None)
    ap.add_argument("--max_param_rel", type=float, default=None)
    ap.add_argument("--json_out", default=None)
    args = ap.parse_args()

    torch.manual_seed(0)
    m = read_manifest(f"{args.dump}/manifest.txt")
    cfg = {k: int(m[k]) for k in ("V", "T", "C", "L", "NH", "HS", "hidden", "num_parameters")}
    K, c0, t0 = int(m["steps"]), int(m["first_context"]), int(m["update_count"])
    layout, n = parameter_layout(cfg)
    assert n == cfg["num_parameters"], (n, cfg["num_parameters"])
    T, V = cfg["T"], cfg["V"]

    pmv_path = args.pmv or f"{args.dump}/initial_pmv.f32"
    pmv = np.fromfile(pmv_path, dtype="<f4", count=3 * n, offset=args.pmv_offset)
    if pmv.size != 3 * n:
        sys.exit(f"{pmv_path}: {pmv.size} floats at offset {args.pmv_offset}, expected {3 * n}")
    ids_all = np.fromfile(args.cache, dtype="<u4", offset=16)

    dtype = torch.float64 if args.precision == "fp64" else torch.float32
    dev = torch.device(args.device)
    params, decayed, rest = {}, [], []
    for name, shape, off in layout:
        cnt = int(np.prod(shape))
        t = torch.tensor(pmv[off:off + cnt].reshape(shape), dtype=dtype, device=dev,
                         requires_grad=True)
        params[name] = t
        (decayed if len(shape) == 2 else rest).append(t)
    opt = torch.optim.AdamW(
        [{"params": decayed, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
        lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
    if t0 > 0:  # continuation: the image's M, V and the in-band count
        for name, shape, off in layout:
            cnt = int(np.prod(shape))
            mm_ = torch.tensor(pmv[n + off:n + off + cnt].reshape(shape), dtype=dtype, device=dev)
            vv_ = torch.tensor(pmv[2 * n + off:2 * n + off + cnt].reshape(shape), dtype=dtype, device=dev)
            opt.state[params[name]] = {"step": torch.tensor(float(t0)), "exp_avg": mm_, "exp_avg_sq": vv_}
    model = Model(cfg, params, args.precision, args.elementwise_double)
    model.cos, model.sin, model.causal = model.cos.to(dev), model.sin.to(dev), model.causal.to(dev)
    model.cos64, model.sin64 = model.cos64.to(dev), model.sin64.to(dev)

    torch_losses, grads0 = [], None
    for s in range(K):
        c = c0 + s
        window = torch.tensor(ids_all[T * c:T * c + T + 1].astype(np.int64), device=dev)
        inputs, targets = window[:-1], window[1:]
        opt.zero_grad(set_to_none=True)
        if args.precision == "autocast":
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                logits = model.forward(inputs)
        else:
            logits = model.forward(inputs)
        ce_double = dtype == torch.float64 or args.elementwise_double
        rows = F.cross_entropy(logits.double() if ce_double else logits.float(),
                               targets, reduction="none")
        rows.mean().backward()
        torch_losses.append(rows.detach().double().cpu().numpy())
        if s == 0:
            grads0 = {name: params[name].grad.detach().double().cpu().numpy().ravel()
                      for name, _, _ in layout}
        opt.step()

    ours_losses = np.fromfile(f"{args.dump}/losses.f32", dtype="<f4").astype(np.float64).reshape(K, T)
    ours_g = np.fromfile(f"{args.dump}/gradients_step0.f32", dtype="<f4").astype(np.float64)
    ours_final = np.fromfile(f"{args.dump}/final_pmv.f32", dtype="<f4").astype(np.float64)
    tl = np.stack(torch_losses)
    loss_rel = float(np.max(np.abs(ours_losses - tl) / np.abs(tl)))
    loss0_rel = float(np.max(np.abs(ours_losses[0] - tl[0]) / np.abs(tl[0])))
    report = {"precision": args.precision, "device": str(dev), "config": m.get("config"),
              "steps": K, "first_context": c0, "update_count": t0,
              "dump_bf16": int(m.get("bf16_matmul_operands", "-1")),
              "loss_max_rel": loss_rel, "step0_loss_max_rel": loss0_rel,
              "mean_loss_ours": ours_losses.mean(axis=1).tolist(),
              "mean_loss_torch": tl.mean(axis=1).tolist(),
              "grad_rel": {}, "param_rel": {}}
    # Gradients: per tensor, max |ours − torch| / max |torch| (normalised max
    # error; elementwise relative error is meaningless near zero).
    init = pmv[:n].astype(np.float64)
    for name, shape, off in layout:
        cnt = int(np.prod(shape))
        g_t = grads0[name]
        g_o = ours_g[off:off + cnt]
        report["grad_rel"][name] = float(np.max(np.abs(g_o - g_t)) / max(np.max(np.abs(g_t)), 1e-30))
        p_t = params[name].detach().double().cpu().numpy().ravel()
        p_o = ours_final[off:off + cnt]
        moved = np.max(np.abs(p_t - init[off:off + cnt]))
        # Final P: max |ours − torch| relative to the largest change of the
        # tensor over the K steps (how much of the training signal differs).
        report["param_rel"][name] = float(np.max(np.abs(p_o - p_t)) / max(moved, 1e-30))
    gmax = max(report["grad_rel"].items(), key=lambda kv: kv[1])
    pmax = max(report["param_rel"].items(), key=lambda kv: kv[1])
    report["grad_max_rel"], report["grad_worst_tensor"] = gmax[1], gmax[0]
    report["param_max_rel"], report["param_worst_tensor"] = pmax[1], pmax[0]

    report["elementwise_double"] = bool(args.elementwise_double)
    print(f"oracle: precision={args.precision}{' +elementwise_double' if args.elementwise_double else ''} device={dev} config={m.get('config')} "
          f"K={K} c0={c0} t0={t0} dump_bf16={report['dump_bf16']}")
    for s in range(K):
        print(f"  step {s}: mean loss ours {report['mean_loss_ours'][s]:.7f} "
              f"torch {report['mean_loss_torch'][s]:.7f}")
    print(f"  per-row loss, max relative error: {loss_rel:.3e} (step 0 alone: {loss0_rel:.3e})")
    print(f"  step-0 gradients, max over tensors of max|Δ|/max|g|: {gmax[1]:.3e} ({gmax[0]})")
    kinds = {}
    for name, v in report["grad_rel"].items():
        kind = name.split(".", 2)[-1] if name.startswith("blocks.") else name
        kinds[kind] = max(kinds.get(kind, 0.0), v)
    for kind, v in kinds.items():
        print(f"    {kind:28s} {v:.3e}")
    print(f"  final P, max over tensors of max|Δ|/max|P_final − P_init|: {pmax[1]:.3e} ({pmax[0]})")
    if K == 1:
        report["adamw_only"] = adamw_on_our_gradient(layout, n, pmv, ours_g, ours_final, t0)
        for plane, r in report["adamw_only"].items():
            print(f"  torch AdamW on our step-0 gradient vs our {plane}: "
                  f"{100 * r['bitwise_equal_fraction']:.2f}% bitwise equal, "
                  f"max |Δ| {r['max_abs']:.3e}, max rel {r['max_rel']:.3e}")
    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump(report, f, indent=1)
    failed = []
    if args.max_loss_rel is not None and loss_rel > args.max_loss_rel:
        failed.append(f"loss {loss_rel:.3e} > {args.max_loss_rel}")
    if args.max_grad_rel is not None and gmax[1] > args.max_grad_rel:
        failed.append(f"gradient {gmax[1]:.3e} > {args.max_grad_rel}")
    if args.max_param_rel is not None and pmax[1] > args.max_param_rel:
        failed.append(f"parameters {pmax[1]:.3e} > {args.max_param_rel}")
    if failed:
        print("oracle: FAILED: " + "; ".join(failed))
        return 1
    print("oracle: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
