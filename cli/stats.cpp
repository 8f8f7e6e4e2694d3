// `gpufile stats PID`: the live counters of another gpufile process, refreshed every second, as
// NVIDIA's `gds_stats -p PID` shows cuFile's. The process publishes them while its stats level
// is 1 or more (src/core/stats_export.hpp); this only reads.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "cli/commands.hpp"
#include "core/stats.hpp"
#include "core/stats_export.hpp"

namespace gpufile::cli {
namespace {

using stats::kOpNames;
using stats::kOps;
using stats::kPathNames;
using stats::kPaths;

struct Options {
  int pid = 0;
  bool once = false;
  bool json = false;
  double interval_s = 1.0;
};

int usage() {
  std::fputs(
      "usage: gpufile stats PID [--once] [--json] [--interval SECONDS]\n"
      "  the live IO counters of gpufile process PID (its stats level must be 1 or more:\n"
      "  profile.cufile_stats in cufile.json, cuFileSetStatsLevel, or a setting of the API),\n"
      "  refreshed every second until it exits; --once prints them once, --json as JSON.\n"
      "  Latency percentiles need level 2, the per-GPU rows level 3.\n",
      stderr);
  return 2;
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--once") {
      o->once = true;
    } else if (a == "--json") {
      o->json = true;
    } else if (a == "--interval" && i + 1 < argc) {
      char* end = nullptr;
      o->interval_s = std::strtod(argv[++i], &end);
      if (*end || !(o->interval_s >= 0.05)) return false;
    } else if (o->pid == 0 && !a.empty() && a.find_first_not_of("0123456789") == std::string::npos) {
      o->pid = std::atoi(a.c_str());
      if (o->pid <= 0) return false;
    } else {
      return false;
    }
  }
  return o->pid > 0;
}

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }

std::string u64(uint64_t v) { return std::to_string(v); }

// Size histogram bucket k holds transfers of [2^k, 2^(k+1)) KiB (bucket 0 also what is smaller).
std::string bucket_label(int k) {
  auto size = [](int log2_kib) {
    return log2_kib < 10 ? std::to_string(1u << log2_kib) + "K"
                         : std::to_string(1u << (log2_kib - 10)) + "M";
  };
  return k == 0 ? "<2K" : size(k) + "-" + (k + 1 < 20 ? size(k + 1) : std::string("..."));
}

std::string json(int pid, const stats::ReadResult& r) {
  const stats::Snapshot& s = r.snapshot;
  std::string out = "{\"pid\": " + std::to_string(pid) +
                    ", \"layout_version\": " + std::to_string(stats::kSegmentVersion) +
                    ", \"level\": " + std::to_string(s.level) +
                    ", \"started\": " + (s.started ? "true" : "false") +
                    ", \"segments\": " + std::to_string(r.segments) +
                    ", \"published_unix_ns\": " + u64(r.published_unix_ns);
  for (int op = 0; op < kOps; ++op) {
    const stats::OpTotals& t = s.ops[op];
    out += std::string(", \"") + kOpNames[op] + "\": {\"calls_ok\": " + u64(t.calls.ok) +
           ", \"calls_failed\": " + u64(t.calls.err) + ", \"bytes\": " + u64(t.bytes) +
           ", \"latency_ns\": " + u64(t.latency_ns) + ", \"caller_bytes\": " +
           u64(s.caller_bytes[op]) + ", \"worker_bytes\": " + u64(s.worker_bytes[op]) +
           ", \"paths\": {";
    for (int p = 0; p < kPaths; ++p)
      out += std::string(p ? ", " : "") + "\"" + kPathNames[p] + "\": {\"bytes\": " +
             u64(s.paths[op][p].bytes) + ", \"ops\": " + u64(s.paths[op][p].ops) +
             ", \"latency\": " + stats::latency_json(s.paths[op][p].latency_hist) + "}";
    uint64_t latency[stats::kLatencyBuckets] = {};
    stats::add_latency(s, static_cast<stats::Op>(op), latency);
    out += "}, \"latency\": " + stats::latency_json(latency) + ", \"size_hist\": [";
    for (int k = 0; k < stats::kHistogramBuckets; ++k)
      out += (k ? ", " : "") + u64(t.size_hist[k]);
    out += "]}";
  }
  const stats::BatchTotals& b = s.batch;
  out += ", \"batch\": {\"submits\": " + u64(b.submit.ok) + ", \"entries\": " +
         u64(b.entries_submitted) + ", \"completed\": " + u64(b.complete.ok) +
         ", \"failed\": " + u64(b.complete.err) + ", \"read_bytes\": " + u64(b.bytes[0]) +
         ", \"write_bytes\": " + u64(b.bytes[1]) + "}, \"devices\": " + stats::devices_json(s) +
         "}";
  return out;
}

