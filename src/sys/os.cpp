#include "sys/os.hpp"

#include <fcntl.h>
#include <sched.h>
#include <liburing.h>
#include <sys/inotify.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>

namespace gpufile::sys {
namespace {

int neg_errno_or(int r) { return r < 0 ? -errno : r; }

// Retries a call interrupted by a signal; EINTR never reaches callers.
template <typename F>
auto restart_on_eintr(F&& f) {
  for (;;) {
    auto r = f();
    if (r >= 0 || errno != EINTR) return r;
  }
}

Os real_os;
std::atomic<Os*> current{&real_os};

}  // namespace

int Os::open(const char* path, int flags, mode_t mode) {
  return neg_errno_or(restart_on_eintr([&] { return ::open(path, flags | O_CLOEXEC, mode); }));
}

int Os::close(int fd) { return neg_errno_or(::close(fd)); }

ssize_t Os::pread(int fd, void* buf, size_t len, uint64_t off) {
  ssize_t r = restart_on_eintr([&] { return ::pread(fd, buf, len, static_cast<off_t>(off)); });
  return r < 0 ? -errno : r;
}

ssize_t Os::pread_cached(int fd, void* buf, size_t len, uint64_t off) {
  iovec v{buf, len};
  ssize_t r = restart_on_eintr(
      [&] { return ::preadv2(fd, &v, 1, static_cast<off_t>(off), RWF_NOWAIT); });
  return r < 0 ? -errno : r;
}

ssize_t Os::pwrite(int fd, const void* buf, size_t len, uint64_t off) {
  ssize_t r = restart_on_eintr([&] { return ::pwrite(fd, buf, len, static_cast<off_t>(off)); });
  return r < 0 ? -errno : r;
}

int Os::fstat(int fd, struct stat* st) { return neg_errno_or(::fstat(fd, st)); }

int Os::get_flags(int fd) { return neg_errno_or(::fcntl(fd, F_GETFL)); }

int Os::dio_align(int fd, DioAlign* out) {
#ifdef STATX_DIOALIGN
  struct statx stx {};
  if (::statx(fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) != 0) return -errno;
  if (!(stx.stx_mask & STATX_DIOALIGN) || stx.stx_dio_offset_align == 0) return -EOPNOTSUPP;
  out->mem = stx.stx_dio_mem_align;
  out->offset = stx.stx_dio_offset_align;
  return 0;
#else
  (void)fd, (void)out;
  return -EOPNOTSUPP;  // headers too old to ask
#endif
}

int Os::map_file(int fd, uint64_t off, size_t len, void** out) {
  void* p = ::mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(off));
  if (p == MAP_FAILED) return -errno;
  *out = p;
  return 0;
}

int Os::unmap(void* addr, size_t len) { return neg_errno_or(::munmap(addr, len)); }

int Os::fill_cache(int fd, uint64_t off, size_t len) {
#ifdef MADV_POPULATE_READ
  // From the folio boundary at or before `off`: a fault there reads in that whole folio.
  if (len == 0) return 0;
  const uint64_t start = off & ~(kFillFolio - 1);
  const size_t span = static_cast<size_t>(off + len - start);
  void* p = ::mmap(nullptr, span, PROT_READ, MAP_SHARED, fd, static_cast<off_t>(start));
  if (p == MAP_FAILED) return -errno;
  // Without THP in the kernel the advice fails and the fill goes on in the usual folios.
  ::madvise(p, span, MADV_HUGEPAGE);
  const int r = restart_on_eintr([&] { return ::madvise(p, span, MADV_POPULATE_READ); }) == 0 ? 0 : -errno;
  ::munmap(p, span);
  return r;
#else
  (void)fd, (void)off, (void)len;
  return -EOPNOTSUPP;  // headers before Linux 5.14
#endif
}

int Os::shm_create(const char* name, size_t size, void** out) {
  // Owner-only: the counters say which files a process reads; a reader runs as the same user.
  const int fd = ::shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) return -errno;
  int r = restart_on_eintr([&] { return ::ftruncate(fd, static_cast<off_t>(size)); }) == 0 ? 0 : -errno;
  void* p = MAP_FAILED;
  if (r == 0) {
    p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) r = -errno;
  }
  ::close(fd);
  if (r != 0) {
    ::shm_unlink(name);
    return r;
  }
  *out = p;
  return 0;
}

int Os::shm_map_read(const char* name, size_t* size, void** out) {
  const int fd = ::shm_open(name, O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return -errno;
  struct stat st {};
  int r = ::fstat(fd, &st) == 0 ? 0 : -errno;
  void* p = MAP_FAILED;
  if (r == 0 && st.st_size > 0) {
    p = ::mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) r = -errno;
  } else if (r == 0) {
    r = -ENODATA;  // created, not yet sized
  }
  ::close(fd);
  if (r != 0) return r;
  *size = static_cast<size_t>(st.st_size);
  *out = p;
  return 0;
}

