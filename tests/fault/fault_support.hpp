// Shared pieces of the fault tests: a watchdog that turns a hang into a failure, guarded host
// buffers, and FaultTest, a fixture that runs one driver session over one scratch file with a
// FaultyOs installed (no rules until a test adds some) and a shadow copy of the file's bytes.
//
// Every test runs host-only (GPUFILE_CUDA_LIBRARY=/nonexistent), so it needs no GPU and no CUDA
// driver and behaves the same everywhere. Randomness comes from one seed: FAULT_SEED in the
// environment, else a fixed default; a failing test prints it.
#pragma once

#include "watchdog.hpp"

#include <cufile.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "sys/faulty_os.hpp"

namespace fault {

uint64_t seed();

// tests/support/common/watchdog.hpp, naming the running test and its FAULT_SEED.
class Watchdog : public test_support::Watchdog {
 public:
  explicit Watchdog(std::chrono::seconds limit);
};

// Host memory whose `size` bytes start `misalign` bytes past a page boundary, between guard
// zones. Everything (guards and data) starts as the sentinel byte, so a test can tell which
// bytes the library wrote.
class GuardedBuffer {
 public:
  static constexpr unsigned char kSentinel = 0xa5;
  static constexpr size_t kGuard = 4096;

  GuardedBuffer(size_t size, size_t misalign);
  ~GuardedBuffer();
  GuardedBuffer(const GuardedBuffer&) = delete;
  GuardedBuffer& operator=(const GuardedBuffer&) = delete;

  char* data() { return data_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  void fill_sentinel();
  bool guards_intact() const;

 private:
  char* base_ = nullptr;
  size_t total_ = 0;
  char* data_ = nullptr;
  size_t size_ = 0;
};

void fill_random(char* p, size_t n, uint64_t seed);
// Index of the first byte where a and b differ, or SIZE_MAX.
size_t first_mismatch(const char* a, const char* b, size_t n);
// FNV-1a, 64 bits: the checksum the corruption test compares.
uint64_t checksum(const char* p, size_t n);
// Milliseconds since t0.
int64_t ms_since(std::chrono::steady_clock::time_point t0);

// One driver session, one registered scratch file of `file_size` random bytes.
class FaultTest : public ::testing::Test {
 protected:
  // Settings of the session. Derived fixtures set them in their constructor.
  std::string engine = "posix";   // GPUFILE_ENGINE; "auto" leaves it unset
  std::string direct_io;          // GPUFILE_DIRECT_IO; empty leaves it unset
  uint64_t file_size = (10u << 20) + 77;
  // Runs after the FaultyOs is installed and before cuFileDriverOpen.
  virtual void before_open() {}

  void SetUp() override;
  void TearDown() override;

  ssize_t read(GuardedBuffer& b, uint64_t off, uint64_t len);
  ssize_t write(GuardedBuffer& b, uint64_t off, uint64_t len);
  // Reads [off, off+len) and expects every byte to match the shadow, guards intact.
  void expect_read_exact(GuardedBuffer& b, uint64_t off, uint64_t len);
  // Writes fresh random bytes to [off, off+len), expects success, then the whole file to match.
  void expect_write_exact(GuardedBuffer& b, uint64_t off, uint64_t len);
  // Compares the file on disk (read with plain pread, not through the library) to the shadow.
  void expect_file_matches_shadow();
  // Puts the shadow back on disk from byte `from` on (the file before it is known good), file
  // size included.
  void restore_file(uint64_t from = 0);
  // Deregisters and registers the file again (to let open-time rules act on registration).
  void reregister();
  // Whether the registered file takes O_DIRECT.
  bool direct_capable();
  // A rule that counts the calls of `op` without faulting any (faults.seen(id) reads it).
  size_t count(gpufile::sys::FaultOp op);
  // Pages of [off, off+len) of the file in the page cache (cachestat), and its pages in all;
  // nullopt where the kernel cannot say.
  std::optional<gpufile::sys::Residency> residency(uint64_t off, uint64_t len);
  // Writes the file back and drops its pages (POSIX_FADV_DONTNEED: clean pages go without root);
  // false when the kernel kept some of [off, off+len), or cannot say.
  bool evict(uint64_t off, uint64_t len);

  gpufile::sys::FaultyOs faults{seed()};
  std::optional<gpufile::sys::ScopedOs> installed;
  std::optional<Watchdog> watchdog;
  std::string dir;
  std::string path;
  int fd = -1;
  CUfileHandle_t fh = nullptr;
  bool driver_open = false;
  std::vector<char> shadow;  // what the file holds
  uint64_t rounds = 0;       // counter for fresh random data
};

// The matrix most scenarios run over: both engines, and a size that runs inline on the
// caller's thread (< 64 KiB) or one the executor splits into 4 MiB chunks that run in parallel.
// Offsets are unaligned so requests have a head, a body and a tail.
struct Case {
  const char* engine;
  uint64_t size;
  uint64_t off;
};

void PrintTo(const Case& c, std::ostream* os);
std::string case_name(const ::testing::TestParamInfo<Case>& info);
::testing::internal::ParamGenerator<Case> all_cases();

class FaultIo : public FaultTest, public ::testing::WithParamInterface<Case> {
 protected:
  FaultIo() { engine = GetParam().engine; }
  uint64_t size() const { return GetParam().size; }
  uint64_t off() const { return GetParam().off; }
  bool chunked() const { return size() > 64 * 1024; }
  bool uring() const { return engine == std::string("io_uring"); }
  // A buffer placed like the file offset within its page, so O_DIRECT can take the body.
  GuardedBuffer buffer() const { return GuardedBuffer(size(), off() % 4096); }
};

}  // namespace fault
