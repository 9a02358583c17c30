// Benchmarks of the token cache reader and of make-cache.
//
//   bazel run //tokencache:token_cache_benchmark
//   export MAKE_CACHE_VOCAB=$PWD/data/vocab.tiktoken
//   export MAKE_CACHE_SOURCE=$PWD/data/corpus/corpus.txt
//   bazel run //tokencache:token_cache_benchmark -- --benchmark_filter=Corpus
#include <unistd.h>

#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "benchmark/benchmark.h"
#include "tokencache/make_cache.h"
#include "tokencache/token_cache.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {
namespace {

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/coppelius_bench_" +
         std::to_string(getpid()) + "_" + name;
}

void BM_OpenAndCheckIdRange(benchmark::State& state) {
  const std::string path = TempPath("ids.tok");
  const uint64_t n = static_cast<uint64_t>(state.range(0));
  {
    auto w = TokenCacheWriter::Create(path, SourceStat{1, 2});
    std::vector<uint32_t> ids(n);
    std::mt19937 rng(1);
    for (uint32_t& id : ids) id = rng() % 12288;
    if (!w.ok() || !w->Append(ids).ok() || !w->Commit().ok()) {
      state.SkipWithError("writing the cache failed");
      return;
    }
  }
  for (auto _ : state) {
    auto cache = TokenCache::Open(path);
    if (!cache.ok() || !cache->CheckIdRange(12288).ok()) {
      state.SkipWithError("check failed");
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * n * 4);
  unlink(path.c_str());
}
BENCHMARK(BM_OpenAndCheckIdRange)->Arg(28 << 20)->Unit(benchmark::kMillisecond);

std::string SyntheticText(size_t bytes) {
  static const char* kWords[] = {"the", " token", " cache", " holds", " ids",
                                 ",", ".\n", " of", " a", " corpus", " 1024",
                                 " café", "\n\n", "  indented", " don't"};
  std::mt19937 rng(20260925);
  std::string out;
  while (out.size() < bytes) {
    out += kWords[rng() % 15];
    if (rng() % 20000 == 0) out += "<|endoftext|>";
  }
  return out;
}

void BM_MakeCacheSynthetic(benchmark::State& state) {
  const std::string text = SyntheticText(32 << 20);
  const std::string source = TempPath("source.txt");
  const std::string vocab = TempPath("vocab.tiktoken");
  const std::string out = TempPath("out.tok");
  FILE* f = fopen(source.c_str(), "wb");
  fwrite(text.data(), 1, text.size(), f);
  fclose(f);
  auto trained = TrainBpe(text.substr(0, 4 << 20), 350, 2);
  if (!trained.ok()) {
    state.SkipWithError(trained.status().ToString().c_str());
    return;
  }
  auto vocabulary = Vocabulary::FromTokens(trained->tokens);
  if (!vocabulary.ok() || !vocabulary->Save(vocab).ok()) {
    state.SkipWithError("saving the vocabulary failed");
    return;
  }
  MakeCacheOptions options;
  options.vocab_path = vocab;
  options.source_path = source;
  options.output_path = out;
  options.force = true;
  options.summary = false;
  options.threads = static_cast<int>(state.range(0));
  for (auto _ : state) {
    absl::Status s = RunMakeCache(options);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  state.SetBytesProcessed(state.iterations() * text.size());
  unlink(source.c_str());
  unlink(vocab.c_str());
  unlink(out.c_str());
}
BENCHMARK(BM_MakeCacheSynthetic)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_MakeCacheCorpus(benchmark::State& state) {
  const char* vocab = std::getenv("MAKE_CACHE_VOCAB");
  const char* source = std::getenv("MAKE_CACHE_SOURCE");
  if (vocab == nullptr || source == nullptr) {
    state.SkipWithError("MAKE_CACHE_VOCAB / MAKE_CACHE_SOURCE not set");
    return;
  }
  MakeCacheOptions options;
  options.vocab_path = vocab;
  options.source_path = source;
  options.output_path = TempPath("corpus.tok");
  options.force = true;
  options.summary = false;
  options.threads = static_cast<int>(state.range(0));
  MakeCacheReport report;
  for (auto _ : state) {
    absl::Status s = RunMakeCache(options, &report);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      break;
    }
  }
  state.counters["tokens"] = report.num_tokens;
  state.SetBytesProcessed(state.iterations() * report.source_bytes);
  unlink(options.output_path.c_str());
}
BENCHMARK(BM_MakeCacheCorpus)
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace coppelius
