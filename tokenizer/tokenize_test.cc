#include "tokenizer/tokenize.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "common/stdin_pipe.h"
#include "tokenizer/bpe_trainer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TmpPath(const std::string& name) {
  return absl::StrCat(getenv("TEST_TMPDIR"), "/", name);
}

void WriteFile(const std::string& path, const std::string& contents) {
  ASSERT_TRUE(WriteFileAtomically(path, contents).ok());
}

std::string Slurp(const std::string& path) {
  auto s = ReadFile(path);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *s : "";
}

// A vocabulary with " the" = 256 written in tiktoken's format (base64 of
// each single byte by hand would be circular: these lines are Python's
// base64.b64encode output).
std::string VocabFile() {
  std::string s;
  static const char kB64[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int b = 0; b < 256; ++b) {
    absl::StrAppend(&s, std::string(1, kB64[b >> 2]),
                    std::string(1, kB64[(b & 3) << 4]), "== ", b, "\n");
  }
  absl::StrAppend(&s, "IHRoZQ== 256\n");  // " the"
  return s;
}

TEST(FormatIds, KnownBytes) {
  EXPECT_EQ(FormatIds({1, 0x01020304, 4294967295u}, IdFormat::kU32),
            std::string("\x01\0\0\0\x04\x03\x02\x01\xFF\xFF\xFF\xFF", 12));
  EXPECT_EQ(FormatIds({0, 12287, 4294967295u}, IdFormat::kText),
            "0 12287 4294967295\n");
  EXPECT_EQ(FormatIds({}, IdFormat::kText), "");
}

TEST(ParseIds, TextAndU32) {
  auto ids = ParseIds(" 1\n22\t333 ", IdFormat::kText, "x");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(1, 22, 333));
  ids = ParseIds(std::string("\x05\0\0\0\0\0\0\x80", 8), IdFormat::kU32, "x");
  ASSERT_TRUE(ids.ok());
  EXPECT_THAT(*ids, ElementsAre(5, 0x80000000u));
}

TEST(ParseIds, HostileInputs) {
  auto s = ParseIds("1 2x 3", IdFormat::kText, "in.txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("in.txt: byte 2: \"2x\""));
  s = ParseIds("4294967296", IdFormat::kText, "in.txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = ParseIds("-1", IdFormat::kText, "in.txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = ParseIds("+1", IdFormat::kText, "in.txt").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  s = ParseIds("12345", IdFormat::kU32, "in.u32").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("in.u32: size 5 bytes is not a multiple of 4"));
}

TEST(RunEncodeDecode, RoundTripThroughFiles) {
  const std::string vocab = TmpPath("v.tiktoken");
  WriteFile(vocab, VocabFile());
  const std::string text = "in the<|endoftext|> the\xFF";
  WriteFile(TmpPath("in.txt"), text);
  for (IdFormat format : {IdFormat::kU32, IdFormat::kText}) {
    EncodeOptions e;
    e.vocab_path = vocab;
    e.input_path = TmpPath("in.txt");
    e.output_path = TmpPath("ids");
    e.allow_special = true;
    e.format = format;
    ASSERT_TRUE(RunEncode(e).ok());
    auto ids = ParseIds(Slurp(TmpPath("ids")), format, "ids");
    ASSERT_TRUE(ids.ok());
    // "in", " the", special, " the", "\xFF".
    EXPECT_THAT(*ids, ElementsAre('i', 'n', 256, 257, 256, 0xFF));
    DecodeOptions d;
    d.vocab_path = vocab;
    d.input_path = TmpPath("ids");
    d.output_path = TmpPath("out.txt");
    d.format = format;
    ASSERT_TRUE(RunDecode(d).ok());
    EXPECT_EQ(Slurp(TmpPath("out.txt")), text);
  }
}

