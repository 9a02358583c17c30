#include "checkpoint/publisher.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/envelope.h"
#include "checkpoint/reader.h"
#include "checkpoint/test_util.h"
#include "common/refuse_threads.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::coppelius::checkpoint_testing::ListDir;
using ::coppelius::checkpoint_testing::NewTempDir;
using ::coppelius::checkpoint_testing::TestIdentity;
using ::coppelius::checkpoint_testing::TestPayload;
using ::coppelius::checkpoint_testing::WriteBytes;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Msg(const absl::Status& s) { return std::string(s.message()); }

constexpr uint64_t kParameters = 3000;  // payload 36,000 bytes
constexpr uint64_t kChunk = 4096;       // 9 chunks, last 3,232 bytes
constexpr uint64_t kPayloadBytes = kParameters * 12;

// Opens `path`, verifies every chunk and the identity; returns the update
// count, or -1 (with a test failure) when it is not a complete checkpoint.
int64_t VerifiedUpdateCount(const std::string& path,
                            const CheckpointIdentity& id) {
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path);
  if (!r.ok()) {
    ADD_FAILURE() << r.status();
    return -1;
  }
  absl::Status s = r->VerifyPayload(2);
  if (s.ok()) s = r->CheckIdentity(id);
  if (!s.ok()) {
    ADD_FAILURE() << s;
    return -1;
  }
  return static_cast<int64_t>(r->update_count());
}

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir();
    path_ = dir_ + "/model.ckpt";
    old_ = TestPayload(kParameters, 1);
    new_ = TestPayload(kParameters, 2);
    id_ = TestIdentity(kPayloadBytes, kChunk);
    ASSERT_TRUE(
        PublishCheckpoint(path_, id_, 1000, old_.data(), kPayloadBytes, {})
            .ok());
    old_bytes_ = *ReadFile(path_);
  }

  // The previous checkpoint is byte-for-byte intact and nothing else is in
  // the directory.
  void ExpectOldIntactAndNoTemporary() {
    absl::StatusOr<std::string> now = ReadFile(path_);
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_EQ(*now, old_bytes_);
    EXPECT_THAT(ListDir(dir_), ElementsAre("model.ckpt"));
  }

  std::string dir_, path_, old_bytes_;
  std::vector<float> old_, new_;
  CheckpointIdentity id_;
};

TEST_F(PublisherTest, ReplacesAndLeavesNoTemporary) {
  EXPECT_EQ(VerifiedUpdateCount(path_, id_), 1000);
  PublishOptions options;
  options.writer = "publisher_test";
  options.backend = "reference";
  options.threads = 3;
  options.parent_header_sha256 = std::string(32, '\x07');
  ASSERT_TRUE(
      PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes, options)
          .ok());
  EXPECT_EQ(VerifiedUpdateCount(path_, id_), 2000);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->header().writer(), "publisher_test");
  EXPECT_EQ(r->header().backend(), "reference");
  EXPECT_EQ(r->header().parent_header_sha256(), std::string(32, '\x07'));
  EXPECT_GT(r->header().created_unix_nanos(), 1600000000ull * 1000000000ull);
  EXPECT_EQ(std::memcmp(r->payload(), new_.data(), kPayloadBytes), 0);
  EXPECT_THAT(ListDir(dir_), ElementsAre("model.ckpt"));
  struct stat st;
  ASSERT_EQ(stat(path_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
}

// SIGTERM at each stage before the rename, in a child process with the
// binaries' interrupt cleanup installed (train does): the process ends by
// the signal, no temporary is left and the published checkpoint is intact.
// (Before 2026-11-30 train installed no cleanup: a signal during a
// publication left the temporary behind.)
TEST_F(PublisherTest, InterruptLeavesNoTemporary) {
  for (PublishStage target :
       {PublishStage::kTemporaryCreated, PublishStage::kAllocated,
        PublishStage::kPayloadWritten, PublishStage::kPrefixWritten,
        PublishStage::kSynced, PublishStage::kClosed}) {
    SCOPED_TRACE(testing::Message() << "stage " << static_cast<int>(target));
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      InstallInterruptCleanup();
      PublishOptions options;
      options.threads = 2;
      options.stage_hook = [target](PublishStage stage) {
        if (stage == target) raise(SIGTERM);
      };
      (void)PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes,
                              options);
      _exit(0);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)
        << "status " << status;
    EXPECT_THAT(ListDir(dir_), ElementsAre("model.ckpt"));
    EXPECT_EQ(VerifiedUpdateCount(path_, id_), 1000);
  }
}

