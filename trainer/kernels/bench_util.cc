// File: trainer/kernels/bench_util.cc
#include "trainer/kernels/bench_util.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <vector>

namespace coppelius {
namespace {

bool Ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "GraphTimePerCallMs: %s: %s\n", what,
               cudaGetErrorString(e));
  return false;
}

}  // namespace

double GraphTimePerCallMs(cudaStream_t stream, const std::function<bool()>& fn,
                          int reps, int calls) {
  if (reps < 1 || calls < 1 || !fn()) return -1;
  if (!Ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize")) return -1;
  if (!Ok(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal),
          "cudaStreamBeginCapture")) {
    return -1;
  }
  bool ok = true;
  for (int i = 0; i < calls && ok; ++i) ok = fn();
  cudaGraph_t graph = nullptr;
  ok = Ok(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture") && ok;
  cudaGraphExec_t exec = nullptr;
  ok = ok && Ok(cudaGraphInstantiate(&exec, graph, 0), "cudaGraphInstantiate");
  cudaEvent_t start = nullptr, end = nullptr;
  ok = ok && Ok(cudaEventCreate(&start), "cudaEventCreate") &&
       Ok(cudaEventCreate(&end), "cudaEventCreate");
  for (int i = 0; i < 3 && ok; ++i) {
    ok = Ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  }
  std::vector<double> ms;
  for (int i = 0; i < reps && ok; ++i) {
    float t = 0;
    ok = Ok(cudaEventRecord(start, stream), "cudaEventRecord") &&
         Ok(cudaGraphLaunch(exec, stream), "cudaGraphLaunch") &&
         Ok(cudaEventRecord(end, stream), "cudaEventRecord") &&
         Ok(cudaEventSynchronize(end), "cudaEventSynchronize") &&
         Ok(cudaEventElapsedTime(&t, start, end), "cudaEventElapsedTime");
    ms.push_back(static_cast<double>(t) / calls);
  }
  if (start != nullptr) cudaEventDestroy(start);
  if (end != nullptr) cudaEventDestroy(end);
  if (exec != nullptr) cudaGraphExecDestroy(exec);
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (!ok) return -1;
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

cudaError_t FillRandomNormal(void* p, size_t bytes, bool bf16,
                             std::mt19937_64* rng) {
  std::normal_distribution<float> d(0.0f, 1.0f);
  if (bf16) {
    std::vector<__nv_bfloat16> h(bytes / 2);
    for (auto& x : h) x = __float2bfloat16(d(*rng));
    return cudaMemcpy(p, h.data(), h.size() * 2, cudaMemcpyHostToDevice);
  }
  std::vector<float> h(bytes / 4);
  for (auto& x : h) x = d(*rng);
  return cudaMemcpy(p, h.data(), h.size() * 4, cudaMemcpyHostToDevice);
}

}  // namespace coppelius
