#include "tokenizer/encoder.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdint>
#include <queue>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/threads.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {
namespace {

// Pieces shorter than this use the linear-scan merge (fast for the short
// pieces of ordinary text); longer ones the heap.
constexpr size_t kLongPiece = 128;
// Pieces are pre-tokenized this many bytes at a time.
constexpr size_t kWindowBytes = 1 << 16;
// The piece cache is cleared when it holds more ids than this.
constexpr size_t kMaxCachedIds = 1 << 22;
// Pieces longer than this are not cached.
constexpr size_t kMaxCachedPieceBytes = 256;

inline uint64_t Load8(const char* p) {
  uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}

inline uint64_t Load4(const char* p) {
  uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

inline uint64_t Mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 33;
  return h;
}

// For each of `strings` (distinct), the index of the longest other string
// that is a proper prefix of it, or Vocabulary::kNoRank. In sorted order the
// strings that are prefixes of a string are prefixes of the one before it
// too; a stack keeps those of the previous string, so besides the sort this
// costs the common prefixes of neighbours (at most the total length).
std::vector<uint32_t> LongestProperPrefixes(
    const std::vector<absl::string_view>& strings) {
  std::vector<uint32_t> order(strings.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return strings[a] < strings[b];
  });
  std::vector<uint32_t> longest(strings.size(), Vocabulary::kNoRank);
  std::vector<uint32_t> stack;  // prefixes of `previous`, shortest first
  absl::string_view previous;
  for (uint32_t i : order) {
    const absl::string_view s = strings[i];
    const size_t limit = std::min(previous.size(), s.size());
    size_t common = 0;
    while (common < limit && previous[common] == s[common]) ++common;
    while (!stack.empty() && strings[stack.back()].size() > common) {
      stack.pop_back();
    }
    if (!stack.empty()) longest[i] = stack.back();
    stack.push_back(i);
    previous = s;
  }
  return longest;
}

}  // namespace

// Key words: for n <= 16 the words read every byte (overlapping loads), so
// (n, w0, w1) identifies the piece; for n > 16 they hold the first and last
// 8 bytes and the hash covers every byte.
Encoder::PieceKey Encoder::MakeKey(absl::string_view piece) {
  const char* p = piece.data();
  const size_t n = piece.size();
  PieceKey k;
  if (n >= 8) {
    k.w0 = Load8(p);
    k.w1 = Load8(p + n - 8);
  } else if (n >= 4) {
    k.w0 = Load4(p) | (Load4(p + n - 4) << 32);
    k.w1 = 0;
  } else {
    k.w0 = static_cast<unsigned char>(p[0]) |
           (static_cast<uint64_t>(static_cast<unsigned char>(p[n / 2])) << 8) |
           (static_cast<uint64_t>(static_cast<unsigned char>(p[n - 1])) << 16);
    k.w1 = 0;
  }
  uint64_t h = (k.w0 ^ (n * 0x9E3779B97F4A7C15ull)) * 0xC4CEB9FE1A85EC53ull;
  h = (h ^ (h >> 29) ^ k.w1) * 0xFF51AFD7ED558CCDull;
  for (size_t i = 8; i + 8 < n; i += 8) {
    h = (h ^ (h >> 29) ^ Load8(p + i)) * 0xFF51AFD7ED558CCDull;
  }
  k.hash = Mix(h);
  return k;
}

uint32_t Encoder::FindToken(absl::string_view piece, const PieceKey& key) const {
  const size_t mask = token_slots_.size() - 1;
  for (size_t i = key.hash & mask;; i = (i + 1) & mask) {
    const TokenSlot& slot = token_slots_[i];
    if (slot.rank == kNoRank) return kNoRank;
    if (slot.w0 != key.w0 || slot.w1 != key.w1 || slot.length != piece.size()) {
      continue;
    }
    if (piece.size() <= 16) return slot.rank;
    if (std::memcmp(token_bytes_.data() + token_offsets_[slot.rank],
                    piece.data(), piece.size()) == 0) {
      return slot.rank;
    }
  }
}