// With no threads to be had (the digester and the digest pool refused),
// publication still completes: digests first, then the write.
TEST_F(PublisherTest, PublishesWhenTheSystemRefusesThreads) {
  PublishOptions options;
  options.threads = 4;
  {
    RefuseNewThreads refuse;
    const absl::Status s =
        PublishCheckpoint(path_, id_, 3000, new_.data(), kPayloadBytes, options);
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(VerifiedUpdateCount(path_, id_), 3000);
  absl::StatusOr<CheckpointReader> r = CheckpointReader::Open(path_);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::memcmp(r->payload(), new_.data(), kPayloadBytes), 0);
}

TEST_F(PublisherTest, RefusesBadArguments) {
  absl::Status s =
      PublishCheckpoint(path_, id_, 1, new_.data(), kPayloadBytes - 12, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), HasSubstr("payload is 35988 bytes"));
  CheckpointIdentity odd = TestIdentity(kPayloadBytes - 1, kChunk);
  s = PublishCheckpoint(path_, odd, 1, new_.data(), kPayloadBytes - 1, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), HasSubstr("multiple of 12"));
  CheckpointIdentity zero_chunk = TestIdentity(kPayloadBytes, 0);
  s = PublishCheckpoint(path_, zero_chunk, 1, new_.data(), kPayloadBytes, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // Too many chunks for the header: refused before allocating digests.
  CheckpointIdentity tiny_chunks = TestIdentity(uint64_t{12} << 30, 1);
  s = PublishCheckpoint(path_, tiny_chunks, 1, new_.data(), uint64_t{12} << 30,
                        {});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(Msg(s), HasSubstr("raise chunk_bytes"));
  s = PublishCheckpoint(dir_ + "/no/such/dir/x.ckpt", id_, 1, new_.data(),
                        kPayloadBytes, {});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  ExpectOldIntactAndNoTemporary();
}

TEST_F(PublisherTest, HistoryIsAHardLinkPerUpdateCount) {
  const std::string history = dir_ + "/history";
  ASSERT_EQ(mkdir(history.c_str(), 0755), 0);
  PublishOptions options;
  options.history_dir = history;
  ASSERT_TRUE(
      PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes, options)
          .ok());
  EXPECT_EQ(HistoryPath(history, 2000), history + "/update-00002000.ckpt");
  EXPECT_EQ(HistoryPath(history, 123456789), history + "/update-123456789.ckpt");
  struct stat a, b;
  ASSERT_EQ(stat(path_.c_str(), &a), 0);
  ASSERT_EQ(stat((history + "/update-00002000.ckpt").c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);  // a link, not a copy
  EXPECT_EQ(a.st_nlink, 2u);
  // The next publication replaces path; the history entry keeps its bytes.
  ASSERT_TRUE(
      PublishCheckpoint(path_, id_, 3000, old_.data(), kPayloadBytes, options)
          .ok());
  EXPECT_THAT(ListDir(history),
              ElementsAre("update-00002000.ckpt", "update-00003000.ckpt"));
  EXPECT_EQ(VerifiedUpdateCount(history + "/update-00002000.ckpt", id_), 2000);
  EXPECT_EQ(VerifiedUpdateCount(path_, id_), 3000);
  // Publishing the same update count again replaces that history entry.
  ASSERT_TRUE(
      PublishCheckpoint(path_, id_, 3000, new_.data(), kPayloadBytes, options)
          .ok());
  EXPECT_THAT(ListDir(history),
              ElementsAre("update-00002000.ckpt", "update-00003000.ckpt"));
}

TEST(IsTemporaryName, Pattern) {
  EXPECT_TRUE(IsTemporaryName("m.ckpt.tmp.12.0123456789abcdef", "m.ckpt"));
  EXPECT_FALSE(IsTemporaryName("m.ckpt.tmp.12.0123456789ABCDEF", "m.ckpt"));
  EXPECT_FALSE(IsTemporaryName("m.ckpt.tmp..0123456789abcdef", "m.ckpt"));
  EXPECT_FALSE(IsTemporaryName("m.ckpt.tmp.1x.0123456789abcdef", "m.ckpt"));
  EXPECT_FALSE(IsTemporaryName("m.ckpt.tmp.12.0123456789abcde", "m.ckpt"));
  EXPECT_FALSE(IsTemporaryName("m.ckpt.tmp.12.0123456789abcdef0", "m.ckpt"));
  EXPECT_FALSE(IsTemporaryName("n.ckpt.tmp.12.0123456789abcdef", "m.ckpt"));
  EXPECT_FALSE(IsTemporaryName("m.ckpt", "m.ckpt"));
  EXPECT_FALSE(IsTemporaryName("x", ""));
}

