#include "exec/caller.hpp"

#include <algorithm>
#include <cerrno>
#include <utility>

#include "cuda/memory.hpp"
#include "exec/cache_windows.hpp"

namespace gpufile::exec {

// ---- the pool ------------------------------------------------------------------------------------

StagingPool::~StagingPool() {
  for (auto& b : all_) {
    b->streams.clear();
    if (b->owned) cuda::free_pinned(b->mem, bytes_);
  }
}

void StagingPool::init(uint64_t bytes, unsigned cap, unsigned ready) {
  bytes_ = bytes;
  cap_ = cap;
  std::vector<Buffer*> made;
  for (unsigned i = 0; i < std::min(ready, cap); ++i) {
    Buffer* b = nullptr;
    unsigned got = take(&b, 1);
    if (got == 0) break;
    made.push_back(b);
  }
  give(made.data(), static_cast<unsigned>(made.size()));
}

void StagingPool::init(uint64_t bytes, unsigned cap, char* premade, unsigned count) {
  bytes_ = bytes;
  cap_ = cap;
  std::lock_guard lock(mu_);
  for (unsigned i = 0; i < std::min(count, cap); ++i) {
    auto b = std::make_unique<Buffer>();
    b->mem = premade + i * bytes;
    b->owned = false;
    free_.push_back(b.get());
    all_.push_back(std::move(b));
    ++made_;
  }
}

StagingPool::Buffer* StagingPool::make() {
  void* mem = nullptr;
  if (cuda::alloc_pinned(bytes_, &mem)) return nullptr;
  auto b = std::make_unique<Buffer>();
  b->mem = static_cast<char*>(mem);
  std::lock_guard lock(mu_);
  all_.push_back(std::move(b));
  return all_.back().get();
}

unsigned StagingPool::take(Buffer** out, unsigned want) {
  unsigned got = 0, to_make = 0;
  {
    std::lock_guard lock(mu_);
    while (got < want && !free_.empty()) {
      out[got++] = free_.back();
      free_.pop_back();
    }
    to_make = std::min(want - got, cap_ - made_);
    made_ += to_make;
  }
  // Pinning takes about a millisecond per 4 MiB: outside the lock, so other callers go on.
  for (unsigned i = 0; i < to_make; ++i) {
    if (Buffer* b = make()) {
      out[got++] = b;
      continue;
    }
    std::lock_guard lock(mu_);
    made_ -= to_make - i;
    break;
  }
  return got;
}

unsigned StagingPool::made() {
  std::lock_guard lock(mu_);
  return made_;
}

void StagingPool::give(Buffer* const* bufs, unsigned n) {
  std::lock_guard lock(mu_);
  free_.insert(free_.end(), bufs, bufs + n);
}

cuda::CUstream StagingPool::Buffer::stream(cuda::CUcontext ctx) {
  for (const cuda::ContextStream& s : streams)
    if (s.context() == ctx) return s.get();
  constexpr unsigned kBlockingStream = 0;  // CU_STREAM_DEFAULT: ordered after the legacy stream
  cuda::ContextStream s;
  if (cuda::ContextStream::make(ctx, kBlockingStream, &s) != cuda::CUDA_SUCCESS) return nullptr;
  streams.push_back(std::move(s));
  return streams.back().get();
}

StagingLease::StagingLease(StagingPool& pool, unsigned want)
    : pool_(&pool), count_(pool.take(bufs_, std::min(want, kMaxBuffers))) {}

StagingLease& StagingLease::operator=(StagingLease&& other) noexcept {
  if (this == &other) return *this;
  release();
  pool_ = std::exchange(other.pool_, nullptr);
  count_ = std::exchange(other.count_, 0u);
  std::copy(other.bufs_, other.bufs_ + kMaxBuffers, bufs_);
  return *this;
}

void StagingLease::release() {
  if (pool_ != nullptr && count_ > 0) pool_->give(bufs_, count_);
  count_ = 0;
  pool_ = nullptr;
}

// ---- running pieces ------------------------------------------------------------------------------

namespace {

// The first kernel read of a segment whose bytes the file's guess believed cached: takes only
// what the page cache holds. Anything less drops the guess (the next small read asks cachestat
// again); the caller reads the rest as usual, which waits for the disk. A short read at end of
// file is no miss.
ssize_t first_read_from_cache(const Job& job, const Segment& seg) {
  ssize_t r = sys::os().pread_cached(seg.fd, seg.mem, seg.len, seg.file_off);
  if (r == -EOPNOTSUPP) CacheGuess::set(job.guess->nowait_refused, true);
  const bool all = r >= 0 && (static_cast<uint64_t>(r) == seg.len ||
                              seg.file_off + static_cast<uint64_t>(r) >= job.file_size);
  if (!all) CacheGuess::set(job.guess->looks_cached, false);
  // Nothing cached is not an error here: the caller goes on with a read that waits.
  return r == -EAGAIN || r == -EOPNOTSUPP ? -EAGAIN : r;
}

// A piece on its way through one staging buffer.
struct Turn {
  StagingPool::Buffer* buf = nullptr;
  Chunk c;
  ChunkPlan plan;
  char* host = nullptr;              // the piece's bytes in the buffer
  uint64_t got = 0;                  // bytes a read moved (short at end of file)
  cuda::CUstream stream = nullptr;   // where its copy runs; null: it ran synchronously
  bool busy = false;                 // a copy started, the piece not yet reported
  WindowLease window;                // held: the copy reads a page-cache window, not the buffer
};

class CallerRun {
 public:
  CallerRun(Job& job, const StagingLease& lease) : job_(job), turns_(lease.count()) {
    for (unsigned i = 0; i < turns_; ++i) turn_[i].buf = lease.buffer(i);
  }

