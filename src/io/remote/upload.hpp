// A write to an s3:// object, as S3 multipart upload: CreateMultipartUpload, one UploadPart per
// part (every part but the last at least 5 MiB, S3's rule), CompleteMultipartUpload. The object
// appears, whole, only when complete() succeeds; abort() (or destroying an Upload that was not
// completed) drops the parts, and an object already there stays as it was.
//
// The caller hands over parts in order, from host memory; each is sent with retries as reads
// are (policy.hpp). This layer knows no CUDA: src/api/remote_file.cpp stages GPU memory.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/remote/call.hpp"
#include "io/remote/request.hpp"

namespace gpufile::remote {

// S3's smallest part but the last.
inline constexpr uint64_t kMinUploadPart = 5u << 20;

class Upload {
 public:
  // Starts the upload of `url` (s3:// only).
  static Failure begin(const std::string& url, const Options& options, std::unique_ptr<Upload>* out);
  ~Upload();  // aborts an upload that was not completed
  Upload(const Upload&) = delete;
  Upload& operator=(const Upload&) = delete;

  const std::string& url() const { return url_; }
  // Sends `len` bytes as the next part.
  Failure put_part(const char* data, uint64_t len);
  // Ends the upload: the object now holds the parts put, in order (an empty object if none).
  Failure complete();
  // Drops the parts (best effort: a failure here leaves them to the bucket's lifecycle rules).
  void abort();

 private:
  Upload() = default;
  // One request, retried with backoff; `body` is sent when given (PUT or POST).
  Failure send(const char* method, const std::string& query, const char* body, uint64_t len,
               Reply* reply);

  std::string url_;
  Options options_;
  std::unique_ptr<Request> request_;
  CURL* easy_ = nullptr;  // one handle: its connection is reused for every part
  std::string upload_id_;
  std::vector<std::string> etags_;  // of the parts put, in order
  bool open_ = false;               // begun, neither completed nor aborted
};

}  // namespace gpufile::remote
