// Shared helpers of the cuFile C API integration tests (capi_tests).
//
// The tests run against whatever CUDA driver the library loads: the test double of
// libcuda.so.1 in CI ($GPUFILE_CUDA_LIBRARY), the real driver on a GPU machine, or none at all
// ($GPUFILE_CUDA_LIBRARY pointing nowhere), in which case every test that needs device memory
// or a CUDA stream skips. Only the CUDA driver API is used (through gpufile::cuda::driver(), the
// very table the library uses); functions only the test double has are looked up at run time
// and their tests skip on a real driver.
#pragma once

#include "splitmix64.hpp"
#include "watchdog.hpp"

#include <cufile.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "cuda/driver.hpp"

namespace capi_test {

namespace cu = gpufile::cuda;

// ---- the CUDA driver ------------------------------------------------------------------------

// The driver the library uses, or nullptr when there is none.
const cu::Driver* drv();
bool has_driver();
// Why there is no driver (for skip messages).
std::string no_driver_reason();
// Makes device 0's primary context current on the calling thread (every thread that allocates
// or copies device memory must call this first). No-op without a driver.
void bind_context();
// A symbol of the loaded driver library that gpufile's table does not have (e.g.
// cuMemAllocManaged), or nullptr.
void* driver_symbol(const char* name);
// The test double's knobs (tests/support/include/fakecuda.h); all null on a real driver.
struct FakeControls {
  int (*fail_call)(const char* name, int nth, int result) = nullptr;
  void (*reset_faults)() = nullptr;
  void (*set_async_delay_us)(unsigned us) = nullptr;
  unsigned long long (*call_count)(const char* name) = nullptr;
  size_t (*live_registered_bytes)() = nullptr;  // cuMemHostRegister'ed, not yet unregistered
  // Copies into GPU memory made so far, one by one or batched (0 without the double's counts).
  unsigned long long host_to_device_copies() const {
    return call_count ? call_count("cuMemcpyHtoDAsync_v2") + call_count("cuMemcpyBatchAsync_v2") : 0;
  }
};
FakeControls fake_controls();

// Runs `fn` at scope exit (resets the test double's knobs even when an assertion returns early).
template <typename F>
class AtExit {
 public:
  explicit AtExit(F fn) : fn_(std::move(fn)) {}
  ~AtExit() { fn_(); }
  AtExit(const AtExit&) = delete;
  AtExit& operator=(const AtExit&) = delete;

 private:
  F fn_;
};

#define CAPI_REQUIRE_DRIVER()                                                   \
  do {                                                                          \
    if (!::capi_test::has_driver())                                             \
      GTEST_SKIP() << ::capi_test::no_driver_reason();    \
  } while (0)

// ---- memory of every kind ---------------------------------------------------------------------

enum class Mem { device, pinned, pageable, managed };
const char* mem_name(Mem m);
inline void PrintTo(Mem m, std::ostream* os) { *os << mem_name(m); }
inline const Mem kAllMem[] = {Mem::device, Mem::pinned, Mem::pageable, Mem::managed};

// A buffer of one memory kind. ptr() is what the cuFile API gets (a device address cast to a
// pointer for device and managed memory); upload/download move bytes with the CUDA driver where
// the CPU must not touch the memory.
class Buffer {
 public:
  // nullptr and *why set when this kind cannot be had here (no driver, no managed memory).
  static std::unique_ptr<Buffer> make(Mem kind, size_t bytes, std::string* why);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  Mem kind() const { return kind_; }
  void* ptr() const { return ptr_; }
  char* at(size_t off) const { return static_cast<char*>(ptr_) + off; }
  size_t size() const { return size_; }

  void upload(size_t off, const void* src, size_t n);
  void download(size_t off, void* dst, size_t n) const;
  void fill(size_t off, size_t n, uint8_t byte);
  std::vector<uint8_t> read_back(size_t off, size_t n) const;