Encoder::Encoder(Vocabulary vocabulary) : vocabulary_(std::move(vocabulary)) {
  const uint32_t n = vocabulary_.num_ranks();
  size_t slots = 1;
  while (slots < 2 * static_cast<size_t>(n)) slots <<= 1;
  token_slots_.assign(slots, TokenSlot{0, 0, 0, kNoRank});
  token_offsets_.reserve(n + 1);
  for (uint32_t rank = 0; rank < n; ++rank) {
    absl::string_view t = vocabulary_.token(rank);
    token_offsets_.push_back(static_cast<uint32_t>(token_bytes_.size()));
    token_bytes_.append(t.data(), t.size());
    const PieceKey key = MakeKey(t);
    size_t i = key.hash & (slots - 1);
    while (token_slots_[i].rank != kNoRank) i = (i + 1) & (slots - 1);
    token_slots_[i] = {key.w0, key.w1, static_cast<uint32_t>(t.size()), rank};
  }
  token_offsets_.push_back(static_cast<uint32_t>(token_bytes_.size()));
  // Every split of a token into two tokens, without a lookup per prefix
  // (that hashes the prefix: quadratic in the token's length, and tokens may
  // be megabytes long). The prefixes of token t that are tokens are the
  // chain longest_prefix[t], longest_prefix[longest_prefix[t]], ...; its
  // suffixes that are tokens the same chain over the reversed tokens. A split
  // pairs a prefix and a suffix whose lengths add up to |t|.
  const std::string reversed_bytes(token_bytes_.rbegin(), token_bytes_.rend());
  std::vector<absl::string_view> forward(n), backward(n);
  for (uint32_t rank = 0; rank < n; ++rank) {
    forward[rank] = vocabulary_.token(rank);
    backward[rank] = absl::string_view(reversed_bytes).substr(
        reversed_bytes.size() - token_offsets_[rank + 1],
        forward[rank].size());
  }
  const std::vector<uint32_t> longest_prefix = LongestProperPrefixes(forward);
  const std::vector<uint32_t> longest_suffix = LongestProperPrefixes(backward);
  std::vector<PairSlot> pairs;
  std::vector<uint32_t> suffixes;  // longest first
  for (uint32_t rank = 256; rank < n; ++rank) {
    const size_t length = forward[rank].size();
    suffixes.clear();
    for (uint32_t s = longest_suffix[rank]; s != kNoRank;
         s = longest_suffix[s]) {
      suffixes.push_back(s);
    }
    // Prefixes longest first need suffixes shortest first.
    auto right = suffixes.rbegin();
    for (uint32_t left = longest_prefix[rank];
         left != kNoRank && right != suffixes.rend();
         left = longest_prefix[left]) {
      const size_t want = length - forward[left].size();
      while (right != suffixes.rend() && forward[*right].size() < want) {
        ++right;
      }
      if (right != suffixes.rend() && forward[*right].size() == want) {
        pairs.push_back({PairKey(left, *right), rank});
      }
    }
  }
  size_t pair_slots = 16;
  while (pair_slots < 2 * pairs.size()) pair_slots <<= 1;
  pair_slots_.assign(pair_slots, PairSlot{kEmptyPair, kNoRank});
  for (const PairSlot& p : pairs) {
    size_t i = PairHash(p.key) & (pair_slots - 1);
    while (pair_slots_[i].key != kEmptyPair) i = (i + 1) & (pair_slots - 1);
    pair_slots_[i] = p;
  }
}

void Encoder::BytePairMergeShort(absl::string_view piece,
                                 std::vector<uint32_t>* ids) const {
  uint32_t id[kLongPiece];
  uint32_t rank[kLongPiece];  // rank[i]: rank of (id[i], id[i+1]).
  size_t m = piece.size();
  for (size_t i = 0; i < m; ++i) id[i] = static_cast<unsigned char>(piece[i]);
  for (size_t i = 0; i + 1 < m; ++i) rank[i] = PairRank(id[i], id[i + 1]);
  while (m > 1) {
    size_t best = 0;
    uint32_t best_rank = kNoRank;
    for (size_t i = 0; i + 1 < m; ++i) {
      if (rank[i] < best_rank) {  // strict: leftmost wins ties
        best_rank = rank[i];
        best = i;
      }
    }
    if (best_rank == kNoRank) break;
    id[best] = best_rank;
    for (size_t i = best + 1; i + 1 < m; ++i) id[i] = id[i + 1];
    for (size_t i = best + 1; i + 2 < m; ++i) rank[i] = rank[i + 1];
    --m;
    if (best + 1 < m) rank[best] = PairRank(id[best], id[best + 1]);
    if (best > 0) rank[best - 1] = PairRank(id[best - 1], id[best]);
  }
  ids->insert(ids->end(), id, id + m);
}

