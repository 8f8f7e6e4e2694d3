#include "core/redact.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <cstring>

namespace gpufile {
namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  const char l = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return l >= 'a' && l <= 'f' ? l - 'a' + 10 : -1;
}

// Percent-decoded and lower-cased: "X%2DAmz%2DSignature" is a signature too.
std::string decoded_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '%' && i + 2 < s.size() && hex_digit(s[i + 1]) >= 0 && hex_digit(s[i + 2]) >= 0) {
      c = static_cast<char>(hex_digit(s[i + 1]) * 16 + hex_digit(s[i + 2]));
      i += 2;
    }
    out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return out;
}

size_t find_nocase(std::string_view text, std::string_view lower_needle) {
  for (size_t i = 0; i + lower_needle.size() <= text.size(); ++i) {
    size_t k = 0;
    while (k < lower_needle.size() &&
           std::tolower(static_cast<unsigned char>(text[i + k])) == lower_needle[k])
      ++k;
    if (k == lower_needle.size()) return i;
  }
  return std::string_view::npos;
}

// One "name=value" of a query or fragment. A parameter without '=' is split at an encoded one
// ("%3D"): a server decodes the name before it looks at it, so its tail may be a value.
std::string redact_parameter(std::string_view p) {
  size_t eq = p.find('=');
  size_t eq_len = 1;
  if (eq == std::string_view::npos) {
    eq = find_nocase(p, "%3d");
    eq_len = 3;
  }
  if (eq == std::string_view::npos) return std::string(p);
  const std::string_view name = p.substr(0, eq), value = p.substr(eq + eq_len);
  if (value.empty() || value == kRedacted || !is_secret_parameter(name)) return std::string(p);
  return std::string(p.substr(0, eq + eq_len)).append(kRedacted);
}

// "a=1&b=2": each parameter by itself. '&' and ';' separate parameters, and so does a '?' (a
// second one, or one in a fragment): better a value cut short than one shown. Separators encoded
// (%26) are part of a value.
std::string redact_parameters(std::string_view params) {
  std::string out;
  out.reserve(params.size());
  for (;;) {
    const size_t sep = params.find_first_of("&;?");
    out += redact_parameter(params.substr(0, sep));
    if (sep == std::string_view::npos) return out;
    out.push_back(params[sep]);
    params.remove_prefix(sep + 1);
  }
}

// "user:password" -> "user:REDACTED"; a user name alone (a token, often) -> "REDACTED".
std::string redact_userinfo(std::string_view info) {
  const size_t colon = info.find(':');
  if (colon == std::string_view::npos) return std::string(info.empty() ? info : kRedacted);
  if (colon + 1 == info.size()) return std::string(info);
  return std::string(info.substr(0, colon + 1)).append(kRedacted);
}

// "user:pa/ss" of "http://user:pa/ss@host/": a password with an unencoded '/' (or '?', '#') ends
// the authority early, leaving a "port" that is no number. Such a URL is read with the text up
// to its first '@' as userinfo, not host and path: better too much hidden than a password shown.
bool has_word_port(std::string_view auth) {
  if (auth.empty() || auth.front() == '[') return false;
  const size_t colon = auth.rfind(':');
  if (colon == std::string_view::npos) return false;
  for (char c : auth.substr(colon + 1))
    if (!std::isdigit(static_cast<unsigned char>(c))) return true;
  return false;
}

bool is_scheme_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '+' || c == '-' || c == '.';
}

// Where a URL inside a sentence ends.
bool ends_url(char c) {
  return static_cast<unsigned char>(c) <= ' ' || c == '"' || c == '\'' || c == '<' || c == '>' ||
         c == '`' || c == 0x7f;
}

}  // namespace

bool is_secret_parameter(std::string_view name) {
  const std::string n = decoded_lower(name);
  static constexpr std::array<std::string_view, 3> kExact = {"sig", "pwd", "auth"};
  static constexpr std::array<std::string_view, 7> kParts = {
      "token", "signature", "secret", "key", "credential", "password", "passwd"};
  for (std::string_view e : kExact)
    if (n == e) return true;
  for (std::string_view part : kParts)
    if (n.find(part) != std::string::npos) return true;
  return false;
}

std::string redact_url(std::string_view url) {
  const size_t sep = url.find("://");
  if (sep == std::string_view::npos) return std::string(url);
  std::string out(url.substr(0, sep + 3));
  std::string_view rest = url.substr(sep + 3);
  size_t auth_end = std::min(rest.find_first_of("/?#"), rest.size());
  if (rest.substr(0, auth_end).find('@') == std::string_view::npos && has_word_port(rest.substr(0, auth_end))) {
    if (const size_t at = rest.find('@'); at != std::string_view::npos)
      auth_end = std::min(rest.find_first_of("/?#", at), rest.size());
  }
  std::string_view auth = rest.substr(0, auth_end);
  if (const size_t at = auth.rfind('@'); at != std::string_view::npos) {
    out += redact_userinfo(auth.substr(0, at));
    auth.remove_prefix(at);  // keeps the '@'
  }
  out += auth;
  rest.remove_prefix(auth_end);
  const size_t hash = rest.find('#');
  std::string_view before_hash = rest.substr(0, hash);
  const size_t query = before_hash.find('?');
  out += before_hash.substr(0, query);  // the path, '@' and all
  if (query != std::string_view::npos) out += "?" + redact_parameters(before_hash.substr(query + 1));
  if (hash != std::string_view::npos) out += "#" + redact_parameters(rest.substr(hash + 1));
  return out;
}

std::string redact_text(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  for (size_t sep; (sep = text.find("://", pos)) != std::string_view::npos;) {
    size_t begin = sep;
    while (begin > pos && is_scheme_char(text[begin - 1])) --begin;
    while (begin < sep && !std::isalpha(static_cast<unsigned char>(text[begin]))) ++begin;
    size_t end = sep + 3;
    while (end < text.size() && !ends_url(text[end])) ++end;
    while (end > sep + 3 && std::strchr(".,:;)]", text[end - 1]) != nullptr) --end;
    out += text.substr(pos, begin - pos);
    out += redact_url(text.substr(begin, end - begin));
    pos = end;
  }
  out += text.substr(pos);
  return out;
}

}  // namespace gpufile
