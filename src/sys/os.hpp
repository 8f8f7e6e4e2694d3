// The one seam between gpufile and the operating system. Every file-system call and every
// io_uring completion the data path consumes passes through Os, so tests can inject faults
// (src/sys/faulty_os.hpp) where an LD_PRELOAD shim could never reach: inside io_uring.
//
// Convention (liburing's): results are >= 0 on success or -errno on failure; errno is never
// read by callers.
#pragma once

#include <string>

#include <sys/stat.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>

struct io_uring;

namespace gpufile::sys {

// Alignment a file demands for O_DIRECT, from statx(STATX_DIOALIGN) where the kernel knows it.
struct DioAlign {
  uint32_t mem = 4096;     // buffer address and length alignment
  uint32_t offset = 4096;  // file offset alignment
};

// What part of a file range sits in the page cache (cachestat(2), Linux 6.5+).
struct Residency {
  uint64_t cached_pages = 0;
  uint64_t total_pages = 0;
};

enum class IoKind : int { read = 0, write = 1 };

class Os {
 public:
  virtual ~Os() = default;

  virtual int open(const char* path, int flags, mode_t mode);
  virtual int close(int fd);
  virtual ssize_t pread(int fd, void* buf, size_t len, uint64_t off);
  virtual ssize_t pwrite(int fd, const void* buf, size_t len, uint64_t off);
  // A read that takes only what the page cache already holds and never waits for the disk
  // (preadv2 with RWF_NOWAIT): fewer bytes than asked, or -EAGAIN when none of them is cached.
  // -EOPNOTSUPP where the file system cannot do it. The kernel may still start readahead.
  virtual ssize_t pread_cached(int fd, void* buf, size_t len, uint64_t off);
  virtual int fstat(int fd, struct stat* st);
  virtual int get_flags(int fd);  // fcntl(F_GETFL)
  // 0 and fills `out` when the kernel reports DIO alignment; -EOPNOTSUPP when it can't say.
  virtual int dio_align(int fd, DioAlign* out);
  virtual int cachestat(int fd, uint64_t off, uint64_t len, Residency* out);
  // A read-only shared mapping of [off, off+len) of the file (off page aligned): 0 and the
  // address in `*out`, or -errno. unmap undoes it.
  virtual int map_file(int fd, uint64_t off, size_t len, void** out);
  virtual int unmap(void* addr, size_t len);
  // Brings [off, off+len) of the file into the page cache in the largest pieces (folios) the
  // file system takes, up to 2 MiB: a read-only mapping marked MADV_HUGEPAGE, populated with
  // MADV_POPULATE_READ, then unmapped. 0, or -errno (the bytes may be partly cached then). A
  // first reading of cached 4 KiB folios moves each onto the active list, which held a next
  // start's read to 22 GiB/s against 47 for 2 MiB folios (H200, docs/performance.md, "Restarts:
  // the page cache across starts"); a buffered read fills in 4 KiB folios where readahead is off.
  virtual int fill_cache(int fd, uint64_t off, size_t len);
  // The largest folio fill_cache reads in (a PMD): it maps from this boundary at or before `off`.
  static constexpr uint64_t kFillFolio = 2u << 20;
  // Change notices (inotify): a queue that never blocks; a watch on the file open as `fd` for
  // changes of its bytes (writes, truncation, hole punching), returning the watch's id; and
  // the ids of the files changed since the last call, at most `max` of them (-1 stands for
  // "the queue overflowed: anything may have changed"): how many, 0 if none, or -errno.
  virtual int changes_open();
  virtual int changes_watch(int queue, int fd);
  virtual int changes_take(int queue, int* ids, int max);
  virtual int changes_unwatch(int queue, int id);

  // NUMA placement (src/exec/placement.hpp). Pins the calling thread to `cpus` (sched_setaffinity).
  virtual int set_thread_affinity(const int* cpus, size_t count);
  // The CPUs the calling thread may run on (sched_getaffinity), at most `max` of them into
  // `cpus`, in order: how many, or -errno.
  virtual int thread_affinity(int* cpus, size_t max);
  // Asks that pages of [addr, addr+len) not yet touched come from `node` where it has room
  // (mbind MPOL_PREFERRED): must come before the first touch.
  virtual int prefer_node(void* addr, size_t len, int node);
  // The NUMA node of the page at `addr` (get_mempolicy MPOL_F_NODE | MPOL_F_ADDR), or -errno.
  virtual int node_of_page(const void* addr);

  // POSIX shared memory (shm_open; `name` is "/name"), for the live stats `gpufile stats PID`
  // reads (src/core/stats_export.hpp). shm_create makes a new segment of `size` bytes, zeroed,
  // mapped read-write into `*out` (-EEXIST when one of that name exists); shm_map_read maps an
  // existing one read-only, its size into `*size`; shm_remove unlinks the name. unmap undoes
  // either mapping.
  virtual int shm_create(const char* name, size_t size, void** out);
  virtual int shm_map_read(const char* name, size_t* size, void** out);
  virtual int shm_remove(const char* name);
  // Whether process `pid` exists (kill(pid, 0)): 1, 0, or -errno (EPERM counts as existing).
  virtual int process_exists(int pid);

  // io_uring set-up; the ring itself is driven through liburing by src/io/uring_engine.cpp.
  virtual int uring_init(unsigned entries, io_uring* ring, unsigned flags);
  // Every completion result the uring engine consumes passes through here first.
  virtual int uring_result(IoKind kind, int fd, size_t requested, int res) {
    (void)kind, (void)fd, (void)requested;
    return res;
  }
};

// "/proc/self/fd/N": a path that reopens (or names, for inotify) the file open as fd N, even
// when it was renamed or unlinked since.
struct FdPath {
  char text[32];
};
FdPath fd_path(int fd);
// The name of the file behind `fd`, for log lines (its /proc path when the kernel will not say).
std::string file_name(int fd);
// The text of a small file of /proc or /sys (its first 16 KiB), read through os(); empty when it
// cannot be read.
std::string read_small_file(const std::string& path);

// The Os in force. The real one unless a test installed another.
Os& os();
// Installs `replacement` (nullptr: back to the real one). Tests only; not thread-safe with IO.
void set_os(Os* replacement);

}  // namespace gpufile::sys
