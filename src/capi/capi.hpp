// Shared by the cuFile entry points: the one place where gpufile's Error becomes cuFile's
// CUfileError_t, CUfileOpError, or the -1/errno convention of cuFileRead/cuFileWrite.
#pragma once

#include <cufile.h>
#include <sys/types.h>

#include <exception>

#include "core/error.hpp"
#include "core/log.hpp"

namespace gpufile::capi {

CUfileOpError op_error(const Error& e);

inline CUfileError_t status(const Error& e) {
  CUfileError_t s{};
  s.err = op_error(e);
  s.cu_err = static_cast<decltype(s.cu_err)>(e.code == Errc::cuda ? e.cu_result : 0);
  return s;
}

inline CUfileError_t success() { return status(Error::none()); }

// cuFileRead/cuFileWrite: bytes, or -1 with errno holding an OS errno or, for failures of
// cuFile's own, the positive CUfileOpError (what NVIDIA's library does, not what its header
// says; spec §2.3).
ssize_t io_return(const IoResult& r);

// What *bytes_p of a stream op receives for a failure: -errno for OS errors, -CUfileOpError
// otherwise (callers tell them apart with IS_CUFILE_ERR).
ssize_t negative_code(const Error& e);

// Frees the stream API's staging buffers (src/capi/stream.cpp); called when the driver closes.
void release_stream_staging();
// Forgets every cuFileStreamRegister: cuFile deregisters streams at driver close (spec §3.9), so
// a program that closes the driver and opens it again registers its streams again, which must
// not fail as a double registration.
void forget_stream_registrations();
// Both of the above: what every API's driver close (cuFileDriverClose, Python's
// gpufile.driver_close) does once the session is gone.
inline void on_driver_closed() {
  release_stream_staging();
  forget_stream_registrations();
}

inline CUfileError_t result_of(CUfileOpError e) {
  CUfileError_t r{};
  r.err = e;
  return r;
}

// No exception may cross the C ABI: a throwing entry point reports an internal error (or
// CU_FILE_NOMEM_ERROR when memory ran out). `f` returns a CUfileError_t.
template <typename F>
CUfileError_t catch_all(const char* what, F&& f) noexcept {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    return result_of(CU_FILE_NOMEM_ERROR);
  } catch (const std::exception& ex) {
    GPUFILE_LOG(LogLevel::error, "%s: internal error: %s", what, ex.what());
  } catch (...) {
    GPUFILE_LOG(LogLevel::error, "%s: internal error", what);
  }
  return result_of(CU_FILE_INTERNAL_ERROR);
}

// The same for an entry point whose body returns gpufile's Error.
template <typename F>
CUfileError_t guarded(const char* what, F&& f) noexcept {
  return catch_all(what, [&] { return status(f()); });
}

}  // namespace gpufile::capi
