#include "io/remote/request.hpp"

#include <strings.h>

#include <cctype>
#include <charconv>
#include <cstdlib>
#include <optional>

#include "core/redact.hpp"
#include "io/remote/aws.hpp"

namespace gpufile::remote {
namespace {

bool starts_with_nocase(std::string_view line, std::string_view prefix) {
  if (line.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(line[i])) != prefix[i]) return false;
  return true;
}

std::string_view header_value(std::string_view line, size_t name_len) {
  line.remove_prefix(name_len);
  while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
  while (!line.empty() && (line.back() == '\r' || line.back() == '\n' || line.back() == ' '))
    line.remove_suffix(1);
  return line;
}

bool parse_number(std::string_view s, uint64_t* out) {
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// Content-Range's value, "bytes FIRST-LAST/TOTAL", "bytes FIRST-LAST/*" or "bytes */TOTAL",
// into the reply's range and total; anything else leaves both unset.
void parse_content_range(std::string_view v, Response* r) {
  if (!starts_with_nocase(v, "bytes ")) return;
  v.remove_prefix(6);
  const size_t slash = v.find('/');
  if (slash == std::string_view::npos) return;
  const std::string_view range = v.substr(0, slash), total = v.substr(slash + 1);
  r->has_total = parse_number(total, &r->range_total);
  const size_t dash = range.find('-');
  r->has_range = dash != std::string_view::npos &&
                 parse_number(range.substr(0, dash), &r->range_first) &&
                 parse_number(range.substr(dash + 1), &r->range_last);
}

}  // namespace

void Response::on_header(std::string_view line) {
  if (starts_with_nocase(line, "http/")) {  // a new response (after a redirect or a 100)
    *this = Response();
    const size_t sp = line.find(' ');
    if (sp != std::string_view::npos) std::from_chars(line.data() + sp + 1, line.data() + line.size(), status);
  } else if (starts_with_nocase(line, "etag:")) {
    etag = std::string(header_value(line, 5));
  } else if (starts_with_nocase(line, "content-range:")) {
    parse_content_range(header_value(line, 14), this);
  }
}

namespace {

size_t on_header_line(char* data, size_t size, size_t n, void* user) {
  static_cast<Response*>(user)->on_header(std::string_view(data, size * n));
  return size * n;
}

}  // namespace

Transport transport_of(CURLcode rc) {
  switch (rc) {
    case CURLE_OK:
      return Transport::ok;
    case CURLE_PARTIAL_FILE:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
      return Transport::dropped;
    case CURLE_COULDNT_CONNECT:
      return Transport::refused;
    case CURLE_OPERATION_TIMEDOUT:
      return Transport::timed_out;
    default:
      return Transport::other;
  }
}

size_t discard_body(char*, size_t size, size_t n, void*) { return size * n; }

std::string shown(std::string_view url) { return redact_url(url); }

Failure fail_at(int err, std::string_view url, std::string_view what) {
  return {err, shown(url).append(": ").append(what)};
}

std::string transport_error(CURL* e, CURLcode rc, const std::string& asked) {
  const Curl& c = *curl();
  const char* effective = nullptr;
  c.easy_getinfo(e, CURLINFO_EFFECTIVE_URL, &effective);
  // libcurl refuses a redirect's scheme when it connects to the target, which is then the
  // transfer's effective URL.
  if (rc == CURLE_UNSUPPORTED_PROTOCOL && effective != nullptr && asked != effective)
    return "refused a redirect to " + shown(effective) +
           ": only http:// and https:// targets are followed, and from https:// only https://";
  if (rc == CURLE_TOO_MANY_REDIRECTS) return "more than 5 redirects, the last to " + shown(effective ? effective : "?");
  return c.easy_strerror(rc);
}

const char* verdict_text(Verdict v) {
  switch (v) {
    case Verdict::not_found:
      return "no such object or bucket";
    case Verdict::denied:
      return "access denied (check the credentials)";
    case Verdict::changed:
      return "the object was replaced during the read (its ETag changed)";
    case Verdict::timed_out:
      return "the server sent nothing within the timeout (gpufile.remote_timeout_s)";
    default:
      return "failed";
  }
}

// ---- how requests are made -------------------------------------------------------------------

namespace {

// Certificates to trust besides (or instead of) the system's, as the curl tool and OpenSSL read
// them: a bundle from CURL_CA_BUNDLE, else SSL_CERT_FILE (unless the S3 configuration named one:
// AWS_CA_BUNDLE, the profile's ca_bundle), and a directory from SSL_CERT_DIR.
void trust_from_environment(Request* req) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return v != nullptr && *v != '\0' ? std::string(v) : std::string();
  };
  if (req->ca_bundle.empty()) req->ca_bundle = env("CURL_CA_BUNDLE");
  if (req->ca_bundle.empty()) req->ca_bundle = env("SSL_CERT_FILE");
  req->ca_dir = env("SSL_CERT_DIR");
}

