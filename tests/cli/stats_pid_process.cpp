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

void print_stats() {
  const gpufile::Stats s = gpufile::statistics();
  auto op = [](const gpufile::OpStats& o) {
    auto path = [](const gpufile::PathStats& p) {
      return "{\"bytes\": " + std::to_string(p.bytes) + ", \"ops\": " + std::to_string(p.ops) + "}";
    };
    return "{\"calls_ok\": " + std::to_string(o.calls_ok) + ", \"calls_failed\": " +
           std::to_string(o.calls_failed) + ", \"bytes\": " + std::to_string(o.bytes) +
           ", \"caller_bytes\": " + std::to_string(o.caller_bytes) + ", \"worker_bytes\": " +
           std::to_string(o.worker_bytes) + ", \"paths\": {\"staged_direct\": " +
           path(o.staged_direct) + ", \"page_cache\": " + path(o.page_cache) +
           ", \"host_direct\": " + path(o.host_direct) + ", \"small_io\": " + path(o.small_io) +
           ", \"page_cache_dma\": " + path(o.page_cache_dma) + ", \"vendor\": " + path(o.vendor) +
           "}}";
  };
  std::printf("{\"pid\": %d, \"level\": %d, \"read\": %s, \"write\": %s}\n", static_cast<int>(::getpid()),
              s.level, op(s.read).c_str(), op(s.write).c_str());
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
