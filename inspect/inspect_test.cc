#include "inspect/inspect.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "inspect/testdata.h"

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
                            const std::string& source = "") {
    InspectOptions o;
    o.path = Path(name);
    o.config = "tiny";
    o.json = json;
    o.vocab = vocab.empty() ? "" : Path(vocab);
    o.source = source.empty() ? "" : Path(source);
    std::ostringstream out;
    absl::Status s = RunInspect(o, out);
    EXPECT_TRUE(s.ok()) << name << ": " << s;
    return out.str();
  }
  static absl::Status Verify(const std::vector<std::string>& names,
                             std::string* report,
                             const std::string& source = "") {
    VerifyOptions o;
    for (const std::string& n : names) o.paths.push_back(Path(n));
    o.config = "tiny";
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
  auto config = ModelConfigByName("tiny");
  ASSERT_TRUE(config.ok());
  const std::vector<std::pair<std::string, FileKind>> cases = {
      {"cache.tok", FileKind::kCache},       {"bad_ids.tok", FileKind::kCache},
      {"model.ckpt", FileKind::kCheckpoint}, {"multi.ckpt", FileKind::kCheckpoint},
      {"fresh.ckpt", FileKind::kCheckpoint}, {"complete.res", FileKind::kResult},
      {"partial.res", FileKind::kResult},    {"marker.res", FileKind::kResult},
  };
  for (const auto& [name, kind] : cases) {
    auto k = DetectFileKind(Path(name), *config);
    ASSERT_TRUE(k.ok()) << name << ": " << k.status();
    EXPECT_EQ(*k, kind) << name;
  }
  EXPECT_EQ(DetectFileKind(Path("missing"), *config).status().code(),
            absl::StatusCode::kNotFound);
}

TEST_F(InspectTest, CacheReport) {
  const std::string text = Report("cache.tok", false, "", "source.txt");
  EXPECT_THAT(text, HasSubstr("tokens: 1281\n"));
  // floor((1281 - 1) / 64) = 20.
  EXPECT_THAT(text, HasSubstr("contexts of 64 (tiny): 20 "));
  // ids (7 i) mod 500 over 1281 ids cover 0..499.
  EXPECT_THAT(text, HasSubstr("id range: min 0, max 499; ids >= V=512: 0"));
  EXPECT_THAT(text, HasSubstr("source size 100 bytes"));
  EXPECT_THAT(text, HasSubstr("staleness: fresh"));
  const std::string bad = Report("bad_ids.tok");
  // Token 1000 is at byte 16 + 4000.
  EXPECT_THAT(bad, HasSubstr("max 600; ids >= V=512: 1 (first at token 1000, "
                             "file offset 4016)"));
  const std::string json = Report("cache.tok", true);
  EXPECT_THAT(json, HasSubstr("\"num_tokens\":1281"));
  EXPECT_THAT(json, HasSubstr("\"contexts\":20"));
  EXPECT_THAT(json, HasSubstr("\"max_id\":499"));
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
                              "      V mean +2 std 0 min +2 max +2 nonfinite 1"));
  EXPECT_THAT(text, HasSubstr("blocks.1.mlp.down"));
  const std::string multi = Report("multi.ckpt");
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
  // The loss block's window 0 equals step 7's window (both 2.5): no warning;
  // changing one row of the last window brings it.
  std::string res = *ReadFile(Path("complete.res"));
  res[6144 + 7 * 256 + 4 * 10] ^= 1;
  ASSERT_TRUE(WriteFileAtomically(Path("lossdiff.res"), res).ok());
  EXPECT_THAT(Report("lossdiff.res"),
              HasSubstr("WARNING: the loss block's per-row cross-entropy "
                        "differs from the last step window (step 7)"));

  const std::string partial = Report("partial.res");
  EXPECT_THAT(partial, HasSubstr("status: incomplete, 3 of 8 step windows"));
  EXPECT_THAT(partial, HasSubstr("tail: absent"));
  const std::string marker = Report("marker.res");
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
  const std::string text = Report("zero_final.res");
  EXPECT_THAT(text, HasSubstr("WARNING: the final record's 512 logits are all "
                              "+0.0"));
  // Its argmax (0) no longer matches the row 63 prediction (511).
  EXPECT_THAT(text, HasSubstr("final record argmax 0 differs from the row 63 "
                              "prediction 511"));
  EXPECT_THAT(Report("zero_final.res", true),
              HasSubstr("\"final_record_all_zero\":true"));
}

