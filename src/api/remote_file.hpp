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
#include "io/remote/object.hpp"

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

}  // namespace gpufile::api
