#include "io/remote/address.hpp"

#include <cctype>
#include <charconv>

namespace gpufile::remote {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::optional<Scheme> scheme_of(std::string_view name) {
  const std::string n = lower(name);
  if (n == "http") return Scheme::http;
  if (n == "https") return Scheme::https;
  if (n == "s3") return Scheme::s3;
  return std::nullopt;
}

bool fail(std::string* why, std::string text) {
  if (why) *why = std::move(text);
  return false;
}

// host[:port] or [v6]:port into the Url; false with why on a bad port or empty host.
bool parse_authority(std::string_view auth, Url& url, std::string* why) {
  if (const size_t at = auth.rfind('@'); at != std::string_view::npos) auth.remove_prefix(at + 1);
  std::string_view host = auth, port;
  if (!auth.empty() && auth.front() == '[') {
    const size_t close = auth.find(']');
    if (close == std::string_view::npos) return fail(why, "unclosed '[' in the host");
    host = auth.substr(1, close - 1);
    std::string_view rest = auth.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') return fail(why, "text after the IPv6 host");
    if (!rest.empty()) port = rest.substr(1);
  } else if (const size_t colon = auth.rfind(':'); colon != std::string_view::npos) {
    host = auth.substr(0, colon);
    port = auth.substr(colon + 1);
  }
  if (host.empty()) return fail(why, "no host");
  url.host = std::string(host);
  if (port.empty()) return true;
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (ec != std::errc() || end != port.data() + port.size() || value == 0 || value > 65535)
    return fail(why, "bad port: not a number from 1 to 65535");  // not echoed: it may be a password
  url.port = static_cast<uint16_t>(value);
  return true;
}

bool unreserved(unsigned char c) {
  return std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~';
}

}  // namespace

bool is_remote(std::string_view text) {
  const size_t sep = text.find("://");
  return sep != std::string_view::npos && scheme_of(text.substr(0, sep)).has_value();
}

std::optional<Url> parse_url(std::string_view text, std::string* why) {
  const size_t sep = text.find("://");
  std::optional<Scheme> scheme;
  if (sep != std::string_view::npos) scheme = scheme_of(text.substr(0, sep));
  if (!scheme) {
    fail(why, "not an http://, https:// or s3:// URL");
    return std::nullopt;
  }
  Url url;
  url.scheme = *scheme;
  std::string_view rest = text.substr(sep + 3);
  const size_t slash = rest.find_first_of("/?");
  std::string_view auth = rest.substr(0, slash);
  if (*scheme == Scheme::s3) {
    // The "authority" of s3:// is the bucket: no port, no user.
    if (auth.empty()) {
      fail(why, "no bucket");
      return std::nullopt;
    }
    url.host = std::string(auth);
  } else if (!parse_authority(auth, url, why)) {
    return std::nullopt;
  }
  url.target = slash == std::string_view::npos ? "/" : std::string(rest.substr(slash));
  if (url.target.front() == '?') url.target.insert(0, "/");
  return url;
}

std::optional<S3Object> parse_s3(const Url& url, std::string* why) {
  if (url.scheme != Scheme::s3) {
    fail(why, "not an s3:// URL");
    return std::nullopt;
  }
  S3Object obj{url.host, url.target.size() > 1 ? url.target.substr(1) : std::string()};
  if (obj.key.empty()) {
    fail(why, "s3://" + obj.bucket + " names a bucket, not an object: s3://BUCKET/KEY");
    return std::nullopt;
  }
  return obj;
}

std::string encode_key(std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  out.reserve(key.size());
  for (unsigned char c : key) {
    if (unreserved(c) || c == '/') {
      out.push_back(static_cast<char>(c));
      continue;
    }
    out.push_back('%');
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

S3Address s3_address(const S3Object& obj, std::string_view region, std::string_view endpoint) {
  S3Address a;
  a.region = region.empty() ? "us-east-1" : std::string(region);
  const std::string key = encode_key(obj.key);
  if (!endpoint.empty()) {
    std::string base(endpoint);
    while (!base.empty() && base.back() == '/') base.pop_back();
    a.url = base + "/" + obj.bucket + "/" + key;
  } else if (obj.bucket.find('.') != std::string::npos) {
    a.url = "https://s3." + a.region + ".amazonaws.com/" + obj.bucket + "/" + key;
  } else {
    a.url = "https://" + obj.bucket + ".s3." + a.region + ".amazonaws.com/" + key;
  }
  return a;
}

S3Address s3_bucket_address(std::string_view bucket, std::string_view region, std::string_view endpoint) {
  // The object address of an empty key ends in "/"; path-style, the bucket is the path without it.
  S3Address a = s3_address(S3Object{std::string(bucket), std::string()}, region, endpoint);
  const bool virtual_hosted = endpoint.empty() && bucket.find('.') == std::string_view::npos;
  if (!virtual_hosted) a.url.pop_back();
  return a;
}

}  // namespace gpufile::remote
