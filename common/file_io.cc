#include "common/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <new>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

namespace coppelius {

absl::Status ErrnoStatus(int errno_value, absl::string_view what,
                         absl::string_view path) {
  std::string message =
      absl::StrCat(what, " ", path, ": ", std::strerror(errno_value));
  switch (errno_value) {
    case ENOENT:
      return absl::NotFoundError(message);
    case ENOSPC:
    case EDQUOT:
      return absl::ResourceExhaustedError(message);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(message);
    case EISDIR:
    case ELOOP:  // a symbolic link loop (or too many links on the way)
    case ENOTDIR:
    case ENAMETOOLONG:
      return absl::InvalidArgumentError(message);
    default:
      return absl::InternalError(message);
  }
}

namespace {
// Set by ProtectStandardStreams for streams found closed.
std::atomic<bool> g_stdin_closed{false};
std::atomic<bool> g_stdout_closed{false};
}  // namespace

void ProtectStandardStreams() {
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // open() returns the lowest free number: fd itself, since the lower
    // ones are open (or were reopened by an earlier iteration).
    const int null_fd = open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY);
    if (null_fd >= 0 && null_fd != fd) {
      dup2(null_fd, fd);
      close(null_fd);
    }
    if (fd == 0) g_stdin_closed = true;
    if (fd == 1) g_stdout_closed = true;
  }
}

bool StandardOutputWasClosed() { return g_stdout_closed; }

