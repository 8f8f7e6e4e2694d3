#include "cuda/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <vector>

#include "sys/library.hpp"

namespace gpufile::cuda {
namespace {

// The few NVML declarations used, with the library's own values (nvml.h, NVML API reference).
using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
struct nvmlBAR1Memory_t {
  unsigned long long bar1Total;  // bytes
  unsigned long long bar1Free;
  unsigned long long bar1Used;
};
// nvmlProcessInfo_v2_t, which the _v2 and _v3 process lists fill.
struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;

struct Nvml {
  nvmlReturn_t (*DeviceGetHandleByPciBusId)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*DeviceGetBAR1MemoryInfo)(nvmlDevice_t, nvmlBAR1Memory_t*) = nullptr;
  nvmlReturn_t (*DeviceGetCount)(unsigned*) = nullptr;
  nvmlReturn_t (*DeviceGetHandleByIndex)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*DeviceGetComputeRunningProcesses)(nvmlDevice_t, unsigned*,
                                                   nvmlProcessInfo_t*) = nullptr;
  bool usable = false;
  bool lists_processes = false;
};

template <typename F>
void find(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
}

// Loaded and initialised once, on first use; never shut down or unloaded (like the CUDA driver:
// nothing at exit may find it gone).
Nvml load() {
  Nvml n;
  void* lib = sys::load_library("GPUFILE_NVML_LIBRARY", "libnvidia-ml.so.1").handle;
  if (lib == nullptr) return n;
  nvmlReturn_t (*init)() = nullptr;
  find(lib, "nvmlInit_v2", &init);
  find(lib, "nvmlDeviceGetHandleByPciBusId_v2", &n.DeviceGetHandleByPciBusId);
  find(lib, "nvmlDeviceGetBAR1MemoryInfo", &n.DeviceGetBAR1MemoryInfo);
  find(lib, "nvmlDeviceGetCount_v2", &n.DeviceGetCount);
  find(lib, "nvmlDeviceGetHandleByIndex_v2", &n.DeviceGetHandleByIndex);
  find(lib, "nvmlDeviceGetComputeRunningProcesses_v3", &n.DeviceGetComputeRunningProcesses);
  if (n.DeviceGetComputeRunningProcesses == nullptr)  // drivers before 510: the same v2 list
    find(lib, "nvmlDeviceGetComputeRunningProcesses_v2", &n.DeviceGetComputeRunningProcesses);
  if (init == nullptr || init() != NVML_SUCCESS) return n;
  n.usable = n.DeviceGetHandleByPciBusId != nullptr && n.DeviceGetBAR1MemoryInfo != nullptr;
  n.lists_processes = n.DeviceGetCount != nullptr && n.DeviceGetHandleByIndex != nullptr &&
                      n.DeviceGetComputeRunningProcesses != nullptr;
  return n;
}

const Nvml& nvml() {
  static const Nvml loaded = load();
  return loaded;
}

// The PIDs with a compute context on `dev` appended to `pids`; false when NVML fails.
bool add_processes(const Nvml& n, nvmlDevice_t dev, std::vector<unsigned>* pids) {
  std::vector<nvmlProcessInfo_t> infos;
  for (int attempt = 0; attempt < 3; ++attempt) {  // the list may grow between two calls
    unsigned count = static_cast<unsigned>(infos.size());
    const nvmlReturn_t r = n.DeviceGetComputeRunningProcesses(dev, &count, infos.data());
    if (r == NVML_SUCCESS) {
      for (unsigned i = 0; i < count && i < infos.size(); ++i) pids->push_back(infos[i].pid);
      return true;
    }
    if (r != NVML_ERROR_INSUFFICIENT_SIZE) return false;
    infos.resize(count + 4);
  }
  return false;
}

}  // namespace

std::optional<unsigned> nvml_other_compute_processes(unsigned self) {
  const Nvml& n = nvml();
  unsigned devices = 0;
  if (!n.lists_processes || n.DeviceGetCount(&devices) != NVML_SUCCESS) return std::nullopt;
  std::vector<unsigned> pids;
  for (unsigned i = 0; i < devices; ++i) {
    nvmlDevice_t dev = nullptr;
    if (n.DeviceGetHandleByIndex(i, &dev) != NVML_SUCCESS || !add_processes(n, dev, &pids))
      return std::nullopt;
  }
  std::sort(pids.begin(), pids.end());
  pids.erase(std::unique(pids.begin(), pids.end()), pids.end());
  if (!std::binary_search(pids.begin(), pids.end(), self)) return std::nullopt;
  return static_cast<unsigned>(pids.size() - 1);
}

uint64_t nvml_bar1_bytes(const char* bus_id) {
  const Nvml& nvml = cuda::nvml();
  if (!nvml.usable) return 0;
  nvmlDevice_t dev = nullptr;
  nvmlBAR1Memory_t bar{};
  if (nvml.DeviceGetHandleByPciBusId(bus_id, &dev) != NVML_SUCCESS ||
      nvml.DeviceGetBAR1MemoryInfo(dev, &bar) != NVML_SUCCESS)
    return 0;
  return bar.bar1Total;
}

}  // namespace gpufile::cuda
