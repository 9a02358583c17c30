#!/usr/bin/env python3
"""End-to-end test of the `make-cache` binary against tiktoken 0.14.

The oracle is PyPI tiktoken==0.14.0 (tools/requirements-test.txt) with the
SPEC §3 split pattern and a vocabulary trained by tiktoken's own pure-Python
`_educational.bpe_train` (independent of our trainer). The cache layout is
checked with `struct` against SPEC §2: 16-byte header (source st_mtime_ns,
size; u64 LE) then u32 LE ids equal to tiktoken's encode with
allowed_special="all".

Also: freshness (a second run leaves the file alone), --force, stdin and
stdout ("-"), and one-line errors with a non-zero exit for bad input.

Usage (Bazel sh_test): make_cache_cli_test.py PATH/TO/make-cache
"""

import base64
import os
import struct
import subprocess
import sys
import tempfile

import tiktoken
import tiktoken._educational

PAT = (r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++"""
       r"""|\s++$|\s+(?!\S)|\s""")
EOT = "<|endoftext|>"

SAMPLE = (
    "The token cache holds the ids of the corpus. Don't re-encode it: it's "
    "mapped read-only, and they'll share it.\n\n  Indented line   with   spaces\n"
    "Numbers 12345 and 3.14159; unicode: café, naïve, Ελληνικά, 日本語, emoji 🙂.\n"
) * 6


def fail(message):
    print(f"FAIL: {message}", file=sys.stderr)
    sys.exit(1)


def run(binary, args, stdin=None):
    return subprocess.run([binary] + args, input=stdin, capture_output=True)


def parse_cache(data):
    if len(data) < 16 or (len(data) - 16) % 4:
        fail(f"cache of {len(data)} bytes is not 16 + 4*N")
    mtime, size = struct.unpack_from("<QQ", data, 0)
    ids = list(struct.unpack_from(f"<{(len(data) - 16) // 4}I", data, 16))
    return mtime, size, ids


def main():
    binary = os.path.abspath(sys.argv[1])
    work = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    ranks = tiktoken._educational.bpe_train(SAMPLE, 330, PAT, visualise=None)
    vocab = os.path.join(work, "vocab.tiktoken")
    with open(vocab, "wb") as f:
        for token, rank in sorted(ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(token) + b" " + str(rank).encode() + b"\n")
    enc = tiktoken.Encoding("test", pat_str=PAT, mergeable_ranks=ranks,
                            special_tokens={EOT: len(ranks)})

    text = (SAMPLE + EOT + "second document\n" + EOT + EOT +
            "  trailing spaces   " + EOT + "\n\n\nlast") * 50
    source = os.path.join(work, "corpus.txt")
    with open(source, "w", encoding="utf-8") as f:
        f.write(text)
    expected_ids = enc.encode(text, allowed_special="all")
    assert expected_ids.count(len(ranks)) == 4 * 50

    # 1. File to file.
    out = os.path.join(work, "corpus.tok")
    r = run(binary, [f"--vocab={vocab}", source, "-o", out, "--threads=2"])
    if r.returncode != 0:
        fail(f"make-cache failed: {r.stderr.decode()}")
    st = os.stat(source)
    mtime, size, ids = parse_cache(open(out, "rb").read())
    if (mtime, size) != (st.st_mtime_ns, st.st_size):
        fail(f"header {(mtime, size)} != source {(st.st_mtime_ns, st.st_size)}")
    if ids != expected_ids:
        first = next(i for i, (a, b) in enumerate(zip(ids, expected_ids)) if a != b)
        fail(f"ids differ from tiktoken (len {len(ids)} vs {len(expected_ids)}, "
             f"first difference at {first})")
    print(f"ok: {len(ids)} ids equal tiktoken's; header = source mtime/size")

    # 2. Fresh: nothing rewritten.
    inode = os.stat(out).st_ino
    r = run(binary, [f"--vocab={vocab}", source, "-o", out])
    if r.returncode != 0 or b"fresh" not in r.stderr or os.stat(out).st_ino != inode:
        fail(f"second run should report the cache fresh: {r.stderr.decode()}")
    r = run(binary, [f"--vocab={vocab}", source, "-o", out, "--force"])
    if r.returncode != 0 or os.stat(out).st_ino == inode:
        fail("--force should rebuild")
    # Stale after a touch.
    os.utime(source, ns=(st.st_atime_ns, st.st_mtime_ns + 1000))
    r = run(binary, [f"--vocab={vocab}", source, "-o", out])
    if r.returncode != 0 or b"fresh" in r.stderr:
        fail(f"a touched source should rebuild: {r.stderr.decode()}")
    mtime, _, _ = parse_cache(open(out, "rb").read())
    if mtime != st.st_mtime_ns + 1000:
        fail("rebuilt header does not carry the new mtime")
    print("ok: fresh / --force / stale")

    # 3. stdin to stdout.
    r = run(binary, [f"--vocab={vocab}", "-", "-o", "-"], stdin=text.encode())
    if r.returncode != 0:
        fail(f"stdin/stdout run failed: {r.stderr.decode()}")
    mtime, size, ids = parse_cache(r.stdout)
    if (mtime, size) != (0, len(text.encode())) or ids != expected_ids:
        fail(f"stdin cache: header {(mtime, size)}, ids equal: {ids == expected_ids}")
    print("ok: - to -")
    # Standard output full: exit 1, one line with <stdout> and errno's reason.
    if os.path.exists("/dev/full"):
        with open("/dev/full", "wb") as full:
            r = subprocess.run([binary, f"--vocab={vocab}", source, "-o", "-"],
                               stdout=full, stderr=subprocess.PIPE)
        err = r.stderr.decode()
        if (r.returncode != 0 and err.count("\n") == 1 and
                "writing <stdout>: No space left on device" in err):
            print("ok: -o - > /dev/full")
        else:
            fail(f"-o - > /dev/full: rc {r.returncode} {err!r}")

    # 4. Bad input: non-zero exit, one line naming the problem, no output.
    bad_vocab = os.path.join(work, "bad.tiktoken")
    with open(vocab, "rb") as f:
        lines = f.read().split(b"\n")
    with open(bad_vocab, "wb") as f:
        f.write(b"\n".join(lines[:300]) + b"\n" + b"!!notbase64 300\n")
    # Exit 2 for a usage error (the command line wrong in itself), 1 for a
    # bad input or output, as in every Coppelius tool (README).
    cases = [
        ([f"--vocab={work}/missing.tiktoken", source, "-o", f"{work}/x.tok"], "missing.tiktoken", 1),
        ([f"--vocab={bad_vocab}", source, "-o", f"{work}/x.tok"], "bad.tiktoken", 1),
        ([f"--vocab={vocab}", f"{work}/missing.txt", "-o", f"{work}/x.tok"], "missing.txt", 1),
        ([f"--vocab={vocab}", source], "-o", 2),
        ([f"--vocab={vocab}", source, source, "-o", f"{work}/x.tok"], "SOURCE", 2),
        ([source, "-o", f"{work}/x.tok"], "--vocab", 2),
        ([f"--vocab={vocab}", source, "-o", f"{work}/x.tok", "--threads=-1"], "--threads=-1", 2),
        ([f"--vocab={vocab}", source, "-o", f"{work}/x.tok", "--threads=5000"], "--threads=5000", 2),
        ([f"--vocab=-", "-", "-o", f"{work}/x.tok"], "standard input", 2),
        ([f"--vocab={vocab}", source, "-o", source], "names the source", 1),
        ([f"--vocab={vocab}", source, "-o", vocab], "names the vocabulary", 1),
        ([f"--vocab={vocab}", "/proc/version", "-o", f"{work}/x.tok"], "whose size says 0", 1),
        ([f"--vocab={vocab}", source, "-o", f"{work}/no/dir/x.tok"], "x.tok", 1),
    ]
    for args, needle, want_rc in cases:
        r = run(binary, args)
        err = r.stderr.decode()
        if r.returncode != want_rc:
            fail(f"{args}: exit {r.returncode}, expected {want_rc}: {err!r}")
        if err.count("\n") != 1 or needle not in err or not err.startswith("make-cache: "):
            fail(f"{args}: expected one line mentioning {needle!r}, got {err!r}")
        if os.path.exists(f"{work}/x.tok"):
            fail(f"{args}: left an output")
    # -o - with standard output on the source (`> SOURCE` would have
    # emptied it first; opened for appending here so that it is not): refused
    # before anything is written.
    for victim_path, needle in ((source, "source"), (vocab, "vocabulary")):
        with open(victim_path, "ab") as sink:
            r = subprocess.run([binary, f"--vocab={vocab}", source, "-o", "-"],
                               stdout=sink, stderr=subprocess.PIPE)
        err = r.stderr.decode()
        if r.returncode != 1 or "is also the output" not in err or needle not in err \
                or err.count("\n") != 1:
            fail(f"-o - onto the {needle}: exit {r.returncode}, {err!r}")
    with open(source, "rb") as f:
        if f.read() != text.encode():
            fail("the source was modified")
    # -o - appending to a checkpoint (`>> run.ckpt`): refused as -o
    # run.ckpt is, --force or not; the checkpoint keeps its bytes.
    appended = os.path.join(work, "appended.ckpt")
    envelope = b"COPPCKPT" + bytes(120)
    with open(appended, "wb") as f:
        f.write(envelope)
    for extra in ([], ["--force"]):
        with open(appended, "ab") as sink:
            r = subprocess.run([binary, f"--vocab={vocab}", source, "-o", "-"] + extra,
                               stdout=sink, stderr=subprocess.PIPE)
        err = r.stderr.decode()
        if r.returncode != 1 or err.count("\n") != 1 or \
                "-o - (standard output, an existing file): exists and is a Coppelius checkpoint" not in err:
            fail(f"-o - >> checkpoint {extra}: exit {r.returncode}, {err!r}")
    with open(appended, "rb") as f:
        if f.read() != envelope:
            fail("-o - >> checkpoint: the checkpoint was appended to")
    print(f"ok: {len(cases)} bad inputs refused with one-line errors")

    # 5. An existing output that is not a token cache is never replaced
    #    without --force (text here; checkpoints and results alike).
    victim = os.path.join(work, "victim.ckpt")
    precious = b"CPPCKPT1 not a token cache, 32 bytes!!"[:32]
    with open(victim, "wb") as f:
        f.write(precious)
    r = run(binary, [f"--vocab={vocab}", source, "-o", victim])
    err = r.stderr.decode()
    if r.returncode == 0 or "not a token cache" not in err or err.count("\n") != 1:
        fail(f"a non-cache output should be refused in one line: {err!r}")
    if open(victim, "rb").read() != precious:
        fail("the refused output was modified")
    r = run(binary, [f"--vocab={vocab}", source, "-o", victim, "--force"])
    if r.returncode != 0 or parse_cache(open(victim, "rb").read())[2] != expected_ids:
        fail(f"--force should replace it: {r.stderr.decode()}")
    print("ok: a non-cache output is kept unless --force")

    # 6. "Fresh" needs more than a matching header: a cache cut to its
    #    header, an id beyond the vocabulary, or a vocabulary newer than the
    #    cache all rebuild it.
    def rebuilt(why):
        r = run(binary, [f"--vocab={vocab}", source, "-o", out])
        err = r.stderr.decode()
        if r.returncode != 0 or "is fresh" in err:
            fail(f"{why}: expected a rebuild, got {err!r}")
        if parse_cache(open(out, "rb").read())[2] != expected_ids:
            fail(f"{why}: the rebuilt ids differ")
    st = os.stat(source)
    good = open(out, "rb").read()
    with open(out, "wb") as f:
        f.write(good[:16])
    os.utime(out, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    rebuilt("a cache cut to its header")
    for cut in (17, 16 + 4 * 5 + 2):  # inside an id: not 16 + 4N bytes
        with open(out, "wb") as f:
            f.write(good[:cut])
        rebuilt(f"a cache cut inside an id ({cut} bytes)")
    with open(out, "wb") as f:
        f.write(good[:16 + 4 * 7] + (100000).to_bytes(4, "little") + good[16 + 4 * 8:])
    rebuilt("an id beyond the vocabulary")
    vocab_st = os.stat(vocab)
    later = os.stat(out).st_mtime_ns + 10**9
    os.utime(vocab, ns=(later, later))
    rebuilt("a vocabulary newer than the cache")
    # (The rebuilt cache may still be older than that future time: put the
    # vocabulary's time back.)
    os.utime(vocab, ns=(vocab_st.st_atime_ns, vocab_st.st_mtime_ns))
    r = run(binary, [f"--vocab={vocab}", source, "-o", out])
    if r.returncode != 0 or "is fresh" not in r.stderr.decode():
        fail(f"an untouched rebuilt cache should be fresh: {r.stderr.decode()}")
    print("ok: truncated / out-of-range / older-than-vocabulary caches rebuilt")

    # 6b. Neither the header nor the files' times tell these, the ids do
    #     (break-it): a cache cut to 16 + 4k bytes (k > 0) after the
    #     vocabulary was written, and a cache of another vocabulary that is
    #     older than the cache (copied with its time, say). Both rebuilt.
    st = os.stat(source)
    good = open(out, "rb").read()
    past = st.st_mtime_ns - 10**9
    os.utime(vocab, ns=(past, past))
    with open(out, "wb") as f:
        f.write(good[:16 + 4 * 100])
    r = run(binary, [f"--vocab={vocab}", source, "-o", out])
    err = r.stderr.decode()
    if r.returncode != 0 or "is fresh" in err or "a cache cut short" not in err:
        fail(f"a cache cut to 100 ids should be rebuilt: {err!r}")
    if open(out, "rb").read() != good:
        fail("the cache cut short was not rebuilt to the same bytes")
    other_ranks = tiktoken._educational.bpe_train(SAMPLE[::-1], 330, PAT,
                                                  visualise=None)
    other = os.path.join(work, "other.tiktoken")
    with open(other, "wb") as f:
        for token, rank in sorted(other_ranks.items(), key=lambda kv: kv[1]):
            f.write(base64.b64encode(token) + b" " + str(rank).encode() + b"\n")
    os.utime(other, ns=(past, past))
    other_enc = tiktoken.Encoding("other", pat_str=PAT,
                                  mergeable_ranks=other_ranks,
                                  special_tokens={EOT: len(other_ranks)})
    other_ids = other_enc.encode(text, allowed_special="all")
    if other_ids == expected_ids:
        fail("test setup: the other vocabulary encodes the text the same")
    r = run(binary, [f"--vocab={other}", source, "-o", out])
    err = r.stderr.decode()
    if r.returncode != 0 or "is fresh" in err or "with this vocabulary" not in err:
        fail(f"a cache of another, older vocabulary should be rebuilt: {err!r}")
    if parse_cache(open(out, "rb").read())[2] != other_ids:
        fail("the rebuilt ids differ from tiktoken's with the other vocabulary")
    r = run(binary, [f"--vocab={other}", source, "-o", out])
    if r.returncode != 0 or "is fresh" not in r.stderr.decode():
        fail(f"the rebuilt cache should be fresh: {r.stderr.decode()}")
    r = run(binary, [f"--vocab={vocab}", source, "-o", out])
    if r.returncode != 0 or parse_cache(open(out, "rb").read())[2] != expected_ids:
        fail(f"back to the first vocabulary: {r.stderr.decode()}")
    print("ok: a cache cut to 100 ids, and one of another older vocabulary, rebuilt")

    # 7. A closed standard input is an error, not an empty cache.
    r = subprocess.run([binary, f"--vocab={vocab}", "-", "-o", f"{work}/y.tok"],
                       capture_output=True, preexec_fn=lambda: os.close(0))
    err = r.stderr.decode()
    if r.returncode == 0 or "standard input is closed" not in err:
        fail(f"closed stdin: expected an error, got rc {r.returncode} {err!r}")
    if os.path.exists(f"{work}/y.tok"):
        fail("closed stdin left an output")
    print("ok: closed stdin refused")

    # A temporary a killed make-cache left beside a fresh cache is removed by
    # the next run, even though that run finds the cache fresh and writes
    # nothing (the pid in its name is a process that has exited).
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = f"{out}.tmp-{dead.pid}-0badcafe"
    with open(stale, "wb") as f:
        f.write(b"partial")
    r = run(binary, [f"--vocab={vocab}", source, "-o", out])
    if r.returncode != 0 or b"fresh" not in r.stderr:
        fail(f"fresh run with a stale temporary: {r.stderr.decode()}")
    if os.path.exists(stale):
        fail("a killed writer's temporary survived a fresh run")
    print("ok: a killed writer's temporary removed by a fresh run")

    # An output in a missing directory is refused before the source is
    # encoded, naming the path given (not a temporary).
    missing = f"{work}/no-such-dir/z.tok"
    r = run(binary, [f"--vocab={vocab}", source, "-o", missing])
    err = r.stderr.decode()
    want = (f"make-cache: NOT_FOUND: -o {missing}: directory "
            f"{work}/no-such-dir does not exist\n")
    if r.returncode == 0 or err != want:
        fail(f"missing output directory: rc {r.returncode} {err!r}, expected {want!r}")
    print("ok: an output in a missing directory refused up front")

    # The summary line names the output with control characters escaped, as
    # error lines do: a newline in -o does not split it.
    odd = os.path.join(work, "odd\nname.tok")
    r = run(binary, [f"--vocab={vocab}", source, "-o", odd])
    err = r.stderr.decode()
    if (r.returncode != 0 or err.count("\n") != 1 or
            not err.startswith("make-cache: wrote ") or "odd\\nname.tok" not in err):
        fail(f"summary for an output with a newline: rc {r.returncode} {err!r}")
    print("ok: the summary line escapes the output's name")


if __name__ == "__main__":
    main()
