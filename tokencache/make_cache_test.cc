#include "tokencache/make_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "common/stdin_pipe.h"
#include "tokencache/token_cache.h"
#include "tokenizer/encoder.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

std::string TestDir() { return std::getenv("TEST_TMPDIR"); }

void WriteFile(const std::string& path, const std::string& bytes) {
  FILE* f = fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr) << path;
  fwrite(bytes.data(), 1, bytes.size(), f);
  fclose(f);
}

std::string ReadBytes(const std::string& path) {
  std::string out;
  FILE* f = fopen(path.c_str(), "rb");
  if (f == nullptr) return out;
  char buf[65536];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  fclose(f);
  return out;
}

std::vector<std::string> TestTokens() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  for (const char* t : {"ab", " ab", "he", "ll", "hell", "hello", " hello",
                        "\n\n", "wor", "ld", " world", "é", " é"}) {
    tokens.push_back(t);
  }
  return tokens;  // 269 ranks, V = 270
}

std::string WriteVocab() {
  std::string path = TestDir() + "/vocab.tiktoken";
  auto vocabulary = Vocabulary::FromTokens(TestTokens());
  EXPECT_TRUE(vocabulary.ok());
  EXPECT_TRUE(vocabulary->Save(path).ok());
  return path;
}

std::string RandomText(uint32_t seed, size_t bytes) {
  std::mt19937 rng(seed);
  const std::vector<std::string> parts = {
      "hello", " world", "ab", " ab", "\n\n", " ", "é", "x", "'s", "<|endoftext|>",
      "<|endoftext", "\xff", "12", "  "};
  std::string out;
  while (out.size() < bytes) out += parts[rng() % parts.size()];
  return out;
}

// The cache file an independent writer would produce for `text`.
std::string ExpectedCache(const std::string& text, uint64_t mtime,
                          uint64_t size) {
  auto vocabulary = Vocabulary::FromTokens(TestTokens());
  Encoder encoder(*std::move(vocabulary));
  std::vector<uint32_t> ids;
  encoder.Encode(text, /*allow_special=*/true, &ids);
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(char(mtime >> (8 * i)));
  for (int i = 0; i < 8; ++i) out.push_back(char(size >> (8 * i)));
  for (uint32_t id : ids) {
    for (int i = 0; i < 4; ++i) out.push_back(char(id >> (8 * i)));
  }
  return out;
}

MakeCacheOptions Options(const std::string& source, const std::string& out) {
  MakeCacheOptions o;
  o.vocab_path = WriteVocab();
  o.source_path = source;
  o.output_path = out;
  o.summary = false;
  return o;
}

TEST(RunMakeCache, EncodesWithSpecialsAndRecordsSource) {
  const std::string text = RandomText(1, 300000);
  const std::string source = TestDir() + "/source.txt";
  WriteFile(source, text);
  auto st = StatSource(source);
  ASSERT_TRUE(st.ok());
  for (size_t block : {size_t{1}, size_t{777}, size_t{100000}, size_t{8 << 20}}) {
    MakeCacheOptions o = Options(source, TestDir() + "/out.tok");
    o.block_bytes = block;
    o.force = true;
    o.threads = 2;
    MakeCacheReport report;
    ASSERT_TRUE(RunMakeCache(o, &report).ok());
    EXPECT_FALSE(report.was_fresh);
    std::string want = ExpectedCache(text, st->mtime_ns, text.size());
    EXPECT_EQ(report.num_tokens, (want.size() - 16) / 4);
    ASSERT_EQ(ReadBytes(o.output_path), want) << "block " << block;
  }
  // The separators became the special id V-1 = 269.
  auto cache = TokenCache::Open(TestDir() + "/out.tok");
  ASSERT_TRUE(cache.ok());
  size_t specials = std::count(cache->token_span().begin(),
                               cache->token_span().end(), 269u);
  size_t separators = 0;
  for (size_t p = text.find("<|endoftext|>"); p != std::string::npos;
       p = text.find("<|endoftext|>", p + 1)) {
    ++separators;
  }
  EXPECT_EQ(specials, separators);
  EXPECT_GT(separators, 0u);
  EXPECT_TRUE(cache->CheckIdRange(270).ok());
  EXPECT_FALSE(cache->CheckIdRange(269).ok());
}

