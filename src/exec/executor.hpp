// The executor: a pool of IO workers that take pieces of the jobs listed with it.
//
// Each worker owns an IO engine (its own io_uring ring), a ring of k pinned staging slabs
// registered with that engine as fixed buffers, and one CUDA stream per context it serves. A
// worker keeps up to k pieces in flight, so the kernel reads piece i+1 while the GPU copies
// piece i out of the slab before it and slab i-1 is recycled. Once long reads go past the page
// cache, every ring grows to cold_slabs_per_worker slabs (deepen_for_cold), unregistered with the
// engine: a disk serves more with more reads in flight, the page cache does not.
//
// There is no queue of pieces. A job is cut once (Job::split) and its pieces are claimed from
// a cursor in the job itself, by any thread: the caller's own (exec/caller.hpp) and, when the
// job is listed here, idle workers. So a caller that runs its own IO takes no lock at all, a
// listed job costs one lock to list and one to retire, and a worker that holds a piece of a
// job takes the next one from the same cursor without the lock. The list is oldest first: no
// job waits behind younger ones.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/settings.hpp"
#include "cuda/memory.hpp"
#include "exec/job.hpp"
#include "exec/placement.hpp"
#include "route/route.hpp"

namespace gpufile::exec {

class Worker;

// ---- fork() ----
// fork() copies only the forking thread, with every lock as it was at that instant: a worker
// that is inside malloc or free, or still starting up or ending (thread set-up and tear-down
// allocate), leaves the allocator's lock held for ever in the child. glibc's malloc takes its
// locks around fork(), but the sanitizers' allocators of GCC 12 (libasan.so.8) do not, and the
// child's next malloc of that size class hangs (tests/fault/test_fork.cpp did, about one run in
// six of scripts/test.sh: its child's new workers stuck in their start-up malloc). So Runtime's
// atfork handlers stop every worker of every executor at a safe point first, where it holds no
// lock and is in no library call:
//   park_workers_for_fork()      returns once each worker is parked (or is the calling thread:
//                                a fork from a completion callback) and no worker thread is
//                                starting or ending. Workers park between two steps of their
//                                loop, with IO possibly in flight in the kernel; they do not
//                                wait for it, so a fork waits for one step, not for the device.
//   resume_workers_after_fork()  in the parent: the workers go on where they stopped.
//   forget_workers_after_fork()  in the child: the executors are left as they are (they have no
//                                threads here; the Runtime leaks its session), and new ones
//                                start from a clean slate.
// A worker that blocks in a CUDA wait (its copy's event) counts as parked meanwhile
// (Executor::WaitOutside): that wait may end only after the forking thread lets go. A copy fenced
// behind the legacy default stream waits for the caller's blocking streams, and their host
// functions may wait for that thread (a cuFile stream op needs Runtime's lock, held across
// fork()): waiting for such a worker to park hung fork() (seen in the seeded simulation, and
// possible on a real GPU alike). It parks on its way out of the wait while a fork is under way.
// The cost to the IO path is one atomic load per turn of a worker's loop, and two uncontended
// locks per blocking wait.
void park_workers_for_fork();
void resume_workers_after_fork();
void forget_workers_after_fork();

struct ExecutorConfig {
  unsigned workers = 4;
  unsigned slabs_per_worker = 4;
  // The ring a worker grows to once long reads go past the page cache (Executor::
  // deepen_for_cold); at most slabs_per_worker: it never grows.
  unsigned cold_slabs_per_worker = 0;
  uint64_t slab_bytes = 4 << 20;
  // The largest piece of an O_DIRECT read into GPU memory (0: a slab): a disk may serve more
  // smaller reads in flight faster than fewer large ones (gpufile.cold_piece_kb).
  uint64_t direct_piece_bytes = 0;
  uint64_t min_chunk_bytes = 256 << 10;  // a request is cut no finer than this (a 4 KiB multiple)
  unsigned ring_depth = 64;
  EnginePolicy engine = EnginePolicy::automatic;
  unsigned cores = 1;  // online CPUs: what the routing shares between callers and workers
  // Where the workers run and their slabs live (placement.hpp): the groups' workers add up to
  // `workers`. Empty: one unplaced group of them all.
  std::vector<WorkerGroup> groups;
};

// Where one worker ended up, for the log and `gpufile check`.
struct WorkerPlace {
  int node = -1;            // the node its group asked for (-1: none)
  std::vector<int> cpus;    // the CPUs it is pinned to (empty: not pinned)
  bool pin_pending = false; // its thread has not pinned itself yet
  int pin_error = 0;        // -errno of a refused pinning
  int staging_node = -1;    // where its first slab page landed (-1: not asked or unknown)
};

class Executor {
 public:
  explicit Executor(const ExecutorConfig& cfg);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Allocates staging memory, sets up engines and starts the workers. The regions of `also`
  // are pinned with the workers' staging, in the same registration, and are the executor's too:
  // they stay until it is destroyed.
  Error start(std::vector<cuda::PinnedRequest>* also = nullptr);
  // What start() spent, in milliseconds: pinning the workers' staging (faulting it in and
  // registering it with the driver), setting up their engines, starting their threads.
  struct StartCosts {
    double staging_ms = 0;      // pinning: the mapping and what `pinning` splits
    cuda::PinnedCosts pinning;  // faulting the pages in, the driver's one registration
    double engines_ms = 0;
    double threads_ms = 0;
  };
  const StartCosts& start_costs() const { return start_costs_; }
  const ExecutorConfig& config() const { return cfg_; }
  // What routing needs to know of these workers for `job`: its length, the workers, cores and
  // piece sizes, and the folio its cache fill goes by. The runtime adds what it knows of the
  // caller (route::LoadFacts' other fields); asynchronous IO goes by these alone.
  route::LoadFacts load_facts(const Job& job) const;
  // The largest piece of a staged read of cached bytes (not O_DIRECT, not a cache fill) into
  // GPU memory, below a slab; 0: a slab. Set where other GPUs' staging shares the host's memory
  // (exec::shared_piece_bytes), so that the pieces in flight stay in the last-level cache.
  void set_shared_piece(uint64_t bytes) { shared_piece_.store(bytes, std::memory_order_relaxed); }
  uint64_t shared_piece() const { return shared_piece_.load(std::memory_order_relaxed); }
  // Asynchronous IO: spreads each job over every worker and lists them all at once (so that
  // small reads submitted together can share a worker's slab). Jobs must stay alive until they
  // complete.
  void submit(Job* const* jobs, size_t n);
  void submit(Job* job) { submit(&job, 1); }
  // Lists split jobs so that workers take their pieces, and wakes up to `wake` sleeping ones.
  // Jobs must stay alive until they complete.
  void publish(Job* const* jobs, size_t n, unsigned wake);
  void publish(Job* job, unsigned wake);
  // Takes a job off the list; whoever claims its last piece calls this (Job::claim).
  void retire(Job* job);
  // Workers asleep for want of work (a hint: it changes under the reader).
  unsigned idle_workers() const { return idle_.load(std::memory_order_relaxed); }

