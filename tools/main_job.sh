#!/usr/bin/env bash
# The main job: corpus -> vocabulary -> token cache -> train (GPU) -> inspect.
#
#   tools/main_job.sh              first run: fresh checkpoint, contexts 0..9,999
#   tools/main_job.sh --continue   second run: continues from the checkpoint,
#                                  contexts 10,000..19,999
#
# Options (environment): DATA=dir (default data/ in the repository),
# BIN=dir of prebuilt binaries (default: build with Bazel), CORPUS=path of
# a prebuilt corpus (default: build it with tools/build_corpus.py), paths
# relative to the directory the script is started from; THREADS=N, the
# host threads of tokenize train, make-cache and train (default: theirs).
#
# Without an NVIDIA GPU it stops before training with a message; it never
# trains on the host.
set -euo pipefail
# The caller's relative paths, made absolute before the script moves to the
# repository root.
absolute() { [[ "$1" == /* ]] && printf '%s' "$1" || printf '%s/%s' "$PWD" "$1"; }
[[ -n "${DATA:-}" ]] && DATA=$(absolute "$DATA")
[[ -n "${BIN:-}" ]] && BIN=$(absolute "$BIN")
[[ -n "${CORPUS:-}" ]] && CORPUS=$(absolute "$CORPUS")
# (Expanded as ${threads[@]+...}: an empty array is "unbound" under set -u
# before bash 4.4.)
threads=()
[[ -n "${THREADS:-}" ]] && threads=(--threads="$THREADS")
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
  "$BIN/tokenize" train ${threads[@]+"${threads[@]}"} --vocab-size=12288 "$CORPUS" -o "$VOCAB"
fi
"$BIN/make_cache" ${threads[@]+"${threads[@]}"} --vocab="$VOCAB" "$CORPUS" -o "$CACHE"
"$BIN/inspect" "$CACHE" --source="$CORPUS" --vocab="$VOCAB" --config=coppelius

# train's kernels are built for sm_90a: they run on compute capability 9.0
# only (H100, H200, GH200). Stops here when nvidia-smi lists GPUs and none
# is 9.0; otherwise train checks the device it gets (CUDA's device 0, which
# need not be nvidia-smi's first) and says why it cannot use it.
no_gpu=""
if ! { command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q GPU; }; then
  no_gpu="no NVIDIA GPU on this machine"
else
  caps=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | tr -d ' ' | sort -u | paste -sd ' ') || caps=""
  if [[ "$caps" =~ ^[0-9]+\.[0-9]+( [0-9]+\.[0-9]+)*$ && " $caps " != *" 9.0 "* ]]; then
    no_gpu="no GPU of compute capability 9.0 (H100, H200, GH200), which train's kernels need (this machine's: $caps)"
  fi
fi
if [[ -n "$no_gpu" ]]; then
  log "$no_gpu: stopping before training (train never runs on the host)."
  again=tools/main_job.sh
  if ((continue_run)); then
    if [[ -s "$DATA/run/coppelius.ckpt" ]]; then
      again="$again --continue"
    else
      log "(there is no $DATA/run/coppelius.ckpt to continue: the first run comes first)"
    fi
  fi
  log "on a GPU machine, run: $again   (or stage binaries with tools/stage_gpu.sh and run BIN=stage/bin CORPUS=... $again there; see README)"
  exit 0
fi

CKPT=$DATA/run/coppelius.ckpt
if ((continue_run)); then
  [[ -s "$CKPT" ]] || { log "--continue needs $CKPT from an earlier run"; exit 1; }
  IN=$CKPT
  # c0: the checkpoint's in-band update count (inspect verifies it on the way).
  c0=$("$BIN/inspect" --json "$CKPT" | python3 -c 'import json, sys; print(json.load(sys.stdin)["update_count"])')
else
  [[ -e "$CKPT" ]] && { log "$CKPT exists: a first run would replace it; continue it with --continue (or move it away)"; exit 1; }
  IN=$DATA/run/fresh.ckpt; : > "$IN"; c0=0
fi
# One result per invocation, named by its first context c0.
RESULT=$DATA/run/result-c$(printf %08d "$c0").bin
# A train still running on these outputs holds .NAME.lock beside each
# (common/file_lock.h): leave its files alone (train itself would refuse to
# start). train names the lock after the resolved path (trainer/run.cc
# LockPathFor); $CKPT and $RESULT are plain files under $DATA/run, so the
# name below is the same one.
for f in "$CKPT" "$RESULT"; do
  lock="$(dirname "$f")/.$(basename "$f").lock"
  if [[ -f "$lock" ]] && command -v flock >/dev/null && ! flock -n "$lock" true; then
    log "$f is in use by a running train (lock $lock); not starting another"
    exit 1
  fi
done
if [[ -e "$RESULT" ]] && ! "$BIN/inspect" verify "$RESULT" >/dev/null 2>&1; then
  # Left by a run that died before its first publication: keep it aside.
  aside="$RESULT.incomplete-$(date +%s)"
  mv "$RESULT" "$aside"
  log "moved the incomplete $RESULT of a killed run to $aside"
fi
log "training contexts $c0.. from $IN"
"$BIN/train" ${threads[@]+"${threads[@]}"} --config=coppelius --tokens="$CACHE" --checkpoint-in="$IN" \
  --checkpoint-out="$CKPT" --result="$RESULT" --checkpoint-history="$DATA/run/history"
"$BIN/inspect" verify "$CKPT" "$RESULT"
"$BIN/inspect" "$CKPT"
"$BIN/inspect" "$RESULT" --vocab="$VOCAB"
# The loss curve of every complete result, in context order (a killed run's
# incomplete result is left out).
complete=()
for r in "$DATA"/run/result-c*.bin; do
  if "$BIN/inspect" verify "$r" >/dev/null 2>&1; then complete+=("$r"); fi
done
"$BIN/inspect" plot "${complete[@]}" -o "$DATA/run/loss.svg" \
  || log "no plot: the complete results above do not follow each other"
log "done: checkpoint $CKPT (update count $(( c0 + 10000 ))), result $RESULT, plot $DATA/run/loss.svg"
