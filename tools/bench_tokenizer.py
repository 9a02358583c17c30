#!/usr/bin/env python3
"""Tokenizer throughput: our `tokenize encode` vs tiktoken, same text and vocabulary.

Both encode the same valid UTF-8 text (the corpus prefix decoded with
errors="replace", since tiktoken takes str) with "<|endoftext|>" allowed,
using the same rank file; the ids must be identical (else exit 1). Prints
MB/s (MB = 10^6 bytes of input text):

  tiktoken      Encoding.encode in-process, single thread (best of --repeat)
  ours          the whole `tokenize` process: start, vocabulary load, read,
                encode, write ids to a pipe (best of --repeat)
Each is given by wall time and by CPU time (user + sys; for tiktoken the
process's CPU time during encode): on a loaded machine wall time mostly
measures the other load, CPU time the work. With N threads ours' CPU time
is summed over threads, so only wall time shows the parallel speed-up.

Usage: tools/bench_tokenizer.py [--binary bazel-bin/tokenizer/tokenize]
         [--vocab data/vocab.tiktoken] [--text data/corpus/corpus.txt]
         [--mb 20] [--threads 1,2] [--repeat 3]
"""

import argparse
import array
import base64
import os
import resource
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
  """Returns (wall s, CPU s, stdout) of one `tokenize encode` process."""
  r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
  t0 = time.perf_counter()
  proc = subprocess.run([binary, "encode", "--vocab=" + vocab, "--allow-special",
                         "--threads=%d" % threads, path, "-o", "-"],
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  dt = time.perf_counter() - t0
  r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
  if proc.returncode != 0:
    sys.exit("tokenize failed: " + proc.stderr.decode(errors="replace"))
  cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
  return dt, cpu, proc.stdout


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

  best_tt, cpu_tt, ids = float("inf"), float("inf"), None
  for _ in range(args.repeat):
    c0, t0 = time.process_time(), time.perf_counter()
    ids = enc.encode(text, allowed_special="all")
    best_tt = min(best_tt, time.perf_counter() - t0)
    cpu_tt = min(cpu_tt, time.process_time() - c0)
  print("tiktoken %s  1 thread : wall %7.2f MB/s   CPU %7.2f MB/s  (%d ids)" %
        (tiktoken.__version__, mb / best_tt, mb / cpu_tt, len(ids)))

  startup = min(run_ours(args.binary, args.vocab, empty, 1)[1]
                for _ in range(args.repeat))
  ok = True
  for threads in [int(t) for t in args.threads.split(",")]:
    best, cpu, out = float("inf"), float("inf"), None
    for _ in range(args.repeat):
      dt, c, out = run_ours(args.binary, args.vocab, path, threads)
      best, cpu = min(best, dt), min(cpu, c)
    mine = array.array("I")
    mine.frombytes(out)
    if sys.byteorder != "little":
      mine.byteswap()
    same = mine.tolist() == ids
    ok = ok and same
    print("ours %2d thread%s       : wall %7.2f MB/s   CPU %7.2f MB/s  "
          "(%.1fx / %.1fx tiktoken)  ids %s" %
          (threads, "s" if threads > 1 else " ", mb / best, mb / cpu,
           best_tt / best, cpu_tt / cpu, "identical" if same else "DIFFER"))
  print("ours' startup + vocabulary load: %.3f s CPU" % startup)
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
