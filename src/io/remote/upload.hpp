// A write to an s3:// object: one PutObject for an object of at most one part, else an S3
// multipart upload: CreateMultipartUpload, one UploadPart per part (every part but the last at
// least 5 MiB, S3's rule; at most 10,000 parts), CompleteMultipartUpload. The object appears,
// whole, only when put_whole() or complete() succeeds; abort() (or destroying an Upload that
// was begun and not completed) drops the parts, and an object already there stays as it was.
//
// Several parts may be in flight at once, each on a connection of its own, from host memory;
// each is sent with retries as reads are (policy.hpp). This layer knows no CUDA and no
// threads: src/api/remote_file.cpp stages GPU memory and sends the parts from the remote pool.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "io/remote/call.hpp"
#include "io/remote/request.hpp"

namespace gpufile::remote {

// S3's smallest part but the last.
inline constexpr uint64_t kMinUploadPart = 5u << 20;
// S3's most parts in one upload.
inline constexpr unsigned kMaxUploadParts = 10000;

// The part size of uploads with these options: remote_part_kb, at least S3's smallest part.
uint64_t upload_part_bytes(const Options& o);
// Empty when part `number` (1-based) may be sent; else why not, in words that name the setting to
// raise (S3 takes at most kMaxUploadParts parts, of `part_bytes` each here).
std::string part_limit_exceeded(unsigned number, uint64_t part_bytes);
// Parts of one upload in flight at once: a quarter of remote_concurrency, at least 2 (S3 takes
// each part at the speed of one connection, and a writer's parts are whole 5+ MiB buffers).
unsigned upload_parts_in_flight(const Options& o);

class Upload {
 public:
  // Ready to write `url` (s3:// only). Sends nothing yet.
  static Failure prepare(const std::string& url, const Options& options, std::unique_ptr<Upload>* out);
  ~Upload();  // aborts a multipart upload that was begun and not completed
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  const std::string& url() const { return url_; }
  // The whole object in one PutObject, instead of a multipart upload.
  Failure put_whole(const char* data, uint64_t len);
  // Starts the multipart upload (CreateMultipartUpload).
  Failure begin();
  // Sends `len` bytes as part `number` (1 to kMaxUploadParts). Thread-safe: parts of one
  // upload may be in flight together.
  Failure put_part(unsigned number, const char* data, uint64_t len);
  // Ends the upload: the object now holds parts 1..parts, each put successfully, in order.
  Failure complete(unsigned parts);
  // Drops the parts (best effort: a failure here leaves them to the bucket's lifecycle rules).
  // No part may be in flight.
  void abort();

 private:
  Upload() = default;
  // One request on a connection of its own, retried with backoff; `body` is sent when given.
  Failure send(const char* method, const std::string& query, const char* body, uint64_t len,
               Reply* reply);
  CURL* take_easy();
  void give_easy(CURL* e);

  std::string url_;
  Options options_;
  std::unique_ptr<Request> request_;
  std::mutex mu_;
  std::vector<CURL*> easies_;  // every handle made; each keeps its connection between requests
  std::vector<CURL*> idle_;    // those not sending now
  std::string upload_id_;
  std::vector<std::string> etags_;  // by part number - 1: of the parts put
  bool open_ = false;               // begun, neither completed nor aborted
};

}  // namespace gpufile::remote
