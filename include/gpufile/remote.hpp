// gpufile::RemoteFile: an http://, https:// or s3:// object, read into memory of any kind (GPU
// device, managed, pinned or pageable host memory) with many ranged GETs in flight. Read-only.
// S3 credentials, region and endpoint come from where boto3 finds them; docs/remote.md says
// where, and which failure becomes which error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "gpufile/error.hpp"
#include "gpufile/export.hpp"
#include "gpufile/file.hpp"

namespace gpufile {

class GPUFILE_API RemoteFile {
 public:
  RemoteFile() noexcept;  // no object: closed() is true
  // Opens the object: one HEAD request pins its size and ETag (every later read checks the
  // ETag, so a replaced object fails a read instead of mixing versions). Throws an Exception
  // with std::errc::no_such_file_or_directory (no such object or bucket), permission_denied,
  // timed_out, io_error, ... and a message that says what the server did.
  explicit RemoteFile(const std::string& url);
  ~RemoteFile();  // waits for reads in flight
  RemoteFile(RemoteFile&& other) noexcept;
  RemoteFile& operator=(RemoteFile&& other) noexcept;
  RemoteFile(const RemoteFile&) = delete;
  RemoteFile& operator=(const RemoteFile&) = delete;

  // Waits for reads in flight; later reads throw. Does nothing when closed.
  void close();
  bool closed() const noexcept;
  const std::string& url() const noexcept;
  // The object's size and ETag as they were at open.
  std::uint64_t size() const;
  const std::string& etag() const;

  // Reads up to `size` bytes from `offset` into buf + buf_offset; fewer only at the object's end.
  std::size_t read(void* buf, std::size_t size, std::uint64_t offset = 0,
                   std::size_t buf_offset = 0);
  // The same, returning at once; Future::get() gives the bytes or throws the failure.
  Future pread(void* buf, std::size_t size, std::uint64_t offset = 0, std::size_t buf_offset = 0);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufile
