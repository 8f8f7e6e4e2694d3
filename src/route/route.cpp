#include "route/route.hpp"

#include <algorithm>

#include "core/align.hpp"

namespace gpufile::route {

const char* describe(Reason why) {
  switch (why) {
    case Reason::no_direct: return "the file system refuses O_DIRECT: page cache";
    case Reason::in_memory: return "the file lives in memory (tmpfs, ramfs): page cache";
    case Reason::policy_never: return "GPUFILE_DIRECT_IO=never: page cache";
    case Reason::policy_always: return "GPUFILE_DIRECT_IO=always: O_DIRECT";
    case Reason::force_odirect: return "properties.force_odirect_mode: O_DIRECT";
    case Reason::writes_direct: return "writes bypass the page cache: O_DIRECT";
    case Reason::looks_cached:
      return "the file's reads were last found cached: page cache, taking only cached bytes "
             "first (RWF_NOWAIT)";
    case Reason::cached: return "the range is in the page cache: page cache";
    case Reason::not_cached: return "the range is not in the page cache: O_DIRECT";
    case Reason::follows_open:
      return "residency unknown (no cachestat): O_DIRECT only if the file was opened so";
    case Reason::pages_registered:
      return "pages of the file are registered for page-cache DMA: the write goes through the "
             "page cache, into them";
    case Reason::not_cached_kept:
      return "the range is not in the page cache, and the cache policy keeps this file cached: "
             "page cache (buffered reads, so the bytes stay cached)";
    case Reason::cache_in_memory:
      return "the file lives in memory (tmpfs, ramfs): it is its own page cache";
    case Reason::cache_keep:
      return "gpufile.cache_policy=keep: reads that miss the page cache go through it and stay "
             "cached";
    case Reason::cache_bypass:
      return "gpufile.cache_policy=bypass: reads that miss the page cache go O_DIRECT and leave "
             "it as it was";
    case Reason::cache_vendor_direct:
      return "NVIDIA's GPUDirect Storage reads this file straight into GPU memory: reads that "
             "miss the page cache bypass it";
    case Reason::cache_block_device:
      return "a block device (its size is not weighed): reads that miss the page cache go "
             "O_DIRECT";
    case Reason::cache_room_unknown:
      return "the memory the page cache can hold is unknown (no /proc/meminfo): reads that miss "
             "the page cache go O_DIRECT";
    case Reason::cache_fits:
      return "the file takes at most half of the memory the page cache can hold: reads that "
             "miss the page cache go through it, so the next reader finds the bytes cached";
    case Reason::cache_too_big:
      return "the file takes more than half of the memory the page cache can hold (caching it "
             "would push out other data, and its own first pages): reads that miss the page "
             "cache go O_DIRECT";
    case Reason::asynchronous: return "asynchronous IO: the workers run it";
    case Reason::caller_thread_off: return "gpufile.small_io_kb is 0: the workers run it";
    case Reason::small_io: return "small IO: one kernel IO and one copy on the calling thread";
    case Reason::one_piece: return "one piece: the calling thread runs it (a hand-off would only add delay)";
    case Reason::callers_busy:
      return "enough calls run at once to keep every worker busy: the workers run whole pieces";
    case Reason::workers_busy: return "no idle worker: the calling thread runs its own pieces";
    case Reason::from_page_cache:
      return "copies straight out of registered page cache: the calling thread issues them all";
    case Reason::making_windows:
      return "a long read of cached bytes read before: the calling thread makes their missing "
             "page-cache windows, farthest first, while the workers take the pieces";
    case Reason::shared: return "the calling thread and idle workers share the pieces";
    case Reason::no_staging: return "no caller staging buffer free: the workers run it";
    case Reason::vendor_off: return "gpufile.vendor is off: gpufile's own paths";
    case Reason::vendor_not_loaded:
      return "NVIDIA's libcufile is not loaded (the NVIDIA line of gpufile check says why): "
             "gpufile's own paths";
    case Reason::vendor_compat_only:
      return "NVIDIA's driver reports no GPUDirect Storage (compat mode only: it would add a "
             "layer): gpufile's own paths";
    case Reason::vendor_file_refused:
      return "NVIDIA's driver refused this file (or it was not offered: no O_DIRECT): gpufile's own "
             "paths";
    case Reason::vendor_asynchronous:
      return "batch and stream IO stay on gpufile's workers";
    case Reason::vendor_host_memory: return "host memory: gpufile reads into it directly";
    case Reason::vendor_small: return "small IO (at or below gpufile.small_io_kb): gpufile's one-step path";
    case Reason::vendor_unaligned:
      return "offset, size or GPU address off the 4 KiB grid: gpufile's own paths";
    case Reason::vendor_page_cache:
      return "gpufile reads this range through the page cache (cached, in memory, or kept there "
             "by policy): nothing for NVIDIA's DMA";
    case Reason::vendor_direct:
      return "large aligned IO in GPU memory on a file NVIDIA's driver accepts: NVIDIA's "
             "cuFileRead/cuFileWrite (GPUDirect Storage)";
    case Reason::count: break;
  }
  return "?";
}

const char* describe(Runner r) {
  switch (r) {
    case Runner::caller: return "calling thread";
    case Runner::caller_and_workers: return "calling thread and workers";
    case Runner::workers: return "workers";
  }
  return "?";
}

// ---- storage -------------------------------------------------------------------------------------

namespace {

// The rules that need no residency: a choice, or nullopt when the page cache must be asked.
std::optional<StorageChoice> choose_without_residency(const StorageFacts& f) {
  if (!f.direct_capable) return StorageChoice{false, false, f.memory_backed ? Reason::in_memory : Reason::no_direct};
  // Registered pages stay in the page cache whatever writes the disk: an O_DIRECT write could
  // not drop them and would leave them stale. A write through the cache lands in them.
  if (f.kind == sys::IoKind::write && f.windows_live)
    return StorageChoice{false, false, Reason::pages_registered};
  switch (f.policy) {
    case DirectIoPolicy::never: return StorageChoice{false, false, Reason::policy_never};
    case DirectIoPolicy::always: return StorageChoice{true, false, Reason::policy_always};
    case DirectIoPolicy::automatic: break;
  }
  if (f.force_odirect) return StorageChoice{true, false, Reason::force_odirect};
  if (f.kind == sys::IoKind::write) return StorageChoice{true, false, Reason::writes_direct};
  // A read on its caller's thread tries RWF_NOWAIT first and corrects a wrong guess; one on a
  // worker (asynchronous IO) reads through the page cache all the same, which serves a wrong
  // guess from the disk, and leaves the correcting to the synchronous reads.
  if (f.len <= kGuessMaxBytes && f.looks_cached && !f.nowait_refused)
    return StorageChoice{false, true, Reason::looks_cached};
  return std::nullopt;
}

}  // namespace

bool wants_residency(const StorageFacts& f) { return !choose_without_residency(f).has_value(); }

bool copies_from_cache(const StorageFacts& f, const StorageChoice& c, bool staged) {
  if (f.kind != sys::IoKind::read || !staged || !f.cache_windows || c.direct) return false;
  if (f.len <= f.small_io_bytes) return false;
  return f.memory_backed || c.guessed || c.why == Reason::cached;
}

StorageChoice choose_storage(const StorageFacts& f) {
  if (auto c = choose_without_residency(f)) return *c;
  if (!f.residency) return {f.opened_direct, false, Reason::follows_open};
  // Data already in the page cache is served from there: O_DIRECT would read the disk again.
  const bool mostly_cold = f.residency->cached_pages * 2 < f.residency->total_pages;
  if (!mostly_cold) return {false, false, Reason::cached};
  if (f.keep_cache) return {false, false, Reason::not_cached_kept};
  return {true, false, Reason::not_cached};
}

// ---- the page cache on a miss -----------------------------------------------------------------

CacheChoice choose_cache(const CacheFacts& f) {
  if (f.memory_backed) return {true, Reason::cache_in_memory};
  switch (f.policy) {
    case CachePolicy::keep: return {true, Reason::cache_keep};
    case CachePolicy::bypass: return {false, Reason::cache_bypass};
    case CachePolicy::automatic: break;
  }
  if (f.vendor_direct) return {false, Reason::cache_vendor_direct};
  if (f.block_device) return {false, Reason::cache_block_device};
  if (!f.room) return {false, Reason::cache_room_unknown};
  if (f.file_size <= *f.room / kKeepShareOfRoom) return {true, Reason::cache_fits};
  return {false, Reason::cache_too_big};
}

// ---- vendor direct --------------------------------------------------------------------------------

VendorChoice choose_vendor(const VendorFacts& f) {
  auto keep_own = [](Reason why) { return VendorChoice{false, why}; };
  if (f.policy == VendorPolicy::off) return keep_own(Reason::vendor_off);
  if (!f.loaded) return keep_own(Reason::vendor_not_loaded);
  if (f.policy == VendorPolicy::automatic && !f.driver_gds) return keep_own(Reason::vendor_compat_only);
  if (!f.file_accepted) return keep_own(Reason::vendor_file_refused);
  if (!f.synchronous) return keep_own(Reason::vendor_asynchronous);
  if (!f.device_memory) return keep_own(Reason::vendor_host_memory);
  if (f.len <= f.small_io_bytes) return keep_own(Reason::vendor_small);
  if (f.len % kVendorAlign != 0 || f.file_offset % kVendorAlign != 0 || f.address % kVendorAlign != 0)
    return keep_own(Reason::vendor_unaligned);
  if (!f.storage.direct) return keep_own(Reason::vendor_page_cache);
  return {true, Reason::vendor_direct};
}

// ---- threads -------------------------------------------------------------------------------------

uint64_t piece_step(uint64_t len, unsigned pieces, uint64_t min_chunk, uint64_t slab) {
  const uint64_t even = (len + pieces - 1) / std::max(1u, pieces);
  // Multiples of 4 KiB keep every cut on the grid of any DIO alignment staging supports.
  const uint64_t step = align_up(std::max(even, min_chunk), uint64_t{4096});
  return std::max<uint64_t>(4096, std::min(step, align_down(slab, 4096)));
}

uint32_t piece_count(uint64_t grid_offset, uint64_t len, uint64_t step) {
  if (len == 0) return 1;
  return static_cast<uint32_t>((grid_offset + len + step - 1) / step);
}

namespace {

// A read that fills the page cache is cut no finer than a fill folio: a shorter piece would come
// in unfilled, as the kernel's smallest folios, and a next start would read it at half speed.
// On a many-core host an even share of a mid-size read falls below one (32 cores: a 10 MiB read
// in 17 pieces of 600 KiB).
uint64_t smallest_piece(const LoadFacts& f) { return std::max(f.min_chunk, f.fill_folio); }

ThreadPlan plan(Runner runner, uint64_t step, const LoadFacts& f, unsigned helpers, Reason why) {
  ThreadPlan p;
  p.runner = runner;
  p.step = step;
  p.pieces = piece_count(f.grid_offset, f.len, step);
  p.helpers = std::min<unsigned>(helpers, runner == Runner::workers ? p.pieces : p.pieces - 1);
  p.why = why;
  return p;
}

}  // namespace

ThreadPlan plan_for_workers(const LoadFacts& f, Reason why) {
  return plan(Runner::workers, piece_step(f.len, f.workers, smallest_piece(f), f.slab), f, f.workers, why);
}

ThreadPlan plan_threads(const LoadFacts& f) {
  if (!f.synchronous) return plan_for_workers(f, Reason::asynchronous);
  if (f.small_io_bytes == 0) return plan_for_workers(f, Reason::caller_thread_off);
  // Small IO is one piece on the caller's thread, with one staging buffer big enough for it
  // (never more than a slab, whatever small_io_kb says: above that the caller pipelines).
  if (f.len <= std::min(f.small_io_bytes, f.slab)) {
    const uint64_t whole = align_up(f.grid_offset + f.len, uint64_t{4096});
    return plan(Runner::caller, whole, f, 0, Reason::small_io);
  }
  // Copies out of registered page cache cost the CPU only their issue: the caller makes them
  // all, a slab at a time with two in flight, and the workers keep to IO that needs a thread.
  if (f.staged && f.from_page_cache)
    return plan(Runner::caller, piece_step(f.len, 1, smallest_piece(f), f.slab), f, 0,
                Reason::from_page_cache);
  // Many callers: enough calls at once to keep every worker busy with whole pieces (none cut
  // finer than a slab). The workers then move them, overlapping each piece's copy to the GPU
  // with the next piece's read, while fewer threads copy out of the page cache at once (memory
  // bandwidth is shared three ways there: page-cache read, staging write, DMA read). Measured
  // on the H100 (docs/performance.md), GiB/s, workers / callers running their own pieces:
  // 16 x 4 MiB 44.8 / 40.8; 16 x 1 MiB 30.1 / 26.9; 8 x 1 MiB 24.6 / 18.7; 8 x 16 MiB 45.2 /
  // 41.7; but 4 x 4 MiB 20.2 / 25.5 and 4 x 1 MiB 15.1 / 17.8: below half the workers, the
  // callers take part. Host memory needs no staging and no copy: there every caller reads
  // into its own buffer (16 x 4 MiB: 82 GiB/s, where the workers moved 52).
  const unsigned callers = std::max(1u, f.callers);
  if (f.staged && callers * 2 >= f.workers)
    return plan(Runner::workers, piece_step(f.len, 1, smallest_piece(f), f.slab), f, f.workers,
                Reason::callers_busy);
  // Fewer callers: the cores they leave free go to idle workers, in equal shares per caller
  // (one caller alone gets every idle worker), and each caller runs pieces of its own call.
  const unsigned spare = f.cores > callers ? f.cores - callers : 0;
  const unsigned share = std::min(f.idle_workers, spare) / callers;
  const uint64_t step = piece_step(f.len, share + 1, smallest_piece(f), f.slab);
  if (piece_count(f.grid_offset, f.len, step) == 1) return plan(Runner::caller, step, f, 0, Reason::one_piece);
  // A long read of cached bytes that can make its page-cache windows as it goes: the caller
  // makes the missing ones, farthest first, while the workers take the pieces from the near end
  // (Job::makes_windows_ahead). Only so: registering holds the driver up for milliseconds a
  // window, and the caller registering alone reads slower than staging (exec/cache_windows.hpp).
  // Busy workers still take the pieces as they come free.
  if (f.staged && f.windows_to_make) {
    const unsigned helpers = std::max(share, 1u);
    ThreadPlan p = plan(Runner::caller_and_workers,
                        piece_step(f.len, helpers + 1, smallest_piece(f), f.slab), f, helpers,
                        Reason::making_windows);
    p.make_windows_ahead = true;
    return p;
  }
  if (share == 0) return plan(Runner::caller, step, f, 0, Reason::workers_busy);
  return plan(Runner::caller_and_workers, step, f, share, Reason::shared);
}

}  // namespace gpufile::route
