// gpufile::File: a file opened and registered for IO between storage and memory of any kind
// (GPU device, managed, pinned or pageable host memory); gpufile::Future, one IO running on
// gpufile's IO workers; gpufile::StreamFuture, one IO ordered on a CUDA stream. The shape
// follows KvikIO's FileHandle: read/write block, pread/pwrite return a future,
// read_async/write_async queue the IO on a stream.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "gpufile/error.hpp"
#include "gpufile/export.hpp"

// CUDA's stream type, declared as <cuda.h> and <cuda_runtime.h> do: a CUstream or a
// cudaStream_t is a CUstream_st*, and no CUDA header is needed here.
struct CUstream_st;

namespace gpufile {

// One IO started by File::pread or File::pwrite. Until done() is true or wait()/get() returned,
// the IO may still use its memory; destroying (or assigning over) a Future that is still
// running waits for it, so gpufile never touches memory after its owner let go of the Future.
class GPUFILE_API Future {
 public:
  Future() noexcept;  // holds no IO: valid() is false
  ~Future();
  Future(Future&& other) noexcept;
  Future& operator=(Future&& other) noexcept;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  // Whether this Future holds an IO (false when default-made or moved from).
  bool valid() const noexcept;
  // Whether the IO finished (get() then returns at once).
  bool done() const;
  // Blocks until the IO finished.
  void wait() const;
  // Blocks at most `timeout`; false when the IO is still running.
  bool wait_for(std::chrono::nanoseconds timeout) const;
  // Waits, then returns the bytes moved (fewer than asked only for a read at end of file), or
  // throws the IO's Exception. Unlike std::future, may be called again: the same result.
  std::size_t get() const;

