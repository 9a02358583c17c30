#!/usr/bin/env python3
"""Tokenizer throughput: our `tokenize encode` vs tiktoken, same text and vocabulary.

Both encode the same valid UTF-8 text (the corpus prefix decoded with
errors="replace", since tiktoken takes str) with "<|endoftext|>" allowed,
using the same rank file; the ids must be identical (else exit 1). Prints
MB/s (MB = 10^6 bytes of input text):

  tiktoken      Encoding.encode in-process, single thread (best of --repeat)
  ours e2e      the `tokenize` process wall time: start, vocabulary load, read,
                encode, write ids to a pipe (best of --repeat)
  ours encode   e2e minus the same process on an empty input (startup and
                vocabulary load)

Usage: tools/bench_tokenizer.py [--binary bazel-bin/tokenizer/tokenize]
         [--vocab data/vocab.tiktoken] [--text data/corpus/corpus.txt]
         [--mb 20] [--threads 1,2] [--repeat 3]
"""

import argparse
import array
import base64
import os
import subprocess
import sys
import tempfile
import time

import tiktoken

PAT = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++"""
       r"""|\s++$|\s+(?!\S)|\s""")
EOT = "<|endoftext|>"


def load_ranks(path):
  with open(path, "rb") as f:
    return {base64.b64decode(t): int(r)
            for t, r in (line.split() for line in f.read().splitlines() if line)}


def run_ours(binary, vocab, path, threads):
  t0 = time.perf_counter()
  proc = subprocess.run([binary, "encode", "--vocab=" + vocab, "--allow-special",
                         "--threads=%d" % threads, path, "-o", "-"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  dt = time.perf_counter() - t0
  if proc.returncode != 0:
    sys.exit("tokenize failed: " + proc.stderr.decode(errors="replace"))
  return dt, proc.stdout


def main():
  ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  ap.add_argument("--binary", default="bazel-bin/tokenizer/tokenize")
  ap.add_argument("--vocab", default="data/vocab.tiktoken")
  ap.add_argument("--text", default="data/corpus/corpus.txt")
  ap.add_argument("--mb", type=float, default=20)
  ap.add_argument("--threads", default="1,2")
  ap.add_argument("--repeat", type=int, default=3)
  args = ap.parse_args()

  with open(args.text, "rb") as f:
    raw = f.read(int(args.mb * 1e6))
  text = raw.decode("utf-8", errors="replace")
  data = text.encode("utf-8")
  ranks = load_ranks(args.vocab)
  enc = tiktoken.Encoding("bench", pat_str=PAT, mergeable_ranks=ranks,
                          special_tokens={EOT: len(ranks)})
  tmp = tempfile.mkdtemp()
  path = os.path.join(tmp, "text.txt")
  empty = os.path.join(tmp, "empty.txt")
  with open(path, "wb") as f:
    f.write(data)
  open(empty, "wb").close()
  mb = len(data) / 1e6
  print("text: %s, %.2f MB (valid UTF-8), vocabulary %s (%d ranks)" %
        (args.text, mb, args.vocab, len(ranks)))

  best_tt, ids = float("inf"), None
  for _ in range(args.repeat):
    t0 = time.perf_counter()
    ids = enc.encode(text, allowed_special="all")
    best_tt = min(best_tt, time.perf_counter() - t0)
  print("tiktoken %s   1 thread : %7.2f MB/s  (%d ids, %.3f s)" %
        (tiktoken.__version__, mb / best_tt, len(ids), best_tt))

  startup = min(run_ours(args.binary, args.vocab, empty, 1)[0]
                for _ in range(args.repeat))
  ok = True
  for threads in [int(t) for t in args.threads.split(",")]:
    best, out = float("inf"), None
    for _ in range(args.repeat):
      dt, out = run_ours(args.binary, args.vocab, path, threads)
      best = min(best, dt)
    mine = array.array("I")
    mine.frombytes(out)
    if sys.byteorder != "little":
      mine.byteswap()
    same = mine.tolist() == ids
    ok = ok and same
    print("ours %2d thread%s e2e    : %7.2f MB/s  (%.3f s; %.1fx tiktoken)  "
          "encode only: %7.2f MB/s (%.1fx)  ids %s" %
          (threads, "s" if threads > 1 else " ", mb / best, best, best_tt / best,
           mb / max(best - startup, 1e-9), best_tt / max(best - startup, 1e-9),
           "identical" if same else "DIFFER"))
  print("startup + vocabulary load: %.3f s" % startup)
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