// Where an s3:// request goes and how it is signed, from aws.hpp's sources; `key` empty for the
// bucket itself.
Failure make_s3(const std::string& url, const S3Object& obj, bool bucket, Request* req) {
  const AwsConfig aws = resolve_aws(process_sources());
  const S3Address addr = bucket ? s3_bucket_address(obj.bucket, aws.region, aws.endpoint)
                                : s3_address(obj, aws.region, aws.endpoint);
  req->http_url = addr.url;
  req->ca_bundle = aws.ca_bundle;
  if (aws.has_credentials()) {
    if (!curl()->aws_sigv4)
      return fail_at(ENOTSUP, url, "signed S3 requests need libcurl 7.75 or newer");
    req->sigv4 = "aws:amz:" + addr.region + ":s3";
    req->user = aws.access_key;
    req->password = aws.secret_key;
    // S3 wants the payload's hash signed; reads have none, and uploads send it unsigned.
    req->headers.push_back("x-amz-content-sha256: UNSIGNED-PAYLOAD");
    req->session_token = aws.session_token;
    if (!aws.session_token.empty())
      req->headers.push_back("x-amz-security-token: " + aws.session_token);
  }
  return {};
}

}  // namespace

Failure Request::make(const std::string& url, const Url& parsed, std::unique_ptr<Request>* out) {
  if (curl() == nullptr) return fail_at(ELIBACC, url, why_no_curl());
  auto req = std::make_unique<Request>();
  std::string why;
  if (parsed.scheme == Scheme::s3) {
    std::optional<S3Object> s3 = parse_s3(parsed, &why);
    if (!s3) return fail_at(EINVAL, url, why);
    if (Failure f = make_s3(url, *s3, false, req.get()); !f.ok()) return f;
  } else {
    req->http_url = url;
    req->follow_redirects = true;
  }
  trust_from_environment(req.get());
  req->set_if_match("");
  *out = std::move(req);
  return {};
}

Failure Request::make_bucket(const std::string& url, const Url& parsed, std::unique_ptr<Request>* out) {
  if (curl() == nullptr) return fail_at(ELIBACC, url, why_no_curl());
  if (parsed.scheme != Scheme::s3 || parsed.host.empty())
    return fail_at(EINVAL, url, "not an s3:// URL of a bucket");
  auto req = std::make_unique<Request>();
  if (Failure f = make_s3(url, S3Object{parsed.host, std::string()}, true, req.get()); !f.ok()) return f;
  trust_from_environment(req.get());
  req->set_if_match("");
  *out = std::move(req);
  return {};
}

Request::~Request() {
  if (list != nullptr) curl()->slist_free_all(list);
}

void Request::set_if_match(const std::string& etag) {
  const Curl& c = *curl();
  if (list != nullptr) c.slist_free_all(list);
  list = nullptr;
  for (const std::string& h : headers) list = c.slist_append(list, h.c_str());
  if (!etag.empty()) list = c.slist_append(list, ("If-Match: " + etag).c_str());
}

