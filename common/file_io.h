// File: common/file_io.h
//
// Small POSIX file helpers returning absl::Status with the path and offset in
// every message. `-` names stdin (ReadFile) or stdout (WriteFileAtomically
// writes straight to stdout, which has no atomicity).
//
// Errors: NotFound (missing path), InvalidArgument (directory given where a
// file is expected), DataLoss (short read), Internal/ResourceExhausted from
// errno otherwise (message includes strerror).
#ifndef COPPELIUS_COMMON_FILE_IO_H_
#define COPPELIUS_COMMON_FILE_IO_H_

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <ostream>
#include <streambuf>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace coppelius {

// Returns an absl::Status for `errno_value` with "`what` `path`: strerror".
// ENOENT -> NotFound, ENOSPC/EDQUOT -> ResourceExhausted, EACCES/EPERM ->
// PermissionDenied, EISDIR/ELOOP/ENOTDIR/ENAMETOOLONG (a path that cannot
// name a file: a directory, a symbolic link loop, a file used as a
// directory, a name too long) -> InvalidArgument, else Internal.
absl::Status ErrnoStatus(int errno_value, absl::string_view what,
                         absl::string_view path);

// For every binary's main(), before it opens any file: a standard stream
// (fd 0, 1 or 2) that the caller closed (`prog <&-`) is reopened on
// /dev/null, so that no file opened later takes its number and is read or
// written as if it were that stream; ReadFile("-") then fails
// (FailedPrecondition "standard input is closed"), as does ReadFile of any
// other name of descriptor 0 (/dev/stdin, /dev/fd/0, /proc/self/fd/0, a
// link to one: they would read the /dev/null put there), and so do WriteAll and
// WriteFileAtomically("-") to fd 1, instead of reading nothing or writing
// nowhere.
void ProtectStandardStreams();

// Interrupt cleanup. A writer registers a temporary before creating it
// (RemoveOnInterrupt; WriteFileAtomically, TokenCacheWriter, the checkpoint
// publisher and inspect's stdin spool do) and unregisters it once renamed
// or removed (KeepOnInterrupt; RemoveOnInterruptScope does both for a
// scope). After InstallInterruptCleanup (tokenize, make-cache, inspect and
// train call it first thing), SIGINT, SIGTERM and SIGHUP remove every
// registered temporary, then end the process by the same signal (default
// action), so that Ctrl-C leaves no partial file behind; a signal ignored
// when it is called (nohup(1)) stays ignored; what SIGKILL
// leaves, RemoveStaleTemporaries clears later. At most 8 temporaries at
// once, paths below PATH_MAX bytes; beyond that, best effort.
void InstallInterruptCleanup();
void RemoveOnInterrupt(const std::string& path);
void KeepOnInterrupt(const std::string& path);

// Unlinks every registered temporary (what an interrupt does before the
// process ends by its signal). Async-signal-safe and allocation-free: for
// handlers that end the process, such as ExitOnOutOfMemory's
// (common/status_line.h).
void RemoveRegisteredTemporaries();

// RemoveOnInterrupt(path) for the lifetime of the object: construct it
// before creating the temporary, and let it go out of scope once the file
// is renamed or removed.
class RemoveOnInterruptScope {
 public:
  explicit RemoveOnInterruptScope(std::string path) : path_(std::move(path)) {
    RemoveOnInterrupt(path_);
  }
  ~RemoveOnInterruptScope() { KeepOnInterrupt(path_); }
  RemoveOnInterruptScope(const RemoveOnInterruptScope&) = delete;
  RemoveOnInterruptScope& operator=(const RemoveOnInterruptScope&) = delete;

 private:
  std::string path_;
};

