#include "io/remote/upload.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "io/remote/address.hpp"
#include "io/remote/curl.hpp"

namespace gpufile::remote {

struct Upload::Reply {
  Response response;
  std::string body;
};

namespace {

size_t keep_body(char* data, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

// What is left of a request body to send.
struct Source {
  const char* data;
  uint64_t left;
};

size_t read_body(char* out, size_t size, size_t n, void* user) {
  Source& s = *static_cast<Source*>(user);
  const size_t take = static_cast<size_t>(std::min<uint64_t>(s.left, size * n));
  std::memcpy(out, s.data, take);
  s.data += take;
  s.left -= take;
  return take;
}

// The text of <Tag>...</Tag> in an S3 reply, or "".
std::string xml_value(const std::string& body, const std::string& tag) {
  const size_t open = body.find("<" + tag + ">");
  if (open == std::string::npos) return {};
  const size_t start = open + tag.size() + 2;
  const size_t close = body.find("</" + tag + ">", start);
  return close == std::string::npos ? std::string() : body.substr(start, close - start);
}

}  // namespace

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
  const Curl& c = *curl();
  const std::string target = request_->http_url + "?" + query;
  for (unsigned attempt = 0;; ++attempt) {
    *reply = Reply();
    Source source{body, len};
    c.easy_reset(easy_);
    request_->apply(easy_, options_, &reply->response);
    c.easy_setopt(easy_, CURLOPT_URL, target.c_str());
    c.easy_setopt(easy_, CURLOPT_WRITEFUNCTION, &keep_body);
    c.easy_setopt(easy_, CURLOPT_WRITEDATA, &reply->body);
    if (std::strcmp(method, "PUT") == 0) {
      c.easy_setopt(easy_, CURLOPT_UPLOAD, 1L);
      c.easy_setopt(easy_, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(len));
      c.easy_setopt(easy_, CURLOPT_READFUNCTION, &read_body);
      c.easy_setopt(easy_, CURLOPT_READDATA, &source);
    } else if (std::strcmp(method, "POST") == 0) {
      c.easy_setopt(easy_, CURLOPT_POST, 1L);
      c.easy_setopt(easy_, CURLOPT_POSTFIELDS, body);
      c.easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(len));
    } else {
      c.easy_setopt(easy_, CURLOPT_CUSTOMREQUEST, method);
    }
    const CURLcode rc = c.easy_perform(easy_);
    long status = reply->response.status;
    const bool ok_status = status >= 200 && status < 300;
    const Verdict v = judge(transport_of(rc), ok_status ? 206 : status, true);
    if (v == Verdict::done) return {};
    if (v == Verdict::retry && attempt < options_.retries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms(attempt, options_.backoff_ms)));
      continue;
    }
    std::string what = url_ + ": ";
    if (v == Verdict::not_found)
      what += "no such bucket: ";
    else if (v != Verdict::retry && v != Verdict::failed)
      what += std::string(verdict_text(v)) + ": ";
    what += rc != CURLE_OK ? std::string(c.easy_strerror(rc)) : "HTTP " + std::to_string(status);
    if (const std::string code = xml_value(reply->body, "Code"); !code.empty()) what += " " + code;
    what += std::string(" (") + method + " ?" + query.substr(0, query.find('&')) + ", " +
            std::to_string(attempt + 1) + (attempt ? " tries)" : " try)");
    return {verdict_errno(v), what};
  }
}

}  // namespace gpufile::remote