absl::Status CloseStandardOutput() {
  absl::Status status;
  // C stdio first, for errno's reason (std::cout, synchronized with stdio,
  // flushes through it).
  if (std::fflush(stdout) != 0) {
    status = ErrnoStatus(errno, "writing", "<stdout>");
  } else if (std::ferror(stdout)) {
    // An earlier write failed; glibc dropped its buffer, so the flush now
    // succeeds with nothing to write.
    status = absl::InternalError("writing <stdout>: an earlier write failed");
  }
  std::cout.flush();
  if (!std::cout.good() && status.ok()) {
    status = absl::InternalError("writing <stdout>: std::cout failed");
  }
  // /dev/null opened first (above fd 2, so that it cannot be fd 1 itself
  // when fd 1 is not open), to refill fd 1 once it is closed.
  int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  if (null_fd >= 0 && null_fd <= STDERR_FILENO) {
    const int moved = fcntl(null_fd, F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
    close(null_fd);
    null_fd = moved;
  }
  if (close(STDOUT_FILENO) != 0 && status.ok()) {
    status = ErrnoStatus(errno, "closing", "<stdout>");
  }
  if (null_fd >= 0) {
    dup2(null_fd, STDOUT_FILENO);
    close(null_fd);
  }
  return status;
}

uint64_t StandardOutputFileBytes() {
  struct stat st;
  if (fstat(STDOUT_FILENO, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  return static_cast<uint64_t>(st.st_size);
}

std::string StandardOutputFileToExamine() {
  return StandardOutputFileBytes() > 0 ? "/dev/fd/1" : "";
}

namespace {
// Registered temporaries: state 0 free, 1 being filled or cleared, 2 armed
// (the signal handler unlinks armed paths only). Lock-free atomics and
// unlink(2) are async-signal-safe.
constexpr int kInterruptSlots = 8;
std::atomic<int> g_slot_state[kInterruptSlots];
char g_slot_path[kInterruptSlots][PATH_MAX];

// Restores `signal_number`'s default action and raises it: the process ends
// as killed by that signal. Async-signal-safe.
void RaiseWithDefaultAction(int signal_number) {
  struct sigaction action = {};
  action.sa_handler = SIG_DFL;
  sigemptyset(&action.sa_mask);
  sigaction(signal_number, &action, nullptr);
  raise(signal_number);
}

void OnInterrupt(int signal_number) {
  RemoveRegisteredTemporaries();
  RaiseWithDefaultAction(signal_number);
}
}  // namespace

void RemoveRegisteredTemporaries() {
  for (int i = 0; i < kInterruptSlots; ++i) {
    if (g_slot_state[i].load() == 2) unlink(g_slot_path[i]);
  }
}

void InstallInterruptCleanup() {
  struct sigaction action = {};
  action.sa_handler = OnInterrupt;
  sigemptyset(&action.sa_mask);
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    sigaddset(&action.sa_mask, signal_number);
  }
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    // A signal the parent set to be ignored stays ignored (nohup(1), a
    // shell's background job ignoring SIGINT): the process would not have
    // ended by it, so there is nothing to clean up.
    struct sigaction current = {};
    if (sigaction(signal_number, nullptr, &current) == 0 &&
        current.sa_handler == SIG_IGN) {
      continue;
    }
    sigaction(signal_number, &action, nullptr);
  }
}

void RemoveOnInterrupt(const std::string& path) {
  if (path.size() >= PATH_MAX) return;
  for (int i = 0; i < kInterruptSlots; ++i) {
    int expected = 0;
    if (!g_slot_state[i].compare_exchange_strong(expected, 1)) continue;
    std::memcpy(g_slot_path[i], path.c_str(), path.size() + 1);
    g_slot_state[i].store(2);
    return;
  }
}

void KeepOnInterrupt(const std::string& path) {
  for (int i = 0; i < kInterruptSlots; ++i) {
    int expected = 2;
    if (std::strcmp(g_slot_path[i], path.c_str()) != 0 ||
        !g_slot_state[i].compare_exchange_strong(expected, 1)) {
      continue;
    }
    g_slot_path[i][0] = '\0';
    g_slot_state[i].store(0);
    return;
  }
}

namespace {
// Registered mappings, as the temporaries above: state 0 free, 1 being
// filled or cleared, 2 armed (the handler reads armed slots only).
constexpr int kMappingSlots = 8;
std::atomic<int> g_mapping_state[kMappingSlots];
uintptr_t g_mapping_begin[kMappingSlots];
size_t g_mapping_bytes[kMappingSlots];
char g_mapping_path[kMappingSlots][PATH_MAX];
const char* g_mapping_program = "";

void OnBusError(int signal_number, siginfo_t* info, void*) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (int i = 0; i < kMappingSlots; ++i) {
    if (g_mapping_state[i].load() != 2 || at < g_mapping_begin[i] ||
        at - g_mapping_begin[i] >= g_mapping_bytes[i]) {
      continue;
    }
    RemoveRegisteredTemporaries();
    WriteStderrSignalSafe(g_mapping_program);
    WriteStderrSignalSafe(": DATA_LOSS: ");
    WriteStderrSignalSafe(g_mapping_path[i]);
    WriteStderrSignalSafe(
        ": the file shrank while it was being read (rewritten in place by "
        "another process?)\n");
    _exit(1);
  }
  // Not a mapping of ours: the default action (the process ends by it).
  RaiseWithDefaultAction(signal_number);
}
}  // namespace

void WriteStderrSignalSafe(const char* text) {
  size_t left = std::strlen(text);
  while (left > 0) {
    const ssize_t n = write(STDERR_FILENO, text, left);
    if (n <= 0) return;
    text += n;
    left -= static_cast<size_t>(n);
  }
}

void ReportShrunkMappings(const char* program) {
  g_mapping_program = program;
  struct sigaction action = {};
  action.sa_sigaction = OnBusError;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  sigaction(SIGBUS, &action, nullptr);
}

void RegisterMapping(const void* begin, size_t bytes, const std::string& path) {
  if (begin == nullptr || path.size() >= PATH_MAX) return;
  for (int i = 0; i < kMappingSlots; ++i) {
    int expected = 0;
    if (!g_mapping_state[i].compare_exchange_strong(expected, 1)) continue;
    g_mapping_begin[i] = reinterpret_cast<uintptr_t>(begin);
    g_mapping_bytes[i] = bytes;
    std::memcpy(g_mapping_path[i], path.c_str(), path.size() + 1);
    g_mapping_state[i].store(2);
    return;
  }
}

