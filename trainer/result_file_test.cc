#include "trainer/result_file.h"

#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/file_io.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace coppelius {
namespace {

using ::testing::HasSubstr;

// The tiny config's geometry (trainer/model_config.h: V 512, T 64, 8 steps).
constexpr ResultGeometry kTiny = {512, 64, 8};

std::string TempPath(const std::string& name) {
  return absl::StrCat(testing::TempDir(), "/", name);
}

std::string Slurp(const std::string& path) {
  auto bytes = ReadFile(path);
  EXPECT_TRUE(bytes.ok()) << bytes.status();
  return bytes.ok() ? *bytes : std::string();
}

uint32_t U32At(const std::string& b, size_t at) {
  return static_cast<unsigned char>(b[at]) |
         static_cast<unsigned char>(b[at + 1]) << 8 |
         static_cast<unsigned char>(b[at + 2]) << 16 |
         static_cast<uint32_t>(static_cast<unsigned char>(b[at + 3])) << 24;
}
uint64_t U64At(const std::string& b, size_t at) {
  return U32At(b, at) | static_cast<uint64_t>(U32At(b, at + 4)) << 32;
}
float F32At(const std::string& b, size_t at) {
  uint32_t bits = U32At(b, at);
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// A deterministic, valid tail for `g` (c0 = 3, a continuation input).
ResultTail MakeTail(const ResultGeometry& g) {
  ResultTail t;
  t.input.fresh = false;
  t.input.size_bytes = 123456;
  t.input.mtime_ns = 1700000000123456789ull;
  t.input.update_count = 3;
  t.input.inode = 77;
  for (int i = 0; i < 32; ++i) t.input.header_digest[i] = 0xa0 + i;
  t.input.submissions_completed = g.steps + 2;
  t.input.submissions_issued = g.steps + 2;
  t.input.update_last_release = g.steps;
  for (int i = 0; i < g.T && i < 1024; ++i)
    t.loss.last_row_losses.push_back(5.0f + 0.01f * i);
  for (int i = 0; i < 1024; ++i) {
    t.loss.embedding_gradient_head.push_back(-1e-3f * i);
    t.loss.embedding_parameter_head.push_back(0.02f * std::sin(i));
    t.loss.embedding_first_moment_head.push_back(1e-5f * i);
  }
  for (int v = 0; v < g.V; ++v) t.final_logits.push_back(0.5f * v - 7.0f);
  uint64_t expected_issues[3] = {1, static_cast<uint64_t>(g.steps), 1};
  for (int k = 0; k < 3; ++k) {
    t.semaphores[k].completion_value = expected_issues[k];
    t.semaphores[k].fence_value = expected_issues[k];
    t.semaphores[k].device_start_ns = 1000 + k;
    t.semaphores[k].device_end_ns = 2000 + k;
    t.semaphores[k].issues = expected_issues[k];
  }
  t.errors.first_nonfinite_step = 2;
  t.errors.nonfinite_steps = 1;
  t.errors.invalid_token_seen = true;
  t.errors.cuda_error = 700;
  t.errors.text = "illegal address";
  t.host.backend = "reference";
  t.host.first_context = 3;
  t.host.steps_done = g.steps;
  t.host.update_count = 3 + g.steps;
  t.host.publications = 4;
  t.host.start_unix_ns = 1;
  t.host.end_unix_ns = 2;
  t.host.forward_wall_ns = 30;
  t.host.steps_wall_ns = 40;
  t.host.publish_wall_ns = 50;
  t.host.peak_device_memory_bytes = 0;
  t.host.predictions = {ResultPrediction{11, true}, ResultPrediction{0, false},
                        ResultPrediction{static_cast<uint32_t>(g.V - 1), true}};
  t.timestamps.resize(g.steps + 2);
  for (int64_t i = 0; i < g.steps + 2; ++i) {
    ResultTimestamp& ts = t.timestamps[i];
    ts.kind = i == 0           ? SubmissionKind::kForward
              : i <= g.steps   ? SubmissionKind::kUpdate
                               : SubmissionKind::kFinal;
    ts.step = (i == 0 || i > g.steps) ? -1 : i - 1;
    ts.context = i == 0 ? 3 : (i <= g.steps ? 3 + i - 1 : 3 + g.steps - 1);
    ts.host_issue_ns = 100 * i + 1;
    ts.host_complete_ns = 100 * i + 50;
    ts.device_start_ns = 100 * i + 10;
    ts.device_end_ns = 100 * i + 10 + 7 * i;
    ts.release_value = (i == 0 || i > g.steps) ? 1 : i;  // issue i of its kind
  }
  return t;
}

std::vector<float> Forward(const ResultGeometry& g) {
  std::vector<float> f(3 * g.V);
  for (size_t i = 0; i < f.size(); ++i) f[i] = 0.25f * (i % 97) - 3.0f;
  return f;
}
std::vector<float> Window(const ResultGeometry& g, int64_t step) {
  std::vector<float> w(g.T);
  for (int64_t r = 0; r < g.T; ++r) w[r] = 10.0f - 0.5f * step + 0.001f * r;
  return w;
}

// Writes a whole file through ResultWriter; returns its path.
std::string WriteComplete(const std::string& name, const ResultGeometry& g,
                          const ResultTail& tail) {
  const std::string path = TempPath(name);
  auto writer = ResultWriter::Create(path, g);
  EXPECT_TRUE(writer.ok()) << writer.status();
  EXPECT_TRUE((*writer)->WriteForwardRecord(Forward(g).data()).ok());
  for (int64_t s = 0; s < g.steps; ++s) {
    EXPECT_TRUE((*writer)->AppendStepWindow(s, Window(g, s).data()).ok());
  }
  absl::Status st = (*writer)->Finish(tail);
  EXPECT_TRUE(st.ok()) << st;
  return path;
}

TEST(ResultLayout, SizesByHand) {
  // tiny: 12*512 + 256*8 + 160 + 16384 + 4*512 + 96 + 64 + 160 + 64*10.
  ResultLayout tiny = ComputeResultLayout(kTiny);
  EXPECT_EQ(tiny.complete_bytes, 27744);
  EXPECT_EQ(tiny.input_stat_offset, 8192);
  EXPECT_EQ(tiny.loss_block_offset, 8352);
  EXPECT_EQ(tiny.final_offset, 24736);
  EXPECT_EQ(tiny.semaphore_offset, 26784);
  EXPECT_EQ(tiny.error_offset, 26880);
  EXPECT_EQ(tiny.host_offset, 26944);
  EXPECT_EQ(tiny.timestamp_offset, 27104);
  // SPEC §7 for coppelius: 147,456 + 4,096 * 10,000 + 160 + 16,384 + 49,152
  // + 96 + 64 + 160 + 64 * 10,002.
  ResultLayout big = ComputeResultLayout({12288, 1024, 10000});
  EXPECT_EQ(big.forward_bytes, 147456);
  EXPECT_EQ(big.window_bytes, 4096);
  EXPECT_EQ(big.final_bytes, 49152);
  EXPECT_EQ(big.complete_bytes, 41813600);
}

TEST(ResultGeometry, RejectsImpossible) {
  EXPECT_EQ(ValidateResultGeometry({0, 64, 8}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ValidateResultGeometry({512, 66, 8}).message(),
              HasSubstr("T = 66"));
  EXPECT_EQ(ValidateResultGeometry({512, 64, 0}).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(ValidateResultGeometry(kTiny).ok());
}

TEST(ResultWriter, BytesAtDocumentedOffsets) {
  const ResultTail tail = MakeTail(kTiny);
  const std::string b = Slurp(WriteComplete("bytes.res", kTiny, tail));
  ASSERT_EQ(b.size(), 27744u);
  const std::vector<float> fwd = Forward(kTiny);
  EXPECT_EQ(F32At(b, 0), fwd[0]);
  EXPECT_EQ(F32At(b, 4 * 1535), fwd[1535]);
  // Step 5's row 7 window at 6144 + 256*5 + 4*7.
  EXPECT_EQ(F32At(b, 6144 + 1280 + 28), Window(kTiny, 5)[7]);
  // Input stat at 8192.
  EXPECT_EQ(U64At(b, 8192), 123456u);
  EXPECT_EQ(U64At(b, 8192 + 8), 1700000000123456789ull);
  EXPECT_EQ(U64At(b, 8192 + 16), 3u);
  EXPECT_EQ(static_cast<unsigned char>(b[8192 + 32]), 0xa0);
  EXPECT_EQ(U32At(b, 8192 + 64), 0u);    // not fresh
  EXPECT_EQ(U32At(b, 8192 + 96), 10u);   // completed
  EXPECT_EQ(U32At(b, 8192 + 100), 10u);  // issued
  EXPECT_EQ(U32At(b, 8192 + 104), 8u);   // update release
  // Loss block at 8352: window 0 is T = 64 losses then zero padding.
  EXPECT_EQ(F32At(b, 8352 + 4 * 63), tail.loss.last_row_losses[63]);
  EXPECT_EQ(U32At(b, 8352 + 4 * 64), 0u);
  EXPECT_EQ(U32At(b, 8352 + 4092), 0u);
  EXPECT_EQ(F32At(b, 8352 + 4096 + 8), -1e-3f * 2);
  EXPECT_EQ(F32At(b, 8352 + 12288 + 4 * 1023), 1e-5f * 1023);
  // Final record at 24736.
  EXPECT_EQ(F32At(b, 24736 + 4 * 511), 0.5f * 511 - 7.0f);
  // Semaphore [update] at 26784 + 32.
  EXPECT_EQ(U32At(b, 26816), 8u);
  EXPECT_EQ(U64At(b, 26816 + 8), 1001u);
  EXPECT_EQ(U32At(b, 26816 + 24), 8u);
  // Error notifier at 26880.
  EXPECT_EQ(static_cast<int64_t>(U64At(b, 26880)), 2);
  EXPECT_EQ(U32At(b, 26880 + 16), 1u);
  EXPECT_EQ(U32At(b, 26880 + 20), 700u);
  EXPECT_EQ(b.substr(26880 + 24, 16), std::string("illegal address\0", 16));
  // Host status at 26944.
  EXPECT_EQ(b.substr(26944, 8), "CPLSRES1");
  EXPECT_EQ(b.substr(26944 + 8, 10), std::string("reference\0", 10));
  EXPECT_EQ(U32At(b, 26944 + 24), 512u);
  EXPECT_EQ(U32At(b, 26944 + 28), 64u);
  EXPECT_EQ(U64At(b, 26944 + 32), 8u);
  EXPECT_EQ(U64At(b, 26944 + 40), 3u);
  EXPECT_EQ(U64At(b, 26944 + 56), 11u);
  EXPECT_EQ(U32At(b, 26944 + 120 + 16), 511u);
  EXPECT_EQ(U32At(b, 26944 + 120 + 20), 1u);
  // Timestamp table at 27104: entry 9 is the final.
  EXPECT_EQ(U32At(b, 27104 + 64 * 9), 2u);
  EXPECT_EQ(U64At(b, 27104 + 64 * 9 + 8), 10u);  // c0 + steps - 1
  EXPECT_EQ(U64At(b, 27104 + 64 * 3 + 16), 2u);  // entry 3 is step 2
}

TEST(ResultReader, RoundTrip) {
  const ResultTail tail = MakeTail(kTiny);
  auto r = ReadResult(WriteComplete("rt.res", kTiny, tail), kTiny);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->complete);
  EXPECT_FALSE(r->marker_left);
  EXPECT_EQ(r->complete_steps, 8);
  EXPECT_EQ(r->forward_logits, Forward(kTiny));
  for (int s = 0; s < 8; ++s) {
    EXPECT_EQ(std::vector<float>(r->step_losses.begin() + 64 * s,
                                 r->step_losses.begin() + 64 * (s + 1)),
              Window(kTiny, s));
  }
  const ResultTail& t = r->tail;
  EXPECT_EQ(t.input.header_digest, tail.input.header_digest);
  EXPECT_EQ(t.input.mtime_ns, tail.input.mtime_ns);
  EXPECT_FALSE(t.input.fresh);
  ASSERT_EQ(t.loss.last_row_losses.size(), 1024u);
  EXPECT_EQ(std::vector<float>(t.loss.last_row_losses.begin(),
                               t.loss.last_row_losses.begin() + 64),
            tail.loss.last_row_losses);
  EXPECT_EQ(t.loss.embedding_first_moment_head,
            tail.loss.embedding_first_moment_head);
  EXPECT_EQ(t.final_logits, tail.final_logits);
  EXPECT_EQ(t.semaphores[2].device_end_ns, 2002u);
  EXPECT_EQ(t.errors.text, "illegal address");
  EXPECT_EQ(t.errors.cuda_error, 700);
  EXPECT_TRUE(t.errors.invalid_token_seen);
  EXPECT_EQ(t.host.backend, "reference");
  EXPECT_EQ(t.host.publications, 4u);
  EXPECT_EQ(t.host.predictions[2].token, 511u);
  EXPECT_FALSE(t.host.predictions[1].valid);
  ASSERT_EQ(t.timestamps.size(), 10u);
  EXPECT_EQ(t.timestamps[5].device_end_ns, 510u + 35u);
  EXPECT_EQ(t.timestamps[5].release_value, 5u);
  // Mean of step 1: 9.5 + 0.001 * mean(0..63) = 9.5315, by hand.
  std::vector<double> means = StepMeanLosses(*r);
  ASSERT_EQ(means.size(), 8u);
  EXPECT_NEAR(means[1], 9.5315, 1e-5);
}

TEST(ResultReader, CoppeliusGeometryRoundTrip) {
  // SPEC §7 sizes: V 12,288, T 1,024 (no loss-window padding), 10,000 steps.
  const ResultGeometry g = {12288, 1024, 10000};
  const ResultTail tail = MakeTail(g);
  const std::string path = WriteComplete("coppelius.res", g, tail);
  struct stat st;
  ASSERT_EQ(stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 41813600);
  auto r = ReadResult(path, g);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->complete);
  EXPECT_EQ(r->complete_steps, 10000);
  EXPECT_EQ(r->tail.loss.last_row_losses, tail.loss.last_row_losses);
  EXPECT_EQ(r->tail.final_logits, tail.final_logits);
  EXPECT_EQ(r->tail.timestamps.back().context, 3u + 9999u);
  EXPECT_EQ(std::vector<float>(r->step_losses.end() - 1024,
                               r->step_losses.end()),
            Window(g, 9999));
  // The tiny geometry reads this file as too long.
  EXPECT_EQ(ReadResult(path, kTiny).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ResultReader, TruncatedReadsAsIncomplete) {
  const std::string full = Slurp(WriteComplete("tr.res", kTiny, MakeTail(kTiny)));
  for (size_t size = 0; size < full.size(); size += 37) {
    auto r = ParseResult(absl::string_view(full.data(), size), kTiny, "cut");
    ASSERT_TRUE(r.ok()) << size << ": " << r.status();
    EXPECT_FALSE(r->complete);
    // Hand formula: windows start at 6144 and are 256 bytes each.
    int64_t k = size < 6144 ? 0 : std::min<int64_t>((size - 6144) / 256, 8);
    EXPECT_EQ(r->complete_steps, k) << size;
    EXPECT_EQ(r->forward_present, size >= 6144) << size;
    EXPECT_EQ(static_cast<int64_t>(r->step_losses.size()), 64 * k);
  }
  // Exactly at a window boundary.
  auto r = ParseResult(absl::string_view(full.data(), 6144 + 3 * 256), kTiny,
                       "cut");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->complete_steps, 3);
}

TEST(ResultWriter, KilledRunLeavesForwardAndWindows) {
  const std::string path = TempPath("killed.res");
  {
    auto w = ResultWriter::Create(path, kTiny);
    ASSERT_TRUE(w.ok());
    // Before the forward record: only the marker.
    EXPECT_EQ(Slurp(path), std::string("\xbe\xba\xfe\xca\xbe\xba\xfe\xca", 8));
    ASSERT_TRUE((*w)->WriteForwardRecord(Forward(kTiny).data()).ok());
    for (int s = 0; s < 5; ++s)
      ASSERT_TRUE((*w)->AppendStepWindow(s, Window(kTiny, s).data()).ok());
    // Destroyed without Finish: the "kill".
  }
  auto r = ReadResult(path, kTiny);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->complete);
  EXPECT_EQ(r->complete_steps, 5);
  EXPECT_EQ(r->file_size, 6144u + 5 * 256);
  EXPECT_FALSE(r->marker_left);
}

TEST(ResultReader, MarkerLeftDetected) {
  const std::string path = TempPath("marker.res");
  auto w = ResultWriter::Create(path, kTiny);
  ASSERT_TRUE(w.ok());
  auto r = ReadResult(path, kTiny);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->marker_left);
  EXPECT_FALSE(r->forward_present);
  // A complete file whose forward record still starts with the marker.
  std::string full = Slurp(WriteComplete("marker2.res", kTiny, MakeTail(kTiny)));
  std::memcpy(&full[0], "\xbe\xba\xfe\xca\xbe\xba\xfe\xca", 8);
  auto r2 = ParseResult(full, kTiny, "m");
  ASSERT_TRUE(r2.ok());
  EXPECT_TRUE(r2->complete);
  EXPECT_TRUE(r2->marker_left);
}

