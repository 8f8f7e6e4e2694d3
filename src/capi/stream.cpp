// cuFile stream API: IO ordered on a CUDA stream.
//
// A stream op must never make the caller's stream wait for CUDA work of ours: a host function
// that blocks its stream until gpufile's workers have copied data hangs on the real driver
// (seen on an H100: the workers' CUDA calls wait behind the blocked host function). So the
// copies run on the caller's stream itself, in stream order, and the host functions only do
// kernel file IO on their own thread:
//
//   read:   [copy device -> staging]  [host fn: read file -> staging]  [copy staging -> device]
//   write:  [copy device -> staging]  [host fn: write staging -> file]
//
// one such triple per piece of at most kPieceBytes, through one pinned staging buffer per
// stream (the stream runs the pieces one after another, so one buffer is enough). The first
// copy of a read puts the destination's own bytes into the staging buffer, so bytes the read
// does not produce (end of file, a smaller size at execution) are written back unchanged.
//
// Parameters: *size_p (up to its value at submission) and *file_offset_p are read when the
// stream reaches the op, as cuFile does; the copies are enqueued at submission, so
// *bufPtr_offset_p must keep its submission value (a changed one fails the op, writing
// nothing). *bytes_p is 0 at submission and the result once the stream passed the op.
#include <cerrno>
#include <memory>
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
using gpufile::sys::IoKind;

