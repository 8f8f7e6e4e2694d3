#include "exec/runtime.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <map>
#include <new>
#include <unordered_map>

#include "core/align.hpp"
#include "core/config.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "exec/driver_state.hpp"
#include "exec/executor.hpp"

namespace gpufile {

// ---- registered files ----------------------------------------------------------------------------

struct FileHandle {
  int user_fd = -1;
  dev_t dev = 0;
  ino_t ino = 0;
  int access = O_RDONLY;  // O_RDONLY / O_WRONLY / O_RDWR
  bool user_direct = false;
  int own_buffered = -1;  // fds gpufile opened itself and closes
  int own_direct = -1;
  exec::FileRef ref;
  std::atomic<int> inflight{0};
  // The page-cache guess for small reads (guess_cached, run_inline). True after cachestat last
  // found a read's range all cached: small reads then skip cachestat and read with RWF_NOWAIT,
  // and the first one that finds bytes missing sets it false again. Written only when it
  // changes, so callers on many threads do not bounce its cache line.
  std::atomic<bool> looks_cached{false};
  std::atomic<bool> no_cached_reads{false};  // the file system refused RWF_NOWAIT

  ~FileHandle() {
    if (own_buffered >= 0) sys::os().close(own_buffered);
    if (own_direct >= 0) sys::os().close(own_direct);
  }
};

struct BufferRegistration {
  uint64_t base = 0;
  uint64_t length = 0;
  // What the driver said the memory is when it was registered: the caller promises it stays
  // allocated until deregistered, so IO on it need not ask again (one driver call per IO).
  cuda::MemInfo mem;
  std::atomic<int> inflight{0};
};

namespace {

// Waits until `counter` drops to zero.
void wait_for_zero(const std::atomic<int>& counter) {
  for (int v = counter.load(std::memory_order_acquire); v != 0;
       v = counter.load(std::memory_order_acquire))
    counter.wait(v, std::memory_order_acquire);
}

// Removes and returns the entry under `key`, or an empty value.
template <typename Map>
typename Map::mapped_type take(std::mutex& mu, Map& map, const typename Map::key_type& key) {
  std::lock_guard lock(mu);
  auto it = map.find(key);
  if (it == map.end()) return {};
  auto value = std::move(it->second);
  map.erase(it);
  return value;
}

void drop(std::atomic<int>& counter) {
  if (counter.fetch_sub(1, std::memory_order_acq_rel) == 1) counter.notify_all();
}

// Pinned buffers for IO run on the caller's thread (small IO, and reads up to kCallerReadMax),
// each with a CUDA stream of its own for the copy. Synchronous copies on the legacy default
// stream run one after another whatever thread issues them: a pread + cuMemcpyHtoD loop of
// 4 KiB reads got no more IOPS from 16 threads than from one (H100, docs/performance.md). The
// streams are blocking ones, so a copy still waits for work the caller queued on the legacy
// stream before the call (a cuMemcpyHtoD from pageable memory may return before its data has
// landed: without the wait, a small cuFileWrite right after one wrote the old bytes on the
// H100), while copies of different threads no longer wait for each other.
class CallerPool {
 public:
  struct Buffer {
    char* mem = nullptr;
    cuda::CUcontext ctx = nullptr;  // the context `stream` was made in
    cuda::CUstream stream = nullptr;
  };

  ~CallerPool() {
    const cuda::Driver* d = cuda::driver();
    for (Buffer& b : buffers_) {
      if (b.stream != nullptr && d != nullptr) d->StreamDestroy(b.stream);
      cuda::free_pinned(b.mem, bytes_);
    }
  }
  void init(uint64_t bytes, unsigned count) {
    bytes_ = bytes;
    buffers_.reserve(count);  // never reallocated: free_ points into it
    for (unsigned i = 0; i < count; ++i) {
      void* p = nullptr;
      if (cuda::alloc_pinned(bytes, &p)) break;
      buffers_.push_back(Buffer{static_cast<char*>(p)});
      free_.push_back(&buffers_.back());
    }
  }
  uint64_t bytes() const { return bytes_; }
  Buffer* take() {
    std::lock_guard lock(mu_);
    if (free_.empty()) return nullptr;
    Buffer* b = free_.back();
    free_.pop_back();
    return b;
  }
  void give(Buffer* b) {
    std::lock_guard lock(mu_);
    free_.push_back(b);
  }

