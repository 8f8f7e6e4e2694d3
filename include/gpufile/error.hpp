// gpufile's errors. Every failure of the C++ API throws gpufile::Exception, a std::system_error:
// failures of the operating system carry their errno in std::generic_category() (so
// `e.code() == std::errc::no_such_file_or_directory` works), gpufile's own reasons carry a
// gpufile::errc in gpufile::error_category(). docs/cpp.md says why exceptions.
#pragma once

#include <string>
#include <system_error>
#include <type_traits>

#include "gpufile/export.hpp"

namespace gpufile {

// gpufile's own reasons (an OS error is a std::errc instead).
enum class errc : int {
  invalid_argument = 1,       // negative offset, null pointer, size overflow, bad mode or key
  cuda,                       // a CUDA driver call failed: Exception::cuda_result() says which
  driver_not_open,            // the driver could not be opened, or was closed under the call
  driver_closing,             // the driver is closing with IO in flight
  driver_open,                // settings are fixed while the driver is open
  handle_not_registered,      // the file's registration is gone (the driver closed)
  handle_already_registered,  // the descriptor is registered already
  invalid_file_type,          // not a regular file or block device
  invalid_open_flag,          // O_APPEND, or an IO the open mode does not allow
  io_not_supported,           // the file cannot take this IO
  buffer_already_registered,  // a RegisteredBuffer with this base exists
  buffer_not_registered,      // deregistering memory that is not registered
  pointer_range,              // the range runs past the end of its CUDA allocation
  mapping_range,              // the range runs past the end of its registered buffer
  pointer_invalid,            // not a usable pointer
  memory_type_invalid,        // memory gpufile cannot move (e.g. host memory when not allowed)
  no_memory,                  // out of host, pinned or device memory
  canceled,                   // a batch IO was canceled
  batch_full,                 // more batch IO than the batch's capacity
  batch_refused,              // the batch could not take the submission
  internal,                   // a bug in gpufile: please report it
};

GPUFILE_API const std::error_category& error_category() noexcept;

inline std::error_code make_error_code(errc e) noexcept {
  return {static_cast<int>(e), error_category()};
}

class GPUFILE_API Exception : public std::system_error {
 public:
  Exception(std::error_code code, const std::string& what, int cuda_result = 0);
  ~Exception() override;
  // The CUresult of a failed CUDA driver call (code() == errc::cuda), else 0.
  int cuda_result() const noexcept { return cuda_result_; }

 private:
  int cuda_result_ = 0;
};

}  // namespace gpufile

template <>
struct std::is_error_code_enum<gpufile::errc> : std::true_type {};