 private:
  Buffer() = default;
  Mem kind_ = Mem::pageable;
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

// ---- data ---------------------------------------------------------------------------------

// Deterministic per test; GPUFILE_TEST_SEED overrides. Tests put it in a SCOPED_TRACE so every
// failure names it.
uint64_t test_seed();

class Rng : public test_support::SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  std::vector<uint8_t> bytes(size_t n) {
    std::vector<uint8_t> v(n);
    fill(v.data(), n);
    return v;
  }
};

// "" when equal, else where and how the first difference looks.
std::string first_mismatch(const void* got, const void* want, size_t n);
// "" when every byte is `byte`.
std::string not_filled(const void* got, size_t n, uint8_t byte);

// ---- files -----------------------------------------------------------------------------------

// A fresh directory under /tmp, removed with everything in it.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// Creates (truncates) `path` and fills it with `data`.
void write_file(const std::string& path, const void* data, size_t n);
std::vector<uint8_t> read_file(const std::string& path, uint64_t off, size_t n);
uint64_t file_size(const std::string& path);
// Whether O_DIRECT opens work in `dir`.
bool direct_io_works(const std::string& dir);

// A registered cuFile handle for an open fd; deregisters and closes on destruction.
class Handle {
 public:
  Handle() = default;
  // Opens `path` with `flags` and registers it; ok() tells whether both worked.
  Handle(const std::string& path, int flags);
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept { *this = std::move(o); }
  Handle& operator=(Handle&& o) noexcept;
  void reset();
  bool ok() const { return fh_ != nullptr; }
  CUfileHandle_t get() const { return fh_; }
  int fd() const { return fd_; }
  CUfileError_t status() const { return status_; }
  // Forget the handle without deregistering (after the test deregistered it itself).
  void release_handle() { fh_ = nullptr; }

 private:
  int fd_ = -1;
  CUfileHandle_t fh_ = nullptr;
  CUfileError_t status_{};
};

CUfileError_t register_fd(int fd, CUfileHandle_t* fh);

// ---- the driver session -----------------------------------------------------------------------

// Closes the cuFile driver until its use count is 0 (tests that opened it implicitly leave a
// use behind).
void drain_driver();

struct EngineConfig {
  const char* engine;     // GPUFILE_ENGINE
  const char* direct_io;  // GPUFILE_DIRECT_IO
};
std::string config_name(const EngineConfig& c);

// Sets GPUFILE_ENGINE / GPUFILE_DIRECT_IO and opens the driver (they are read at open); closes
// it and restores the environment on destruction. skip_reason() is non-empty when the engine
// cannot run here (io_uring refused by the kernel).
class DriverSession {
 public:
  explicit DriverSession(const EngineConfig& c);
  DriverSession() : DriverSession(EngineConfig{nullptr, nullptr}) {}
  ~DriverSession();
  bool ok() const { return ok_; }
  const std::string& skip_reason() const { return skip_; }
  const std::string& error() const { return error_; }

 private:
  bool ok_ = false;
  std::string skip_, error_;
  std::string old_engine_, old_direct_;
  bool had_engine_ = false, had_direct_ = false;
};

bool io_uring_available();

// Base fixture: every test starts and ends with the driver closed.
class CapiTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
};

// ---- never hang --------------------------------------------------------------------------------

using test_support::Watchdog;  // tests/support/common/watchdog.hpp

// A host function that holds a CUDA stream until released (or until 30 s pass, so a failing test
// cannot hang the stream for ever). Released on destruction too; the state the host function
// uses is shared, so it may run after the gate object is gone.
class StreamGate {
 public:
  StreamGate();
  ~StreamGate() { release(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  // Enqueues the gate on `stream`; the CUresult of cuLaunchHostFunc.
  cu::CUresult enqueue(cu::CUstream stream);
  void release();
  // Whether the stream reached the gate (within `limit`).
  bool wait_reached(std::chrono::milliseconds limit) const;

  struct State;

 private:
  static void host_fn(void* arg);
  std::shared_ptr<State> state_;
};

// errno as "name (number)" for cuFile codes and OS errors alike.
std::string errno_text(int e);

}  // namespace capi_test
