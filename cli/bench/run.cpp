#include "cli/bench/run.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cerrno>
#include <cstdio>
#include <functional>
#include <latch>
#include <memory>
#include <thread>

#include "cli/bench/batch.hpp"
#include "cli/bench/blocks.hpp"
#include "cli/bench/movers.hpp"
#include "cli/bench/numa.hpp"
#include "cli/bench/progress.hpp"

namespace gpufile::cli::benchmark {

RunState::RunState(const Options& o, IoType type) : opt(o), type(type) {}

void RunState::start() {
  cpu_at_start_ = cpu_seconds_now();
  started_ = Clock::now();
  if (timed()) deadline_ = started_ + std::chrono::seconds(opt.seconds);
}

void RunState::finish(Clock::time_point last_end) {
  cpu_seconds_ = cpu_seconds_now() - cpu_at_start_;
  seconds_ = std::chrono::duration<double>(std::max(last_end, started_) - started_).count();
}

void RunState::fail(const std::string& message) {
  std::lock_guard lock(mu_);
  if (!failed_.exchange(true)) message_ = message;
}

bool io_completed(RunState& run, const Lane& lane, const Block& b, ssize_t n) {
  if (n == static_cast<ssize_t>(b.length)) return true;
  run.fail(std::string(is_write(run.type) ? "write" : "read") + " at " + at(lane, b) +
           " moved " + std::to_string(n) + " of " + std::to_string(b.length) + " bytes" +
           (n < 0 ? " (errno " + std::to_string(errno) + ")" : ""));
  return false;
}

bool stage_block(RunState& run, const Buffer& buf, uint64_t at_byte, const Lane& lane,
                 const Block& b, std::vector<char>* scratch) {
  fill_block(scratch->data(), b.length, b.offset, run.opt.seed);
  if (buf.put(at_byte, scratch->data(), b.length)) return true;
  run.fail("copy into the IO buffer failed for " + at(lane, b));
  return false;
}

bool check_read(RunState& run, const Buffer& buf, uint64_t at_byte, const Lane& lane,
                const Block& b, std::vector<char>* scratch) {
  if (!buf.get(at_byte, scratch->data(), b.length)) {
    run.fail("copy out of the IO buffer failed for " + at(lane, b));
    return false;
  }
  std::string why = check_block(scratch->data(), b.length, b.offset, run.opt.seed);
  if (why.empty()) return true;
  run.fail("verification failed at " + at(lane, b) + ": " + why);
  return false;
}

double micros(Clock::time_point from, Clock::time_point to) {
  return std::chrono::duration<double, std::micro>(to - from).count();
}

bool open_session(const Gpu& gpu, Xfer xfer) {
  if (!gpu.drv && uses_gpu_memory(xfer))
    std::fprintf(stderr, "gpufile bench: no GPU (%s); host memory stands in for GPU memory\n",
                 cuda::why_no_driver().c_str());
  CUfileError_t e = cuFileDriverOpen();
  if (e.err == CU_FILE_SUCCESS) return true;
  std::fprintf(stderr, "gpufile bench: cuFileDriverOpen: %s\n", CUFILE_ERRSTR(e.err));
  return false;
}

void pin_to_node(RunState& run) {
  if (run.cpus && !pin_thread(*run.cpus))
    run.fail("cannot run on the CPUs of NUMA node " + std::to_string(run.opt.numa_node));
}

namespace {

// --start-at: sleeps until that moment. A process whose set-up ended after it says by how much
// (it timed a stretch alone, before or after the others).
void wait_for_start_at(double epoch) {
  if (epoch <= 0) return;
  using namespace std::chrono;
  const auto at =
      system_clock::time_point(duration_cast<system_clock::duration>(duration<double>(epoch)));
  const auto now = system_clock::now();
  if (now < at) {
    std::this_thread::sleep_until(at);
    return;
  }
  // Said once: a sweep's later points all start after the moment, as they should.
  static std::atomic<bool> said{false};
  const double late = duration<double>(now - at).count();
  if (late > 0.01 && !said.exchange(true))
    std::fprintf(stderr,
                 "gpufile bench: set-up ended %.3f s after --start-at: this run began late\n", late);
}

bool settled(RunState& run, const Lane& lane, const Block& b, Mover& mover) {
  if (mover.settle()) return true;
  run.fail("the copy of " + at(lane, b) + " failed");
  return false;
}

void run_lane(RunState& run, Lane& lane, Mover& mover, LaneStats& stats) {
  const bool writing = is_write(run.type);
  std::vector<char> scratch(run.opt.verify ? run.opt.io_size : 0);
  while (!run.should_stop() && (run.timed() || !lane.pass_done())) {
    bool wrapped = false;
    Block b = lane.next(&wrapped);
    if (writing && run.opt.verify && !stage_block(run, mover.data(), 0, lane, b, &scratch)) return;
    auto t0 = Clock::now();
    ssize_t n = writing ? mover.write(b) : mover.read(b);
    stats.latency_us.push_back(micros(t0, Clock::now()));
    if (!io_completed(run, lane, b, n)) return;
    count_done(run, stats, b.length);
    if (!writing && run.opt.verify &&
        !(settled(run, lane, b, mover) && check_read(run, mover.data(), 0, lane, b, &scratch)))
      return;
  }
  if (!mover.settle()) run.fail("the last copy of " + lane.path + " failed");
  stats.ended = Clock::now();
}

// Every lane's buffers are set up first (allocated, registered, filled: on an H100, 16 lanes
// of 64 MiB took over a second, which once ate all of a -T 1 run), then every thread is
// started and waits at the gate; the clock starts (`start`) when the last one is there, and
// the gate lets them all go at once. The time ends with the lane that ended last. When
// `start` declines, the run has failed and the threads stop before their first IO.
bool run_threads(const Gpu& gpu, RunState& run, std::vector<Lane>& lanes,
                 std::vector<LaneStats>* stats, const std::function<bool()>& start) {
  std::vector<std::unique_ptr<Mover>> movers;
  bool ok = true;
  for (Lane& lane : lanes) {
    movers.push_back(make_mover(run.opt));
    if (!movers.back()->start(gpu, run.opt, &lane)) {
      std::fprintf(stderr, "gpufile bench: could not set up IO buffers for %s\n",
                   lane.path.c_str());
      ok = false;
      break;
    }
  }
  if (ok) {
    std::latch ready(static_cast<std::ptrdiff_t>(lanes.size())), go(1);
    std::vector<std::thread> workers;
    for (size_t t = 0; t < lanes.size(); ++t)
      workers.emplace_back([&, t] {
        gpu.bind_thread();
        pin_to_node(run);
        ready.count_down();
        go.wait();
        run_lane(run, lanes[t], *movers[t], (*stats)[t]);
      });
    ready.wait();
    start();
    go.count_down();
    for (auto& w : workers) w.join();
    Clock::time_point last = run.started();
    for (const LaneStats& s : *stats) last = std::max(last, s.ended);
    run.finish(last);
  }
  for (auto& m : movers) m->stop(run.opt);
  return ok;
}

Result summarise(const Options& o, IoType type, const RunState& run,
                 std::vector<LaneStats>& stats) {
  const IoSizes sizes = io_sizes_of(o);
  Result r;
  r.type = type;
  r.xfer = o.xfer;
  r.threads = o.threads;
  r.io_min = sizes.min;
  r.io_max = sizes.max;
  r.total_bytes = o.file.empty() ? o.size * o.threads : o.size;
  r.seconds = run.seconds();
  r.cpu_seconds = run.cpu_seconds();
  for (LaneStats& s : stats) {
    r.done_bytes += s.bytes;
    r.latency_us.insert(r.latency_us.end(), s.latency_us.begin(), s.latency_us.end());
  }
  std::sort(r.latency_us.begin(), r.latency_us.end());
  r.io_size = sizes.varies() && !r.latency_us.empty() ? r.done_bytes / r.latency_us.size()
                                                      : o.io_size;
  return r;
}

// -n: the CPU set of the node, or a message.
bool place_threads(RunState& run) {
  if (run.opt.numa_node < 0) return true;
  std::string why;
  cpu_set_t cpus;
  if (!numa_node_cpus(run.opt.numa_node, &cpus, &why)) {
    std::fprintf(stderr, "gpufile bench: -n %d: %s\n", run.opt.numa_node, why.c_str());
    return false;
  }
  run.cpus = cpus;
  return true;
}

}  // namespace

std::optional<Result> measure_run(const Gpu& gpu, const Options& o, IoType type,
                                  const RunHooks& hooks) {
  std::vector<Lane> lanes;
  if (!plan_lanes(o, type, &lanes)) return std::nullopt;
  RunState run(o, type);
  bool ok = place_threads(run);
  for (Lane& lane : lanes)
    ok = ok && open_lane(&lane, is_write(type), !opens_direct(o), !uses_posix_io(o.xfer));
  const bool batch = is_batch(o.xfer);
  std::vector<LaneStats> stats(batch ? 1 : lanes.size());
  // The clock, and the live line with it, start after setup.
  std::optional<ProgressLine> progress;
  const auto start = [&] {
    if (hooks.at_start && !hooks.at_start()) return run.fail(hooks.cancelled), false;
    wait_for_start_at(o.start_at);
    run.start();
    if (hooks.progress && progress_wanted(o)) progress.emplace(run, true);
    return true;
  };
  if (ok)
    ok = batch ? run_batch(gpu, run, lanes, &stats[0], start)
               : run_threads(gpu, run, lanes, &stats, start);
  if (progress) progress->stop();  // erased before anything else is printed
  for (Lane& lane : lanes) close_lane(&lane);
  if (!ok) return std::nullopt;
  if (run.failed()) {
    std::fprintf(stderr, "gpufile bench: %s\n", run.message().c_str());
    return std::nullopt;
  }
  Result r = summarise(o, type, run, stats);
  // A line of zeros would read as a measurement; there was none.
  if (r.latency_us.empty()) {
    std::fprintf(stderr, "gpufile bench: %s: no IO completed in %.6f s; no result\n",
                 io_label(type), r.seconds);
    return std::nullopt;
  }
  return r;
}

std::optional<Result> run_once(const Gpu& gpu, const Options& o, IoType type, Pass pass) {
  std::optional<Result> r = measure_run(gpu, o, type, RunHooks{});
  if (!r) return std::nullopt;
  print_line(*r, line_stream(o));
  std::fflush(line_stream(o));
  if (o.json) add_json_result(*r, pass, Scope::run);
  return r;
}

}  // namespace gpufile::cli::benchmark
