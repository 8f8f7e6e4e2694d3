// NVML, loaded at run time as the CUDA driver is (libnvidia-ml.so.1, or $GPUFILE_NVML_LIBRARY),
// for two facts the CUDA driver does not give: the size of a GPU's BAR1 (sysfs tells it too, but
// not in VMs that hide the PCI resource files, as on the lent GPU machines), and which processes
// use the host's GPUs, whatever CUDA_VISIBLE_DEVICES hides from this one.
#pragma once

#include <cstdint>
#include <optional>

namespace gpufile::cuda {

// BAR1 size in bytes of the GPU at PCI address `bus_id` ("dddd:bb:dd.f"), or 0 when NVML is not
// there, fails, or does not know that GPU.
uint64_t nvml_bar1_bytes(const char* bus_id);

// The number of processes other than `self` (a PID) with a compute context on any GPU of the
// host; nullopt when NVML is not there or fails, or lists `self` on no GPU: a process in a PID
// namespace of its own (a container) has another PID there, and nothing can be told of others.
std::optional<unsigned> nvml_other_compute_processes(unsigned self);

}  // namespace gpufile::cuda
