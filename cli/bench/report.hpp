// Results of a run: gdsio's result line (spec §6.3) and the JSON object of --json.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/bench/options.hpp"

namespace gpufile::cli::benchmark {

struct Result {
  std::string job;  // the job file section this came from (-J lines); empty: a whole run
  IoType type = IoType::read;
  Xfer xfer = Xfer::gpu_direct;
  int threads = 0;  // -w: threads, or the IO depth of a batch
  uint64_t done_bytes = 0, total_bytes = 0;
  // The result line's IOSize: -i, or where the size varied (a range, or jobs of different
  // sizes) the mean IO size, so that ops x IOSize is still about the data moved.
  uint64_t io_size = 0;
  uint64_t io_min = 0, io_max = 0;  // the smallest and largest IO size the run could use
  double seconds = 0, cpu_seconds = 0;
  std::vector<double> latency_us;  // sorted
};

// User plus system CPU time of this process so far.
double cpu_seconds_now();

// Nearest-rank percentile of sorted values; p in (0, 1].
double percentile(const std::vector<double>& sorted, double p);
double mean(const std::vector<double>& v);
double gib_per_sec(const Result& r);

// The jobs of a job file, run side by side, as gdsio reports them: one line for all of them
// (NVIDIA's configuration guide: "with multiple jobs running, gdsio will aggregate the
// results"; its sample of 4 jobs of 16 threads prints Threads: 64). Threads (or depths), data
// and IOs add up; the time is the longest job's, as the jobs start together; CPU time is the
// process's, so the largest. The parts share their IoType and XferType.
Result combine_results(const std::vector<Result>& parts);

// gdsio's line, field for field; batch runs report the depth, not threads. A job's own line
// (-J) starts with "[job] ", so the total stays the only line that starts with "IoType:".
void print_line(const Result& r, std::FILE* to);
// Where the result lines (and "Verifying data") go: standard output, or standard error under
// --json, whose standard output is exactly one JSON document.
std::FILE* line_stream(const Options& o);

// --json: every result of the command, in the order measured, printed as one document at the
// end (print_json_document):
//   {"ok": true, "results": [{"pass": "measure", "scope": "run", "io_type": ..., ...}, ...]}
// pass: "measure", or "read_back" for -V's check after a write; scope: "run" (a command line's
// run, one per sweep point), "job" (one job of a job file, with -J; "job" names it) or "total"
// (the jobs of a job file together, gdsio's line). "ok" is false when the command failed
// after measuring started; the results measured until then are still there.
enum class Pass { measure, read_back };
enum class Scope { run, job, total };
void add_json_result(const Result& r, Pass pass, Scope scope);
void print_json_document(bool ok);
// One result as a JSON object (the fields of add_json_result's entries).
std::string json_object(const Result& r, Pass pass, Scope scope);

// --csv: the header, and one row per result (each ending in a newline). Like the result
// line, batch runs have threads 1 and their depth in io_depth; other runs io_depth 1.
std::string csv_header();
std::string csv_row(const Result& r);

}  // namespace gpufile::cli::benchmark
