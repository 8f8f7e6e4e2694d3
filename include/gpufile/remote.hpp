// gpufile::RemoteFile: an http://, https:// or s3:// object, read into memory of any kind (GPU
// device, managed, pinned or pageable host memory) with many ranged GETs in flight.
// gpufile::RemoteWriter: a new s3:// object, written front to back from memory of any kind.
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
  // ETag, so a replaced object fails a read instead of mixing versions). A server refusing HEAD
  // with 403, 405 or 501, as a URL presigned for GET does, is asked for the first byte instead.
  // Throws an Exception with std::errc::no_such_file_or_directory (no such object or bucket),
  // permission_denied, timed_out, io_error, ... and a message that says what the server did.
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

// A new s3:// object, written front to back: one PutObject when it ends within one part
// (max(gpufile.remote_part_kb, 5 MiB)), else an S3 multipart upload with several parts in
// flight. The object appears, whole, when close() returns (or close_async()'s Future is done);
// until then an object already at the URL keeps its old bytes. abort(), a failure, or
// destroying a writer that was not closed drop the upload: nothing is left in the bucket.
class GPUFILE_API RemoteWriter {
 public:
  RemoteWriter() noexcept;  // no object: closed() is true
  // Ready to write `url` (s3:// only). Sends nothing yet: a missing bucket or refused
  // credentials fail the first request (the first part's write, else close()).
  explicit RemoteWriter(const std::string& url);
  // Aborts unless closed (after the writes in flight ended); with a close_async in flight it
  // waits for that close instead (the object is made, or its Future says why not).
  ~RemoteWriter();
  RemoteWriter(RemoteWriter&& other) noexcept;
  // Ends the upload it held first as the destructor does.
  RemoteWriter& operator=(RemoteWriter&& other) noexcept;
  RemoteWriter(const RemoteWriter&) = delete;
  RemoteWriter& operator=(const RemoteWriter&) = delete;

  // Appends `size` bytes from `buf` (GPU device, managed, pinned or pageable memory). They are
  // copied before it returns (into pinned part buffers); full parts go out while more follow.
  // A failure throws, aborts the upload and fails every later call.
  void write(const void* buf, std::size_t size);
  // The same, returning at once: the write runs on gpufile's remote threads, after the writes
  // made before it (writes are appended in the order they are made). Future::get() gives
  // `size` once the bytes are copied out of `buf` (the buffer is never read after that), or
  // throws the failure. write(), close() and abort() wait for the writes in flight first.
  Future write_async(const void* buf, std::size_t size);
  // Sends the rest and ends the upload: the object exists from here on. Throws what failed the
  // upload, now or earlier (a failed write_async included); after abort(),
  // std::errc::bad_file_descriptor. Does nothing when closed already. With a close_async in
  // flight it waits for it and throws what it failed with (or returns: the object exists).
  void close();
  // close(), returning at once: it runs on gpufile's remote threads after the writes made before
  // it, as write_async does. Future::get() gives the object's size in bytes (tell() at the end)
  // once the object exists, or throws what close() throws: what failed the upload, now or
  // earlier; std::errc::bad_file_descriptor after abort(). From this call on closed() is true
  // and write()/write_async() throw std::errc::bad_file_descriptor at once: nothing is appended
  // behind the close. A second close_async() (or one after close()) gives the same result as
  // the first. A writer that holds no object (default-made or moved from) throws
  // std::errc::bad_file_descriptor, as write_async() does.
  Future close_async();
  // Drops what was written: write_async calls that did not start fail with
  // std::errc::operation_canceled; the one running and the parts in flight are waited for.
  // After close_async() it cancels nothing: it waits for the close (and the writes made before
  // it) and leaves the object that close made.
  void abort();
  // True once closed, aborted or failed, or from close_async() on: later writes throw.
  bool closed() const noexcept;
  const std::string& url() const noexcept;
  // Bytes appended so far (write_async's once their Future is done).
  std::uint64_t tell() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace gpufile