TEST(RunDecode, OutOfRangeIdNamesFileAndPosition) {
  const std::string vocab = TmpPath("v2.tiktoken");
  WriteFile(vocab, VocabFile());
  WriteFile(TmpPath("bad.txt"), "1 2 258\n");
  DecodeOptions d;
  d.vocab_path = vocab;
  d.input_path = TmpPath("bad.txt");
  d.output_path = TmpPath("never.txt");
  d.format = IdFormat::kText;
  absl::Status s = RunDecode(d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("bad.txt: id 258 at position 2 is out of range"));
  EXPECT_FALSE(ReadFile(TmpPath("never.txt")).ok());  // no partial output
}

TEST(RunEncode, MissingVocabulary) {
  EncodeOptions e;
  e.vocab_path = TmpPath("missing.tiktoken");
  e.input_path = "-";
  e.output_path = "-";
  absl::Status s = RunEncode(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("--vocab: opening "));
  EXPECT_THAT(std::string(s.message()), HasSubstr("missing.tiktoken"));
  // A device names the flag too (it said only "/dev/zero: is a character
  // device ...").
  DecodeOptions d;
  d.vocab_path = "/dev/zero";
  d.input_path = "-";
  d.output_path = "-";
  s = RunDecode(d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("--vocab: /dev/zero: is a character "
                        "device"));
}

