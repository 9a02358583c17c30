#include "tokencache/token_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

std::string TestDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

// Independent encoder of the format: bytes written one by one, LE.
std::string MakeCacheBytes(uint64_t mtime, uint64_t size,
                           const std::vector<uint32_t>& ids) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(mtime >> (8 * i)));
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(size >> (8 * i)));
  for (uint32_t id : ids) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(id >> (8 * i)));
  }
  return out;
}

std::string WriteTestFile(const std::string& name, const std::string& bytes) {
  std::string path = absl::StrCat(TestDir(), "/", name);
  FILE* f = fopen(path.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  fwrite(bytes.data(), 1, bytes.size(), f);
  fclose(f);
  return path;
}

std::string ReadBytes(const std::string& path) {
  std::string out;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  fclose(f);
  return out;
}

TEST(NumContexts, KnownAnswers) {
  EXPECT_EQ(NumContexts(0, 1024), 0u);
  EXPECT_EQ(NumContexts(1, 1024), 0u);
  EXPECT_EQ(NumContexts(1024, 1024), 0u);
  EXPECT_EQ(NumContexts(1025, 1024), 1u);
  EXPECT_EQ(NumContexts(2048, 1024), 1u);
  EXPECT_EQ(NumContexts(2049, 1024), 2u);
  EXPECT_EQ(NumContexts(10240001, 1024), 10000u);  // SPEC: c0 + 10,000
  EXPECT_EQ(NumContexts(10240000, 1024), 9999u);
}

TEST(TokenCache, ReadsHeaderAndIds) {
  std::vector<uint32_t> ids = {0, 1, 255, 12287, 0xdeadbeef, 7};
  std::string path = WriteTestFile(
      "ok.tok", MakeCacheBytes(0x0102030405060708ULL, 93572219ULL, ids));
  auto cache = TokenCache::Open(path);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->header().mtime_ns, 0x0102030405060708ULL);
  EXPECT_EQ(cache->header().size_bytes, 93572219ULL);
  EXPECT_EQ(cache->num_tokens(), ids.size());
  EXPECT_EQ(cache->file_size_bytes(), 16 + 4 * ids.size());
  EXPECT_EQ(std::vector<uint32_t>(cache->token_span().begin(),
                                  cache->token_span().end()),
            ids);
  EXPECT_EQ(cache->NumContexts(2), 2u);
  EXPECT_EQ(cache->NumContexts(5), 1u);
  EXPECT_EQ(cache->NumContexts(6), 0u);
}

TEST(TokenCache, HeaderOnlyIsEmptyStream) {
  std::string path = WriteTestFile("hdr.tok", MakeCacheBytes(5, 6, {}));
  auto cache = TokenCache::Open(path);
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_EQ(cache->num_tokens(), 0u);
  EXPECT_EQ(cache->NumContexts(1024), 0u);
  EXPECT_EQ(cache->tokens(), nullptr);
  EXPECT_TRUE(cache->CheckIdRange(1).ok());
}

// A FIFO (no writer) is refused at once: open() must not block on it.
TEST(TokenCache, FifoIsRefusedWithoutBlocking) {
  const std::string path = absl::StrCat(TestDir(), "/fifo.tok");
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  absl::StatusOr<TokenCache> c = TokenCache::Open(path);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kInvalidArgument) << c.status();
  EXPECT_NE(c.status().message().find("not a regular file"), std::string::npos);
}

TEST(TokenCache, EmptyFileIsDataLoss) {
  std::string path = WriteTestFile("empty.tok", "");
  auto cache = TokenCache::Open(path);
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(cache.status().message(), HasSubstr("empty.tok: 0 bytes"));
  EXPECT_THAT(cache.status().message(), HasSubstr("16-byte"));
}

TEST(TokenCache, TruncatedHeaderIsDataLoss) {
  std::string path =
      WriteTestFile("short.tok", MakeCacheBytes(1, 2, {}).substr(0, 15));
  auto cache = TokenCache::Open(path);
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(cache.status().message(), HasSubstr("short.tok: 15 bytes"));
}

