#include "exec/executor.hpp"

#include <algorithm>
#include <new>
#include <vector>

#include "core/align.hpp"
#include "core/laps.hpp"
#include "core/log.hpp"
#include "cuda/memory.hpp"
#include "sys/os.hpp"
#include "exec/worker.hpp"
#include "route/route.hpp"

namespace gpufile::exec {

// ---- the fork gate (see executor.hpp) -------------------------------------------------------------
//
// The window it closes, as it was hit (gdb on a hung child of tests/fault/test_fork.cpp, ASan
// build): the test opens the driver (the executor starts its worker threads and returns) and
// reads 9 MiB; on a loaded machine one or two workers move every chunk while another worker
// thread has not yet been scheduled through its start-up. The read completes, the test forks,
// and at that instant the late worker is inside libasan's thread start-up
// (AsanThread::Init -> pthread_getattr_np -> free/calloc -> SizeClassAllocator64::
// GetFromAllocator), holding the lock of one size class. The child inherits that lock held by a
// thread it does not have; its new session's workers run the same start-up, take the same lock,
// and hang, and the child's read with them. A worker in a malloc or free of its own (a deque
// node, a batch completion deleting its Io) or ending (thread tear-down frees) opens the same
// window. Hence: every worker parked at a safe point, none starting or ending, across fork().

namespace {

// Lock order: Runtime::mu_, then the gate's mu, then an executor's mu_.
struct ForkGate {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Executor*> executors;  // every executor alive
};

ForkGate& gate() {
  static ForkGate* g = new ForkGate();  // never destroyed, like the Runtime
  return *g;
}

// The executor whose worker this thread is, if any.
thread_local const Executor* t_worker_of = nullptr;

}  // namespace

void park_workers_for_fork() {
  ForkGate& g = gate();
  std::unique_lock gl(g.mu);
  Executor::fork_pending_.store(true, std::memory_order_seq_cst);
  // Workers asleep for want of work wake up and park (under their executor's lock, so that no
  // wake-up is lost between a worker's check of the flag and its sleep).
  for (Executor* e : g.executors) {
    { std::lock_guard lock(e->mu_); }
    e->cv_.notify_all();
  }
  g.cv.wait(gl, [&] {
    return std::all_of(g.executors.begin(), g.executors.end(),
                       [](const Executor* e) { return e->quiet_for_fork(); });
  });
  // Held across fork(): no executor starts a thread or lets one end meanwhile.
  gl.release();
}

void resume_workers_after_fork() {
  ForkGate& g = gate();
  Executor::fork_pending_.store(false, std::memory_order_seq_cst);
  g.cv.notify_all();
  g.mu.unlock();
}

void forget_workers_after_fork() {
  // The child starts from a new gate, made in place without destroying the old one (and
  // without allocating: another thread of the parent may have held the allocator's lock). The
  // old lock is held across fork(), and the old condition variable still counts the parent's
  // parked workers as waiters, which glibc's would wait for. The parent's executors, left out
  // of the list here, stay as they are, never touched again (Runtime leaks their session).
  // t_worker_of may still name one of them: no executor of the child can have its address.
  new (&gate()) ForkGate();
  Executor::fork_pending_.store(false, std::memory_order_seq_cst);
}

bool Executor::quiet_for_fork() const {
  if (ending_) return false;  // threads in tear-down: wait until they are joined
  // The calling thread may be one of this executor's workers (a fork from a completion
  // callback): it is not parked, and need not be.
  return parked_ + (t_worker_of == this ? 1u : 0u) >= alive_;
}

void Executor::park() {
  ForkGate& g = gate();
  std::unique_lock gl(g.mu);
  ++parked_;
  g.cv.notify_all();
  g.cv.wait(gl, [] { return !fork_pending_.load(std::memory_order_seq_cst); });
  --parked_;
}

Executor::WaitOutside::WaitOutside(Executor& e) : e_(e) {
  ForkGate& g = gate();
  std::lock_guard gl(g.mu);
  ++e_.parked_;
  g.cv.notify_all();  // a fork may be waiting for this worker
}

Executor::WaitOutside::~WaitOutside() {
  ForkGate& g = gate();
  std::unique_lock gl(g.mu);  // held by a fork under way: waits here until it is done
  g.cv.wait(gl, [] { return !fork_pending_.load(std::memory_order_seq_cst); });
  --e_.parked_;
}

void Executor::exit_point() {
  ForkGate& g = gate();
  std::unique_lock gl(g.mu);
  ++parked_;
  ++at_exit_;
  g.cv.notify_all();
  g.cv.wait(gl, [&] { return ending_; });
  --parked_;
  --at_exit_;
}

// ---- the executor ---------------------------------------------------------------------------------

Executor::Executor(const ExecutorConfig& cfg) : cfg_(cfg) {
  ForkGate& g = gate();
  std::lock_guard gl(g.mu);
  g.executors.push_back(this);
}

Executor::~Executor() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  ForkGate& g = gate();
  {
    // Every worker finishes its work and waits in exit_point (where a fork may still go on: it
    // counts as parked); only then are they let go, and forks wait until they are joined.
    std::unique_lock gl(g.mu);
    g.cv.wait(gl, [&] { return at_exit_ == alive_; });
    ending_ = true;
    g.cv.notify_all();
  }
  for (std::thread& t : threads_) t.join();
  {
    std::lock_guard gl(g.mu);
    alive_ = 0;
    ending_ = false;
    // (A forked child's gate does not list its parent's executors.)
    auto it = std::find(g.executors.begin(), g.executors.end(), this);
    if (it != g.executors.end()) g.executors.erase(it);
  }
  g.cv.notify_all();
  workers_.clear();  // their engines unregister the slabs from the kernel before the memory goes
  for (const cuda::PinnedBlock& b : staging_) cuda::free_pinned(b.base, b.bytes);
  for (const cuda::PinnedBlock& b : cold_staging_) cuda::free_pinned(b.base, b.bytes);
}

