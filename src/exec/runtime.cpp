#include "exec/runtime.hpp"

#include <fcntl.h>
#include <pthread.h>

#include <climits>
#include <new>
#include <optional>
#include <vector>

#include "core/align.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "exec/caller.hpp"
#include "exec/driver_state.hpp"
#include "exec/gather.hpp"
#include "exec/session.hpp"

namespace gpufile {

Io::~Io() {
  fence_.reset();  // before the in-flight counts drop: a driver close may be waiting on them
  if (file_) drop(file_->inflight);
  if (buffer_) drop(buffer_->inflight);
  file_.reset();
  buffer_.reset();
  if (session_) drop(session_->inflight);
}

// ---- Runtime: session lifetime ---------------------------------------------------------------------

Runtime& Runtime::instance() {
  // Never destroyed: static destructors may still call in, and the CUDA driver may already be
  // gone at exit (the crashes other cuFile users hit there).
  static Runtime* r = new Runtime();
  return *r;
}

Runtime::Runtime() {
  pthread_atfork([] { instance().before_fork(); }, [] { instance().after_fork_in_parent(); },
                 [] { instance().after_fork_in_child(); });
}

// The lock is held across fork() so the child gets it in a known state (and no session opens
// or closes meanwhile); then the IO workers park where they hold no lock (executor.hpp says
// why: a worker inside the allocator at fork() time hung the child). IO in flight goes on
// after the fork in the parent.
void Runtime::before_fork() {
  mu_.lock();
  exec::park_workers_for_fork();
  // A child copied while the session's question to NVML is out would find NVML's locks held
  // by a thread it does not have, and hang in its first NVML call.
  if (session_ && session_->sharing) session_->sharing->settle(std::chrono::seconds(2));
}

void Runtime::after_fork_in_parent() {
  exec::resume_workers_after_fork();
  mu_.unlock();
}

void Runtime::after_fork_in_child() {
  exec::forget_workers_after_fork();
  cuda::forget_driver_after_fork();
  if (session_) {
    // Its workers do not exist here and its locks may be held by threads that do not either:
    // leak it rather than run its destructor. Into static storage, not the heap: nothing here
    // may allocate (a user thread of the parent may have been inside malloc, and the sanitizer
    // allocators do not reset their locks in a child). A later fork of this child overwrites
    // the slot with its own session, leaking this one for good.
    alignas(std::shared_ptr<Session>) static unsigned char leaked[sizeof(std::shared_ptr<Session>)];
    new (leaked) std::shared_ptr<Session>(std::move(session_));
    use_count_ = 0;
  }
  mu_.unlock();
}

Error Runtime::open_locked() {
  if (session_) return Error::none();
  auto s = std::make_shared<Session>();
  s->settings = config::resolve_for_open();
  if (!s->settings.allow_compat_mode) {
    // gpufile has no nvidia-fs / P2PDMA path: every byte is staged through host memory, which
    // is what cuFile calls compatibility mode. Refuse, as NVIDIA's library does without
    // nvidia-fs, rather than silently doing what the configuration forbids.
    GPUFILE_LOG(LogLevel::error,
                "properties.allow_compat_mode is false, but this machine has no GPUDirect "
                "Storage path (gpufile stages through host memory): driver not opened");
    return Error::of(Errc::driver_not_open);
  }
  if (Error e = start_session(*s)) {
    GPUFILE_LOG(LogLevel::error, "driver open failed: %s", describe(e).c_str());
    return e;
  }
  session_ = std::move(s);
  return Error::none();
}

Error Runtime::open() {
  std::lock_guard lock(mu_);
  if (Error e = open_locked()) return e;
  ++use_count_;
  return Error::none();
}

Error Runtime::ensure_open() {
  std::lock_guard lock(mu_);
  if (session_) return Error::none();
  if (Error e = open_locked()) return e;
  ++use_count_;
  return Error::none();
}

Error Runtime::close() {
  std::shared_ptr<Session> closing;
  {
    std::lock_guard lock(mu_);
    if (!session_) return Error::of(Errc::driver_not_open);
    if (--use_count_ > 0) return Error::none();
    closing = std::move(session_);
  }
  // IO already admitted finishes first; its handles and buffers go with the session, which is
  // destroyed here, on the closing thread (see Io::session_), with a context current so that
  // its staging can be unpinned whichever thread closes.
  wait_for_zero(closing->inflight);
  cuda::ScopedAnyContext ctx;
  closing.reset();
  return Error::none();
}

long Runtime::use_count() const {
  std::lock_guard lock(mu_);
  return use_count_;
}

bool Runtime::is_open() const { return session() != nullptr; }

std::shared_ptr<Session> Runtime::session() const {
  std::lock_guard lock(mu_);
  return session_;
}

Settings Runtime::settings() const {
  auto s = session();
  return s ? s->settings : Settings{};
}

bool Runtime::update_settings(const std::function<void(Settings&)>& fn) {
  std::lock_guard lock(mu_);
  if (!session_) return false;
  fn(session_->settings);
  return true;
}

std::string Runtime::engine_name() const {
  auto s = session();
  return s ? s->exec->engine_name() : std::string();
}

std::string Runtime::engine_note() const {
  auto s = session();
  return s ? s->exec->engine_note() : std::string();
}

std::vector<std::string> Runtime::placement() const {
  auto s = session();
  return s ? describe_placement(*s) : std::vector<std::string>();
}

bool driver_is_open() { return Runtime::instance().is_open(); }

bool with_open_settings(const std::function<void(Settings&)>& fn) {
  return Runtime::instance().update_settings(fn);
}

// ---- IO ------------------------------------------------------------------------------------------

const struct stat* Runtime::SeenFiles::find(const void* h) const {
  for (unsigned k = 0; k < count; ++k)
    if (handle[k] == h) return &st[k];
  return nullptr;
}

void Runtime::SeenFiles::add(const void* h, const struct stat& s) {
  if (count == kMax) return;
  handle[count] = h;
  st[count++] = s;
}

Error Runtime::prepare(sys::IoKind kind, void* handle, const void* base, uint64_t size,
                       int64_t file_offset, int64_t buffer_offset, std::unique_ptr<Io>* out,
                       const cuda::MemInfo* base_mem, SeenFiles* seen) {
  auto io = std::make_unique<Io>();
  // With base_mem this is a piece of a CUDA-stream op (capi/stream.cpp), not a user call: the
  // call counters do not count those, nor do the latency histograms and device rows.
  io->started_ = base_mem == nullptr ? stats::call_started() : 0;
  std::shared_ptr<Session> s;
  {
    std::lock_guard lock(mu_);
    // Handles live in the session: without one no handle is registered, so the call can only
    // fail, and it does so without opening the driver on the way (NVIDIA's library does not
    // either: tests/conformance, section handles). Stream ops (base_mem) say the driver is closed.
    if (!session_ && base_mem == nullptr)
      return handle == nullptr ? Error::sys(EINVAL) : Error::of(Errc::handle_not_registered);
    if (!session_) return Error::of(Errc::driver_not_open);
    s = session_;
    s->inflight.fetch_add(1, std::memory_order_relaxed);
    io->session_ = s.get();  // ~Io gives the count back
  }
  if (handle == nullptr) return Error::sys(EINVAL);
  {
    std::lock_guard lock(s->files_mu);
    auto it = s->files.find(reinterpret_cast<uintptr_t>(handle));
    if (it == s->files.end()) return Error::of(Errc::handle_not_registered);
    io->file_ = it->second;
    io->file_->inflight.fetch_add(1, std::memory_order_relaxed);
  }
  FileHandle& f = *io->file_;
  if (file_offset < 0 || base == nullptr || size > static_cast<uint64_t>(SSIZE_MAX) ||
      size > static_cast<uint64_t>(INT64_MAX - file_offset))
    return Error::of(Errc::invalid_argument);
  if (kind == sys::IoKind::read && f.access == O_WRONLY) return Error::of(Errc::invalid_open_flag);
  if (kind == sys::IoKind::write && f.access == O_RDONLY) return Error::sys(EIO);
  // The fd must still be the file that was registered (closed, or reused for another file?).
  // A failing fstat says why itself (EBADF for a closed fd): an EIO from it is not a closed fd
  // (the seeded simulation, tests/sim, saw EIO reported as EBADF).
  struct stat st {};
  if (const struct stat* known = seen != nullptr ? seen->find(handle) : nullptr) {
    st = *known;
  } else {
    if (int rc = sys::os().fstat(f.user_fd, &st); rc < 0) return Error::sys(-rc);
    if (st.st_dev != f.dev || st.st_ino != f.ino) return Error::sys(EBADF);
    if (seen != nullptr) seen->add(handle, st);
  }

  const uint64_t b = reinterpret_cast<uint64_t>(base);
  {
    std::lock_guard lock(s->buffers_mu);
    auto it = s->buffers.find(b);
    if (it != s->buffers.end()) {
      const BufferRegistration& r = *it->second;
      if (buffer_offset >= 0 && static_cast<uint64_t>(buffer_offset) + size > r.length)
        return Error::of(Errc::mapping_range);
      io->buffer_ = it->second;
      io->buffer_->inflight.fetch_add(1, std::memory_order_relaxed);
    }
  }
  if (base_mem == nullptr && io->buffer_) base_mem = &io->buffer_->mem;
  exec::Job& job = io->job;
  job.kind = kind;
  job.file = f.ref;
  job.addr = b + static_cast<uint64_t>(buffer_offset);
  job.file_off = static_cast<uint64_t>(file_offset);
  job.len = size;
  job.file_size = static_cast<uint64_t>(st.st_size);
  if (base_mem != nullptr) job.mem = *base_mem;
  else if (Error e = cuda::classify(reinterpret_cast<void*>(job.addr), &job.mem)) return e;
  if (job.mem.range_size != 0 && (job.addr < job.mem.range_start ||
                                  job.addr + size > job.mem.range_start + job.mem.range_size))
    return Error::of(Errc::pointer_range);
  if (job.mem.kind == cuda::MemKind::host_pageable && !s->settings.allow_system_memory)
    return Error::of(Errc::memory_type_invalid);
  // The route (O_DIRECT or the page cache, which threads) is chosen when the IO starts: by
  // then the page cache and the load may have changed.
  *out = std::move(io);
  return Error::none();
}

namespace {

stats::Path path_of(const exec::Job& j, bool one_piece_on_caller) {
  if (one_piece_on_caller) return stats::Path::small_io;
  const bool direct = j.direct && j.file.fd_direct >= 0;
  if (!direct) return stats::Path::page_cache;
  return j.staged() ? stats::Path::staged_direct : stats::Path::host_direct;
}

// The device row of the Io's memory: its GPU, or -1 for host memory.
int device_of(const exec::Job& j) { return j.mem.needs_staging() ? j.mem.device : -1; }

// Counts a finished Io's bytes under the path they took, and which threads moved them; its
// latency goes under the path that carried most of its bytes.
void record(const Io& io, const IoResult& r, bool one_piece_on_caller, uint64_t caller_bytes) {
  auto op = io.job.kind == sys::IoKind::read ? stats::Op::read : stats::Op::write;
  const uint64_t dma = std::min(r.bytes, io.job.window_bytes.load(std::memory_order_relaxed));
  const stats::Path other = path_of(io.job, one_piece_on_caller);
  const stats::Path most = dma >= r.bytes - dma && dma > 0 ? stats::Path::page_cache_dma : other;
  stats::record_finished(op, most, device_of(io.job), r.bytes, io.started(), r.ok());
  if (!r.ok() || r.bytes == 0) return;
  if (dma > 0) stats::record_path(op, stats::Path::page_cache_dma, dma);
  if (r.bytes > dma) stats::record_path(op, other, r.bytes - dma);
  stats::record_runners(op, caller_bytes, r.bytes - std::min(caller_bytes, r.bytes));
}

}  // namespace

// A call on GPU memory comes after the work its caller queued on the legacy default stream, as
// cudaMemcpy does: a cuMemsetD8, or a cuMemcpyHtoD from pageable memory, may return before its
// bytes land, and a cuFileWrite (or a batch write submitted) right after must write the new
// bytes (and a read's bytes must not be overwritten by that work). Pieces run on the caller's
// thread get this from their blocking streams (exec/caller.hpp). The workers' streams cannot be
// blocking ones (a stream op queued on the legacy stream waits for them: neither could go
// first), so when the legacy stream has work pending, an event recorded behind it is what every
// copy of the job waits for (Job::after). The fence lives as long as the Io that waits on it.
class LegacyStreamFence {
 public:
  // Null when the context's legacy stream is idle, or when no event could be made and this
  // thread waited for the stream instead (which orders the same way).
  static std::shared_ptr<LegacyStreamFence> behind(cuda::CUcontext ctx) {
    const cuda::Driver* d = cuda::driver();
    if (d == nullptr) return nullptr;
    cuda::ScopedContext current(ctx);
    if (d->StreamQuery(nullptr) != cuda::CUDA_ERROR_NOT_READY) return nullptr;  // idle (or broken)
    cuda::CUevent e = nullptr;
    if (d->EventCreate(&e, cuda::CU_EVENT_DISABLE_TIMING) == cuda::CUDA_SUCCESS) {
      if (d->EventRecord(e, nullptr) == cuda::CUDA_SUCCESS)
        return std::make_shared<LegacyStreamFence>(ctx, e);
      d->EventDestroy(e);
    }
    d->StreamSynchronize(nullptr);
    return nullptr;
  }
  LegacyStreamFence(cuda::CUcontext ctx, cuda::CUevent e) : ctx_(ctx), event_(e) {}
  ~LegacyStreamFence() {
    cuda::ScopedContext current(ctx_);  // an Io may end on a thread without the context
    cuda::driver()->EventDestroy(event_);
  }
  LegacyStreamFence(const LegacyStreamFence&) = delete;
  LegacyStreamFence& operator=(const LegacyStreamFence&) = delete;
  cuda::CUevent event() const { return event_; }