TEST_F(PublisherTest, CleanStaleTemporariesRemovesOnlyOurPattern) {
  const std::string history = dir_ + "/h";
  ASSERT_EQ(mkdir(history.c_str(), 0755), 0);
  // The pid in a temporary's name: a process that has exited (stale), this
  // process (stale), or a running process (in progress: kept).
  const pid_t dead = fork();
  ASSERT_GE(dead, 0);
  if (dead == 0) _exit(0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const std::string dead_pid = absl::StrCat(dead);
  const std::string self_pid = absl::StrCat(getpid());
  const std::string live_pid = absl::StrCat(getppid());
  const std::vector<std::string> stale = {
      "model.ckpt.tmp." + dead_pid + ".0123456789abcdef",
      "model.ckpt.tmp." + self_pid + ".fedcba9876543210"};
  const std::vector<std::string> keep = {
      "model.ckpt.tmp.x.0123456789abcdef", "model.ckpt.tmp.1.0123",
      "other.ckpt.tmp.1.0123456789abcdef", "model.ckpt.bak",
      "model.ckpt.tmp." + live_pid + ".00112233aabbccdd"};
  for (const std::string& n : stale) WriteBytes(dir_ + "/" + n, "junk");
  for (const std::string& n : keep) WriteBytes(dir_ + "/" + n, "keep");
  WriteBytes(history + "/update-00000005.ckpt.tmp." + dead_pid +
                 ".0123456789abcdef",
             "j");
  WriteBytes(history + "/update-00000005.ckpt", "keep");
  WriteBytes(history + "/notes.tmp.3.0123456789abcdef", "keep");
  absl::StatusOr<int> removed = CleanStaleTemporaries(path_, history);
  ASSERT_TRUE(removed.ok()) << removed.status();
  EXPECT_EQ(*removed, 3);
  std::vector<std::string> expected = {"h", "model.ckpt"};
  expected.insert(expected.end(), keep.begin(), keep.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(ListDir(dir_), expected);
  EXPECT_THAT(ListDir(history), ElementsAre("notes.tmp.3.0123456789abcdef",
                                            "update-00000005.ckpt"));
  EXPECT_EQ(CleanStaleTemporaries(dir_ + "/nodir/x.ckpt").status().code(),
            absl::StatusCode::kNotFound);
  // A publication cleans first.
  WriteBytes(dir_ + "/" + stale[0], "junk");
  ASSERT_TRUE(
      PublishCheckpoint(path_, id_, 5, new_.data(), kPayloadBytes, {}).ok());
  const std::vector<std::string> after = ListDir(dir_);
  EXPECT_EQ(std::find(after.begin(), after.end(), stale[0]), after.end());
}

// FileOps whose pwrite fails with `err` once `limit` bytes have been
// written in total (counting across calls).
FileOps FailWritesAfter(uint64_t limit, int err,
                        std::shared_ptr<std::atomic<uint64_t>> written) {
  FileOps ops = PosixFileOps();
  ops.pwrite = [limit, err, written](int fd, const void* data, size_t size,
                                     off_t offset) -> ssize_t {
    const uint64_t done = written->load();
    if (done >= limit) {
      errno = err;
      return -1;
    }
    const size_t n = std::min<uint64_t>(size, limit - done);
    ssize_t r = ::pwrite(fd, data, n, offset);
    if (r > 0) *written += r;
    return r;
  };
  return ops;
}

TEST_F(PublisherTest, DiskFullMidWriteKeepsOldCheckpoint) {
  const uint64_t total = 4096 + kPayloadBytes;
  for (uint64_t k : {uint64_t{0}, uint64_t{1}, uint64_t{100}, uint64_t{4095},
                     uint64_t{4096}, uint64_t{4097}, uint64_t{20000},
                     total - 1}) {
    auto written = std::make_shared<std::atomic<uint64_t>>(0);
    const FileOps ops = FailWritesAfter(k, ENOSPC, written);
    PublishOptions options;
    options.file_ops = &ops;
    const absl::Status s =
        PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes, options);
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << k << s;
    EXPECT_THAT(Msg(s), HasSubstr("No space left on device"));
    EXPECT_THAT(Msg(s), HasSubstr("previous checkpoint untouched"));
    EXPECT_THAT(Msg(s), HasSubstr("model.ckpt.tmp."));
    if (k == 4097) std::printf("example: %s\n", s.ToString().c_str());
    ExpectOldIntactAndNoTemporary();
  }
  // EIO mid-write: Internal, same guarantees.
  auto written = std::make_shared<std::atomic<uint64_t>>(0);
  const FileOps eio = FailWritesAfter(10000, EIO, written);
  PublishOptions options;
  options.file_ops = &eio;
  const absl::Status s =
      PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes, options);
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_THAT(Msg(s), HasSubstr("Input/output error"));
  ExpectOldIntactAndNoTemporary();
}

