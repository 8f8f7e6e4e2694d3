// Whether other GPUs' processes share this host's memory with this process's reads: it decides
// whether long reads make page-cache windows (Session::long_read_windows_from). A staged byte
// crosses host memory three times, a byte copied out of a window once; one GPU alone takes
// staged bytes near its link's speed, and making the windows costs the reading that makes them
// half its speed or more, so they pay only where several GPUs' staging competes for host memory
// (docs/performance.md, "The host model").
//
// Shared where a launcher says other processes of the job are on the host (LOCAL_WORLD_SIZE and
// the like above 1), where this process itself has read into more than one GPU, or where NVML,
// which lists the compute processes of every GPU of the host whatever CUDA_VISIBLE_DEVICES
// hides, shows any other process: processes that a launcher did not start together find each
// other that way. Where NVML cannot tell (missing, failing, or listing PIDs of another PID
// namespace), a process that sees several GPUs is taken to share the host, as if the others
// were busy. NVML's answer is kept for a second: the peers of a service started beside it may
// open their GPUs after it, and processes come and go.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

namespace gpufile::exec {

class HostSharing {
 public:
  // The number of compute processes on the host's GPUs other than this one, or nullopt when
  // that cannot be told (cuda::nvml_other_compute_processes in the library).
  using CountOthers = std::function<std::optional<unsigned>()>;
  using Clock = std::chrono::steady_clock;

  HostSharing(bool gpu, unsigned local_world, int devices, CountOthers count_others,
              Clock::duration keep = std::chrono::seconds(1));

  // Whether the host's memory is shared with other GPUs now, for a read into GPU `device`
  // (counted among the GPUs this process reads into; -1: none).
  bool shared(int device = -1);
  // Why, in a few words, for `gpufile check`.
  std::string why();

 private:
  struct Answer {
    bool shared = false;
    std::string why;
  };
  Answer decide();
  const Answer& current();  // mu_ held

  const bool gpu_;
  const unsigned local_world_;
  const int devices_;
  const CountOthers count_others_;
  const Clock::duration keep_;
  std::mutex mu_;
  uint64_t read_into_ = 0;  // bit g: a read went into GPU g (ordinals 0-63)
  Answer answer_;
  std::optional<Clock::time_point> asked_;
};

}  // namespace gpufile::exec