void Encoder::BytePairMergeLong(absl::string_view piece,
                                std::vector<uint32_t>* ids) const {
  // Doubly linked list of parts in text order; part i starts at byte i.
  // A heap of (rank, part) candidates ordered by rank, then position (the
  // leftmost pair wins ties, as tiktoken); an entry is stale unless its
  // version matches the part's.
  const uint32_t n = static_cast<uint32_t>(piece.size());
  std::vector<uint32_t> id(n), next(n), prev(n), version(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    id[i] = static_cast<unsigned char>(piece[i]);
    next[i] = i + 1;  // n = none
    prev[i] = i == 0 ? n : i - 1;
  }
  struct Candidate {
    uint32_t rank;
    uint32_t part;
    uint32_t version;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : part > o.part;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](uint32_t part) {
    ++version[part];
    if (next[part] >= n) return;
    uint32_t r = PairRank(id[part], id[next[part]]);
    if (r != kNoRank) heap.push({r, part, version[part]});
  };
  for (uint32_t i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    if (c.version != version[c.part]) continue;
    const uint32_t right = next[c.part];
    id[c.part] = c.rank;
    next[c.part] = next[right];
    if (next[right] < n) prev[next[right]] = c.part;
    ++version[right];  // `right` is gone: its candidate is stale.
    push(c.part);
    if (prev[c.part] < n) push(prev[c.part]);
  }
  for (uint32_t i = 0; i < n; i = next[i]) ids->push_back(id[i]);
}

void Encoder::EncodePiece(absl::string_view piece, std::vector<uint32_t>* ids,
                          PieceCache* cache) const {
  const PieceKey key = MakeKey(piece);
  const uint64_t hash = key.hash;
  const uint32_t whole = FindToken(piece, key);
  if (whole != kNoRank) {
    ids->push_back(whole);
    return;
  }
  const bool cacheable =
      cache != nullptr && piece.size() <= kMaxCachedPieceBytes;
  size_t slot = 0;
  if (cacheable) {
    if (cache->slots_.empty()) cache->slots_.assign(1 << 12, 0);
    const size_t mask = cache->slots_.size() - 1;
    const uint32_t h32 = static_cast<uint32_t>(hash);
    for (slot = (hash >> 32) & mask; cache->slots_[slot] != 0;
         slot = (slot + 1) & mask) {
      const PieceCache::Entry& e = cache->entries_[cache->slots_[slot] - 1];
      if (e.hash == h32 && e.length == piece.size() &&
          std::memcmp(cache->bytes_.data() + e.bytes_offset, piece.data(),
                      e.length) == 0) {
        const uint32_t* p = cache->ids_.data() + e.ids_offset;
        ids->insert(ids->end(), p, p + e.ids_count);
        return;
      }
    }
  }
  const size_t before = ids->size();
  if (piece.size() < kLongPiece) {
    BytePairMergeShort(piece, ids);
  } else {
    BytePairMergeLong(piece, ids);
  }
  if (!cacheable) return;
  if (cache->ids_.size() > kMaxCachedIds) {
    // Full: start over (bounded memory).
    cache->slots_.assign(1 << 12, 0);
    cache->entries_.clear();
    cache->bytes_.clear();
    cache->ids_.clear();
    const size_t mask = cache->slots_.size() - 1;
    for (slot = (hash >> 32) & mask; cache->slots_[slot] != 0;
         slot = (slot + 1) & mask) {
    }
  }
  PieceCache::Entry e;
  e.hash = static_cast<uint32_t>(hash);
  e.bytes_offset = static_cast<uint32_t>(cache->bytes_.size());
  e.length = static_cast<uint32_t>(piece.size());
  e.ids_offset = static_cast<uint32_t>(cache->ids_.size());
  e.ids_count = static_cast<uint32_t>(ids->size() - before);
  cache->bytes_.append(piece.data(), piece.size());
  cache->ids_.insert(cache->ids_.end(), ids->begin() + before, ids->end());
  cache->entries_.push_back(e);
  cache->slots_[slot] = static_cast<uint32_t>(cache->entries_.size());
  if (2 * cache->entries_.size() > cache->slots_.size()) {
    // Grow to keep the load factor <= 1/2.
    std::vector<uint32_t> slots(cache->slots_.size() * 2, 0);
    const size_t mask = slots.size() - 1;
    for (uint32_t k = 0; k < cache->entries_.size(); ++k) {
      const PieceCache::Entry& x = cache->entries_[k];
      const uint64_t full =
          MakeKey(absl::string_view(cache->bytes_.data() + x.bytes_offset,
                                    x.length))
              .hash;
      size_t i = (full >> 32) & mask;
      while (slots[i] != 0) i = (i + 1) & mask;
      slots[i] = k + 1;
    }
    cache->slots_.swap(slots);
  }
}

void Encoder::EncodeSegmentRange(absl::string_view segment, size_t begin,
                                 size_t end, std::vector<uint32_t>* ids,
                                 PieceCache* cache,
                                 std::vector<absl::string_view>* pieces) const {
  while (begin < end) {
    pieces->clear();
    begin = PretokenizeRange(segment, begin,
                             std::min(end, begin + kWindowBytes), pieces);
    for (absl::string_view piece : *pieces) EncodePiece(piece, ids, cache);
  }
}

