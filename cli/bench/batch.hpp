// -x 6: one thread keeps one batch of -w IOs in flight, one IO per lane, each lane with its
// own slot of a shared buffer.
#pragma once

#include <vector>

#include "cli/bench/run.hpp"

namespace gpufile::cli::benchmark {

// Runs the lanes as batch slots until the pass is done, the time is up or an IO failed (the
// failure is in `run`). False when the batch could not be set up.
bool run_batch(const Gpu& gpu, RunState& run, std::vector<Lane>& lanes, LaneStats* stats);

}  // namespace gpufile::cli::benchmark
