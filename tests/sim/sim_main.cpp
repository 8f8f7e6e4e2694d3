// sim_tests: the deterministic seeded simulation of the cuFile API (issue 15; reliability matrix
// row 43). One seed is one run: the seed draws the threads, files, driver settings, fault rules
// of the FaultyOs (src/sys/faulty_os.hpp) and every thread's operations (sync reads and writes of
// random sizes, offsets and alignments through buffered and O_DIRECT handles into device,
// managed, pinned and pageable memory; batches with cancel; stream ops; handle and buffer
// (de)registration; reads while the file is truncated; fork; driver close and reopen with other
// settings), and a model checks every result and the files (tests/sim/sim_run.cpp says what).
//
//   sim_tests --seed=N            one seed (what a failure prints to reproduce it)
//   sim_tests --seeds=A:B         seeds A to B, both included (CTest runs ranges of these)
//   sim_tests --seeds=A: --minutes=M   from seed A on, until M minutes have passed (long runs)
//   --verbose                     one line per seed, and the library's warnings
//   --keep-going                  run every seed even after one failed
// GPUFILE_SIM_SEEDS=A:B and GPUFILE_SIM_MINUTES=M in the environment override the arguments,
// so `ctest -R sim` can be made to run longer without editing anything. GPUFILE_SIM_HANG_MS
// sets how long one call may take before it counts as a hang (30 s; 120 s under sanitizers).
//
// The CUDA driver is the test double (GPUFILE_CUDA_LIBRARY=.../libcuda.so.1 of
// tests/support/fakecuda); what only threads' interleaving decides is not part of the seed, so
// a failing seed may need a few reruns (a loop in the shell) to fail again.
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cinttypes>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "sim_run.hpp"

namespace {

struct Args {
  uint64_t first = 1, last = 100;
  bool open_ended = false;
  double minutes = 0;
  bool keep_going = false;
  sim::Options opts;
};

bool parse_range(const std::string& v, Args* a) {
  const size_t colon = v.find(':');
  if (colon == std::string::npos) return false;
  a->first = std::strtoull(v.c_str(), nullptr, 0);
  const std::string rest = v.substr(colon + 1);
  a->open_ended = rest.empty();
  a->last = a->open_ended ? UINT64_MAX : std::strtoull(rest.c_str(), nullptr, 0);
  return a->last >= a->first;
}

bool parse(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    if (s.rfind("--seed=", 0) == 0) {
      a->first = a->last = std::strtoull(s.c_str() + 7, nullptr, 0);
    } else if (s.rfind("--seeds=", 0) == 0) {
      if (!parse_range(s.substr(8), a)) return false;
    } else if (s.rfind("--minutes=", 0) == 0) {
      a->minutes = std::atof(s.c_str() + 10);
    } else if (s == "--verbose") {
      a->opts.verbose = true;
    } else if (s == "--keep-going") {
      a->keep_going = true;
    } else {
      return false;
    }
  }
  if (const char* v = std::getenv("GPUFILE_SIM_SEEDS"); v && *v && !parse_range(v, a)) return false;
  if (const char* v = std::getenv("GPUFILE_SIM_MINUTES"); v && *v) a->minutes = std::atof(v);
  if (a->open_ended && a->minutes <= 0) return false;
  return true;
}

// What reruns one seed exactly as this process ran it.
std::string reproduce_prefix(const char* argv0) {
  std::string cmd;
  for (const char* var : {"TMPDIR", "GPUFILE_CUDA_LIBRARY"})
    if (const char* v = std::getenv(var); v && *v) cmd += std::string(var) + "=" + v + " ";
  char path[PATH_MAX];
  return cmd + (realpath(argv0, path) ? path : argv0);
}

// The simulation compares against the library's defaults, not a machine's /etc/cufile.json.
void use_empty_config() {
  if (const char* cur = std::getenv("CUFILE_ENV_PATH_JSON"); cur && *cur) return;
  static char path[] = "/tmp/gpufile-sim-config-XXXXXX";
  int fd = mkstemp(path);
  if (fd < 0) return;
  if (::write(fd, "{}\n", 3) == 3) setenv("CUFILE_ENV_PATH_JSON", path, 1);
  ::close(fd);
  std::atexit([] { ::unlink(path); });
}

constexpr bool kSanitized =
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    true;
#else
    false;
#endif
#else
    false;
#endif

}  // namespace

int main(int argc, char** argv) {
  Args a;
  if (!parse(argc, argv, &a)) {
    std::fprintf(stderr,
                 "usage: %s [--seed=N | --seeds=A:B | --seeds=A: --minutes=M] [--verbose] "
                 "[--keep-going]\n",
                 argv[0]);
    return 2;
  }
  use_empty_config();
  // The library's error log would drown the report of a failing seed: hard plans fail calls on
  // purpose. The operation log and the fault journal say what happened.
  setenv("GPUFILE_LOG_LEVEL", a.opts.verbose ? "WARN" : "OFF", 0);  // unless the caller chose
  a.opts.reproduce = reproduce_prefix(argv[0]);
  // A fork while other threads run makes an ASan or TSan child wait on their allocator's lock
  // for ever (tests/fault/test_fork.cpp), so sanitized builds fork only between phases; they
  // run several times slower, so the hang limit stretches.
  a.opts.fork_while_busy = !kSanitized;
  a.opts.hang_ms = kSanitized ? 120'000 : 30'000;
  if (const char* v = std::getenv("GPUFILE_SIM_HANG_MS"); v && *v) a.opts.hang_ms = std::atoi(v);

  using Clock = std::chrono::steady_clock;
  const auto seconds_since = [](Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
  };
  const auto t0 = Clock::now();
  const auto elapsed = [&] { return seconds_since(t0); };
  uint64_t seeds = 0, failed = 0, calls = 0, failed_calls = 0, faults = 0;
  for (uint64_t seed = a.first;; ++seed) {
    if (a.minutes > 0 && elapsed() > a.minutes * 60) break;
    const auto s0 = Clock::now();
    sim::SeedResult r = sim::run_seed(seed, a.opts);
    ++seeds;
    calls += r.calls, failed_calls += r.failed_calls, faults += r.faults;
    if (a.opts.verbose)
      std::printf("seed %" PRIu64 ": %s, %" PRIu64 " calls (%" PRIu64 " failed as allowed), %"
                  PRIu64 " faults, %.3f s\n",
                  seed, r.ok ? "ok" : "FAILED", r.calls, r.failed_calls, r.faults,
                  seconds_since(s0));
    if (!r.ok) {
      ++failed;
      if (!a.keep_going) break;
    }
    if (seed == a.last) break;
  }
  std::printf("sim: %" PRIu64 " seeds from %" PRIu64 ", %" PRIu64 " failed; %" PRIu64
              " IO calls (%" PRIu64 " failed as the faults allowed), %" PRIu64
              " faults injected, %.1f s\n",
              seeds, a.first, failed, calls, failed_calls, faults, elapsed());
  return failed ? 1 : 0;
}