Error Executor::start(std::vector<cuda::PinnedRequest>* also) {
  // Pinning the staging slabs is most of what opening costs (on the H100 machine 100-170 ms for
  // 12-16 workers through cuMemHostAlloc, 23-29 ms with the huge pages of cuda::alloc_pinned).
  // Tried and measured there (docs/performance.md, "Where the defaults come from"): setting the
  // workers up on parallel threads did not shorten the open, and setting all but the first up
  // in the background while IO already ran did not make a first 7.8 GB load any faster. What
  // does help (H200, same section): faulting every worker's pages in on a thread each, then
  // registering them all in one call on this thread (cuda::alloc_pinned_many). Making each
  // worker's engine on the thread that faulted its slabs in did not shorten the open either
  // (H200, 6.1-7.5 ms against 6.3-6.9: the faulting took the engines' 1 ms longer; docs/
  // performance.md, "Warm first load"). (The workers'
  // threads still start in the background: a fork() right after the open waits in
  // park_workers_for_fork() until each has started and parked.)
  std::vector<WorkerGroup> groups = cfg_.groups;
  if (groups.empty()) groups.push_back(WorkerGroup{-1, {}, ~uint64_t{0}, cfg_.workers});
  std::vector<const WorkerGroup*> group_of;
  for (const WorkerGroup& g : groups) group_of.insert(group_of.end(), g.workers, &g);
  group_of.resize(cfg_.workers, &groups.front());
  std::vector<std::unique_ptr<Worker>> made;
  std::vector<cuda::PinnedRequest> staging;
  for (unsigned i = 0; i < cfg_.workers; ++i) {
    made.push_back(std::make_unique<Worker>(*this, cfg_, *group_of[i]));
    staging.push_back({made.back()->staging_bytes(), made.back()->staging_node_wanted()});
  }
  Laps laps;
  // Other regions go on the first worker's node (near the GPUs when placed), so that one
  // mapping and one registration take them all. The blocks are the executor's, freed after the
  // workers in ~Executor (also when a worker's init fails below).
  const size_t own = staging.size();
  if (also != nullptr)
    for (cuda::PinnedRequest r : *also) {
      r.node = own > 0 ? staging.front().node : r.node;
      staging.push_back(r);
    }
  if (Error e = cuda::alloc_pinned_many(staging, &staging_, &start_costs_.pinning)) return e;
  if (also != nullptr)
    for (size_t i = 0; i < also->size(); ++i) (*also)[i] = staging[own + i];
  start_costs_.staging_ms = laps.lap();
  for (unsigned i = 0; i < cfg_.workers; ++i) {
    std::unique_ptr<Worker>& w = made[i];
    std::string why;
    if (Error e = w->init(staging[i].out, staging[i].landed, &why)) return e;
    if (i == 0) {
      engine_name_ = w->engine_name();
      engine_note_ = why;
    }
    workers_.push_back(std::move(w));
  }
  start_costs_.engines_ms = laps.lap();
  ForkGate& g = gate();
  for (auto& w : workers_) {
    // Under the gate's lock, and not while a fork is under way: a thread is never created while
    // fork() copies the process, and a fork waits for every thread created to park.
    std::unique_lock gl(g.mu);
    g.cv.wait(gl, [] { return !fork_pending_.load(std::memory_order_seq_cst); });
    threads_.emplace_back([this, worker = w.get()] {
      t_worker_of = this;
      worker->pin();
      worker->run();
      exit_point();
    });
    ++alive_;
  }
  start_costs_.threads_ms = laps.lap();
  return Error::none();
}

