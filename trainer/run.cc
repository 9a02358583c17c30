#include "trainer/run.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cerrno>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "checkpoint/envelope.h"
#include "checkpoint/publisher.h"
#include "checkpoint/reader.h"
#include "common/file_io.h"
#include "common/file_lock.h"
#include "common/status_line.h"
#include "common/status_macros.h"
#include "common/threads.h"
#include "tokencache/token_cache.h"
#include "trainer/initialization.h"
#include "trainer/pmv_state.h"
#include "trainer/result_file.h"
#include "trainer/run_identity.h"

namespace coppelius {
namespace {

uint64_t WallNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t MonotonicNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

int HostThreads(int requested) {
  // All cores, at most 16, unless asked for more.
  return requested > 0 ? requested : std::min(ResolveThreadCount(0), 16);
}


// Whether `path` starts with the checkpoint magic "COPPCKPT".
bool HasCheckpointMagic(const std::string& path) {
  unsigned char head[8] = {};
  return ReadFileHead(path, head, sizeof(head)) &&
         std::memcmp(head, kCheckpointMagic, 8) == 0;
}

// Whether the existing, non-empty file at `path` (`size` bytes) holds
// another run's output of its kind (`checkpoint`: the magic at offset 0;
// else a result file: its marker at offset 0 or ResultFileEvidence), the
// one rule for what --overwrite may replace. FailedPrecondition "LABEL
// exists (N bytes) and cannot be read to check that it is another run's
// KIND (REASON); not replaced, whatever the flags", or "LABEL exists (N
// bytes) and is not a Coppelius KIND (WHY); ADVICE". `label` is what the
// messages put before " exists" ("--checkpoint-out=PATH:").
absl::Status CheckIsAnotherRunsOutput(absl::string_view label,
                                      const std::string& path, bool checkpoint,
                                      int64_t size, absl::string_view advice) {
  const char* kind = checkpoint ? "checkpoint" : "result file";
  if (const std::optional<UnreadableFile> unreadable =
          FindUnreadableFile(path)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s exists (%d bytes) and cannot be read to check that it is "
        "another run's %s (%s); not replaced, whatever the flags",
        label, unreadable->size, kind, unreadable->reason));
  }
  unsigned char head[8] = {};
  const bool is_kind =
      checkpoint ? HasCheckpointMagic(path)
                 : (ReadFileHead(path, head, sizeof(head)) &&
                    std::memcmp(head, kResultMarker, 8) == 0) ||
                       !ResultFileEvidence(path).empty();
  if (is_kind) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "%s exists (%d bytes) and is not a Coppelius %s (%s); %s", label, size,
      kind,
      checkpoint ? "no \"COPPCKPT\" at offset 0"
                 : "neither its marker at offset 0 nor its host tag, nor a "
                   "forward record of logits whose step 0 window holds their "
                   "cross-entropies",
      advice));
}

// Refuses to replace a non-empty `path` unless it is the input checkpoint
// being continued, or `overwrite` and it holds another run's output of the
// kind `flag` writes (a checkpoint: the magic at offset 0; a result file:
// its marker at offset 0 or ResultFileEvidence). Any other file (a token
// cache, a vocabulary, text) is never replaced, and neither is one that
// cannot be read (the publication by rename would replace it unseen).
// Precondition: `path` is not empty (RunTrain checks that first).
absl::Status CheckOutputPath(const std::string& flag, const std::string& path,
                             const std::string& input, bool overwrite) {
  if (path == "-") {
    return UsageError(absl::StrFormat(
        "--%s=-: the run's outputs are files (published by rename, rewritten "
        "in place); standard output cannot hold them",
        flag));
  }
  RETURN_IF_ERROR(CheckRegularFileOrAbsent(path, absl::StrCat("--", flag)));
  // Checked now rather than at the first publication, many steps later:
  // the directory takes a file named like the output's temporaries (the
  // checkpoint publisher's; the result file's, NewTemporaryPath's, are
  // shorter).
  RETURN_IF_ERROR(ProbeTemporaryInDirectory(
      path, absl::StrCat("--", flag),
      flag == "result" ? TemporaryNaming::kFile
                       : TemporaryNaming::kPublication));
  // Another output's lock file (".NAME.lock" holding a pid) is never an
  // output, --overwrite or not: replacing it would leave that output's
  // next run refused ("exists and is not a lock file").
  if (LooksLikeLockFile(path)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--%s=%s: is the lock file of another output (train writes its pid "
        "there); never replaced, whatever the flags",
        flag, path));
  }
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return absl::OkStatus();
  if (st.st_size == 0) return absl::OkStatus();
  if (!input.empty() && SameFile(path, input)) return absl::OkStatus();
  const bool checkpoint = flag == "checkpoint-out";
  const char* kind = checkpoint ? "checkpoint" : "result file";
  RETURN_IF_ERROR(CheckIsAnotherRunsOutput(
      absl::StrFormat("--%s=%s:", flag, path), path, checkpoint,
      static_cast<int64_t>(st.st_size),
      absl::StrFormat("--overwrite replaces only another run's %s, never "
                      "other files (choose another path, or remove it first)",
                      kind)));
  if (overwrite) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "--%s=%s: exists and is another run's %s (%d bytes)%s; refusing to "
      "replace it (pass --overwrite)",
      flag, path, kind, static_cast<int64_t>(st.st_size),
      input.empty() ? "" : ", not the input checkpoint"));
}

