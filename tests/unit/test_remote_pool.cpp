// The remote pool (src/exec/remote_pool.hpp): however many tasks are posted, no more threads
// than allowed run them; start_now starts only what free threads can take at once.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <vector>

#include "exec/remote_pool.hpp"

namespace gpufile::exec {
namespace {

// Tasks that wait at a gate until the test opens it, counting how many ran at once.
struct Gate {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  int running = 0, most = 0, done = 0;

  std::function<void()> task() {
    return [this] {
      std::unique_lock lock(mu);
      most = std::max(most, ++running);
      cv.notify_all();
      cv.wait(lock, [this] { return open; });
      --running;
      ++done;
      cv.notify_all();
    };
  }
  // False after a minute: the test fails rather than hangs.
  bool wait_until(const std::function<bool()>& what) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, std::chrono::minutes(1), what);
  }
  void release() {
    std::lock_guard lock(mu);
    open = true;
    cv.notify_all();
  }
};

TEST(RemotePool, ManyTasksShareTheThreadsAllowed) {
  RemotePool& pool = RemotePool::instance();
  pool.allow(2);
  Gate gate;
  for (int i = 0; i < 20; ++i) pool.post(gate.task());
  ASSERT_TRUE(gate.wait_until([&] { return gate.running == 2; }));
  EXPECT_EQ(pool.threads(), 2u);
  std::vector<std::function<void()>> lanes{[] {}, [] {}};
  EXPECT_EQ(pool.start_now(lanes), 0u);  // every thread is busy and no more are allowed
  gate.release();
  ASSERT_TRUE(gate.wait_until([&] { return gate.done == 20; }));
  EXPECT_EQ(gate.most, 2);
  EXPECT_EQ(pool.threads(), 2u);
}

TEST(RemotePool, StartNowStartsNoMoreThanTheFreeThreadsAndRunsThemAll) {
  RemotePool& pool = RemotePool::instance();
  pool.allow(3);
  Gate busy, lanes;
  pool.post(busy.task());  // holds one of the three
  ASSERT_TRUE(busy.wait_until([&] { return busy.running == 1; }));
  std::vector<std::function<void()>> tasks;
  for (int i = 0; i < 5; ++i) tasks.push_back(lanes.task());
  const size_t started = pool.start_now(tasks);
  EXPECT_GE(started, 1u);  // a third thread may still be made
  EXPECT_LE(started, 2u);
  // The started ones run at once, though the busy task holds its thread: none waits in a queue.
  ASSERT_TRUE(lanes.wait_until([&] { return lanes.running == static_cast<int>(started); }));
  lanes.release();
  busy.release();
  ASSERT_TRUE(lanes.wait_until([&] { return lanes.done == static_cast<int>(started); }));
  ASSERT_TRUE(busy.wait_until([&] { return busy.done == 1; }));  // before the gates go
  EXPECT_LE(pool.threads(), 3u);
}

}  // namespace
}  // namespace gpufile::exec
