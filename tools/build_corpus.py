#!/usr/bin/env python3
"""Builds the Coppelius training corpus, deterministically, from Debian packages.

Sources (only these; fetched with `apt-get download`, extracted with
`dpkg-deb -x`), each pinned to the version the recorded digest was made with:

  source      package          documents
  gcide       dict-gcide       usr/share/dictd/gcide.dict.dz, entry-aligned ~64 KiB chunks
  foldoc      dict-foldoc      usr/share/dictd/foldoc.dict.dz, entry-aligned ~64 KiB chunks
  jargon      dict-jargon      usr/share/dictd/jargon.dict.dz, entry-aligned ~64 KiB chunks
  python-doc  python3.11-doc   every file under usr/share/doc/python3.11/html/_sources
  linux-doc   linux-doc-6.1    every file under usr/share/doc/linux-doc-6.1/html/_sources
  perl-doc    perl-doc         every usr/share/perl/*/pod/*.pod
  fortunes    fortunes, fortunes-min  every fortune data file in usr/share/games/fortunes
                               (regular files, not the `.dat` indexes or `.u8` links)

A dictd `.dict.dz` is gzip (dictzip) data; its `.index` lists every entry as
`headword TAB offset TAB length` with offset/length in dictd's base64 digits
(A-Z a-z 0-9 + /, most significant first). Chunks start at offset 0 and are cut
at the first entry start at least 65,536 bytes after the chunk start, so no
entry is split. Everything else is one document per file, bytes kept as they
are (no decoding, no normalization).

Order: the documents sorted by (source, path, chunk index) are shuffled with
random.Random(20260925).shuffle, so every stretch of the corpus mixes sources.
Each document gets a trailing "\\n" if it lacks one; documents are joined with
the line "<|endoftext|>\\n" (the document separator, id V-1 where specials are
allowed). No source contains that string (checked: the build fails otherwise).

Idempotent: when the output exists and its SHA-256 equals the manifest written
next to it (`<output>.manifest.json`) it is left alone. Prints the SHA-256 of
the output; with the pinned versions it must be EXPECTED_SHA256 (the build
warns when it differs, e.g. with --allow-other-versions).

Usage: tools/build_corpus.py [--work-dir DIR] [--output|--out PATH]
                             [--allow-other-versions] [--force]
"""

import argparse
import gzip
import hashlib
import json
import os
import random
import subprocess
import sys

SEED = 20260925
CHUNK_BYTES = 65536
SEPARATOR = b"<|endoftext|>\n"

# (package, version) as on the Debian bookworm mirrors on 2026-11-30.
PACKAGES = [
    ("dict-gcide", "0.48.5+nmu2"),
    ("dict-foldoc", "20230119-1"),
    ("dict-jargon", "4.4.7-3.1"),
    ("python3.11-doc", "3.11.2-6+deb12u9"),
    ("linux-doc-6.1", "6.1.192-3"),
    ("perl-doc", "5.36.0-7+deb12u4"),
    ("fortunes", "1:1.99.1-7.3"),
    ("fortunes-min", "1:1.99.1-7.3"),
]

# SHA-256 of corpus.txt built from exactly PACKAGES (filled in after the
# first build on the 2-core build machine; see docs/PERFORMANCE.md).
EXPECTED_SHA256 = "d2890f78f4d1391b0ec95221b068f079bb3eb13d32670b2657b4382e72707417"

B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
B64_VALUE = {c: i for i, c in enumerate(B64)}


def die(message):
    print(f"build_corpus: {message}", file=sys.stderr)
    sys.exit(1)


def dictd_number(text, index_path, line_number):
    value = 0
    for c in text:
        if c not in B64_VALUE:
            die(f"{index_path}:{line_number}: bad dictd base64 digit {c!r} in {text!r}")
        value = value * 64 + B64_VALUE[c]
    return value


