#include "core/stats_export.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>

#include "sys/os.hpp"

namespace gpufile::stats {
namespace {

constexpr uint32_t kMagic = 0x54534647;  // "GFST"
// Raised whenever Snapshot's layout changes (a path, a counter, a bucket added): a reader of
// another version refuses the segment instead of misreading it. 2: latency histograms per path,
// per-device rows, the remote path.
constexpr uint32_t kVersion = kSegmentVersion;
// The size of version 2's Snapshot (LP64 Linux): a change of the counters fails
// here, so that whoever changes them raises kSegmentVersion and then this size.
static_assert(sizeof(Snapshot) == 6312 && kSegmentVersion == 3,
              "stats::Snapshot changed: raise kSegmentVersion (core/stats_export.hpp) and this size");
constexpr auto kPublishEvery = std::chrono::milliseconds(100);

struct Header {
  uint32_t magic;
  uint32_t version;
  uint64_t snapshot_size;
  int64_t pid;
  uint64_t start_ticks;  // process_start_ticks(pid) of the publisher
  std::atomic<uint64_t> sequence;  // odd while the publisher writes
  uint64_t published_unix_ns;
};
struct Segment {
  Header header;
  Snapshot snapshot;
};
static_assert(std::is_trivially_copyable_v<Snapshot>);
static_assert(std::atomic<uint64_t>::is_always_lock_free, "the sequence is shared between processes");

struct Publisher {
  std::mutex write_lock;       // one writer at a time: the thread and snapshot() callers
  Segment* segment = nullptr;  // guarded by write_lock
  std::string name;
  int owner_pid = 0;
  std::thread* thread = nullptr;  // on the heap: a forked child forgets it without destroying it
  std::thread* forgotten = nullptr;  // that object, in the child (kept reachable: not a leak)
  std::mutex wake_lock;
  std::condition_variable wake;
  bool stopping = false;  // guarded by wake_lock
};

// Never destroyed: the exit handler and a forked child use it after static destruction began.
Publisher& publisher() {
  static Publisher* p = new Publisher;
  return *p;
}

uint64_t unix_now_ns() {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::system_clock::now().time_since_epoch())
                                   .count());
}

// When process `pid` started, in clock ticks since boot (/proc/PID/stat, field 22): with the
// pid it names one process, where the pid alone may name a later one. 0 if unknown.
uint64_t process_start_ticks(int pid) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  const int fd = sys::os().open(path.c_str(), O_RDONLY, 0);
  if (fd < 0) return 0;
  char text[1024];
  const ssize_t n = sys::os().pread(fd, text, sizeof text - 1, 0);
  sys::os().close(fd);
  if (n <= 0) return 0;
  text[n] = '\0';
  // The command name (field 2) may hold spaces and parentheses: count from its last ')'.
  const char* at = std::strrchr(text, ')');
  for (int field = 2; at && field < 22; ++field) at = std::strchr(at + 1, ' ');
  return at ? std::strtoull(at + 1, nullptr, 10) : 0;
}

// A segment left by an earlier process that had the same pid.
bool stale_for(const Segment& seg, uint64_t start_ticks) {
  return seg.header.start_ticks != start_ticks;
}

void publish_loop(Publisher* p) {
  std::unique_lock lock(p->wake_lock);
  while (!p->stopping) {
    p->wake.wait_for(lock, kPublishEvery);
    if (p->stopping) break;
    lock.unlock();
    (void)snapshot();  // publishes
    lock.lock();
  }
}

// Removes segment `name` if an earlier process with the same pid left it.
bool remove_if_stale(const std::string& name, uint64_t start_ticks) {
  size_t size = 0;
  void* mem = nullptr;
  if (sys::os().shm_map_read(name.c_str(), &size, &mem) != 0) return false;
  const auto& seg = *static_cast<const Segment*>(mem);
  const bool stale = size >= sizeof(Segment) && seg.header.magic == kMagic && stale_for(seg, start_ticks);
  sys::os().unmap(mem, size);
  return stale && sys::os().shm_remove(name.c_str()) == 0;
}

