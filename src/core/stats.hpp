// Per-process IO statistics. The data path calls record_*; the cuFile stats API
// (src/capi/stats.cpp), gpufile's APIs and `gpufile check` read snapshot(). While collecting,
// the counters are also published for other processes (`gpufile stats PID`,
// core/stats_export.hpp); every snapshot() is published too.
//
// Cost: with stats off (level 0, or stopped) every record_* call except record_path is one
// relaxed atomic load. record_path (bytes and operations per data path) is always on, because
// gpufile's own tools report which path carried the bytes even when cuFile stats are off.
// All counters are relaxed atomics: a snapshot is not a consistent cut across counters, only
// each counter on its own is exact.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace gpufile::stats {

enum class Op : int { read = 0, write, count };

// The path a piece of a request took (docs/paths: DESIGN.md "The data path").
// page_cache_dma: copied into the GPU straight out of registered page-cache pages
// (exec/cache_windows.hpp), no kernel read and no staging. remote: an S3/HTTP object
// (api/remote_file.cpp). vendor: moved by NVIDIA's own libcufile (path 5,
// src/vendor/nvidia.hpp). One line per path: the enum, its name in every report (Python's
// gpufile.stats(), `gpufile stats PID`, `gpufile demo`) and the shared-memory layout all
// follow this list. A path added changes the shared-memory segment's layout, which a
// static_assert in core/stats_export.cpp catches: raise kSegmentVersion there; the C++ API
// (include/gpufile/stats.hpp) has a field per path, mapped in cppapi/driver.cpp.
#define GPUFILE_STATS_PATHS(X) \
  X(staged_direct)             \
  X(page_cache)                \
  X(host_direct)               \
  X(small_io)                  \
  X(page_cache_dma)            \
  X(remote)                    \
  X(vendor)

#define GPUFILE_STATS_PATH_ENUMERATOR(name) name,
enum class Path : int { GPUFILE_STATS_PATHS(GPUFILE_STATS_PATH_ENUMERATOR) count };
#undef GPUFILE_STATS_PATH_ENUMERATOR

inline constexpr int kOps = static_cast<int>(Op::count);
inline constexpr int kPaths = static_cast<int>(Path::count);
inline constexpr int kHistogramBuckets = 32;  // as cuFile's read/write_size_kb_hist
inline constexpr int kMaxLevel = 3;

#define GPUFILE_STATS_PATH_NAME(name) #name,
inline constexpr const char* kPathNames[kPaths] = {GPUFILE_STATS_PATHS(GPUFILE_STATS_PATH_NAME)};
#undef GPUFILE_STATS_PATH_NAME
inline constexpr const char* kOpNames[kOps] = {"read", "write"};

// Latency histogram of calls, in microseconds: bucket 0 holds calls under 1 us, bucket k
// (1..30) those of [2^(k-1), 2^k) us, bucket 31 those of 2^30 us (18 minutes) and more.
inline constexpr int kLatencyBuckets = 32;

// Per-device rows: GPU ordinals 0..kMaxGpus-1 have a row each; IO into host memory has its
// own row; GPUs of higher ordinals (rare: more than 32 in one process) share the last row.
inline constexpr int kMaxGpus = 32;
inline constexpr int kHostRow = kMaxGpus;
inline constexpr int kOtherGpusRow = kMaxGpus + 1;
inline constexpr int kDeviceRows = kMaxGpus + 2;

// ---- control -----------------------------------------------------------------------------------

// Level 0 collects nothing (but per-path counters), 1 the counters of cuFile's L1, 2 adds the
// size and latency histograms, 3 the per-device rows. Returns false (level unchanged) outside
// 0..3.
bool set_level(int level);
int level();

// Collection runs while started (the initial state) and level > 0. Stop pauses it; counters
// stay readable. cuFileStatsStart/Stop.
void start();
void stop();
bool started();

// True when counters of `min_level` are being collected now.
bool collecting(int min_level = 1);

// Zeroes every counter, per-path ones included (cuFileStatsReset).
void reset();

// ---- recording (the data path) -----------------------------------------------------------------