TEST_F(PublisherTest, FailuresAtEachOperationKeepOldCheckpoint) {
  struct Case {
    const char* name;
    void (*inject)(FileOps&);
    const char* message;
  };
  const Case cases[] = {
      {"fallocate ENOSPC",
       [](FileOps& o) { o.fallocate = [](int, off_t, off_t) { return ENOSPC; }; },
       "allocating"},
      {"fsync EIO",
       [](FileOps& o) {
         o.fsync = [](int) {
           errno = EIO;
           return -1;
         };
       },
       "fsync of"},
      {"close EIO",
       [](FileOps& o) {
         o.close = [](int fd) {
           ::close(fd);
           errno = EIO;
           return -1;
         };
       },
       "closing"},
      {"rename EXDEV",
       [](FileOps& o) {
         o.rename = [](const char*, const char*) {
           errno = EXDEV;
           return -1;
         };
       },
       "renaming temporary"},
      {"open EACCES",
       [](FileOps& o) {
         o.open = [](const char*, int, mode_t) {
           errno = EACCES;
           return -1;
         };
       },
       "creating temporary"},
  };
  for (const Case& c : cases) {
    FileOps ops = PosixFileOps();
    c.inject(ops);
    PublishOptions options;
    options.file_ops = &ops;
    const absl::Status s =
        PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes, options);
    EXPECT_FALSE(s.ok()) << c.name;
    EXPECT_THAT(Msg(s), HasSubstr(c.message)) << c.name << ": " << s;
    std::printf("example: %s\n", s.ToString().c_str());
    ExpectOldIntactAndNoTemporary();
  }
}

// The history link comes after the checkpoint is in place (publisher.h): a
// failed link is reported, the new checkpoint stays, nothing else is left.
TEST_F(PublisherTest, HistoryLinkFailureIsReportedAfterThePublication) {
  const std::string history = dir_ + "/history";
  ASSERT_EQ(mkdir(history.c_str(), 0755), 0);
  FileOps ops = PosixFileOps();
  ops.link = [](const char*, const char*) {
    errno = EXDEV;
    return -1;
  };
  PublishOptions options;
  options.file_ops = &ops;
  options.history_dir = history;
  const absl::Status s =
      PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes, options);
  EXPECT_THAT(Msg(s), HasSubstr("same filesystem"));
  EXPECT_THAT(Msg(s), HasSubstr("its history link failed"));
  EXPECT_TRUE(ListDir(history).empty());
  EXPECT_EQ(VerifiedUpdateCount(path_, id_), 2000);
  for (const std::string& name : ListDir(dir_)) {
    EXPECT_TRUE(name == "model.ckpt" || name == "history") << name;
  }
}

TEST_F(PublisherTest, ShortWritesAndEintrAreRetried) {
  auto calls = std::make_shared<int>(0);
  FileOps ops = PosixFileOps();
  ops.pwrite = [calls](int fd, const void* data, size_t size,
                       off_t offset) -> ssize_t {
    if ((*calls)++ % 2 == 0) {
      errno = EINTR;
      return -1;
    }
    return ::pwrite(fd, data, std::min<size_t>(size, 997), offset);
  };
  PublishOptions options;
  options.file_ops = &ops;
  ASSERT_TRUE(
      PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes, options)
          .ok());
  EXPECT_GT(*calls, 70);
  EXPECT_EQ(VerifiedUpdateCount(path_, id_), 2000);
  // A pwrite that writes nothing is reported as ENOSPC, not looped on.
  ops.pwrite = [](int, const void*, size_t, off_t) -> ssize_t { return 0; };
  const absl::Status s =
      PublishCheckpoint(path_, id_, 3000, old_.data(), kPayloadBytes, options);
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(VerifiedUpdateCount(path_, id_), 2000);
}

