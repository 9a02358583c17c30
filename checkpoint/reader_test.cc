#include "checkpoint/reader.h"

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/envelope.h"
#include "checkpoint/publisher.h"
#include "checkpoint/test_util.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::coppelius::checkpoint_testing::NewTempDir;
using ::coppelius::checkpoint_testing::TestIdentity;
using ::coppelius::checkpoint_testing::TestPayload;
using ::coppelius::checkpoint_testing::WriteBytes;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

// Opens `path` and verifies the payload; the first error or OK.
absl::Status OpenAndVerify(const std::string& path) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path);
  if (!r.ok()) return r.status();
  if (r->IsFresh()) return absl::OkStatus();
  return r->VerifyPayload(2);
}

class ReaderTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kParameters = 100;  // payload 1,200 bytes
  static constexpr uint64_t kChunk = 256;       // 5 chunks, last 176 bytes

  void SetUp() override {
    dir_ = NewTempDir();
    path_ = dir_ + "/model.ckpt";
    payload_ = TestPayload(kParameters, 1);
    id_ = TestIdentity(payload_.size() * 4, kChunk);
    PublishOptions options;
    options.writer = "reader_test";
    ASSERT_TRUE(PublishCheckpoint(path_, id_, 77, payload_.data(),
                                  payload_.size() * 4, options)
                    .ok());
    absl::StatusOr<std::string> bytes = ReadFile(path_);
    ASSERT_TRUE(bytes.ok());
    good_ = *bytes;
    header_bytes_ = good_[16] | (good_[17] << 8);  // < 64 KiB here
  }

  // Writes `bytes` to a fresh file in dir_ and returns its path.
  std::string Variant(const std::string& bytes) {
    const std::string p = absl::StrCat(dir_, "/variant", n_++, ".ckpt");
    WriteBytes(p, bytes);
    return p;
  }

  std::string PayloadBytes() const {
    return std::string(reinterpret_cast<const char*>(payload_.data()),
                       payload_.size() * 4);
  }

  std::string dir_, path_, good_;
  uint64_t header_bytes_ = 0;
  std::vector<float> payload_;
  CheckpointIdentity id_;
  int n_ = 0;
};

TEST_F(ReaderTest, RoundTrip) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path_);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->IsFresh());
  EXPECT_EQ(r->update_count(), 77u);
  EXPECT_TRUE(r->identity() == id_);
  EXPECT_TRUE(r->CheckIdentity(id_).ok());
  EXPECT_EQ(r->payload_offset(), 4096u);
  EXPECT_EQ(r->payload_bytes(), 1200u);
  EXPECT_EQ(r->file_bytes(), 4096u + 1200u);
  EXPECT_EQ(good_.size(), 4096u + 1200u);
  EXPECT_EQ(r->num_chunks(), 5u);
  EXPECT_EQ(r->header().writer(), "reader_test");
  EXPECT_EQ(r->header().parameter_count(), kParameters);
  // The header digest is SHA-256 of the header bytes as stored in the file.
  EXPECT_EQ(r->header_sha256(), Sha256(good_.substr(128, header_bytes_)));
  EXPECT_TRUE(r->VerifyPayload(1).ok());
  EXPECT_TRUE(r->VerifyPayload(2).ok());
  for (uint64_t i = 0; i < r->num_chunks(); ++i)
    EXPECT_TRUE(r->VerifyChunk(i).ok());
  EXPECT_EQ(r->VerifyChunk(5).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::memcmp(r->payload(), payload_.data(), 1200), 0);
  // The payload is P, M, V as given, at the 4096-aligned offset.
  EXPECT_EQ(good_.substr(4096), PayloadBytes());
  std::vector<float> back(payload_.size());
  EXPECT_TRUE(r->ReadPayload(back.data(), back.size() * 4, 2).ok());
  EXPECT_EQ(back, payload_);
  EXPECT_EQ(r->ReadPayload(back.data(), 12, 2).code(),
            absl::StatusCode::kInvalidArgument);
  // Move keeps the mapping alive.
  CheckpointReader moved = std::move(*r);
  EXPECT_TRUE(moved.VerifyPayload(2).ok());
}

