#include "io/remote/call.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

namespace gpufile::remote {
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

}  // namespace

std::string xml_value(const std::string& body, const std::string& tag) {
  const size_t open = body.find("<" + tag + ">");
  if (open == std::string::npos) return {};
  const size_t start = open + tag.size() + 2;
  const size_t close = body.find("</" + tag + ">", start);
  return close == std::string::npos ? std::string() : body.substr(start, close - start);
}

Failure send(CURL* easy, const Request& request, const Options& options, const std::string& name,
             const Call& call, Reply* reply) {
  const Curl& c = *curl();
  const std::string target = call.query.empty() ? request.http_url : request.http_url + "?" + call.query;
  for (unsigned attempt = 0;; ++attempt) {
    *reply = Reply();
    Source source{call.body, call.len};
    c.easy_reset(easy);
    request.apply(easy, options, &reply->response);
    c.easy_setopt(easy, CURLOPT_URL, target.c_str());
    c.easy_setopt(easy, CURLOPT_WRITEFUNCTION, &keep_body);
    c.easy_setopt(easy, CURLOPT_WRITEDATA, &reply->body);
    if (std::strcmp(call.method, "PUT") == 0) {
      c.easy_setopt(easy, CURLOPT_UPLOAD, 1L);
      c.easy_setopt(easy, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(call.len));
      c.easy_setopt(easy, CURLOPT_READFUNCTION, &read_body);
      c.easy_setopt(easy, CURLOPT_READDATA, &source);
    } else if (std::strcmp(call.method, "POST") == 0) {
      c.easy_setopt(easy, CURLOPT_POST, 1L);
      c.easy_setopt(easy, CURLOPT_POSTFIELDS, call.body);
      c.easy_setopt(easy, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(call.len));
    } else if (std::strcmp(call.method, "GET") != 0) {
      c.easy_setopt(easy, CURLOPT_CUSTOMREQUEST, call.method);
    }
    const CURLcode rc = c.easy_perform(easy);
    long status = reply->response.status;
    const bool ok_status = status >= 200 && status < 300;
    const Verdict v = judge(transport_of(rc), ok_status ? 206 : status, true);
    if (v == Verdict::done) return {};
    if (v == Verdict::retry && attempt < options.retries) {
      std::this_thread::sleep_for(std::chrono::milliseconds(retry_wait_ms(attempt, options.backoff_ms)));
      continue;
    }
    std::string what = shown(name) + ": ";
    if (v == Verdict::not_found)
      what += "no such bucket: ";
    else if (v != Verdict::retry && v != Verdict::failed)
      what += std::string(verdict_text(v)) + ": ";
    what += rc != CURLE_OK ? transport_error(easy, rc, target) : "HTTP " + std::to_string(status);
    if (const std::string code = xml_value(reply->body, "Code"); !code.empty())
      what += " " + request.server_text(code);
    what += std::string(" (") + call.method;
    if (!call.query.empty()) what += " ?" + call.query.substr(0, call.query.find('&'));
    what += ", " + std::to_string(attempt + 1) + (attempt ? " tries)" : " try)");
    return {verdict_errno(v), what};
  }
}

}  // namespace gpufile::remote
