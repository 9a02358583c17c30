#include "tokenizer/bpe_trainer.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <queue>
#include <system_error>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/file_io.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "common/threads.h"
#include "tokenizer/output_checks.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {
namespace {

constexpr absl::string_view kEndOfText = "<|endoftext|>";
// Segments longer than this are cut at safe piece boundaries for counting.
constexpr size_t kChunkBytes = 1 << 20;

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

uint64_t PairKey(uint32_t left, uint32_t right) {
  return (static_cast<uint64_t>(left) << 32) | right;
}
uint32_t PairLeft(uint64_t key) { return static_cast<uint32_t>(key >> 32); }
uint32_t PairRight(uint64_t key) { return static_cast<uint32_t>(key); }

constexpr uint32_t kNone = UINT32_MAX;

struct PairInfo {
  int64_t count = 0;  // weighted occurrences, >= 0
  // Symbol positions where the pair started when it was counted (may be
  // stale or repeated; checked when used). Empty for skipped pairs.
  std::vector<uint32_t> positions;
  bool skipped = false;  // rule 5: never merged
};

// Max-heap order: higher count first; on equal counts the smaller key, i.e.
// (left id, right id) ascending.
struct HeapEntry {
  int64_t count;
  uint64_t key;
  bool operator<(const HeapEntry& o) const {
    if (count != o.count) return count < o.count;
    return key > o.key;
  }
};

// Every distinct pre-token of >= 2 bytes as a doubly linked list of symbols,
// all in one array; merging a pair at position p keeps p (now the merged id)
// and unlinks the next symbol.
struct Symbols {
  std::vector<uint32_t> id;     // token id; kNone once merged away
  std::vector<uint32_t> prev;   // kNone at the pre-token start
  std::vector<uint32_t> next;   // kNone at the pre-token end
  std::vector<int64_t> weight;  // count of the pre-token holding the symbol
};

// True when `bytes` pre-tokenizes, on its own, as exactly one piece.
bool IsSinglePiece(absl::string_view bytes) {
  std::vector<absl::string_view> pieces;
  Pretokenize(bytes, &pieces);
  return pieces.size() == 1;
}

// Steps 2-5 of the header on distinct pre-tokens sorted by bytes. Each merge
// costs O(occurrences of the pair), whatever the pre-token lengths.
absl::StatusOr<BpeTrainingResult> TrainOnDistinct(
    const std::vector<std::pair<absl::string_view, uint64_t>>& distinct,
    int vocab_size, bool progress) {
  const Clock::time_point start = Clock::now();
  BpeTrainingResult result;
  result.distinct_pretokens = distinct.size();
  const size_t num_ranks = static_cast<size_t>(vocab_size) - 1;

  std::vector<std::string>& tokens = result.tokens;
  absl::flat_hash_map<std::string, uint32_t> token_ids;
  tokens.reserve(num_ranks);
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(std::string(1, static_cast<char>(b)));
    token_ids.emplace(tokens.back(), b);
  }