// A FIFO (no writer) is refused at once: open() must not block on it.
TEST_F(ReaderTest, FifoIsRefusedWithoutBlocking) {
  const std::string fifo = dir_ + "/fifo.ckpt";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(fifo);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
  EXPECT_NE(r.status().message().find("not a regular file"), std::string::npos);
}

TEST_F(ReaderTest, ZeroByteFileIsFresh) {
  const std::string p = Variant("");
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(p);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->IsFresh());
  EXPECT_EQ(r->payload(), nullptr);
  EXPECT_EQ(r->VerifyPayload(2).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(r->CheckIdentity(id_).code(),
            absl::StatusCode::kFailedPrecondition);
  std::vector<float> dst(payload_.size());
  EXPECT_EQ(r->ReadPayload(dst.data(), 1200, 1).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST_F(ReaderTest, MissingPathIsNotFound) {
  absl::StatusOr<CheckpointReader> r =
      CheckpointReader::Open(dir_ + "/absent.ckpt");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(Msg(r.status()), HasSubstr("absent.ckpt"));
}

TEST_F(ReaderTest, DirectoryIsInvalidArgument) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(dir_);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(ReaderTest, FlippedByteInPreambleOrHeaderOrPaddingIsRefusedAtOpen) {
  for (size_t i = 0; i < 4096; ++i) {
    std::string bad = good_;
    bad[i] ^= 0x20;
    const std::string p = Variant(bad);
    absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(p);
    ASSERT_FALSE(r.ok()) << "offset " << i;
    EXPECT_THAT(Msg(r.status()), HasSubstr(p));
    if (i >= 8 && i < 12) {  // the version field
      EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    } else {
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss)
          << i << ": " << r.status();
    }
    if (i >= 128 && i < 128 + header_bytes_) {
      EXPECT_THAT(Msg(r.status()), HasSubstr("corrupt header"));
    } else if (i >= 128 + header_bytes_) {
      EXPECT_THAT(Msg(r.status()),
                  HasSubstr(absl::StrCat("offset ", i, ": padding")));
    }
    unlink(p.c_str());
  }
}

TEST_F(ReaderTest, FlippedByteInEachChunkNamesTheChunk) {
  for (uint64_t chunk = 0; chunk < 5; ++chunk) {
    const uint64_t begin = chunk * kChunk;
    const uint64_t end = std::min<uint64_t>(begin + kChunk, 1200);
    for (uint64_t off : {begin, (begin + end) / 2, end - 1}) {
      std::string bad = good_;
      bad[4096 + off] ^= 0x01;
      const std::string p = Variant(bad);
      absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(p);
      ASSERT_TRUE(r.ok()) << r.status();  // payload is checked lazily
      const absl::Status s = r->VerifyPayload(2);
      EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
      const std::string expected_hex = Sha256Hex(
          Sha256(good_.data() + 4096 + begin, end - begin));
      const std::string actual_hex =
          Sha256Hex(Sha256(bad.data() + 4096 + begin, end - begin));
      EXPECT_THAT(Msg(s), AllOf(HasSubstr(p),
                                HasSubstr(absl::StrCat("chunk ", chunk, " of 5")),
                                HasSubstr(absl::StrCat("file offset ",
                                                       4096 + begin)),
                                HasSubstr(expected_hex), HasSubstr(actual_hex),
                                HasSubstr("1 of 5 chunks differ")))
          << s;
      if (chunk == 4 && off == end - 1) std::printf("example: %s\n", s.ToString().c_str());
      EXPECT_EQ(r->VerifyChunk(chunk).code(), absl::StatusCode::kDataLoss);
      for (uint64_t other = 0; other < 5; ++other) {
        if (other != chunk) {
          EXPECT_TRUE(r->VerifyChunk(other).ok());
        }
      }
      std::vector<float> dst(payload_.size());
      const absl::Status read = r->ReadPayload(dst.data(), 1200, 2);
      EXPECT_EQ(read.code(), absl::StatusCode::kDataLoss);
      EXPECT_THAT(Msg(read), HasSubstr(absl::StrCat("chunk ", chunk, " of 5")));
      unlink(p.c_str());
    }
  }
}

TEST_F(ReaderTest, TruncationAtManyOffsetsIsDataLoss) {
  std::vector<size_t> lengths = {1, 7, 8, 79, 80, 127, 128, 129};
  for (size_t n = 130; n < good_.size(); n += 97) lengths.push_back(n);
  for (size_t n : {128 + header_bytes_ - 1, 128 + header_bytes_,
                   size_t{4095}, size_t{4096}, size_t{4097},
                   good_.size() - 1}) {
    lengths.push_back(n);
  }
  for (size_t n : lengths) {
    const std::string p = Variant(good_.substr(0, n));
    absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(p);
    ASSERT_FALSE(r.ok()) << "length " << n;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    EXPECT_THAT(Msg(r.status()), HasSubstr(p));
    unlink(p.c_str());
  }
}

TEST_F(ReaderTest, AppendedGarbageIsRefused) {
  for (const std::string& tail :
       {std::string(1, '\0'), std::string("x"), std::string(4096, '\0')}) {
    absl::StatusOr<CheckpointReader> r =
        CheckpointReader::Open(Variant(good_ + tail));
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(Msg(r.status()), HasSubstr("trailing bytes"));
  }
}

TEST_F(ReaderTest, WrongMagicAndVersion) {
  std::string bad = good_;
  std::memcpy(&bad[0], "GGUF\0\0\0\0", 8);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(Variant(bad));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(r.status()), HasSubstr("magic"));

  // A well-formed preamble (valid digest) of version 2.
  absl::StatusOr<Preamble> p = DecodePreamble(good_, good_.size(), "x");
  ASSERT_TRUE(p.ok());
  Preamble v2 = *p;
  v2.version = 2;
  bad = good_;
  bad.replace(0, 128, EncodePreamble(v2));
  r = CheckpointReader::Open(Variant(bad));
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(Msg(r.status()), HasSubstr("version 2"));
}

