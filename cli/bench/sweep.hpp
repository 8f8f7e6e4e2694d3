// Sweeps (--sweep-io, --sweep-threads) and their CSV file (--csv). A run without sweep flags
// is a sweep of one point, so --csv works there too. Charts are drawn from the CSV by
// `python -m gpufile.plot` (python/gpufile/plot.py).
#pragma once

#include <string>
#include <vector>

#include "cli/bench/options.hpp"
#include "cli/bench/report.hpp"

namespace gpufile::cli::benchmark {

// The measurements a command line asks for: every (IO size, threads) pair, thread counts
// outermost, each list in the order given; the missing axis is -i or -w.
std::vector<Options> sweep_points(const Options& o);

// Whether --csv can be written (its directory takes a new file), checked before any
// measurement; false with a message.
bool outputs_writable(const Options& o);

// Writes --csv (when given) from the results; false with a message.
bool write_outputs(const Options& o, const std::vector<Result>& results);

}  // namespace gpufile::cli::benchmark
