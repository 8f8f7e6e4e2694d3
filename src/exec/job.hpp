// A Job is one caller request (a cuFileRead, a batch entry, a stream op) on its way through the
// executor: split into chunks, each chunk into at most three kernel IOs (segments).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "core/error.hpp"
#include "cuda/memory.hpp"
#include "sys/os.hpp"

namespace gpufile::exec {

// The file as the data path sees it.
struct FileRef {
  int fd_buffered = -1;  // always valid
  int fd_direct = -1;    // opened with O_DIRECT, or -1 when the file refuses it
  sys::DioAlign align;
  // Set for files in memory (tmpfs, ramfs): workers write them one at a time (Worker::issue).
  std::shared_ptr<std::mutex> write_lock;
};

class Job {
 public:
  using Callback = std::function<void(Job&)>;

  sys::IoKind kind = sys::IoKind::read;
  FileRef file;
  uint64_t addr = 0;          // caller memory for file_off (host pointer or device address)
  cuda::MemInfo mem;
  uint64_t file_off = 0;
  uint64_t len = 0;
  bool direct = false;        // aligned body through O_DIRECT
  uint64_t file_size = 0;     // size when the IO was admitted (host reads stop O_DIRECT there)
  // Work the caller queued on the legacy default stream before the call, which the job's
  // copies wait for (Runtime::run records it), or null.
  cuda::CUevent after = nullptr;

  // Called once, on the thread that finishes the last chunk, after which the caller's memory
  // is no longer touched. Without a callback, wait() and done() tell completion instead.
  Callback on_complete;

  uint64_t end() const { return file_off + len; }
  bool staged() const { return mem.needs_staging(); }

  // Accounting, called once per chunk: `got` bytes of [off, off+chunk_len) were moved.
  void chunk_done(uint64_t off, uint64_t chunk_len, uint64_t got, Error err);
  void set_chunks(uint32_t n) { pending_.store(n, std::memory_order_relaxed); }

  void cancel() { canceled_.store(true, std::memory_order_relaxed); }
  bool canceled() const { return canceled_.load(std::memory_order_relaxed); }

  // Blocks until the job completed.
  void wait() const;
  bool done() const { return done_.load(std::memory_order_acquire) != 0; }
  // Valid once done(): bytes contiguous from file_off (short at EOF), or the first error.
  IoResult result() const;

 private:
  void finish();

  std::atomic<uint32_t> pending_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<bool> canceled_{false};
  std::atomic<uint64_t> eof_at_{UINT64_MAX};
  std::mutex error_mu_;
  Error error_;
};

// A piece of a chunk that is one kernel IO: a file range and the memory it moves to or from.
struct Segment {
  int fd = -1;
  bool direct = false;
  uint64_t file_off = 0;
  uint64_t len = 0;
  char* mem = nullptr;
  uint64_t done = 0;
  int retries = 0;
};

// The IO plan of one chunk. For a staged chunk, `staging` is the pinned slab and slab byte 0
// holds file offset `base`; for a host chunk, segments point into the caller's memory.
struct ChunkPlan {
  Segment seg[4];  // at most head, body, tail (or head, body, rest past the last whole block)
  int count = 0;
  uint64_t base = 0;
};

// Plans chunk [off, off+len) of `job`. For a staged job, `staging` must hold the chunk widened
// to whole blocks: align_up(off + len) - align_down(off) bytes.
ChunkPlan plan_chunk(const Job& job, uint64_t off, uint64_t len, char* staging);

// What to do with a segment after one kernel result.
enum class SegmentNext {
  again,     // issue the (rest of the) segment again
  finished,  // complete, or short at end of file
  failed,    // `*err` says why
};

// Applies one kernel result (bytes or -errno) to `seg`: records progress, retries EAGAIN and
// EINTR a bounded number of times, continues short transfers, and moves an O_DIRECT segment
// to the page cache when the kernel refuses it or its remainder is unaligned.
SegmentNext apply_result(const Job& job, Segment& seg, int res, Error* err);

// Bytes of [off, off+len) moved without a gap once the plan's segments ran: len, or less when a
// segment came back short (end of file for a read).
uint64_t contiguous_bytes(const ChunkPlan& plan, uint64_t off, uint64_t len);

}  // namespace gpufile::exec