TEST(TokenCache, OddSizeIsDataLoss) {
  std::string bytes = MakeCacheBytes(1, 2, {1, 2, 3});
  for (int cut = 1; cut <= 3; ++cut) {
    std::string path = WriteTestFile("odd.tok", bytes.substr(0, bytes.size() - cut));
    auto cache = TokenCache::Open(path);
    EXPECT_EQ(cache.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(cache.status().message(),
                HasSubstr(absl::StrCat("size ", bytes.size() - cut,
                                       " bytes is not 16 + 4*N")));
    EXPECT_THAT(cache.status().message(), HasSubstr("odd.tok"));
  }
}

TEST(TokenCache, MissingFileIsNotFound) {
  auto cache = TokenCache::Open(TestDir() + "/does-not-exist.tok");
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(cache.status().message(), HasSubstr("does-not-exist.tok"));
}

TEST(TokenCache, DirectoryIsInvalidArgument) {
  auto cache = TokenCache::Open(TestDir());
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(TokenCache, CheckIdRangeNamesFirstOffender) {
  std::vector<uint32_t> ids(10000, 5);
  ids[5000] = 12288;  // first offender
  ids[9000] = 99999;
  std::string path = WriteTestFile("range.tok", MakeCacheBytes(0, 0, ids));
  auto cache = TokenCache::Open(path);
  ASSERT_TRUE(cache.ok()) << cache.status();
  absl::Status s = cache->CheckIdRange(12288);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("token 5000 (byte offset 20016) has id "
                                     "12288, expected < 12288"));
  EXPECT_TRUE(cache->CheckIdRange(100000).ok());
  EXPECT_THAT(cache->CheckIdRange(6).message(), HasSubstr("token 5000 "));
  EXPECT_THAT(cache->CheckIdRange(5).message(), HasSubstr("token 0 "));
}

TEST(TokenCache, Staleness) {
  std::string source = WriteTestFile("source.txt", "hello world\n");
  auto st = StatSource(source);
  ASSERT_TRUE(st.ok()) << st.status();
  EXPECT_EQ(st->size_bytes, 12u);
  struct stat raw;
  ASSERT_EQ(stat(source.c_str(), &raw), 0);
  EXPECT_EQ(st->mtime_ns, uint64_t(raw.st_mtim.tv_sec) * 1000000000ULL +
                              uint64_t(raw.st_mtim.tv_nsec));

  auto check = [&](uint64_t mtime, uint64_t size, Staleness want) {
    std::string path =
        WriteTestFile("stale.tok", MakeCacheBytes(mtime, size, {1}));
    auto cache = TokenCache::Open(path);
    ASSERT_TRUE(cache.ok()) << cache.status();
    auto report = cache->Staleness(source);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_EQ(report->staleness, want) << StalenessName(report->staleness);
    EXPECT_EQ(report->header.mtime_ns, mtime);
  };
  check(st->mtime_ns, 12, Staleness::kFresh);
  check(st->mtime_ns + 1, 12, Staleness::kMtimeDiffers);
  check(st->mtime_ns, 13, Staleness::kSizeDiffers);
  check(0, 0, Staleness::kSizeDiffers);

  // Touch the source: same size, new mtime.
  struct timespec times[2] = {{0, UTIME_OMIT}, {12345, 678}};
  ASSERT_EQ(utimensat(AT_FDCWD, source.c_str(), times, 0), 0);
  check(st->mtime_ns, 12, Staleness::kMtimeDiffers);
  check(12345ULL * 1000000000ULL + 678, 12, Staleness::kFresh);

  std::string path = WriteTestFile("stale.tok", MakeCacheBytes(1, 1, {}));
  auto cache = TokenCache::Open(path);
  ASSERT_TRUE(cache.ok());
  auto report = cache->Staleness(TestDir() + "/no-such-source.txt");
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_EQ(report->staleness, Staleness::kSourceMissing);
  EXPECT_EQ(StalenessName(Staleness::kSourceMissing), "stale: source missing");
}

TEST(TokenCacheWriter, WritesTheFormatByteForByte) {
  std::string path = TestDir() + "/written.tok";
  std::vector<uint32_t> ids;
  for (uint32_t i = 0; i < 700000; ++i) ids.push_back(i * 2654435761u);
  {
    auto w = TokenCacheWriter::Create(path, SourceStat{0x1122334455667788ULL, 42});
    ASSERT_TRUE(w.ok()) << w.status();
    // Several appends crossing the 1 MiB buffer.
    ASSERT_TRUE(w->Append(absl::MakeSpan(ids).subspan(0, 3)).ok());
    ASSERT_TRUE(w->Append(absl::MakeSpan(ids).subspan(3, 400000)).ok());
    ASSERT_TRUE(w->Append(absl::MakeSpan(ids).subspan(400003)).ok());
    EXPECT_EQ(access(path.c_str(), F_OK), -1) << "final name before Commit";
    std::string tmp = w->temporary_path();
    ASSERT_TRUE(w->Commit().ok());
    EXPECT_EQ(access(tmp.c_str(), F_OK), -1);
  }
  EXPECT_EQ(ReadBytes(path), MakeCacheBytes(0x1122334455667788ULL, 42, ids));
}

TEST(TokenCacheWriter, AbandonedWriterLeavesNothing) {
  std::string path = TestDir() + "/abandoned.tok";
  std::string tmp;
  {
    auto w = TokenCacheWriter::Create(path, SourceStat{1, 2});
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->Append({1, 2, 3}).ok());
    tmp = w->temporary_path();
    EXPECT_EQ(access(tmp.c_str(), F_OK), 0);
  }
  EXPECT_EQ(access(tmp.c_str(), F_OK), -1);
  EXPECT_EQ(access(path.c_str(), F_OK), -1);
}

