// The effective configuration of one open driver session. Every value comes from, in rising
// precedence: built-in default < cufile.json < environment < API (cuFileSetParameter*, the
// cuFileDriverSet* calls, or the C++ API). src/core/config.cpp resolves it; docs/settings.md
// lists every row. Sizes that cuFile expresses in KB keep their cuFile name and unit here so that
// the parameter API can hand them back unchanged.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gpufile {

enum class LogLevel : int { trace = 0, debug, info, notice, warn, error, off };

// How the aligned body of a request reaches storage.
enum class DirectIoPolicy : int {
  automatic = 0,  // O_DIRECT when the file allows it and the range is not already cached
  always,         // O_DIRECT whenever the file allows it
  never,          // always through the page cache
};

// What a read that misses the page cache does to it (docs/settings.md, gpufile.cache_policy).
// Only reads the direct_io policy would send O_DIRECT for want of cached bytes are concerned.
enum class CachePolicy : int {
  automatic = 0,  // per file, at registration: keep when it fits the memory the cache can hold
  keep,           // read through the page cache, so the bytes stay cached for the next reader
  bypass,         // read with O_DIRECT: the page cache is left as it was
};

// Which IO engine the workers use.
enum class EnginePolicy : int {
  automatic = 0,  // io_uring when the kernel allows it, else posix (one log line says why)
  io_uring,       // io_uring or fail at open
  posix,          // pread/pwrite only
};

// Where the IO workers run and their staging lives on hosts with several NUMA nodes.
enum class NumaPlacement : int {
  automatic = 0,  // near the GPUs the process serves (src/exec/placement.hpp)
  off,            // wherever the kernel puts them
};

// Whether reads and writes may go through NVIDIA's own libcufile (path 5, "vendor direct",
// src/vendor/nvidia.hpp) for true GPUDirect Storage.
enum class VendorPolicy : int {
  automatic = 0,  // where NVIDIA's driver reports GDS (nvidia-fs or P2PDMA), not in compat mode
  on,             // whenever NVIDIA's library loads, compat mode included
  off,            // never load it
};

struct Settings {
  // ---- cuFile keys (cufile.json name in comments) --------------------------------------------
  // logging.*
  LogLevel log_level = LogLevel::error;      // logging.level / CUFILE_LOGGING_LEVEL
  std::string log_dir;                       // logging.dir
  std::string log_file;                      // CUFILE_LOGFILE_PATH (empty: stderr only)
  // profile.*
  int stats_level = 0;                       // profile.cufile_stats (0..3)
  bool nvtx = false;                         // profile.nvtx
  // execution.*
  size_t max_io_queue_depth = 128;           // execution.max_io_queue_depth (1..256)
  size_t max_io_threads = 4;                 // execution.max_io_threads (0..32)
  bool parallel_io = true;                   // execution.parallel_io
  size_t min_io_threshold_size_kb = 8192;    // execution.min_io_threshold_size_kb
  size_t max_request_parallelism = 4;        // execution.max_request_parallelism (0..8)
  // properties.*
  size_t max_direct_io_size_kb = 16384;      // properties.max_direct_io_size_kb (64..16384)
  size_t max_device_cache_size_kb = 131072;  // properties.max_device_cache_size_kb
  size_t per_buffer_cache_size_kb = 1024;    // properties.per_buffer_cache_size_kb
  size_t max_device_pinned_mem_size_kb = 33554432;  // properties.max_device_pinned_mem_size_kb
  size_t io_batchsize = 128;                 // properties.io_batchsize (1..256)
  size_t batch_io_timeout_ms = 5;            // properties.max_batch_io_timeout_msecs
  bool use_poll_mode = false;                // properties.use_poll_mode
  size_t poll_mode_max_size_kb = 4;          // properties.poll_mode_max_size_kb
  bool allow_compat_mode = true;             // properties.allow_compat_mode
  bool force_compat_mode = false;            // properties.force_compat_mode
  bool api_check_aggressive = false;         // miscellaneous.api_check_aggressive
  bool allow_system_memory = true;           // properties.allow_system_memory
  bool use_pci_p2pdma = false;               // properties.use_pci_p2pdma
  bool prefer_io_uring = false;              // properties.prefer_iouring
  bool force_odirect_mode = false;           // properties.force_odirect_mode
  bool skip_topology_detection = false;      // miscellaneous.skip_topology_detection
  bool stream_memops_bypass = false;         // miscellaneous.stream_memops_bypass
  std::vector<size_t> posix_pool_slab_size_kb{4, 1024, 16384};   // properties.posix_pool_slab_size_kb
  std::vector<size_t> posix_pool_slab_count{128, 64, 64};        // properties.posix_pool_slab_count

