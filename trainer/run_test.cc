// Tests of RunTrain's refusals that need crafted inputs (trainer/run.h).
#include "trainer/run.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "checkpoint/publisher.h"
#include "checkpoint/test_util.h"
#include "common/as_nobody.h"
#include "common/file_lock.h"
#include "gtest/gtest.h"
#include "tokencache/token_cache.h"
#include "trainer/model_config.h"
#include "trainer/reference_backend.h"
#include "trainer/result_file.h"
#include "trainer/run_identity.h"

namespace coppelius {
namespace {

using checkpoint_testing::NewTempDir;
using checkpoint_testing::WriteBytes;

// A backend factory that must not be reached: the refusals come first.
absl::StatusOr<std::unique_ptr<Backend>> NoBackend(const std::string&,
                                                   const ModelConfig&) {
  return absl::InternalError("backend requested");
}

// The reference backend on 2 host threads: the runs that reach a backend.
absl::StatusOr<std::unique_ptr<Backend>> ReferenceOnTwoThreads(
    const std::string&, const ModelConfig& config) {
  ReferenceOptions o;
  o.num_threads = 2;
  return CreateReferenceBackend(config, o);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

class RunTrainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = NewTempDir();
    config_ = *ModelConfigByName("tiny");
    // Three contexts of T tokens (+ 1), ids < V; a header that can be a
    // source's (4 bytes per id).
    WriteTokenCache(dir_ + "/t.tok", 3 * static_cast<uint64_t>(config_.T) + 1);
    options_.config = "tiny";
    options_.backend = "reference";
    options_.tokens_path = dir_ + "/t.tok";
    options_.checkpoint_out = dir_ + "/out.ckpt";
    options_.result_path = dir_ + "/out.res";
    options_.progress = false;
  }
  // A token cache at `path` of `n` ids 0, 1, … mod V, its header one a
  // source could have (4 bytes per id).
  void WriteTokenCache(const std::string& path, uint64_t n) {
    auto writer = TokenCacheWriter::Create(path, SourceStat{1, 4 * n});
    ASSERT_TRUE(writer.ok()) << writer.status();
    std::vector<uint32_t> ids(n);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % config_.V;
    ASSERT_TRUE(writer->Append(ids).ok());
    ASSERT_TRUE(writer->Commit().ok());
  }
  // A checkpoint of config tiny with a valid envelope and this update count.
  std::string CheckpointWithUpdateCount(uint64_t update_count) {
    const CheckpointIdentity identity = RunCheckpointIdentity(config_);
    std::vector<char> payload(identity.payload_bytes, 0);
    const std::string path = absl::StrCat(dir_, "/in-", update_count, ".ckpt");
    const absl::Status s = PublishCheckpoint(path, identity, update_count,
                                             payload.data(), payload.size(), {});
    EXPECT_TRUE(s.ok()) << s;
    return path;
  }

