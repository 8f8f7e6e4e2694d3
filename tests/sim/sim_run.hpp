// One seed of the simulation: everything a run does follows from the seed (the settings of each
// driver session, the faults, each thread's operations), except how the threads interleave.
#pragma once

#include <cstdint>
#include <string>

namespace sim {

struct Options {
  bool verbose = false;             // one line per seed, and the library's log at WARN
  bool fork_while_busy = true;      // fork while other threads run IO (off under sanitizers)
  int hang_ms = 30'000;              // a call running longer is a hang: the seed fails
  std::string reproduce;            // the command line prefix that reruns one seed
};

struct SeedResult {
  bool ok = true;
  uint64_t calls = 0;         // cuFile IO calls made
  uint64_t failed_calls = 0;  // of which failed (as the faults allowed)
  uint64_t faults = 0;        // faults the FaultyOs injected
};

// Runs seed `seed` in this process. On a violation it prints the seed, the reproduce command,
// the plan, the tail of the operation log and the fault journal to stderr.
SeedResult run_seed(uint64_t seed, const Options& opts);

}  // namespace sim
