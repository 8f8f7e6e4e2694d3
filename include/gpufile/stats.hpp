// IO statistics of this process (what cuFileGetStatsL1 and `gpufile stats` read).
#pragma once

#include <cstdint>

#include "gpufile/export.hpp"

namespace gpufile {

struct PathStats {
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;  // pieces: a request split into chunks counts each
};

struct OpStats {
  // Calls of every API (this one, cuFile, Python); counted while the setting
  // profile.cufile_stats is 1 or more (it is 0 by default).
  std::uint64_t calls_ok = 0;
  std::uint64_t calls_failed = 0;
  std::uint64_t bytes = 0;
  // Bytes by the path that carried them: always counted (docs: "How a read travels").
  PathStats staged_direct;  // O_DIRECT into pinned staging, copied to the GPU
  PathStats page_cache;     // through the page cache
  PathStats host_direct;    // O_DIRECT straight into host memory
  PathStats small_io;       // one step on the calling thread
  PathStats page_cache_dma; // copied to the GPU straight out of registered page-cache pages
  PathStats vendor;         // moved by NVIDIA's own libcufile (GPUDirect Storage; docs/paths.md)
  std::uint64_t caller_bytes = 0;  // moved by the calling threads themselves
  std::uint64_t worker_bytes = 0;  // moved by gpufile's IO workers
};

struct Stats {
  int level = 0;  // profile.cufile_stats of the open driver
  OpStats read;
  OpStats write;
  std::uint64_t pinned_staging_bytes = 0;  // pinned staging memory held now (0 when closed)
};

GPUFILE_API Stats statistics();
// Zeroes every counter.
GPUFILE_API void reset_statistics();

}  // namespace gpufile
