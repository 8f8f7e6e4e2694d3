// cuFile's statistics API (spec §3.10): level control, start/stop/reset, and the L1/L2/L3
// structs, filled from core/stats snapshots.
//
// gpufile has no nvidia-fs: every IO goes through the kernel's file interface, so cuFile's
// "posix" counters carry what cuFile would show in compat mode, and the nvfs/p2p ones stay 0.
// L2's histograms are cuFile's size histograms (gpufile's latency histograms have no place in
// cuFile's structs: gpufile.stats() and `gpufile stats PID` show them). L3's per-GPU entries
// come from the per-device rows (bytes, calls, failures); buffer registrations, not counted
// per GPU, are on the first GPU's entry.
#include <algorithm>
#include <cstring>
#include <span>
#include <vector>

#include "core/config.hpp"
#include "core/log.hpp"
#include "core/stats.hpp"
#include "cuda/driver.hpp"
#include "capi/capi.hpp"
#include "cufile.h"
#include "exec/driver_state.hpp"

#define GPUFILE_EXPORT __attribute__((visibility("default")))

namespace gpufile::capi {

// Internal (hidden) so that tests can check the conversion without an open driver.
void fill_stats_l1(const stats::Snapshot& s, CUfileStatsLevel1_t& out);
void fill_stats_l2(const stats::Snapshot& s, CUfileStatsLevel2_t& out);
void fill_stats_l3(const stats::Snapshot& s, std::span<const cuda::CUuuid> gpus, CUfileStatsLevel3_t& out);

namespace {

constexpr int kRead = static_cast<int>(stats::Op::read);
constexpr int kWrite = static_cast<int>(stats::Op::write);
constexpr size_t kMaxGpus = sizeof(CUfileStatsLevel3_t::per_gpu_stats) / sizeof(CUfilePerGpuStats_t);

CUfileOpCounter_t counter(const stats::Counter& c) { return {c.ok, c.err}; }

void fill_io(const stats::Snapshot& s, CUfileStatsLevel1_t& out) {
  const stats::OpTotals& r = s.ops[kRead];
  const stats::OpTotals& w = s.ops[kWrite];
  const stats::Rates rr = stats::rates(r);
  const stats::Rates wr = stats::rates(w);
  out.read_ops = counter(r.calls);
  out.write_ops = counter(w.calls);
  out.hdl_register_ops = counter(s.handle_register);
  out.hdl_deregister_ops = counter(s.handle_deregister);
  out.buf_register_ops = counter(s.buffer_register);
  out.buf_deregister_ops = counter(s.buffer_deregister);
  out.read_bytes = r.bytes;
  out.write_bytes = w.bytes;
  out.read_bw_bytes_per_sec = rr.bw_bytes_per_sec;
  out.write_bw_bytes_per_sec = wr.bw_bytes_per_sec;
  out.read_lat_avg_us = rr.lat_avg_us;
  out.write_lat_avg_us = wr.lat_avg_us;
  out.read_ops_per_sec = rr.ops_per_sec;
  out.write_ops_per_sec = wr.ops_per_sec;
  out.read_lat_sum_us = rr.lat_sum_us;
  out.write_lat_sum_us = wr.lat_sum_us;
}

// Every batch entry is served by gpufile's own engine, which cuFile would call "posix".
void fill_batch(const stats::BatchTotals& b, CUfileStatsLevel1_t& out) {
  const stats::BatchRates br = stats::batch_rates(b);
  out.batch_submit_ops = counter(b.submit);
  out.batch_complete_ops = counter(b.complete);
  out.batch_setup_ops = counter(b.setup);
  out.batch_cancel_ops = counter(b.cancel);
  out.batch_destroy_ops = counter(b.destroy);
  out.batch_enqueued_ops = {b.entries_submitted, 0};
  out.batch_posix_enqueued_ops = out.batch_enqueued_ops;
  out.batch_processed_ops = counter(b.complete);
  out.batch_posix_processed_ops = out.batch_processed_ops;
  out.batch_total_submit_ops = counter(b.submit);
  out.batch_read_bytes = b.bytes[kRead];
  out.batch_write_bytes = b.bytes[kWrite];
  out.batch_read_bw_bytes = br.bw_bytes_per_sec[kRead];
  out.batch_write_bw_bytes = br.bw_bytes_per_sec[kWrite];
  out.batch_submit_lat_avg_us = br.submit_lat_avg_us;
  out.batch_completion_lat_avg_us = br.completion_lat_avg_us;
  out.batch_submit_ops_per_sec = br.submit_ops_per_sec;
  out.batch_complete_ops_per_sec = br.complete_ops_per_sec;
  out.batch_submit_lat_sum_us = br.submit_lat_sum_us;
  out.batch_completion_lat_sum_us = br.completion_lat_sum_us;
  out.last_batch_read_bytes = b.last_submit_bytes[kRead];
  out.last_batch_write_bytes = b.last_submit_bytes[kWrite];
}

// GPU `ordinal`'s row of the per-device counters (level 3): bytes, calls and failures. Every
// gpufile IO is what cuFile calls compat-mode ("posix") IO, so the posix counts are the calls.
// Durations and bandwidths are not measured per GPU: they stay 0.
void fill_gpu(const stats::Snapshot& s, int ordinal, CUfilePerGpuStats_t& g) {
  const stats::DeviceTotals& r = s.devices[stats::device_row(ordinal)][kRead];
  const stats::DeviceTotals& w = s.devices[stats::device_row(ordinal)][kWrite];
  g.read_bytes = r.bytes;
  g.n_total_reads = r.calls.ok;
  g.n_posix_reads = r.calls.ok;
  g.n_reads_err = r.calls.err;
  g.writes_bytes = w.bytes;
  g.n_total_writes = w.calls.ok;
  g.n_posix_writes = w.calls.ok;
  g.n_writes_err = w.calls.err;
}

// Buffer registrations are not counted per GPU: the first GPU's entry carries them all.
void fill_registrations(const stats::Snapshot& s, CUfilePerGpuStats_t& g) {
  g.n_mmap = s.buffer_register.ok + s.buffer_register.err;
  g.n_mmap_ok = s.buffer_register.ok;
  g.n_mmap_err = s.buffer_register.err;
  g.n_mmap_free = s.buffer_deregister.ok;
  g.reg_bytes = s.registered_bytes;
}

// The GPUs of this machine, as the CUDA driver lists them; none without a driver.
std::vector<cuda::CUuuid> gpu_uuids() {
  std::vector<cuda::CUuuid> uuids;
  const cuda::Driver* d = cuda::driver();
  if (!d) return uuids;
  const int n = std::min<int>(d->device_count, static_cast<int>(kMaxGpus));
  for (int i = 0; i < n; ++i) {
    cuda::CUdevice dev = 0;
    cuda::CUuuid uuid{};
    if (d->DeviceGet(&dev, i) == cuda::CUDA_SUCCESS) d->DeviceGetUuid(&uuid, dev);
    uuids.push_back(uuid);
  }
  return uuids;
}

using capi::result_of;

using capi::catch_all;

// Start/Stop/Reset act on an open driver only.
template <typename Fn>
CUfileError_t when_open(const char* where, Fn&& fn) noexcept {
  return catch_all(where, [&] {
    if (!driver_is_open()) return result_of(CU_FILE_DRIVER_NOT_INITIALIZED);
    fn();
    return result_of(CU_FILE_SUCCESS);
  });
}

// The L1/L2/L3 getters: an open driver, a non-null struct and at least that level enabled.
template <typename T, typename Fill>
CUfileError_t get_stats(const char* where, T* out, int level, Fill fill) noexcept {
  return catch_all(where, [&] {
    if (!driver_is_open()) return result_of(CU_FILE_DRIVER_NOT_INITIALIZED);
    if (!out || stats::level() < level) return result_of(CU_FILE_INVALID_VALUE);
    const stats::Snapshot s = stats::snapshot();
    fill(s, *out);
    return result_of(CU_FILE_SUCCESS);
  });
}

}  // namespace

void fill_stats_l1(const stats::Snapshot& s, CUfileStatsLevel1_t& out) {
  out = CUfileStatsLevel1_t{};
  fill_io(s, out);
  fill_batch(s.batch, out);
}

void fill_stats_l2(const stats::Snapshot& s, CUfileStatsLevel2_t& out) {
  out = CUfileStatsLevel2_t{};
  fill_stats_l1(s, out.basic);
  std::copy(std::begin(s.ops[kRead].size_hist), std::end(s.ops[kRead].size_hist), out.read_size_kb_hist);
  std::copy(std::begin(s.ops[kWrite].size_hist), std::end(s.ops[kWrite].size_hist), out.write_size_kb_hist);
}

void fill_stats_l3(const stats::Snapshot& s, std::span<const cuda::CUuuid> gpus, CUfileStatsLevel3_t& out) {
  out = CUfileStatsLevel3_t{};
  fill_stats_l2(s, out.detailed);
  out.num_gpus = static_cast<uint32_t>(std::min(gpus.size(), kMaxGpus));
  for (uint32_t i = 0; i < out.num_gpus; ++i) {
    std::memcpy(out.per_gpu_stats[i].uuid, gpus[i].bytes, CUFILE_GPU_UUID_LEN);
    fill_gpu(s, static_cast<int>(i), out.per_gpu_stats[i]);
  }
  if (out.num_gpus > 0) fill_registrations(s, out.per_gpu_stats[0]);
}

}  // namespace gpufile::capi