// Makes the segment under the first free name: a second runtime in this process (the HDF5
// plugin's) takes the next index.
bool create_segment(Publisher& p) {
  const int pid = static_cast<int>(::getpid());
  const uint64_t start_ticks = process_start_ticks(pid);
  for (int index = 0; index < kMaxSegmentsPerProcess; ++index) {
    const std::string name = segment_name(pid, index);
    void* mem = nullptr;
    int r = sys::os().shm_create(name.c_str(), sizeof(Segment), &mem);
    if (r == -EEXIST && remove_if_stale(name, start_ticks)) {
      r = sys::os().shm_create(name.c_str(), sizeof(Segment), &mem);
    }
    if (r == -EEXIST) continue;  // another runtime of this process publishes under this name
    if (r < 0) return false;  // no /dev/shm: stats still work in this process
    auto* seg = static_cast<Segment*>(mem);
    seg->header.version = kVersion;
    seg->header.snapshot_size = sizeof(Snapshot);
    seg->header.pid = pid;
    seg->header.start_ticks = start_ticks;
    std::atomic_thread_fence(std::memory_order_release);
    seg->header.magic = kMagic;  // last: a reader skips a segment without it (not ready yet)
    std::lock_guard lock(p.write_lock);
    p.segment = seg;
    p.name = name;
    p.owner_pid = pid;
    return true;
  }
  return false;
}

void stop_publishing(Publisher& p) {
  if (p.thread) {
    {
      std::lock_guard lock(p.wake_lock);
      p.stopping = true;
    }
    p.wake.notify_all();
    p.thread->join();
    delete p.thread;
    p.thread = nullptr;
    std::lock_guard lock(p.wake_lock);
    p.stopping = false;
  }
  std::lock_guard lock(p.write_lock);
  if (!p.segment) return;
  sys::os().unmap(p.segment, sizeof(Segment));
  sys::os().shm_remove(p.name.c_str());
  p.segment = nullptr;
  p.name.clear();
}

void at_exit() {
  Publisher& p = publisher();
  // A forked child that exits must not remove its parent's segment.
  if (p.owner_pid == static_cast<int>(::getpid())) stop_publishing(p);
}

// fork(): the child has no publishing thread and must not write the parent's segment; it
// publishes again (under its own pid) when its stats level is next set.
void before_fork() {
  publisher().write_lock.lock();
  publisher().wake_lock.lock();
}
void after_fork_in_parent() {
  publisher().wake_lock.unlock();
  publisher().write_lock.unlock();
}
void after_fork_in_child() {
  Publisher& p = publisher();
  // That thread does not exist here: its object can be neither joined nor destroyed.
  if (p.thread) p.forgotten = p.thread;
  p.thread = nullptr;
  if (p.segment) sys::os().unmap(p.segment, sizeof(Segment));
  p.segment = nullptr;
  p.name.clear();
  p.owner_pid = 0;
  p.stopping = false;
  p.wake_lock.unlock();
  p.write_lock.unlock();
}

void add(Counter& into, const Counter& c) {
  into.ok += c.ok;
  into.err += c.err;
}

void widen(uint64_t& first, uint64_t& last, uint64_t f, uint64_t l) {
  if (f && (!first || f < first)) first = f;
  if (l > last) last = l;
}

// Adds the counters of a second runtime in the same process.
void add(Snapshot& into, const Snapshot& s) {
  if (s.level > into.level) into.level = s.level;
  into.started = into.started || s.started;
  for (int i = 0; i < kOps; ++i) {
    OpTotals& t = into.ops[i];
    const OpTotals& o = s.ops[i];
    add(t.calls, o.calls);
    t.bytes += o.bytes;
    t.latency_ns += o.latency_ns;
    widen(t.first_start_ns, t.last_end_ns, o.first_start_ns, o.last_end_ns);
    for (int k = 0; k < kHistogramBuckets; ++k) t.size_hist[k] += o.size_hist[k];
    for (int p = 0; p < kPaths; ++p) {
      into.paths[i][p].bytes += s.paths[i][p].bytes;
      into.paths[i][p].ops += s.paths[i][p].ops;
      for (int k = 0; k < kLatencyBuckets; ++k)
        into.paths[i][p].latency_hist[k] += s.paths[i][p].latency_hist[k];
    }
    for (int row = 0; row < kDeviceRows; ++row) {
      add(into.devices[row][i].calls, s.devices[row][i].calls);
      into.devices[row][i].bytes += s.devices[row][i].bytes;
    }
    into.caller_bytes[i] += s.caller_bytes[i];
    into.worker_bytes[i] += s.worker_bytes[i];
    into.batch.bytes[i] += s.batch.bytes[i];
    into.batch.last_submit_bytes[i] += s.batch.last_submit_bytes[i];
  }
  add(into.handle_register, s.handle_register);
  add(into.handle_deregister, s.handle_deregister);
  add(into.buffer_register, s.buffer_register);
  add(into.buffer_deregister, s.buffer_deregister);
  into.registered_bytes += s.registered_bytes;
  BatchTotals& b = into.batch;
  add(b.setup, s.batch.setup);
  add(b.submit, s.batch.submit);
  add(b.complete, s.batch.complete);
  add(b.cancel, s.batch.cancel);
  add(b.destroy, s.batch.destroy);
  b.entries_submitted += s.batch.entries_submitted;
  b.submit_latency_ns += s.batch.submit_latency_ns;
  b.completion_latency_ns += s.batch.completion_latency_ns;
  widen(b.first_submit_ns, b.last_complete_ns, s.batch.first_submit_ns, s.batch.last_complete_ns);
}

