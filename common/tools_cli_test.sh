#!/usr/bin/env bash
# The command-line rules the four tools share through common/
# (command_line.h, status_line.h, file_io.h), checked end to end on each
# binary the same way: -h, -help and --help print the tool's usage and
# flags on stdout and exit 0 (so do Abseil's --helpfull, --helpshort,
# --helpmatch, --helpon, --help=SUBSTRING and --version); Abseil's flags
# that read flags from elsewhere are usage errors.
set -uo pipefail
tokenize="$1"; make_cache="$2"; train="$3"; inspect="$4"
tmp="${TEST_TMPDIR:-$(mktemp -d)}/tools_cli"
rm -rf "$tmp"; mkdir -p "$tmp"
fail=0
# check NAME CONDITION..., one_line_error STDERR_FILE PATTERN (runfiles:
# the test runs from the workspace's root).
source common/cli_test_lib.sh || { echo "FAIL: common/cli_test_lib.sh not found" >&2; exit 1; }

# Each tool, and the start of its usage line.
tools=("$tokenize" "$make_cache" "$train" "$inspect")
usages=("tokenize encode --vocab=FILE" "make-cache --vocab=vocab.tiktoken SOURCE"
        "train --config=coppelius --tokens=CACHE" "inspect FILE [--json]")

for k in "${!tools[@]}"; do
  bin=${tools[$k]}; usage=${usages[$k]}; name=$(basename "$bin")
  for h in -h -help --help; do
    "$bin" $h > "$tmp/out" 2> "$tmp/err"; rc=$?
    check "$name $h: exit 0" test $rc -eq 0
    check "$name $h: the usage on stdout" grep -qF -- "$usage" "$tmp/out"
    # Every tool has --threads: the tool's own flags are listed.
    check "$name $h: its flags on stdout" grep -qF -- "--threads (" "$tmp/out"
    check "$name $h: nothing on stderr" test ! -s "$tmp/err"
  done
  # Help wins over the rest of the command line, whatever it holds.
  "$bin" --no-such-flag x -h > "$tmp/out" 2> "$tmp/err"; rc=$?
  check "$name --no-such-flag x -h: exit 0" test $rc -eq 0
  check "$name --no-such-flag x -h: the usage" grep -qF -- "$usage" "$tmp/out"
  for h in --helpfull --helpshort --help=threads --helpmatch=threads --version; do
    "$bin" $h > "$tmp/out" 2> "$tmp/err"; rc=$?
    check "$name $h: exit 0" test $rc -eq 0
    check "$name $h: output on stdout, nothing on stderr" test -s "$tmp/out" -a ! -s "$tmp/err"
  done
  # --version: one line, the tool, Coppelius and its build (it printed the
  # name and Abseil's "Debug build (NDEBUG not #defined)", which describes
  # Debian's prebuilt Abseil, not the tools, built -c opt).
  "$bin" --version > "$tmp/out" 2> "$tmp/err"
  check "$name --version: one line naming the tool and its build" \
    grep -qxE -- "$name \(Coppelius\) — (optimized|debug) build" "$tmp/out"
  check "$name --version: one line" test "$(wc -l < "$tmp/out")" -eq 1
  # After "--", -h is an argument (a file named -h), not a request for help.
  "$bin" -- -h > "$tmp/out" 2> "$tmp/err"; rc=$?
  check "$name -- -h: not help (exit $rc)" test $rc -ne 0 -a ! -s "$tmp/out"
  # Help that cannot be written is an I/O error: exit 1, one line, errno's
  # reason and "stdout".
  if [[ -c /dev/full ]]; then
    "$bin" --help > /dev/full 2> "$tmp/err"; rc=$?
    check "$name --help > /dev/full: exit 1" test $rc -eq 1
    check "$name --help > /dev/full: one line with the reason" \
      one_line_error "$tmp/err" "stdout.*No space left on device"
  fi