TEST(RunMakeCache, FreshCacheIsLeftAlone) {
  const std::string source = TestDir() + "/fresh.txt";
  WriteFile(source, "hello world<|endoftext|>ab ab");
  MakeCacheOptions o = Options(source, TestDir() + "/fresh.tok");
  MakeCacheReport report;
  ASSERT_TRUE(RunMakeCache(o, &report).ok());
  EXPECT_FALSE(report.was_fresh);
  struct stat first;
  ASSERT_EQ(stat(o.output_path.c_str(), &first), 0);

  ASSERT_TRUE(RunMakeCache(o, &report).ok());
  EXPECT_TRUE(report.was_fresh);
  struct stat second;
  ASSERT_EQ(stat(o.output_path.c_str(), &second), 0);
  EXPECT_EQ(first.st_ino, second.st_ino) << "a fresh cache was rewritten";

  o.force = true;
  ASSERT_TRUE(RunMakeCache(o, &report).ok());
  EXPECT_FALSE(report.was_fresh);
  ASSERT_EQ(stat(o.output_path.c_str(), &second), 0);
  EXPECT_NE(first.st_ino, second.st_ino) << "--force did not rebuild";
}

// A cache whose header matches its source, when the source cannot be read
// for the freshness check (here: larger than the memory a ulimit -v
// leaves), is that one error, once: it printed "matches the source but
// <the error>; rebuilding", then failed on the same error.
TEST(RunMakeCacheDeathTest, UnreadableSourceIsOneErrorNotARebuild) {
  const std::string source = TestDir() + "/unreadable-big.txt";
  const int fd = open(source.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{1} << 29), 0);
  close(fd);
  MakeCacheOptions o = Options(source, TestDir() + "/unreadable-big.tok");
  o.summary = true;
  struct stat st;
  ASSERT_EQ(stat(source.c_str(), &st), 0);
  const int64_t mtime =
      int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  // 512 Ki ids of 0: one per 1,024 source bytes, the most a cache may
  // name (CacheHeaderProblem); with fewer it is not fresh but rebuilt.
  constexpr size_t kIds = size_t{1} << 19;
  WriteFile(o.output_path,
            ExpectedCache("", mtime, st.st_size) + std::string(4 * kIds, '\0'));
  EXPECT_EXIT(
      {
        std::ifstream statm("/proc/self/statm");
        uint64_t pages = 0;
        statm >> pages;
        const rlim_t limit = pages * sysconf(_SC_PAGESIZE) + (256 << 20);
        struct rlimit r;
        r.rlim_cur = r.rlim_max = limit;
        setrlimit(RLIMIT_AS, &r);
        const absl::Status s = RunMakeCache(o, nullptr);
        fprintf(stderr, "%s\n", s.ToString().c_str());
        _exit(s.code() == absl::StatusCode::kResourceExhausted ? 0 : 4);
      },
      testing::ExitedWithCode(0),
      "^RESOURCE_EXHAUSTED: [^\n]*/unreadable-big.txt: 536870912 bytes do "
      "not fit in memory [^\n]*\n$");
  EXPECT_EQ(ReadBytes(o.output_path).size(), 16 + 4 * kIds)
      << "the cache was touched";
  unlink(source.c_str());
}

TEST(RunMakeCache, StaleCacheIsRebuilt) {
  const std::string source = TestDir() + "/stale.txt";
  WriteFile(source, "hello");
  MakeCacheOptions o = Options(source, TestDir() + "/stale.tok");
  ASSERT_TRUE(RunMakeCache(o).ok());
  // Same size, new mtime: stale.
  WriteFile(source, "world");
  struct timespec times[2] = {{0, UTIME_OMIT}, {1000, 5}};
  ASSERT_EQ(utimensat(AT_FDCWD, source.c_str(), times, 0), 0);
  MakeCacheReport report;
  ASSERT_TRUE(RunMakeCache(o, &report).ok());
  EXPECT_FALSE(report.was_fresh);
  EXPECT_EQ(ReadBytes(o.output_path), ExpectedCache("world", 1000000000005ULL, 5));
}