namespace {

constexpr uint64_t kPieceBytes = 16ull << 20;

// ---- per-stream state ----------------------------------------------------------------------

struct StreamState {
  bool registered = false;
  unsigned flags = 0;
  char* staging = nullptr;  // kPieceBytes of pinned memory, made at first use
};

std::mutex streams_mu;
std::unordered_map<CUstream, StreamState>& streams() {
  static auto* m = new std::unordered_map<CUstream, StreamState>();
  return *m;
}

// The stream's staging buffer, made on first use (on the submitting thread: allocation is a
// CUDA call, which host functions may not make).
Error staging_for(CUstream stream, char** out, unsigned* flags) {
  std::lock_guard lock(streams_mu);
  StreamState& st = streams()[stream];
  if (st.staging == nullptr) {
    void* p = nullptr;
    if (Error e = cuda::alloc_pinned(kPieceBytes, &p)) return e;
    st.staging = static_cast<char*>(p);
  }
  *out = st.staging;
  *flags = st.flags;
  return Error::none();
}

void free_staging(StreamState& st) {
  // cuMemFreeHost waits for all queued work, so pieces still queued finish first.
  cuda::free_pinned(st.staging, kPieceBytes);
  st.staging = nullptr;
}

// ---- ops -----------------------------------------------------------------------------------

struct OpState {
  IoKind kind;
  CUfileHandle_t fh;
  size_t* size_p;
  off_t* file_offset_p;
  off_t* buf_offset_p;
  ssize_t* bytes_p;
  uint64_t max_size;       // *size_p at submission: what the copies cover
  off_t submitted_buf_off;
  char* staging;
  // Filled by the first piece's host function, from the parameters as they are then.
  uint64_t size = 0;
  int64_t file_off = 0;
  uint64_t done = 0;
  bool stopped = false;    // end of file or a failure: later pieces move nothing
  Error error;
};

struct Piece {
  std::shared_ptr<OpState> op;
  uint64_t off;  // within the op
  uint64_t len;  // at most, as covered by the copies
  bool first;
  bool last;
};

void read_parameters(OpState& op) {
  op.size = *op.size_p;
  op.file_off = *op.file_offset_p;
  if (op.size > op.max_size || *op.buf_offset_p != op.submitted_buf_off || op.file_off < 0)
    op.error = Error::of(Errc::invalid_argument);
}

// The host function of one piece: plain file IO between the file and the staging buffer.
void run_piece(void* arg) {
  std::unique_ptr<Piece> piece(static_cast<Piece*>(arg));
  OpState& op = *piece->op;
  try {
    if (piece->first) read_parameters(op);
    if (op.error.ok() && !op.stopped && piece->off < op.size) {
      uint64_t n = std::min(piece->len, op.size - piece->off);
      cuda::MemInfo pinned;
      pinned.kind = cuda::MemKind::host_pinned;
      std::unique_ptr<gpufile::Io> io;
      IoResult r;
      r.error = Runtime::instance().prepare(op.kind, op.fh, op.staging, n,
                                            op.file_off + static_cast<int64_t>(piece->off), 0,
                                            &io, &pinned);
      if (r.ok()) r = Runtime::instance().run_on_this_thread(*io);
      if (!r.ok()) op.error = r.error;
      op.done += r.ok() ? r.bytes : 0;
      if (!r.ok() || r.bytes < n) op.stopped = true;
    }
  } catch (...) {
    op.error = Error::of(Errc::internal);
  }
  if (piece->last)
    *op.bytes_p = op.error.ok() ? static_cast<ssize_t>(op.done) : gpufile::capi::negative_code(op.error);
}

bool aligned_4k(uint64_t v) { return (v & 4095) == 0; }

// Queues the copies and host functions of every piece on the stream.
Error enqueue(const std::shared_ptr<OpState>& op, cuda::CUdeviceptr dst, cuda::CUstream s) {
  const cuda::Driver* d = cuda::driver();
  const uint64_t pieces = op->max_size == 0 ? 1 : (op->max_size + kPieceBytes - 1) / kPieceBytes;
  for (uint64_t k = 0; k < pieces; ++k) {
    uint64_t off = k * kPieceBytes;
    uint64_t len = std::min(kPieceBytes, op->max_size - off);
    auto piece = std::make_unique<Piece>(Piece{op, off, len, k == 0, k + 1 == pieces});
    cuda::CUresult r = cuda::CUDA_SUCCESS;
    if (len > 0) r = d->MemcpyDtoHAsync(op->staging, dst + off, len, s);
    if (r == cuda::CUDA_SUCCESS) r = d->LaunchHostFunc(s, run_piece, piece.get());
    if (r != cuda::CUDA_SUCCESS) return Error::cu(r);
    piece.release();  // run_piece owns it now
    if (op->kind == IoKind::read && len > 0) {
      r = d->MemcpyHtoDAsync(dst + off, op->staging, len, s);
      if (r != cuda::CUDA_SUCCESS) return Error::cu(r);
    }
  }
  return Error::none();
}

// A host buffer needs no staging and no copies: one host function does the IO in place.
struct HostOp {
  IoKind kind;
  CUfileHandle_t fh;
  void* base;
  size_t* size_p;
  off_t* file_offset_p;
  off_t* buf_offset_p;
  ssize_t* bytes_p;
  cuda::MemInfo mem;
};

void run_host_op(void* arg) {
  std::unique_ptr<HostOp> op(static_cast<HostOp*>(arg));
  IoResult r;
  try {
    std::unique_ptr<gpufile::Io> io;
    r.error = Runtime::instance().prepare(op->kind, op->fh, op->base, *op->size_p,
                                          *op->file_offset_p, *op->buf_offset_p, &io, &op->mem);
    if (r.ok()) r = Runtime::instance().run_on_this_thread(*io);
  } catch (...) {
    r.error = Error::of(Errc::internal);
  }
  *op->bytes_p = r.ok() ? static_cast<ssize_t>(r.bytes) : gpufile::capi::negative_code(r.error);
}

Error submit(IoKind kind, CUfileHandle_t fh, void* base, size_t* size_p, off_t* file_offset_p,
             off_t* buf_offset_p, ssize_t* bytes_p, CUstream stream) {
  if (size_p == nullptr || file_offset_p == nullptr || buf_offset_p == nullptr ||
      bytes_p == nullptr || base == nullptr)
    return Error::of(Errc::invalid_argument);
  const cuda::Driver* d = cuda::driver();
  if (d == nullptr) return Error::cu(cuda::CUDA_ERROR_NO_DEVICE);
  // Validate now with the values as they are, so a bad call fails at submission.
  std::unique_ptr<gpufile::Io> probe;
  if (Error e = Runtime::instance().prepare(kind, fh, base, *size_p, *file_offset_p,
                                            *buf_offset_p, &probe))
    return e;
  const cuda::MemInfo mem = probe->job.mem;
  probe.reset();
  char* staging = nullptr;
  unsigned flags = 0;
  if (Error e = staging_for(stream, &staging, &flags)) return e;
  if (flags & CU_FILE_STREAM_PAGE_ALIGNED_INPUTS) {
    if (!aligned_4k(*size_p) || !aligned_4k(static_cast<uint64_t>(*file_offset_p)) ||
        !aligned_4k(static_cast<uint64_t>(*buf_offset_p)))
      return Error::of(Errc::invalid_argument);
  }
  *bytes_p = 0;
  auto s = reinterpret_cast<cuda::CUstream>(stream);
  if (!mem.needs_staging()) {
    auto op = std::make_unique<HostOp>(
        HostOp{kind, fh, base, size_p, file_offset_p, buf_offset_p, bytes_p, mem});
    if (cuda::CUresult r = d->LaunchHostFunc(s, run_host_op, op.get()); r != cuda::CUDA_SUCCESS)
      return Error::cu(r);
    op.release();
    return Error::none();
  }
  auto op = std::make_shared<OpState>(OpState{kind, fh, size_p, file_offset_p, buf_offset_p,
                                              bytes_p, *size_p, *buf_offset_p, staging});
  auto dst = reinterpret_cast<cuda::CUdeviceptr>(base) + static_cast<uint64_t>(*buf_offset_p);
  return enqueue(op, dst, s);
}

CUfileError_t submit_guarded(const char* what, IoKind kind, CUfileHandle_t fh, void* base,
                             size_t* size_p, off_t* file_offset_p, off_t* buf_offset_p,
                             ssize_t* bytes_p, CUstream stream) {
  return guarded(what, [&] {
    Error e = submit(kind, fh, base, size_p, file_offset_p, buf_offset_p, bytes_p, stream);
    // NVIDIA's library stores -EINVAL for a refused submission (spec §3.9).
    if (e && bytes_p != nullptr)
      *bytes_p = e.code == Errc::invalid_argument ? -EINVAL : gpufile::capi::negative_code(e);
    return e;
  });
}

}  // namespace

