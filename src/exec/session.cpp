#include "exec/session.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#include "core/align.hpp"
#include "core/laps.hpp"
#include "core/log.hpp"
#include "cuda/driver.hpp"
#include "cuda/nvml.hpp"
#include "exec/budget.hpp"
#include "exec/memory_room.hpp"
#include "exec/placement.hpp"
#include "io/remote/upload.hpp"
#include "sys/os.hpp"

namespace gpufile {

FileHandle::~FileHandle() {
  vendor.reset();  // NVIDIA's registration holds our O_DIRECT descriptor: it goes first
  if (own_buffered >= 0) sys::os().close(own_buffered);
  if (own_direct >= 0) sys::os().close(own_direct);
}

void wait_for_zero(const std::atomic<int>& counter) {
  for (int v = counter.load(std::memory_order_acquire); v != 0;
       v = counter.load(std::memory_order_acquire))
    counter.wait(v, std::memory_order_acquire);
}

void drop(std::atomic<int>& counter) {
  if (counter.fetch_sub(1, std::memory_order_acq_rel) == 1) counter.notify_all();
}

route::StorageFacts storage_facts(const Settings& s, const FileHandle& h, sys::IoKind kind,
                                  uint64_t len) {
  route::StorageFacts f;
  f.kind = kind;
  f.len = len;
  f.direct_capable = h.ref.fd_direct >= 0;
  f.memory_backed = h.memory_backed;
  f.opened_direct = h.user_direct;
  f.policy = s.direct_io;
  f.force_odirect = s.force_odirect_mode;
  f.looks_cached = h.guess.looks_cached.load(std::memory_order_relaxed);
  f.nowait_refused = h.guess.nowait_refused.load(std::memory_order_relaxed);
  f.cache_windows = h.windows != nullptr;
  f.small_io_bytes = uint64_t{s.small_io_threshold_kb} * 1024;
  f.windows_live = h.windows != nullptr && h.windows->live();
  f.keep_cache = h.cache.keep;
  return f;
}

route::CacheFacts cache_facts(const Session& s, const FileHandle& h, const struct stat& st) {
  route::CacheFacts f;
  f.policy = s.settings.cache_policy;
  f.file_size = static_cast<uint64_t>(st.st_size);
  f.memory_backed = h.memory_backed;
  f.block_device = S_ISBLK(st.st_mode);
  // NVIDIA's library carries the file's cold reads into GPU memory: a session keeps the library
  // only where it is used (GPUDirect Storage, or gpufile.vendor=on: open_vendor), and a file
  // only has its handle where NVIDIA's driver took the file.
  f.vendor_direct = h.vendor != nullptr;
  if (f.policy == CachePolicy::automatic && !f.memory_backed) f.room = exec::page_cache_room();
  return f;
}

void ask_residency(FileHandle& h, uint64_t off, uint64_t len, route::StorageFacts& f) {
  if (!route::wants_residency(f)) return;
  sys::Residency r;
  if (sys::os().cachestat(h.ref.fd_buffered, off, len, &r) != 0) return;
  f.residency = r;
  exec::CacheGuess::set(h.guess.looks_cached, r.cached_pages >= r.total_pages);
}

namespace {

unsigned online_cores() {
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  return cores > 0 ? static_cast<unsigned>(cores) : 1;
}

const char* env_lookup(const char* name) { return std::getenv(name); }

// The automatic worker count (exec::automatic_budget) follows from measurements: page-cache
// reads into the GPU are bound by the CPU copy out of the cache (every byte crosses memory three
// times: page cache, slab, DMA), so reaching the PCIe ceiling (about 45-51 GiB/s) takes many
// workers, but not one per core: workers spin while the driver waits for their copies, and past
// the ceiling more of them only burn CPU and crowd the callers' threads. Measured on the 16-core
// H100 machine (bench/probe_workers.sh, docs/performance.md, two rounds, warm 4 GiB file /
// /dev/shm, GiB/s and CPU-s/GiB): 8 workers 47.8-47.9 (0.17) / 39-40; 12 workers 45.0-48.5
// (0.24-0.26) / 45.2-46.1; 16 workers 44.0-46.6 (0.33-0.35) / 42.8-46.7; 1 MiB x 4 calls
// 16.3-16.5 GiB/s with 12 against 15.2-15.4 with 16. Three per four cores, 4 to 16.
exec::ExecutorConfig executor_config(const Settings& s, const exec::Budget& budget) {
  constexpr uint64_t kPageSize = 4096;
  exec::ExecutorConfig c;
  c.cores = online_cores();
  c.workers = static_cast<unsigned>(s.workers ? s.workers : budget.workers);
  c.slabs_per_worker = static_cast<unsigned>(std::max<size_t>(2, s.slabs_per_worker));
  c.cold_slabs_per_worker = static_cast<unsigned>(s.cold_slabs_per_worker);
  c.slab_bytes = std::max<uint64_t>(kMaxDioAlign, align_up(s.slab_size_kb * 1024, kMaxDioAlign));
  if (const uint64_t piece = align_up(s.cold_piece_kb * 1024, kMaxDioAlign); piece > 0 && piece < c.slab_bytes)
    c.direct_piece_bytes = piece;
  c.min_chunk_bytes = align_up(s.min_chunk_kb * 1024, kPageSize);
  c.ring_depth = static_cast<unsigned>(std::max<size_t>(8, s.ring_depth));
  c.engine = s.engine;
  return c;
}

// Makes a context current for the pinned allocations unless the caller already made one
// current: a primary context the process has active, else its local rank's GPU's (a rank that
// opens before its framework touched the GPU), else device 0's (cuda::device_to_borrow).
void ensure_context(const cuda::Driver& d) {
  cuda::prefer_device(exec::local_rank(env_lookup));
  cuda::CUcontext ctx = nullptr;
  d.CtxGetCurrent(&ctx);
  if (ctx != nullptr) return;
  cuda::CUdevice dev = 0;
  d.DeviceGet(&dev, cuda::device_to_borrow(d));
  if (d.DevicePrimaryCtxRetain(&ctx, dev) == cuda::CUDA_SUCCESS) d.CtxSetCurrent(ctx);
}

// Staging for callers' threads (GPU memory only: host memory is read into directly). Two slabs
// per core at most: a caller pipelines with two, and callers beyond the cores only wait for
// CPU time (one with a single slab runs its pieces one after another; one with none leaves
// them to the workers). Two are made at open, for the first large call. Small IO buffers are
// small: one for each of many threads (64 at least, 16 made at open).
//
// Those made at open are pinned with the workers' staging, in its one registration, rather than
// as eighteen mappings and registrations of their own: on the H100 machine the open fell from
// 7.9-13.3 ms to 5.6-9.6, and a large read right after it no longer lost 22-82 ms to it
// (docs/performance.md, "Where the defaults come from").
struct CallerStaging {
  uint64_t small_bytes = 0;  // 0: no small IO buffers
  unsigned small_cap = 0;
  unsigned small_at_open = 0;
  unsigned slab_cap = 0;
  unsigned slabs_at_open = 0;
};

CallerStaging caller_staging(const Settings& s, const exec::ExecutorConfig& c,
                             const exec::Budget& budget) {
  CallerStaging out;
  const uint64_t small = std::min<uint64_t>(s.small_io_threshold_kb * 1024, c.slab_bytes);
  // Whole O_DIRECT blocks: the buffers made at open lie end to end, each an O_DIRECT target.
  if (small > 0) out.small_bytes = align_up(small + 2 * kMaxDioAlign, uint64_t{kMaxDioAlign});
  out.small_cap = budget.small_buffers;
  out.small_at_open = small > 0 ? std::min(16u, out.small_cap) : 0;
  out.slab_cap = s.caller_slabs ? static_cast<unsigned>(s.caller_slabs) : budget.caller_slabs;
  out.slabs_at_open = std::min(2u, out.slab_cap);
  return out;
}

// What the open pins for callers with the workers' staging: their slabs, then their small
// buffers, each kind laid end to end in one region.
std::vector<cuda::PinnedRequest> caller_staging_requests(const CallerStaging& cs, uint64_t slab) {
  std::vector<cuda::PinnedRequest> out;
  if (cs.slabs_at_open > 0) out.push_back({cs.slabs_at_open * slab, -1, nullptr, -1});
  if (cs.small_at_open > 0) out.push_back({cs.small_at_open * cs.small_bytes, -1, nullptr, -1});
  return out;
}

// The pools, lent the regions caller_staging_requests() asked for (pinned by the executor).
void init_caller_staging(Session& s, const CallerStaging& cs, uint64_t slab,
                         const std::vector<cuda::PinnedRequest>& pinned) {
  size_t next = 0;
  auto region = [&](unsigned count) {
    return count > 0 ? static_cast<char*>(pinned[next++].out) : nullptr;
  };
  s.slabs.init(slab, cs.slab_cap, region(cs.slabs_at_open), cs.slabs_at_open);
  char* small = region(cs.small_at_open);
  if (cs.small_bytes > 0) s.small.init(cs.small_bytes, cs.small_cap, small, cs.small_at_open);
}

// Staging of remote objects, with or without a GPU: an S3 writer's parts always pass through
// the `uploads` buffers (without a driver they are plain memory), and reads into GPU memory
// through the `remote` ones.
void init_remote_staging(Session& s) {
  // Remote reads (exec/remote.cpp) pin theirs only when the first one needs them: most
  // sessions never read a remote object.
  const unsigned remote = static_cast<unsigned>(std::max<size_t>(4, 2 * s.settings.remote_concurrency));
  s.remote.init(s.settings.remote_part_kb * 1024, remote, 0);
  // Writers' parts likewise; enough for two writers with all their parts in flight (a writer
  // that finds none free pins one of its own).
  remote::Options o;
  o.part_bytes = s.settings.remote_part_kb * 1024;
  o.concurrency = static_cast<unsigned>(s.settings.remote_concurrency);
  s.uploads.init(remote::upload_part_bytes(o), 2 * remote::upload_parts_in_flight(o), 0);
}

// The largest cache of the CPUs: the L3 (which x86 cores share), else nothing known.
uint64_t last_level_cache() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  return l3 > 0 ? static_cast<uint64_t>(l3) : 0;
}

uint64_t host_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
}

