// The driver's configuration string: what H5Pset_driver_by_name(fapl, "gpufile", config),
// H5Pset_fapl_gpufile(fapl, config) and HDF5_DRIVER_CONFIG hand the driver. docs/hdf5.md has
// the full table.
//
//   "workers=8; block_size=4M; direct_io=never; gpufile.ring_depth=128"
//
// Entries are key=value, separated by ';' (',' works too); spaces around either are ignored.
// The paper's knobs have short names; any dotted cufile.json key of gpufile's settings
// (docs/settings.md) is accepted as well. Each entry becomes a setting staged for the next
// session open, with the precedence of an API call (above GPUFILE_* variables and cufile.json).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace gpufile::hdf5 {

struct Setting {
  std::string key;         // cufile.json key: "gpufile.workers"
  std::string value_json;  // its value as JSON text: "8", "\"never\""
};

// Translates the string into settings. Returns an empty string, or why it was refused (the
// first bad entry; nothing is staged then).
std::string parse_config(std::string_view text, std::vector<Setting>* out);

// Stages the settings for the next session open (config::stage_json). Returns an empty string,
// or the first refusal (unknown key, out of range), naming the entry.
std::string stage_settings(const std::vector<Setting>& settings);

}  // namespace gpufile::hdf5