 private:
  cuda::CUcontext ctx_;
  cuda::CUevent event_;
};

namespace {

// Fences the Io's job behind its context's legacy stream, if it is staged: one query per
// context for all the Ios of one submission (`memo`).
using FenceMemo = std::vector<std::pair<cuda::CUcontext, std::shared_ptr<LegacyStreamFence>>>;
std::shared_ptr<LegacyStreamFence> fence_for(const exec::Job& job, FenceMemo* memo) {
  if (!job.staged()) return nullptr;
  for (const auto& [ctx, fence] : *memo)
    if (ctx == job.mem.context) return fence;
  memo->emplace_back(job.mem.context, LegacyStreamFence::behind(job.mem.context));
  return memo->back().second;
}

// Counts synchronous calls in Runtime::run while they run (the routing's `callers`).
class CallerCount {
 public:
  explicit CallerCount(std::atomic<int>& n)
      : n_(n), now_(n.fetch_add(1, std::memory_order_relaxed) + 1) {}
  ~CallerCount() { n_.fetch_sub(1, std::memory_order_relaxed); }
  unsigned now() const { return static_cast<unsigned>(now_); }

 private:
  std::atomic<int>& n_;
  int now_;
};

// Reads of up to this many slabs make the page-cache windows they want (on the caller's thread,
// copying out of each as it is made); longer reads only use windows already there, and stage
// the rest (exec/cache_windows.hpp, FileWindows::plan_read, says why).
constexpr uint64_t kShortForWindows = 4;

route::LoadFacts load_facts(const Session& s, const exec::Job& job, unsigned callers) {
  const exec::ExecutorConfig& c = s.exec->config();
  route::LoadFacts f = s.exec->load_facts(job);
  f.grid_offset = job.file_off - align_down(job.file_off, job.file.align.offset);
  f.synchronous = true;
  f.staged = job.staged();
  f.small_io_bytes = s.settings.small_io_threshold_kb * 1024;
  f.callers = callers;
  f.idle_workers = s.exec->idle_workers();
  if (f.staged) s.note_long_read(job.len);
  // A read copies out of page-cache windows on its caller's thread when they are all there; a
  // short one also when it is to make them (exec::FileWindows::plan_read): making them one
  // after another on one thread, a long read is better staged meanwhile.
  if (job.windows != nullptr) {
    using Plan = exec::FileWindows::ReadPlan;
    const Plan p = job.windows->plan_read(job.file_off, job.len, job.file_size);
    f.from_page_cache =
        p == Plan::ready || (p == Plan::wanted && job.len <= kShortForWindows * c.slab_bytes);
    // Copies out of windows cross host memory once, cache or not: whole slabs, fewer copies.
    if (f.from_page_cache) f.slab = c.slab_bytes;
    // Where several GPUs share the host, a longer read of bytes read before makes their windows
    // as it goes (route::plan_threads): staging crosses host memory three times a byte, which
    // several GPUs' links outrun (docs/performance.md, "The host model"), while one GPU's link
    // takes staged bytes at 94% of host-to-device and making the windows halves the speed of
    // the reading that makes them. A first reading makes none: registering as it went, a fresh
    // process's read of a warm 4 GiB file ran at 39.9 GiB/s against 46.3 staged (H200).
    f.windows_to_make = !f.from_page_cache && p == Plan::wanted &&
                        s.long_read_makes_windows(job.len, job.mem.device);
  }
  return f;
}

}  // namespace

route::StorageChoice Runtime::route_storage(Io& io) {
  exec::Job& job = io.job;
  FileHandle& f = *io.file_;
  route::StorageFacts facts = storage_facts(io.session_->settings, f, job.kind, job.len);
  ask_residency(f, job.file_off, job.len, facts);
  const route::StorageChoice c = route::choose_storage(facts);
  job.direct = c.direct;
  // The fill reads a little around what is asked, as readahead does; gpufile's own page-cache
  // descriptor has readahead off so that no read of it races the handle's O_DIRECT writes
  // (registry.cpp), so only handles that cannot write fill.
  job.fills_cache = c.why == route::Reason::not_cached_kept && f.access == O_RDONLY;
  job.guess = c.guessed ? &f.guess : nullptr;
  job.windows = route::copies_from_cache(facts, c, job.staged()) ? f.windows.get() : nullptr;
  job.makes_windows = job.len <= kShortForWindows * io.session_->exec->config().slab_bytes;
  if (job.windows != nullptr) job.windows->take_changes();
  return c;
}

namespace {

// The bytes an IO must move to be complete: a read stops at the end of the file.
uint64_t expected_bytes(const exec::Job& job) {
  if (job.kind == sys::IoKind::write) return job.len;
  return job.in_file(job.file_off, job.len);
}

}  // namespace

std::optional<IoResult> Runtime::run_vendor(Io& io) {
  exec::Job& job = io.job;
  FileHandle& f = *io.file_;
  vendor::Driver& nvidia = *io.session_->vendor;
  // NVIDIA's registration is by base address: name the registered base and the offset into it.
  const uint64_t base = io.buffer_ ? io.buffer_->base : job.addr;
  const off_t buffer_offset = static_cast<off_t>(job.addr - base);
  const off_t file_offset = static_cast<off_t>(job.file_off);
  cuda::ScopedContext current(job.mem.context);
  // gpufile's calls come after the work queued on the legacy default stream (LegacyStreamFence
  // above); NVIDIA's DMA waits for no stream, so that work is waited for here.
  if (const cuda::Driver* d = cuda::driver(); d && d->StreamQuery(nullptr) == cuda::CUDA_ERROR_NOT_READY)
    d->StreamSynchronize(nullptr);
  vendor::Outcome out =
      job.kind == sys::IoKind::read
          ? nvidia.read(*f.vendor, reinterpret_cast<void*>(base), job.len, file_offset, buffer_offset)
          : nvidia.write(*f.vendor, reinterpret_cast<const void*>(base), job.len, file_offset,
                         buffer_offset);
  if (out.ok && out.bytes < expected_bytes(job)) {
    out.ok = false;
    out.error = "moved " + std::to_string(out.bytes) + " of " + std::to_string(expected_bytes(job)) + " bytes";
  }
  if (out.ok) {
    const auto op = job.kind == sys::IoKind::read ? stats::Op::read : stats::Op::write;
    stats::record_path(op, stats::Path::vendor, out.bytes);
    stats::record_runners(op, out.bytes, 0);
    return IoResult{out.bytes, Error::none()};
  }
  // Whatever NVIDIA moved is moved again (the same bytes to the same places) by gpufile's own
  // paths, whose result alone is reported: a real disk error fails there too.
  if (!f.vendor_dropped.exchange(true))
    GPUFILE_LOG(LogLevel::warn, "vendor path: NVIDIA's %s failed on %s: %s; gpufile's own paths carry its IO from now on",
                job.kind == sys::IoKind::read ? "cuFileRead" : "cuFileWrite",
                sys::file_name(f.user_fd).c_str(), out.error.c_str());
  return std::nullopt;
}

void Runtime::account(const Io& io, const IoResult& r) { record(io, r, false, 0); }

void Runtime::count_call(sys::IoKind kind, const IoResult& r, uint64_t started) {
  if (started == 0) return;  // begun with stats off: no clock was read for it
  stats::record_call(kind == sys::IoKind::read ? stats::Op::read : stats::Op::write, r.bytes,
                     stats::since(started), r.ok());
}

IoResult Runtime::run_on_this_thread(Io& io) {
  exec::Job& job = io.job;
  if (job.staged()) return {0, Error::of(Errc::internal)};
  if (job.len == 0) return {};
  route_storage(io);
  // Host memory needs no staging: the whole request is one piece, however large.
  job.split(align_up(job.file_off - align_down(job.file_off, job.file.align.offset) + job.len,
                     uint64_t{4096}));
  const uint64_t mine = exec::run_on_caller(job, exec::StagingLease());
  IoResult r = job.result();
  record(io, r, true, mine);
  return r;
}

IoResult Runtime::read_rows(Io& io, const exec::FileRows& rows) {
  if (io.job.len == 0) return {};
  const IoResult r = exec::gather_rows(io.job, rows, io.session_->slabs);
  record(io, r, /*one_piece_on_caller=*/false, r.bytes);  // under the page cache's path
  return r;
}

IoResult Runtime::run(Io& io) {
  if (io.job.len == 0) return {};
  return run_routed(io, route_storage(io));
}

IoResult Runtime::run_routed(Io& io, const route::StorageChoice& storage) {
  exec::Job& job = io.job;
  Session& s = *io.session_;
  CallerCount callers(s.sync_calls);
  if (s.vendor && route::choose_vendor(vendor_facts(s, *io.file_, job, storage, /*synchronous=*/true)).use)
    if (std::optional<IoResult> r = run_vendor(io)) return *r;
  const route::LoadFacts facts = load_facts(s, job, callers.now());
  route::ThreadPlan plan = route::plan_threads(facts);
  exec::StagingLease lease;
  if (plan.runner != route::Runner::workers && job.staged()) {
    exec::StagingPool& pool = plan.why == route::Reason::small_io ? s.small : s.slabs;
    // Growing the pool pins memory, which needs a context: the caller's thread may have none.
    cuda::ScopedContext current(job.mem.context);
    lease = exec::StagingLease(pool, plan.pieces > 1 ? exec::StagingLease::kMaxBuffers : 1);
    if (lease.count() == 0) plan = route::plan_for_workers(facts, route::Reason::no_staging);
  }
  job.split(plan.step);
  job.makes_windows_ahead = plan.make_windows_ahead;  // (no lease: the workers' plan above)
  const bool on_caller = plan.runner != route::Runner::workers;
  if (!on_caller || plan.helpers > 0) {
    FenceMemo memo;
    io.fence_ = fence_for(job, &memo);  // until the Io ends: the workers' copies wait on it
    job.after = io.fence_ ? io.fence_->event() : nullptr;
    s.exec->publish(&job, plan.helpers);
  }
  const uint64_t mine = on_caller ? exec::run_on_caller(job, lease) : 0;
  job.wait();
  lease.release();
  IoResult r = job.result();
  record(io, r, on_caller && job.pieces() == 1, mine);
  return r;
}

std::optional<IoResult> Runtime::run_if_vendor(Io& io) {
  Session& s = *io.session_;
  if (!s.vendor || io.job.len == 0) return std::nullopt;
  const route::StorageChoice storage = route_storage(io);
  io.routed_ = true;
  if (!route::choose_vendor(vendor_facts(s, *io.file_, io.job, storage, /*synchronous=*/true)).use)
    return std::nullopt;
  return run_routed(io, storage);
}

void Runtime::submit(Io& io) {
  Io* one = &io;
  submit(&one, 1);
}

void Runtime::submit(Io* const* ios, size_t n) {
  std::vector<exec::Job*> jobs;
  jobs.reserve(n);
  FenceMemo memo;
  for (size_t k = 0; k < n; ++k) {
    if (!ios[k]->routed_) route_storage(*ios[k]);
    if (ios[k]->job.staged()) ios[k]->session_->note_long_read(ios[k]->job.len);
    ios[k]->fence_ = fence_for(ios[k]->job, &memo);
    ios[k]->job.after = ios[k]->fence_ ? ios[k]->fence_->event() : nullptr;
    jobs.push_back(&ios[k]->job);
    // (Ios prepared across a driver close and reopen belong to different sessions.)
    const bool last_of_session = k + 1 == n || ios[k + 1]->session_ != ios[k]->session_;
    if (!last_of_session) continue;
    ios[k]->session_->exec->submit(jobs.data(), jobs.size());
    jobs.clear();
  }
}

IoResult Runtime::read_write(sys::IoKind kind, void* handle, const void* base, uint64_t size,
                             int64_t file_offset, int64_t buffer_offset) {
  std::unique_ptr<Io> io;
  if (Error e = prepare(kind, handle, base, size, file_offset, buffer_offset, &io)) return {0, e};
  return run(*io);
}

}  // namespace gpufile