TEST_F(ReaderTest, EachIdentityFieldChangedIsRefusedByName) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path_);
  ASSERT_TRUE(r.ok());
  const std::pair<const char*, void (*)(CheckpointIdentity&)> cases[] = {
      {"state", [](CheckpointIdentity& x) { x.state += "x"; }},
      {"learner", [](CheckpointIdentity& x) { x.learner += "x"; }},
      {"data", [](CheckpointIdentity& x) { x.data += "x"; }},
      {"initialization", [](CheckpointIdentity& x) { x.initialization += "x"; }},
      {"model", [](CheckpointIdentity& x) { x.model += "x"; }},
      {"payload_bytes", [](CheckpointIdentity& x) { x.payload_bytes += 12; }},
      {"chunk_bytes", [](CheckpointIdentity& x) { x.chunk_bytes += 1; }},
      {"run_steps", [](CheckpointIdentity& x) { x.run_steps += 1; }},
  };
  for (const auto& [field, mutate] : cases) {
    CheckpointIdentity expected = id_;
    mutate(expected);
    const absl::Status s = r->CheckIdentity(expected);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << field;
    EXPECT_THAT(Msg(s), AllOf(HasSubstr(path_),
                              HasSubstr(absl::StrCat("identity field ", field, " "))));
  }
}

// Rewrites the preamble with `edit` applied, keeping its digest valid.
std::string WithPreamble(const std::string& good,
                         void (*edit)(Preamble&)) {
  Preamble p = *DecodePreamble(good, good.size(), "x");
  edit(p);
  std::string out = good;
  out.replace(0, 128, EncodePreamble(p));
  return out;
}