// Where the workers go: near the GPUs this process serves (exec/placement.hpp), from sysfs. The
// GPUs' entries are read only where there is a choice (several nodes, placement on), so that a
// one-node host makes one small read at open.
exec::Placement place_workers(const Settings& s, unsigned workers, unsigned local_world) {
  const bool enabled = s.numa_placement != NumaPlacement::off;
  const size_t nodes = enabled ? exec::online_nodes("/sys").size() : 1;
  std::vector<exec::GpuSite> gpus;
  const cuda::Driver* d = cuda::driver();
  if (d != nullptr && enabled && nodes > 1)
    for (int gpu = 0; gpu < d->device_count; ++gpu)
      gpus.push_back(exec::read_gpu_site("/sys", gpu, cuda::pci_bus_id(*d, gpu)));
  const auto served = exec::served_gpus(gpus, local_world, exec::local_rank(env_lookup));
  std::vector<int> allowed(1024);  // what this (the opening) thread may run on: the workers' limit
  const int n = gpus.empty() ? 0 : sys::os().thread_affinity(allowed.data(), allowed.size());
  allowed.resize(n > 0 ? static_cast<size_t>(n) : 0);
  return exec::plan_placement(served, nodes, workers, enabled, allowed);
}

}  // namespace

void Session::size_shared_pieces() const {
  if (!sharing || !exec) return;
  const exec::ExecutorConfig& c = exec->config();
  exec->set_shared_piece(exec::shared_piece_bytes(uint64_t{settings.shared_piece_kb} << 10,
                                                  last_level_cache, sharing->staging_processes(),
                                                  c.workers, c.slabs_per_worker, c.slab_bytes));
}

