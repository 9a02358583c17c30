#!/usr/bin/env bash
# Regenerates the code point tables with tokenizer/gen_unicode_tables.py and
# checks that the committed tokenizer/unicode_tables_data.cc is identical.
set -euo pipefail
dir="${TEST_SRCDIR}/${TEST_WORKSPACE}/tokenizer"
out="${TEST_TMPDIR}/unicode_tables_data.cc"
python3 "${dir}/gen_unicode_tables.py" "${out}"
if ! diff -q "${dir}/unicode_tables_data.cc" "${out}" >/dev/null; then
  echo "tokenizer/unicode_tables_data.cc differs from gen_unicode_tables.py output;" \
       "regenerate: python3 tokenizer/gen_unicode_tables.py tokenizer/unicode_tables_data.cc" >&2
  diff "${dir}/unicode_tables_data.cc" "${out}" | head -20 >&2
  exit 1
fi
echo "unicode tables up to date"
