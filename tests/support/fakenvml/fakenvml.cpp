// libnvidia-ml.so.1 test double: the NVML calls gpufile makes (src/cuda/nvml.cpp).
//
// Read at every call, so a test can change them as it goes:
//   FAKENVML_BAR1       the GPUs it knows, "PCI address=MiB[,...]" (default "0000:10:00.0=131072":
//                       the CUDA test double's device 0, with the H100 machine's BAR1 of 128 GiB)
//   FAKENVML_PROCESSES  the host's GPUs and the PIDs with a compute context on each: GPUs
//                       separated by ';', PIDs by ','; "self" is the calling process's PID
//                       ("self;4242": this process on GPU 0, another on GPU 1; "" or unset: one
//                       GPU with none)
//   FAKENVML_FAIL       init, handle, bar1 or processes: that call fails (NVML_ERROR_UNKNOWN)
// fakenvml_last_bus_id() is the PCI address the last handle lookup asked for.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

constexpr int kSuccess = 0, kUninitialized = 1, kInvalidArgument = 2, kNotFound = 6,
              kInsufficientSize = 7, kUnknown = 999;

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

// FAKENVML_PROCESSES as a list of GPUs, each its PIDs.
std::vector<std::vector<unsigned>> gpus_processes() {
  const char* env = std::getenv("FAKENVML_PROCESSES");
  std::string text = env ? env : "";
  std::vector<std::vector<unsigned>> gpus(1);
  std::string item;
  auto take = [&] {
    if (item == "self") gpus.back().push_back(static_cast<unsigned>(getpid()));
    else if (!item.empty()) gpus.back().push_back(static_cast<unsigned>(std::strtoul(item.c_str(), nullptr, 10)));
    item.clear();
  };
  for (char c : text) {
    if (c == ',' || c == ';') take();
    if (c == ';') gpus.emplace_back();
    if (c != ',' && c != ';') item += c;
  }
  take();
  return gpus;
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

int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialised) return kUninitialized;
  *count = static_cast<unsigned>(gpus_processes().size());
  return kSuccess;
}

// Handles of the process list: index + 1 (never null).
int nvmlDeviceGetHandleByIndex_v2(unsigned index, nvmlDevice_st** dev) {
  if (!initialised) return kUninitialized;
  if (index >= gpus_processes().size()) return kInvalidArgument;
  *dev = reinterpret_cast<nvmlDevice_st*>(static_cast<uintptr_t>(index + 1));
  return kSuccess;
}

struct nvmlProcessInfo_t {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// As NVML: *count 0 (or too small) asks for the number, answered with INSUFFICIENT_SIZE; SUCCESS
// with none running.
int nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_st* dev, unsigned* count, nvmlProcessInfo_t* infos) {
  if (!initialised) return kUninitialized;
  if (fails("processes")) return kUnknown;
  const auto gpus = gpus_processes();
  const uintptr_t index = reinterpret_cast<uintptr_t>(dev) - 1;
  if (index >= gpus.size()) return kInvalidArgument;
  const std::vector<unsigned>& pids = gpus[index];
  if (*count < pids.size()) {
    *count = static_cast<unsigned>(pids.size());
    return pids.empty() ? kSuccess : kInsufficientSize;
  }
  for (size_t i = 0; i < pids.size(); ++i) infos[i] = {pids[i], 64ull << 20, 0xFFFFFFFFu, 0xFFFFFFFFu};
  *count = static_cast<unsigned>(pids.size());
  return kSuccess;
}

const char* fakenvml_last_bus_id(void) { return last_bus_id; }

}  // extern "C"