// A file that is not a token cache may be anything (a checkpoint, a
// result): kept unless --force.
// Caches of sources with unusual modification times stay make-cache's own:
// before 1970 (a negative st_mtim) and days ahead (break-it round 2: the
// unchanged rerun called them "not a token cache").
TEST(RunMakeCache, CachesOfOddlyDatedSourcesAreRebuiltNotRefused) {
  const std::string source = TestDir() + "/odd.txt";
  MakeCacheOptions o = Options(source, TestDir() + "/odd.tok");
  const int64_t now = static_cast<int64_t>(time(nullptr));
  for (int64_t seconds : {int64_t{-315619200}, now + 3 * 86400}) {  // 1960, +3 days
    SCOPED_TRACE(seconds);
    WriteFile(source, "hello");
    struct timespec times[2] = {{0, UTIME_OMIT}, {seconds, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, source.c_str(), times, 0), 0);
    MakeCacheReport report;
    absl::Status s = RunMakeCache(o, &report);
    ASSERT_TRUE(s.ok()) << s;
    s = RunMakeCache(o, &report);  // unchanged: fresh
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(report.was_fresh);
    WriteFile(source, "world!");  // changed, same odd date: rebuilt
    ASSERT_EQ(utimensat(AT_FDCWD, source.c_str(), times, 0), 0);
    s = RunMakeCache(o, &report);
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_FALSE(report.was_fresh);
  }
}

