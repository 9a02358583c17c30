#include "common/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <signal.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <iostream>
#include <new>
#include <optional>
#include <sstream>
#include <thread>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/as_nobody.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

std::string TestDir() {
  const char* d = std::getenv("TEST_TMPDIR");
  return d ? d : "/tmp";
}

int CountEntries(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name) != "." && std::string(e->d_name) != "..") ++n;
  }
  closedir(d);
  return n;
}

// What a killed writer of the same path left is removed; a live writer's
// temporary and files that only look alike are kept.
TEST(WriteFileAtomically, RemovesTemporariesOfKilledWriters) {
  std::string dir = TestDir() + "/stale";
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/out.u32";
  const pid_t child = fork();  // exits at once: its pid is then unused
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(waitpid(child, nullptr, 0), child);
  const std::string dead = path + ".tmp-" + std::to_string(child) + "-0badf00d";
  const std::string alive = path + ".tmp-" + std::to_string(getpid()) + "-12345678";
  const std::string notes = path + ".tmp-" + std::to_string(child) + "-notes";
  const std::string other = dir + "/other.u32.tmp-" + std::to_string(child) + "-0badf00d";
  for (const std::string& f : {dead, alive, notes, other}) {
    ASSERT_TRUE(WriteFileAtomically(f, "x").ok());
  }
  ASSERT_TRUE(WriteFileAtomically(path, "ids").ok());
  EXPECT_EQ(access(dead.c_str(), F_OK), -1);
  EXPECT_EQ(access(alive.c_str(), F_OK), 0);
  EXPECT_EQ(access(notes.c_str(), F_OK), 0);
  EXPECT_EQ(access(other.c_str(), F_OK), 0);
  EXPECT_EQ(*ReadFile(path), "ids");
}

TEST(WriteFileAtomically, WritesAndReplacesLeavingNoTemporary) {
  std::string dir = TestDir() + "/atomic";
  mkdir(dir.c_str(), 0755);
  std::string path = dir + "/out.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "first").ok());
  ASSERT_TRUE(WriteFileAtomically(path, "second, longer").ok());
  auto read = ReadFile(path);
  ASSERT_TRUE(read.ok());
  EXPECT_EQ(*read, "second, longer");
  EXPECT_EQ(CountEntries(dir), 1);
}

// before_replace runs once, with the temporary complete and `path` still
// the old file; its error is returned, the temporary removed and the old
// file kept; it is not run for a FIFO, which is written, not replaced.
TEST(WriteFileAtomically, BeforeReplaceRunsLastAndItsErrorKeepsTheOldFile) {
  std::string dir = TestDir() + "/before_replace";
  mkdir(dir.c_str(), 0755);
  const std::string path = dir + "/out.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "old").ok());
  int calls = 0;
  absl::Status s = WriteFileAtomically(path, "new", [&](const std::string& t) {
    ++calls;
    EXPECT_EQ(t, path);
    EXPECT_EQ(*ReadFile(path), "old");
    EXPECT_EQ(CountEntries(dir), 2);  // the old file and the temporary
    return absl::FailedPreconditionError("refused at the last moment");
  });
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s, absl::FailedPreconditionError("refused at the last moment"));
  EXPECT_EQ(*ReadFile(path), "old");
  EXPECT_EQ(CountEntries(dir), 1);
  s = WriteFileAtomically(path, "new", [&](const std::string&) {
    ++calls;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(*ReadFile(path), "new");
  // Through a symbolic link the check is given the file the rename
  // replaces, the link's target.
  const std::string link = dir + "/link";
  ASSERT_EQ(symlink(path.c_str(), link.c_str()), 0);
  std::string checked;
  s = WriteFileAtomically(link, "newer", [&](const std::string& t) {
    checked = t;
    return absl::OkStatus();
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(checked, path);
  EXPECT_EQ(*ReadFile(path), "newer");
  unlink(link.c_str());
  const std::string fifo = dir + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  const int reader = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(reader, 0);
  s = WriteFileAtomically(fifo, "x", [&](const std::string&) {
    ++calls;
    return absl::InternalError("not for a FIFO");
  });
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 2);
  close(reader);
}

// A path that cannot name a file is the caller's argument's fault
// (InvalidArgument), not the program's (Internal).
TEST(ErrnoStatus, CodesByErrno) {
  const struct {
    int errno_value;
    absl::StatusCode code;
  } cases[] = {{ENOENT, absl::StatusCode::kNotFound},
               {ENOSPC, absl::StatusCode::kResourceExhausted},
               {EDQUOT, absl::StatusCode::kResourceExhausted},
               {EACCES, absl::StatusCode::kPermissionDenied},
               {EPERM, absl::StatusCode::kPermissionDenied},
               {EISDIR, absl::StatusCode::kInvalidArgument},
               {ELOOP, absl::StatusCode::kInvalidArgument},
               {ENOTDIR, absl::StatusCode::kInvalidArgument},
               {ENAMETOOLONG, absl::StatusCode::kInvalidArgument},
               {EIO, absl::StatusCode::kInternal}};
  for (const auto& c : cases) {
    const absl::Status s = ErrnoStatus(c.errno_value, "opening", "/x");
    EXPECT_EQ(s.code(), c.code) << s;
    EXPECT_EQ(s.message(),
              absl::StrCat("opening /x: ", std::strerror(c.errno_value)));
  }
  // A symbolic link loop, read.
  const std::string loop = TestDir() + "/loop";
  ASSERT_EQ(symlink(loop.c_str(), loop.c_str()), 0);
  const auto read = ReadFile(loop);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument)
      << read.status();
}

TEST(ReadFile, MissingPathIsNotFoundNamingThePath) {
  auto read = ReadFile(TestDir() + "/no/such/file");
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(read.status().message().find("no/such/file"), std::string::npos);
}

TEST(WriteFileAtomically, UnwritableDirectoryFailsAndLeavesOldFile) {
  EXPECT_FALSE(WriteFileAtomically(TestDir() + "/missing-dir/x", "a").ok());
}

// The error names the path asked for first, not only its temporary.
TEST(WriteFileAtomically, MissingDirectoryErrorNamesThePath) {
  const std::string path = TestDir() + "/missing-dir/x.tiktoken";
  const absl::Status s = WriteFileAtomically(path, "a");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message().rfind("writing " + path + ": ", 0), 0u) << s;
}

