// How requests to one remote object are made (URL, SigV4 signing, headers, timeouts) and what a
// reply's headers said. Shared by reads (object.hpp) and S3 uploads (upload.hpp).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "io/remote/address.hpp"
#include "io/remote/curl.hpp"
#include "io/remote/policy.hpp"

namespace gpufile::remote {

struct Options {
  uint64_t part_bytes = 8u << 20;  // one ranged GET (or uploaded part)
  unsigned concurrency = 16;       // ranged GETs in flight for one read
  unsigned per_thread = 1;         // of those, driven by one thread (exec/remote.cpp's lanes)
  unsigned retries = 5;            // further tries of a request before failing
  uint64_t backoff_ms = 100;       // wait before the first retry, doubled for each next one
  unsigned timeout_s = 30;         // connect, and no byte received for this long: ETIMEDOUT
};

// A failure: an errno (ENOENT, EACCES, ESTALE, ETIMEDOUT, EIO, ELIBACC, EINVAL, ...) and one
// sentence that names the object and what happened.
struct Failure {
  int err = 0;
  std::string message;
  bool ok() const { return err == 0; }
};

// The failure "<url>: <what>", the URL shown as core/redact.hpp allows (no signatures, tokens or
// passwords): every message about an object begins so.
Failure fail_at(int err, std::string_view url, std::string_view what);
// The URL as messages show it (core/redact.hpp's redact_url).
std::string shown(std::string_view url);

// What one reply said, gathered by the header callback (Request::apply installs it).
struct Response {
  long status = 0;
  std::string etag;
  bool has_range = false;  // Content-Range: bytes FIRST-LAST/...
  uint64_t range_first = 0, range_last = 0;
  bool has_total = false;  // Content-Range: .../TOTAL (a 206's, or a 416's "bytes */TOTAL")
  uint64_t range_total = 0;

  void on_header(std::string_view line);
};

Transport transport_of(CURLcode rc);
// A final verdict in words ("no such object or bucket", ...).
const char* verdict_text(Verdict v);
// What a failed transfer on `e` says: libcurl's words, or, for a redirect refused (to a scheme
// other than http(s), or from https:// to http://), that and its target, redacted.
std::string transport_error(CURL* e, CURLcode rc, const std::string& asked);
// A body callback that keeps nothing.
size_t discard_body(char*, size_t size, size_t n, void*);

struct Request {
  std::string http_url;
  bool follow_redirects = false;
  std::string sigv4;  // "aws:amz:REGION:s3"; empty: unsigned
  std::string user, password, session_token;  // the SigV4 credentials, when signed
  std::string ca_bundle;             // CURLOPT_CAINFO; empty: libcurl's default (the system's)
  std::string ca_dir;                // CURLOPT_CAPATH ($SSL_CERT_DIR); empty: libcurl's default
  std::vector<std::string> headers;  // besides If-Match
  curl_slist* list = nullptr;        // headers (+ If-Match)

  // The request for `url` (parsed already): s3:// through aws.hpp's sources (signed when
  // credentials are found), http(s):// as it is. Loads libcurl.
  static Failure make(const std::string& url, const Url& parsed, std::unique_ptr<Request>* out);
  // The request for the bucket of an s3:// URL itself (its key, if any, is ignored).
  static Failure make_bucket(const std::string& url, const Url& parsed, std::unique_ptr<Request>* out);
  ~Request();
  // Every later request carries If-Match: `etag` (none when empty).
  void set_if_match(const std::string& etag);
  // The options every request shares; `r` collects the reply's headers.
  void apply(CURL* e, const Options& o, Response* r) const;
  // Text from a reply's body (an S3 error's Code or Message) fit for a message: at most 200
  // characters, this request's credentials and URLs' secrets hidden (a server may echo them).
  std::string server_text(std::string_view text) const;
};

}  // namespace gpufile::remote
