// Running one measurement: lanes, their threads (or one batch thread), the stop and failure
// state they share, and the timing around them.
#pragma once

#include <sched.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cli/bench/device.hpp"
#include "cli/bench/lanes.hpp"
#include "cli/bench/options.hpp"
#include "cli/bench/report.hpp"

namespace gpufile::cli::benchmark {

using Clock = std::chrono::steady_clock;

// What one lane (or the batch thread) collects.
struct LaneStats {
  std::vector<double> latency_us;
  uint64_t bytes = 0;
  Clock::time_point ended{};  // when the lane's last IO (and any copy it left running) ended
};

class RunState {
 public:
  RunState(const Options& o, IoType type);
  const Options& opt;
  const IoType type;
  // -n: where the IO threads run (the CPUs of that NUMA node); empty: anywhere.
  std::optional<cpu_set_t> cpus;

  bool timed() const { return opt.seconds > 0; }

  // The clock. The runner starts it once every buffer is allocated, registered and filled and
  // every thread waits at the start gate: setup is never measured, and -T counts from here.
  // finish() ends it when the last IO ended (`last_end`, the latest LaneStats::ended).
  void start();
  void finish(Clock::time_point last_end);
  Clock::time_point started() const { return started_; }
  double seconds() const { return seconds_; }
  double cpu_seconds() const { return cpu_seconds_; }

  // Whether a lane should start no further IO. The IO in flight when the time is up still
  // finishes and counts (as gdsio counts it).
  bool should_stop() const {
    return failed_.load(std::memory_order_relaxed) || (timed() && Clock::now() >= deadline_);
  }
  // The first failure wins; the others stop quietly.
  void fail(const std::string& message);
  bool failed() const { return failed_.load(); }
  const std::string& message() const { return message_; }

  // Totals so far, for the progress line (the result is summed from LaneStats).
  void count_done(uint64_t bytes) {
    bytes_done_.fetch_add(bytes, std::memory_order_relaxed);
    ops_done_.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t bytes_done() const { return bytes_done_.load(std::memory_order_relaxed); }
  uint64_t ops_done() const { return ops_done_.load(std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> bytes_done_{0}, ops_done_{0};
  // Written by start() before the threads are let go (the gate orders it before their reads).
  Clock::time_point started_{}, deadline_{};
  double cpu_at_start_ = 0, seconds_ = 0, cpu_seconds_ = 0;
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::string message_;
};

// A finished IO of `bytes`: in the lane's stats and the run's totals.
inline void count_done(RunState& run, LaneStats& stats, uint64_t bytes) {
  stats.bytes += bytes;
  run.count_done(bytes);
}

// True when the IO moved the whole block; else records why not.
bool io_completed(RunState& run, const Lane& lane, const Block& b, ssize_t n);

// -V, before a write: the self-checking block goes into the IO buffer at `at_byte`.
bool stage_block(RunState& run, const Buffer& buf, uint64_t at_byte, const Lane& lane,
                 const Block& b, std::vector<char>* scratch);

// -V, after a read: the block at `at_byte` of the IO buffer is what the file should hold.
bool check_read(RunState& run, const Buffer& buf, uint64_t at_byte, const Lane& lane,
                const Block& b, std::vector<char>* scratch);

double micros(Clock::time_point from, Clock::time_point to);

// -n: runs the calling IO thread on the run's CPUs (a failure fails the run).
void pin_to_node(RunState& run);

// Before the first run: cuFileDriverOpen, and the note on stderr when host memory stands in
// for a missing GPU. False with a message. cuFileDriverClose() ends the session.
bool open_session(const Gpu& gpu, Xfer xfer);

// What a caller may add to a run.
struct RunHooks {
  // Called once setup is done and every IO thread waits at the start gate, just before the
  // clock starts (the jobs of a job file start together here). False: do not start; the run
  // fails with `cancelled` as its reason.
  std::function<bool()> at_start;
  std::string cancelled = "cancelled";
  bool progress = true;  // the live line, where progress_wanted() agrees
};

// One run of one IO type over the data set, without printing its result. Empty on failure
// (the reason is on stderr).
std::optional<Result> measure_run(const Gpu& gpu, const Options& o, IoType type,
                                  const RunHooks& hooks);

// The same, printing its result line (and keeping it for --json's document). The run of a
// command line.
std::optional<Result> run_once(const Gpu& gpu, const Options& o, IoType type, Pass pass);

}  // namespace gpufile::cli::benchmark