// An output given as a symbolic link is published to its target; a link to
// nothing is refused; a source dated more than a year ahead is refused.
TEST(RunMakeCache, LinksAndFarFutureSources) {
  const std::string source = TestDir() + "/linked.txt";
  WriteFile(source, "hello");
  MakeCacheOptions o = Options(source, TestDir() + "/target.tok");
  ASSERT_TRUE(RunMakeCache(o).ok());
  const std::string link = TestDir() + "/link.tok";
  ASSERT_EQ(symlink((TestDir() + "/target.tok").c_str(), link.c_str()), 0);
  WriteFile(source, "world, longer");
  o.output_path = link;
  ASSERT_TRUE(RunMakeCache(o).ok());
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the link was replaced";
  auto now = StatSource(source);
  EXPECT_EQ(ReadBytes(TestDir() + "/target.tok"),
            ExpectedCache("world, longer", now->mtime_ns, 13));
  const std::string dangling = TestDir() + "/dangling.tok";
  ASSERT_EQ(symlink((TestDir() + "/nothing.tok").c_str(), dangling.c_str()), 0);
  o.output_path = dangling;
  absl::Status s = RunMakeCache(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("symbolic link to a missing file"), std::string::npos);
  // Two years ahead.
  struct timespec times[2] = {
      {0, UTIME_OMIT}, {static_cast<time_t>(time(nullptr) + 2 * 366 * 86400), 0}};
  ASSERT_EQ(utimensat(AT_FDCWD, source.c_str(), times, 0), 0);
  o.output_path = TestDir() + "/future.tok";
  s = RunMakeCache(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("more than a year ahead"), std::string::npos) << s;
  EXPECT_NE(access(o.output_path.c_str(), F_OK), 0);
  // Dated past 2262-04-11: its time in ns does not fit the header's signed
  // 64 bits (it used to wrap to 1678 and pass as a past date).
  times[1] = {static_cast<time_t>(9300000000LL), 0};  // 2264-09-14
  struct stat dated;
  if (utimensat(AT_FDCWD, source.c_str(), times, 0) != 0 ||
      stat(source.c_str(), &dated) != 0 || dated.st_mtim.tv_sec != 9300000000LL) {
    GTEST_SKIP() << "this file system does not store times after 2262";
  }
  o.output_path = TestDir() + "/far_future.tok";
  s = RunMakeCache(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(std::string(s.message()),
            "source: " + source +
                ": modification time 9300000000 s since the epoch "
                "(2264-09-14) is outside what a token cache's header holds "
                "(signed 64-bit nanoseconds: 1677-09-21 to 2262-04-11); "
                "correct it (touch)");
  EXPECT_NE(access(o.output_path.c_str(), F_OK), 0);
}

// Runs make-cache with standard output on a new empty file `out`.
absl::Status RunMakeCacheToStdout(MakeCacheOptions o, const std::string& out) {
  WriteFile(out, "");
  o.output_path = "-";
  fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  const int fd = open(out.c_str(), O_WRONLY | O_APPEND);
  EXPECT_GE(fd, 0);
  dup2(fd, STDOUT_FILENO);
  close(fd);
  const absl::Status s = RunMakeCache(o);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  return s;
}

// A vocabulary whose tokens are longer than kMaxSourceBytesPerToken, and
// text made of them: the cache would fail the rule every reader tells
// caches from other files by, so it is not written — not over an existing
// output, not a byte of it to standard output (whose ids are held until
// the count is known) — and such a cache of the source already there is
// never fresh.
TEST(RunMakeCache, MoreThanTheMostSourceBytesPerIdIsNotWritten) {
  std::vector<std::string> tokens = TestTokens();
  std::string longest = "x";
  while (longest.size() < 2048) {
    longest += longest;
    tokens.push_back(longest);  // xx, xxxx, ..., 2,048 x
  }
  const std::string vocab = TestDir() + "/long_tokens.tiktoken";
  auto vocabulary = Vocabulary::FromTokens(tokens);
  ASSERT_TRUE(vocabulary.ok()) << vocabulary.status();
  ASSERT_TRUE(vocabulary->Save(vocab).ok());
  const std::string source = TestDir() + "/long_tokens.txt";
  MakeCacheOptions o = Options(source, TestDir() + "/long_tokens.tok");
  o.vocab_path = vocab;
  // One id per 1,024 bytes is a cache, to a file and to standard output.
  WriteFile(source, std::string(1024, 'x'));
  ASSERT_TRUE(RunMakeCache(o).ok());
  const std::string existing = ReadBytes(o.output_path);
  EXPECT_EQ(existing.size(), 16u + 4u);
  const std::string piped = TestDir() + "/long_tokens_stdout.tok";
  ASSERT_TRUE(RunMakeCacheToStdout(o, piped).ok());
  EXPECT_EQ(ReadBytes(piped), existing);
  // 3 ids for 6,144 bytes: refused; the existing cache (of the source
  // before) is left as it was; standard output gets nothing.
  std::string text;
  for (int i = 0; i < 3; ++i) text += longest;
  WriteFile(source, text);
  const std::string refusal =
      source + ": 6144 bytes encode to 3 ids, more than 1024 source bytes "
               "per id (the vocabulary " + vocab +
      " has tokens that long); a token cache holds at least one id per 1024 "
      "source bytes, the rule that tells caches from other files "
      "(docs/FORMATS.md); not written";
  absl::Status s = RunMakeCache(o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(std::string(s.message()), refusal);
  EXPECT_EQ(ReadBytes(o.output_path), existing);
  s = RunMakeCacheToStdout(o, piped);
  EXPECT_EQ(std::string(s.message()), refusal);
  EXPECT_EQ(ReadBytes(piped), "");
  // Such a cache of this very source (what make-cache wrote before this
  // rule): its header is the source's, but it is not fresh; the rebuild
  // refuses, and the file is left as it was.
  auto now = StatSource(source);
  ASSERT_TRUE(now.ok());
  const std::string legacy = ExpectedCache("", now->mtime_ns, 6144) +
                             std::string("\x11\x01\0\0\x11\x01\0\0\x11\x01\0\0", 12);
  WriteFile(o.output_path, legacy);
  s = RunMakeCache(o);
  EXPECT_EQ(std::string(s.message()), refusal);
  EXPECT_EQ(ReadBytes(o.output_path), legacy);
}

TEST(RunMakeCache, NonCacheOutputIsReplacedOnlyWithForce) {
  const std::string source = TestDir() + "/corrupt.txt";
  WriteFile(source, "ab");
  MakeCacheOptions o = Options(source, TestDir() + "/corrupt.tok");
  // Raw u32 LE ids as `tokenize encode` writes them ("hello" then 300, 5,
  // 7): bytes 0..15 read as a 1970 mtime and 463,856,467,052 source bytes
  // for 4 tokens.
  std::string raw_ids;
  for (uint32_t id : {104u, 101u, 108u, 108u, 111u, 300u, 5u, 7u}) {
    for (int b = 0; b < 4; ++b) raw_ids.push_back(static_cast<char>(id >> (8 * b)));
  }
  // A safetensors file: an 8-byte LE header length, then JSON.
  std::string safetensors("\x18\0\0\0\0\0\0\0{\"__metadata__\":{}}     ", 32);
  for (const std::string& bytes :
       {std::string("garbage!!"),  // 9 bytes: not 16 + 4·N
        std::string("this text is 24 bytes!!\n"),  // opens; a header from the future
        raw_ids, safetensors,
        std::string("version\n1.2.3.4\n")}) {  // 16 bytes: source bytes, no ids
    WriteFile(o.output_path, bytes);
    const absl::Status s = RunMakeCache(o);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("not a token cache"), std::string::npos) << s;
    EXPECT_EQ(ReadBytes(o.output_path), bytes);
  }
  o.force = true;
  ASSERT_TRUE(RunMakeCache(o).ok());
  auto st = StatSource(source);
  EXPECT_EQ(ReadBytes(o.output_path), ExpectedCache("ab", st->mtime_ns, 2));
}

// A Coppelius checkpoint or result file is never replaced, --force or not
// (break-it: --force replaced them), and the refusal names what was found.
TEST(RunMakeCache, CheckpointAndResultOutputsAreNeverReplaced) {
  const std::string source = TestDir() + "/precious-source.txt";
  WriteFile(source, "hello world");
  MakeCacheOptions o = Options(source, TestDir() + "/precious.bin");
  // A complete result of config `tiny` (V 512, T 64, 8 steps), as
  // docs/FORMATS.md lays it out: 27,744 bytes, the host tag "CPLSRES1" at
  // the host status offset 12 V + 4 T steps + 160 + 16384 + 4 V + 96 + 64
  // = 26,944; its first bytes fp32 logits (1.5f).
  std::string result(27744, '\0');
  for (size_t i = 0; i < 6144; i += 4) {
    result.replace(i, 4, std::string("\0\0\xc0\x3f", 4));
  }
  result.replace(26944, 8, "CPLSRES1");
  const struct {
    std::string bytes;
    const char* kind;
  } cases[] = {
      {std::string("COPPCKPT\x01\0\0\0\x80\0\0\0", 16) + std::string(4096, 'x'),
       "a Coppelius checkpoint (the magic \"COPPCKPT\" at offset 0)"},
      {std::string("\xbe\xba\xfe\xca\xbe\xba\xfe\xca", 8),
       "a Coppelius result file (the result marker"},
      {result, "a Coppelius result file (config tiny, host tag at byte 26944"},
  };
  for (const auto& c : cases) {
    for (bool force : {false, true}) {
      SCOPED_TRACE(absl::StrCat(c.kind, force ? " --force" : ""));
      WriteFile(o.output_path, c.bytes);
      o.force = force;
      const absl::Status s = RunMakeCache(o);
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_THAT(std::string(s.message()),
                  HasSubstr(absl::StrCat("-o ", o.output_path,
                                         ": exists and is ", c.kind)));
      EXPECT_THAT(std::string(s.message()), HasSubstr("never replaced"));
      EXPECT_EQ(ReadBytes(o.output_path), c.bytes) << "the file was replaced";
    }
  }
}

// A file that appears at -o while make-cache reads its source is judged as
// one there at the start would be (break-it, session 24: the output was
// checked only at the start and the finished cache renamed over whatever
// was there by then): a checkpoint is never replaced, a file that is not a
// token cache only with --force. The source comes through a pipe on
// standard input, the file written once make-cache is reading it
// (RunWithFileAppearing).
TEST(RunMakeCache, FileThatAppearsDuringTheRunIsJudgedBeforeReplacing) {
  std::string text;
  while (text.size() < (1u << 20)) text += "hello world, the cat sat. ";
  const std::string checkpoint =
      std::string("COPPCKPT\x01\0\0\0\x80\0\0\0", 16) + std::string(4096, 'x');
  const std::string notes = "notes, not a token cache\n";
  const std::string dir = TestDir() + "/appears";
  mkdir(dir.c_str(), 0755);
  const auto entries = [&] {
    std::vector<std::string> names;
    DIR* d = opendir(dir.c_str());
    while (dirent* e = d != nullptr ? readdir(d) : nullptr) {
      const std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    if (d != nullptr) closedir(d);
    return names;
  };
  const struct {
    std::string contents, kind;
    bool force, replaced;
  } cases[] = {
      {checkpoint, "exists and is a Coppelius checkpoint", false, false},
      {checkpoint, "exists and is a Coppelius checkpoint", true, false},
      {notes, "exists and is not a token cache", false, false},
      {notes, "", true, true},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.kind, c.force ? " --force" : ""));
    MakeCacheOptions o = Options("-", dir + "/corpus.tok");
    o.force = c.force;
    unlink(o.output_path.c_str());
    const AppearingFileRun r = RunWithFileAppearing(
        [&] { return RunMakeCache(o); }, text, 256u << 10, o.output_path,
        c.contents);
    EXPECT_TRUE(r.fed) << r.status;
    if (c.replaced) {
      EXPECT_TRUE(r.status.ok()) << r.status;
      absl::StatusOr<TokenCache> cache = TokenCache::Open(o.output_path);
      ASSERT_TRUE(cache.ok()) << cache.status();
      EXPECT_GT(cache->num_tokens(), 0u);
    } else {
      EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition)
          << r.status;
      EXPECT_THAT(std::string(r.status.message()),
                  HasSubstr(absl::StrCat("-o ", o.output_path, ": ", c.kind)));
      EXPECT_THAT(std::string(r.status.message()),
                  HasSubstr("found there right before replacing it: it "
                            "appeared while the output was being written"));
      EXPECT_EQ(ReadBytes(o.output_path), c.contents);
    }
    // Nothing else in the directory: the temporary is gone.
    EXPECT_EQ(entries(), std::vector<std::string>{"corpus.tok"});
  }
}

