#!/usr/bin/env bash
# End-to-end checks of the `inspect` binary on synthetic tiny files: exit
# codes, one-line failures, JSON that python's json parses, and a
# safetensors export validated independently (inspect_cli_check.py).
set -uo pipefail
inspect="$1"; make="$2"; check="$3"
d="${TEST_TMPDIR:-$(mktemp -d)}/cli"
mkdir -p "$d"
fail() { echo "FAIL: $*" >&2; exit 1; }
"$make" "$d" || fail "make_testdata"
py() { python3 "$check" "$@"; }

# Reports in JSON for every kind, parsed by python; incomplete results,
# caches with ids >= V and checkpoints a tiny run refuses (multi.ckpt: 64 KiB
# chunks; steps.ckpt: run_steps 9) are reported, then exit 1 with one line on
# stderr.
for f in cache.tok bad_ids.tok model.ckpt multi.ckpt steps.ckpt fresh.ckpt complete.res partial.res marker.res; do
  "$inspect" --config=tiny --json "$d/$f" > "$d/$f.json" 2> "$d/$f.err"
  rc=$?
  case $f in bad_ids.tok|partial.res|marker.res|multi.ckpt|steps.ckpt) want=1 ;; *) want=0 ;; esac
  [[ $rc == "$want" ]] || fail "inspect --json $f exited $rc, expected $want"
  [[ $(wc -l < "$d/$f.err") == "$want" ]] || fail "$f stderr: $(cat "$d/$f.err")"
  py json "$d/$f.json" || fail "$f.json does not parse"
done
# An endless character device, as a path or as stdin, is refused at once
# by name (it was read into memory until memory ran out); a pipe is read.
timeout 20 "$inspect" verify /dev/zero > /dev/null 2> "$d/zero.err"; rc=$?
[[ $rc == 1 && $(wc -l < "$d/zero.err") == 1 ]] && grep -q '/dev/zero: is a character device' "$d/zero.err" \
  || fail "verify /dev/zero: rc $rc, $(cat "$d/zero.err")"
timeout 20 "$inspect" - < /dev/zero > /dev/null 2> "$d/zero.err"; rc=$?
[[ $rc == 1 ]] && grep -q '^inspect: INVALID_ARGUMENT: -: is a character device' "$d/zero.err" \
  || fail "inspect - < /dev/zero: rc $rc, $(cat "$d/zero.err")"
cat "$d/complete.res" | "$inspect" verify --config=tiny - > /dev/null || fail "verify of a pipe"
# A stream is copied into $TMPDIR to be read: when that copy cannot be made
# (no such directory; a write refused, here by `ulimit -f` with SIGXFSZ
# ignored, as by a full disk) the one line names the copy and the stream it
# copies, standard input (it named only the temporary), exit 1.
TMPDIR="$d/no-such-dir" "$inspect" verify --config=tiny - < "$d/complete.res" > /dev/null 2> "$d/spool.err"; rc=$?
[[ $rc == 1 && $(wc -l < "$d/spool.err") == 1 ]] \
  && grep -q "^inspect: NOT_FOUND: creating $d/no-such-dir/inspect-stdin\..* (the copy of standard input under \$TMPDIR or /tmp): No such file or directory$" "$d/spool.err" \
  || fail "TMPDIR missing, verify -: rc $rc, $(cat "$d/spool.err")"
(trap '' XFSZ; ulimit -f 1; exec "$inspect" --config=tiny - < "$d/model.ckpt") > /dev/null 2> "$d/spool.err"; rc=$?
[[ $rc == 1 && $(wc -l < "$d/spool.err") == 1 ]] \
  && grep -q "^inspect: INTERNAL: writing .*/inspect-stdin\..* (the copy of standard input under \$TMPDIR or /tmp): File too large$" "$d/spool.err" \
  || fail "ulimit -f 1, inspect -: rc $rc, $(cat "$d/spool.err")"
# A file that cannot be reported on at all still gives JSON with --json
# (a truncated checkpoint: its envelope fails), and the one-line error.
head -c 100 "$d/model.ckpt" > "$d/cut.ckpt"
"$inspect" --json "$d/cut.ckpt" > "$d/cut.json" 2> "$d/cut.err"; rc=$?
[[ $rc == 1 && $(wc -l < "$d/cut.err") == 1 ]] || fail "--json cut.ckpt: rc $rc, $(cat "$d/cut.err")"
py json "$d/cut.json" || fail "cut.json does not parse: $(cat "$d/cut.json")"
grep -q '"ok":false' "$d/cut.json" || fail "cut.json: $(cat "$d/cut.json")"
# Standard input named twice, or as the source (no mtime): usage errors.
"$inspect" verify --config=tiny - --vocab=- < "$d/cache.tok" > /dev/null 2> "$d/twice.err"; rc=$?
[[ $rc == 2 ]] && grep -q 'both read standard input' "$d/twice.err" || fail "FILE - --vocab=-: rc $rc, $(cat "$d/twice.err")"
"$inspect" verify --config=tiny "$d/cache.tok" --source=- < /dev/null > /dev/null 2> "$d/twice.err"; rc=$?
[[ $rc == 2 ]] && grep -q -- '--source=-' "$d/twice.err" || fail "--source=-: rc $rc, $(cat "$d/twice.err")"
# Without --config, the tiny files are read as tiny.
"$inspect" "$d/complete.res" > "$d/inferred.txt" || fail "inspect without --config"
grep -q "config tiny (result size and host tag)" "$d/inferred.txt" \
  || fail "config not inferred: $(head -1 "$d/inferred.txt")"
"$inspect" verify "$d/model.ckpt" "$d/complete.res" > /dev/null \
  || fail "verify without --config"
# A result cut inside its forward record, named as the main job names
# results (.bin): verify fails it as a result cut short (exit 1, the FAIL
# line naming the size found and expected), and so does the report (one
# line on stderr); it was "not a token cache, checkpoint or result file".
python3 - "$d/complete.res" "$d/cut-c0.bin" <<'PY'
import sys
forward = open(sys.argv[1], "rb").read()[:6144]
open(sys.argv[2], "wb").write((forward * 24)[:100000])
PY
"$inspect" verify "$d/cut-c0.bin" > "$d/cut-c0.out" 2> /dev/null; rc=$?
[[ $rc == 1 ]] && grep -q "^FAIL $d/cut-c0.bin: incomplete: size 100000 bytes, expected 41813600 for config coppelius, assumed: .* (it ends inside the forward record (bytes 0..147456, .*): the file was cut short)$" "$d/cut-c0.out" \
  || fail "verify cut-c0.bin: rc $rc, $(cat "$d/cut-c0.out")"
"$inspect" "$d/cut-c0.bin" > /dev/null 2> "$d/cut-c0.err"; rc=$?
[[ $rc == 1 && $(wc -l < "$d/cut-c0.err") == 1 ]] && grep -q "^inspect: DATA_LOSS: $d/cut-c0.bin: incomplete: size 100000 bytes" "$d/cut-c0.err" \
  || fail "inspect cut-c0.bin: rc $rc, $(cat "$d/cut-c0.err")"
# A checkpoint a tiny run refuses: verify --config=tiny fails it (exit 1),
# verify without --config checks its integrity only (exit 0).
"$inspect" verify --config=tiny "$d/steps.ckpt" > "$d/steps.txt" 2>/dev/null
[[ $? == 1 ]] || fail "verify --config=tiny of steps.ckpt passed"
grep -q "^FAIL $d/steps.ckpt: .*identity field run_steps is 9, the run expects 8$" \
  "$d/steps.txt" || fail "steps.ckpt: $(cat "$d/steps.txt")"
"$inspect" verify "$d/steps.ckpt" > /dev/null || fail "verify of steps.ckpt"
# A text file: refused, one line, exit 1.
printf 'just some text\n' > "$d/notes.txt"
"$inspect" "$d/notes.txt" > "$d/notes.out" 2> "$d/notes.err"
[[ $? == 1 && ! -s "$d/notes.out" ]] || fail "text file: $(cat "$d/notes.out")"
grep -q "not a token cache, checkpoint or result file" "$d/notes.err" \
  || fail "text file error: $(cat "$d/notes.err")"
"$inspect" --config=tiny --json --vocab="$d/vocab.tiktoken" "$d/complete.res" > "$d/r.json" \
  || fail "inspect result"
py result-json "$d/r.json" || fail "result JSON answers"
"$inspect" --config=tiny --json --vocab="$d/vocab.tiktoken" - < "$d/complete.res" > "$d/r2.json" \
  || fail "inspect - (stdin)"
py result-json "$d/r2.json" || fail "result JSON answers from stdin"
grep -q '"path":"-"' "$d/r2.json" || fail "stdin report does not name -"

# verify: exit 0 on good files.
"$inspect" verify --config=tiny --source="$d/source.txt" "$d/cache.tok" "$d/model.ckpt" \
  "$d/complete.res" > "$d/ok.txt" || fail "verify of good files exited $?"
[[ $(grep -c '^OK ' "$d/ok.txt") == 3 ]] || fail "verify OK lines: $(cat "$d/ok.txt")"
# verify: a 0-byte checkpoint is a fresh-start input, not a checkpoint.
"$inspect" verify "$d/fresh.ckpt" > "$d/fresh.txt" 2>/dev/null
[[ $? == 1 ]] || fail "verify of fresh.ckpt passed"
grep -q "0 bytes: a fresh-start input, not a complete checkpoint" "$d/fresh.txt" \
  || fail "fresh.ckpt: $(cat "$d/fresh.txt")"

