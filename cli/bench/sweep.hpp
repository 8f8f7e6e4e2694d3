// Sweeps (--sweep-io, --sweep-threads) and their files (--csv, --png). A run without sweep
// flags is a sweep of one point, so --csv and --png work there too.
#pragma once

#include <string>
#include <vector>

#include "cli/bench/options.hpp"
#include "cli/bench/report.hpp"
#include "cli/chart.hpp"

namespace gpufile::cli::benchmark {

// The measurements a command line asks for: every (IO size, threads) pair, thread counts
// outermost, each list in the order given; the missing axis is -i or -w.
std::vector<Options> sweep_points(const Options& o);

// Whether --csv and --png can be written (their directories take a new file), checked before
// any measurement; false with a message.
bool outputs_writable(const Options& o);

// The chart of a sweep: GiB/s against IO size (log2 axis), one line per thread count.
Chart sweep_chart(const std::vector<Result>& results);

// Writes --csv and --png (those given) from the results; false with a message.
bool write_outputs(const Options& o, const std::vector<Result>& results);

}  // namespace gpufile::cli::benchmark
