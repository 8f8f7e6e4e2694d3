#include "io/remote/upload.hpp"

#include <algorithm>

#include "io/remote/address.hpp"
#include "io/remote/curl.hpp"

namespace gpufile::remote {

uint64_t upload_part_bytes(const Options& o) { return std::max(o.part_bytes, kMinUploadPart); }

unsigned upload_parts_in_flight(const Options& o) { return std::max(2u, o.concurrency / 4); }

std::string part_limit_exceeded(unsigned number, uint64_t part_bytes) {
  if (number >= 1 && number <= kMaxUploadParts) return {};
  const uint64_t most_gib = kMaxUploadParts * part_bytes >> 30;
  return "S3 takes at most " + std::to_string(kMaxUploadParts) + " parts of an upload, " +
         std::to_string(part_bytes >> 20) + " MiB each here (objects up to " +
         std::to_string(most_gib) + " GiB): raise gpufile.remote_part_kb for larger ones";
}

Failure Upload::prepare(const std::string& url, const Options& options, std::unique_ptr<Upload>* out) {
  std::string why;
  std::optional<Url> parsed = parse_url(url, &why);
  if (!parsed) return fail_at(EINVAL, url, why);
  if (parsed->scheme != Scheme::s3)
    return fail_at(EROFS, url, "http(s):// objects are read-only; only s3:// objects can be written");
  std::unique_ptr<Upload> up(new Upload());
  up->url_ = url;
  up->options_ = options;
  up->options_.timeout_s = std::max(1u, options.timeout_s);
  if (Failure f = Request::make(url, *parsed, &up->request_); !f.ok()) return f;
  *out = std::move(up);
  return {};
}

Upload::~Upload() {
  if (open_) abort();
  for (CURL* e : easies_) curl()->easy_cleanup(e);
}

Failure Upload::put_whole(const char* data, uint64_t len) {
  Reply reply;
  return send("PUT", "", data, len, &reply);
}

Failure Upload::begin() {
  Reply reply;
  // "uploads=" rather than "uploads": libcurl 7.88 signs a bare query name without the '=' that
  // S3's canonical form has.
  if (Failure f = send("POST", "uploads=", "", 0, &reply); !f.ok()) return f;
  std::lock_guard lock(mu_);
  upload_id_ = xml_value(reply.body, "UploadId");
  if (upload_id_.empty()) return fail_at(EIO, url_, "the server started no multipart upload");
  open_ = true;
  return {};
}

Failure Upload::put_part(unsigned number, const char* data, uint64_t len) {
  std::string query;
  {
    std::lock_guard lock(mu_);
    if (!open_) return fail_at(EBADF, url_, "the upload is over");
    if (std::string why = part_limit_exceeded(number, len); !why.empty())
      return fail_at(EFBIG, url_, "part " + std::to_string(number) + ": " + why);
    query = "partNumber=" + std::to_string(number) + "&uploadId=" + encode_key(upload_id_);
  }
  Reply reply;
  if (Failure f = send("PUT", query, data, len, &reply); !f.ok()) return f;
  if (reply.response.etag.empty()) return fail_at(EIO, url_, "the server gave a part no ETag");
  std::lock_guard lock(mu_);
  if (etags_.size() < number) etags_.resize(number);
  etags_[number - 1] = reply.response.etag;
  return {};
}

Failure Upload::complete(unsigned parts) {
  std::string xml = "<CompleteMultipartUpload>";
  {
    std::lock_guard lock(mu_);
    if (!open_) return fail_at(EBADF, url_, "the upload is over");
    if (etags_.size() < parts) return fail_at(EIO, url_, "a part of the upload was not put");
    for (unsigned i = 0; i < parts; ++i)
      xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags_[i] +
             "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  Reply reply;
  if (Failure f = send("POST", "uploadId=" + encode_key(upload_id_), xml.data(), xml.size(), &reply);
      !f.ok())
    return f;
  // S3 may answer 200 and still fail: the error is in the body.
  if (const std::string code = xml_value(reply.body, "Code"); !code.empty())
    return fail_at(EIO, url_, "completing the upload failed: " +
                                  request_->server_text(code + ": " + xml_value(reply.body, "Message")));
  std::lock_guard lock(mu_);
  open_ = false;
  return {};
}

void Upload::abort() {
  {
    std::lock_guard lock(mu_);
    if (!open_) return;
    open_ = false;
  }
  Reply reply;
  send("DELETE", "uploadId=" + encode_key(upload_id_), nullptr, 0, &reply);
}

CURL* Upload::take_easy() {
  std::lock_guard lock(mu_);
  if (!idle_.empty()) {
    CURL* e = idle_.back();
    idle_.pop_back();
    return e;
  }
  CURL* e = curl()->easy_init();
  if (e != nullptr) easies_.push_back(e);
  return e;
}

void Upload::give_easy(CURL* e) {
  std::lock_guard lock(mu_);
  idle_.push_back(e);
}

Failure Upload::send(const char* method, const std::string& query, const char* body, uint64_t len,
                     Reply* reply) {
  CURL* e = take_easy();
  if (e == nullptr) return fail_at(ENOMEM, url_, "curl_easy_init failed");
  Failure f = remote::send(e, *request_, options_, url_, Call{method, query, body, len}, reply);
  give_easy(e);
  return f;
}

}  // namespace gpufile::remote
