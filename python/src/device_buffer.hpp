// gpufile.DeviceBuffer: GPU memory allocated by gpufile itself (cuMemAlloc in the device's
// primary context, the one PyTorch, CuPy and JAX use), for callers that want GPU memory without a
// framework. It exports DLPack and the CUDA array interface; DLPack views with any dtype and shape
// keep the buffer alive for as long as a consumer holds them.
#pragma once

#include <nanobind/nanobind.h>

namespace gpufile::py {

void register_device_buffer(nanobind::module_ m);

}  // namespace gpufile::py