// CloseStandardOutput, in children whose fd 1 is a file, closed, or
// /dev/full: what std::cout and printf buffered reaches the file, in order,
// before the close; a close that fails and a flush that fails are reported
// by name; fd 1 is /dev/null afterwards.
TEST(CloseStandardOutput, FlushesClosesAndReportsFailures) {
  const std::string path = TestDir() + "/stdout-file";
  // Runs `body` in a child and returns its exit code (−1 if it did not exit).
  auto in_child = [](const std::function<int()>& body) {
    std::cout.flush();
    std::fflush(stdout);
    const pid_t child = fork();
    if (child == 0) _exit(body());
    int status = 0;
    if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status)) {
      return -1;
    }
    return WEXITSTATUS(status);
  };
  EXPECT_EQ(in_child([&] {
              const int fd = open(path.c_str(),
                                  O_WRONLY | O_CREAT | O_TRUNC, 0644);
              if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) return 10;
              close(fd);
              std::cout << "cout;";
              std::printf("printf;");
              if (!CloseStandardOutput().ok()) return 11;
              struct stat out, null;
              if (fstat(STDOUT_FILENO, &out) != 0 ||
                  stat("/dev/null", &null) != 0 || out.st_rdev != null.st_rdev) {
                return 12;  // fd 1 is not /dev/null afterwards
              }
              return 0;
            }),
            0);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(text.str(), "cout;printf;");
  // A close that fails (fd 1 not open): "closing <stdout>: ...".
  EXPECT_EQ(in_child([] {
              close(STDOUT_FILENO);
              const absl::Status s = CloseStandardOutput();
              return !s.ok() && s.message() == "closing <stdout>: " +
                                                   std::string(strerror(EBADF))
                         ? 0
                         : 20;
            }),
            0);
  // A flush that fails (/dev/full): "writing <stdout>: ...", as
  // ResourceExhausted (ENOSPC).
  EXPECT_EQ(in_child([] {
              const int fd = open("/dev/full", O_WRONLY);
              if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) return 30;
              close(fd);
              std::printf("lost");
              const absl::Status s = CloseStandardOutput();
              return s.code() == absl::StatusCode::kResourceExhausted &&
                             absl::StartsWith(s.message(), "writing <stdout>: ")
                         ? 0
                         : 31;
            }),
            0);
}

// A child registers two temporaries, unregisters one and is interrupted:
// the registered one is removed, the other kept, and the child ends by the
// signal (its default action, after the cleanup).
TEST(InterruptCleanup, SignalRemovesRegisteredTemporariesAndKills) {
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string armed = TestDir() + "/armed.tmp-1-00000000";
    const std::string kept = TestDir() + "/kept.tmp-1-00000000";
    ASSERT_TRUE(WriteFileAtomically(armed, "a").ok());
    ASSERT_TRUE(WriteFileAtomically(kept, "k").ok());
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      InstallInterruptCleanup();
      RemoveOnInterrupt(armed);
      RemoveOnInterrupt(kept);
      KeepOnInterrupt(kept);
      raise(signal_number);
      _exit(0);  // not reached: the signal ends the process
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == signal_number)
        << "signal " << signal_number << ", status " << status;
    struct stat st;
    EXPECT_NE(stat(armed.c_str(), &st), 0) << "registered temporary left";
    EXPECT_EQ(stat(kept.c_str(), &st), 0) << "unregistered file removed";
    unlink(kept.c_str());
  }
}

// CopyStream: bytes copied exactly; /dev/null is an empty stream; an
// endless character device and a stream over the limit are refused by name
// without reading them into memory.
TEST(CopyStream, CopiesPipesAndRefusesDevicesAndOversizedStreams) {
  const std::string src = TestDir() + "/stream-src";
  std::string data(200000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 7);
  ASSERT_TRUE(WriteFileAtomically(src, data).ok());
  const std::string dst = TestDir() + "/stream-dst";
  auto copy = [&](const std::string& path, uint64_t max_bytes) {
    const int fd = open(dst.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    EXPECT_GE(fd, 0);
    const absl::Status s = CopyStream(path, fd, dst, max_bytes);
    close(fd);
    return s;
  };
  ASSERT_TRUE(copy(src, data.size()).ok());
  auto back = ReadFile(dst);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(*back, data);
  ASSERT_TRUE(copy("/dev/null", 10).ok());
  EXPECT_EQ(ReadFile(dst)->size(), 0u);
  absl::Status s = copy("/dev/zero", 1 << 20);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(),
            "/dev/zero: is a character device (such as /dev/zero or a "
            "terminal), expected a regular file or a pipe");
  s = copy(src, data.size() - 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), src + ": more than 199999 bytes from a stream; "
                               "expected at most that (give a larger file "
                               "as a path)");
  s = copy(TestDir() + "/no-such-stream", 10);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
}