int Os::shm_remove(const char* name) { return neg_errno_or(::shm_unlink(name)); }

int Os::process_exists(int pid) {
  if (::kill(pid, 0) == 0) return 1;
  if (errno == ESRCH) return 0;
  return errno == EPERM ? 1 : -errno;
}

FdPath fd_path(int fd) {
  FdPath p;
  std::snprintf(p.text, sizeof p.text, "/proc/self/fd/%d", fd);
  return p;
}

std::string file_name(int fd) {
  const FdPath link = fd_path(fd);
  char target[4096];
  const ssize_t n = ::readlink(link.text, target, sizeof target);
  if (n <= 0 || static_cast<size_t>(n) == sizeof target) return link.text;
  return std::string(target, static_cast<size_t>(n));
}

std::string read_small_file(const std::string& path) {
  const int fd = os().open(path.c_str(), O_RDONLY, 0);
  if (fd < 0) return {};
  char buf[16384];
  const ssize_t n = os().pread(fd, buf, sizeof buf, 0);
  os().close(fd);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : std::string();
}

int Os::changes_open() { return neg_errno_or(::inotify_init1(IN_NONBLOCK | IN_CLOEXEC)); }

int Os::changes_watch(int queue, int fd) {
  return neg_errno_or(::inotify_add_watch(queue, fd_path(fd).text, IN_MODIFY));
}

int Os::changes_unwatch(int queue, int id) { return neg_errno_or(::inotify_rm_watch(queue, id)); }

int Os::changes_take(int queue, int* ids, int max) {
  alignas(inotify_event) char buf[4096];
  int n = 0;
  while (n < max) {
    const ssize_t got = restart_on_eintr([&] { return ::read(queue, buf, sizeof buf); });
    if (got < 0) return errno == EAGAIN ? n : -errno;
    for (ssize_t at = 0; at < got && n < max;) {
      const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
      ids[n++] = (e->mask & IN_Q_OVERFLOW) ? -1 : e->wd;
      at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
    }
  }
  return n;
}

int Os::cachestat(int fd, uint64_t off, uint64_t len, Residency* out) {
#ifndef __NR_cachestat
  constexpr long kNrCachestat = 451;  // same number on every architecture
#else
  constexpr long kNrCachestat = __NR_cachestat;
#endif
  struct Range { uint64_t off, len; } range{off, len};
  struct Result {
    uint64_t cache, dirty, writeback, evicted, recently_evicted;
  } result{};
  if (::syscall(kNrCachestat, fd, &range, &result, 0) != 0) return -errno;
  out->cached_pages = result.cache;
  const uint64_t page = 4096;
  out->total_pages = (len + page - 1) / page;
  return 0;
}

int Os::set_thread_affinity(const int* cpus, size_t count) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (size_t i = 0; i < count; ++i)
    if (cpus[i] >= 0 && cpus[i] < CPU_SETSIZE) CPU_SET(cpus[i], &set);
  if (CPU_COUNT(&set) == 0) return -EINVAL;
  return neg_errno_or(::sched_setaffinity(0, sizeof set, &set));
}

int Os::thread_affinity(int* cpus, size_t max) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) != 0) return -errno;
  int n = 0;
  for (int c = 0; c < CPU_SETSIZE && static_cast<size_t>(n) < max; ++c)
    if (CPU_ISSET(c, &set)) cpus[n++] = c;
  return n;
}

// The memory-policy calls by number: glibc has no wrappers (libnuma's numaif.h does), and the
// values below are the kernel's uapi ones.
namespace {
constexpr int kMpolPreferred = 1;
constexpr unsigned long kMpolFNode = 1, kMpolFAddr = 2;
constexpr int kMaxNodes = 1024;
}  // namespace

int Os::prefer_node(void* addr, size_t len, int node) {
  if (node < 0 || node >= kMaxNodes) return -EINVAL;
  unsigned long mask[kMaxNodes / (8 * sizeof(unsigned long))] = {};
  mask[node / (8 * sizeof(unsigned long))] |= 1UL << (node % (8 * sizeof(unsigned long)));
  return neg_errno_or(static_cast<int>(
      ::syscall(SYS_mbind, addr, len, kMpolPreferred, mask, kMaxNodes + 1UL, 0U)));
}

int Os::node_of_page(const void* addr) {
  int node = -1;
  if (::syscall(SYS_get_mempolicy, &node, nullptr, 0UL, addr, kMpolFNode | kMpolFAddr) != 0)
    return -errno;
  return node;
}

int Os::uring_init(unsigned entries, io_uring* ring, unsigned flags) {
  return io_uring_queue_init(entries, ring, flags);
}

Os& os() { return *current.load(std::memory_order_acquire); }

void set_os(Os* replacement) {
  current.store(replacement ? replacement : &real_os, std::memory_order_release);
}

}  // namespace gpufile::sys