 private:
  friend class File;
  friend class RemoteFile;
  friend class RemoteWriter;
  struct Impl;
  explicit Future(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

// One IO queued on a CUDA stream by File::read_async or File::write_async: it runs when the
// stream reaches it, after the work queued there before it, and work queued after it waits for
// it. The IO's parameters live in the StreamFuture, and the stream reads them when it gets
// there: destroying (or assigning over) a StreamFuture waits until the stream passed its IO.
class GPUFILE_API StreamFuture {
 public:
  StreamFuture() noexcept;  // holds no IO: valid() is false
  ~StreamFuture();
  StreamFuture(StreamFuture&& other) noexcept;
  StreamFuture& operator=(StreamFuture&& other) noexcept;
  StreamFuture(const StreamFuture&) = delete;
  StreamFuture& operator=(const StreamFuture&) = delete;

  bool valid() const noexcept;
  // Whether the stream passed the IO (get() then returns at once).
  bool done() const;
  // Blocks until the stream passed the IO (not the work queued after it).
  void wait() const;
  // Waits, then returns the bytes moved (fewer than asked only for a read at end of file), or
  // throws the IO's Exception. May be called again: the same result.
  std::size_t get() const;

 private:
  friend class File;
  struct Impl;
  explicit StreamFuture(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

// Rows of a file, for File::pread_rows: `counts[k]` rows along outer dimension k (outermost
// first), `strides[k]` file bytes apart; row (i0, i1, ...) is the `run` bytes at
// first + i0 * strides[0] + i1 * strides[1] + ... (no dimension: one row). A rank's part of a
// C-order weight of R rows split along its last dimension: first = the tensor's offset + the
// rank's first column * the element size, run = its columns * the element size, counts {R},
// strides {the row's bytes}.
struct FileRows {
  std::uint64_t first = 0;
  std::uint64_t run = 0;
  std::vector<std::uint64_t> counts;
  std::vector<std::uint64_t> strides;
};

class GPUFILE_API File {
 public:
  File() noexcept;  // no file: closed() is true
  // Opens and registers `path`. `mode` is Python's: "r", "r+", "w", "w+", "x", "x+", "a", "a+"
  // ("a" keeps the contents but never sets O_APPEND: writes go where their offset says).
  // `permissions` are those of a file the open creates.
  explicit File(const std::string& path, std::string_view mode = "r",
                unsigned permissions = 0644);
  // The same with open(2) flags (O_APPEND is refused with errc::invalid_open_flag, as cuFile
  // refuses it). gpufile adds O_CLOEXEC and chooses O_DIRECT per IO itself.
  File(const std::string& path, int flags, unsigned permissions = 0644);
  // Closes the file (after IO in flight on it finished); a failure to close is ignored here:
  // call close() to see it.
  ~File();
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;  // closes the file it held first
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Waits for IO in flight on the file, deregisters it and closes it. Does nothing when closed.
  void close();
  bool closed() const noexcept;
  // Whether the open mode allows reads, writes (false when closed).
  bool readable() const noexcept;
  bool writable() const noexcept;
  // The path it was opened with ("" for a File that never held one).
  const std::string& path() const noexcept;
  // The file descriptor and the cuFile handle (a CUfileHandle_t, for the cuFile C API that
  // libgpufile.so also exports). Both throw when closed.
  int fd() const;
  void* handle() const;
  // The file's size in bytes now.
  std::uint64_t size() const;

  // Moves `size` bytes between the file at `file_offset` and memory at buf + buf_offset, and
  // returns the bytes moved: all of them, except a read that reaches the end of the file. `buf`
  // is the base a RegisteredBuffer is found by; any memory works without registering.
  std::size_t read(void* buf, std::size_t size, std::int64_t file_offset = 0,
                   std::size_t buf_offset = 0);
  std::size_t write(const void* buf, std::size_t size, std::int64_t file_offset = 0,
                    std::size_t buf_offset = 0);

  // The same on gpufile's IO workers: returns at once. Arguments are checked here (a bad one
  // throws now); the IO's own failure comes from Future::get().
  Future pread(void* buf, std::size_t size, std::int64_t file_offset = 0,
               std::size_t buf_offset = 0);
  Future pwrite(const void* buf, std::size_t size, std::int64_t file_offset = 0,
                std::size_t buf_offset = 0);

  // Reads `rows` into memory at `buf` (host or GPU), packed row after row (run x the rows'
  // count bytes), on a thread of gpufile's own: returns at once. Each run is one buffered
  // kernel read, so it is meant for parts whose rows' span the page cache holds: then only the
  // part's bytes are copied and cross to the GPU, where a read of the span would move every
  // byte of it (docs/performance.md, "Parts gathered out of the page cache"). Bad rows (counts
  // and strides of different lengths, an empty run or count, rows past 2^63) throw
  // errc::invalid_argument now; the read's failure comes from Future::get(), whose bytes are
  // fewer than all only where the file ends inside the rows.
  Future pread_rows(void* buf, const FileRows& rows);

  // The same ordered on a CUDA `stream` (a CUstream or cudaStream_t; nullptr is the legacy
  // default stream), as cuFileReadAsync / cuFileWriteAsync do it: the call returns once the IO
  // is queued. GPU memory goes through pinned staging by copies queued on the stream, host
  // memory is read or written in place when the stream gets there; the file IO itself runs on
  // a CUDA host function (docs/compatibility.md: stream ops). Arguments are checked here (a bad
  // one throws now); the IO's own failure comes from StreamFuture::get(). Needs a CUDA driver
  // (errc::driver_not_open without one).
  StreamFuture read_async(void* buf, std::size_t size, std::int64_t file_offset = 0,
                          std::size_t buf_offset = 0, CUstream_st* stream = nullptr);
  StreamFuture write_async(const void* buf, std::size_t size, std::int64_t file_offset = 0,
                           std::size_t buf_offset = 0, CUstream_st* stream = nullptr);

 private:
  struct Impl;
  Future start(bool write, const void* buf, std::size_t size, std::int64_t file_offset,
               std::size_t buf_offset);
  StreamFuture start_on_stream(bool write, const void* buf, std::size_t size,
                               std::int64_t file_offset, std::size_t buf_offset,
                               CUstream_st* stream);
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufile
