// Page-cache DMA: reads of cached file bytes into GPU memory that the copy engine takes straight
// from the page cache, with no kernel read and no CPU copy (the "page cache DMA" path).
//
// Why: staging cached bytes means a pread into a pinned slab (the CPU writes every byte), then a
// DMA out of the slab. Measured on the H200 machine (docs/performance.md, "Many callers"), the copy
// engine reads bytes the CPU has just written far slower than old ones (a 1 MiB copy: about 380
// µs against 44 µs once the lines are flushed), which held 16 synchronous 1 MiB callers to 24-28
// GiB/s while copies of old bytes reach 44. A read-only mapping of the file registered with the
// driver (cuMemHostRegister, READ_ONLY) pins the cached pages themselves: copies out of it ran
// at 44 GiB/s (1 MiB x 16 threads) and 49 (4 MiB). Registering costs 20-35 µs per MiB and the
// driver serialises it (per call it was slower than staging), so a file's pages are registered
// once, in windows of kWindow bytes, and kept for its later reads, up to a budget of pinned bytes
// per process.
//
// Coherence: the window holds the file's own page-cache pages, so writes through the page cache
// (by anyone) land in them. What replaces pages (truncation, hole punching, an O_DIRECT write)
// is seen through change notices (inotify IN_MODIFY, which every write and truncation raises):
// before a window serves a read, the notices are taken, and a window of a changed file is
// retired (unregistered once its copies end) and made again from the current pages. A file that
// cannot be watched never takes this path. Writes through gpufile go through the page cache
// while windows of the file are live (Runtime::route_storage), never O_DIRECT around them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "cuda/driver.hpp"

namespace gpufile::exec {

class PageCacheDma;

// A window in use by one copy: it stays registered until release().
struct WindowLease {
  uint64_t index = UINT64_MAX;
  bool held() const { return index != UINT64_MAX; }
};

// The windows of one file (one inode), shared by every handle registered on it.
class FileWindows {
 public:
  static constexpr uint64_t kWindow = 64ull << 20;

  FileWindows(std::shared_ptr<PageCacheDma> owner, int watch_id)
      : owner_(std::move(owner)), watch_id_(watch_id) {}
  ~FileWindows();  // unregisters every window; none may be leased
  FileWindows(const FileWindows&) = delete;
  FileWindows& operator=(const FileWindows&) = delete;

  // File bytes [off, off+len) as a pointer the copy engine reads, valid until release(); null
  // when no window serves them now (the caller stages them as usual). `fd` reads the file
  // (page-cache fd), `file_size` is its size as the caller's IO saw it, `ctx` is current. The
  // change notices must have been taken (take_changes) since the read began.
  const char* acquire(int fd, uint64_t off, uint64_t len, uint64_t file_size,
                      cuda::CUcontext ctx, bool may_make, WindowLease* lease);
  void release(WindowLease* lease);
  // Makes the farthest window of file bytes [from, to) that is not made yet and whose bytes
  // were read before (plan_read's wanted ones; a long read's first reading of the others stays
  // staged). True when one was made; false when no such window is missing there, another is
  // being made (MakerTurn), the budget is held by windows in use, the bytes are not all cached,
  // or the file is refused. For a long read's calling thread (Job::makes_windows_ahead); `ctx`
  // is current.
  bool make_ahead(int fd, uint64_t from, uint64_t to, uint64_t file_size, cuda::CUcontext ctx);
  // What a read of [off, off+len) (`file_size` as the read saw it) finds, in one look:
  //   ready   registered windows of the current file serve all of it now;
  //   wanted  not, but more bytes were asked of one of its windows not made yet than it holds
  //           (some were read again): acquire() makes wanted windows only;
  //   staged  neither: the read is counted against the windows not made yet.
  // Registering holds up every other call into the driver for milliseconds (one cuFileRead of
  // a 4 GiB file, registering windows as it read, went from 48 to 26 GiB/s on the H200, and
  // KvikIO's first read from 42 to 28), so a file read once is staged as before; its second
  // reading makes the windows, and every later one copies out of them. A short read makes them
  // on its calling thread alone; a long one only while workers stage the rest of it
  // (Job::makes_windows_ahead): made one after another by one thread, an 8 GiB HDF5 read that
  // made its 128 windows ran at 11 GiB/s against 42 staged. One GPU's link takes staged bytes
  // at 94% of host-to-device, but several GPUs' links share host memory, which staging crosses
  // three times (docs/performance.md, "The host model"): there the windows pay.
  enum class ReadPlan { ready, wanted, staged };
  ReadPlan plan_read(uint64_t off, uint64_t len, uint64_t file_size);

  // Windows registered now (writes around them go through the page cache).
  bool live() const { return live_.load(std::memory_order_acquire) > 0; }
  // Takes the session's change notices (PageCacheDma::take_changes): once per read, before its
  // first acquire, so that every change made before the read began retires what it replaced.
  void take_changes();
  // A change notice arrived: every window is retired before it serves another read.
  void changed() { generation_.fetch_add(1, std::memory_order_acq_rel); }

