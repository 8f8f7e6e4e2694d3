#include "io/remote/bucket.hpp"

#include <memory>
#include <optional>

#include "io/remote/address.hpp"
#include "io/remote/call.hpp"
#include "io/remote/curl.hpp"

namespace gpufile::remote {
namespace {

// A query value as SigV4's canonical query wants it: unreserved characters kept, all else
// (the '/' of prefixes included) percent-encoded.
std::string encode_value(const std::string& v) {
  std::string out;
  for (size_t at = 0; at <= v.size();) {
    const size_t slash = v.find('/', at);
    const size_t end = slash == std::string::npos ? v.size() : slash;
    out += encode_key(std::string_view(v).substr(at, end - at));
    if (slash == std::string::npos) break;
    out += "%2F";
    at = slash + 1;
  }
  return out;
}

// One request on its own handle: these are rare next to the reads of objects' bytes.
Failure call_once(const std::string& url, bool bucket, const Options& options, const Call& call,
                  Reply* reply) {
  std::string why;
  std::optional<Url> parsed = parse_url(url, &why);
  if (!parsed) return fail_at(EINVAL, url, why);
  if (parsed->scheme != Scheme::s3) return fail_at(EINVAL, url, "not an s3:// URL");
  std::unique_ptr<Request> request;
  Failure f = bucket ? Request::make_bucket(url, *parsed, &request) : Request::make(url, *parsed, &request);
  if (!f.ok()) return f;
  CURL* easy = curl()->easy_init();
  if (easy == nullptr) return fail_at(ENOMEM, url, "curl_easy_init failed");
  f = send(easy, *request, options, url, call, reply);
  curl()->easy_cleanup(easy);
  return f;
}

}  // namespace

std::string list_query(const ListPage& page) {
  // In the order of the names: continuation-token, delimiter, list-type, max-keys, prefix.
  std::string q;
  if (!page.continuation.empty()) q += "continuation-token=" + encode_value(page.continuation) + "&";
  if (!page.delimiter.empty()) q += "delimiter=" + encode_value(page.delimiter) + "&";
  q += "list-type=2&max-keys=" + std::to_string(page.max_keys);
  q += "&prefix=" + encode_value(page.prefix);
  return q;
}

Failure list_objects(const std::string& url, const ListPage& page, const Options& options, std::string* xml) {
  Reply reply;
  Call call;
  call.query = list_query(page);
  if (Failure f = call_once(url, true, options, call, &reply); !f.ok()) return f;
  *xml = std::move(reply.body);
  return {};
}

Failure delete_object(const std::string& url, const Options& options) {
  Reply reply;
  Call call;
  call.method = "DELETE";
  return call_once(url, false, options, call, &reply);
}

}  // namespace gpufile::remote
