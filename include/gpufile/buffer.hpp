// Buffer registration (cuFileBufRegister): tells gpufile up front about memory that IO will use
// again and again, so that each IO skips asking the CUDA driver what the memory is. Optional:
// unregistered memory works the same.
#pragma once

#include <cstddef>

#include "gpufile/export.hpp"

namespace gpufile {

// Registered for its lifetime: the destructor deregisters, after IO using it finished.
class GPUFILE_API RegisteredBuffer {
 public:
  RegisteredBuffer() noexcept;  // registers nothing
  // Registers [base, base + size). Throws errc::buffer_already_registered for a base that is
  // registered already, errc::pointer_range when the range runs past its CUDA allocation.
  RegisteredBuffer(const void* base, std::size_t size);
  ~RegisteredBuffer();
  RegisteredBuffer(RegisteredBuffer&& other) noexcept;
  RegisteredBuffer& operator=(RegisteredBuffer&& other) noexcept;
  RegisteredBuffer(const RegisteredBuffer&) = delete;
  RegisteredBuffer& operator=(const RegisteredBuffer&) = delete;

  const void* base() const noexcept { return base_; }
  std::size_t size() const noexcept { return size_; }
  bool registered() const noexcept { return base_ != nullptr; }
  // Deregisters now (waits for IO using the buffer). A registration the driver already dropped
  // (driver_close) is not an error.
  void deregister();

 private:
  const void* base_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace gpufile
