#include "exec/remote_pool.hpp"

#include <pthread.h>

#include <algorithm>
#include <new>
#include <system_error>
#include <thread>

namespace gpufile::exec {
namespace {

// Static storage, not the heap: the child of a fork builds its fresh pool here without
// allocating (another thread of the parent may have held the allocator's lock), leaking the
// parent's, whose threads and locks do not exist there.
alignas(RemotePool) unsigned char storage[sizeof(RemotePool)];
RemotePool* current = nullptr;
std::once_flag made;

}  // namespace

unsigned remote_threads_for(unsigned concurrency) {
  return std::clamp(concurrency / kTransfersPerLane, 1u, RemotePool::kMaxThreads);
}

RemotePool& RemotePool::instance() {
  std::call_once(made, [] {
    current = new (storage) RemotePool();
    pthread_atfork(nullptr, nullptr, &RemotePool::forget_after_fork);
  });
  return *current;
}

void RemotePool::forget_after_fork() {
  if (current != nullptr) current = new (storage) RemotePool();
}

void RemotePool::allow(unsigned threads) {
  std::lock_guard lock(mu_);
  limit_ = std::clamp(threads, limit_, kMaxThreads);
  // Tasks queued while the limit was lower get the threads they can have now.
  while (idle_ + starting_ < urgent_.size() + queued_.size() && threads_ < limit_ && add_thread())
    wake_.notify_one();
}

unsigned RemotePool::threads() const {
  std::lock_guard lock(mu_);
  return threads_;
}

// Urgent tasks are taken before queued ones, so only they compete for the threads counted.
long RemotePool::free_threads() const {
  return static_cast<long>(idle_ + starting_ + (limit_ - threads_)) -
         static_cast<long>(urgent_.size());
}

bool RemotePool::add_thread() {
  try {
    std::thread([this] { work(); }).detach();
  } catch (const std::system_error&) {
    return false;
  }
  ++threads_;
  ++starting_;
  return true;
}

void RemotePool::post(std::function<void()> task, std::function<void()> cancel) {
  {
    std::lock_guard lock(mu_);
    queued_.push_back({std::move(task), std::move(cancel)});
    const bool idle_enough = idle_ + starting_ >= urgent_.size() + queued_.size();
    if (idle_enough || (threads_ < limit_ && add_thread()) || threads_ > 0) {
      wake_.notify_one();
      return;
    }
    task = std::move(queued_.back().task);
    queued_.pop_back();
  }
  task();  // no thread at all: the caller's own
}

size_t RemotePool::start_now(std::vector<std::function<void()>>& tasks) {
  std::lock_guard lock(mu_);
  size_t started = 0;
  while (started < tasks.size() && free_threads() > 0) {
    // A thread for it: an idle one, else a new one (counted in free_threads until it started).
    if (idle_ + starting_ <= urgent_.size() && !add_thread()) break;
    urgent_.push_back(std::move(tasks[started++]));
    wake_.notify_one();
  }
  return started;
}

void RemotePool::work() {
  pthread_setname_np(pthread_self(), "gpufile-remote");  // tests find the pool's threads by it
  std::unique_lock lock(mu_);
  --starting_;
  for (;;) {
    ++idle_;
    wake_.wait(lock, [this] { return !urgent_.empty() || !queued_.empty(); });
    --idle_;
    std::function<void()> task;
    if (!urgent_.empty()) {
      task = std::move(urgent_.front());
      urgent_.erase(urgent_.begin());
    } else {
      task = std::move(queued_.front().task);
      queued_.erase(queued_.begin());
    }
    lock.unlock();
    task();
    task = nullptr;  // what it holds goes before the thread counts as idle again
    lock.lock();
  }
}

}  // namespace gpufile::exec
