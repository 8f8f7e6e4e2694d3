#include "core/stats.hpp"

#include "core/stats_export.hpp"

#include <atomic>
#include <algorithm>
#include <bit>
#include <cmath>
#include <chrono>
#include <iterator>
#include <mutex>

namespace gpufile::stats {
namespace {

using A = std::atomic<uint64_t>;
constexpr auto R = std::memory_order_relaxed;

struct AtomicCounter {
  A ok{0};
  A err{0};
  void bump(bool good) { (good ? ok : err).fetch_add(1, R); }
  Counter load() const { return {ok.load(R), err.load(R)}; }
  void clear() {
    ok.store(0, R);
    err.store(0, R);
  }
};

struct AtomicOp {
  AtomicCounter calls;
  A bytes{0}, latency_ns{0}, first_start_ns{0}, last_end_ns{0};
  A hist[kHistogramBuckets] = {};
};

struct AtomicPath {
  A bytes{0}, ops{0};
  A latency_hist[kLatencyBuckets] = {};
};

struct AtomicDevice {
  AtomicCounter calls;
  A bytes{0};
};

struct AtomicBatch {
  AtomicCounter setup, submit, complete, cancel, destroy;
  A entries_submitted{0};
  A bytes[kOps] = {};
  A submit_latency_ns{0}, completion_latency_ns{0};
  A last_submit_bytes[kOps] = {};
  A first_submit_ns{0}, last_complete_ns{0};
};

// Constant-initialised and trivially destructible: safe to use from any static constructor or
// destructor.
struct State {
  // What record_* checks: the level while started, else 0. Kept as one value so that the
  // check costs one load.
  std::atomic<int> active{0};
  std::atomic<int> level{0};
  std::atomic<bool> started{true};
  AtomicOp ops[kOps];
  AtomicPath paths[kOps][kPaths];
  AtomicDevice devices[kDeviceRows][kOps];
  A caller_bytes[kOps] = {};  // record_runners
  A worker_bytes[kOps] = {};
  AtomicCounter handle_register, handle_deregister, buffer_register, buffer_deregister;
  A registered_bytes{0};
  AtomicBatch batch;
};

constinit State g;
constinit std::mutex g_control;  // serialises level/start/stop so `active` stays consistent

void refresh_active() {
  const int active = g.started.load(R) ? g.level.load(R) : 0;
  g.active.store(active, R);
  publishing(active > 0);  // the segment `gpufile stats PID` reads lives while stats are on
}

bool on(int min_level) { return g.active.load(R) >= min_level; }

uint64_t now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

// Widen [first, last] to include [start, end]. A first value of 0 means "unset".
void widen_window(A& first, A& last, uint64_t start, uint64_t end) {
  uint64_t f = first.load(R);
  while ((f == 0 || start < f) && !first.compare_exchange_weak(f, start, R)) {
  }
  uint64_t l = last.load(R);
  while (end > l && !last.compare_exchange_weak(l, end, R)) {
  }
}

void clear(A& a) { a.store(0, R); }

template <size_t N>
void clear(A (&arr)[N]) {
  for (A& a : arr) a.store(0, R);
}

uint64_t micros(uint64_t ns) { return ns / 1000; }

uint64_t average(uint64_t sum, uint64_t n) { return n ? sum / n : 0; }

}  // namespace

// ---- control -----------------------------------------------------------------------------------

bool set_level(int level) {
  if (level < 0 || level > kMaxLevel) return false;
  std::lock_guard lock(g_control);
  g.level.store(level, R);
  refresh_active();
  return true;
}

int level() { return g.level.load(R); }

void start() {
  std::lock_guard lock(g_control);
  g.started.store(true, R);
  refresh_active();
}

void stop() {
  std::lock_guard lock(g_control);
  g.started.store(false, R);
  refresh_active();
}

bool started() { return g.started.load(R); }

bool collecting(int min_level) { return on(min_level); }

void reset() {
  for (AtomicOp& op : g.ops) {
    op.calls.clear();
    clear(op.bytes);
    clear(op.latency_ns);
    clear(op.first_start_ns);
    clear(op.last_end_ns);
    clear(op.hist);
  }
  for (auto& per_op : g.paths)
    for (AtomicPath& p : per_op) {
      clear(p.bytes);
      clear(p.ops);
      clear(p.latency_hist);
    }
  for (auto& row : g.devices)
    for (AtomicDevice& d : row) {
      d.calls.clear();
      clear(d.bytes);
    }
  clear(g.caller_bytes);
  clear(g.worker_bytes);
  g.handle_register.clear();
  g.handle_deregister.clear();
  g.buffer_register.clear();
  g.buffer_deregister.clear();
  clear(g.registered_bytes);
  AtomicBatch& b = g.batch;
  for (AtomicCounter* c : {&b.setup, &b.submit, &b.complete, &b.cancel, &b.destroy}) c->clear();
  clear(b.entries_submitted);
  clear(b.bytes);
  clear(b.submit_latency_ns);
  clear(b.completion_latency_ns);
  clear(b.last_submit_bytes);
  clear(b.first_submit_ns);
  clear(b.last_complete_ns);
}

// ---- recording ---------------------------------------------------------------------------------

void record_call(Op op, uint64_t bytes, uint64_t latency_ns, bool ok) {
  const int active = g.active.load(R);
  if (active < 1) return;
  AtomicOp& o = g.ops[static_cast<int>(op)];
  o.calls.bump(ok);
  if (!ok) return;
  o.bytes.fetch_add(bytes, R);
  o.latency_ns.fetch_add(latency_ns, R);
  const uint64_t end = now_ns();
  widen_window(o.first_start_ns, o.last_end_ns, end > latency_ns ? end - latency_ns : 1, end);
  if (active >= 2) o.hist[size_bucket(bytes)].fetch_add(1, R);
}

void record_path(Op op, Path path, uint64_t bytes) {
  AtomicPath& p = g.paths[static_cast<int>(op)][static_cast<int>(path)];
  p.bytes.fetch_add(bytes, R);
  p.ops.fetch_add(1, R);
}

uint64_t call_started() { return on(1) ? now_ns() : 0; }

uint64_t since(uint64_t started) {
  if (started == 0) return 0;
  const uint64_t now = now_ns();
  return now > started ? now - started : 0;
}

void record_latency(Op op, Path path, uint64_t latency_ns) {
  if (!on(2)) return;
  AtomicPath& p = g.paths[static_cast<int>(op)][static_cast<int>(path)];
  p.latency_hist[latency_bucket(latency_ns)].fetch_add(1, R);
}

void record_device(Op op, int device, uint64_t bytes, bool ok) {
  if (!on(3)) return;
  AtomicDevice& d = g.devices[device_row(device)][static_cast<int>(op)];
  d.calls.bump(ok);
  if (ok) d.bytes.fetch_add(bytes, R);
}

void record_finished(Op op, Path path, int device, uint64_t bytes, uint64_t started, bool ok) {
  if (!on(2) || started == 0) return;  // level 0 and 1: one load, no clock read
  if (ok) record_latency(op, path, since(started));
  record_device(op, device, bytes, ok);
}

void record_runners(Op op, uint64_t caller_bytes, uint64_t worker_bytes) {
  const int i = static_cast<int>(op);
  if (caller_bytes) g.caller_bytes[i].fetch_add(caller_bytes, R);
  if (worker_bytes) g.worker_bytes[i].fetch_add(worker_bytes, R);
}

void record_handle_register(bool ok) {
  if (on(1)) g.handle_register.bump(ok);
}

void record_handle_deregister(bool ok) {
  if (on(1)) g.handle_deregister.bump(ok);
}

void record_buffer_register(bool ok, uint64_t bytes) {
  if (!on(1)) return;
  g.buffer_register.bump(ok);
  if (ok) g.registered_bytes.fetch_add(bytes, R);
}

void record_buffer_deregister(bool ok) {
  if (on(1)) g.buffer_deregister.bump(ok);
}

void record_batch_setup(bool ok) {
  if (on(1)) g.batch.setup.bump(ok);
}

void record_batch_submit(bool ok, uint64_t entries, uint64_t read_bytes, uint64_t write_bytes,
                         uint64_t latency_ns) {
  if (!on(1)) return;
  AtomicBatch& b = g.batch;
  b.submit.bump(ok);
  if (!ok) return;
  b.entries_submitted.fetch_add(entries, R);
  b.submit_latency_ns.fetch_add(latency_ns, R);
  b.last_submit_bytes[static_cast<int>(Op::read)].store(read_bytes, R);
  b.last_submit_bytes[static_cast<int>(Op::write)].store(write_bytes, R);
  const uint64_t end = now_ns();
  widen_window(b.first_submit_ns, b.last_complete_ns, end > latency_ns ? end - latency_ns : 1, end);
}

void record_batch_complete(Op op, uint64_t bytes, uint64_t latency_ns, bool ok) {
  if (!on(1)) return;
  AtomicBatch& b = g.batch;
  b.complete.bump(ok);
  if (!ok) return;
  b.bytes[static_cast<int>(op)].fetch_add(bytes, R);
  b.completion_latency_ns.fetch_add(latency_ns, R);
  const uint64_t end = now_ns();
  widen_window(b.first_submit_ns, b.last_complete_ns, end > latency_ns ? end - latency_ns : 1, end);
}

void record_batch_cancel(bool ok) {
  if (on(1)) g.batch.cancel.bump(ok);
}

void record_batch_destroy(bool ok) {
  if (on(1)) g.batch.destroy.bump(ok);
}

// ---- reading -----------------------------------------------------------------------------------

Snapshot snapshot() {
  Snapshot s;
  s.level = g.level.load(R);
  s.started = g.started.load(R);
  for (int i = 0; i < kOps; ++i) {
    const AtomicOp& o = g.ops[i];
    OpTotals& t = s.ops[i];
    t.calls = o.calls.load();
    t.bytes = o.bytes.load(R);
    t.latency_ns = o.latency_ns.load(R);
    t.first_start_ns = o.first_start_ns.load(R);
    t.last_end_ns = o.last_end_ns.load(R);
    for (int k = 0; k < kHistogramBuckets; ++k) t.size_hist[k] = o.hist[k].load(R);
    for (int p = 0; p < kPaths; ++p) {
      const AtomicPath& from = g.paths[i][p];
      PathTotals& to = s.paths[i][p];
      to.bytes = from.bytes.load(R);
      to.ops = from.ops.load(R);
      for (int k = 0; k < kLatencyBuckets; ++k) to.latency_hist[k] = from.latency_hist[k].load(R);
    }
    for (int row = 0; row < kDeviceRows; ++row) {
      s.devices[row][i].calls = g.devices[row][i].calls.load();
      s.devices[row][i].bytes = g.devices[row][i].bytes.load(R);
    }
    s.caller_bytes[i] = g.caller_bytes[i].load(R);
    s.worker_bytes[i] = g.worker_bytes[i].load(R);
  }
  s.handle_register = g.handle_register.load();
  s.handle_deregister = g.handle_deregister.load();
  s.buffer_register = g.buffer_register.load();
  s.buffer_deregister = g.buffer_deregister.load();
  s.registered_bytes = g.registered_bytes.load(R);

  const AtomicBatch& b = g.batch;
  BatchTotals& t = s.batch;
  t.setup = b.setup.load();
  t.submit = b.submit.load();
  t.complete = b.complete.load();
  t.cancel = b.cancel.load();
  t.destroy = b.destroy.load();
  t.entries_submitted = b.entries_submitted.load(R);
  for (int i = 0; i < kOps; ++i) {
    t.bytes[i] = b.bytes[i].load(R);
    t.last_submit_bytes[i] = b.last_submit_bytes[i].load(R);
  }
  t.submit_latency_ns = b.submit_latency_ns.load(R);
  t.completion_latency_ns = b.completion_latency_ns.load(R);
  t.first_submit_ns = b.first_submit_ns.load(R);
  t.last_complete_ns = b.last_complete_ns.load(R);
  publish(s);  // what this process sees of itself, `gpufile stats PID` sees too
  return s;
}

// ---- derived values ----------------------------------------------------------------------------

int size_bucket(uint64_t bytes) {
  const uint64_t kib = bytes >> 10;
  if (kib < 2) return 0;
  const int log2 = std::bit_width(kib) - 1;
  return log2 < kHistogramBuckets ? log2 : kHistogramBuckets - 1;
}

int latency_bucket(uint64_t ns) {
  const uint64_t us = ns / 1000;
  const int k = std::bit_width(us);  // 0 for 0 us; k for [2^(k-1), 2^k) us
  return k < kLatencyBuckets ? k : kLatencyBuckets - 1;
}

uint64_t latency_bucket_below_us(int k) {
  return k >= 0 && k < kLatencyBuckets - 1 ? uint64_t{1} << k : 0;
}

int percentile_bucket(const uint64_t (&hist)[kLatencyBuckets], double q) {
  uint64_t total = 0;
  for (uint64_t n : hist) total += n;
  if (total == 0) return -1;
  // The rank of the wanted call, 1-based: at least the first, at most the last.
  const double wanted = std::ceil(q * static_cast<double>(total));
  const uint64_t rank = std::clamp<uint64_t>(static_cast<uint64_t>(wanted), 1, total);
  uint64_t seen = 0;
  for (int k = 0; k < kLatencyBuckets; ++k) {
    seen += hist[k];
    if (seen >= rank) return k;
  }
  return kLatencyBuckets - 1;  // not reached: seen ends at total
}

uint64_t percentile_us(const uint64_t (&hist)[kLatencyBuckets], double q) {
  const int k = percentile_bucket(hist, q);
  if (k < 0) return 0;
  const uint64_t below = latency_bucket_below_us(k);
  return below ? below : uint64_t{1} << (kLatencyBuckets - 2);
}

void add_latency(const Snapshot& s, Op op, uint64_t (&into)[kLatencyBuckets]) {
  for (const PathTotals& p : s.paths[static_cast<int>(op)])
    for (int k = 0; k < kLatencyBuckets; ++k) into[k] += p.latency_hist[k];
}

int device_row(int ordinal) {
  if (ordinal < 0) return kHostRow;
  return ordinal < kMaxGpus ? ordinal : kOtherGpusRow;
}

std::string device_row_name(int row) {
  if (row == kHostRow) return "host";
  if (row == kOtherGpusRow) return "other_gpus";
  return std::to_string(row);
}

uint64_t per_second(uint64_t amount, uint64_t window_ns) {
  if (window_ns == 0) return 0;
  // 128-bit: amount * 1e9 overflows 64 bits past 18 GB.
  return static_cast<uint64_t>(static_cast<unsigned __int128>(amount) * 1000000000u / window_ns);
}

Rates rates(const OpTotals& op) {
  const uint64_t window = op.last_end_ns > op.first_start_ns ? op.last_end_ns - op.first_start_ns : 0;
  Rates r;
  r.bw_bytes_per_sec = per_second(op.bytes, window);
  r.ops_per_sec = per_second(op.calls.ok, window);
  r.lat_avg_us = micros(average(op.latency_ns, op.calls.ok));
  r.lat_sum_us = micros(op.latency_ns);
  return r;
}

BatchRates batch_rates(const BatchTotals& b) {
  const uint64_t window =
      b.last_complete_ns > b.first_submit_ns ? b.last_complete_ns - b.first_submit_ns : 0;
  BatchRates r;
  for (int i = 0; i < kOps; ++i) r.bw_bytes_per_sec[i] = per_second(b.bytes[i], window);
  r.submit_lat_avg_us = micros(average(b.submit_latency_ns, b.submit.ok));
  r.completion_lat_avg_us = micros(average(b.completion_latency_ns, b.complete.ok));
  r.submit_ops_per_sec = per_second(b.submit.ok, window);
  r.complete_ops_per_sec = per_second(b.complete.ok, window);
  r.submit_lat_sum_us = micros(b.submit_latency_ns);
  r.completion_lat_sum_us = micros(b.completion_latency_ns);
  return r;
}

uint64_t posix_ops(const Snapshot& s, Op op) {
  const int i = static_cast<int>(op);
  return s.paths[i][static_cast<int>(Path::staged_direct)].ops +
         s.paths[i][static_cast<int>(Path::page_cache)].ops +
         s.paths[i][static_cast<int>(Path::page_cache_dma)].ops;
}

namespace {

std::string field(const char* name, uint64_t v) {
  return "\"" + std::string(name) + "\": " + std::to_string(v);
}

std::string path_json(const PathTotals& p) {
  return "{" + field("bytes", p.bytes) + ", " + field("ops", p.ops) +
         ", \"latency\": " + latency_json(p.latency_hist) + "}";
}

std::string op_json(const Snapshot& s, int op) {
  const OpTotals& t = s.ops[op];
  uint64_t latency[kLatencyBuckets] = {};
  add_latency(s, static_cast<Op>(op), latency);
  std::string out = "{" + field("calls_ok", t.calls.ok) + ", " + field("calls_failed", t.calls.err) +
                    ", " + field("bytes", t.bytes) + ", \"latency\": " + latency_json(latency) +
                    ", \"paths\": {";
  for (int p = 0; p < kPaths; ++p)
    out += std::string(p ? ", " : "") + "\"" + kPathNames[p] + "\": " + path_json(s.paths[op][p]);
  return out + "}}";
}

}  // namespace

bool device_row_used(const Snapshot& s, int row) {
  for (const DeviceTotals& d : s.devices[row])
    if (d.calls.ok || d.calls.err) return true;
  return false;
}

std::string latency_json(const uint64_t (&hist)[kLatencyBuckets]) {
  std::string out = "{\"buckets\": [";
  for (int k = 0; k < kLatencyBuckets; ++k) out += (k ? ", " : "") + std::to_string(hist[k]);
  out += "]";
  const bool empty = percentile_bucket(hist, 1.0) < 0;
  for (const Percentile& p : kPercentiles)
    out += ", \"" + std::string(p.name) + "_us\": " +
           (empty ? std::string("null") : std::to_string(percentile_us(hist, p.q)));
  return out + "}";
}

// Only the rows that saw IO: 34 rows of zeros would bury the one GPU a process uses.
std::string devices_json(const Snapshot& s) {
  std::string out = "{";
  for (int row = 0; row < kDeviceRows; ++row) {
    if (!device_row_used(s, row)) continue;
    out += std::string(out.size() > 1 ? ", " : "") + "\"" + device_row_name(row) + "\": {";
    for (int op = 0; op < kOps; ++op) {
      const DeviceTotals& d = s.devices[row][op];
      out += std::string(op ? ", " : "") + "\"" + kOpNames[op] + "\": {" +
             field("calls_ok", d.calls.ok) + ", " + field("calls_failed", d.calls.err) + ", " +
             field("bytes", d.bytes) + "}";
    }
    out += "}";
  }
  return out + "}";
}

// The batch API's counters (cuFile's L1 batch fields), by the names of the C++ API's BatchStats.
std::string batch_json(const BatchTotals& b) {
  const BatchRates r = batch_rates(b);
  const std::pair<const char*, uint64_t> fields[] = {
      {"setup_ok", b.setup.ok},          {"setup_failed", b.setup.err},
      {"submit_ok", b.submit.ok},        {"submit_failed", b.submit.err},
      {"entries_submitted", b.entries_submitted},
      {"entries_ok", b.complete.ok},     {"entries_failed", b.complete.err},
      {"cancel_ok", b.cancel.ok},        {"cancel_failed", b.cancel.err},
      {"destroy_ok", b.destroy.ok},      {"destroy_failed", b.destroy.err},
      {"read_bytes", b.bytes[static_cast<int>(Op::read)]},
      {"write_bytes", b.bytes[static_cast<int>(Op::write)]},
      {"submit_latency_avg_us", r.submit_lat_avg_us},
      {"completion_latency_avg_us", r.completion_lat_avg_us}};
  std::string out = "{";
  for (const auto& [name, value] : fields) out += (out.size() > 1 ? ", " : "") + field(name, value);
  return out + "}";
}

std::string summary_json(const Snapshot& s, uint64_t pinned_staging_bytes) {
  std::string out = "{";
  for (int op = 0; op < kOps; ++op) out += "\"" + std::string(kOpNames[op]) + "\": " + op_json(s, op) + ", ";
  out += "\"batch\": " + batch_json(s.batch) + ", \"devices\": " + devices_json(s) + ", " +
         field("level", static_cast<uint64_t>(s.level)) + ", " +
         field("pinned_staging_bytes", pinned_staging_bytes) + "}";
  return out;
}

}  // namespace gpufile::stats
