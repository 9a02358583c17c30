#!/usr/bin/env bash
# End to end on the tiny config: `train` (reference backend) writes a
# checkpoint and a result file; `inspect` verifies both, reports them (JSON
# checked by python), exports the checkpoint as safetensors (validated
# independently), and the same after a continuation run (c0 = 8).
set -uo pipefail
inspect="$1"; make="$2"; check="$3"; train="$4"
d="${TEST_TMPDIR:-$(mktemp -d)}/e2e"
mkdir -p "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$make" "$d" || fail "make_testdata"   # cache.tok: 20 contexts of 64, ids < 500
py() { python3 "$check" "$@"; }
: > "$d/fresh.ckpt"

run() {  # run IN OUT RESULT
  "$train" --config=tiny --backend=reference --tokens="$d/cache.tok" \
    --checkpoint_in="$1" --checkpoint_out="$2" --result="$3" --progress=false \
    || fail "train $*"
}
run "$d/fresh.ckpt" "$d/a.ckpt" "$d/a.res"
"$inspect" verify --config=tiny "$d/a.ckpt" "$d/a.res" > "$d/v1.txt" \
  || fail "verify after a fresh run: $(cat "$d/v1.txt")"
"$inspect" --config=tiny --json --vocab="$d/vocab.tiktoken" "$d/a.res" > "$d/a.json" || fail inspect
py trained-result "$d/a.json" 0 || fail "fresh run result"
"$inspect" --config=tiny --json "$d/a.ckpt" > "$d/ack.json" || fail "inspect checkpoint"
python3 -c "
import json, sys
c = json.load(open(sys.argv[1]))
assert c['update_count'] == 8 and c['digests_verified'] and c['identity_matches_config'], c
assert all(t['p']['nonfinite'] == 0 for t in c['tensors'])
assert len(c['tensors']) == 21
" "$d/ack.json" || fail "checkpoint JSON"
"$inspect" export --config=tiny --safetensors "$d/a.ckpt" -o "$d/a.safetensors" || fail export
py safetensors-trained "$d/a.safetensors" 8 || fail "safetensors of a trained checkpoint"

# Continuation: c0 = 8, contexts 8..15.
run "$d/a.ckpt" "$d/b.ckpt" "$d/b.res"
"$inspect" verify --config=tiny "$d/b.ckpt" "$d/b.res" > "$d/v2.txt" \
  || fail "verify after a continuation: $(cat "$d/v2.txt")"
"$inspect" --config=tiny --json "$d/b.res" > "$d/b.json" || fail inspect
py trained-result "$d/b.json" 8 || fail "continuation result"
"$inspect" plot --config=tiny "$d/a.res" "$d/b.res" -o "$d/loss.svg" || fail plot
# Without --config: the config is inferred from the real files.
"$inspect" verify "$d/a.ckpt" "$d/a.res" "$d/b.ckpt" "$d/b.res" > "$d/v3.txt" \
  || fail "verify without --config: $(cat "$d/v3.txt")"
"$inspect" plot "$d/a.res" "$d/b.res" -o "$d/loss2.svg" || fail "plot without --config"
"$inspect" plot "$d/b.res" "$d/a.res" -o "$d/loss3.svg" 2>/dev/null && fail "plot of b a accepted"
# inspect --config=tiny refuses exactly what train --config=tiny refuses:
# intact checkpoints with another run_steps, chunk size or seed.
for f in steps.ckpt multi.ckpt seed.ckpt; do
  "$train" --config=tiny --backend=reference --tokens="$d/cache.tok" \
    --checkpoint_in="$d/$f" --checkpoint_out="$d/r_$f" --result="$d/r_$f.res" \
    --progress=false > /dev/null 2> "$d/t_$f.err" && fail "train accepted $f"
  grep -q "checkpoint refused" "$d/t_$f.err" || fail "train on $f: $(cat "$d/t_$f.err")"
  "$inspect" verify --config=tiny "$d/$f" > "$d/v_$f.txt" 2> /dev/null \
    && fail "verify --config=tiny accepted $f"
  refusal=$(sed -n 's/.*checkpoint refused: //p' "$d/t_$f.err")
  grep -qF "checkpoint refused: $refusal" "$d/v_$f.txt" \
    || fail "$f: train says '$refusal', verify: $(cat "$d/v_$f.txt")"
  "$inspect" --config=tiny "$d/$f" > /dev/null 2>&1 && fail "inspect --config=tiny accepted $f"
done
echo "inspect_train_e2e_test: all checks passed"
