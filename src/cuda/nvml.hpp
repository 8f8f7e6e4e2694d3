// NVML, loaded at run time as the CUDA driver is (libnvidia-ml.so.1, or $GPUFILE_NVML_LIBRARY),
// for the one fact gpufile needs that the CUDA driver does not give: the size of a GPU's BAR1.
// sysfs tells it too, but not in VMs that hide the PCI resource files (the lent GPU machines).
#pragma once

#include <cstdint>

namespace gpufile::cuda {

// BAR1 size in bytes of the GPU at PCI address `bus_id` ("dddd:bb:dd.f"), or 0 when NVML is not
// there, fails, or does not know that GPU.
uint64_t nvml_bar1_bytes(const char* bus_id);

}  // namespace gpufile::cuda