TEST_F(InspectTest, VerifyGoodFiles) {
  std::string report;
  absl::Status s = Verify({"cache.tok", "model.ckpt", "multi.ckpt",
                           "fresh.ckpt", "complete.res"},
                          &report, "source.txt");
  EXPECT_TRUE(s.ok()) << s << "\n" << report;
  EXPECT_EQ(report, absl::StrCat("OK ", Path("cache.tok"), " (cache)\n",
                                 "OK ", Path("model.ckpt"), " (checkpoint)\n",
                                 "OK ", Path("multi.ckpt"), " (checkpoint)\n",
                                 "OK ", Path("fresh.ckpt"), " (checkpoint)\n",
                                 "OK ", Path("complete.res"), " (result)\n"));
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
  ASSERT_EQ(lines.size(), 8u) << report;  // 7 lines + the empty tail
  EXPECT_EQ(lines[0], absl::StrCat("OK ", Path("model.ckpt"), " (checkpoint)"));
  EXPECT_THAT(lines[1], HasSubstr("FAIL " + Path("corrupt.ckpt")));
  EXPECT_THAT(lines[1], HasSubstr("chunk 3 of 25"));
  EXPECT_THAT(lines[2], HasSubstr("chunk 10 of 25"));
  EXPECT_THAT(lines[1], HasSubstr("(2 of 25 chunks differ)"));
  EXPECT_THAT(lines[2], HasSubstr("(2 of 25 chunks differ)"));
  EXPECT_THAT(lines[3], HasSubstr("FAIL " + Path("partial.res")));
  // 6144 + 3 * 256 + 100 = 7012 bytes of 27744.
  EXPECT_THAT(lines[3], HasSubstr("size 7012 bytes, expected 27744 (3 of 8"));
  EXPECT_THAT(lines[4], HasSubstr("marker be ba fe ca"));
  EXPECT_THAT(lines[5], HasSubstr("incomplete: size 8 bytes"));
  EXPECT_THAT(lines[6], HasSubstr("FAIL " + Path("bad_ids.tok")));
  EXPECT_THAT(lines[6], HasSubstr("600"));
}

TEST_F(InspectTest, VerifyStaleCache) {
  const std::string source2 = Path("source2.txt");
  ASSERT_TRUE(WriteFileAtomically(source2, std::string(101, 'y')).ok());
  std::string report;
  absl::Status s = Verify({"cache.tok"}, &report, "source2.txt");
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(report, HasSubstr("FAIL " + Path("cache.tok")));
  EXPECT_THAT(report, HasSubstr("size 100"));
  EXPECT_THAT(report, HasSubstr("size 101"));
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
  EXPECT_THAT(svg, HasSubstr(">step</text>"));
  EXPECT_THAT(svg, HasSubstr("mean cross-entropy loss"));
  // 8 + 3 steps: 11 points on the per-step curve.
  const size_t at = svg.find("id=\"per-step\"");
  ASSERT_NE(at, std::string::npos);
  const size_t pts = svg.find("points=\"", at) + 8;
  const std::string points = svg.substr(pts, svg.find('"', pts) - pts);
  EXPECT_EQ(std::count(points.begin(), points.end(), ','), 11);
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

TEST(SmoothedCurve, TrailingMean) {
  EXPECT_EQ(SmoothedCurve({1, 2, 3, 4}, 2),
            (std::vector<double>{1, 1.5, 2.5, 3.5}));
  EXPECT_EQ(SmoothedCurve({1, 2, 3, 4}, 100),
            (std::vector<double>{1, 1.5, 2, 2.5}));
  std::vector<double> with_nan = SmoothedCurve({1, NAN, 3, 5}, 2);
  EXPECT_EQ(with_nan[0], 1);
  EXPECT_TRUE(std::isnan(with_nan[1]));
  EXPECT_TRUE(std::isnan(with_nan[2]));
  EXPECT_EQ(with_nan[3], 4);
}

}  // namespace
}  // namespace coppelius
