// cuFile stream API: IO ordered on a CUDA stream.
//
// A stream op must never make the caller's stream wait for CUDA work of ours: a host function
// that blocks its stream until gpufile's workers have copied data hangs on the real driver
// (seen on an H100: the workers' CUDA calls wait behind the blocked host function). So the
// copies run on the caller's stream itself, in stream order, and the host functions only do
// kernel file IO on their own thread:
//
//   read:   per piece [copy device -> staging] [host fn: read file -> staging]
//                     [copy staging -> device]                        then [host fn: finish]
//   write:  per piece [copy device -> staging] [host fn: write staging -> file]
//                                                                     then [host fn: finish]
//
// Each op has a pinned staging buffer of its own (from a pool; at most kPieceBytes), used by
// its pieces one after another. Ops of other threads may interleave with it on the same stream
// without sharing memory. The first copy of a read puts the destination's own bytes into the
// staging buffer, so bytes the read does not produce (end of file, a smaller size at execution)
// are written back unchanged. The finish function runs after the last copy: it stores the
// result in *bytes_p and gives the staging buffer back to the pool.
//
// Parameters: *size_p (up to its value at submission) and *file_offset_p are read when the
// stream reaches the op, as cuFile does; the copies are enqueued at submission, so
// *bufPtr_offset_p must keep its submission value (a changed one fails the op, writing
// nothing). *bytes_p is 0 at submission and the result once the stream passed the op.
#include <atomic>
#include <cerrno>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "capi/capi.hpp"
#include "capi/stream_op.hpp"
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

// ---- per-stream registration ----------------------------------------------------------------

std::mutex streams_mu;
std::unordered_map<CUstream, unsigned>& registered_streams() {  // stream -> flags
  static auto* m = new std::unordered_map<CUstream, unsigned>();
  return *m;
}

unsigned stream_flags(CUstream s) {
  std::lock_guard lock(streams_mu);
  auto it = registered_streams().find(s);
  return it == registered_streams().end() ? 0u : it->second;
}

// ---- staging pool --------------------------------------------------------------------------
// Buffers are made on submitting threads (allocation is a CUDA call, which host functions may
// not make) and given back by host functions (no CUDA call), in power-of-two sizes.

std::mutex pool_mu;
std::unordered_map<uint64_t, std::vector<char*>>& pool() {
  static auto* m = new std::unordered_map<uint64_t, std::vector<char*>>();
  return *m;
}

uint64_t staging_size(uint64_t op_bytes) {
  uint64_t size = 64 << 10;
  while (size < op_bytes && size < kPieceBytes) size <<= 1;
  return size;
}

Error take_staging(uint64_t size, char** out) {
  {
    std::lock_guard lock(pool_mu);
    auto& free = pool()[size];
    if (!free.empty()) {
      *out = free.back();
      free.pop_back();
      return Error::none();
    }
  }
  void* p = nullptr;
  if (Error e = cuda::alloc_pinned(size, &p)) return e;
  *out = static_cast<char*>(p);
  return Error::none();
}

void give_staging(uint64_t size, char* buf) {
  std::lock_guard lock(pool_mu);
  pool()[size].push_back(buf);
}

// ---- ops -----------------------------------------------------------------------------------

struct OpState {
  IoKind kind = IoKind::read;
  CUfileHandle_t fh = nullptr;
  size_t* size_p = nullptr;
  off_t* file_offset_p = nullptr;
  off_t* buf_offset_p = nullptr;
  ssize_t* bytes_p = nullptr;
  Error* error_p = nullptr;    // gpufile's bindings: the failure whole (may be null)
  uint64_t max_size = 0;       // *size_p at submission: what the copies cover
  off_t submitted_buf_off = 0;
  char* staging = nullptr;
  uint64_t staging_bytes = 0;
  // Filled by the first piece's host function, from the parameters as they are then.
  uint64_t size = 0;
  int64_t file_off = 0;
  uint64_t done = 0;
  bool stopped = false;    // end of file or a failure: later pieces move nothing
  Error error;
  // Set by the submitting thread when queueing failed part way: pieces already queued run
  // but move nothing.
  std::atomic<bool> abandoned{false};
};

struct Piece {
  std::shared_ptr<OpState> op;
  uint64_t off;  // within the op
  uint64_t len;  // at most, as covered by the copies
  bool first;
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
  if (op.abandoned.load(std::memory_order_acquire)) return;
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
}