namespace gpufile::capi {

void release_stream_staging() {
  std::lock_guard lock(streams_mu);
  for (auto& [stream, st] : streams()) free_staging(st);
  streams().clear();
}

}  // namespace gpufile::capi

extern "C" {

CUfileError_t cuFileReadAsync(CUfileHandle_t fh, void* bufPtr_base, size_t* size_p,
                              off_t* file_offset_p, off_t* bufPtr_offset_p, ssize_t* bytes_read_p,
                              CUstream stream) {
  return submit_guarded(__func__, IoKind::read, fh, bufPtr_base, size_p, file_offset_p,
                        bufPtr_offset_p, bytes_read_p, stream);
}

CUfileError_t cuFileWriteAsync(CUfileHandle_t fh, void* bufPtr_base, size_t* size_p,
                               off_t* file_offset_p, off_t* bufPtr_offset_p,
                               ssize_t* bytes_written_p, CUstream stream) {
  return submit_guarded(__func__, IoKind::write, fh, bufPtr_base, size_p, file_offset_p,
                        bufPtr_offset_p, bytes_written_p, stream);
}

CUfileError_t cuFileStreamRegister(CUstream stream, unsigned flags) {
  return guarded(__func__, [&] {
    const cuda::Driver* d = cuda::driver();
    if (d == nullptr) return Error::cu(cuda::CUDA_ERROR_NO_DEVICE);
    {
      std::lock_guard lock(streams_mu);
      StreamState& st = streams()[stream];
      if (st.registered) return Error::of(Errc::invalid_argument);
      st.registered = true;
      st.flags = flags;
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
    auto it = streams().find(stream);
    if (it == streams().end() || !it->second.registered) return Error::of(Errc::invalid_argument);
    free_staging(it->second);
    streams().erase(it);
    return Error::none();
  });
}

}  // extern "C"
