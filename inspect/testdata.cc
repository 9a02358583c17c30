#include "inspect/testdata.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "checkpoint/envelope.h"
#include "checkpoint/publisher.h"
#include "checkpoint/reader.h"
#include "common/file_io.h"
#include "common/status_macros.h"
#include "tokencache/token_cache.h"
#include "tokenizer/vocabulary.h"
#include "trainer/model_config.h"
#include "trainer/run_identity.h"
#include "trainer/result_file.h"

namespace coppelius {
namespace inspect_testing {

namespace {

absl::Status WriteCache(const std::string& path, const SourceStat& header,
                        bool bad_id) {
  ASSIGN_OR_RETURN(TokenCacheWriter w, TokenCacheWriter::Create(path, header));
  std::vector<uint32_t> ids(1281);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (7 * i) % 500;
  if (bad_id) ids[1000] = 600;
  RETURN_IF_ERROR(w.Append(ids));
  return w.Commit();
}

absl::Status WriteCheckpoints(const std::string& dir) {
  ASSIGN_OR_RETURN(ModelConfig config, ModelConfigByName("tiny"));
  const int64_t n = NumParameters(config);
  std::vector<float> pmv(3 * n);
  for (int64_t i = 0; i < n; ++i) {
    pmv[i] = i % 2 ? 0.5f : -0.5f;
    pmv[n + i] = 0.25f;
    pmv[2 * n + i] = 2.0f;
  }
  for (const TensorInfo& t : ParameterLayout(config)) {
    if (t.name == "final_norm.weight") {
      for (int64_t i = 0; i < t.num_elements(); ++i) pmv[t.offset + i] = 1.0f;
    }
  }
  CheckpointIdentity id = RunCheckpointIdentity(config);
  PublishOptions options;
  options.threads = 1;
  options.writer = "inspect-testdata";
  options.backend = "reference";
  options.created_unix_nanos = 1700000000000000000ull;
  RETURN_IF_ERROR(PublishCheckpoint(absl::StrCat(dir, "/model.ckpt"), id, 16,
                                    pmv.data(), 12 * n, options));
  CheckpointIdentity seed = id;
  seed.initialization = "coppelius-initialization:random-normal|seed=20260926";
  RETURN_IF_ERROR(PublishCheckpoint(absl::StrCat(dir, "/seed.ckpt"), seed, 16,
                                    pmv.data(), 12 * n, options));
  CheckpointIdentity steps = id;
  steps.run_steps = 9;
  RETURN_IF_ERROR(PublishCheckpoint(absl::StrCat(dir, "/steps.ckpt"), steps,
                                    16, pmv.data(), 12 * n, options));
  id.chunk_bytes = 65536;
  RETURN_IF_ERROR(PublishCheckpoint(absl::StrCat(dir, "/multi.ckpt"), id, 16,
                                    pmv.data(), 12 * n, options));
  return WriteFileAtomically(absl::StrCat(dir, "/fresh.ckpt"), "");
}

// A complete tiny result (see testdata.h) whose run started at context c0.
absl::Status WriteCompleteResult(const std::string& path, uint64_t c0) {
  const ResultGeometry g = {512, 64, 8};
  ASSIGN_OR_RETURN(std::unique_ptr<ResultWriter> w,
                   ResultWriter::Create(path, g));
  std::vector<float> forward(3 * g.V);
  for (int k = 0; k < 3; ++k)
    for (int v = 0; v < g.V; ++v)
      forward[k * g.V + v] = -std::fabs(static_cast<float>(v - (100 + k)));
  RETURN_IF_ERROR(w->WriteForwardRecord(forward.data()));
  for (int s = 0; s < g.steps; ++s) {
    std::vector<float> window(g.T, 6.0f - 0.5f * s);
    RETURN_IF_ERROR(w->AppendStepWindow(s, window.data()));
  }
  ResultTail t;
  t.input.fresh = false;
  t.input.size_bytes = 1609216;
  t.input.mtime_ns = 1700000000000000000ull;
  t.input.update_count = c0;
  t.input.inode = 1234;
  for (int i = 0; i < 32; ++i) t.input.header_digest[i] = i;
  t.input.submissions_completed = t.input.submissions_issued = g.steps + 2;
  t.input.update_last_release = g.steps;
  t.loss.last_row_losses.assign(g.T, 6.0f - 0.5f * (g.steps - 1));
  t.loss.embedding_gradient_head.assign(1024, 0.001f);
  t.loss.embedding_parameter_head.assign(1024, 0.5f);
  t.loss.embedding_first_moment_head.assign(1024, 0.0001f);
  t.final_logits.assign(g.V, 0.0f);
  t.final_logits[511] = 9.0f;
  const uint32_t issues[3] = {1, static_cast<uint32_t>(g.steps), 1};
  for (int k = 0; k < 3; ++k) {
    t.semaphores[k].completion_value = issues[k];
    t.semaphores[k].fence_value = issues[k];
    t.semaphores[k].issues = issues[k];
  }
  t.host.backend = "reference";
  t.host.first_context = c0;
  t.host.steps_done = g.steps;
  t.host.update_count = c0 + g.steps;
  t.host.publications = 4;
  t.host.start_unix_ns = 1700000000000000000ull;
  t.host.end_unix_ns = 1700000001000000000ull;
  t.host.predictions = {ResultPrediction{65, true},
                        ResultPrediction{300, true},
                        ResultPrediction{511, true}};
  t.timestamps.resize(g.steps + 2);
  for (int64_t i = 0; i < g.steps + 2; ++i) {
    ResultTimestamp& ts = t.timestamps[i];
    const bool update = i >= 1 && i <= g.steps;
    ts.kind = i == 0 ? SubmissionKind::kForward
                     : update ? SubmissionKind::kUpdate : SubmissionKind::kFinal;
    ts.step = update ? i - 1 : -1;
    ts.context = i == 0 ? c0 : update ? c0 + i - 1 : c0 + g.steps - 1;
    ts.host_issue_ns = 1000 * i + 1;
    ts.host_complete_ns = 1000 * i + 501;
    ts.device_start_ns = 1000 * i + 100;
    ts.device_end_ns = 1000 * i + 100 + (update ? 7 * i : 3);
    ts.release_value = update ? i : 1;
  }
  return w->Finish(t);
}

absl::Status WriteResults(const std::string& dir) {
  const ResultGeometry g = {512, 64, 8};
  const std::string path = absl::StrCat(dir, "/complete.res");
  RETURN_IF_ERROR(WriteCompleteResult(path, 16));
  RETURN_IF_ERROR(WriteCompleteResult(absl::StrCat(dir, "/next.res"), 24));
  RETURN_IF_ERROR(WriteCompleteResult(absl::StrCat(dir, "/gap.res"), 40));

  const ResultLayout layout = ComputeResultLayout(g);
  RETURN_IF_ERROR(CopyPrefix(path, absl::StrCat(dir, "/partial.res"),
                             layout.windows_offset + 3 * layout.window_bytes +
                                 100));
  ASSIGN_OR_RETURN(std::unique_ptr<ResultWriter> m,
                   ResultWriter::Create(absl::StrCat(dir, "/marker.res"), g));
  return absl::OkStatus();
}

}  // namespace

absl::Status CopyPrefix(const std::string& from, const std::string& to,
                        uint64_t size) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(from));
  if (size > bytes.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(from, ": shorter than ", size, " bytes"));
  }
  return WriteFileAtomically(to, bytes.substr(0, size));
}

