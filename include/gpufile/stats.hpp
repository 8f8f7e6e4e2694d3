// IO statistics of this process (what cuFileGetStatsL1 and `gpufile stats` read).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "gpufile/export.hpp"

namespace gpufile {

// How long calls took, from their start to their completion (a Future's or a batch entry's
// included): counted while profile.cufile_stats is 2 or more.
struct LatencyStats {
  // Calls per bucket: [0] under 1 us, [k] from 2^(k-1) to under 2^k us, [31] 2^30 us and more.
  std::array<std::uint64_t, 32> buckets{};
  // Percentiles, each as the microseconds its bucket stays under (so the true value is between
  // half that and that); 2^30 for the last bucket; 0 when no call was timed.
  std::uint64_t p50_us = 0, p90_us = 0, p99_us = 0, p999_us = 0, max_us = 0;
};

struct PathStats {
  std::uint64_t bytes = 0;
  std::uint64_t ops = 0;  // pieces: a request split into chunks counts each
  LatencyStats latency;   // calls that moved most of their bytes on this path
};

// The IO into or out of one device's memory, counted while profile.cufile_stats is 3.
struct DeviceStats {
  static constexpr int kHost = -1;       // host memory
  static constexpr int kOtherGpus = -2;  // GPUs of ordinal 32 and up, together
  int device = kHost;                    // the CUDA device ordinal, or kHost / kOtherGpus
  std::uint64_t read_calls_ok = 0, read_calls_failed = 0, read_bytes = 0;
  std::uint64_t write_calls_ok = 0, write_calls_failed = 0, write_bytes = 0;
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
  PathStats remote;         // an S3/HTTP object (RemoteFile)
  PathStats vendor;         // moved by NVIDIA's own libcufile (GPUDirect Storage; docs/design-direct-dma.md)
  LatencyStats latency;     // every path together
  std::uint64_t caller_bytes = 0;  // moved by the calling threads themselves
  std::uint64_t worker_bytes = 0;  // moved by gpufile's IO workers
};

// The batch API's counters (IoBatch and cuFileBatchIO*, counted while profile.cufile_stats is 1
// or more): calls by outcome, entries by outcome, bytes of the entries that completed.
struct BatchStats {
  std::uint64_t setup_ok = 0, setup_failed = 0;      // IoBatch made, cuFileBatchIOSetUp
  std::uint64_t submit_ok = 0, submit_failed = 0;    // submissions
  std::uint64_t entries_submitted = 0;               // entries of the accepted submissions
  std::uint64_t entries_ok = 0, entries_failed = 0;  // entries that ended
  std::uint64_t cancel_ok = 0, cancel_failed = 0;
  std::uint64_t destroy_ok = 0, destroy_failed = 0;
  std::uint64_t read_bytes = 0, write_bytes = 0;     // moved by the entries that completed
  std::uint64_t submit_latency_avg_us = 0;           // a submission call, on average
  std::uint64_t completion_latency_avg_us = 0;       // an entry, from submission to completion
};

struct Stats {
  int level = 0;  // profile.cufile_stats of the open driver
  OpStats read;
  OpStats write;
  BatchStats batch;
  std::uint64_t pinned_staging_bytes = 0;  // pinned staging memory held now (0 when closed)
  std::vector<DeviceStats> devices;        // those that saw IO: GPUs by ordinal, host, others
};

GPUFILE_API Stats statistics();
// Zeroes every counter.
GPUFILE_API void reset_statistics();

}  // namespace gpufile