// "<64" (microseconds under which the percentile's bucket lies), ">=1073741824" for the
// open-ended last bucket, "-" for no calls.
std::string percentile_text(const uint64_t (&hist)[stats::kLatencyBuckets], double q) {
  const int k = stats::percentile_bucket(hist, q);
  if (k < 0) return "-";
  const uint64_t below = stats::latency_bucket_below_us(k);
  return below ? "<" + u64(below) : ">=" + u64(stats::percentile_us(hist, q));
}

void print_latency_row(const char* op, const char* path,
                       const uint64_t (&hist)[stats::kLatencyBuckets]) {
  uint64_t calls = 0;
  for (uint64_t n : hist) calls += n;
  if (calls == 0) return;
  std::printf("  %-6s %-15s", op, path);
  for (const stats::Percentile& p : stats::kPercentiles)
    std::printf(" %12s", percentile_text(hist, p.q).c_str());
  std::printf(" %10llu\n", static_cast<unsigned long long>(calls));
}

// Percentiles per operation, over all paths and per path (level 2).
void print_latency(const stats::Snapshot& s) {
  if (s.level < 2) return;
  std::printf("  latency, us (the bucket each percentile falls in):\n  %-22s", "");
  for (const stats::Percentile& p : stats::kPercentiles) std::printf(" %12s", p.name);
  std::printf(" %10s\n", "calls");
  for (int op = 0; op < kOps; ++op) {
    uint64_t all[stats::kLatencyBuckets] = {};
    stats::add_latency(s, static_cast<stats::Op>(op), all);
    print_latency_row(kOpNames[op], "all paths", all);
    for (int p = 0; p < kPaths; ++p)
      print_latency_row("", kPathNames[p], s.paths[op][p].latency_hist);
  }
}

// One row per device that saw IO (level 3).
void print_devices(const stats::Snapshot& s) {
  if (s.level < 3) return;
  std::printf("  %-10s %12s %8s %14s %12s %8s %14s\n", "device", "reads", "failed", "GiB read",
              "writes", "failed", "GiB written");
  for (int row = 0; row < stats::kDeviceRows; ++row) {
    if (!stats::device_row_used(s, row)) continue;
    const stats::DeviceTotals& rd = s.devices[row][0];
    const stats::DeviceTotals& wr = s.devices[row][1];
    const std::string name = row < stats::kMaxGpus ? "GPU " + u64(row) : stats::device_row_name(row);
    std::printf("  %-10s %12llu %8llu %14.3f %12llu %8llu %14.3f\n", name.c_str(),
                static_cast<unsigned long long>(rd.calls.ok),
                static_cast<unsigned long long>(rd.calls.err), gib(rd.bytes),
                static_cast<unsigned long long>(wr.calls.ok),
                static_cast<unsigned long long>(wr.calls.err), gib(wr.bytes));
  }
}