// `-o - >> FILE` with FILE not empty is refused, --force or not, FILE
// untouched: a cache appended to a file is never a cache (break s18: it was
// appended to an existing cache or vocabulary, exit 0). An empty standard
// output file (`-o - > NEW`) is written.
TEST(RunMakeCache, StandardOutputAppendingToAFileIsRefused) {
  const std::string source = TestDir() + "/append-source.txt";
  WriteFile(source, "hello world");
  const std::string out = TestDir() + "/append-target";
  const std::string before = "an existing file\n";
  for (bool force : {false, true}) {
    SCOPED_TRACE(force ? "--force" : "no --force");
    WriteFile(out, before);
    MakeCacheOptions o = Options(source, "-");
    o.force = force;
    const int saved = dup(STDOUT_FILENO);
    const int fd = open(out.c_str(), O_WRONLY | O_APPEND);
    ASSERT_GE(fd, 0);
    fflush(stdout);
    dup2(fd, STDOUT_FILENO);
    close(fd);
    const absl::Status s = RunMakeCache(o);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("-o - (standard output, an existing file of 17 "
                          "bytes)"));
    EXPECT_EQ(ReadBytes(out), before);
  }
  WriteFile(out, "");
  const int saved = dup(STDOUT_FILENO);
  const int fd = open(out.c_str(), O_WRONLY | O_APPEND);
  ASSERT_GE(fd, 0);
  dup2(fd, STDOUT_FILENO);
  close(fd);
  const absl::Status s = RunMakeCache(Options(source, "-"));
  dup2(saved, STDOUT_FILENO);
  close(saved);
  ASSERT_TRUE(s.ok()) << s;
  auto st = StatSource(source);
  EXPECT_EQ(ReadBytes(out), ExpectedCache("hello world", st->mtime_ns, 11));
}

