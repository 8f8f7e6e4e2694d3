// Where a remote object lives: URLs of http://, https:// and s3:// objects, and how an s3://
// object is addressed over HTTP (endpoint, path-style or virtual-hosted, signing region).
// Pure functions of their inputs (no environment, no network): tests/unit/test_remote.cpp.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace gpufile::remote {

enum class Scheme { http, https, s3 };

// scheme://[user@]host[:port][/path][?query], host possibly a bracketed IPv6 literal.
struct Url {
  Scheme scheme = Scheme::http;
  std::string host;    // without brackets
  uint16_t port = 0;   // 0: the scheme's default
  std::string target;  // path and query as given ("/" when empty); for s3://, the key after '/'
};

// True for the URLs remote objects serve ("http://", "https://", "s3://", any case).
bool is_remote(std::string_view text);
// Parses `text`; nullopt with `why` (one sentence) when it is no URL of the three schemes.
std::optional<Url> parse_url(std::string_view text, std::string* why);

// An s3:// URL: bucket and key. The key may hold '/' and must not be empty.
struct S3Object {
  std::string bucket;
  std::string key;
};
std::optional<S3Object> parse_s3(const Url& url, std::string* why);

// The key percent-encoded as S3's canonical URI wants it: unreserved characters and '/' kept.
std::string encode_key(std::string_view key);

// How the HTTP request for an S3 object is made.
struct S3Address {
  std::string url;     // the object's http(s) URL
  std::string region;  // the SigV4 signing region
};
// With an `endpoint` (AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL: MinIO, versitygw, Ceph, ...), the
// object is addressed path-style at that endpoint: ENDPOINT/bucket/key. Without one, AWS's own
// virtual-hosted style, https://bucket.s3.REGION.amazonaws.com/key, or path-style at
// s3.REGION.amazonaws.com for bucket names with dots (TLS wildcards do not cover those).
S3Address s3_address(const S3Object& obj, std::string_view region, std::string_view endpoint);
// The same for requests on the bucket itself (ListObjectsV2): ENDPOINT/bucket path-style, else
// https://bucket.s3.REGION.amazonaws.com/.
S3Address s3_bucket_address(std::string_view bucket, std::string_view region, std::string_view endpoint);

}  // namespace gpufile::remote
