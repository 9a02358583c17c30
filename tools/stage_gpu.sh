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
bins="//trainer/kernels:step_bench //trainer:train //trainer:reference_dump \
  //tokenizer:tokenize //tokencache:make_cache //tokencache:make-cache //inspect:inspect"
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
# The main job's inputs (tools/gpu_results.sh): the corpus (xz, ~24 MB; the
# GPU machine cannot run apt-get download) and the trained vocabulary.
if [[ -s data/corpus/corpus.txt && -s data/vocab.tiktoken ]]; then
  mkdir -p stage/data
  cp data/vocab.tiktoken stage/data/
  if [[ ! -s data/corpus/corpus.txt.xz || data/corpus/corpus.txt -nt data/corpus/corpus.txt.xz ]]; then
    xz -T2 -6 -c data/corpus/corpus.txt > data/corpus/corpus.txt.xz
  fi
  cp data/corpus/corpus.txt.xz stage/data/
else
  echo "stage_gpu: no data/corpus/corpus.txt or data/vocab.tiktoken: run tools/main_job.sh first to stage the main job's inputs" >&2
fi
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- trainer tools || echo ' (+ uncommitted changes)')"
  echo "staged $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  (cd stage && find . -type f ! -name MANIFEST -exec ls -l {} \;)
} > stage/MANIFEST
cat stage/MANIFEST
du -sh stage
