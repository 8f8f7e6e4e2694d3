// cuFile file handles and buffer registration.
#include <cstring>

#include "capi/capi.hpp"
#include "core/stats.hpp"
#include "exec/runtime.hpp"

using gpufile::Errc;
using gpufile::Error;
using gpufile::Runtime;
using gpufile::capi::guarded;
namespace stats = gpufile::stats;

namespace {

Error register_handle(CUfileHandle_t* fh, const CUfileDescr_t* descr) {
  if (fh == nullptr || descr == nullptr) return Error::of(Errc::invalid_argument);
  // A C caller may store any int in the type; loading it as the C++ enum is undefined outside
  // the enumerators' range, so its bytes are read as an int. Every type but a file descriptor
  // (WIN32, USERSPACE_FS, unknown) is refused as NVIDIA's library refuses it.
  int type;
  std::memcpy(&type, &descr->type, sizeof type);
  if (type != CU_FILE_HANDLE_TYPE_OPAQUE_FD) return Error::of(Errc::io_not_supported);
  return Runtime::instance().register_file(descr->handle.fd, fh);
}

}  // namespace

extern "C" {

CUfileError_t cuFileHandleRegister(CUfileHandle_t* fh, CUfileDescr_t* descr) {
  return guarded(__func__, [&] {
    Error e = register_handle(fh, descr);
    stats::record_handle_register(e.ok());
    return e;
  });
}

void cuFileHandleDeregister(CUfileHandle_t fh) {
  guarded(__func__, [&] {
    Error e = Runtime::instance().deregister_file(fh);
    stats::record_handle_deregister(e.ok());
    return e;
  });
}

CUfileError_t cuFileBufRegister(const void* bufPtr_base, size_t length, int /*flags*/) {
  // Flags are reserved; NVIDIA's library accepts any value, and so do we.
  return guarded(__func__, [&] {
    Error e = Runtime::instance().register_buffer(bufPtr_base, length);
    stats::record_buffer_register(e.ok(), length);
    return e;
  });
}

CUfileError_t cuFileBufDeregister(const void* bufPtr_base) {
  return guarded(__func__, [&] {
    if (bufPtr_base == nullptr) return Error::of(Errc::invalid_argument);
    Error e = Runtime::instance().deregister_buffer(bufPtr_base);
    stats::record_buffer_deregister(e.ok());
    return e;
  });
}

}  // extern "C"
