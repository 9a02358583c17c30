#!/usr/bin/env python3
"""Summarizes a step_bench --trace CSV (trainer/kernels/kernel_trace.h).

A step runs from the step graph's first node, StageKernel, to its last,
FinishStepKernel (trainer/kernels/step.h); a StageKernel with no
FinishStepKernel after it before the next one (the forward-only passes of
the forward and final records) starts no step. For the traced steps it
prints, per step: the span, the time in
which no kernel runs at all (gaps between graph nodes), the time with two or
more kernels running; then, summed over the traced steps and divided by
their number, per kernel name: count, total duration, and the part of its
time during which it was the only kernel running; and the longest idle gaps
with their neighbours.

    python3 tools/trace_table.py trace.csv [--steps N]
"""
import argparse
import csv
import re
import sys
from collections import defaultdict


def short_name(mangled):
    """A readable kernel name from an Itanium-mangled one (no c++filt)."""
    if not mangled.startswith("_Z"):
        return mangled[:48]
    # Length-prefixed identifiers; keep the ones that look like kernels.
    idents = []
    i = 0
    while i < len(mangled):
        m = re.match(r"(\d+)", mangled[i:])
        if m:
            n = int(m.group(1))
            start = i + len(m.group(1))
            ident = mangled[start:start + n]
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", ident or ""):
                idents.append(ident)
                i = start + n
                continue
        i += 1
    for ident in idents:
        if ident.endswith("Kernel") or ident.endswith("kernel"):
            # Template arguments that tell variants apart (small integers
            # after the name) are kept by the grid size in the caller.
            return ident
    return idents[-1] if idents else mangled[:48]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=int, default=0,
                    help="summarize only the last N complete steps")
    ap.add_argument("--gaps", type=int, default=15)
    args = ap.parse_args()
    rows = []
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            rows.append({
                "name": short_name(r["name"]),
                "start": int(r["start_ns"]),
                "end": int(r["end_ns"]),
                "stream": int(r["stream"]),
                "grid": int(r["grid_x"]) * int(r["grid_y"]) * int(r["grid_z"]),
            })
    rows.sort(key=lambda r: r["start"])
    steps = []
    stage = None
    for i, r in enumerate(rows):
        if r["name"] == "StageKernel":
            stage = i
        elif r["name"] == "FinishStepKernel" and stage is not None:
            steps.append((stage, i))
            stage = None
    if not steps:
        sys.exit("trace_table: no complete step (StageKernel .. "
                 "FinishStepKernel) found")
    if args.steps > 0:
        steps = steps[-args.steps:]
    print(f"records {len(rows)}, steps summarized {len(steps)}")
    streams = defaultdict(int)
    per_name = defaultdict(lambda: [0, 0.0, 0.0])  # count, total us, alone us
    gaps = []
    print(f"{'step':>4} {'span us':>9} {'idle us':>8} {'1 kernel':>9} "
          f"{'2+ kernels':>10} {'kernels':>8}")
    for n, (a, b) in enumerate(steps):
        ks = rows[a:b + 1]
        t0, t1 = ks[0]["start"], ks[-1]["end"]
        # Sweep: intervals of constant concurrency.
        events = []
        for i, k in enumerate(ks):
            events.append((k["start"], 1, i))
            events.append((k["end"], -1, i))
        events.sort(key=lambda e: (e[0], e[1]))
        active = set()
        last = t0
        idle = one = many = 0
        last_end_kernel = None
        for t, kind, i in events:
            dt = t - last
            if dt > 0:
                if not active:
                    idle += dt
                    before = ks[last_end_kernel]["name"] if last_end_kernel is not None else "-"
                    gaps.append((dt, before, ks[i]["name"] if kind == 1 else "-"))
                elif len(active) == 1:
                    one += dt
                    (j,) = tuple(active)
                    per_name[ks[j]["name"]][2] += dt / 1e3
                else:
                    many += dt
            last = t
            if kind == 1:
                active.add(i)
            else:
                active.discard(i)
                last_end_kernel = i
        for k in ks:
            per_name[k["name"]][0] += 1
            per_name[k["name"]][1] += (k["end"] - k["start"]) / 1e3
            streams[k["stream"]] += 1
        print(f"{n:>4} {(t1 - t0) / 1e3:>9.1f} {idle / 1e3:>8.1f} "
              f"{one / 1e3:>9.1f} {many / 1e3:>10.1f} {len(ks):>8}")
    s = len(steps)
    print(f"\nstreams seen (id: kernels): "
          + ", ".join(f"{k}: {v}" for k, v in sorted(streams.items())))
    print(f"\nper step, by kernel (sorted by time alone on the GPU):")
    print(f"{'kernel':<44} {'count':>6} {'total us':>9} {'alone us':>9}")
    for name, (c, tot, alone) in sorted(per_name.items(),
                                        key=lambda kv: -kv[1][2]):
        print(f"{name:<44} {c / s:>6.0f} {tot / s:>9.1f} {alone / s:>9.1f}")
    gaps.sort(key=lambda g: -g[0])
    print(f"\nlongest idle gaps (us, the kernel that ended before, the one "
          f"that started after):")
    for dt, before, after in gaps[:args.gaps]:
        print(f"{dt / 1e3:>8.2f}  {before} -> {after}")
    hist = defaultdict(int)
    for dt, _, _ in gaps:
        us = dt / 1e3
        bucket = "<1" if us < 1 else "1-2" if us < 2 else "2-5" if us < 5 else ">=5"
        hist[bucket] += 1
    print("idle gaps per step by length (us): " + ", ".join(
        f"{b}: {hist[b] / s:.0f}" for b in ["<1", "1-2", "2-5", ">=5"]))


if __name__ == "__main__":
    main()
