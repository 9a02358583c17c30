#include "inspect/inspect.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <functional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "checkpoint/publisher.h"
#include "checkpoint/reader.h"
#include "common/as_nobody.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inspect/testdata.h"
#include "tokencache/make_cache.h"
#include "tokencache/token_cache.h"
#include "tokenizer/vocabulary.h"
#include "trainer/model_config.h"
#include "trainer/run_identity.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

class InspectTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(absl::StrCat(testing::TempDir(), "/inspect_data"));
    mkdir(dir_->c_str(), 0755);
    absl::Status s = inspect_testing::WriteInspectTestFiles(*dir_);
    ASSERT_TRUE(s.ok()) << s;
  }
  static std::string Path(const std::string& name) {
    return absl::StrCat(*dir_, "/", name);
  }
  static std::string Report(const std::string& name, bool json = false,
                            const std::string& vocab = "",
                            const std::string& source = "",
                            absl::StatusCode code = absl::StatusCode::kOk,
                            const std::string& config = "tiny") {
    InspectOptions o;
    o.path = Path(name);
    o.config = config;
    o.json = json;
    o.vocab = vocab.empty() ? "" : Path(vocab);
    o.source = source.empty() ? "" : Path(source);
    std::ostringstream out;
    absl::Status s = RunInspect(o, out);
    EXPECT_EQ(s.code(), code) << name << ": " << s;
    return out.str();
  }
  // RunInspect's status with the config inferred; the report in `*report`.
  static absl::Status Inspect(const std::string& name, std::string* report,
                              const std::string& config = "") {
    InspectOptions o;
    o.path = Path(name);
    o.config = config;
    std::ostringstream out;
    absl::Status s = RunInspect(o, out);
    *report = out.str();
    return s;
  }
  static absl::Status Verify(const std::vector<std::string>& names,
                             std::string* report,
                             const std::string& source = "",
                             const std::string& config = "tiny") {
    VerifyOptions o;
    for (const std::string& n : names) o.paths.push_back(Path(n));
    o.config = config;
    o.source = source.empty() ? "" : Path(source);
    std::ostringstream out;
    absl::Status s = RunVerify(o, out);
    *report = out.str();
    return s;
  }
  static std::string* dir_;
};
std::string* InspectTest::dir_ = nullptr;

