// Internal error model. Layers below src/capi/ report failures with these codes; only
// src/capi/ translates them into cuFile's CUfileOpError / -1+errno conventions.
#pragma once

#include <cerrno>
#include <cstdint>
#include <string>

namespace gpufile {

enum class Errc : int {
  ok = 0,
  invalid_argument,          // bad pointer, negative offset, overflow, bad flag
  system,                    // an OS call failed: see Error::sys_errno
  cuda,                      // a CUDA driver call failed: see Error::cu_result
  driver_not_open,           // library closed, or open failed
  driver_closing,            // close in progress with IO in flight
  handle_not_registered,     // unknown or deregistered file handle
  handle_already_registered, // the fd already has a handle
  invalid_file_type,         // not a regular file / block device
  invalid_open_flag,         // O_APPEND, O_NONBLOCK, ... or wrong access mode for the op
  io_not_supported,          // e.g. OPAQUE_WIN32 handles
  buffer_already_registered,
  buffer_not_registered,
  pointer_range,             // range past the end of the CUDA allocation
  mapping_range,             // range past the end of the registered buffer
  pointer_invalid,           // not a usable pointer
  memory_type_invalid,       // e.g. CUDA array memory
  no_memory,
  canceled,
  batch_full,
  batch_refused,             // a batch submission as a whole could not be accepted
  internal,
};

struct Error {
  Errc code = Errc::ok;
  int sys_errno = 0;  // valid when code == Errc::system
  int cu_result = 0;  // valid when code == Errc::cuda

  constexpr bool ok() const { return code == Errc::ok; }
  explicit constexpr operator bool() const { return code != Errc::ok; }

  static constexpr Error none() { return {}; }
  static constexpr Error of(Errc c) { return {c, 0, 0}; }
  static constexpr Error sys(int e) { return {Errc::system, e, 0}; }
  static constexpr Error cu(int r) { return {Errc::cuda, 0, r}; }
};

// Human-readable one-liner, for logs and exceptions.
std::string describe(const Error& e);

// A byte count or an error. Used for IO results: bytes are reported only when they moved.
struct IoResult {
  uint64_t bytes = 0;
  Error error;
  bool ok() const { return error.ok(); }
};

}  // namespace gpufile