TEST(ResultReader, HostileInputs) {
  const std::string full = Slurp(WriteComplete("h.res", kTiny, MakeTail(kTiny)));
  // Too long.
  auto r = ParseResult(full + "x", kTiny, "long.res");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(r.status().message(), HasSubstr("long.res"));
  EXPECT_THAT(r.status().message(), HasSubstr("at most 27744"));
  struct Case {
    size_t offset;
    std::string bytes;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {26944, "CPLSRES2", "offset 26944 (host status.tag)"},
      {26944 + 24, std::string("\x01\x02\0\0", 4), "host status.geometry"},
      {26944 + 48, std::string("\x07", 1), "offset 26992 (host status.steps_done)"},
      {26944 + 124, std::string("\x02", 1), "predictions[0].valid"},
      {26944 + 136, std::string("\x00\x02", 2), "predictions[2].token"},
      {26944 + 150, std::string("\x01", 1), "offset 27094 (host status.reserved)"},
      {26944 + 8 + 15, std::string("x", 1), "host status.backend"},
      {26944 + 8, std::string("\x01", 1), "printable ASCII"},
      {8192 + 100, std::string("\x09", 1), "offset 8292 (input stat.submissions_issued)"},
      {8192 + 96, std::string("\x0b", 1), "submissions_completed"},
      {8192 + 104, std::string("\x07", 1), "update_last_release"},
      {8192 + 64, std::string("\x05", 1), "input stat.fresh"},
      {8192 + 70, std::string("\x05", 1), "input stat.reserved"},
      {26816 + 24, std::string("\x09", 1), "semaphore[update].issues"},
      {26784 + 16, std::string("\x01\x00", 2),
       "semaphore[forward].device_end_ns"},
      {26880, std::string("\xff\xff\xff\xff\xff\xff\xff\xff", 8),
       "first_nonfinite_step"},
      {26880 + 16, std::string("\x03", 1), "invalid_token_seen"},
      {26880 + 24 + 39, std::string("y", 1), "error notifier.text"},
      {27104 + 64 * 0, std::string("\x01", 1), "offset 27104 (timestamp[0].kind)"},
      {27104 + 64 * 2, std::string("\x07", 1), "timestamp[2].kind"},
      {27104 + 64 * 4 + 8, std::string("\x63", 1), "timestamp[4].context"},
      {27104 + 64 * 4 + 16, std::string("\x63", 1), "timestamp[4].step"},
      {27104 + 64 * 4 + 56, std::string("\x63", 1), "timestamp[4].reserved"},
      {27104 + 64 * 4 + 40, std::string("\xff\xff", 2), "device_end_ns"},
      {27104 + 64 * 4 + 4, std::string("\x09", 1),
       "offset 27364 (timestamp[4].release_value): expected 4"},
      {27104 + 64 * 9 + 4, std::string("\x02", 1),
       "timestamp[9].release_value"},
      {26784, std::string("\x03", 1),
       "offset 26784 (semaphore[forward].completion_value)"},
      {8352 + 4 * 64, std::string("\x01", 1),
       "offset 8608 (loss block.last_row_losses padding)"},
  };
  for (const Case& c : cases) {
    std::string bad = full;
    std::memcpy(&bad[c.offset], c.bytes.data(), c.bytes.size());
    auto pr = ParseResult(bad, kTiny, "bad.res");
    ASSERT_FALSE(pr.ok()) << c.expect;
    EXPECT_EQ(pr.status().code(), absl::StatusCode::kDataLoss) << c.expect;
    EXPECT_THAT(pr.status().message(), HasSubstr(c.expect));
    EXPECT_THAT(pr.status().message(), HasSubstr("bad.res"));
    // One line.
    EXPECT_EQ(std::string(pr.status().message()).find('\n'),
              std::string::npos);
  }
  // Read with a smaller geometry, the file is too long for it.
  auto wrong_v = ParseResult(full, {256, 64, 8}, "w");
  EXPECT_EQ(wrong_v.status().code(), absl::StatusCode::kDataLoss);
}

