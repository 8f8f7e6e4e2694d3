// One IO worker thread of the executor (see executor.hpp for the pipeline it runs).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "exec/cache_windows.hpp"
#include "exec/executor.hpp"
#include "io/engine.hpp"

namespace gpufile::exec {

class Worker {
 public:
  // Small reads into GPU memory share a slab: up to this many pieces of up to kPackBytes each
  // are read into one slab together and copied to the GPU with one batched copy, so that the
  // copy's fixed cost (several microseconds) is paid once per slab, not once per 4 KiB.
  static constexpr unsigned kMaxPack = 32;
  static constexpr uint64_t kPackBytes = 64 << 10;
  // Long pieces (half a slab or more) a worker reads with O_DIRECT before it asks for the
  // deeper ring of reads past the page cache (Executor::deepen_for_cold): 8 x 4 MiB, so that a
  // short cold read never pins more.
  static constexpr unsigned kColdPiecesBeforeDeeper = 8;

  // `group`: where it runs, where its slabs live, whose IO it takes first (placement.hpp).
  Worker(Executor& owner, const ExecutorConfig& cfg, const WorkerGroup& group);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  // The staging this worker wants: staging_bytes() on staging_node_wanted() (Executor::start
  // allocates every worker's at once, cuda::alloc_pinned_many).
  uint64_t staging_bytes() const { return cfg_.slab_bytes * cfg_.slabs_per_worker; }
  int staging_node_wanted() const { return node_; }
  // Takes `staging` (staging_bytes() of pinned memory, from cuda::alloc_pinned_many; the
  // executor's, freed after the worker) as its slabs, which landed on node `landed`, and makes
  // the engine. `why` explains a fallback to the posix engine.
  Error init(void* staging, int landed, std::string* why);
  const char* engine_name() const { return engine_->name(); }
  // Pins the calling thread (the worker's own, before run()) to its group's CPUs.
  void pin();
  WorkerPlace place() const;
  // The worker's loop; returns when the executor stops and nothing is listed.
  void run();
  // Any thread: the slabs that take the ring from slabs_per_worker to cold_slabs_per_worker, at
  // `slabs` (pinned, the executor's), which the worker takes in at the top of its next turn.
  // Once per worker.
  void offer_slabs(char* slabs);

 private:
  enum class Stage { free, copy_to_host, io, copy_to_device };

  // One piece in a slot, with its place in the slab.
  struct Piece {
    Chunk chunk;
    ChunkPlan plan;
    char* mem = nullptr;   // where the piece's blocks start in the slab
    int segs_pending = 0;
    uint64_t got = 0;
    Error err;
    bool copying = false;  // its copy to the GPU runs with the slot's
    WindowLease window;    // held: the copy reads a page-cache window, not the slab
  };

  struct Slot {
    char* slab = nullptr;
    Stage stage = Stage::free;
    Piece pieces[kMaxPack];
    unsigned count = 0;       // pieces in the slot
    unsigned io_pending = 0;  // pieces whose kernel IO is not finished
    cuda::CUcontext ctx = nullptr;
  };

  // CUDA resources of one context: a stream, and an event per slot that has copied in it; the
  // events are destroyed first, then the stream, then the context let go (ContextStream).
  struct ContextRes {
    ContextRes() = default;
    ~ContextRes();
    ContextRes(ContextRes&&) noexcept = default;
    ContextRes& operator=(ContextRes&&) = delete;  // would drop the events it replaced

    cuda::ContextStream stream;
    std::vector<cuda::CUevent> events;
  };

  void take_offered_slabs();
  bool fill_free_slots();
  bool claim_next(Chunk* out);
  void start(unsigned i, const Chunk& c);
  // A read of cached bytes whose page-cache window is made: its copy takes them straight out of
  // the window (exec/cache_windows.hpp), with no kernel read. False when no window serves it.
  bool start_from_window(unsigned i, const Chunk& c);
  bool add_piece(Slot& s, const Chunk& c, uint64_t at);
  void issue_all(unsigned i);
  void issue(unsigned i, unsigned p, int seg);
  // A write to a file in memory, synchronously and one writer at a time (pwrite_in_turn).
  void write_in_turn(const io::Op& op, std::mutex& turn);
  unsigned reap(bool wait);
  void on_io(uint64_t tag, int res);
  void piece_io_finished(unsigned i, Piece& p);
  void io_finished(unsigned i);
  bool poll_copies();
  bool wait_oldest_copy();
  void copy_finished(unsigned i, cuda::CUresult r);
  // Reports a piece to its job; the slot is free once none is left.
  void report(unsigned i, Piece& p, uint64_t got, Error err);
  Error start_copy_to_host(unsigned i);
  Error start_copies_to_device(unsigned i);
  Error record_copy(unsigned i, ContextRes& res);
  ContextRes* context_res(cuda::CUcontext ctx, Error* err);
  ContextRes* find_res(cuda::CUcontext ctx);

  Executor& owner_;
  ExecutorConfig cfg_;
  int node_ = -1;
  std::vector<int> cpus_;
  uint64_t near_gpus_ = ~uint64_t{0};
  int staging_node_ = -1;
  static constexpr int kNotPinnedYet = 1;
  std::atomic<int> pin_result_{kNotPinnedYet};  // 0 or -errno once pin() ran
  std::unique_ptr<io::Engine> engine_;
  char* slabs_ = nullptr;
  uint64_t slabs_bytes_ = 0;
  bool registered_ = false;
  std::vector<Slot> slots_;
  std::atomic<char*> offered_{nullptr};  // offer_slabs' slabs, until taken
  unsigned cold_pieces_ = 0;             // long pieces read with O_DIRECT so far
  std::vector<ContextRes> contexts_;
  cuda::CUcontext current_ctx_ = nullptr;
  uint64_t copy_seq_ = 0;
  std::vector<uint64_t> copy_order_;  // per slot: sequence number of its pending copy
  std::vector<cuda::CUdeviceptr> batch_dst_, batch_src_;  // a batched copy's arguments
  std::vector<size_t> batch_size_;
};

}  // namespace gpufile::exec