 private:
  std::mutex mu_;
  std::vector<Buffer> buffers_;
  std::vector<Buffer*> free_;
  uint64_t bytes_ = 0;
};

// Copies between a caller-thread buffer and the GPU on the buffer's stream (made at first use in
// `ctx`, the current context) and waits for it. A buffer whose stream belongs to another context
// (IO for several GPUs) copies synchronously instead.
Error copy_on_caller_stream(CallerPool::Buffer& b, cuda::CUcontext ctx, bool to_device,
                            cuda::CUdeviceptr dev, char* host, uint64_t n) {
  const cuda::Driver* d = cuda::driver();
  constexpr unsigned kBlockingStream = 0;  // CU_STREAM_DEFAULT: ordered after the legacy stream
  if (b.stream == nullptr && d->StreamCreate(&b.stream, kBlockingStream) == cuda::CUDA_SUCCESS)
    b.ctx = ctx;
  cuda::CUresult r;
  if (b.stream != nullptr && b.ctx == ctx) {
    r = to_device ? d->MemcpyHtoDAsync(dev, host, n, b.stream)
                  : d->MemcpyDtoHAsync(host, dev, n, b.stream);
    // Waited for even after a failed launch: the buffer goes back to the pool next.
    cuda::CUresult w = d->StreamSynchronize(b.stream);
    if (r == cuda::CUDA_SUCCESS) r = w;
  } else {
    r = to_device ? d->MemcpyHtoD(dev, host, n) : d->MemcpyDtoH(host, dev, n);
  }
  return r == cuda::CUDA_SUCCESS ? Error::none() : Error::cu(r);
}

// The largest DIO alignment the staging grid supports; files demanding more use the page cache.
constexpr uint32_t kMaxDioAlign = 4096;

// Reads of up to this size run on the caller's thread, as small IO does (kernel reads, then one
// copy), when cutting them over the workers buys nothing: when the request is one piece anyway,
// or when kBusyCallers synchronous calls run at once, so the callers already keep the machine
// busy and every hand-off to a worker and back is pure delay. Measured on the H100
// (bench/probe_waits.sh, docs/performance.md), warm page cache, GiB/s, caller's thread vs
// workers (the naive pread + copy loop): 256 KiB x 1 thread 4.22 vs 2.24 (4.29); 256 KiB x 4
// 14.94 vs 9.85 (9.44); 1 MiB x 4 18.53 vs 14.65 (15.48); 1 MiB x 8 24.95 vs 14.83 (16.27); but
// one thread's 1 MiB calls go faster cut over the workers: 5.50 vs 7.62 (5.43).
constexpr uint64_t kCallerReadMax = 1 << 20;
constexpr int kBusyCallers = 4;
constexpr uint32_t kPageSize = 4096;

}  // namespace

// ---- the session ----------------------------------------------------------------------------------

struct Session {
  Settings settings;
  std::unique_ptr<exec::Executor> exec;
  CallerPool small;   // staging of small IO on the caller's thread
  CallerPool medium;  // ... and of reads that run there up to kCallerReadMax
  bool gpu = false;
  std::atomic<int> inflight{0};
  std::atomic<int> sync_calls{0};  // synchronous calls in Runtime::run right now

  std::mutex files_mu;
  std::unordered_map<uintptr_t, std::shared_ptr<FileHandle>> files;  // by handle token
  uintptr_t next_token = 0x1000;

  std::mutex buffers_mu;
  std::map<uint64_t, std::shared_ptr<BufferRegistration>> buffers;  // by base address

