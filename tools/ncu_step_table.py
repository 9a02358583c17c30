#!/usr/bin/env python3
"""Per-kernel table of one training step from an Nsight Compute CSV.

Input: the CSV that

    ncu --clock-control none --metrics gpu__time_duration.sum --csv \
        --launch-count 700 stage/bin/step_bench --kernels=0 --steps=1

writes (tools/gpu_checks.sh does this with PROFILE=1): every kernel launch,
in launch order, with its duration. ncu runs the kernels one at a time, so
the durations are each kernel alone; their sum exceeds the step's time by
what the step overlaps on its side and AdamW streams.

One step is the launches from one StageKernel (the step graph's first
node, which writes the start time) to the next; the second step in the file
is used (the first may include one-time work). Prints, most time first:
total µs, launches, µs per launch and the kernel's name (template and
argument lists cut).

Usage: ncu_step_table.py FILE.csv [--step N] [--top K]
Exit status 2, with a one-line message, on a file that is not such a CSV or
holds fewer than the steps asked for.
"""
import argparse
import collections
import csv
import io
import re
import sys


def read_rows(path):
    with open(path, newline="") as f:
        lines = f.read().splitlines()
    header = next((i for i, l in enumerate(lines) if l.startswith('"ID"')), None)
    if header is None:
        raise ValueError(f"{path}: no ncu CSV header (a line starting with \"ID\")")
    return list(csv.DictReader(io.StringIO("\n".join(lines[header:]))))


def microseconds(row):
    value = float(row["Metric Value"].replace(",", ""))
    unit = row["Metric Unit"]
    scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0,
             "ms": 1e3, "msecond": 1e3, "s": 1e6, "second": 1e6}
    if unit not in scale:
        raise ValueError(f"unexpected unit {unit!r} for {row['Kernel Name']}")
    return value * scale[unit]


def short_name(name):
    name = re.sub(r"\(.*", "", name)  # argument list
    name = name.replace("coppelius::<unnamed>::", "").replace("void ", "")
    return name.strip()


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--step", type=int, default=1,
                        help="which step (0-based) between StageKernel launches")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args(argv)
    try:
        rows = read_rows(args.csv)
    except (OSError, ValueError, KeyError) as e:
        print(f"ncu_step_table: {e}", file=sys.stderr)
        return 2
    stages = [i for i, r in enumerate(rows) if "StageKernel" in r["Kernel Name"]]
    if len(stages) < args.step + 2:
        print(f"{args.csv}: {len(stages)} StageKernel launches, need {args.step + 2}",
              file=sys.stderr)
        return 2
    # StageKernel is the step graph's first node (it writes the start time).
    begin, end = stages[args.step], stages[args.step + 1]
    per_kernel = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for row in rows[begin:end]:
        try:
            us = microseconds(row)
        except (ValueError, KeyError) as e:
            print(f"ncu_step_table: {args.csv}: {e}", file=sys.stderr)
            return 2
        entry = per_kernel[short_name(row["Kernel Name"])]
        entry[0] += 1
        entry[1] += us
        total += us
    print(f"one step: {end - begin} kernel launches, {total:.1f} us of kernel time "
          f"(each kernel alone)")
    print(f"{'total us':>9} {'launches':>8} {'us each':>8}  kernel")
    for name, (count, us) in sorted(per_kernel.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{us:9.1f} {count:8d} {us / count:8.2f}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