// One cuFileRead/Write-like call. Bytes and latency count for successful calls only.
void record_call(Op op, uint64_t bytes, uint64_t latency_ns, bool ok);
// One piece of a request carried by `path` (a request split into chunks counts each chunk).
void record_path(Op op, Path path, uint64_t bytes);

// When a call began, for its latency: the steady clock in ns while stats are collected, else 0,
// so that with stats off the data path reads no clock.
uint64_t call_started();
// Nanoseconds since `started` (a call_started() value); 0 for a call begun with stats off.
uint64_t since(uint64_t started);

// One user-visible IO finished (a call, a Future's completion, a batch entry): its latency
// (from `started`, a call_started() value) into the histogram of its op and `path` (level 2;
// not for a failed IO), its bytes and call into the row of `device` (level 3; a CUDA device
// ordinal, or -1 for host memory). Nothing for an IO begun with stats off (`started` 0).
void record_finished(Op op, Path path, int device, uint64_t bytes, uint64_t started, bool ok);
// Its two parts, for a caller that measured the latency itself.
void record_latency(Op op, Path path, uint64_t latency_ns);        // level >= 2
void record_device(Op op, int device, uint64_t bytes, bool ok);  // level >= 3
// Bytes of one request moved by its caller's own thread and by the IO workers.
void record_runners(Op op, uint64_t caller_bytes, uint64_t worker_bytes);

void record_handle_register(bool ok);
void record_handle_deregister(bool ok);
void record_buffer_register(bool ok, uint64_t bytes);
void record_buffer_deregister(bool ok);

void record_batch_setup(bool ok);
// One cuFileBatchIOSubmit of `entries` entries carrying these read and write bytes.
void record_batch_submit(bool ok, uint64_t entries, uint64_t read_bytes, uint64_t write_bytes,
                         uint64_t latency_ns);
// One batch entry finished (latency from its submission).
void record_batch_complete(Op op, uint64_t bytes, uint64_t latency_ns, bool ok);
void record_batch_cancel(bool ok);
void record_batch_destroy(bool ok);

// ---- reading -----------------------------------------------------------------------------------

struct Counter {
  uint64_t ok = 0;
  uint64_t err = 0;
};

struct OpTotals {
  Counter calls;
  uint64_t bytes = 0;
  uint64_t latency_ns = 0;       // sum over successful calls
  uint64_t first_start_ns = 0;   // steady clock; 0 = no call yet
  uint64_t last_end_ns = 0;
  uint64_t size_hist[kHistogramBuckets] = {};  // level >= 2; bucket = size_bucket(bytes)
};

struct PathTotals {
  uint64_t bytes = 0;
  uint64_t ops = 0;
  uint64_t latency_hist[kLatencyBuckets] = {};  // level >= 2; bucket = latency_bucket(ns)
};

// The IO of one device row (kDeviceRows) in one direction.
struct DeviceTotals {
  Counter calls;
  uint64_t bytes = 0;
};

struct BatchTotals {
  Counter setup, submit, complete, cancel, destroy;
  uint64_t entries_submitted = 0;
  uint64_t bytes[kOps] = {};             // bytes of completed entries, by op
  uint64_t submit_latency_ns = 0;        // sum over successful submits
  uint64_t completion_latency_ns = 0;    // sum over successful completions
  uint64_t last_submit_bytes[kOps] = {};  // the bytes of the last successful submit, by op
  uint64_t first_submit_ns = 0;          // steady clock window of batch activity
  uint64_t last_complete_ns = 0;
};

struct Snapshot {
  int level = 0;
  bool started = true;
  OpTotals ops[kOps];
  PathTotals paths[kOps][kPaths];
  DeviceTotals devices[kDeviceRows][kOps];  // level >= 3
  uint64_t caller_bytes[kOps] = {};  // moved by the calling threads themselves
  uint64_t worker_bytes[kOps] = {};  // moved by the IO workers
  Counter handle_register, handle_deregister, buffer_register, buffer_deregister;
  uint64_t registered_bytes = 0;  // bytes of successful buffer registrations
  BatchTotals batch;
};

Snapshot snapshot();

// ---- derived values (what cuFile's stats structs report) ---------------------------------------

// Histogram bucket of a transfer: floor(log2(size in KiB)); sizes under 2 KiB land in bucket 0,
// sizes of 2^31 KiB and more in bucket 31.
int size_bucket(uint64_t bytes);