// A regular file cut short while it is read (`cp` over it rewrites it in
// place) is DataLoss naming it, where the read ended and its size when
// opened: ReadFile and CopyStream returned its first bytes as the whole
// file, so `tokenize encode` wrote the ids of a prefix with exit 0. Made
// deterministic by a pipe: the copy's second write blocks until the reader
// thread, which truncates the source first, drains it.
TEST(CopyStream, FileThatShrinksWhileReadIsDataLoss) {
  const std::string src = TestDir() + "/shrinking-src";
  ASSERT_TRUE(WriteFileAtomically(src, std::string(1 << 20, 'a')).ok());
  int pipe_fds[2];
  ASSERT_EQ(pipe(pipe_fds), 0);
  std::thread reader([&] {
    char buffer[1 << 16];
    const ssize_t first = read(pipe_fds[0], buffer, 1);
    EXPECT_EQ(first, 1);
    EXPECT_EQ(truncate(src.c_str(), 0), 0);
    while (read(pipe_fds[0], buffer, sizeof(buffer)) > 0) {
    }
  });
  const absl::Status s = CopyStream(src, pipe_fds[1], "<pipe>", 1 << 30);
  close(pipe_fds[1]);
  reader.join();
  close(pipe_fds[0]);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(std::string(s.message()),
              ::testing::MatchesRegex(
                  ".*/shrinking-src: offset [0-9]+: file shrank while being "
                  "read: it ends here, expected 1048576 bytes \\(its size "
                  "when opened\\)"));
  // A file read whole, and one whose size says more than it holds but did
  // not change (sysfs), read as before.
  ASSERT_TRUE(WriteFileAtomically(src, "abc").ok());
  EXPECT_EQ(*ReadFile(src), "abc");
  struct stat st;
  const char* sysfs = "/sys/kernel/mm/transparent_hugepage/enabled";
  if (stat(sysfs, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
    absl::StatusOr<std::string> text = ReadFile(sysfs);
    ASSERT_TRUE(text.ok()) << text.status();
    EXPECT_LT(text->size(), static_cast<size_t>(st.st_size));
  }
}

// Limits this process's address space to what it maps now plus `extra`
// bytes (RLIMIT_AS, as `ulimit -v` does), for a death test's child.
void LimitAddressSpace(uint64_t extra) {
  std::ifstream statm("/proc/self/statm");
  uint64_t pages = 0;
  statm >> pages;
  const rlim_t limit = pages * sysconf(_SC_PAGESIZE) + extra;
  const struct rlimit r = {limit, limit};
  setrlimit(RLIMIT_AS, &r);
}

// A file larger than the memory available (here a sparse 3 GiB file under
// a 256 MiB address-space limit) is one error naming it and its size, even
// under a new-handler that ends the process (the binaries' ExitOnOutOfMemory,
// which printed "out of memory" without the path): ResourceExhausted, not
// an abort. A stream is named with how far it got.
TEST(ReadFileDeathTest, FileLargerThanMemoryIsResourceExhaustedNamingIt) {
  const std::string big = TestDir() + "/read-too-big";
  const int fd = open(big.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, off_t{3} << 30), 0);
  close(fd);
  EXPECT_EXIT(
      {
        std::set_new_handler([] { _exit(3); });
        LimitAddressSpace(uint64_t{256} << 20);
        const absl::StatusOr<std::string> r = ReadFile(big);
        fprintf(stderr, "%s\n", r.status().ToString().c_str());
        _exit(r.status().code() == absl::StatusCode::kResourceExhausted ? 0
                                                                        : 4);
      },
      testing::ExitedWithCode(0),
      "^RESOURCE_EXHAUSTED: .*/read-too-big: 3221225472 bytes do not fit in "
      "memory \\(allocation failed\\); expected less input or more memory "
      "\\(ulimit -v, RAM\\)\n$");
  EXPECT_EXIT(
      {
        std::set_new_handler([] { _exit(3); });
        const int in = open(big.c_str(), O_RDONLY);
        int pipe_fds[2];
        if (in < 0 || pipe(pipe_fds) != 0) _exit(5);
        if (fork() == 0) {  // the writer: the file's bytes into the pipe
          close(pipe_fds[0]);
          char buffer[1 << 16];
          ssize_t n;
          while ((n = read(in, buffer, sizeof(buffer))) > 0) {
            if (write(pipe_fds[1], buffer, n) != n) break;
          }
          _exit(0);
        }
        close(pipe_fds[1]);
        dup2(pipe_fds[0], STDIN_FILENO);
        LimitAddressSpace(uint64_t{256} << 20);
        const absl::StatusOr<std::string> r = ReadFile("-");
        fprintf(stderr, "%s\n", r.status().ToString().c_str());
        _exit(r.status().code() == absl::StatusCode::kResourceExhausted ? 0
                                                                        : 4);
      },
      testing::ExitedWithCode(0),
      "^RESOURCE_EXHAUSTED: -: more than [0-9]+ bytes from a stream do not "
      "fit in memory \\(allocation failed\\)");
  unlink(big.c_str());
}

