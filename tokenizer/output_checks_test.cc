#include "tokenizer/output_checks.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/status/status.h"
#include "common/as_nobody.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

std::string TmpPath(const std::string& name) {
  return std::string(std::getenv("TEST_TMPDIR")) + "/" + name;
}

std::string Write(const std::string& name, const std::string& bytes) {
  const std::string path = TmpPath(name);
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

TEST(CheckNotCoppeliusFile, RefusesACheckpoint) {
  const std::string path =
      Write("victim.ckpt", std::string("COPPCKPT\x01\0\0\0\x80\0\0\0", 16));
  absl::Status s = CheckNotCoppeliusFile(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("-o " + path +
                                                  ": exists and is a Coppelius "
                                                  "checkpoint"));
  EXPECT_THAT(std::string(s.message()), HasSubstr("choose another output"));
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);
  // Exactly the 8 bytes of the magic are enough.
  EXPECT_EQ(CheckNotCoppeliusFile(Write("magic8", "COPPCKPT")).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CheckNotCoppeliusFile, RefusesAResultFileWithItsMarker) {
  const std::string path =
      Write("result.bin",
            std::string("\xbe\xba\xfe\xca\xbe\xba\xfe\xca\0\0\0\0", 12));
  absl::Status s = CheckNotCoppeliusFile(path);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("-o " + path +
                        ": exists and is a Coppelius result "
                        "file"));
}

TEST(CheckNotCoppeliusFile, AcceptsEverythingElse) {
  EXPECT_TRUE(CheckNotCoppeliusFile("-").ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(TmpPath("does-not-exist")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("empty", "")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("short", "COPPCKP")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("near", "COPPCKPx and more")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("lower", "coppckpt")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile(
                  Write("near_marker",
                        std::string("\xbe\xba\xfe\xca\xbe\xba\xfe\xcb", 8)))
                  .ok());
  // The magic later in the file is not a signature.
  EXPECT_TRUE(CheckNotCoppeliusFile(Write("later", " COPPCKPT")).ok());
  // A previous encode output (u32 ids) and a vocabulary.
  EXPECT_TRUE(CheckNotCoppeliusFile(
                  Write("ids.u32", std::string("\x05\0\0\0\x01\x01\0\0", 8)))
                  .ok());
  EXPECT_TRUE(
      CheckNotCoppeliusFile(Write("v.tiktoken", "AA== 0\nAQ== 1\n")).ok());
  EXPECT_TRUE(CheckNotCoppeliusFile("/dev/null").ok());
}

// Runs CheckOutputIsNotInput(output, what, input) with standard output
// (fd 1) redirected to `stdout_path` (opened without truncation), as a
// shell's `> stdout_path` would (after truncating it).
absl::Status CheckWithStdoutOn(const std::string& stdout_path,
                               const std::string& output,
                               absl::string_view what,
                               const std::string& input,
                               bool append = false) {
  const int saved = dup(STDOUT_FILENO);
  const int fd = open(stdout_path.c_str(),
                      O_WRONLY | O_CREAT | (append ? O_APPEND : 0), 0644);
  EXPECT_GE(saved, 0);
  EXPECT_GE(fd, 0);
  dup2(fd, STDOUT_FILENO);
  close(fd);
  absl::Status s = CheckOutputIsNotInput(output, what, input);
  dup2(saved, STDOUT_FILENO);
  close(saved);
  return s;
}

TEST(CheckOutputIsNotInput, RefusesStandardOutputThatIsTheInput) {
  const std::string in = Write("stdout_in.txt", "");  // emptied by `> in`
  absl::Status s = CheckWithStdoutOn(in, "-", "input file", in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("input file " + in +
                        " is also the output (standard "
                        "output, -o -)"));
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("a shell `> " + in +
                        "` empties it before the program starts"));
  // `>> in` (O_APPEND): refused too, said as what it would do.
  s = CheckWithStdoutOn(in, "-", "input file", in, /*append=*/true);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("a shell `>> " + in +
                        "` would append the output to it while it is read"));
  // `1<> in` (opened without emptying a file that has bytes): said so, not
  // as `>` (break-it, session 22).
  const std::string full = Write("stdout_full.txt", "text");
  s = CheckWithStdoutOn(full, "-", "input file", full);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(std::string(s.message()),
            "input file " + full +
                " is also the output (standard output, -o -): standard "
                "output is open on it without emptying it (a shell `1<> " +
                full + "`) and would overwrite it while it is read; write "
                       "the output to another file");
  // `{ echo x; tokenize ...; } > in`: emptied by `>`, then written by the
  // echo before the check (the descriptor's offset past it): said as `>`.
  {
    const int saved = dup(STDOUT_FILENO);
    const int fd = open(full.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(lseek(fd, 0, SEEK_END), 4);
    dup2(fd, STDOUT_FILENO);
    close(fd);
    s = CheckOutputIsNotInput("-", "input file", full);
    dup2(saved, STDOUT_FILENO);
    close(saved);
    EXPECT_THAT(std::string(s.message()),
                HasSubstr("a shell `> " + full +
                          "` empties it before the program starts"));
  }
  // Through another name of the same file (a hard link).
  const std::string link = TmpPath("stdout_link.txt");
  unlink(link.c_str());
  ASSERT_EQ(::link(in.c_str(), link.c_str()), 0);
  EXPECT_EQ(CheckWithStdoutOn(link, "-", "corpus", in).code(),
            absl::StatusCode::kInvalidArgument);
  // Standard output on another file, or the input from standard input.
  const std::string other = Write("stdout_other.txt", "");
  EXPECT_TRUE(CheckWithStdoutOn(other, "-", "input file", in).ok());
  EXPECT_TRUE(CheckWithStdoutOn(in, "-", "input file", "-").ok());
  EXPECT_TRUE(
      CheckWithStdoutOn(in, "-", "input file", TmpPath("missing.txt")).ok());
}

