// The plan of one seed: everything a run does follows from it, except how the threads
// interleave. Drawn by make_plan(seed) from streams of the seed alone.
//
// A plan is "benign" (faults the library must hide: short IO, EINTR, EAGAIN, O_DIRECT EINVAL at
// IO or reopen, io_uring refused, delays, no statx alignment or cachestat) or "hard" (also EIO,
// ENOSPC, EAGAIN storms past the retry bound, failing fstat and reopens, and in some plans failing
// async copies of the CUDA driver double). In a benign plan every call must succeed in full.
//
// Regression seeds (tests/sim/CMakeLists.txt) depend on what is drawn here and in what order:
// draw anything new from a stream of its own (as cuda_faults is) so old seeds keep their plans.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "sys/faulty_os.hpp"

namespace sim {

inline constexpr size_t KiB = 1024;

struct SessionConfig {
  std::string engine = "auto";
  std::string direct_io = "auto";
  int workers = 2, slab_kb = 64, small_io_kb = 64, min_chunk_kb = 16, slabs_per_worker = 2,
      ring_depth = 64, cold_slabs_per_worker = 0;
  // O_DIRECT pieces (gpufile.cold_piece_kb) and staged pieces where the host is shared
  // (gpufile.shared_piece_kb, with LOCAL_WORLD_SIZE=2): 0 leaves each at a slab.
  int cold_piece_kb = 0, shared_piece_kb = 0;
  std::string describe() const {
    char s[300];
    std::snprintf(s, sizeof s,
                  "engine=%s direct_io=%s workers=%d slab=%dK small_io=%dK min_chunk=%dK "
                  "slabs/worker=%d cold slabs/worker=%d ring=%d cold piece=%dK shared piece=%dK",
                  engine.c_str(), direct_io.c_str(), workers, slab_kb, small_io_kb, min_chunk_kb,
                  slabs_per_worker, cold_slabs_per_worker, ring_depth, cold_piece_kb, shared_piece_kb);
    return s;
  }
};

struct PhasePlan {
  bool reopen = false;       // close the driver before the phase and open it with `session`
  bool fork_before = false;  // fork while every actor waits between phases
  SessionConfig session;
};

struct NamedRule {
  std::string name;
  gpufile::sys::FaultRule rule;
};

struct Plan {
  uint64_t seed = 0;
  int actors = 3;
  int ops_per_phase = 16;
  bool hard = false;
  bool uring_refused = false;  // every io_uring set-up fails: the engine must be posix
  bool forks = false;          // actor 0 may fork while others run IO
  bool fstat_faults = false;   // fstat may fail: then so may a submission (it checks the fd)
  bool cuda_faults = false;    // threads arm failures of the driver's async copies (fakecuda)
  std::vector<uint64_t> file_sizes;
  std::vector<PhasePlan> phases;
  std::vector<NamedRule> rules;

  std::string describe() const;
};

Plan make_plan(uint64_t seed);
std::string errno_name(int e);

}  // namespace sim
