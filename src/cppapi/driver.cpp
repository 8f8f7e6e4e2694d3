// The driver session, settings and statistics of the public API, over the runtime, the config
// layer (settings by cufile.json key) and the stats counters: the same calls Python's
// gpufile.settings(), set_setting() and stats() make.
#include <algorithm>
#include <iterator>
#include <utility>

#include <nlohmann/json.hpp>

#include "capi/capi.hpp"
#include "core/config.hpp"
#include "core/stats.hpp"
#include "cppapi/raise.hpp"
#include "cuda/memory.hpp"
#include "exec/runtime.hpp"
#include "gpufile/settings.hpp"
#include "gpufile/stats.hpp"

namespace gpufile {

// ---- driver ----------------------------------------------------------------------------------

void driver_open() {
  if (Error e = Runtime::instance().open()) cppapi::raise(e, "driver_open");
}

void driver_close() {
  Error e = Runtime::instance().close();
  // As cuFileDriverClose does: the cuFile stream API's staging (reachable through
  // File::handle()) must not outlive the driver.
  if (e.ok() && !Runtime::instance().is_open()) capi::on_driver_closed();
  if (e && e.code != Errc::driver_not_open) cppapi::raise(e, "driver_close");
}

bool is_driver_open() { return Runtime::instance().is_open(); }

std::string io_engine() {
  if (Error e = Runtime::instance().ensure_open()) cppapi::raise(e, "io_engine");
  return Runtime::instance().engine_name();
}

// ---- settings --------------------------------------------------------------------------------

namespace {

Settings current_settings() {
  Runtime& rt = Runtime::instance();
  return rt.is_open() ? rt.settings() : config::resolve().settings;
}

}  // namespace

std::string settings_json() { return config::settings_json(current_settings()); }

std::string setting(std::string_view key) {
  const auto all = nlohmann::json::parse(settings_json());
  const auto it = all.find(std::string(key));
  if (it == all.end()) cppapi::raise(errc::invalid_argument, "unknown setting " + std::string(key));
  return it->dump();
}

void set_setting_json(std::string_view key, std::string_view value_json) {
  if (Runtime::instance().is_open())
    cppapi::raise(errc::driver_open, "set_setting " + std::string(key) +
                                         ": call driver_close() first (Files opened before stay "
                                         "open but their IO fails)");
  const std::string problem = config::stage_json(key, value_json);
  if (!problem.empty()) cppapi::raise(errc::invalid_argument, "set_setting: " + problem);
}

void set_setting(std::string_view key, std::string_view text) {
  set_setting_json(key, nlohmann::json(std::string(text)).dump());
}

void set_setting(std::string_view key, bool value) {
  set_setting_json(key, value ? "true" : "false");
}

// ---- statistics ------------------------------------------------------------------------------

namespace {

LatencyStats latency_stats(const uint64_t (&hist)[stats::kLatencyBuckets]) {
  LatencyStats out;
  std::copy(std::begin(hist), std::end(hist), out.buckets.begin());
  out.p50_us = stats::percentile_us(hist, 0.5);
  out.p90_us = stats::percentile_us(hist, 0.9);
  out.p99_us = stats::percentile_us(hist, 0.99);
  out.p999_us = stats::percentile_us(hist, 0.999);
  out.max_us = stats::percentile_us(hist, 1.0);
  return out;
}

PathStats path_stats(const stats::Snapshot& s, int op, stats::Path path) {
  const stats::PathTotals& t = s.paths[op][static_cast<int>(path)];
  return {t.bytes, t.ops, latency_stats(t.latency_hist)};
}

// The public struct's field of each path (a path added to core/stats gets its line here).
constexpr std::pair<stats::Path, PathStats OpStats::*> kPathFields[] = {
    {stats::Path::staged_direct, &OpStats::staged_direct},
    {stats::Path::page_cache, &OpStats::page_cache},
    {stats::Path::host_direct, &OpStats::host_direct},
    {stats::Path::small_io, &OpStats::small_io},
    {stats::Path::page_cache_dma, &OpStats::page_cache_dma},
    {stats::Path::remote, &OpStats::remote},
    {stats::Path::vendor, &OpStats::vendor},
};
static_assert(std::size(kPathFields) == stats::kPaths, "a path of core/stats has no field here");

OpStats op_stats(const stats::Snapshot& s, stats::Op which) {
  const int op = static_cast<int>(which);
  OpStats out;
  out.calls_ok = s.ops[op].calls.ok;
  out.calls_failed = s.ops[op].calls.err;
  out.bytes = s.ops[op].bytes;
  for (const auto& [path, field] : kPathFields) out.*field = path_stats(s, op, path);
  uint64_t latency[stats::kLatencyBuckets] = {};
  stats::add_latency(s, which, latency);
  out.latency = latency_stats(latency);
  out.caller_bytes = s.caller_bytes[op];
  out.worker_bytes = s.worker_bytes[op];
  return out;
}

DeviceStats device_stats(const stats::Snapshot& s, int row) {
  DeviceStats d;
  d.device = row == stats::kHostRow        ? DeviceStats::kHost
             : row == stats::kOtherGpusRow ? DeviceStats::kOtherGpus
                                           : row;
  const stats::DeviceTotals& r = s.devices[row][static_cast<int>(stats::Op::read)];
  const stats::DeviceTotals& w = s.devices[row][static_cast<int>(stats::Op::write)];
  d.read_calls_ok = r.calls.ok;
  d.read_calls_failed = r.calls.err;
  d.read_bytes = r.bytes;
  d.write_calls_ok = w.calls.ok;
  d.write_calls_failed = w.calls.err;
  d.write_bytes = w.bytes;
  return d;
}

BatchStats batch_stats(const stats::BatchTotals& b) {
  const stats::BatchRates r = stats::batch_rates(b);
  BatchStats out;
  out.setup_ok = b.setup.ok;
  out.setup_failed = b.setup.err;
  out.submit_ok = b.submit.ok;
  out.submit_failed = b.submit.err;
  out.entries_submitted = b.entries_submitted;
  out.entries_ok = b.complete.ok;
  out.entries_failed = b.complete.err;
  out.cancel_ok = b.cancel.ok;
  out.cancel_failed = b.cancel.err;
  out.destroy_ok = b.destroy.ok;
  out.destroy_failed = b.destroy.err;
  out.read_bytes = b.bytes[static_cast<int>(stats::Op::read)];
  out.write_bytes = b.bytes[static_cast<int>(stats::Op::write)];
  out.submit_latency_avg_us = r.submit_lat_avg_us;
  out.completion_latency_avg_us = r.completion_lat_avg_us;
  return out;
}

}  // namespace

Stats statistics() {
  const stats::Snapshot s = stats::snapshot();
  Stats out;
  out.level = s.level;
  out.read = op_stats(s, stats::Op::read);
  out.write = op_stats(s, stats::Op::write);
  out.batch = batch_stats(s.batch);
  out.pinned_staging_bytes = cuda::live_pinned_bytes();
  for (int row = 0; row < stats::kDeviceRows; ++row)
    if (stats::device_row_used(s, row)) out.devices.push_back(device_stats(s, row));
  return out;
}

void reset_statistics() { stats::reset(); }

}  // namespace gpufile