// Runs `check("-")` with standard output appending to `stdout_path`, as a
// shell's `>> stdout_path` leaves it.
template <typename Check>
absl::Status CheckWithStdoutAppendingTo(const std::string& stdout_path,
                                        Check check) {
  std::fflush(stdout);
  const int saved = dup(STDOUT_FILENO);
  const int fd = open(stdout_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0644);
  EXPECT_GE(saved, 0);
  EXPECT_GE(fd, 0);
  dup2(fd, STDOUT_FILENO);
  close(fd);
  absl::Status s = check(std::string("-"));
  dup2(saved, STDOUT_FILENO);
  close(saved);
  return s;
}

// `tokenize ... -o - >> run.ckpt` would append to the checkpoint: refused
// as `-o run.ckpt` is; standard output on any other file is not.
TEST(CheckNotCoppeliusFile, RefusesStandardOutputAppendingToOne) {
  const std::string checkpoint =
      Write("appended.ckpt", std::string("COPPCKPT\x01\0\0\0\x80\0\0\0", 16));
  absl::Status s = CheckWithStdoutAppendingTo(
      checkpoint, [](const std::string& o) { return CheckNotCoppeliusFile(o); });
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(),
            "-o - (standard output, an existing file): exists and is a "
            "Coppelius checkpoint (the magic \"COPPCKPT\" at offset 0); never "
            "replaced, whatever the flags (choose another output path)");
  const std::string marker = Write(
      "appended.res", std::string("\xbe\xba\xfe\xca\xbe\xba\xfe\xca", 8));
  EXPECT_EQ(CheckWithStdoutAppendingTo(
                marker,
                [](const std::string& o) { return CheckNotCoppeliusFile(o); })
                .code(),
            absl::StatusCode::kFailedPrecondition);
  // A log, an empty file, ids that can pass for a cache: appended to.
  for (const std::string& other :
       {Write("appended.log", "OK run.res (result)\n"),
        Write("appended.empty", "")}) {
    EXPECT_TRUE(CheckWithStdoutAppendingTo(other, [](const std::string& o) {
                  return CheckNotCoppeliusFile(o);
                }).ok());
    EXPECT_TRUE(CheckWithStdoutAppendingTo(other, [](const std::string& o) {
                  return CheckNotAResultFile(o);
                }).ok());
  }
  // 97 0 98 0 as u32: a header of mtime 97 ns and 98 source bytes, then
  // ids: what CheckNotATokenCache takes for a cache, as -o FILE and as the
  // file standard output appends to (a real cache would be damaged; a raw
  // id file of N ids passes when its fourth id is 0 and its third between
  // N and 1,024 N, unless it holds billions of ids).
  std::string ids;
  for (uint32_t id : {97u, 0u, 98u, 0u, 97u, 98u, 99u}) {
    ids.append(reinterpret_cast<const char*>(&id), 4);
  }
  const std::string id_file = Write("appended.ids", ids);
  EXPECT_FALSE(CheckNotATokenCache(id_file).ok());
  const absl::Status appending = CheckWithStdoutAppendingTo(
      id_file, [](const std::string& o) { return CheckNotATokenCache(o); });
  EXPECT_EQ(appending.code(), absl::StatusCode::kFailedPrecondition)
      << appending;
  EXPECT_EQ(appending.message(),
            "-o - (standard output, an existing file): exists and is a "
            "Coppelius token cache (3 ids); refusing to write into it (write "
            "the output elsewhere)");
  // Raw ids as encode writes them (the fourth id 1 or more): appended to.
  std::string raw;
  for (uint32_t id : {97u, 5u, 98u, 7u, 97u}) {
    raw.append(reinterpret_cast<const char*>(&id), 4);
  }
  const std::string raw_file = Write("appended_raw.ids", raw);
  EXPECT_TRUE(CheckNotATokenCache(raw_file).ok());
  EXPECT_TRUE(CheckWithStdoutAppendingTo(raw_file, [](const std::string& o) {
                return CheckNotATokenCache(o);
              }).ok());
}

