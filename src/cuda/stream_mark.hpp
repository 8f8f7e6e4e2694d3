// A point on a CUDA stream: an event recorded behind work queued there, to learn when the
// stream has passed that work. capi::StreamOp keeps one behind each stream op of gpufile's
// bindings: cuFile's stream API reads the op's parameters when the stream reaches it, so they
// must live until the mark is passed.
#pragma once

#include "cuda/driver.hpp"

namespace gpufile::cuda {

class StreamMark {
 public:
  // `ctx`: the context the work was queued in (the event is made there); the caller keeps it
  // alive for the mark's lifetime.
  explicit StreamMark(CUcontext ctx) : ctx_(ctx) {}
  // Waits until the stream passed the mark, then destroys the event.
  ~StreamMark();
  StreamMark(const StreamMark&) = delete;
  StreamMark& operator=(const StreamMark&) = delete;

  // Records the mark on `stream`, behind what is queued there now. When no event can be made
  // or recorded there is nothing to wait for later: the stream is waited for here, before the
  // error is returned, so that the work behind it is over either way.
  CUresult record(CUstream stream);
  // Whether the stream passed the mark (true when none was recorded).
  bool passed() const;
  // Blocks until the stream passed the mark.
  CUresult wait() const;

 private:
  CUcontext ctx_ = nullptr;
  CUevent event_ = nullptr;
};

}  // namespace gpufile::cuda
