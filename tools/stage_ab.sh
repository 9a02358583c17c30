#!/usr/bin/env bash
# Stages step_bench built at other revisions for tools/gpu_checks.sh's A/B
# (section 4b runs every stage/ab/<name>/step_bench next to this build's,
# in alternating rounds, with the P/M/V digests side by side).
#
#   tools/stage_ab.sh REV[=NAME] [REV[=NAME] ...]
#
# Run after tools/stage_gpu.sh (which empties stage/). Each REV is built in
# a git worktree at a fixed path ($AB_TREE, default /tmp/coppelius_ab_tree:
# Bazel keys its output base by path, so later calls rebuild only what
# changed, and the main checkout's build stays warm) and copied, stripped, to
# stage/ab/NAME/step_bench; NAME defaults to the short hash. Example, the
# previous commit against the working tree:
#   bash tools/stage_gpu.sh && bash tools/stage_ab.sh HEAD~1=before
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $# -ge 1 ]] || { echo "usage: $0 REV[=NAME] ..." >&2; exit 2; }
[[ -d stage ]] || { echo "stage_ab: no stage/: run tools/stage_gpu.sh first" >&2; exit 1; }
tree=${AB_TREE:-/tmp/coppelius_ab_tree}
cleanup() {
  (cd "$tree" && bazel shutdown >/dev/null 2>&1) || true
  git worktree remove --force "$tree" >/dev/null 2>&1 || true
  git worktree prune
}
trap cleanup EXIT
git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"
git worktree prune
git worktree add --detach "$tree" HEAD >/dev/null
for spec in "$@"; do
  rev=${spec%%=*}
  hash=$(git rev-parse --short "$rev^{commit}")
  name=${spec#*=}
  [[ $spec == *=* ]] || name=$hash
  [[ $name =~ ^[A-Za-z0-9._-]+$ ]] || { echo "stage_ab: bad name '$name'" >&2; exit 2; }
  echo "== $rev ($hash) -> stage/ab/$name/step_bench"
  git -C "$tree" checkout --quiet --detach "$hash"
  (cd "$tree" && bazel build //trainer/kernels:step_bench 2>&1 | tail -n 2)
  mkdir -p "stage/ab/$name"
  cp -L "$tree/bazel-bin/trainer/kernels/step_bench" "stage/ab/$name/step_bench"
  chmod u+w "stage/ab/$name/step_bench"
  strip --strip-debug "stage/ab/$name/step_bench" 2>/dev/null || true
  echo "ab $name $hash" >> stage/MANIFEST
done
du -sh stage