  std::string dir_;
  ModelConfig config_;
  TrainOptions options_;
};

// update_count comes from the file: c0 + steps must not wrap around (it
// did, and the token range check passed: a segfault).
TEST_F(RunTrainTest, UpdateCountBeyondTheCacheIsRefused) {
  for (uint64_t c0 : {std::numeric_limits<uint64_t>::max(),
                      std::numeric_limits<uint64_t>::max() - 7,
                      uint64_t{1} << 63, uint64_t{4}}) {
    SCOPED_TRACE(c0);
    options_.checkpoint_in = CheckpointWithUpdateCount(c0);
    std::ostringstream progress;
    const absl::Status s = RunTrain(options_, NoBackend, progress);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find("beyond the end"), std::string::npos) << s;
    EXPECT_NE(s.message().find("t.tok"), std::string::npos) << s;
    EXPECT_FALSE(Exists(options_.checkpoint_out));
    EXPECT_FALSE(Exists(options_.result_path));
  }
  // Inside the cache but too close to its end for the run's steps.
  options_.checkpoint_in = CheckpointWithUpdateCount(2);
  std::ostringstream progress;
  const absl::Status s = RunTrain(options_, NoBackend, progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_NE(s.message().find("needs contexts 2.."), std::string::npos) << s;
}

// The cache header has no magic number: train refuses, as inspect verify
// fails, a header no source could have (tokencache/token_cache.h
// CacheHeaderProblemWithoutVocabulary): a raw id file from tokenize encode
// read as a cache, and an all-zero header in front of ids.
TEST_F(RunTrainTest, FilesThatAreNotTokenCachesAreRefused) {
  options_.checkpoint_in = dir_ + "/fresh.ckpt";
  WriteBytes(options_.checkpoint_in, "");
  std::vector<uint32_t> raw(3 * config_.T + 5);
  for (size_t i = 0; i < raw.size(); ++i) raw[i] = 7 + i % 300;
  struct Case {
    const char* name;
    std::string bytes;
    const char* why;
  };
  std::string zeros(16, '\0');
  zeros.append(reinterpret_cast<const char*>(raw.data()), 4 * (raw.size() - 4));
  const std::vector<Case> cases = {
      {"raw.u32",
       std::string(reinterpret_cast<const char*>(raw.data()), 4 * raw.size()),
       "a raw u32 id file read as a cache?"},
      {"zeros.tok", zeros, "fewer than one per token"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    options_.tokens_path = dir_ + "/" + c.name;
    WriteBytes(options_.tokens_path, c.bytes);
    std::ostringstream progress;
    const absl::Status s = RunTrain(options_, NoBackend, progress);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find(c.why), std::string::npos) << s;
    EXPECT_NE(s.message().find("offset 8"), std::string::npos) << s;
    EXPECT_NE(s.message().find(c.name), std::string::npos) << s;
    EXPECT_FALSE(Exists(options_.checkpoint_out));
    EXPECT_FALSE(Exists(options_.result_path));
  }
}

// A checkpoint-out whose publisher temporary ("NAME.tmp.PID.<16 hex>")
// would exceed the directory's name limit is refused before the run, not
// at the first publication with an incomplete result left behind. The
// result file's temporary (NewTemporaryPath's) is 8 bytes shorter: a
// 233-byte result name, which the publisher's would not fit (233 + 22 +
// the pid's digits > 255), is not refused for it.
TEST_F(RunTrainTest, CheckpointNameTooLongForItsTemporaryIsRefusedUpFront) {
  options_.checkpoint_in = dir_ + "/fresh.ckpt";
  WriteBytes(options_.checkpoint_in, "");
  const std::string checkpoint_out = options_.checkpoint_out;
  options_.checkpoint_out = dir_ + "/" + std::string(240, 'y');
  std::ostringstream progress;
  absl::Status s = RunTrain(options_, NoBackend, progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("too long a name for its temporary"),
            std::string::npos)
      << s;
  EXPECT_FALSE(Exists(options_.result_path));
  options_.checkpoint_out = checkpoint_out;
  options_.result_path = dir_ + "/" + std::string(233, 'r');
  s = RunTrain(options_, NoBackend, progress);
  EXPECT_EQ(s.message().find("too long a name for its temporary"),
            std::string::npos)
      << s;
}

TEST_F(RunTrainTest, NegativeCrashAfterPublicationsIsInvalidArgument) {
  options_.checkpoint_in = dir_ + "/fresh.ckpt";
  WriteBytes(options_.checkpoint_in, "");
  options_.crash_after_publications = -3;
  std::ostringstream progress;
  const absl::Status s = RunTrain(options_, NoBackend, progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("--crash_after_publications=-3"),
            std::string::npos)
      << s;
}

TEST_F(RunTrainTest, ThreadCountOutOfRangeIsInvalidArgument) {
  options_.checkpoint_in = dir_ + "/fresh.ckpt";
  WriteBytes(options_.checkpoint_in, "");
  for (int threads : {-1, 1025, 99999}) {
    TrainOptions o = options_;
    o.threads = threads;
    std::ostringstream progress;
    const absl::Status s = RunTrain(o, NoBackend, progress);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
    EXPECT_NE(s.message().find("--threads="), std::string::npos) << s;
  }
}

TEST_F(RunTrainTest, OutputsThatCannotBeWrittenAreRefusedUpFront) {
  options_.checkpoint_in = dir_ + "/fresh.ckpt";
  WriteBytes(options_.checkpoint_in, "");
  std::ostringstream progress;
  TrainOptions o = options_;
  o.checkpoint_out = "-";
  absl::Status s = RunTrain(o, NoBackend, progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("--checkpoint-out=-"), std::string::npos) << s;
  // Standard output by name is standard output, refused as "-" is and named
  // as given (it resolved to the file standard output was open on).
  o = options_;
  o.result_path = "/dev/stdout";
  s = RunTrain(o, NoBackend, progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_NE(s.message().find("--result=/dev/stdout: names standard output"),
            std::string::npos) << s;
  o = options_;
  o.result_path = dir_ + "/missing/out.res";
  s = RunTrain(o, NoBackend, progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_NE(s.message().find("missing"), std::string::npos) << s;
  // A read-only directory (root may write anyway: then nothing to check).
  const std::string ro = dir_ + "/ro";
  ASSERT_EQ(mkdir(ro.c_str(), 0555), 0);
  if (access(ro.c_str(), W_OK) != 0) {
    o = options_;
    o.checkpoint_out = ro + "/out.ckpt";
    s = RunTrain(o, NoBackend, progress);
    EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
    EXPECT_NE(s.message().find("cannot create files in directory"),
              std::string::npos)
        << s;
    EXPECT_FALSE(Exists(options_.result_path));
  }
}

// A second train on the same checkpoint or result is refused while the
// first holds its lock (common/file_lock.h), before any output is touched.
TEST_F(RunTrainTest, OutputsInUseByAnotherRunAreRefused) {
  options_.checkpoint_in = dir_ + "/fresh.ckpt";
  WriteBytes(options_.checkpoint_in, "");
  char resolved[PATH_MAX];
  ASSERT_NE(realpath(dir_.c_str(), resolved), nullptr);
  const std::string real_dir = resolved;
  struct Case {
    std::string lock;
    std::string flag;
  };
  for (const Case& c : {Case{real_dir + "/.out.ckpt.lock", "--checkpoint-out="},
                        Case{real_dir + "/.out.res.lock", "--result="}}) {
    SCOPED_TRACE(c.lock);
    auto held = FileLock::Acquire(c.lock, "the first run");
    ASSERT_TRUE(held.ok()) << held.status();
    std::ostringstream progress;
    const absl::Status s = RunTrain(options_, NoBackend, progress);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_NE(s.message().find(c.flag), std::string::npos) << s;
    EXPECT_NE(s.message().find("in use by another process"), std::string::npos)
        << s;
    EXPECT_FALSE(Exists(options_.checkpoint_out));
    EXPECT_FALSE(Exists(options_.result_path));
  }
  // Released: the run goes past the locks to its next check (this
  // fixture's cache is too short for the config's steps).
  std::ostringstream progress;
  const absl::Status s = RunTrain(options_, NoBackend, progress);
  EXPECT_EQ(s.message().find("in use"), std::string::npos) << s;
  EXPECT_NE(s.message().find("needs contexts"), std::string::npos) << s;
}


// A run refused after it created its history directory (by the backend,
// chosen after the history's checks: --backend=cuda where no GPU is usable)
// removes that directory again, lock file and all (it was left holding only
// .lock); a history directory that existed before the run is kept.
TEST_F(RunTrainTest, RefusedRunRemovesTheHistoryDirectoryItCreated) {
  TrainOptions o = options_;
  o.tokens_path = dir_ + "/run.tok";
  o.checkpoint_in = dir_ + "/fresh.ckpt";
  // The run's contexts (the fixture's cache holds only three).
  WriteTokenCache(o.tokens_path, config_.run_steps * config_.T + 1);
  WriteBytes(o.checkpoint_in, "");
  o.checkpoint_history_dir = dir_ + "/new-history";
  std::ostringstream progress;
  absl::Status s = RunTrain(o, NoBackend, progress);
  EXPECT_EQ(s.message(), "backend requested") << s;
  EXPECT_FALSE(Exists(o.checkpoint_history_dir));
  // Given with a trailing slash: the same directory, removed the same way.
  o.checkpoint_history_dir = dir_ + "/new-history/";
  s = RunTrain(o, NoBackend, progress);
  EXPECT_EQ(s.message(), "backend requested") << s;
  EXPECT_FALSE(Exists(dir_ + "/new-history"));
  // An existing (empty) history directory: the run did not create it.
  o.checkpoint_history_dir = dir_ + "/old-history";
  ASSERT_EQ(mkdir(o.checkpoint_history_dir.c_str(), 0755), 0);
  s = RunTrain(o, NoBackend, progress);
  EXPECT_EQ(s.message(), "backend requested") << s;
  EXPECT_TRUE(Exists(o.checkpoint_history_dir));
  EXPECT_FALSE(Exists(o.checkpoint_out));
  EXPECT_FALSE(Exists(o.result_path));
}

// A history directory that takes no files (here: read-only to the user
// running train) is refused before any work, naming the flag, rather than
// at the first publication's history link, after that publication. Run as
// root, the check runs in a child that has become nobody (root writes
// anywhere), in a directory under /tmp that nobody can reach.
TEST_F(RunTrainTest, ReadOnlyHistoryDirectoryIsRefusedBeforeAnyWork) {
  char base_template[] = "/tmp/run_test_ro_history.XXXXXX";
  ASSERT_NE(mkdtemp(base_template), nullptr);
  const std::string base = base_template;
  const uid_t uid = geteuid() == 0 ? 65534 : geteuid();
  const gid_t gid = geteuid() == 0 ? 65534 : getegid();
  TrainOptions o = options_;
  o.tokens_path = base + "/t.tok";
  o.checkpoint_in = base + "/fresh.ckpt";
  o.checkpoint_out = base + "/out.ckpt";
  o.result_path = base + "/out.res";
  o.checkpoint_history_dir = base + "/history";
  // The run's contexts (the fixture's cache holds only three).
  WriteTokenCache(o.tokens_path, config_.run_steps * config_.T + 1);
  WriteBytes(o.checkpoint_in, "");
  // An existing history (its lock file from an earlier run included) that
  // is read-only now.
  ASSERT_EQ(mkdir(o.checkpoint_history_dir.c_str(), 0755), 0);
  WriteBytes(o.checkpoint_history_dir + "/.lock", "");
  for (const std::string& p :
       {base, o.tokens_path, o.checkpoint_in, o.checkpoint_history_dir,
        o.checkpoint_history_dir + "/.lock"}) {
    ASSERT_EQ(chown(p.c_str(), uid, gid), 0) << p;
  }
  ASSERT_EQ(chmod(o.checkpoint_history_dir.c_str(), 0555), 0);
  const std::string message = RunAsNobody([&] {
    if (access(o.checkpoint_history_dir.c_str(), W_OK) == 0) {
      return std::string("writable");
    }
    std::ostringstream progress;
    return RunTrain(o, NoBackend, progress).ToString();
  });
  if (message == "writable") GTEST_SKIP() << "the directory stays writable";
  EXPECT_NE(message.find("PERMISSION_DENIED"), std::string::npos) << message;
  EXPECT_NE(message.find("--checkpoint-history " + o.checkpoint_history_dir +
                         "/update-00000008.ckpt: cannot create files in "
                         "directory " + o.checkpoint_history_dir),
            std::string::npos)
      << message;
  EXPECT_FALSE(Exists(o.checkpoint_out));
  EXPECT_FALSE(Exists(o.result_path));
  chmod(o.checkpoint_history_dir.c_str(), 0755);
  EXPECT_EQ(std::system(("rm -rf " + base).c_str()), 0);
}

// Loss is telemetry: a run whose losses are not finite (here: NaN
// parameters in a well-formed checkpoint) runs to its end and publishes
// everything, then returns DataLoss, as inspect verify fails its result
// (break-it, session 21: train exited 0).
TEST_F(RunTrainTest, NonFiniteLossesCompleteTheRunThenReturnDataLoss) {
  WriteTokenCache(dir_ + "/long.tok",
                  (config_.run_steps + 1) * static_cast<uint64_t>(config_.T) +
                      1);
  options_.tokens_path = dir_ + "/long.tok";
  const CheckpointIdentity identity = RunCheckpointIdentity(config_);
  std::vector<float> payload(identity.payload_bytes / sizeof(float),
                             std::nanf(""));
  options_.checkpoint_in = dir_ + "/nan.ckpt";
  ASSERT_TRUE(PublishCheckpoint(options_.checkpoint_in, identity, 0,
                                payload.data(), identity.payload_bytes, {})
                  .ok());
  std::ostringstream progress;
  const absl::Status s = RunTrain(options_, ReferenceOnTwoThreads, progress);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  // Said before the run, though --progress is off (trainer/pmv_state.h).
  EXPECT_EQ(progress.str().rfind("train: warning: --checkpoint-in: " +
                                     options_.checkpoint_in + ": offset ",
                                 0),
            0u)
      << progress.str();
  EXPECT_NE(progress.str().find(" parameters are not finite: a diverged "
                                "run's state"),
            std::string::npos)
      << progress.str();
  EXPECT_NE(s.message().find(absl::StrCat(config_.run_steps, " of ",
                                          config_.run_steps,
                                          " steps had a non-finite loss (the "
                                          "first: step 0 of this run, on "
                                          "context 0)")),
            std::string::npos)
      << s;
  EXPECT_TRUE(Exists(options_.checkpoint_out));
  struct stat st;
  ASSERT_EQ(stat(options_.result_path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 27744);  // a complete tiny result (FORMATS.md)
}

// The progress line prints a loss in 4 decimals while that is short and
// in 4 significant digits when it is not (a diverged run's 1e+10, a NaN):
// parameters drawn from +-1000 give cross-entropies of order 1e10 that are
// still finite (fp32 logits up to ~3e38); a NaN image gives "nan". The
// ordinary case prints 4 decimals (session 22's change, first tested here).
TEST_F(RunTrainTest, ProgressLineFormatsHugeAndNonFiniteLosses) {
  WriteTokenCache(dir_ + "/long.tok",
                  (config_.run_steps + 1) * static_cast<uint64_t>(config_.T) +
                      1);
  const CheckpointIdentity identity = RunCheckpointIdentity(config_);
  const size_t n = identity.payload_bytes / sizeof(float) / 3;
  // The last progress line's loss field ("train: step 8/8  loss X  ...").
  auto final_loss_text = [&](const std::vector<float>& payload,
                             const std::string& name) -> std::string {
    TrainOptions o = options_;
    o.tokens_path = dir_ + "/long.tok";
    o.checkpoint_in = dir_ + "/" + name + ".ckpt";
    o.checkpoint_out = dir_ + "/" + name + "-out.ckpt";
    o.result_path = dir_ + "/" + name + ".res";
    o.progress = true;
    EXPECT_TRUE(PublishCheckpoint(o.checkpoint_in, identity, 0, payload.data(),
                                  identity.payload_bytes, {})
                    .ok());
    std::ostringstream progress;
    RunTrain(o, ReferenceOnTwoThreads, progress).IgnoreError();  // NaN: DataLoss
    const std::string text = progress.str();
    const std::string last_line_start = absl::StrCat(
        "train: step ", config_.run_steps, "/", config_.run_steps, "  loss ");
    const size_t at = text.rfind(last_line_start);
    if (at == std::string::npos) return "no final line in: " + text;
    const size_t from = at + last_line_start.size();
    return text.substr(from, text.find(' ', from) - from);
  };
  // Large parameters (M and V planes 0): an LCG's values in [-1000, 1000).
  std::vector<float> large(3 * n, 0.0f);
  uint64_t state = 20261201;
  for (size_t i = 0; i < n; ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    large[i] = static_cast<float>((state >> 40) * 0x1p-24 * 2000.0 - 1000.0);
  }
  const std::string huge = final_loss_text(large, "large");
  double value = 0;
  ASSERT_TRUE(absl::SimpleAtod(huge, &value)) << huge;
  EXPECT_TRUE(std::isfinite(value) && value >= 1e6) << huge;
  // %.4g of a value >= 1e6: d.ddde+XX, not 7+ digits and 4 decimals.
  EXPECT_EQ(huge.find('.'), 1u) << huge;
  EXPECT_NE(huge.find("e+"), std::string::npos) << huge;

  EXPECT_EQ(final_loss_text(std::vector<float>(3 * n, std::nanf("")), "nan"),
            "nan");

  // All-zero parameters: uniform logits over V = 512 ids, a loss of
  // ln 512 = 6.2383 at the first step that the updates barely move; 4
  // decimals.
  const std::string small =
      final_loss_text(std::vector<float>(3 * n, 0.0f), "zero");
  ASSERT_TRUE(absl::SimpleAtod(small, &value)) << small;
  EXPECT_NEAR(value, std::log(512.0), 0.01) << small;
  EXPECT_EQ(small.size() - small.find('.'), 5u) << small;
}

// A real run's result (the reference backend, tiny, from a fresh start)
// cut as a kill leaves it is evidence of a killed run's (its step 0 rows
// are cross-entropies of its forward record's logits,
// StepZeroAgreesWithForwardRecord), and --overwrite replaces it; the same
// bytes with step 0's row T - 1 moved out of range are no result's, and
// --overwrite leaves them alone.
TEST_F(RunTrainTest, KilledRunsResultIsReplacedButAFloatArrayIsNot) {
  WriteTokenCache(dir_ + "/long.tok",
                  (config_.run_steps + 1) * static_cast<uint64_t>(config_.T) +
                      1);
  options_.tokens_path = dir_ + "/long.tok";
  options_.checkpoint_in = dir_ + "/fresh.ckpt";
  WriteBytes(options_.checkpoint_in, "");
  std::ostringstream progress;
  ASSERT_TRUE(RunTrain(options_, ReferenceOnTwoThreads, progress).ok());
  std::ifstream in(options_.result_path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)),
                    std::istreambuf_iterator<char>());
  const size_t forward_bytes = 12 * static_cast<size_t>(config_.V);
  const size_t window_bytes = 4 * static_cast<size_t>(config_.T);
  const std::string killed = dir_ + "/killed.res";
  WriteBytes(killed, bytes.substr(0, forward_bytes + 3 * window_bytes + 100));
  EXPECT_EQ(ResultFileEvidence(killed),
            "config tiny, incomplete: a killed run's");
  std::string array = bytes.substr(0, forward_bytes + 3 * window_bytes + 100);
  const float far = 1000.0f;  // beyond logsumexp - min of any real row
  std::memcpy(&array[forward_bytes + window_bytes - 4], &far, 4);
  const std::string not_a_result = dir_ + "/array.f32";
  WriteBytes(not_a_result, array);
  EXPECT_EQ(ResultFileEvidence(not_a_result), "");

  TrainOptions o = options_;
  o.overwrite = true;
  o.checkpoint_out = dir_ + "/again.ckpt";
  o.result_path = not_a_result;
  const absl::Status refused = RunTrain(o, ReferenceOnTwoThreads, progress);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
  EXPECT_NE(refused.message().find("is not a Coppelius result file"),
            std::string::npos)
      << refused;
  std::ifstream after(not_a_result, std::ios::binary);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(after)),
                        std::istreambuf_iterator<char>()),
            array);
  o.result_path = killed;
  const absl::Status replaced = RunTrain(o, ReferenceOnTwoThreads, progress);
  EXPECT_TRUE(replaced.ok()) << replaced;
  struct stat st;
  ASSERT_EQ(stat(killed.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 27744);  // a complete tiny result (FORMATS.md)

  // Resumed runs (c0 = 8, 16, 24), their models further trained: a
  // target at its row's argmax puts the loss at logsumexp - max, the
  // rule's lower bound, within rounding. Each result, cut mid-window, is
  // still a killed run's.
  WriteTokenCache(dir_ + "/longer.tok",
                  (4 * config_.run_steps + 1) *
                          static_cast<uint64_t>(config_.T) +
                      1);
  TrainOptions r = options_;
  r.tokens_path = dir_ + "/longer.tok";
  r.checkpoint_in = options_.checkpoint_out;
  r.checkpoint_out = options_.checkpoint_out;
  for (int run = 1; run <= 3; ++run) {
    SCOPED_TRACE(run);
    r.result_path = absl::StrCat(dir_, "/resumed-", run, ".res");
    ASSERT_TRUE(RunTrain(r, ReferenceOnTwoThreads, progress).ok());
    std::ifstream resumed(r.result_path, std::ios::binary);
    const std::string all((std::istreambuf_iterator<char>(resumed)),
                          std::istreambuf_iterator<char>());
    const std::string cut = absl::StrCat(dir_, "/resumed-", run, "-cut.res");
    WriteBytes(cut, all.substr(0, forward_bytes + window_bytes / 2 + 4));
    EXPECT_EQ(ResultFileEvidence(cut),
              "config tiny, incomplete: a killed run's");
  }
}

