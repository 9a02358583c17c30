// File: tokenizer/output_checks.h
//
// Checks `tokenize` (encode, decode, train) makes on its paths before it
// reads or writes anything, so that one mistyped path cannot destroy a file
// of the pipeline.
#ifndef COPPELIUS_TOKENIZER_OUTPUT_CHECKS_H_
#define COPPELIUS_TOKENIZER_OUTPUT_CHECKS_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// Refuses to let `tokenize` replace a Coppelius checkpoint or result file.
// In this check and CheckNotAResultFile, an `output` of "-" stands for
// the file standard output writes to when that is a non-empty regular file
// (`-o - >> FILE` would append to FILE, damaging it as surely as `-o FILE`
// would replace it); messages then name it "- (standard output, an
// existing file)". Standard output that is anything else (a terminal, a
// pipe, an empty file) is OK. (CheckNotATokenCache looks at standard
// output the same way: ids appended to a raw id file, `-o - >> all.ids`,
// are refused only when that file passes for a cache.)
// Exactly what is checked: when `output` names an existing
// regular file of at least 8 bytes, its first 8 bytes are compared with
//   - the checkpoint magic "COPPCKPT" (docs/FORMATS.md "Checkpoint
//     envelope", offset 0), and
//   - the result marker be ba fe ca be ba fe ca (docs/FORMATS.md "Result
//     file", lifecycle step 1: at offset 0 until the forward record is
//     written over it).
// Either match: FailedPrecondition "-o OUTPUT: exists and is a Coppelius
// checkpoint|result file (... at offset 0); never replaced, whatever the
// flags (choose another output path)". `tokenize` and `make-cache` (even
// with --force) call it. A non-empty regular file that cannot be opened for
// reading is refused too (FailedPrecondition "-o OUTPUT: exists (N bytes)
// and cannot be read to check that it is not a Coppelius file (REASON); not
// replaced ...", for "-" "...; refusing to append to it ..."): the
// publication by rename needs only the directory's permission and would
// replace it unseen. Anything else is OK: a missing,
// empty or shorter file, a non-regular file (a device or FIFO, which is
// written, not replaced), and any other content. Not detected: a result file whose forward record has
// been written (it starts with fp32 logits; its tag "CPLSRES1" lies at a
// config-dependent offset).
absl::Status CheckNotCoppeliusFile(const std::string& output);

// FailedPrecondition when `output` (or, for "-", the file standard output
// writes to, as CheckNotCoppeliusFile examines it) is a non-empty regular
// file this process cannot read (common/file_io.h FindUnreadableFile):
// "-o OUTPUT: exists (N bytes) and cannot be read to check that it is not
// a Coppelius file (REASON); not replaced (choose another output path, or
// make it readable)", for "-" "...; refusing to append to it (write the
// output elsewhere, or make it readable)". OK otherwise. The first check of
// CheckNotCoppeliusFile, and of inspect's outputs.
absl::Status CheckOutputReadable(const std::string& output);

// What CheckNotCoppeliusFile cannot see: a complete (or
// killed-after-its-forward-record) result file starts with fp32 logits, not
// its marker. FailedPrecondition "-o OUTPUT: exists and is a Coppelius
// result file (config NAME, ...); never replaced, ..." if `output` shows a result's signature
// (trainer/result_file.h ResultSignatureOf, the rule inspect's kind
// detection uses: the host tag "CPLSRES1" at the host status offset, or a
// killed run's size with a forward record of logits) for one of the configs
// `train` runs (trainer/model_config.h ModelConfigNames; docs/FORMATS.md
// "Result file"). OK for anything that is not a regular file or cannot be
// read (CheckNotCoppeliusFile, which every caller also runs, after the
// command line's own checks, refuses that), and any other content.
absl::Status CheckNotAResultFile(const std::string& output);

