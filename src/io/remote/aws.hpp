// S3 credentials, region and endpoint, found where boto3 and the AWS CLI look, in their order:
//   credentials: AWS_ACCESS_KEY_ID + AWS_SECRET_ACCESS_KEY (+ AWS_SESSION_TOKEN); else the
//     profile (AWS_PROFILE, else "default") of the shared credentials file
//     (AWS_SHARED_CREDENTIALS_FILE, else ~/.aws/credentials); else of the config file
//     (AWS_CONFIG_FILE, else ~/.aws/config; its sections are "[profile NAME]" and "[default]");
//     else none: requests go unsigned (public buckets).
//   region: AWS_REGION, AWS_DEFAULT_REGION, the profile's "region" in the config file, us-east-1.
//   endpoint: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, the profile's "endpoint_url"; none: AWS.
//   CA bundle: AWS_CA_BUNDLE, the profile's "ca_bundle"; none: the system's.
// Instance metadata, SSO and credential_process are not consulted (docs/remote.md).
//
// Pure: the environment and the files come in through Sources, so tests give fakes.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace gpufile::remote {

struct AwsConfig {
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string region;
  std::string endpoint;
  std::string ca_bundle;  // certificates to verify the endpoint with; empty: the system's
  std::string credentials_from;  // "environment", "<file> [profile]" or "" (none: unsigned)
  bool has_credentials() const { return !access_key.empty() && !secret_key.empty(); }
};

struct AwsSources {
  // A variable's value; nullopt when unset (an empty value counts as unset).
  std::function<std::optional<std::string>(const char*)> env;
  // A file's text; nullopt when it cannot be read.
  std::function<std::optional<std::string>(const std::string&)> read_file;
};

// The process's own environment and files.
AwsSources process_sources();

AwsConfig resolve_aws(const AwsSources& src);

// An INI text as the AWS files use it: "[section]" lines, "key = value" lines, '#' and ';'
// comment lines. Section and key names are kept as written, values trimmed.
using IniSections = std::map<std::string, std::map<std::string, std::string>>;
IniSections parse_ini(std::string_view text);

}  // namespace gpufile::remote