// `path` made absolute with its directory resolved (symbolic links, "..");
// the path itself if its directory does not exist.
std::string ResolvedPath(const std::string& path) {
  char buffer[PATH_MAX];
  if (realpath(DirName(path).c_str(), buffer) == nullptr) return path;
  return absl::StrCat(buffer, "/", BaseName(path));
}

// The run's four files must be distinct, except that a continuation may
// publish over its own input checkpoint: otherwise the result could replace
// the checkpoint, or an output the token stream. Not overridable.
absl::Status CheckDistinctPaths(const TrainOptions& o) {
  struct Named {
    const char* flag;
    const std::string* path;
  };
  const Named files[] = {{"tokens", &o.tokens_path},
                         {"checkpoint-in", &o.checkpoint_in},
                         {"checkpoint-out", &o.checkpoint_out},
                         {"result", &o.result_path}};
  for (int i = 0; i < 4; ++i) {
    for (int j = i + 1; j < 4; ++j) {
      if (i == 1 && j == 2) continue;  // continuing in place
      const std::string& a = *files[i].path;
      const std::string& b = *files[j].path;
      if (a == b || SameFile(a, b) || ResolvedPath(a) == ResolvedPath(b)) {
        // The same string twice is the command line's own mistake (exit 2);
        // two spellings of one file depend on the file system (exit 1).
        return (a == b ? UsageError : absl::InvalidArgumentError)(absl::StrFormat(
            "--%s=%s and --%s=%s name the same file; the run's token cache, "
            "input checkpoint, output checkpoint and result must be distinct "
            "(only --checkpoint-out may equal --checkpoint-in)",
            files[i].flag, a, files[j].flag, b));
      }
    }
  }
  return absl::OkStatus();
}

// `path` without trailing slashes ("dir/" -> "dir"; "/" stays).
std::string WithoutTrailingSlashes(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// `path` with symbolic links and ".." resolved: realpath when it exists,
// else its directory resolved (ResolvedPath) and trailing slashes dropped.
std::string CanonicalPath(const std::string& path) {
  char buffer[PATH_MAX];
  return realpath(path.c_str(), buffer) != nullptr
             ? std::string(buffer)
             : ResolvedPath(WithoutTrailingSlashes(path));
}

// The lock file of a file output (common/file_lock.h): ".NAME.lock" beside
// the file that `path` names (CanonicalPath).
std::string LockPathFor(const std::string& path) {
  const std::string real = CanonicalPath(path);
  return absl::StrCat(DirName(real), "/.", BaseName(real), ".lock");
}

// The history directory must not hold the output checkpoint (the history's
// update-NNNNNNNN.ckpt names would collide with it) and must be on the
// output checkpoint's filesystem (history entries are hard links of it);
// both checked before any work. A history directory that does not exist
// yet is judged by its parent.
absl::Status CheckHistoryPlacement(const TrainOptions& o) {
  if (o.checkpoint_history_dir.empty()) return absl::OkStatus();
  // "-" is standard input/output in every Coppelius tool, never a directory
  // (it was created as ./-).
  if (o.checkpoint_history_dir == "-") {
    return UsageError(
        "--checkpoint-history=-: the history is a directory of checkpoint "
        "files; standard output cannot hold it");
  }
  const std::string history = WithoutTrailingSlashes(o.checkpoint_history_dir);
  struct stat history_st;
  const bool history_exists = stat(history.c_str(), &history_st) == 0;
  // A symbolic link to nothing (or a loop) is no directory to publish into,
  // and mkdir would not create its target: refused here, naming the flag,
  // rather than later by the lock file's path.
  if (!history_exists) {
    const int stat_errno = errno;
    struct stat link_st;
    if (lstat(history.c_str(), &link_st) == 0 && S_ISLNK(link_st.st_mode)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--checkpoint-history=", o.checkpoint_history_dir,
          ": a symbolic link to a missing directory or a loop (",
          std::strerror(stat_errno), "); give the target's path"));
    }
  }
  if (history_exists && !S_ISDIR(history_st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint-history=", o.checkpoint_history_dir,
        ": exists and is not a directory"));
  }
  const std::string resolved = ResolvedPath(history);
  for (const std::string* file :
       {&o.tokens_path, &o.checkpoint_in, &o.checkpoint_out, &o.result_path}) {
    if (resolved == ResolvedPath(*file)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--checkpoint-history=", o.checkpoint_history_dir,
          " names the same path as ", *file,
          "; the history directory must be a path of its own"));
    }
  }
  const std::string resolved_history = CanonicalPath(history);
  // Outputs inside the history directory could be named like an entry the
  // run publishes or relinks (update-NNNNNNNN.ckpt), which would replace
  // them; the checkpoint's entries are its hard links.
  struct Output {
    const char* flag;
    const std::string* path;
  };
  for (const Output& out : {Output{"checkpoint-out", &o.checkpoint_out},
                            Output{"result", &o.result_path}}) {
    if (DirName(ResolvedPath(*out.path)) == resolved_history) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "--%s=%s is inside --checkpoint-history=%s; the run's outputs must "
          "live outside its history directory",
          out.flag, *out.path, o.checkpoint_history_dir));
    }
  }
  // The filesystem: the history directory's own (stat'ed above), else its
  // parent's.
  struct stat out_dir, history_fs = history_st;
  if (stat(DirName(o.checkpoint_out).c_str(), &out_dir) == 0 &&
      (history_exists || stat(DirName(history).c_str(), &history_fs) == 0) &&
      out_dir.st_dev != history_fs.st_dev) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "--checkpoint-history=%s is on another filesystem than "
        "--checkpoint-out=%s; history entries are hard links of the output "
        "checkpoint, so they must share one",
        o.checkpoint_history_dir, o.checkpoint_out));
  }
  return absl::OkStatus();
}

