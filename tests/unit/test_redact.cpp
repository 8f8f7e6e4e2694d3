// redact_url / redact_text (src/core/redact.hpp): what of a URL may be shown, table-tested.
#include <gtest/gtest.h>

#include <string>

#include "core/redact.hpp"

namespace gpufile {
namespace {

struct Case {
  const char* in;
  const char* out;
};

class RedactUrl : public ::testing::TestWithParam<Case> {};

TEST_P(RedactUrl, KeepsWhereAndHidesSecrets) {
  EXPECT_EQ(redact_url(GetParam().in), GetParam().out);
  // Idempotent: a message redacted at its source passes the sinks unchanged.
  EXPECT_EQ(redact_url(GetParam().out), GetParam().out);
}

INSTANTIATE_TEST_SUITE_P(
    Table, RedactUrl,
    ::testing::Values(
        // nothing secret: unchanged
        Case{"http://127.0.0.1:8080/b/k", "http://127.0.0.1:8080/b/k"},
        Case{"s3://bucket/dir/key.bin", "s3://bucket/dir/key.bin"},
        Case{"/local/path?sig=abc", "/local/path?sig=abc"},  // no scheme: a path, not a URL
        Case{"https://h/k?partNumber=2&uploadId=u1", "https://h/k?partNumber=2&uploadId=u1"},
        // AWS SigV4 presigned: names and the harmless values stay
        Case{"https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
             "AKIAEXAMPLE%2F20261127%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261127T000000Z"
             "&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Signature=deadbeef",
             "https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
             "REDACTED&X-Amz-Date=20261127T000000Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
             "&X-Amz-Signature=REDACTED"},
        Case{"https://h/k?X-Amz-Security-Token=tok&x=1", "https://h/k?X-Amz-Security-Token=REDACTED&x=1"},
        // AWS SigV2, GCS, Azure SAS
        Case{"https://h/k?AWSAccessKeyId=AKIA&Expires=1&Signature=s%2Bg%3D",
             "https://h/k?AWSAccessKeyId=REDACTED&Expires=1&Signature=REDACTED"},
        Case{"https://storage.googleapis.com/b/o?X-Goog-Credential=c&X-Goog-Signature=s",
             "https://storage.googleapis.com/b/o?X-Goog-Credential=REDACTED&X-Goog-Signature=REDACTED"},
        Case{"https://a.blob.core.windows.net/c/b?sv=2022-11-02&se=2026&sp=r&sig=abc%3D",
             "https://a.blob.core.windows.net/c/b?sv=2022-11-02&se=2026&sp=r&sig=REDACTED"},
        // any case, any name holding token / signature / secret / key
        Case{"http://h/k?X-AMZ-SIGNATURE=a&ACCESS_TOKEN=b&client_secret=c&apiKey=d",
             "http://h/k?X-AMZ-SIGNATURE=REDACTED&ACCESS_TOKEN=REDACTED&client_secret=REDACTED&apiKey=REDACTED"},
        // a name percent-encoded is still that name; an encoded '=' still separates
        Case{"http://h/k?X%2DAmz%2DSignature=a", "http://h/k?X%2DAmz%2DSignature=REDACTED"},
        Case{"http://h/k?token%3Dabc&x=1", "http://h/k?token%3DREDACTED&x=1"},
        // encoded separators belong to the value
        Case{"http://h/k?sig=a%26b%3Dc&n=1", "http://h/k?sig=REDACTED&n=1"},
        // parameters without a value, or an empty one, have nothing to hide
        Case{"http://h/k?uploads&token&sig=", "http://h/k?uploads&token&sig="},
        Case{"http://h/k?&&sig=x&", "http://h/k?&&sig=REDACTED&"},
        // userinfo: the password, or a lone user name (a token, often)
        Case{"http://user:pa55@127.0.0.1:9000/b/k", "http://user:REDACTED@127.0.0.1:9000/b/k"},
        Case{"https://ghp_tok@github.com/x", "https://REDACTED@github.com/x"},
        Case{"http://u:p@ss:w@h/k", "http://u:REDACTED@h/k"},  // '@' inside the password
        Case{"http://user:@h/k", "http://user:@h/k"},
        // a password with an unencoded '/' or '?' (no port is a word)
        Case{"http://user:pa/ss@h:81/k", "http://user:REDACTED@h:81/k"},
        Case{"http://user:pa?ss@h/k?sig=s", "http://user:REDACTED@h/k?sig=REDACTED"},
        // '@' in the path or query is no userinfo
        Case{"http://h/users/a@b.c/k?to=x@y", "http://h/users/a@b.c/k?to=x@y"},
        // IPv6 hosts keep their colons
        Case{"http://[::1]:8080/k?sig=s", "http://[::1]:8080/k?sig=REDACTED"},
        Case{"http://u:p@[fe80::1%25eth0]/k", "http://u:REDACTED@[fe80::1%25eth0]/k"},
        // a query with no path; fragments are parameters too
        Case{"http://h?Signature=s", "http://h?Signature=REDACTED"},
        Case{"https://h/cb#access_token=t&state=1", "https://h/cb#access_token=REDACTED&state=1"},
        Case{"https://h/k?sig=s#frag", "https://h/k?sig=REDACTED#frag"},
        Case{"https://h/k#a?sig=s", "https://h/k#a?sig=REDACTED"},
        // uppercase scheme
        Case{"HTTPS://U:P@H/K?SIG=S", "HTTPS://U:REDACTED@H/K?SIG=REDACTED"}));

TEST(RedactParameter, Names) {
  for (const char* secret : {"X-Amz-Signature", "X-Amz-Credential", "X-Amz-Security-Token", "Signature",
                             "AWSAccessKeyId", "X-Goog-Signature", "X-Goog-Credential", "sig", "SIG",
                             "token", "refresh_token", "secret", "key", "SharedKey", "password"})
    EXPECT_TRUE(is_secret_parameter(secret)) << secret;
  for (const char* plain : {"X-Amz-Algorithm", "X-Amz-Date", "X-Amz-Expires", "X-Amz-SignedHeaders",
                            "partNumber", "uploadId", "versionId", "sv", "se", "sp", "signal", ""})
    EXPECT_FALSE(is_secret_parameter(plain)) << plain;
}

TEST(RedactText, EveryUrlInASentence) {
  EXPECT_EQ(redact_text("http://h/k?sig=abc: no such object or bucket: HTTP 404 (HEAD, 1 try)"),
            "http://h/k?sig=REDACTED: no such object or bucket: HTTP 404 (HEAD, 1 try)");
  EXPECT_EQ(redact_text("redirect to 'https://u:p@o/x?token=t' refused (from http://h/y?sig=s)."),
            "redirect to 'https://u:REDACTED@o/x?token=REDACTED' refused (from http://h/y?sig=REDACTED).");
  EXPECT_EQ(redact_text("a \"s3://b/k\" and <http://h/?key=v>"), "a \"s3://b/k\" and <http://h/?key=REDACTED>");
  EXPECT_EQ(redact_text("no url here: a=b?sig=c"), "no url here: a=b?sig=c");
  EXPECT_EQ(redact_text("x://"), "x://");
  EXPECT_EQ(redact_text(""), "");
  EXPECT_EQ(redact_text("line1 http://h/?sig=a\nline2 http://h/?sig=b"),
            "line1 http://h/?sig=REDACTED\nline2 http://h/?sig=REDACTED");
}

}  // namespace
}  // namespace gpufile