// An op's result, as cuFile's *bytes_p has it and, for gpufile's bindings, whole in *error_p.
void store_result(const IoResult& r, ssize_t* bytes_p, Error* error_p) {
  if (error_p != nullptr) *error_p = r.error;
  *bytes_p = r.ok() ? static_cast<ssize_t>(r.bytes) : gpufile::capi::negative_code(r.error);
}

// After the op's last copy: the result, and the staging buffer back to the pool.
void finish_op(void* arg) {
  std::unique_ptr<std::shared_ptr<OpState>> holder(static_cast<std::shared_ptr<OpState>*>(arg));
  OpState& op = **holder;
  store_result(op.error.ok() ? IoResult{op.done, Error::none()} : IoResult{0, op.error},
               op.bytes_p, op.error_p);
  give_staging(op.staging_bytes, op.staging);
}

// After a refused op's queued work: the staging buffer back to the pool (nothing else: the caller
// already has its error in *bytes_p and may have reused that memory).
void give_back_staging(void* arg) {
  std::unique_ptr<std::shared_ptr<OpState>> holder(static_cast<std::shared_ptr<OpState>*>(arg));
  give_staging((*holder)->staging_bytes, (*holder)->staging);
}

bool aligned_4k(uint64_t v) { return (v & 4095) == 0; }

// Queues the copies and host functions of every piece, then the finish function. If queueing
// fails part way, what was queued still runs but moves no file data (the op is marked failed),
// and the staging buffer goes back to the pool only behind it, if the stream still takes a host
// function (a queued copy may touch the buffer until then); else it is never reused.
Error enqueue(const std::shared_ptr<OpState>& op, cuda::CUdeviceptr dst, cuda::CUstream s) {
  const cuda::Driver* d = cuda::driver();
  const uint64_t step = op->staging_bytes;
  const uint64_t pieces = op->max_size == 0 ? 1 : (op->max_size + step - 1) / step;
  cuda::CUresult r = cuda::CUDA_SUCCESS;
  for (uint64_t k = 0; k < pieces && r == cuda::CUDA_SUCCESS; ++k) {
    uint64_t off = k * step;
    uint64_t len = std::min(step, op->max_size - off);
    auto piece = std::make_unique<Piece>(Piece{op, off, len, k == 0});
    if (len > 0) r = d->MemcpyDtoHAsync(op->staging, dst + off, len, s);
    if (r == cuda::CUDA_SUCCESS) r = d->LaunchHostFunc(s, run_piece, piece.get());
    if (r == cuda::CUDA_SUCCESS) piece.release();  // run_piece owns it now
    if (r == cuda::CUDA_SUCCESS && op->kind == IoKind::read && len > 0)
      r = d->MemcpyHtoDAsync(dst + off, op->staging, len, s);
  }
  if (r == cuda::CUDA_SUCCESS) {
    auto holder = std::make_unique<std::shared_ptr<OpState>>(op);
    r = d->LaunchHostFunc(s, finish_op, holder.get());
    if (r == cuda::CUDA_SUCCESS) holder.release();
  }
  if (r != cuda::CUDA_SUCCESS) {
    op->abandoned.store(true, std::memory_order_release);
    // Without this, every refused op kept its pinned buffer until the process ended (found by
    // the seeded simulation, tests/sim, through the driver double's count of pinned memory).
    auto holder = std::make_unique<std::shared_ptr<OpState>>(op);
    if (d->LaunchHostFunc(s, give_back_staging, holder.get()) == cuda::CUDA_SUCCESS) {
      holder.release();
    } else {
      GPUFILE_LOG(gpufile::LogLevel::error,
                  "stream op: queueing failed (CUresult %d); %llu bytes of staging memory are "
                  "not reused", r, static_cast<unsigned long long>(op->staging_bytes));
    }
    return Error::cu(r);
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
  Error* error_p;
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
  store_result(r, op->bytes_p, op->error_p);
}

// The op of cuFileReadAsync / cuFileWriteAsync; its failure is also stored whole in *error_p
// (when not null) before *bytes_p receives its code. A refused op returns its error, and nothing
// queued before the refusal touches the parameters.
Error submit_stream_io(IoKind kind, CUfileHandle_t fh, void* base, size_t* size_p,
                       off_t* file_offset_p, off_t* buf_offset_p, ssize_t* bytes_p,
                       Error* error_p, CUstream stream) {
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
  if (stream_flags(stream) & CU_FILE_STREAM_PAGE_ALIGNED_INPUTS) {
    if (!aligned_4k(*size_p) || !aligned_4k(static_cast<uint64_t>(*file_offset_p)) ||
        !aligned_4k(static_cast<uint64_t>(*buf_offset_p)))
      return Error::of(Errc::invalid_argument);
  }
  *bytes_p = 0;
  if (error_p != nullptr) *error_p = Error::none();
  auto s = reinterpret_cast<cuda::CUstream>(stream);
  if (!mem.needs_staging()) {
    auto op = std::make_unique<HostOp>(
        HostOp{kind, fh, base, size_p, file_offset_p, buf_offset_p, bytes_p, error_p, mem});
    if (cuda::CUresult r = d->LaunchHostFunc(s, run_host_op, op.get()); r != cuda::CUDA_SUCCESS)
      return Error::cu(r);
    op.release();
    return Error::none();
  }
  const uint64_t staging_bytes = staging_size(*size_p);
  char* staging = nullptr;
  if (Error e = take_staging(staging_bytes, &staging)) return e;
  auto op = std::make_shared<OpState>();
  op->kind = kind;
  op->fh = fh;
  op->size_p = size_p;
  op->file_offset_p = file_offset_p;
  op->buf_offset_p = buf_offset_p;
  op->bytes_p = bytes_p;
  op->error_p = error_p;
  op->max_size = *size_p;
  op->submitted_buf_off = *buf_offset_p;
  op->staging = staging;
  op->staging_bytes = staging_bytes;
  auto dst = reinterpret_cast<cuda::CUdeviceptr>(base) + static_cast<uint64_t>(*buf_offset_p);
  return enqueue(op, dst, s);
}

CUfileError_t submit_guarded(const char* what, IoKind kind, CUfileHandle_t fh, void* base,
                             size_t* size_p, off_t* file_offset_p, off_t* buf_offset_p,
                             ssize_t* bytes_p, CUstream stream) {
  return guarded(what, [&] {
    Error e = submit_stream_io(kind, fh, base, size_p, file_offset_p, buf_offset_p, bytes_p,
                               nullptr, stream);
    // NVIDIA's library stores -EINVAL for a refused submission (spec §3.9).
    if (e && bytes_p != nullptr)
      *bytes_p = e.code == Errc::invalid_argument ? -EINVAL : gpufile::capi::negative_code(e);
    return e;
  });
}

}  // namespace