// A --checkpoint-history directory this run created (mkdir succeeded) and
// holds the lock of: removed again, with its lock file, when the run ends
// without Keep() and the directory holds nothing else, so that a run
// refused after creating it (a later check, the backend: --backend=cuda
// where there is no GPU) leaves no empty DIR behind. A directory that
// existed before the run, or that holds anything but ".lock" (a
// publication, another run's lock file), is left as it is. Declared after
// the directory's FileLock, so that it is destroyed first: the lock file is
// unlinked while this process still holds its lock (another train that
// opened it is refused; one that opens DIR/.lock after the unlink creates a
// new file there, and rmdir then fails, leaving the directory to it).
class CreatedHistoryDirectory {
 public:
  explicit CreatedHistoryDirectory(std::string dir) : dir_(std::move(dir)) {}
  ~CreatedHistoryDirectory() {
    if (!dir_.empty() && HoldsOnlyLockFile()) {
      unlink((dir_ + "/.lock").c_str());
      rmdir(dir_.c_str());  // best effort: fails if anything appeared
    }
  }
  CreatedHistoryDirectory(const CreatedHistoryDirectory&) = delete;
  CreatedHistoryDirectory& operator=(const CreatedHistoryDirectory&) = delete;

  // The run succeeded: the directory is its history.
  void Keep() { dir_.clear(); }

 private:
  bool HoldsOnlyLockFile() const {
    DIR* d = opendir(dir_.c_str());
    if (d == nullptr) return false;
    bool only_lock = true;
    while (const struct dirent* e = readdir(d)) {
      const absl::string_view name = e->d_name;
      if (name != "." && name != ".." && name != ".lock") only_lock = false;
    }
    closedir(d);
    return only_lock;
  }

  std::string dir_;
};

// Refuses to replace history files (DIR/update-NNNNNNNN.ckpt, a symbolic
// link included) this run would publish, unless `overwrite` and each is
// another run's checkpoint (the magic at offset 0, through a link); an
// empty file there holds nothing and is replaced. A directory, a link
// train cannot follow, a file of another kind or one train cannot read at
// such a name is refused either way.
absl::Status CheckHistory(const TrainOptions& o, const ModelConfig& config,
                          uint64_t c0) {
  // (That it is a directory, CheckHistoryPlacement has checked.)
  if (o.checkpoint_history_dir.empty()) return absl::OkStatus();
  for (int64_t s = config.checkpoint_interval; s <= config.run_steps;
       s += config.checkpoint_interval) {
    const std::string path = HistoryPath(o.checkpoint_history_dir, c0 + s);
    struct stat st;
    // lstat: a symbolic link there, dangling or not, is an existing entry.
    if (lstat(path.c_str(), &st) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      // A rename cannot replace a directory: refused before any work,
      // --overwrite or not, rather than at that publication.
      return absl::FailedPreconditionError(absl::StrFormat(
          "--checkpoint-history=%s: %s is a directory; a history entry is a "
          "file this run would publish (update count %d): remove it or use "
          "another directory",
          o.checkpoint_history_dir, path, c0 + s));
    }
    // What is there must be another run's checkpoint for --overwrite to
    // replace it, as for --checkpoint-out (CheckOutputPath): not a file of
    // another kind, not one train cannot read, not a link it cannot follow
    // (break-it, session 23: a text file there was called a checkpoint and
    // replaced); an empty file holds nothing and is replaced.
    struct stat target;
    if (stat(path.c_str(), &target) != 0) {
      // lstat found an entry: a symbolic link, dangling, looping or
      // through a directory train may not search.
      return absl::FailedPreconditionError(absl::StrFormat(
          "--checkpoint-history=%s: %s is a symbolic link train cannot "
          "follow (%s); a history entry this run would publish (update "
          "count %d) is never put in its place: remove it or use another "
          "directory",
          o.checkpoint_history_dir, path, std::strerror(errno), c0 + s));
    }
    if (S_ISREG(target.st_mode) && target.st_size == 0) continue;
    RETURN_IF_ERROR(CheckIsAnotherRunsOutput(
        absl::StrFormat("--checkpoint-history=%s: %s",
                        o.checkpoint_history_dir, path),
        path, /*checkpoint=*/true, static_cast<int64_t>(target.st_size),
        absl::StrFormat("a history entry this run would publish (update "
                        "count %d) replaces only another run's checkpoint, "
                        "with --overwrite: remove it or use another "
                        "directory",
                        c0 + s)));
    if (!o.overwrite) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "--checkpoint-history=%s: %s exists (update count %d, which this "
          "run would publish); refusing to replace another run's checkpoint "
          "(pass --overwrite, or use another directory)",
          o.checkpoint_history_dir, path, c0 + s));
    }
  }
  return absl::OkStatus();
}

