#include "cli/bench/progress.hpp"

#include <unistd.h>

#include <cstdio>

namespace gpufile::cli::benchmark {

bool progress_wanted(const Options& o) {
  switch (o.progress) {
    case Progress::always: return true;
    case Progress::never: return false;
    case Progress::automatic: break;
  }
  return isatty(STDERR_FILENO) == 1;
}

ProgressLine::ProgressLine(const RunState& run, bool show) : run_(run) {
  if (show) ticker_ = std::thread([this] { tick_until_stopped(); });
}

void ProgressLine::stop() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (ticker_.joinable()) ticker_.join();
  if (printed_width_ > 0) {
    std::fprintf(stderr, "\r%*s\r", printed_width_, "");
    std::fflush(stderr);
    printed_width_ = 0;
  }
}

void ProgressLine::tick_until_stopped() {
  using namespace std::chrono;
  const auto start = Clock::now();
  const bool known_long = run_.timed() && run_.opt.seconds > 2;
  auto next = start + (known_long ? seconds(1) : seconds(2));
  auto last_time = start;
  uint64_t last_bytes = 0;
  std::unique_lock lock(mu_);
  while (!wake_.wait_until(lock, next, [this] { return stopping_; })) {
    const auto now = Clock::now();
    const uint64_t bytes = run_.bytes_done();
    const double interval = duration<double>(now - last_time).count();
    const double rate = interval > 0 ? (bytes - last_bytes) / interval / double(1ull << 30) : 0;
    print(duration<double>(now - start).count(), bytes, rate);
    last_time = now;
    last_bytes = bytes;
    next += seconds(1);
  }
}

void ProgressLine::print(double elapsed_s, uint64_t bytes, double gib_per_s) {
  char line[160];
  int n = std::snprintf(line, sizeof line, "%s %.0f s  %.2f GiB done  %.2f GiB/s  %llu ops",
                        io_label(run_.type), elapsed_s, bytes / double(1ull << 30),
                        gib_per_s, static_cast<unsigned long long>(run_.ops_done()));
  // Pad to the previous line's width: \r goes back, it does not clear.
  std::fprintf(stderr, "\r%-*s", printed_width_ > n ? printed_width_ : n, line);
  std::fflush(stderr);
  if (n > printed_width_) printed_width_ = n;
}

}  // namespace gpufile::cli::benchmark