std::vector<std::string> describe_placement(const Session& s) {
  std::vector<std::string> lines{s.placement_why};
  if (!s.exec) return lines;
  const auto places = s.exec->places();
  for (size_t i = 0; i < places.size(); ++i) {
    const exec::WorkerPlace& p = places[i];
    if (p.node < 0) continue;
    std::string line = "worker " + std::to_string(i) + ": node " + std::to_string(p.node);
    line += p.pin_error     ? ", not pinned (" + std::string(std::strerror(-p.pin_error)) + ")"
            : p.pin_pending ? std::string(", not pinned yet")
            : p.cpus.empty() ? std::string(", not pinned")
                             : ", CPUs " + exec::cpu_list_text(p.cpus);
    line += p.staging_node >= 0 ? ", staging on node " + std::to_string(p.staging_node)
                                : ", staging node unknown";
    lines.push_back(std::move(line));
  }
  return lines;
}

namespace {

// Opens NVIDIA's library for path 5, where the settings and the machine call for it. Never
// fails the session: without it, gpufile's own paths carry everything.
void open_vendor(Session& s) {
  s.vendor = vendor::Driver::open(s.settings, &s.vendor_why);
  if (!s.vendor) {
    const bool asked = s.settings.vendor == VendorPolicy::on || !s.settings.vendor_library.empty();
    GPUFILE_LOG(asked ? LogLevel::error : LogLevel::info, "vendor path: %s", s.vendor_why.c_str());
    return;
  }
  const bool used = s.vendor_gds() || s.settings.vendor == VendorPolicy::on;
  s.vendor_why = s.vendor->library() + ", driver: " + s.vendor->facts().describe() +
                 (used ? "" : "; unused (gpufile.vendor = auto needs GPUDirect Storage)");
  GPUFILE_LOG(LogLevel::info, "vendor path: %s", s.vendor_why.c_str());
  // Compatibility mode alone would only add a layer: let NVIDIA's driver go now.
  if (!used) s.vendor.reset();
  s.vendor_compat_only = !used;
}

}  // namespace

