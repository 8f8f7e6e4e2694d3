// gpufile::RegisteredBuffer over the runtime's buffer registry.
#include "gpufile/buffer.hpp"

#include <utility>

#include "core/stats.hpp"
#include "cppapi/raise.hpp"
#include "exec/runtime.hpp"

namespace gpufile {

RegisteredBuffer::RegisteredBuffer() noexcept = default;

RegisteredBuffer::RegisteredBuffer(const void* base, std::size_t size) {
  Error e = Runtime::instance().register_buffer(base, size);
  stats::record_buffer_register(e.ok(), size);
  if (e) cppapi::raise(e, "register buffer");
  base_ = base;
  size_ = size;
}

RegisteredBuffer::~RegisteredBuffer() { deregister(); }

RegisteredBuffer::RegisteredBuffer(RegisteredBuffer&& other) noexcept
    : base_(std::exchange(other.base_, nullptr)), size_(std::exchange(other.size_, 0)) {}

RegisteredBuffer& RegisteredBuffer::operator=(RegisteredBuffer&& other) noexcept {
  if (this != &other) {
    deregister();
    base_ = std::exchange(other.base_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

void RegisteredBuffer::deregister() {
  if (base_ == nullptr) return;
  Error e = Runtime::instance().deregister_buffer(base_);
  // A driver closed since forgot every registration: nothing is left to undo.
  if (e.code == Errc::driver_not_open || e.code == Errc::buffer_not_registered) e = Error::none();
  stats::record_buffer_deregister(e.ok());
  base_ = nullptr;
  size_ = 0;
}

}  // namespace gpufile
