// The GPU and the IO buffers of `gpufile bench`. Without a CUDA driver, host memory stands in
// for device memory so the tool still runs (CI has no GPU).
#pragma once

#include <cufile.h>

#include <cstdint>

#include "cli/bench/options.hpp"
#include "cuda/driver.hpp"

namespace gpufile::cli::benchmark {

struct Gpu {
  const cuda::Driver* drv = nullptr;  // null: no driver, host memory only
  cuda::CUcontext ctx = nullptr;
  cuda::CUdevice dev = 0;

  bool open(int ordinal);
  // CUDA contexts are per thread; every worker must make ours current.
  void bind_thread() const;
  void close();
};

// A CUDA stream of our own. Without a driver there is none: work "queued" on it runs at once.
class Stream {
 public:
  Stream() = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  ~Stream() { destroy(); }

  bool create(const Gpu& gpu);  // non-blocking: it never waits for the legacy NULL stream
  cuda::CUstream get() const { return stream_; }
  CUstream cufile() const { return reinterpret_cast<CUstream>(stream_); }  // as cufile.h types it
  bool sync() const;
  void destroy();

 private:
  const cuda::Driver* drv_ = nullptr;
  cuda::CUstream stream_ = nullptr;
};

// Marks a point in a stream: wait() returns once the work queued before record() finished.
class Event {
 public:
  Event() = default;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event() { destroy(); }

  bool create(const Gpu& gpu);
  bool record(const Stream& s);
  bool wait();  // at once when nothing was recorded since the last wait
  void destroy();

 private:
  const cuda::Driver* drv_ = nullptr;
  cuda::CUevent event_ = nullptr;
  bool pending_ = false;
};

enum class Mem { device, host, pinned };

// The memory of the IO buffers of the cuFile types that use "GPU" buffers (-x 0, 5, 6, 7):
// device memory, or what -m asks for instead.
Mem io_memory(const Options& o);

class Buffer {
 public:
  Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { release(); }

  bool allocate(Mem kind, const Gpu& gpu, uint64_t bytes);
  void* ptr() const;
  uint64_t bytes() const { return bytes_; }
  // Copies between the buffer and host memory, complete on the device when they return.
  bool put(uint64_t at, const void* src, uint64_t n) const;
  bool get(uint64_t at, void* dst, uint64_t n) const;
  // The same, queued on `s`; `src`/`dst` should be pinned so the copy runs asynchronously.
  bool put_async(uint64_t at, const void* src, uint64_t n, const Stream& s) const;
  bool get_async(uint64_t at, void* dst, uint64_t n, const Stream& s) const;
  void release();

 private:
  Mem kind_ = Mem::host;
  const cuda::Driver* drv_ = nullptr;
  cuda::CUdeviceptr dev_ = 0;
  char* host_ = nullptr;
  uint64_t bytes_ = 0;
};

// Without -V, writes carry this instead of zeros (which some devices compress).
bool fill_noise(const Buffer& buf, uint64_t seed);

// cuFileBufRegister unless -b; false with a message on failure.
bool register_buffer(const Buffer& buf, const Options& o);
void deregister_buffer(const Buffer& buf, const Options& o);

}  // namespace gpufile::cli::benchmark