TEST(ParseIdFormat, Names) {
  EXPECT_TRUE(ParseIdFormat("u32").ok());
  EXPECT_TRUE(ParseIdFormat("text").ok());
  EXPECT_EQ(ParseIdFormat("u16").status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

TEST(RunEncodeDecode, RefuseToWriteOverTheirInputs) {
  const std::string vocab = TmpPath("v3.tiktoken");
  WriteFile(vocab, VocabFile());
  WriteFile(TmpPath("in3.txt"), "in the");
  EncodeOptions e;
  e.vocab_path = vocab;
  e.input_path = TmpPath("in3.txt");
  e.output_path = TmpPath("in3.txt");
  absl::Status s = RunEncode(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("names the input file"));
  e.output_path = vocab;
  s = RunEncode(e);
  EXPECT_THAT(std::string(s.message()), HasSubstr("names the vocabulary file"));
  DecodeOptions d;
  d.vocab_path = vocab;
  d.input_path = TmpPath("in3.txt");
  d.output_path = vocab;
  EXPECT_EQ(RunDecode(d).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Slurp(TmpPath("in3.txt")), "in the");
  EXPECT_EQ(Slurp(vocab), VocabFile());
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

// A mistyped -o must not destroy a checkpoint or a result file (their first
// 8 bytes, docs/FORMATS.md); ordinary previous outputs are still replaced.
TEST(RunEncodeDecode, RefuseToReplaceCheckpointsAndResults) {
  const std::string vocab = TmpPath("v4.tiktoken");
  WriteFile(vocab, VocabFile());
  WriteFile(TmpPath("in4.txt"), "in the");
  const std::string checkpoint =
      std::string("COPPCKPT\x01\0\0\0\x80\0\0\0", 16) + "payload";
  const std::string result =
      std::string("\xbe\xba\xfe\xca\xbe\xba\xfe\xca", 8) + "windows";
  WriteFile(TmpPath("victim.ckpt"), checkpoint);
  WriteFile(TmpPath("victim.res"), result);
  EncodeOptions e;
  e.vocab_path = vocab;
  e.input_path = TmpPath("in4.txt");
  e.output_path = TmpPath("victim.ckpt");
  absl::Status s = RunEncode(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("victim.ckpt: exists and is a Coppelius checkpoint"));
  e.output_path = TmpPath("victim.res");
  s = RunEncode(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("Coppelius result file"));
  EXPECT_EQ(Slurp(TmpPath("victim.ckpt")), checkpoint);
  EXPECT_EQ(Slurp(TmpPath("victim.res")), result);

  // A previous encode output is replaced as before.
  e.output_path = TmpPath("ids4.u32");
  ASSERT_TRUE(RunEncode(e).ok());
  ASSERT_TRUE(RunEncode(e).ok());
  // "in" is two byte tokens, " the" is 256.
  EXPECT_EQ(Slurp(e.output_path), std::string("i\0\0\0n\0\0\0\0\x01\0\0", 12));

  DecodeOptions d;
  d.vocab_path = vocab;
  d.input_path = TmpPath("ids4.u32");
  d.output_path = TmpPath("victim.ckpt");
  s = RunDecode(d);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(Slurp(TmpPath("victim.ckpt")), checkpoint);
}

// A checkpoint that appears at -o while encode, decode or train reads its
// input is not replaced (break-it, session 24: the output was checked only
// at the start); the input a pipe on standard input, the checkpoint
// written once the run is reading it (RunWithFileAppearing).
TEST(RunEncodeDecode, CheckpointThatAppearsDuringTheRunIsNotReplaced) {
  const std::string vocab = TmpPath("v5.tiktoken");
  WriteFile(vocab, VocabFile());
  std::string text;
  while (text.size() < (1u << 20)) text += "in the ";
  // The same text's ids as decode's input: "i", "n", " the" (256).
  std::string ids;
  for (size_t i = 0; i < text.size() / 7; ++i) {
    ids += std::string("i\0\0\0n\0\0\0\0\x01\0\0 \0\0\0", 16);
  }
  const std::string checkpoint =
      std::string("COPPCKPT\x01\0\0\0\x80\0\0\0", 16) + "payload";
  const std::string output = TmpPath("appears.out");
  const struct {
    const char* name;
    std::string input;
    std::function<absl::Status()> run;
  } cases[] = {
      {"encode", text,
       [&] {
         EncodeOptions e;
         e.vocab_path = vocab;
         e.input_path = "-";
         e.output_path = output;
         return RunEncode(e);
       }},
      {"decode", ids,
       [&] {
         DecodeOptions d;
         d.vocab_path = vocab;
         d.input_path = "-";
         d.output_path = output;
         return RunDecode(d);
       }},
      {"train", text,
       [&] {
         TrainVocabularyOptions t;
         t.corpus_path = "-";
         t.output_path = output;
         t.vocab_size = 260;
         t.threads = 2;
         t.progress = false;
         return RunTrainVocabulary(t);
       }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    unlink(output.c_str());
    const AppearingFileRun r =
        RunWithFileAppearing(c.run, c.input, 256u << 10, output, checkpoint);
    EXPECT_TRUE(r.fed) << r.status;
    EXPECT_EQ(r.status.code(), absl::StatusCode::kFailedPrecondition)
        << r.status;
    EXPECT_THAT(std::string(r.status.message()),
                HasSubstr("appears.out: exists and is a Coppelius checkpoint"));
    EXPECT_THAT(std::string(r.status.message()),
                HasSubstr("it appeared while the output was being written"));
    // The refusal as it is, not under "writing ids to ...".
    EXPECT_EQ(std::string(r.status.message()).rfind("-o ", 0), 0u)
        << r.status;
    EXPECT_EQ(Slurp(output), checkpoint);
  }
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

// Standard input can be read once: the vocabulary and the input cannot both
// come from it (the second read used to see nothing and write 0 ids).
TEST(RunEncodeDecode, RefuseVocabularyAndInputBothFromStdin) {
  EncodeOptions e;
  e.vocab_path = "-";
  e.input_path = "-";
  e.output_path = TmpPath("never5.u32");
  absl::Status s = RunEncode(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("--vocab=- and input -: both read standard input"));
  DecodeOptions d;
  d.vocab_path = "-";
  d.input_path = "-";
  d.output_path = "-";
  s = RunDecode(d);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("can be read once"));
  EXPECT_FALSE(ReadFile(TmpPath("never5.u32")).ok());
}

}  // namespace
}  // namespace coppelius