// Mapped inputs (the checkpoint reader and the token cache mmap their
// files). A mapped file that another process shrinks while it is mapped
// (`cp` over it rewrites it in place) raises SIGBUS at the first read of a
// page past its new end: the process died with "Bus error" (exit 135) and
// no line naming the file. After ReportShrunkMappings(program) (train,
// inspect and make-cache call it first thing), a SIGBUS inside a
// registered mapping removes the registered temporaries (as an interrupt
// does) and ends the process with exit 1 and the one line "<program>:
// DATA_LOSS: PATH: the file shrank while it was being read (rewritten in
// place by another process?)"; any other SIGBUS keeps its default action.
// A reader registers its mapping right after mmap(2) (RegisterMapping) and
// unregisters it before munmap(2) (UnregisterMapping). At most 8 mappings
// at once, paths below PATH_MAX bytes; beyond that, the default action.
// `program` must outlive the process (a string literal).
void ReportShrunkMappings(const char* program);

// Writes `text` (NUL-terminated) to standard error, retrying short writes,
// giving up on an error. Async-signal-safe and allocation-free: for the
// signal and out-of-memory handlers' one-line messages.
void WriteStderrSignalSafe(const char* text);
void RegisterMapping(const void* begin, size_t bytes, const std::string& path);
void UnregisterMapping(const void* begin);

// Whether ProtectStandardStreams found standard output (fd 1) closed: a
// binary that writes a report to std::cout (not through WriteAll) checks it
// before doing any work.
bool StandardOutputWasClosed();

// For every binary's main(), last, after its work succeeded: flushes
// std::cout and C stdio, then closes standard output (fd 1) and reports
// what that close returns, so that a write error the system reports only
// at close (a network file system's deferred write, a quota) fails the run
// instead of passing unseen (the practice of gnulib's close_stdout). Fd 1 is
// then /dev/null again, so no file opened later takes its number. Errors:
// "closing <stdout>: reason" or, for a flush that fails, "writing <stdout>:
// reason", with ErrnoStatus's codes; InternalError "writing <stdout>: ..."
// for a stream already in error (stdio's error flag, std::cout's state).
absl::Status CloseStandardOutput();

// The size of the file standard output writes to when that is a regular
// file (`>> FILE`: FILE's bytes so far); 0 for anything else (a terminal, a
// pipe) and for an empty file.
uint64_t StandardOutputFileBytes();

// A path through which the file standard output writes to can be read
// ("/dev/fd/1") when that is a non-empty regular file (`>> FILE`: what is
// written is appended to FILE, which a tool must examine as it examines
// `-o FILE`); "" for anything else (a terminal, a pipe, an empty file).
std::string StandardOutputFileToExamine();

// Whether process `pid` may still be running: kill(pid, 0) succeeds or
// fails with anything but ESRCH (e.g. EPERM: another user's process).
// False for pid <= 0. Leaves errno as it was (callers scan directories
// between readdir() calls). The rule by which writers' stale temporaries
// (named with their pid) are told from those of live writers.
bool ProcessMayBeRunning(int64_t pid);

// Removes the temporaries "<path>.tmp-<pid>-<8 hex digits>" (the names
// WriteFileAtomically and TokenCacheWriter give theirs) in path's directory
// whose <pid> is not a live process (ProcessMayBeRunning): what a killed
// writer of `path` left. Returns how many were removed. Best effort: errors
// are ignored. WriteFileAtomically and TokenCacheWriter::Create call it
// before creating their own temporary.
int RemoveStaleTemporaries(const std::string& path);

// A fresh temporary name for a writer of `path`: "<path>.tmp-<pid>-<8 hex
// digits>" (random), after RemoveStaleTemporaries(path) has cleared what
// killed writers left. The one place that format is made;
// RemoveStaleTemporaries is the one that parses it.
std::string NewTemporaryPath(const std::string& path);

// A fresh temporary name for a checkpoint publication of `path`:
// "<path>.tmp.<pid>.<16 hex digits>" (random). The one place that format
// is made (checkpoint/publisher.h's IsTemporaryName parses it); the longest
// temporary name of any writer here.
std::string PublicationTemporaryPath(const std::string& path);

// The most a stream (standard input, a pipe, a FIFO, the shell's `<(...)`)
// is read from: more than any checkpoint or result file of the configs here
// (692 MB for coppelius's checkpoint), a token cache of a billion tokens or
// any corpus the tools are given on a pipe. A larger input is given as a
// regular file's path. ReadFile's default and inspect's spool limit.
inline constexpr uint64_t kMaxStreamBytes = uint64_t{8} << 30;