using namespace gpufile;

extern "C" {

// Overrides profile.cufile_stats. While closed, the level is also staged so that the next open
// keeps it instead of the value of cufile.json.
GPUFILE_EXPORT CUfileError_t cuFileSetStatsLevel(int level) {
  return capi::catch_all(__func__, [&] {
    if (level < 0 || level > stats::kMaxLevel) return capi::result_of(CU_FILE_INVALID_VALUE);
    if (!with_open_settings([&](Settings& s) { s.stats_level = level; }))
      config::stage_size(config::SizeParam::profile_stats, static_cast<size_t>(level));
    stats::set_level(level);
    return capi::result_of(CU_FILE_SUCCESS);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileGetStatsLevel(int* level) {
  return capi::catch_all(__func__, [&] {
    if (!level) return capi::result_of(CU_FILE_INVALID_VALUE);
    *level = stats::level();
    return capi::result_of(CU_FILE_SUCCESS);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileStatsStart(void) { return capi::when_open(__func__, stats::start); }

// NVIDIA's library also drops the level to 0 here (tests/conformance, section stats): the
// getters then refuse until cuFileSetStatsLevel raises it again.
GPUFILE_EXPORT CUfileError_t cuFileStatsStop(void) {
  return capi::when_open(__func__, [] {
    stats::stop();
    with_open_settings([](Settings& s) { s.stats_level = 0; });
    stats::set_level(0);
  });
}

GPUFILE_EXPORT CUfileError_t cuFileStatsReset(void) { return capi::when_open(__func__, stats::reset); }

GPUFILE_EXPORT CUfileError_t cuFileGetStatsL1(CUfileStatsLevel1_t* out) {
  return capi::get_stats(__func__, out, 1, capi::fill_stats_l1);
}

GPUFILE_EXPORT CUfileError_t cuFileGetStatsL2(CUfileStatsLevel2_t* out) {
  return capi::get_stats(__func__, out, 2, capi::fill_stats_l2);
}

GPUFILE_EXPORT CUfileError_t cuFileGetStatsL3(CUfileStatsLevel3_t* out) {
  return capi::get_stats(__func__, out, 3, [](const stats::Snapshot& s, CUfileStatsLevel3_t& l3) {
    const std::vector<cuda::CUuuid> gpus = capi::gpu_uuids();
    capi::fill_stats_l3(s, gpus, l3);
  });
}

}  // extern "C"
