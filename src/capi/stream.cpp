// cuFile stream API: IO ordered on a CUDA stream.
//
// Each op is a host function on the caller's stream. When the stream reaches it, the op reads
// its parameters (cuFile evaluates them at execution time too), runs the IO through the
// executor and blocks the stream until the bytes are in place. A host function must not call
// CUDA, so everything that needs the driver (opening the session, classifying the buffer) is
// done at submission, and the workers' own streams are non-blocking so they never wait for the
// caller's stream.
#include <cerrno>
#include <mutex>
#include <unordered_map>

#include "capi/capi.hpp"
#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "exec/runtime.hpp"

using gpufile::Errc;
using gpufile::Error;
using gpufile::IoResult;
using gpufile::Runtime;
using gpufile::capi::guarded;
namespace cuda = gpufile::cuda;

namespace {

std::mutex streams_mu;
std::unordered_map<CUstream, unsigned>& registered_streams() {
  static auto* m = new std::unordered_map<CUstream, unsigned>();
  return *m;
}

unsigned stream_flags(CUstream s) {
  std::lock_guard lock(streams_mu);
  auto it = registered_streams().find(s);
  return it == registered_streams().end() ? 0u : it->second;
}

struct StreamOp {
  gpufile::sys::IoKind kind;
  CUfileHandle_t fh;
  void* base;
  size_t* size_p;
  off_t* file_offset_p;
  off_t* buf_offset_p;
  ssize_t* bytes_p;
  cuda::MemInfo base_mem;
};

void run_stream_op(void* arg) {
  std::unique_ptr<StreamOp> op(static_cast<StreamOp*>(arg));
  IoResult r;
  try {
    std::unique_ptr<gpufile::Io> io;
    r.error = Runtime::instance().prepare(op->kind, op->fh, op->base, *op->size_p,
                                          *op->file_offset_p, *op->buf_offset_p, &io,
                                          &op->base_mem);
    if (r.ok()) r = Runtime::instance().run(*io, /*allow_inline=*/false);
  } catch (...) {
    r.error = Error::of(Errc::internal);
  }
  *op->bytes_p = r.ok() ? static_cast<ssize_t>(r.bytes) : gpufile::capi::negative_code(r.error);
}

bool aligned_4k(uint64_t v) { return (v & 4095) == 0; }

Error submit(gpufile::sys::IoKind kind, CUfileHandle_t fh, void* base, size_t* size_p,
             off_t* file_offset_p, off_t* buf_offset_p, ssize_t* bytes_p, CUstream stream) {
  if (size_p == nullptr || file_offset_p == nullptr || buf_offset_p == nullptr ||
      bytes_p == nullptr || base == nullptr)
    return Error::of(Errc::invalid_argument);
  const cuda::Driver* d = cuda::driver();
  if (d == nullptr) return Error::cu(cuda::CUDA_ERROR_NO_DEVICE);
  if (stream_flags(stream) & CU_FILE_STREAM_PAGE_ALIGNED_INPUTS) {
    if (!aligned_4k(*size_p) || !aligned_4k(static_cast<uint64_t>(*file_offset_p)) ||
        !aligned_4k(static_cast<uint64_t>(*buf_offset_p)))
      return Error::of(Errc::invalid_argument);
  }
  // Validate now with the values as they are, so a bad call fails at submission.
  std::unique_ptr<gpufile::Io> probe;
  if (Error e = Runtime::instance().prepare(kind, fh, base, *size_p, *file_offset_p,
                                            *buf_offset_p, &probe))
    return e;
  auto op = std::make_unique<StreamOp>(
      StreamOp{kind, fh, base, size_p, file_offset_p, buf_offset_p, bytes_p, {}});
  if (Error e = cuda::classify(base, &op->base_mem)) return e;
  probe.reset();
  *bytes_p = 0;
  auto cu_stream = reinterpret_cast<cuda::CUstream>(stream);
  if (cuda::CUresult r = d->LaunchHostFunc(cu_stream, run_stream_op, op.get());
      r != cuda::CUDA_SUCCESS)
    return Error::cu(r);
  op.release();  // run_stream_op owns it now
  return Error::none();
}

CUfileError_t submit_guarded(const char* what, gpufile::sys::IoKind kind, CUfileHandle_t fh,
                             void* base, size_t* size_p, off_t* file_offset_p,
                             off_t* buf_offset_p, ssize_t* bytes_p, CUstream stream) {
  return guarded(what, [&] {
    Error e = submit(kind, fh, base, size_p, file_offset_p, buf_offset_p, bytes_p, stream);
    // NVIDIA's library stores -EINVAL for a refused submission (spec §3.9).
    if (e && bytes_p != nullptr)
      *bytes_p = e.code == Errc::invalid_argument ? -EINVAL : gpufile::capi::negative_code(e);
    return e;
  });
}

}  // namespace

extern "C" {

CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void* bufPtr_base, size_t* size_p,
                              off_t* file_offset_p, off_t* bufPtr_offset_p, ssize_t* bytes_read_p,
                              CUstream stream) {
  return submit_guarded(__func__, gpufile::sys::IoKind::read, fh, bufPtr_base, size_p,
                        file_offset_p, bufPtr_offset_p, bytes_read_p, stream);
}

CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void* bufPtr_base, size_t* size_p,
                               off_t* file_offset_p, off_t* bufPtr_offset_p,
                               ssize_t* bytes_written_p, CUstream stream) {
  return submit_guarded(__func__, gpufile::sys::IoKind::write, fh, bufPtr_base, size_p,
                        file_offset_p, bufPtr_offset_p, bytes_written_p, stream);
}

CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags) {
  return guarded(__func__, [&] {
    const cuda::Driver* d = cuda::driver();
    if (d == nullptr) return Error::cu(cuda::CUDA_ERROR_NO_DEVICE);
    {
      std::lock_guard lock(streams_mu);
      if (!registered_streams().emplace(stream, flags).second)
        return Error::of(Errc::invalid_argument);
    }
    // cuFile synchronises the stream at registration; callers rely on it.
    if (cuda::CUresult r = d->StreamSynchronize(reinterpret_cast<cuda::CUstream>(stream));
        r != cuda::CUDA_SUCCESS)
      return Error::cu(r);
    return Error::none();
  });
}

CUfileError_t cuFileStreamDeregister(CUstream stream) {
  return guarded(__func__, [&] {
    std::lock_guard lock(streams_mu);
    return registered_streams().erase(stream) ? Error::none() : Error::of(Errc::invalid_argument);
  });
}

}  // extern "C"