// The one rule for what a named input may be, for every tool's readers
// (ReadFile and CopyStream apply it before reading; readers that need a
// regular file refuse more): InvalidArgument "PATH: is a character device
// (such as /dev/zero or a terminal), expected a regular file or a pipe" when
// `st` (the input's stat) is a character device other than /dev/null, which
// reads as empty. /dev/zero has no end (it was read until memory ran out), a
// terminal holds no file. Standard input ("-") is not a named input: it is
// whatever the user gives it, a terminal included, but ReadFile refuses a
// character device there that is neither /dev/null nor a terminal
// (InvalidArgument "-: standard input is a character device ...": `<
// /dev/zero` has no end either), and CopyStream any device there.
absl::Status CheckNamedInputKind(absl::string_view path,
                                 const struct stat& st);

// ReadFile's rule for standard input ("-") of stat `st`: InvalidArgument
// "-: standard input is a character device ..." for a character device
// that is neither /dev/null nor a terminal (`< /dev/zero` has no end);
// OK otherwise, a terminal included (text typed until end of file).
absl::Status CheckStandardInputKind(const struct stat& st);

// Runs `allocate`, single-threaded code whose memory grows with an input (a
// file's bytes, its ids), so that memory running out there is an error
// naming that input rather than the end of the process: while it runs, the
// new-handler (ExitOnOutOfMemory's, common/status_line.h) is set aside, so
// that a failed allocation throws, and std::bad_alloc or std::length_error
// becomes ResourceExhausted "WHAT do not fit in memory (REASON); expected
// less input or more memory (ulimit -v, RAM)", WHAT what `what` returns
// then (called only on failure: it may describe how far `allocate` got).
// Another thread's failed allocation in that time would throw there too: no
// other thread may be allocating much meanwhile.
absl::Status CatchOutOfMemory(const std::function<void()>& allocate,
                              const std::function<std::string()>& what);

// Reads the whole file (or stdin for "-") into a string. A named character
// device is refused before it is opened (CheckNamedInputKind), and one on
// standard input unless it is a terminal or /dev/null. An input
// that is not a regular file (a pipe, a FIFO, "-" on either or on a
// terminal) is read up to `max_stream_bytes`: InvalidArgument "PATH: more
// than N bytes from a stream; ..." beyond that, rather than reading until
// memory runs out. An input larger than the memory available is
// ResourceExhausted "PATH: N bytes do not fit in memory (...)" (a stream:
// "PATH: more than N bytes from a stream do not fit ..."; CatchOutOfMemory).
// A regular file that ends before its size when opened and is then smaller
// (rewritten in place, `cp` over it, while it is read) is DataLoss "PATH:
// offset N: file shrank while being read: it ends here, expected SIZE bytes
// (its size when opened)", as CopyStream's, not its first N bytes.
absl::StatusOr<std::string> ReadFile(
    const std::string& path, uint64_t max_stream_bytes = kMaxStreamBytes);

// How an I/O error names the input `path`: "standard input" for "-" (a
// bare "reading -: Input/output error" does not say which input that is),
// else `path` itself.
std::string InputName(absl::string_view path);

// Whether reading `path` reads standard input's bytes: "-" always (read
// twice, the second read starts where the first ended: at the end); any
// other name (/dev/stdin, /dev/fd/0, /proc/self/fd/0, a FIFO's own path)
// when it resolves to the file standard input is (stat(path) and fstat(0):
// the same st_dev and st_ino) and that file can be read once: a pipe, a
// FIFO, a socket, a character device other than /dev/null (a terminal).
// A regular file on standard input (`< file`) is not: any name of it other
// than "-" opens it afresh and reads it from its start, so `- /dev/stdin <
// file` reads the file twice, whole, as `- file < file` does. /dev/null is
// empty however often it is read. False for "" and for a closed standard
// input (ProtectStandardStreams: reading "-" fails then).
bool ReadsStandardInput(const std::string& path);

// An input on a command line: `label` as its line names it ("--vocab=",
// "input "), then its path.
struct NamedInput {
  std::string label;
  std::string path;
};

