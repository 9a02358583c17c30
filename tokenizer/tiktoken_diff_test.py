#!/usr/bin/env python3
"""Differential test: our `tokenize` binary against tiktoken 0.14 (SPEC §3).

The oracle is PyPI tiktoken==0.14.0 (tools/requirements-test.txt) loaded with
the SPEC split pattern and a vocabulary built independently of our code:

  1. tiktoken._educational.bpe_train (pure Python) on a sample text, vocab 600,
     written in tiktoken's rank-file format;
  2. with --with-trainer, also a vocabulary made by our own trainer
     (`tokenize train`), vocab 1000.

For each vocabulary, ids from `tokenize encode` must equal
tiktoken.Encoding(...).encode on: the sample text; every code point
0..0x10FFFF except surrogates, alone and in letter/space/digit contexts;
random strings over many Unicode categories; runs of 10^5 of one character;
the known hard cases; ordinary (non-special) mode. Then random byte strings,
invalid UTF-8 included, must round-trip through encode/decode.

Usage (Bazel sh_test): tiktoken_diff_test.py PATH/TO/tokenize [--with-trainer]
"""

import base64
import builtins
import collections
import json
import os
import random
import re
import string
import subprocess
import sys
import tempfile
import time

import tiktoken
import tiktoken._educational

