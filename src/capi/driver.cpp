// cuFile driver lifetime and properties.
#include <cstdio>
#include <functional>
#include <string>

#include "capi/capi.hpp"
#include "cuda/driver.hpp"
#include "cuda/nvml.hpp"
#include "exec/driver_state.hpp"
#include "exec/runtime.hpp"

#undef cuFileDriverClose  // the header maps it to _v2; both symbols are exported

using gpufile::Errc;
using gpufile::Error;
using gpufile::Runtime;
using gpufile::Settings;
using gpufile::capi::guarded;

namespace {

constexpr int kCuFileVersion = 1150;  // GDS 1.15, as 1000 * major + 10 * minor

unsigned clamp_u32(size_t v) { return v > 0xffffffffu ? 0xffffffffu : static_cast<unsigned>(v); }

void fill_properties(const Settings& s, CUfileDrvProps_t* p) {
  *p = CUfileDrvProps_t{};
  // No nvidia-fs: its version stays 0.0, as NVIDIA's library reports without the module.
  p->nvfs.poll_thresh_size = s.poll_mode_max_size_kb;
  p->nvfs.max_direct_io_size = s.max_direct_io_size_kb;
  p->nvfs.dcontrolflags = (s.use_poll_mode ? 1u << CU_FILE_USE_POLL_MODE : 0u) |
                          (s.allow_compat_mode ? 1u << CU_FILE_ALLOW_COMPAT_MODE : 0u);
  p->fflags = 1u << CU_FILE_DYN_ROUTING_SUPPORTED | 1u << CU_FILE_BATCH_IO_SUPPORTED |
              1u << CU_FILE_STREAMS_SUPPORTED | 1u << CU_FILE_PARALLEL_IO_SUPPORTED;
  p->max_device_cache_size = clamp_u32(s.max_device_cache_size_kb);
  // No GPU bounce buffers exist in gpufile (staging is pinned host memory), so, like NVIDIA's
  // library in compat mode, report none.
  p->per_buffer_cache_size = 0;
  p->max_device_pinned_mem_size = clamp_u32(s.max_device_pinned_mem_size_kb);
  p->max_batch_io_size = clamp_u32(s.io_batchsize);
  p->max_batch_io_timeout_msecs = clamp_u32(s.batch_io_timeout_ms);
}

// BAR1 of an NVIDIA GPU is PCI resource 1: its size in KiB, from NVML where it answers, else
// from sysfs; 0 where neither knows. The GPU's PCI address (from the CUDA driver) names it to
// both, so CUDA's device order and NVML's never get mixed up.
Error bar1_size_kb(int gpu, size_t* kb) {
  using namespace gpufile::cuda;
  const Driver* d = driver();
  if (d == nullptr) return Error::of(Errc::driver_not_open);
  if (gpu < 0 || gpu >= d->device_count) return Error::of(Errc::invalid_argument);
  const std::string pci = pci_bus_id(*d, gpu);
  const char* bus_id = pci.c_str();
  if (uint64_t bytes = nvml_bar1_bytes(bus_id)) {
    *kb = static_cast<size_t>(bytes / 1024);
    return Error::none();
  }
  char path[96];
  snprintf(path, sizeof path, "/sys/bus/pci/devices/%s/resource", bus_id);
  *kb = 0;
  FILE* f = fopen(path, "re");
  if (f == nullptr) return Error::none();  // not visible here (VMs, containers): report 0
  unsigned long long start = 0, end = 0, flags = 0;
  for (int line = 0; line < 2; ++line)
    if (fscanf(f, "%llx %llx %llx", &start, &end, &flags) != 3) start = end = 0;
  fclose(f);
  if (end > start) *kb = static_cast<size_t>((end - start + 1) / 1024);
  return Error::none();
}

// Runs fn on the open session's settings: the property calls need an open driver.
Error on_open_settings(const std::function<void(Settings&)>& fn) {
  return gpufile::with_open_settings(fn) ? Error::none() : Error::of(Errc::driver_not_open);
}

}  // namespace

extern "C" {

CUfileError_t cuFileDriverOpen(void) {
  return guarded(__func__, [] { return Runtime::instance().open(); });
}

CUfileError_t cuFileDriverClose_v2(void) {
  return guarded(__func__, [] {
    Error e = Runtime::instance().close();
    if (e.ok() && !Runtime::instance().is_open()) gpufile::capi::on_driver_closed();
    return e;
  });
}

CUfileError_t cuFileDriverClose(void) { return cuFileDriverClose_v2(); }

long cuFileUseCount(void) { return Runtime::instance().use_count(); }

CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t* props) {
  return guarded(__func__, [&] {
    if (props == nullptr) return Error::of(Errc::invalid_argument);
    *props = CUfileDrvProps_t{};
    return on_open_settings([&](Settings& s) { fill_properties(s, props); });
  });
}

CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size) {
  return guarded(__func__, [&] {
    return on_open_settings([&](Settings& s) {
      s.use_poll_mode = poll;
      s.poll_mode_max_size_kb = poll_threshold_size;
    });
  });
}

CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size) {
  return guarded(__func__, [&] {
    if (max_direct_io_size == 0) return Error::of(Errc::invalid_argument);
    return on_open_settings([&](Settings& s) { s.max_direct_io_size_kb = max_direct_io_size; });
  });
}

CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size) {
  return guarded(__func__, [&] {
    return on_open_settings([&](Settings& s) { s.max_device_cache_size_kb = max_cache_size; });
  });
}

CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size) {
  return guarded(__func__, [&] {
    return on_open_settings(
        [&](Settings& s) { s.max_device_pinned_mem_size_kb = max_pinned_size; });
  });
}

CUfileError_t cuFileGetVersion(int* version) {
  return guarded(__func__, [&] {
    if (version == nullptr) return Error::of(Errc::invalid_argument);
    *version = kCuFileVersion;
    return Error::none();
  });
}

CUfileError_t cuFileGetBARSizeInKB(int gpuIndex, size_t* barSize) {
  return guarded(__func__, [&] {
    if (barSize == nullptr) return Error::of(Errc::invalid_argument);
    if (!Runtime::instance().is_open()) return Error::of(Errc::driver_not_open);
    return bar1_size_kb(gpuIndex, barSize);
  });
}

}  // extern "C"
