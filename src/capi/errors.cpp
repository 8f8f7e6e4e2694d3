#include <cerrno>

#include "capi/capi.hpp"

namespace gpufile::capi {

CUfileOpError op_error(const Error& e) {
  switch (e.code) {
    case Errc::ok: return CU_FILE_SUCCESS;
    case Errc::invalid_argument: return CU_FILE_INVALID_VALUE;
    case Errc::system: return CU_FILE_IO_ERROR;
    case Errc::cuda: return CU_FILE_CUDA_DRIVER_ERROR;
    case Errc::driver_not_open: return CU_FILE_DRIVER_NOT_INITIALIZED;
    case Errc::driver_closing: return CU_FILE_DRIVER_CLOSING;
    case Errc::handle_not_registered: return CU_FILE_HANDLE_NOT_REGISTERED;
    case Errc::handle_already_registered: return CU_FILE_HANDLE_ALREADY_REGISTERED;
    case Errc::invalid_file_type: return CU_FILE_INVALID_FILE_TYPE;
    case Errc::invalid_open_flag: return CU_FILE_INVALID_FILE_OPEN_FLAG;
    case Errc::io_not_supported: return CU_FILE_IO_NOT_SUPPORTED;
    case Errc::buffer_already_registered: return CU_FILE_MEMORY_ALREADY_REGISTERED;
    case Errc::buffer_not_registered: return CU_FILE_MEMORY_NOT_REGISTERED;
    case Errc::pointer_range: return CU_FILE_CUDA_POINTER_RANGE_ERROR;
    case Errc::mapping_range: return CU_FILE_INVALID_MAPPING_RANGE;
    case Errc::pointer_invalid: return CU_FILE_CUDA_POINTER_INVALID;
    case Errc::memory_type_invalid: return CU_FILE_CUDA_MEMORY_TYPE_INVALID;
    case Errc::no_memory: return CU_FILE_NOMEM_ERROR;
    case Errc::canceled: return CU_FILE_IO_ERROR;
    case Errc::batch_full: return CU_FILE_BATCH_FULL;
    case Errc::batch_refused: return CU_FILE_INTERNAL_BATCH_SUBMIT_ERROR;
    case Errc::internal: return CU_FILE_INTERNAL_ERROR;
  }
  return CU_FILE_INTERNAL_ERROR;
}

ssize_t io_return(const IoResult& r) {
  if (r.ok()) return static_cast<ssize_t>(r.bytes);
  errno = r.error.code == Errc::system ? r.error.sys_errno : static_cast<int>(op_error(r.error));
  return -1;
}

ssize_t negative_code(const Error& e) {
  if (e.code == Errc::system) return -static_cast<ssize_t>(e.sys_errno);
  return -static_cast<ssize_t>(op_error(e));
}

}  // namespace gpufile::capi
