#!/usr/bin/env python3
"""Unit test of tools/build_corpus.py on synthetic inputs (no network).

Checks, against values worked out by hand or built here independently:
  - dictd base64 numbers ("A" = 0, "Kj" = 10*64 + 35, "BAA" = 4096);
  - dictd databases are cut into entry-aligned chunks of >= 64 KiB (but the
    last), which concatenate back to the database;
  - a malformed index line is refused with a message naming file:line;
  - the document order is random.Random(20260925).shuffle of the documents
    sorted by (source, path, chunk index).

Usage (Bazel sh_test): build_corpus_test.py PATH/TO/build_corpus.py
"""

import gzip
import importlib.util
import os
import random
import subprocess
import sys
import tempfile

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"


def encode_dictd(n):
    digits = ""
    while True:
        digits = B64[n % 64] + digits
        n //= 64
        if n == 0:
            return digits


def load(path):
    spec = importlib.util.spec_from_file_location("build_corpus", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}", file=sys.stderr)
        sys.exit(1)


def main():
    bc = load(sys.argv[1])
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    # dictd numbers: most significant digit first.
    check(bc.dictd_number("A", "x", 1) == 0, "A")
    check(bc.dictd_number("Kj", "x", 1) == 10 * 64 + 35, "Kj")
    check(bc.dictd_number("BAA", "x", 1) == 4096, "BAA")
    check(bc.dictd_number("//", "x", 1) == 4095, "//")

    # A synthetic dictd database: 3,000 entries of varying sizes.
    rng = random.Random(1)
    entries = []
    for i in range(3000):
        body = f"word{i}\n   " + "definition text " * rng.randint(1, 40) + "\n\n"
        entries.append((f"word{i}", body.encode()))
    data = b"".join(body for _, body in entries)
    dict_path = os.path.join(work, "test.dict.dz")
    with gzip.open(dict_path, "wb") as f:
        f.write(data)
    index_path = os.path.join(work, "test.index")
    starts = []
    offset = 0
    lines = []
    for word, body in entries:
        starts.append(offset)
        lines.append(f"{word}\t{encode_dictd(offset)}\t{encode_dictd(len(body))}\n")
        offset += len(body)
    rng.shuffle(lines)  # index order must not matter
    with open(index_path, "w") as f:
        f.writelines(lines)
    chunks = bc.dict_chunks(dict_path, index_path)
    check(b"".join(chunks) == data, "chunks do not concatenate to the database")
    position = 0
    entry_starts = set(starts)
    for i, chunk in enumerate(chunks):
        check(position in entry_starts, f"chunk {i} starts at {position}, not an entry start")
        if i + 1 < len(chunks):
            check(len(chunk) >= 65536, f"chunk {i} has {len(chunk)} < 65536 bytes")
            # Cut at the first entry start at or past 64 KiB: no earlier start qualifies.
            earlier = [s for s in starts if position + 65536 <= s < position + len(chunk)]
            check(not earlier, f"chunk {i} runs past entry start {earlier[:1]}")
        position += len(chunk)
    print(f"ok: {len(chunks)} entry-aligned chunks of a {len(data)}-byte database")

    # A bad index line: refused, naming file:line (the script exits 1).
    with open(index_path, "a") as f:
        f.write("broken\tA?\tB\n")
    r = subprocess.run([sys.executable, "-c",
                        "import importlib.util,sys;"
                        "s=importlib.util.spec_from_file_location('b',sys.argv[1]);"
                        "m=importlib.util.module_from_spec(s);s.loader.exec_module(m);"
                        "m.dict_chunks(sys.argv[2],sys.argv[3])",
                        sys.argv[1], dict_path, index_path], capture_output=True, text=True)
    check(r.returncode == 1, "a bad index line should exit 1")
    check(f"{index_path}:3001: bad dictd base64 digit" in r.stderr, f"message: {r.stderr!r}")
    print("ok: bad index line refused")

    # Order: sorted by (source, path, chunk index), then the stated seed.
    docs = [("b", "p", 0, b"x"), ("a", "q", 1, b"y"), ("a", "q", 0, b"z"),
            ("a", "p", 0, b"w"), ("c", "a", 0, b"v")]
    ordered = [docs[3], docs[2], docs[1], docs[0], docs[4]]
    random.Random(20260925).shuffle(ordered)
    check(bc.order_documents(list(reversed(docs))) == ordered, "document order")
    check(bc.order_documents(docs) == ordered, "document order (input order)")
    check(bc.SEPARATOR == b"<|endoftext|>\n", "separator")
    print("ok: document order")

if __name__ == "__main__":
    main()
