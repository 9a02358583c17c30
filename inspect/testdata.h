// File: inspect/testdata.h
//
// Small synthetic files of every kind for the `tiny` config (V 512, T 64,
// 8 steps), with values chosen by hand so tests know the answers without
// running the code under test (testonly).
//
// WriteInspectTestFiles(dir) writes, in `dir`:
//   source.txt         2,000 bytes of text (the cache's source: at least one
//                      byte per id, as make-cache's rule for a cache wants)
//   cache.tok          header = source.txt's stat; N = 1,281 ids,
//                      id[i] = (7 i) mod 500 -> 20 contexts of 64, ids 0..499
//   bad_ids.tok        as cache.tok but id[1000] = 600 (>= V)
//   model.ckpt         a tiny-config checkpoint (the config's identity, 4 MiB
//                      chunks), update count 16; P: -0.5, +0.5 alternating
//                      (by global index) except final_norm.weight = 1.0;
//                      M: 0.25 everywhere; V: 2.0 everywhere except the first
//                      element of final_norm.bias, NaN
//   multi.ckpt         the same payload in 64 KiB chunks (25 chunks; its
//                      chunk_bytes differ from the config's identity, so a
//                      tiny run refuses it)
//   steps.ckpt         model.ckpt with run_steps 9 (tiny runs 8 steps; intact,
//                      so only the run refuses it)
//   seed.ckpt          model.ckpt with the initialization identity's seed
//                      20260926 (intact: digests of what it holds), which
//                      no known config's run accepts
//   fresh.ckpt         0 bytes
//   complete.res       a complete result: forward logits (row k: logit v =
//                      -|v - (100 + k)|, argmax 100 + k), step s windows all
//                      6 - 0.5 s, predictions 65, 300, 511 (all valid),
//                      final logits argmax 511, device time of update
//                      step s = 7 (s + 1) ns, c0 = 16, backend "reference"
//   next.res           complete.res with c0 = 24 (the run after it)
//   gap.res            complete.res with c0 = 40 (not the run after next.res)
//   partial.res        complete.res cut after 3 step windows + 100 bytes
//   marker.res         only the 8-byte marker (forward never written)
//   vocab.tiktoken     511 ranks: bytes 0..255, then "t0".."t254"
//                      (so 300 -> "t44", 511 -> <|endoftext|>)
#ifndef COPPELIUS_INSPECT_TESTDATA_H_
#define COPPELIUS_INSPECT_TESTDATA_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace coppelius {
namespace inspect_testing {

absl::Status WriteInspectTestFiles(const std::string& dir);

// Flips every bit of byte `payload_offset` of the payload of checkpoint
// `path` (in place).
absl::Status CorruptPayloadByte(const std::string& path,
                                uint64_t payload_offset);

// Copies the first `size` bytes of `from` to `to`.
absl::Status CopyPrefix(const std::string& from, const std::string& to,
                        uint64_t size);

}  // namespace inspect_testing
}  // namespace coppelius

#endif  // COPPELIUS_INSPECT_TESTDATA_H_
