#!/usr/bin/env python3
"""Unit test of tools/trace_table.py on a hand-made kernel timeline.

Two steps, each from a StageKernel to a FinishStepKernel, with kernels
placed so that the expected figures can be worked out by hand (times in
ns, printed in µs), after a forward-only pass (a StageKernel and a kernel,
no FinishStepKernel) that must start no step:

  step 0: Stage [0, 1000); A [2000, 6000); B [4000, 9000) (overlaps A for
          2000 ns); Timestamp [9000, 9500) and [9500, 10000); gap
          [10000, 12000); FinishStep [12000, 13000).
    span 13000 ns = 13.0 µs; idle: [1000, 2000) + [10000, 12000) = 3.0 µs;
    several: [4000, 6000) = 2.0 µs; one: 13.0 - 3.0 - 2.0 = 8.0 µs.
    A alone [2000, 4000) = 2.0 µs; B alone [6000, 9000) = 3.0 µs; the two
    Timestamps 1.0 µs, Stage 1.0 and FinishStep 1.0, all alone.
  step 1: the same shifted by 100000 ns.
The mangled name of a kernel in a namespace must come out as its name.
"""
import os
import subprocess
import sys
import tempfile

SCRIPT = sys.argv[1]


def fail(message):
    print("FAIL:", message)
    sys.exit(1)


def main():
    stamp = "_ZN9coppelius12_GLOBAL__N_115TimestampKernelEPKliiPm"
    stage = "_ZN9coppelius12_GLOBAL__N_111StageKernelEPKjmPKlliiPjS5_PiPmi"
    finish = "_ZN9coppelius12_GLOBAL__N_116FinishStepKernelEPKfiPliPfPm"
    a = "_ZN9coppelius12_GLOBAL__N_111AdamWKernelEv"
    # The forward-only pass before the steps: no step of its own.
    rows = [f"{stage},-50000,-49000,7,1,0,1,1,1,1,1,1,0",
            f"{a},-48000,-40000,7,1,0,1,1,1,1,1,1,0"]
    for base in (0, 100000):
        for name, s, e in [(stage, 0, 1000), (a, 2000, 6000),
                           ("nvjet_sm90_tss_64x64", 4000, 9000),
                           (stamp, 9000, 9500), (stamp, 9500, 10000),
                           (finish, 12000, 13000)]:
            rows.append(f"{name},{base + s},{base + e},7,1,0,1,1,1,1,1,1,0")
    with tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False,
                                     dir=os.environ.get("TEST_TMPDIR")) as f:
        f.write("name,start_ns,end_ns,stream,channel,graph_node,grid_x,grid_y,"
                "grid_z,block_x,block_y,block_z,dynamic_shared\n")
        f.write("\n".join(rows) + "\n")
        path = f.name
    out = subprocess.run([sys.executable, SCRIPT, path], capture_output=True,
                         text=True)
    if out.returncode != 0:
        fail(f"exit {out.returncode}: {out.stderr}")
    lines = out.stdout.splitlines()
    if lines[0] != "records 14, steps summarized 2":
        fail(f"first line: {lines[0]!r}")
    for i in (0, 1):
        fields = lines[2 + i].split()
        if fields != [str(i), "13.0", "3.0", "8.0", "2.0", "6"]:
            fail(f"step {i} row: {lines[2 + i]!r}")
    per_kernel = {l.split()[0]: l.split()[1:] for l in lines
                  if l.startswith(("AdamWKernel", "nvjet", "TimestampKernel",
                                   "StageKernel", "FinishStepKernel"))}
    if per_kernel.get("AdamWKernel") != ["1", "4.0", "2.0"]:
        fail(f"AdamWKernel row: {per_kernel.get('AdamWKernel')}")
    if per_kernel.get("nvjet_sm90_tss_64x64") != ["1", "5.0", "3.0"]:
        fail(f"nvjet row: {per_kernel.get('nvjet_sm90_tss_64x64')}")
    if per_kernel.get("TimestampKernel") != ["2", "1.0", "1.0"]:
        fail(f"TimestampKernel row: {per_kernel.get('TimestampKernel')}")
    for name in ("StageKernel", "FinishStepKernel"):
        if per_kernel.get(name) != ["1", "1.0", "1.0"]:
            fail(f"{name} row: {per_kernel.get(name)}")
    # --steps 1 keeps the last step only.
    out = subprocess.run([sys.executable, SCRIPT, path, "--steps", "1"],
                         capture_output=True, text=True)
    if out.stdout.splitlines()[0] != "records 14, steps summarized 1":
        fail(f"--steps 1: {out.stdout.splitlines()[0]!r}")
    os.unlink(path)
    print("trace_table_test: all checks passed")


if __name__ == "__main__":
    main()
