// gpufile's own file API, below the language bindings (Python today, a public C++ header next):
// a File opens and registers a path itself, and IO on it is either synchronous or a Future.
//
// Nothing here knows Python or cuFile; errors are gpufile's Error, results IoResult.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "exec/runtime.hpp"

namespace gpufile::exec {
struct FileRows;
}

namespace gpufile::api {

// open(2) flags for a Python-style mode ("r", "r+", "w", "w+", "x", "x+", "a", "a+"; a "b" is
// ignored), or nullopt for any other text. Never O_APPEND (cuFile refuses appending files): "a"
// creates the file if missing and keeps its contents; writes go where their offset says.
std::optional<int> open_flags(std::string_view mode);

// One IO started by File::start(). The caller's memory is in use until done() is true or wait()
// returned; destroying a Future that is not done waits for it, so memory is never written after
// its owner let go of the Future. A finished IO gives its file back at once (close() does not
// wait for Futures nobody asked about).
class Future {
 public:
  ~Future();
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  bool done() const;
  // Blocks until the IO finished; then the bytes moved (short only at end of file for a read)
  // or the error. May be called again, from any thread: the same result.
  IoResult wait();
  // Waits at most `timeout`; false when the IO is still running.
  bool wait_for(std::chrono::nanoseconds timeout);
  // Once done: the reason of a failure in one sentence, when the IO gave one (remote reads do),
  // else empty.
  std::string message() const;

 private:
  friend class File;
  friend class RemoteFile;
  friend class RemoteWriter;
  struct State;
  Future() = default;
  // A Future whose IO is `task`, run on the remote transfers' pool (exec/remote_pool.hpp); the
  // task returns the result and may set the failure's sentence.
  static std::unique_ptr<Future> spawn(std::function<IoResult(std::string* message)> task);
  // A Future already done, with result `r`.
  static std::unique_ptr<Future> finished(const IoResult& r);
  // A Future that is done when `*finish` is called (once, from any thread, with the result and
  // the failure's sentence); until then it is running.
  using Finish = std::function<void(const IoResult& r, std::string message)>;
  static std::unique_ptr<Future> pending(Finish* finish);
  std::shared_ptr<State> state_;
};

class File {
 public:
  // open(2) `flags` (O_APPEND is refused, as cuFile refuses it) and `mode` for O_CREAT.
  static Error open(const std::string& path, int flags, mode_t mode, std::unique_ptr<File>* out);
  // Closes (waits for IO in flight on this file first).
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // Deregisters and closes the file, after IO in flight on it finished. Later IO fails with
  // handle_not_registered; calling close again does nothing.
  Error close();
  bool closed() const { return fd_ < 0; }
  int fd() const { return fd_; }
  // The cuFile handle (CUfileHandle_t) of this file: cuFileReadAsync and friends accept it.
  void* handle() const { return handle_; }
  const std::string& path() const { return path_; }
  // The file's current size in bytes.
  Error size(uint64_t* out) const;

  // Synchronous IO of `size` bytes between the file at `file_offset` and memory at
  // buf + buf_offset (host or device). `buf` is what a registered buffer is found by (its base),
  // as in cuFile. Reads return fewer bytes only at end of file.
  IoResult read(void* buf, uint64_t size, int64_t file_offset, int64_t buf_offset = 0);
  IoResult write(const void* buf, uint64_t size, int64_t file_offset, int64_t buf_offset = 0);

  // The same, started on the IO workers; the Future tells completion. Validation errors come
  // back here, not from the Future.
  Error start(sys::IoKind kind, const void* buf, uint64_t size, int64_t file_offset,
              std::unique_ptr<Future>* out, int64_t buf_offset = 0);

  // Starts a read of `rows` of the file into memory at `buf` (host or device), packed row after
  // row: rows.bytes() bytes (exec/gather.hpp says when that beats reading the rows' span). It
  // runs on a thread of the pool Futures of remote reads use, not on the IO workers: the rows'
  // kernel reads hold that thread, and the workers stay free for other reads meanwhile.
  // Validation errors come back here, not from the Future.
  Error start_rows(const void* buf, const exec::FileRows& rows, std::unique_ptr<Future>* out);
  // Whether the page cache holds every byte of [offset, offset + length); nullopt where the
  // kernel cannot say (cachestat(2) came with Linux 6.5).
  std::optional<bool> cached(uint64_t offset, uint64_t length) const;

 private:
  File() = default;
  IoResult run(sys::IoKind kind, const void* buf, uint64_t size, int64_t file_offset,
               int64_t buf_offset);

  int fd_ = -1;
  void* handle_ = nullptr;
  std::string path_;
};

}  // namespace gpufile::api
