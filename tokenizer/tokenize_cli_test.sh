#!/usr/bin/env bash
# End-to-end checks of the `tokenize` binary: subcommands, `-` for stdio,
# hyphenated flags, one-line errors with a non-zero exit, no partial output.
set -uo pipefail
bin="$1"
tmp="${TEST_TMPDIR:-$(mktemp -d)}"
fail=0
# check NAME CONDITION..., one_line_error STDERR_FILE PATTERN (runfiles:
# the test runs from the workspace's root).
source common/cli_test_lib.sh || { echo "FAIL: common/cli_test_lib.sh not found" >&2; exit 1; }

# Training corpus: 300 short documents.
for i in $(seq 1 300); do
  printf 'The quick brown fox %d jumps over the lazy dog.\nIt'"'"'s here.\n<|endoftext|>\n' "$i"
done > "$tmp/corpus.txt"
"$bin" train "$tmp/corpus.txt" -o "$tmp/v.tiktoken" --vocab-size=300 --progress=false 2> "$tmp/err"
check "train exits 0" test $? -eq 0
check "train writes 299 ranks" test "$(wc -l < "$tmp/v.tiktoken")" -eq 299

printf 'The fox<|endoftext|>lazy dog' > "$tmp/in.txt"
"$bin" encode --vocab="$tmp/v.tiktoken" --allow-special --format=text - -o - < "$tmp/in.txt" > "$tmp/ids.txt"
check "encode stdin->stdout" test $? -eq 0
check "special id 299 emitted" grep -qw 299 "$tmp/ids.txt"
"$bin" decode --vocab="$tmp/v.tiktoken" --format=text - -o - < "$tmp/ids.txt" > "$tmp/back.txt"
check "decode round trip" cmp -s "$tmp/in.txt" "$tmp/back.txt"

"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o - | od -An -tu4 -v | xargs > "$tmp/u32.txt"
"$bin" encode --vocab="$tmp/v.tiktoken" --format=text "$tmp/in.txt" -o - | xargs > "$tmp/text.txt"
check "u32 and text formats agree" cmp -s "$tmp/u32.txt" "$tmp/text.txt"
check "special not allowed by default" test "$(grep -cw 299 "$tmp/text.txt")" -eq 0

# Ids as text, of a size a tiny result file can have (6,144..27,744
# bytes): written again over the same output (it is not taken for a
# killed run's result file).
head -c 6000 "$tmp/corpus.txt" > "$tmp/part.txt"
"$bin" encode --vocab="$tmp/v.tiktoken" --format=text "$tmp/part.txt" -o "$tmp/part.ids" &&
  "$bin" encode --vocab="$tmp/v.tiktoken" --format=text "$tmp/part.txt" -o "$tmp/part.ids" 2> "$tmp/err"
check "text ids replaced by a second encode (exit 0)" test $? -eq 0
size=$(stat -c %s "$tmp/part.ids")
check "text ids of a tiny result's size ($size bytes)" test "$size" -ge 6144 -a "$size" -le 27744

head -c 4096 /dev/urandom > "$tmp/rand.bin"
"$bin" encode --vocab="$tmp/v.tiktoken" --threads=2 "$tmp/rand.bin" -o "$tmp/rand.u32" &&
  "$bin" decode --vocab="$tmp/v.tiktoken" "$tmp/rand.u32" -o "$tmp/rand.back"
check "random bytes round trip" cmp -s "$tmp/rand.bin" "$tmp/rand.back"

"$bin" 2> "$tmp/err"; rc=$?
check "no args: usage error, exit 2, one line" test $rc -eq 2 -a "$(wc -l < "$tmp/err")" -eq 1
# An output that is a symbolic link to nothing: refused before any work,
# as make-cache and train refuse it; the link stays a link.
ln -s "$tmp/no-such-dir/ids" "$tmp/dangling.ids"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/dangling.ids" 2> "$tmp/err"; rc=$?
check "dangling -o link: exit 1" test $rc -eq 1
check "dangling -o link: one line" one_line_error "$tmp/err" \
  "INVALID_ARGUMENT: -o $tmp/dangling.ids: a symbolic link to a missing file or a loop"
