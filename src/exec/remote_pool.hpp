// The threads that carry remote transfers (docs/remote.md, "Threads"): the Futures of remote
// reads, and the lanes a read of several parts is shared by (exec/remote.cpp). One bounded set
// for the process, so that many Futures in flight do not each bring threads of their own.
//
// Not the executor's IO workers: a remote transfer holds its thread for as long as the server
// takes (a stall lasts up to remote_timeout_s), and the file IO listed behind it would wait as
// long; and the executor ends with its driver session, while a Future may outlive a close.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "io/remote/request.hpp"

namespace gpufile::exec {

// A read of `o.concurrency` transfers is shared by concurrency / per_thread threads (at least
// one), and that many are the pool's bound.
unsigned remote_threads_for(const remote::Options& o);

class RemotePool {
 public:
  static constexpr unsigned kMaxThreads = 64;

  static RemotePool& instance();

  // Lets the pool grow to `threads` threads (at most kMaxThreads); never shrinks it.
  void allow(unsigned threads);
  // Runs `task` on a pool thread once one is free; queued tasks start in the order posted.
  // With no thread to be had at all (the system refused them), runs it on the calling thread.
  // `cancel`, when given, is called instead of `task` if the pool ends first (the library is
  // being unloaded), so that whoever waits for the task learns it will not run.
  void post(std::function<void()> task, std::function<void()> cancel = {});
  // Starts the first tasks of `tasks`, ahead of the queue, on threads free for them now, and
  // returns how many it started. Those wait for nothing else, so a task of the pool may wait
  // for them without a deadlock; the rest are the caller's to run or drop.
  size_t start_now(std::vector<std::function<void()>>& tasks);
  // Threads started so far.
  unsigned threads() const;

  // In the child of a fork: a fresh pool (the parent's threads do not exist there).
  static void forget_after_fork();

  // Ends the pool, when the library is unloaded (dlclose) or the process exits (a static
  // destructor calls it): queued tasks are cancelled (their `cancel`; a task posted without
  // one runs here), tasks of start_now still run (their callers wait for them), then the
  // threads end and are joined. A thread still busy after `wait` is left running (at exit the
  // process ends it). Later posts are cancelled at once and start_now starts nothing, so
  // nothing waits for the pool any more. Returns whether every thread was joined.
  bool end(std::chrono::milliseconds wait);
  // Threads that ended and were joined (by end()).
  unsigned joined() const;

 private:
  struct Worker {
    std::thread thread;
    bool exited = false;  // mu_: its loop returned
  };
  RemotePool() = default;
  void work(Worker* self);
  bool add_thread();  // mu_ held
  long free_threads() const;  // idle, starting or still to be made, less urgent tasks: mu_ held

  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::vector<std::function<void()>> urgent_;  // start_now's, taken first
  struct Queued {
    std::function<void()> task, cancel;
  };
  std::vector<Queued> queued_;  // post's, oldest first
  std::condition_variable exited_;  // a thread's loop returned (after end())
  std::vector<std::unique_ptr<Worker>> workers_;  // every thread made, joined by end()
  bool ended_ = false;
  unsigned joined_ = 0;
  unsigned limit_ = 1, threads_ = 0;
  unsigned idle_ = 0;      // waiting for a task
  unsigned starting_ = 0;  // made, not yet waiting
};

}  // namespace gpufile::exec