// ReadFile("-"): standard input on /dev/zero (no end, not a terminal) is
// refused before anything is read, as the device's name is; on /dev/null it
// reads as empty; on a regular file it reads the file.
TEST(ReadFile, RefusesANonTerminalCharacterDeviceOnStandardInput) {
  const int saved = dup(STDIN_FILENO);
  ASSERT_GE(saved, 0);
  auto read_with_stdin = [&](const char* path) {
    const int fd = open(path, O_RDONLY);
    EXPECT_GE(fd, 0) << path;
    EXPECT_EQ(dup2(fd, STDIN_FILENO), STDIN_FILENO);
    close(fd);
    absl::StatusOr<std::string> r = ReadFile("-");
    dup2(saved, STDIN_FILENO);
    return r;
  };
  absl::StatusOr<std::string> r = read_with_stdin("/dev/zero");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "-: standard input is a character device (such as /dev/zero) and "
            "not a terminal, expected a file, a pipe or a terminal");
  r = read_with_stdin("/dev/null");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "");
  const std::string file = TestDir() + "/stdin-file";
  ASSERT_TRUE(WriteFileAtomically(file, "text on standard input").ok());
  r = read_with_stdin(file.c_str());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "text on standard input");
  close(saved);
}

// ReadFile: a named character device other than /dev/null is refused
// before it is read (it was read until memory ran out); /dev/null is empty;
// a stream (here a FIFO) is read up to the limit and refused by name past
// it; a regular file has no such limit.
TEST(ReadFile, RefusesCharacterDevicesAndOversizedStreams) {
  absl::StatusOr<std::string> r = ReadFile("/dev/zero");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            "/dev/zero: is a character device (such as /dev/zero or a "
            "terminal), expected a regular file or a pipe");
  r = ReadFile("/dev/null");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, "");

  const std::string fifo = TestDir() + "/read-fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto feed = [&](size_t n) {
    return std::thread([fifo, n] {
      const int fd = open(fifo.c_str(), O_WRONLY);
      if (fd < 0) return;
      const std::string bytes(n, 'x');
      (void)!write(fd, bytes.data(), bytes.size());
      close(fd);
    });
  };
  std::thread writer = feed(1000);
  r = ReadFile(fifo, 1000);
  writer.join();
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 1000u);
  writer = feed(1001);
  r = ReadFile(fifo, 1000);
  writer.join();
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(),
            fifo + ": more than 1000 bytes from a stream; expected at most "
                   "that (give a larger file as a path)");
  const std::string file = TestDir() + "/read-file";
  ASSERT_TRUE(WriteFileAtomically(file, std::string(2000, 'y')).ok());
  r = ReadFile(file, 1000);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 2000u);
}

// Standard input by any name: with a pipe on fd 0, "-", /dev/stdin,
// /dev/fd/0 and /proc/self/fd/0 all read it, and two of them are a usage
// error; with a regular file on fd 0, only "-" does (its other names open
// it afresh).
TEST(CheckStandardInputReadOnce, EveryNameOfAPipeOnStandardInput) {
  const int saved = dup(STDIN_FILENO);
  ASSERT_GE(saved, 0);
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(dup2(fds[0], STDIN_FILENO), STDIN_FILENO);
  for (const char* name : {"-", "/dev/stdin", "/dev/fd/0", "/proc/self/fd/0"}) {
    EXPECT_TRUE(ReadsStandardInput(name)) << name;
  }
  EXPECT_FALSE(ReadsStandardInput("/dev/null"));
  EXPECT_FALSE(ReadsStandardInput(""));
  absl::Status s = CheckStandardInputReadOnce(
      {{"--vocab=", "-"}, {"--source=", ""}, {"input ", "/dev/stdin"}});
  EXPECT_TRUE(IsUsageError(s)) << s;
  EXPECT_EQ(s.message(),
            "--vocab=- and input /dev/stdin: both read standard input, which "
            "can be read once; give one of them as a file");
  EXPECT_TRUE(CheckStandardInputReadOnce({{"", "/dev/fd/0"}, {"", "/dev/null"}})
                  .ok());

  const std::string file = TestDir() + "/stdin-file";
  ASSERT_TRUE(WriteFileAtomically(file, "bytes").ok());
  const int file_fd = open(file.c_str(), O_RDONLY);
  ASSERT_GE(file_fd, 0);
  ASSERT_EQ(dup2(file_fd, STDIN_FILENO), STDIN_FILENO);
  EXPECT_TRUE(ReadsStandardInput("-"));
  EXPECT_FALSE(ReadsStandardInput("/dev/stdin"));
  EXPECT_TRUE(CheckStandardInputReadOnce({{"", "-"}, {"", "/dev/stdin"}}).ok());
  EXPECT_TRUE(IsUsageError(CheckStandardInputReadOnce({{"", "-"}, {"", "-"}})));

  dup2(saved, STDIN_FILENO);
  for (int fd : {saved, fds[0], fds[1], file_fd}) close(fd);
}

