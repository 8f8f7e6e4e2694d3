// Results of a run: gdsio's result line (spec §6.3) and the JSON object of --json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cli/bench/options.hpp"

namespace gpufile::cli::benchmark {

struct Result {
  IoType type = IoType::read;
  Xfer xfer = Xfer::gpu_direct;
  int threads = 0;  // -w: threads, or the IO depth of a batch
  uint64_t done_bytes = 0, total_bytes = 0, io_size = 0;
  double seconds = 0, cpu_seconds = 0;
  std::vector<double> latency_us;  // sorted
};

// User plus system CPU time of this process so far.
double cpu_seconds_now();

// Nearest-rank percentile of sorted values; p in (0, 1].
double percentile(const std::vector<double>& sorted, double p);
double mean(const std::vector<double>& v);
double gib_per_sec(const Result& r);

// gdsio's line, field for field; batch runs report the depth, not threads.
void print_line(const Result& r);
void print_json(const Result& r);

// --csv: the header, and one row per result (each ending in a newline). Like the result
// line, batch runs have threads 1 and their depth in io_depth; other runs io_depth 1.
std::string csv_header();
std::string csv_row(const Result& r);

}  // namespace gpufile::cli::benchmark