// The one check, for every tool that takes several inputs, that standard
// input is read at most once (ReadsStandardInput): a usage error "LABEL
// PATH and LABEL PATH: both read standard input, which can be read once;
// give one of them as a file" for the first two that read it (the second
// read would see nothing). Inputs with an empty path are skipped.
absl::Status CheckStandardInputReadOnce(const std::vector<NamedInput>& inputs);

// Copies the stream `path` ("-" for stdin, a pipe, /dev/null) into the open
// file `fd` (named `fd_path` in errors) in 64 KiB pieces, so that memory
// stays constant whatever the size. InvalidArgument, naming `path`, for a
// character device other than /dev/null (CheckNamedInputKind, for "-" too)
// and for a stream of more than `max_bytes` (it stops reading there);
// FailedPrecondition for a closed stdin; errno's for I/O errors.
absl::Status CopyStream(const std::string& path, int fd,
                        absl::string_view fd_path, uint64_t max_bytes);

// write(2) loop: retries EINTR and short writes. `path` only names errors.
absl::Status WriteAll(int fd, const void* data, size_t size,
                      absl::string_view path);

// An std::ostream onto the open descriptor `fd` (not owned), for a report a
// binary writes to standard output (inspect's, to fd 1 named "<stdout>"):
// its bytes go out through WriteAll, 64 KiB at a time and at every flush
// (and when it is destroyed). The first write that fails fails the stream
// (badbit) and is kept: status() says why, naming `name` and errno's reason
// ("writing <stdout>: No space left on device"), where std::cout's state
// says only that something failed. Later output is dropped.
class FdOutputStream : public std::ostream {
 public:
  FdOutputStream(int fd, std::string name);
  ~FdOutputStream() override;
  FdOutputStream(const FdOutputStream&) = delete;
  FdOutputStream& operator=(const FdOutputStream&) = delete;

  // OK while every write succeeded.
  const absl::Status& status() const { return buffer_.status(); }

 private:
  class Buffer : public std::streambuf {
   public:
    Buffer(int fd, std::string name);
    const absl::Status& status() const { return status_; }

   protected:
    int_type overflow(int_type ch) override;
    int sync() override;

   private:
    bool Drain();  // writes what is buffered; false once a write failed
    int fd_;
    std::string name_;
    std::vector<char> bytes_;
    absl::Status status_;
  };
  Buffer buffer_;
};

// OK while `out` is good; else why it is not, with "`what`: " before it: an
// FdOutputStream's status() (its code and errno's reason), for any other
// stream InternalError "`what`: writing failed".
absl::Status StreamStatus(const std::ostream& out, absl::string_view what);

// pread(2) loop: retries EINTR; DataLoss if the file ends early.
absl::Status PreadAll(int fd, void* data, size_t size, uint64_t offset,
                      absl::string_view path);

// Reads the first `n` bytes of `path` into `head`; false when `path` is not
// a regular file of at least `n` bytes that can be opened for reading (a
// FIFO is not opened: that would block).
bool ReadFileHead(const std::string& path, void* head, size_t n);

// An existing, non-empty regular file that cannot be opened for reading:
// its size and the system's reason ("Permission denied").
struct UnreadableFile {
  uint64_t size = 0;
  std::string reason;
};

// What a tool checks before replacing a file it must first examine (is it
// a checkpoint, another run's output?): a publication by rename needs only
// the directory's permission, so a file the tool cannot read would be
// replaced unseen. nullopt when `path` can be opened for reading, or is
// missing, empty or not a regular file.
std::optional<UnreadableFile> FindUnreadableFile(const std::string& path);

// The file an output path publishes to: the target of a symbolic link
// (resolved through every link), else `path` itself ("-" included, and a
// link to a pipe or socket that has no name, /dev/fd/63 of `-o >(...)`:
// such a file is written, not replaced). A name of standard output itself
// (/dev/stdout, /dev/fd/1, /proc/self/fd/1, a link to one) is "-": written
// to descriptor 1, never a rename over the file it is open on (that lost
// what `>> FILE` had appended to).
// InvalidArgument "`what`PATH: a symbolic link to a missing file or a loop"
// for a link that leads nowhere: renaming over it would replace the link.
absl::StatusOr<std::string> OutputTarget(const std::string& path,
                                         absl::string_view what);

