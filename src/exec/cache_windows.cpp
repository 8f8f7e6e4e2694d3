#include "exec/cache_windows.hpp"

#include <unistd.h>

#include <algorithm>
#include <vector>

#include "core/align.hpp"
#include "core/log.hpp"
#include "cuda/memory.hpp"
#include "sys/os.hpp"

namespace gpufile::exec {
namespace {

constexpr uint64_t kPage = 4096;
constexpr unsigned kMemHostRegisterReadOnly = 0x08;  // CU_MEMHOSTREGISTER_READ_ONLY

// Whether every page of [off, off+len) is in the page cache. Registering pages that are not
// would read them from the disk inside the driver's call, holding every other registration up.
// Where the kernel cannot tell (no cachestat), the caller's routing already judged the file
// cached.
bool all_cached(int fd, uint64_t off, uint64_t len) {
  sys::Residency r;
  if (sys::os().cachestat(fd, off, len, &r) != 0) return true;
  return r.cached_pages >= r.total_pages;
}

}  // namespace

// ---- FileWindows ---------------------------------------------------------------------------------

FileWindows::~FileWindows() {
  std::map<uint64_t, Window> all;
  {
    std::lock_guard lock(mu_);
    all.swap(windows_);
  }
  for (auto& [index, w] : all)
    if (w.state != State::registering) drop(std::move(w));
  owner_->forget(watch_id_);
}

const char* FileWindows::acquire(int fd, uint64_t off, uint64_t len, uint64_t file_size,
                                 cuda::CUcontext ctx, bool may_make, WindowLease* lease) {
  const uint64_t index = off / kWindow;
  if (len == 0 || (off + len - 1) / kWindow != index) return nullptr;  // across two windows
  std::unique_lock lock(mu_);
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (refused_generation_ == generation) return nullptr;
  auto it = windows_.find(index);
  if (it != windows_.end() && it->second.state == State::ready &&
      it->second.generation != generation) {
    it->second.state = State::retired;  // made before the file changed
  }
  if (it != windows_.end() && it->second.state == State::retired && it->second.users == 0) {
    Window old = std::move(it->second);
    windows_.erase(it);
    lock.unlock();
    drop(std::move(old));
    lock.lock();
    it = windows_.find(index);
  }
  if (it == windows_.end()) {
    // Read once so far, or a long read: staged.
    if (!may_make || !wanted_locked(index, generation)) return nullptr;
    PageCacheDma::MakerTurn turn(*owner_);
    if (!turn.held()) return nullptr;  // another window is being made: staged meanwhile
    demand_.erase(index);
    if (!make(lock, fd, index, file_size, ctx)) return nullptr;
    it = windows_.find(index);
  } else if (it->second.state != State::ready) {
    return nullptr;  // being made by another caller, or retired and still in use
  } else {
    ++it->second.users;
  }
  Window& w = it->second;
  if (off + len > w.off + w.len) {  // the file grew past the window since it was made
    --w.users;
    return nullptr;
  }
  w.last_used = std::chrono::steady_clock::now();
  lease->index = index;
  return w.map + (off - w.off);
}

bool FileWindows::make_ahead(int fd, uint64_t from, uint64_t to, uint64_t file_size,
                             cuda::CUcontext ctx) {
  to = std::min(to, file_size);
  if (to <= from) return false;
  std::unique_lock lock(mu_);
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (refused_generation_ == generation) return false;
  const uint64_t nearest = from / kWindow;
  for (uint64_t index = (to - 1) / kWindow + 1; index-- > nearest;) {
    if (windows_.count(index) != 0) continue;  // made, being made, or stale (acquire remakes it)
    // Only windows whose bytes were read again: a long read that once re-read one window's
    // bytes (a header, a file's last MiB) is otherwise a first reading, and registering all of
    // it ran at a fifth of the staged speed (4 H200, one process per GPU: 8.9 against 17 GiB/s
    // a GPU).
    if (!wanted_locked(index, generation)) continue;
    PageCacheDma::MakerTurn turn(*owner_);
    if (!turn.held()) return false;
    demand_.erase(index);
    if (!make(lock, fd, index, file_size, ctx)) return false;
    Window& w = windows_[index];
    --w.users;  // made for the workers' reads, not held by this thread
    w.last_used = std::chrono::steady_clock::now();
    return true;
  }
  return false;
}

bool FileWindows::wanted_locked(uint64_t index, uint64_t generation) const {
  if (demand_generation_ != generation) return false;  // counted for a file that changed since
  auto it = demand_.find(index);
  return it != demand_.end() && it->second.wanted;
}

bool FileWindows::count_demand_locked(uint64_t off, uint64_t len, uint64_t file_size,
                                      uint64_t generation) {
  if (demand_generation_ != generation) {  // what was read of the old file says nothing
    demand_.clear();
    demand_generation_ = generation;
  }
  bool wanted = false;
  for (uint64_t i = off / kWindow; i <= (off + len - 1) / kWindow; ++i) {
    if (windows_.count(i) != 0) continue;
    const uint64_t start = i * kWindow, end = std::min(start + kWindow, file_size);
    if (end <= start) break;
    Demand& d = demand_[i];
    d.asked += std::min(off + len, end) - std::max(off, start);
    d.wanted = d.wanted || d.asked > end - start;
    wanted = wanted || d.wanted;
  }
  return wanted;
}

bool FileWindows::make(std::unique_lock<std::mutex>& lock, int fd, uint64_t index,
                       uint64_t file_size, cuda::CUcontext ctx) {
  const uint64_t off = index * kWindow;
  if (off >= file_size) return false;
  const size_t len = align_up(std::min(kWindow, file_size - off), kPage);
  if (!all_cached(fd, off, len)) return false;
  if (!reserve(lock, len)) return false;
  Window& slot = windows_[index];
  slot.generation = generation_.load(std::memory_order_acquire);
  slot.off = off;
  slot.len = len;
  slot.ctx = ctx;
  lock.unlock();
  // Outside the lock: registration takes milliseconds. Others read this window's bytes through
  // staging meanwhile.
  void* map = nullptr;
  int err = sys::os().map_file(fd, off, len, &map);
  cuda::CUresult res = cuda::CUDA_SUCCESS;
  if (err == 0) {
    res = cuda::driver()->MemHostRegister(map, len,
                                          cuda::kMemHostRegisterPortable | kMemHostRegisterReadOnly);
    if (res != cuda::CUDA_SUCCESS) sys::os().unmap(map, len);
  }
  lock.lock();
  Window& w = windows_[index];
  if (err != 0 || res != cuda::CUDA_SUCCESS) {
    GPUFILE_LOG(LogLevel::info,
                "page-cache DMA off for a file until it changes: %s failed (%d); its reads are "
                "staged",
                err != 0 ? "mapping it" : "registering its pages with the driver",
                err != 0 ? err : static_cast<int>(res));
    refused_generation_ = w.generation;
    windows_.erase(index);
    owner_->refund(len);
    return false;
  }
  w.map = static_cast<char*>(map);
  w.state = State::ready;
  w.users = 1;
  live_.fetch_add(1, std::memory_order_acq_rel);
  return true;
}

bool FileWindows::reserve(std::unique_lock<std::mutex>& lock, size_t bytes) {
  while (!owner_->charge(bytes)) {
    const auto used_before = std::chrono::steady_clock::now() - owner_->idle_before_eviction();
    auto victim = windows_.end();
    for (auto it = windows_.begin(); it != windows_.end(); ++it)
      if (it->second.state != State::registering && it->second.users == 0 &&
          it->second.last_used <= used_before &&
          (victim == windows_.end() || it->second.last_used < victim->second.last_used))
        victim = it;
    if (victim == windows_.end()) return false;  // the budget is held by windows in use
    Window old = std::move(victim->second);
    windows_.erase(victim);
    lock.unlock();
    drop(std::move(old));
    lock.lock();
  }
  return true;
}

void FileWindows::take_changes() { owner_->take_changes(); }

FileWindows::ReadPlan FileWindows::plan_read(uint64_t off, uint64_t len, uint64_t file_size) {
  if (len == 0) return ReadPlan::staged;
  std::lock_guard lock(mu_);
  const uint64_t generation = generation_.load(std::memory_order_acquire);
  if (ready_locked(off, len, generation)) return ReadPlan::ready;
  return count_demand_locked(off, len, file_size, generation) ? ReadPlan::wanted
                                                              : ReadPlan::staged;
}

bool FileWindows::ready_locked(uint64_t off, uint64_t len, uint64_t generation) const {
  for (uint64_t i = off / kWindow; i <= (off + len - 1) / kWindow; ++i) {
    auto it = windows_.find(i);
    if (it == windows_.end()) return false;
    const Window& w = it->second;
    if (w.state != State::ready || w.generation != generation) return false;
    if (off + len > w.off + w.len && i == (off + len - 1) / kWindow) return false;  // it grew
  }
  return true;
}

void FileWindows::release(WindowLease* lease) {
  if (!lease->held()) return;
  std::unique_lock lock(mu_);
  auto it = windows_.find(lease->index);
  lease->index = UINT64_MAX;
  if (it == windows_.end()) return;
  Window& w = it->second;
  --w.users;
  const bool stale = w.state == State::retired ||
                     w.generation != generation_.load(std::memory_order_acquire);
  if (w.users > 0 || !stale) return;
  Window old = std::move(w);
  windows_.erase(it);
  lock.unlock();
  drop(std::move(old));
}

void FileWindows::drop(Window w) {
  {
    cuda::ScopedContext current(w.ctx);
    if (const cuda::Driver* d = cuda::driver()) d->MemHostUnregister(w.map);
  }
  sys::os().unmap(w.map, w.len);
  owner_->refund(w.len);
  live_.fetch_sub(1, std::memory_order_acq_rel);
}

// ---- PageCacheDma --------------------------------------------------------------------------------

PageCacheDma::PageCacheDma(uint64_t budget, std::chrono::milliseconds idle_before_eviction)
    : budget_(budget), idle_(idle_before_eviction) {
  if (budget_ == 0) return;
  queue_ = sys::os().changes_open();
  if (queue_ < 0)
    GPUFILE_LOG(LogLevel::info, "page-cache DMA off: no change notices (inotify: %d)", queue_);
}

PageCacheDma::~PageCacheDma() {
  if (queue_ >= 0) sys::os().close(queue_);
}

std::shared_ptr<FileWindows> PageCacheDma::windows_for(int fd, dev_t dev, ino_t ino) {
  if (queue_ < 0 || cuda::driver() == nullptr) return nullptr;
  std::lock_guard lock(mu_);
  std::weak_ptr<FileWindows>& slot = by_inode_[{dev, ino}];
  if (std::shared_ptr<FileWindows> w = slot.lock()) return w;
  const int id = sys::os().changes_watch(queue_, fd);
  if (id < 0) {
    by_inode_.erase({dev, ino});
    return nullptr;
  }
  auto w = std::make_shared<FileWindows>(shared_from_this(), id);
  slot = w;
  by_watch_[id] = w;
  std::erase_if(by_inode_, [](const auto& e) { return e.second.expired(); });
  return w;
}

void PageCacheDma::forget(int watch_id) {
  std::lock_guard lock(mu_);
  auto it = by_watch_.find(watch_id);
  // The inode may have a new FileWindows by now (the kernel gives a watched inode its old id).
  if (it == by_watch_.end() || !it->second.expired()) return;
  by_watch_.erase(it);
  sys::os().changes_unwatch(queue_, watch_id);
}

void PageCacheDma::take_changes() {
  std::lock_guard taking(take_mu_);
  constexpr int kMax = 64;
  int ids[kMax];
  for (;;) {
    const int n = sys::os().changes_take(queue_, ids, kMax);
    // The files are looked up under mu_ but told outside it: the last reference may go with
    // `changed`, and a FileWindows going away takes mu_ (forget).
    std::vector<std::shared_ptr<FileWindows>> changed;
    {
      std::lock_guard lock(mu_);
      for (int i = 0; i < n; ++i) {
        if (ids[i] < 0) {  // notices were lost: every file may have changed
          for (auto& [id, weak] : by_watch_)
            if (auto w = weak.lock()) changed.push_back(std::move(w));
          continue;
        }
        auto it = by_watch_.find(ids[i]);
        if (it == by_watch_.end()) continue;
        if (auto w = it->second.lock()) changed.push_back(std::move(w));
      }
    }
    for (const auto& w : changed) w->changed();
    if (n < kMax) return;
  }
}

bool PageCacheDma::charge(size_t bytes) {
  uint64_t now = pinned_.load(std::memory_order_relaxed);
  do {
    if (now + bytes > budget_) return false;
  } while (!pinned_.compare_exchange_weak(now, now + bytes, std::memory_order_relaxed));
  return true;
}

}  // namespace gpufile::exec