route::VendorFacts vendor_facts(const Session& s, const FileHandle& h, const exec::Job& job,
                                const route::StorageChoice& storage, bool synchronous) {
  route::VendorFacts f;
  f.policy = s.settings.vendor;
  // Loaded and closed again for want of GDS still counts as loaded: the reason is compat mode.
  f.loaded = s.vendor != nullptr || s.vendor_compat_only;
  f.driver_gds = s.vendor_gds();
  f.file_accepted = h.vendor != nullptr && !h.vendor_dropped.load(std::memory_order_relaxed);
  f.synchronous = synchronous;
  f.device_memory = job.mem.kind == cuda::MemKind::device;
  f.len = job.len;
  f.file_offset = job.file_off;
  f.address = job.addr;
  f.small_io_bytes = s.settings.small_io_threshold_kb * 1024;
  f.storage = storage;
  return f;
}

// A first load of a checkpoint waits for the open (issue 13): its INFO line says what each step
// cost.
Error start_session(Session& s) {
  Laps laps;
  s.gpu = cuda::driver() != nullptr;
  if (!s.gpu)
    GPUFILE_LOG(LogLevel::info, "no GPU: host memory only (%s)", cuda::why_no_driver().c_str());
  if (const cuda::Driver* d = cuda::driver()) ensure_context(*d);
  const double driver_ms = laps.lap();
  const unsigned local_world = exec::local_world_size(env_lookup);
  const exec::Budget budget = exec::automatic_budget(online_cores(), local_world);
  exec::ExecutorConfig c = executor_config(s.settings, budget);
  const exec::Placement placement = place_workers(s.settings, c.workers, local_world);
  c.groups = placement.groups;
  s.placement_why = placement.why;
  const double placement_ms = laps.lap();
  const CallerStaging callers = caller_staging(s.settings, c, budget);
  std::vector<cuda::PinnedRequest> callers_pinned;
  if (s.gpu) callers_pinned = caller_staging_requests(callers, c.slab_bytes);
  s.exec = std::make_unique<exec::Executor>(c);
  if (Error e = s.exec->start(&callers_pinned)) return e;
  const double workers_ms = laps.lap();
  const std::string shared = local_world <= 1 ? std::string() :
      " (one of " + std::to_string(local_world) + " processes on this host: a budget for " +
      std::to_string(budget.cores) + " cores)";
  // Each placed worker logs its own line once its thread is pinned (Worker::pin).
  GPUFILE_LOG(LogLevel::info, "%u worker(s)%s; placement: %s", c.workers, shared.c_str(),
              placement.why.c_str());
  // At ERROR level so that the default configuration (cuFile's logging.level is ERROR) shows
  // it: losing io_uring is the one fallback an operator must be able to see.
  if (!s.exec->engine_note().empty() && s.settings.engine == EnginePolicy::automatic)
    GPUFILE_LOG(LogLevel::error, "%s", s.exec->engine_note().c_str());
  if (s.gpu) init_caller_staging(s, callers, c.slab_bytes, callers_pinned);
  const double callers_ms = laps.lap();
  init_remote_staging(s);
  const double remote_ms = laps.lap();
  if (s.gpu) open_vendor(s);
  else s.vendor_why = "no GPU";
  const double vendor_ms = laps.lap();
  s.sharing = std::make_unique<exec::HostSharing>(
      s.gpu, local_world, s.gpu ? cuda::driver()->device_count : 0,
      [] { return cuda::nvml_other_compute_processes(static_cast<unsigned>(getpid())); });
  s.last_level_cache = last_level_cache();
  s.size_shared_pieces();
  if (s.gpu && s.settings.pagecache_dma_mb > 0)
    s.pagecache_dma = std::make_shared<exec::PageCacheDma>(
        exec::pagecache_dma_budget(uint64_t{s.settings.pagecache_dma_mb} << 20,
                                   static_cast<unsigned>(cuda::driver()->device_count), local_world,
                                   host_memory()),
        std::chrono::milliseconds(s.settings.pagecache_dma_idle_ms));
  const double pagecache_ms = laps.lap();
  const exec::Executor::StartCosts& w = s.exec->start_costs();
  GPUFILE_LOG(LogLevel::info,
              "session opened in %.1f ms: driver %.1f, placement %.1f, workers %.1f (staging, "
              "the callers' first included, %.1f: faulted in %.1f, registered %.1f; engines %.1f; "
              "threads %.1f), callers' staging %.1f, remote staging %.1f, NVIDIA's library %.1f, "
              "page-cache DMA %.1f",
              laps.total(), driver_ms, placement_ms, workers_ms, w.staging_ms, w.pinning.fault_ms,
              w.pinning.register_ms, w.engines_ms, w.threads_ms, callers_ms, remote_ms, vendor_ms,
              pagecache_ms);
  return Error::none();
}

}  // namespace gpufile
