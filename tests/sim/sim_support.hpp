// Small tools of the seeded simulation (tests/sim): the random source, the range locks that keep
// the model exact while threads run at once, the operation log and the hang monitor.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "splitmix64.hpp"

namespace sim {

// One stream per seed and per thread (seed ^ a constant per purpose), so the ops a thread makes
// depend only on the seed, never on how the threads interleave.
class Rng : public test_support::SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  // A number in [lo, hi], both included.
  uint64_t between(uint64_t lo, uint64_t hi) { return lo + below(hi - lo + 1); }
  bool chance(double p) { return static_cast<double>(next() >> 11) * 0x1.0p-53 < p; }
  double uniform(double lo, double hi) {
    return lo + (hi - lo) * (static_cast<double>(next() >> 11) * 0x1.0p-53);
  }
  template <typename T, size_t N>
  const T& pick(const T (&items)[N]) {
    return items[below(N)];
  }
};

// Byte ranges of the simulated files that an operation is using. A write holds its range
// exclusively, a read shares it with other reads, so while an operation runs no other thread
// changes the bytes it reads or writes: the model can say exactly what each call must do, and
// still every thread runs against the same files, handles of them and library at once.
// A thread holds at most one set at a time (taken together), so waiting can never deadlock.
class RangeLocks {
 public:
  struct Range {
    int file = 0;
    uint64_t lo = 0;
    uint64_t hi = 0;  // past the end; UINT64_MAX: to the end of the file and beyond
    bool exclusive = false;
  };
  // Waits until no range of `want` conflicts with one another thread holds, then takes them all.
  void acquire(int owner, const std::vector<Range>& want);
  void release(int owner);

 private:
  struct Held {
    int owner;
    Range range;
  };
  bool conflicts(int owner, const std::vector<Range>& want) const;

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Held> held_;
};

// The last operations of a run, printed when a seed fails.
class OpLog {
 public:
  void add(std::string line);
  std::string tail() const;
  void clear();

 private:
  static constexpr size_t kKeep = 80;
  mutable std::mutex mu_;
  std::deque<std::string> lines_;
  uint64_t count_ = 0;
};

// Turns a hang into a failure: every thread of a run says what it starts and when it is done;
// a thread that stays inside one operation longer than the limit makes the monitor call
// `on_hang` (which prints the seed, the log and the reproduce command) and end the process.
class HangMonitor {
 public:
  static constexpr int kSlots = 16;
  HangMonitor(std::chrono::milliseconds limit, std::function<void(const std::string&)> on_hang);
  ~HangMonitor();
  HangMonitor(const HangMonitor&) = delete;
  HangMonitor& operator=(const HangMonitor&) = delete;

  void begin(int slot, std::string what);
  void end(int slot);

 private:
  void watch();

  const std::chrono::milliseconds limit_;
  std::function<void(const std::string&)> on_hang_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  struct Slot {
    bool busy = false;
    std::chrono::steady_clock::time_point since;
    std::string what;
  };
  Slot slots_[kSlots];
  std::thread thread_;
};

// Scope of one operation under the monitor.
class Watched {
 public:
  Watched(HangMonitor& m, int slot, std::string what) : m_(m), slot_(slot) {
    m_.begin(slot, std::move(what));
  }
  ~Watched() { m_.end(slot_); }
  Watched(const Watched&) = delete;
  Watched& operator=(const Watched&) = delete;

 private:
  HangMonitor& m_;
  int slot_;
};

}  // namespace sim