TEST(RunMakeCache, StdinHasMtimeZeroAndBytesRead) {
  const std::string text = "hello<|endoftext|> world\n\n";
  const std::string stdin_file = TestDir() + "/stdin.txt";
  WriteFile(stdin_file, text);
  int saved = dup(STDIN_FILENO);
  int fd = open(stdin_file.c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  dup2(fd, STDIN_FILENO);
  close(fd);
  MakeCacheOptions o = Options("-", TestDir() + "/stdin.tok");
  absl::Status s = RunMakeCache(o);
  dup2(saved, STDIN_FILENO);
  close(saved);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_EQ(ReadBytes(o.output_path), ExpectedCache(text, 0, text.size()));
}

TEST(RunMakeCache, BadInputs) {
  const std::string source = TestDir() + "/bad.txt";
  WriteFile(source, "hello");
  MakeCacheOptions o = Options(source, TestDir() + "/bad.tok");

  {  // Standard input named twice (it would be read empty the second time).
    MakeCacheOptions twice = Options("-", TestDir() + "/twice.tok");
    twice.vocab_path = "-";
    const absl::Status s = RunMakeCache(twice);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("read once"), std::string::npos) << s;
  }

  for (int threads : {-1, 1025, 99999}) {
    MakeCacheOptions many = o;
    many.threads = threads;
    EXPECT_EQ(RunMakeCache(many).code(), absl::StatusCode::kInvalidArgument)
        << threads;
  }

  MakeCacheOptions missing_vocab = o;
  missing_vocab.vocab_path = TestDir() + "/nope.tiktoken";
  EXPECT_EQ(RunMakeCache(missing_vocab).code(), absl::StatusCode::kNotFound);

  MakeCacheOptions bad_vocab = o;
  bad_vocab.vocab_path = TestDir() + "/bad.tiktoken";
  WriteFile(bad_vocab.vocab_path, "not base64 at all\n");
  absl::Status s = RunMakeCache(bad_vocab);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("bad.tiktoken"));

  MakeCacheOptions missing_source = o;
  missing_source.source_path = TestDir() + "/nope.txt";
  s = RunMakeCache(missing_source);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("nope.txt"));

  MakeCacheOptions same = o;
  same.output_path = source;
  s = RunMakeCache(same);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadBytes(source), "hello");

  MakeCacheOptions no_dir = o;
  no_dir.output_path = TestDir() + "/no/such/dir/x.tok";
  EXPECT_FALSE(RunMakeCache(no_dir).ok());

  MakeCacheOptions no_vocab = o;
  no_vocab.vocab_path = "";
  EXPECT_EQ(RunMakeCache(no_vocab).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(access(o.output_path.c_str(), F_OK), -1);
}

