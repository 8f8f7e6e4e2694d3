// `gpufile bench`: a benchmark that takes gdsio's flags and prints gdsio's result line, so
// scripts written for NVIDIA's tool can be pointed at gpufile unchanged. It drives the public
// cuFile C API exactly as an application would; only -x 2, 3 and 4 bypass it on purpose,
// because those transfer types are the "no GDS" baselines.
//
// The pieces: options (flags), io_sizes (-i and its ranges), blocks (-V data), device (GPU,
// buffers, streams), lanes (who reads what), movers (one IO per transfer type), batch (-x 6,
// 7), numa (-n), run (threads and timing), progress (the live line), report (the result line,
// JSON, CSV), sweep (points and files), jobfile and jobs (gdsio's job files).
#include <cufile.h>

#include <cstdio>
#include <optional>
#include <vector>

#include "cli/bench/device.hpp"
#include "cli/bench/jobs.hpp"
#include "cli/bench/lanes.hpp"
#include "cli/bench/numa.hpp"
#include "cli/bench/options.hpp"
#include "cli/bench/run.hpp"
#include "cli/bench/sweep.hpp"
#include "cli/commands.hpp"

namespace gpufile::cli {
namespace {

using namespace benchmark;

// One measurement as gdsio makes it: the run, and after a -V write the read-back check.
// The result is the run's; the read-back only has to pass.
std::optional<Result> measure(const Gpu& gpu, const Options& o) {
  std::optional<Result> r = run_once(gpu, o, o.io_type, Pass::measure);
  if (r && o.verify && is_write(o.io_type)) {
    std::fprintf(line_stream(o), "Verifying data\n");
    Options check = o;
    check.seconds = 0;  // one pass reads back every block the write left
    if (!run_once(gpu, check, read_back_of(o.io_type), Pass::read_back)) return std::nullopt;
  }
  return r;
}

// Every point, then the files. Stops at the first failure and then writes no file: a chart
// with a point missing would look like a measurement.
int measure_all(const Gpu& gpu, const std::vector<Options>& points, const Options& o) {
  std::vector<Result> results;
  for (const Options& point : points) {
    std::optional<Result> r = measure(gpu, point);
    if (!r) return 1;
    results.push_back(std::move(*r));
  }
  return write_outputs(o, results) ? 0 : 1;
}

// -n names a NUMA node of this machine.
bool node_exists(const Options& o) {
  cpu_set_t cpus;
  std::string why;
  if (o.numa_node < 0 || numa_node_cpus(o.numa_node, &cpus, &why)) return true;
  std::fprintf(stderr, "gpufile bench: -n %d: %s\n", o.numa_node, why.c_str());
  return false;
}


// A command line's measurements: a job file, or the points of -i/-w (a sweep of one or more).
int run_command(const Options& o) {
  if (!o.job_file.empty()) return run_job_file(o);
  if (!node_exists(o)) return 2;
  // Everything that can be known wrong is, before the first measurement.
  const std::vector<Options> points = sweep_points(o);
  for (const Options& point : points)
    if (!lanes_fit(point)) return 1;
  if (!outputs_writable(o)) return 1;
  Gpu gpu;
  if (!gpu.open(o.gpu)) return 1;
  if (!open_session(gpu, o.xfer)) return gpu.close(), 1;
  int rc = measure_all(gpu, points, o);
  cuFileDriverClose();
  gpu.close();
  return rc;
}

}  // namespace

int bench(int argc, char** argv) {
  Options o;
  if (!parse_options(argc, argv, &o)) return print_usage(stderr), 2;
  if (o.help) return print_usage(stdout), 0;
  const int rc = run_command(o);
  // Under --json standard output carries the document whatever happened: a script reads
  // "ok" rather than guessing from an empty output.
  if (o.json) print_json_document(rc == 0);
  return rc;
}

}  // namespace gpufile::cli
