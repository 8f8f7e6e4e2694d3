// A remote object (http://, https://, s3://) with the read side of File's surface: synchronous
// reads and Futures, into host or GPU memory. Read-only. docs/remote.md.
//
// Failures carry one sentence (remote::Failure) besides the Error, since "EIO" alone does not
// tell a 503 storm from a truncated body.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "api/file.hpp"
#include "io/remote/bucket.hpp"
#include "io/remote/object.hpp"
#include "io/remote/upload.hpp"
#include "io/remote/whole.hpp"

namespace gpufile::api {

class RemoteFile {
 public:
  // Opens the driver session if needed, then pins the object (size, ETag) with one request.
  static remote::Failure open(const std::string& url, std::unique_ptr<RemoteFile>* out);
  // Waits for Futures still running.
  ~RemoteFile();
  RemoteFile(const RemoteFile&) = delete;
  RemoteFile& operator=(const RemoteFile&) = delete;

  const std::string& url() const { return object_->url(); }
  uint64_t size() const { return object_->size(); }
  const std::string& etag() const { return object_->etag(); }
  bool closed() const { return closed_; }
  // Waits for Futures still running; later IO fails with EBADF.
  void close();

  // Up to `size` bytes from `offset` into `buf` (host or GPU memory); fewer only at the end.
  IoResult read(void* buf, uint64_t size, uint64_t offset, remote::Failure* why);
  // The same on a thread of its own; the Future tells completion (and Future::message why).
  Error start(void* buf, uint64_t size, uint64_t offset, std::unique_ptr<Future>* out);

 private:
  RemoteFile() = default;

  std::shared_ptr<remote::Object> object_;
  std::shared_ptr<std::atomic<int>> running_ = std::make_shared<std::atomic<int>>(0);
  bool closed_ = false;
};

// A new s3:// object, written front to back (S3 multipart upload): it appears, whole, when
// close() succeeds; an abort, a failure or destroying a writer that was not closed leaves the
// bucket as it was.
class RemoteWriter {
 public:
  static remote::Failure open(const std::string& url, std::unique_ptr<RemoteWriter>* out);
  ~RemoteWriter();  // aborts unless closed
  RemoteWriter(const RemoteWriter&) = delete;
  RemoteWriter& operator=(const RemoteWriter&) = delete;

  const std::string& url() const { return upload_->url(); }
  uint64_t written() const { return written_; }
  bool closed() const { return done_; }
  // Appends `size` bytes from `buf` (host or GPU memory); sends each part as it fills. After a
  // failure the upload is aborted and later calls fail.
  IoResult write(const void* buf, uint64_t size, remote::Failure* why);
  // Sends the last part and completes the upload: the object exists from here on.
  remote::Failure close();
  void abort();

 private:
  RemoteWriter() = default;
  remote::Failure flush_part();
  remote::Failure fail(remote::Failure f);

  std::unique_ptr<remote::Upload> upload_;
  char* part_ = nullptr;  // pinned: GPU memory is copied in with the driver's DMA
  uint64_t part_bytes_ = 0, filled_ = 0, written_ = 0;
  bool done_ = false;
};

// One page of an s3:// bucket's keys, and deleting an object (io/remote/bucket.hpp), with the
// session's remote settings (retries, timeouts).
remote::Failure list_objects(const std::string& url, const remote::ListPage& page, std::string* xml);
remote::Failure delete_object(const std::string& url);
// A whole object in one GET, without a HEAD first (io/remote/whole.hpp), into host memory.
remote::Failure get_object(const std::string& url, uint64_t max_bytes, remote::WholeObject* out);

}  // namespace gpufile::api