void UnregisterMapping(const void* begin) {
  if (begin == nullptr) return;
  for (int i = 0; i < kMappingSlots; ++i) {
    int expected = 2;
    if (g_mapping_begin[i] != reinterpret_cast<uintptr_t>(begin) ||
        !g_mapping_state[i].compare_exchange_strong(expected, 1)) {
      continue;
    }
    g_mapping_path[i][0] = '\0';
    g_mapping_state[i].store(0);
    return;
  }
}

bool ProcessMayBeRunning(int64_t pid) {
  if (pid <= 0 || pid > INT32_MAX) return false;
  const int saved_errno = errno;
  const bool running =
      kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH;
  errno = saved_errno;
  return running;
}

namespace {

// Neither a regular file nor a directory (IsStreamPath).
bool IsStreamFile(const struct stat& st) {
  return !S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode);
}

bool IsDevNull(const struct stat& st) {
  return S_ISCHR(st.st_mode) && st.st_rdev == makedev(1, 3);
}

// "PATH: more than N bytes from a stream; ...": ReadFile's and CopyStream's
// limit.
absl::Status StreamTooLarge(absl::string_view path, uint64_t max_bytes) {
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": more than ", max_bytes,
      " bytes from a stream; expected at most that (give a larger file as "
      "a path)"));
}

// Whether `path` names descriptor `fd` itself, whatever it is open on: a
// chain of symbolic links (/dev/stdin, /dev/stdout, a link to one) that
// reaches entry `fd` of this process's /proc/PID/fd (or of one of its
// threads'), however that directory is spelled (/dev/fd, /proc/self/fd,
// /proc/thread-self/fd). Entry `fd` is the last link followed: it is a
// "magic" link to the open file (for a reopened /dev/null, "/dev/null"
// itself, which is not standard input by name).
bool NamesDescriptor(const std::string& path, int fd) {
  const std::string fd_name = absl::StrCat(fd);
  const std::string fd_dir = absl::StrCat("/proc/", getpid(), "/fd");
  const std::string task_dir = absl::StrCat("/proc/", getpid(), "/task/");
  std::string p = path;
  for (int hop = 0; hop < 40 && !p.empty(); ++hop) {
    const size_t slash = p.rfind('/');
    const std::string dir = slash == std::string::npos ? "."
                            : slash == 0               ? "/"
                                                       : p.substr(0, slash);
    const std::string base =
        slash == std::string::npos ? p : p.substr(slash + 1);
    char resolved[PATH_MAX];
    if (realpath(dir.c_str(), resolved) == nullptr) return false;
    const std::string real_dir = resolved;
    if (base == fd_name &&
        (real_dir == fd_dir || (absl::StartsWith(real_dir, task_dir) &&
                                absl::EndsWith(real_dir, "/fd")))) {
      return true;
    }
    const std::string entry =
        real_dir == "/" ? "/" + base : real_dir + "/" + base;
    char target[PATH_MAX];
    const ssize_t n = readlink(entry.c_str(), target, sizeof(target) - 1);
    if (n <= 0) return false;  // not a link (or gone): not descriptor `fd`
    target[n] = '\0';
    p = target[0] == '/' ? std::string(target)
                         : (real_dir == "/" ? "/" : real_dir + "/") + target;
  }
  return false;
}

// Opens `path` ("-": standard input, refused when closed), refuses a
// directory and a named character device (CheckNamedInputKind, by stat
// before it is opened: opening a device can do more than reading it), calls
// `opened` with its stat (an error ends the read), then passes its bytes to
// `piece` in reads of up to 64 KiB until the end (an error ends the read).
// The one read loop of ReadFile and CopyStream.
absl::Status ReadInPieces(
    const std::string& path,
    const std::function<absl::Status(const struct stat&)>& opened,
    const std::function<absl::Status(absl::string_view)>& piece) {
  if (g_stdin_closed &&
      (path == "-" || NamesDescriptor(path, STDIN_FILENO))) {
    // Reopened on /dev/null (ProtectStandardStreams): by any of its names,
    // standard input would read as empty.
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": standard input is closed; expected data on it or a file "
              "path"));
  }
  if (path != "-") {
    struct stat before;
    if (stat(path.c_str(), &before) == 0) {
      RETURN_IF_ERROR(CheckNamedInputKind(path, before));
    }
  }
  const int fd =
      path == "-" ? STDIN_FILENO : open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening", path);
  absl::Cleanup close_fd = [fd] {
    if (fd != STDIN_FILENO) close(fd);
  };
  struct stat st;
  if (fstat(fd, &st) != 0) {
    return ErrnoStatus(errno, "reading", InputName(path));
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, path == "-" ? ": standard input is a directory, expected a file "
                            "or a pipe"
                          : ": is a directory, expected a file"));
  }
  if (path != "-") RETURN_IF_ERROR(CheckNamedInputKind(path, st));
  RETURN_IF_ERROR(opened(st));
  char buffer[1 << 16];
  uint64_t total = 0;
  for (;;) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "reading", InputName(path));
    }
    if (n == 0) break;
    total += static_cast<uint64_t>(n);
    RETURN_IF_ERROR(piece(absl::string_view(buffer, static_cast<size_t>(n))));
  }
  // A regular file that ended before its size when opened, and is now
  // smaller, shrank while it was read (`cp` over it rewrites it in place):
  // what was read is part of it, not the file. (A file whose size stays
  // larger than its content, as sysfs reports, did not shrink; one on
  // standard input may start past offset 0.)
  struct stat end;
  if (S_ISREG(st.st_mode) && total < static_cast<uint64_t>(st.st_size) &&
      fstat(fd, &end) == 0 && end.st_size < st.st_size) {
    return absl::DataLossError(absl::StrFormat(
        "%s: offset %d: file shrank while being read: it ends here, "
        "expected %d bytes (its size when opened)",
        InputName(path), total, static_cast<uint64_t>(st.st_size)));
  }
  return absl::OkStatus();
}

}  // namespace

std::string InputName(absl::string_view path) {
  return path == "-" ? "standard input" : std::string(path);
}

bool ReadsStandardInput(const std::string& path) {
  if (path == "-") return true;
  if (path.empty() || g_stdin_closed) return false;
  struct stat in, named;
  if (fstat(STDIN_FILENO, &in) != 0 || stat(path.c_str(), &named) != 0) {
    return false;
  }
  const bool read_once = S_ISFIFO(in.st_mode) || S_ISSOCK(in.st_mode) ||
                         (S_ISCHR(in.st_mode) && !IsDevNull(in));
  return read_once && in.st_dev == named.st_dev && in.st_ino == named.st_ino;
}

absl::Status CheckStandardInputReadOnce(const std::vector<NamedInput>& inputs) {
  const NamedInput* first = nullptr;
  for (const NamedInput& input : inputs) {
    if (input.path.empty() || !ReadsStandardInput(input.path)) continue;
    if (first == nullptr) {
      first = &input;
      continue;
    }
    return UsageError(absl::StrCat(
        first->label, first->path, " and ", input.label, input.path,
        ": both read standard input, which can be read once; give one of "
        "them as a file"));
  }
  return absl::OkStatus();
}

absl::Status CheckStandardInputKind(const struct stat& st) {
  if (!S_ISCHR(st.st_mode) || IsDevNull(st) || isatty(STDIN_FILENO)) {
    return absl::OkStatus();
  }
  // `< /dev/zero`, `< /dev/urandom`: no end, refused as their names are. A
  // terminal stays readable: text typed until end of file.
  return absl::InvalidArgumentError(
      "-: standard input is a character device (such as /dev/zero) and not "
      "a terminal, expected a file, a pipe or a terminal");
}

absl::Status CheckNamedInputKind(absl::string_view path,
                                 const struct stat& st) {
  if (!S_ISCHR(st.st_mode) || IsDevNull(st)) return absl::OkStatus();
  // Not /dev/null: no end (/dev/zero), or not data (a terminal).
  return absl::InvalidArgumentError(absl::StrCat(
      path, ": is a character device (such as /dev/zero or a terminal), "
            "expected a regular file or a pipe"));
}

absl::Status CatchOutOfMemory(const std::function<void()>& allocate,
                              const std::function<std::string()>& what) {
  const std::new_handler handler = std::set_new_handler(nullptr);
  absl::Cleanup restore = [handler] { std::set_new_handler(handler); };
  const char* reason = nullptr;
  try {
    allocate();
    return absl::OkStatus();
  } catch (const std::bad_alloc&) {
    reason = "allocation failed";
  } catch (const std::length_error&) {
    reason = "more than an allocation can hold";
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(what(), " do not fit in memory (", reason,
                   "); expected less input or more memory (ulimit -v, RAM)"));
}

absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     uint64_t max_stream_bytes) {
  std::string out;
  bool stream = false;
  uint64_t size = 0;  // a regular file's size when opened
  absl::Status read;
  const absl::Status memory = CatchOutOfMemory(
      [&] {
        read = ReadInPieces(
            path,
            [&](const struct stat& st) {
              if (path == "-") RETURN_IF_ERROR(CheckStandardInputKind(st));
              stream = !S_ISREG(st.st_mode);
              if (!stream) {
                size = static_cast<uint64_t>(st.st_size);
                out.reserve(size);
              }
              return absl::OkStatus();
            },
            [&](absl::string_view bytes) {
              if (stream && bytes.size() > max_stream_bytes - out.size()) {
                return StreamTooLarge(path, max_stream_bytes);
              }
              out.append(bytes.data(), bytes.size());
              return absl::OkStatus();
            });
      },
      [&] {
        // What was read is let go first: the message needs memory too.
        const uint64_t held = out.size();
        std::string().swap(out);
        return stream ? absl::StrCat(path, ": more than ", held,
                                     " bytes from a stream")
                      : absl::StrCat(path, ": ", std::max(size, held),
                                     " bytes");
      });
  RETURN_IF_ERROR(memory);
  RETURN_IF_ERROR(read);
  return out;
}

absl::Status CopyStream(const std::string& path, int fd,
                        absl::string_view fd_path, uint64_t max_bytes) {
  uint64_t total = 0;
  return ReadInPieces(
      path,
      [&](const struct stat& st) {
        // A named input was checked already; standard input is checked here
        // too (a stream that is a device has no end or is not data).
        return CheckNamedInputKind(path, st);
      },
      [&](absl::string_view bytes) {
        total += bytes.size();
        if (total > max_bytes) return StreamTooLarge(path, max_bytes);
        return WriteAll(fd, bytes.data(), bytes.size(), fd_path);
      });
}

bool ReadFileHead(const std::string& path, void* head, size_t n) {
  struct stat st;
  // stat first: opening a FIFO for reading would block.
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) < n) {
    return false;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return false;
  const bool ok = PreadAll(fd, head, n, 0, path).ok();
  close(fd);
  return ok;
}

std::optional<UnreadableFile> FindUnreadableFile(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) ||
      st.st_size == 0) {
    return std::nullopt;
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd >= 0) {
    close(fd);
    return std::nullopt;
  }
  return UnreadableFile{static_cast<uint64_t>(st.st_size),
                        std::strerror(errno)};
}

absl::Status WriteAll(int fd, const void* data, size_t size,
                      absl::string_view path) {
  if (fd == STDOUT_FILENO && g_stdout_closed) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, ": standard output is closed; expected somewhere to write"));
  }
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "writing", path);
    }
    if (n == 0) return ErrnoStatus(ENOSPC, "writing", path);
    p += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