  uint64_t total_symbols = 0;
  uint64_t with_pairs = 0;
  for (const auto& [bytes, count] : distinct) {
    result.total_pretokens += count;
    if (bytes.size() >= 2) {
      total_symbols += bytes.size();
      ++with_pairs;
    }
  }
  if (total_symbols >= kNone) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "distinct pre-tokens hold %d bytes, expected < 2^32 - 1",
        total_symbols));
  }
  Symbols sym;
  sym.id.reserve(total_symbols);
  sym.prev.reserve(total_symbols);
  sym.next.reserve(total_symbols);
  sym.weight.reserve(total_symbols);
  absl::flat_hash_map<uint64_t, PairInfo> pairs;
  for (const auto& [bytes, count] : distinct) {
    const size_t n = bytes.size();
    if (n < 2) continue;
    const uint32_t base = static_cast<uint32_t>(sym.id.size());
    for (size_t i = 0; i < n; ++i) {
      sym.id.push_back(static_cast<unsigned char>(bytes[i]));
      sym.prev.push_back(i == 0 ? kNone : base + i - 1);
      sym.next.push_back(i + 1 < n ? base + i + 1 : kNone);
      sym.weight.push_back(static_cast<int64_t>(count));
    }
    for (size_t i = 0; i + 1 < n; ++i) {
      PairInfo& p = pairs[PairKey(sym.id[base + i], sym.id[base + i + 1])];
      p.count += static_cast<int64_t>(count);
      p.positions.push_back(base + i);
    }
  }
  std::vector<HeapEntry> initial;
  initial.reserve(pairs.size());
  for (const auto& [key, info] : pairs) initial.push_back({info.count, key});
  std::priority_queue<HeapEntry> heap(std::less<HeapEntry>(),
                                      std::move(initial));
  if (progress) {
    absl::FPrintF(stderr,
                  "bpe: %d distinct pre-tokens (%d with pairs, %d bytes), %d "
                  "distinct pairs, %.1f s\n",
                  distinct.size(), with_pairs, total_symbols, pairs.size(),
                  SecondsSince(start));
  }

  std::vector<uint64_t> increased;
  Clock::time_point last_report = Clock::now();
  absl::Status delta_status;
  // Adds `delta` to the count of (left, right); a positive delta records
  // `position` as an occurrence.
  auto apply = [&](uint32_t left, uint32_t right, int64_t delta,
                   uint32_t position) {
    const uint64_t key = PairKey(left, right);
    PairInfo& p = pairs[key];
    p.count += delta;
    if (p.count < 0 && delta_status.ok()) {
      delta_status = absl::InternalError(absl::StrFormat(
          "bpe: negative count %d for pair (%d, %d) after merge %d", p.count,
          left, right, result.merges));
    }
    if (delta > 0 && !p.skipped) {
      p.positions.push_back(position);
      increased.push_back(key);
    }
  };

  while (tokens.size() < num_ranks) {
    if (heap.empty()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "corpus too small or too repetitive: no pair of adjacent "
          "tokens left to merge after %d merges (%d ranks), expected %d "
          "ranks for vocab_size %d",
          result.merges, tokens.size(), num_ranks, vocab_size));
    }
    const HeapEntry top = heap.top();
    heap.pop();
    auto it = pairs.find(top.key);
    if (it == pairs.end()) continue;
    PairInfo& info = it->second;
    if (info.skipped || info.count == 0) continue;
    if (top.count != info.count) {
      // Stale. A higher stale entry is re-queued with the current count; a
      // lower one has a newer entry already queued.
      if (top.count > info.count) heap.push({info.count, top.key});
      continue;
    }
    const uint32_t a = PairLeft(top.key);
    const uint32_t b = PairRight(top.key);
    std::string merged = tokens[a] + tokens[b];
    if (!IsSinglePiece(merged)) {
      info.skipped = true;
      info.positions = {};
      ++result.skipped_pairs;
      if (progress && result.skipped_pairs <= 10) {
        absl::FPrintF(stderr,
                      "bpe: skipping pair \"%s\" + \"%s\" (count %d): not one "
                      "piece on its own\n",
                      absl::CEscape(tokens[a]), absl::CEscape(tokens[b]),
                      top.count);
      }
      continue;
    }
    uint32_t c;
    auto existing = token_ids.find(merged);
    if (existing != token_ids.end()) {
      c = existing->second;
      ++result.duplicate_merges;
    } else {
      c = static_cast<uint32_t>(tokens.size());
      tokens.push_back(merged);
      token_ids.emplace(std::move(merged), c);
    }

    // `info` may dangle once `pairs` grows: take the positions first. In
    // ascending order, so each pre-token is merged left to right without
    // overlap ("aaa" -> [aa, a]).
    std::vector<uint32_t> occurrences = std::move(info.positions);
    info.positions = {};
    std::sort(occurrences.begin(), occurrences.end());
    occurrences.erase(std::unique(occurrences.begin(), occurrences.end()),
                      occurrences.end());
    increased.clear();
    for (uint32_t p : occurrences) {
      if (sym.id[p] != a) continue;
      const uint32_t q = sym.next[p];
      if (q == kNone || sym.id[q] != b) continue;
      const int64_t w = sym.weight[p];
      const uint32_t x = sym.prev[p];
      const uint32_t r = sym.next[q];
      if (x != kNone) apply(sym.id[x], a, -w, kNone);
      apply(a, b, -w, kNone);
      if (r != kNone) apply(b, sym.id[r], -w, kNone);
      sym.id[p] = c;
      sym.id[q] = kNone;
      sym.next[p] = r;
      if (r != kNone) sym.prev[r] = p;
      if (x != kNone) apply(sym.id[x], c, w, x);
      if (r != kNone) apply(c, sym.id[r], w, p);
    }
    RETURN_IF_ERROR(delta_status);
    const uint32_t merge_index = static_cast<uint32_t>(result.merges);
    ++result.merges;
    auto merged_it = pairs.find(top.key);
    if (merged_it != pairs.end() && merged_it->second.count != 0) {
      return absl::InternalError(absl::StrFormat(
          "bpe: pair (%d, %d) still counted %d after its merge %d", a, b,
          merged_it->second.count, merge_index));
    }
    std::sort(increased.begin(), increased.end());
    increased.erase(std::unique(increased.begin(), increased.end()),
                    increased.end());
    for (uint64_t key : increased) {
      const int64_t count = pairs[key].count;
      if (count > 0) heap.push({count, key});
    }

    if (progress && SecondsSince(last_report) >= 2.0) {
      last_report = Clock::now();
      absl::FPrintF(stderr,
                    "bpe: rank %d/%d (%.0f%%), merge count %d, %.1f s\n",
                    tokens.size(), num_ranks,
                    100.0 * tokens.size() / num_ranks, top.count,
                    SecondsSince(start));
    }
  }
  if (progress) {
    absl::FPrintF(stderr,
                  "bpe: %d ranks, %d merges (%d duplicate), %d pairs skipped "
                  "(not one piece), merging took %.1f s\n",
                  tokens.size(), result.merges, result.duplicate_merges,
                  result.skipped_pairs, SecondsSince(start));
  }
  return result;
}