TEST(TokenCacheWriter, KeepsOldCacheUntilCommit) {
  std::string path = WriteTestFile("keep.tok", MakeCacheBytes(9, 9, {9}));
  auto w = TokenCacheWriter::Create(path, SourceStat{1, 2});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append({1}).ok());
  EXPECT_EQ(ReadBytes(path), MakeCacheBytes(9, 9, {9}));
  ASSERT_TRUE(w->Commit().ok());
  EXPECT_EQ(ReadBytes(path), MakeCacheBytes(1, 2, {1}));
}

// Commit's before_replace: its error leaves the old file and no temporary.
TEST(TokenCacheWriter, BeforeReplaceErrorKeepsTheOldFile) {
  const std::string path =
      WriteTestFile("late.tok", MakeCacheBytes(9, 9, {9}));
  auto w = TokenCacheWriter::Create(path, SourceStat{1, 2});
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(w->Append({1}).ok());
  const std::string tmp = w->temporary_path();
  int calls = 0;
  const absl::Status s = w->Commit([&](const std::string& target) {
    ++calls;
    EXPECT_EQ(target, path);
    EXPECT_EQ(ReadBytes(tmp), MakeCacheBytes(1, 2, {1}));
    return absl::FailedPreconditionError("a checkpoint appeared");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s, absl::FailedPreconditionError("a checkpoint appeared"));
  EXPECT_EQ(ReadBytes(path), MakeCacheBytes(9, 9, {9}));
  EXPECT_EQ(access(tmp.c_str(), F_OK), -1);
}

TEST(CacheHeaderProblem, WithoutAVocabularyAtMost1024BytesPerId) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  EXPECT_EQ(CacheHeaderProblemWithoutVocabulary({1, 5 * 1024}, 5, now), "");
  EXPECT_EQ(CacheHeaderProblemWithoutVocabulary({0, 0}, 0, now), "");
  EXPECT_EQ(CacheHeaderProblemWithoutVocabulary({1, 5 * 1024 + 1}, 5, now),
            "its header names 5121 source bytes (offset 8) for 5 tokens, more "
            "than 1024 per token where text encodes to a few (a raw u32 id "
            "file read as a cache?)");
  // The rules with the vocabulary's bound still apply first.
  EXPECT_THAT(CacheHeaderProblemWithoutVocabulary({1, 4}, 5, now),
              testing::HasSubstr("fewer than one per token"));
  // A raw id file 7, 9, 300, 112, ... (what tokenize encode writes) read as
  // a cache: bytes 8..15 are 300 + 112 * 2^32, about 481 GB.
  EXPECT_THAT(CacheHeaderProblemWithoutVocabulary(
                  {7 + (9ull << 32), 300 + (112ull << 32)}, 102434, now),
              testing::HasSubstr("a raw u32 id file read as a cache?"));
}