namespace gpufile::capi {

Error StreamOp::start(IoKind kind, void* handle, void* buf, uint64_t size, int64_t file_offset,
                      int64_t buf_offset, cuda::CUstream stream, std::unique_ptr<StreamOp>* out) {
  std::unique_ptr<StreamOp> op(new StreamOp());
  op->size_ = size;
  op->file_offset_ = static_cast<off_t>(file_offset);
  op->buf_offset_ = static_cast<off_t>(buf_offset);
  op->ctx_ = std::make_unique<cuda::MemoryContext>(buf);
  op->mark_ = std::make_unique<cuda::StreamMark>(op->ctx_->get());  // before anything is queued
  cuda::ScopedContext scope(op->ctx_->get());
  auto s = reinterpret_cast<CUstream>(stream);
  if (Error e = submit_stream_io(kind, handle, buf, &op->size_, &op->file_offset_,
                                 &op->buf_offset_, &op->bytes_, &op->error_, s))
    return e;
  if (cuda::CUresult r = op->mark_->record(stream); r != cuda::CUDA_SUCCESS)
    return Error::cu(r);  // the mark waited for the stream
  *out = std::move(op);
  return Error::none();
}

IoResult StreamOp::result() const {
  if (cuda::CUresult r = wait(); r != cuda::CUDA_SUCCESS) return {0, Error::cu(r)};
  if (!error_.ok()) return {0, error_};
  return {static_cast<uint64_t>(bytes_), Error::none()};
}

void release_stream_staging() {
  // Buffers of ops still queued are not in the pool; they come back to it when those ops finish.
  // Free outside the lock: cuMemFreeHost waits for queued work, whose finish functions take it.
  std::unordered_map<uint64_t, std::vector<char*>> freeing;
  {
    std::lock_guard lock(pool_mu);
    freeing.swap(pool());
  }
  // A context must be current to unregister them (the driver refuses cuMemHostUnregister on a
  // thread without one, and the munmapped range then stays registered: the next registration of
  // memory mapped there failed with CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED). The thread that
  // closes the driver need not have one: found by tests/soak/soak.py closing from Python's main
  // thread.
  if (freeing.empty()) return;
  cuda::ScopedAnyContext ctx;
  for (auto& [size, bufs] : freeing)
    for (char* b : bufs) cuda::free_pinned(b, size);
}

void forget_stream_registrations() {
  std::lock_guard lock(streams_mu);
  registered_streams().clear();
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