 private:
  enum class State { registering, ready, retired };
  struct Window {
    State state = State::registering;
    uint64_t generation = 0;  // of the file when the window was made
    uint64_t off = 0;
    size_t len = 0;           // mapped and registered
    char* map = nullptr;
    cuda::CUcontext ctx = nullptr;
    int users = 0;
    std::chrono::steady_clock::time_point last_used{};  // for eviction: oldest first
  };

  // plan_read's two looks, mu_ held.
  bool ready_locked(uint64_t off, uint64_t len, uint64_t generation) const;
  bool count_demand_locked(uint64_t off, uint64_t len, uint64_t file_size, uint64_t generation);
  // Whether window `index`'s bytes were read more than once in the file's `generation`
  // (count_demand_locked); mu_ held.
  bool wanted_locked(uint64_t index, uint64_t generation) const;
  // Makes window `index` for the current generation; true when it is ready (one user counted).
  bool make(std::unique_lock<std::mutex>& lock, int fd, uint64_t index, uint64_t file_size,
            cuda::CUcontext ctx);
  // Frees the budget for `bytes` by retiring windows no read holds and none used for the
  // session's idle time, least recently used first; mu_ held. False when no window is that
  // idle: the read is staged rather than churn windows that are still being read (a file larger
  // than the budget, read over and over, or several files sharing it, would otherwise register
  // and unregister a window for every 64 MiB read, each holding the driver up for milliseconds).
  bool reserve(std::unique_lock<std::mutex>& lock, size_t bytes);
  // Unregisters and unmaps `w` (taken out of the map) outside the lock.
  void drop(Window w);

  const std::shared_ptr<PageCacheDma> owner_;
  const int watch_id_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> live_{0};
  std::mutex mu_;
  std::map<uint64_t, Window> windows_;  // by index (file offset / kWindow)
  struct Demand {
    uint64_t asked = 0;   // bytes read of the window's range while it had no window
    bool wanted = false;  // more than it holds: make it
  };
  std::map<uint64_t, Demand> demand_;  // by index, for the generation below
  uint64_t demand_generation_ = 0;
  // The generation of the file for which the kernel or the driver refused a window: none is
  // tried again until the file changes (a truncation racing with the mapping fails it once; an
  // unmappable file, always).
  std::optional<uint64_t> refused_generation_;
};

// The session's page-cache DMA: one change-notice queue, the budget of pinned bytes, and the
// windows of each file.
class PageCacheDma : public std::enable_shared_from_this<PageCacheDma> {
 public:
  // `budget` bytes may be registered at once; 0 turns the path off. A window unused for
  // `idle_before_eviction` may be retired to make room for another.
  PageCacheDma(uint64_t budget, std::chrono::milliseconds idle_before_eviction);
  ~PageCacheDma();
  PageCacheDma(const PageCacheDma&) = delete;
  PageCacheDma& operator=(const PageCacheDma&) = delete;

  // The windows of the file open as `fd`, shared with other handles of the same inode; null
  // when the path is off or the file cannot be watched for changes.
  std::shared_ptr<FileWindows> windows_for(int fd, dev_t dev, ino_t ino);

  // Takes the change notices that arrived: the changed files' windows are retired.
  void take_changes();

  uint64_t budget() const { return budget_; }
  std::chrono::milliseconds idle_before_eviction() const { return idle_; }

 private:
  friend class FileWindows;
  // The right to make a window, one at a time in the session. The driver runs registrations one
  // after another whatever the threads (16 GiB of windows took 390-440 ms on one thread or four,
  // in 64 or 256 MiB windows) and holds the process's other calls up meanwhile, so callers
  // making windows at once only queue, each holding its call: one process reading into four
  // GPUs, 32 callers, ran at 10-30 GiB/s for the 1-1.3 s its 256 windows took to make, 57 GiB/s
  // with one made at a time (docs/performance.md, "Many GPUs"). A caller that finds the turn
  // taken stages its piece and leaves the window for a later read.
  class MakerTurn {
   public:
    explicit MakerTurn(PageCacheDma& owner)
        : owner_(owner), held_(!owner.making_.exchange(true, std::memory_order_acquire)) {}
    ~MakerTurn() {
      if (held_) owner_.making_.store(false, std::memory_order_release);
    }
    MakerTurn(const MakerTurn&) = delete;
    MakerTurn& operator=(const MakerTurn&) = delete;
    bool held() const { return held_; }

   private:
    PageCacheDma& owner_;
    const bool held_;
  };
  bool charge(size_t bytes);
  // A file's windows are gone: its watch goes too, unless the inode has windows again.
  void forget(int watch_id);
  void refund(size_t bytes) { pinned_.fetch_sub(bytes, std::memory_order_relaxed); }

  const uint64_t budget_;
  const std::chrono::milliseconds idle_;
  std::atomic<uint64_t> pinned_{0};
  std::atomic<bool> making_{false};  // a window is being made (MakerTurn)
  int queue_ = -1;  // the change-notice queue, or -1 (then no file takes this path)
  // Held while notices are taken and applied, so that no read starts between the two.
  std::mutex take_mu_;
  std::mutex mu_;   // the maps below
  std::map<std::pair<dev_t, ino_t>, std::weak_ptr<FileWindows>> by_inode_;
  std::map<int, std::weak_ptr<FileWindows>> by_watch_;
};

}  // namespace gpufile::exec