void Executor::deepen_for_cold(cuda::CUcontext ctx) {
  if (cfg_.cold_slabs_per_worker <= cfg_.slabs_per_worker) return;
  if (deepened_.exchange(true, std::memory_order_acq_rel)) return;
  const unsigned more = cfg_.cold_slabs_per_worker - cfg_.slabs_per_worker;
  std::vector<cuda::PinnedRequest> regions;
  for (const auto& w : workers_) regions.push_back({more * cfg_.slab_bytes, w->staging_node_wanted()});
  Laps laps;
  Error e;
  {
    cuda::ScopedContext current(ctx);  // the registration needs a context; any will do (portable)
    e = cuda::alloc_pinned_many(regions, &cold_staging_);
  }
  const double mib = static_cast<double>(more * cfg_.slab_bytes * workers_.size()) / (1 << 20);
  if (e) {
    GPUFILE_LOG(LogLevel::warn, "reads past the page cache keep %u slabs per worker: pinning %.0f MiB more failed: %s",
                cfg_.slabs_per_worker, mib, describe(e).c_str());
    return;
  }
  for (size_t i = 0; i < workers_.size(); ++i) workers_[i]->offer_slabs(static_cast<char*>(regions[i].out));
  GPUFILE_LOG(LogLevel::info, "reads past the page cache: %u slabs per worker from now on (%.0f MiB more pinned in %.1f ms)",
              cfg_.cold_slabs_per_worker, mib, laps.lap());
}

std::vector<WorkerPlace> Executor::places() const {
  std::vector<WorkerPlace> out;
  for (const auto& w : workers_) out.push_back(w->place());
  return out;
}

route::LoadFacts Executor::load_facts(const Job& job) const {
  route::LoadFacts f;
  f.len = job.len;
  f.workers = cfg_.workers;
  f.cores = cfg_.cores;
  f.min_chunk = cfg_.min_chunk_bytes;
  f.slab = cfg_.slab_bytes;
  const uint64_t shared = shared_piece();
  if (shared > 0 && job.staged() && !job.direct && !job.fills_cache) f.slab = std::min(f.slab, shared);
  if (cfg_.direct_piece_bytes > 0 && job.staged() && job.direct && job.kind == sys::IoKind::read)
    f.slab = std::min(f.slab, cfg_.direct_piece_bytes);
  f.fill_folio = job.fills_cache ? sys::Os::kFillFolio : 0;
  return f;
}

void Executor::submit(Job* const* jobs, size_t n) {
  unsigned pieces = 0;  // for the workers to take one by one
  std::vector<Job*> to_list;
  std::vector<Job*> packed;
  to_list.reserve(n);
  for (size_t k = 0; k < n; ++k) {
    Job* job = jobs[k];
    if (job->len == 0) {
      job->split(4096);
      job->chunk_done(job->file_off, 0, 0, Error::none());
      continue;
    }
    job->split(route::plan_for_workers(load_facts(*job), route::Reason::asynchronous).step);
    if (packable(*job, Worker::kPackBytes))
      packed.push_back(job);
    else
      pieces += job->pieces();
    to_list.push_back(job);
  }
  const PackPlan pack = plan_packing(static_cast<unsigned>(packed.size()));
  for (Job* job : packed) job->pack_with = pack.per_worker;
  if (!to_list.empty()) publish(to_list.data(), to_list.size(), pieces + pack.workers);
}

