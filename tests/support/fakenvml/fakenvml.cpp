// libnvidia-ml.so.1 test double: the three NVML calls gpufile makes (src/cuda/nvml.cpp).
//
// Read at every call, so a test can change them as it goes:
//   FAKENVML_BAR1  the GPUs it knows, "PCI address=MiB[,...]" (default "0000:10:00.0=131072":
//                  the CUDA test double's device 0, with the H100 machine's BAR1 of 128 GiB)
//   FAKENVML_FAIL  init, handle or bar1: that call fails (NVML_ERROR_UNKNOWN)
// fakenvml_last_bus_id() is the PCI address the last handle lookup asked for.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kSuccess = 0, kNotFound = 6, kUnknown = 999, kUninitialized = 1;

bool initialised = false;
char last_bus_id[64] = "";

bool fails(const char* call) {
  const char* f = std::getenv("FAKENVML_FAIL");
  return f != nullptr && std::strcmp(f, call) == 0;
}

// "dddd:bb:dd.f" in any hex width, as NVML accepts it.
bool parse(const char* s, unsigned v[4]) {
  return std::sscanf(s, "%x:%x:%x.%x", &v[0], &v[1], &v[2], &v[3]) == 4;
}

// MiB of BAR1 of the GPU at `bus_id`, or 0 when it is not listed.
unsigned long long listed_mib(const char* bus_id) {
  const char* env = std::getenv("FAKENVML_BAR1");
  std::string list = env ? env : "0000:10:00.0=131072";
  unsigned want[4];
  if (!parse(bus_id, want)) return 0;
  for (size_t at = 0; at < list.size();) {
    size_t end = list.find(',', at);
    std::string item = list.substr(at, end == std::string::npos ? std::string::npos : end - at);
    at = end == std::string::npos ? list.size() : end + 1;
    size_t eq = item.find('=');
    unsigned got[4];
    if (eq == std::string::npos || !parse(item.substr(0, eq).c_str(), got)) continue;
    if (std::memcmp(got, want, sizeof got) == 0) return std::strtoull(item.c_str() + eq + 1, nullptr, 10);
  }
  return 0;
}

}  // namespace

extern "C" {

struct nvmlDevice_st;
struct nvmlBAR1Memory_t {
  unsigned long long bar1Total, bar1Free, bar1Used;
};

int nvmlInit_v2(void) {
  if (fails("init")) return kUnknown;
  initialised = true;
  return kSuccess;
}

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, nvmlDevice_st** dev) {
  if (!initialised) return kUninitialized;
  std::snprintf(last_bus_id, sizeof last_bus_id, "%s", bus_id ? bus_id : "");
  if (fails("handle")) return kUnknown;
  unsigned long long mib = bus_id ? listed_mib(bus_id) : 0;
  if (mib == 0) return kNotFound;
  *dev = reinterpret_cast<nvmlDevice_st*>(static_cast<uintptr_t>(mib));  // the handle carries it
  return kSuccess;
}

int nvmlDeviceGetBAR1MemoryInfo(nvmlDevice_st* dev, nvmlBAR1Memory_t* bar) {
  if (!initialised) return kUninitialized;
  if (fails("bar1")) return kUnknown;
  const unsigned long long bytes = static_cast<unsigned long long>(reinterpret_cast<uintptr_t>(dev)) << 20;
  *bar = {bytes, bytes - (16ull << 20), 16ull << 20};
  return kSuccess;
}

const char* fakenvml_last_bus_id(void) { return last_bus_id; }

}  // extern "C"