def fetch_packages(deb_dir, allow_other_versions):
    """Downloads each pinned .deb into deb_dir (once); returns {pkg: (path, version)}."""
    os.makedirs(deb_dir, exist_ok=True)
    found = {}
    for package, version in PACKAGES:
        existing = [f for f in sorted(os.listdir(deb_dir))
                    if f.startswith(package + "_") and f.endswith(".deb")]
        if not existing:
            spec = package if allow_other_versions else f"{package}={version}"
            result = subprocess.run(["apt-get", "download", "-q", spec], cwd=deb_dir,
                                    capture_output=True, text=True)
            if result.returncode != 0:
                die(f"apt-get download {spec} failed (run `apt-get update`; the pinned "
                    f"version may have left the mirror, see --allow-other-versions): "
                    f"{result.stderr.strip().splitlines()[-1:] }")
            existing = [f for f in sorted(os.listdir(deb_dir))
                        if f.startswith(package + "_") and f.endswith(".deb")]
        if len(existing) != 1:
            die(f"{deb_dir}: expected one {package}_*.deb, found {existing}")
        path = os.path.join(deb_dir, existing[0])
        got = subprocess.run(["dpkg-deb", "-f", path, "Version"], capture_output=True,
                             text=True, check=True).stdout.strip()
        if got != version and not allow_other_versions:
            die(f"{path}: version {got}, expected {version} (pinned; "
                f"--allow-other-versions builds anyway, with another digest)")
        found[package] = (path, got)
    return found


def extract(debs, extract_dir):
    roots = {}
    for package, (path, version) in debs.items():
        root = os.path.join(extract_dir, f"{package}_{version.replace(':', '%3a')}")
        if not os.path.isdir(root):
            tmp = root + ".tmp"
            subprocess.run(["rm", "-rf", tmp], check=True)
            os.makedirs(tmp)
            subprocess.run(["dpkg-deb", "-x", path, tmp], check=True)
            os.rename(tmp, root)
        roots[package] = root
    return roots


def dict_chunks(dict_path, index_path):
    """Entry-aligned chunks of a dictd database: list of bytes."""
    with gzip.open(dict_path, "rb") as f:
        data = f.read()
    starts = set()
    with open(index_path, "rb") as f:
        for line_number, raw in enumerate(f, 1):
            fields = raw.rstrip(b"\n").split(b"\t")
            if len(fields) < 3:
                die(f"{index_path}:{line_number}: expected 'word TAB offset TAB length'")
            offset = dictd_number(fields[1].decode("ascii"), index_path, line_number)
            length = dictd_number(fields[2].decode("ascii"), index_path, line_number)
            if offset + length > len(data):
                die(f"{index_path}:{line_number}: entry [{offset}, {offset + length}) "
                    f"beyond the {len(data)}-byte database {dict_path}")
            starts.add(offset)
    chunks = []
    begin = 0
    for s in sorted(starts):
        if s - begin >= CHUNK_BYTES:
            chunks.append(data[begin:s])
            begin = s
    chunks.append(data[begin:])
    assert b"".join(chunks) == data
    return chunks


def files_under(root, relative_dir, keep):
    base = os.path.join(root, relative_dir)
    if not os.path.isdir(base):
        die(f"{base}: missing (package layout changed?)")
    out = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            if os.path.islink(path) or not os.path.isfile(path) or not keep(name):
                continue
            out.append((os.path.relpath(path, root), path))
    return out


