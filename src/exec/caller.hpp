// IO on the calling thread: a synchronous caller runs pieces of its own request instead of
// sleeping while workers do (route::plan_threads decides when), through staging lent to it for
// the call.
//
// With two staging buffers the caller pipelines as a worker does: the copy of piece i to the
// GPU runs while the kernel reads piece i+1 into the other buffer (for writes, the copy of
// piece i+1 out of the GPU runs while piece i is written). Each buffer copies on CUDA streams of
// its own, so callers' copies do not queue behind one another as synchronous copies on the
// legacy default stream would. The streams are blocking ones: a caller's copy comes after the
// work it queued on the legacy stream before the call (a cuMemsetD8, a pageable cuMemcpyHtoD),
// as cudaMemcpy would.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "exec/job.hpp"

namespace gpufile::exec {

// Pinned staging for callers' threads, lent per call and given back at its end: no caller holds
// staging between calls that a busy one could use. Buffers are made on demand, up to a cap.
class StagingPool {
 public:
  struct Buffer {
    char* mem = nullptr;
    bool owned = true;  // pinned by the pool (else lent to it by init: see there)
    std::vector<cuda::ContextStream> streams;  // one per context it copied for, made at first use

    // The buffer's copy stream in `ctx` (current on this thread), made at first use; null when
    // the driver will not make one (copy synchronously then). A blocking stream: ordered after
    // the legacy stream, as the comment at the top says.
    cuda::CUstream stream(cuda::CUcontext ctx);
  };

  StagingPool() = default;
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;

  // Buffers of `bytes` each, at most `cap` of them, `ready` made now (opening pays for those;
  // the rest are made by the first calls that find none free).
  void init(uint64_t bytes, unsigned cap, unsigned ready);
  // The same, the first `count` buffers laid end to end at `premade`: pinned memory that
  // another owner made (pinned at open with the workers' staging, in one registration) and
  // frees only after this pool is gone.
  void init(uint64_t bytes, unsigned cap, char* premade, unsigned count);
  uint64_t bytes() const { return bytes_; }
  unsigned cap() const { return cap_; }
  // Buffers made so far (lent or free).
  unsigned made();
  // Up to `want` buffers into `out`; fewer, or none, when all are lent and the cap is reached
  // (or pinning more memory failed).
  unsigned take(Buffer** out, unsigned want);
  void give(Buffer* const* bufs, unsigned n);

 private:
  Buffer* make();

  std::mutex mu_;
  std::vector<std::unique_ptr<Buffer>> all_;  // guarded by mu_
  std::vector<Buffer*> free_;                 // guarded by mu_
  unsigned made_ = 0;                         // made or being made; guarded by mu_
  unsigned cap_ = 0;
  uint64_t bytes_ = 0;
};

// The staging buffers one call holds; given back when it goes out of scope.
class StagingLease {
 public:
  static constexpr unsigned kMaxBuffers = 2;  // enough to overlap a copy with the next IO

  StagingLease() = default;
  StagingLease(StagingPool& pool, unsigned want);
  ~StagingLease() { release(); }
  StagingLease(const StagingLease&) = delete;
  StagingLease& operator=(const StagingLease&) = delete;
  StagingLease& operator=(StagingLease&& other) noexcept;

  unsigned count() const { return count_; }
  StagingPool::Buffer* buffer(unsigned i) const { return bufs_[i]; }
  void release();

 private:
  StagingPool* pool_ = nullptr;
  StagingPool::Buffer* bufs_[kMaxBuffers] = {};
  unsigned count_ = 0;
};

// Claims and runs pieces of `job` on the calling thread until none is left unclaimed, through
// the lease's buffers in turn (host memory needs none). Each piece is reported to the job when
// its bytes have landed. Returns the bytes this thread moved. A job that makes its page-cache
// windows ahead (Job::makes_windows_ahead) has them made first.
uint64_t run_on_caller(Job& job, const StagingLease& lease);

}  // namespace gpufile::exec