// nohup(1) ignores SIGHUP before exec: the cleanup must not turn an
// ignored signal back into one that ends the process.
// A closed standard input (`tool /dev/stdin <&-`), which
// ProtectStandardStreams reopened on /dev/null, is refused by every name of
// descriptor 0 as "-" is, naming the path: /dev/stdin read as /dev/null, so
// `tokenize encode --vocab=V /dev/stdin -o OUT <&-` wrote an empty OUT and
// exited 0. /dev/null itself, and a link to it, still read as empty. Each
// case runs in a child (ProtectStandardStreams's finding is process-wide).
TEST(ReadFileDeathTest, ClosedStandardInputIsRefusedByEveryNameOfIt) {
  const std::string link = TestDir() + "/stdin-link";
  unlink(link.c_str());
  ASSERT_EQ(symlink("/dev/stdin", link.c_str()), 0);
  const std::string null_link = TestDir() + "/null-link";
  unlink(null_link.c_str());
  ASSERT_EQ(symlink("/dev/null", null_link.c_str()), 0);
  for (const std::string& name :
       {std::string("-"), std::string("/dev/stdin"), std::string("/dev/fd/0"),
        std::string("/proc/self/fd/0"), std::string("/proc/PID/fd/0"),
        link}) {
    // /proc/PID/fd/0: the pid of the child that reads it.
    const auto path = [&name] {
      return name == "/proc/PID/fd/0" ? absl::StrCat("/proc/", getpid(), "/fd/0")
                                      : name;
    };
    EXPECT_EXIT(
        {
          close(STDIN_FILENO);
          ProtectStandardStreams();
          const absl::StatusOr<std::string> read = ReadFile(path());
          std::fprintf(stderr, "%s\n", read.status().ToString().c_str());
          std::_Exit(read.ok() ? 0 : 3);
        },
        ::testing::ExitedWithCode(3),
        absl::StrCat("FAILED_PRECONDITION: ",
                     name == "/proc/PID/fd/0" ? "/proc/[0-9]+/fd/0" : name,
                     ": standard input is closed"))
        << name;
  }
  for (const std::string& name : {std::string("/dev/null"), null_link}) {
    EXPECT_EXIT(
        {
          close(STDIN_FILENO);
          ProtectStandardStreams();
          const absl::StatusOr<std::string> read = ReadFile(name);
          std::_Exit(read.ok() && read->empty() ? 0 : 3);
        },
        ::testing::ExitedWithCode(0), "")
        << name;
  }
}

TEST(InterruptCleanup, IgnoredSignalsStayIgnored) {
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP}) {
    const std::string armed = TestDir() + "/ignored.tmp-1-00000000";
    ASSERT_TRUE(WriteFileAtomically(armed, "a").ok());
    const pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
      signal(signal_number, SIG_IGN);
      InstallInterruptCleanup();
      RemoveOnInterrupt(armed);
      raise(signal_number);
      _exit(7);  // reached: the signal is ignored
    }
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 7)
        << "signal " << signal_number << ", status " << status;
    struct stat st;
    EXPECT_EQ(stat(armed.c_str(), &st), 0) << "temporary removed";
    unlink(armed.c_str());
  }
}

TEST(CheckOutputPathUsable, DirectoriesAndMissingParentsAreRefused) {
  EXPECT_TRUE(CheckOutputPathUsable("-", "-o").ok());
  EXPECT_TRUE(CheckOutputPathUsable(TestDir() + "/new-file", "-o").ok());
  EXPECT_TRUE(CheckOutputPathUsable("/dev/null", "-o").ok());  // written
  absl::Status s = CheckOutputPathUsable(TestDir(), "-o");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "-o " + TestDir() + ": is a directory, expected a file path");
  s = CheckOutputPathUsable(TestDir() + "/no-such-dir/x", "-o");
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "-o " + TestDir() + "/no-such-dir/x: directory " +
                             TestDir() + "/no-such-dir does not exist");
  const std::string file = TestDir() + "/plain-file";
  ASSERT_TRUE(WriteFileAtomically(file, "x").ok());
  s = CheckOutputPathUsable(file + "/x", "--result");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--result " + file + "/x: " + file + " is not a directory");
}

// A name that fits the directory but whose temporary ("NAME.tmp-PID-<8
// hex>", NewTemporaryPath's) does not is refused up front, not after the
// work.
TEST(CheckOutputPathUsable, NamesWhoseTemporaryIsTooLongAreRefused) {
  const std::string fits = TestDir() + "/" + std::string(200, 'y');
  EXPECT_TRUE(CheckOutputPathUsable(fits, "-o").ok());
  const std::string long_name = TestDir() + "/" + std::string(245, 'y');
  absl::Status s = CheckOutputPathUsable(long_name, "-o");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), testing::HasSubstr("too long a name for its "
                                              "temporary"));
  EXPECT_THAT(s.message(), testing::HasSubstr("the directory allows 255"));
  // The probe leaves nothing behind.
  ASSERT_TRUE(WriteFileAtomically(fits, "x").ok());
  EXPECT_TRUE(CheckOutputPathUsable(fits, "-o").ok());
  DIR* d = opendir(TestDir().c_str());
  ASSERT_NE(d, nullptr);
  int temporaries = 0;
  while (dirent* e = readdir(d)) {
    if (std::string(e->d_name).find(".tmp.") != std::string::npos) ++temporaries;
  }
  closedir(d);
  EXPECT_EQ(temporaries, 0);
}

