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

# The value of a flag that takes one is not a request for help.
"$tokenize" encode --vocab -h in.txt -o "$tmp/o" > "$tmp/out" 2> "$tmp/err"; rc=$?
check "tokenize --vocab -h: the vocabulary -h (exit 1)" test $rc -eq 1
check "tokenize --vocab -h: names -h" one_line_error "$tmp/err" "NOT_FOUND.* -h"

exit $fail