TEST_F(InspectTest, DetectsKinds) {
  const std::vector<std::pair<std::string, FileKind>> cases = {
      {"cache.tok", FileKind::kCache},       {"bad_ids.tok", FileKind::kCache},
      {"model.ckpt", FileKind::kCheckpoint}, {"multi.ckpt", FileKind::kCheckpoint},
      {"fresh.ckpt", FileKind::kCheckpoint}, {"complete.res", FileKind::kResult},
      {"partial.res", FileKind::kResult},    {"marker.res", FileKind::kResult},
  };
  for (const auto& [name, kind] : cases) {
    auto k = DetectFileKind(Path(name));
    ASSERT_TRUE(k.ok()) << name << ": " << k.status();
    EXPECT_EQ(*k, kind) << name;
    // Without the extension, the content alone decides.
    const std::string bare =
        Path(absl::StrCat("bare_", name.substr(0, name.find('.'))));
    ASSERT_TRUE(WriteFileAtomically(bare, *ReadFile(Path(name))).ok());
    k = DetectFileKind(bare);
    ASSERT_TRUE(k.ok()) << bare << ": " << k.status();
    EXPECT_EQ(*k, kind) << bare;
  }
  EXPECT_EQ(DetectFileKind(Path("missing")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(InspectTest, DetectsNearMissesAndRefusesUnknownFiles) {
  const std::string ckpt = *ReadFile(Path("model.ckpt"));
  // First byte flipped ("COPPCKPT" -> "\xbcOPPCKPT"): a corrupt checkpoint,
  // with or without the extension, in the report and in verify alike.
  std::string flipped = ckpt;
  flipped[0] ^= 0xff;
  ASSERT_TRUE(WriteFileAtomically(Path("flipped.ckpt"), flipped).ok());
  ASSERT_TRUE(WriteFileAtomically(Path("flipped"), flipped).ok());
  // All 8 magic bytes gone: the preamble structure still says checkpoint.
  std::string nomagic = ckpt;
  for (int i = 0; i < 8; ++i) nomagic[i] = 'X';
  ASSERT_TRUE(WriteFileAtomically(Path("nomagic"), nomagic).ok());
  for (const char* name : {"flipped.ckpt", "flipped", "nomagic"}) {
    auto k = DetectFileKind(Path(name));
    ASSERT_TRUE(k.ok()) << name << ": " << k.status();
    EXPECT_EQ(*k, FileKind::kCheckpoint) << name;
    std::string report;
    absl::Status s = Inspect(name, &report);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << name << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr("magic")) << name;
    s = Verify({name}, &report, "", "");
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << name;
    EXPECT_THAT(report, HasSubstr("magic")) << report;
  }
  // A text file (size 7,000: inside tiny's incomplete-result range).
  std::string text;
  while (text.size() < 7000) text += "the quick brown fox jumps over it.\n";
  text.resize(7000);
  ASSERT_TRUE(WriteFileAtomically(Path("notes.txt"), text).ok());
  // Random-looking binary of a size no kind has (13 bytes).
  ASSERT_TRUE(WriteFileAtomically(Path("blob"), "\x01\x02\xff\xfe\x00\x10"
                                                "\x20\x30\x40\x50\x60\x70"
                                                "\x80").ok());
  // fp32 arrays of |N(0, 1)| values (logit-like, none negative) of a tiny
  // and of a Coppelius killed run's size (8,192 bytes; 4 MiB, which was
  // reported as a Coppelius run stopped after 988 steps: break-it, session
  // 23): step 0's window holds no cross-entropies of the "logits".
  std::mt19937 rng(20261201);
  std::normal_distribution<float> normal;
  for (const auto& [name, bytes] :
       {std::pair<const char*, size_t>{"abs_normal_8k.f32", 8192},
        {"abs_normal_4m.f32", 4 << 20}}) {
    std::vector<float> values(bytes / 4);
    for (float& x : values) x = std::fabs(normal(rng));
    ASSERT_TRUE(WriteFileAtomically(
                    Path(name),
                    std::string(reinterpret_cast<const char*>(values.data()),
                                bytes))
                    .ok());
  }
  for (const char* name :
       {"notes.txt", "blob", "abs_normal_8k.f32", "abs_normal_4m.f32"}) {
    absl::Status k = DetectFileKind(Path(name)).status();
    EXPECT_EQ(k.code(), absl::StatusCode::kDataLoss) << name;
    EXPECT_THAT(k.message(),
                HasSubstr("not a token cache, checkpoint or result file"));
    EXPECT_EQ(std::string(k.message()).find('\n'), std::string::npos);
    std::string report;
    EXPECT_EQ(Inspect(name, &report).code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(report, "");
    EXPECT_EQ(Verify({name}, &report, "", "").code(),
              absl::StatusCode::kDataLoss);
  }
  EXPECT_THAT(DetectFileKind(Path("notes.txt")).status().message(),
              HasSubstr("7000 bytes, text;"));
  // A cache that happens to be tiny's complete result size (27,744 bytes =
  // 16 + 4 x 6,932) is still a cache.
  std::string cache = ReadFile(Path("cache.tok"))->substr(0, 16);
  cache.resize(27744, '\0');
  ASSERT_TRUE(WriteFileAtomically(Path("sized_cache"), cache).ok());
  auto sized = DetectFileKind(Path("sized_cache"));
  ASSERT_TRUE(sized.ok()) << sized.status();
  EXPECT_EQ(*sized, FileKind::kCache);
  // A result one byte too long: trailing bytes, named as such.
  const std::string res = *ReadFile(Path("complete.res"));
  for (const char* name : {"long.res", "long"}) {
    ASSERT_TRUE(WriteFileAtomically(Path(name), res + "x").ok());
    auto k = DetectFileKind(Path(name));
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ(*k, FileKind::kResult) << name;
    std::string report;
    absl::Status s = Inspect(name, &report);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
    // tiny's complete result is 27,744 bytes (trainer/result_file.h).
    EXPECT_THAT(s.message(), HasSubstr(": offset 27744: 1 trailing bytes "
                                       "after a complete result of config "
                                       "tiny"));
    EXPECT_EQ(Verify({name}, &report, "", "").code(),
              absl::StatusCode::kDataLoss);
    EXPECT_THAT(report, HasSubstr("1 trailing bytes"));
  }
  // --kind still overrides: 7,000 bytes of text read as a cache of
  // (7000 - 16) / 4 = 1,746 ids, reported; every one (4 text bytes, at least
  // 0x20202020) is >= V, so the report then fails.
  InspectOptions o;
  o.path = Path("notes.txt");
  o.kind = FileKind::kCache;
  std::ostringstream out;
  absl::Status s = RunInspect(o, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("; ids >= 12288: 1746"));
  EXPECT_THAT(out.str(), HasSubstr("tokens: 1746\n"));
}

TEST_F(InspectTest, SafetensorsAndRandomBytesAreNotResults) {
  // Sizes inside tiny's (6,144 .. 27,744) or Coppelius' (147,456 ..
  // 41,813,600) result range, no marker, host tag or plausible cache header.
  // A safetensors-like file: u64 LE header length 24, then JSON.
  std::string st = std::string("\x18\0\0\0\0\0\0\0", 8) +
                   "{\"__metadata__\":{}}     ";
  st.resize(10000, '\0');
  ASSERT_TRUE(WriteFileAtomically(Path("like.safetensors"), st).ok());
  std::mt19937 rng(7);
  for (size_t size : {10000u, 1000000u}) {
    std::string random(size, '\0');
    for (char& c : random) c = static_cast<char>(rng());
    ASSERT_TRUE(
        WriteFileAtomically(Path(absl::StrCat("random", size)), random).ok());
  }
  // inspect's own export of model.ckpt (537,632 bytes).
  ExportOptions e;
  e.checkpoint = Path("model.ckpt");
  e.output = Path("export.safetensors");
  std::ostringstream out;
  ASSERT_TRUE(RunExport(e, out).ok());
  for (const char* name : {"like.safetensors", "random10000", "random1000000",
                           "export.safetensors"}) {
    absl::Status k = DetectFileKind(Path(name)).status();
    EXPECT_EQ(k.code(), absl::StatusCode::kDataLoss) << name << ": " << k;
    EXPECT_THAT(k.message(),
                HasSubstr(": offset 0: not a token cache, checkpoint or result "
                          "file"))
        << name;
    std::string report;
    EXPECT_EQ(Inspect(name, &report).code(), absl::StatusCode::kDataLoss)
        << name;
    EXPECT_EQ(report, "") << name;
  }
  // So exporting again over the earlier export replaces it.
  const std::string first = *ReadFile(e.output);
  absl::Status again = RunExport(e, out);
  EXPECT_TRUE(again.ok()) << again;
  EXPECT_EQ(*ReadFile(e.output), first);
}

TEST_F(InspectTest, InfersConfigFromTheFile) {
  // No --config anywhere: the tiny files are read as tiny.
  std::string report;
  absl::Status s = Inspect("complete.res", &report);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(report, HasSubstr("config tiny (result size and host tag): "
                                "V=512 T=64 steps=8"));
  EXPECT_THAT(report, HasSubstr("status: complete, 8 of 8 step windows"));
  s = Inspect("partial.res", &report);
  EXPECT_THAT(report, HasSubstr("config tiny (result size)"));
  EXPECT_THAT(report, HasSubstr("status: incomplete, 3 of 8 step windows"));
  EXPECT_TRUE(Inspect("model.ckpt", &report).ok());
  EXPECT_THAT(report,
              HasSubstr("identity: matches config tiny (checkpoint identity)"));
  EXPECT_THAT(report, HasSubstr("tensors (21):"));
  // multi.ckpt's chunk size is not the run's: matched by its payload size.
  EXPECT_TRUE(Inspect("multi.ckpt", &report).ok());
  EXPECT_THAT(report, HasSubstr("a run of config tiny (checkpoint payload "
                                "size) refuses it"));
  s = Verify({"model.ckpt", "multi.ckpt", "complete.res"}, &report, "", "");
  EXPECT_TRUE(s.ok()) << s << report;
  PlotOptions p;
  p.results = {Path("complete.res"), Path("next.res")};
  p.output = "-";
  std::ostringstream out;
  s = RunPlot(p, out);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(out.str(), HasSubstr("(tiny) loss, 2 runs, 16 steps"));
  ExportOptions e;
  e.checkpoint = Path("model.ckpt");
  e.output = "-";
  std::ostringstream exported;
  s = RunExport(e, exported);
  EXPECT_TRUE(s.ok()) << s;
  // 8-byte length, header, 133,760 tiny parameters.
  EXPECT_GT(exported.str().size(), 4u * 133760);

  // An explicit --config still wins, and a contradiction is said as such.
  s = Inspect("complete.res", &report, "coppelius");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            absl::StrCat(Path("complete.res"),
                         ": result size and host tag (27744 bytes) fit config "
                         "tiny, not --config=coppelius"));
  s = Verify({"complete.res"}, &report, "", "coppelius");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("fit config tiny, not --config=coppelius"));
  // A checkpoint of another config than the one named: the report says so
  // and the status is the refusal (verify fails it too).
  EXPECT_EQ(Inspect("model.ckpt", &report, "coppelius").code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(report, HasSubstr("a run of config coppelius (--config) "
                                "refuses it"));
  EXPECT_EQ(Verify({"model.ckpt"}, &report, "", "coppelius").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("identity field"));
  e.config = "coppelius";
  EXPECT_EQ(RunExport(e, exported).code(),
            absl::StatusCode::kFailedPrecondition);
  // Export takes checkpoints only.
  e.config = "";
  e.checkpoint = Path("complete.res");
  s = RunExport(e, exported);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("a result, expected a checkpoint"));
}

TEST_F(InspectTest, CacheReport) {
  const std::string text = Report("cache.tok", false, "", "source.txt");
  EXPECT_THAT(text, HasSubstr("tokens: 1281\n"));
  // floor((1281 - 1) / 64) = 20.
  EXPECT_THAT(text, HasSubstr("contexts of 64 (tiny, --config): 20 "));
  // ids (7 i) mod 500 over 1281 ids cover 0..499.
  EXPECT_THAT(text, HasSubstr("id range: min 0, max 499; ids >= V=512: 0"));
  EXPECT_THAT(text, HasSubstr("source size 2000 bytes"));
  EXPECT_THAT(text, Not(HasSubstr("PROBLEM")));
  EXPECT_THAT(text, HasSubstr("staleness: fresh"));
  const std::string bad = Report("bad_ids.tok", false, "", "",
                                 absl::StatusCode::kDataLoss);
  // Token 1000 is at byte 16 + 4000.
  EXPECT_THAT(bad, HasSubstr("max 600; ids >= V=512: 1 (first at token 1000, "
                             "file offset 4016)"));
  const std::string json = Report("cache.tok", true);
  EXPECT_THAT(json, HasSubstr("\"num_tokens\":1281"));
  EXPECT_THAT(json, HasSubstr("\"contexts\":20"));
  EXPECT_THAT(json, HasSubstr("\"max_id\":499"));
}

TEST_F(InspectTest, CacheWithIdsOutOfRangeFailsAfterTheReport) {
  // bad_ids.tok: id[1000] = 600 (testdata.h), at byte 16 + 4 * 1000; tiny's
  // V is 512. The report comes first, then the failure, as verify's.
  for (bool json : {false, true}) {
    InspectOptions o;
    o.path = Path("bad_ids.tok");
    o.config = "tiny";
    o.json = json;
    std::ostringstream out;
    absl::Status s = RunInspect(o, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(s.message(),
              absl::StrCat(Path("bad_ids.tok"),
                           ": token 1000 (byte offset 4016) has id 600, "
                           "expected < 512 (the vocabulary size of config "
                           "tiny); ids >= 512: 1"));
    EXPECT_THAT(out.str(), HasSubstr(json ? "\"ids_out_of_range\":1"
                                          : "ids >= V=512: 1 (first at"));
  }
  std::string report;
  EXPECT_EQ(Verify({"bad_ids.tok"}, &report).code(),
            absl::StatusCode::kDataLoss);
  // Coppelius' V (12,288) has id 600: the same file passes under it.
  EXPECT_TRUE(Inspect("bad_ids.tok", &report, "coppelius").ok());
  EXPECT_TRUE(Inspect("cache.tok", &report, "tiny").ok());
}

TEST_F(InspectTest, CheckpointIdentityIsCheckedOnlyAgainstANamedConfig) {
  // seed.ckpt is intact but its initialization seed is 20260926 (tiny's is
  // 20260925). Without --config: the refusal is reported, the status is the
  // integrity (OK); with --config=tiny: report and verify fail, naming it.
  const std::string field =
      "identity field initialization has \"seed=20260926\", the run "
      "expects \"seed=20260925\"";
  std::string report;
  absl::Status s = Inspect("seed.ckpt", &report);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(report, HasSubstr("a run of config tiny (checkpoint payload "
                                "size) refuses it"));
  EXPECT_THAT(report, HasSubstr(field));
  // The report has both identities in full.
  EXPECT_THAT(report,
              HasSubstr("    initialization: coppelius-initialization:"
                        "random-normal|seed=20260926\n"));
  EXPECT_THAT(report,
              HasSubstr("    expected initialization: coppelius-"
                        "initialization:random-normal|seed=20260925\n"));
  s = Verify({"seed.ckpt"}, &report, "", "");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(report, absl::StrCat("OK ", Path("seed.ckpt"), " (checkpoint)\n"));

  s = Inspect("seed.ckpt", &report, "tiny");
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr(field));
  EXPECT_THAT(report, HasSubstr("digests: all 1 chunk SHA-256 digests "
                                "verified"));
  s = Verify({"seed.ckpt"}, &report, "", "tiny");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_EQ(report, absl::StrCat("FAIL ", Path("seed.ckpt"),
                                 ": checkpoint refused: ",
                                 field, "\n"));
}

// The test data's intact checkpoints that `train --config=tiny` refuses,
// with the identity field each refusal names: steps.ckpt (run_steps 9) and
// multi.ckpt (64 KiB chunks) hold tiny's five identities and payload size
// (its run is 8 steps in 4 MiB chunks); seed.ckpt another seed.
struct RefusedCheckpoint {
  const char* name;
  const char* field;
};
constexpr RefusedCheckpoint kRefusedByTiny[] = {
    {"steps.ckpt", "identity field run_steps is 9, the run expects 8"},
    {"multi.ckpt",
     "identity field chunk_bytes is 65536, the run expects 4194304"},
    {"seed.ckpt",
     "identity field initialization has \"seed=20260926\", the run expects "
     "\"seed=20260925\""},
};

TEST_F(InspectTest, NamedConfigRefusesWhatItsRunRefuses) {
  // inspect and verify with --config=tiny fail each of kRefusedByTiny,
  // naming its field; without --config they check integrity only.
  for (const auto& c : kRefusedByTiny) {
    const std::string refusal =
        absl::StrCat(Path(c.name), ": checkpoint refused: ", c.field);
    std::string report;
    absl::Status s = Inspect(c.name, &report, "tiny");
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ(s.message(), refusal);
    EXPECT_THAT(report, HasSubstr(absl::StrCat(
                            "a run of config tiny (--config) refuses it: ",
                            refusal)));
    EXPECT_THAT(report, HasSubstr("digests: all "));
    s = Verify({c.name}, &report, "", "tiny");
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_EQ(report, absl::StrCat("FAIL ", refusal,
                                   "\n"));
    EXPECT_TRUE(Inspect(c.name, &report).ok()) << c.name;
    EXPECT_TRUE(Verify({c.name}, &report, "", "").ok()) << report;
  }
}

TEST_F(InspectTest, CheckpointReport) {
  const std::string text = Report("model.ckpt");
  EXPECT_THAT(text, HasSubstr("update count: 16"));
  EXPECT_THAT(text, HasSubstr("identity: matches config tiny"));
  EXPECT_THAT(text, HasSubstr("chunk SHA-256 digests verified"));
  // P alternates -0.5/+0.5 (mean 0, std 0.5); M is 0.25; V is 2.
  EXPECT_THAT(text, HasSubstr("    embedding\n"
                              "      P mean +0 std 0.5 min -0.5 max +0.5 "
                              "nonfinite 0\n"
                              "      M mean +0.25 std 0 min +0.25 max +0.25 "
                              "nonfinite 0\n"
                              "      V mean +2 std 0 min +2 max +2 nonfinite 0"));
  EXPECT_THAT(text, HasSubstr("    final_norm.weight\n"
                              "      P mean +1 std 0 min +1 max +1"));
  EXPECT_THAT(text, HasSubstr("    final_norm.bias\n"
                              "      P mean +0 std 0.5 min -0.5 max +0.5 "
                              "nonfinite 0\n"
                              "      M mean +0.25 std 0 min +0.25 max +0.25 "
                              "nonfinite 0\n"
                              "      V mean +2 std 0 min +2 max +2 "
                              "nonfinite 0"));
  EXPECT_THAT(text, HasSubstr("blocks.1.mlp.down"));
  // A tiny run refuses 64 KiB chunks: reported in full, then refused.
  const std::string multi =
      Report("multi.ckpt", false, "", "", absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(multi, HasSubstr("refuses it"));
  EXPECT_THAT(multi, HasSubstr("chunk_bytes"));
  EXPECT_THAT(multi, HasSubstr("25 chunks of 65536"));
  EXPECT_THAT(Report("fresh.ckpt"), HasSubstr("0 bytes, a fresh-start input"));
  const std::string json = Report("model.ckpt", true);
  EXPECT_THAT(json, HasSubstr("\"update_count\":16"));
  EXPECT_THAT(json, HasSubstr("\"digests_verified\":true"));
  EXPECT_THAT(json, HasSubstr("\"identity_matches_config\":true"));
}

TEST_F(InspectTest, ResultReport) {
  const std::string text = Report("complete.res", false, "vocab.tiktoken");
  EXPECT_THAT(text, HasSubstr("status: complete, 8 of 8 step windows"));
  // Forward row k peaks at 100 + k.
  EXPECT_THAT(text, HasSubstr("argmax of rows 15, 31, 63 = 100, 101, 102"));
  // Step means 6 - 0.5 s: the 8-step window mean is 6 - 0.5 * 3.5 = 4.25.
  EXPECT_THAT(text, HasSubstr("first 8-step window mean 4.250000"));
  EXPECT_THAT(text, HasSubstr("step      7  loss 2.500000"));
  EXPECT_THAT(text, HasSubstr("row 15: token 65 \"A\""));
  EXPECT_THAT(text, HasSubstr("row 31: token 300 \"t44\""));
  EXPECT_THAT(text, HasSubstr("row 63: token 511 \"<|endoftext|>\""));
  // Update s takes 7 (s + 1) ns: 7..56.
  EXPECT_THAT(text, HasSubstr("min 7, max 56 (8 steps)"));
  EXPECT_THAT(text, HasSubstr("backend: reference, c0 16"));
  EXPECT_THAT(text, HasSubstr("errors: none"));
  // Loss block: 64 rows of 6 - 0.5 * 7 = 2.5; parameter head all 0.5.
  EXPECT_THAT(text, HasSubstr("last step mean loss 2.500000 over 64 rows"));
  EXPECT_THAT(text, HasSubstr("embedding parameter head (1024): mean +0.5 "
                              "std 0 min +0.5 max +0.5 nonfinite 0"));
  EXPECT_THAT(text, Not(HasSubstr("WARNING")));
  EXPECT_THAT(text, Not(HasSubstr("PROBLEM")));
  // The loss block's window 0 equals step 7's window (both 2.5); changing
  // one row of the last window makes the file fail, naming the row.
  std::string res = *ReadFile(Path("complete.res"));
  res[6144 + 7 * 256 + 4 * 10] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(Path("lossdiff.res"), res).ok());
  EXPECT_THAT(Report("lossdiff.res", false, "", "",
                     absl::StatusCode::kDataLoss),
              HasSubstr("offset 8392 (loss block.last_row_losses, row 10): "
                        "2.5, but step 7's window holds 2.50000024 at offset "
                        "7976"));

  // Incomplete files are reported in full, then fail (exit status 1).
  const std::string partial =
      Report("partial.res", false, "", "", absl::StatusCode::kDataLoss);
  EXPECT_THAT(partial, HasSubstr("status: incomplete, 3 of 8 step windows"));
  EXPECT_THAT(partial, HasSubstr("tail: absent"));
  const std::string marker =
      Report("marker.res", false, "", "", absl::StatusCode::kDataLoss);
  EXPECT_THAT(marker, HasSubstr("forward record: NOT WRITTEN"));
  const std::string json = Report("complete.res", true, "vocab.tiktoken");
  EXPECT_THAT(json, HasSubstr("\"complete_steps\":8"));
  EXPECT_THAT(json, HasSubstr("\"text\":\"t44\""));
  EXPECT_THAT(json, HasSubstr("\"mean_ns\":31.5"));
}

TEST_F(InspectTest, ResultWarnsOnUnwrittenFinalRecord) {
  std::string res = *ReadFile(Path("complete.res"));
  // tiny final record: 4 * 512 bytes at 24736.
  std::fill(res.begin() + 24736, res.begin() + 24736 + 2048, '\0');
  ASSERT_TRUE(WriteFileAtomically(Path("zero_final.res"), res).ok());
  // An intact run writes the prediction from the final record, so this is
  // corrupt: the report says why and exits DataLoss.
  const std::string text = Report("zero_final.res", false, "", "",
                                  absl::StatusCode::kDataLoss);
  EXPECT_THAT(text, HasSubstr("WARNING: the final record's 512 logits are all "
                              "+0.0"));
  // Its argmax (0) no longer matches the row 63 prediction (511).
  EXPECT_THAT(text, HasSubstr("final record argmax 0 differs from the row 63 "
                              "prediction 511"));
  EXPECT_THAT(Report("zero_final.res", true, "", "",
                     absl::StatusCode::kDataLoss),
              HasSubstr("\"final_record_all_zero\":true"));
}

// A complete result whose error notifier records a failed run (a run that
// meets an error stops before its tail) fails verify, naming the field.
TEST_F(InspectTest, VerifyFailsAResultRecordingAnError) {
  const std::string good = *ReadFile(Path("complete.res"));
  // tiny error notifier at 26880: invalid token (u32) at +16, CUDA error
  // (i32) at +20, text at +24.
  std::string cuda = good;
  const char code[4] = {'\xbc', '\x02', 0, 0};  // 700
  std::copy(code, code + 4, cuda.begin() + 26900);
  const std::string text = "illegal address";
  std::copy(text.begin(), text.end(), cuda.begin() + 26904);
  ASSERT_TRUE(WriteFileAtomically(Path("cuda_error.res"), cuda).ok());
  std::string report;
  absl::Status s = Verify({"cuda_error.res"}, &report);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(report,
              HasSubstr("offset 26900 (error notifier.cuda_error): 700 with "
                        "text \"illegal address\", expected 0 (the run met a "
                        "CUDA error)"));
  // The text alone (what a run with non-finite losses records) is named as
  // the text field, not as a CUDA error (break-it, session 21).
  std::string texted = good;
  const std::string nonfinite = "non-finite loss";
  std::copy(nonfinite.begin(), nonfinite.end(), texted.begin() + 26904);
  ASSERT_TRUE(WriteFileAtomically(Path("text_only.res"), texted).ok());
  s = Verify({"text_only.res"}, &report);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(report,
              HasSubstr("offset 26904 (error notifier.text): \"non-finite "
                        "loss\", expected no text (the run recorded an "
                        "error)"));
  std::string token = good;
  token[26896] = 1;
  ASSERT_TRUE(WriteFileAtomically(Path("invalid_token.res"), token).ok());
  s = Verify({"invalid_token.res"}, &report);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(report,
              HasSubstr("offset 26896 (error notifier.invalid_token_seen): 1, "
                        "expected 0"));
}

// An incomplete result says where it ends and what that means (break-it:
// every one said "tail from offset 8192 missing", also when the bytes from
// 8192 on were there). Tiny's layout (docs/FORMATS.md): forward record
// 0..6144, step windows of 256 bytes, the tail from 8192 to 27744.
TEST_F(InspectTest, IncompleteResultSaysWhereItEnds) {
  const std::string complete = *ReadFile(Path("complete.res"));
  const struct {
    size_t size;
    std::string why;
  } cases[] = {
      {6000,
       "it ends inside the forward record (bytes 0..6144, written whole "
       "before the first step): the file was cut short"},
      {6144 + 3 * 256,
       "the run stopped after 3 of 8 steps: its step windows end at byte "
       "6912; the tail, from offset 8192, is written only when a run "
       "finishes"},
      {6144 + 3 * 256 + 100,
       "the run stopped after 3 of 8 steps: its step windows end at byte "
       "6912, then 100 bytes of step 3's; the tail, from offset 8192, is "
       "written only when a run finishes"},
      {8192,
       "all 8 step windows are there, but the tail (bytes 8192..27744, "
       "written whole when the run finished) ends at byte 8192: the file "
       "was cut short"},
      {10000,
       "all 8 step windows are there, but the tail (bytes 8192..27744, "
       "written whole when the run finished) ends at byte 10000: the file "
       "was cut short"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.size);
    ASSERT_TRUE(
        WriteFileAtomically(Path("cut.res"), complete.substr(0, c.size)).ok());
    std::string report;
    EXPECT_EQ(Verify({"cut.res"}, &report).code(), absl::StatusCode::kDataLoss);
    EXPECT_EQ(report, absl::StrCat("FAIL ", Path("cut.res"),
                                   ": incomplete: size ",
                                   c.size, " bytes, expected 27744 (", c.why,
                                   ")\n"));
  }
  // Only the marker: the run never wrote its forward record.
  ASSERT_TRUE(WriteFileAtomically(Path("cut.res"),
                                  "\xbe\xba\xfe\xca\xbe\xba\xfe\xca")
                  .ok());
  std::string report;
  EXPECT_EQ(Verify({"cut.res"}, &report).code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("incomplete: size 8 bytes, expected 27744 (it "
                                "holds only the marker: the run stopped "
                                "before its forward record)"));
}

// A result too short to name its config is measured against the default
// config's geometry; the failure says that it assumed it.
TEST_F(InspectTest, ShortResultSaysItsConfigIsAssumed) {
  ASSERT_TRUE(WriteFileAtomically(Path("short.res"), "\xbe\xba\xfe").ok());
  std::string report;
  EXPECT_EQ(Verify({"short.res"}, &report, "", "").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("incomplete: size 3 bytes, expected 41813600 "
                                "for config coppelius, assumed: the file does "
                                "not tell; --config=NAME names another"));
  // Named, the config is not called assumed.
  EXPECT_EQ(Verify({"short.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, Not(HasSubstr("assumed")));
}

// A result cut inside its forward record, under a name that does not say
// "result" (the main job's result-cNNNNNNNN.bin), is still read as a result
// when its first 4,096 bytes (the 1,024 values kind detection reads) are
// logits: reported as cut short inside the forward record, with the size
// found and expected (break-it: "not a token cache, checkpoint or result
// file (...; not a plausible ... forward record of logits)").
TEST_F(InspectTest, ResultCutInsideItsForwardRecordIsAResult) {
  const std::string complete = *ReadFile(Path("complete.res"));
  const std::string forward = complete.substr(0, 6144);  // tiny's 12 V
  std::string coppelius_forward;  // logits, as long as Coppelius' 12 V
  while (coppelius_forward.size() < 147456) coppelius_forward += forward;
  coppelius_forward.resize(147456);
  const std::string name = "cut-forward.bin";
  for (size_t size : {4096u, 6000u, 6143u, 30000u, 100000u, 147455u}) {
    SCOPED_TRACE(size);
    ASSERT_TRUE(WriteFileAtomically(Path(name),
                                    coppelius_forward.substr(0, size))
                    .ok());
    absl::StatusOr<FileKind> k = DetectFileKind(Path(name));
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ(*k, FileKind::kResult);
    std::string report;
    EXPECT_EQ(Verify({name}, &report, "", "").code(),
              absl::StatusCode::kDataLoss);
    EXPECT_EQ(report,
              absl::StrCat("FAIL ", Path(name), ": incomplete: size ", size,
                           " bytes, expected 41813600 for config coppelius, "
                           "assumed: the file does not tell; --config=NAME "
                           "names another (it ends inside the forward record "
                           "(bytes 0..147456, written whole before the first "
                           "step): the file was cut short)\n"));
    absl::Status s = Inspect(name, &report);
    EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
    EXPECT_THAT(s.message(), HasSubstr("ends inside the forward record"));
    EXPECT_THAT(report, HasSubstr(absl::StrCat("forward record: cut short (",
                                               size, " of 147456 bytes)")));
  }
  // Named, tiny's own forward record cut short is measured against tiny.
  ASSERT_TRUE(
      WriteFileAtomically(Path(name), complete.substr(0, 6143)).ok());
  std::string report;
  EXPECT_EQ(Verify({name}, &report).code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("incomplete: size 6143 bytes, expected 27744 "
                                "(it ends inside the forward record (bytes "
                                "0..6144,"));
  // Fewer than 4,096 bytes cannot tell a forward record from other bytes:
  // refused as of no known kind, unless --kind names it a result.
  for (size_t size : {1u, 8u, 4095u}) {
    SCOPED_TRACE(size);
    ASSERT_TRUE(
        WriteFileAtomically(Path(name), complete.substr(0, size)).ok());
    absl::Status k = DetectFileKind(Path(name)).status();
    EXPECT_EQ(k.code(), absl::StatusCode::kDataLoss) << k;
    EXPECT_THAT(k.message(), HasSubstr("pass --kind to read it as one"));
    VerifyOptions o;
    o.paths = {Path(name)};
    o.kind = FileKind::kResult;
    o.config = "tiny";
    std::ostringstream out;
    EXPECT_EQ(RunVerify(o, out).code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(out.str(), HasSubstr(absl::StrCat(
                               "incomplete: size ", size,
                               " bytes, expected 27744 (it ends inside the "
                               "forward record")));
  }
}

// 8,192 bytes of logit-like values (1,536 of both signs) then 512 of no
// sign: the last read as losses but are no cross-entropies of the first
// as tiny's step 0 (review, session 23: reported as "config tiny (result
// size) ... all 8 step windows are there"). Read as what its head can
// be, a Coppelius forward record cut short.
TEST_F(InspectTest, TinySizedFileWhoseWindowsAreNoStepZeroIsNotTinys) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<float> values(2048);
  for (size_t i = 0; i < values.size(); ++i) {
    values[i] = i < 1536 ? normal(rng) : std::fabs(normal(rng));
  }
  ASSERT_TRUE(WriteFileAtomically(
                  Path("signed_then_abs.bin"),
                  std::string(reinterpret_cast<const char*>(values.data()),
                              4 * values.size()))
                  .ok());
  std::string report;
  EXPECT_EQ(Verify({"signed_then_abs.bin"}, &report, "", "").code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr(": incomplete: size 8192 bytes, expected "
                                "41813600 for config coppelius, assumed"));
  EXPECT_THAT(report, ::testing::Not(HasSubstr("config tiny")));
}

// A Coppelius result cut inside its forward record at a size that tiny's
// results have (6,144 .. 27,744) is not read as tiny's: from byte 6,144 on
// it holds logits of both signs where tiny has its step windows, per-row
// cross-entropies, never negative (break-it: "config tiny (result size)",
// "all 8 step windows are there, but the tail ... ends at byte 20000").
// Tiny's own results cut there are still tiny's.
TEST_F(InspectTest, CoppeliusForwardRecordCutAtATinySizeIsNotTinys) {
  const std::string complete = *ReadFile(Path("complete.res"));
  std::string coppelius_forward;  // logits, as long as Coppelius' 12 V
  while (coppelius_forward.size() < 147456) {
    coppelius_forward += complete.substr(0, 6144);
  }
  for (size_t size : {6144u + 256u, 6144u + 3u * 256u + 100u, 20000u}) {
    SCOPED_TRACE(size);
    for (const char* name : {"cut-forward.bin", "cut-forward.res"}) {
      SCOPED_TRACE(name);
      ASSERT_TRUE(WriteFileAtomically(Path(name),
                                      coppelius_forward.substr(0, size))
                      .ok());
      std::string report;
      EXPECT_EQ(Verify({name}, &report, "", "").code(),
                absl::StatusCode::kDataLoss);
      EXPECT_THAT(report,
                  HasSubstr(absl::StrCat(
                      ": incomplete: size ", size,
                      " bytes, expected 41813600 for config coppelius, "
                      "assumed: the file does not tell; --config=NAME names "
                      "another (it ends inside the forward record (bytes "
                      "0..147456,")));
      // Tiny's own result cut at the same size.
      ASSERT_TRUE(
          WriteFileAtomically(Path(name), complete.substr(0, size)).ok());
      EXPECT_EQ(Verify({name}, &report, "", "").code(),
                absl::StatusCode::kDataLoss);
      EXPECT_THAT(report, HasSubstr(absl::StrCat(": incomplete: size ", size,
                                                 " bytes, expected 27744 (")));
      EXPECT_THAT(report, Not(HasSubstr("assumed")));
      EXPECT_EQ(Inspect(name, &report).code(), absl::StatusCode::kDataLoss);
      EXPECT_THAT(report, HasSubstr("config tiny (result size)"));
    }
  }
}

TEST_F(InspectTest, VerifyGoodFiles) {
  std::string report;
  absl::Status s = Verify({"cache.tok", "model.ckpt", "complete.res"},
                          &report, "source.txt");
  EXPECT_TRUE(s.ok()) << s << "\n" << report;
  EXPECT_EQ(report, absl::StrCat("OK ", Path("cache.tok"),
                                 " (cache; ids < 512, the V of config tiny; "
                                 "fresh by its header's mtime and size only: "
                                 "--vocab=V also decodes its ids against the "
                                 "source)\n",
                                 "OK ", Path("model.ckpt"), " (checkpoint)\n",
                                 "OK ", Path("complete.res"), " (result)\n"));
}

// A cache does not name its vocabulary: without --config, verify says which
// V its ids were checked against and that the config was assumed (break-it:
// a cache of ids >= 512 passed silently, then `train --config=tiny` refused
// it); checkpoints and results name their config (JSON: config,
// config_source).
TEST_F(InspectTest, VerifySaysWhichConfigACacheWasCheckedAgainst) {
  std::string report;
  ASSERT_TRUE(Verify({"bad_ids.tok"}, &report, "", "").ok()) << report;
  EXPECT_EQ(report,
            absl::StrCat("OK ", Path("bad_ids.tok"),
                         " (cache; ids < 12288, the V of config coppelius: "
                         "assumed, a cache does not name its vocabulary; "
                         "--config=NAME checks another)\n"));
  VerifyOptions o;
  o.paths = {Path("bad_ids.tok"), Path("complete.res")};
  o.json = true;
  std::ostringstream out;
  ASSERT_TRUE(RunVerify(o, out).ok());
  EXPECT_THAT(out.str(),
              HasSubstr("\"kind\":\"cache\",\"config\":\"coppelius\","
                        "\"config_source\":\"default: the file does not "
                        "tell\""));
  EXPECT_THAT(out.str(),
              HasSubstr("\"kind\":\"result\",\"config\":\"tiny\","
                        "\"config_source\":\"result size and host tag\""));
}

TEST_F(InspectTest, VerifyRefusesAFreshCheckpoint) {
  std::string report;
  EXPECT_EQ(Verify({"fresh.ckpt"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report, absl::StrCat("FAIL ", Path("fresh.ckpt"),
                                 ": 0 bytes: a fresh-start input, not a "
                                 "complete checkpoint\n"));
  // The report describes it and succeeds: a fresh input is not corrupt.
  EXPECT_THAT(Report("fresh.ckpt"), HasSubstr("0 bytes, a fresh-start input"));
}

TEST_F(InspectTest, ReportFailsOnACorruptCheckpointAfterPrintingIt) {
  ASSERT_TRUE(WriteFileAtomically(Path("digest.ckpt"),
                                  *ReadFile(Path("model.ckpt"))).ok());
  ASSERT_TRUE(inspect_testing::CorruptPayloadByte(Path("digest.ckpt"), 5).ok());
  for (bool json : {false, true}) {
    const std::string text =
        Report("digest.ckpt", json, "", "", absl::StatusCode::kDataLoss);
    EXPECT_THAT(text, HasSubstr(json ? "\"digests_verified\":false"
                                     : "digests: FAILED"));
    // The full report, tensors included, comes before the failure.
    EXPECT_THAT(text, HasSubstr("final_norm.bias"));
  }
}

// Writes complete.res with `patches` (offset, 4 bytes) applied as `name`.
void PatchResult(const std::string& from, const std::string& name,
                 const std::vector<std::pair<size_t, std::string>>& patches) {
  std::string res = *ReadFile(from);
  for (const auto& [at, bytes] : patches) res.replace(at, bytes.size(), bytes);
  ASSERT_TRUE(WriteFileAtomically(name, res).ok());
}

std::string F32(float f) {
  return std::string(reinterpret_cast<char*>(&f), 4);
}
std::string U64(uint64_t v) {
  return std::string(reinterpret_cast<char*>(&v), 8);
}

TEST_F(InspectTest, TimesBeyondInt64AreNotPrintedAsDates) {
  // 2^63 - 1 ns is 2262-04-11T23:47:16.854775807Z, the last time an int64
  // holds; 2^63 and 2^64 - 1 are no real time and must not print as that
  // date. Cache header mtimes (read with --kind=cache).
  const struct {
    uint64_t ns;
    std::string text;
  } cases[] = {
      {9223372036854775807ull,
       "9223372036854775807 (2262-04-11T23:47:16.854775807Z)"},
      // A cache's source mtime is an i64 (FORMATS.md): the high half of
      // the u64 range is before 1970.
      {9223372036854775808ull,
       "-9223372036854775808 (1677-09-21T00:12:43.145224192Z)"},
      {18446744073709551615ull, "-1 (1969-12-31T23:59:59.999999999Z)"},
  };
  std::string cache = ReadFile(Path("cache.tok"))->substr(0, 16 + 4 * 10);
  for (const auto& c : cases) {
    cache.replace(0, 8, U64(c.ns));
    cache.replace(8, 8, U64(1u << 20));
    ASSERT_TRUE(WriteFileAtomically(Path("future.tok"), cache).ok());
    std::string report;
    (void)Inspect("future.tok", &report, "tiny");
    EXPECT_THAT(report, HasSubstr(absl::StrCat("header: source mtime ",
                                               c.text, ", source size")));
  }
  // A result's wall clock (host status at 26944: start at +72, end at +80;
  // both set to 2^64 - 1, so end >= start holds).
  PatchResult(Path("complete.res"), Path("future.res"),
              {{26944 + 72, U64(~0ull)}, {26944 + 80, U64(~0ull)}});
  const std::string text = Report("future.res");
  EXPECT_THAT(text, HasSubstr("wall: start 18446744073709551615 (beyond "
                              "2262-04-11, not a real time), end "
                              "18446744073709551615 (beyond 2262-04-11, not "
                              "a real time);"));
  EXPECT_THAT(text, Not(HasSubstr("2262-04-11T")));
}

TEST_F(InspectTest, VerifyChecksNonFiniteStepsAgainstTheNotifier) {
  // tiny layout (trainer/result_file.h): windows at 6144, 256 bytes each;
  // error notifier at 26880 (i64 first step, u64 count).
  const size_t step2_row5 = 6144 + 2 * 256 + 4 * 5;
  PatchResult(Path("complete.res"), Path("nan_window.res"),
              {{step2_row5, F32(NAN)}});
  std::string report;
  EXPECT_EQ(Verify({"nan_window.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report, absl::StrCat(
      "FAIL ", Path("nan_window.res"),
      ": offset 26888 (error notifier.nonfinite_steps): 0, expected 1 (steps "
      "whose window mean is non-finite, first step 2 at offset 6656)\n"));
  // The report mode fails the same file, after the report.
  EXPECT_THAT(Report("nan_window.res", false, "", "",
                     absl::StatusCode::kDataLoss),
              HasSubstr("PROBLEM: "));
  // The notifier agreeing (first step 2, 1 step) passes.
  PatchResult(Path("nan_window.res"), Path("nan_counted.res"),
              {{26880, U64(2)}, {26888, U64(1)}});
  EXPECT_TRUE(Verify({"nan_counted.res"}, &report).ok()) << report;
  // The right count but the wrong first step fails.
  PatchResult(Path("nan_window.res"), Path("nan_first.res"),
              {{26880, U64(5)}, {26888, U64(1)}});
  EXPECT_EQ(Verify({"nan_first.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr(": offset 26880 (error notifier."
                                "first_nonfinite_step): 5, expected 2"));
}

TEST_F(InspectTest, VerifyChecksThePredictionFlagAgainstTheFinalRecord) {
  // Final record at 24736 (512 fp32); host status at 26944, predictions at
  // +120 as {u32 token, u32 valid}: row 63's valid flag at 26944 + 140.
  PatchResult(Path("complete.res"), Path("nan_final.res"),
              {{24736 + 4 * 7, F32(INFINITY)}});
  std::string report;
  EXPECT_EQ(Verify({"nan_final.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report, absl::StrCat(
      "FAIL ", Path("nan_final.res"),
      ": offset 27084 (host status.predictions[2].valid, row 63): 1, "
      "expected 0 (the final record's logit 7 at offset 24764 is not "
      "finite)\n"));
  // Marked invalid: consistent.
  std::string zero(4, '\0');
  PatchResult(Path("nan_final.res"), Path("nan_final_invalid.res"),
              {{27084, zero}});
  EXPECT_TRUE(Verify({"nan_final_invalid.res"}, &report).ok()) << report;
  // A finite record marked invalid is the other inconsistency.
  PatchResult(Path("complete.res"), Path("finite_invalid.res"),
              {{27084, zero}});
  EXPECT_EQ(Verify({"finite_invalid.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("valid, row 63): 0, expected 1 (the final "
                                "record's logits are all finite)"));
}

// Results no run writes, though every block's own checks pass (new-user
// pass, session 27): a negative cross-entropy in a step window, a step 0
// window that is no cross-entropy of the forward record's logits (complete
// or cut short), and device memory recorded by the reference backend. Each
// fails with one line naming its offset, the file named once.
TEST_F(InspectTest, VerifyFailsResultsNoRunWrites) {
  // tiny: forward record 0..6144, step s's window at 6144 + 256 s; step 2,
  // row 5 at 6676.
  PatchResult(Path("complete.res"), Path("negative.res"),
              {{6676, F32(-1.0f)}});
  std::string report;
  EXPECT_EQ(Verify({"negative.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report, absl::StrCat("FAIL ", Path("negative.res"),
                                 ": offset 6676 (step 2's window, row 5): -1, "
                                 "expected a cross-entropy (>= 0, or "
                                 "non-finite in a diverged run)\n"));
  // Row 15 (T/4 - 1) of step 0 at 6144 + 60: its forward row's logits
  // -|v - 100|, v < 512, allow losses from logsumexp - 0 to logsumexp + 411
  // (give or take the documented tolerance 0.01 + 1e-3 (|lse| + 411)), not
  // 1000.
  PatchResult(Path("complete.res"), Path("not_step_zero.res"),
              {{6204, F32(1000.0f)}});
  double sum = 0;
  for (int v = 0; v < 512; ++v) sum += std::exp(-std::fabs(v - 100.0));
  const double lse = std::log(sum);  // the row's maximum is 0
  const double tolerance = 0.01 + 1e-3 * (std::fabs(lse) + 411.0);
  const std::string step_zero = absl::StrFormat(
      ": offset 6204 (step 0's window, row 15): 1000, expected a "
      "cross-entropy of the forward record's logits of row 15, between %.6g "
      "and %.6g (logsumexp - max and logsumexp - min: the same forward, SPEC "
      "section 7)",
      lse - tolerance, lse + 411.0 + tolerance);
  EXPECT_EQ(Verify({"not_step_zero.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report,
            absl::StrCat("FAIL ", Path("not_step_zero.res"), step_zero, "\n"));
  // 411 is inside that range: the same file with it passes.
  PatchResult(Path("complete.res"), Path("step_zero_ok.res"),
              {{6204, F32(411.0f)}});
  EXPECT_TRUE(Verify({"step_zero_ok.res"}, &report).ok()) << report;
  // Cut short after two windows: both lines, the window's first.
  ASSERT_TRUE(inspect_testing::CopyPrefix(Path("not_step_zero.res"),
                                          Path("not_step_zero_cut.res"),
                                          6144 + 2 * 256)
                  .ok());
  EXPECT_EQ(Verify({"not_step_zero_cut.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  std::vector<std::string> lines = absl::StrSplit(report, '\n');
  ASSERT_EQ(lines.size(), 3u) << report;
  EXPECT_EQ(lines[0], absl::StrCat("FAIL ", Path("not_step_zero_cut.res"),
                                   step_zero));
  EXPECT_THAT(lines[1], HasSubstr("incomplete: size 6656 bytes"));
  // Host status at 26944, peak device memory at +112.
  PatchResult(Path("complete.res"), Path("reference_memory.res"),
              {{27056, U64(1000000000000000)}});
  EXPECT_EQ(Verify({"reference_memory.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report, absl::StrCat(
      "FAIL ", Path("reference_memory.res"),
      ": offset 27056 (host status.peak_device_memory_bytes): expected 0 for "
      "backend reference, found 1000000000000000\n"));
}

// A kind taken from the extension that the content contradicts: the
// failure says what the content reads as, and how to read it so (new-user
// pass, session 27: a cache named .res had failed as an incomplete result,
// one named .ckpt on its magic, with no hint).
TEST_F(InspectTest, AnExtensionTheContentContradictsIsNamedInTheFailure) {
  const std::string cache = *ReadFile(Path("cache.tok"));
  ASSERT_TRUE(WriteFileAtomically(Path("cache_named.res"), cache).ok());
  ASSERT_TRUE(WriteFileAtomically(Path("cache_named.ckpt"), cache).ok());
  const std::string note =
      " (the kind comes from the extension .res; the content reads as a "
      "cache: --kind=cache reads it as one)";
  std::string report;
  EXPECT_EQ(Verify({"cache_named.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  std::vector<std::string> lines = absl::StrSplit(report, '\n');
  ASSERT_GE(lines.size(), 2u) << report;
  EXPECT_THAT(lines[0], HasSubstr("FAIL " + Path("cache_named.res")));
  EXPECT_TRUE(absl::EndsWith(lines[0], note)) << lines[0];
  const absl::Status s = Inspect("cache_named.ckpt", &report);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("expected \"COPPCKPT\""));
  EXPECT_THAT(s.message(),
              HasSubstr("(the kind comes from the extension .ckpt; the content "
                        "reads as a cache: --kind=cache reads it as one)"));
  // What the content agrees with gets no note, nor does an empty file (a
  // checkpoint only by the rule for fresh-start inputs).
  EXPECT_EQ(Verify({"partial.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, Not(HasSubstr("the kind comes from the extension")));
  ASSERT_TRUE(WriteFileAtomically(Path("empty.res"), "").ok());
  EXPECT_EQ(Verify({"empty.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("FAIL " + Path("empty.res")));
  EXPECT_THAT(report, Not(HasSubstr("the kind comes from the extension")));
}

TEST_F(InspectTest, PlotRequiresConsecutiveRuns) {
  PlotOptions o;
  o.output = "-";
  o.config = "tiny";
  std::ostringstream out;
  o.results = {Path("complete.res"), Path("next.res")};
  EXPECT_TRUE(RunPlot(o, out).ok());
  // r2 r1, r1 r1, a gap (24 + 8 = 32, gap.res starts at 40).
  const struct {
    std::vector<std::string> files;
    std::string message;
  } cases[] = {
      {{"next.res", "complete.res"},
       absl::StrCat("plot: ", Path("complete.res"), " starts at context c0 "
                    "16, expected 32 = c0 24 + 8 steps of the previous file ",
                    Path("next.res"), " (give consecutive runs in order)")},
      {{"complete.res", "complete.res"},
       absl::StrCat("plot: ", Path("complete.res"), " starts at context c0 "
                    "16, expected 24 = c0 16 + 8 steps of the previous file ",
                    Path("complete.res"), " (give consecutive runs in order)")},
      {{"complete.res", "next.res", "gap.res"},
       absl::StrCat("plot: ", Path("gap.res"), " starts at context c0 "
                    "40, expected 32 = c0 24 + 8 steps of the previous file ",
                    Path("next.res"), " (give consecutive runs in order)")},
  };
  for (const auto& c : cases) {
    o.results.clear();
    for (const std::string& f : c.files) o.results.push_back(Path(f));
    absl::Status s = RunPlot(o, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), c.message);
  }
  // Only result files.
  o.results = {Path("complete.res"), Path("model.ckpt")};
  absl::Status wrong = RunPlot(o, out);
  EXPECT_EQ(wrong.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(wrong.message(), absl::StrCat("plot: ", Path("model.ckpt"),
                                          ": a checkpoint, expected a result "
                                          "file"));
  // An incomplete run can only be the last.
  o.results = {Path("partial.res"), Path("complete.res")};
  absl::Status s = RunPlot(o, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("only the last file may be incomplete"));
}

// The points of the line `id` in `svg` (its path's data without the
// first subpath's "M"; a later "M" starts the line again after a gap).
std::string PolylinePoints(const std::string& svg, const std::string& id) {
  const size_t at = svg.find(absl::StrCat("id=\"", id, "\""));
  if (at == std::string::npos) return "(no " + id + ")";
  size_t pts = svg.find(" d=\"", at) + 4;
  if (svg[pts] == 'M') ++pts;
  return svg.substr(pts, svg.find('"', pts) - pts);
}

// A run that completed with non-finite losses (train records "non-finite
// loss" in the error notifier, then exits 1) is drawn, with a warning, its
// non-finite step as a gap; verify still fails it (break-it, session 22:
// plot refused it as corrupt). Tiny's layout: step s's window of 64 fp32 at
// 6144 + 256 s; the notifier at 26880 (first non-finite step i64, count
// u64, ..., text at +24).
TEST_F(InspectTest, PlotDrawsARunThatRecordedNonFiniteLosses) {
  std::string res = *ReadFile(Path("complete.res"));
  const float nan = std::nanf("");
  for (int row = 0; row < 64; ++row) {
    std::memcpy(&res[6144 + 256 * 3 + 4 * row], &nan, 4);
  }
  const int64_t first = 3;
  const uint64_t count = 1;
  std::memcpy(&res[26880], &first, 8);
  std::memcpy(&res[26888], &count, 8);
  const std::string text = "non-finite loss";
  std::copy(text.begin(), text.end(), res.begin() + 26904);
  // Step 5's rows near the largest float: its mean is given in 6
  // significant digits, not 39 (break-it, session 22).
  const float huge = 3e38f;
  for (int row = 0; row < 64; ++row) {
    std::memcpy(&res[6144 + 256 * 5 + 4 * row], &huge, 4);
  }
  ASSERT_TRUE(WriteFileAtomically(Path("diverged.res"), res).ok());
  const std::string report_text = Report("diverged.res", false, "", "",
                                         absl::StatusCode::kDataLoss);
  EXPECT_THAT(report_text, HasSubstr("; 1 step with a non-finite mean"));
  EXPECT_THAT(report_text, HasSubstr("    step      5  loss 3e+38  smoothed "));
  PlotOptions o;
  o.output = "-";
  o.config = "tiny";
  o.results = {Path("diverged.res")};
  std::ostringstream out, warnings;
  o.warnings = &warnings;
  const absl::Status s = RunPlot(o, out);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(out.str(), HasSubstr("<svg"));
  EXPECT_EQ(warnings.str(),
            absl::StrCat("inspect: warning: plot: ", Path("diverged.res"),
                         ": the run recorded \"non-finite loss\" (1 step with "
                         "a non-finite loss, the first step 3); drawn with "
                         "those steps as gaps in the per-step line (the "
                         "smoothed line averages the finite steps)\n"));
  // Step 3 is a gap in the per-step line: a new subpath at step 4.
  EXPECT_THAT(PolylinePoints(out.str(), "per-step"), HasSubstr(" M"));
  // From standard input the warning names "-", not the spooled copy
  // (review, session 24: it named /tmp/inspect-stdin.XXXXXX).
  {
    const int fd = open(Path("diverged.res").c_str(), O_RDONLY);
    ASSERT_GE(fd, 0);
    const int saved_stdin = dup(STDIN_FILENO);
    dup2(fd, STDIN_FILENO);
    close(fd);
    PlotOptions from_stdin = o;
    from_stdin.results = {"-"};
    std::ostringstream svg;
    warnings.str("");
    const absl::Status piped = RunPlot(from_stdin, svg);
    dup2(saved_stdin, STDIN_FILENO);
    close(saved_stdin);
    ASSERT_TRUE(piped.ok()) << piped;
    EXPECT_EQ(warnings.str(),
              "inspect: warning: plot: -: the run recorded \"non-finite "
              "loss\" (1 step with a non-finite loss, the first step 3); "
              "drawn with those steps as gaps in the per-step line (the "
              "smoothed line averages the finite steps)\n");
  }
  // Any other text, or that text without a count, is not what train
  // writes: refused as before.
  for (const auto& [other_text, other_count] :
       std::vector<std::pair<std::string, uint64_t>>{{"out of memory", 1},
                                                     {"non-finite loss", 0}}) {
    std::string other = res;
    std::fill(other.begin() + 26904, other.begin() + 26904 + 16, '\0');
    std::copy(other_text.begin(), other_text.end(), other.begin() + 26904);
    std::memcpy(&other[26888], &other_count, 8);
    ASSERT_TRUE(WriteFileAtomically(Path("other_text.res"), other).ok());
    o.results = {Path("other_text.res")};
    EXPECT_EQ(RunPlot(o, out).code(), absl::StatusCode::kDataLoss)
        << other_text << " " << other_count;
  }
  std::string report;
  EXPECT_EQ(Verify({"diverged.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("(error notifier.text): \"non-finite loss\""));
}

// A result that detection takes for another kind (a run cut short, saved
// as .tok) is plotted with --kind=result, as detection's error advises
// ("pass --kind to read it as one"); plot and export ignored --kind.
TEST_F(InspectTest, PlotAndExportHonourKind) {
  ASSERT_TRUE(inspect_testing::CopyPrefix(Path("complete.res"),
                                          Path("cut-result.tok"), 20000)
                  .ok());
  PlotOptions o;
  o.output = "-";
  o.config = "tiny";
  o.results = {Path("cut-result.tok")};
  std::ostringstream out;
  absl::Status s = RunPlot(o, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), absl::StrCat("plot: ", Path("cut-result.tok"),
                                      ": a cache, expected a result file"));
  o.kind = FileKind::kResult;
  s = RunPlot(o, out);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(out.str(), HasSubstr("<svg"));
  o.kind = FileKind::kCheckpoint;
  EXPECT_EQ(RunPlot(o, out).code(), absl::StatusCode::kInvalidArgument);

  ExportOptions e;
  e.checkpoint = Path("complete.res");
  e.output = Path("kind.safetensors");
  e.kind = FileKind::kCheckpoint;
  s = RunExport(e, out);  // read as a checkpoint: not one
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("COPPCKPT"));
  e.kind = FileKind::kResult;
  s = RunExport(e, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_EQ(s.message(), absl::StrCat("export: ", Path("complete.res"),
                                      ": a result, expected a checkpoint"));
}

TEST_F(InspectTest, BadFlagValues) {
  std::ostringstream out;
  InspectOptions i;
  i.path = Path("model.ckpt");
  i.threads = 0;
  EXPECT_EQ(RunInspect(i, out).code(), absl::StatusCode::kInvalidArgument);
  i.threads = 2;
  i.smoothing_steps = 0;
  absl::Status s = RunInspect(i, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--smoothing=0: expected an integer >= 1");
  VerifyOptions v;
  v.paths = {Path("model.ckpt")};
  v.threads = -1;
  s = RunVerify(v, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "--threads=-1: expected an integer >= 1");
  PlotOptions p;
  p.results = {Path("complete.res")};
  p.output = "-";
  p.smoothing_steps = 0;
  EXPECT_EQ(RunPlot(p, out).code(), absl::StatusCode::kInvalidArgument);
  ExportOptions e;
  e.checkpoint = Path("model.ckpt");
  e.output = "-";
  e.threads = 0;
  EXPECT_EQ(RunExport(e, out).code(), absl::StatusCode::kInvalidArgument);
  // At most 1,024 threads (common/threads.h), as train: 1,025 and 100,000
  // are refused before any file is read; 1,024 is taken.
  for (int threads : {1025, 100000}) {
    const std::string message =
        absl::StrCat("--threads=", threads, ": expected at most 1024");
    i.threads = threads;
    i.smoothing_steps = 100;
    s = RunInspect(i, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), message);
    v.threads = threads;
    s = RunVerify(v, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), message);
    e.threads = threads;
    s = RunExport(e, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(s.message(), message);
  }
  v.threads = 1024;
  v.config = "tiny";
  std::ostringstream report;
  EXPECT_TRUE(RunVerify(v, report).ok()) << report.str();
}

TEST_F(InspectTest, WarnsAboutFlagsTheKindDoesNotUse) {
  const struct {
    std::string file, source, vocab, warning;
  } cases[] = {
      {"model.ckpt", "source.txt", "", "--source is for token caches"},
      {"complete.res", "source.txt", "", "--source is for token caches"},
      {"cache.tok", "", "vocab.tiktoken", "--vocab is for result files"},
      {"model.ckpt", "", "vocab.tiktoken", "--vocab is for result files"},
      {"cache.tok", "source.txt", "", ""},
      {"complete.res", "", "vocab.tiktoken", ""},
  };
  for (const auto& c : cases) {
    InspectOptions o;
    o.path = Path(c.file);
    o.source = c.source.empty() ? "" : Path(c.source);
    o.vocab = c.vocab.empty() ? "" : Path(c.vocab);
    std::ostringstream out, warnings;
    o.warnings = &warnings;
    EXPECT_TRUE(RunInspect(o, out).ok()) << c.file;
    if (c.warning.empty()) {
      EXPECT_EQ(warnings.str(), "") << c.file;
    } else {
      const std::string w = warnings.str();
      EXPECT_THAT(w, HasSubstr(c.warning)) << c.file;
      EXPECT_EQ(std::count(w.begin(), w.end(), '\n'), 1) << w;
    }
  }
}

// verify warns that --source and --vocab were ignored when every FILE is of
// a kind that does not use them, not when a FILE's kind is unknown (a
// missing cache path): that file may be the cache they were meant for.
TEST_F(InspectTest, VerifyWarnsOfIgnoredSourceOnlyForKnownKinds) {
  const struct {
    std::string file;
    bool warned;
  } cases[] = {{"model.ckpt", true}, {"no-such-cache.tok", false}};
  for (const auto& c : cases) {
    VerifyOptions v;
    v.paths = {Path(c.file)};
    v.source = Path("source.txt");
    v.vocab = Path("vocab.tiktoken");
    std::ostringstream out, warnings;
    v.warnings = &warnings;
    (void)RunVerify(v, out);
    const std::string w = warnings.str();
    EXPECT_EQ(w.find("--source is for token caches") != std::string::npos,
              c.warned)
        << c.file << ": " << w;
    EXPECT_EQ(w.find("--vocab ignored") != std::string::npos, c.warned)
        << c.file << ": " << w;
  }
}

TEST_F(InspectTest, VerifyFailuresOneLineEach) {
  ASSERT_TRUE(WriteFileAtomically(Path("corrupt.ckpt"),
                                  *ReadFile(Path("multi.ckpt")))
                  .ok());
  // Chunks of 65536 bytes: bytes 3 * 65536 + 5 and 10 * 65536 lie in chunks
  // 3 and 10.
  ASSERT_TRUE(
      inspect_testing::CorruptPayloadByte(Path("corrupt.ckpt"), 3 * 65536 + 5)
          .ok());
  ASSERT_TRUE(
      inspect_testing::CorruptPayloadByte(Path("corrupt.ckpt"), 10 * 65536)
          .ok());
  std::string report;
  absl::Status s = Verify({"model.ckpt", "corrupt.ckpt", "partial.res",
                           "marker.res", "bad_ids.tok"},
                          &report);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("4 of 5 files failed"));
  std::vector<std::string> lines = absl::StrSplit(report, '\n');
  ASSERT_EQ(lines.size(), 9u) << report;  // 8 lines + the empty tail
  EXPECT_EQ(lines[0], absl::StrCat("OK ", Path("model.ckpt"), " (checkpoint)"));
  // corrupt.ckpt's 64 KiB chunks are not a tiny run's 4 MiB: refused first.
  EXPECT_EQ(lines[1], absl::StrCat("FAIL ", Path("corrupt.ckpt"),
                                   ": checkpoint refused: identity field "
                                   "chunk_bytes is 65536, the run expects "
                                   "4194304"));
  EXPECT_THAT(lines[2], HasSubstr("FAIL " + Path("corrupt.ckpt")));
  EXPECT_THAT(lines[2], HasSubstr("chunk 3 of 25"));
  EXPECT_THAT(lines[3], HasSubstr("chunk 10 of 25"));
  EXPECT_THAT(lines[2], HasSubstr("(2 of 25 chunks differ)"));
  EXPECT_THAT(lines[3], HasSubstr("(2 of 25 chunks differ)"));
  EXPECT_THAT(lines[4], HasSubstr("FAIL " + Path("partial.res")));
  // 6144 + 3 * 256 + 100 = 7012 bytes of 27744.
  EXPECT_THAT(lines[4], HasSubstr("size 7012 bytes, expected 27744 (the run "
                                  "stopped after 3 of 8 steps"));
  EXPECT_THAT(lines[5], HasSubstr("marker be ba fe ca"));
  EXPECT_THAT(lines[6], HasSubstr("incomplete: size 8 bytes"));
  EXPECT_THAT(lines[7], HasSubstr("FAIL " + Path("bad_ids.tok")));
  EXPECT_THAT(lines[7], HasSubstr("600"));
}

// A report's first line names its file with control characters escaped,
// as verify's OK/FAIL lines and the error lines do: a newline in the name
// does not split the header line.
TEST_F(InspectTest, ReportHeadersEscapeControlCharactersInTheirPath) {
  for (const auto& [name, kind] :
       std::vector<std::pair<std::string, std::string>>{
           {"cache.tok", "token cache "},
           {"model.ckpt", "checkpoint "},
           {"fresh.ckpt", "checkpoint "},
           {"complete.res", "result "}}) {
    const std::string odd = absl::StrCat("odd\nname\t", name);
    ASSERT_TRUE(
        WriteFileAtomically(Path(odd), *ReadFile(Path(name))).ok());
    std::string report;
    ASSERT_TRUE(Inspect(odd, &report, "tiny").ok()) << name;
    const std::string first = report.substr(0, report.find('\n'));
    EXPECT_EQ(first.rfind(kind, 0), 0u) << first;
    EXPECT_THAT(first, HasSubstr("odd\\nname\\t" + name)) << first;
  }
}

TEST_F(InspectTest, CacheHeaderMustBeASourcesAsMakeCacheRequires) {
  // cache.tok's 1,281 ids under other headers (read as caches by their
  // extension). make-cache calls a file whose header has a source mtime
  // more than a day ahead, or fewer source bytes than ids, not a token
  // cache; verify fails it and the report ends in DataLoss after printing.
  const std::string ids = ReadFile(Path("cache.tok"))->substr(16);
  auto write = [&](const std::string& name, uint64_t mtime, uint64_t size) {
    ASSERT_TRUE(
        WriteFileAtomically(Path(name), U64(mtime) + U64(size) + ids).ok());
  };
  write("max_header.tok", 1ull << 62, ~0ull);  // year 2116
  write("few_bytes.tok", 1700000000000000000ull, 1280);
  write("stdin.tok", 0, 1281);  // stdin, one byte per id: a source's
  // A source dated before 1970 (a negative i64): a source's, its date shown.
  write("old.tok", static_cast<uint64_t>(-315619199500000000LL), 2000);
  const std::string max = Path("max_header.tok");
  std::string report;
  absl::Status s = Verify({"max_header.tok"}, &report);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), 1) << report;
  EXPECT_EQ(report, absl::StrCat(
                        "FAIL ", max, ": its header's source mtime 4611686018427387904 ns "
                        "(offset 0) is more than a year ahead; not a token "
                        "cache as make-cache writes them\n"));
  const std::string few = Path("few_bytes.tok");
  s = Verify({"few_bytes.tok"}, &report);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(report,
            absl::StrCat("FAIL ", few, ": its header names 1280 source bytes (offset 8) for "
                         "1281 tokens, fewer than one per token; not a token "
                         "cache as make-cache writes them\n"));
  EXPECT_TRUE(Verify({"stdin.tok"}, &report).ok()) << report;
  EXPECT_EQ(report, absl::StrCat("OK ", Path("stdin.tok"),
                                 " (cache; ids < 512, the V of config tiny)\n"));
  // The report: printed in full with the problem, then DataLoss.
  s = Inspect("few_bytes.tok", &report, "tiny");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(),
              HasSubstr("1280 source bytes (offset 8) for 1281 tokens"));
  EXPECT_THAT(report, HasSubstr("  PROBLEM: " + few + ": its header names 1280"));
  EXPECT_THAT(report, HasSubstr("tokens: 1281\n"));
  EXPECT_TRUE(Inspect("stdin.tok", &report, "tiny").ok()) << report;
  EXPECT_TRUE(Inspect("old.tok", &report, "tiny").ok()) << report;
  EXPECT_THAT(report, HasSubstr("source mtime -315619199500000000 "
                                "(1960-01-01T00:00:00.500000000Z)"));
}

TEST_F(InspectTest, VerifyStaleCache) {
  const std::string source2 = Path("source2.txt");
  ASSERT_TRUE(WriteFileAtomically(source2, std::string(2001, 'y')).ok());
  std::string report;
  absl::Status s = Verify({"cache.tok"}, &report, "source2.txt");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("FAIL " + Path("cache.tok")));
  EXPECT_THAT(report, HasSubstr("size 2000"));
  EXPECT_THAT(report, HasSubstr("size 2001"));
}

TEST_F(InspectTest, HostileInputs) {
  InspectOptions o;
  o.config = "tiny";
  std::ostringstream out;
  o.path = Path("missing");
  EXPECT_EQ(RunInspect(o, out).code(), absl::StatusCode::kNotFound);
  o.path = Path("cache.tok");
  o.config = "huge";
  EXPECT_EQ(RunInspect(o, out).code(), absl::StatusCode::kInvalidArgument);
  o.config = "tiny";
  // A cache of a bad size.
  ASSERT_TRUE(WriteFileAtomically(Path("odd.tok"), std::string(18, '\0')).ok());
  o.path = Path("odd.tok");
  EXPECT_EQ(RunInspect(o, out).code(), absl::StatusCode::kDataLoss);
  // A complete result with a corrupt host tag: DataLoss naming the offset.
  std::string res = *ReadFile(Path("complete.res"));
  res[26944] = 'X';
  ASSERT_TRUE(WriteFileAtomically(Path("badtag.res"), res).ok());
  o.path = Path("badtag.res");
  absl::Status s = RunInspect(o, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("offset 26944 (host status.tag)"));
  // The same without extension or --config: still a tiny result (by size).
  ASSERT_TRUE(WriteFileAtomically(Path("badtag"), res).ok());
  InspectOptions bare;
  bare.path = Path("badtag");
  s = RunInspect(bare, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr("offset 26944 (host status.tag)"));
  // A checkpoint whose magic is damaged reads as a cache of a bad size or a
  // DataLoss: in both cases an error, never a crash; with --kind it names
  // the magic.
  std::string ck = *ReadFile(Path("model.ckpt"));
  ck[0] = 'X';
  ASSERT_TRUE(WriteFileAtomically(Path("badmagic.ckpt"), ck).ok());
  o.path = Path("badmagic.ckpt");
  o.kind = FileKind::kCheckpoint;
  EXPECT_EQ(RunInspect(o, out).code(), absl::StatusCode::kDataLoss);
  // Flag-level errors.
  EXPECT_EQ(ParseFileKind("blob").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunVerify(VerifyOptions(), out).code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(InspectTest, ExportSafetensors) {
  ExportOptions o;
  o.checkpoint = Path("model.ckpt");
  o.output = Path("model.safetensors");
  o.config = "tiny";
  std::ostringstream out;
  ASSERT_TRUE(RunExport(o, out).ok());
  const std::string b = *ReadFile(o.output);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(b[i]);
  EXPECT_EQ(n % 8, 0u);
  // tiny has 133,760 parameters (trainer/model_config.h).
  EXPECT_EQ(b.size(), 8 + n + 4 * 133760);
  const std::string header = b.substr(8, n);
  EXPECT_EQ(header.rfind("{\"__metadata__\":{\"format\":\"pt\"", 0), 0u);
  EXPECT_THAT(header, HasSubstr("\"update_count\":\"16\""));
  EXPECT_THAT(header, HasSubstr(
      "\"embedding\":{\"dtype\":\"F32\",\"shape\":[512,64],"
      "\"data_offsets\":[0,131072]}"));
  EXPECT_EQ(header.find("lm_head"), std::string::npos);
  float first;
  std::memcpy(&first, b.data() + 8 + n, 4);
  EXPECT_EQ(first, -0.5f);

  o.checkpoint = Path("fresh.ckpt");
  o.output = Path("fresh.safetensors");
  EXPECT_EQ(RunExport(o, out).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(access(o.output.c_str(), F_OK), -1);
  // A corrupt payload is refused and leaves no output.
  ASSERT_TRUE(WriteFileAtomically(Path("c2.ckpt"),
                                  *ReadFile(Path("model.ckpt"))).ok());
  ASSERT_TRUE(inspect_testing::CorruptPayloadByte(Path("c2.ckpt"), 77).ok());
  o.checkpoint = Path("c2.ckpt");
  o.output = Path("c2.safetensors");
  EXPECT_EQ(RunExport(o, out).code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(access(o.output.c_str(), F_OK), -1);
}

TEST_F(InspectTest, PlotConsecutiveRuns) {
  PlotOptions o;
  o.results = {Path("complete.res"), Path("partial.res")};
  o.output = "-";
  o.config = "tiny";
  o.smoothing_steps = 2;
  std::ostringstream out;
  ASSERT_TRUE(RunPlot(o, out).ok());
  const std::string svg = out.str();
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  // Steps counted from the first run's c0 (16): ticks 16 .. 26.
  EXPECT_THAT(svg, HasSubstr(">step (context trained on: c0 + s)</text>"));
  EXPECT_THAT(svg, HasSubstr("text-anchor=\"middle\">16</text>"));
  EXPECT_THAT(svg, HasSubstr("text-anchor=\"middle\">26</text>"));
  EXPECT_THAT(svg, HasSubstr("mean cross-entropy loss"));
  // An incomplete first file names no c0: counted from 0, and said so.
  PlotOptions partial = o;
  partial.results = {Path("partial.res")};
  std::ostringstream partial_out;
  ASSERT_TRUE(RunPlot(partial, partial_out).ok());
  EXPECT_THAT(partial_out.str(),
              HasSubstr(">step (from 0: the first file is incomplete and "
                        "names no c0)</text>"));
  // 8 + 3 steps: 11 points on the per-step curve.
  const std::string points = PolylinePoints(svg, "per-step");
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 11);
  EXPECT_EQ(points.find('M'), std::string::npos);  // no gap
  // One boundary between the two runs.
  EXPECT_EQ(svg.find("class=\"run-start\""),
            svg.rfind("class=\"run-start\""));
  EXPECT_NE(svg.find("class=\"run-start\""), std::string::npos);
  o.results = {Path("marker.res")};
  EXPECT_EQ(RunPlot(o, out).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(InspectTest, RandomMutationsNeverCrash) {
  // Bounded, deterministic: mutants of each kind through detection, the
  // report (text and JSON) and verify. Every outcome is OK or a one-line
  // error; nothing crashes.
  std::mt19937_64 rng(20260925);
  for (const char* name : {"cache.tok", "model.ckpt", "complete.res"}) {
    const std::string original = *ReadFile(Path(name));
    for (int iter = 0; iter < 60; ++iter) {
      std::string bad = original;
      const int flips = 1 + rng() % 3;
      for (int f = 0; f < flips; ++f) {
        // Half the flips in the first 4 KiB, where the headers are.
        const size_t at = iter % 2 ? rng() % std::min<size_t>(4096, bad.size())
                                   : rng() % bad.size();
        bad[at] = static_cast<char>(rng());
      }
      if (iter % 5 == 0) bad.resize(rng() % (bad.size() + 1));
      const std::string path = Path("mutant");
      ASSERT_TRUE(WriteFileAtomically(path, bad).ok());
      for (bool json : {false, true}) {
        InspectOptions o;
        o.path = path;
        o.config = "tiny";
        o.json = json;
        std::ostringstream out;
        absl::Status s = RunInspect(o, out);
        EXPECT_EQ(std::string(s.message()).find('\n'), std::string::npos)
            << s;
      }
      VerifyOptions v;
      v.paths = {path};
      v.config = "tiny";
      std::ostringstream out;
      absl::Status s = RunVerify(v, out);
      if (!s.ok()) {
        // One FAIL line per failure, each naming the file.
        for (absl::string_view line : absl::StrSplit(
                 out.str(), '\n', absl::SkipEmpty())) {
          EXPECT_EQ(line.rfind("FAIL " + path, 0), 0u) << line;
        }
      }
    }
  }
}

TEST(TensorStats, ByHand) {
  const float v[] = {1, 2, 3, 4, NAN, INFINITY};
  TensorStats s = ComputeTensorStats(v, 6);
  EXPECT_EQ(s.count, 6);
  EXPECT_EQ(s.nonfinite, 2);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(1.25));
  EXPECT_EQ(s.min, 1);
  EXPECT_EQ(s.max, 4);
  TensorStats none = ComputeTensorStats(v + 4, 2);
  EXPECT_EQ(none.nonfinite, 2);
  EXPECT_EQ(none.mean, 0);
}

// A tensor with no finite value reports no statistics rather than zeros
// that read as a tensor of zeros (break-it, session 21: "P mean +0 std 0
// min +0 max +0 nonfinite 32768"); in JSON they are null.
TEST_F(InspectTest, TensorsWithoutFiniteValuesHaveNoStatistics) {
  const ModelConfig config = *ModelConfigByName("tiny");
  const CheckpointIdentity id = RunCheckpointIdentity(config);
  std::vector<float> pmv(id.payload_bytes / sizeof(float), std::nanf(""));
  ASSERT_TRUE(PublishCheckpoint(Path("all_nan.ckpt"), id, 16, pmv.data(),
                                id.payload_bytes, {})
                  .ok());
  std::string report;
  // Reported whole, then refused: no healthy run writes it.
  EXPECT_EQ(Inspect("all_nan.ckpt", &report).code(),
            absl::StatusCode::kDataLoss)
      << report;
  EXPECT_THAT(report, HasSubstr("P no finite value (nonfinite "));
  EXPECT_THAT(report, ::testing::Not(HasSubstr("mean +0 std 0")));
  const std::string json = Report("all_nan.ckpt", /*json=*/true, "", "",
                                  absl::StatusCode::kDataLoss);
  EXPECT_THAT(json, HasSubstr("\"mean\":null"));
  EXPECT_THAT(json, ::testing::Not(HasSubstr("\"mean\":0,")));
}

// A checkpoint's identity strings are the file's text: printed with
// control bytes escaped, so a forged newline cannot start a line of the
// report and a terminal escape does not reach the terminal (break-it,
// session 23: "FAKE: all good" printed as a line of its own).
TEST_F(InspectTest, IdentityTextIsPrintedEscaped) {
  const ModelConfig config = *ModelConfigByName("tiny");
  CheckpointIdentity id = RunCheckpointIdentity(config);
  id.data += "\nFAKE: all good\n";
  id.model += "\x1b[2J\r";
  std::vector<float> pmv(id.payload_bytes / sizeof(float), 0.0f);
  ASSERT_TRUE(PublishCheckpoint(Path("forged_identity.ckpt"), id, 16,
                                pmv.data(), id.payload_bytes, {})
                  .ok());
  std::string report;
  Inspect("forged_identity.ckpt", &report).IgnoreError();
  EXPECT_THAT(report, HasSubstr("\\nFAKE: all good\\n")) << report;
  EXPECT_THAT(report, HasSubstr("\\x1b[2J\\r")) << report;
  EXPECT_THAT(report, ::testing::Not(HasSubstr("\nFAKE")));
  EXPECT_EQ(report.find('\x1b'), std::string::npos);
  EXPECT_EQ(report.find('\r'), std::string::npos);
}

// A state no healthy run writes, with valid digests: a NaN in P, an
// infinity in M and a negative AdamW second moment in V (break-it, session
// 23: such a checkpoint passed verify). Verify fails it, one line per plane
// naming the offset, parameter and tensor; the report prints it whole with
// its statistics (a non-finite value counted, left out of the mean), then
// exits 1; JSON lists the problems.
TEST_F(InspectTest, StateNoHealthyRunWritesFailsVerify) {
  const ModelConfig config = *ModelConfigByName("tiny");
  const CheckpointIdentity id = RunCheckpointIdentity(config);
  const int64_t n = NumParameters(config);
  std::vector<float> pmv(3 * n, 0.5f);
  int64_t bias = -1;
  for (const TensorInfo& t : ParameterLayout(config)) {
    if (t.name == "final_norm.bias") bias = t.offset;
  }
  ASSERT_GE(bias, 0);
  pmv[bias + 1] = std::nanf("");
  pmv[n + 3] = INFINITY;
  pmv[2 * n + bias + 2] = -1.0f;
  ASSERT_TRUE(PublishCheckpoint(Path("diverged.ckpt"), id, 16, pmv.data(),
                                id.payload_bytes, {})
                  .ok());
  CheckpointReader reader = *CheckpointReader::Open(Path("diverged.ckpt"));
  const uint64_t at = reader.payload_offset();
  std::string report;
  EXPECT_EQ(Verify({"diverged.ckpt"}, &report, "", "").code(),
            absl::StatusCode::kDataLoss);
  const std::string path = Path("diverged.ckpt");
  EXPECT_EQ(
      report,
      absl::StrCat(
          "FAIL ", path, ": offset ", at + 4 * (bias + 1),
          " (plane P, parameter ", bias + 1,
          ", tensor final_norm.bias): 1 of ", n,
          " parameters are not finite: a diverged run's state (its forward "
          "gives non-finite losses)\n",
          "FAIL ", path, ": offset ", at + 4 * (n + 3),
          " (plane M, parameter 3, tensor embedding): 1 of ", n,
          " AdamW first moments are not finite: not a state a healthy run "
          "writes (the next update makes those parameters non-finite or "
          "stops them)\n",
          "FAIL ", path, ": offset ", at + 4 * (2 * n + bias + 2),
          " (plane V, parameter ", bias + 2,
          ", tensor final_norm.bias): 1 of ", n,
          " AdamW second moments are negative, expected >= 0 (V = beta2 V + "
          "(1 - beta2) g^2 never is): not a state AdamW writes\n"));
  EXPECT_EQ(Inspect("diverged.ckpt", &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("  PROBLEM: " + path + ": offset "));
  EXPECT_THAT(report, HasSubstr("    final_norm.bias\n"
                                "      P mean +0.5 std 0 min +0.5 max +0.5 "
                                "nonfinite 1\n"));
  const std::string json = Report("diverged.ckpt", /*json=*/true, "", "",
                                  absl::StatusCode::kDataLoss);
  EXPECT_THAT(json, HasSubstr("\"problems\":[\"" + path + ": offset "));
  // A good checkpoint's JSON has an empty list.
  EXPECT_THAT(Report("model.ckpt", /*json=*/true),
              HasSubstr("\"problems\":[]"));
}

// export --config=tiny refuses what a tiny run refuses, as report and
// verify do (break-it, session 24: it exported a checkpoint of 9 run steps,
// another seed or 64 KiB chunks and wrote the file); without --config the
// identity is not checked and the file is exported.
TEST_F(InspectTest, ExportRefusesWhatANamedConfigsRunRefuses) {
  for (const auto& c : kRefusedByTiny) {
    SCOPED_TRACE(c.name);
    ExportOptions o;
    o.checkpoint = Path(c.name);
    o.output = Path(absl::StrCat(c.name, ".safetensors"));
    o.config = "tiny";
    std::ostringstream out;
    const absl::Status s = RunExport(o, out);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_EQ(s.message(),
              absl::StrCat(Path(c.name), ": checkpoint refused: ", c.field));
    EXPECT_EQ(access(o.output.c_str(), F_OK), -1);
    o.config = "";
    EXPECT_TRUE(RunExport(o, out).ok());
    EXPECT_EQ(access(o.output.c_str(), F_OK), 0);
  }
}

// A state verify fails (non-finite P or M, negative V) is exported as the
// file holds it, with verify's problems as warnings (as train warns before
// running from it); from standard input the warnings name "-", not the
// spooled copy.
TEST_F(InspectTest, ExportWarnsOfAStateNoHealthyRunWrites) {
  const ModelConfig config = *ModelConfigByName("tiny");
  const CheckpointIdentity id = RunCheckpointIdentity(config);
  const int64_t n = NumParameters(config);
  std::vector<float> pmv(3 * n, 0.5f);
  pmv[7] = std::nanf("");
  pmv[2 * n + 9] = -1.0f;
  ASSERT_TRUE(PublishCheckpoint(Path("diverged.ckpt"), id, 16, pmv.data(),
                                id.payload_bytes, {})
                  .ok());
  const uint64_t at =
      CheckpointReader::Open(Path("diverged.ckpt"))->payload_offset();
  const auto expected = [&](const std::string& name) {
    return absl::StrCat(
        "inspect: warning: export: ", name, ": offset ", at + 4 * 7,
        " (plane P, parameter 7, tensor embedding): 1 of ", n,
        " parameters are not finite: a diverged run's state (its forward "
        "gives non-finite losses)\n",
        "inspect: warning: export: ", name, ": offset ", at + 4 * (2 * n + 9),
        " (plane V, parameter 9, tensor embedding): 1 of ", n,
        " AdamW second moments are negative, expected >= 0 (V = beta2 V + "
        "(1 - beta2) g^2 never is): not a state AdamW writes\n");
  };
  ExportOptions o;
  o.checkpoint = Path("diverged.ckpt");
  o.output = Path("diverged.safetensors");
  std::ostringstream warnings, out;
  o.warnings = &warnings;
  ASSERT_TRUE(RunExport(o, out).ok());
  EXPECT_EQ(warnings.str(), expected(Path("diverged.ckpt")));
  const std::string b = *ReadFile(o.output);
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) {
    header = (header << 8) | static_cast<unsigned char>(b[i]);
  }
  float p7;
  std::memcpy(&p7, b.data() + 8 + header + 4 * 7, 4);
  EXPECT_TRUE(std::isnan(p7));

  const int fd = open(Path("diverged.ckpt").c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  const int saved_stdin = dup(STDIN_FILENO);
  dup2(fd, STDIN_FILENO);
  close(fd);
  o.checkpoint = "-";
  o.output = Path("stdin.safetensors");
  warnings.str("");
  const absl::Status s = RunExport(o, out);
  dup2(saved_stdin, STDIN_FILENO);
  close(saved_stdin);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(warnings.str(), expected("-"));
  EXPECT_EQ(*ReadFile(o.output), b);
}

TEST(SmoothedCurve, TrailingMean) {
  EXPECT_EQ(SmoothedCurve({1, 2, 3, 4}, 2),
            (std::vector<double>{1, 1.5, 2.5, 3.5}));
  EXPECT_EQ(SmoothedCurve({1, 2, 3, 4}, 100),
            (std::vector<double>{1, 1.5, 2, 2.5}));
  // Non-finite steps are left out of their windows' means (a diverged
  // step does not blank the curve for a whole window); a window without a
  // finite value is NaN.
  std::vector<double> with_nan = SmoothedCurve({1, NAN, 3, 5}, 2);
  EXPECT_EQ(with_nan, (std::vector<double>{1, 1, 3, 4}));
  std::vector<double> gaps = SmoothedCurve({NAN, INFINITY, 2, NAN, NAN}, 2);
  EXPECT_TRUE(std::isnan(gaps[0]));
  EXPECT_TRUE(std::isnan(gaps[1]));
  EXPECT_EQ(gaps[2], 2);
  EXPECT_EQ(gaps[3], 2);
  EXPECT_TRUE(std::isnan(gaps[4]));
}

int CountSubstrings(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos;
       at = s.find(what, at + 1)) {
    ++n;
  }
  return n;
}


TEST(RenderLossSvg, FlatHugeAndNonFiniteSeriesEnd) {
  // The plot area is x 70..780, y 40..430 (800 x 480 less the margins): a
  // flat series lies at mid-height, y = 40 + 390 / 2 = 235, whatever its
  // value; three steps at x = 70, 425, 780.
  for (double v : {5.0, 1e17, 1e20, 3.4e38, -1e17}) {
    const std::vector<double> flat(3, v);
    const std::string svg = RenderLossSvg(flat, flat, {}, "flat");
    EXPECT_EQ(PolylinePoints(svg, "per-step"),
              "70.00,235.00 425.00,235.00 780.00,235.00 ")
        << v;
    EXPECT_EQ(svg.find("nan"), std::string::npos) << v;
    EXPECT_EQ(svg.find("inf"), std::string::npos) << v;
  }
  // 1e17 widened by 1% to [9.9e16, 1.01e17], ticks 2e14 apart: 11 gridlines
  // labelled in 4 significant digits.
  const std::vector<double> e17(3, 1e17);
  const std::string svg = RenderLossSvg(e17, e17, {}, "1e17");
  EXPECT_EQ(CountSubstrings(svg, "stroke=\"#ddd\""), 11);
  EXPECT_THAT(svg, HasSubstr(">9.9e+16</text>"));
  EXPECT_THAT(svg, HasSubstr(">1e+17</text>"));
  EXPECT_THAT(svg, HasSubstr(">1.01e+17</text>"));
  // The extremes of double: the axis spans exactly [-DBL_MAX, DBL_MAX]
  // (rounding it outward would overflow), so they sit at the bottom and top.
  const double big = std::numeric_limits<double>::max();
  const std::string wide = RenderLossSvg({-big, big}, {-big, big}, {}, "max");
  EXPECT_EQ(PolylinePoints(wide, "per-step"), "70.00,430.00 780.00,40.00 ");
  EXPECT_EQ(wide.find("nan"), std::string::npos);
  // A non-finite value is a gap: the line starts again after it.
  EXPECT_EQ(PolylinePoints(RenderLossSvg({5, 5, NAN, 5}, {5, 5, 5, 5}, {},
                                         "gap"),
                           "per-step"),
            "70.00,235.00 306.67,235.00 M780.00,235.00 ");
  // Values a step below their ulp apart, and non-finite values mixed in
  // (skipped): each render ends.
  const std::vector<std::vector<double>> hostile = {
      {1e17, 1e17 + 16, 1e17},
      {NAN, INFINITY, 1e20, -INFINITY, 5},
      {NAN, INFINITY},
      {big, big, NAN},
      {-big, -big},
      {1e300, 1e300},
      {5e-324, 0},
      {},
  };
  for (const std::vector<double>& series : hostile) {
    const std::string s = RenderLossSvg(series, series, {1}, "hostile");
    EXPECT_THAT(s, HasSubstr("</svg>"));
    EXPECT_EQ(s.find("nan"), std::string::npos);
  }
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

// A complete tiny result whose input stat says 9 of 10 submissions completed
// (offset 12 V + 4 T steps + 96 = 8288, worked out by hand) is corrupt.
TEST_F(InspectTest, VerifyRefusesIncompleteSubmissionCounts) {
  std::string res = *ReadFile(Path("complete.res"));
  const uint32_t nine = 9;
  std::memcpy(&res[8288], &nine, 4);
  ASSERT_TRUE(WriteFileAtomically(Path("nine_of_ten.res"), res).ok());
  std::string report;
  EXPECT_EQ(Verify({"nine_of_ten.res"}, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("offsets 8288/8292 (input stat.submissions "
                                "completed/issued): 9/10, expected 10/10"));
}

}  // namespace
}  // namespace coppelius

namespace coppelius {
namespace {

TEST_F(InspectTest, PlotAndExportRefuseToReplaceInputsOrCoppeliusFiles) {
  const std::string before = *ReadFile(Path("model.ckpt"));
  ExportOptions e;
  e.checkpoint = Path("model.ckpt");
  e.output = Path("model.ckpt");
  std::ostringstream out;
  absl::Status s = RunExport(e, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), HasSubstr("names the input file"));
  e.output = Path("complete.res");
  s = RunExport(e, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("exists (27744 bytes) and is a Coppelius result "
                        "file;"));
  PlotOptions p;
  p.results = {Path("complete.res")};
  p.output = Path("complete.res");
  EXPECT_EQ(RunPlot(p, out).code(), absl::StatusCode::kInvalidArgument);
  p.output = Path("model.ckpt");
  EXPECT_EQ(RunPlot(p, out).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(*ReadFile(Path("model.ckpt")), before);
  // What a file holds decides what it is called (break-it, session 21: a
  // text file named *.ckpt was "a Coppelius checkpoint"); one only named
  // like a Coppelius file is refused all the same.
  ASSERT_TRUE(WriteFileAtomically(Path("notes.ckpt"), "hello\n").ok());
  p.output = Path("notes.ckpt");
  s = RunPlot(p, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("exists (6 bytes, text) and is named like a Coppelius "
                        "checkpoint, though it does not hold one"));
  EXPECT_EQ(*ReadFile(Path("notes.ckpt")), "hello\n");
  ASSERT_TRUE(
      WriteFileAtomically(Path("model_copy.res"), *ReadFile(Path("model.ckpt")))
          .ok());
  p.output = Path("model_copy.res");
  s = RunPlot(p, out);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("and is a Coppelius checkpoint;"));
  // A u32 id file (what tokenize encode writes) is shaped like a cache: the
  // refusal says it looks like one, not that it is one.
  std::string ids;
  for (uint32_t id = 300; id < 340; ++id) ids += std::string(U64(id), 0, 4);
  ASSERT_TRUE(WriteFileAtomically(Path("ids.bin"), ids).ok());
  p.output = Path("ids.bin");
  s = RunPlot(p, out);
  EXPECT_THAT(std::string(s.message()),
              HasSubstr("exists (160 bytes) and looks like a Coppelius token "
                        "cache by its content"));
  // An output it cannot read (as a user other than root) is refused, not
  // replaced unseen by the publication's rename.
  const std::string dir = NobodyDirectory("inspect_test");
  ASSERT_FALSE(dir.empty());
  ASSERT_TRUE(WriteFileAtomically(dir + "/in.res",
                                  *ReadFile(Path("complete.res")))
                  .ok());
  ASSERT_EQ(chmod((dir + "/in.res").c_str(), 0644), 0);
  ASSERT_TRUE(WriteFileAtomically(dir + "/old.svg", "<svg/>").ok());
  ASSERT_EQ(chmod((dir + "/old.svg").c_str(), 0), 0);
  EXPECT_EQ(RunAsNobody([&] {
              PlotOptions q;
              q.results = {dir + "/in.res"};
              q.output = dir + "/old.svg";
              std::ostringstream sink;
              return RunPlot(q, sink).ToString();
            }),
            "FAILED_PRECONDITION: -o " + dir +
                "/old.svg: exists (6 bytes) and cannot be read to check that "
                "it is not a Coppelius file (Permission denied); not replaced "
                "(choose another output path, or make it readable)");
  chmod((dir + "/old.svg").c_str(), 0644);
  // An ordinary new path is fine, and so is an ordinary existing file.
  p.output = Path("new_plot.svg");
  EXPECT_TRUE(RunPlot(p, out).ok());
  ASSERT_TRUE(WriteFileAtomically(Path("notes.txt"), "hello\n").ok());
  p.output = Path("notes.txt");
  EXPECT_TRUE(RunPlot(p, out).ok());
}

// A cache cut to 16 + 4k bytes keeps its header, and so does one made with
// another vocabulary: fresh by the header, they fail verify --source once
// --vocab decodes their ids against the source (break-it: verify --source
// accepted them). Ids written by hand: "ababababab" is 257 "abab", 257, 256
// "ab".
TEST_F(InspectTest, VerifySourceWithVocabDecodesTheIds) {
  auto vocab = [&](const std::string& name, std::vector<std::string> merges) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
    tokens.insert(tokens.end(), merges.begin(), merges.end());
    ASSERT_TRUE(Vocabulary::FromTokens(tokens)->Save(Path(name)).ok());
  };
  vocab("ab.tiktoken", {"ab", "abab"});
  vocab("ba.tiktoken", {"ba", "abab"});
  ASSERT_TRUE(WriteFileAtomically(Path("abab.txt"), "ababababab").ok());
  const SourceStat source = *StatSource(Path("abab.txt"));
  auto cache = [&](const std::string& name, std::vector<uint32_t> ids) {
    std::string bytes = U64(source.mtime_ns) + U64(source.size_bytes);
    for (uint32_t id : ids) bytes += std::string(U64(id), 0, 4);
    ASSERT_TRUE(WriteFileAtomically(Path(name), bytes).ok());
  };
  cache("abab.tok", {257, 257, 256});
  cache("cut.tok", {257, 257});
  auto verify = [&](const std::string& name, const std::string& vocab_name,
                    std::string* report) {
    VerifyOptions o;
    o.paths = {Path(name)};
    o.config = "tiny";
    o.source = Path("abab.txt");
    o.vocab = vocab_name.empty() ? "" : Path(vocab_name);
    std::ostringstream out;
    const absl::Status s = RunVerify(o, out);
    *report = out.str();
    return s;
  };
  std::string report;
  EXPECT_TRUE(verify("abab.tok", "ab.tiktoken", &report).ok()) << report;
  EXPECT_EQ(report, absl::StrCat("OK ", Path("abab.tok"),
                                 " (cache; ids < 512, the V of config tiny; "
                                 "fresh: its ids decode to the source)\n"));
  // Without --vocab the header is all there is, and the output says so.
  EXPECT_TRUE(verify("cut.tok", "", &report).ok()) << report;
  EXPECT_THAT(report, HasSubstr("fresh by its header's mtime and size only: "
                                "--vocab=V also decodes its ids against the "
                                "source)"));
  EXPECT_EQ(verify("cut.tok", "ab.tiktoken", &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report, absl::StrCat("FAIL ", Path("cut.tok"), ": fresh by its header, but its 2 ids decode "
                                 "to the first 8 of the source's 10 bytes: a "
                                 "cache cut short\n"));
  EXPECT_EQ(verify("abab.tok", "ba.tiktoken", &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report,
            absl::StrCat("FAIL ", Path("abab.tok"), ": fresh by its header, but token 2 (byte offset "
                         "24), id 256, decodes to \"ba\" but the source has "
                         "\"ab\" at byte 8: not this source's encoding with "
                         "this vocabulary (made with another?)\n"));
  // The report says the same, then fails.
  InspectOptions o;
  o.path = Path("cut.tok");
  o.config = "tiny";
  o.source = Path("abab.txt");
  o.vocab = Path("ab.tiktoken");
  std::ostringstream out;
  EXPECT_EQ(RunInspect(o, out).code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(out.str(), HasSubstr("  ids decoded against the source: its 2 "
                                   "ids decode to the first 8 of the "
                                   "source's 10 bytes: a cache cut short\n"));
}

// The files of the two tests below: a vocabulary with "ab" (256) and
// "abab" (257), the source "ababababab" and caches of it: abab.tok and
// again.tok fresh, its encoding (257, 257, 256).
class InspectDecodeTest : public InspectTest {
 protected:
  void SetUp() override {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
    tokens.push_back("ab");
    tokens.push_back("abab");
    ASSERT_TRUE(
        Vocabulary::FromTokens(tokens)->Save(Path("ab.tiktoken")).ok());
    ASSERT_TRUE(WriteFileAtomically(Path("abab.txt"), "ababababab").ok());
    source_ = *StatSource(Path("abab.txt"));
    Cache("abab.tok", source_, {257, 257, 256});
    Cache("again.tok", source_, {257, 257, 256});
  }
  static void Cache(const std::string& name, const SourceStat& header,
                    std::vector<uint32_t> ids) {
    std::string bytes = U64(header.mtime_ns) + U64(header.size_bytes);
    for (uint32_t id : ids) bytes += std::string(U64(id), 0, 4);
    ASSERT_TRUE(WriteFileAtomically(Path(name), bytes).ok());
  }
  // verify --config=tiny --source=abab.txt --vocab=`vocab` of `names`.
  static absl::Status VerifyDecoding(const std::vector<std::string>& names,
                                     const std::string& vocab,
                                     std::string* report) {
    VerifyOptions o;
    for (const std::string& n : names) o.paths.push_back(Path(n));
    o.config = "tiny";
    o.source = Path("abab.txt");
    o.vocab = vocab;
    std::ostringstream out;
    const absl::Status s = RunVerify(o, out);
    *report = out.str();
    return s;
  }
  static std::string Ok(const std::string& name) { return OkShown(Path(name)); }
  // The line of a cache that passed, `shown` as the report names it.
  static std::string OkShown(const std::string& shown) {
    return absl::StrCat("OK ", shown,
                        " (cache; ids < 512, the V of config tiny; fresh: "
                        "its ids decode to the source)\n");
  }
  // The line of a cache that passed whose vocabulary or self (`timeless`:
  // "the vocabulary" or "the cache") came from a pipe: the vocabulary's
  // time could not be compared. `shown` as named.
  static std::string OkTimeless(const std::string& shown,
                                const std::string& timeless) {
    return absl::StrCat("OK ", shown,
                        " (cache; ids < 512, the V of config tiny; its ids "
                        "decode to the source (the vocabulary's time not "
                        "compared with the cache's: ",
                        timeless, " came from a stream, which has none))\n");
  }
  static void SetMtime(const std::string& path, struct timespec t) {
    const struct timespec times[2] = {t, t};
    EXPECT_EQ(utimensat(AT_FDCWD, path.c_str(), times, 0), 0) << path;
  }
  // abab.tok's modification time, after ab.tiktoken is dated 10 s before
  // it and a copy of it, `newer`, 10 s after it.
  static struct timespec DateVocabulariesAroundTheCache(
      const std::string& newer) {
    struct stat st;
    EXPECT_EQ(stat(Path("abab.tok").c_str(), &st), 0);
    struct timespec before = st.st_mtim, after = st.st_mtim;
    before.tv_sec -= 10;
    after.tv_sec += 10;
    EXPECT_TRUE(WriteFileAtomically(Path(newer),
                                    *ReadFile(Path("ab.tiktoken")))
                    .ok());
    SetMtime(Path("ab.tiktoken"), before);
    SetMtime(Path(newer), after);
    return st.st_mtim;
  }
  // make-cache (vocabulary `vocab`) on `copy`, a copy of abab.tok dated
  // `cache_mtime`: whether it kept the cache as fresh.
  static bool MakeCacheKeeps(const std::string& vocab, const std::string& copy,
                             struct timespec cache_mtime) {
    EXPECT_TRUE(
        WriteFileAtomically(Path(copy), *ReadFile(Path("abab.tok"))).ok());
    SetMtime(Path(copy), cache_mtime);
    MakeCacheOptions m;
    m.vocab_path = vocab;
    m.source_path = Path("abab.txt");
    m.output_path = Path(copy);
    m.threads = 1;
    m.summary = false;
    MakeCacheReport r;
    const absl::Status s = RunMakeCache(m, &r);
    EXPECT_TRUE(s.ok()) << s;
    return r.was_fresh;
  }
  SourceStat source_;
};

// --vocab is read once per verify, not once per cache: a vocabulary on
// standard input (a pipe, which can be read once) serves every cache (the
// second one failed: "--vocab: -: empty file").
TEST_F(InspectDecodeTest, VerifyReadsTheVocabularyOnceForAllCaches) {
  const std::string vocab = *ReadFile(Path("ab.tiktoken"));
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  ASSERT_EQ(write(p[1], vocab.data(), vocab.size()),
            static_cast<ssize_t>(vocab.size()));  // fits the pipe's buffer
  close(p[1]);
  const int saved_stdin = dup(STDIN_FILENO);
  dup2(p[0], STDIN_FILENO);
  close(p[0]);
  std::string report;
  const absl::Status s =
      VerifyDecoding({"abab.tok", "again.tok", "abab.tok"}, "-", &report);
  dup2(saved_stdin, STDIN_FILENO);
  close(saved_stdin);
  EXPECT_TRUE(s.ok()) << s << "\n" << report;
  EXPECT_EQ(report, OkTimeless(Path("abab.tok"), "the vocabulary") +
                        OkTimeless(Path("again.tok"), "the vocabulary") +
                        OkTimeless(Path("abab.tok"), "the vocabulary"));
}

// A cache that already failed a check (a stale header, a header no source
// has, ids >= V) is not decoded against the source (a decode of the whole
// source, wasted): its failure line says so, and no decode line follows.
TEST_F(InspectDecodeTest, VerifySkipsTheDecodeOfACacheThatAlreadyFailed) {
  const std::string vocab = Path("ab.tiktoken");
  std::string report;
  // Stale: the header's mtime is not the source's (ids cut short, too).
  SourceStat old = source_;
  old.mtime_ns -= 1000000000;
  Cache("stale.tok", old, {257, 257});
  EXPECT_EQ(VerifyDecoding({"stale.tok"}, vocab, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report,
            absl::StrCat("FAIL ", Path("stale.tok"), ": header (offset 0: mtime ", old.mtime_ns,
                         ", size 10): stale: source modification time "
                         "differs; source ",
                         Path("abab.txt"), " now has mtime ", source_.mtime_ns,
                         ", size 10; ids not decoded against the source (the "
                         "header is stale)\n"));
  // A header no source has: 5,000 source bytes for 2 ids, fresh.
  ASSERT_TRUE(
      WriteFileAtomically(Path("big.txt"), std::string(5000, 'a')).ok());
  Cache("big.tok", *StatSource(Path("big.txt")), {97, 97});
  VerifyOptions o;
  o.paths = {Path("big.tok")};
  o.config = "tiny";
  o.source = Path("big.txt");
  o.vocab = vocab;
  std::ostringstream out;
  EXPECT_EQ(RunVerify(o, out).code(), absl::StatusCode::kDataLoss);
  report = out.str();
  EXPECT_EQ(std::count(report.begin(), report.end(), '\n'), 1) << report;
  EXPECT_THAT(report,
              HasSubstr("for 2 tokens, more than 1024 per token where text "
                        "encodes to a few (a raw u32 id file read as a "
                        "cache?); not a token cache as make-cache writes "
                        "them; ids not decoded against the source (the "
                        "header cannot be a source's)\n"));
  EXPECT_THAT(report, Not(HasSubstr("fresh by its header, but")));
  // Ids >= V (600 >= 512, and not in the vocabulary), fresh.
  Cache("big_id.tok", source_, {257, 600, 256});
  EXPECT_EQ(VerifyDecoding({"big_id.tok"}, vocab, &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_EQ(report,
            absl::StrCat("FAIL ", Path("big_id.tok"), ": token 1 (byte offset 20) has id 600, expected < "
                         "512 (the vocabulary size of config tiny); ids >= "
                         "512: 1; ids not decoded against the source (ids >= "
                         "V=512)\n"));
  // The report says it too, in the decode's line.
  InspectOptions io;
  io.path = Path("stale.tok");
  io.config = "tiny";
  io.source = Path("abab.txt");
  io.vocab = vocab;
  std::ostringstream text;
  EXPECT_EQ(RunInspect(io, text).code(),
            absl::StatusCode::kFailedPrecondition);  // stale
  EXPECT_THAT(text.str(), HasSubstr("  ids decoded against the source: not "
                                    "checked (the header is stale)\n"));
  // The fresh caches beside them are still decoded.
  EXPECT_TRUE(VerifyDecoding({"abab.tok"}, vocab, &report).ok()) << report;
  EXPECT_EQ(report, Ok("abab.tok"));
}

// A report with --source on a cache that is stale against it (another
// mtime, or the source missing) is printed in full, then fails, as verify
// fails the same cache (it exited 0 while its report said "stale").
TEST_F(InspectDecodeTest, ReportOfAStaleCacheFails) {
  SourceStat old = source_;
  old.mtime_ns -= 1000000000;
  Cache("stale.tok", old, {257, 257, 256});
  for (const bool json : {false, true}) {
    for (const std::string& vocab : {std::string(), Path("ab.tiktoken")}) {
      InspectOptions o;
      o.path = Path("stale.tok");
      o.config = "tiny";
      o.source = Path("abab.txt");
      o.vocab = vocab;
      o.json = json;
      std::ostringstream out;
      const absl::Status s = RunInspect(o, out);
      EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
      EXPECT_EQ(std::string(s.message()),
                absl::StrCat(Path("stale.tok"), ": header (offset 0: mtime ",
                             old.mtime_ns,
                             ", size 10): stale: source modification time "
                             "differs; source ",
                             Path("abab.txt"), " now has mtime ",
                             source_.mtime_ns, ", size 10"));
      // The whole report still.
      EXPECT_THAT(out.str(),
                  HasSubstr(json ? "\"state\":\"stale: source modification "
                                   "time differs\""
                                 : "  staleness: stale: source modification "
                                   "time differs"));
      EXPECT_THAT(out.str(), HasSubstr(json ? "\"ids_out_of_range\":0"
                                            : "  id range: min 256"));
    }
  }
  // The source missing.
  InspectOptions o;
  o.path = Path("abab.tok");
  o.config = "tiny";
  o.source = Path("gone.txt");
  std::ostringstream out;
  const absl::Status s = RunInspect(o, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(std::string(s.message()),
            absl::StrCat(Path("abab.tok"), ": header (offset 0: mtime ",
                         source_.mtime_ns, ", size 10): stale: source "
                         "missing; source ", Path("gone.txt"),
                         " does not exist"));
  EXPECT_THAT(out.str(), HasSubstr("  staleness: stale: source missing"));
  // Fresh: still OK; without --source nothing is checked.
  o.source = Path("abab.txt");
  EXPECT_TRUE(RunInspect(o, out).ok());
  o.path = Path("stale.tok");
  o.source = "";
  EXPECT_TRUE(RunInspect(o, out).ok());
}

// make-cache's rule: a vocabulary file modified after the cache makes a
// cache stale (as make(1) treats a prerequisite). verify --source --vocab
// and the report apply the same rule (the same function), so inspect and
// make-cache agree: a copy of the vocabulary newer than the cache is stale
// for both (verify said "OK ...; fresh: its ids decode to the source" where
// make-cache rebuilt), the vocabulary older than it fresh for both.
TEST_F(InspectDecodeTest, AVocabularyNewerThanTheCacheIsStaleAsInMakeCache) {
  const struct timespec cache_mtime =
      DateVocabulariesAroundTheCache("newer.tiktoken");
  const auto make_cache_keeps = [&](const std::string& vocab) {
    return MakeCacheKeeps(vocab, "mc.tok", cache_mtime);
  };
  std::string report;
  // Older than the cache: fresh for both.
  EXPECT_TRUE(VerifyDecoding({"abab.tok"}, Path("ab.tiktoken"), &report).ok())
      << report;
  EXPECT_EQ(report, Ok("abab.tok"));
  EXPECT_TRUE(make_cache_keeps(Path("ab.tiktoken")));
  // Newer: stale for both.
  const std::string stale_line = absl::StrCat(
      Path("abab.tok"), ": stale against ", Path("abab.txt"),
      ": the vocabulary ", Path("newer.tiktoken"),
      " is newer than the cache (make-cache rebuilds it)");
  EXPECT_EQ(
      VerifyDecoding({"abab.tok"}, Path("newer.tiktoken"), &report).code(),
      absl::StatusCode::kDataLoss);
  EXPECT_EQ(report,
            absl::StrCat("FAIL ", stale_line,
                         "; ids not decoded against the source (the "
                         "vocabulary is newer than the cache)\n"));
  InspectOptions o;
  o.path = Path("abab.tok");
  o.config = "tiny";
  o.source = Path("abab.txt");
  o.vocab = Path("newer.tiktoken");
  std::ostringstream out;
  const absl::Status s = RunInspect(o, out);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_EQ(s.message(), stale_line);
  EXPECT_THAT(out.str(),
              HasSubstr(absl::StrCat("  vocabulary: stale: the vocabulary ",
                                     Path("newer.tiktoken"),
                                     " is newer than the cache (make-cache "
                                     "rebuilds it)\n")));
  EXPECT_FALSE(make_cache_keeps(Path("newer.tiktoken")));
}

// A malformed vocabulary is reported whatever the cache's staleness, as
// make-cache loads it either way (new-user pass, session 27: one newer
// than the cache had been hidden behind "the vocabulary is newer").
TEST_F(InspectDecodeTest, AMalformedVocabularyIsReportedBeforeStaleness) {
  DateVocabulariesAroundTheCache("newer.tiktoken");
  std::string vocab = *ReadFile(Path("newer.tiktoken"));
  // Its second line given the first line's rank: a duplicate rank.
  const size_t first_end = vocab.find('\n');
  const size_t second_end = vocab.find('\n', first_end + 1);
  const std::string first_rank =
      vocab.substr(vocab.rfind(' ', first_end) + 1,
                   first_end - vocab.rfind(' ', first_end) - 1);
  const size_t second_space = vocab.rfind(' ', second_end);
  vocab.replace(second_space + 1, second_end - second_space - 1, first_rank);
  struct stat st;
  ASSERT_EQ(stat(Path("newer.tiktoken").c_str(), &st), 0);
  ASSERT_TRUE(WriteFileAtomically(Path("dup.tiktoken"), vocab).ok());
  SetMtime(Path("dup.tiktoken"), st.st_mtim);  // newer than the cache
  std::string report;
  EXPECT_EQ(VerifyDecoding({"abab.tok"}, Path("dup.tiktoken"), &report).code(),
            absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("FAIL " + Path("abab.tok")));
  EXPECT_THAT(report, HasSubstr("--vocab"));
  EXPECT_THAT(report, HasSubstr(Path("dup.tiktoken")));
  EXPECT_THAT(report, Not(HasSubstr("is newer than the cache"))) << report;
}

// The same rule with the vocabulary or the cache on standard input: a
// regular file redirected there (`< FILE`) is judged by its time, as its
// path would be; a pipe has no time, so the rule is reported as not
// applied (the ids are still decoded; JSON null), where it had silently
// passed, and make-cache rebuilds rather than keep a cache it cannot judge.
TEST_F(InspectDecodeTest, TheVocabularyRuleOnStandardInput) {
  const struct timespec cache_mtime =
      DateVocabulariesAroundTheCache("newer2.tiktoken");
  // Runs `body` with standard input on `file` (a regular file) or, when
  // `pipe_bytes`, on a pipe holding its bytes.
  const auto with_stdin = [](const std::string& file, bool pipe_bytes,
                             const std::function<void()>& body) {
    const int saved = dup(STDIN_FILENO);
    if (pipe_bytes) {
      const std::string bytes = *ReadFile(file);
      int p[2];
      ASSERT_EQ(pipe(p), 0);
      ASSERT_EQ(write(p[1], bytes.data(), bytes.size()),
                static_cast<ssize_t>(bytes.size()));  // fits the buffer
      close(p[1]);
      dup2(p[0], STDIN_FILENO);
      close(p[0]);
    } else {
      const int fd = open(file.c_str(), O_RDONLY);
      ASSERT_GE(fd, 0);
      dup2(fd, STDIN_FILENO);
      close(fd);
    }
    body();
    dup2(saved, STDIN_FILENO);
    close(saved);
  };
  std::string report;
  // --vocab=- < newer: stale, as by its path; < older: fresh.
  with_stdin(Path("newer2.tiktoken"), false, [&] {
    EXPECT_EQ(VerifyDecoding({"abab.tok"}, "-", &report).code(),
              absl::StatusCode::kDataLoss);
    EXPECT_THAT(report, HasSubstr("the vocabulary - is newer than the cache"));
  });
  with_stdin(Path("ab.tiktoken"), false, [&] {
    EXPECT_TRUE(VerifyDecoding({"abab.tok"}, "-", &report).ok()) << report;
    EXPECT_EQ(report, Ok("abab.tok"));
  });
  // The cache on standard input (`- < abab.tok`): judged by its time.
  const auto verify_stdin_cache = [&](const std::string& vocab) {
    VerifyOptions o;
    o.paths = {"-"};
    o.config = "tiny";
    o.source = Path("abab.txt");
    o.vocab = vocab;
    std::ostringstream out;
    const absl::Status s = RunVerify(o, out);
    report = out.str();
    return s;
  };
  // Its spool is given the file's times: with the cache dated an hour
  // back, a vocabulary dated half an hour back is newer (the spool's own
  // time, now, would have hidden that), one dated two hours back is not.
  ASSERT_TRUE(WriteFileAtomically(Path("old.tok"),
                                  *ReadFile(Path("abab.tok")))
                  .ok());
  struct timespec hour_ago = {time(nullptr) - 3600, 0};
  struct timespec half_hour_ago = {time(nullptr) - 1800, 0};
  struct timespec two_hours_ago = {time(nullptr) - 7200, 0};
  SetMtime(Path("old.tok"), hour_ago);
  SetMtime(Path("newer2.tiktoken"), half_hour_ago);
  with_stdin(Path("old.tok"), false, [&] {
    EXPECT_EQ(verify_stdin_cache(Path("newer2.tiktoken")).code(),
              absl::StatusCode::kDataLoss);
    EXPECT_THAT(report, HasSubstr("is newer than the cache"));
  });
  SetMtime(Path("newer2.tiktoken"), two_hours_ago);
  with_stdin(Path("old.tok"), false, [&] {
    EXPECT_TRUE(verify_stdin_cache(Path("newer2.tiktoken")).ok()) << report;
    EXPECT_EQ(report, OkShown("-"));
  });
  SetMtime(Path("newer2.tiktoken"),
           {cache_mtime.tv_sec + 10, cache_mtime.tv_nsec});
  // From a pipe: not compared, said so; the decode still runs.
  with_stdin(Path("abab.tok"), true, [&] {
    EXPECT_TRUE(verify_stdin_cache(Path("newer2.tiktoken")).ok()) << report;
    EXPECT_EQ(report, OkTimeless("-", "the cache"));
  });
  // The cache's report with the vocabulary from a pipe.
  const auto inspect_stdin_vocab = [&](bool json) {
    InspectOptions o;
    o.path = Path("abab.tok");
    o.config = "tiny";
    o.source = Path("abab.txt");
    o.vocab = "-";
    o.json = json;
    std::ostringstream out;
    EXPECT_TRUE(RunInspect(o, out).ok());
    return out.str();
  };
  // The report's JSON: null where the rule was not applied.
  with_stdin(Path("ab.tiktoken"), true, [&] {
    const std::string json = inspect_stdin_vocab(true);
    EXPECT_THAT(json, HasSubstr("\"fresh\":null"));
    EXPECT_THAT(json, HasSubstr("\"vocabulary_newer\":null"));
    EXPECT_THAT(json, HasSubstr("\"decodes_to_source\":true"));
  });
  // The text report names the input that had no time.
  with_stdin(Path("ab.tiktoken"), true, [&] {
    EXPECT_THAT(inspect_stdin_vocab(false),
                HasSubstr("  vocabulary: not compared with the cache's time "
                          "(the vocabulary came from a stream, which has "
                          "none; make-cache rebuilds when its vocabulary is "
                          "one)\n"));
  });
  // make-cache: the older vocabulary as `< FILE` keeps the cache; from a
  // pipe it rebuilds.
  const auto make_cache_keeps = [&] {
    return MakeCacheKeeps("-", "mc2.tok", cache_mtime);
  };
  with_stdin(Path("ab.tiktoken"), false,
             [&] { EXPECT_TRUE(make_cache_keeps()); });
  with_stdin(Path("ab.tiktoken"), true,
             [&] { EXPECT_FALSE(make_cache_keeps()); });
}

}  // namespace
}  // namespace coppelius