std::string Request::server_text(std::string_view text) const {
  std::string out = redact_text(text);
  for (const std::string* secret : {&user, &password, &session_token}) {
    if (secret->empty()) continue;
    for (size_t at = out.find(*secret); at != std::string::npos; at = out.find(*secret, at + kRedacted.size()))
      out.replace(at, secret->size(), kRedacted);
  }
  if (out.size() > 200) out.resize(200);
  return out;
}

namespace {

// Requests go to http(s):// only, and redirects too, never from https:// down to http://.
void restrict_protocols(const Curl& c, CURL* e, bool tls) {
  if (c.protocols_str) {
    c.easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    c.easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, tls ? "https" : "http,https");
  } else {
    const long both = CURLPROTO_HTTP | CURLPROTO_HTTPS;
    c.easy_setopt(e, CURLOPT_PROTOCOLS, both);
    c.easy_setopt(e, CURLOPT_REDIR_PROTOCOLS, tls ? static_cast<long>(CURLPROTO_HTTPS) : both);
  }
}

}  // namespace

void Request::apply(CURL* e, const Options& o, Response* r) const {
  const Curl& c = *curl();
  c.easy_setopt(e, CURLOPT_URL, http_url.c_str());
  c.easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  c.easy_setopt(e, CURLOPT_HTTP_VERSION, static_cast<long>(CURL_HTTP_VERSION_2TLS));
  // HTTP/2 (offered over TLS only, CURL_HTTP_VERSION_2TLS): wait to share a connection rather
  // than open more. Plain http:// is HTTP/1.1, one transfer per connection: no waiting there.
  const bool tls = strncasecmp(http_url.c_str(), "https://", 8) == 0;
  c.easy_setopt(e, CURLOPT_PIPEWAIT, tls ? 1L : 0L);
  // Body bytes arrive in pieces of at most this much: fewer receive calls and callbacks per
  // part than libcurl's 16 KiB (512 KiB is the largest every libcurl since 7.53 takes).
  c.easy_setopt(e, CURLOPT_BUFFERSIZE, 512L * 1024);
  c.easy_setopt(e, CURLOPT_CONNECTTIMEOUT, static_cast<long>(o.timeout_s));
  // A stalled server: less than one byte a second for timeout_s seconds ends the transfer.
  c.easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1L);
  c.easy_setopt(e, CURLOPT_LOW_SPEED_TIME, static_cast<long>(o.timeout_s));
  c.easy_setopt(e, CURLOPT_FOLLOWLOCATION, follow_redirects ? 1L : 0L);
  c.easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
  restrict_protocols(c, e, tls);
  // Credentials (a URL's user:password, SigV4) go to the host asked only, never to a redirect's
  // other host; libcurl's default, set so that it stays so.
  c.easy_setopt(e, CURLOPT_UNRESTRICTED_AUTH, 0L);
  c.easy_setopt(e, CURLOPT_HTTPHEADER, list);
  // Verification is libcurl's default; set anyway, and never offered off.
  c.easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 1L);
  c.easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!ca_bundle.empty()) c.easy_setopt(e, CURLOPT_CAINFO, ca_bundle.c_str());
  if (!ca_dir.empty()) c.easy_setopt(e, CURLOPT_CAPATH, ca_dir.c_str());
  if (!sigv4.empty()) {
    c.easy_setopt(e, CURLOPT_AWS_SIGV4, sigv4.c_str());
    c.easy_setopt(e, CURLOPT_USERNAME, user.c_str());
    c.easy_setopt(e, CURLOPT_PASSWORD, password.c_str());
  }
  c.easy_setopt(e, CURLOPT_HEADERFUNCTION, &on_header_line);
  c.easy_setopt(e, CURLOPT_HEADERDATA, r);
}

}  // namespace gpufile::remote
