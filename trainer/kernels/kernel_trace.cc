// File: trainer/kernels/kernel_trace.cc (see kernel_trace.h).
#include "trainer/kernels/kernel_trace.h"

#include <cupti.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace coppelius {
namespace {

// The CUPTI entry points used, resolved from the dlopen'ed library.
struct Cupti {
  void* library = nullptr;
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
};

Cupti g_cupti;
bool g_tracing = false;
std::mutex g_mutex;
std::vector<KernelRecord>* g_records = nullptr;  // guarded by g_mutex

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI BufferRequested(uint8_t** buffer, size_t* size,
                              size_t* max_records) {
  // CUPTI asks for 8-byte-aligned buffers.
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI BufferCompleted(CUcontext, uint32_t, uint8_t* buffer, size_t,
                              size_t valid) {
  CUpti_Activity* record = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (g_cupti.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        record->kind != CUPTI_ACTIVITY_KIND_KERNEL) {
      continue;
    }
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    KernelRecord r;
    r.name = k->name != nullptr ? k->name : "?";
    r.start = k->start;
    r.end = k->end;
    r.stream = k->streamId;
    r.channel = k->channelID;
    r.graph_node = k->graphNodeId;
    r.grid[0] = k->gridX;
    r.grid[1] = k->gridY;
    r.grid[2] = k->gridZ;
    r.block[0] = k->blockX;
    r.block[1] = k->blockY;
    r.block[2] = k->blockZ;
    r.dynamic_shared = k->dynamicSharedMemory;
    if (g_records != nullptr) g_records->push_back(std::move(r));
  }
  std::free(buffer);
}

absl::Status Check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return absl::OkStatus();
  const char* text = "unknown";
  if (g_cupti.result_string != nullptr) g_cupti.result_string(result, &text);
  return absl::InternalError(
      absl::StrCat("kernel trace: ", what, " failed: ", text));
}

absl::Status LoadCupti() {
  if (g_cupti.library != nullptr) return absl::OkStatus();
  for (const char* path :
       {"libcupti.so.13", "/usr/local/cuda/lib64/libcupti.so.13",
        "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13"}) {
    g_cupti.library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (g_cupti.library != nullptr) break;
  }
  if (g_cupti.library == nullptr) {
    return absl::NotFoundError(
        "kernel trace: cannot load libcupti.so.13 (LD_LIBRARY_PATH, "
        "/usr/local/cuda/lib64, /usr/local/cuda/extras/CUPTI/lib64)");
  }
  auto resolve = [](auto* fn, const char* name) -> absl::Status {
    *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(
        dlsym(g_cupti.library, name));
    if (*fn == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("kernel trace: libcupti has no ", name));
    }
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(resolve(&g_cupti.register_callbacks,
                          "cuptiActivityRegisterCallbacks"));
  RETURN_IF_ERROR(resolve(&g_cupti.enable, "cuptiActivityEnable"));
  RETURN_IF_ERROR(resolve(&g_cupti.disable, "cuptiActivityDisable"));
  RETURN_IF_ERROR(resolve(&g_cupti.flush_all, "cuptiActivityFlushAll"));
  RETURN_IF_ERROR(resolve(&g_cupti.next_record, "cuptiActivityGetNextRecord"));
  RETURN_IF_ERROR(resolve(&g_cupti.result_string, "cuptiGetResultString"));
  return absl::OkStatus();
}

}  // namespace

absl::Status StartKernelTrace() {
  if (g_tracing) {
    return absl::FailedPreconditionError("kernel trace: already on");
  }
  RETURN_IF_ERROR(LoadCupti());
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    delete g_records;
    g_records = new std::vector<KernelRecord>();
  }
  RETURN_IF_ERROR(
      Check(g_cupti.register_callbacks(BufferRequested, BufferCompleted),
            "cuptiActivityRegisterCallbacks"));
  RETURN_IF_ERROR(Check(g_cupti.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                        "cuptiActivityEnable(CONCURRENT_KERNEL)"));
  g_tracing = true;
  return absl::OkStatus();
}

absl::StatusOr<std::vector<KernelRecord>> StopKernelTrace() {
  if (!g_tracing) return absl::FailedPreconditionError("kernel trace: not on");
  if (const cudaError_t e = cudaDeviceSynchronize(); e != cudaSuccess) {
    return absl::InternalError(absl::StrCat(
        "kernel trace: cudaDeviceSynchronize: ", cudaGetErrorString(e)));
  }
  RETURN_IF_ERROR(Check(g_cupti.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED),
                        "cuptiActivityFlushAll"));
  RETURN_IF_ERROR(Check(g_cupti.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL),
                        "cuptiActivityDisable(CONCURRENT_KERNEL)"));
  g_tracing = false;
  std::vector<KernelRecord> out;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    out.swap(*g_records);
  }
  std::sort(out.begin(), out.end(),
            [](const KernelRecord& a, const KernelRecord& b) {
              return a.start < b.start;
            });
  return out;
}

absl::Status WriteKernelTrace(const std::vector<KernelRecord>& records,
                              const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel trace: cannot open ", path, " for writing"));
  }
  std::fprintf(f,
               "name,start_ns,end_ns,stream,channel,graph_node,grid_x,grid_y,"
               "grid_z,block_x,block_y,block_z,dynamic_shared\n");
  for (const KernelRecord& r : records) {
    std::fprintf(f, "%s,%llu,%llu,%u,%u,%llu,%d,%d,%d,%d,%d,%d,%d\n",
                 r.name.c_str(), static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.stream, r.channel,
                 static_cast<unsigned long long>(r.graph_node), r.grid[0],
                 r.grid[1], r.grid[2], r.block[0], r.block[1], r.block[2],
                 r.dynamic_shared);
  }
  if (std::fclose(f) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kernel trace: cannot write ", path));
  }
  return absl::OkStatus();
}

}  // namespace coppelius
