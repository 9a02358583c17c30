#!/usr/bin/env bash
# Run ON the GPU machine from the repo root, after tools/stage_gpu.sh staged
# the binaries here (device tool: carry=["stage"]). Prints a short table last;
# full logs go to $OUT (or /tmp/gpu_checks) as gpu_checks.log.
#   1. nvidia-smi -L
#   2. every gpu test binary in stage/tests
#   3. compute-sanitizer memcheck on small cases, synccheck and racecheck
#      on the attention's warpgroup kernels (if available)
#   4. stage/bin/step_bench: ms/step of the CUDA backend, then kernel timings;
#      4b. backend only: this build (PDL on too with AB_PDL=1) and every
#      build staged as stage/ab/<name>/step_bench (tools/stage_ab.sh
#      REV=NAME builds and stages one), and this build with the flags of
#      each AB_FLAGS entry ("NAME=--flag=v[,--flag=v] ..."),
#      two alternating rounds (SKIP_AB=1 skips), P/M/V digests side by side
#      4c. with TRACE=1: the step's kernel timeline (CUPTI), summarized
#      by tools/trace_table.py into trace_table.txt
#      4d. with ABLATE=1: ms/step with each part of the step left out, one
#      step alone and two backends side by side, into ablate.txt
#   5. tools/bench_torch.py: the same model in PyTorch (eager, compile,
#      reduce-overhead), ms/step side by side (SKIP_TORCH=1 skips it)
#   6. with PROFILE=1: ncu's duration of every kernel of one step graph,
#      summed per kernel (tools/ncu_step_table.py; ~20 s)
#   6b. with NCU_KERNELS=<regex>: ncu's speed-of-light, occupancy, scheduler,
#      warp-state and source-counter (top stall sites) sections for the
#      first NCU_COUNT (default 3) matching launches of step_bench's kernel
#      benchmarks, into ncu_kernels.txt
# Env: STEPS (default 300) timed steps for the benchmark; SKIP_SANITIZER=1;
# SKIP_TESTS=1 skips section 2 (for benchmark-only calls).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-/tmp/gpu_checks}
mkdir -p "$out"
log="$out/gpu_checks.log"
: > "$log"
summary=()
note() { summary+=("$(printf '%-52s %s' "$1" "$2")"); }

echo "== $(date -u +%Y-%m-%dT%H:%M:%SZ) $(hostname)" | tee -a "$log"
cat stage/MANIFEST 2>/dev/null | head -2 | tee -a "$log"
nvidia-smi -L 2>&1 | tee -a "$log"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv 2>&1 | tee -a "$log"

source tools/gpu_env.sh
echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}" | tee -a "$log"

