#!/usr/bin/env bash
# Fresh-process resume is bitwise exact (SPEC §5), on the tiny config with
# the reference backend (8 steps per invocation, publication every 2):
#   A: fresh run (updates 1..8), then A2 continues it (updates 9..16);
#   B: fresh run killed (SIGKILL) right after its 2nd publication (update 4),
#      then resumed in a new process from the checkpoint it left (5..12).
# Every update count both histories hold must have identical payloads.
set -euo pipefail
TRAIN=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-coppelius}/trainer/train
[[ -x $TRAIN ]] || TRAIN=trainer/train
W=${TEST_TMPDIR:-$(mktemp -d)}/resume
rm -rf "$W"; mkdir -p "$W/histA" "$W/histB"
cd "$W"

# A token cache of 20 contexts of 64 random ids < 512 (header: mtime 0, and
# 4 source bytes per id, which a source can have).
python3 - <<'PY'
import random, struct
r = random.Random(7)
ids = [r.randrange(512) for _ in range(20 * 64 + 1)]
with open("tokens.tok", "wb") as f:
    f.write(struct.pack("<QQ", 0, 4 * len(ids)))
    f.write(struct.pack("<%dI" % len(ids), *ids))
PY
: > fresh.ckpt
run() { "$TRAIN" --config=tiny --backend=reference --tokens=tokens.tok --progress=false --threads=2 "$@"; }

run --checkpoint-in=fresh.ckpt --checkpoint-out=a.ckpt --result=a1.res --checkpoint-history=histA
run --checkpoint-in=a.ckpt --checkpoint-out=a.ckpt --result=a2.res --checkpoint-history=histA

set +e
run --checkpoint-in=fresh.ckpt --checkpoint-out=b.ckpt --result=b1.res \
    --checkpoint-history=histB --crash-after-publications=2
rc=$?
set -e
if [[ $rc -ne 137 ]]; then echo "FAIL: the killed run exited $rc, expected 137 (SIGKILL)"; exit 1; fi
ls histB
[[ -f histB/update-00000004.ckpt ]] || { echo "FAIL: no update-00000004 after 2 publications"; exit 1; }
run --checkpoint-in=b.ckpt --checkpoint-out=b.ckpt --result=b2.res --checkpoint-history=histB

# Resumed through a symbolic link to its checkpoint into a new history: the
# input (update 12) is linked into the history as update-00000012.ckpt, and
# that entry must be the checkpoint itself (it was a hard link of the
# symbolic link, dangling from inside the history directory).
cp histB/update-00000012.ckpt b12.ckpt
ln -s b.ckpt current.ckpt
run --checkpoint-in=current.ckpt --checkpoint-out=b.ckpt --result=b3.res --checkpoint-history=histC
if [[ -L histC/update-00000012.ckpt ]] || ! cmp -s histC/update-00000012.ckpt b12.ckpt; then
  echo "FAIL: histC/update-00000012.ckpt is not the input checkpoint:"; ls -l histC; exit 1
fi

python3 - <<'PY'
import struct, sys
def payload(path):
    with open(path, "rb") as f:
        data = f.read()
    offset, nbytes = struct.unpack_from("<QQ", data, 24)   # preamble fields
    assert offset + nbytes == len(data), path
    return data[offset:]
compared = 0
for u in range(1, 17):
    a, b = "histA/update-%08d.ckpt" % u, "histB/update-%08d.ckpt" % u
    try:
        pa, pb = payload(a), payload(b)
    except FileNotFoundError:
        continue
    if pa != pb:
        print("FAIL: payloads differ at update %d" % u); sys.exit(1)
    compared += 1
# A holds 2..16, B holds 2, 4 (killed run) and 6..12 (resumed): 6 in common.
if compared != 6:
    print("FAIL: compared %d update counts, expected 6" % compared); sys.exit(1)
print("resume_test: %d update counts bitwise identical" % compared)
PY