# verify: corrupt chunks 2 and 7 of multi.ckpt (64 KiB chunks).
cp "$d/multi.ckpt" "$d/corrupt.ckpt"
"$make" corrupt "$d/corrupt.ckpt" $((2 * 65536 + 9)) || fail corrupt
"$make" corrupt "$d/corrupt.ckpt" $((7 * 65536)) || fail corrupt
"$inspect" verify --config=tiny "$d/corrupt.ckpt" "$d/partial.res" "$d/bad_ids.tok" \
  "$d/model.ckpt" > "$d/bad.txt" 2> "$d/bad.err"
rc=$?
[[ $rc == 1 ]] || fail "verify of bad files exited $rc"
grep -q "chunk 2 of 25" "$d/bad.txt" || fail "no chunk 2 line: $(cat "$d/bad.txt")"
grep -q "chunk 7 of 25" "$d/bad.txt" || fail "no chunk 7 line"
# corrupt.ckpt: its chunk size (a tiny run refuses it), chunks 2 and 7.
[[ $(grep -c '^FAIL ' "$d/bad.txt") == 5 ]] || fail "failure lines: $(cat "$d/bad.txt")"
grep -q "identity field chunk_bytes is 65536, the run expects 4194304" "$d/bad.txt" \
  || fail "no refusal line: $(cat "$d/bad.txt")"
[[ $(wc -l < "$d/bad.err") == 1 ]] || fail "stderr not one line: $(cat "$d/bad.err")"
grep -q "3 of 4 files failed" "$d/bad.err" || fail "stderr: $(cat "$d/bad.err")"
# The report of a corrupt checkpoint: printed in full, then exit 1.
"$inspect" "$d/corrupt.ckpt" > "$d/corrupt.txt" 2> "$d/corrupt.err"
[[ $? == 1 ]] || fail "report of a corrupt checkpoint exited 0"
grep -q "digests: FAILED" "$d/corrupt.txt" || fail "no digest line"
grep -q "final_norm.bias" "$d/corrupt.txt" || fail "report cut short"
[[ $(wc -l < "$d/corrupt.err") == 1 ]] || fail "stderr: $(cat "$d/corrupt.err")"
"$inspect" verify --json --config=tiny "$d/corrupt.ckpt" "$d/model.ckpt" > "$d/v.json" 2>/dev/null
[[ $? == 1 ]] || fail "verify --json exit"
py verify-json "$d/v.json" 1 || fail "verify JSON"

# Caches are read with pread in bounded chunks, not mapped (a cache cut
# short while inspect reads it must be a DataLoss, not a SIGBUS): a 256 MiB
# sparse cache (header: stdin, 2^30 source bytes; ids all 0) is reported and
# verified under a 160 MB address-space limit that no mapping of it fits in.
c="$d/sparse.tok"
truncate -s $((16 + 4 * 67108864)) "$c" || fail truncate
printf '\0\0\0\0\0\0\0\0\0\0\0\100\0\0\0\0' | dd of="$c" conv=notrunc 2>/dev/null
( ulimit -v 160000; "$inspect" --config=tiny "$c" ) > "$d/sparse.txt" 2>&1 \
  || fail "inspect of a 256 MiB cache in 160 MB: $(cat "$d/sparse.txt")"
grep -q "tokens: 67108864$" "$d/sparse.txt" || fail "sparse: $(cat "$d/sparse.txt")"
( ulimit -v 160000; "$inspect" verify --config=tiny "$c" ) > "$d/sparse.txt" 2>&1 \
  || fail "verify of a 256 MiB cache in 160 MB: $(cat "$d/sparse.txt")"
rm -f "$c"

# Export, validated by python (and the safetensors package when installed).
"$inspect" export --config=tiny --safetensors "$d/model.ckpt" -o "$d/model.safetensors" \
  || fail "export"
py safetensors "$d/model.safetensors" || fail "safetensors check"
# An export is not a Coppelius file: exporting again replaces it.
"$inspect" "$d/model.safetensors" > /dev/null 2> "$d/st.err"
[[ $? == 1 ]] && grep -q "not a token cache, checkpoint or result file" "$d/st.err" \
  || fail "inspect of a safetensors export: $(cat "$d/st.err")"
"$inspect" export --config=tiny --safetensors "$d/model.ckpt" -o "$d/model.safetensors" \
  || fail "export over an earlier export"
py safetensors "$d/model.safetensors" || fail "safetensors check after re-export"
"$inspect" export --config=tiny --safetensors "$d/corrupt.ckpt" -o "$d/c.safetensors" 2> "$d/e.err"
[[ $? == 1 && ! -e "$d/c.safetensors" ]] || fail "export of a corrupt checkpoint"
[[ $(wc -l < "$d/e.err") == 1 ]] || fail "export error not one line"

