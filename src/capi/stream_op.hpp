// One cuFile stream op for gpufile's own bindings (the C++ API's gpufile::StreamFuture, Python's
// StreamFuture): the op of cuFileReadAsync / cuFileWriteAsync with its parameters kept here,
// where the stream reads and writes them when it gets to the op, the memory's context, and a
// mark behind the op on its stream. Its failure is kept whole (gpufile's Error, not cuFile's
// negative code).
#pragma once

#include <cstdint>
#include <memory>

#include "core/error.hpp"
#include "cuda/memory.hpp"
#include "cuda/stream_mark.hpp"
#include "sys/os.hpp"

namespace gpufile::capi {

class StreamOp {
 public:
  // Queues the op on `stream` in the context of `buf`'s memory (the calling thread may have no
  // context). A refused op returns its error with nothing queued that touches the parameters;
  // an op that cannot be marked returns the driver's error once the stream passed it.
  static Error start(sys::IoKind kind, void* handle, void* buf, uint64_t size,
                     int64_t file_offset, int64_t buf_offset, cuda::CUstream stream,
                     std::unique_ptr<StreamOp>* out);
  // Waits for the stream to pass the op (its parameters live here).
  ~StreamOp() = default;
  StreamOp(const StreamOp&) = delete;
  StreamOp& operator=(const StreamOp&) = delete;

  // Whether the stream passed the op.
  bool done() const { return mark_->passed(); }
  // Blocks until the stream passed the op.
  cuda::CUresult wait() const { return mark_->wait(); }
  // Waits, then the op's bytes or its error (Errc::cuda when the wait itself failed).
  IoResult result() const;

 private:
  StreamOp() = default;
  // The parameters, read and written by the stream when it reaches the op.
  size_t size_ = 0;
  off_t file_offset_ = 0;
  off_t buf_offset_ = 0;
  ssize_t bytes_ = 0;
  Error error_;
  std::unique_ptr<cuda::MemoryContext> ctx_;  // where the op was queued and its mark lives
  std::unique_ptr<cuda::StreamMark> mark_;     // last, so destroyed first: waits for the stream
};

}  // namespace gpufile::capi