// Writes `contents` to `path` through a temporary in the same directory
// (NewTemporaryPath(path)),
// fsync, rename, fsync(directory); "-" writes to stdout. On error the
// temporary is removed and any previous file at `path` is untouched.
// A symbolic link is published to its target (OutputTarget); a link to
// nothing is InvalidArgument, the link left as it is.
// An existing `path` that is not a regular file (a character device such as
// /dev/null, a FIFO) is written directly, never replaced; a directory is
// InvalidArgument.
// `before_replace`, when given, runs after the temporary is complete and
// fsynced and right before the rename that replaces what is at `path`
// (not for "-" or a device or FIFO, which are written, not replaced), with
// the path the rename replaces (`path`, or a symbolic link's target): a
// caller's checks of its output made again, so that a file that appeared
// there while the contents were computed (a checkpoint a run published
// meanwhile) is judged as one there at the start would be. Its error is
// returned as it is, the temporary removed and the file untouched.
using BeforeReplace = std::function<absl::Status(const std::string& target)>;
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::string_view contents,
                                 const BeforeReplace& before_replace = {});

// True when `a` and `b` name the same existing file (same device and
// inode); false when either does not exist.
bool SameFile(const std::string& a, const std::string& b);

// True when `path` exists and is neither a regular file nor a directory: a
// FIFO (`-o >(...)`, a named pipe), a socket or a character device
// (/dev/null). Such an output is written to, not replaced by a rename
// (WriteFileAtomically, TokenCacheWriter).
bool IsStreamPath(const std::string& path);

// OK when `path` does not exist or is a regular file; InvalidArgument
// naming `what` and the path otherwise (outputs that are published by
// rename, such as checkpoints, must be regular files).
absl::Status CheckRegularFileOrAbsent(const std::string& path,
                                      absl::string_view what);

// Checks an output path before any work is done, so that a typo costs
// nothing: OK for "-" and for a path that is not a directory and whose
// directory exists and takes the path's temporaries (NewTemporaryPath's,
// as WriteFileAtomically and the token cache writer make them:
// ProbeTemporaryInDirectory with kFile; an existing device or FIFO is
// fine: it is written, not replaced). A symbolic link is checked as its
// target (OutputTarget: a link to nothing is InvalidArgument "WHAT PATH: a
// symbolic link to a missing file or a loop ..."). InvalidArgument "WHAT
// PATH: is a directory, expected a file path" or "WHAT PATH: DIR is not a
// directory"; NotFound "WHAT PATH: directory DIR does not exist".
absl::Status CheckOutputPathUsable(const std::string& path,
                                   absl::string_view what);

// Which temporaries a writer of a path makes: NewTemporaryPath's
// ("<path>.tmp-<pid>-<8 hex>") or PublicationTemporaryPath's, 8 bytes
// longer ("<path>.tmp.<pid>.<16 hex>").
enum class TemporaryNaming { kFile, kPublication };

// Creates and at once removes, in the directory of `path`, a file named
// like the temporary a writer of `path` uses (`naming`; the checkpoint
// publisher's by default), so that an output that cannot be published is
// refused before the work rather than after it. InvalidArgument "WHAT PATH: too long a name for its
// temporary (... bytes; the directory allows N)"; PermissionDenied "WHAT
// PATH: cannot create files in directory DIR (reason)" (read-only file
// system, no write permission); NotFound when the directory is missing;
// other errors as ErrnoStatus. CheckOutputPathUsable calls it for a path
// that is absent or a regular file.
absl::Status ProbeTemporaryInDirectory(
    const std::string& path, absl::string_view what,
    TemporaryNaming naming = TemporaryNaming::kPublication);

// The directory part of `path` ("." when it has none).
std::string DirName(const std::string& path);

// The last component of `path` (all of it when it has no '/').
std::string BaseName(const std::string& path);

// fsync(2) on the directory `dir`.
absl::Status FsyncDirectory(const std::string& dir);

}  // namespace coppelius

#endif  // COPPELIUS_COMMON_FILE_IO_H_