# "-" reads stdin (spooled) in verify, plot and export as in the report:
# the same answers as from the file, reports and errors naming "-".
"$inspect" verify --config=tiny - < "$d/model.ckpt" > "$d/vs.txt" || fail "verify -"
[[ $(cat "$d/vs.txt") == "OK - (checkpoint)" ]] || fail "verify -: $(cat "$d/vs.txt")"
"$inspect" verify --config=tiny "$d/cache.tok" - < "$d/bad_ids.tok" > "$d/vb.txt" 2>/dev/null
[[ $? == 1 ]] || fail "verify - of bad_ids.tok passed"
grep -q "^FAIL -: token 1000 (byte offset 4016) has id 600" "$d/vb.txt" \
  || fail "verify - failure: $(cat "$d/vb.txt")"
"$inspect" verify - - < "$d/model.ckpt" > /dev/null 2>&1; [[ $? == 2 ]] || fail "verify - -"
"$inspect" plot --config=tiny - -o "$d/stdin.svg" < "$d/complete.res" || fail "plot -"
"$inspect" plot --config=tiny "$d/complete.res" -o "$d/file.svg" || fail "plot FILE"
cmp -s "$d/stdin.svg" "$d/file.svg" || fail "plot - differs from plot FILE"
"$inspect" export --config=tiny --safetensors=- -o "$d/stdin.safetensors" < "$d/model.ckpt" \
  || fail "export -"
cmp -s "$d/stdin.safetensors" "$d/model.safetensors" || fail "export - differs"

# Pipes and process substitution (read once, like -), named by their path.
"$inspect" verify --config=tiny <(cat "$d/model.ckpt") "$d/cache.tok" <(cat "$d/complete.res") \
  > "$d/vp.txt" || fail "verify <(...): $(cat "$d/vp.txt")"
[[ $(grep -c "^OK /dev/fd/" "$d/vp.txt") == 2 ]] || fail "verify <(...) names: $(cat "$d/vp.txt")"
mkfifo "$d/fifo" || fail mkfifo
cat "$d/complete.res" > "$d/fifo" &
"$inspect" --config=tiny --json --vocab="$d/vocab.tiktoken" "$d/fifo" > "$d/rf.json" || fail "inspect FIFO"
wait
py result-json "$d/rf.json" || fail "result JSON answers from a named pipe"
grep -q "\"path\":\"$d/fifo\"" "$d/rf.json" || fail "FIFO report does not name the pipe"
cat "$d/model.ckpt" > "$d/fifo" &
"$inspect" export --config=tiny --safetensors="$d/fifo" -o "$d/fifo.safetensors" \
  || fail "export from a named pipe"
wait
cmp -s "$d/fifo.safetensors" "$d/model.safetensors" || fail "export from a pipe differs"
rm -f "$d/fifo"

# Plot of two consecutive runs.
"$inspect" plot --config=tiny "$d/complete.res" "$d/partial.res" -o "$d/loss.svg" 2> "$d/p.err" || fail plot
# An incomplete last file names no c0: drawn as the continuation, and said
# to be unchecked.
[[ $(wc -l < "$d/p.err") == 1 ]] && grep -q "partial.res is incomplete and names no c0; drawn as continuing .*complete.res at context [0-9]* (unchecked)" "$d/p.err" \
  || fail "plot of an incomplete last file: $(cat "$d/p.err")"
python3 -c "import sys, xml.etree.ElementTree as E; r = E.parse(sys.argv[1]).getroot(); assert r.tag.endswith('svg')" \
  "$d/loss.svg" || fail "svg does not parse"

# Dash spellings and -o - (stdout).
"$inspect" plot --config=tiny "$d/complete.res" -o - > "$d/stdout.svg" || fail "plot -o -"
grep -q "<svg" "$d/stdout.svg" || fail "plot -o - wrote no SVG"
# Flags plot and export do not use are named in a warning, not ignored in
# silence; the output is written as without them.
"$inspect" plot --config=tiny --json --vocab=v "$d/complete.res" -o "$d/json.svg" 2> "$d/w.err" \
  || fail "plot --json: $(cat "$d/w.err")"
cmp -s "$d/json.svg" "$d/file.svg" || fail "plot --json wrote another SVG"
grep -qx 'inspect: warning: --json is not used by plot: ignored' "$d/w.err" \
  && grep -qx 'inspect: warning: --vocab is not used by plot: ignored' "$d/w.err" \
  || fail "plot --json --vocab warnings: $(cat "$d/w.err")"
