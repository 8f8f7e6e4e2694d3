// The executor: a pool of IO workers fed from one queue of chunks.
//
// Each worker owns an IO engine (its own io_uring ring), a ring of k pinned staging slabs
// registered with that engine as fixed buffers, and one CUDA stream per context it serves. A
// worker keeps up to k chunks in flight, so the kernel reads chunk i+1 while the GPU copies
// chunk i out of the slab before it and slab i-1 is recycled.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/settings.hpp"
#include "exec/job.hpp"

namespace gpufile::exec {

class Worker;

struct Chunk {
  Job* job = nullptr;
  uint64_t off = 0;
  uint64_t len = 0;
};

struct ExecutorConfig {
  unsigned workers = 4;
  unsigned slabs_per_worker = 4;
  uint64_t slab_bytes = 4 << 20;
  unsigned ring_depth = 64;
  EnginePolicy engine = EnginePolicy::automatic;
};

class Executor {
 public:
  explicit Executor(const ExecutorConfig& cfg);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Allocates staging memory, sets up engines and starts the workers.
  Error start();
  // Splits `job` into chunks and queues them. The job must stay alive until it completes.
  void submit(Job* job);

  const std::string& engine_name() const { return engine_name_; }
  // Why the engine is not io_uring, or empty.
  const std::string& engine_note() const { return engine_note_; }

  // Worker side.
  bool try_pop(Chunk* out);
  // Blocks until there is work (true) or the executor stops with an empty queue (false).
  bool wait_for_work();

 private:
  ExecutorConfig cfg_;
  std::string engine_name_;
  std::string engine_note_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Chunk> queue_;
  bool stopping_ = false;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
};

}  // namespace gpufile::exec