// Publishes snapshots on a host thread so the device keeps stepping. Holds
// two P/M/V buffers: one being published while the next is captured.
class AsyncPublisher {
 public:
  AsyncPublisher(std::string path, CheckpointIdentity identity,
                 PublishOptions options, size_t floats, int crash_after)
      : path_(std::move(path)),
        identity_(std::move(identity)),
        options_(std::move(options)),
        crash_after_(crash_after) {
    for (auto& b : buffers_) b.resize(floats);
  }
  // Starts the publishing thread; ResourceExhausted if the system refuses
  // it (before any step runs).
  absl::Status Start() {
    try {
      thread_ = std::thread([this] { Loop(); });
    } catch (const std::system_error& e) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "starting the checkpoint publisher thread: ", e.what()));
    }
    return absl::OkStatus();
  }
  ~AsyncPublisher() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // A free buffer to capture into (waits while both are queued or in use).
  absl::StatusOr<float*> Acquire() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !status_.ok() || queue_.size() < 2; });
    RETURN_IF_ERROR(status_);
    return buffers_[next_ % 2].data();
  }

  // Queues the buffer last returned by Acquire for publication as
  // `update_count`.
  void Submit(uint64_t update_count) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({next_ % 2, update_count});
      ++next_;
    }
    cv_.notify_all();
  }

  // Waits for every queued publication; the first error, if any.
  absl::Status Drain() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return queue_.empty() || !status_.ok(); });
    return status_;
  }

  int published() const { return published_.load(); }
  uint64_t publish_wall_ns() const { return publish_ns_.load(); }

 private:
  struct Job {
    int buffer;
    uint64_t update_count;
  };

  void Loop() {
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;
        job = queue_.front();
      }
      uint64_t t0 = MonotonicNs();
      PublishOptions options = options_;
      options.created_unix_nanos = WallNs();
      absl::Status s = PublishCheckpoint(
          path_, identity_, job.update_count, buffers_[job.buffer].data(),
          buffers_[job.buffer].size() * sizeof(float), options);
      publish_ns_ += MonotonicNs() - t0;
      {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.pop_front();
        if (!s.ok() && status_.ok()) {
          status_ = Annotate(s, absl::StrCat("publishing update ",
                                             job.update_count));
        }
      }
      if (s.ok()) {
        int n = ++published_;
        if (crash_after_ > 0 && n == crash_after_) raise(SIGKILL);
      }
      cv_.notify_all();
    }
  }

  const std::string path_;
  const CheckpointIdentity identity_;
  const PublishOptions options_;
  const int crash_after_;
  std::vector<float> buffers_[2];
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  absl::Status status_;
  bool stop_ = false;
  int next_ = 0;
  std::atomic<int> published_{0};
  std::atomic<uint64_t> publish_ns_{0};
  std::thread thread_;
};

// One progress line every `interval` of wall time (and at the end).
class ProgressLine {
 public:
  ProgressLine(std::ostream& out, bool enabled, int64_t steps, int T)
      : out_(out), enabled_(enabled), steps_(steps), T_(T),
        start_(MonotonicNs()), last_(start_) {}