void Encoder::Encode(absl::string_view text, bool allow_special,
                     std::vector<uint32_t>* ids, PieceCache* cache) const {
  PieceCache local;
  if (cache == nullptr) cache = &local;
  std::vector<absl::string_view> pieces;
  if (!allow_special) {
    EncodeSegmentRange(text, 0, text.size(), ids, cache, &pieces);
    return;
  }
  std::vector<absl::string_view> segments;
  SplitOnSpecial(text, Vocabulary::kEndOfText, &segments);
  for (size_t s = 0; s < segments.size(); ++s) {
    if (s > 0) ids->push_back(end_of_text_id());
    EncodeSegmentRange(segments[s], 0, segments[s].size(), ids, cache,
                       &pieces);
  }
}

void Encoder::EncodeParallel(absl::string_view text, bool allow_special,
                             int threads, std::vector<uint32_t>* ids) const {
  threads = ResolveCappedThreadCount(threads);
  if (threads == 1 || text.size() < (1u << 20)) {
    Encode(text, allow_special, ids);
    return;
  }
  std::vector<absl::string_view> segments;
  if (allow_special) {
    SplitOnSpecial(text, Vocabulary::kEndOfText, &segments);
  } else {
    segments.push_back(text);
  }
  // Work items: either whole segments [first, last) (the special id before
  // each one but the text's first), or the byte range [begin, end) of one
  // long segment cut at safe positions (the special id first if
  // `special_before`).
  struct Item {
    size_t first, last;  // segments
    size_t begin, end;   // bytes, when last == first + 1 and partial
    bool partial;
    bool special_before;
  };
  const size_t target = std::max<size_t>(
      1 << 18, text.size() / (static_cast<size_t>(threads) * 8));
  std::vector<Item> items;
  size_t run_first = 0, run_bytes = 0;
  auto flush = [&](size_t s) {
    if (s > run_first) items.push_back({run_first, s, 0, 0, false, false});
    run_first = s;
    run_bytes = 0;
  };
  for (size_t s = 0; s < segments.size(); ++s) {
    absl::string_view seg = segments[s];
    if (seg.size() < target) {
      run_bytes += seg.size() + Vocabulary::kEndOfText.size();
      if (run_bytes >= target) flush(s + 1);
      continue;
    }
    flush(s);
    size_t begin = 0;
    bool special = s > 0;
    do {
      size_t cut = begin + target < seg.size()
                       ? NextSafeCut(seg, begin + target)
                       : absl::string_view::npos;
      if (cut == absl::string_view::npos) cut = seg.size();
      items.push_back({s, s + 1, begin, cut, true, special});
      special = false;
      begin = cut;
    } while (begin < seg.size());
    run_first = s + 1;
  }
  flush(segments.size());
  std::vector<std::vector<uint32_t>> outputs(items.size());
  std::atomic<size_t> next_item{0};
  // A worker (with its own piece cache) takes items from the shared
  // counter until none are left.
  auto worker = [&] {
    PieceCache cache;
    std::vector<absl::string_view> pieces;
    for (size_t i; (i = next_item.fetch_add(1)) < items.size();) {
      const Item& item = items[i];
      std::vector<uint32_t>& out = outputs[i];
      if (item.partial) {
        if (item.special_before) out.push_back(end_of_text_id());
        EncodeSegmentRange(segments[item.first], item.begin, item.end, &out,
                           &cache, &pieces);
        continue;
      }
      for (size_t s = item.first; s < item.last; ++s) {
        if (s > 0) out.push_back(end_of_text_id());
        EncodeSegmentRange(segments[s], 0, segments[s].size(), &out, &cache,
                           &pieces);
      }
    }
  };
  // One worker per thread (common/threads.h: fewer threads if the system
  // refuses some; a worker that starts late finds no items left). The
  // output does not depend on the thread count.
  const int n_threads =
      static_cast<int>(std::min<size_t>(threads, items.size()));
  ParallelFor(n_threads, n_threads, [&](int64_t) { worker(); });
  size_t total = 0;
  for (const auto& out : outputs) total += out.size();
  ids->reserve(ids->size() + total);
  for (const auto& out : outputs) ids->insert(ids->end(), out.begin(), out.end());
}

absl::Status Encoder::Decode(absl::Span<const uint32_t> ids,
                             std::string* bytes) const {
  return vocabulary_.Decode(ids, bytes);
}

}  // namespace coppelius
