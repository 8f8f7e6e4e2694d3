#include "exec/executor.hpp"

#include "core/align.hpp"
#include "core/log.hpp"
#include "cuda/memory.hpp"
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
  const unsigned n = cfg_.workers;
  for (unsigned i = 0; i < n; ++i) workers_.push_back(std::make_unique<Worker>(*this, cfg_));
  // The first worker is set up here, so that the open reports what goes wrong (no pinned
  // memory, io_uring demanded but refused) and which engine runs. The others set up on their
  // own threads while the first IO already runs: pinning their staging slabs is most of what
  // opening costs (measured on the H100 machine: about 0.6 ms per MiB through cuMemHostAlloc,
  // 100-170 ms for 12-16 workers, not faster in parallel), and a load need not wait for it.
  std::string why;
  if (Error e = workers_[0]->init(&why)) return e;
  engine_name_ = workers_[0]->engine_name();
  engine_note_ = why;
  cuda::CUcontext ctx = nullptr;
  if (const cuda::Driver* d = cuda::driver()) d->CtxGetCurrent(&ctx);
  threads_.emplace_back([w = workers_[0].get()] { w->run(); });
  for (unsigned i = 1; i < n; ++i)
    threads_.emplace_back([w = workers_[i].get(), ctx, i] {
      cuda::ScopedContext scope(ctx);
      std::string note;
      if (Error e = w->init(&note)) {
        // The executor runs on with the workers it has: slower, not wrong.
        GPUFILE_LOG(LogLevel::error, "IO worker %u could not start (%s); running without it", i,
                    describe(e).c_str());
        return;
      }
      w->run();
    });
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