absl::Status CheckVocabSize(int vocab_size) {
  static_assert(kMinVocabSize == 257, "update the message below");
  if (vocab_size < kMinVocabSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vocab_size %d: expected >= 257 (256 byte tokens + <|endoftext|>)",
        vocab_size));
  }
  if (vocab_size > kMaxVocabSize) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "vocab_size %d: expected at most %d (2^22; memory for every rank is "
        "reserved before training)",
        vocab_size, kMaxVocabSize));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<BpeTrainingResult> TrainBpeOnCounts(
    std::vector<std::pair<std::string, uint64_t>> pretoken_counts,
    int vocab_size, bool progress) {
  RETURN_IF_ERROR(CheckVocabSize(vocab_size));
  std::sort(pretoken_counts.begin(), pretoken_counts.end());
  std::vector<std::pair<absl::string_view, uint64_t>> distinct;
  for (const auto& [bytes, count] : pretoken_counts) {
    if (bytes.empty() || count == 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "pre-token \"%s\" with count %d: expected non-empty bytes and a "
          "positive count",
          absl::CEscape(bytes), count));
    }
    if (!distinct.empty() && distinct.back().first == bytes) {
      distinct.back().second += count;
    } else {
      distinct.push_back({bytes, count});
    }
  }
  return TrainOnDistinct(distinct, vocab_size, progress);
}

