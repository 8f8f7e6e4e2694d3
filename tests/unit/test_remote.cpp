// The pure parts of remote objects (src/io/remote): URLs, S3 addressing, where AWS settings come
// from, range planning, the retry policy and what a reply's headers say. The network parts run in tests/python/test_remote*.py.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>

#include "io/remote/address.hpp"
#include "io/remote/aws.hpp"
#include "io/remote/bucket.hpp"
#include "io/remote/policy.hpp"
#include "io/remote/request.hpp"
#include "io/remote/upload.hpp"

namespace gpufile::remote {
namespace {

TEST(RemoteUrl, ParsesHostPortPathAndQuery) {
  std::string why;
  auto u = parse_url("HTTPS://user@example.com:8443/a/b.bin?x=1", &why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->scheme, Scheme::https);
  EXPECT_EQ(u->host, "example.com");
  EXPECT_EQ(u->port, 8443);
  EXPECT_EQ(u->target, "/a/b.bin?x=1");

  u = parse_url("http://[::1]:80", &why);
  ASSERT_TRUE(u) << why;
  EXPECT_EQ(u->host, "::1");
  EXPECT_EQ(u->port, 80);
  EXPECT_EQ(u->target, "/");

  u = parse_url("http://h?q", &why);
  ASSERT_TRUE(u);
  EXPECT_EQ(u->target, "/?q");
}

TEST(RemoteUrl, RefusesWhatIsNoRemoteUrl) {
  std::string why;
  for (const char* bad : {"/local/file", "ftp://h/x", "http://", "http://h:0/x", "http://h:70000/",
                          "http://h:8x/", "http://[::1/x", "s3:///key"}) {
    why.clear();
    EXPECT_FALSE(parse_url(bad, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
  EXPECT_TRUE(is_remote("S3://b/k"));
  EXPECT_TRUE(is_remote("http://h/"));
  EXPECT_FALSE(is_remote("file:///x"));
  EXPECT_FALSE(is_remote("data/http://x"));
}

TEST(RemoteS3, BucketAndKey) {
  std::string why;
  auto u = parse_url("s3://my-bucket/dir/sub/x.safetensors", &why);
  ASSERT_TRUE(u);
  auto o = parse_s3(*u, &why);
  ASSERT_TRUE(o) << why;
  EXPECT_EQ(o->bucket, "my-bucket");
  EXPECT_EQ(o->key, "dir/sub/x.safetensors");

  u = parse_url("s3://my-bucket/", &why);
  ASSERT_TRUE(u);
  EXPECT_FALSE(parse_s3(*u, &why));
  EXPECT_NE(why.find("names a bucket"), std::string::npos);
}

TEST(RemoteS3, KeysArePercentEncodedOnce) {
  EXPECT_EQ(encode_key("a b/c+d~e_f.g-h"), "a%20b/c%2Bd~e_f.g-h");
  EXPECT_EQ(encode_key("\xc3\xa9%"), "%C3%A9%25");
}

TEST(RemoteS3, AddressingStyles) {
  S3Object o{"bkt", "k/x y"};
  S3Address a = s3_address(o, "eu-west-1", "");
  EXPECT_EQ(a.url, "https://bkt.s3.eu-west-1.amazonaws.com/k/x%20y");
  EXPECT_EQ(a.region, "eu-west-1");
  a = s3_address(o, "", "http://127.0.0.1:7070/");  // an endpoint: path-style, default region
  EXPECT_EQ(a.url, "http://127.0.0.1:7070/bkt/k/x%20y");
  EXPECT_EQ(a.region, "us-east-1");
  a = s3_address(S3Object{"with.dots", "k"}, "us-west-2", "");
  EXPECT_EQ(a.url, "https://s3.us-west-2.amazonaws.com/with.dots/k");
}

TEST(RemoteS3, BucketAddressingStyles) {
  EXPECT_EQ(s3_bucket_address("bkt", "eu-west-1", "").url, "https://bkt.s3.eu-west-1.amazonaws.com/");
  EXPECT_EQ(s3_bucket_address("bkt", "", "http://127.0.0.1:7070/").url, "http://127.0.0.1:7070/bkt");
  EXPECT_EQ(s3_bucket_address("with.dots", "us-west-2", "").url,
            "https://s3.us-west-2.amazonaws.com/with.dots");
}

TEST(RemoteS3, ListQueryIsCanonical) {
  // Names in order, values encoded with '/' too: the query as sent is the one signed.
  ListPage first{"arr/c/0 1", "/", ""};
  EXPECT_EQ(list_query(first), "delimiter=%2F&list-type=2&max-keys=1000&prefix=arr%2Fc%2F0%201");
  ListPage next{"", "", "tok/en+=", 10};
  EXPECT_EQ(list_query(next), "continuation-token=tok%2Fen%2B%3D&list-type=2&max-keys=10&prefix=");
}

// ---- AWS settings ----

struct FakeSources {
  std::map<std::string, std::string> env, files;
  AwsSources get() const {
    return {[this](const char* n) -> std::optional<std::string> {
              auto it = env.find(n);
              return it == env.end() ? std::nullopt : std::optional(it->second);
            },
            [this](const std::string& p) -> std::optional<std::string> {
              auto it = files.find(p);
              return it == files.end() ? std::nullopt : std::optional(it->second);
            }};
  }
};

TEST(RemoteAws, EnvironmentFirst) {
  FakeSources f;
  f.env = {{"HOME", "/h"}, {"AWS_ACCESS_KEY_ID", "AK"}, {"AWS_SECRET_ACCESS_KEY", "SK"},
           {"AWS_SESSION_TOKEN", "T"}, {"AWS_DEFAULT_REGION", "eu-north-1"},
           {"AWS_ENDPOINT_URL", "http://e"}};
  f.files["/h/.aws/credentials"] = "[default]\naws_access_key_id=FILE\naws_secret_access_key=FILE\n";
  AwsConfig c = resolve_aws(f.get());
  EXPECT_EQ(c.access_key, "AK");
  EXPECT_EQ(c.secret_key, "SK");
  EXPECT_EQ(c.session_token, "T");
  EXPECT_EQ(c.region, "eu-north-1");
  EXPECT_EQ(c.endpoint, "http://e");
  EXPECT_EQ(c.credentials_from, "environment");

  f.env["AWS_REGION"] = "ap-south-1";          // wins over AWS_DEFAULT_REGION
  f.env["AWS_ENDPOINT_URL_S3"] = "http://s3";  // wins over AWS_ENDPOINT_URL
  c = resolve_aws(f.get());
  EXPECT_EQ(c.region, "ap-south-1");
  EXPECT_EQ(c.endpoint, "http://s3");
}

TEST(RemoteAws, ProfilesOfTheFiles) {
  FakeSources f;
  f.env = {{"HOME", "/h"}, {"AWS_PROFILE", "p"}, {"AWS_ACCESS_KEY_ID", "only-half"}};
  f.files["/h/.aws/credentials"] =
      "# comment\n[default]\naws_access_key_id = D\naws_secret_access_key = DS\n"
      "[p]\n  aws_access_key_id = P  \naws_secret_access_key=PS\naws_session_token = PT\r\n";
  f.files["/h/.aws/config"] =
      "[profile p]\nregion = sa-east-1\nendpoint_url = http://cfg\nca_bundle = /ca.pem\n";
  AwsConfig c = resolve_aws(f.get());
  EXPECT_EQ(c.access_key, "P");
  EXPECT_EQ(c.secret_key, "PS");
  EXPECT_EQ(c.session_token, "PT");
  EXPECT_EQ(c.region, "sa-east-1");
  EXPECT_EQ(c.endpoint, "http://cfg");
  EXPECT_EQ(c.ca_bundle, "/ca.pem");
  EXPECT_EQ(c.credentials_from, "/h/.aws/credentials [p]");
  f.env["AWS_CA_BUNDLE"] = "/env.pem";
  EXPECT_EQ(resolve_aws(f.get()).ca_bundle, "/env.pem");
  f.env.erase("AWS_CA_BUNDLE");

  // The config file's own keys, at a path the variables give, when the credentials file has none.
  f.env = {{"AWS_CONFIG_FILE", "/c"}, {"AWS_SHARED_CREDENTIALS_FILE", "/none"}};
  f.files["/c"] = "[default]\naws_access_key_id = C\naws_secret_access_key = CS\n";
  c = resolve_aws(f.get());
  EXPECT_EQ(c.access_key, "C");
  EXPECT_EQ(c.region, "us-east-1");
  EXPECT_TRUE(c.endpoint.empty());

  f.files.clear();  // nothing anywhere: unsigned
  c = resolve_aws(f.get());
  EXPECT_FALSE(c.has_credentials());
  EXPECT_TRUE(c.credentials_from.empty());
}

TEST(RemoteAws, IniIgnoresJunk) {
  IniSections s = parse_ini("key=before-any-section\n[a]\nno equals sign\n; c\nk = v = w\n[ b ]\n");
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s["a"]["k"], "v = w");
  EXPECT_TRUE(s["b"].empty());
}

// ---- planning and retries ----

TEST(RemotePolicy, PartsCoverTheRangeExactly) {
  auto parts = plan_parts(100, 25, 10);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].offset, 100u);
  EXPECT_EQ(parts[2].offset, 120u);
  EXPECT_EQ(parts[2].length, 5u);
  EXPECT_TRUE(plan_parts(0, 0, 10).empty());
  EXPECT_EQ(plan_parts(0, 10, 10).size(), 1u);
  EXPECT_EQ(plan_parts(7, 3, 0).size(), 3u);  // a part size of 0 is taken as 1
}

TEST(RemotePolicy, Verdicts) {
  EXPECT_EQ(judge(Transport::ok, 206, true), Verdict::done);
  EXPECT_EQ(judge(Transport::ok, 200, true), Verdict::done);
  EXPECT_EQ(judge(Transport::ok, 206, false), Verdict::retry);  // short body
  EXPECT_EQ(judge(Transport::ok, 503, false), Verdict::retry);
  EXPECT_EQ(judge(Transport::ok, 500, false), Verdict::retry);
  EXPECT_EQ(judge(Transport::ok, 429, false), Verdict::retry);
  EXPECT_EQ(judge(Transport::ok, 404, false), Verdict::not_found);
  EXPECT_EQ(judge(Transport::ok, 403, false), Verdict::denied);
  EXPECT_EQ(judge(Transport::ok, 401, false), Verdict::denied);
  EXPECT_EQ(judge(Transport::ok, 412, false), Verdict::changed);
  EXPECT_EQ(judge(Transport::ok, 400, false), Verdict::failed);
  EXPECT_EQ(judge(Transport::ok, 501, false), Verdict::failed);  // not implemented: for good
  EXPECT_EQ(judge(Transport::ok, 505, false), Verdict::failed);
  EXPECT_EQ(judge(Transport::dropped, 206, false), Verdict::retry);
  EXPECT_EQ(judge(Transport::refused, 0, false), Verdict::retry);
  EXPECT_EQ(judge(Transport::timed_out, 206, false), Verdict::timed_out);
  EXPECT_EQ(judge(Transport::other, 0, false), Verdict::failed);
  EXPECT_EQ(verdict_errno(Verdict::not_found), ENOENT);
  EXPECT_EQ(verdict_errno(Verdict::denied), EACCES);
  EXPECT_EQ(verdict_errno(Verdict::changed), ESTALE);
  EXPECT_EQ(verdict_errno(Verdict::timed_out), ETIMEDOUT);
  EXPECT_EQ(verdict_errno(Verdict::retry), EIO);
}

TEST(RemotePolicy, BackoffDoublesUpToItsBound) {
  EXPECT_EQ(backoff_ms(0, 100), 100u);
  EXPECT_EQ(backoff_ms(1, 100), 200u);
  EXPECT_EQ(backoff_ms(3, 100), 800u);
  EXPECT_EQ(backoff_ms(10, 100), 10000u);
  EXPECT_EQ(backoff_ms(200, 100, 5000), 5000u);  // no overflow on many retries
}

TEST(RemoteUpload, TheTenThousandPartLimitNamesTheSettingToRaise) {
  EXPECT_EQ(part_limit_exceeded(1, 8 << 20), "");
  EXPECT_EQ(part_limit_exceeded(10000, 8 << 20), "");
  const std::string why = part_limit_exceeded(10001, 8 << 20);
  EXPECT_NE(why.find("at most 10000 parts"), std::string::npos) << why;
  EXPECT_NE(why.find("8 MiB each"), std::string::npos) << why;
  EXPECT_NE(why.find("up to 78 GiB"), std::string::npos) << why;
  EXPECT_NE(why.find("gpufile.remote_part_kb"), std::string::npos) << why;
  EXPECT_NE(part_limit_exceeded(0, 8 << 20), "");
  EXPECT_EQ(upload_part_bytes(Options{}), 8u << 20);
  Options small;
  small.part_bytes = 64 << 10;
  EXPECT_EQ(upload_part_bytes(small), kMinUploadPart);  // S3's smallest part
  small.concurrency = 8;
  EXPECT_EQ(upload_parts_in_flight(small), 2u);
  small.concurrency = 1;
  EXPECT_EQ(upload_parts_in_flight(small), 2u);
  small.concurrency = 32;
  EXPECT_EQ(upload_parts_in_flight(small), 8u);
}

TEST(RemotePolicy, JitterDrawsEvenlyFromZeroToTheBackoff) {
  EXPECT_EQ(jittered_ms(100, 0), 0u);
  EXPECT_EQ(jittered_ms(100, 100), 100u);
  EXPECT_EQ(jittered_ms(100, 101), 0u);
  EXPECT_EQ(jittered_ms(100, 250), 48u);
  EXPECT_EQ(jittered_ms(0, 12345), 0u);
  EXPECT_EQ(jittered_ms(UINT64_MAX, 7), 7u);
}

TEST(RemotePolicy, RetryWaitsStayWithinTheBackoffAndSpread) {
  for (unsigned retry = 0; retry < 12; ++retry) {
    const uint64_t ceiling = backoff_ms(retry, 100);
    uint64_t low = UINT64_MAX, high = 0;
    for (int i = 0; i < 2000; ++i) {
      const uint64_t wait = retry_wait_ms(retry, 100);
      ASSERT_LE(wait, ceiling);
      low = std::min(low, wait);
      high = std::max(high, wait);
    }
    // 2000 even draws from [0, 100] or more: the chance that all land in one half is 2^-1999.
    EXPECT_LT(low, ceiling / 2);
    EXPECT_GT(high, ceiling / 2);
  }
}

// A reply's Content-Range: the range of a 206, and the object's size, which a 206 gives after
// the slash and an empty object's 416 gives as "bytes */0" (what a server that refuses HEAD
// answers to the first-byte probe).
TEST(RemoteResponse, ContentRangeGivesTheRangeAndTheTotal) {
  Response r;
  r.on_header("HTTP/1.1 206 Partial Content\r\n");
  r.on_header("Content-Range: bytes 0-0/3145851\r\n");
  EXPECT_EQ(r.status, 206);
  EXPECT_TRUE(r.has_range && r.has_total);
  EXPECT_EQ(r.range_first, 0u);
  EXPECT_EQ(r.range_last, 0u);
  EXPECT_EQ(r.range_total, 3145851u);

  Response empty;
  empty.on_header("HTTP/1.1 416 Range Not Satisfiable\r\n");
  empty.on_header("content-range: bytes */0\r\n");
  EXPECT_FALSE(empty.has_range);
  EXPECT_TRUE(empty.has_total);
  EXPECT_EQ(empty.range_total, 0u);

  Response unknown;
  unknown.on_header("Content-Range: bytes 10-19/*\r\n");
  EXPECT_TRUE(unknown.has_range);
  EXPECT_FALSE(unknown.has_total);

  for (const char* junk : {"Content-Range: bytes 5-/9\r\n", "Content-Range: items 0-1/2\r\n",
                           "Content-Range: bytes 0-1\r\n", "Content-Range: bytes -1/2\r\n"}) {
    Response bad;
    bad.on_header(junk);
    EXPECT_FALSE(bad.has_range) << junk;
  }
  Response bad_total;
  bad_total.on_header("Content-Range: bytes 0-1/x\r\n");
  EXPECT_FALSE(bad_total.has_total);
}

}  // namespace
}  // namespace gpufile::remote