TEST(PreadAll, ShortFileIsDataLossWithOffset) {
  std::string path = TestDir() + "/short.bin";
  ASSERT_TRUE(WriteFileAtomically(path, "abc").ok());
  int fd = open(path.c_str(), O_RDONLY);
  char buf[8];
  absl::Status s = PreadAll(fd, buf, 8, 0, path);
  close(fd);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(s.message().find("offset 3"), std::string::npos) << s;
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

TEST(WriteFileAtomically, WritesIntoAFifoInsteadOfReplacingIt) {
  std::string fifo = TestDir() + "/out.fifo";
  unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0644), 0);
  std::string received;
  std::thread reader([&] {
    int fd = open(fifo.c_str(), O_RDONLY);
    char buf[64];
    ssize_t n;
    while ((n = read(fd, buf, sizeof(buf))) > 0) received.append(buf, n);
    close(fd);
  });
  ASSERT_TRUE(WriteFileAtomically(fifo, "through the pipe").ok());
  reader.join();
  EXPECT_EQ(received, "through the pipe");
  struct stat st;
  ASSERT_EQ(stat(fifo.c_str(), &st), 0);
  EXPECT_TRUE(S_ISFIFO(st.st_mode));
}

TEST(CheckRegularFileOrAbsent, RefusesDevicesAndDirectories) {
  EXPECT_TRUE(CheckRegularFileOrAbsent(TestDir() + "/absent", "--o").ok());
  absl::Status s = CheckRegularFileOrAbsent("/dev/null", "--checkpoint-out");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--checkpoint-out /dev/null"), std::string::npos) << s;
  EXPECT_EQ(CheckRegularFileOrAbsent(TestDir(), "--o").code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(SameFile, HardLinksAreTheSameFileAndMissingPathsAreNot) {
  std::string a = TestDir() + "/same_a", b = TestDir() + "/same_b";
  ASSERT_TRUE(WriteFileAtomically(a, "x").ok());
  unlink(b.c_str());
  EXPECT_FALSE(SameFile(a, b));
  ASSERT_EQ(link(a.c_str(), b.c_str()), 0);
  EXPECT_TRUE(SameFile(a, b));
  EXPECT_TRUE(SameFile(a, a));
  EXPECT_FALSE(SameFile(a, TestDir() + "/same_missing"));
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

TEST(WriteFileAtomically, FollowsASymbolicLink) {
  std::string target = TestDir() + "/link_target", link_path = TestDir() + "/link";
  ASSERT_TRUE(WriteFileAtomically(target, "old").ok());
  unlink(link_path.c_str());
  ASSERT_EQ(symlink(target.c_str(), link_path.c_str()), 0);
  ASSERT_TRUE(WriteFileAtomically(link_path, "new").ok());
  struct stat st;
  ASSERT_EQ(lstat(link_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_EQ(*ReadFile(target), "new");
}

// A link to nothing is refused, before any work (CheckOutputPathUsable) and
// when written: it stays a link, and nothing is created at either name.
TEST(WriteFileAtomically, RefusesALinkToNothing) {
  const std::string target = TestDir() + "/dangling_target";
  const std::string link_path = TestDir() + "/dangling_link";
  unlink(target.c_str());
  unlink(link_path.c_str());
  ASSERT_EQ(symlink(target.c_str(), link_path.c_str()), 0);
  absl::Status s = CheckOutputPathUsable(link_path, "-o");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "-o " + link_path +
                             ": a symbolic link to a missing file or a loop "
                             "(No such file or directory); give the target's "
                             "path");
  s = WriteFileAtomically(link_path, "data");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  struct stat st;
  ASSERT_EQ(lstat(link_path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  EXPECT_NE(lstat(target.c_str(), &st), 0);
}

// /dev/stdout on a pipe (/proc/self/fd/1 -> "pipe:[N]") is a link realpath
// cannot resolve, yet it leads to a pipe that exists: it is written, as a
// FIFO named by its own path is (it was refused as "a symbolic link to a
// missing file or a loop", so `tokenize decode ... -o /dev/stdout | less`
// failed).
TEST(WriteFileAtomically, WritesAPipeReachedThroughAFdLink) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string path = absl::StrCat("/dev/fd/", fds[1]);
  EXPECT_TRUE(CheckOutputPathUsable(path, "-o").ok());
  absl::StatusOr<std::string> target = OutputTarget(path, "-o ");
  ASSERT_TRUE(target.ok()) << target.status();
  EXPECT_EQ(*target, path);
  const absl::Status s = WriteFileAtomically(path, "data");
  EXPECT_TRUE(s.ok()) << s;
  close(fds[1]);
  char buffer[16] = {};
  EXPECT_EQ(read(fds[0], buffer, sizeof(buffer)), 4);
  EXPECT_EQ(std::string(buffer), "data");
  close(fds[0]);
}

// /dev/stdout (and /dev/fd/1, /proc/self/fd/1) is standard output itself,
// written as "-" is. Resolved to the file standard output is open on, it
// was replaced by a rename: `tokenize decode ... -o /dev/stdout >> log`
// lost log's earlier lines (exit 0), and what the shell wrote afterwards
// went to the unlinked file.
TEST(WriteFileAtomically, StandardOutputByNameIsWrittenNotReplaced) {
  for (const char* name : {"/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"}) {
    absl::StatusOr<std::string> target = OutputTarget(name, "-o ");
    ASSERT_TRUE(target.ok()) << target.status();
    EXPECT_EQ(*target, "-") << name;
    EXPECT_TRUE(CheckOutputPathUsable(name, "-o").ok()) << name;
  }
  const std::string log = TestDir() + "/stdout_log";
  ASSERT_TRUE(WriteFileAtomically(log, "line one\n").ok());
  struct stat before;
  ASSERT_EQ(stat(log.c_str(), &before), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // `>> log`
    const int fd = open(log.c_str(), O_WRONLY | O_APPEND);
    if (fd < 0 || dup2(fd, STDOUT_FILENO) < 0) _exit(2);
    _exit(WriteFileAtomically("/dev/stdout", "two\n").ok() ? 0 : 1);
  }
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFEXITED(wstatus));
  EXPECT_EQ(WEXITSTATUS(wstatus), 0);
  EXPECT_EQ(*ReadFile(log), "line one\ntwo\n");
  struct stat after;
  ASSERT_EQ(stat(log.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // the same file, not a new one
}

// The tools' temporaries ("NAME.tmp-PID-<8 hex>") are 8 bytes shorter than
// the checkpoint publisher's ("NAME.tmp.PID.<16 hex>"): with a pid of 1 to 7
// digits a 233-byte name takes the first and not the second, and each
// probe tries its own (CheckOutputPathUsable the first).
TEST(CheckOutputPathUsable, ProbesTheTemporaryItsWriterMakes) {
  const std::string name = TestDir() + "/" + std::string(233, 'e');
  EXPECT_TRUE(CheckOutputPathUsable(name, "-o").ok());
  EXPECT_TRUE(
      ProbeTemporaryInDirectory(name, "-o", TemporaryNaming::kFile).ok());
  const absl::Status s = ProbeTemporaryInDirectory(name, "--checkpoint-out");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), testing::HasSubstr("too long a name for its "
                                              "temporary"));
  // And the tools' writer publishes such a name.
  EXPECT_TRUE(WriteFileAtomically(name, "x").ok());
  unlink(name.c_str());
}

// Whether a name is taken does not depend on the pid: the temporaries are
// judged with a 7-digit process id. The tools' "NAME.tmp-PID-<8 hex>" adds
// 21 bytes then, the publisher's "NAME.tmp.PID.<16 hex>" 29: at a limit of
// 255, names of 234 and 226 bytes are the longest taken, whatever the pid.
TEST(CheckOutputPathUsable, TheLongestNameTakenDoesNotDependOnThePid) {
  ASSERT_EQ(pathconf(TestDir().c_str(), _PC_NAME_MAX), 255);
  const std::string dir = TestDir() + "/";
  EXPECT_TRUE(CheckOutputPathUsable(dir + std::string(234, 'f'), "-o").ok());
  absl::Status s = CheckOutputPathUsable(dir + std::string(235, 'f'), "-o");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), testing::HasSubstr(
                               "up to 256 bytes with a 7-digit process id; "
                               "the directory allows 255): give a name of "
                               "at most 234 bytes"));
  EXPECT_TRUE(ProbeTemporaryInDirectory(dir + std::string(226, 'p'),
                                        "--checkpoint-out")
                  .ok());
  s = ProbeTemporaryInDirectory(dir + std::string(227, 'p'),
                                "--checkpoint-out");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), testing::HasSubstr("give a name of at most 226 "
                                              "bytes"));
}

