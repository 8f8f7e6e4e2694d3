// A Job is one caller request (a cuFileRead, a batch entry, a stream op) on its way through the
// executor: split into chunks, each chunk into at most three kernel IOs (segments).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "core/error.hpp"
#include "cuda/memory.hpp"
#include "sys/os.hpp"

namespace gpufile::exec {

class Executor;
class FileWindows;
class Job;

// The file as the data path sees it.
struct FileRef {
  int fd_buffered = -1;  // always valid
  int fd_direct = -1;    // opened with O_DIRECT, or -1 when the file refuses it
  sys::DioAlign align;
  // Set for files in memory (tmpfs, ramfs): their writes go one at a time (pwrite_in_turn), one
  // turn per file whichever handle writes.
  std::shared_ptr<std::mutex> write_lock;
};

// A file's guess that its reads are cached (route::StorageFacts::looks_cached). Kept with the
// file handle; a guessed read on the caller's thread that finds bytes missing drops it. Each
// flag is written only when it changes, so callers on many threads do not bounce its line.
struct CacheGuess {
  std::atomic<bool> looks_cached{false};
  std::atomic<bool> nowait_refused{false};  // the file system refused RWF_NOWAIT
  static void set(std::atomic<bool>& flag, bool value) {
    if (flag.load(std::memory_order_relaxed) != value) flag.store(value, std::memory_order_relaxed);
  }
};

// One piece of a job: [off, off+len) of the file.
struct Chunk {
  Job* job = nullptr;
  uint64_t off = 0;
  uint64_t len = 0;
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
  // A read of bytes not cached that keeps them in the page cache (gpufile.cache_policy), through
  // a read-only handle: each page-cache segment of 2 MiB or more fills the cache in large
  // folios before it is read (fill_cache_first).
  bool fills_cache = false;
  uint64_t file_size = 0;     // size when the IO was admitted (host reads stop O_DIRECT there)
  // Set when the read was routed to the page cache on the file's guess: the caller's thread
  // reads with RWF_NOWAIT first and corrects the guess (workers read as usual).
  CacheGuess* guess = nullptr;
  // Set for a read of cached bytes into GPU memory when the file has page-cache windows: the
  // caller's thread copies pieces straight out of them (exec/cache_windows.hpp). The bytes that
  // went that way are counted in window_bytes.
  FileWindows* windows = nullptr;
  bool makes_windows = false;  // and it may make the windows it wants (a short read)
  // A long read of bytes read before that makes their windows as it goes: its calling thread
  // makes the missing windows of the pieces not claimed yet, farthest first, while the workers
  // take the pieces from the near end, copying out of each window made by then and staging the
  // rest; the caller then takes pieces too. Later readings copy out of the windows
  // (exec/cache_windows.hpp says why only a calling thread makes them).
  bool makes_windows_ahead = false;
  std::atomic<uint64_t> window_bytes{0};
  // Work the caller queued on the legacy default stream before the call, which the workers'
  // copies wait for (Runtime::run records it), or null.
  cuda::CUevent after = nullptr;
  // A small read into GPU memory: how many such reads a worker packs into one slot with this
  // one (Executor::submit spreads reads submitted together over the idle workers).
  unsigned pack_with = 32;

  // Called once, on the thread that finishes the last chunk, after which the caller's memory
  // is no longer touched. Without a callback, wait() and done() tell completion instead.
  Callback on_complete;

  uint64_t end() const { return file_off + len; }
  // Bytes of [off, off+n) a read finds in the file as admitted (short or none at its end).
  uint64_t in_file(uint64_t off, uint64_t n) const {
    return off >= file_size ? 0 : std::min(n, file_size - off);
  }
  bool staged() const { return mem.needs_staging(); }

  // ---- pieces ----
  // Cuts the job into pieces on a grid of `step` bytes (a 4 KiB multiple, at most a slab)
  // that starts at file_off rounded down to the file's DIO alignment, so that every cut inside
  // the request is aligned and a piece widened to whole blocks still fits in one slab. Called
  // once, before anyone claims a piece.
  void split(uint64_t step);
  uint32_t pieces() const { return pieces_; }
  // Claims the next unclaimed piece, for any thread: the caller's, or a worker that found the
  // job listed or holds another piece of it (either keeps the job alive). Whoever claims a
  // piece reports it with chunk_done. False when every piece is taken.
  bool claim(Chunk* out);
  // The file offset where the unclaimed pieces begin (end() once all are claimed): a hint, as
  // others claim under the reader.
  uint64_t unclaimed_from() const;

  // Accounting, called once per chunk: `got` bytes of [off, off+chunk_len) were moved.
  void chunk_done(uint64_t off, uint64_t chunk_len, uint64_t got, Error err);

  void cancel() { canceled_.store(true, std::memory_order_relaxed); }
  bool canceled() const { return canceled_.load(std::memory_order_relaxed); }

  // Blocks until the job completed.
  void wait() const;
  bool done() const { return done_.load(std::memory_order_acquire) != 0; }
  // Valid once done(): bytes contiguous from file_off (short at EOF), or the first error.
  IoResult result() const;

 private:
  friend class Executor;
  void finish();
  // Takes the index of the next unclaimed piece.
  bool take(uint32_t* index);
  Chunk piece(uint32_t index);

  uint64_t grid_ = 0;
  uint64_t step_ = 0;
  uint32_t pieces_ = 0;
  std::atomic<uint32_t> next_piece_{0};
  std::atomic<uint32_t> pending_{0};
  std::atomic<uint32_t> done_{0};
  std::atomic<bool> canceled_{false};
  std::atomic<uint64_t> eof_at_{UINT64_MAX};
  std::mutex error_mu_;
  Error error_;

  // The executor's list of jobs with pieces to take (Executor::publish). Set by the publishing
  // thread before the job is listed; the links are guarded by the executor's lock.
  Executor* listed_by_ = nullptr;
  bool listed_ = false;
  Job* list_prev_ = nullptr;
  Job* list_next_ = nullptr;
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

// Before the first kernel read of a page-cache segment of a job that fills the cache: brings the
// segment's bytes in as large folios (sys::Os::fill_cache says why), so that the next process
// reading them finds them fast. A hint: when it fails, the read brings the bytes in as usual.
void fill_cache_first(const Job& job, const Segment& seg);

// One synchronous kernel IO for the rest of `seg`: pread, or pwrite (in turn on files in
// memory: pwrite_in_turn). Bytes moved, or -errno.
ssize_t io_now(const Job& job, const Segment& seg);
// tmpfs and ramfs hold the file's inode lock through every write, so threads writing one such
// file at once only queue in the kernel, spinning. Writers of such a file take `turn` instead.
ssize_t pwrite_in_turn(std::mutex& turn, int fd, const void* buf, size_t len, uint64_t off);

// Bytes of [off, off+len) moved without a gap once the plan's segments ran: len, or less when a
// segment came back short (end of file for a read).
uint64_t contiguous_bytes(const ChunkPlan& plan, uint64_t off, uint64_t len);

}  // namespace gpufile::exec
