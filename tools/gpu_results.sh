#!/usr/bin/env bash
# The main job on the GPU machine, with the evidence docs/RESULTS.md reports.
# Run ON the GPU machine from the repo root after tools/stage_gpu.sh (device
# tool: carry=["stage"]). Steps:
#   1. the README's main job (tools/main_job.sh with the staged binaries and
#      corpus): cache, 10,000 steps from a 0-byte checkpoint, inspect;
#   2. the documented continuation (main_job.sh --continue): 10,000 more;
#   3. a run killed (SIGKILL) after its 3rd publication, resumed in a fresh
#      process (killed again after 7 more publications); its payloads are
#      compared byte for byte with run 1's at update counts 1,000..10,000;
#   4. `inspect verify` of every checkpoint published;
#   5. PyTorch oracles: the reference backend's first step at full size
#      (losses, gradients, parameters) and run 1's first 100 steps' losses.
# Writes $OUT/summary.txt, $OUT/loss.svg and $OUT/results.tar.gz (logs,
# inspect JSON, oracle JSON) and prints the summary last.
set -uo pipefail
cd "$(dirname "$0")/.."
source tools/gpu_env.sh
OUT=${OUT:-/tmp/gpu_results}
W=${WORK:-/tmp/coppelius}
L=$W/logs
rm -rf "$W"  # a warm machine keeps /tmp: start from nothing, as a fresh one
mkdir -p "$OUT" "$L" "$W/data/corpus"
BIN=$PWD/stage/bin
summary=()
note() { summary+=("$(printf '%-46s %s' "$1" "$2")"); echo "== $1: $2"; }
t() { date +%s.%N; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$L/gpu.txt"
python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open('stage/data/corpus.txt.xz'), open('$W/data/corpus/corpus.txt','wb'))"
cp stage/data/vocab.tiktoken "$W/data/"
sha256sum "$W/data/corpus/corpus.txt" | tee -a "$L/gpu.txt"
export DATA=$W/data BIN CORPUS=$W/data/corpus/corpus.txt
CACHE=$W/data/corpus.tok

# 1-2. The main job and its continuation.
for run in 1 2; do
  s=$(t)
  if [[ $run == 1 ]]; then tools/main_job.sh > "$L/run1.log" 2>&1; else tools/main_job.sh --continue > "$L/run2.log" 2>&1; fi
  rc=$?
  note "main job run $run (rc, wall s)" "$rc $(awk -v a="$(t)" -v b="$s" "BEGIN{printf \"%.1f\", a-b}")"
  grep -E "^train: (done|config)" "$L/run$run.log" | tee -a "$L/train_lines.txt"
done
tail -n 30 "$L/run1.log"

# 3. Kill and resume in fresh processes; compare payloads with run 1's history.
K=$W/kill; mkdir -p "$K/history"; : > "$K/fresh.ckpt"
train() { "$BIN/train" --config=coppelius --tokens="$CACHE" --checkpoint-history="$K/history" "$@"; }
train --checkpoint-in="$K/fresh.ckpt" --checkpoint-out="$K/run.ckpt" --result="$K/result-a.bin" \
  --crash-after-publications=3 > "$L/kill_a.log" 2>&1
rc_a=$?
train --checkpoint-in="$K/run.ckpt" --checkpoint-out="$K/run.ckpt" --result="$K/result-b.bin" \
  --crash-after-publications=7 > "$L/kill_b.log" 2>&1
rc_b=$?
note "killed run, resumed run (exit codes)" "$rc_a $rc_b (137 = SIGKILL as intended)"
python3 - "$W/data/run/history" "$K/history" > "$L/resume_compare.txt" 2>&1 <<'PY'
import mmap, struct, sys
def payload(path):
    f = open(path, "rb")
    m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    off, n = struct.unpack_from("<QQ", m, 24)
    assert off + n == len(m), path
    return m, off
same = differ = 0
for u in range(1000, 10001, 1000):
    a, oa = payload("%s/update-%08d.ckpt" % (sys.argv[1], u))
    b, ob = payload("%s/update-%08d.ckpt" % (sys.argv[2], u))
    eq = a[oa:] == b[ob:]
    print("update %5d: payload %s" % (u, "identical" if eq else "DIFFERENT"))
    same += eq; differ += not eq