// A link's temporaries go beside its target: the target's directory is the
// one checked (here its name is too long for a temporary beside it).
TEST(CheckOutputPathUsable, ChecksALinksTarget) {
  const std::string dir = TestDir() + "/link_target_dir";
  mkdir(dir.c_str(), 0755);
  const std::string long_target = dir + "/" + std::string(245, 'z');
  ASSERT_TRUE(WriteFileAtomically(dir + "/short", "x").ok());
  ASSERT_EQ(rename((dir + "/short").c_str(), long_target.c_str()), 0);
  const std::string link_path = TestDir() + "/link_to_long";
  unlink(link_path.c_str());
  ASSERT_EQ(symlink(long_target.c_str(), link_path.c_str()), 0);
  // The link's own name is short, its target's too long for a temporary.
  absl::Status s = CheckOutputPathUsable(link_path, "-o");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(s.message(), testing::HasSubstr("too long a name for its "
                                              "temporary"));
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

TEST(DirNameAndBaseName, SplitAtTheLastSlash) {
  EXPECT_EQ(DirName("a/b/c.ckpt"), "a/b");
  EXPECT_EQ(BaseName("a/b/c.ckpt"), "c.ckpt");
  EXPECT_EQ(DirName("c.ckpt"), ".");
  EXPECT_EQ(BaseName("c.ckpt"), "c.ckpt");
  EXPECT_EQ(DirName("/c"), "/");
  EXPECT_EQ(BaseName("/c"), "c");
}

// What a report written to an FdOutputStream reaches: its descriptor, in
// order, by the flush at the latest.
TEST(FdOutputStream, WritesReachTheDescriptor) {
  const std::string path = TestDir() + "/fd_stream.txt";
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  ASSERT_GE(fd, 0);
  {
    FdOutputStream out(fd, path);
    out << "line " << 1 << "\n";
    out << std::string(200000, 'x');  // more than one buffer
    out.flush();
    EXPECT_TRUE(out.good());
    EXPECT_TRUE(out.status().ok()) << out.status();
    EXPECT_TRUE(StreamStatus(out, "the report").ok());
    out << "end";
  }  // flushed by the destructor
  close(fd);
  EXPECT_EQ(*ReadFile(path), "line 1\n" + std::string(200000, 'x') + "end");
}

// A write that fails (a full device) fails the stream, and says why: the
// name and errno's reason (std::cout's failbit says neither).
TEST(FdOutputStream, AFullDeviceIsResourceExhaustedWithErrnosReason) {
  struct stat st;
  if (stat("/dev/full", &st) != 0) GTEST_SKIP() << "no /dev/full";
  const int fd = open("/dev/full", O_WRONLY);
  ASSERT_GE(fd, 0);
  FdOutputStream out(fd, "<stdout>");
  out << "a report\n";
  out.flush();
  EXPECT_FALSE(out.good());
  EXPECT_EQ(out.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(out.status().message(),
            "writing <stdout>: No space left on device");
  const absl::Status s = StreamStatus(out, "verify: the report");
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(s.message(),
            "verify: the report: writing <stdout>: No space left on device");
  out << "more";  // stays failed, with the first reason
  out.flush();
  EXPECT_EQ(out.status().message(),
            "writing <stdout>: No space left on device");
  close(fd);
}

// Another stream that failed: no reason to give but that it failed.
TEST(StreamStatus, OtherStreamsSayOnlyThatWritingFailed) {
  std::ostringstream out;
  EXPECT_TRUE(StreamStatus(out, "the report").ok());
  out.setstate(std::ios::badbit);
  const absl::Status s = StreamStatus(out, "the report");
  EXPECT_EQ(s.code(), absl::StatusCode::kInternal);
  EXPECT_EQ(s.message(), "the report: writing failed");
}

// ReportShrunkMappings: a SIGBUS in a registered mapping (its file cut
// under it) is one line naming the file and exit 1; once unregistered, or
// in a mapping never registered, SIGBUS keeps its default action.
TEST(ReportShrunkMappingsTest, OnlyRegisteredMappingsAreReported) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const std::string path =
      std::string(getenv("TEST_TMPDIR") ? getenv("TEST_TMPDIR") : "/tmp") +
      "/mapped.bin";
  // Maps two pages of `path`, cuts the file to one, reads the second.
  auto touch_cut_page = [&](bool registered, bool unregistered) {
    ReportShrunkMappings("file_io_test");
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || ftruncate(fd, 8192) != 0) _exit(3);
    void* map = mmap(nullptr, 8192, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) _exit(4);
    if (registered) RegisterMapping(map, 8192, path);
    if (unregistered) UnregisterMapping(map);
    if (ftruncate(fd, 4096) != 0) _exit(5);
    volatile const char* bytes = static_cast<const char*>(map);
    (void)bytes[4096];
    _exit(6);
  };
  EXPECT_EXIT(touch_cut_page(true, false), ::testing::ExitedWithCode(1),
              "^file_io_test: DATA_LOSS: .*/mapped.bin: the file shrank while "
              "it was being read");
  EXPECT_EXIT(touch_cut_page(false, false), ::testing::KilledBySignal(SIGBUS),
              "");
  EXPECT_EXIT(touch_cut_page(true, true), ::testing::KilledBySignal(SIGBUS),
              "");
}

