#include "exec/host_sharing.hpp"

#include <bit>
#include <utility>

namespace gpufile::exec {

HostSharing::HostSharing(bool gpu, unsigned local_world, int devices, CountOthers count_others,
                         Clock::duration keep)
    : gpu_(gpu),
      local_world_(local_world),
      devices_(devices),
      count_others_(std::move(count_others)),
      keep_(keep) {}

bool HostSharing::shared(int device) {
  std::lock_guard lock(mu_);
  if (device >= 0 && device < 64 && (read_into_ >> device & 1) == 0) {
    read_into_ |= uint64_t{1} << device;
    asked_.reset();  // a GPU more may change the answer
  }
  return current().shared;
}

std::string HostSharing::why() {
  std::lock_guard lock(mu_);
  return current().why;
}

const HostSharing::Answer& HostSharing::current() {
  const Clock::time_point now = Clock::now();
  if (!asked_ || now - *asked_ >= keep_) {
    answer_ = decide();
    asked_ = now;
  }
  return answer_;
}

HostSharing::Answer HostSharing::decide() {
  if (!gpu_) return {false, "no GPU"};
  if (local_world_ > 1)
    return {true, "one of " + std::to_string(local_world_) + " processes of its job on this host"};
  if (const int own = std::popcount(read_into_); own > 1)
    return {true, "this process reads into " + std::to_string(own) + " GPUs"};
  const std::optional<unsigned> others = count_others_ ? count_others_() : std::nullopt;
  if (others && *others > 0)
    return {true, std::to_string(*others) + " other process(es) on this host's GPUs (NVML)"};
  if (others) return {false, "no other process on this host's GPUs (NVML)"};
  if (devices_ > 1)
    return {true, "it sees " + std::to_string(devices_) +
                      " GPUs, and NVML cannot tell whether other processes use them"};
  return {false, "it sees one GPU, and NVML cannot tell of other processes"};
}

}  // namespace gpufile::exec