TEST_F(ReaderTest, HeaderLengthPastTheEndAndHugeSizes) {
  struct Case {
    void (*edit)(Preamble&);
    const char* message;
  };
  const Case cases[] = {
      {[](Preamble& p) {
         p.header_bytes = 1 << 20;
         p.payload_offset = PayloadOffsetFor(p.header_bytes);
       },
       "past the end"},
      {[](Preamble& p) { p.header_bytes = ~uint64_t{0}; }, "header_bytes"},
      {[](Preamble& p) { p.header_bytes = kMaxHeaderBytes + 1; },
       "header_bytes"},
      {[](Preamble& p) { p.payload_bytes = ~uint64_t{0} - 4095; }, "overflow"},
      {[](Preamble& p) { p.payload_bytes = uint64_t{1} << 60; },
       "truncated or corrupt size"},
      {[](Preamble& p) { p.payload_offset = 1ull << 40; }, "payload_offset"},
      {[](Preamble& p) { p.chunk_bytes = 1; }, "chunk_bytes"},
      {[](Preamble& p) { p.header_bytes -= 1; }, "corrupt header"},
  };
  for (const Case& c : cases) {
    const std::string p = Variant(WithPreamble(good_, c.edit));
    absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(p);
    ASSERT_FALSE(r.ok()) << c.message;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss) << r.status();
    EXPECT_THAT(Msg(r.status()), HasSubstr(c.message));
  }
}

// Virtual memory of this process in bytes (VmSize).
uint64_t VmSizeBytes() {
  const std::string status = *ReadFile("/proc/self/status");
  const size_t at = status.find("VmSize:");
  return std::stoull(status.substr(at + 7)) * 1024;
}

TEST_F(ReaderTest, HugeDeclaredSizesAllocateNothing) {
  // Declared header sizes up to 2^62 and a 2^60-byte payload in a file of a
  // few KB. In a child whose address space may grow by only 64 MiB, Open
  // must refuse each (DataLoss) rather than allocate or die: the header
  // allocation is bounded by kMaxHeaderBytes (16 MiB) and the file size.
  std::vector<std::string> paths;
  for (uint64_t header : {kMaxHeaderBytes, kMaxHeaderBytes + 1,
                          uint64_t{1} << 40, uint64_t{1} << 62}) {
    Preamble q = *DecodePreamble(good_, good_.size(), "x");
    q.header_bytes = header;
    q.payload_offset = PayloadOffsetFor(header);
    q.payload_bytes = uint64_t{1} << 60;
    std::string bytes = good_;
    bytes.replace(0, 128, EncodePreamble(q));
    paths.push_back(Variant(bytes));
  }
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    const uint64_t limit = VmSizeBytes() + (64 << 20);
    struct rlimit rl = {limit, limit};
    if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
    for (const std::string& p : paths) {
      absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(p);
      if (r.ok() || r.status().code() != absl::StatusCode::kDataLoss) _exit(1);
    }
    _exit(0);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
  ASSERT_TRUE(WIFEXITED(wstatus)) << "child died with signal "
                                  << WTERMSIG(wstatus);
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
}

// An envelope whose header is `header` (digest valid) and payload `payload`.
std::string Craft(const CheckpointHeader& header, const std::string& payload) {
  absl::StatusOr<std::string> prefix = EncodeEnvelopePrefix(header);
  return *prefix + payload;
}

TEST_F(ReaderTest, WellDigestedButInconsistentHeaderIsRefused) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path_);
  ASSERT_TRUE(r.ok());
  CheckpointHeader h = r->header();
  h.set_plane_count(2);
  absl::StatusOr<CheckpointReader> bad =
      CheckpointReader::Open(Variant(Craft(h, PayloadBytes())));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(bad.status()), HasSubstr("plane_count"));

  h = r->header();
  h.mutable_chunk_sha256()->RemoveLast();
  bad = CheckpointReader::Open(Variant(Craft(h, PayloadBytes())));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(bad.status()), HasSubstr("4 digests, expected 5"));

  // Header bytes that are not a proto, with a matching digest.
  std::string garbage_header(50, '\xff');
  Preamble p;
  p.header_bytes = garbage_header.size();
  p.payload_offset = 4096;
  p.payload_bytes = 1200;
  p.chunk_bytes = kChunk;
  p.header_sha256 = Sha256(garbage_header);
  std::string file = EncodePreamble(p) + garbage_header;
  file.resize(4096, '\0');
  bad = CheckpointReader::Open(Variant(file + PayloadBytes()));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(bad.status()), HasSubstr("not a valid"));
}

