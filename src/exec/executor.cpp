#include "exec/executor.hpp"

#include "core/align.hpp"
#include "exec/worker.hpp"

namespace gpufile::exec {

Executor::Executor(const ExecutorConfig& cfg) : cfg_(cfg) {}

Executor::~Executor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& t : threads_) t.join();
}

Error Executor::start() {
  // Pinning the staging slabs is most of what opening costs (on the H100 machine 100-170 ms for
  // 12-16 workers through cuMemHostAlloc, 23-29 ms with the huge pages of cuda::alloc_pinned).
  // Tried and measured there (docs/performance.md): setting the workers up on parallel threads
  // did not shorten the open, and setting all but the first up in the background while IO
  // already ran did not make a first 7.8 GB load any faster; it also let a fork() right after
  // the open copy a lock held by a half-started worker into the child (tests/fault/test_fork.cpp
  // hung under ASan). So: one after another.
  for (unsigned i = 0; i < cfg_.workers; ++i) {
    auto w = std::make_unique<Worker>(*this, cfg_);
    std::string why;
    if (Error e = w->init(&why)) return e;
    if (i == 0) {
      engine_name_ = w->engine_name();
      engine_note_ = why;
    }
    workers_.push_back(std::move(w));
  }
  for (auto& w : workers_) threads_.emplace_back([worker = w.get()] { worker->run(); });
  return Error::none();
}

void Executor::submit(Job* job) {
  if (job->len == 0) {
    job->set_chunks(1);
    job->chunk_done(job->file_off, 0, 0, Error::none());
    return;
  }
  // Chunks sit on a grid aligned to the file's DIO alignment, so that every chunk boundary
  // inside the request is aligned and a chunk's whole blocks still fit in one slab.
  const uint64_t grid = align_down(job->file_off, job->file.align.offset);
  const uint64_t step = cfg_.slab_bytes;
  const uint64_t first_end = grid + step;
  uint64_t n = 1;
  if (job->end() > first_end) n += (job->end() - first_end + step - 1) / step;
  job->set_chunks(static_cast<uint32_t>(n));
  {
    std::lock_guard lock(mu_);
    uint64_t off = job->file_off;
    for (uint64_t k = 0; k < n; ++k) {
      uint64_t end = std::min(job->end(), grid + (k + 1) * step);
      queue_.push_back(Chunk{job, off, end - off});
      off = end;
    }
  }
  if (n == 1) cv_.notify_one();
  else cv_.notify_all();
}

bool Executor::try_pop(Chunk* out) {
  std::lock_guard lock(mu_);
  if (queue_.empty()) return false;
  *out = queue_.front();
  queue_.pop_front();
  return true;
}

bool Executor::wait_for_work() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  return !queue_.empty();
}

}  // namespace gpufile::exec