// A consistent copy of a live segment: retried while its publisher is writing.
bool copy_consistent(const Segment& seg, Snapshot* out, uint64_t* published_ns) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const uint64_t before = seg.header.sequence.load(std::memory_order_acquire);
    if (before % 2 == 0) {
      std::memcpy(static_cast<void*>(out), &seg.snapshot, sizeof(Snapshot));
      *published_ns = seg.header.published_unix_ns;
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seg.header.sequence.load(std::memory_order_relaxed) == before) return true;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
  return false;
}

}  // namespace

std::string segment_name(int pid, int index) {
  std::string name = "/gpufile-stats-" + std::to_string(pid);
  if (index > 0) name += "." + std::to_string(index);
  return name;
}

void publishing(bool on) {
  Publisher& p = publisher();
  if (!on) {
    if (p.owner_pid == static_cast<int>(::getpid())) stop_publishing(p);
    return;
  }
  if (p.thread) return;
  static std::once_flag hooks;
  std::call_once(hooks, [] {
    std::atexit(at_exit);
    pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
  });
  if (!create_segment(p)) return;
  p.thread = new std::thread(publish_loop, &p);
}

void publish(const Snapshot& s) {
  Publisher& p = publisher();
  std::lock_guard lock(p.write_lock);
  if (!p.segment) return;
  Header& h = p.segment->header;
  const uint64_t sequence = h.sequence.load(std::memory_order_relaxed);
  h.sequence.store(sequence + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(static_cast<void*>(&p.segment->snapshot), &s, sizeof(Snapshot));
  h.published_unix_ns = unix_now_ns();
  h.sequence.store(sequence + 2, std::memory_order_release);
}

ReadResult read_published(int pid) {
  ReadResult result;
  const int exists = sys::os().process_exists(pid);
  if (exists < 0) {
    result.error = -exists;
    return result;
  }
  const uint64_t start_ticks = exists ? process_start_ticks(pid) : 0;
  for (int index = 0; index < kMaxSegmentsPerProcess; ++index) {
    const std::string name = segment_name(pid, index);
    if (!exists) {  // the process is gone: what it left is stale
      if (sys::os().shm_remove(name.c_str()) == 0) ++result.removed;
      continue;
    }
    size_t size = 0;
    void* mem = nullptr;
    const int r = sys::os().shm_map_read(name.c_str(), &size, &mem);
    if (r == -ENOENT || r == -ENODATA) continue;
    if (r < 0) {
      result.error = -r;
      return result;
    }
    const auto& seg = *static_cast<const Segment*>(mem);
    if (size >= sizeof(seg.header.magic) && seg.header.magic == 0) {  // being made right now
      sys::os().unmap(mem, size);
      continue;
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    if (size >= sizeof(Segment) && seg.header.magic == kMagic && stale_for(seg, start_ticks)) {
      sys::os().unmap(mem, size);  // left by an earlier process with this pid
      if (sys::os().shm_remove(name.c_str()) == 0) ++result.removed;
      continue;
    }
    if (size >= sizeof(Header) && seg.header.magic == kMagic && seg.header.version != kVersion) {
      result.found_version = seg.header.version;  // before the size check: versions differ in size
      sys::os().unmap(mem, size);
      result.status = ReadStatus::mismatch;
      return result;
    }
    Snapshot s;
    uint64_t published = 0;
    const bool ok = size >= sizeof(Segment) && seg.header.magic == kMagic &&
                    seg.header.snapshot_size == sizeof(Snapshot) && seg.header.pid == pid &&
                    copy_consistent(seg, &s, &published);
    sys::os().unmap(mem, size);
    if (!ok) {
      result.status = ReadStatus::mismatch;
      return result;
    }
    if (result.segments++ == 0) {
      result.snapshot = s;
    } else {
      add(result.snapshot, s);
    }
    if (published > result.published_unix_ns) result.published_unix_ns = published;
  }
  if (!exists) {
    result.status = ReadStatus::not_running;
  } else {
    result.status = result.segments ? ReadStatus::ok : ReadStatus::no_segment;
  }
  return result;
}

}  // namespace gpufile::stats
