// Credentials out of text: the one place that decides what of a URL may be shown.
//
// A presigned URL (S3, GCS, Azure SAS) is a bearer credential until it expires, and so is a
// password in a URL's userinfo; errors and logs are read by more people than the URL was meant
// for (a serving framework logs every exception). Every place that turns a URL into text passes
// it through redact_url; the sinks (gpufile::Exception, the log, Python's exceptions) pass whole
// messages through redact_text as a second line of defence. Pure functions, table-tested in
// tests/unit/test_redact.cpp; Python reaches the same code (gpufile._gpufile._redact_url).
#pragma once

#include <string>
#include <string_view>

namespace gpufile {

// What stands in for a hidden value.
inline constexpr std::string_view kRedacted = "REDACTED";

// True when a query parameter of this name carries a credential: AWS's X-Amz-Signature,
// X-Amz-Credential, X-Amz-Security-Token, Signature, AWSAccessKeyId; GCS's X-Goog-Signature,
// X-Goog-Credential; Azure SAS's sig; and any name holding token, signature, secret, key,
// credential or password (any case, percent-encoding decoded first).
bool is_secret_parameter(std::string_view name);

// `url` with scheme, host, port, path and the names of query (and fragment) parameters kept,
// the values of secret parameters and a userinfo password (a userinfo of a user name alone,
// often a token, as a whole) replaced by kRedacted. Text without "://" is returned unchanged
// (a local path). Idempotent.
std::string redact_url(std::string_view url);

// `text` with every URL in it ("scheme://" up to white space or a quote) passed through
// redact_url; a trailing '.', ',', ':', ';', ')' or ']' is taken as the sentence's, not the
// URL's.
std::string redact_text(std::string_view text);

}  // namespace gpufile
