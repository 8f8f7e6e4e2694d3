// FaultyOs: an Os that injects faults, for tests. It wraps the real Os (every call it does not
// fault goes to the Os:: base implementation) and applies a list of rules:
//
//   which calls   op, optionally only one fd, a path substring, or only O_DIRECT files
//   when          from the nth matching call on, at most `times` times (1: transient,
//                 FaultRule::persistent: every call from then on), each with probability p
//                 (seeded, so a run is reproducible from its seed)
//   what          fail with -errno | move at most k bytes | sleep d µs first | flip a byte read
//
// Rules are checked in the order they were added and all that fire on a call apply together:
// delays add up, the smallest short limit wins, and a failure skips the real call.
//
//   sys::FaultyOs faults(seed);
//   auto id = faults.add({.op = sys::FaultOp::any_read, .nth = 2, .err = EIO});
//   sys::ScopedOs installed(faults);            // sys::os() is `faults` until scope end
//   ... IO ...
//   EXPECT_EQ(faults.fired(id), 1u);
//
// Thread-safe: the data path calls it from every IO worker at once. Uninstall (end the
// ScopedOs) only while no IO is in flight, and keep the FaultyOs alive until then.
#pragma once

#include <cerrno>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "sys/os.hpp"

namespace gpufile::sys {

enum class FaultOp : int {
  open,
  pread,
  pwrite,
  fstat,
  uring_init,
  uring_read,   // io_uring completion results of reads
  uring_write,  // ... and of writes
  cachestat,
  dio_align,
  any_read,     // pread or uring_read: every kernel read, whichever engine issued it
  any_write,    // pwrite or uring_write
  pread_cached, // Os::pread_cached alone; `pread` and `any_read` rules cover it too
  map_file,
  fill_cache,
};

enum class FaultAction : int {
  fail,      // return -err without making the real call
  short_io,  // move at most `limit` bytes (pread/pwrite/uring results only)
  delay,     // sleep `delay_us`, then make the real call
  corrupt,   // flip one byte of what pread read (io_uring results carry no buffer: no effect)
};

struct FaultRule {
  static constexpr uint64_t persistent = UINT64_MAX;  // for `times`

  FaultOp op = FaultOp::any_read;
  // Which calls match; every filter that is set must hold.
  int fd = -1;               // only this fd (-1: any; fd-less ops ignore it)
  std::string path;          // only files whose path contains this (fd ops: the fd's target)
  bool direct_only = false;  // only O_DIRECT: an fd opened with it, or an open asking for it
  // When a matching call fires. Matching calls are numbered from 1.
  uint64_t nth = 1;          // calls before the nth never fire
  uint64_t times = 1;        // fire at most this often: 1 = transient, persistent = always
  double probability = 1.0;  // each eligible call fires with this probability
  // What a firing call does.
  FaultAction action = FaultAction::fail;
  int err = EIO;             // fail: the call returns -err
  uint64_t limit = 0;        // short_io: bytes that move at most (0: none, a read looks like EOF)
  uint32_t delay_us = 0;     // delay
};

class FaultyOs : public Os {
 public:
  explicit FaultyOs(uint64_t seed = 1) : seed_(seed) {}

  // Adds a rule; returns its id for fired()/seen().
  size_t add(FaultRule rule);
  // Removes every rule (counts too): later calls go straight to the real Os.
  void clear();

  uint64_t fired(size_t id) const;  // how often rule `id` fired
  uint64_t seen(size_t id) const;   // how many calls matched it (fired or not)
  uint64_t fired_total() const;
  uint64_t seed() const { return seed_; }
  // One line per injected fault (op, fd, offset, length, action), for failure messages.
  std::string journal() const;

  int open(const char* path, int flags, mode_t mode) override;
  ssize_t pread(int fd, void* buf, size_t len, uint64_t off) override;
  // Faulted by `pread` rules too: to most tests it is one more kernel read.
  ssize_t pread_cached(int fd, void* buf, size_t len, uint64_t off) override;
  ssize_t pwrite(int fd, const void* buf, size_t len, uint64_t off) override;
  int fstat(int fd, struct stat* st) override;
  int dio_align(int fd, DioAlign* out) override;
  int cachestat(int fd, uint64_t off, uint64_t len, Residency* out) override;
  int map_file(int fd, uint64_t off, size_t len, void** out) override;
  int fill_cache(int fd, uint64_t off, size_t len) override;
  int uring_init(unsigned entries, io_uring* ring, unsigned flags) override;
  int uring_result(IoKind kind, int fd, size_t requested, int res) override;

 private:
  // What the rules decided for one call.
  struct Verdict {
    int err = 0;                     // != 0: fail with -err
    uint64_t limit = UINT64_MAX;     // short_io
    uint64_t delay_us = 0;
    bool corrupt = false;
    uint64_t corrupt_at = 0;         // a random number; the byte is corrupt_at % bytes read
  };
  struct Entry {
    FaultRule rule;
    uint64_t seen = 0;
    uint64_t fired = 0;
  };

  // Counts the call against every matching rule and returns the combined verdict; sleeps for
  // the delays (outside the lock). `fd` < 0 with `path` for open; fd-less ops pass neither.
  Verdict decide(FaultOp op, int fd, const char* path, int open_flags, uint64_t off,
                 uint64_t len);
  bool matches(const FaultRule& r, FaultOp op, int fd, const char* path, int open_flags) const;
  ssize_t faulted_read(int fd, void* buf, size_t len, uint64_t off, bool cached_only);
  double uniform(size_t rule, uint64_t call) const;

  const uint64_t seed_;
  mutable std::mutex mu_;
  std::vector<Entry> rules_;
  std::vector<std::string> journal_;
};

// Installs an Os (usually a FaultyOs) for the guard's lifetime, then puts back the one that was
// in force before.
class ScopedOs {
 public:
  explicit ScopedOs(Os& replacement) : previous_(&os()) { set_os(&replacement); }
  ~ScopedOs() { set_os(previous_); }
  ScopedOs(const ScopedOs&) = delete;
  ScopedOs& operator=(const ScopedOs&) = delete;

 private:
  Os* previous_;
};

}  // namespace gpufile::sys
