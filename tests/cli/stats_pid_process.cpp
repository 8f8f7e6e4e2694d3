// The process tests/cli/stats_pid_test.py watches with `gpufile stats PID`: a gpufile program
// with stats on (level 3) that does IO on command and prints its own statistics, the numbers the
// CLI must show. Commands, one a line on stdin:
//   io    reads FILE (argv[1]) in pieces of several sizes, writes a copy, prints its stats as JSON
//   off   closes the driver and opens it again with stats level 0, prints its stats
//   exit  returns from main (exit handlers run: the stats segment goes)
//   die   _exit(0): no exit handler runs, as if the process were killed
#include <gpufile/gpufile.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace {

std::string u64(std::uint64_t v) { return std::to_string(v); }

std::string path_json(const gpufile::PathStats& p) {
  return "{\"bytes\": " + u64(p.bytes) + ", \"ops\": " + u64(p.ops) + "}";
}

std::string latency_json(const gpufile::LatencyStats& l) {
  std::string out = "{\"buckets\": [";
  for (std::size_t k = 0; k < l.buckets.size(); ++k) out += (k ? ", " : "") + u64(l.buckets[k]);
  return out + "], \"p50_us\": " + u64(l.p50_us) + ", \"max_us\": " + u64(l.max_us) + "}";
}

std::string op_json(const gpufile::OpStats& o) {
  return "{\"calls_ok\": " + u64(o.calls_ok) + ", \"calls_failed\": " + u64(o.calls_failed) +
         ", \"bytes\": " + u64(o.bytes) + ", \"caller_bytes\": " + u64(o.caller_bytes) +
         ", \"worker_bytes\": " + u64(o.worker_bytes) +
         ", \"latency\": " + latency_json(o.latency) +
         ", \"paths\": {\"staged_direct\": " + path_json(o.staged_direct) +
         ", \"page_cache\": " + path_json(o.page_cache) +
         ", \"host_direct\": " + path_json(o.host_direct) +
         ", \"small_io\": " + path_json(o.small_io) +
         ", \"page_cache_dma\": " + path_json(o.page_cache_dma) +
         ", \"remote\": " + path_json(o.remote) +
         ", \"vendor\": " + path_json(o.vendor) + "}}";
}

// Named as `gpufile stats PID --json` names the rows.
std::string device_name(int device) {
  if (device == gpufile::DeviceStats::kHost) return "host";
  if (device == gpufile::DeviceStats::kOtherGpus) return "other_gpus";
  return u64(static_cast<std::uint64_t>(device));
}

std::string devices_json(const std::vector<gpufile::DeviceStats>& devices) {
  std::string out = "{";
  for (const gpufile::DeviceStats& d : devices)
    out += std::string(out.size() > 1 ? ", " : "") + "\"" + device_name(d.device) +
           "\": {\"read\": {\"calls_ok\": " + u64(d.read_calls_ok) + ", \"calls_failed\": " +
           u64(d.read_calls_failed) + ", \"bytes\": " + u64(d.read_bytes) +
           "}, \"write\": {\"calls_ok\": " + u64(d.write_calls_ok) + ", \"calls_failed\": " +
           u64(d.write_calls_failed) + ", \"bytes\": " + u64(d.write_bytes) + "}}";
  return out + "}";
}

void print_stats() {
  const gpufile::Stats s = gpufile::statistics();
  std::printf("{\"pid\": %d, \"level\": %d, \"read\": %s, \"write\": %s, \"devices\": %s}\n",
              static_cast<int>(::getpid()), s.level, op_json(s.read).c_str(),
              op_json(s.write).c_str(), devices_json(s.devices).c_str());
  std::fflush(stdout);
}

void do_io(const std::string& path) {
  gpufile::File in(path, "r");
  const std::size_t size = in.size();
  std::vector<unsigned char> buf(size);
  std::size_t offset = 0;
  // Pieces of 4 KiB to 1 MiB, so that several size-histogram buckets fill.
  for (std::size_t piece = 4096; offset < size; piece = piece < (1u << 20) ? piece * 4 : piece) {
    const std::size_t n = std::min(piece, size - offset);
    offset += in.read(buf.data() + offset, n, static_cast<std::int64_t>(offset));
  }
  gpufile::File out(path + ".copy", "w");
  out.write(buf.data(), size, 0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: stats_pid_process FILE\n"), 2;
  gpufile::set_setting("profile.cufile_stats", 3);
  gpufile::driver_open();
  print_stats();
  for (std::string line; std::getline(std::cin, line);) {
    if (line == "io") {
      do_io(argv[1]);
    } else if (line == "off") {
      gpufile::driver_close();
      gpufile::set_setting("profile.cufile_stats", 0);
      gpufile::driver_open();
    } else if (line == "exit") {
      return 0;
    } else if (line == "die") {
      ::_exit(0);
    } else {
      return std::fprintf(stderr, "unknown command %s\n", line.c_str()), 2;
    }
    print_stats();
  }
  return 0;
}