absl::StatusOr<BpeTrainingResult> TrainBpe(absl::string_view corpus,
                                           int vocab_size, int threads,
                                           bool progress) {
  RETURN_IF_ERROR(CheckVocabSize(vocab_size));
  if (threads > kMaxThreadCount) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "threads %d: expected at most %d (0 = all cores)", threads,
        kMaxThreadCount));
  }
  const Clock::time_point start = Clock::now();
  threads = ResolveCappedThreadCount(threads);

  // Work items: (segment, begin, stop), cut at safe piece boundaries.
  struct Chunk {
    absl::string_view segment;
    size_t begin;
    size_t stop;
  };
  std::vector<absl::string_view> segments;
  SplitOnSpecial(corpus, kEndOfText, &segments);
  std::vector<Chunk> chunks;
  for (absl::string_view segment : segments) {
    size_t begin = 0;
    while (begin < segment.size()) {
      size_t stop = segment.size();
      if (segment.size() - begin > kChunkBytes) {
        size_t cut = NextSafeCut(segment, begin + kChunkBytes);
        if (cut != absl::string_view::npos) stop = cut;
      }
      chunks.push_back({segment, begin, stop});
      begin = stop;
    }
  }

  using CountMap = absl::flat_hash_map<absl::string_view, uint64_t>;
  std::vector<CountMap> maps(threads);
  std::atomic<size_t> next_chunk{0};
  auto count_worker = [&](int t) {
    CountMap& counts = maps[t];
    std::vector<absl::string_view> pieces;
    for (;;) {
      const size_t i = next_chunk.fetch_add(1);
      if (i >= chunks.size()) break;
      pieces.clear();
      PretokenizeRange(chunks[i].segment, chunks[i].begin, chunks[i].stop,
                       &pieces);
      for (absl::string_view piece : pieces) ++counts[piece];
    }
  };
  {
    std::vector<std::thread> workers;
    absl::Status started = absl::OkStatus();
    for (int t = 1; t < threads; ++t) {
      try {
        workers.emplace_back(count_worker, t);
      } catch (const std::system_error& e) {
        started = absl::ResourceExhaustedError(absl::StrFormat(
            "could not start counting thread %d of %d: %s; use fewer threads",
            t + 1, threads, e.what()));
        next_chunk = chunks.size();  // the started workers stop
        break;
      }
    }
    if (started.ok()) count_worker(0);
    for (std::thread& w : workers) w.join();
    RETURN_IF_ERROR(started);
  }
  CountMap& total = maps[0];
  for (int t = 1; t < threads; ++t) {
    for (const auto& [piece, count] : maps[t]) total[piece] += count;
    CountMap().swap(maps[t]);
  }
  std::vector<std::pair<absl::string_view, uint64_t>> distinct(total.begin(),
                                                               total.end());
  CountMap().swap(total);
  std::sort(distinct.begin(), distinct.end());
  if (progress) {
    absl::FPrintF(stderr,
                  "bpe: counted pre-tokens of %d bytes (%d segments, %d "
                  "chunks) with %d threads in %.1f s\n",
                  corpus.size(), segments.size(), chunks.size(), threads,
                  SecondsSince(start));
  }
  return TrainOnDistinct(distinct, vocab_size, progress);
}

absl::Status RunTrainVocabulary(const TrainVocabularyOptions& options) {
  RETURN_IF_ERROR(CheckVocabSize(options.vocab_size));
  RETURN_IF_ERROR(CheckOutputIsNotInput(options.output_path, "corpus",
                                        options.corpus_path));
  RETURN_IF_ERROR(CheckNotCoppeliusFile(options.output_path));
  // No vocabulary yet: no bound on source bytes per id.
  RETURN_IF_ERROR(CheckNotATokenCache(options.output_path));
  ASSIGN_OR_RETURN(std::string corpus, ReadFile(options.corpus_path));
  // Running out of memory while training (its pre-token counts, in worker
  // threads) still ends the process, now naming the corpus.
  const OutOfMemoryContext out_of_memory(absl::StrFormat(
      "training on %s (%d bytes)", options.corpus_path, corpus.size()));
  const Clock::time_point start = Clock::now();
  absl::StatusOr<BpeTrainingResult> result = TrainBpe(
      corpus, options.vocab_size, options.threads, options.progress);
  if (!result.ok()) {
    return Annotate(result.status(),
                    absl::StrCat("training on ", options.corpus_path));
  }
  ASSIGN_OR_RETURN(Vocabulary vocabulary,
                   Vocabulary::FromTokens(std::move(result->tokens)));
  RETURN_IF_ERROR(WriteOutputCheckedAgain(
      options.output_path, vocabulary.Serialize(), "writing vocabulary "));
  if (options.progress) {
    absl::FPrintF(stderr,
                  "bpe: wrote %s: %d ranks + <|endoftext|> = %d ids; %d "
                  "pre-tokens (%d distinct); trained in %.1f s\n",
                  EscapeControlCharacters(options.output_path),
                  vocabulary.num_ranks(),
                  vocabulary.vocab_size(), result->total_pretokens,
                  result->distinct_pretokens, SecondsSince(start));
  }
  return absl::OkStatus();
}

}  // namespace coppelius
