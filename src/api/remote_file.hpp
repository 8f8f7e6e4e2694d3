// A remote object (http://, https://, s3://) with the read side of File's surface: synchronous
// reads and Futures, into host or GPU memory. Read-only. docs/remote.md.
//
// Failures carry one sentence (remote::Failure) besides the Error, since "EIO" alone does not
// tell a 503 storm from a truncated body.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <cstdint>
#include <memory>
#include <string>

#include "api/file.hpp"
#include "cuda/memory.hpp"
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

// A new s3:// object, written front to back: one PutObject when it ends within one part, else
// an S3 multipart upload with several parts in flight. It appears, whole, when close()
// succeeds; an abort, a failure or destroying a writer that was not closed leaves the bucket as
// it was.
//
// Writes are appended in the order they are made, whether synchronous (write) or started
// (start: a Future, run on the remote pool); write, close and abort first wait for the writes
// started before them. start_close() queues the close behind the started writes the same way.
// One thread at a time may call a writer's functions.
class RemoteWriter {
 public:
  // Sends nothing yet: a missing bucket or refused credentials fail the first request (the
  // first part's, else close()'s).
  static remote::Failure open(const std::string& url, std::unique_ptr<RemoteWriter>* out);
  ~RemoteWriter();  // aborts unless closed
  RemoteWriter(const RemoteWriter&) = delete;
  RemoteWriter& operator=(const RemoteWriter&) = delete;

  const std::string& url() const { return upload_->url(); }
  // Bytes appended so far (by started writes too, once they are done).
  uint64_t written() const;
  // True once a close was started (start_close), or the upload ended: closed, aborted, failed.
  bool closed() const;
  // Whether abort() ended the upload (not a close, not a failure).
  bool aborted() const { return aborted_; }
  // Appends `size` bytes from `buf` (host or GPU memory), copied before it returns; a full part
  // goes out on the remote pool once more bytes follow it. After a failure (this part's or an
  // earlier one's) the upload is aborted and later calls fail.
  IoResult write(const void* buf, uint64_t size, remote::Failure* why);
  // The same on the remote pool, after the writes started before it. The Future is done once
  // the bytes are copied out of `buf` (not when they reached the server: close() says that).
  // EBADF here for a writer closed, aborted or failed already.
  Error start(const void* buf, uint64_t size, std::unique_ptr<Future>* out);
  // Sends the rest and ends the upload: the object exists from here on. After a failure it
  // returns that failure again; after abort(), EBADF.
  remote::Failure close();
  // close() on the remote pool, after the writes started before it; the Future gives the
  // object's size (written()) or close()'s failure, with its sentence. From here on closed() is
  // true and write/start fail with EBADF at once. Another start_close, or close(), waits for it
  // and gives the same result. Never fails itself.
  void start_close(std::unique_ptr<Future>* out);
  // Fails the started writes that did not begin (ECANCELED), waits for the one running and the
  // parts in flight, then drops the upload. After start_close it cancels nothing: it waits for
  // the close (and the writes queued before it) and leaves the object it made.
  void abort();

 private:
  struct Parts;  // the part buffers and the parts in flight
  struct Started {  // a write of start(), or start_close()'s close, that has not begun
    const void* buf;
    uint64_t size;
    Future::Finish finish;
    bool close = false;
  };
  RemoteWriter() = default;
  remote::Failure send_filled(bool then_next);
  remote::Failure copy_in(const cuda::MemInfo& mem, const char* from, uint64_t n);
  IoResult write_now(const void* buf, uint64_t size, remote::Failure* why);
  IoResult append(const void* buf, uint64_t size, remote::Failure* why);
  remote::Failure fail(remote::Failure f);
  remote::Failure close_now();  // close() once the started writes before it ran
  void queue(Started work);     // appends to started_, posting the drain when none runs
  void drain();             // runs the started writes, in order, on a pool thread
  void cancel_started();    // fails the started writes that did not begin
  void drain_cancelled();   // the pool ended before drain() ran
  void wait_for_started();  // until no started write is left

  std::unique_ptr<remote::Upload> upload_;
  std::shared_ptr<Parts> parts_;  // shared with the parts in flight
  uint64_t part_bytes_ = 0;
  std::atomic<uint64_t> written_{0};
  unsigned sent_ = 0;  // parts sent so far: numbers 1..sent_
  std::atomic<bool> done_{false};
  std::atomic<bool> closing_{false};  // start_close was called: nothing more is appended
  bool aborted_ = false;  // by abort(), before a close or a failure ended the upload
  remote::Failure failure_;  // what ended the upload, when a failure did (for close())

  mutable std::mutex started_mu_;
  std::condition_variable drained_;
  std::deque<Started> started_;  // started_mu_
  bool draining_ = false;        // started_mu_: a pool task runs (or will run) started_
};

// One page of an s3:// bucket's keys, and deleting an object (io/remote/bucket.hpp), with the
// session's remote settings (retries, timeouts).
remote::Failure list_objects(const std::string& url, const remote::ListPage& page, std::string* xml);
remote::Failure delete_object(const std::string& url);
// A whole object in one GET, without a HEAD first (io/remote/whole.hpp), into host memory.
remote::Failure get_object(const std::string& url, uint64_t max_bytes, remote::WholeObject* out);

}  // namespace gpufile::api