// Crash safety: a child publishes over the existing checkpoint and is killed
// with SIGKILL at a stage or after k payload bytes; the path must still hold
// a complete checkpoint (old before the rename, new from it on) and
// CleanStaleTemporaries must leave no temporary.
class CrashTest : public PublisherTest {
 protected:
  void RunChild(const std::function<void(PublishOptions&, FileOps&)>& setup,
                const std::string& history) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      FileOps ops = PosixFileOps();
      PublishOptions options;
      options.history_dir = history;
      setup(options, ops);
      options.file_ops = &ops;
      PublishCheckpoint(path_, id_, 2000, new_.data(), kPayloadBytes, options)
          .IgnoreError();
      _exit(0);  // not killed: publication completed
    }
    int wstatus = 0;
    ASSERT_EQ(waitpid(pid, &wstatus, 0), pid);
    killed_ = WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL;
  }

  void CheckAfterCrash(int64_t expected_update, const std::string& history) {
    EXPECT_EQ(VerifiedUpdateCount(path_, id_), expected_update);
    absl::StatusOr<int> removed = CleanStaleTemporaries(path_, history);
    ASSERT_TRUE(removed.ok()) << removed.status();
    for (const std::string& name : ListDir(dir_)) {
      EXPECT_TRUE(name == "model.ckpt" || name == "history") << name;
    }
    if (!history.empty()) {
      for (const std::string& name : ListDir(history)) {
        EXPECT_EQ(name, "update-00002000.ckpt");
        EXPECT_EQ(VerifiedUpdateCount(history + "/" + name, id_), 2000);
        // Never a history entry ahead of the path: a run resumed from the
        // path would have to replace it.
        EXPECT_EQ(expected_update, 2000);
      }
    }
    EXPECT_EQ(VerifiedUpdateCount(path_, id_), expected_update);
  }

  bool killed_ = false;
};

TEST_F(CrashTest, KilledAtEveryStage) {
  const PublishStage stages[] = {
      PublishStage::kTemporaryCreated, PublishStage::kAllocated,
      PublishStage::kPrefixWritten,    PublishStage::kPayloadWritten,
      PublishStage::kSynced,           PublishStage::kClosed,
      PublishStage::kRenamed,          PublishStage::kDirectorySynced,
      PublishStage::kHistoryLinked};
  for (bool with_history : {false, true}) {
    for (PublishStage stage : stages) {
      SetUp();  // a fresh directory holding the old checkpoint
      std::string history;
      if (with_history) {
        history = dir_ + "/history";
        ASSERT_EQ(mkdir(history.c_str(), 0755), 0);
      }
      RunChild(
          [stage](PublishOptions& options, FileOps&) {
            options.stage_hook = [stage](PublishStage s) {
              if (s == stage) raise(SIGKILL);
            };
          },
          history);
      const bool reached = with_history || stage != PublishStage::kHistoryLinked;
      EXPECT_EQ(killed_, reached) << static_cast<int>(stage);
      const bool renamed = stage == PublishStage::kRenamed ||
                           stage == PublishStage::kDirectorySynced ||
                           stage == PublishStage::kHistoryLinked || !reached;
      CheckAfterCrash(renamed ? 2000 : 1000, history);
    }
  }
}

TEST_F(CrashTest, KilledMidWrite) {
  const uint64_t total = 4096 + kPayloadBytes;
  for (uint64_t k : {uint64_t{0}, uint64_t{64}, uint64_t{4096},
                     uint64_t{4096 + 5000}, uint64_t{4096 + 20000},
                     total - 1}) {
    SetUp();
    RunChild(
        [k](PublishOptions&, FileOps& ops) {
          auto written = std::make_shared<uint64_t>(0);
          ops.pwrite = [k, written](int fd, const void* data, size_t size,
                                    off_t offset) -> ssize_t {
            if (*written >= k) raise(SIGKILL);
            const size_t n = std::min<uint64_t>(size, k - *written);
            ssize_t r = ::pwrite(fd, data, n, offset);
            if (r > 0) *written += r;
            return r;
          };
        },
        "");
    EXPECT_TRUE(killed_) << k;
    // A temporary was left behind by the killed writer.
    EXPECT_EQ(ListDir(dir_).size(), 2u) << k;
    CheckAfterCrash(1000, "");
  }
}

}  // namespace
}  // namespace coppelius
