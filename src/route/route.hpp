// The routing policy: which path each request takes, and why. Pure functions of the facts the
// runtime gathers (memory, file, page-cache residency, load); no system or driver call is made
// here, so every rule is tested by a table (tests/unit/test_route.cpp) and `gpufile check`
// prints the same reasons the data path acts on.
//
// Two independent choices make a route:
//   storage   the aligned body through O_DIRECT, or through the page cache;
//   threads   who runs the pieces of a request: the calling thread, the IO workers, or both.
// (The memory side needs no choice: GPU memory is staged through pinned host memory, host
// memory is read into or written from directly.)
#pragma once

#include <cstdint>
#include <optional>

#include "core/settings.hpp"
#include "sys/os.hpp"

namespace gpufile::route {

// Why a route was taken. describe() gives the sentence `gpufile check` and the logs print.
enum class Reason : int {
  // storage
  no_direct,          // the file system refuses O_DIRECT (or demands an alignment staging lacks)
  in_memory,          // tmpfs / ramfs: the page cache is the file
  policy_never,       // GPUFILE_DIRECT_IO=never
  policy_always,      // GPUFILE_DIRECT_IO=always
  force_odirect,      // properties.force_odirect_mode
  writes_direct,      // writes bypass the page cache
  looks_cached,       // a small read of a file whose reads were last found cached
  cached,             // cachestat: the range is (mostly) in the page cache
  not_cached,         // cachestat: the range is (mostly) not in the page cache
  follows_open,       // no cachestat: follow the way the caller opened the file
  pages_registered,   // a write while pages of the file are registered for page-cache DMA
  not_cached_kept,    // cachestat: not cached, and the cache policy keeps the file cached
  // the page cache on a miss (gpufile.cache_policy), chosen per file
  cache_in_memory,     // tmpfs / ramfs: the file is its page cache, nothing to keep or bypass
  cache_keep,          // gpufile.cache_policy=keep
  cache_bypass,        // gpufile.cache_policy=bypass
  cache_vendor_direct, // auto: NVIDIA's GPUDirect Storage reads this file past the page cache
  cache_block_device,  // auto: a block device, whose size is not weighed
  cache_room_unknown,  // auto: neither /proc/meminfo nor a cgroup said how much memory there is
  cache_fits,          // auto: the file fits in its share of the memory the page cache can hold
  cache_too_big,       // auto: it does not
  // threads
  asynchronous,       // batch, stream and future IO: the caller does not wait
  caller_thread_off,  // gpufile.small_io_kb = 0
  small_io,           // at or below small_io_kb
  one_piece,          // the request is one piece anyway
  callers_busy,       // enough calls run at once to keep every worker busy with whole pieces
  workers_busy,       // no idle worker to share with: the caller runs its own pieces
  from_page_cache,    // copies straight out of registered page cache: the caller issues them all
  making_windows,     // the caller makes missing page-cache windows, the workers take the pieces
  shared,             // the caller and idle workers share the pieces
  no_staging,         // every caller staging buffer is in use: the workers run it
  // vendor (NVIDIA's libcufile, path 5)
  vendor_off,             // gpufile.vendor = off
  vendor_not_loaded,      // no NVIDIA libcufile found, or it would not load or open
  vendor_compat_only,     // NVIDIA's driver reports no GDS: it would only add a layer
  vendor_file_refused,    // NVIDIA's driver refused the file (5027 in containers and VMs)
  vendor_asynchronous,    // batch and stream IO stay on gpufile's workers (a Future's IO is
                          // taken as a synchronous call: File::start runs it inline)
  vendor_host_memory,     // the buffer is host memory: gpufile reads into it directly
  vendor_small,           // at or below small_io_kb: gpufile's one-step path
  vendor_unaligned,       // offset, size or address off the 4 KiB grid NVIDIA's DMA needs
  vendor_page_cache,      // gpufile chose the page cache (cached range, tmpfs, policy)
  vendor_direct,          // large aligned IO into GPU memory: NVIDIA's cuFileRead/cuFileWrite
  count
};
const char* describe(Reason why);

// ---- storage -------------------------------------------------------------------------------------

// The largest read that may skip cachestat on the strength of the file's last answer: the
// syscall costs about half of a cached 4 KiB pread, while above a few pieces it is noise.
inline constexpr uint64_t kGuessMaxBytes = 1 << 20;

struct StorageFacts {
  sys::IoKind kind = sys::IoKind::read;
  bool keep_cache = false;     // choose_cache kept the file: reads that miss go through the cache
  uint64_t len = 0;
  bool direct_capable = false; // the file has a working O_DIRECT fd staging can serve
  bool memory_backed = false;  // tmpfs / ramfs
  bool opened_direct = false;  // the caller's fd has O_DIRECT
  DirectIoPolicy policy = DirectIoPolicy::automatic;
  bool force_odirect = false;
  bool looks_cached = false;   // the file's last cachestat found a read's range all cached
  bool nowait_refused = false; // the file system refused RWF_NOWAIT once
  bool cache_windows = false;  // reads of the file may copy out of page-cache windows
  uint64_t small_io_bytes = 0; // gpufile.small_io_kb: reads this short never use the windows
  bool windows_live = false;   // pages of the file are registered for that right now
  // Residency of the range, where the caller asked (wants_residency) and the kernel answered.
  std::optional<sys::Residency> residency;
};

struct StorageChoice {
  bool direct = false;
  // Read with RWF_NOWAIT first: bytes missing from the cache drop the file's guess.
  bool guessed = false;
  Reason why = Reason::no_direct;
};

// Whether choose_storage needs the range's residency (one cachestat call) for these facts.
bool wants_residency(const StorageFacts& f);
StorageChoice choose_storage(const StorageFacts& f);

// Whether a read copies its cached bytes into the GPU straight out of the file's page-cache
// windows (exec/cache_windows.hpp; the caller's thread tries, piece by piece, and stages what no
// window serves): GPU memory, the page cache chosen, and the bytes known to be there (a file in
// memory, found cached, or guessed so). Not small IO: one kernel read and one small copy on the
// caller's thread beat the per-call change-notice check and window lookups (4 KiB random reads
// on the H200 lost 5-7% through the windows).
bool copies_from_cache(const StorageFacts& f, const StorageChoice& c, bool staged);

// ---- the page cache on a miss (gpufile.cache_policy) -------------------------------------------

// Under gpufile.cache_policy=auto, a file is kept when it takes at most 1/kKeepShareOfRoom of
// the memory the page cache can hold (exec/memory_room.hpp). Half: the reader's own host memory
// (pinned staging, host tensors) and the rest of the machine's cached files need the other half,
// and a file larger than that would, read through the cache, push out other cached data and,
// read again, its own first pages before its last (the kernel's LRU evicts the oldest first).
inline constexpr uint64_t kKeepShareOfRoom = 2;

struct CacheFacts {
  CachePolicy policy = CachePolicy::automatic;
  uint64_t file_size = 0;
  bool memory_backed = false;       // tmpfs / ramfs
  bool block_device = false;        // st_size is not its size
  bool vendor_direct = false;       // NVIDIA's library carries its IO (as choose_vendor: GDS or
                                    // gpufile.vendor=on) and registered the file
  std::optional<uint64_t> room;     // bytes the page cache can hold; nullopt: unknown
};

struct CacheChoice {
  bool keep = false;  // reads that miss the cache go through it (else O_DIRECT, as before)
  Reason why = Reason::cache_bypass;
};

// Chosen once per file, when it is registered: whether reads of ranges not in the page cache
// read through it (so that the next reader, a restarted server among them, finds the bytes
// there) or past it with O_DIRECT.
CacheChoice choose_cache(const CacheFacts& f);

// ---- vendor direct (NVIDIA's libcufile) ----------------------------------------------------------

// The grid NVIDIA's DMA wants: file offset, size and GPU address on it go straight to the GPU.
inline constexpr uint64_t kVendorAlign = 4096;

struct VendorFacts {
  VendorPolicy policy = VendorPolicy::automatic;
  bool loaded = false;         // NVIDIA's library is loaded and its driver open
  bool driver_gds = false;     // its driver reports GDS: an nvidia-fs version, or P2PDMA
  bool file_accepted = false;  // its driver registered this file
  bool synchronous = true;     // the caller waits (cuFileRead/Write and the other sync APIs)
  bool device_memory = false;  // the buffer is GPU memory (not managed, not host)
  uint64_t len = 0;
  uint64_t file_offset = 0;
  uint64_t address = 0;        // the GPU address the bytes go to or come from
  uint64_t small_io_bytes = 0; // gpufile.small_io_kb in bytes
  StorageChoice storage;       // what gpufile's own paths would do with it
};

struct VendorChoice {
  bool use = false;
  Reason why = Reason::vendor_off;
};

// Whether NVIDIA's cuFileRead/cuFileWrite carries the IO. Only where gpufile itself would go to
// the disk (O_DIRECT): a cached range is served better from the page cache, and a write must
// land in registered page-cache windows (pages_registered) to keep them true.
VendorChoice choose_vendor(const VendorFacts& f);

// ---- threads -------------------------------------------------------------------------------------

enum class Runner : int {
  caller,              // the calling thread runs every piece (through its own staging)
  caller_and_workers,  // the caller runs pieces while idle workers take others
  workers,             // the workers run every piece; the caller waits (or does not, if async)
};
const char* describe(Runner r);

struct LoadFacts {
  uint64_t len = 0;
  uint64_t grid_offset = 0;     // file offset minus the offset rounded down to the DIO alignment
  bool synchronous = true;      // the caller waits for the result
  bool staged = true;           // GPU memory, staged through pinned host memory (else host memory)
  uint64_t small_io_bytes = 0;  // gpufile.small_io_kb in bytes; 0 keeps IO off the caller
  unsigned callers = 1;         // synchronous calls running now, this one included
  unsigned workers = 1;
  unsigned idle_workers = 0;    // workers asleep for want of work
  unsigned cores = 1;
  uint64_t min_chunk = 256 << 10;
  uint64_t slab = 4 << 20;      // the largest piece: one staging slab
  // The read fills the page cache before it reads (exec::fill_cache_first), in folios of this
  // many bytes, and fills only pieces at least that long: no piece is cut shorter. 0: no fill.
  uint64_t fill_folio = 0;
  // The bytes are copied into the GPU straight out of registered page-cache windows
  // (copies_from_cache, with windows ready or the read short): no kernel read, no CPU copy.
  bool from_page_cache = false;
  // Not that, but the read could make the windows it lacks as it goes: a staged read of cached
  // bytes read before, of a file that takes page-cache DMA, at least
  // gpufile.pagecache_dma_long_read_mb long.
  bool windows_to_make = false;
};

struct ThreadPlan {
  Runner runner = Runner::workers;
  uint64_t step = 0;       // pieces sit on a grid of this many bytes (a 4 KiB multiple)
  uint32_t pieces = 1;     // how many pieces that makes
  unsigned helpers = 0;    // workers to wake: for the pieces the caller leaves, or for all of them
  Reason why = Reason::asynchronous;
  // The caller makes the request's missing page-cache windows while the workers take its
  // pieces (exec::Job::makes_windows_ahead): only where workers share it.
  bool make_windows_ahead = false;
};

// The size of the pieces a request of `len` bytes is cut into when `pieces` threads share it:
// equal shares, none below min_chunk (a piece's fixed costs outweigh another thread's help
// there), none above a slab, on a 4 KiB grid.
uint64_t piece_step(uint64_t len, unsigned pieces, uint64_t min_chunk, uint64_t slab);
// How many pieces [grid_offset, grid_offset + len) makes on a grid of `step`.
uint32_t piece_count(uint64_t grid_offset, uint64_t len, uint64_t step);

ThreadPlan plan_threads(const LoadFacts& f);
// Every piece to the workers, spread over all of them (what plan_threads does for asynchronous
// IO; the runtime's fallback when no caller staging is free).
ThreadPlan plan_for_workers(const LoadFacts& f, Reason why);

}  // namespace gpufile::route
