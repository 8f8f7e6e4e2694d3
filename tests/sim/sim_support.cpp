#include "sim_support.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "watchdog.hpp"

namespace sim {

bool RangeLocks::conflicts(int owner, const std::vector<Range>& want) const {
  for (const Held& h : held_) {
    if (h.owner == owner) continue;
    for (const Range& w : want) {
      if (w.file != h.range.file || (!w.exclusive && !h.range.exclusive)) continue;
      if (w.lo < h.range.hi && h.range.lo < w.hi) return true;
    }
  }
  return false;
}

void RangeLocks::acquire(int owner, const std::vector<Range>& want) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !conflicts(owner, want); });
  for (const Range& r : want) held_.push_back({owner, r});
}

void RangeLocks::release(int owner) {
  {
    std::lock_guard lock(mu_);
    std::erase_if(held_, [&](const Held& h) { return h.owner == owner; });
  }
  cv_.notify_all();
}

void OpLog::add(std::string line) {
  std::lock_guard lock(mu_);
  lines_.push_back(std::to_string(++count_) + " " + std::move(line));
  if (lines_.size() > kKeep) lines_.pop_front();
}

std::string OpLog::tail() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const std::string& l : lines_) out += "  " + l + "\n";
  return out;
}

void OpLog::clear() {
  std::lock_guard lock(mu_);
  lines_.clear();
  count_ = 0;
}

HangMonitor::HangMonitor(std::chrono::milliseconds limit,
                         std::function<void(const std::string&)> on_hang)
    : limit_(limit), on_hang_(std::move(on_hang)) {
  thread_ = std::thread([this] { watch(); });
}

HangMonitor::~HangMonitor() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HangMonitor::begin(int slot, std::string what) {
  std::lock_guard lock(mu_);
  slots_[slot] = {true, std::chrono::steady_clock::now(), std::move(what)};
}

void HangMonitor::end(int slot) {
  std::lock_guard lock(mu_);
  slots_[slot].busy = false;
}

void HangMonitor::watch() {
  // Often enough to catch a hang well within the limit, rarely enough to cost nothing.
  using std::chrono::milliseconds;
  const auto period = std::clamp<milliseconds>(limit_ / 4, milliseconds(1), milliseconds(200));
  std::unique_lock lock(mu_);
  while (!cv_.wait_for(lock, period, [this] { return stop_; })) {
    const auto now = std::chrono::steady_clock::now();
    for (const Slot& s : slots_) {
      if (!s.busy || now - s.since < limit_) continue;
      std::string what = s.what;
      lock.unlock();  // on_hang reads the op log and the fault journal: take no lock of ours
      on_hang_("HANG: still inside \"" + what + "\" after " + std::to_string(limit_.count()) +
               " ms");
      std::fflush(stderr);
      // Where every thread is (and a forked child's, if one is hung), through gdb where it is
      // installed: a hang seen once in CI must be diagnosable from its log alone.
      const std::vector<pid_t> children = test_support::child_processes(getpid());
      for (pid_t child : children) test_support::dump_stacks(child, "a forked child");
      test_support::dump_stacks(getpid(), "the simulation");
      for (pid_t child : children) kill(child, SIGKILL);
      _exit(3);
    }
  }
}

}  // namespace sim