  ~Session() { exec.reset(); }  // workers stop before the pools they use go away
};

namespace {

// Whether a read of `len` bytes may run on the caller's thread at all (kCallerReadMax).
bool caller_read_allowed(const Session& s, sys::IoKind kind, uint64_t len) {
  return kind == sys::IoKind::read && len <= kCallerReadMax &&
         s.settings.small_io_threshold_kb > 0;  // 0: the caller's thread is off
}

// Whether a read too large for the small-IO path runs on the caller's thread anyway because it
// is one piece.
bool one_piece_read(const Session& s, sys::IoKind kind, uint64_t len) {
  return caller_read_allowed(s, kind, len) && s.exec->chunk_step(len) >= len;
}

// Whether a read too large for the small-IO path runs on the caller's thread, `callers`
// synchronous calls counting this one.
bool read_on_caller(const Session& s, const exec::Job& job, int callers) {
  if (!caller_read_allowed(s, job.kind, job.len)) return false;
  return callers >= kBusyCallers || s.exec->chunk_step(job.len) >= job.len;
}

}  // namespace

Io::~Io() {
  if (file_) drop(file_->inflight);
  if (buffer_) drop(buffer_->inflight);
  file_.reset();
  buffer_.reset();
  if (session_) drop(session_->inflight);
}

namespace {

// Page-cache reads into the GPU are bound by the CPU copy out of the cache (every byte crosses
// memory three times: page cache, slab, DMA), so reaching the PCIe ceiling (about 45-51 GiB/s)
// takes many workers, but not one per core: workers spin while the driver waits for their
// copies, and past the ceiling more of them only burn CPU and crowd the callers' threads.
// Measured on the 16-core H100 machine (bench/probe_workers.sh, docs/performance.md, two rounds,
// warm 4 GiB file / /dev/shm, GiB/s and CPU-s/GiB): 8 workers 47.8-47.9 (0.17) / 39-40;
// 12 workers 45.0-48.5 (0.24-0.26) / 45.2-46.1; 16 workers 44.0-46.6 (0.33-0.35) / 42.8-46.7;
// 1 MiB x 4 calls 16.3-16.5 GiB/s with 12 against 15.2-15.4 with 16. Three per four cores,
// 4 to 16.
size_t automatic_workers() {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const size_t three_quarters = cores > 0 ? static_cast<size_t>(cores) * 3 / 4 : 4;
  return std::clamp<size_t>(three_quarters, 4, 16);
}

exec::ExecutorConfig executor_config(const Settings& s) {
  exec::ExecutorConfig c;
  c.workers = static_cast<unsigned>(s.workers ? s.workers : automatic_workers());
  c.slabs_per_worker = static_cast<unsigned>(std::max<size_t>(2, s.slabs_per_worker));
  c.slab_bytes = std::max<uint64_t>(kMaxDioAlign, align_up(s.slab_size_kb * 1024, kMaxDioAlign));
  c.min_chunk_bytes = align_up(s.min_chunk_kb * 1024, kPageSize);
  c.ring_depth = static_cast<unsigned>(std::max<size_t>(8, s.ring_depth));
  c.engine = s.engine;
  return c;
}

Error start_session(Session& s) {
  s.gpu = cuda::driver() != nullptr;
  if (!s.gpu)
    GPUFILE_LOG(LogLevel::info, "no GPU: host memory only (%s)", cuda::why_no_driver().c_str());
  if (const cuda::Driver* d = s.gpu ? cuda::driver() : nullptr) {
    // Pinned allocations need a current context: use device 0's primary context unless the
    // caller already made one current.
    cuda::CUcontext ctx = nullptr;
    d->CtxGetCurrent(&ctx);
    if (ctx == nullptr) {
      cuda::CUdevice dev = 0;
      d->DeviceGet(&dev, 0);
      if (d->DevicePrimaryCtxRetain(&ctx, dev) == cuda::CUDA_SUCCESS) d->CtxSetCurrent(ctx);
    }
  }
  s.exec = std::make_unique<exec::Executor>(executor_config(s.settings));
  if (Error e = s.exec->start()) return e;
  // At ERROR level so that the default configuration (cuFile's logging.level is ERROR) shows
  // it: losing io_uring is the one fallback an operator must be able to see.
  if (!s.exec->engine_note().empty() && s.settings.engine == EnginePolicy::automatic)
    GPUFILE_LOG(LogLevel::error, "%s", s.exec->engine_note().c_str());
  s.small.init(s.settings.small_io_threshold_kb * 1024 + 2 * kMaxDioAlign, 16);
  // Host memory is read into directly: only GPU memory needs staging.
  if (s.gpu && s.settings.small_io_threshold_kb > 0)
    s.medium.init(kCallerReadMax + 2 * kMaxDioAlign, 16);
  return Error::none();
}

// Opens the file again through /proc, for the access the caller's fd does not give us.
int reopen(int fd, int flags) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
  return sys::os().open(path, flags, 0);
}

// File systems that keep data in memory only: O_DIRECT there is a slower copy of the same
// bytes (measured on /dev/shm: 24.6 GiB/s direct vs 33.4 through the cache, 12 workers).
bool memory_backed(int fd) {
  struct statfs sf {};
  if (fstatfs(fd, &sf) != 0) return false;
  constexpr long kTmpfs = 0x01021994, kRamfs = static_cast<long>(0x858458f6);
  return sf.f_type == kTmpfs || sf.f_type == kRamfs;
}

Error fill_file_ref(FileHandle& h, DirectIoPolicy policy) {
  exec::FileRef& r = h.ref;
  r.fd_buffered = h.user_fd;
  const bool in_memory = memory_backed(h.user_fd);
  if (in_memory) r.write_lock = std::make_shared<std::mutex>();
  if (policy == DirectIoPolicy::automatic && in_memory) policy = DirectIoPolicy::never;
  if (h.user_direct) {
    int fd = reopen(h.user_fd, h.access);
    if (fd >= 0) r.fd_buffered = h.own_buffered = fd;
    // No readahead on our page-cache fd: pages read ahead asynchronously can land in the cache
    // after an O_DIRECT write of the same range has invalidated it, leaving stale data there.
    if (fd >= 0) posix_fadvise(fd, 0, 0, POSIX_FADV_RANDOM);
    // Without a buffered fd of our own, the caller's O_DIRECT fd must serve everything.
    if (policy != DirectIoPolicy::never || fd < 0) r.fd_direct = h.user_fd;
  } else if (policy != DirectIoPolicy::never) {
    int fd = reopen(h.user_fd, h.access | O_DIRECT);
    if (fd >= 0) r.fd_direct = h.own_direct = fd;
  }
  if (r.fd_direct >= 0) {
    sys::DioAlign a;
    int rc = sys::os().dio_align(r.fd_direct, &a);
    if (rc == 0) r.align = a;
    // The split between O_DIRECT and page-cache IO is made at page boundaries, not at the
    // (possibly smaller) DIO alignment: a buffered write of part of a page reads and dirties
    // the whole page, and its later writeback would overwrite bytes an O_DIRECT write put
    // into the same page.
    r.align.offset = std::max<uint32_t>(r.align.offset, kPageSize);
    // Alignments the staging grid cannot honour (or none at all) mean: no O_DIRECT here.
    if (!is_pow2(r.align.offset) || r.align.offset > kMaxDioAlign || !is_pow2(r.align.mem) ||
        r.align.mem > kMaxDioAlign)
      r.fd_direct = -1;
  }
  return Error::none();
}

Error check_fd(int fd, struct stat* st, int* flags) {
  if (fd < 0) return Error::of(Errc::invalid_argument);
  if (sys::os().fstat(fd, st) < 0) return Error::of(Errc::invalid_argument);
  if (S_ISDIR(st->st_mode)) return Error::of(Errc::invalid_file_type);
  if (!S_ISREG(st->st_mode) && !S_ISBLK(st->st_mode)) return Error::of(Errc::invalid_file_type);
  *flags = sys::os().get_flags(fd);
  if (*flags < 0) return Error::of(Errc::invalid_argument);
  // cuFile refuses these; O_PATH fds cannot do IO at all.
  if (*flags & (O_APPEND | O_NONBLOCK | O_NOFOLLOW | O_PATH))
    return Error::of(Errc::invalid_open_flag);
  return Error::none();
}

void set_if_changed(std::atomic<bool>& flag, bool value) {
  if (flag.load(std::memory_order_relaxed) != value) flag.store(value, std::memory_order_relaxed);
}

// Whether the aligned body of this IO should bypass the page cache.
bool choose_direct(const Settings& s, FileHandle& h, sys::IoKind kind, uint64_t off,
                   uint64_t len) {
  if (h.ref.fd_direct < 0) return false;
  switch (s.direct_io) {
    case DirectIoPolicy::never: return false;
    case DirectIoPolicy::always: return true;
    case DirectIoPolicy::automatic: break;
  }
  if (s.force_odirect_mode) return true;
  // Data already in the page cache is served from there: O_DIRECT would read the disk again.
  sys::Residency r;
  if (kind == sys::IoKind::read && sys::os().cachestat(h.ref.fd_buffered, off, len, &r) == 0) {
    set_if_changed(h.looks_cached, r.cached_pages >= r.total_pages);
    return r.cached_pages * 2 < r.total_pages;
  }
  // Writes, or a kernel without cachestat: follow the way the caller opened the file.
  return h.user_direct || kind == sys::IoKind::write;
}

// A small read may skip cachestat (on the 4 KiB path it costs about half of a cached pread)
// and go to the page cache when the last check found this file's reads cached: run_inline then
// reads with RWF_NOWAIT, so a wrong guess never waits for the disk on the page cache's behalf.
// Only where choose_direct would have asked cachestat: the other policies decide without it.
bool guess_cached(const Settings& s, const FileHandle& h, sys::IoKind kind) {
  return kind == sys::IoKind::read && h.ref.fd_direct >= 0 &&
         s.direct_io == DirectIoPolicy::automatic && !s.force_odirect_mode &&
         h.looks_cached.load(std::memory_order_relaxed) &&
         !h.no_cached_reads.load(std::memory_order_relaxed);
}

}  // namespace

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
}

