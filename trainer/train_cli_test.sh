#!/usr/bin/env bash
# `train` refuses, before any work, runs whose files would damage another
# run's or its own: result = checkpoint-out, result = input checkpoint,
# result = token cache (even with --overwrite), an existing history file the
# run would publish, an output that is a device, a checkpoint another
# process holds the lock of; each with a one-line error naming the flag, and
# the files left as they were.
set -uo pipefail
TRAIN=${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-coppelius}/trainer/train
W=${TEST_TMPDIR:-$(mktemp -d)}/train_cli
rm -rf "$W"; mkdir -p "$W/hist"; cd "$W"
python3 - <<'PY'
import random, struct
r = random.Random(3)
ids = [r.randrange(512) for _ in range(16 * 64 + 1)]
open("t.tok", "wb").write(struct.pack("<QQ", 0, 4 * len(ids)) + struct.pack("<%dI" % len(ids), *ids))
PY
: > fresh.ckpt
fail=0
run() { "$TRAIN" --config=tiny --backend=reference --tokens=t.tok --progress=false "$@"; }
expect_refusal() {  # expect_refusal "what" "substring" args...
  local what=$1 want=$2; shift 2
  local before after out
  before=$(sha256sum t.tok fresh.ckpt hist/* 2>/dev/null | sha256sum)
  out=$(run "$@" 2>&1); local rc=$?
  after=$(sha256sum t.tok fresh.ckpt hist/* 2>/dev/null | sha256sum)
  if [[ $rc -eq 0 ]]; then echo "FAIL: $what: exit 0"; fail=1; return; fi
  if [[ $(printf '%s\n' "$out" | wc -l) -ne 1 ]]; then echo "FAIL: $what: not one line: $out"; fail=1; fi
  if [[ "$out" != *"$want"* ]]; then echo "FAIL: $what: '$out' lacks '$want'"; fail=1; fi
  if [[ "$before" != "$after" ]]; then echo "FAIL: $what: files changed"; fail=1; fi
  echo "ok: $what: $out"
}
expect_refusal "result = checkpoint-out" "name the same file" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=c.ckpt --result=c.ckpt
expect_refusal "result = token cache, with --overwrite" "name the same file" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=c.ckpt --result=t.tok --overwrite
expect_refusal "result = input checkpoint, with --overwrite" "name the same file" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=c.ckpt --result=./fresh.ckpt --overwrite
expect_refusal "checkpoint-out is a device" "not a regular file" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=/dev/null --result=r.bin
expect_refusal "token cache from stdin" "--tokens=-: the run reads its inputs by offset" \
  --tokens=- --checkpoint-in=fresh.ckpt --checkpoint-out=c.ckpt --result=r.bin
expect_refusal "input checkpoint from stdin" "--checkpoint-in=-: the run reads its inputs by offset" \
  --checkpoint-in=- --checkpoint-out=c.ckpt --result=r.bin
# Exit status: 2 for a usage error (the command line wrong in itself), 1
# for a bad input or output, as in every Coppelius tool (README).
expect_rc() {  # expect_rc WANT args...
  local want=$1; shift
  run "$@" > /dev/null 2>&1; local rc=$?
  if [[ $rc -ne $want ]]; then echo "FAIL: exit $rc, expected $want: $*"; fail=1; fi
}
expect_rc 2 --checkpoint-in=fresh.ckpt --checkpoint-out=u.ckpt --result=u.res stray
expect_rc 2 --checkpoint-in=fresh.ckpt --checkpoint-out=u.ckpt --result=u.res --backend=gpu
expect_rc 2 --checkpoint-in=fresh.ckpt --checkpoint-out=u.ckpt --result=u.res --config=huge
expect_rc 2 --checkpoint-in=fresh.ckpt --checkpoint-out=u.ckpt --result=u.res --threads=-1
expect_rc 2 --checkpoint-in=fresh.ckpt --checkpoint-out=u.ckpt
expect_rc 2 --tokens=- --checkpoint-in=fresh.ckpt --checkpoint-out=u.ckpt --result=u.res
expect_rc 1 --checkpoint-in=missing.ckpt --checkpoint-out=u.ckpt --result=u.res
expect_rc 1 --checkpoint-in=fresh.ckpt --checkpoint-out=/dev/null --result=u.res
expect_rc 2 --checkpoint-in=fresh.ckpt --checkpoint-out=u.ckpt --result=u.ckpt
expect_rc 1 --checkpoint-in=fresh.ckpt --checkpoint-out=u.ckpt --result=./u.ckpt
[[ -e u.ckpt || -e u.res ]] && { echo "FAIL: a refused run left outputs"; fail=1; }
echo "ok: exit 2 for usage errors, 1 for bad files"
# A first run fills hist/ with update-00000002..8; a second fresh run into
# the same history would replace them.
run --checkpoint-in=fresh.ckpt --checkpoint-out=a.ckpt --result=a.res --checkpoint-history=hist \
  || { echo "FAIL: first run"; exit 1; }
expect_refusal "history clobber" "update-00000002.ckpt exists" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=b.ckpt --result=b.res --checkpoint-history=hist
# A checkpoint or a result where the token cache goes is named as what it
# is (it read as a cache whose source mtime was "more than a year ahead").
expect_refusal "checkpoint as --tokens" "--tokens=a.ckpt: is a Coppelius checkpoint (\"COPPCKPT\" at offset 0), not a token cache" \
  --tokens=a.ckpt --checkpoint-in=fresh.ckpt --checkpoint-out=b.ckpt --result=b.res
expect_refusal "result as --tokens" "--tokens=a.res: is a Coppelius result file (config tiny, host tag at byte 26944), not a token cache" \
  --tokens=a.res --checkpoint-in=fresh.ckpt --checkpoint-out=b.ckpt --result=b.res
# A killed run's result, cut at a size that is no cache's (not 16 + 4N).
head -c 7001 a.res > cut.res
expect_refusal "killed run's result as --tokens" "--tokens=cut.res: is a Coppelius result file (config tiny, incomplete: a killed run's), not a token cache" \
  --tokens=cut.res --checkpoint-in=fresh.ckpt --checkpoint-out=b.ckpt --result=b.res
rm cut.res
# A dangling symbolic link at an entry's name, or a directory there, is
# refused before any work, --overwrite or not (no checkpoint is there; a
# rename cannot replace a directory).
mkdir -p histx && ln -s /nonexistent histx/update-00000004.ckpt
for ow in "" --overwrite; do
  expect_refusal "history entry a dangling symlink $ow" "update-00000004.ckpt is a symbolic link train cannot follow (No such file or directory)" \
    --checkpoint-in=fresh.ckpt --checkpoint-out=hx.ckpt --result=hx.res --checkpoint-history=histx $ow
done
rm histx/update-00000004.ckpt && mkdir -p histx/update-00000006.ckpt/sub
expect_refusal "history entry a directory, with --overwrite" "update-00000006.ckpt is a directory" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=hx.ckpt --result=hx.res --checkpoint-history=histx --overwrite
# A file of another kind there is not another run's checkpoint: refused,
# --overwrite or not, and left as it was (break-it, session 23: with
# --overwrite a text file there was replaced).
rm -r histx/update-00000006.ckpt && echo hi > histx/update-00000006.ckpt
for ow in "" --overwrite; do
  expect_refusal "history entry a text file $ow" \
    "update-00000006.ckpt exists (3 bytes) and is not a Coppelius checkpoint (no \"COPPCKPT\" at offset 0)" \
    --checkpoint-in=fresh.ckpt --checkpoint-out=hx.ckpt --result=hx.res --checkpoint-history=histx $ow
done
[[ "$(cat histx/update-00000006.ckpt)" == hi ]] || { echo "FAIL: the text file in the history changed"; fail=1; }
[[ -e hx.ckpt || -e hx.res ]] && { echo "FAIL: a refused history run left outputs"; fail=1; }
# An empty file there holds nothing: replaced, as an empty --checkpoint-out.
: > histx/update-00000006.ckpt
run --checkpoint-in=fresh.ckpt --checkpoint-out=hx.ckpt --result=hx.res --checkpoint-history=histx \
  || { echo "FAIL: an empty history entry was not replaced"; fail=1; }
[[ -s histx/update-00000006.ckpt ]] || { echo "FAIL: the empty history entry is still empty"; fail=1; }
rm -f histx/update-0000000[248].ckpt hx.ckpt hx.res
# A link there to another run's checkpoint: refused without --overwrite;
# with it the link is replaced by this run's checkpoint, its target kept.
rm histx/update-00000006.ckpt && cp hist/update-00000002.ckpt other.ckpt && cp other.ckpt other.orig
ln -s ../other.ckpt histx/update-00000006.ckpt
expect_refusal "history entry a link to a checkpoint" "update-00000006.ckpt exists (update count 6" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=hx.ckpt --result=hx.res --checkpoint-history=histx
run --checkpoint-in=fresh.ckpt --checkpoint-out=hx.ckpt --result=hx.res --checkpoint-history=histx --overwrite \
  || { echo "FAIL: --overwrite of a history link to a checkpoint"; fail=1; }
[[ -f histx/update-00000006.ckpt && ! -L histx/update-00000006.ckpt ]] \
  || { echo "FAIL: the history link was not replaced by a checkpoint"; fail=1; }
cmp -s other.ckpt other.orig || { echo "FAIL: the history link's target changed"; fail=1; }
echo "ok: history entries: only another run's checkpoints are replaced"
rm -rf histx hx.ckpt hx.res other.ckpt other.orig
[[ -e b.ckpt || -e b.res ]] && { echo "FAIL: refused run left outputs"; fail=1; }
# Continuing into the same history is fine (updates 10..16 are new).
run --checkpoint-in=a.ckpt --checkpoint-out=a.ckpt --result=a2.res --checkpoint-history=hist \
  || { echo "FAIL: continuation into the same history"; fail=1; }
[[ -f hist/update-00000016.ckpt ]] || { echo "FAIL: no update 16"; fail=1; }
# Another process holds the checkpoint's lock (as a running train does):
# refused, one line, nothing written; released, the same run goes through.
if command -v flock >/dev/null; then
  exec 9>.c2.ckpt.lock
  flock -n 9 || { echo "FAIL: could not take .c2.ckpt.lock"; exit 1; }
  expect_refusal "checkpoint in use by another process" "in use by another process" \
    --checkpoint-in=fresh.ckpt --checkpoint-out=c2.ckpt --result=c2.res
  [[ -e c2.ckpt || -e c2.res ]] && { echo "FAIL: refused run left outputs"; fail=1; }
  exec 9>&-
  run --checkpoint-in=fresh.ckpt --checkpoint-out=c2.ckpt --result=c2.res \
    || { echo "FAIL: run after the lock was released"; fail=1; }
fi
# The output checkpoint inside its own history directory: refused.
expect_refusal "checkpoint-out inside the history" "outside its history directory" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=hist/x.ckpt --result=x.res --checkpoint-history=hist/
# Another process holds the history directory's lock: refused, also when
# the directory is named through a symbolic link or as "hist/.".
ln -s hist histlink
if command -v flock >/dev/null; then
  exec 9>hist/.lock
  flock -n 9 || { echo "FAIL: could not take hist/.lock"; exit 1; }
  for h in hist histlink hist/.; do
    expect_refusal "history ($h) in use by another process" "in use by another process" \
      --checkpoint-in=fresh.ckpt --checkpoint-out=l.ckpt --result=l.res --checkpoint-history=$h
  done
  exec 9>&-
fi
# A run refused for its inputs creates no history directory.
expect_refusal "missing input, new history" "opening checkpoint" \
  --checkpoint-in=missing.ckpt --checkpoint-out=m.ckpt --result=m.res --checkpoint-history=newhist
[[ -e newhist ]] && { echo "FAIL: refused run created its history directory"; fail=1; }
# A run refused after its new history directory was created (the backend
# is chosen after the history's checks: here the cuda backend, where no GPU
# is usable) removes it again (it left DIR holding only .lock); a history
# directory that existed before the run is kept. Where a GPU is usable the
# run succeeds, and this is checked by run_test instead.
cuda_run() { "$TRAIN" --config=tiny --backend=cuda --tokens=t.tok --progress=false "$@"; }
out=$(cuda_run --checkpoint-in=fresh.ckpt --checkpoint-out=g.ckpt --result=g.res --checkpoint-history=gpuhist 2>&1); rc=$?
if [[ $rc -ne 0 && "$out" == *"no CUDA device is usable"* ]]; then
  [[ -e gpuhist ]] && { echo "FAIL: a run refused for its backend left its new history directory: $(ls -A gpuhist)"; fail=1; }
  mkdir gpuhist-old
  cuda_run --checkpoint-in=fresh.ckpt --checkpoint-out=g.ckpt --result=g.res --checkpoint-history=gpuhist-old 2>/dev/null \
    && { echo "FAIL: --backend=cuda without a GPU: exit 0"; fail=1; }
  [[ -d gpuhist-old ]] || { echo "FAIL: a refused run removed a history directory it did not create"; fail=1; }
  echo "ok: refused after creating its history directory: none left ($out)"
else
  echo "skip: --backend=cuda is usable here (rc $rc); run_test checks the removal"
  rm -rf g.ckpt g.res gpuhist
fi
# The history directory named like the result: refused before any lock.
expect_refusal "history = result" "names the same path as" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=h.ckpt --result=h.res --checkpoint-history=h.res
[[ -e h.res || -e .h.ckpt.lock ]] && { echo "FAIL: refused run left files"; fail=1; }
# The result inside the history directory (it could be named like an entry
# the run publishes): refused. An output that is a link to nothing: refused.
# An input that is an output's lock file: refused.
expect_refusal "result inside the history" "must live outside its history directory" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=q.ckpt --result=hist/r.res --checkpoint-history=hist
ln -s missing.res dangling.res
expect_refusal "dangling result link" "a symbolic link to a missing file" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=d.ckpt --result=dangling.res
[[ -e missing.res ]] && { echo "FAIL: dangling link target created"; fail=1; }
: > .m.ckpt.lock
expect_refusal "input is an output's lock file" "is the lock file of" \
  --checkpoint-in=.m.ckpt.lock --checkpoint-out=m.ckpt --result=m.res
[[ -s .m.ckpt.lock ]] && { echo "FAIL: .m.ckpt.lock written"; fail=1; }
# A lock file name taken by another file: refused, that file untouched.
printf 'not a lock\n' > .p.ckpt.lock
expect_refusal "lock name taken" "is not a lock file" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=p.ckpt --result=p.res
[[ $(cat .p.ckpt.lock) == "not a lock" ]] || { echo "FAIL: .p.ckpt.lock changed"; fail=1; }
# An output given as a symbolic link is published to its target.
run --checkpoint-in=fresh.ckpt --checkpoint-out=target.ckpt --result=t1.res \
  || { echo "FAIL: run for target.ckpt"; fail=1; }
ln -s target.ckpt link.ckpt
before=$(sha256sum < target.ckpt)
run --checkpoint-in=link.ckpt --checkpoint-out=link.ckpt --result=t2.res \
  || { echo "FAIL: continuation through link.ckpt"; fail=1; }
[[ -L link.ckpt ]] || { echo "FAIL: link.ckpt replaced by a file"; fail=1; }
[[ $(sha256sum < target.ckpt) != "$before" ]] || { echo "FAIL: target.ckpt not republished"; fail=1; }
echo "ok: published through link.ckpt to target.ckpt"
# Another output's lock file is never an output, --overwrite or not (it
# would leave t1.res's next run refused).
expect_refusal "checkpoint-out = another output's lock file, with --overwrite" "is the lock file of another output" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=.t1.res.lock --result=l.res --overwrite
# --overwrite replaces a result by a new file: another name of the old one
# (a hard link) keeps the old bytes.
ln t1.res t1-kept.res
before=$(sha256sum < t1-kept.res)
run --checkpoint-in=fresh.ckpt --checkpoint-out=o.ckpt --result=t1.res --overwrite \
  || { echo "FAIL: --overwrite run over t1.res"; fail=1; }
[[ $(sha256sum < t1-kept.res) == "$before" ]] || { echo "FAIL: --overwrite changed t1-kept.res, a hard link of the old result"; fail=1; }
[[ $(stat -c %i t1.res) != $(stat -c %i t1-kept.res) ]] || { echo "FAIL: t1.res is still the old inode"; fail=1; }
[[ $(stat -c %s t1.res) == 27744 ]] || { echo "FAIL: t1.res is not a complete tiny result"; fail=1; }
echo "ok: --overwrite left the old result's hard link as it was"
# --overwrite replaces only another run's output of the flag's kind: a
# token cache or a text file in its place is never replaced (break-it,
# session 21: both were); without --overwrite the refusal says what the
# file is.
cp t.tok cache-copy.tok
printf 'not a result\n' > notes.txt
for args in "--checkpoint-out=cache-copy.tok --result=ow1.res" \
            "--checkpoint-out=ow2.ckpt --result=notes.txt"; do
  before=$(sha256sum cache-copy.tok notes.txt)
  out=$(run --checkpoint-in=fresh.ckpt $args --overwrite 2>&1) && { echo "FAIL: --overwrite $args: exit 0"; fail=1; }
  [[ "$out" == *"and is not a Coppelius"*"--overwrite replaces only another run's"* ]] || { echo "FAIL: --overwrite $args: $out"; fail=1; }
  [[ $(sha256sum cache-copy.tok notes.txt) == "$before" ]] || { echo "FAIL: --overwrite $args changed a file"; fail=1; }
  echo "ok: --overwrite $args refused: $out"
done
expect_refusal "checkpoint-out = another run's checkpoint" "--checkpoint-out=o.ckpt: exists and is another run's checkpoint" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=o.ckpt --result=ow3.res

# Killed after its second publication, with the history link of that
# publication missing (as a kill between the rename and the link leaves
# it, checkpoint/publisher.h): the resumed run links the input checkpoint
# into the history and carries on.
mkdir -p hist2
run --checkpoint-in=fresh.ckpt --checkpoint-out=k.ckpt --result=k.res \
  --checkpoint-history=hist2 --crash_after_publications=2 2>/dev/null
[[ -f hist2/update-00000004.ckpt ]] || { echo "FAIL: no update 4 before the kill"; fail=1; }
rm -f hist2/update-00000004.ckpt
out=$(run --checkpoint-in=k.ckpt --checkpoint-out=k.ckpt --result=k2.res --checkpoint-history=hist2 2>&1) \
  || { echo "FAIL: resume after a kill before the history link: $out"; fail=1; }
for u in 2 4 6 8 10 12; do
  [[ -f hist2/update-$(printf %08d $u).ckpt ]] || { echo "FAIL: hist2 lacks update $u"; fail=1; }
done
echo "ok: resume relinked update 4: $(ls hist2 | tr '\n' ' ')"
# "-" as the history directory: a usage error (exit 2), no directory "./-".
expect_refusal "history = -" "--checkpoint-history=-: the history is a directory" \
  --checkpoint-in=fresh.ckpt --checkpoint-out=dash.ckpt --result=dash.res --checkpoint-history=-
expect_rc 2 --checkpoint-in=fresh.ckpt --checkpoint-out=dash.ckpt --result=dash.res --checkpoint-history=-
[[ -e ./- || -e dash.ckpt || -e dash.res ]] && { echo "FAIL: --checkpoint-history=- left files"; fail=1; }
# A history directory given as a link to nothing, or a loop: refused,
# naming the flag (not the lock file inside it), nothing created.
ln -s missing-dir hist-dangling; ln -s hist-loop2 hist-loop1; ln -s hist-loop1 hist-loop2
for h in hist-dangling hist-loop1; do
  expect_refusal "history $h" "--checkpoint-history=$h: a symbolic link to a missing directory or a loop" \
    --checkpoint-in=fresh.ckpt --checkpoint-out=hl.ckpt --result=hl.res --checkpoint-history=$h
done
[[ -e missing-dir || -e hl.ckpt || -e hl.res ]] && { echo "FAIL: a refused history link left files"; fail=1; }
# Temporaries of a killed run whose pid now names another live process
# (pids are reused, after a reboot at once; here this shell's pid): train
# holds the output's and the history's locks, so no publication of theirs
# can be in progress, and it removes them at its start.
mkdir -p histp
: > pp.ckpt.tmp.$$.0123456789abcdef; : > histp/update-00000002.ckpt.tmp.$$.0123456789abcdef
run --checkpoint-in=fresh.ckpt --checkpoint-out=pp.ckpt --result=pp.res --checkpoint-history=histp \
  || { echo "FAIL: run over a reused pid's temporaries"; fail=1; }
for f in pp.ckpt.tmp.$$.0123456789abcdef histp/update-00000002.ckpt.tmp.$$.0123456789abcdef; do
  [[ -e $f ]] && { echo "FAIL: $f (a killed run's temporary, its pid reused) kept"; fail=1; }
done
# Progress lines name paths with control characters escaped, as error
# lines do: a newline in --tokens, --checkpoint-out or --result does not
# start a line that is not train's.
nl=$'n\nl'
cp t.tok "t$nl.tok"
out=$("$TRAIN" --config=tiny --backend=reference --tokens="t$nl.tok" \
  --checkpoint-in=fresh.ckpt --checkpoint-out="c$nl.ckpt" --result="r$nl.res" 2>&1)
rc=$?
[[ $rc -eq 0 ]] || { echo "FAIL: run with newlines in its paths: rc $rc: $out"; fail=1; }
while IFS= read -r line; do
  [[ "$line" == "train: "* ]] || { echo "FAIL: a progress line that is not train's: '$line'"; fail=1; }
done <<< "$out"
[[ "$out" == *'tn\nl.tok'* && "$out" == *'cn\nl.ckpt'* && "$out" == *'rn\nl.res'* ]] \
  || { echo "FAIL: paths not escaped in: $out"; fail=1; }
echo "ok: progress lines escape the paths"
exit $fail
