// The live progress line of long runs: once a second, elapsed time, bytes done, the current
// GiB/s and ops, on stderr and overwritten in place (\r), so a person watching a long run sees
// it move. Never on stdout: scripts parse the result line there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "cli/bench/run.hpp"

namespace gpufile::cli::benchmark {

// Whether a run shows the line: --progress / --no-progress, else when stderr is a terminal.
bool progress_wanted(const Options& o);

class ProgressLine {
 public:
  // Starts ticking when `show`; nothing is printed until the run is known to last longer
  // than about 2 s (a -T of 3 s or more: after 1 s; otherwise after 2 s).
  ProgressLine(const RunState& run, bool show);
  ~ProgressLine() { stop(); }
  ProgressLine(const ProgressLine&) = delete;
  ProgressLine& operator=(const ProgressLine&) = delete;

  // Stops ticking and erases the line, so the result line can follow. Idempotent.
  void stop();

 private:
  void tick_until_stopped();
  void print(double elapsed_s, uint64_t bytes, double gib_per_s);

  const RunState& run_;
  std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;
  int printed_width_ = 0;  // of the line now on the terminal; 0: none
  std::thread ticker_;
};

}  // namespace gpufile::cli::benchmark
