// Benchmarks of the BPE trainer.
//
//   bazel run -c opt //tokenizer:bpe_trainer_benchmark
//   export BPE_CORPUS=$PWD/data/corpus/corpus.txt
//   bazel run //tokenizer:bpe_trainer_benchmark -- --benchmark_filter=Corpus
//
// BM_TrainBpeCorpus trains the full 12,288-id vocabulary on $BPE_CORPUS (it is
// skipped when unset) and, when $BPE_VOCAB_OUT is set, saves the result there.
#include <cstdlib>
#include <random>
#include <string>

#include "benchmark/benchmark.h"
#include "common/file_io.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {
namespace {

// Pseudo-English: words from a fixed syllable list, spaces, punctuation,
// newlines and document separators.
std::string SyntheticCorpus(size_t bytes) {
  static const char* kSyllables[] = {"the", "re", "in", "ter", "an", "on",
                                     "ing", "s",  "ed", "tion", "al", "e",
                                     "com", "pu", "ta", "ble", "de", "x"};
  std::mt19937 rng(20260925);
  std::string out;
  while (out.size() < bytes) {
    int n = 1 + rng() % 3;
    for (int i = 0; i < n; ++i) out += kSyllables[rng() % 18];
    switch (rng() % 12) {
      case 0: out += ".\n"; break;
      case 1: out += ", "; break;
      case 2: out += " 19"; break;
      default: out += " ";
    }
    if (rng() % 5000 == 0) out += "<|endoftext|>";
  }
  return out;
}

void BM_TrainBpeSynthetic(benchmark::State& state) {
  const std::string corpus = SyntheticCorpus(8 << 20);
  for (auto _ : state) {
    auto result = TrainBpe(corpus, 4096, static_cast<int>(state.range(0)));
    if (!result.ok()) state.SkipWithError(result.status().ToString().c_str());
    benchmark::DoNotOptimize(result);
  }
  state.SetBytesProcessed(state.iterations() * corpus.size());
}
BENCHMARK(BM_TrainBpeSynthetic)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond);

void BM_TrainBpeCorpus(benchmark::State& state) {
  const char* path = std::getenv("BPE_CORPUS");
  if (path == nullptr) {
    state.SkipWithError("BPE_CORPUS is not set");
    return;
  }
  auto corpus = ReadFile(path);
  if (!corpus.ok()) {
    state.SkipWithError(corpus.status().ToString().c_str());
    return;
  }
  for (auto _ : state) {
    auto result = TrainBpe(*corpus, 12288, static_cast<int>(state.range(0)),
                           /*progress=*/true);
    if (!result.ok()) {
      state.SkipWithError(result.status().ToString().c_str());
      return;
    }
    state.counters["distinct_pretokens"] = result->distinct_pretokens;
    state.counters["pretokens"] = result->total_pretokens;
    state.counters["skipped_pairs"] = result->skipped_pairs;
    state.counters["duplicate_merges"] = result->duplicate_merges;
    if (const char* out = std::getenv("BPE_VOCAB_OUT")) {
      auto vocabulary = Vocabulary::FromTokens(result->tokens);
      if (!vocabulary.ok() || !vocabulary->Save(out).ok()) {
        state.SkipWithError("saving BPE_VOCAB_OUT failed");
      }
    }
  }
  state.SetBytesProcessed(state.iterations() * corpus->size());
}
BENCHMARK(BM_TrainBpeCorpus)
    ->Arg(2)
    ->Iterations(1)
    ->Unit(benchmark::kSecond)
    ->UseRealTime();

}  // namespace
}  // namespace coppelius