void Runtime::after_fork_in_parent() {
  exec::resume_workers_after_fork();
  mu_.unlock();
}

void Runtime::after_fork_in_child() {
  exec::forget_workers_after_fork();
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
  // destroyed here, on the closing thread (see Io::session_).
  wait_for_zero(closing->inflight);
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

bool driver_is_open() { return Runtime::instance().is_open(); }

bool with_open_settings(const std::function<void(Settings&)>& fn) {
  return Runtime::instance().update_settings(fn);
}

// ---- files ---------------------------------------------------------------------------------------

Error Runtime::register_file(int fd, void** handle) {
  if (handle == nullptr) return Error::of(Errc::invalid_argument);
  if (Error e = ensure_open()) return e;
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  struct stat st {};
  int flags = 0;
  if (Error e = check_fd(fd, &st, &flags)) return e;
  auto h = std::make_shared<FileHandle>();
  h->user_fd = fd;
  h->dev = st.st_dev;
  h->ino = st.st_ino;
  h->access = flags & O_ACCMODE;
  h->user_direct = (flags & O_DIRECT) != 0;
  std::lock_guard lock(s->files_mu);
  for (auto& [token, other] : s->files)
    if (other->user_fd == fd) return Error::of(Errc::handle_already_registered);
  if (Error e = fill_file_ref(*h, s->settings.direct_io)) return e;
  uintptr_t token = s->next_token;
  s->next_token += 0x10;
  s->files.emplace(token, std::move(h));
  *handle = reinterpret_cast<void*>(token);
  return Error::none();
}

Error Runtime::deregister_file(void* handle) {
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  std::shared_ptr<FileHandle> h = take(s->files_mu, s->files, reinterpret_cast<uintptr_t>(handle));
  if (!h) return Error::of(Errc::handle_not_registered);
  // The caller may close the fd as soon as we return: no IO may still be using it.
  wait_for_zero(h->inflight);
  return Error::none();
}

Error Runtime::explain_file(void* handle, FileReport* out) {
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  std::shared_ptr<FileHandle> h;
  {
    std::lock_guard lock(s->files_mu);
    auto it = s->files.find(reinterpret_cast<uintptr_t>(handle));
    if (it == s->files.end()) return Error::of(Errc::handle_not_registered);
    h = it->second;
  }
  struct stat st {};
  sys::os().fstat(h->user_fd, &st);
  out->size = static_cast<uint64_t>(st.st_size);
  out->direct_capable = h->ref.fd_direct >= 0;
  out->align = h->ref.align;
  out->cachestat_ok = sys::os().cachestat(h->ref.fd_buffered, 0, out->size, &out->resident) == 0;
  out->read_direct = choose_direct(s->settings, *h, sys::IoKind::read, 0, out->size);
  return Error::none();
}

// ---- buffers -------------------------------------------------------------------------------------

Error Runtime::register_buffer(const void* base, size_t length) {
  if (base == nullptr || length == 0) return Error::of(Errc::invalid_argument);
  if (Error e = ensure_open()) return e;
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  cuda::MemInfo mem;
  if (Error e = cuda::classify(base, &mem)) return e;
  const uint64_t b = reinterpret_cast<uint64_t>(base);
  if (mem.range_size != 0 && b + length > mem.range_start + mem.range_size)
    return Error::of(Errc::pointer_range);
  auto reg = std::make_shared<BufferRegistration>();
  reg->base = b;
  reg->length = length;
  reg->mem = mem;
  std::lock_guard lock(s->buffers_mu);
  if (!s->buffers.emplace(b, std::move(reg)).second)
    return Error::of(Errc::buffer_already_registered);
  return Error::none();
}

Error Runtime::deregister_buffer(const void* base) {
  auto s = session();
  if (!s) return Error::of(Errc::driver_not_open);
  auto reg = take(s->buffers_mu, s->buffers, reinterpret_cast<uint64_t>(base));
  if (!reg) return Error::of(Errc::buffer_not_registered);
  wait_for_zero(reg->inflight);
  return Error::none();
}

// ---- IO ------------------------------------------------------------------------------------------

Error Runtime::prepare(sys::IoKind kind, void* handle, const void* base, uint64_t size,
                       int64_t file_offset, int64_t buffer_offset, std::unique_ptr<Io>* out,
                       const cuda::MemInfo* base_mem) {
  auto io = std::make_unique<Io>();
  std::shared_ptr<Session> s;
  {
    std::lock_guard lock(mu_);
    // With base_mem the caller may be a thread that must not call CUDA: never open implicitly.
    if (!session_ && base_mem == nullptr) {
      if (Error e = open_locked()) return e;
      ++use_count_;
    }
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
  struct stat st {};
  if (sys::os().fstat(f.user_fd, &st) < 0 || st.st_dev != f.dev || st.st_ino != f.ino)
    return Error::sys(EBADF);

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
  io->inline_ = size <= s->settings.small_io_threshold_kb * 1024;
  // Only reads sure to run on this thread may guess (run_inline checks the guess; the workers
  // would not).
  io->read_cached_first_ =
      (io->inline_ || one_piece_read(*s, kind, size)) && guess_cached(s->settings, f, kind);
  job.direct = !io->read_cached_first_ && choose_direct(s->settings, f, kind, job.file_off, size);
  *out = std::move(io);
  return Error::none();
}

namespace {

// The first kernel read of a segment whose bytes guess_cached() believed cached: takes only what
// the page cache holds. Anything less clears the file's guess (the next small read asks
// cachestat again); the caller reads the rest as usual, which waits for the disk. A short read
// at end of file is no miss.
ssize_t first_read_from_cache(FileHandle& f, const exec::Job& job, const exec::Segment& seg) {
  ssize_t r = sys::os().pread_cached(seg.fd, seg.mem, seg.len, seg.file_off);
  if (r == -EOPNOTSUPP) set_if_changed(f.no_cached_reads, true);
  const bool all = r >= 0 && (static_cast<uint64_t>(r) == seg.len ||
                              seg.file_off + static_cast<uint64_t>(r) >= job.file_size);
  if (!all) set_if_changed(f.looks_cached, false);
  // Nothing cached is not an error here: the caller goes on with a read that waits.
  return r == -EAGAIN || r == -EOPNOTSUPP ? -EAGAIN : r;
}

// IO on the caller's thread: one kernel IO per segment and a copy waited for.
// `guessed`, when set, is the file whose small reads guess_cached() believed cached.
// Returns false when no staging buffer was free (the caller then uses the executor).
bool run_inline(Session& s, exec::Job& job, FileHandle* guessed, IoResult* out) {
  CallerPool& pool = job.len + 2 * kMaxDioAlign <= s.small.bytes() ? s.small : s.medium;
  CallerPool::Buffer* staging = nullptr;
  if (job.staged() && (staging = pool.take()) == nullptr) return false;
  char* staging_mem = staging ? staging->mem : nullptr;
  exec::ChunkPlan plan = exec::plan_chunk(job, job.file_off, job.len, staging_mem);
  const bool read = job.kind == sys::IoKind::read;
  cuda::ScopedContext ctx(job.staged() ? job.mem.context : nullptr);
  char* slab_data = staging ? staging_mem + (job.file_off - plan.base) : nullptr;
  Error err;
  if (job.staged() && !read)
    err = copy_on_caller_stream(*staging, job.mem.context, false, job.addr, slab_data, job.len);
  for (int k = 0; k < plan.count && err.ok(); ++k) {
    exec::Segment& seg = plan.seg[k];
    exec::SegmentNext next = exec::SegmentNext::again;
    if (guessed != nullptr) {
      ssize_t r = first_read_from_cache(*guessed, job, seg);
      if (r != -EAGAIN) next = exec::apply_result(job, seg, static_cast<int>(r), &err);
    }
    while (next == exec::SegmentNext::again) {
      uint64_t n = seg.len - seg.done, at = seg.file_off + seg.done;
      ssize_t r = read ? sys::os().pread(seg.fd, seg.mem + seg.done, n, at)
                       : sys::os().pwrite(seg.fd, seg.mem + seg.done, n, at);
      next = exec::apply_result(job, seg, static_cast<int>(r), &err);
    }
  }
  uint64_t got = err ? 0 : exec::contiguous_bytes(plan, job.file_off, job.len);
  if (err.ok() && !read && got < job.len) err = Error::sys(EIO);
  if (err.ok() && job.staged() && read && got > 0)
    err = copy_on_caller_stream(*staging, job.mem.context, true, job.addr, slab_data, got);
  if (staging) pool.give(staging);
  *out = err ? IoResult{0, err} : IoResult{got, Error::none()};
  return true;
}

}  // namespace

namespace {

stats::Path path_of(const Io& io, bool ran_inline) {
  const exec::Job& j = io.job;
  if (ran_inline) return stats::Path::small_io;
  const bool direct = j.direct && j.file.fd_direct >= 0;
  if (!direct) return stats::Path::page_cache;
  return j.staged() ? stats::Path::staged_direct : stats::Path::host_direct;
}

void record(const Io& io, const IoResult& r, bool ran_inline) {
  if (!r.ok() || r.bytes == 0) return;
  auto op = io.job.kind == sys::IoKind::read ? stats::Op::read : stats::Op::write;
  stats::record_path(op, path_of(io, ran_inline), r.bytes);
}

// A synchronous call on GPU memory comes after the work its caller queued on the legacy default
// stream, as cudaMemcpy does: a cuMemsetD8, or a cuMemcpyHtoD from pageable memory, may return
// before its bytes land, and a cuFileWrite of that memory right after must write the new bytes
// (and a cuFileRead's bytes must not be overwritten by it). Small IO gets this from its blocking
// streams. The workers' streams cannot be blocking ones (a stream op queued on the legacy stream
// waits for them: neither could go first), so when the legacy stream has work pending, an event
// recorded behind it is what every copy of the job waits for.
class LegacyStreamFence {
 public:
  explicit LegacyStreamFence(exec::Job& job) : job_(job) {
    const cuda::Driver* d = cuda::driver();
    if (!job.staged() || d == nullptr) return;
    cuda::ScopedContext ctx(job.mem.context);
    if (d->StreamQuery(nullptr) != cuda::CUDA_ERROR_NOT_READY) return;  // idle (or broken)
    if (d->EventCreate(&event_, cuda::CU_EVENT_DISABLE_TIMING) == cuda::CUDA_SUCCESS &&
        d->EventRecord(event_, nullptr) == cuda::CUDA_SUCCESS) {
      job.after = event_;
      return;
    }
    // No event: wait here instead, which orders the same way.
    d->StreamSynchronize(nullptr);
  }
  ~LegacyStreamFence() {
    job_.after = nullptr;
    if (event_ != nullptr) cuda::driver()->EventDestroy(event_);
  }
  LegacyStreamFence(const LegacyStreamFence&) = delete;
  LegacyStreamFence& operator=(const LegacyStreamFence&) = delete;

 private:
  exec::Job& job_;
  cuda::CUevent event_ = nullptr;
};

}  // namespace

void Runtime::account(const Io& io, const IoResult& r) { record(io, r, false); }

void Runtime::count_call(sys::IoKind kind, const IoResult& r,
                         std::chrono::steady_clock::time_point started) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
      std::chrono::steady_clock::now() - started);
  stats::record_call(kind == sys::IoKind::read ? stats::Op::read : stats::Op::write, r.bytes,
                     static_cast<uint64_t>(ns.count()), r.ok());
}