FdOutputStream::Buffer::Buffer(int fd, std::string name)
    : fd_(fd), name_(std::move(name)), bytes_(size_t{1} << 16) {
  setp(bytes_.data(), bytes_.data() + bytes_.size());
}

bool FdOutputStream::Buffer::Drain() {
  const size_t n = static_cast<size_t>(pptr() - pbase());
  if (n > 0 && status_.ok()) status_ = WriteAll(fd_, pbase(), n, name_);
  setp(bytes_.data(), bytes_.data() + bytes_.size());
  return status_.ok();
}

FdOutputStream::Buffer::int_type FdOutputStream::Buffer::overflow(
    int_type ch) {
  if (!Drain()) return traits_type::eof();
  if (!traits_type::eq_int_type(ch, traits_type::eof())) {
    *pptr() = traits_type::to_char_type(ch);
    pbump(1);
  }
  return traits_type::not_eof(ch);
}

int FdOutputStream::Buffer::sync() { return Drain() ? 0 : -1; }

FdOutputStream::FdOutputStream(int fd, std::string name)
    : std::ostream(nullptr), buffer_(fd, std::move(name)) {
  rdbuf(&buffer_);
}

FdOutputStream::~FdOutputStream() { flush(); }

absl::Status StreamStatus(const std::ostream& out, absl::string_view what) {
  if (out.good()) return absl::OkStatus();
  const auto* fd_stream = dynamic_cast<const FdOutputStream*>(&out);
  if (fd_stream != nullptr && !fd_stream->status().ok()) {
    return Annotate(fd_stream->status(), what);
  }
  return absl::InternalError(absl::StrCat(what, ": writing failed"));
}

absl::Status PreadAll(int fd, void* data, size_t size, uint64_t offset,
                      absl::string_view path) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    ssize_t n = pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoStatus(errno, "reading", path);
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrFormat(
          "%s: file ends at offset %d, expected %d more bytes", path, offset,
          size));
    }
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
  return absl::OkStatus();
}

std::string DirName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string BaseName(const std::string& path) {
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

absl::Status FsyncDirectory(const std::string& dir) {
  int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening directory", dir);
  if (fsync(fd) != 0) {
    int e = errno;
    close(fd);
    return ErrnoStatus(e, "fsync of directory", dir);
  }
  close(fd);
  return absl::OkStatus();
}

bool SameFile(const std::string& a, const std::string& b) {
  struct stat sa, sb;
  if (stat(a.c_str(), &sa) != 0 || stat(b.c_str(), &sb) != 0) return false;
  return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

bool IsStreamPath(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && IsStreamFile(st);
}

absl::Status CheckRegularFileOrAbsent(const std::string& path,
                                      absl::string_view what) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      what, " ", path, ": exists and is not a regular file (",
      S_ISDIR(st.st_mode) ? "a directory" : "a device, FIFO or socket",
      "); expected a regular file path"));
}

namespace {
// NewTemporaryPath's name, without its clearing of stale temporaries.
std::string FileTemporaryName(const std::string& path) {
  std::random_device rd;
  return absl::StrFormat("%s.tmp-%d-%08x", path, getpid(), rd());
}
}  // namespace

