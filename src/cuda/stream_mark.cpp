#include "cuda/stream_mark.hpp"

#include "cuda/memory.hpp"

namespace gpufile::cuda {

StreamMark::~StreamMark() {
  if (event_ == nullptr) return;
  ScopedContext scope(ctx_);
  driver()->EventSynchronize(event_);
  driver()->EventDestroy(event_);
}

CUresult StreamMark::record(CUstream stream) {
  const Driver* d = driver();
  ScopedContext scope(ctx_);
  CUresult r = d->EventCreate(&event_, CU_EVENT_DISABLE_TIMING);
  if (r != CUDA_SUCCESS) {
    event_ = nullptr;
  } else if (r = d->EventRecord(event_, stream); r != CUDA_SUCCESS) {
    d->EventDestroy(event_);
    event_ = nullptr;
  }
  if (r != CUDA_SUCCESS) d->StreamSynchronize(stream);
  return r;
}

bool StreamMark::passed() const {
  if (event_ == nullptr) return true;
  ScopedContext scope(ctx_);
  return driver()->EventQuery(event_) == CUDA_SUCCESS;
}

CUresult StreamMark::wait() const {
  if (event_ == nullptr) return CUDA_SUCCESS;
  ScopedContext scope(ctx_);
  return driver()->EventSynchronize(event_);
}

}  // namespace gpufile::cuda
