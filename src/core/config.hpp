// Where the Settings of a driver session come from, and the values staged through the parameter
// API before an open. Layers, in rising precedence:
//   built-in defaults (settings.hpp) < cufile.json < environment < staged API values.
// docs/settings.md lists every key, variable and range.
//
// This file knows no cuFile types: the parameter ids below mirror the numeric values of cuFile's
// CUFileSizeT/Bool/String/ArrayConfigParameter_t enums (declaration order from 0), and
// src/capi/params.cpp checks that they agree at compile time.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/settings.hpp"

namespace gpufile::config {

enum class SizeParam : int {
  profile_stats = 0,
  max_io_queue_depth,
  max_io_threads,
  min_io_threshold_size_kb,
  max_request_parallelism,
  max_direct_io_size_kb,
  max_device_cache_size_kb,
  per_buffer_cache_size_kb,
  max_device_pinned_mem_size_kb,
  io_batchsize,
  poll_threshold_size_kb,
  batch_io_timeout_ms,
  count
};

enum class BoolParam : int {
  use_poll_mode = 0,
  allow_compat_mode,
  force_compat_mode,
  api_check_aggressive,
  parallel_io,
  profile_nvtx,
  allow_system_memory,
  use_pci_p2pdma,
  prefer_io_uring,
  force_odirect_mode,
  skip_topology_detection,
  stream_memops_bypass,
  count
};

enum class StringParam : int { logging_level = 0, env_logfile_path, log_dir, count };

// Parameter ids arrive from C as plain ints: these say whether one names a parameter.
bool is_known(SizeParam p);
bool is_known(BoolParam p);
bool is_known(StringParam p);

// ---- resolution --------------------------------------------------------------------------------

// Problems found while resolving: one readable line each, naming the key, the value, the
// allowed range and the value kept instead.
using Problems = std::vector<std::string>;

struct Resolution {
  Settings settings;
  Problems problems;
  std::string json_path;  // the cufile.json that was read; empty when none
};

// The config file a resolve would read: $CUFILE_ENV_PATH_JSON if set (even when unreadable, so
// that the problem gets reported), else /etc/cufile.json when it exists, else "".
std::string json_path();

// Every layer applied onto the defaults. Reads the file, the environment and the staged values;
// changes nothing (the staged values stay staged).
Resolution resolve();

// What a driver open calls: resolve(), then applies the process-wide settings (log::configure,
// so that the problems reach the configured log destination, and stats::set_level), logs each
// problem, and clears the staged values (cuFile clears them at open, even when the open later
// fails).
Settings resolve_for_open();

// The individual layers, for tests and tools. Each leaves a field unchanged when its value is
// absent or invalid, and appends a line to `problems` for an invalid one.
void apply_json_text(Settings& s, std::string_view text, std::string_view origin, Problems& problems);
void apply_json_file(Settings& s, const std::string& path, Problems& problems);
void apply_environment(Settings& s, Problems& problems);
void apply_staged(Settings& s, Problems& problems);

// ---- staging (the cuFileSetParameter* calls, valid while the driver is closed) -----------------

// Stage a value for the next open; last set wins. Values are not range-checked here (cuFile
// checks at open). Returns false only for an unknown parameter (or bad array shape).
bool stage_size(SizeParam p, size_t value);
bool stage_bool(BoolParam p, bool value);
bool stage_string(StringParam p, std::string_view value);

struct PosixPool {
  std::vector<size_t> slab_size_kb;
  std::vector<size_t> slab_count;
};
// Sizes and counts are a pair of equal-length arrays, 1..kMaxPosixPoolSlabs entries.
inline constexpr size_t kMaxPosixPoolSlabs = 16;
bool stage_posix_pool(std::span<const size_t> slab_size_kb, std::span<const size_t> slab_count);

void clear_staged();

// ---- settings by cufile.json key (the Python and C++ APIs) ---------------------------------------

// Every setting of `s` as a flat JSON object text, keyed by its dotted cufile.json key
// ("properties.max_direct_io_size_kb", "gpufile.workers", "gpufile.engine", ...).
std::string settings_json(const Settings& s);
// Stages one setting for the next open, its value as JSON text ("8", "true", "\"never\""). The key
// and the value are checked now, against what the next open would resolve: returns an empty
// string when staged, else the reason it was refused (unknown key, wrong type, out of range).
std::string stage_json(std::string_view key, std::string_view value_json);

// What a closed driver reports: the staged value, or NVIDIA's observed value for an unstaged
// parameter (tests/conformance/expected/nvidia.txt): 0 for several sizes whose runtime default
// differs, false for every flag, the environment's value or "" for the log strings, a pool of
// no slabs.
size_t staged_size(SizeParam p);
bool staged_bool(BoolParam p);
std::string staged_string(StringParam p);
PosixPool staged_posix_pool();

// What an open driver reports: the value in its Settings.
size_t size_value(const Settings& s, SizeParam p);
bool bool_value(const Settings& s, BoolParam p);
std::string string_value(const Settings& s, StringParam p);
PosixPool posix_pool_value(const Settings& s);

// The settable range of a size parameter (cuFileGetParameterMinMaxValue). nullopt for
// profile_stats, which cuFile refuses there, and for unknown ids.
struct Range {
  size_t min;
  size_t max;
};
std::optional<Range> size_range(SizeParam p);

// BAR1-dependent maxima (device cache, pinned memory): cuFile reports the GPU's BAR1 size,
// which needs platform discovery. gpufile does not map buffers into BAR1, so it reports no
// limit instead, and does not open the driver to answer.
inline constexpr size_t kBarDependentMaxKb = static_cast<size_t>(-1);

// ---- value parsing shared with other layers ----------------------------------------------------

// true/false/1/0/yes/no/on/off, any case.
std::optional<bool> parse_bool(std::string_view text);
// A decimal unsigned integer, nothing else (no sign, no suffix, no overflow).
std::optional<size_t> parse_size(std::string_view text);
std::optional<EnginePolicy> parse_engine(std::string_view text);        // auto|io_uring|posix
std::optional<DirectIoPolicy> parse_direct_io(std::string_view text);   // auto|always|never
const char* engine_name(EnginePolicy e);
std::optional<NumaPlacement> parse_numa_placement(std::string_view text);  // auto|off
const char* numa_placement_name(NumaPlacement p);
const char* direct_io_name(DirectIoPolicy d);
std::optional<CachePolicy> parse_cache_policy(std::string_view text);  // auto|keep|bypass
const char* cache_policy_name(CachePolicy c);
std::optional<VendorPolicy> parse_vendor(std::string_view text);  // auto|on|off
const char* vendor_name(VendorPolicy v);

}  // namespace gpufile::config
