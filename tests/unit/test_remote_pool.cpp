// The remote pool (src/exec/remote_pool.hpp): however many tasks are posted, no more threads
// than allowed run them; start_now starts only what free threads can take at once; its end
// cancels queued tasks, joins its threads and never waits past its bound.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <atomic>
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

remote::Options transfers(unsigned concurrency, unsigned per_thread) {
  remote::Options o;
  o.concurrency = concurrency;
  o.per_thread = per_thread;
  return o;
}

TEST(RemotePool, AReadHasAThreadPerTransfersPerThreadAtLeastOneAtMostThePoolsBound) {
  EXPECT_EQ(remote_threads_for(transfers(16, 2)), 8u);
  EXPECT_EQ(remote_threads_for(transfers(16, 1)), 16u);
  EXPECT_EQ(remote_threads_for(transfers(17, 4)), 4u);   // whole threads: the last has 5
  EXPECT_EQ(remote_threads_for(transfers(3, 4)), 1u);    // fewer transfers than one thread's
  EXPECT_EQ(remote_threads_for(transfers(256, 1)), RemotePool::kMaxThreads);
  EXPECT_EQ(remote_threads_for(transfers(16, 0)), 16u);  // 0 (never from the settings) as 1
}

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

// The pool's end (at unload or exit) in a process of its own (a death test's child), since it
// ends the process's one pool: queued tasks are cancelled, not run; busy threads past the wait
// are left, and end() returns rather than hangs; later posts are cancelled at once.
int end_with_busy_threads() {
  RemotePool& pool = RemotePool::instance();
  pool.allow(2);
  Gate busy;
  pool.post(busy.task());
  pool.post(busy.task());
  if (!busy.wait_until([&] { return busy.running == 2; })) return 10;
  std::atomic<int> ran{0}, cancelled{0};
  for (int i = 0; i < 3; ++i) pool.post([&] { ++ran; }, [&] { ++cancelled; });
  const auto t0 = std::chrono::steady_clock::now();
  if (pool.end(std::chrono::milliseconds(200))) return 11;  // two threads are still busy
  if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(10)) return 12;
  if (ran != 0 || cancelled != 3) return 13;
  pool.post([&] { ++ran; }, [&] { ++cancelled; });  // after the end: cancelled here and now
  if (ran != 0 || cancelled != 4) return 14;
  std::vector<std::function<void()>> lanes{[] {}};
  if (pool.start_now(lanes) != 0) return 15;
  busy.release();  // the busy threads finish their tasks, then end
  if (!busy.wait_until([&] { return busy.done == 2; })) return 16;
  return 0;
}

int end_with_idle_threads() {
  RemotePool& pool = RemotePool::instance();
  pool.allow(3);
  Gate gate;
  for (int i = 0; i < 3; ++i) pool.post(gate.task());
  if (!gate.wait_until([&] { return gate.running == 3; })) return 20;
  gate.release();
  if (!gate.wait_until([&] { return gate.done == 3; })) return 21;
  if (!pool.end(std::chrono::seconds(30))) return 22;  // idle threads end at once
  if (pool.joined() != pool.threads() || pool.joined() != 3) return 23;
  int later = 0;
  pool.post([&] { later = 1; });  // no cancel: the task itself runs on the caller's thread
  return later == 1 ? 0 : 24;
}

TEST(RemotePoolDeathTest, EndCancelsQueuedTasksAndDoesNotWaitForBusyThreads) {
  EXPECT_EXIT(_exit(end_with_busy_threads()), ::testing::ExitedWithCode(0), "");
}

TEST(RemotePoolDeathTest, EndJoinsIdleThreads) {
  EXPECT_EXIT(_exit(end_with_idle_threads()), ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace gpufile::exec
