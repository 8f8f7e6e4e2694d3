// Fuzz target: cufile.json, as cuFileDriverOpen reads it from /etc/cufile.json or
// $CUFILE_ENV_PATH_JSON (config::apply_json_text: JSON with // and /* */ comments; each key
// checked against its range, a bad one reported and the current value kept).
//
// Beyond "no crash, no sanitizer report, no exception", every input must keep these:
//   1. every problem line starts with the file's name (the origin);
//   2. what the file left in the settings re-validates: written back as a cufile.json, it is
//      taken whole by the same parser, with no problem, and gives the same settings;
//   3. applying the file a second time changes nothing and reports as many problems.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "core/config.hpp"

namespace {

using gpufile::Settings;
using gpufile::config::apply_json_text;
using gpufile::config::Problems;
using gpufile::config::settings_json;
using json = nlohmann::json;

constexpr std::string_view kOrigin = "fuzz/cufile.json";

void check(bool ok, const char* invariant, std::string_view input) {
  if (ok) return;
  std::fprintf(stderr, "fuzz_cufile_json: invariant broken: %s\ninput: %.*s\n", invariant,
               static_cast<int>(input.size()), input.data());
  std::abort();
}

// settings_json() is flat ("properties.io_batchsize": 128); cufile.json nests ("properties":
// {"io_batchsize": 128}).
std::string as_cufile_json(const std::string& flat_text) {
  const json flat = json::parse(flat_text);
  json nested = json::object();
  for (const auto& [key, value] : flat.items()) {
    std::string pointer = "/" + key;
    for (char& c : pointer)
      if (c == '.') c = '/';
    nested[json::json_pointer(pointer)] = value;
  }
  return nested.dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);

  Settings s;  // built-in defaults, as at an open
  Problems problems;
  apply_json_text(s, text, kOrigin, problems);
  for (const std::string& p : problems)
    check(p.rfind(std::string(kOrigin) + ": ", 0) == 0, "a problem names its origin", text);
  const std::string after = settings_json(s);

  // Most inputs leave the defaults: those are checked once, the others each time (writing
  // every setting back and reading it again costs more than the input's own parse).
  static const std::string defaults = settings_json(Settings{});
  static bool defaults_checked = false;
  if (after != defaults || !defaults_checked) {
    Settings again;
    Problems none;
    apply_json_text(again, as_cufile_json(after), "written back", none);
    check(none.empty(), "the settings a file leaves re-validate without a problem", text);
    check(settings_json(again) == after, "the settings a file leaves read back the same", text);
    defaults_checked = defaults_checked || after == defaults;
  }

  Problems twice;
  apply_json_text(s, text, kOrigin, twice);
  check(settings_json(s) == after, "a second application changes nothing", text);
  check(twice.size() == problems.size(), "a second application reports as many problems", text);
  return 0;
}
