// Encoder throughput (MB/s of input text) on Google Benchmark.
//
//   bazel run -c opt //tokenizer:encoder_benchmark
//
// Text and vocabulary: $COPPELIUS_BENCH_TEXT and $COPPELIUS_BENCH_VOCAB, else
// data/corpus/corpus.txt (first 16 MiB) and data/vocab.tiktoken under the
// workspace (tools/build_corpus.py, `tokenize train`), else a synthetic
// pseudo-word text with a vocabulary trained on it by TrainBpe.
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "common/file_io.h"
#include "tokenizer/bpe_trainer.h"
#include "tokenizer/encoder.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/vocabulary.h"

namespace coppelius {
namespace {

constexpr size_t kTextBytes = 16 << 20;

std::string Env(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v != nullptr ? v : fallback;
}

struct Fixture {
  std::string text;
  std::unique_ptr<Encoder> encoder;
  std::string source;

  Fixture() {
    const std::string ws = Env("BUILD_WORKSPACE_DIRECTORY", ".");
    auto text_or =
        ReadFile(Env("COPPELIUS_BENCH_TEXT", ws + "/data/corpus/corpus.txt"));
    auto vocab_or =
        Vocabulary::Load(Env("COPPELIUS_BENCH_VOCAB", ws + "/data/vocab.tiktoken"));
    if (text_or.ok() && vocab_or.ok()) {
      text = text_or->substr(0, kTextBytes);
      encoder = std::make_unique<Encoder>(*std::move(vocab_or));
      source = "corpus";
      return;
    }
    std::mt19937 rng(1);
    std::vector<std::string> words;
    for (int i = 0; i < 5000; ++i) {
      std::string w;
      int n = 1 + rng() % 9;
      for (int j = 0; j < n; ++j) w += "etaoinshrdlucmfwyp"[rng() % 18];
      words.push_back(w);
    }
    while (text.size() < kTextBytes) {
      text += words[std::min<size_t>(rng() % 5000, rng() % 5000)];
      text += (rng() % 12 == 0) ? ".\n" : " ";
    }
    auto trained = TrainBpe(text.substr(0, 4 << 20), 4096, 0);
    encoder = std::make_unique<Encoder>(
        *Vocabulary::FromTokens(std::move(trained->tokens)));
    source = "synthetic";
  }
};

const Fixture& GetFixture() {
  static const Fixture* f = new Fixture();
  return *f;
}

void BM_Pretokenize(benchmark::State& state) {
  const Fixture& f = GetFixture();
  std::vector<absl::string_view> pieces;
  for (auto _ : state) {
    pieces.clear();
    Pretokenize(f.text, &pieces);
    benchmark::DoNotOptimize(pieces.data());
  }
  state.SetBytesProcessed(state.iterations() * f.text.size());
  state.SetLabel(f.source);
}
BENCHMARK(BM_Pretokenize)->Unit(benchmark::kMillisecond);

void BM_Encode(benchmark::State& state) {
  const Fixture& f = GetFixture();
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    ids.clear();
    f.encoder->Encode(f.text, true, &ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(state.iterations() * f.text.size());
  state.counters["bytes/token"] =
      static_cast<double>(f.text.size()) / ids.size();
  state.SetLabel(f.source);
}
BENCHMARK(BM_Encode)->Unit(benchmark::kMillisecond);

void BM_EncodeParallel(benchmark::State& state) {
  const Fixture& f = GetFixture();
  std::vector<uint32_t> ids;
  for (auto _ : state) {
    ids.clear();
    f.encoder->EncodeParallel(f.text, true, state.range(0), &ids);
    benchmark::DoNotOptimize(ids.data());
  }
  state.SetBytesProcessed(state.iterations() * f.text.size());
  state.SetLabel(f.source);
}
BENCHMARK(BM_EncodeParallel)
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  const Fixture& f = GetFixture();
  std::vector<uint32_t> ids;
  f.encoder->Encode(f.text, true, &ids);
  std::string out;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(f.encoder->Decode(ids, &out).ok());
  }
  state.SetBytesProcessed(state.iterations() * f.text.size());
}
BENCHMARK(BM_Decode)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace coppelius
