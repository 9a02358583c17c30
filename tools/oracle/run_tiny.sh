#!/bin/bash
# Runs the PyTorch oracle (tools/oracle/torch_oracle.py) against the CPU
# reference backend on the tiny config, in every precision mode, with the
# bounds recorded in docs/VERIFICATION.md. Needs python3 with torch and numpy.
# Usage: tools/oracle/run_tiny.sh [workdir]   (from the repository root)
set -euo pipefail
work="${1:-$(mktemp -d)}"
mkdir -p "$work"/fp32 "$work"/bf16 "$work"/cont
bazel build //trainer:reference_dump
dump=bazel-bin/trainer/reference_dump
# A token cache of text bytes (ids < 256 < V): SPEC §2 layout.
python3 - "$work/bytes.tok" <<'PY'
import struct, sys
data = (open("/usr/share/common-licenses/GPL-3", "rb").read() * 4)[:200000]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<QQ", 0, len(data)))
    f.write(struct.pack("<%dI" % len(data), *data))
PY
cache="$work/bytes.tok"
oracle="python3 tools/oracle/torch_oracle.py --cache $cache"
"$dump" --cache="$cache" --config=tiny --steps=8 --first_context=3 --bf16=false --out_dir="$work/fp32"
"$dump" --cache="$cache" --config=tiny --steps=8 --first_context=3 --out_dir="$work/bf16"
"$dump" --cache="$cache" --config=tiny --steps=6 --first_context=11 --update_count=8 \
  --bf16=false --pmv="$work/fp32/final_pmv.f32" --out_dir="$work/cont"
$oracle --dump "$work/fp32" --precision fp64 --max_loss_rel 1e-6 --max_grad_rel 1e-6 --max_param_rel 1e-3
$oracle --dump "$work/fp32" --precision fp32 --max_loss_rel 1e-6 --max_grad_rel 5e-6 --max_param_rel 5e-3
$oracle --dump "$work/cont" --precision fp64 --pmv "$work/fp32/final_pmv.f32" \
  --max_loss_rel 1e-6 --max_grad_rel 1e-6 --max_param_rel 1e-3
$oracle --dump "$work/bf16" --precision bf16rule --elementwise_double \
  --max_loss_rel 1e-6 --max_grad_rel 1e-6 --max_param_rel 5e-3
$oracle --dump "$work/bf16" --precision bf16rule --max_loss_rel 1e-3 --max_grad_rel 5e-3
$oracle --dump "$work/bf16" --precision autocast --max_loss_rel 5e-3 --max_grad_rel 5e-2
echo "run_tiny: all oracle comparisons within bounds ($work)"
