// Whether other GPUs' processes share this host's memory with this process's reads: it decides
// whether long reads make page-cache windows (Session::long_read_makes_windows). A staged byte
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
// were busy. NVML is asked on a thread of its own, never on a read's: loading and initialising
// it took 45-80 ms on a four-H200 host, which a read that asked it paid (a 4 GiB reading went
// from 47 to 25-31 GiB/s). It is first asked by a process's first long read (which makes no
// windows: a first reading never does), so that processes that make none never load NVML;
// until its first answer, the rule without NVML holds. Each answer is kept for a second, then
// asked again: the peers of a service started beside it may open their GPUs after it, and
// processes come and go.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace gpufile::exec {

class HostSharing {
 public:
  // The number of compute processes on the host's GPUs other than this one, or nullopt when
  // that cannot be told (cuda::nvml_other_compute_processes in the library).
  using CountOthers = std::function<std::optional<unsigned>()>;
  using Clock = std::chrono::steady_clock;

  // `background`: NVML is asked on a thread of its own (the library); false: on the caller's
  // (unit tests, which need the answer at once).
  HostSharing(bool gpu, unsigned local_world, int devices, CountOthers count_others,
              Clock::duration keep = std::chrono::seconds(1), bool background = true);
  // Waits up to two seconds for a question still out, then leaves it to finish on its own: NVML
  // may never answer in a child forked while its parent's question was out (its locks held by
  // a thread that the child does not have), and a session's close must not hang on that.
  ~HostSharing();
  HostSharing(const HostSharing&) = delete;
  HostSharing& operator=(const HostSharing&) = delete;

  // Asks NVML unless it was asked already (a process's first long read does, so that the
  // answer is there by its second reading).
  void ask();
  // Whether the host's memory is shared with other GPUs now, for a read into GPU `device`
  // (counted among the GPUs this process reads into; -1: none). Never waits for NVML.
  bool shared(int device = -1);
  // How many processes' staging is known to share the host's memory now: the launcher's count,
  // NVML's count of other processes plus this one, or 1 where this process reads into several
  // GPUs; 0 where none is known to (NVML not answered yet, or unable to tell, counts as none).
  // Never asks NVML and never waits (exec::shared_piece_bytes sizes staged pieces from it).
  unsigned staging_processes();
  // Why, in a few words, for `gpufile check` (which waits up to a second for NVML's answer).
  std::string why();
  // Waits up to `most` for a question out to NVML to come back: before fork(), so that no
  // thread of this process is inside NVML, holding its locks, while the child is copied.
  void settle(std::chrono::milliseconds most);

 private:
  struct Answer {
    bool shared = false;
    std::string why;
  };
  // What the asking thread shares with this object, and keeps alive if it outlives it.
  struct State {
    std::mutex mu;
    std::condition_variable answered;
    std::optional<unsigned> others;  // NVML's last count; nullopt: it cannot tell (or not yet)
    bool asking = false;
  };
  Answer decide() const;                            // state_->mu held
  void ask_if_stale(std::unique_lock<std::mutex>&);  // state_->mu held
  void join_if_answered();                           // state_->mu held

  const bool gpu_;
  const unsigned local_world_;
  const int devices_;
  const CountOthers count_others_;
  const Clock::duration keep_;
  const bool background_;
  const std::shared_ptr<State> state_;
  uint64_t read_into_ = 0;                  // bit g: a read went into GPU g (ordinals 0-63)
  std::optional<Clock::time_point> asked_;  // when the last question was put
  std::thread asker_;  // joined once it has answered (a leftover thread is a leak to TSan)
};

}  // namespace gpufile::exec
