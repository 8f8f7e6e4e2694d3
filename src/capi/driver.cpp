// cuFile driver lifetime and properties.
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "capi/capi.hpp"
#include "core/config.hpp"
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
using gpufile::config::SizeParam;

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

// The properties an open driver would report now: the open session's settings, or, while
// closed, what the next open will use (cufile.json, environment, staged values). NVIDIA's
// library answers before open too (it opens itself to do so; gpufile need not).
Settings current_settings() {
  Settings settings;
  if (!gpufile::with_open_settings([&](Settings& s) { settings = s; }))
    settings = gpufile::config::resolve().settings;
  return settings;
}

// The cuFileDriverSet* calls. NVIDIA's header: "This takes place before the driver is opened.
// No-op if driver is already open." Before open gpufile stages the value for the next open, as
// cuFileSetParameter* does; once open it changes nothing and reports success, as NVIDIA's
// library does. A value outside the setting's range is refused in either state with
// CU_FILE_DRIVER_UNSUPPORTED_LIMIT, NVIDIA's answer (tests/conformance).
template <typename Stage>
CUfileError_t set_before_open(const char* where, CUfileError_t check, Stage stage) noexcept {
  return gpufile::capi::catch_all(where, [&] {
    if (check.err != CU_FILE_SUCCESS) return check;
    if (!gpufile::driver_is_open()) stage();
    return check;
  });
}

CUfileError_t limit_unless(bool in_range) {
  return gpufile::capi::result_of(in_range ? CU_FILE_SUCCESS : CU_FILE_DRIVER_UNSUPPORTED_LIMIT);
}

// The setters' ranges, as NVIDIA's library answers them (tests/conformance, setter ranges):
// the poll threshold in whole pages; the direct IO size in whole pages within the parameter's
// range (64-16384 KiB); the cache and pinned sizes 0 or at least 64 KiB.
bool whole_pages_kb(size_t kb) { return kb != 0 && kb % 4 == 0; }

bool direct_io_size_in_range(size_t kb) {
  const auto range = gpufile::config::size_range(SizeParam::max_direct_io_size_kb);
  return whole_pages_kb(kb) && range && kb >= range->min && kb <= range->max;
}

// A size in KiB too large to count in bytes is an invalid value, not a limit.
CUfileError_t memory_size_error(size_t kb) {
  if (kb > SIZE_MAX / 1024) return gpufile::capi::result_of(CU_FILE_INVALID_VALUE);
  return limit_unless(kb == 0 || kb >= 64);
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
    fill_properties(current_settings(), props);
    return Error::none();
  });
}

CUfileError_t cuFileDriverSetPollMode(bool poll, size_t poll_threshold_size) {
  return set_before_open(__func__, limit_unless(whole_pages_kb(poll_threshold_size)), [&] {
    gpufile::config::stage_bool(gpufile::config::BoolParam::use_poll_mode, poll);
    gpufile::config::stage_size(SizeParam::poll_threshold_size_kb, poll_threshold_size);
  });
}

CUfileError_t cuFileDriverSetMaxDirectIOSize(size_t max_direct_io_size) {
  return set_before_open(__func__, limit_unless(direct_io_size_in_range(max_direct_io_size)), [&] {
    gpufile::config::stage_size(SizeParam::max_direct_io_size_kb, max_direct_io_size);
  });
}

CUfileError_t cuFileDriverSetMaxCacheSize(size_t max_cache_size) {
  return set_before_open(__func__, memory_size_error(max_cache_size), [&] {
    gpufile::config::stage_size(SizeParam::max_device_cache_size_kb, max_cache_size);
  });
}

CUfileError_t cuFileDriverSetMaxPinnedMemSize(size_t max_pinned_size) {
  return set_before_open(__func__, memory_size_error(max_pinned_size), [&] {
    gpufile::config::stage_size(SizeParam::max_device_pinned_mem_size_kb, max_pinned_size);
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
    // Answered before open too, as NVIDIA's library does: only the CUDA driver is needed.
    if (barSize == nullptr) return Error::of(Errc::invalid_argument);
    return bar1_size_kb(gpuIndex, barSize);
  });
}

}  // extern "C"
