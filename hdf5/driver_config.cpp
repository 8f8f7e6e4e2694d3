#include "driver_config.hpp"

#include <cctype>
#include <cstdint>
#include <optional>

#include "core/config.hpp"

namespace gpufile::hdf5 {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// "4194304", "4096K", "4M", "4MiB", "1g": bytes. Binary units, as HDF5 and gdsio use them.
std::optional<uint64_t> parse_bytes(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits])))
    ++digits;
  if (digits == 0 || digits > 15) return std::nullopt;  // 15 digits cannot overflow below
  uint64_t n = std::stoull(std::string(text.substr(0, digits)));
  const std::string unit = lower(text.substr(digits));
  if (unit.empty() || unit == "b") return n;
  if (unit == "k" || unit == "kb" || unit == "kib") return n << 10;
  if (unit == "m" || unit == "mb" || unit == "mib") return n << 20;
  if (unit == "g" || unit == "gb" || unit == "gib") return n << 30;
  return std::nullopt;
}

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// A value for a dotted key: numbers and booleans as they are, anything else as a string.
std::string json_of(std::string_view value) {
  const std::string v = lower(value);
  if (v == "true" || v == "false") return v;
  if (config::parse_size(value)) return std::string(value);
  return quoted(value);
}

// One entry into a setting; returns the reason when it cannot be.
std::string translate(std::string_view key, std::string_view value, Setting* out) {
  const std::string k = lower(key);
  if (k == "workers" || k == "io_threads") {
    if (!config::parse_size(value)) return "workers: want a whole number, got \"" +
                                           std::string(value) + "\"";
    *out = {"gpufile.workers", std::string(value)};
    return {};
  }
  if (k == "block_size") {
    std::optional<uint64_t> bytes = parse_bytes(value);
    if (!bytes || *bytes == 0 || *bytes % 1024 != 0)
      return "block_size: want a size in whole KiB such as 4M or 1024K, got \"" +
             std::string(value) + "\"";
    *out = {"gpufile.slab_size_kb", std::to_string(*bytes >> 10)};
    return {};
  }
  if (k == "direct_io" || k == "engine") {
    *out = {"gpufile." + k, quoted(lower(value))};
    return {};
  }
  if (k == "alignment") {
    return "alignment: not a gpufile setting: gpufile takes the O_DIRECT alignment of each file "
           "from the file system (statx), and HDF5 aligns its objects by H5Pset_alignment";
  }
  if (k.find('.') != std::string::npos) {
    *out = {std::string(key), json_of(value)};
    return {};
  }
  return "unknown key \"" + std::string(key) +
         "\" (known: workers, block_size, direct_io, engine, or a dotted cufile.json key such "
         "as gpufile.ring_depth)";
}

}  // namespace

std::string parse_config(std::string_view text, std::vector<Setting>* out) {
  std::vector<Setting> settings;
  while (!text.empty()) {
    const size_t end = text.find_first_of(";,");
    std::string_view entry = trim(text.substr(0, end));
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (entry.empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) return "\"" + std::string(entry) + "\": want key=value";
    std::string_view key = trim(entry.substr(0, eq));
    std::string_view value = trim(entry.substr(eq + 1));
    if (key.empty() || value.empty()) return "\"" + std::string(entry) + "\": want key=value";
    Setting s;
    if (std::string why = translate(key, value, &s); !why.empty()) return why;
    settings.push_back(std::move(s));
  }
  *out = std::move(settings);
  return {};
}

std::string stage_settings(const std::vector<Setting>& settings) {
  for (const Setting& s : settings) {
    std::string why = config::stage_json(s.key, s.value_json);
    if (!why.empty()) return s.key + "=" + s.value_json + ": " + why;
  }
  return {};
}

}  // namespace gpufile::hdf5
