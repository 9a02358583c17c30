#!/usr/bin/env bash
# Builds the GPU binaries and every gpu-tagged test binary here (this
# machine compiles CUDA but has no GPU) and copies them, dereferenced and
# stripped, into stage/ (git-ignored; Bazel outputs are symlinks and would
# not travel). Then, on the GPU machine, from the repo root:
#   bash tools/gpu_checks.sh
# Layout: stage/tests/<package>__<name> (gpu tests), stage/bin/<name>,
# stage/MANIFEST (what was staged, from which commit).
set -euo pipefail
cd "$(dirname "$0")/.."

# Every gpu-tagged test of the workspace (falls back to //trainer/... if a
# package elsewhere does not load right now).
gpu_tests=$(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null | sort) ||
  gpu_tests=$(bazel query 'attr(tags, "\bgpu\b", tests(//trainer/...))' 2>/dev/null | sort)
bins="//trainer/kernels:step_bench"
if bazel query //trainer:train >/dev/null 2>&1; then bins="$bins //trainer:train"; fi
echo "building: $gpu_tests $bins"
bazel build $gpu_tests $bins

rm -rf stage
mkdir -p stage/tests stage/bin
for t in $gpu_tests; do
  pkg=${t#//}; pkg=${pkg%%:*}; name=${t##*:}
  src="bazel-bin/$pkg/$name"
  dst="stage/tests/${pkg//\//_}__$name"
  cp -L "$src" "$dst"
done
for b in $bins; do
  pkg=${b#//}; pkg=${pkg%%:*}; name=${b##*:}
  cp -L "bazel-bin/$pkg/$name" "stage/bin/$name"
done
chmod u+w stage/tests/* stage/bin/*
strip --strip-debug stage/tests/* stage/bin/* 2>/dev/null || true
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- trainer tools || echo ' (+ uncommitted changes)')"
  echo "staged $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  (cd stage && find . -type f ! -name MANIFEST -exec ls -l {} \;)
} > stage/MANIFEST
cat stage/MANIFEST
du -sh stage
