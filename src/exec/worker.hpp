// One IO worker thread of the executor (see executor.hpp for the pipeline it runs).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "exec/executor.hpp"
#include "io/engine.hpp"

namespace gpufile::exec {

class Worker {
 public:
  Worker(Executor& owner, const ExecutorConfig& cfg);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // Allocates the slabs and the engine. `why` explains a fallback to the posix engine.
  Error init(std::string* why);
  const char* engine_name() const { return engine_->name(); }
  // The worker's loop; returns when the executor stops and its queue is empty.
  void run();

 private:
  enum class Stage { free, copy_to_host, io, copy_to_device };

  struct Slot {
    char* slab = nullptr;
    Stage stage = Stage::free;
    Chunk chunk;
    ChunkPlan plan;
    int segs_pending = 0;
    uint64_t got = 0;
    Error err;
  };

  // CUDA resources of one context: a stream and an event per slot.
  struct ContextRes {
    cuda::CUcontext ctx = nullptr;
    cuda::CUstream stream = nullptr;
    std::vector<cuda::CUevent> events;
  };

  bool fill_free_slots();
  bool claim_next(Chunk* out);
  void start(unsigned i, const Chunk& c);
  void issue(unsigned i, int seg);
  // A write to a file in memory, synchronously and one worker at a time (worker.cpp says why).
  void write_in_turn(const io::Op& op, std::mutex& turn);
  void issue_all(unsigned i);
  unsigned reap(bool wait);
  void on_io(uint64_t tag, int res);
  void io_finished(unsigned i);
  bool poll_copies();
  bool wait_oldest_copy();
  void copy_finished(unsigned i, cuda::CUresult r);
  void complete(unsigned i, uint64_t got, Error err);
  Error start_copy(unsigned i, bool to_device, uint64_t bytes);
  ContextRes* context_res(cuda::CUcontext ctx, Error* err);

  Executor& owner_;
  ExecutorConfig cfg_;
  std::unique_ptr<io::Engine> engine_;
  char* slabs_ = nullptr;
  uint64_t slabs_bytes_ = 0;
  bool registered_ = false;
  std::vector<Slot> slots_;
  std::vector<ContextRes> contexts_;
  cuda::CUcontext current_ctx_ = nullptr;
  uint64_t copy_seq_ = 0;
  std::vector<uint64_t> copy_order_;  // per slot: sequence number of its pending copy
};

}  // namespace gpufile::exec
