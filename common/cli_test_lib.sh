# Helpers shared by the tools' end-to-end shell tests (sourced, not run).
# The sourcing script sets `fail=0` and exits non-zero when it is 1.

check() {  # check NAME CONDITION...: runs CONDITION, reports ok / FAIL NAME
  local name="$1"; shift
  if "$@"; then echo "ok   ${name}"; else echo "FAIL ${name}"; fail=1; fi
}

one_line_error() {  # one_line_error STDERR_FILE PATTERN: one line, matching
  [[ $(wc -l < "$1") -eq 1 ]] && grep -q -- "$2" "$1"
}