# 2. gpu tests
for t in stage/tests/*; do
  [ -x "$t" ] && [ "${SKIP_TESTS:-0}" != 1 ] || continue
  name=$(basename "$t")
  echo "== test $name" | tee -a "$log"
  start=$(date +%s)
  timeout "${TEST_TIMEOUT:-150}" "$t" >"$out/$name.log" 2>&1
  rc=$?
  secs=$(( $(date +%s) - start ))
  tail -n 40 "$out/$name.log" >> "$log"
  grep -E '^\[  (FAILED|     OK|  SKIPPED) |rel-norm errors' "$out/$name.log" | head -40
  while IFS= read -r line; do summary+=("  $line"); done \
    < <(grep -E 'rel-norm errors' "$out/$name.log" | head -4)
  if [ $rc -eq 0 ]; then
    n_ok=$(grep -c '^\[       OK \]' "$out/$name.log")
    n_skip=$(grep -cE '^\[  SKIPPED \] [A-Za-z0-9_]+\.[A-Za-z0-9_]+ \(' "$out/$name.log")
    note "test $name" "PASS ($n_ok ok, $n_skip skipped, ${secs}s)"
  else
    grep -E 'Failure|error|Expected|Which is|rel|FAILED' "$out/$name.log" | head -30
    note "test $name" "FAIL rc=$rc (${secs}s)"
  fi
done

# 3. memcheck on small cases
if [ "${SKIP_SANITIZER:-0}" != 1 ] && command -v compute-sanitizer >/dev/null; then
  for spec in "trainer_kernels__kernels_test:-LayerNormTest.*:AdamWTest.*" \
              "trainer__cuda_backend_test:CudaBackendTest.TinyMatchesReferenceBackend"; do
    bin=stage/tests/${spec%%:*}
    filter=${spec#*:}
    [ -x "$bin" ] || continue
    echo "== memcheck $(basename "$bin") $filter" | tee -a "$log"
    timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 \
      "$bin" --gtest_filter="$filter" >"$out/memcheck_$(basename "$bin").log" 2>&1
    rc=$?
    tail -n 5 "$out/memcheck_$(basename "$bin").log" | tee -a "$log"
    note "memcheck $(basename "$bin")" "$([ $rc -eq 0 ] && echo clean || echo "rc=$rc")"
  done
  # The attention kernels with several warpgroups per CTA (named barriers,
  # shared memory handed from warpgroup to warpgroup), and beside them the
  # one-warpgroup dq and dk/dv kernels with their pipelined loops (slots
  # refilled after one wait a tile): synccheck and racecheck (~45 s
  # together on the H200).
  bin=stage/tests/trainer_kernels__kernels_test
  if [ -x "$bin" ]; then
    for tool in synccheck racecheck; do
      echo "== $tool $(basename "$bin") AttentionTest.*Warpgroups*" | tee -a "$log"
      timeout 180 compute-sanitizer --tool $tool --error-exitcode 9 \
        "$bin" --gtest_filter='AttentionTest.*Warpgroups*' >"$out/${tool}_attention.log" 2>&1
      rc=$?
      tail -n 3 "$out/${tool}_attention.log" | tee -a "$log"
      note "$tool attention warpgroups" "$([ $rc -eq 0 ] && echo clean || echo "rc=$rc")"
    done
  fi
else
  note "memcheck" "skipped (no compute-sanitizer or SKIP_SANITIZER=1)"
fi

# 3b. end-to-end: `train` on the tiny config with the cuda backend
if [ -x stage/bin/train ]; then
  e2e=/tmp/coppelius_e2e
  # Fresh each time: on a machine kept warm between calls, the last call's
  # checkpoint is there and train rightly refuses to replace it.
  rm -rf "$e2e" && mkdir -p "$e2e"
  python3 - "$e2e/tokens.cache" <<'PY'
import random, struct, sys
random.seed(5)
ids = [random.randrange(512) for _ in range(8 * 64 + 1)]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<QQ", 0, 4 * len(ids)) + struct.pack("<%dI" % len(ids), *ids))
PY
  : > "$e2e/fresh"
  timeout 60 stage/bin/train --config=tiny --backend=cuda --progress=false \
    --tokens="$e2e/tokens.cache" --checkpoint_in="$e2e/fresh" \
    --checkpoint_out="$e2e/ck" --result="$e2e/result" >"$out/e2e_train.log" 2>&1
  rc=$?
  tail -n 5 "$out/e2e_train.log" | tee -a "$log"
  note "train --config=tiny --backend=cuda" "rc=$rc $(stat -c %s "$e2e/result" 2>/dev/null) bytes of result"
  # The CUDA backend's result and checkpoint through every check of
  # inspect verify (the tail's cross-checks included).
  if [ $rc -eq 0 ] && [ -x stage/bin/inspect ]; then
    stage/bin/inspect verify --config=tiny "$e2e/ck" "$e2e/result" \
      >"$out/e2e_verify.log" 2>&1
    vrc=$?
    cat "$out/e2e_verify.log" | tee -a "$log"
    note "inspect verify of that checkpoint and result" "rc=$vrc"
  fi
fi

# 4. benchmarks
if [ -x stage/bin/step_bench ]; then
  echo "== step_bench" | tee -a "$log"
  timeout 100 stage/bin/step_bench --steps="${STEPS:-300}" >"$out/step_bench.log" 2>&1
  rc=$?
  cat "$out/step_bench.log" >> "$log"
  note "step_bench" "rc=$rc"
fi

# 4b. A/B: the backend benchmark alone (--kernels=0) of this build, with
# programmatic dependent launch on as well when AB_PDL=1, and of every
# other build staged as stage/ab/<name>/step_bench (tools/stage_ab.sh), in
# two alternating rounds. The P/M/V digests must agree wherever the builds
# are meant to compute the same bits.
if [ -x stage/bin/step_bench ] && [ "${SKIP_AB:-0}" != 1 ]; then
  echo "== step_bench A/B" | tee -a "$log"
  variants=(nopdl)
  [ "${AB_PDL:-0}" = 1 ] && variants+=(pdl)
  for d in stage/ab/*/; do
    [ -x "$d/step_bench" ] && variants+=("ab:$(basename "$d")")
  done
  # AB_FLAGS="NAME=--flag=value[,--flag=value] ...": this build again with
  # those step_bench flags (e.g. blocks132=--adamw_blocks=132; a value may
  # hold commas: --skip=dw,adamw).
  read -ra ab_specs <<< "${AB_FLAGS:-}"
  for spec in "${ab_specs[@]}"; do variants+=("flags:$spec"); done
  for round in 1 2; do
    for variant in "${variants[@]}"; do
      case $variant in
        pdl) cmd=(stage/bin/step_bench --pdl=1) ;;
        nopdl) cmd=(stage/bin/step_bench --pdl=0) ;;
        ab:*) cmd=("stage/ab/${variant#ab:}/step_bench") ;;
        flags:*) spec=${variant#flags:}
                 mapfile -t fl < <(printf '%s\n' "${spec#*=}" | sed 's/,--/\n--/g')
                 cmd=(stage/bin/step_bench "${fl[@]}"); variant="flags_${spec%%=*}" ;;
      esac
      f="$out/ab_${variant//:/_}_$round.log"
      timeout 100 "${cmd[@]}" --kernels=0 --steps="${STEPS:-300}" >"$f" 2>&1
      cat "$f" >> "$log"
      ms=$(grep -m1 'ms/step (host wall' "$f" | awk '{print $NF}')
      fwd=$(grep -m1 'forward incl' "$f" | awk '{print $NF}')
      bwd=$(grep -m1 'backward +' "$f" | awk '{print $NF}')
      fnv=$(grep -m1 'FNV-1a' "$f" | awk '{print $NF}')
      note "A/B $variant (round $round)" "ms/step $ms (fwd $fwd, bwd $bwd), P/M/V $fnv"
    done
  done
  tar -C "$out" -czf "$out/ab_logs.tgz" $(cd "$out" && ls ab_*.log) && rm -f "$out"/ab_*.log
fi

# 4c. with TRACE=1: a kernel timeline of 6 steps through CUPTI
# (step_bench --trace, trainer/kernels/kernel_trace.h) summarized by
# tools/trace_table.py: idle time, time with one or several kernels
# running, each kernel's time alone on the GPU.
if [ "${TRACE:-0}" = 1 ] && [ -x stage/bin/step_bench ]; then
  echo "== kernel trace" | tee -a "$log"
  timeout 100 stage/bin/step_bench --kernels=0 --steps=100 \
    --trace="$out/trace.csv" --trace_steps=6 >"$out/trace_run.log" 2>&1
  rc=$?
  cat "$out/trace_run.log" >> "$log"
  if [ $rc = 0 ] && python3 tools/trace_table.py "$out/trace.csv" --steps 4 \
      >"$out/trace_table.txt" 2>&1; then
    head -n 8 "$out/trace_table.txt" | tee -a "$log"
    note "kernel trace" "$(sed -n 3p "$out/trace_table.txt" | awk '{print "span " $2 " us, idle " $3 ", one kernel " $4 ", several " $5}')"
  else
    note "kernel trace" "rc=$rc (see trace_run.log)"
  fi
fi

# 4d. with ABLATE=1: what each part of the step costs, one step alone and
# with the chip full. For "none" and each step_bench --skip part: ms/step of
# one backend, and ms per step of two backends side by side (each step's
# gaps open to the other's work: the kernels' throughput floor), two
# rounds, into ablate.txt. A skipped part leaves its outputs stale, so the
# numbers are wrong and a kernel fed stale values may run slower:
# benchmark-only.
if [ "${ABLATE:-0}" = 1 ] && [ -x stage/bin/step_bench ]; then
  echo "== ablation (round part one-step-ms two-backends-ms-per-step)" | tee -a "$log"
  for round in 1 2; do
    for part in none dw normreduce adamw attnbwd attnq attnkv attnfwd swiglu \
        rope normfwd normrows dx fwdproducts ce logits; do
      skip=(); [ "$part" != none ] && skip=(--skip="$part")
      one=$(timeout 60 stage/bin/step_bench --kernels=false --phase_times=false \
        "${skip[@]}" 2>&1 | awk '/host wall/ {print $NF}')
      two=$(timeout 60 stage/bin/step_bench --kernels=false --phase_times=false \
        --concurrent_backends=2 "${skip[@]}" 2>&1 | awk '/ms\/round/ {printf "%.3f", $NF / 2}')
      echo "$round $part ${one:-?} ${two:-?}" | tee -a "$out/ablate.txt" "$log"
    done
  done
  note "ablation" "$out/ablate.txt"
fi

# 5. the PyTorch baseline on the same model (tools/bench_torch.py), side by side
if [ "${SKIP_TORCH:-0}" != 1 ] && python3 -c "import torch" 2>/dev/null; then
  echo "== bench_torch" | tee -a "$log"
  timeout "${TORCH_TIMEOUT:-300}" python3 tools/bench_torch.py --modes "${TORCH_MODES:-eager,compile,reduce-overhead}" --steps "${TORCH_STEPS:-200}" \
    >"$out/bench_torch.log" 2>&1
  note "bench_torch" "rc=$?"
  cat "$out/bench_torch.log" >> "$log"
fi

# 6. per-kernel profile of one step (ncu runs the kernels one at a time)
if [ "${PROFILE:-0}" = 1 ] && command -v ncu >/dev/null && [ -x stage/bin/step_bench ]; then
  echo "== ncu step profile" | tee -a "$log"
  timeout 300 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
    --launch-count 700 stage/bin/step_bench --kernels=0 --steps=1 \
    > "$out/ncu_step.csv" 2> "$out/ncu_step.err"
  python3 tools/ncu_step_table.py "$out/ncu_step.csv" --top 25 > "$out/ncu_step_table.txt" 2>&1
  note "ncu step profile" "rc=$? ($out/ncu_step_table.txt)"
fi

# 6b. where the named kernels' warps stall
if [ -n "${NCU_KERNELS:-}" ] && command -v ncu >/dev/null && [ -x stage/bin/step_bench ]; then
  echo "== ncu kernels ${NCU_KERNELS}" | tee -a "$log"
  # (--kernel-name-base mangled: match e.g. "13ForwardKernelILi64" exactly,
  # not LayerNormForwardKernel. --backend=false: the kernel rows alone, so
  # that the first matching launches are theirs, not the step graph's.)
  timeout 300 ncu --kernel-name-base mangled --kernel-name "regex:${NCU_KERNELS}" \
    --launch-count "${NCU_COUNT:-3}" \
    --section SpeedOfLight --section Occupancy --section SchedulerStats \
    --section WarpStateStats \
    --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
    stage/bin/step_bench --backend=false > "$out/ncu_kernels.txt" 2>&1
  note "ncu kernels" "rc=$? ($out/ncu_kernels.txt)"
fi

echo
echo "================ summary ($(date -u +%H:%M:%SZ)) ================"
[ -f "$out/step_bench.log" ] && cat "$out/step_bench.log"
[ -f "$out/bench_torch.log" ] && grep -E "^(torch|pytorch)" "$out/bench_torch.log"
[ -f "$out/ncu_step_table.txt" ] && head -20 "$out/ncu_step_table.txt"
printf '%s\n' "${summary[@]}"