  uint64_t run() {
    if (job_.staged() && turns_ == 0) return 0;  // no staging: the pieces are left to workers
    cuda::ScopedContext ctx(job_.staged() ? job_.mem.context : nullptr);
    if (job_.makes_windows_ahead) make_windows_ahead();
    Chunk c;
    unsigned k = 0;
    while (job_.claim(&c)) {
      if (!job_.staged()) {
        run_in_place(c);
        continue;
      }
      // Two buffers in turn: this one's piece from two pieces ago finishes first.
      Turn& t = turn_[k++ % turns_];
      if (t.busy) finish(t);
      t.c = c;
      start(t);
    }
    for (unsigned i = 0; i < turns_; ++i)  // oldest first
      if (Turn& t = turn_[(k + i) % turns_]; t.busy) finish(t);
    return moved_;
  }

 private:
  bool reading() const { return job_.kind == sys::IoKind::read; }

  // Makes the missing windows of the pieces nobody has claimed yet, farthest first, while the
  // workers take pieces from the near end (copying out of each window made by the time they
  // reach it); stops once none is missing there or none can be made now.
  void make_windows_ahead() {
    while (job_.windows->make_ahead(job_.file.fd_buffered, job_.unclaimed_from(), job_.end(),
                                    job_.file_size, job_.mem.context)) {
    }
  }

  // Host memory: the kernel moves the bytes straight to or from the caller's buffer.
  void run_in_place(const Chunk& c) {
    ChunkPlan plan = plan_chunk(job_, c.off, c.len, nullptr);
    uint64_t got = 0;
    Error err = kernel_io(plan, c, &got);
    report(c, got, err);
  }

  // Reads: kernel IO into the buffer, then its copy to the GPU starts. Writes: the copy out of
  // the GPU starts.
  void start(Turn& t) {
    if (job_.windows != nullptr && start_from_window(t)) return;
    t.plan = plan_chunk(job_, t.c.off, t.c.len, t.buf->mem);
    t.host = t.buf->mem + (t.c.off - t.plan.base);
    Error err;
    if (reading()) {
      err = kernel_io(t.plan, t.c, &t.got);
      if (err.ok() && t.got == 0) return report(t.c, 0, err);  // nothing there: end of file
      if (err.ok()) err = start_copy(t, t.got);
    } else {
      err = start_copy(t, t.c.len);
    }
    if (err) return report(t.c, 0, err);
    t.busy = true;
  }

