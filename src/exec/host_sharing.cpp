#include "exec/host_sharing.hpp"

#include <bit>
#include <utility>

namespace gpufile::exec {

HostSharing::HostSharing(bool gpu, unsigned local_world, int devices, CountOthers count_others,
                         Clock::duration keep, bool background)
    : gpu_(gpu),
      local_world_(local_world),
      devices_(devices),
      count_others_(std::move(count_others)),
      keep_(keep),
      background_(background) {}

HostSharing::~HostSharing() {
  std::unique_lock lock(mu_);
  answered_.wait(lock, [&] { return !asking_; });
  lock.unlock();
  if (asker_.joinable()) asker_.join();
}

void HostSharing::ask() {
  std::unique_lock lock(mu_);
  if (!asking_) asked_.reset();
  ask_if_stale(lock);
}

bool HostSharing::shared(int device) {
  std::unique_lock lock(mu_);
  if (device >= 0 && device < 64) read_into_ |= uint64_t{1} << device;
  ask_if_stale(lock);
  return decide().shared;
}

std::string HostSharing::why() {
  std::unique_lock lock(mu_);
  ask_if_stale(lock);
  answered_.wait_for(lock, std::chrono::seconds(1), [&] { return !asking_; });
  return decide().why;
}

void HostSharing::ask_if_stale(std::unique_lock<std::mutex>& lock) {
  if (!gpu_ || local_world_ > 1 || !count_others_ || asking_) return;  // no question, or one out
  const Clock::time_point now = Clock::now();
  if (asked_ && now - *asked_ < keep_) return;
  asked_ = now;
  asking_ = true;
  if (!background_) {
    lock.unlock();
    take_answer(count_others_());
    lock.lock();
    return;
  }
  if (asker_.joinable()) asker_.join();  // done: asking_ was false
  asker_ = std::thread([this] { take_answer(count_others_()); });
}

void HostSharing::take_answer(std::optional<unsigned> others) {
  std::lock_guard lock(mu_);
  others_ = others;
  asking_ = false;
  answered_.notify_all();
}

HostSharing::Answer HostSharing::decide() const {
  if (!gpu_) return {false, "no GPU"};
  if (local_world_ > 1)
    return {true, "one of " + std::to_string(local_world_) + " processes of its job on this host"};
  if (const int own = std::popcount(read_into_); own > 1)
    return {true, "this process reads into " + std::to_string(own) + " GPUs"};
  if (others_ && *others_ > 0)
    return {true, std::to_string(*others_) + " other process(es) on this host's GPUs (NVML)"};
  if (others_) return {false, "no other process on this host's GPUs (NVML)"};
  if (devices_ > 1)
    return {true, "it sees " + std::to_string(devices_) +
                      " GPUs, and NVML cannot tell whether other processes use them"};
  return {false, "it sees one GPU, and NVML cannot tell of other processes"};
}

}  // namespace gpufile::exec
