#include "io/remote/upload.hpp"

#include <algorithm>

#include "io/remote/address.hpp"
#include "io/remote/curl.hpp"

namespace gpufile::remote {

Failure Upload::begin(const std::string& url, const Options& options, std::unique_ptr<Upload>* out) {
  std::string why;
  std::optional<Url> parsed = parse_url(url, &why);
  if (!parsed) return {EINVAL, url + ": " + why};
  if (parsed->scheme != Scheme::s3)
    return {EROFS, url + ": http(s):// objects are read-only; only s3:// objects can be written"};
  std::unique_ptr<Upload> up(new Upload());
  up->url_ = url;
  up->options_ = options;
  up->options_.timeout_s = std::max(1u, options.timeout_s);
  if (Failure f = Request::make(url, *parsed, &up->request_); !f.ok()) return f;
  up->easy_ = curl()->easy_init();
  if (up->easy_ == nullptr) return {ENOMEM, url + ": curl_easy_init failed"};
  Reply reply;
  // "uploads=" rather than "uploads": libcurl 7.88 signs a bare query name without the '=' that
  // S3's canonical form has.
  if (Failure f = up->send("POST", "uploads=", "", 0, &reply); !f.ok()) return f;
  up->upload_id_ = xml_value(reply.body, "UploadId");
  if (up->upload_id_.empty()) return {EIO, url + ": the server started no multipart upload"};
  up->open_ = true;
  *out = std::move(up);
  return {};
}

Upload::~Upload() {
  if (open_) abort();
  if (easy_ != nullptr) curl()->easy_cleanup(easy_);
}

Failure Upload::put_part(const char* data, uint64_t len) {
  if (!open_) return {EBADF, url_ + ": the upload is over"};
  Reply reply;
  const std::string query = "partNumber=" + std::to_string(etags_.size() + 1) +
                            "&uploadId=" + encode_key(upload_id_);
  if (Failure f = send("PUT", query, data, len, &reply); !f.ok()) return f;
  if (reply.response.etag.empty()) return {EIO, url_ + ": the server gave a part no ETag"};
  etags_.push_back(reply.response.etag);
  return {};
}

Failure Upload::complete() {
  if (!open_) return {EBADF, url_ + ": the upload is over"};
  std::string xml = "<CompleteMultipartUpload>";
  for (size_t i = 0; i < etags_.size(); ++i)
    xml += "<Part><PartNumber>" + std::to_string(i + 1) + "</PartNumber><ETag>" + etags_[i] +
           "</ETag></Part>";
  xml += "</CompleteMultipartUpload>";
  Reply reply;
  if (Failure f = send("POST", "uploadId=" + encode_key(upload_id_), xml.data(), xml.size(), &reply);
      !f.ok())
    return f;
  // S3 may answer 200 and still fail: the error is in the body.
  if (const std::string code = xml_value(reply.body, "Code"); !code.empty())
    return {EIO, url_ + ": completing the upload failed: " + code + ": " + xml_value(reply.body, "Message")};
  open_ = false;
  return {};
}

void Upload::abort() {
  if (!open_) return;
  open_ = false;
  Reply reply;
  send("DELETE", "uploadId=" + encode_key(upload_id_), nullptr, 0, &reply);
}

Failure Upload::send(const char* method, const std::string& query, const char* body, uint64_t len,
                     Reply* reply) {
  return remote::send(easy_, *request_, options_, url_, Call{method, query, body, len}, reply);
}

}  // namespace gpufile::remote