// One screen: totals, and each operation's GiB/s since the previous screen (`before`).
void print_text(int pid, const stats::ReadResult& r, const stats::Snapshot* before, double seconds) {
  const stats::Snapshot& s = r.snapshot;
  std::printf("gpufile stats: pid %d, level %d%s\n", pid, s.level, s.started ? "" : " (stopped)");
  std::printf("  %-6s %12s %8s %14s %12s %10s\n", "", "calls", "failed", "GiB", "avg latency",
              before ? "GiB/s now" : "");
  for (int op = 0; op < kOps; ++op) {
    const stats::OpTotals& t = s.ops[op];
    const double avg_us = t.calls.ok ? static_cast<double>(t.latency_ns) / t.calls.ok / 1e3 : 0;
    std::printf("  %-6s %12llu %8llu %14.3f %9.1f us", kOpNames[op],
                static_cast<unsigned long long>(t.calls.ok),
                static_cast<unsigned long long>(t.calls.err), gib(t.bytes), avg_us);
    const uint64_t earlier = before ? before->ops[op].bytes : 0;
    if (before && seconds > 0)  // counters reset since the last screen show 0
      std::printf(" %10.2f", t.bytes >= earlier ? gib(t.bytes - earlier) / seconds : 0.0);
    std::printf("\n");
  }
  for (int op = 0; op < kOps; ++op) {
    std::string line;
    for (int p = 0; p < kPaths; ++p) {
      const stats::PathTotals& pt = s.paths[op][p];
      if (!pt.ops) continue;
      char buf[96];
      std::snprintf(buf, sizeof buf, "  %s %.3f GiB (%llu)", kPathNames[p], gib(pt.bytes),
                    static_cast<unsigned long long>(pt.ops));
      line += buf;
    }
    if (!line.empty()) std::printf("  %-6s paths:%s\n", kOpNames[op], line.c_str());
    if (s.caller_bytes[op] || s.worker_bytes[op])
      std::printf("  %-6s moved by callers %.3f GiB, by workers %.3f GiB\n", kOpNames[op],
                  gib(s.caller_bytes[op]), gib(s.worker_bytes[op]));
    std::string sizes;
    for (int k = 0; k < stats::kHistogramBuckets; ++k)
      if (s.ops[op].size_hist[k])
        sizes += "  " + bucket_label(k) + ": " + u64(s.ops[op].size_hist[k]);
    if (!sizes.empty()) std::printf("  %-6s sizes:%s\n", kOpNames[op], sizes.c_str());
  }
  const stats::BatchTotals& b = s.batch;
  if (b.submit.ok || b.submit.err)
    std::printf("  batch  %llu submits, %llu entries, %llu completed, %llu failed\n",
                static_cast<unsigned long long>(b.submit.ok),
                static_cast<unsigned long long>(b.entries_submitted),
                static_cast<unsigned long long>(b.complete.ok),
                static_cast<unsigned long long>(b.complete.err));
  print_latency(s);
  print_devices(s);
  std::fflush(stdout);
}

// Why there is nothing to show; exit status 1.
int explain(int pid, const stats::ReadResult& r) {
  switch (r.status) {
    case stats::ReadStatus::no_segment:
      std::fprintf(stderr,
                   "gpufile stats: process %d publishes no gpufile stats (not a gpufile process, "
                   "or its stats level is 0: set profile.cufile_stats to 1-3)\n", pid);
      if (r.removed)
        std::fprintf(stderr, "gpufile stats: removed %d stale stats segment(s) an earlier "
                     "process %d left\n", r.removed, pid);
      break;
    case stats::ReadStatus::not_running:
      std::fprintf(stderr, "gpufile stats: no process %d", pid);
      if (r.removed) std::fprintf(stderr, " (removed %d stale stats segment(s) it left)", r.removed);
      std::fprintf(stderr, "\n");
      break;
    case stats::ReadStatus::mismatch:
      if (r.found_version)
        std::fprintf(stderr,
                     "gpufile stats: process %d publishes stats in layout version %u; this "
                     "gpufile reads version %u: use the gpufile CLI of that process's release\n",
                     pid, r.found_version, stats::kSegmentVersion);
      else
        std::fprintf(stderr,
                     "gpufile stats: process %d publishes stats of another gpufile build "
                     "(same layout version %u, other size), or its segment is damaged\n",
                     pid, stats::kSegmentVersion);
      break;
    default:
      std::fprintf(stderr, "gpufile stats: cannot read the stats of process %d: %s\n", pid,
                   std::strerror(r.error));
  }
  return 1;
}

}  // namespace

int stats_pid(int argc, char** argv) {
  Options o;
  if (!parse(argc, argv, &o)) return usage();
  stats::ReadResult r = stats::read_published(o.pid);
  if (r.status != stats::ReadStatus::ok) return explain(o.pid, r);
  const bool clear_screen = !o.once && !o.json && ::isatty(STDOUT_FILENO);
  stats::Snapshot before;
  bool have_before = false;
  auto last = std::chrono::steady_clock::now();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    const double seconds = std::chrono::duration<double>(now - last).count();
    if (o.json) {
      std::printf("%s\n", json(o.pid, r).c_str());
      std::fflush(stdout);
    } else {
      if (clear_screen) std::printf("\033[H\033[J");
      print_text(o.pid, r, have_before ? &before : nullptr, seconds);
    }
    if (o.once) return 0;
    before = r.snapshot;
    have_before = true;
    last = now;
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    r = stats::read_published(o.pid);
    if (r.status == stats::ReadStatus::not_running ||
        r.status == stats::ReadStatus::no_segment) {
      // A process that has exited but was not reaped yet still exists, without its segment.
      std::fprintf(stderr, "gpufile stats: process %d %s\n", o.pid,
                   r.status == stats::ReadStatus::not_running
                       ? "exited"
                       : "stopped publishing (its stats went off, or it exited)");
      return 0;
    }
    if (r.status != stats::ReadStatus::ok) return explain(o.pid, r);
  }
}

}  // namespace gpufile::cli