// Small reads submitted together (a batch) are spread over the idle workers rather than packed
// 32 to the first one awake: each worker reads its share and lands it with one copy, all at
// once. At least 8 to a worker, so that a copy's fixed cost is still shared.
Executor::PackPlan Executor::plan_packing(unsigned packable) const {
  constexpr unsigned kMinPerWorker = 8;
  PackPlan p;
  p.per_worker = Worker::kMaxPack;
  if (packable == 0) return p;
  const unsigned idle = std::max(1u, idle_workers());
  p.per_worker = std::clamp((packable + idle - 1) / idle, kMinPerWorker, Worker::kMaxPack);
  p.workers = (packable + p.per_worker - 1) / p.per_worker;
  return p;
}

void Executor::publish(Job* job, unsigned wake) { publish(&job, 1, wake); }

void Executor::publish(Job* const* jobs, size_t n, unsigned wake) {
  unsigned idle;
  {
    std::lock_guard lock(mu_);
    for (size_t k = 0; k < n; ++k) {
      Job* job = jobs[k];
      job->listed_by_ = this;
      job->listed_ = true;
      job->list_prev_ = tail_;
      job->list_next_ = nullptr;
      (tail_ ? tail_->list_next_ : head_) = job;
      tail_ = job;
    }
    idle = idle_.load(std::memory_order_relaxed);
  }
  // As many sleeping workers as there are pieces for them: a worker woken with nothing left to
  // take costs a futex round trip and, in a VM, an interrupt to another core.
  for (unsigned k = 0; k < std::min(wake, idle); ++k) cv_.notify_one();
}

void Executor::unlink(Job* job) {
  if (!job->listed_) return;
  (job->list_prev_ ? job->list_prev_->list_next_ : head_) = job->list_next_;
  (job->list_next_ ? job->list_next_->list_prev_ : tail_) = job->list_prev_;
  job->list_prev_ = job->list_next_ = nullptr;
  job->listed_ = false;
}

void Executor::retire(Job* job) {
  std::lock_guard lock(mu_);
  unlink(job);
}

bool Executor::take_listed(Job* job, Chunk* out) {
  uint32_t k;
  if (!job->take(&k)) {
    unlink(job);  // every piece taken; its last claimer may not have retired it yet
    return false;
  }
  if (k + 1 == job->pieces_) unlink(job);  // its last piece: Job::claim's rule, lock held
  *out = job->piece(k);
  return true;
}

bool Executor::claim_listed(Chunk* out, uint64_t near_gpus) {
  std::lock_guard lock(mu_);
  if (near_gpus != ~uint64_t{0}) {
    // A worker placed near some GPUs takes their IO first; none such listed, it helps with the
    // others (below), so no job waits for want of a worker near its GPU.
    unsigned seen = 0;
    for (Job* job = head_; job != nullptr && seen < kPackScan; ++seen) {
      Job* next = job->list_next_;
      const int gpu = job->staged() ? job->mem.device : -1;
      const bool near = gpu < 0 || (gpu < 64 && (near_gpus >> gpu & 1));
      if (near && take_listed(job, out)) return true;
      job = next;
    }
  }
  while (Job* job = head_)
    if (take_listed(job, out)) return true;
  return false;
}

bool Executor::packable(const Job& job, uint64_t max_len) {
  return job.kind == sys::IoKind::read && job.staged() && job.pieces() == 1 && job.len <= max_len &&
         job.after == nullptr;
}

bool Executor::claim_packable(Chunk* out, cuda::CUcontext ctx, uint64_t max_len, uint64_t room) {
  constexpr uint64_t kPage = 4096;
  std::lock_guard lock(mu_);
  unsigned seen = 0;
  for (Job* job = head_; job != nullptr && seen < kPackScan; job = job->list_next_, ++seen) {
    if (!packable(*job, max_len) || job->mem.context != ctx) continue;
    if (align_up(job->end(), kPage) - align_down(job->file_off, kPage) > room) continue;
    uint32_t k;
    if (!job->take(&k)) continue;  // (taken already: its claimer retires it)
    unlink(job);                   // its only piece
    *out = job->piece(k);
    return true;
  }
  return false;
}

bool Executor::wait_for_work() {
  std::unique_lock lock(mu_);
  idle_.fetch_add(1, std::memory_order_relaxed);
  cv_.wait(lock, [&] {
    return stopping_ || head_ != nullptr || fork_pending_.load(std::memory_order_relaxed);
  });
  idle_.fetch_sub(1, std::memory_order_relaxed);
  return head_ != nullptr || !stopping_;
}

}  // namespace gpufile::exec
