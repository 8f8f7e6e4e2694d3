#include "core/error.hpp"

#include <cstring>

namespace gpufile {

namespace {

const char* name(Errc c) {
  switch (c) {
    case Errc::ok: return "success";
    case Errc::invalid_argument: return "invalid argument";
    case Errc::system: return "system error";
    case Errc::cuda: return "CUDA driver error";
    case Errc::driver_not_open: return "driver not open";
    case Errc::driver_closing: return "driver closing";
    case Errc::handle_not_registered: return "file handle not registered";
    case Errc::handle_already_registered: return "file descriptor already registered";
    case Errc::invalid_file_type: return "unsupported file type";
    case Errc::invalid_open_flag: return "unsupported open flags for this operation";
    case Errc::io_not_supported: return "IO not supported on this file";
    case Errc::buffer_already_registered: return "buffer already registered";
    case Errc::buffer_not_registered: return "buffer not registered";
    case Errc::pointer_range: return "range exceeds the CUDA allocation";
    case Errc::mapping_range: return "range exceeds the registered buffer";
    case Errc::pointer_invalid: return "invalid pointer";
    case Errc::memory_type_invalid: return "unsupported memory type";
    case Errc::no_memory: return "out of memory";
    case Errc::canceled: return "canceled";
    case Errc::batch_full: return "batch full";
    case Errc::batch_refused: return "batch submission refused";
    case Errc::internal: return "internal error";
  }
  return "unknown error";
}

}  // namespace

std::string describe(const Error& e) {
  std::string out = name(e.code);
  if (e.code == Errc::system) out += std::string(": ") + std::strerror(e.sys_errno);
  if (e.code == Errc::cuda) out += ": CUresult " + std::to_string(e.cu_result);
  return out;
}

}  // namespace gpufile