TEST(RunMakeCache, KilledRunLeavesNoPartialCache) {
  // A child process starts writing and is killed before Commit; the final
  // name never appears, and the next run removes the stale temporary.
  const std::string text = RandomText(9, 2000000);
  const std::string source = TestDir() + "/killed.txt";
  WriteFile(source, text);
  MakeCacheOptions o = Options(source, TestDir() + "/killed.tok");
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto w = TokenCacheWriter::Create(o.output_path, SourceStat{1, 2});
    if (!w.ok()) _exit(2);
    std::vector<uint32_t> ids(1000, 7);
    if (!w->Append(ids).ok()) _exit(3);
    kill(getpid(), SIGKILL);
    _exit(4);
  }
  int wstatus = 0;
  waitpid(child, &wstatus, 0);
  ASSERT_TRUE(WIFSIGNALED(wstatus));
  EXPECT_EQ(access(o.output_path.c_str(), F_OK), -1);
  const std::string temporary_prefix =
      absl::StrCat("killed.tok.tmp-", child, "-");
  auto count_temporaries = [&]() {
    int n = 0;
    std::string listing;
    FILE* p = popen(("ls " + TestDir()).c_str(), "r");
    char buf[4096];
    while (fgets(buf, sizeof(buf), p)) {
      if (absl::StartsWith(buf, temporary_prefix)) ++n;
    }
    pclose(p);
    return n;
  };
  EXPECT_EQ(count_temporaries(), 1);
  ASSERT_TRUE(RunMakeCache(o).ok());
  EXPECT_EQ(count_temporaries(), 0);
  auto st = StatSource(source);
  EXPECT_EQ(ReadBytes(o.output_path),
            ExpectedCache(text, st->mtime_ns, text.size()));
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

