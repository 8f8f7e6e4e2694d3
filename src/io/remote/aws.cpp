#include "io/remote/aws.hpp"

#include <cstdlib>
#include <fstream>
#include <sstream>

namespace gpufile::remote {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

using Section = std::map<std::string, std::string>;

const Section* find_section(const IniSections& ini, const std::string& name) {
  auto it = ini.find(name);
  return it == ini.end() ? nullptr : &it->second;
}

std::string value_of(const Section* s, const char* key) {
  if (s == nullptr) return {};
  auto it = s->find(key);
  return it == s->end() ? std::string() : it->second;
}

std::string home_file(const AwsSources& src, const char* var, const char* name) {
  if (auto path = src.env(var)) return *path;
  auto home = src.env("HOME");
  return home ? *home + "/.aws/" + name : std::string();
}

IniSections read_ini(const AwsSources& src, const std::string& path) {
  if (path.empty()) return {};
  auto text = src.read_file(path);
  return text ? parse_ini(*text) : IniSections{};
}

}  // namespace

IniSections parse_ini(std::string_view text) {
  IniSections out;
  std::string section;
  bool in_section = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line.empty() || line.front() == '#' || line.front() == ';') continue;
    if (line.front() == '[' && line.back() == ']') {
      section = std::string(trim(line.substr(1, line.size() - 2)));
      in_section = true;
      out[section];
      continue;
    }
    const size_t eq = line.find('=');
    if (!in_section || eq == std::string_view::npos) continue;
    out[section][std::string(trim(line.substr(0, eq)))] = std::string(trim(line.substr(eq + 1)));
  }
  return out;
}

AwsSources process_sources() {
  AwsSources s;
  s.env = [](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  s.read_file = [](const std::string& path) -> std::optional<std::string> {
    std::ifstream in(path);
    if (!in) return std::nullopt;
    std::ostringstream text;
    text << in.rdbuf();
    return text.str();
  };
  return s;
}

AwsConfig resolve_aws(const AwsSources& src) {
  AwsConfig c;
  const std::string profile = src.env("AWS_PROFILE").value_or("default");
  const std::string cred_path = home_file(src, "AWS_SHARED_CREDENTIALS_FILE", "credentials");
  const std::string conf_path = home_file(src, "AWS_CONFIG_FILE", "config");
  const IniSections creds = read_ini(src, cred_path);
  const IniSections conf = read_ini(src, conf_path);
  const Section* cred_section = find_section(creds, profile);
  const Section* conf_section =
      find_section(conf, profile == "default" ? profile : "profile " + profile);

  if (auto id = src.env("AWS_ACCESS_KEY_ID"), secret = src.env("AWS_SECRET_ACCESS_KEY"); id && secret) {
    c.access_key = *id;
    c.secret_key = *secret;
    c.session_token = src.env("AWS_SESSION_TOKEN").value_or("");
    c.credentials_from = "environment";
  } else {
    for (auto [section, path] : {std::pair{cred_section, cred_path}, std::pair{conf_section, conf_path}}) {
      if (value_of(section, "aws_access_key_id").empty()) continue;
      c.access_key = value_of(section, "aws_access_key_id");
      c.secret_key = value_of(section, "aws_secret_access_key");
      c.session_token = value_of(section, "aws_session_token");
      c.credentials_from = path + " [" + profile + "]";
      break;
    }
  }
  c.region = src.env("AWS_REGION").value_or(
      src.env("AWS_DEFAULT_REGION").value_or(value_of(conf_section, "region")));
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = src.env("AWS_ENDPOINT_URL_S3").value_or(
      src.env("AWS_ENDPOINT_URL").value_or(value_of(conf_section, "endpoint_url")));
  c.ca_bundle = src.env("AWS_CA_BUNDLE").value_or(value_of(conf_section, "ca_bundle"));
  return c;
}

}  // namespace gpufile::remote
