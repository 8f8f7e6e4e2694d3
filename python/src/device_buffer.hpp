// gpufile.DeviceBuffer: GPU memory allocated by gpufile itself (cuMemAlloc in the device's
// primary context, the one PyTorch, CuPy and JAX use), for callers that want GPU memory without a
// framework. It exports DLPack and the CUDA array interface; DLPack views with any dtype and shape
// keep the buffer alive for as long as a consumer holds them.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>

namespace gpufile::py {

void register_device_buffer(nanobind::module_ m);

// If `obj` is a gpufile.DeviceBuffer itself (not a subclass, which may export other memory),
// its address and size, which is all its __cuda_array_interface__ says (writable, no stream),
// without building that dict; false for any other object.
bool device_buffer_memory(nanobind::handle obj, uint64_t* addr, uint64_t* nbytes);

}  // namespace gpufile::py