  void Step(int64_t done, double mean_loss) {
    window_sum_ += mean_loss;
    ++window_n_;
    uint64_t now = MonotonicNs();
    if (!enabled_ || (now - last_ < 2'000'000'000ull && done != steps_)) return;
    double elapsed = (now - start_) * 1e-9;
    double tokens_per_s = elapsed > 0 ? done * static_cast<double>(T_) / elapsed : 0;
    double eta = done > 0 ? elapsed / done * (steps_ - done) : 0;
    out_ << absl::StrFormat(
                "train: step %d/%d  loss %s  %.0f tok/s  %.2f ms/step  ETA %.0fs",
                done, steps_, LossText(window_sum_ / window_n_, 4),
                tokens_per_s,
                done > 0 ? elapsed * 1e3 / done : 0.0, eta)
         << std::endl;
    window_sum_ = 0;
    window_n_ = 0;
    last_ = now;
  }

 private:
  std::ostream& out_;
  bool enabled_;
  int64_t steps_;
  int T_;
  uint64_t start_, last_;
  double window_sum_ = 0;
  int64_t window_n_ = 0;
};

}  // namespace

absl::Status RunTrain(const TrainOptions& given,
                      const BackendFactory& backend_factory,
                      std::ostream& progress) {
  const uint64_t start_wall = WallNs();
  // Outputs given as symbolic links are published to their targets (the
  // link stays), as WriteFileAtomically does: a rename over the link would
  // replace the link and leave the target behind.
  // A link to nothing (or a loop) cannot be published through: refused.
  TrainOptions resolved = given;
  ASSIGN_OR_RETURN(resolved.checkpoint_out,
                   OutputTarget(given.checkpoint_out, "--checkpoint-out="));
  ASSIGN_OR_RETURN(resolved.result_path,
                   OutputTarget(given.result_path, "--result="));
  // A name of standard output (/dev/stdout) resolves to "-", which
  // CheckOutputPath refuses; named here as given.
  auto refuse_standard_output = [](const char* flag, const std::string& as_given,
                                   const std::string& target) {
    return target == "-" && as_given != "-"
               ? UsageError(absl::StrFormat(
                     "--%s=%s: names standard output; the run's outputs are "
                     "files (published by rename, rewritten in place), give "
                     "a file path",
                     flag, as_given))
               : absl::OkStatus();
  };
  RETURN_IF_ERROR(refuse_standard_output("checkpoint-out", given.checkpoint_out,
                                         resolved.checkpoint_out));
  RETURN_IF_ERROR(refuse_standard_output("result", given.result_path,
                                         resolved.result_path));
  const TrainOptions& options = resolved;
  ASSIGN_OR_RETURN(ModelConfig config, ModelConfigByName(options.config));
  RETURN_IF_ERROR(ValidateModelConfig(config));
  if (options.backend != "cuda" && options.backend != "reference") {
    return UsageError(absl::StrCat(
        "--backend=", options.backend, ": expected cuda or reference"));
  }
  if (options.crash_after_publications < 0) {
    return UsageError(absl::StrCat(
        "--crash_after_publications=", options.crash_after_publications,
        ": expected >= 0 (0: never)"));
  }
  if (options.tokens_path.empty() || options.checkpoint_in.empty()) {
    return UsageError("--tokens and --checkpoint-in are required");
  }
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string*>{"tokens",
                                                   &options.tokens_path},
        {"checkpoint-in", &options.checkpoint_in}}) {
    if (*path == "-") {
      return UsageError(absl::StrCat(
          "--", flag, "=-: the run reads its inputs by offset (and maps the "
          "checkpoint), so they must be files; standard input cannot be used"));
    }
  }
  RETURN_IF_ERROR(CheckThreadsFlag(options.threads));
  const int threads = HostThreads(options.threads);
  const int64_t steps = config.run_steps;
  const int64_t T = config.T;
  const int64_t V = config.V;
  const size_t num_parameters = static_cast<size_t>(NumParameters(config));
  const CheckpointIdentity identity = RunCheckpointIdentity(config);

  // --- Outputs must not clobber another run's (checked before any work);
  // the same file named twice first (--overwrite cannot help there).
  for (const auto& [flag, path] :
       {std::pair<const char*, const std::string*>{"checkpoint-out",
                                                   &options.checkpoint_out},
        {"result", &options.result_path}}) {
    if (path->empty()) {
      return UsageError(absl::StrCat("--", flag, " is required"));
    }
  }
  RETURN_IF_ERROR(CheckDistinctPaths(options));
  RETURN_IF_ERROR(CheckOutputPath("checkpoint-out", options.checkpoint_out,
                                  options.checkpoint_in, options.overwrite));
  RETURN_IF_ERROR(CheckOutputPath("result", options.result_path, "",
                                  options.overwrite));
  RETURN_IF_ERROR(CheckHistoryPlacement(options));
  // The inputs must not be the outputs' lock files (taking the lock would
  // write into them).
  const std::string checkpoint_lock_path = LockPathFor(options.checkpoint_out);
  const std::string result_lock_path = LockPathFor(options.result_path);
  for (const std::string* input : {&options.tokens_path, &options.checkpoint_in}) {
    const std::string resolved_input = ResolvedPath(*input);
    for (const auto& [output, lock_path] :
         {std::pair<const std::string*, const std::string*>{
              &options.checkpoint_out, &checkpoint_lock_path},
          {&options.result_path, &result_lock_path}}) {
      if (resolved_input == *lock_path) {
        return absl::InvalidArgumentError(absl::StrCat(
            *input, " is the lock file of ", *output,
            " (train writes its pid there); give another input"));
      }
    }
  }
  // --- One train process per output (common/file_lock.h), held to the end:
  // a second run on the same checkpoint would interleave its publications
  // with this one's, and on the same result would move this run's
  // incomplete result aside. The lock files are hidden and named after the
  // canonical path, so every spelling of one file (symlinks, "..", "dir/.")
  // takes the same lock: ".NAME.lock" beside a file output, ".lock" inside
  // the history directory (created, if it does not exist, once the inputs
  // have passed their checks below).
  ASSIGN_OR_RETURN(
      FileLock checkpoint_lock,
      FileLock::Acquire(checkpoint_lock_path,
                        absl::StrCat("--checkpoint-out=",
                                     options.checkpoint_out)));
  ASSIGN_OR_RETURN(
      FileLock result_lock,
      FileLock::Acquire(result_lock_path,
                        absl::StrCat("--result=", options.result_path)));
  // --- The input checkpoint: 0 bytes = fresh, else a verified envelope.
  ASSIGN_OR_RETURN(CheckpointReader input,
                   CheckpointReader::Open(options.checkpoint_in));
  uint64_t c0 = 0;
  if (!input.IsFresh()) {
    RETURN_IF_ERROR(input.CheckIdentity(identity));
    c0 = input.update_count();
  }

  // --- The token stream: c0 + steps contexts, every used id < V.
  // Another Coppelius file is named as what it is, before the cache's own
  // checks (break-it, session 23: a checkpoint's magic read as a source
  // mtime "more than a year ahead"; a cut result's size as "not 16 + 4*N").
  std::string other_kind;
  if (HasCheckpointMagic(options.tokens_path)) {
    other_kind = "a Coppelius checkpoint (\"COPPCKPT\" at offset 0)";
  } else if (const std::string evidence =
                 ResultFileEvidence(options.tokens_path);
             !evidence.empty()) {
    other_kind = absl::StrCat("a Coppelius result file (", evidence, ")");
  }
  if (!other_kind.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokens=", options.tokens_path, ": is ", other_kind,
        ", not a token cache (make-cache turns text into one)"));
  }
  ASSIGN_OR_RETURN(TokenCache cache, TokenCache::Open(options.tokens_path));
  // The header has no magic number: its plausibility is what tells a cache
  // from another file (inspect verify's rule, docs/FORMATS.md).
  if (const std::string why = CacheHeaderProblemWithoutVocabulary(
          cache.header(), cache.num_tokens(), absl::Now());
      !why.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        options.tokens_path, ": ", why,
        "; not a token cache as make-cache writes them (make-cache turns "
        "text into one)"));
  }
  // c0 comes from a file: compare without forming c0 + steps, which a
  // hostile update count (up to 2^64 − 1) would wrap.
  const uint64_t contexts = cache.NumContexts(T);
  if (c0 > contexts) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: holds %d contexts of %d tokens; the run would start at context "
        "c0 = %d (update_count of %s), beyond the end",
        options.tokens_path, contexts, T, c0, options.checkpoint_in));
  }
  const uint64_t needed = c0 + static_cast<uint64_t>(steps);
  if (contexts - c0 < static_cast<uint64_t>(steps)) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: holds %d tokens = %d contexts of %d; the run needs contexts "
        "%d..%d (c0 = %d from %s plus %d steps), i.e. at least %d tokens",
        options.tokens_path, cache.num_tokens(), contexts, T, c0,
        needed - 1, c0, options.checkpoint_in, steps, needed * T + 1));
  }
  const uint64_t first_id = c0 * T;
  const uint64_t num_ids = static_cast<uint64_t>(steps) * T + 1;
  const uint32_t* ids = cache.tokens() + first_id;
  for (uint64_t i = 0; i < num_ids; ++i) {
    if (ids[i] >= static_cast<uint32_t>(V)) {
      uint64_t index = first_id + i;
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: token %d (byte offset %d) is id %d, expected < %d (the "
          "vocabulary of config %s)",
          options.tokens_path, index, 16 + 4 * index, ids[i], V, config.name));
    }
  }
  // The history directory is created (and locked) only once the inputs
  // passed, and removed again if a later check or the backend refuses the
  // run (CreatedHistoryDirectory), so that a refused run leaves no
  // directory behind.
  std::optional<FileLock> history_lock;
  std::optional<CreatedHistoryDirectory> created_history;
  if (!options.checkpoint_history_dir.empty()) {
    const bool created =
        mkdir(options.checkpoint_history_dir.c_str(), 0755) == 0;
    if (!created && errno != EEXIST) {
      return ErrnoStatus(errno, "creating --checkpoint-history directory",
                         options.checkpoint_history_dir);
    }
    ASSIGN_OR_RETURN(
        history_lock,
        FileLock::Acquire(
            CanonicalPath(options.checkpoint_history_dir) + "/.lock",
                          absl::StrCat("--checkpoint-history=",
                                       options.checkpoint_history_dir)));
    // Removed again if the run fails before putting anything there; only
    // under its lock (without flock, another run may be using it).
    if (created && history_lock->locked()) {
      created_history.emplace(CanonicalPath(options.checkpoint_history_dir));
    }
  }
  // (After the token check: history names c0 + s are formed only for a
  // c0 the cache holds.)
  RETURN_IF_ERROR(CheckHistory(options, config, c0));
  // Every publication links its checkpoint into the history through a
  // temporary there: a directory that takes no files (read-only) is
  // refused now, not after the first publication (the run stopped there,
  // its checkpoint ahead of the history).
  if (!options.checkpoint_history_dir.empty()) {
    RETURN_IF_ERROR(ProbeTemporaryInDirectory(
        HistoryPath(options.checkpoint_history_dir, c0 + steps),
        "--checkpoint-history"));
  }

  // --- The backend: never chosen implicitly, no host fallback.
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend,
                   backend_factory(options.backend, config));
  // --- The initial image (verifying every chunk of a continued checkpoint).
  std::vector<float> pmv(3 * num_parameters);
  if (input.IsFresh()) {
    RETURN_IF_ERROR(InitializeImage(config, threads, pmv.data()));
  } else {
    RETURN_IF_ERROR(input.ReadPayload(pmv.data(), pmv.size() * sizeof(float),
                                      threads));
    // A state no healthy run writes (a diverged run's NaN, a negative
    // second moment; trainer/pmv_state.h) is said before the run, whatever
    // --progress: the run still goes ahead (loss is telemetry; SPEC §1),
    // and ends in DataLoss if its losses are non-finite.
    for (const std::string& problem :
         PmvStateProblems(options.checkpoint_in, input.payload_offset(),
                          pmv.data(), num_parameters, config)) {
      progress << "train: warning: --checkpoint-in: "
               << EscapeControlCharacters(problem) << std::endl;
    }
  }
  ResultInputStat input_stat;
  input_stat.size_bytes = input.file_bytes();
  input_stat.mtime_ns = input.file_mtime_ns();
  input_stat.update_count = c0;
  input_stat.fresh = input.IsFresh();
  {
    struct stat st;
    if (stat(options.checkpoint_in.c_str(), &st) == 0) input_stat.inode = st.st_ino;
  }
  if (!input.IsFresh()) {
    std::copy(input.header_sha256().begin(), input.header_sha256().end(),
              input_stat.header_digest.begin());
  }

  RETURN_IF_ERROR(Annotate(backend->Load(pmv.data(), c0), "loading P/M/V"));
  RETURN_IF_ERROR(Annotate(backend->SetTokens(ids, num_ids, c0),
                           "staging the token stream"));
  std::vector<float>().swap(pmv);  // the backend holds its own copy

  // This process holds the output's lock (and the history's), which every
  // train publishing there takes: the temporaries there are a killed run's,
  // even where their pid has since been given to another process.
  const bool holds_locks =
      checkpoint_lock.locked() &&
      (!history_lock.has_value() || history_lock->locked());
  ASSIGN_OR_RETURN(auto stale_removed,
                   CleanStaleTemporaries(options.checkpoint_out,
                                         options.checkpoint_history_dir,
                                         nullptr, holds_locks));
  if (stale_removed > 0 && options.progress) {
    progress << "train: removed " << stale_removed
             << " stale temporary file(s) of a killed publisher" << std::endl;
  }
  // A run killed between publishing a checkpoint and linking it into the
  // history (checkpoint/publisher.h) left the history without it: resumed
  // from that checkpoint, put it there now.
  if (!options.checkpoint_history_dir.empty() && !input.IsFresh() &&
      SameFile(options.checkpoint_in, options.checkpoint_out)) {
    struct stat st;
    const std::string entry =
        HistoryPath(options.checkpoint_history_dir, c0);
    if (stat(entry.c_str(), &st) != 0 && errno == ENOENT) {
      // The output's path, not the input's: the two name one file, but
      // --checkpoint-in may be a symbolic link to it, and link(2) would
      // make the history entry another name of that link (dangling from
      // the history directory, or following the path's later updates);
      // --checkpoint-out is the link's target already (OutputTarget).
      RETURN_IF_ERROR(Annotate(
          LinkIntoHistory(options.checkpoint_out,
                          options.checkpoint_history_dir, c0),
          "adding the input checkpoint to the history"));
      if (options.progress) {
        progress << "train: linked the input checkpoint (update " << c0
                 << ") into the history as " << EscapeControlCharacters(entry)
                 << std::endl;
      }
    }
  }

  const ResultGeometry geometry{V, T, steps};
  ASSIGN_OR_RETURN(std::unique_ptr<ResultWriter> result,
                   ResultWriter::Create(options.result_path, geometry));
  std::vector<ResultTimestamp> timestamps;
  timestamps.reserve(steps + 2);

  // --- Forward record: the input parameters on context c0, before any step.
  {
    std::vector<float> logits(3 * V);
    ResultTimestamp ts;
    ts.kind = SubmissionKind::kForward;
    ts.context = c0;
    ts.host_issue_ns = MonotonicNs();
    RETURN_IF_ERROR(Annotate(backend->ForwardRecord(c0, logits.data()),
                             "forward record"));
    ts.host_complete_ns = MonotonicNs();
    ts.release_value = 1;
    timestamps.push_back(ts);
    RETURN_IF_ERROR(result->WriteForwardRecord(logits.data()));
  }
  const uint64_t forward_wall = timestamps[0].host_complete_ns -
                                timestamps[0].host_issue_ns;
  if (options.progress) {
    progress << absl::StrFormat(
                    "train: config %s, backend %s, c0 = %d, %d steps on "
                    "contexts %d..%d of %s, publishing every %d to %s",
                    config.name, backend->name(), c0, steps, c0, needed - 1,
                    EscapeControlCharacters(options.tokens_path),
                    config.checkpoint_interval,
                    EscapeControlCharacters(options.checkpoint_out))
             << std::endl;
  }

  PublishOptions publish_options;
  publish_options.history_dir = options.checkpoint_history_dir;
  publish_options.threads = threads;
  publish_options.writer = "coppelius train";
  publish_options.backend = backend->name();
  if (!input.IsFresh()) {
    publish_options.parent_header_sha256.assign(
        reinterpret_cast<const char*>(input.header_sha256().data()),
        input.header_sha256().size());
  }
  AsyncPublisher publisher(options.checkpoint_out, identity, publish_options,
                           3 * num_parameters,
                           options.crash_after_publications);
  RETURN_IF_ERROR(publisher.Start());

  // --- The steps. Up to `lag` steps are enqueued beyond the last polled one;
  // a snapshot begun after step s finishes `lag` enqueues later.
  const int64_t lag = std::max(0, backend->max_steps_in_flight());
  ProgressLine line(progress, options.progress, steps, T);
  std::vector<float> row_losses(T);
  int64_t polled = 0;
  int64_t first_nonfinite = -1;
  uint64_t nonfinite_steps = 0;
  std::deque<std::pair<int64_t, uint64_t>> snapshots;  // (after step, count)
  const uint64_t steps_t0 = MonotonicNs();
  std::vector<uint64_t> issue_ns(steps);

  auto poll_one = [&]() -> absl::Status {
    const int64_t s = polled;
    RETURN_IF_ERROR(Annotate(backend->PollStep(s, row_losses.data()),
                             absl::StrCat("step ", s)));
    ResultTimestamp ts;
    ts.kind = SubmissionKind::kUpdate;
    ts.context = c0 + s;
    ts.step = s;
    ts.host_issue_ns = issue_ns[s];
    ts.host_complete_ns = MonotonicNs();
    backend->StepDeviceTimes(s, &ts.device_start_ns, &ts.device_end_ns);
    ts.release_value = static_cast<uint32_t>(s + 1);
    timestamps.push_back(ts);
    RETURN_IF_ERROR(result->AppendStepWindow(s, row_losses.data()));
    double sum = 0;
    for (float x : row_losses) sum += x;
    double mean = sum / T;
    if (!std::isfinite(mean)) {
      if (first_nonfinite < 0) first_nonfinite = s;
      ++nonfinite_steps;
    }
    ++polled;
    line.Step(polled, mean);
    return absl::OkStatus();
  };
  auto finish_snapshot = [&]() -> absl::Status {
    auto [after_step, count] = snapshots.front();
    snapshots.pop_front();
    ASSIGN_OR_RETURN(float* buffer, publisher.Acquire());
    RETURN_IF_ERROR(Annotate(backend->FinishSnapshot(buffer),
                             absl::StrCat("snapshot after step ", after_step)));
    publisher.Submit(count);
    return absl::OkStatus();
  };

  for (int64_t s = 0; s < steps; ++s) {
    issue_ns[s] = MonotonicNs();
    RETURN_IF_ERROR(Annotate(backend->EnqueueStep(s),
                             absl::StrCat("enqueueing step ", s)));
    if ((s + 1) % config.checkpoint_interval == 0) {
      RETURN_IF_ERROR(backend->BeginSnapshot());
      snapshots.emplace_back(s, c0 + s + 1);
    }
    while (!snapshots.empty() && s - snapshots.front().first >= lag) {
      RETURN_IF_ERROR(finish_snapshot());
    }
    while (polled <= s - lag) RETURN_IF_ERROR(poll_one());
  }
  while (polled < steps) RETURN_IF_ERROR(poll_one());
  while (!snapshots.empty()) RETURN_IF_ERROR(finish_snapshot());
  const uint64_t steps_wall = MonotonicNs() - steps_t0;

  // --- Final submission: the final parameters on the last step's context.
  std::vector<float> final_logits(3 * V);
  {
    ResultTimestamp ts;
    ts.kind = SubmissionKind::kFinal;
    ts.context = c0 + steps - 1;
    ts.host_issue_ns = MonotonicNs();
    RETURN_IF_ERROR(Annotate(backend->Final(c0 + steps - 1, final_logits.data()),
                             "final forward"));
    ts.host_complete_ns = MonotonicNs();
    ts.release_value = 1;
    timestamps.push_back(ts);
  }
  ASSIGN_OR_RETURN(BackendTelemetry telemetry, backend->Telemetry());

  // The run ends only after the last publication is durable.
  RETURN_IF_ERROR(publisher.Drain());

  ResultTail tail;
  tail.input = input_stat;
  tail.input.submissions_issued = static_cast<uint32_t>(timestamps.size());
  tail.input.submissions_completed = static_cast<uint32_t>(timestamps.size());
  tail.input.update_last_release = static_cast<uint32_t>(steps);
  tail.loss.last_row_losses = telemetry.last_row_losses;
  tail.loss.embedding_gradient_head = telemetry.embedding_gradient_head;
  tail.loss.embedding_parameter_head = telemetry.embedding_parameter_head;
  tail.loss.embedding_first_moment_head = telemetry.embedding_first_moment_head;
  tail.final_logits.assign(final_logits.begin() + 2 * V, final_logits.end());
  const uint32_t issues[kNumSubmissionKinds] = {1, static_cast<uint32_t>(steps),
                                                1};
  for (int k = 0; k < kNumSubmissionKinds; ++k) {
    tail.semaphores[k].completion_value = issues[k];
    tail.semaphores[k].fence_value = issues[k];
    tail.semaphores[k].device_start_ns = telemetry.device_start_ns[k];
    tail.semaphores[k].device_end_ns = telemetry.device_end_ns[k];
    tail.semaphores[k].issues = issues[k];
  }
  tail.errors.first_nonfinite_step =
      first_nonfinite >= 0 ? first_nonfinite : telemetry.first_nonfinite_step;
  tail.errors.nonfinite_steps =
      std::max<uint64_t>(nonfinite_steps, telemetry.nonfinite_steps);
  tail.errors.invalid_token_seen = telemetry.invalid_token_seen;
  if (tail.errors.nonfinite_steps > 0) tail.errors.text = "non-finite loss";
  tail.host.backend = backend->name();
  tail.host.first_context = c0;
  tail.host.steps_done = steps;
  tail.host.update_count = c0 + steps;
  tail.host.publications = static_cast<uint32_t>(publisher.published());
  tail.host.start_unix_ns = start_wall;
  tail.host.end_unix_ns = WallNs();
  tail.host.forward_wall_ns = forward_wall;
  tail.host.steps_wall_ns = steps_wall;
  tail.host.publish_wall_ns = publisher.publish_wall_ns();
  tail.host.peak_device_memory_bytes = telemetry.peak_device_memory_bytes;
  for (int r = 0; r < 3; ++r) {
    const float* row = final_logits.data() + r * V;
    bool finite = true;
    int64_t best = 0;
    for (int64_t v = 0; v < V; ++v) {
      if (!std::isfinite(row[v])) finite = false;
      if (row[v] > row[best]) best = v;
    }
    tail.host.predictions[r].token = static_cast<uint32_t>(best);
    tail.host.predictions[r].valid = finite;
  }
  tail.timestamps = std::move(timestamps);
  RETURN_IF_ERROR(result->Finish(tail));
  if (options.progress) {
    progress << absl::StrFormat(
                    "train: done: %d steps in %.2f s (%.3f ms/step), %d "
                    "publications (%.2f s on the publisher thread), update "
                    "count %d, result %s",
                    steps, steps_wall * 1e-9, steps_wall * 1e-6 / steps,
                    publisher.published(), publisher.publish_wall_ns() * 1e-9,
                    c0 + steps, EscapeControlCharacters(options.result_path))
             << std::endl;
  }
  if (created_history.has_value()) created_history->Keep();
  // Loss is telemetry: non-finite losses never stop the run, but a run
  // that had them did not succeed, and says so by its status (its result
  // records them, and inspect verify fails it).
  if (tail.errors.nonfinite_steps > 0) {
    return absl::DataLossError(absl::StrFormat(
        "%d of %d steps had a non-finite loss (the first: step %d of this "
        "run, on context %d); the run completed and published its "
        "checkpoints, and its result %s records them in its error notifier",
        tail.errors.nonfinite_steps, steps, tail.errors.first_nonfinite_step,
        c0 + tail.errors.first_nonfinite_step, options.result_path));
  }
  return absl::OkStatus();
}

}  // namespace coppelius