  const std::string& engine_name() const { return engine_name_; }
  // Each worker's place, in worker order (set by start()).
  std::vector<WorkerPlace> places() const;
  // Why the engine is not io_uring, or empty.
  const std::string& engine_note() const { return engine_note_; }

  // Worker side: claims a piece of the oldest listed job that has one left, preferring among the
  // first kPackScan listed jobs one into memory of a GPU in `near_gpus` (a bit per ordinal) or
  // into host memory; all bits set: the oldest, whatever its GPU.
  bool claim_listed(Chunk* out, uint64_t near_gpus = ~uint64_t{0});
  // A read into GPU memory of at most `max_len` bytes, whole in one piece and with no copy
  // fence: a worker packs such reads into one slab and copies them with one batched copy.
  static bool packable(const Job& job, uint64_t max_len);
  // Claims the whole of the oldest listed packable job for context `ctx` whose blocks take at
  // most `room` slab bytes, looking at the first kPackScan listed jobs only.
  bool claim_packable(Chunk* out, cuda::CUcontext ctx, uint64_t max_len, uint64_t room);
  static constexpr unsigned kPackScan = 64;
  // Worker side, once a worker has read kColdPiecesBeforeDeeper long pieces with O_DIRECT: gives
  // every worker cold_slabs_per_worker slabs, pinned in one registration (on the calling thread,
  // with `ctx` current), the first time any worker asks; later calls return at once. Reads past
  // the page cache wait for the disk, which on the lent machines' virtual disks serves more
  // with more reads in flight, while reads from the page cache gain nothing from a deeper ring
  // and a first load would wait for its pinning (docs/performance.md, "Checkpoints"): so the ring
  // starts small and grows only when the disk is what reads wait for. A failure leaves the
  // rings as they are (logged once).
  void deepen_for_cold(cuda::CUcontext ctx);
  // Blocks until a job is listed or a fork is pending (true), or the executor stops with none
  // listed (false).
  bool wait_for_work();
  // Called by a worker at the top of its loop, holding nothing: parks while a fork is pending.
  void safe_point() {
    if (fork_pending_.load(std::memory_order_acquire)) park();
  }
  // The worker's last call: waits there (parked) until the destructor lets it end.
  void exit_point();
  // Held by a worker around a wait that only other threads can end (fork() above): it counts as
  // parked meanwhile, and parks on its way out while a fork is under way.
  class WaitOutside {
   public:
    explicit WaitOutside(Executor& e);
    ~WaitOutside();
    WaitOutside(const WaitOutside&) = delete;
    WaitOutside& operator=(const WaitOutside&) = delete;

