// cuFileRead / cuFileWrite.
#include <cerrno>
#include <chrono>

#include "capi/capi.hpp"
#include "core/stats.hpp"
#include "exec/runtime.hpp"

using gpufile::IoResult;
using gpufile::Runtime;

namespace {

ssize_t read_write(gpufile::sys::IoKind kind, CUfileHandle_t fh, const void* base, size_t size,
                   off_t file_offset, off_t buffer_offset) noexcept {
  const uint64_t t0 = gpufile::stats::call_started();
  IoResult r;
  try {
    r = Runtime::instance().read_write(kind, fh, base, size, file_offset, buffer_offset);
  } catch (const std::bad_alloc&) {
    r.error = gpufile::Error::of(gpufile::Errc::no_memory);
  } catch (...) {
    r.error = gpufile::Error::of(gpufile::Errc::internal);
  }
  Runtime::count_call(kind, r, t0);
  return gpufile::capi::io_return(r);
}

}  // namespace

extern "C" {

ssize_t cuFileRead(CUfileHandle_t fh, void* bufPtr_base, size_t size, off_t file_offset,
                   off_t bufPtr_offset) {
  return read_write(gpufile::sys::IoKind::read, fh, bufPtr_base, size, file_offset, bufPtr_offset);
}

ssize_t cuFileWrite(CUfileHandle_t fh, const void* bufPtr_base, size_t size, off_t file_offset,
                    off_t bufPtr_offset) {
  return read_write(gpufile::sys::IoKind::write, fh, bufPtr_base, size, file_offset, bufPtr_offset);
}

}  // extern "C"