done
# Abseil's --flagfile, --fromenv and --tryfromenv are not supported (they
# would bypass the flag spelling and the checks above, and end a bad value
# with Abseil's own lines and exit 1): a usage error, exit 2, one line,
# whatever their value.
printf -- '--no-such-flag=1\n' > "$tmp/flags"
printf -- '--threads=2\n' > "$tmp/good-flags"
for k in "${!tools[@]}"; do
  bin=${tools[$k]}; name=$(basename "$bin")
  for special in "--flagfile=$tmp/missing" "--flagfile=$tmp/flags" \
                 "--flagfile=$tmp/good-flags" "-flagfile=$tmp/flags" \
                 "--fromenv=threads" "--tryfromenv=threads"; do
    flag=${special%%=*}; flag=--${flag##*-}
    FLAGS_threads=abc "$bin" "$special" in > "$tmp/out" 2> "$tmp/err"; rc=$?
    check "$name $special: usage error, exit 2" test $rc -eq 2
    check "$name $special: one line" \
      one_line_error "$tmp/err" "INVALID_ARGUMENT: $flag is not supported"
  done
  "$bin" --flagfile "$tmp/flags" in > "$tmp/out" 2> "$tmp/err"; rc=$?
  check "$name --flagfile FILE: usage error, exit 2" test $rc -eq 2
  check "$name --flagfile FILE: one line" \
    one_line_error "$tmp/err" "INVALID_ARGUMENT: --flagfile is not supported"
done

# Named inputs (file_io.h ReadFile, CheckNamedInput): a character device
# other than /dev/null is refused at once by every tool, one line naming
# it, exit 1 (they were read into memory until memory ran out, and the
# error named no file); /dev/null reads as empty; /dev/stdin and /dev/fd/N
# on a pipe are read. Memory is limited so that a reader that does not
# refuse fails fast instead of taking the machine's.
for i in $(seq 1 200); do
  printf 'The quick brown fox %d jumps over the lazy dog.\n' "$i"
done > "$tmp/src.txt"
"$tokenize" train "$tmp/src.txt" -o "$tmp/v.tiktoken" --vocab-size=300 --progress=false 2> "$tmp/err"
check "inputs: tokenize train (exit 0)" test $? -eq 0
"$make_cache" --vocab="$tmp/v.tiktoken" "$tmp/src.txt" -o "$tmp/good.tok" 2> "$tmp/err"
check "inputs: make-cache (exit 0)" test $? -eq 0
: > "$tmp/fresh.ckpt"
refused() {  # refused NAME COMMAND...: exit 1 at once, one line naming /dev/zero
  local name="$1"; shift
  (ulimit -v 4194304; timeout 60 "$@") > "$tmp/out" 2> "$tmp/err"; local rc=$?
  check "$name: exit 1 (rc $rc)" test $rc -eq 1
  check "$name: one line naming /dev/zero" one_line_error "$tmp/err" "/dev/zero: .*character device\|/dev/zero: not a regular file"
  check "$name: says what is expected" grep -q "expected" "$tmp/err"
}
refused "tokenize encode --vocab=/dev/zero" "$tokenize" encode --vocab=/dev/zero "$tmp/src.txt" -o "$tmp/z.u32"
refused "tokenize encode /dev/zero" "$tokenize" encode --vocab="$tmp/v.tiktoken" /dev/zero -o "$tmp/z.u32"
refused "tokenize decode /dev/zero" "$tokenize" decode --vocab="$tmp/v.tiktoken" /dev/zero -o "$tmp/z.txt"
refused "tokenize train /dev/zero" "$tokenize" train /dev/zero -o "$tmp/z.tiktoken" --progress=false
refused "make-cache --vocab=/dev/zero" "$make_cache" --vocab=/dev/zero "$tmp/src.txt" -o "$tmp/z.tok"
refused "make-cache SOURCE /dev/zero" "$make_cache" --vocab="$tmp/v.tiktoken" /dev/zero -o "$tmp/z.tok"
# verify reports a file that fails on stdout (its vocabulary with it).
(ulimit -v 4194304; timeout 60 "$inspect" verify --vocab=/dev/zero --source="$tmp/src.txt" "$tmp/good.tok") > "$tmp/out" 2> "$tmp/err"; rc=$?
check "inspect verify --vocab=/dev/zero: exit 1 (rc $rc)" test $rc -eq 1
check "inspect verify --vocab=/dev/zero: the FAIL line names it" \
  one_line_error "$tmp/out" "^FAIL $tmp/good.tok: --vocab: /dev/zero: is a character device (such as /dev/zero or a terminal), expected a regular file or a pipe$"
refused "inspect verify /dev/zero" "$inspect" verify /dev/zero
refused "train --tokens=/dev/zero" "$train" --config=tiny --backend=reference --tokens=/dev/zero \
  --checkpoint-in="$tmp/fresh.ckpt" --checkpoint-out="$tmp/z.ckpt" --result="$tmp/z.res"
check "inputs: nothing written for /dev/zero" test ! -e "$tmp/z.u32" -a ! -e "$tmp/z.txt" -a ! -e "$tmp/z.tok" -a ! -e "$tmp/z.tiktoken"

# Inputs larger than the memory available (ulimit -v; sparse files cost no
# disk): one line naming the file and its size, exit 1, no core dump or
# "terminate called", nothing written and no temporary left behind (the line
# was "out of memory" without a path, and make-cache left its temporary).
# A file that does not fit is refused as it is read (file_io.h ReadFile); one
# that fits but whose work does not is named by what ran out
# (status_line.h OutOfMemoryContext).
truncate -s 3G "$tmp/big.txt"
truncate -s 300M "$tmp/mid.txt"
python3 -c 'import sys; sys.stdout.buffer.write((299).to_bytes(4, "little") * 50000000)' > "$tmp/eot.u32"
out_of_memory() {  # out_of_memory NAME PATTERN COMMAND...
  local name="$1" pattern="$2"; shift 2
  (ulimit -v 1048576; ulimit -c 0; timeout 60 "$@") > "$tmp/out" 2> "$tmp/err"; local rc=$?
  check "$name: exit 1 (rc $rc)" test $rc -eq 1
  check "$name: one line: ${prefix:-}$pattern" one_line_error "$tmp/err" "^[a-z-]*: RESOURCE_EXHAUSTED: ${prefix:-}$pattern"
}
big="$tmp/big.txt: 3221225472 bytes do not fit in memory (allocation failed); expected less input or more memory (ulimit -v, RAM)$"
out_of_memory "tokenize encode BIG" "$big" "$tokenize" encode --vocab="$tmp/v.tiktoken" "$tmp/big.txt" -o "$tmp/m.u32"
prefix="--vocab: " out_of_memory "tokenize encode --vocab=BIG" "$big" "$tokenize" encode --vocab="$tmp/big.txt" "$tmp/src.txt" -o "$tmp/m.u32"
out_of_memory "tokenize decode BIG" "$big" "$tokenize" decode --vocab="$tmp/v.tiktoken" "$tmp/big.txt" -o "$tmp/m.txt"
out_of_memory "tokenize train BIG" "$big" "$tokenize" train "$tmp/big.txt" -o "$tmp/m.tiktoken" --progress=false
out_of_memory "make-cache BIG" "$big" "$make_cache" --vocab="$tmp/v.tiktoken" "$tmp/big.txt" -o "$tmp/m.tok"
out_of_memory "tokenize encode - < BIG" "-: more than [0-9]* bytes from a stream do not fit in memory" \
  bash -c 'cat "$4" | "$1" encode --vocab="$2" - -o "$3"' _ "$tokenize" "$tmp/v.tiktoken" "$tmp/m.u32" "$tmp/big.txt"
out_of_memory "tokenize encode MID" "out of memory while encoding $tmp/mid.txt (314572800 bytes)$" \
  "$tokenize" encode --vocab="$tmp/v.tiktoken" "$tmp/mid.txt" -o "$tmp/m.u32"
out_of_memory "tokenize train MID" "out of memory while training on $tmp/mid.txt (314572800 bytes)$" \
  "$tokenize" train "$tmp/mid.txt" -o "$tmp/m.tiktoken" --progress=false
out_of_memory "make-cache MID" "out of memory while encoding $tmp/mid.txt (314572800 bytes)$" \
  "$make_cache" --vocab="$tmp/v.tiktoken" "$tmp/mid.txt" -o "$tmp/m.tok"
out_of_memory "tokenize decode: ids whose bytes do not fit" \
  "$tmp/eot.u32: its 200000000 bytes of ids and their decoding ([0-9]* bytes so far) do not fit in memory" \
  "$tokenize" decode --vocab="$tmp/v.tiktoken" "$tmp/eot.u32" -o "$tmp/m.txt"
check "out of memory: nothing written, no temporary left" \
  test -z "$(ls "$tmp" | grep '^m\.')"
rm -f "$tmp/big.txt" "$tmp/mid.txt" "$tmp/eot.u32"

"$tokenize" encode --vocab="$tmp/v.tiktoken" /dev/null -o "$tmp/null.u32" 2> "$tmp/err"
check "tokenize encode /dev/null: exit 0, no ids" test $? -eq 0 -a -e "$tmp/null.u32" -a ! -s "$tmp/null.u32"
"$tokenize" encode --vocab="$tmp/v.tiktoken" "$tmp/src.txt" -o "$tmp/file.u32"
cat "$tmp/src.txt" | "$tokenize" encode --vocab="$tmp/v.tiktoken" /dev/stdin -o "$tmp/pipe.u32" 2> "$tmp/err"
check "tokenize encode /dev/stdin on a pipe: read" cmp -s "$tmp/file.u32" "$tmp/pipe.u32"
"$tokenize" encode --vocab=<(cat "$tmp/v.tiktoken") "$tmp/src.txt" -o "$tmp/fd.u32" 2> "$tmp/err"
check "tokenize encode --vocab=/dev/fd/N (a pipe): read" cmp -s "$tmp/file.u32" "$tmp/fd.u32"

# Standard input named twice, by any of its names (/dev/stdin, /dev/fd/0,
# /proc/self/fd/0 on a pipe are standard input): a usage error, exit 2, one
# line, in every tool that takes several inputs (file_io.h
# CheckStandardInputReadOnce; `- /dev/stdin` was read twice, the second
# read finding nothing). A regular file on standard input is read afresh
# by its other names: not standard input twice.
twice() {  # twice NAME STDIN_FILE COMMAND...
  local name="$1" in="$2"; shift 2
  cat "$in" | "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  check "$name: usage error, exit 2 (rc $rc)" test $rc -eq 2
  check "$name: one line" one_line_error "$tmp/err" "INVALID_ARGUMENT: .*both read standard input, which can be read once"
}
twice "inspect verify - /dev/stdin" "$tmp/good.tok" "$inspect" verify - /dev/stdin
twice "inspect verify /dev/fd/0 -" "$tmp/good.tok" "$inspect" verify /dev/fd/0 -
twice "inspect verify /proc/self/fd/0 /dev/stdin" "$tmp/good.tok" "$inspect" verify /proc/self/fd/0 /dev/stdin
twice "inspect verify --vocab=- /dev/stdin" "$tmp/good.tok" "$inspect" verify --source="$tmp/src.txt" --vocab=- /dev/stdin
twice "inspect plot - /dev/stdin" "$tmp/good.tok" "$inspect" plot - /dev/stdin -o "$tmp/never.svg"
twice "tokenize encode --vocab=- /dev/stdin" "$tmp/v.tiktoken" "$tokenize" encode --vocab=- /dev/stdin -o "$tmp/never"
twice "tokenize encode --vocab=/dev/stdin -" "$tmp/v.tiktoken" "$tokenize" encode --vocab=/dev/stdin - -o "$tmp/never"
twice "tokenize decode --vocab=/dev/fd/0 /proc/self/fd/0" "$tmp/v.tiktoken" "$tokenize" decode --vocab=/dev/fd/0 /proc/self/fd/0 -o "$tmp/never"
twice "make-cache --vocab=- /dev/stdin" "$tmp/v.tiktoken" "$make_cache" --vocab=- /dev/stdin -o "$tmp/never"
twice "make-cache --vocab=/dev/stdin -" "$tmp/v.tiktoken" "$make_cache" --vocab=/dev/stdin - -o "$tmp/never"
check "stdin twice: nothing written" test ! -e "$tmp/never" -a ! -e "$tmp/never.svg"
"$inspect" verify - /dev/stdin < "$tmp/good.tok" > "$tmp/out" 2> "$tmp/err"; rc=$?
check "inspect verify - /dev/stdin < FILE: both read (exit $rc)" test $rc -eq 0 -a "$(grep -c '^OK ' "$tmp/out")" -eq 2
cat "$tmp/v.tiktoken" | "$tokenize" encode --vocab=/dev/stdin "$tmp/src.txt" -o "$tmp/vpipe.u32" 2> "$tmp/err"
check "tokenize encode --vocab=/dev/stdin (once, a pipe): read" cmp -s "$tmp/file.u32" "$tmp/vpipe.u32"

# Standard input that cannot be read (a directory, `< /`; a descriptor
# opened for writing only, `0> FILE`, on which read(2) fails with EBADF):
# exit 1, one line saying that it was standard input (it said "-: is a
# directory" and "reading -: Bad file descriptor"), in every tool that reads
# it (ReadFile; inspect's copy of a stream, CopyStream), nothing written.
: > "$tmp/write-only"
unreadable() {  # unreadable NAME COMMAND...
  local name="$1"; shift
  "$@" < / > "$tmp/out" 2> "$tmp/err"; local rc=$?
  check "$name < /: exit 1 (rc $rc)" test $rc -eq 1
  check "$name < /: one line naming standard input" \
    one_line_error "$tmp/err" "INVALID_ARGUMENT: ${prefix:-}-: standard input is a directory, expected a file or a pipe$"
  "$@" 0> "$tmp/write-only" > "$tmp/out" 2> "$tmp/err"; rc=$?
  check "$name 0> FILE: exit 1 (rc $rc)" test $rc -eq 1
  check "$name 0> FILE: one line naming standard input" \
    one_line_error "$tmp/err" "INTERNAL: ${prefix:-}reading standard input: Bad file descriptor$"
}
unreadable "tokenize encode -" "$tokenize" encode --vocab="$tmp/v.tiktoken" - -o "$tmp/never"
prefix="--vocab: " unreadable "tokenize encode --vocab=-" "$tokenize" encode --vocab=- "$tmp/src.txt" -o "$tmp/never"
unreadable "tokenize decode -" "$tokenize" decode --vocab="$tmp/v.tiktoken" - -o "$tmp/never"
unreadable "tokenize train -" "$tokenize" train - -o "$tmp/never" --progress=false
unreadable "make-cache -" "$make_cache" --vocab="$tmp/v.tiktoken" - -o "$tmp/never"
unreadable "inspect -" "$inspect" -
unreadable "inspect verify -" "$inspect" verify -
check "unreadable stdin: nothing written" test ! -e "$tmp/never"

# A closed standard input (`<&-`) is refused by its other names as "-" is:
# exit 1, one line naming the path (ProtectStandardStreams reopens it on
# /dev/null, and /dev/stdin read as empty: tokenize encode wrote an empty
# output and exited 0).
closed_stdin() {  # closed_stdin NAME PATH COMMAND...
  local name="$1" path="$2"; shift 2
  "$@" <&- > "$tmp/out" 2> "$tmp/err"; local rc=$?
  check "$name <&-: exit 1 (rc $rc)" test $rc -eq 1
  check "$name <&-: one line naming $path" \
    one_line_error "$tmp/err" "FAILED_PRECONDITION: ${prefix:-}$path: standard input is closed; expected data on it or a file path$"
}
closed_stdin "tokenize encode /dev/stdin" /dev/stdin "$tokenize" encode --vocab="$tmp/v.tiktoken" /dev/stdin -o "$tmp/never"
closed_stdin "tokenize decode /dev/fd/0" /dev/fd/0 "$tokenize" decode --vocab="$tmp/v.tiktoken" /dev/fd/0 -o "$tmp/never"
prefix="--vocab: " closed_stdin "tokenize encode --vocab=/proc/self/fd/0" /proc/self/fd/0 "$tokenize" encode --vocab=/proc/self/fd/0 "$tmp/src.txt" -o "$tmp/never"
closed_stdin "tokenize train /dev/stdin" /dev/stdin "$tokenize" train /dev/stdin -o "$tmp/never" --progress=false
closed_stdin "inspect verify /dev/stdin" /dev/stdin "$inspect" verify /dev/stdin
check "closed stdin: nothing written" test ! -e "$tmp/never"
"$tokenize" encode --vocab="$tmp/v.tiktoken" /dev/null -o "$tmp/null.u32" <&- 2> "$tmp/err"; rc=$?
check "tokenize encode /dev/null <&-: still empty input (rc $rc)" test $rc -eq 0 -a ! -s "$tmp/null.u32"

# The value of a flag that takes one is not a request for help.
"$tokenize" encode --vocab -h in.txt -o "$tmp/o" > "$tmp/out" 2> "$tmp/err"; rc=$?
check "tokenize --vocab -h: the vocabulary -h (exit 1)" test $rc -eq 1
check "tokenize --vocab -h: names -h" one_line_error "$tmp/err" "NOT_FOUND.* -h"

exit $fail