  // ---- gpufile's own (GPUFILE_* environment variables, "gpufile" block in cufile.json) --------
  EnginePolicy engine = EnginePolicy::automatic;       // GPUFILE_ENGINE: auto|io_uring|posix
  DirectIoPolicy direct_io = DirectIoPolicy::automatic;  // GPUFILE_DIRECT_IO: auto|always|never
  CachePolicy cache_policy = CachePolicy::automatic;  // GPUFILE_CACHE_POLICY: auto|keep|bypass
  size_t workers = 0;              // GPUFILE_WORKERS: IO worker threads; 0 = 3 per 4 cores, 4 to 16
  size_t slab_size_kb = 4096;      // GPUFILE_SLAB_SIZE_KB: one pinned staging slab
  size_t slabs_per_worker = 2;     // GPUFILE_SLABS_PER_WORKER: k in the staging ring (measured: docs/performance.md)
  size_t cold_slabs_per_worker = 2;  // GPUFILE_COLD_SLABS_PER_WORKER: the ring once long reads go past the page cache; <= k: never grows
  size_t cold_piece_kb = 512;      // GPUFILE_COLD_PIECE_KB: O_DIRECT reads in pieces of at most this, spread over the workers; 0 = a slab
  size_t shared_piece_kb = 0;      // GPUFILE_SHARED_PIECE_KB: staged pieces of cached bytes at most this where GPUs share the host; 0 = from the last-level cache
  size_t ring_depth = 64;          // GPUFILE_RING_DEPTH: io_uring submission queue entries
  size_t small_io_threshold_kb = 64;  // GPUFILE_SMALL_IO_KB: at or below, IO runs inline
  size_t min_chunk_kb = 256;       // GPUFILE_MIN_CHUNK_KB: smallest piece a request is split into
  size_t caller_slabs = 0;         // GPUFILE_CALLER_SLABS: callers' staging slabs; 0 = 2 per core, 8 or more
  size_t pagecache_dma_mb = 8192;  // GPUFILE_PAGECACHE_DMA_MB: page cache registered for DMA at most; 0 = off
  size_t pagecache_dma_idle_ms = 1000;  // GPUFILE_PAGECACHE_DMA_IDLE_MS: unused this long, a window may make room
  size_t pagecache_dma_long_read_mb = 16;  // GPUFILE_PAGECACHE_DMA_LONG_READ_MB: reads this long of bytes read before make their windows; 0 = never
  NumaPlacement numa_placement = NumaPlacement::automatic;  // GPUFILE_NUMA_PLACEMENT: auto|off
  // Remote objects (src/io/remote, docs/remote.md).
  size_t remote_part_kb = 8192;    // GPUFILE_REMOTE_PART_KB: one ranged GET (and its staging buffer)
  size_t remote_concurrency = 16;  // GPUFILE_REMOTE_CONCURRENCY: ranged GETs in flight per read
  size_t remote_transfers_per_thread = 1;  // GPUFILE_REMOTE_TRANSFERS_PER_THREAD: of those, one thread's
  size_t remote_retries = 5;       // GPUFILE_REMOTE_RETRIES: further tries of a failed request
  size_t remote_backoff_ms = 100;  // GPUFILE_REMOTE_BACKOFF_MS: first wait before a retry, doubled after
  size_t remote_timeout_s = 30;    // GPUFILE_REMOTE_TIMEOUT_S: connect / no-byte-received limit
  // NVIDIA's libcufile (src/vendor/nvidia.hpp, docs/paths.md "Vendor direct").
  VendorPolicy vendor = VendorPolicy::automatic;  // GPUFILE_VENDOR: auto|on|off
  std::string vendor_library;      // GPUFILE_VENDOR_LIBRARY: its path; empty = search the usual places
};

}  // namespace gpufile