absl::Status CorruptPayloadByte(const std::string& path,
                                uint64_t payload_offset) {
  uint64_t file_offset = 0;
  {
    ASSIGN_OR_RETURN(CheckpointReader reader, CheckpointReader::Open(path));
    file_offset = reader.payload_offset() + payload_offset;
  }
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, "opening", path);
  unsigned char b = 0;
  absl::Status s = PreadAll(fd, &b, 1, file_offset, path);
  if (s.ok()) {
    b ^= 0xff;
    if (pwrite(fd, &b, 1, file_offset) != 1) {
      s = ErrnoStatus(errno, "writing", path);
    }
  }
  close(fd);
  return s;
}

absl::Status WriteInspectTestFiles(const std::string& dir) {
  const std::string source = absl::StrCat(dir, "/source.txt");
  RETURN_IF_ERROR(WriteFileAtomically(source, std::string(2000, 'x')));
  ASSIGN_OR_RETURN(SourceStat stat, StatSource(source));
  RETURN_IF_ERROR(WriteCache(absl::StrCat(dir, "/cache.tok"), stat, false));
  RETURN_IF_ERROR(WriteCache(absl::StrCat(dir, "/bad_ids.tok"), stat, true));
  RETURN_IF_ERROR(WriteCheckpoints(dir));
  RETURN_IF_ERROR(WriteResults(dir));
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
  for (int k = 0; k < 255; ++k) tokens.push_back(absl::StrCat("t", k));
  ASSIGN_OR_RETURN(Vocabulary vocab, Vocabulary::FromTokens(tokens));
  return vocab.Save(absl::StrCat(dir, "/vocab.tiktoken"));
}

}  // namespace inspect_testing
}  // namespace coppelius