   private:
    Executor& e_;
  };

 private:
  friend void park_workers_for_fork();
  friend void resume_workers_after_fork();
  friend void forget_workers_after_fork();
  // Set while a fork is under way.
  static inline std::atomic<bool> fork_pending_{false};
  void park();
  // Whether a fork may go on as far as this executor is concerned (the gate's lock held).
  bool quiet_for_fork() const;

  // How many of `packable` small reads published at once each woken worker packs, and how many
  // workers that takes.
  struct PackPlan {
    unsigned per_worker = 0;
    unsigned workers = 0;
  };
  PackPlan plan_packing(unsigned packable) const;

  ExecutorConfig cfg_;
  StartCosts start_costs_;
  std::string engine_name_;
  std::string engine_note_;
  void unlink(Job* job);  // mu_ held
  // Takes the next piece of listed `job` (mu_ held), unlinking it once its last piece is taken.
  bool take_listed(Job* job, Chunk* out);

  std::mutex mu_;
  std::condition_variable cv_;
  Job* head_ = nullptr;  // listed jobs, oldest first (guarded by mu_)
  Job* tail_ = nullptr;
  bool stopping_ = false;
  std::atomic<unsigned> idle_{0};
  std::atomic<uint64_t> shared_piece_{0};
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<std::thread> threads_;
  std::vector<cuda::PinnedBlock> staging_;  // the workers' slabs are slices of these
  // Set by the first deepen_for_cold; the blocks are written by that call alone and freed after
  // the workers are joined.
  std::atomic<bool> deepened_{false};
  std::vector<cuda::PinnedBlock> cold_staging_;

  // Guarded by the fork gate's lock (executor.cpp).
  unsigned alive_ = 0;     // worker threads created and not yet joined
  unsigned parked_ = 0;    // of those, parked (in safe_point, exit_point or a WaitOutside)
  unsigned at_exit_ = 0;   // of those, waiting in exit_point
  bool ending_ = false;    // the destructor let them end and joins them: forks wait
};

}  // namespace gpufile::exec
