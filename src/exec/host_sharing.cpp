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
      background_(background),
      state_(std::make_shared<State>()) {}

HostSharing::~HostSharing() {
  settle(std::chrono::seconds(2));
  if (asker_.joinable()) asker_.detach();  // still asking: it holds State, nothing of this
}

void HostSharing::ask() {
  std::unique_lock lock(state_->mu);
  if (!asked_) ask_if_stale(lock);
}

bool HostSharing::shared(int device) {
  std::unique_lock lock(state_->mu);
  join_if_answered();
  if (device >= 0 && device < 64) read_into_ |= uint64_t{1} << device;
  ask_if_stale(lock);
  return decide().shared;
}

unsigned HostSharing::staging_processes() {
  std::unique_lock lock(state_->mu);
  join_if_answered();
  if (!gpu_) return 0;
  if (local_world_ > 1) return local_world_;
  if (state_->others && *state_->others > 0) return *state_->others + 1;
  return std::popcount(read_into_) > 1 ? 1 : 0;
}

std::string HostSharing::why() {
  std::unique_lock lock(state_->mu);
  ask_if_stale(lock);
  state_->answered.wait_for(lock, std::chrono::seconds(1), [&] { return !state_->asking; });
  join_if_answered();
  return decide().why;
}

void HostSharing::join_if_answered() {
  // It has set asking false under the lock held here and only returns after that.
  if (!state_->asking && asker_.joinable()) asker_.join();
}

void HostSharing::settle(std::chrono::milliseconds most) {
  std::unique_lock lock(state_->mu);
  state_->answered.wait_for(lock, most, [&] { return !state_->asking; });
  join_if_answered();
}

void HostSharing::ask_if_stale(std::unique_lock<std::mutex>& lock) {
  if (!gpu_ || local_world_ > 1 || !count_others_ || state_->asking) return;
  const Clock::time_point now = Clock::now();
  if (asked_ && now - *asked_ < keep_) return;
  asked_ = now;
  state_->asking = true;
  auto put = [state = state_, count = count_others_] {
    std::optional<unsigned> others = count();
    std::lock_guard held(state->mu);
    state->others = others;
    state->asking = false;
    state->answered.notify_all();
  };
  if (!background_) {
    lock.unlock();
    put();
    lock.lock();
    return;
  }
  join_if_answered();
  asker_ = std::thread(std::move(put));
}

HostSharing::Answer HostSharing::decide() const {
  if (!gpu_) return {false, "no GPU"};
  if (local_world_ > 1)
    return {true, "one of " + std::to_string(local_world_) + " processes of its job on this host"};
  if (const int own = std::popcount(read_into_); own > 1)
    return {true, "this process reads into " + std::to_string(own) + " GPUs"};
  const std::optional<unsigned>& others = state_->others;
  if (others && *others > 0)
    return {true, std::to_string(*others) + " other process(es) on this host's GPUs (NVML)"};
  if (others) return {false, "no other process on this host's GPUs (NVML)"};
  if (devices_ > 1)
    return {true, "it sees " + std::to_string(devices_) +
                      " GPUs, and NVML cannot tell whether other processes use them"};
  return {false, "it sees one GPU, and NVML cannot tell of other processes"};
}

}  // namespace gpufile::exec