print("resume: %d identical, %d different" % (same, differ))
PY
cat "$L/resume_compare.txt"
note "kill/resume payloads vs uninterrupted" "$(tail -n 1 "$L/resume_compare.txt")"

# 4. Verify every checkpoint published.
"$BIN/inspect" verify --json --threads=16 "$W"/data/run/history/*.ckpt "$W/data/run/coppelius.ckpt" "$K"/history/*.ckpt \
  > "$L/verify.json" 2> "$L/verify.err"
note "inspect verify (all checkpoints)" "rc=$? files=$(ls "$W"/data/run/history/*.ckpt "$K"/history/*.ckpt | wc -l)+1"
for r in 1 2; do
  "$BIN/inspect" "$W/data/run/result-c$(printf %08d $(( (r - 1) * 10000 ))).bin" --vocab="$W/data/vocab.tiktoken" > "$L/result-$r.txt" 2>&1
  "$BIN/inspect" "$W/data/run/result-c$(printf %08d $(( (r - 1) * 10000 ))).bin" --vocab="$W/data/vocab.tiktoken" --json > "$L/result-$r.json" 2>&1
done
"$BIN/inspect" "$W/data/run/coppelius.ckpt" > "$L/checkpoint.txt" 2>&1
"$BIN/inspect" "$CACHE" --source="$CORPUS" > "$L/cache.txt" 2>&1
"$BIN/inspect" plot "$W/data/run/result-c00000000.bin" "$W/data/run/result-c00010000.bin" -o "$OUT/loss.svg" 2>> "$L/verify.err"
cp "$OUT/loss.svg" "$L/" 2>/dev/null

# 5. PyTorch oracles.
s=$(t)
"$BIN/reference_dump" --config=coppelius --cache="$CACHE" --steps=1 --out_dir="$W/ref1" > "$L/reference_dump.log" 2>&1 \
  || { mkdir -p "$W/ref1"; "$BIN/reference_dump" --config=coppelius --cache="$CACHE" --steps=1 --out_dir="$W/ref1" > "$L/reference_dump.log" 2>&1; }
note "reference backend, 1 coppelius step (rc, s)" "$? $(awk -v a="$(t)" -v b="$s" "BEGIN{printf \"%.1f\", a-b}")"
for prec in bf16rule autocast; do
  timeout 240 python3 tools/oracle/torch_oracle.py --dump "$W/ref1" --cache "$CACHE" --precision $prec \
    --json_out "$L/oracle_reference_$prec.json" > "$L/oracle_reference_$prec.txt" 2>&1
  note "torch vs reference, step 0 ($prec)" "$(grep -E 'per-row loss' "$L/oracle_reference_$prec.txt" | head -1 | sed 's/^ *//')"
done
for prec in autocast bf16rule; do
  timeout 300 python3 tools/oracle/compare_result.py --result "$W/data/run/result-c00000000.bin" --cache "$CACHE" \
    --pmv "$W/ref1/initial_pmv.f32" --manifest "$W/ref1/manifest.txt" --steps 100 --precision $prec \
    --json_out "$L/oracle_cuda_$prec.json" > "$L/oracle_cuda_$prec.txt" 2>&1
  note "torch vs cuda run 1, 100 steps ($prec)" "$(grep -E 'mean loss over' "$L/oracle_cuda_$prec.txt" | sed 's/^ *//')"
done

grep -h "" "$L"/oracle_*.txt | head -120
{
  echo "gpu_results $(date -u +%Y-%m-%dT%H:%M:%SZ) $(cat "$L/gpu.txt" | head -1)"
  cat stage/MANIFEST 2>/dev/null | head -2
  cat "$L/train_lines.txt"
  printf '%s\n' "${summary[@]}"
} > "$OUT/summary.txt"
tar -C "$W" -czf "$OUT/results.tar.gz" logs
echo; echo "================ summary ================"; cat "$OUT/summary.txt"
