#include "inspect/cache_reader.h"

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tokencache/token_cache.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

std::string Path(const std::string& name) {
  return absl::StrCat(testing::TempDir(), "/", name);
}

// A cache written byte by byte: header (mtime, size), then `ids`, all LE.
std::string CacheBytes(uint64_t mtime, uint64_t size,
                       const std::vector<uint32_t>& ids) {
  std::string b;
  for (uint64_t v : {mtime, size})
    for (int i = 0; i < 8; ++i) b += static_cast<char>(v >> (8 * i));
  for (uint32_t id : ids)
    for (int i = 0; i < 4; ++i) b += static_cast<char>(id >> (8 * i));
  return b;
}

TEST(ReadCacheChunked, HeaderAndIdsInBoundedRuns) {
  const std::string path = Path("ten.tok");
  // Header: mtime 0x0102 ns, 300 source bytes; ids 1..10.
  ASSERT_TRUE(WriteFileAtomically(
                  path, CacheBytes(0x0102, 300,
                                   {1, 2, 3, 4, 5, 6, 7, 8, 9, 0x01020304}))
                  .ok());
  std::vector<std::pair<uint64_t, std::vector<uint32_t>>> runs;
  absl::StatusOr<CacheFileInfo> info = ReadCacheChunked(
      path,
      [&](uint64_t first, absl::Span<const uint32_t> ids) {
        runs.emplace_back(first, std::vector<uint32_t>(ids.begin(), ids.end()));
        return absl::OkStatus();
      },
      3);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->file_bytes, 16u + 40u);
  EXPECT_EQ(info->num_tokens, 10u);
  EXPECT_EQ(info->header.mtime_ns, 0x0102u);
  EXPECT_EQ(info->header.size_bytes, 300u);
  const std::vector<std::pair<uint64_t, std::vector<uint32_t>>> want = {
      {0, {1, 2, 3}}, {3, {4, 5, 6}}, {6, {7, 8, 9}}, {9, {0x01020304}}};
  EXPECT_EQ(runs, want);
  // No visitor: the header only.
  info = ReadCacheChunked(path, nullptr);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->num_tokens, 10u);
  // The visitor's error stops the read and is returned.
  int calls = 0;
  absl::Status s =
      ReadCacheChunked(
          path,
          [&](uint64_t, absl::Span<const uint32_t>) {
            ++calls;
            return absl::CancelledError("stop");
          },
          4)
          .status();
  EXPECT_EQ(s, absl::CancelledError("stop"));
  EXPECT_EQ(calls, 1);
}

// `opened` sees the header and size before any id is read (inspect
// decides there whether to decode the ids), also for a cache of no ids;
// its error stops the read before the ids.
TEST(ReadCacheChunked, OpenedSeesTheHeaderBeforeTheIds) {
  const std::string path = Path("opened.tok");
  ASSERT_TRUE(WriteFileAtomically(path, CacheBytes(7, 30, {1, 2, 3})).ok());
  std::vector<std::string> events;
  auto opened = [&](const CacheFileInfo& info) {
    events.push_back(absl::StrCat("opened ", info.header.mtime_ns, " ",
                                  info.header.size_bytes, " ",
                                  info.num_tokens));
    return absl::OkStatus();
  };
  auto visit = [&](uint64_t first, absl::Span<const uint32_t> ids) {
    events.push_back(absl::StrCat("ids ", first, "+", ids.size()));
    return absl::OkStatus();
  };
  ASSERT_TRUE(ReadCacheChunked(path, visit, 2, opened).ok());
  EXPECT_EQ(events, (std::vector<std::string>{"opened 7 30 3", "ids 0+2",
                                              "ids 2+1"}));
  events.clear();
  ASSERT_TRUE(WriteFileAtomically(Path("none.tok"), CacheBytes(0, 0, {})).ok());
  ASSERT_TRUE(ReadCacheChunked(Path("none.tok"), visit, 2, opened).ok());
  EXPECT_EQ(events, std::vector<std::string>{"opened 0 0 0"});
  events.clear();
  const absl::Status s =
      ReadCacheChunked(path, visit, 2, [&](const CacheFileInfo&) {
        return absl::CancelledError("stop");
      }).status();
  EXPECT_EQ(s, absl::CancelledError("stop"));
  EXPECT_TRUE(events.empty());
}

TEST(ReadCacheChunked, FileThatShrinksWhileReadIsDataLossNamingTheOffset) {
  const std::string path = Path("shrinks.tok");
  // 1,000 ids: 16 + 4,000 bytes. After the first run of 100 ids (bytes
  // 16..415) the file is cut to 616 bytes: the second read gets bytes
  // 416..615 and then nothing at offset 616.
  ASSERT_TRUE(WriteFileAtomically(
                  path, CacheBytes(1, 5000, std::vector<uint32_t>(1000, 7)))
                  .ok());
  int calls = 0;
  absl::Status s =
      ReadCacheChunked(
          path,
          [&](uint64_t, absl::Span<const uint32_t>) {
            if (++calls == 1 && truncate(path.c_str(), 616) != 0) {
              return absl::InternalError("truncate failed");
            }
            return absl::OkStatus();
          },
          100)
          .status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(s.message(),
            absl::StrCat(path, ": offset 616: file shrank while being read: "
                               "it ends here, expected 4016 bytes (its size "
                               "when opened)"));
  EXPECT_EQ(calls, 1);
}

