#!/usr/bin/env bash
# The main job: corpus -> vocabulary -> token cache -> train (GPU) -> inspect.
#
#   tools/main_job.sh              first run: fresh checkpoint, contexts 0..9,999
#   tools/main_job.sh --continue   second run: continues from the checkpoint,
#                                  contexts 10,000..19,999
#
# Options (environment): DATA=dir (default data/), BIN=dir of prebuilt
# binaries (default: build with Bazel), CORPUS=path of a prebuilt corpus
# (default: build it with tools/build_corpus.py), THREADS=N.
#
# Without an NVIDIA GPU it stops before training with a message; it never
# trains on the host.
set -euo pipefail
cd "$(dirname "$0")/.."
continue_run=0
for arg in "$@"; do
  case "$arg" in
    --continue) continue_run=1 ;;
    *) echo "main_job: unknown argument $arg" >&2; exit 2 ;;
  esac
done
DATA=${DATA:-data}
mkdir -p "$DATA/run/history"
log() { echo "main_job: $*" >&2; }

if [[ -z "${BIN:-}" ]]; then
  bash tools/setup.sh
  bazel build //tokenizer:tokenize //tokencache:make-cache //tokencache:make_cache //trainer:train //inspect:inspect
  BIN=$DATA/bin
  mkdir -p "$BIN"
  for t in tokenizer/tokenize tokencache/make-cache tokencache/make_cache trainer/train inspect/inspect; do
    install -m 755 "bazel-bin/$t" "$BIN/"
  done
fi

if [[ -z "${CORPUS:-}" ]]; then
  python3 tools/build_corpus.py --out "$DATA/corpus/corpus.txt"
  CORPUS=$DATA/corpus/corpus.txt
fi
VOCAB=$DATA/vocab.tiktoken
CACHE=$DATA/corpus.tok
if [[ ! -s "$VOCAB" ]]; then
  log "training the vocabulary on $CORPUS"
  "$BIN/tokenize" train --vocab-size=12288 "$CORPUS" -o "$VOCAB"
fi
"$BIN/make_cache" --vocab="$VOCAB" "$CORPUS" -o "$CACHE"
"$BIN/inspect" "$CACHE" --source="$CORPUS" --config=coppelius

if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; }; then
  log "no NVIDIA GPU on this machine: stopping before training (train never runs on the host)."
  again=tools/main_job.sh
  if ((continue_run)); then again="$again --continue"; fi
  log "on a GPU machine, run: $again   (or stage binaries with tools/stage_gpu.sh and run BIN=stage/bin CORPUS=... $again there; see README)"
  exit 0
fi

CKPT=$DATA/run/coppelius.ckpt
if ((continue_run)); then
  [[ -s "$CKPT" ]] || { log "--continue needs $CKPT from a first run"; exit 1; }
  IN=$CKPT; RESULT=$DATA/run/result-2.bin
else
  IN=$DATA/run/fresh.ckpt; : > "$IN"; RESULT=$DATA/run/result-1.bin
  [[ -e "$CKPT" ]] && { log "$CKPT exists: a first run would overwrite it; move it away or use --continue"; exit 1; }
fi
"$BIN/train" --config=coppelius --tokens="$CACHE" --checkpoint-in="$IN" \
  --checkpoint-out="$CKPT" --result="$RESULT" --checkpoint-history="$DATA/run/history"
"$BIN/inspect" verify "$CKPT" "$RESULT"
"$BIN/inspect" "$CKPT"
"$BIN/inspect" "$RESULT" --vocab="$VOCAB"
results=("$DATA"/run/result-*.bin)
"$BIN/inspect" plot "${results[@]}" -o "$DATA/run/loss.svg"
log "done: checkpoint $CKPT, result $RESULT, plot $DATA/run/loss.svg"