TEST(CheckOutputIsNotInput, RefusesAnOutputPathThatIsTheInput) {
  const std::string in = Write("path_in.txt", "text");
  absl::Status s = CheckOutputIsNotInput(in, "vocabulary file", in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("-o " + in + ": names the vocabulary file " + in));
  EXPECT_TRUE(
      CheckOutputIsNotInput(TmpPath("path_out.txt"), "input file", in).ok());
  EXPECT_TRUE(CheckOutputIsNotInput(in, "input file", "-").ok());
}

// Runs `check()` with standard input read from `stdin_path` (a shell's
// `< stdin_path`).
template <typename Check>
absl::Status CheckWithStdinFrom(const std::string& stdin_path, Check check) {
  const int saved = dup(STDIN_FILENO);
  const int fd = open(stdin_path.c_str(), O_RDONLY);
  EXPECT_GE(saved, 0);
  EXPECT_GE(fd, 0);
  dup2(fd, STDIN_FILENO);
  close(fd);
  absl::Status s = check();
  dup2(saved, STDIN_FILENO);
  close(saved);
  return s;
}

// `tokenize train - -o corpus.txt < corpus.txt` would replace the corpus
// it reads: refused as `-o corpus.txt corpus.txt` is (break-it, session
// 21: it was accepted); another output, or standard input that is not a
// regular file, is not.
TEST(CheckOutputIsNotInput, RefusesAnOutputThatStandardInputReads) {
  const std::string in = Write("stdin_in.txt", "some text");
  absl::Status s = CheckWithStdinFrom(
      in, [&] { return CheckOutputIsNotInput(in, "corpus", "-"); });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("-o " + in + ": names the corpus - (standard input "
                        "is redirected from it)"));
  EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos);
  // Through another name (a hard link) as well.
  const std::string link = TmpPath("stdin_link.txt");
  unlink(link.c_str());
  ASSERT_EQ(::link(in.c_str(), link.c_str()), 0);
  EXPECT_EQ(CheckWithStdinFrom(in, [&] {
              return CheckOutputIsNotInput(link, "corpus", "-");
            }).code(),
            absl::StatusCode::kInvalidArgument);
  // -o - with standard output on the same file (`< in 1<> in`).
  s = CheckWithStdinFrom(in, [&] {
    return CheckWithStdoutOn(in, "-", "vocabulary file", "-");
  });
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("vocabulary file - (standard input) and the output "
                        "(standard output, -o -) are the same file"));
  // Other outputs are fine; so is standard input that is not a file.
  const std::string other = TmpPath("stdin_other.txt");
  EXPECT_TRUE(CheckWithStdinFrom(in, [&] {
                return CheckOutputIsNotInput(other, "corpus", "-");
              }).ok());
  EXPECT_TRUE(CheckWithStdinFrom("/dev/null", [&] {
                return CheckOutputIsNotInput(in, "corpus", "-");
              }).ok());
}

// An existing output the program cannot read cannot be checked, and the
// publication by rename would replace it unseen: refused (break-it,
// session 21), by a child that is not root (root reads every file). An
// empty file holds nothing to lose; standard output appending to an
// unreadable file is refused as an append.
TEST(CheckNotCoppeliusFile, RefusesAnOutputItCannotRead) {
  const std::string dir = NobodyDirectory("output_checks_test");
  ASSERT_FALSE(dir.empty());
  const std::string path = dir + "/unreadable.ckpt";
  std::ofstream(path) << "COPPCKPT and more";
  const std::string empty = dir + "/unreadable_empty";
  std::ofstream(empty) << "";
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  ASSERT_EQ(chmod(empty.c_str(), 0), 0);
  EXPECT_EQ(RunAsNobody([&] { return CheckNotCoppeliusFile(path).ToString(); }),
            "FAILED_PRECONDITION: -o " + path +
                ": exists (17 bytes) and cannot be read to check that it is "
                "not a Coppelius file (Permission denied); not replaced "
                "(choose another output path, or make it readable)");
  EXPECT_EQ(RunAsNobody([&] { return CheckNotCoppeliusFile(empty).ToString(); }),
            "OK");
  // CheckNotAResultFile leaves the refusal to CheckNotCoppeliusFile.
  EXPECT_EQ(RunAsNobody([&] { return CheckNotAResultFile(path).ToString(); }),
            "OK");
  ASSERT_EQ(chmod(path.c_str(), 0222), 0);  // writable, not readable
  EXPECT_THAT(RunAsNobody([&] {
                return CheckWithStdoutAppendingTo(path, [](const std::string& o) {
                         return CheckNotCoppeliusFile(o);
                       }).ToString();
              }),
              HasSubstr("-o - (standard output, an existing file): exists (17 "
                        "bytes) and cannot be read to check that it is not a "
                        "Coppelius file (Permission denied); refusing to "
                        "append to it"));
  chmod(path.c_str(), 0644);
  chmod(empty.c_str(), 0644);
}

}  // namespace
}  // namespace coppelius