TEST(ReadCacheChunked, RefusesBadSizesAndNonFiles) {
  ASSERT_TRUE(
      WriteFileAtomically(Path("short.tok"), std::string(15, 'a')).ok());
  absl::Status s = ReadCacheChunked(Path("short.tok"), nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("15 bytes, shorter than the 16-byte"));
  ASSERT_TRUE(WriteFileAtomically(Path("odd.tok"), std::string(18, 'a')).ok());
  s = ReadCacheChunked(Path("odd.tok"), nullptr).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("size 18 bytes is not 16 + 4*N"));
  ASSERT_TRUE(
      WriteFileAtomically(Path("empty.tok"), CacheBytes(0, 0, {})).ok());
  absl::StatusOr<CacheFileInfo> empty =
      ReadCacheChunked(Path("empty.tok"), [](uint64_t, auto) {
        return absl::InternalError("no ids to visit");
      });
  ASSERT_TRUE(empty.ok()) << empty.status();
  EXPECT_EQ(empty->num_tokens, 0u);
  EXPECT_EQ(ReadCacheChunked(Path("missing.tok"), nullptr).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ReadCacheChunked(testing::TempDir(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CacheHeaderProblem, MakeCachesRuleForASourcesHeader) {
  // now = 1,700,000,000 s: a year ahead is 1,731,536,000 s.
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  const uint64_t year_ahead = 1731536000000000000ull;
  auto problem = [&](uint64_t mtime, uint64_t size, uint64_t tokens) {
    CacheFileInfo info;
    info.header = SourceStat{mtime, size};
    info.num_tokens = tokens;
    info.file_bytes = 16 + 4 * tokens;
    return CacheHeaderProblem("c.tok", info, now);
  };
  EXPECT_EQ(problem(0, 0, 0), "");             // empty stdin
  EXPECT_EQ(problem(0, 5, 5), "");             // stdin, one byte per token
  EXPECT_EQ(problem(year_ahead, 9, 1), "");    // a year ahead: still a source
  EXPECT_EQ(problem(~0ull, 9, 1), "");         // 1 ns before 1970
  EXPECT_EQ(problem(year_ahead + 1, 9, 1),
            "c.tok: its header's source mtime 1731536000000000001 ns (offset "
            "0) is more than a year ahead; not a token cache as "
            "make-cache writes them");
  EXPECT_EQ(problem(1, 4, 5),
            "c.tok: its header names 4 source bytes (offset 8) for 5 tokens, "
            "fewer than one per token; not a token cache as make-cache "
            "writes them");
  EXPECT_EQ(problem(1, 16, 0),
            "c.tok: its header names 16 source bytes (offset 8) but it holds "
            "no tokens; not a token cache as make-cache writes them");
  // Without a vocabulary, at most 1,024 source bytes per token.
  EXPECT_EQ(problem(1, 2 * 1024, 2), "");
  EXPECT_EQ(problem(1, 1ull << 40, 1),
            "c.tok: its header names 1099511627776 source bytes (offset 8) for "
            "1 tokens, more than 1024 per token where text encodes to a few (a "
            "raw u32 id file read as a cache?); not a token cache as "
            "make-cache writes them");
}

TEST(CacheStaleness, ClassifiesAgainstTheSourceStat) {
  const std::string source = Path("source.txt");
  ASSERT_TRUE(WriteFileAtomically(source, "twelve bytes").ok());
  struct stat st;
  ASSERT_EQ(stat(source.c_str(), &st), 0);
  const uint64_t mtime =
      static_cast<uint64_t>(st.st_mtim.tv_sec) * 1000000000ull +
      static_cast<uint64_t>(st.st_mtim.tv_nsec);
  auto state = [&](uint64_t m, uint64_t size, const std::string& src) {
    absl::StatusOr<StalenessReport> r =
        CacheStaleness("c.tok", SourceStat{m, size}, src);
    EXPECT_TRUE(r.ok()) << r.status();
    return r.ok() ? r->staleness : Staleness::kFresh;
  };
  EXPECT_EQ(state(mtime, 12, source), Staleness::kFresh);
  EXPECT_EQ(state(mtime + 1, 12, source), Staleness::kMtimeDiffers);
  EXPECT_EQ(state(mtime, 13, source), Staleness::kSizeDiffers);
  EXPECT_EQ(state(mtime + 1, 13, source), Staleness::kSizeDiffers);
  EXPECT_EQ(state(mtime, 12, Path("no_source.txt")),
            Staleness::kSourceMissing);
}

}  // namespace
}  // namespace coppelius