"$inspect" --config=tiny --json --kind=result "$d/complete.res" > /dev/null || fail "--kind=result"
# Standard output on an input (`... -o - > X`, `inspect X > X`): the shell
# emptied X before inspect started; the one line says so, exit 1, instead
# of reporting a 0-byte X.
# (--vocab too, for the report and verify.)
for args in "plot --config=tiny X -o -" "export --config=tiny --safetensors X -o -" "--config=tiny X" "verify --config=tiny X" \
            "--config=tiny RES --vocab=X" "verify --config=tiny RES --vocab X"; do
  cp "$d/complete.res" "$d/x.in"; [[ $args == export* ]] && cp "$d/model.ckpt" "$d/x.in"
  [[ $args == *--vocab* ]] && cp "$d/vocab.tiktoken" "$d/x.in"
  label="standard output"; [[ $args == *"-o -"* ]] && label="standard output, -o -"
  args=${args//X/$d/x.in}
  "$inspect" ${args//RES/$d/complete.res} > "$d/x.in" 2> "$d/x.err"; rc=$?
  [[ $rc == 1 && $(wc -l < "$d/x.err") == 1 ]] \
    && grep -qF "inspect: INVALID_ARGUMENT: input file $d/x.in is also the output ($label): a shell \`> $d/x.in\` empties it before the program starts" "$d/x.err" \
    || fail "inspect $args > X: rc $rc, $(cat "$d/x.err")"
done
# A usage error is one whatever standard output is: -o with the report,
# standard output on its FILE.
cp "$d/complete.res" "$d/x.in"
"$inspect" --config=tiny "$d/x.in" -o "$d/report.out" > "$d/x.in" 2> "$d/x.err"; rc=$?
[[ $rc == 2 ]] || fail "-o with > FILE: rc $rc, $(cat "$d/x.err")"
# -o with the report or verify is a usage error (their output goes to
# standard output; the file asked for would not be written), and no file
# appears; every other flag a mode does not use gets its warning (here
# verify's --safetensors and --smoothing, the report's --safetensors).
for mode in "" verify; do
  "$inspect" $mode --config=tiny "$d/complete.res" -o "$d/report.out" > /dev/null 2> "$d/o.err"; rc=$?
  [[ $rc == 2 && $(wc -l < "$d/o.err") == 1 && ! -e "$d/report.out" ]] \
    && grep -q "^inspect: INVALID_ARGUMENT: -o $d/report.out: .*standard output" "$d/o.err" \
    || fail "inspect $mode -o: rc $rc, $(cat "$d/o.err")"
  # -o - names standard output, where they write anyway: accepted.
  "$inspect" $mode --config=tiny "$d/complete.res" -o - > /dev/null 2> "$d/o.err" \
    || fail "inspect $mode -o -: $(cat "$d/o.err")"
done
"$inspect" verify --config=tiny --safetensors="$d/model.ckpt" --smoothing=7 "$d/complete.res" > /dev/null 2> "$d/w.err" \
  || fail "verify with unused flags: $(cat "$d/w.err")"
[[ "$(cat "$d/w.err")" == "inspect: warning: --safetensors is not used by verify: ignored
inspect: warning: --smoothing is not used by verify: ignored" ]] || fail "verify warnings: $(cat "$d/w.err")"
"$inspect" --config=tiny --safetensors "$d/model.ckpt" "$d/complete.res" > /dev/null 2> "$d/w.err" \
  || fail "report with --safetensors: $(cat "$d/w.err")"
grep -qx 'inspect: warning: --safetensors is not used by the report: ignored' "$d/w.err" \
  || fail "report --safetensors warning: $(cat "$d/w.err")"

# Plot: a corrupt result is refused as verify reads it (exit 1, one line),
# not drawn: a NaN loss in window 0 that the error notifier does not count,
# and the marker written back over a complete file's forward record.
python3 - "$d/complete.res" "$d/nan.res" "$d/remarked.res" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
nan = bytearray(b); nan[6184:6188] = struct.pack("<f", float("nan"))
open(sys.argv[2], "wb").write(nan)
rem = bytearray(b); rem[0:8] = bytes.fromhex("bebafecabebafeca")
open(sys.argv[3], "wb").write(rem)
PY
for f in nan remarked; do
  "$inspect" plot --config=tiny "$d/$f.res" -o "$d/$f.svg" 2> "$d/p.err"
  [[ $? == 1 && ! -e "$d/$f.svg" && $(wc -l < "$d/p.err") == 1 ]] || fail "plot of $f.res: $(cat "$d/p.err")"
  "$inspect" verify --config=tiny "$d/$f.res" > /dev/null 2>&1; [[ $? == 1 ]] || fail "verify of $f.res passed"
done
"$inspect" plot --config=tiny "$d/nan.res" -o - > /dev/null 2> "$d/p.err"
grep -q "^inspect: DATA_LOSS: plot: $d/nan.res: offset [0-9]* (error notifier.nonfinite_steps): 0, expected 1" "$d/p.err" \
  || fail "plot of nan.res: $(cat "$d/p.err")"
"$inspect" plot --config=tiny "$d/remarked.res" -o - > /dev/null 2> "$d/p.err"
grep -q "marker be ba fe ca be ba fe ca still present" "$d/p.err" || fail "plot of remarked.res: $(cat "$d/p.err")"
"$inspect" plot --config=tiny "$d/partial.res" -o "$d/partial.svg" || fail "plot of an incomplete result"

# Output paths are checked before anything is read.
"$inspect" plot --config=tiny "$d/complete.res" -o "$d/nodir/x.svg" 2> "$d/p.err"
[[ $? == 1 && $(cat "$d/p.err") == "inspect: NOT_FOUND: -o $d/nodir/x.svg: directory $d/nodir does not exist" ]] \
  || fail "plot -o in a missing directory: $(cat "$d/p.err")"
"$inspect" export --config=tiny --safetensors "$d/model.ckpt" -o "$d" 2> "$d/p.err"
[[ $? == 1 && $(cat "$d/p.err") == "inspect: INVALID_ARGUMENT: -o $d: is a directory, expected a file path" ]] \
  || fail "export -o a directory: $(cat "$d/p.err")"

# Plot: runs out of order are refused.
"$inspect" plot "$d/next.res" "$d/complete.res" -o "$d/bad.svg" 2> "$d/p.err"
[[ $? == 1 && ! -e "$d/bad.svg" ]] || fail "plot of r2 r1"
grep -q "starts at context c0 16, expected 32" "$d/p.err" || fail "plot: $(cat "$d/p.err")"

# Bad flag values: exit 2; unused flags: a one-line warning.
"$inspect" --threads=-1 "$d/model.ckpt" > /dev/null 2> "$d/t.err"; [[ $? == 2 ]] || fail "--threads=-1"
grep -q -- "--threads=-1: expected 0..1024 (0 = all cores)" "$d/t.err" || fail "$(cat "$d/t.err")"
# At most 1,024 threads, as train (common/threads.h kMaxThreadCount).
for t in 1025 100000; do
  "$inspect" verify --threads=$t "$d/model.ckpt" > "$d/t.out" 2> "$d/t.err"; [[ $? == 2 ]] || fail "--threads=$t"
  [[ ! -s "$d/t.out" && $(cat "$d/t.err") == "inspect: INVALID_ARGUMENT: --threads=$t: expected 0..1024 (0 = all cores)" ]] \
    || fail "--threads=$t: $(cat "$d/t.out" "$d/t.err")"
done
"$inspect" verify --threads=1024 "$d/model.ckpt" > /dev/null || fail "--threads=1024"
"$inspect" --threads=0 "$d/model.ckpt" > /dev/null 2>&1 || fail "--threads=0 (all cores)"
"$inspect" plot --smoothing=0 "$d/complete.res" -o - > /dev/null 2>&1; [[ $? == 2 ]] || fail "--smoothing=0"
"$inspect" --vocab="$d/vocab.tiktoken" "$d/model.ckpt" > /dev/null 2> "$d/w.err" || fail "--vocab on a checkpoint"
[[ $(wc -l < "$d/w.err") == 1 ]] && grep -q "warning: --vocab" "$d/w.err" || fail "warning: $(cat "$d/w.err")"

# A source dated before 1970: its mtime is negative (i64) in the cache
# header, the report and verify's failure, never a huge unsigned number.
printf 'hello hello\n' > "$d/old.txt"
touch -d '1960-01-01 00:00:00 UTC' "$d/old.txt"
python3 - "$d/old.tok" <<'PY'
import struct, sys
open(sys.argv[1], "wb").write(struct.pack("<qQ", -315619200 * 10**9, 12) + struct.pack("<3I", 104, 101, 108))
PY
"$inspect" --config=tiny --source="$d/old.txt" "$d/old.tok" > "$d/old.out" || fail "inspect of a 1960 source's cache"
grep -q "staleness: fresh (source now: mtime -315619200000000000 (1960-01-01T00:00:00" "$d/old.out" \
  || fail "1960 staleness: $(cat "$d/old.out")"
printf 'hello there\n' > "$d/old.txt"; touch -d '1960-01-02 00:00:00 UTC' "$d/old.txt"
"$inspect" verify --config=tiny --source="$d/old.txt" "$d/old.tok" > "$d/old.out" 2>/dev/null
[[ $? == 1 ]] || fail "verify of a stale 1960 cache passed"
grep -q "header (offset 0: mtime -315619200000000000, size 12): stale: source modification time differs; source $d/old.txt now has mtime -315532800000000000, size 12" "$d/old.out" \
  || fail "1960 verify: $(cat "$d/old.out")"
# The report with --source on that stale cache, and with a source that is
# missing: the whole report, then exit 1 with one line naming both files (it
# exited 0 while its report said "stale"); with --json, the JSON and exit 1.
"$inspect" --config=tiny --source="$d/old.txt" "$d/old.tok" > "$d/old.out" 2> "$d/old.err"; rc=$?
[[ $rc == 1 && $(wc -l < "$d/old.err") == 1 ]] && grep -q "  tokens: 3$" "$d/old.out" \
  && grep -q "^inspect: FAILED_PRECONDITION: $d/old.tok: header .*: stale: source modification time differs; source $d/old.txt now has mtime" "$d/old.err" \
  || fail "report of a stale cache: rc $rc, $(cat "$d/old.out" "$d/old.err")"
"$inspect" --config=tiny --json --source="$d/old.txt" "$d/old.tok" > "$d/old.json" 2> "$d/old.err"; rc=$?
[[ $rc == 1 && $(wc -l < "$d/old.err") == 1 ]] && py json "$d/old.json" && grep -q '"state":"stale: source modification time differs"' "$d/old.json" \
  || fail "--json report of a stale cache: rc $rc, $(cat "$d/old.json" "$d/old.err")"
"$inspect" --config=tiny --source="$d/none.txt" "$d/old.tok" > "$d/old.out" 2> "$d/old.err"; rc=$?
[[ $rc == 1 && $(wc -l < "$d/old.err") == 1 ]] && grep -q "  staleness: stale: source missing" "$d/old.out" \
  && grep -q "stale: source missing; source $d/none.txt does not exist$" "$d/old.err" \
  || fail "report against a missing source: rc $rc, $(cat "$d/old.out" "$d/old.err")"
# A checkpoint from stdin: the spool file's mtime is not reported.
"$inspect" --config=tiny - < "$d/model.ckpt" > "$d/ck.out" || fail "inspect - < checkpoint"
grep -q "^checkpoint - ([0-9]* bytes, from standard input)$" "$d/ck.out" || fail "stdin checkpoint: $(head -1 "$d/ck.out")"

# Usage errors: exit 2, one line.
"$inspect" --kind=blob "$d/cache.tok" 2> "$d/u.err"; [[ $? == 2 ]] || fail "bad --kind"
"$inspect" 2> "$d/u.err"; [[ $? == 2 ]] || fail "no FILE"
[[ $(cat "$d/u.err") == "inspect: INVALID_ARGUMENT: expected exactly one FILE, got 0 (inspect --help lists the usage and the flags)" ]] \
  || fail "no FILE: $(cat "$d/u.err")"
"$inspect" verify "" 2> "$d/u.err"; [[ $? == 2 ]] || fail "verify \"\": $(cat "$d/u.err")"
# Standard output appending to a checkpoint, result or cache (`>> FILE`):
# the report, verify's lines or -o - would damage it; refused, the file
# keeps its bytes. A log of earlier reports is appended to.
for victim in model.ckpt complete.res cache.tok; do
  cp "$d/$victim" "$d/appended.$victim"
  for cmd in "--config=tiny $d/complete.res" "verify --config=tiny $d/complete.res" \
             "plot --config=tiny $d/complete.res -o -" "export --config=tiny --safetensors $d/model.ckpt -o -"; do
    "$inspect" $cmd >> "$d/appended.$victim" 2> "$d/u.err"; rc=$?
    [[ $rc == 1 && $(wc -l < "$d/u.err") == 1 ]] && grep -q "standard output is an existing Coppelius" "$d/u.err" \
      || fail "$cmd >> $victim: rc $rc, $(cat "$d/u.err")"
  done
  cmp -s "$d/$victim" "$d/appended.$victim" || fail ">> $victim: it was written to"
done
: > "$d/reports.log"
for i in 1 2; do
  "$inspect" verify --config=tiny "$d/complete.res" >> "$d/reports.log" || fail "verify >> a log ($i)"
  "$inspect" --config=tiny "$d/complete.res" >> "$d/reports.log" || fail "report >> a log ($i)"
done
# plot and export -o a symbolic link to nothing: refused, the link kept.
ln -s "$d/no-such-dir/out" "$d/dangling.out"
for cmd in "plot --config=tiny $d/complete.res" "export --config=tiny --safetensors $d/model.ckpt"; do
  "$inspect" $cmd -o "$d/dangling.out" 2> "$d/u.err"; rc=$?
  [[ $rc == 1 && -L "$d/dangling.out" ]] || fail "$cmd -o dangling link: rc $rc, $(cat "$d/u.err")"
  [[ $(wc -l < "$d/u.err") == 1 ]] && grep -q "^inspect: INVALID_ARGUMENT: -o $d/dangling.out: a symbolic link to a missing file or a loop" "$d/u.err" \
    || fail "$cmd -o dangling link: $(cat "$d/u.err")"
done
# An empty RESULT argument to plot, as to verify: a usage error naming it,
# not "opening : No such file or directory" (exit 1); nothing is written.
"$inspect" plot "" -o "$d/empty-arg.svg" 2> "$d/u.err"; rc=$?
[[ $rc == 2 && ! -e "$d/empty-arg.svg" ]] || fail "plot \"\": rc $rc, $(cat "$d/u.err")"
[[ $(cat "$d/u.err") == 'inspect: INVALID_ARGUMENT: plot: an empty RESULT argument (""); expected a path or -' ]] \
  || fail "plot \"\": $(cat "$d/u.err")"
# A mistyped subcommand is named as one (not "expected exactly one FILE" or
# "opening exprot").
"$inspect" verfiy "$d/complete.res" 2> "$d/u.err"; [[ $? == 2 ]] || fail "verfiy: exit"
[[ $(cat "$d/u.err") == 'inspect: INVALID_ARGUMENT: unknown subcommand "verfiy": expected verify, plot or export, or one FILE to report on (inspect --help lists the usage)' ]] \
  || fail "verfiy: $(cat "$d/u.err")"
"$inspect" exprot --safetensors "$d/model.ckpt" -o "$d/q.st" 2> "$d/u.err"; [[ $? == 2 && ! -e "$d/q.st" ]] || fail "exprot: exit"
grep -q 'unknown subcommand "exprot"' "$d/u.err" || fail "exprot: $(cat "$d/u.err")"
# Standard output closed: a report or -o - would go nowhere: refused, exit 1.
"$inspect" --config=tiny "$d/complete.res" >&- 2> "$d/c.err"; [[ $? == 1 ]] || fail "report to closed stdout"
grep -q "the report: standard output is closed" "$d/c.err" || fail "$(cat "$d/c.err")"
for cmd in "plot --config=tiny $d/complete.res" "export --config=tiny --safetensors $d/model.ckpt"; do
  "$inspect" $cmd -o - >&- 2> "$d/c.err"; [[ $? == 1 ]] || fail "$cmd -o - to closed stdout"
  [[ $(cat "$d/c.err") == "inspect: FAILED_PRECONDITION: -o -: standard output is closed; expected somewhere to write" ]] \
    || fail "$cmd: $(cat "$d/c.err")"
done
"$inspect" plot --config=tiny "$d/complete.res" -o "$d/closed.svg" >&- || fail "plot -o FILE with stdout closed"
# Standard output full (a disk, /dev/full): every mode that writes there
# fails, exit 1, one line naming <stdout> and errno's reason (it said
# "writing to stdout failed"); with the file's own failure too (bad_ids.tok
# fails inspect), that line says both.
if [[ -c /dev/full ]]; then
  for cmd in "--config=tiny $d/cache.tok" "--config=tiny --json $d/model.ckpt" \
             "verify --config=tiny $d/complete.res" "verify --json $d/cache.tok" \
             "plot --config=tiny $d/complete.res -o -" \
             "export --config=tiny --safetensors $d/model.ckpt -o -" \
             "--config=tiny $d/bad_ids.tok"; do
    "$inspect" $cmd > /dev/full 2> "$d/full.err"; rc=$?
    [[ $rc == 1 && $(wc -l < "$d/full.err") == 1 ]] || fail "$cmd > /dev/full: rc $rc, $(cat "$d/full.err")"
    grep -q "writing <stdout>: No space left on device" "$d/full.err" || fail "$cmd > /dev/full: $(cat "$d/full.err")"
  done
  grep -q "DATA_LOSS: $d/bad_ids.tok: token .*; the report was not written: writing <stdout>: No space left on device$" "$d/full.err" \
    || fail "bad_ids.tok > /dev/full: $(cat "$d/full.err")"
fi
# A pipe closed early ends the tool by SIGPIPE, as any Unix tool (README),
# where SIGPIPE is not ignored when it starts (bit 12 of SigIgn: signal 13).
if (( (0x$(awk '/^SigIgn/ {print $2}' /proc/self/status 2>/dev/null || echo 0) >> 12) % 2 == 0 )); then
  "$inspect" export --config=tiny --safetensors "$d/model.ckpt" -o - | head -c 10 > /dev/null
  rc=${PIPESTATUS[0]}; [[ $rc == 141 ]] || fail "export -o - | head -c 10: exit $rc, expected 141 (SIGPIPE)"
fi
# --safetensors - (stdin) without Abseil's warning about a flag value "-".
"$inspect" export --config=tiny --safetensors - -o "$d/stdin.safetensors" < "$d/model.ckpt" 2> "$d/s.err" \
  || fail "export --safetensors -"
[[ ! -s "$d/s.err" ]] || fail "export --safetensors -: $(cat "$d/s.err")"
# Bad inputs exit 1 as in the other tools, also where the error is
# INVALID_ARGUMENT (only usage errors exit 2): a directory, a checkpoint
# given to plot, a cache given to export.
"$inspect" "$d" 2> "$d/b.err"; [[ $? == 1 ]] || fail "inspect of a directory: exit"
grep -q "INVALID_ARGUMENT: $d: not a regular file" "$d/b.err" || fail "inspect of a directory: $(cat "$d/b.err")"
"$inspect" plot --config=tiny "$d/model.ckpt" -o "$d/ck.svg" 2> "$d/b.err"; [[ $? == 1 ]] || fail "plot of a checkpoint: $(cat "$d/b.err")"
"$inspect" export --config=tiny --safetensors "$d/cache.tok" -o "$d/c.st" 2> "$d/b.err"; [[ $? == 1 ]] || fail "export of a cache: $(cat "$d/b.err")"
"$inspect" --config=tiny "$d/missing" 2> "$d/m.err"; [[ $? == 1 ]] || fail "missing file"
grep -q "missing" "$d/m.err" || fail "missing file not named"
echo "inspect_cli_test: all checks passed"
