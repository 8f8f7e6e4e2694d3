#include "cuda/driver.hpp"

#include <dlfcn.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "sys/library.hpp"

namespace gpufile::cuda {
namespace {

// CUDA keeps none of its state across fork(): in a child of a process that had initialised it,
// any CUDA call is undefined behaviour (NVIDIA's CUDA guidelines: fork must be followed by
// exec); a copy engine thread or a lock held at the fork can hang it for good. Such a child
// runs without a driver: host memory works, GPU memory is refused.
std::atomic<bool> g_initialised{false};
std::atomic<bool> g_forked_after_init{false};

struct Loaded {
  Driver driver;
  bool usable = false;
  std::string why;
};

// Resolves every entry point of the table; on the first missing one, says which.
bool bind_symbols(void* lib, Driver& d, std::string& why) {
#define GPUFILE_CUDA_BIND(name, sym, ret, params)                                      \
  d.name = reinterpret_cast<ret(*) params>(dlsym(lib, sym));                           \
  if (d.name == nullptr) {                                                             \
    why = std::string("the CUDA driver lacks ") + sym + " (driver too old?)";          \
    return false;                                                                      \
  }
  GPUFILE_CUDA_DRIVER_FUNCTIONS(GPUFILE_CUDA_BIND)
#undef GPUFILE_CUDA_BIND
#define GPUFILE_CUDA_BIND_OPTIONAL(name, sym, ret, params) \
  d.name = reinterpret_cast<ret(*) params>(dlsym(lib, sym));
  GPUFILE_CUDA_OPTIONAL_FUNCTIONS(GPUFILE_CUDA_BIND_OPTIONAL)
#undef GPUFILE_CUDA_BIND_OPTIONAL
  return true;
}

Loaded load() {
  Loaded out;
  // Never dlclose'd (load_library): the driver must outlive every static destructor that might
  // still call it (the exit-time crashes of other cuFile users come from exactly that).
  const sys::Library lib = sys::load_library("GPUFILE_CUDA_LIBRARY", "libcuda.so.1");
  if (lib.handle == nullptr) {
    out.why = "no CUDA driver: cannot load " + lib.path + " (" + lib.error + ")";
    return out;
  }
  if (!bind_symbols(lib.handle, out.driver, out.why)) return out;
  Driver& d = out.driver;
  g_initialised.store(true);
  if (CUresult r = d.Init(0); r != CUDA_SUCCESS) {
    out.why = "cuInit failed: " + describe_with(d, r);
    return out;
  }
  d.DriverGetVersion(&d.driver_version);
  if (CUresult r = d.DeviceGetCount(&d.device_count); r != CUDA_SUCCESS || d.device_count == 0) {
    out.why = "the CUDA driver reports no device";
    return out;
  }
  out.usable = true;
  return out;
}

const Loaded& loaded() {
  // Leaked on purpose: see the dlclose note above.
  static const Loaded* instance = new Loaded(load());
  return *instance;
}

}  // namespace

std::string describe_with(const Driver& d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d.GetErrorName != nullptr) d.GetErrorName(r, &name);
  if (d.GetErrorString != nullptr) d.GetErrorString(r, &text);
  std::string out = name ? name : ("CUresult " + std::to_string(r));
  if (text) out += std::string(": ") + text;
  return out;
}

const Driver* driver() {
  if (g_forked_after_init.load(std::memory_order_relaxed)) return nullptr;
  const Loaded& l = loaded();
  return l.usable ? &l.driver : nullptr;
}

const std::string& why_no_driver() {
  static const std::string forked =
      "CUDA was initialised before this process was forked: not usable in the child";
  return g_forked_after_init.load(std::memory_order_relaxed) ? forked : loaded().why;
}

void forget_driver_after_fork() {
  if (g_initialised.load()) g_forked_after_init.store(true);
}

std::string describe(CUresult r) { return describe_with(loaded().driver, r); }

std::string pci_bus_id(const Driver& d, int ordinal) {
  CUdevice dev = 0;
  int domain = 0, bus = 0, slot = 0;
  d.DeviceGet(&dev, ordinal);
  d.DeviceGetAttribute(&domain, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, dev);
  d.DeviceGetAttribute(&bus, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, dev);
  d.DeviceGetAttribute(&slot, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, dev);
  char id[32];
  std::snprintf(id, sizeof id, "%04x:%02x:%02x.0", domain, bus, slot);
  return id;
}

}  // namespace gpufile::cuda
