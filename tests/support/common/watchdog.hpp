// A guard for tests that could hang: if the scope is still running after `limit`, the process
// prints what was running and exits, so a hung IO fails its test in seconds instead of holding
// CI until CTest's timeout. Used by the integration and fault suites.
#pragma once

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace test_support {

class Watchdog {
 public:
  Watchdog(std::chrono::milliseconds limit, std::string what) {
    thread_ = std::thread([this, limit, what = std::move(what)] {
      std::unique_lock lock(mu_);
      if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
      std::fprintf(stderr, "\nWATCHDOG: \"%s\" still running after %lld ms: a hang. Exiting.\n",
                   what.c_str(), static_cast<long long>(limit.count()));
      std::fflush(stderr);
      _exit(3);
    });
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace test_support