// Refuses an output that would destroy the input `input` before or while it
// is read. `what` names the input in messages ("input file", "vocabulary
// file", "corpus"). InvalidArgument when
//   - `output` is a path naming the same existing file as `input` (same
//     st_dev and st_ino): "-o OUTPUT: names the WHAT INPUT";
//   - `output` is "-" and standard output (fd 1, fstat) is the regular file
//     `input` names: "WHAT INPUT is also the output (STDOUT_NAME) ...".
//     This is `tokenize ... X -o - > X`, where the shell has already
//     emptied X when tokenize starts (or `>> X`, which would append to X
//     while it is read: the message says which). Only a regular input is
//     compared (a terminal may be standard input and output at once);
//   - `input` is "-" and standard input (fd 0) is the regular file
//     `output` names, "-o OUTPUT: names the WHAT - (standard input is
//     redirected from it)", or for an `output` of "-" the file standard
//     output writes to, "WHAT - (standard input) and the output
//     (STDOUT_NAME) are the same file" (`tokenize train - -o F < F`).
// OK when `input` does not exist, or is "-" read from anything else.
absl::Status CheckOutputIsNotInput(
    const std::string& output, absl::string_view what,
    const std::string& input,
    absl::string_view stdout_name = "standard output, -o -");

// Refuses (FailedPrecondition "-o OUTPUT: exists and is a Coppelius token
// cache (N ids); refusing to replace it ...") to replace an existing file
// that opens as a token cache and whose header can be a source's
// (tokencache/token_cache.h CacheHeaderProblem without a vocabulary's
// bound: the cache may come from another vocabulary), or, for "-", to
// write into the file standard output writes to when that is such a file
// (`-o - >> CACHE`, `1<> CACHE`). A raw u32 id file, what encode writes,
// almost never passes (its bytes 8..15 read as gigabytes of source for a
// few ids). OK for a missing, empty or non-regular output.
absl::Status CheckNotATokenCache(const std::string& output);

// The checks of an existing output made again right before the finished
// output replaces it (WriteFileAtomically's and TokenCacheWriter::Commit's
// `before_replace`): CheckNotCoppeliusFile, CheckNotAResultFile and, with
// `token_caches_too` (tokenize; not make-cache, whose output is a cache),
// CheckNotATokenCache. A file that appeared at `output` after the start's
// checks (a run publishing its checkpoint there, minutes into a long
// encode) is then refused as one there at the start would have been, its
// message ending "(found there right before replacing it: it appeared
// while the output was being written; nothing was written there)"
// (break-it, session 24: the start's checks alone let make-cache and
// tokenize replace a checkpoint copied there meanwhile). A rename can
// still replace a file created in the instant between this check and it.
absl::Status CheckOutputBeforeReplacing(const std::string& output,
                                        bool token_caches_too);

// `refusal` (not OK) with the ending CheckOutputBeforeReplacing gives its
// messages ("... (found there right before replacing it: ...)"): for
// callers whose own rules, made again before a rename, refuse a file that
// appeared meanwhile (make-cache's rule for files that are not caches).
absl::Status FoundBeforeReplacing(const absl::Status& refusal);

// Writes `bytes` to `output` atomically (WriteFileAtomically) with
// CheckOutputBeforeReplacing(target, true) run right before the rename:
// its refusal returned as it is; other errors annotated "`what`OUTPUT"
// ("writing ids to out.u32: ..."). The publication of `tokenize`'s
// outputs (encode, decode, train).
absl::Status WriteOutputCheckedAgain(const std::string& output,
                                     absl::string_view bytes,
                                     absl::string_view what);

// The id count N when a file of `size` bytes whose first bytes are `head`
// (at least 16) is shaped like a token cache (size 16 + 4 N) and its header
// could be a source's (CacheHeaderProblem with `max_token_bytes`); nullopt
// otherwise. What CheckNotATokenCache tests an existing output by, and
// decode an input it cannot decode.
std::optional<uint64_t> TokenCacheIdCount(absl::string_view head,
                                          uint64_t size,
                                          uint64_t max_token_bytes);

}  // namespace coppelius

#endif  // COPPELIUS_TOKENIZER_OUTPUT_CHECKS_H_