// An existing output train cannot read is refused, --overwrite or not:
// what it holds cannot be checked, and the publication's rename would
// replace it unseen (break-it, session 21). Checked by a child that is not
// root (root reads every file).
TEST_F(RunTrainTest, OutputItCannotReadIsRefusedWhateverTheFlags) {
  const std::string dir = NobodyDirectory("run_test_unreadable");
  ASSERT_FALSE(dir.empty());
  TrainOptions o = options_;
  o.tokens_path = dir + "/t.tok";
  o.checkpoint_in = dir + "/fresh.ckpt";
  o.checkpoint_out = dir + "/out.ckpt";
  o.result_path = dir + "/out.res";
  o.overwrite = true;
  WriteTokenCache(o.tokens_path, config_.run_steps * config_.T + 1);
  WriteBytes(o.checkpoint_in, "");
  WriteBytes(o.checkpoint_out, "COPPCKPT, or so it says");
  for (const std::string& p : {o.tokens_path, o.checkpoint_in}) {
    ASSERT_EQ(chmod(p.c_str(), 0644), 0) << p;
  }
  ASSERT_EQ(chmod(o.checkpoint_out.c_str(), 0), 0);
  EXPECT_EQ(RunAsNobody([&] {
              std::ostringstream progress;
              return RunTrain(o, NoBackend, progress).ToString();
            }),
            "FAILED_PRECONDITION: --checkpoint-out=" + o.checkpoint_out +
                ": exists (23 bytes) and cannot be read to check that it is "
                "another run's checkpoint (Permission denied); not replaced, "
                "whatever the flags");
  chmod(o.checkpoint_out.c_str(), 0644);
  EXPECT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace coppelius