// FindUnreadableFile: only an existing, non-empty regular file that cannot
// be opened counts, with its size and reason (checked by a child that is
// not root: root opens every file).
TEST(FindUnreadableFile, OnlyANonEmptyFileItCannotOpen) {
  const std::string dir = NobodyDirectory("file_io_test");
  ASSERT_FALSE(dir.empty());
  const std::string secret = dir + "/secret", empty = dir + "/empty",
                    open_file = dir + "/open";
  std::ofstream(secret) << "12345";
  std::ofstream(empty) << "";
  std::ofstream(open_file) << "x";
  ASSERT_EQ(chmod(secret.c_str(), 0), 0);
  ASSERT_EQ(chmod(empty.c_str(), 0), 0);
  ASSERT_EQ(chmod(open_file.c_str(), 0644), 0);
  const std::string seen = RunAsNobody([&] {
    std::string out;
    for (const std::string& p :
         {secret, empty, open_file, dir, dir + "/missing"}) {
      const std::optional<UnreadableFile> u = FindUnreadableFile(p);
      out += u ? absl::StrCat(u->size, " ", u->reason, ";") : "-;";
    }
    return out;
  });
  EXPECT_EQ(seen, "5 Permission denied;-;-;-;-;");
  chmod(secret.c_str(), 0644);
  chmod(empty.c_str(), 0644);
  EXPECT_EQ(std::system(("rm -rf " + dir).c_str()), 0);
}

}  // namespace
}  // namespace coppelius