TEST_F(ReaderTest, IdentityThatIsNotUtf8IsOneDataLossAndNoLogging) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path_);
  ASSERT_TRUE(r.ok());
  CheckpointHeader h = r->header();
  // Byte 37 of the initialization identity made 0xff, the header digest
  // recomputed (Craft): only the text is wrong.
  std::string init = h.initialization_identity();
  ASSERT_GT(init.size(), 37u);
  const size_t size = init.size();
  init[37] = '\xff';
  h.set_initialization_identity(init);
  const std::string path = Variant(Craft(h, PayloadBytes()));
  ::testing::internal::CaptureStderr();
  absl::StatusOr<CheckpointReader> bad = CheckpointReader::Open(path);
  const std::string logged = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(logged, "");
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(Msg(bad.status()),
            absl::StrCat(path, ": header field initialization_identity is "
                               "not UTF-8: its byte 37 of ", size,
                         " (0xff) begins no well-formed sequence, expected "
                         "UTF-8 text"));
  // A provenance field too (its text was a proto `string` as well).
  h = r->header();
  h.set_host("h\xc3");
  bad = CheckpointReader::Open(Variant(Craft(h, PayloadBytes())));
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(Msg(bad.status()), HasSubstr("field host is not UTF-8: its "
                                           "byte 1 of 2 (0xc3)"));
}

TEST(ReaderChunks, AnyChunkSizeRoundTripsAndDetectsLastChunkDamage) {
  const std::string dir = NewTempDir();
  const std::vector<float> payload = TestPayload(50, 9);  // 600 bytes
  for (uint64_t chunk : {1, 3, 12, 599, 600, 601, 4096, 1 << 30}) {
    const std::string path = absl::StrCat(dir, "/c", chunk, ".ckpt");
    const CheckpointIdentity id = TestIdentity(600, chunk);
    ASSERT_TRUE(
        PublishCheckpoint(path, id, chunk, payload.data(), 600, {}).ok());
    absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path);
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->num_chunks(), (600 + chunk - 1) / chunk);
    EXPECT_TRUE(r->VerifyPayload(3).ok());
    std::vector<float> back(payload.size());
    EXPECT_TRUE(r->ReadPayload(back.data(), 600, 2).ok());
    EXPECT_EQ(back, payload);
    std::string bytes = *ReadFile(path);
    bytes.back() ^= 0x40;
    const std::string damaged = path + ".damaged";
    WriteBytes(damaged, bytes);
    EXPECT_EQ(OpenAndVerify(damaged).code(), absl::StatusCode::kDataLoss)
        << chunk;
  }
}

// A checkpoint rewritten in place while it is mapped (`cp other.ckpt
// model.ckpt` during `inspect verify` or train's start): reading the pages
// past its new end raised SIGBUS, and the tool died with "Bus error" (exit
// 135) and no line naming the file. With ReportShrunkMappings (train and
// inspect call it), one line naming the file and exit 1.
TEST_F(ReaderTest, ShrunkWhileMappedIsOneLineNamingTheFile) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        ReportShrunkMappings("reader_test");
        absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path_);
        if (!r.ok()) _exit(3);
        // The payload starts at 4096: cut there, as `cp` truncates first.
        if (truncate(path_.c_str(), 4096) != 0) _exit(4);
        (void)r->VerifyPayload(1);
        _exit(5);
      },
      ::testing::ExitedWithCode(1),
      "^reader_test: DATA_LOSS: .*/model.ckpt: the file shrank while it was "
      "being read \\(rewritten in place by another process\\?\\)\n$");
}

}  // namespace
}  // namespace coppelius