TEST(CacheHeaderProblem, TheRuleThatTellsACacheFromOtherFiles) {
  const absl::Time now = absl::FromUnixSeconds(1700000000);
  const uint64_t year_ahead = 1700000000000000000ull + 365ull * 86400 * 1000000000;
  EXPECT_EQ(CacheHeaderProblem({0, 0}, 0, 13, now), "");  // empty stdin
  EXPECT_EQ(CacheHeaderProblem({year_ahead, 5}, 5, 13, now), "");
  EXPECT_EQ(CacheHeaderProblem({1, 65}, 5, 13, now), "");  // 13 bytes per id
  EXPECT_THAT(CacheHeaderProblem({year_ahead + 1, 5}, 5, 13, now),
              testing::HasSubstr("more than a year ahead"));
  // Text read as a time: "the cat " is centuries ahead.
  EXPECT_THAT(CacheHeaderProblem({0x2074616320656874ull, 5}, 5, 13, now),
              testing::HasSubstr("more than a year ahead"));
  EXPECT_THAT(CacheHeaderProblem({1, 4}, 5, 13, now),
              testing::HasSubstr("fewer than one per token"));
  EXPECT_EQ(CacheHeaderProblem({1, 66}, 5, 13, now),
            "its header names 66 source bytes (offset 8) for 5 tokens, more "
            "than the vocabulary's longest token (13 bytes) per token");
  EXPECT_EQ(CacheHeaderProblem({1, 66}, 5, 0, now), "");  // no vocabulary
  // Before 1970: a negative st_mtim, stored two's complement.
  EXPECT_EQ(CacheHeaderProblem({static_cast<uint64_t>(-315619200000000000LL), 5},
                               5, 13, now),
            "");
  EXPECT_THAT(CacheHeaderProblem({1, 16}, 0, 13, now),
              testing::HasSubstr("holds no tokens"));
  // No overflow for huge counts.
  EXPECT_EQ(CacheHeaderProblem({1, ~0ull}, 1ull << 62, 64, now), "");
}

TEST(TokenCacheWriter, RemovesTemporariesOfDeadProcesses) {
  std::string path = TestDir() + "/killed.tok";
  // A child that dies leaves its pid unused (reaped).
  pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  std::string dead = absl::StrCat(path, ".tmp-", child, "-0badf00d");
  std::string alive = absl::StrCat(path, ".tmp-", getpid(), "-12345678");
  std::string other = TestDir() + "/otherfile.tok.tmp-" + std::to_string(child) + "-1";
  WriteTestFile(dead.substr(TestDir().size() + 1), "partial");
  WriteTestFile(alive.substr(TestDir().size() + 1), "in progress");
  WriteTestFile(other.substr(TestDir().size() + 1), "not ours");
  EXPECT_EQ(RemoveStaleTemporaries(path), 1);
  EXPECT_EQ(access(dead.c_str(), F_OK), -1);
  EXPECT_EQ(access(alive.c_str(), F_OK), 0);
  EXPECT_EQ(access(other.c_str(), F_OK), 0);
}

}  // namespace
}  // namespace coppelius