IoResult Runtime::run_on_this_thread(Io& io) {
  if (io.job.staged()) return {0, Error::of(Errc::internal)};
  IoResult r;
  if (io.job.len > 0) run_inline(*io.session_, io.job, io.guessed_file(), &r);
  record(io, r, true);
  return r;
}

IoResult Runtime::run(Io& io) {
  if (io.job.len == 0) return {};
  Session& s = *io.session_;
  const int callers = s.sync_calls.fetch_add(1, std::memory_order_relaxed) + 1;
  struct Uncount {
    std::atomic<int>& n;
    ~Uncount() { n.fetch_sub(1, std::memory_order_relaxed); }
  } uncount{s.sync_calls};
  IoResult r;
  const bool on_caller = io.inline_ || read_on_caller(s, io.job, callers);
  if (on_caller && run_inline(s, io.job, io.guessed_file(), &r)) {
    record(io, r, true);
    return r;
  }
  LegacyStreamFence fence(io.job);  // until the job is done: its copies may still wait on it
  s.exec->submit(&io.job);
  io.job.wait();
  r = io.job.result();
  record(io, r, false);
  return r;
}

void Runtime::submit(Io& io) { io.session_->exec->submit(&io.job); }

IoResult Runtime::read_write(sys::IoKind kind, void* handle, const void* base, uint64_t size,
                             int64_t file_offset, int64_t buffer_offset) {
  std::unique_ptr<Io> io;
  if (Error e = prepare(kind, handle, base, size, file_offset, buffer_offset, &io)) return {0, e};
  return run(*io);
}

}  // namespace gpufile
