#include "io/remote/whole.hpp"

#include <chrono>
#include <memory>
#include <optional>
#include <thread>

#include "io/remote/curl.hpp"

namespace gpufile::remote {
namespace {

// Where one try's body goes: the object's bytes only from a 200 reply (an error page is read
// to its end and dropped, keeping the connection).
struct Body {
  CURL* easy;
  const Response* response;
  std::string* bytes;
  uint64_t max_bytes;
  bool too_big = false;
};

size_t keep_object(char* data, size_t size, size_t n, void* user) {
  Body& b = *static_cast<Body*>(user);
  const size_t bytes = size * n;
  if (b.response->status != 200) return bytes;
  if (b.bytes->empty()) {  // the reply's headers are in: room for all of it at once
    curl_off_t length = -1;
    curl()->easy_getinfo(b.easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    if (length > 0 && static_cast<uint64_t>(length) <= b.max_bytes)
      b.bytes->reserve(static_cast<size_t>(length));
  }
  if (b.bytes->size() + bytes > b.max_bytes) {
    b.too_big = true;
    return 0;  // ends the transfer
  }
  b.bytes->append(data, bytes);
  return bytes;
}

std::string failure_text(const std::string& url, CURL* e, const Request& request, Verdict v,
                         CURLcode rc, long status, unsigned tries) {
  std::string what = shown(url) + ": ";
  if (v != Verdict::retry && v != Verdict::failed) what += std::string(verdict_text(v)) + ": ";
  if (rc != CURLE_OK)
    what += transport_error(e, rc, request.http_url);
  else if (status == 200)
    what += "short body";
  else
    what += "HTTP " + std::to_string(status);
  return what + " (GET, " + std::to_string(tries) + (tries == 1 ? " try)" : " tries)");
}

}  // namespace

Failure get_whole(const std::string& url, const Options& o, uint64_t max_bytes, WholeObject* out) {
  std::string why;
  std::optional<Url> parsed = parse_url(url, &why);
  if (!parsed) return fail_at(EINVAL, url, why);
  std::unique_ptr<Request> request;
  if (Failure f = Request::make(url, *parsed, &request); !f.ok()) return f;
  const Curl& c = *curl();
  std::unique_ptr<CURL, void (*)(CURL*)> e(c.easy_init(), c.easy_cleanup);
  if (!e) return fail_at(ENOMEM, url, "curl_easy_init failed");
  for (unsigned attempt = 0;; ++attempt) {
    Response r;
    out->bytes.clear();
    Body body{e.get(), &r, &out->bytes, max_bytes};
    request->apply(e.get(), o, &r);
    c.easy_setopt(e.get(), CURLOPT_HTTPGET, 1L);
    c.easy_setopt(e.get(), CURLOPT_WRITEFUNCTION, &keep_object);
    c.easy_setopt(e.get(), CURLOPT_WRITEDATA, &body);
    const CURLcode rc = c.easy_perform(e.get());
    if (body.too_big) {
      out->bytes = std::string();
      return fail_at(EFBIG, url, "the object is larger than " + std::to_string(max_bytes) + " bytes");
    }
    curl_off_t length = -1;
    c.easy_getinfo(e.get(), CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &length);
    const bool complete = length < 0 || out->bytes.size() == static_cast<uint64_t>(length);
    // Only 200 is the whole object: this GET asked for no range, so a 206 is not what was asked.
    const Verdict v = r.status == 206 ? Verdict::failed : judge(transport_of(rc), r.status, complete);
    if (v == Verdict::done) {
      out->etag = r.etag;
      return {};
    }
    out->bytes.clear();
    if (v == Verdict::retry && attempt < o.retries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(retry_wait_ms(attempt, o.backoff_ms)));
      continue;
    }
    return {verdict_errno(v), failure_text(url, e.get(), *request, v, rc, r.status, attempt + 1)};
  }
}

}  // namespace gpufile::remote