def collect_documents(roots):
    """Returns [(source, relative path, chunk index, bytes)]."""
    docs = []
    for source, package in (("gcide", "dict-gcide"), ("foldoc", "dict-foldoc"),
                            ("jargon", "dict-jargon")):
        d = os.path.join(roots[package], "usr/share/dictd")
        for i, chunk in enumerate(dict_chunks(os.path.join(d, f"{source}.dict.dz"),
                                              os.path.join(d, f"{source}.index"))):
            docs.append((source, f"usr/share/dictd/{source}.dict.dz", i, chunk))
    plain = [
        ("python-doc", "python3.11-doc", "usr/share/doc/python3.11/html/_sources",
         lambda n: True),
        ("linux-doc", "linux-doc-6.1", "usr/share/doc/linux-doc-6.1/html/_sources",
         lambda n: True),
        ("perl-doc", "perl-doc", "usr/share/perl", lambda n: n.endswith(".pod")),
        ("fortunes", "fortunes", "usr/share/games/fortunes",
         lambda n: not n.endswith(".dat")),
        ("fortunes", "fortunes-min", "usr/share/games/fortunes",
         lambda n: not n.endswith(".dat")),
    ]
    for source, package, relative_dir, keep in plain:
        for rel, path in files_under(roots[package], relative_dir, keep):
            with open(path, "rb") as f:
                docs.append((source, f"{package}/{rel}", 0, f.read()))
    docs = [d for d in docs if d[3]]
    for source, rel, index, data in docs:
        if b"<|endoftext|>" in data:
            die(f"{rel} chunk {index}: contains the document separator <|endoftext|>")
    return docs


def order_documents(docs):
    """The corpus order: sorted by (source, path, chunk index), then shuffled
    with random.Random(SEED)."""
    ordered = sorted(docs, key=lambda d: (d[0], d[1], d[2]))
    random.Random(SEED).shuffle(ordered)
    return ordered


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--work-dir", default=None,
                        help="downloads and extraction; default: the output's "
                        "directory, else data/corpus")
    parser.add_argument("--output", "--out", default=None,
                        help="default: WORK_DIR/corpus.txt")
    parser.add_argument("--allow-other-versions", action="store_true")
    parser.add_argument("--force", action="store_true", help="rebuild even if present")
    args = parser.parse_args()
    if args.work_dir is None:
        args.work_dir = os.path.dirname(args.output) if args.output else "data/corpus"
        args.work_dir = args.work_dir or "."
    output = args.output or os.path.join(args.work_dir, "corpus.txt")
    manifest_path = output + ".manifest.json"

    if not args.force and os.path.exists(output) and os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
        digest = sha256_file(output)
        if digest == manifest.get("sha256"):
            print(f"build_corpus: {output} is up to date ({os.path.getsize(output)} bytes)",
                  file=sys.stderr)
            print(f"{digest}  {output}")
            return
        print(f"build_corpus: {output} differs from its manifest; rebuilding",
              file=sys.stderr)

    debs = fetch_packages(os.path.join(args.work_dir, "debs"), args.allow_other_versions)
    roots = extract(debs, os.path.join(args.work_dir, "extract"))
    docs = order_documents(collect_documents(roots))

    tmp = f"{output}.tmp-{os.getpid()}"
    h = hashlib.sha256()
    per_source = {}
    size = 0
    with open(tmp, "wb") as f:
        for i, (source, rel, index, data) in enumerate(docs):
            if i:
                f.write(SEPARATOR)
                h.update(SEPARATOR)
                size += len(SEPARATOR)
            if not data.endswith(b"\n"):
                data += b"\n"
            f.write(data)
            h.update(data)
            size += len(data)
            n, b = per_source.get(source, (0, 0))
            per_source[source] = (n + 1, b + len(data))
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, output)
    digest = h.hexdigest()
    manifest = {
        "sha256": digest,
        "bytes": size,
        "documents": len(docs),
        "seed": SEED,
        "chunk_bytes": CHUNK_BYTES,
        "packages": {p: v for p, (_, v) in sorted(debs.items())},
        "sources": {s: {"documents": n, "bytes": b} for s, (n, b) in sorted(per_source.items())},
    }
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
        f.write("\n")
    for s, (n, b) in sorted(per_source.items()):
        print(f"build_corpus: {s:11s} {n:6d} documents {b:11d} bytes", file=sys.stderr)
    print(f"build_corpus: wrote {output}: {size} bytes, {len(docs)} documents",
          file=sys.stderr)
    if EXPECTED_SHA256 and digest != EXPECTED_SHA256:
        print(f"build_corpus: WARNING: digest {digest} differs from the recorded "
              f"{EXPECTED_SHA256} (other package versions?)", file=sys.stderr)
    print(f"{digest}  {output}")


if __name__ == "__main__":
    main()