// A named pipe as SOURCE (what `<(...)` gives) is refused at once (stat,
// no open: no blocking on a FIFO without a writer), saying how a stream is
// given instead.
TEST(RunMakeCache, NamedPipeSourceIsRefusedWithTheWayToGiveAStream) {
  const std::string fifo = TestDir() + "/src_fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  MakeCacheOptions o = Options(fifo, TestDir() + "/fifo.tok");
  const absl::Status s = RunMakeCache(o, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find(fifo), std::string::npos) << s;
  EXPECT_NE(s.message().find("standard input as '-'"), std::string::npos) << s;
  EXPECT_NE(access((TestDir() + "/fifo.tok").c_str(), F_OK), 0);
  unlink(fifo.c_str());
}

// A directory as SOURCE is named as one, without the pipes' advice.
TEST(RunMakeCache, DirectorySourceIsNamedAsADirectory) {
  const std::string dir = TestDir() + "/src_dir";
  mkdir(dir.c_str(), 0755);
  MakeCacheOptions o = Options(dir, TestDir() + "/dir.tok");
  const absl::Status s = RunMakeCache(o, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(),
            "source: " + dir + ": is a directory, expected a text file");
  EXPECT_NE(access((TestDir() + "/dir.tok").c_str(), F_OK), 0);
}

// The vocabulary and a directory are refused as -o; a device or a named
// pipe (what `-o >(...)` names) is written to, as `-o -` writes standard
// output, not replaced: /dev/null stays a device, and the pipe's reader
// gets the cache an independent writer would produce.
TEST(RunMakeCache, RefusesTheVocabularyAndADirectoryWritesIntoAPipe) {
  const std::string source = TestDir() + "/src_refuse.txt";
  WriteFile(source, "hello world");
  auto st = StatSource(source);
  ASSERT_TRUE(st.ok());
  MakeCacheOptions o = Options(source, "");
  o.output_path = o.vocab_path;
  const std::string vocab_before = ReadBytes(o.vocab_path);
  absl::Status s = RunMakeCache(o, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("vocabulary"), std::string::npos) << s;
  EXPECT_EQ(ReadBytes(o.vocab_path), vocab_before);

  const std::string dir = TestDir() + "/out_dir.tok";
  mkdir(dir.c_str(), 0755);
  o.output_path = dir;
  s = RunMakeCache(o, nullptr);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "-o " + dir +
                             ": exists and is not a regular file (a "
                             "directory); expected a regular file path");

  o.output_path = "/dev/null";
  s = RunMakeCache(o, nullptr);
  EXPECT_TRUE(s.ok()) << s;
  struct stat null_st;
  ASSERT_EQ(stat("/dev/null", &null_st), 0);
  EXPECT_TRUE(S_ISCHR(null_st.st_mode));

  const std::string fifo = TestDir() + "/out_fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] {
    const int fd = open(fifo.c_str(), O_RDONLY);
    if (fd < 0) return;
    char buffer[4096];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof(buffer))) > 0) got.append(buffer, n);
    close(fd);
  });
  o.output_path = fifo;
  s = RunMakeCache(o, nullptr);
  reader.join();
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(got, ExpectedCache("hello world", st->mtime_ns, 11));
  struct stat fifo_st;
  ASSERT_EQ(stat(fifo.c_str(), &fifo_st), 0);
  EXPECT_TRUE(S_ISFIFO(fifo_st.st_mode));
  unlink(fifo.c_str());
}

}  // namespace
}  // namespace coppelius