  // A read of cached bytes: the copy engine takes them straight out of the file's page-cache
  // window (exec/cache_windows.hpp), with no kernel read. False when no window serves the piece
  // now: it is staged as usual.
  bool start_from_window(Turn& t) {
    const uint64_t want = job_.in_file(t.c.off, t.c.len);
    if (want == 0) return false;
    const char* bytes =
        job_.windows->acquire(job_.file.fd_buffered, t.c.off, want, job_.file_size,
                              job_.mem.context, job_.makes_windows, &t.window);
    if (bytes == nullptr) return false;
    t.host = const_cast<char*>(bytes);  // only read: a host-to-device copy's source
    t.got = want;
    if (Error err = start_copy(t, want)) {
      job_.windows->release(&t.window);
      report(t.c, 0, err);
      return true;
    }
    t.busy = true;
    return true;
  }

  // Waits for the turn's copy; a write then goes to the kernel.
  void finish(Turn& t) {
    t.busy = false;
    Error err = wait_copy(t);
    if (t.window.held()) {  // the copy is done with the window
      job_.windows->release(&t.window);
      if (err.ok()) job_.window_bytes.fetch_add(t.got, std::memory_order_relaxed);
    }
    if (err.ok() && !reading()) err = kernel_io(t.plan, t.c, &t.got);
    report(t.c, err ? 0 : t.got, err);
  }

  // One kernel IO per segment of the plan, continued until done, short at end of file, or
  // failed (exec::apply_result's rules, as the workers apply them).
  Error kernel_io(ChunkPlan& plan, const Chunk& c, uint64_t* got) {
    Error err;
    for (int k = 0; k < plan.count && err.ok(); ++k) {
      Segment& seg = plan.seg[k];
      SegmentNext next = SegmentNext::again;
      fill_cache_first(job_, seg);
      if (job_.guess != nullptr && reading()) {
        ssize_t r = first_read_from_cache(job_, seg);
        if (r != -EAGAIN) next = apply_result(job_, seg, static_cast<int>(r), &err);
      }
      while (next == SegmentNext::again)
        next = apply_result(job_, seg, static_cast<int>(io_now(job_, seg)), &err);
    }
    *got = err ? 0 : contiguous_bytes(plan, c.off, c.len);
    if (err.ok() && !reading() && *got < c.len) err = Error::sys(EIO);
    return err;
  }

  Error start_copy(Turn& t, uint64_t n) {
    const cuda::Driver* d = cuda::driver();
    const cuda::CUdeviceptr dev = job_.addr + (t.c.off - job_.file_off);
    t.stream = t.buf->stream(job_.mem.context);
    cuda::CUresult r;
    if (t.stream == nullptr) {  // no stream of its own: a synchronous copy
      r = reading() ? d->MemcpyHtoD(dev, t.host, n) : d->MemcpyDtoH(t.host, dev, n);
      return r == cuda::CUDA_SUCCESS ? Error::none() : Error::cu(r);
    }
    r = reading() ? d->MemcpyHtoDAsync(dev, t.host, n, t.stream)
                  : d->MemcpyDtoHAsync(t.host, dev, n, t.stream);
    if (r != cuda::CUDA_SUCCESS) {
      d->StreamSynchronize(t.stream);  // the buffer goes back to the pool after this
      return Error::cu(r);
    }
    return Error::none();
  }

  Error wait_copy(const Turn& t) {
    if (t.stream == nullptr) return Error::none();
    cuda::CUresult r = cuda::driver()->StreamSynchronize(t.stream);
    return r == cuda::CUDA_SUCCESS ? Error::none() : Error::cu(r);
  }

  void report(const Chunk& c, uint64_t got, Error err) {
    if (err.ok()) moved_ += got;
    job_.chunk_done(c.off, c.len, got, err);
  }

  Job& job_;
  Turn turn_[StagingLease::kMaxBuffers];
  const unsigned turns_;
  uint64_t moved_ = 0;
};

}  // namespace

uint64_t run_on_caller(Job& job, const StagingLease& lease) {
  return CallerRun(job, lease).run();
}

}  // namespace gpufile::exec
