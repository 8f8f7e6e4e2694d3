#include "cuda/nvml.hpp"

#include <dlfcn.h>

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
constexpr nvmlReturn_t NVML_SUCCESS = 0;

struct Nvml {
  nvmlReturn_t (*DeviceGetHandleByPciBusId)(const char*, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*DeviceGetBAR1MemoryInfo)(nvmlDevice_t, nvmlBAR1Memory_t*) = nullptr;
  bool usable = false;
};

// Loaded and initialised once, on first use; never shut down or unloaded (like the CUDA driver:
// nothing at exit may find it gone).
Nvml load() {
  Nvml n;
  void* lib = sys::load_library("GPUFILE_NVML_LIBRARY", "libnvidia-ml.so.1").handle;
  if (lib == nullptr) return n;
  auto init = reinterpret_cast<nvmlReturn_t (*)()>(dlsym(lib, "nvmlInit_v2"));
  n.DeviceGetHandleByPciBusId = reinterpret_cast<decltype(n.DeviceGetHandleByPciBusId)>(
      dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2"));
  n.DeviceGetBAR1MemoryInfo = reinterpret_cast<decltype(n.DeviceGetBAR1MemoryInfo)>(
      dlsym(lib, "nvmlDeviceGetBAR1MemoryInfo"));
  n.usable = init != nullptr && n.DeviceGetHandleByPciBusId != nullptr &&
             n.DeviceGetBAR1MemoryInfo != nullptr && init() == NVML_SUCCESS;
  return n;
}

}  // namespace

uint64_t nvml_bar1_bytes(const char* bus_id) {
  static const Nvml nvml = load();
  if (!nvml.usable) return 0;
  nvmlDevice_t dev = nullptr;
  nvmlBAR1Memory_t bar{};
  if (nvml.DeviceGetHandleByPciBusId(bus_id, &dev) != NVML_SUCCESS ||
      nvml.DeviceGetBAR1MemoryInfo(dev, &bar) != NVML_SUCCESS)
    return 0;
  return bar.bar1Total;
}

}  // namespace gpufile::cuda