check "dangling -o link: still a link" test -L "$tmp/dangling.ids"
# An empty input argument (an unset variable): a usage error naming the
# subcommand, not "opening : No such file or directory" (exit 1); no output.
for sub in encode decode train; do
  "$bin" $sub --vocab="$tmp/v.tiktoken" --vocab-size=300 "" -o "$tmp/empty-arg.out" 2> "$tmp/err"; rc=$?
  check "$sub \"\": usage error, exit 2" test $rc -eq 2
  check "$sub \"\": one line naming it" one_line_error "$tmp/err" \
    "INVALID_ARGUMENT: $sub: an empty input argument (\"\"); expected a path or -"
  check "$sub \"\": no output" test ! -e "$tmp/empty-arg.out"
done
"$bin" frobnicate x -o y 2> "$tmp/err"; rc=$?
check "unknown subcommand" one_line_error "$tmp/err" 'unknown subcommand "frobnicate"'
check "unknown subcommand: exit 2" test $rc -eq 2
"$bin" encode --vocab="$tmp/missing.tiktoken" "$tmp/in.txt" -o "$tmp/o" 2> "$tmp/err"; rc=$?
check "missing vocabulary" one_line_error "$tmp/err" "NOT_FOUND.*missing.tiktoken"
check "missing vocabulary: bad input, exit 1" test $rc -eq 1
"$bin" encode --vocab="$tmp/v.tiktoken" --format=u16 "$tmp/in.txt" -o "$tmp/o" 2> "$tmp/err"
check "bad --format" one_line_error "$tmp/err" "expected u32 or text"
head -c 1000 "$tmp/v.tiktoken" > "$tmp/trunc.tiktoken"
"$bin" encode --vocab="$tmp/trunc.tiktoken" "$tmp/in.txt" -o "$tmp/o" 2> "$tmp/err"
check "truncated vocabulary" one_line_error "$tmp/err" "DATA_LOSS.*trunc.tiktoken:[0-9]* (byte [0-9]*)"
printf '1 2 300 4\n' > "$tmp/bad.txt"
"$bin" decode --vocab="$tmp/v.tiktoken" --format=text "$tmp/bad.txt" -o "$tmp/never" 2> "$tmp/err"
check "out-of-range id" one_line_error "$tmp/err" "bad.txt: id 300 at position 2 is out of range \[0, 300)"
check "no partial output" test ! -e "$tmp/never"
"$bin" train "$tmp/corpus.txt" -o "$tmp/never" --vocab-size=300 --threads=99999 2> "$tmp/err"; rc=$?
check "train --threads=99999: usage error, exit 2" test $rc -eq 2
check "train --threads=99999 message" one_line_error "$tmp/err" "INVALID_ARGUMENT.*--threads=99999: expected 0..1024"
"$bin" encode --vocab="$tmp/v.tiktoken" --threads=99999 "$tmp/in.txt" -o "$tmp/never" 2> "$tmp/err"
check "encode --threads=99999" one_line_error "$tmp/err" "--threads=99999: expected 0..1024"
check "no output for refused --threads" test ! -e "$tmp/never"
"$bin" train "$tmp/corpus.txt" -o "$tmp/v2.tiktoken" --vocab-size=300 --threads=3 --progress=false
check "train --threads=3 trains the same" cmp -s "$tmp/v.tiktoken" "$tmp/v2.tiktoken"
printf 'abc' > "$tmp/odd.u32"
"$bin" decode --vocab="$tmp/v.tiktoken" "$tmp/odd.u32" -o "$tmp/never" 2> "$tmp/err"
check "truncated u32" one_line_error "$tmp/err" "DATA_LOSS.*odd.u32: size 3 bytes"
# A mistyped -o must not destroy a checkpoint or a result file.
printf 'COPPCKPT\001\000\000\000rest' > "$tmp/victim.ckpt"
cp "$tmp/victim.ckpt" "$tmp/victim.orig"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/victim.ckpt" 2> "$tmp/err"; rc=$?
check "encode -o checkpoint: exit 1" test $rc -eq 1
check "encode -o checkpoint message" one_line_error "$tmp/err" "FAILED_PRECONDITION: -o $tmp/victim.ckpt: exists and is a Coppelius checkpoint.*choose another output path"
"$bin" train "$tmp/corpus.txt" -o "$tmp/victim.ckpt" --vocab-size=300 --progress=false 2> "$tmp/err"
check "train -o checkpoint refused" one_line_error "$tmp/err" "FAILED_PRECONDITION: -o $tmp/victim.ckpt: exists and is a Coppelius checkpoint"
check "checkpoint untouched" cmp -s "$tmp/victim.ckpt" "$tmp/victim.orig"
printf '\276\272\376\312\276\272\376\312windows' > "$tmp/victim.res"
"$bin" decode --vocab="$tmp/v.tiktoken" "$tmp/rand.u32" -o "$tmp/victim.res" 2> "$tmp/err"
check "decode -o result file refused" one_line_error "$tmp/err" "FAILED_PRECONDITION: -o $tmp/victim.res: exists and is a Coppelius result file"
check "result file untouched" test "$(tail -c 7 "$tmp/victim.res")" = windows
# A complete result of config tiny (27,744 bytes, FORMATS.md) starts with
# logits; its host tag CPLSRES1 is at byte 26,944.
python3 - "$tmp/done.res" <<'PY'
import sys
b = bytearray(b"\x00\x00\x80\x3f" * (27744 // 4))
b[26944:26952] = b"CPLSRES1"
open(sys.argv[1], "wb").write(bytes(b))
PY
cp "$tmp/done.res" "$tmp/done.orig"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/done.res" 2> "$tmp/err"
check "encode -o complete result refused" one_line_error "$tmp/err" "FAILED_PRECONDITION: -o $tmp/done.res: exists and is a Coppelius result file (config tiny"
check "complete result untouched" cmp -s "$tmp/done.res" "$tmp/done.orig"
# A token cache (16-byte header: source mtime, source size; then u32 ids).
python3 - "$tmp/c.tok" <<'PY'
import struct, sys
ids = [104, 101, 108, 108, 111] * 10
open(sys.argv[1], "wb").write(struct.pack("<QQ", 1700000000 * 10**9, 60) + struct.pack("<50I", *ids))
PY
cp "$tmp/c.tok" "$tmp/c.orig"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/c.tok" 2> "$tmp/err"
check "encode -o token cache refused" one_line_error "$tmp/err" "FAILED_PRECONDITION: -o $tmp/c.tok: exists and is a Coppelius token cache"
check "token cache untouched" cmp -s "$tmp/c.tok" "$tmp/c.orig"
# The same cache given to decode (which reads raw ids): the error says what
# the file is and how to decode its ids.
"$bin" decode --vocab="$tmp/v.tiktoken" "$tmp/c.tok" -o "$tmp/never" 2> "$tmp/err"
check "decode of a token cache explained" one_line_error "$tmp/err" "looks like a Coppelius token cache (a 16-byte header, then 50 ids)"
tail -c +17 "$tmp/c.tok" | "$bin" decode --vocab="$tmp/v.tiktoken" - -o "$tmp/c.txt"
check "decode of a cache's ids" test "$(head -c 5 "$tmp/c.txt")" = hello
# A tiny result killed after its forward record and 4 step windows (6,144 +
# 4 x 256 bytes: logits of magnitude 0.5..8 for rows 15, 31, 63, then
# per-row losses, which are never negative; step 0's rows 15, 31, 63 are
# cross-entropies of the forward record's logits, as in a real run).
python3 - "$tmp/killed.res" <<'PY'
import math, random, struct, sys
r = random.Random(1)
vals = [r.uniform(0.5, 8.0) * r.choice((-1, 1)) for _ in range(6144 // 4)]
windows = [r.uniform(0.5, 8.0) for _ in range(4 * 256 // 4)]
for k, row in enumerate((15, 31, 63)):
    logits = vals[512 * k:512 * (k + 1)]
    lse = max(logits) + math.log(sum(math.exp(x - max(logits)) for x in logits))
    windows[row] = lse - logits[r.randrange(512)]
open(sys.argv[1], "wb").write(struct.pack("<%df" % (len(vals) + len(windows)), *(vals + windows)))
PY
cp "$tmp/killed.res" "$tmp/killed.orig"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/killed.res" 2> "$tmp/err"
check "encode -o killed run's result refused" one_line_error "$tmp/err" "FAILED_PRECONDITION: -o $tmp/killed.res: exists and is a Coppelius result file (config tiny, incomplete"
check "killed run's result untouched" cmp -s "$tmp/killed.res" "$tmp/killed.orig"
# Killed inside a window's write: cut at 7,000 bytes (3 windows and 344
# bytes of the 4th), as inspect still reads it (incomplete).
head -c 7000 "$tmp/killed.orig" > "$tmp/cut.res"
cp "$tmp/cut.res" "$tmp/cut.orig"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/cut.res" 2> "$tmp/err"
check "encode -o result cut inside a window refused" one_line_error "$tmp/err" "FAILED_PRECONDITION: -o $tmp/cut.res: exists and is a Coppelius result file (config tiny, incomplete"
check "cut result untouched" cmp -s "$tmp/cut.res" "$tmp/cut.orig"
"$bin" train "$tmp/corpus.txt" -o "$tmp/c.tok" --vocab-size=300 --progress=false 2> "$tmp/err"
check "train -o token cache refused" one_line_error "$tmp/err" "FAILED_PRECONDITION: -o $tmp/c.tok: exists and is a Coppelius token cache"
check "token cache untouched by train" cmp -s "$tmp/c.tok" "$tmp/c.orig"
# An earlier encode output is replaced as before.
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/again.u32" && \
  "$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/again.u32"
check "encode output replaced by encode" test $? -eq 0
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/rand.u32" &&
  "$bin" train "$tmp/corpus.txt" -o "$tmp/v2.tiktoken" --vocab-size=300 --progress=false
check "ordinary outputs are still replaced" cmp -s "$tmp/v.tiktoken" "$tmp/v2.tiktoken"
# --vocab-size is bounded up front (a huge one aborted with std::bad_alloc).
for v in 2147483647 999999999 100000000 4194305 256; do
  timeout 20 "$bin" train "$tmp/corpus.txt" -o "$tmp/never" --vocab-size=$v --progress=false 2> "$tmp/err"; rc=$?
  check "train --vocab-size=$v: usage error, exit 2" test $rc -eq 2
  check "train --vocab-size=$v message" one_line_error "$tmp/err" "INVALID_ARGUMENT: --vocab-size=$v: expected 257..4194304"
done
check "no output for refused --vocab-size" test ! -e "$tmp/never"
# Standard input can be read once.
"$bin" encode --vocab=- - -o "$tmp/never" < "$tmp/v.tiktoken" 2> "$tmp/err"; rc=$?
check "encode --vocab=- -: usage error, exit 2" test $rc -eq 2
check "encode --vocab=- - message" one_line_error "$tmp/err" "INVALID_ARGUMENT: --vocab=- and input -: both read standard input"
"$bin" decode --vocab=- - -o - < "$tmp/v.tiktoken" > "$tmp/out" 2> "$tmp/err"; rc=$?
check "decode --vocab=- -: usage error, exit 2, nothing written" test $rc -eq 2 -a ! -s "$tmp/out"
check "decode --vocab=- - message" one_line_error "$tmp/err" "can be read once"
check "no output for two stdin inputs" test ! -e "$tmp/never"
# `X -o - > X`: the shell empties X before tokenize starts.
cp "$tmp/in.txt" "$tmp/self.txt"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/self.txt" -o - > "$tmp/self.txt" 2> "$tmp/err"; rc=$?
check "encode X -o - > X: exit 1" test $rc -eq 1
check "encode X -o - > X message" one_line_error "$tmp/err" "INVALID_ARGUMENT: input file $tmp/self.txt is also the output (standard output, -o -)"
cp "$tmp/v.tiktoken" "$tmp/selfv.tiktoken"
"$bin" encode --vocab="$tmp/selfv.tiktoken" "$tmp/in.txt" -o - > "$tmp/selfv.tiktoken" 2> "$tmp/err"
check "encode --vocab=V -o - > V" one_line_error "$tmp/err" "INVALID_ARGUMENT: vocabulary file $tmp/selfv.tiktoken is also the output"
cp "$tmp/rand.u32" "$tmp/self.u32"
"$bin" decode --vocab="$tmp/v.tiktoken" "$tmp/self.u32" -o - >> "$tmp/self.u32" 2> "$tmp/err"
check "decode X -o - >> X" one_line_error "$tmp/err" "input file $tmp/self.u32 is also the output"
check "decode X -o - >> X leaves X" cmp -s "$tmp/self.u32" "$tmp/rand.u32"
cp "$tmp/corpus.txt" "$tmp/selfc.txt"
"$bin" train "$tmp/selfc.txt" -o - --vocab-size=300 --progress=false > "$tmp/selfc.txt" 2> "$tmp/err"
check "train X -o - > X" one_line_error "$tmp/err" "corpus $tmp/selfc.txt is also the output"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/in.txt" 2> "$tmp/err"
check "encode X -o X" one_line_error "$tmp/err" "INVALID_ARGUMENT: -o $tmp/in.txt: names the input file $tmp/in.txt"
"$bin" encode --vocab="$tmp/v.tiktoken" - -o - < "$tmp/in.txt" > "$tmp/from_stdin.u32"
check "stdin to stdout still works" test $? -eq 0 -a -s "$tmp/from_stdin.u32"
# A flag the subcommand does not use: one warning line, then the run as
# without it (as inspect does).
"$bin" encode --vocab="$tmp/v.tiktoken" --vocab-size=5 --progress=false "$tmp/in.txt" -o "$tmp/warn.u32" 2> "$tmp/err"; rc=$?
check "encode --vocab-size: exit 0" test $rc -eq 0
check "encode --vocab-size: two warnings" test "$(cat "$tmp/err")" = "tokenize: warning: --vocab-size is not used by encode: ignored
tokenize: warning: --progress is not used by encode: ignored"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/plain.u32" 2> "$tmp/err"
check "encode with its own flags: no warning" test ! -s "$tmp/err"
check "ignored flags change nothing" cmp -s "$tmp/warn.u32" "$tmp/plain.u32"
"$bin" train "$tmp/corpus.txt" -o "$tmp/v3.tiktoken" --vocab-size=300 --progress=false --vocab="$tmp/v.tiktoken" --format=bogus 2> "$tmp/err"; rc=$?
check "train --vocab --format: exit 0" test $rc -eq 0
check "train --vocab warning" grep -qx "tokenize: warning: --vocab is not used by train: ignored" "$tmp/err"
check "train --format warning" grep -qx "tokenize: warning: --format is not used by train: ignored" "$tmp/err"
check "train ignores them" cmp -s "$tmp/v.tiktoken" "$tmp/v3.tiktoken"
"$bin" decode --vocab="$tmp/v.tiktoken" --allow-special --threads=99999 "$tmp/plain.u32" -o "$tmp/back2.txt" 2> "$tmp/err"; rc=$?
check "decode --allow-special --threads: exit 0" test $rc -eq 0
check "decode warnings" test "$(cat "$tmp/err")" = "tokenize: warning: --allow-special is not used by decode: ignored
tokenize: warning: --threads is not used by decode: ignored"
check "decode result" cmp -s "$tmp/back2.txt" "$tmp/in.txt"
"$bin" encode --vocab="$tmp/v.tiktoken" -noprogress -vocab_size 300 "$tmp/in.txt" -o "$tmp/warn2.u32" 2> "$tmp/err"
check "encode -noprogress -vocab_size 300: two warnings" test "$(cat "$tmp/err")" = "tokenize: warning: --vocab-size is not used by encode: ignored
tokenize: warning: --progress is not used by encode: ignored"
# A rank too large for a u32 id is out of range (not "not a decimal").
{ head -n 256 "$tmp/v.tiktoken"; echo 'YWI= 99999999999999999999'; } > "$tmp/bigrank.tiktoken"
"$bin" encode --vocab="$tmp/bigrank.tiktoken" "$tmp/in.txt" -o "$tmp/never" 2> "$tmp/err"
check "rank out of range" one_line_error "$tmp/err" "DATA_LOSS: --vocab: $tmp/bigrank.tiktoken:257 (byte [0-9]*): rank 99999999999999999999 at byte [0-9]* is out of range (expected < 4294967296"
# Output paths are checked before any work (train used to run its whole
# training, then fail naming a temporary file).
mkdir -p "$tmp/adir"
"$bin" train "$tmp/corpus.txt" -o "$tmp/adir" --vocab-size=300 --progress=false 2> "$tmp/err"
check "train -o a directory refused" one_line_error "$tmp/err" "INVALID_ARGUMENT: -o $tmp/adir: is a directory, expected a file path"
"$bin" train "$tmp/corpus.txt" -o "$tmp/nodir/v.tiktoken" --vocab-size=300 --progress=false 2> "$tmp/err"
check "train -o in a missing directory refused" one_line_error "$tmp/err" "NOT_FOUND: -o $tmp/nodir/v.tiktoken: directory $tmp/nodir does not exist"
"$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o "$tmp/in.txt/x" 2> "$tmp/err"
check "encode -o under a file refused" one_line_error "$tmp/err" "INVALID_ARGUMENT: -o $tmp/in.txt/x: $tmp/in.txt is not a directory"
# A full device, as -o or as standard output: exit 1, one line with the
# path (or <stdout>) and errno's reason.
if [[ -c /dev/full ]]; then
  "$bin" encode --vocab="$tmp/v.tiktoken" "$tmp/in.txt" -o /dev/full 2> "$tmp/err"; rc=$?
  check "encode -o /dev/full: exit 1" test $rc -eq 1
  check "encode -o /dev/full message" one_line_error "$tmp/err" "RESOURCE_EXHAUSTED: .*writing /dev/full: No space left on device"
  "$bin" encode --vocab="$tmp/v.tiktoken" --format=text "$tmp/in.txt" -o - > /dev/full 2> "$tmp/err"; rc=$?
  check "encode -o - > /dev/full: exit 1" test $rc -eq 1
  check "encode -o - > /dev/full message" one_line_error "$tmp/err" "RESOURCE_EXHAUSTED: .*writing <stdout>: No space left on device"
  "$bin" decode --vocab="$tmp/v.tiktoken" "$tmp/rand.u32" -o - > /dev/full 2> "$tmp/err"; rc=$?
  check "decode -o - > /dev/full: exit 1" test $rc -eq 1
  check "decode -o - > /dev/full message" one_line_error "$tmp/err" "writing <stdout>: No space left on device"
  "$bin" train "$tmp/corpus.txt" -o - --vocab-size=300 --progress=false > /dev/full 2> "$tmp/err"; rc=$?
  check "train -o - > /dev/full: exit 1" test $rc -eq 1
  check "train -o - > /dev/full message" one_line_error "$tmp/err" "writing <stdout>: No space left on device"
fi
exit $fail
