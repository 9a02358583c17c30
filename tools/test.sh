#!/usr/bin/env bash
# Runs every CPU test (GPU-tagged tests are filtered out by .bazelrc and run
# by tools/gpu_checks.sh on a GPU machine). Prints "N passed, N failed" last.
set -uo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh || exit 1
log=$(mktemp)
bazel test //... "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
passed=$(grep -cE '^//.* (\(cached\) )?PASSED' "$log" || true)
failed=$(grep -cE '^//.* (FAILED|TIMEOUT|NO STATUS|FAILED TO BUILD)' "$log" || true)
rm -f "$log"
echo "$passed passed, $failed failed"
exit "$rc"