absl::Status CheckOutputPathUsable(const std::string& path_or_link,
                                   absl::string_view what) {
  // A symbolic link is published to its target (WriteFileAtomically), so
  // the target's directory is the one that must take the temporaries; a
  // link to nothing is refused here, before any work.
  ASSIGN_OR_RETURN(const std::string path,
                   OutputTarget(path_or_link, absl::StrCat(what, " ")));
  if (path == "-") return absl::OkStatus();
  struct stat st;
  if (stat(path.c_str(), &st) == 0) {
    // A regular file is replaced through a temporary beside it; a device or
    // FIFO is written.
    if (S_ISREG(st.st_mode)) {
      return ProbeTemporaryInDirectory(path, what, TemporaryNaming::kFile);
    }
    if (!S_ISDIR(st.st_mode)) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat(
        what, " ", path, ": is a directory, expected a file path"));
  }
  const std::string dir = DirName(path);
  if (stat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      return absl::NotFoundError(absl::StrCat(what, " ", path, ": directory ",
                                              dir, " does not exist"));
    }
    return ErrnoStatus(errno, absl::StrCat("checking the directory of ", what),
                       path);
  }
  if (!S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " ", path, ": ", dir, " is not a directory"));
  }
  return ProbeTemporaryInDirectory(path, what, TemporaryNaming::kFile);
}

absl::Status ProbeTemporaryInDirectory(const std::string& path,
                                       absl::string_view what,
                                       TemporaryNaming naming) {
  const std::string probe = naming == TemporaryNaming::kPublication
                                ? PublicationTemporaryPath(path)
                                : FileTemporaryName(path);
  const std::string dir = DirName(path);
  // The temporary's name holds this process's id: judged with the longest
  // id Linux gives (7 digits: PID_MAX_LIMIT is 4,194,304), so that whether
  // a name is taken does not depend on the run's pid.
  constexpr size_t kMaxPidDigits = 7;
  const size_t pid_digits = absl::StrCat(getpid()).size();
  const size_t longest =
      BaseName(probe).size() - pid_digits + kMaxPidDigits;
  const long name_max = pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max > 0 && longest > static_cast<size_t>(name_max)) {
    const size_t added = longest - BaseName(path).size();
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s: too long a name for its temporary (%s, up to %d bytes with "
        "a %d-digit process id; the directory allows %d): give a name of at "
        "most %d bytes",
        what, path, BaseName(probe), longest, kMaxPidDigits, name_max,
        name_max - static_cast<long>(added)));
  }
  int fd = -1, err = 0;
  {
    const RemoveOnInterruptScope remove_on_interrupt(probe);
    fd = open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    err = errno;
    if (fd >= 0) {
      close(fd);
      unlink(probe.c_str());
    }
  }
  if (fd >= 0) return absl::OkStatus();
  if (err == ENAMETOOLONG) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%s %s: too long a name for its temporary (%s: %d bytes; the "
        "directory allows %d)",
        what, path, BaseName(probe), BaseName(probe).size(), name_max));
  }
  const std::string message =
      absl::StrFormat("%s %s: cannot create files in directory %s (%s)", what,
                      path, dir, std::strerror(err));
  if (err == EACCES || err == EROFS || err == EPERM) {
    return absl::PermissionDeniedError(message);
  }
  if (err == ENOENT || err == ENOTDIR) return absl::NotFoundError(message);
  return ErrnoStatus(err, absl::StrCat("creating a file beside ", what), path);
}

absl::Status WriteFileAtomically(const std::string& path_or_link,
                                 absl::string_view contents,
                                 const BeforeReplace& before_replace) {
  // A symbolic link is followed: its target is replaced, not the link. A
  // link to nothing is refused (as make-cache and train refuse it): a
  // rename over it would replace the link with a file where the link's
  // owner did not mean the output to go. A name of standard output is "-".
  ASSIGN_OR_RETURN(const std::string path, OutputTarget(path_or_link, ""));
  if (path == "-") return WriteAll(STDOUT_FILENO, contents.data(),
                                   contents.size(), "<stdout>");
  struct stat st;
  const bool exists = stat(path.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": is a directory, expected a file path"));
  }
  if (exists && IsStreamFile(st)) {
    // A device or FIFO: write to it; renaming over it would replace it.
    int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoStatus(errno, "opening", path);
    absl::Status status = WriteAll(fd, contents.data(), contents.size(), path);
    if (close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "closing", path);
    return status;
  }
  const std::string tmp = NewTemporaryPath(path);
  // Registered before it exists: an interrupt between the two leaves
  // nothing behind.
  const RemoveOnInterruptScope remove_on_interrupt(tmp);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    // Named by the path asked for (the temporary's name means nothing to
    // the caller), with the temporary after it.
    const int e = errno;
    const absl::Status s = ErrnoStatus(e, "writing", path);
    return absl::Status(
        s.code(), absl::StrCat(s.message(), " (creating its temporary ", tmp,
                               ")"));
  }
  absl::Status status = WriteAll(fd, contents.data(), contents.size(), tmp);
  if (status.ok() && fsync(fd) != 0) status = ErrnoStatus(errno, "fsync", tmp);
  if (close(fd) != 0 && status.ok()) status = ErrnoStatus(errno, "closing", tmp);
  if (status.ok() && before_replace) status = before_replace(path);
  if (status.ok() && rename(tmp.c_str(), path.c_str()) != 0) {
    status = ErrnoStatus(errno, "renaming to", path);
  }
  if (!status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  return FsyncDirectory(DirName(path));
}