PAT = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++"""
       r"""|\s++$|\s+(?!\S)|\s""")
EOT = "<|endoftext|>"

WHITE_SPACE = ([chr(c) for c in range(0x09, 0x0E)] +
               [chr(c) for c in (0x20, 0x85, 0xA0, 0x1680)] +
               [chr(c) for c in range(0x2000, 0x200B)] +
               [chr(c) for c in (0x2028, 0x2029, 0x202F, 0x205F, 0x3000)])

KNOWN_CASES = [
    " \x850", "\u3000\u3000a", "a\n ", "x\r\n\t", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
    "\u2764\ufe0f", "'\u017f", "\u00bd\u00b2\u216b\u0661\u0662\u06634567",
    "a\x00\x00b\x00", "line one\r\nline two\r\n", "  a", "don't DON'T we'll 'S",
    "hello  \n", " \x1c\x1c", "e\u0301t", "\u00a0\u00a0x", "a \u2028 b",
    "''s", "!'s", " 's", "1,000,000.00", "\t\t\tdef f():\n\t\t\t\treturn 1\n",
]

MULTILINGUAL = """
Le cœur a ses raisons que la raison ne connaît point. Ça va? Où est l'hôtel?
Der schnelle braune Fuchs springt über den faulen Hund. Größe, Maß, Straße.
Быстрая коричневая лиса прыгает через ленивую собаку. Съешь же ещё этих булок.
敏捷的棕色狐狸跳过了懒狗。我能吞下玻璃而不伤身体。日本語のテキストも少し。
الثعلب البني السريع يقفز فوق الكلب الكسول ١٢٣٤٥
ο γρήγορος καφέ αλεπού πηδάει πάνω από το τεμπέλικο σκυλί
नमस्ते दुनिया, यह एक परीक्षण है। 한국어 문장도 있습니다.
Emoji: 👍🏽 ❤️ 👨‍👩‍👧 🇫🇷 — “quotes” ‘single’ … ½ ² Ⅻ ∑ ∞ ≠ ≤
"""


def sample_text():
  """Deterministic English-heavy text: Python docstrings + multilingual."""
  docs = []
  for module in (builtins, string, collections, json, re):
    for name in sorted(dir(module)):
      doc = getattr(getattr(module, name), "__doc__", None)
      if isinstance(doc, str):
        docs.append(doc)
  return "\n\n".join(docs)[:36000] + MULTILINGUAL * 3


class Ours:
  """Runs our `tokenize` binary."""

  def __init__(self, binary, tmpdir):
    self.binary = binary
    self.tmpdir = tmpdir

  def run(self, args, data):
    path_in = os.path.join(self.tmpdir, "in")
    path_out = os.path.join(self.tmpdir, "out")
    with open(path_in, "wb") as f:
      f.write(data)
    proc = subprocess.run([self.binary] + args + [path_in, "-o", path_out],
                          capture_output=True)
    if proc.returncode != 0:
      raise AssertionError("tokenize %s failed: %s" %
                           (" ".join(args), proc.stderr.decode(errors="replace")))
    with open(path_out, "rb") as f:
      return f.read()

  def encode(self, vocab, text_bytes, allow_special, threads=2):
    args = ["encode", "--vocab=" + vocab, "--threads=%d" % threads]
    if allow_special:
      args.append("--allow-special")
    out = self.run(args, text_bytes)
    assert len(out) % 4 == 0
    import array
    a = array.array("I")
    a.frombytes(out)
    if sys.byteorder != "little":
      a.byteswap()
    return a.tolist()

  def decode(self, vocab, ids):
    import array
    a = array.array("I", ids)
    if sys.byteorder != "little":
      a.byteswap()
    return self.run(["decode", "--vocab=" + vocab], a.tobytes())


def compare_segments(name, ours, enc, vocab, segments):
  """Encodes EOT-joined segments with both; reports the first difference."""
  for s in segments:
    assert EOT not in s
  text = EOT.join(segments)
  t0 = time.time()
  mine = ours.encode(vocab, text.encode("utf-8"), allow_special=True)
  t1 = time.time()
  theirs = enc.encode(text, allowed_special="all")
  t2 = time.time()
  if mine == theirs:
    print("  %-34s %8d segments %10d ids  ok (ours %.2fs, tiktoken %.2fs)" %
          (name, len(segments), len(mine), t1 - t0, t2 - t1))
    return 0
  eot = enc.eot_token

  def split(ids):
    out, cur = [], []
    for i in ids:
      if i == eot:
        out.append(cur)
        cur = []
      else:
        cur.append(i)
    out.append(cur)
    return out

  a, b = split(mine), split(theirs)
  for i, s in enumerate(segments):
    if i >= len(a) or a[i] != b[i]:
      print("  %s: MISMATCH on segment %d %r:\n    ours     %s\n    tiktoken %s" %
            (name, i, s[:80], a[i][:40] if i < len(a) else None, b[i][:40]))
      return 1
  print("  %s: MISMATCH (segment count %d vs %d)" % (name, len(a), len(b)))
  return 1


def random_strings(rng, count):
  pools = [
      string.ascii_letters, string.digits, string.punctuation,
      "".join(WHITE_SPACE), "'sdmtlvre", "\r\n", "\x00\x1c\x1d\x1e\x1f",
      "\u0301\u0308\u200d\ufe0f\u20e3",  # marks, ZWJ, variation selectors
      "éñüßøæœçЖжλΩאב", "的中文日本語한국", "١٢٣٤٥٦½²³¼Ⅻⅻ൰",
      "\U0001F468\U0001F469\U0001F467\U0001F44D\U0001F3FD\u2764\U0001F1EB",
      "\ufffd\ufeff\u00ad\u2060\u180e\u061c", "\u1c89\U00010d40\U00011f00",
  ]
  out = []
  for _ in range(count):
    n = rng.randint(1, 40)
    chars = []
    for _ in range(n):
      r = rng.random()
      if r < 0.85:
        chars.append(rng.choice(rng.choice(pools)))
      else:
        cp = rng.randint(0, 0x10FFFF)
        while 0xD800 <= cp <= 0xDFFF:
          cp = rng.randint(0, 0x10FFFF)
        chars.append(chr(cp))
    out.append("".join(chars))
  return out


def run_suite(label, ours, vocab_path, ranks):
  print("vocabulary %s: %d ranks" % (label, len(ranks)))
  enc = tiktoken.Encoding("coppelius_test_" + label, pat_str=PAT,
                          mergeable_ranks=ranks,
                          special_tokens={EOT: len(ranks)})
  rng = random.Random(20260925)
  failures = 0
  text = sample_text()
  failures += compare_segments("sample text", ours, enc, vocab_path, [text])
  failures += compare_segments("known cases", ours, enc, vocab_path,
                               KNOWN_CASES + [c + "  " for c in KNOWN_CASES])
  code_points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
  segs = []
  for c in code_points:
    segs.append(c)
    segs.append("a" + c + "b " + c + c + " 1" + c + "\n'" + c + "  ")
  failures += compare_segments("every code point", ours, enc, vocab_path, segs)
  failures += compare_segments("random unicode", ours, enc, vocab_path,
                               random_strings(rng, 30000))
  ws = [" ".join(rng.choice(WHITE_SPACE) * rng.randint(1, 4)
                 for _ in range(rng.randint(1, 6))) + rng.choice(["", "a", "1", "!"])
        for _ in range(5000)]
  failures += compare_segments("whitespace mixes", ours, enc, vocab_path, ws)
  runs = [c * 100000 for c in ["a", " ", "\n", "^", "1", "é", "\u3000", "ab", "'s"]]
  runs += ["x" + c * 100000 + "y" for c in [" ", "\n", "\t"]]
  failures += compare_segments("runs of 10^5", ours, enc, vocab_path, runs)
  # Whitespace right before a special token, with and without allow-special.
  special_text = "Hello  " + EOT + "  world\n\n" + EOT + EOT + " 's" + EOT + "\t"
  mine = ours.encode(vocab_path, special_text.encode(), allow_special=True)
  if mine != enc.encode(special_text, allowed_special="all"):
    print("  MISMATCH: specials (allowed)")
    failures += 1
  mine = ours.encode(vocab_path, special_text.encode(), allow_special=False)
  if mine != enc.encode_ordinary(special_text):
    print("  MISMATCH: specials as ordinary text")
    failures += 1
  big = (text + EOT) * 40
  for threads in (1, 2, 3):
    if ours.encode(vocab_path, big.encode(), True, threads) != enc.encode(
        big, allowed_special="all"):
      print("  MISMATCH: large text with --threads=%d" % threads)
      failures += 1
  # Round trip of arbitrary bytes (invalid UTF-8 included).
  blobs = []
  for _ in range(3000):
    n = rng.randint(0, 30)
    blobs.append(bytes(rng.choice([rng.randrange(256), 0x80, 0xC3, 0xE2, 0xF0,
                                   0xED, 0xA0, 0x20, 0x61, 0x27, 0x0A])
                       for _ in range(n)))
  blob = b"\x00".join(blobs) + bytes(rng.randrange(256) for _ in range(200000))
  for allow in (False, True):
    ids = ours.encode(vocab_path, blob + EOT.encode(), allow)
    if ours.decode(vocab_path, ids) != blob + EOT.encode():
      print("  MISMATCH: byte round trip (allow_special=%s)" % allow)
      failures += 1
  print("  byte round trips ok" if not failures else "")
  return failures


def dump_ranks(ranks, path):
  """tiktoken.load.dump_tiktoken_bpe's format (it needs blobfile, absent)."""
  with open(path, "wb") as f:
    for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
      f.write(base64.b64encode(token) + b" " + str(rank).encode() + b"\n")


