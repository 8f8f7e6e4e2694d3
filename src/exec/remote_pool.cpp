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

// How long the pool's end waits for threads busy with a transfer: at exit, a stalled one would
// otherwise hold the process for up to remote_timeout_s times its retries.
constexpr std::chrono::seconds kEndWait{2};

// The threads end and are joined before the library's code goes away (dlclose), and at exit.
struct EndAtUnload {
  ~EndAtUnload() {
    if (current != nullptr) current->end(kEndWait);
  }
} end_at_unload;

}  // namespace

unsigned remote_threads_for(const remote::Options& o) {
  return std::clamp(o.concurrency / std::max(1u, o.per_thread), 1u, RemotePool::kMaxThreads);
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
    workers_.reserve(workers_.size() + 1);  // the push_back below cannot throw
    auto w = std::make_unique<Worker>();
    w->thread = std::thread([this, self = w.get()] { work(self); });
    workers_.push_back(std::move(w));
  } catch (const std::exception&) {  // no thread (system_error) or no memory
    return false;
  }
  ++threads_;
  ++starting_;
  return true;
}

void RemotePool::post(std::function<void()> task, std::function<void()> cancel) {
  {
    std::lock_guard lock(mu_);
    if (!ended_) {
      queued_.push_back({std::move(task), std::move(cancel)});
      const bool idle_enough = idle_ + starting_ >= urgent_.size() + queued_.size();
      if (idle_enough || (threads_ < limit_ && add_thread()) || threads_ > 0) {
        wake_.notify_one();
        return;
      }
      task = std::move(queued_.back().task);  // no thread at all: the caller's own
      queued_.pop_back();
    } else if (cancel) {  // the library is going away: nothing may wait for the pool
      task = std::move(cancel);
    }
  }
  task();
}

size_t RemotePool::start_now(std::vector<std::function<void()>>& tasks) {
  std::lock_guard lock(mu_);
  size_t started = 0;
  while (!ended_ && started < tasks.size() && free_threads() > 0) {
    // A thread for it: an idle one, else a new one (counted in free_threads until it started).
    if (idle_ + starting_ <= urgent_.size() && !add_thread()) break;
    urgent_.push_back(std::move(tasks[started++]));
    wake_.notify_one();
  }
  return started;
}

void RemotePool::work(Worker* self) {
  pthread_setname_np(pthread_self(), "gpufile-remote");  // tests find the pool's threads by it
  std::unique_lock lock(mu_);
  --starting_;
  for (;;) {
    ++idle_;
    wake_.wait(lock, [this] { return !urgent_.empty() || !queued_.empty() || ended_; });
    --idle_;
    std::function<void()> task;
    if (!urgent_.empty()) {  // even after end(): their callers wait for them
      task = std::move(urgent_.front());
      urgent_.erase(urgent_.begin());
    } else if (!queued_.empty()) {
      task = std::move(queued_.front().task);
      queued_.erase(queued_.begin());
    } else {  // ended
      self->exited = true;
      exited_.notify_all();
      return;
    }
    lock.unlock();
    task();
    task = nullptr;  // what it holds goes before the thread counts as idle again
    lock.lock();
  }
}

bool RemotePool::end(std::chrono::milliseconds wait) {
  std::vector<Queued> dropped;
  {
    std::lock_guard lock(mu_);
    if (ended_) return joined_ == workers_.size();
    ended_ = true;
    dropped.swap(queued_);
    wake_.notify_all();
  }
  for (Queued& q : dropped) (q.cancel ? q.cancel : q.task)();
  std::unique_lock lock(mu_);
  const auto all_exited = [this] {
    return std::all_of(workers_.begin(), workers_.end(), [](const auto& w) { return w->exited; });
  };
  exited_.wait_for(lock, wait, all_exited);
  for (auto& w : workers_) {
    if (!w->thread.joinable()) continue;
    if (w->exited) {
      w->thread.join();  // its loop returned: only the thread's own exit is left
      ++joined_;
    } else {
      w->thread.detach();  // busy past the wait (at exit the process ends it)
    }
  }
  return joined_ == workers_.size();
}

unsigned RemotePool::joined() const {
  std::lock_guard lock(mu_);
  return joined_;
}

}  // namespace gpufile::exec