absl::StatusOr<std::string> OutputTarget(const std::string& path,
                                         absl::string_view what) {
  struct stat st;
  if (path == "-" || lstat(path.c_str(), &st) != 0 || !S_ISLNK(st.st_mode)) {
    return path;
  }
  // /dev/stdout, /dev/fd/1, /proc/self/fd/1: standard output itself, written
  // as "-" is. Its file, resolved, would be replaced by a rename: `-o
  // /dev/stdout >> log` lost log's earlier lines, and whatever the shell
  // wrote to it afterwards went to the unlinked file.
  if (NamesDescriptor(path, STDOUT_FILENO)) return std::string("-");
  char buffer[PATH_MAX];
  if (realpath(path.c_str(), buffer) == nullptr) {
    const int e = errno;
    // A link that leads to a pipe or socket through /proc's fd links
    // (/dev/stdout -> /proc/self/fd/1 -> "pipe:[N]") has no name to resolve
    // to, but the file exists: it is written, not replaced, as a FIFO given
    // by its own name is.
    if (stat(path.c_str(), &st) == 0 &&
        (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode))) {
      return path;
    }
    errno = e;
    return absl::InvalidArgumentError(absl::StrCat(
        what, path, ": a symbolic link to a missing file or a loop (",
        std::strerror(errno), "); give the target's path"));
  }
  return std::string(buffer);
}

int RemoveStaleTemporaries(const std::string& path) {
  const std::string dir = DirName(path);
  const std::string prefix = BaseName(path) + ".tmp-";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return 0;
  std::vector<std::string> victims;
  while (struct dirent* e = readdir(d)) {
    absl::string_view name(e->d_name);
    if (!absl::StartsWith(name, prefix)) continue;
    // "<pid>-<8 hex>" exactly: nothing else of the user's is touched.
    absl::string_view rest = name.substr(prefix.size());
    const size_t dash = rest.find('-');
    if (dash == absl::string_view::npos || rest.size() != dash + 9) continue;
    const absl::string_view hex = rest.substr(dash + 1);
    if (!std::all_of(hex.begin(), hex.end(), [](char c) {
          return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
        })) {
      continue;
    }
    int64_t pid = 0;
    if (!absl::SimpleAtoi(rest.substr(0, dash), &pid) || pid <= 0) continue;
    if (ProcessMayBeRunning(pid)) continue;
    victims.push_back(dir + "/" + std::string(name));
  }
  closedir(d);
  int removed = 0;
  for (const std::string& v : victims) {
    if (unlink(v.c_str()) == 0) ++removed;
  }
  return removed;
}

std::string PublicationTemporaryPath(const std::string& path) {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) ^ rd();
  return absl::StrFormat("%s.tmp.%d.%016x", path, getpid(), r);
}

std::string NewTemporaryPath(const std::string& path) {
  RemoveStaleTemporaries(path);
  return FileTemporaryName(path);
}

}  // namespace coppelius