// Latency histogram bucket of a call of `ns` nanoseconds (kLatencyBuckets says which holds
// what).
int latency_bucket(uint64_t ns);
// Microseconds that bucket k's calls stay under (2^k), or 0 for the last bucket, which has no
// upper bound.
uint64_t latency_bucket_below_us(int k);

// A percentile from a latency histogram: the bucket holding the call at rank ceil(q * total)
// (q in (0, 1]; q = 1 gives the slowest call's bucket). -1 for an empty histogram. Buckets
// are powers of two wide: the true value lies in [below/2, below) of that bucket.
int percentile_bucket(const uint64_t (&hist)[kLatencyBuckets], double q);

// percentile_bucket as microseconds: what its bucket stays under (2^k), the last bucket's
// lower bound (2^30: "at least"), 0 for an empty histogram.
uint64_t percentile_us(const uint64_t (&hist)[kLatencyBuckets], double q);

// The percentiles every report shows, by name ("p50", "p90", "p99", "p99.9", "max").
struct Percentile {
  const char* name;
  double q;
};
inline constexpr Percentile kPercentiles[] = {
    {"p50", 0.5}, {"p90", 0.9}, {"p99", 0.99}, {"p99.9", 0.999}, {"max", 1.0}};

// One op's latency histogram over all paths.
void add_latency(const Snapshot& s, Op op, uint64_t (&into)[kLatencyBuckets]);

// The device row of a CUDA device ordinal (-1 = host memory).
int device_row(int ordinal);

// Rates over the active window of an operation: from the start of its first call to the end
// of its last, so that concurrent calls count once. Zero when nothing was measured.
struct Rates {
  uint64_t bw_bytes_per_sec = 0;
  uint64_t ops_per_sec = 0;
  uint64_t lat_avg_us = 0;  // per successful call
  uint64_t lat_sum_us = 0;
};
Rates rates(const OpTotals& op);

struct BatchRates {
  uint64_t bw_bytes_per_sec[kOps] = {};
  uint64_t submit_lat_avg_us = 0;
  uint64_t completion_lat_avg_us = 0;
  uint64_t submit_ops_per_sec = 0;
  uint64_t complete_ops_per_sec = 0;
  uint64_t submit_lat_sum_us = 0;
  uint64_t completion_lat_sum_us = 0;
};
BatchRates batch_rates(const BatchTotals& b);

// Operations that went through the kernel's file IO (cuFile's per-GPU "posix" counters): the
// staged-direct and page-cache pieces. gpufile has no nvidia-fs path, so nvfs/p2p stay 0.
uint64_t posix_ops(const Snapshot& s, Op op);

// The summary gpufile.stats() gives, as a JSON object: per operation ("read", "write") the
// calls that succeeded and failed, the bytes, its latency histogram with percentiles
// ("latency", latency_json), and per data path ("paths", by kPathNames) bytes, pieces and
// latency; "devices": per device row with IO ("0".."31", "host", "other_gpus") and operation,
// calls and bytes; then the stats level and `pinned_staging_bytes` (staging held now, which the
// caller knows: core does not). One writer for the Python extension and the HDF5 plugin,
// whose runtime is a copy of its own, so that gpufile.stats() can add the two up.
std::string summary_json(const Snapshot& s, uint64_t pinned_staging_bytes);

// {"buckets": [counts], "p50_us": N, ... "max_us": N}: each percentile as the microseconds
// its bucket stays under; for the open-ended last bucket its lower bound (2^30); null for an
// empty histogram.
std::string latency_json(const uint64_t (&hist)[kLatencyBuckets]);

// {"0": {"read": {"calls_ok", "calls_failed", "bytes"}, "write": {...}}, "host": ...}: the
// device rows that saw IO, by device_row_name.
std::string devices_json(const Snapshot& s);

// Whether device row `row` saw any call.
bool device_row_used(const Snapshot& s, int row);

// The name of a device row: the ordinal, "host" or "other_gpus".
std::string device_row_name(int row);

// Bytes per second for `bytes` moved in `window_ns`; 0 for an empty window.
uint64_t per_second(uint64_t amount, uint64_t window_ns);

}  // namespace gpufile::stats