def load_ranks(path):
  """tiktoken.load.load_tiktoken_bpe's parsing, without blobfile."""
  with open(path, "rb") as f:
    return {base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in f.read().splitlines()
                                if line)}


def renumber(ranks):
  """Contiguous ranks in the same order (bpe_train may leave gaps)."""
  return {t: i for i, (t, _) in enumerate(sorted(ranks.items(), key=lambda kv: kv[1]))}


def main(argv):
  binary = os.path.abspath(argv[1])
  tmpdir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
  ours = Ours(binary, tmpdir)
  failures = 0
  start = time.time()

  ranks = renumber(tiktoken._educational.bpe_train(sample_text(), 600, PAT,
                                                   visualise=None))
  vocab = os.path.join(tmpdir, "educational.tiktoken")
  dump_ranks(ranks, vocab)
  print("bpe_train: %.1fs" % (time.time() - start))
  failures += run_suite("educational-600", ours, vocab, ranks)

  if "--with-trainer" in argv[2:]:
    corpus = os.path.join(tmpdir, "corpus.txt")
    with open(corpus, "wb") as f:
      f.write(sample_text().encode())
    vocab2 = os.path.join(tmpdir, "ours.tiktoken")
    proc = subprocess.run([binary, "train", corpus, "-o", vocab2,
                           "--vocab-size=1000", "--progress=false"],
                          capture_output=True)
    if proc.returncode != 0:
      print("tokenize train failed: " + proc.stderr.decode(errors="replace"))
      failures += 1
    else:
      ranks2 = load_ranks(vocab2)
      # Our writer must produce exactly tiktoken's dump_tiktoken_bpe bytes.
      python_dump = os.path.join(tmpdir, "python.tiktoken")
      dump_ranks(ranks2, python_dump)
      with open(vocab2, "rb") as f, open(python_dump, "rb") as g:
        if f.read() != g.read():
          print("MISMATCH: our rank file differs from dump_tiktoken_bpe's bytes")
          failures += 1
      failures += run_suite("ours-1000", ours, vocab2, ranks2)

  print("%s in %.1fs" % ("FAILED" if failures else "PASSED", time.time() - start))
  return 1 if failures else 0


if __name__ == "__main__":
  sys.exit(main(sys.argv))
