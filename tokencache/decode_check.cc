#include "tokencache/decode_check.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "tokencache/token_cache.h"

namespace coppelius {
namespace {

// At most 16 bytes of `bytes`, quoted and escaped ("..." when cut).
std::string Shown(absl::string_view bytes) {
  constexpr size_t kShownBytes = 16;
  return absl::StrCat("\"", absl::CHexEscape(bytes.substr(0, kShownBytes)),
                      "\"", bytes.size() > kShownBytes ? "..." : "");
}

int64_t Nanoseconds(const struct timespec& t) {
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

}  // namespace

std::optional<std::string> VocabularyNewerThanCache(
    const std::string& vocab_path, const struct timespec& cache_mtime) {
  struct stat vocab_st;
  const int got = vocab_path == "-" ? fstat(STDIN_FILENO, &vocab_st)
                                    : stat(vocab_path.c_str(), &vocab_st);
  if (got != 0) return std::string();
  if (!S_ISREG(vocab_st.st_mode)) return std::nullopt;
  if (Nanoseconds(vocab_st.st_mtim) <= Nanoseconds(cache_mtime)) {
    return std::string();
  }
  return absl::StrCat("the vocabulary ", vocab_path,
                      " is newer than the cache");
}

CacheDecodeCheck::CacheDecodeCheck(const Vocabulary& vocabulary,
                                   absl::string_view source,
                                   std::string cache_path)
    : vocabulary_(vocabulary),
      source_(source),
      prefix_(cache_path.empty() ? "" : cache_path + ": ") {}

void CacheDecodeCheck::Feed(uint64_t first, absl::Span<const uint32_t> ids) {
  if (!difference_.empty()) return;
  const uint32_t end_of_text = vocabulary_.end_of_text_id();
  for (size_t k = 0; k < ids.size(); ++k) {
    const uint64_t index = first + k;
    const uint32_t id = ids[k];
    const uint64_t offset = kTokenCacheHeaderBytes + kTokenBytes * index;
    if (id > end_of_text) {
      difference_ = absl::StrCat(
          prefix_, "token ", index, " (byte offset ", offset, ") is id ",
          id, ", not in the vocabulary (", vocabulary_.vocab_size(), " ids)");
      return;
    }
    const absl::string_view bytes = vocabulary_.IdBytes(id);
    const absl::string_view here = source_.substr(
        std::min<uint64_t>(decoded_, source_.size()), bytes.size());
    if (here != bytes) {
      difference_ = absl::StrCat(
          prefix_, "token ", index, " (byte offset ", offset, "), id ",
          id, ", decodes to ", Shown(bytes), " but the source has ",
          Shown(here), " at byte ", decoded_,
          ": not this source's encoding with this vocabulary (made with "
          "another?)");
      return;
    }
    decoded_ += bytes.size();
  }
  ids_ = first + ids.size();
}

std::string CacheDecodeCheck::Difference() const {
  if (!difference_.empty()) return difference_;
  if (decoded_ == source_.size()) return "";
  return absl::StrCat(prefix_, "its ", ids_, " ids decode to the first ",
                      decoded_, " of the source's ", source_.size(),
                      " bytes: a cache cut short");
}

}  // namespace coppelius
