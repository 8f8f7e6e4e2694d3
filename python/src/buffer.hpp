// A caller's memory seen from C++: any object that offers the CUDA array interface, the buffer
// protocol or DLPack, resolved to one contiguous byte range and held (not copied) until the IO
// on it is over.
#pragma once

#include <nanobind/nanobind.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "dlpack.hpp"

namespace gpufile::py {

namespace nb = nanobind;

class Buffer {
 public:
  // Resolves `obj`, in this order: __cuda_array_interface__ (CuPy, PyTorch, Numba, JAX), the
  // buffer protocol (NumPy, bytes, bytearray, memoryview, mmap), __dlpack__ (PyTorch CPU
  // tensors, JAX, anything else). The memory must be contiguous; `writable` (the target of a
  // read) refuses read-only memory. Pending work of the producer's stream is waited for, since
  // gpufile's IO is not ordered on any stream of the caller. Raises TypeError/ValueError/
  // BufferError with the reason.
  static std::unique_ptr<Buffer> acquire(nb::handle obj, bool writable);
  // Releases the view or the DLPack tensor; needs the GIL (as every destruction of a Python
  // object does).
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  uint64_t addr() const { return addr_; }
  uint64_t nbytes() const { return nbytes_; }

 private:
  Buffer() = default;
  void from_cuda_array_interface(nb::handle cai, bool writable);
  bool from_cai_fast(PyObject* cai, bool writable);
  void from_buffer_protocol(nb::handle obj, bool writable);
  void from_dlpack(nb::handle obj, nb::handle dlpack_method);

  uint64_t addr_ = 0;
  uint64_t nbytes_ = 0;
  nb::object owner_;  // keeps the exporting object alive
  Py_buffer view_{};
  bool has_view_ = false;
  dlpack::ManagedTensor* dl_ = nullptr;
};

// The element count times item size of a C-contiguous array, or throws ValueError when
// `strides` (in bytes; empty for compact) describe anything else.
uint64_t contiguous_bytes(const int64_t* shape, const int64_t* strides_bytes, int ndim,
                          uint64_t itemsize);

// Waits for the work queued on a CUDA stream given as an integer handle (0 is the legacy
// default stream, 1 and 2 the legacy and per-thread default streams, as in the CUDA array
// interface) by the producer of the memory at `addr`. A default stream is waited for in the
// memory's context (cuda::MemoryContext), made current for the wait on threads that have none
// or another. Does nothing without a CUDA driver. A stream other than the legacy one that is
// already idle costs one cuStreamQuery, with the GIL kept.
void synchronize_stream(uintptr_t stream, uint64_t addr);

// Bytes an IO moves: `size`, or the rest of the buffer after `buf_offset`; a ValueError where
// they do not fit.
uint64_t span(const Buffer& b, std::optional<uint64_t> size, uint64_t buf_offset);

}  // namespace gpufile::py