TEST(ResultReader, RandomMutationsNeverCrash) {
  const std::string full =
      Slurp(WriteComplete("mut.res", kTiny, MakeTail(kTiny)));
  std::mt19937_64 rng(20260925);
  int rejected = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string bad = full;
    const int flips = 1 + rng() % 4;
    for (int f = 0; f < flips; ++f) {
      // Mostly the tail, where the fields are.
      size_t at = iter % 2 ? 8192 + rng() % (full.size() - 8192)
                           : rng() % full.size();
      bad[at] = static_cast<char>(rng());
    }
    if (iter % 7 == 0) bad.resize(rng() % (full.size() + 1));
    auto r = ParseResult(bad, kTiny, "mutant");
    if (!r.ok()) {
      ++rejected;
      EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
    } else if (r->complete) {
      EXPECT_EQ(r->tail.timestamps.size(), 10u);
    }
  }
  // Many mutants hit checked fields: the checks do reject something.
  EXPECT_GT(rejected, 100);
}

TEST(ResultWriter, RefusesOutOfOrderAndEarlyFinish) {
  const std::string path = TempPath("order.res");
  auto w = ResultWriter::Create(path, kTiny);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ((*w)->Finish(MakeTail(kTiny)).code(),
            absl::StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*w)->WriteForwardRecord(Forward(kTiny).data()).ok());
  absl::Status st = (*w)->AppendStepWindow(1, Window(kTiny, 1).data());
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("expected step 0"));
  for (int s = 0; s < 8; ++s)
    ASSERT_TRUE((*w)->AppendStepWindow(s, Window(kTiny, s).data()).ok());
  EXPECT_EQ((*w)->AppendStepWindow(8, Window(kTiny, 8).data()).code(),
            absl::StatusCode::kFailedPrecondition);
  ResultTail bad = MakeTail(kTiny);
  bad.host.steps_done = 7;
  st = (*w)->Finish(bad);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(st.message(), HasSubstr("host status.steps_done"));
  bad = MakeTail(kTiny);
  bad.host.backend = "a-backend-name-too-long";
  EXPECT_THAT((*w)->Finish(bad).message(), HasSubstr("at most 15 bytes"));
  bad = MakeTail(kTiny);
  bad.final_logits.pop_back();
  EXPECT_THAT((*w)->Finish(bad).message(), HasSubstr("final record"));
  bad = MakeTail(kTiny);
  bad.input.fresh = true;
  EXPECT_THAT((*w)->Finish(bad).message(), HasSubstr("input stat.size"));
  EXPECT_TRUE((*w)->Finish(MakeTail(kTiny)).ok());
  // After Finish nothing more is written.
  EXPECT_EQ((*w)->WriteForwardRecord(Forward(kTiny).data()).code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(ResultWriter, FreshInputTail) {
  ResultTail t = MakeTail(kTiny);
  t.input = ResultInputStat();
  t.input.submissions_issued = t.input.submissions_completed = 10;
  t.input.update_last_release = 8;
  t.host.first_context = 0;
  t.host.update_count = 8;
  for (int64_t i = 0; i < 10; ++i) {
    t.timestamps[i].context = i == 0 ? 0 : (i <= 8 ? i - 1 : 7);
  }
  auto r = ReadResult(WriteComplete("fresh.res", kTiny, t), kTiny);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_TRUE(r->tail.input.fresh);
  EXPECT_EQ(r->tail.host.first_context, 0u);
}

// Two writers of one file under two names (a hard link): the second is
// refused before it truncates anything; once the first is gone, the file
// can be written again.
TEST(ResultWriter, SecondWriterOfTheSameFileIsRefused) {
  const std::string path = TempPath("linked.res");
  const std::string link = TempPath("linked-too.res");
  unlink(path.c_str());
  unlink(link.c_str());
  {
    auto first = ResultWriter::Create(path, kTiny);
    ASSERT_TRUE(first.ok()) << first.status();
    ASSERT_EQ(::link(path.c_str(), link.c_str()), 0);
    ASSERT_TRUE((*first)->WriteForwardRecord(Forward(kTiny).data()).ok());
    const std::string before = Slurp(path);
    auto second = ResultWriter::Create(link, kTiny);
    EXPECT_EQ(second.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(second.status().message(),
                HasSubstr("being written by another process"));
    EXPECT_EQ(Slurp(path), before);  // not truncated
  }
  auto again = ResultWriter::Create(link, kTiny);
  EXPECT_TRUE(again.ok()) << again.status();
}

// A file already at the path is replaced by a new one, never written: a
// hard link to it keeps its bytes (break-it: `train --overwrite` wrote into
// the old inode).
TEST(ResultWriter, ExistingFileIsReplacedNotWritten) {
  const std::string path = TempPath("old.res");
  const std::string link = TempPath("old-link.res");
  unlink(path.c_str());
  unlink(link.c_str());
  const std::string old_bytes = "an earlier run's result, kept by its link";
  {
    FILE* f = fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    fwrite(old_bytes.data(), 1, old_bytes.size(), f);
    fclose(f);
  }
  ASSERT_EQ(::link(path.c_str(), link.c_str()), 0);
  auto w = ResultWriter::Create(path, kTiny);
  ASSERT_TRUE(w.ok()) << w.status();
  ASSERT_TRUE((*w)->WriteForwardRecord(Forward(kTiny).data()).ok());
  EXPECT_EQ(Slurp(link), old_bytes);
  EXPECT_EQ(Slurp(path).size(), 6144u);  // the forward record, 12 V
  struct stat path_st, link_st;
  ASSERT_EQ(stat(path.c_str(), &path_st), 0);
  ASSERT_EQ(stat(link.c_str(), &link_st), 0);
  EXPECT_NE(path_st.st_ino, link_st.st_ino);
}

// The disk fills up while the forward record is written (here: a file
// size limit of 4 KiB, the record being 6 KiB): the partial record over
// the marker would be no recognisable result and would block the next
// run, so the new file is removed and the error says so.
TEST(ResultWriter, FailedForwardRecordRemovesTheNewFile) {
  const std::string path = TempPath("full.res");
  unlink(path.c_str());
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    signal(SIGXFSZ, SIG_IGN);  // write(2) fails with EFBIG instead
    const struct rlimit limit = {4096, 4096};
    setrlimit(RLIMIT_FSIZE, &limit);
    auto w = ResultWriter::Create(path, kTiny);
    if (!w.ok()) _exit(2);
    const absl::Status s = (*w)->WriteForwardRecord(Forward(kTiny).data());
    if (s.ok()) _exit(3);
    if (s.message().find("the result file was removed") == std::string::npos) {
      _exit(4);
    }
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  struct stat st;
  EXPECT_NE(stat(path.c_str(), &st), 0) << "a partial result was left";
}

TEST(ResultWriter, CreateInMissingDirectoryFails) {
  auto w = ResultWriter::Create("/nonexistent-dir/x.res", kTiny);
  EXPECT_EQ(w.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(w.status().message(), HasSubstr("/nonexistent-dir/x.res"));
}

TEST(ResultSignatureOf, HostTagOrForwardRecordBySize) {
  const std::string full = Slurp(WriteComplete("d.res", kTiny, MakeTail(kTiny)));
  const std::string tag = full.substr(26944, 8);
  const std::string head = full.substr(0, 4096);
  EXPECT_EQ(ResultSignatureOf(full.size(), head, tag, kTiny),
            ResultSignature::kHostTag);
  // Bytes appended after a complete file: still its tag.
  EXPECT_EQ(ResultSignatureOf(full.size() + 4, head, tag, kTiny),
            ResultSignature::kHostTag);
  // A damaged tag: the forward record still tells (complete size).
  EXPECT_EQ(ResultSignatureOf(full.size(), head, "nottag!!", kTiny),
            ResultSignature::kForwardRecord);
  EXPECT_EQ(ResultSignatureOf(full.size() + 4, head, "nottag!!", kTiny),
            ResultSignature::kNone);
  // Killed after the forward record, at a window boundary or inside one.
  EXPECT_EQ(ResultSignatureOf(6144 + 512, head, "", kTiny),
            ResultSignature::kForwardRecord);
  EXPECT_EQ(ResultSignatureOf(6144 + 500, head, "", kTiny),
            ResultSignature::kForwardRecord);
  // Shorter than the forward record, or not logits (u32 ids: denormals).
  EXPECT_EQ(ResultSignatureOf(6143, head, "", kTiny), ResultSignature::kNone);
  const std::string ids("\x07\x00\x00\x00\x63\x00\x00\x00", 8);
  EXPECT_EQ(ResultSignatureOf(6144 + 512, ids, "", kTiny),
            ResultSignature::kNone);
  // Token ids as text (tokenize encode --format=text: one line, ids
  // separated by spaces): digits and spaces read as floats of 2^-63 ..
  // 2^-12, all of them tiny.
  std::string text;
  for (int i = 0; text.size() < 4096; ++i) {
    text += std::to_string((i * 7919) % 12288);
    text += " ";
  }
  EXPECT_EQ(ResultSignatureOf(6144 + 512, text.substr(0, 4096), "", kTiny),
            ResultSignature::kNone);
  // A diverged run's record (every logit non-finite) is still one.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::string diverged(4096, '\0');
  for (size_t at = 0; at < diverged.size(); at += 4) {
    std::memcpy(&diverged[at], &nan, 4);
  }
  EXPECT_EQ(ResultSignatureOf(6144 + 512, diverged, "", kTiny),
            ResultSignature::kForwardRecord);
}

// ReadsAsLosses, by hand: zeros, positives, NaN and infinities (a diverged
// run) pass; one finite negative value fails; a trailing partial value is
// ignored.
TEST(ReadsAsLosses, NoFiniteNegativeValue) {
  auto bytes = [](std::vector<float> v) {
    return std::string(reinterpret_cast<const char*>(v.data()), 4 * v.size());
  };
  EXPECT_TRUE(ReadsAsLosses(""));
  EXPECT_TRUE(ReadsAsLosses(bytes({0.0f, -0.0f, 1.5f, NAN, INFINITY,
                                   -INFINITY})));
  EXPECT_FALSE(ReadsAsLosses(bytes({1.0f, -0.5f, 2.0f})));
  EXPECT_TRUE(ReadsAsLosses(bytes({1.0f}) + std::string("\x00\x00\x80", 3)));
}

// ResultFileEvidence: a killed run's file is evidence; an fp32 array of a
// killed run's size whose first "window" holds negative values (an
// exported tensor, break-it session 21: train --overwrite replaced one) is
// not, nor is text; a complete file names its host tag.
TEST(ResultFileEvidence, KilledRunsButNotOtherFloatArrays) {
  const std::string killed = TempPath("evidence_killed.res");
  {
    auto w = ResultWriter::Create(killed, kTiny);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->WriteForwardRecord(Forward(kTiny).data()).ok());
    ASSERT_TRUE((*w)->AppendStepWindow(0, Window(kTiny, 0).data()).ok());
  }
  EXPECT_EQ(ResultFileEvidence(killed),
            "config tiny, incomplete: a killed run's");
  // The same bytes with one negative value in the step window.
  std::string bytes = Slurp(killed);
  const float negative = -0.5f;
  std::memcpy(&bytes[6144 + 40], &negative, 4);
  const std::string array = TempPath("evidence_array.f32");
  std::ofstream(array, std::ios::binary) << bytes;
  EXPECT_EQ(ResultFileEvidence(array), "");
  // Logits alone, no window yet: still a killed run's.
  const std::string forward_only = TempPath("evidence_forward.res");
  std::ofstream(forward_only, std::ios::binary) << bytes.substr(0, 6144);
  EXPECT_EQ(ResultFileEvidence(forward_only),
            "config tiny, incomplete: a killed run's");
  const std::string text = TempPath("evidence.txt");
  std::ofstream(text, std::ios::binary) << std::string(7000, 'a');
  EXPECT_EQ(ResultFileEvidence(text), "");
  EXPECT_EQ(ResultFileEvidence(WriteComplete("evidence_done.res", kTiny,
                                             MakeTail(kTiny))),
            "config tiny, host tag at byte 26944");
  EXPECT_EQ(ResultFileEvidence(TempPath("evidence_missing.res")), "");
}

// StepZeroAgreesWithForwardRecord by hand, tiny (V 512, T 64: rows 15, 31,
// 63): logits 0, 1, ..., 511 scaled by 1/64 in each row, so logsumexp is
// known in closed form; a cross-entropy between logsumexp - max and
// logsumexp - min passes, one outside fails; NaN and +0 rows are not
// checked, nor rows past the window's end.
TEST(StepZeroAgreesWithForwardRecord, CrossEntropiesOfTheRecordedRows) {
  std::vector<float> forward(3 * 512);
  for (int k = 0; k < 3; ++k) {
    for (int v = 0; v < 512; ++v) forward[k * 512 + v] = v / 64.0f;
  }
  // logsumexp of v/64, v = 0..511, by the geometric series: the sum of
  // e^(v/64) is (e^8 - 1) / (e^(1/64) - 1).
  const double lse =
      std::log((std::exp(8.0) - 1.0) / (std::exp(1.0 / 64.0) - 1.0));
  const double max = 511.0 / 64.0, min = 0.0;
  const std::string record(reinterpret_cast<const char*>(forward.data()),
                           4 * forward.size());
  auto window_with = [](float value, int64_t rows = 64) {
    std::vector<float> w(rows, 1.0f);  // rows not checked: any loss
    for (int64_t r : {15, 31, 63}) {
      if (r < rows) w[r] = value;
    }
    return std::string(reinterpret_cast<const char*>(w.data()), 4 * rows);
  };
  EXPECT_TRUE(StepZeroAgreesWithForwardRecord(
      record, window_with(static_cast<float>(lse - max)), kTiny));
  EXPECT_TRUE(StepZeroAgreesWithForwardRecord(
      record, window_with(static_cast<float>(lse - min)), kTiny));
  EXPECT_TRUE(StepZeroAgreesWithForwardRecord(
      record, window_with(static_cast<float>(lse - 3.0)), kTiny));
  EXPECT_FALSE(StepZeroAgreesWithForwardRecord(
      record, window_with(static_cast<float>(lse - max - 0.1)), kTiny));
  EXPECT_FALSE(StepZeroAgreesWithForwardRecord(
      record, window_with(static_cast<float>(lse - min + 0.1)), kTiny));
  // Not checked: a diverged row, an unwritten (zero) window, a window cut
  // before row 15; a window cut after row 15 checks row 15 alone.
  EXPECT_TRUE(StepZeroAgreesWithForwardRecord(record, window_with(NAN), kTiny));
  EXPECT_TRUE(
      StepZeroAgreesWithForwardRecord(record, window_with(0.0f), kTiny));
  EXPECT_TRUE(StepZeroAgreesWithForwardRecord(record, window_with(0.5f, 15),
                                              kTiny));
  EXPECT_FALSE(StepZeroAgreesWithForwardRecord(record, window_with(0.5f, 16),
                                               kTiny));
  // A non-finite logit in a row: that row is not checked.
  std::vector<float> diverged = forward;
  for (int k = 0; k < 3; ++k) diverged[k * 512 + 7] = INFINITY;
  EXPECT_TRUE(StepZeroAgreesWithForwardRecord(
      std::string(reinterpret_cast<const char*>(diverged.data()),
                  4 * diverged.size()),
      window_with(0.5f), kTiny));
  // A record shorter than 12 V agrees with nothing.
  EXPECT_FALSE(StepZeroAgreesWithForwardRecord(
      record.substr(0, 100), window_with(static_cast<float>(lse - 3.0)),
      kTiny));
}

// An fp32 array of a tiny result's size, 6,144 + 2,048 bytes of |N(0, 1)|
// values (break-it, session 23: train --overwrite replaced one as a killed
// run's result; its values are logit-like and none negative): no evidence,
// because its "step 0" rows are no cross-entropies of its "logits".
TEST(ResultFileEvidence, NonNegativeFloatArrayOfAResultsSize) {
  std::mt19937 rng(20261201);
  std::normal_distribution<float> normal;
  std::vector<float> values(2048);
  for (float& x : values) x = std::fabs(normal(rng));
  const std::string array = TempPath("evidence_abs_normal.f32");
  std::ofstream(array, std::ios::binary)
      << std::string(reinterpret_cast<const char*>(values.data()),
                     4 * values.size());
  EXPECT_EQ(ResultSignatureOf(8192,
                              std::string(reinterpret_cast<const char*>(
                                              values.data()),
                                          4096),
                              "", kTiny),
            ResultSignature::kForwardRecord);  // the first rule alone passes
  EXPECT_EQ(ResultFileEvidence(array), "");
}

}  // namespace
}  // namespace coppelius
