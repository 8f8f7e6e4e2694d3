#include "core/config.hpp"

#include <array>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <utility>
#include <nlohmann/json.hpp>
#include <sstream>
#include <sys/stat.h>

#include "core/log.hpp"
#include "core/stats.hpp"

namespace gpufile::config {
namespace {

using json = nlohmann::json;

constexpr size_t kSizeCount = static_cast<size_t>(SizeParam::count);
constexpr size_t kBoolCount = static_cast<size_t>(BoolParam::count);
constexpr size_t kStringCount = static_cast<size_t>(StringParam::count);
constexpr int kNoParam = -1;

// cuFile's observed maximum for the poll threshold: SIZE_MAX/1024 rounded down to a multiple of 4.
constexpr size_t kPollThresholdMaxKb = 18014398509481980ULL;
constexpr size_t kUnlimited = static_cast<size_t>(-1);

// One size_t (or small int) setting: where it is read from, its range, and how to reach it.
struct SizeKey {
  const char* json_key;  // dotted path in cufile.json
  const char* env;       // environment variable, or nullptr
  int param;             // SizeParam index, or kNoParam
  size_t min, max;
  size_t multiple;  // value must be a multiple of this (1: any)
  size_t (*get)(const Settings&);
  void (*set)(Settings&, size_t);
  std::optional<size_t> before_open;  // what a closed driver reports unstaged; nullopt: default
};

#define GPUFILE_FIELD(f)                                       \
  [](const Settings& s) -> size_t { return static_cast<size_t>(s.f); }, \
      [](Settings& s, size_t v) { s.f = static_cast<decltype(s.f)>(v); }

constexpr int sp(SizeParam p) { return static_cast<int>(p); }

// The order of the cuFile rows follows SizeParam, so that kSizeKeys[p] is parameter p.
constexpr SizeKey kSizeKeys[] = {
    {"profile.cufile_stats", nullptr, sp(SizeParam::profile_stats), 0, 3, 1,
     GPUFILE_FIELD(stats_level), std::nullopt},
    {"execution.max_io_queue_depth", nullptr, sp(SizeParam::max_io_queue_depth), 1, 256, 1,
     GPUFILE_FIELD(max_io_queue_depth), std::nullopt},
    {"execution.max_io_threads", nullptr, sp(SizeParam::max_io_threads), 0, 32, 1,
     GPUFILE_FIELD(max_io_threads), 0},
    {"execution.min_io_threshold_size_kb", nullptr, sp(SizeParam::min_io_threshold_size_kb), 4,
     4294967295ULL, 1, GPUFILE_FIELD(min_io_threshold_size_kb), 1024},
    {"execution.max_request_parallelism", nullptr, sp(SizeParam::max_request_parallelism), 0, 8, 1,
     GPUFILE_FIELD(max_request_parallelism), 0},
    // A multiple of 4 KB so that every O_DIRECT chunk stays page aligned.
    {"properties.max_direct_io_size_kb", nullptr, sp(SizeParam::max_direct_io_size_kb), 64, 16384, 4,
     GPUFILE_FIELD(max_direct_io_size_kb), 0},
    {"properties.max_device_cache_size_kb", nullptr, sp(SizeParam::max_device_cache_size_kb), 0,
     kBarDependentMaxKb, 1, GPUFILE_FIELD(max_device_cache_size_kb), 0},
    {"properties.per_buffer_cache_size_kb", nullptr, sp(SizeParam::per_buffer_cache_size_kb), 64,
     16384, 1, GPUFILE_FIELD(per_buffer_cache_size_kb), 0},
    {"properties.max_device_pinned_mem_size_kb", nullptr,
     sp(SizeParam::max_device_pinned_mem_size_kb), 64, kBarDependentMaxKb, 1,
     GPUFILE_FIELD(max_device_pinned_mem_size_kb), 0},
    {"properties.io_batchsize", nullptr, sp(SizeParam::io_batchsize), 1, 256, 1,
     GPUFILE_FIELD(io_batchsize), 0},
    {"properties.poll_mode_max_size_kb", nullptr, sp(SizeParam::poll_threshold_size_kb), 4,
     kPollThresholdMaxKb, 1, GPUFILE_FIELD(poll_mode_max_size_kb), 0},
    {"properties.max_batch_io_timeout_msecs", nullptr, sp(SizeParam::batch_io_timeout_ms), 1, 1000,
     1, GPUFILE_FIELD(batch_io_timeout_ms), 0},
    // gpufile's own.
    {"gpufile.workers", "GPUFILE_WORKERS", kNoParam, 0, 256, 1, GPUFILE_FIELD(workers),
     std::nullopt},
    // A multiple of 4 KB: slabs are O_DIRECT targets.
    {"gpufile.slab_size_kb", "GPUFILE_SLAB_SIZE_KB", kNoParam, 4, 1048576, 4,
     GPUFILE_FIELD(slab_size_kb), std::nullopt},
    {"gpufile.slabs_per_worker", "GPUFILE_SLABS_PER_WORKER", kNoParam, 1, 64, 1,
     GPUFILE_FIELD(slabs_per_worker), std::nullopt},
    {"gpufile.cold_slabs_per_worker", "GPUFILE_COLD_SLABS_PER_WORKER", kNoParam, 0, 64, 1,
     GPUFILE_FIELD(cold_slabs_per_worker), std::nullopt},
    // Multiples of 4 KB: pieces are cut on a 4 KiB grid, at O_DIRECT offsets.
    {"gpufile.cold_piece_kb", "GPUFILE_COLD_PIECE_KB", kNoParam, 0, 1048576, 4,
     GPUFILE_FIELD(cold_piece_kb), std::nullopt},
    {"gpufile.shared_piece_kb", "GPUFILE_SHARED_PIECE_KB", kNoParam, 0, 1048576, 4,
     GPUFILE_FIELD(shared_piece_kb), std::nullopt},
    {"gpufile.ring_depth", "GPUFILE_RING_DEPTH", kNoParam, 1, 4096, 1, GPUFILE_FIELD(ring_depth),
     std::nullopt},
    {"gpufile.small_io_kb", "GPUFILE_SMALL_IO_KB", kNoParam, 0, 1048576, 1,
     GPUFILE_FIELD(small_io_threshold_kb), std::nullopt},
    // A multiple of 4 KB: split points are O_DIRECT offsets.
    {"gpufile.min_chunk_kb", "GPUFILE_MIN_CHUNK_KB", kNoParam, 4, 1048576, 4,
     GPUFILE_FIELD(min_chunk_kb), std::nullopt},
    {"gpufile.caller_slabs", "GPUFILE_CALLER_SLABS", kNoParam, 0, 4096, 1,
     GPUFILE_FIELD(caller_slabs), std::nullopt},
    {"gpufile.pagecache_dma_mb", "GPUFILE_PAGECACHE_DMA_MB", kNoParam, 0, 1ull << 30, 1,
     GPUFILE_FIELD(pagecache_dma_mb), std::nullopt},
    {"gpufile.pagecache_dma_idle_ms", "GPUFILE_PAGECACHE_DMA_IDLE_MS", kNoParam, 0, 3600000, 1,
     GPUFILE_FIELD(pagecache_dma_idle_ms), std::nullopt},
    {"gpufile.pagecache_dma_long_read_mb", "GPUFILE_PAGECACHE_DMA_LONG_READ_MB", kNoParam, 0,
     1ull << 30, 1, GPUFILE_FIELD(pagecache_dma_long_read_mb), std::nullopt},
    {"gpufile.remote_part_kb", "GPUFILE_REMOTE_PART_KB", kNoParam, 4, 1048576, 1,
     GPUFILE_FIELD(remote_part_kb), std::nullopt},
    {"gpufile.remote_concurrency", "GPUFILE_REMOTE_CONCURRENCY", kNoParam, 1, 256, 1,
     GPUFILE_FIELD(remote_concurrency), std::nullopt},
    {"gpufile.remote_transfers_per_thread", "GPUFILE_REMOTE_TRANSFERS_PER_THREAD", kNoParam, 1, 256, 1,
     GPUFILE_FIELD(remote_transfers_per_thread), std::nullopt},
    {"gpufile.remote_retries", "GPUFILE_REMOTE_RETRIES", kNoParam, 0, 100, 1,
     GPUFILE_FIELD(remote_retries), std::nullopt},
    {"gpufile.remote_backoff_ms", "GPUFILE_REMOTE_BACKOFF_MS", kNoParam, 1, 60000, 1,
     GPUFILE_FIELD(remote_backoff_ms), std::nullopt},
    {"gpufile.remote_timeout_s", "GPUFILE_REMOTE_TIMEOUT_S", kNoParam, 1, 3600, 1,
     GPUFILE_FIELD(remote_timeout_s), std::nullopt},
};
#undef GPUFILE_FIELD

constexpr bool size_rows_follow_params() {
  for (size_t i = 0; i < kSizeCount; ++i)
    if (kSizeKeys[i].param != static_cast<int>(i)) return false;
  for (size_t i = kSizeCount; i < std::size(kSizeKeys); ++i)
    if (kSizeKeys[i].param != kNoParam) return false;
  return true;
}
static_assert(size_rows_follow_params(), "kSizeKeys[p] must describe SizeParam p");

struct BoolKey {
  const char* json_key;
  const char* env;
  bool Settings::*field;
};

// Indexed by BoolParam.
const BoolKey kBoolKeys[] = {
    {"properties.use_poll_mode", nullptr, &Settings::use_poll_mode},
    {"properties.allow_compat_mode", "CUFILE_ALLOW_COMPAT_MODE", &Settings::allow_compat_mode},
    {"properties.force_compat_mode", "CUFILE_FORCE_COMPAT_MODE", &Settings::force_compat_mode},
    {"miscellaneous.api_check_aggressive", nullptr, &Settings::api_check_aggressive},
    {"execution.parallel_io", nullptr, &Settings::parallel_io},
    {"profile.nvtx", "CUFILE_NVTX", &Settings::nvtx},
    {"properties.allow_system_memory", nullptr, &Settings::allow_system_memory},
    {"properties.use_pci_p2pdma", "CUFILE_USE_PCIP2PDMA", &Settings::use_pci_p2pdma},
    {"properties.prefer_iouring", nullptr, &Settings::prefer_io_uring},
    {"properties.force_odirect_mode", nullptr, &Settings::force_odirect_mode},
    {"miscellaneous.skip_topology_detection", "CUFILE_SKIP_TOPOLOGY_DETECTION",
     &Settings::skip_topology_detection},
    {"miscellaneous.stream_memops_bypass", "CUFILE_STREAM_MEMOPS_BYPASS",
     &Settings::stream_memops_bypass},
};
static_assert(std::size(kBoolKeys) == kBoolCount);

const SizeKey* size_key(SizeParam p) {
  int i = static_cast<int>(p);
  if (i < 0 || i >= static_cast<int>(kSizeCount)) return nullptr;
  return &kSizeKeys[i];
}

// ---- problems ----------------------------------------------------------------------------------

void report(Problems& problems, std::string_view origin, std::string_view key,
            std::string_view value, std::string_view allowed, std::string_view kept) {
  std::string line;
  line.append(origin).append(": invalid value for ").append(key).append(": ").append(value);
  line.append(" (allowed: ").append(allowed).append("); keeping ").append(kept);
  problems.push_back(std::move(line));
}

std::string range_text(const SizeKey& k) {
  std::string text = std::to_string(k.min) + "..";
  text += k.max == kUnlimited ? std::string("no limit") : std::to_string(k.max);
  if (k.multiple > 1) text += ", a multiple of " + std::to_string(k.multiple);
  return text;
}

bool in_range(const SizeKey& k, size_t v) {
  return v >= k.min && v <= k.max && v % k.multiple == 0;
}

// Sets a size field when the value is acceptable, else reports it and keeps the current value.
void apply_size(Settings& s, const SizeKey& k, size_t v, std::string_view origin,
                std::string_view key_name, Problems& problems) {
  if (in_range(k, v)) {
    k.set(s, v);
    return;
  }
  report(problems, origin, key_name, std::to_string(v), range_text(k), std::to_string(k.get(s)));
}

// ---- cufile.json -------------------------------------------------------------------------------

// cufile.json nests a handful of levels. nlohmann's parser keeps its depth on the heap, but
// dump(), copies and comparisons recurse once a level: a value of a few hundred KB of '[' on a
// known key overflowed the stack when its problem line dumped it (found with the cufile.json
// fuzz target, docs/reliability.md "Fuzzing"). Deeper documents are refused whole, while being
// parsed.
constexpr int kMaxJsonDepth = 64;
struct TooDeep {};

json parse_limited(std::string_view text, bool ignore_comments) {
  const json::parser_callback_t limit = [](int depth, json::parse_event_t, json&) {
    if (depth > kMaxJsonDepth) throw TooDeep{};
    return true;
  };
  return json::parse(text.begin(), text.end(), limit, /*allow_exceptions=*/true, ignore_comments);
}

const std::string kTooDeep = "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels";

// The value at a dotted path, or nullptr when any part of the path is absent.
const json* find_path(const json& root, std::string_view dotted) {
  const json* node = &root;
  while (!dotted.empty()) {
    size_t dot = dotted.find('.');
    std::string part(dotted.substr(0, dot));
    if (!node->is_object()) return nullptr;
    auto it = node->find(part);
    if (it == node->end()) return nullptr;
    node = &*it;
    dotted = dot == std::string_view::npos ? std::string_view{} : dotted.substr(dot + 1);
  }
  return node;
}

std::optional<size_t> json_size(const json& v) {
  if (v.is_number_unsigned()) return v.get<size_t>();
  if (v.is_number_integer() && v.get<long long>() >= 0) return static_cast<size_t>(v.get<long long>());
  return std::nullopt;
}

void json_sizes(Settings& s, const json& root, std::string_view origin, Problems& problems) {
  for (const SizeKey& k : kSizeKeys) {
    const json* v = find_path(root, k.json_key);
    if (!v) continue;
    if (auto n = json_size(*v))
      apply_size(s, k, *n, origin, k.json_key, problems);
    else
      report(problems, origin, k.json_key, v->dump(), "an unsigned integer " + range_text(k),
             std::to_string(k.get(s)));
  }
}

void json_bools(Settings& s, const json& root, std::string_view origin, Problems& problems) {
  for (const BoolKey& k : kBoolKeys) {
    const json* v = find_path(root, k.json_key);
    if (!v) continue;
    if (v->is_boolean())
      s.*k.field = v->get<bool>();
    else
      report(problems, origin, k.json_key, v->dump(), "true or false", s.*k.field ? "true" : "false");
  }
}

// A string-valued key parsed by `parse`; `show` names the current value.
template <typename T, typename Parse, typename Show>
void json_choice(const json& root, const char* key, T& field, Parse parse, Show show,
                 const char* allowed, std::string_view origin, Problems& problems) {
  const json* v = find_path(root, key);
  if (!v) return;
  std::optional<T> parsed;
  if (v->is_string()) parsed = parse(v->get<std::string>());
  if (parsed)
    field = *parsed;
  else
    report(problems, origin, key, v->dump(), allowed, show(field));
}

void json_strings(Settings& s, const json& root, std::string_view origin, Problems& problems) {
  json_choice(root, "logging.level", s.log_level, log::parse_level, log::level_name,
              "TRACE|DEBUG|INFO|NOTICE|WARN|ERROR|OFF", origin, problems);
  json_choice(root, "gpufile.engine", s.engine, parse_engine, engine_name, "auto|io_uring|posix",
              origin, problems);
  json_choice(root, "gpufile.direct_io", s.direct_io, parse_direct_io, direct_io_name,
              "auto|always|never", origin, problems);
  json_choice(root, "gpufile.cache_policy", s.cache_policy, parse_cache_policy, cache_policy_name,
              "auto|keep|bypass", origin, problems);
  json_choice(root, "gpufile.numa_placement", s.numa_placement, parse_numa_placement,
              numa_placement_name, "auto|off", origin, problems);
  json_choice(root, "gpufile.vendor", s.vendor, parse_vendor, vendor_name, "auto|on|off", origin,
              problems);
  if (const json* lib = find_path(root, "gpufile.vendor_library")) {
    if (lib->is_string())
      s.vendor_library = lib->get<std::string>();
    else
      report(problems, origin, "gpufile.vendor_library", lib->dump(), "a library path",
             "\"" + s.vendor_library + "\"");
  }
  if (const json* dir = find_path(root, "logging.dir")) {
    if (dir->is_string())
      s.log_dir = dir->get<std::string>();
    else
      report(problems, origin, "logging.dir", dir->dump(), "a directory path", "\"" + s.log_dir + "\"");
  }
}

std::string join(const std::vector<size_t>& v) {
  std::string text = "[";
  for (size_t i = 0; i < v.size(); ++i) text += (i ? "," : "") + std::to_string(v[i]);
  return text + "]";
}

// Slab sizes must be positive multiples of 4 KB, counts positive, both lists the same length.
bool valid_pool(const PosixPool& p) {
  if (p.slab_size_kb.empty() || p.slab_size_kb.size() > kMaxPosixPoolSlabs) return false;
  if (p.slab_size_kb.size() != p.slab_count.size()) return false;
  for (size_t kb : p.slab_size_kb)
    if (kb == 0 || kb % 4 != 0) return false;
  for (size_t n : p.slab_count)
    if (n == 0) return false;
  return true;
}

void apply_pool(Settings& s, const PosixPool& p, std::string_view origin, Problems& problems) {
  if (valid_pool(p)) {
    s.posix_pool_slab_size_kb = p.slab_size_kb;
    s.posix_pool_slab_count = p.slab_count;
    return;
  }
  report(problems, origin, "properties.posix_pool_slab_size_kb/_count",
         join(p.slab_size_kb) + " x " + join(p.slab_count),
         "two lists of equal length 1.." + std::to_string(kMaxPosixPoolSlabs) +
             ", sizes positive multiples of 4, counts positive",
         join(s.posix_pool_slab_size_kb) + " x " + join(s.posix_pool_slab_count));
}

std::optional<std::vector<size_t>> json_size_list(const json& v) {
  if (!v.is_array()) return std::nullopt;
  std::vector<size_t> out;
  for (const json& e : v) {
    auto n = json_size(e);
    if (!n) return std::nullopt;
    out.push_back(*n);
  }
  return out;
}

void json_pool(Settings& s, const json& root, std::string_view origin, Problems& problems) {
  const json* sizes = find_path(root, "properties.posix_pool_slab_size_kb");
  const json* counts = find_path(root, "properties.posix_pool_slab_count");
  if (!sizes && !counts) return;
  // A file may give one list alone; the other keeps its current value.
  PosixPool pool{s.posix_pool_slab_size_kb, s.posix_pool_slab_count};
  if (sizes) {
    auto list = json_size_list(*sizes);
    if (!list) return report(problems, origin, "properties.posix_pool_slab_size_kb", sizes->dump(),
                             "a list of unsigned integers", join(s.posix_pool_slab_size_kb));
    pool.slab_size_kb = *list;
  }
  if (counts) {
    auto list = json_size_list(*counts);
    if (!list) return report(problems, origin, "properties.posix_pool_slab_count", counts->dump(),
                             "a list of unsigned integers", join(s.posix_pool_slab_count));
    pool.slab_count = *list;
  }
  apply_pool(s, pool, origin, problems);
}

// ---- environment -------------------------------------------------------------------------------

// An unset or empty variable counts as absent.
const char* env(const char* name) {
  const char* v = name ? std::getenv(name) : nullptr;
  return v && *v ? v : nullptr;
}

constexpr std::string_view kEnvOrigin = "environment";

void env_sizes(Settings& s, Problems& problems) {
  for (const SizeKey& k : kSizeKeys) {
    const char* v = env(k.env);
    if (!v) continue;
    if (auto n = parse_size(v))
      apply_size(s, k, *n, kEnvOrigin, k.env, problems);
    else
      report(problems, kEnvOrigin, k.env, v, "an unsigned integer " + range_text(k),
             std::to_string(k.get(s)));
  }
}

void env_bools(Settings& s, Problems& problems) {
  for (const BoolKey& k : kBoolKeys) {
    const char* v = env(k.env);
    if (!v) continue;
    if (auto b = parse_bool(v))
      s.*k.field = *b;
    else
      report(problems, kEnvOrigin, k.env, v, "true|false|1|0|yes|no|on|off",
             s.*k.field ? "true" : "false");
  }
}

template <typename T, typename Parse, typename Show>
void env_choice(const char* name, T& field, Parse parse, Show show, const char* allowed,
                Problems& problems) {
  const char* v = env(name);
  if (!v) return;
  if (auto parsed = parse(v))
    field = *parsed;
  else
    report(problems, kEnvOrigin, name, v, allowed, show(field));
}

void env_strings(Settings& s, Problems& problems) {
  // cuFile's variables first, so that gpufile's own, more specific ones win.
  const char* levels = "TRACE|DEBUG|INFO|NOTICE|WARN|ERROR|OFF";
  env_choice("CUFILE_LOGGING_LEVEL", s.log_level, log::parse_level, log::level_name, levels, problems);
  env_choice("GPUFILE_LOG_LEVEL", s.log_level, log::parse_level, log::level_name, levels, problems);
  if (const char* v = env("CUFILE_LOGFILE_PATH")) s.log_file = v;
  if (const char* v = env("GPUFILE_LOG_FILE")) s.log_file = v;
  env_choice("GPUFILE_ENGINE", s.engine, parse_engine, engine_name, "auto|io_uring|posix", problems);
  env_choice("GPUFILE_DIRECT_IO", s.direct_io, parse_direct_io, direct_io_name, "auto|always|never",
             problems);
  env_choice("GPUFILE_CACHE_POLICY", s.cache_policy, parse_cache_policy, cache_policy_name,
             "auto|keep|bypass", problems);
  env_choice("GPUFILE_NUMA_PLACEMENT", s.numa_placement, parse_numa_placement, numa_placement_name,
             "auto|off", problems);
  env_choice("GPUFILE_VENDOR", s.vendor, parse_vendor, vendor_name, "auto|on|off", problems);
  if (const char* v = env("GPUFILE_VENDOR_LIBRARY")) s.vendor_library = v;
}

// ---- staged values -----------------------------------------------------------------------------

struct Staged {
  std::array<std::optional<size_t>, kSizeCount> sizes;
  std::array<std::optional<bool>, kBoolCount> bools;
  std::array<std::optional<std::string>, kStringCount> strings;
  std::optional<PosixPool> pool;
  json by_key = json::object();  // stage_json(): nested like cufile.json, applied last
};

struct StagedStore {
  std::mutex mu;
  Staged values;
};

StagedStore& staged_store() {
  static StagedStore* store = new StagedStore;  // never destroyed: usable during exit
  return *store;
}

Staged copy_staged() {
  StagedStore& st = staged_store();
  std::lock_guard lock(st.mu);
  return st.values;
}

Staged take_staged() {
  StagedStore& st = staged_store();
  std::lock_guard lock(st.mu);
  return std::exchange(st.values, Staged{});
}

constexpr std::string_view kApiOrigin = "cuFileSetParameter";

void apply_staged_values(Settings& s, const Staged& st, Problems& problems) {
  for (size_t i = 0; i < kSizeCount; ++i)
    if (st.sizes[i]) apply_size(s, kSizeKeys[i], *st.sizes[i], kApiOrigin, kSizeKeys[i].json_key, problems);
  for (size_t i = 0; i < kBoolCount; ++i)
    if (st.bools[i]) s.*kBoolKeys[i].field = *st.bools[i];
  const auto& level = st.strings[static_cast<size_t>(StringParam::logging_level)];
  if (level) {
    if (auto parsed = log::parse_level(*level))
      s.log_level = *parsed;
    else
      report(problems, kApiOrigin, "logging.level", "\"" + *level + "\"",
             "TRACE|DEBUG|INFO|NOTICE|WARN|ERROR|OFF", log::level_name(s.log_level));
  }
  if (const auto& f = st.strings[static_cast<size_t>(StringParam::env_logfile_path)]) s.log_file = *f;
  if (const auto& d = st.strings[static_cast<size_t>(StringParam::log_dir)]) s.log_dir = *d;
  if (st.pool) apply_pool(s, *st.pool, kApiOrigin, problems);
  if (!st.by_key.empty()) apply_json_text(s, st.by_key.dump(), "API", problems);
}

bool file_exists(const char* path) {
  struct stat st{};
  return ::stat(path, &st) == 0;
}

std::string lower(std::string_view text) {
  std::string out;
  for (char c : text) out.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  return out;
}

}  // namespace

bool is_known(SizeParam p) { return static_cast<unsigned>(p) < kSizeCount; }
bool is_known(BoolParam p) { return static_cast<unsigned>(p) < kBoolCount; }
bool is_known(StringParam p) { return static_cast<unsigned>(p) < kStringCount; }

// ---- resolution --------------------------------------------------------------------------------

std::string json_path() {
  if (const char* p = env("CUFILE_ENV_PATH_JSON")) return p;
  if (file_exists("/etc/cufile.json")) return "/etc/cufile.json";
  return {};
}

void apply_json_text(Settings& s, std::string_view text, std::string_view origin, Problems& problems) {
  json root;
  try {
    root = parse_limited(text, /*ignore_comments=*/true);
  } catch (const json::exception& e) {
    problems.push_back(std::string(origin) + ": not valid JSON (" + e.what() +
                       "); using built-in defaults for every key");
    return;
  } catch (const TooDeep&) {
    problems.push_back(std::string(origin) + ": not valid JSON (" + kTooDeep +
                       "); using built-in defaults for every key");
    return;
  }
  if (!root.is_object()) {
    problems.push_back(std::string(origin) + ": the top level is not a JSON object; ignored");
    return;
  }
  json_sizes(s, root, origin, problems);
  json_bools(s, root, origin, problems);
  json_strings(s, root, origin, problems);
  json_pool(s, root, origin, problems);
}

void apply_json_file(Settings& s, const std::string& path, Problems& problems) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    problems.push_back("cannot read config file " + path + "; using built-in defaults");
    return;
  }
  std::ostringstream text;
  text << in.rdbuf();
  apply_json_text(s, text.str(), path, problems);
}

void apply_environment(Settings& s, Problems& problems) {
  env_sizes(s, problems);
  env_bools(s, problems);
  env_strings(s, problems);
}

void apply_staged(Settings& s, Problems& problems) { apply_staged_values(s, copy_staged(), problems); }

namespace {
Resolution resolve_with(const Staged& staged) {
  Resolution r;
  r.json_path = json_path();
  if (!r.json_path.empty()) apply_json_file(r.settings, r.json_path, r.problems);
  apply_environment(r.settings, r.problems);
  apply_staged_values(r.settings, staged, r.problems);
  return r;
}
}  // namespace

Resolution resolve() { return resolve_with(copy_staged()); }

Settings resolve_for_open() {
  Resolution r = resolve_with(take_staged());
  log::configure(r.settings);
  stats::set_level(r.settings.stats_level);  // profile.cufile_stats, or cuFileSetStatsLevel
  // cuFile prints these unconditionally; at ERROR they show at the default level too.
  for (const std::string& p : r.problems) GPUFILE_LOG(LogLevel::error, "config: %s", p.c_str());
  GPUFILE_LOG(LogLevel::info, "config: file %s",
              r.json_path.empty() ? "(none, built-in defaults)" : r.json_path.c_str());
  return r.settings;
}

// ---- staging -----------------------------------------------------------------------------------

bool stage_size(SizeParam p, size_t value) {
  if (!is_known(p)) return false;
  StagedStore& st = staged_store();
  std::lock_guard lock(st.mu);
  st.values.sizes[static_cast<size_t>(p)] = value;
  return true;
}

bool stage_bool(BoolParam p, bool value) {
  if (!is_known(p)) return false;
  StagedStore& st = staged_store();
  std::lock_guard lock(st.mu);
  st.values.bools[static_cast<size_t>(p)] = value;
  return true;
}

bool stage_string(StringParam p, std::string_view value) {
  if (!is_known(p)) return false;
  StagedStore& st = staged_store();
  std::lock_guard lock(st.mu);
  st.values.strings[static_cast<size_t>(p)] = std::string(value);
  return true;
}

bool stage_posix_pool(std::span<const size_t> slab_size_kb, std::span<const size_t> slab_count) {
  if (slab_size_kb.empty() || slab_size_kb.size() != slab_count.size() ||
      slab_size_kb.size() > kMaxPosixPoolSlabs)
    return false;
  StagedStore& st = staged_store();
  std::lock_guard lock(st.mu);
  st.values.pool = PosixPool{{slab_size_kb.begin(), slab_size_kb.end()},
                             {slab_count.begin(), slab_count.end()}};
  return true;
}

void clear_staged() { take_staged(); }

size_t staged_size(SizeParam p) {
  const SizeKey* k = size_key(p);
  if (!k) return 0;
  Staged st = copy_staged();
  if (st.sizes[static_cast<size_t>(p)]) return *st.sizes[static_cast<size_t>(p)];
  return k->before_open ? *k->before_open : k->get(Settings{});
}

// Unstaged, every flag reads false before open, the defaults that are true included (NVIDIA's
// library, tests/conformance/expected/nvidia.txt).
bool staged_bool(BoolParam p) {
  if (!is_known(p)) return false;
  Staged st = copy_staged();
  return st.bools[static_cast<size_t>(p)].value_or(false);
}

std::string staged_string(StringParam p) {
  if (!is_known(p)) return {};
  Staged st = copy_staged();
  if (auto v = st.strings[static_cast<size_t>(p)]) return *v;
  // Unstaged, cuFile reports what the environment says (observed for the first two).
  switch (p) {
    case StringParam::logging_level:
      if (const char* v = env("CUFILE_LOGGING_LEVEL")) return v;
      return {};
    case StringParam::env_logfile_path:
      if (const char* v = env("CUFILE_LOGFILE_PATH")) return v;
      return {};
    default:
      return {};
  }
}

// Unstaged, the pool has no slabs before open (so every length is refused, as in cuFile).
PosixPool staged_posix_pool() {
  Staged st = copy_staged();
  return st.pool.value_or(PosixPool{});
}

size_t size_value(const Settings& s, SizeParam p) {
  const SizeKey* k = size_key(p);
  return k ? k->get(s) : 0;
}

bool bool_value(const Settings& s, BoolParam p) {
  return is_known(p) ? s.*kBoolKeys[static_cast<size_t>(p)].field : false;
}

std::string string_value(const Settings& s, StringParam p) {
  switch (p) {
    case StringParam::logging_level: return log::level_name(s.log_level);
    case StringParam::env_logfile_path: return s.log_file;
    case StringParam::log_dir: return s.log_dir;
    default: return {};
  }
}

PosixPool posix_pool_value(const Settings& s) {
  return {s.posix_pool_slab_size_kb, s.posix_pool_slab_count};
}

std::optional<Range> size_range(SizeParam p) {
  if (p == SizeParam::profile_stats) return std::nullopt;
  const SizeKey* k = size_key(p);
  if (!k) return std::nullopt;
  return Range{k->min, k->max};
}

// ---- settings by key ---------------------------------------------------------------------------

namespace {

json flat_settings(const Settings& s) {
  json out = json::object();
  for (const SizeKey& k : kSizeKeys) out[k.json_key] = k.get(s);
  for (const BoolKey& k : kBoolKeys) out[k.json_key] = s.*k.field;
  out["logging.level"] = log::level_name(s.log_level);
  out["logging.dir"] = s.log_dir;
  out["gpufile.engine"] = engine_name(s.engine);
  out["gpufile.direct_io"] = direct_io_name(s.direct_io);
  out["gpufile.cache_policy"] = cache_policy_name(s.cache_policy);
  out["gpufile.numa_placement"] = numa_placement_name(s.numa_placement);
  out["gpufile.vendor"] = vendor_name(s.vendor);
  out["gpufile.vendor_library"] = s.vendor_library;
  out["properties.posix_pool_slab_size_kb"] = s.posix_pool_slab_size_kb;
  out["properties.posix_pool_slab_count"] = s.posix_pool_slab_count;
  return out;
}

// {"a": {"b": value}} for "a.b".
json nest(std::string_view dotted, json value) {
  size_t dot = dotted.rfind('.');
  while (dot != std::string_view::npos) {
    value = json{{std::string(dotted.substr(dot + 1)), std::move(value)}};
    dotted = dotted.substr(0, dot);
    dot = dotted.rfind('.');
  }
  return json{{std::string(dotted), std::move(value)}};
}

}  // namespace

std::string settings_json(const Settings& s) { return flat_settings(s).dump(); }

std::string stage_json(std::string_view key, std::string_view value_json) {
  const json known = flat_settings(Settings{});
  if (!known.contains(std::string(key))) return "unknown setting \"" + std::string(key) + "\"";
  json value;
  try {
    value = parse_limited(value_json, /*ignore_comments=*/false);
  } catch (const json::exception&) {
    return "not a JSON value: " + std::string(value_json);
  } catch (const TooDeep&) {
    return "not a JSON value: " + kTooDeep;
  }
  // Try it on top of what the next open would resolve. Values staged earlier were accepted,
  // so a problem line from the "API" origin is about this one.
  Staged trial = copy_staged();
  trial.by_key.merge_patch(nest(key, value));
  Resolution r = resolve_with(trial);
  for (const std::string& p : r.problems)
    if (p.rfind("API: ", 0) == 0) return p.substr(5, p.rfind("; keeping ") - 5);
  StagedStore& st = staged_store();
  std::lock_guard lock(st.mu);
  st.values.by_key.merge_patch(nest(key, std::move(value)));
  return {};
}

// ---- parsing -----------------------------------------------------------------------------------

std::optional<bool> parse_bool(std::string_view text) {
  std::string t = lower(text);
  if (t == "true" || t == "1" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "0" || t == "no" || t == "off") return false;
  return std::nullopt;
}

std::optional<size_t> parse_size(std::string_view text) {
  if (text.empty() || text.size() > 20) return std::nullopt;
  size_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    size_t digit = static_cast<size_t>(c - '0');
    if (v > (kUnlimited - digit) / 10) return std::nullopt;
    v = v * 10 + digit;
  }
  return v;
}

std::optional<EnginePolicy> parse_engine(std::string_view text) {
  std::string t = lower(text);
  if (t == "auto") return EnginePolicy::automatic;
  if (t == "io_uring" || t == "iouring") return EnginePolicy::io_uring;
  if (t == "posix") return EnginePolicy::posix;
  return std::nullopt;
}

std::optional<DirectIoPolicy> parse_direct_io(std::string_view text) {
  std::string t = lower(text);
  if (t == "auto") return DirectIoPolicy::automatic;
  if (t == "always") return DirectIoPolicy::always;
  if (t == "never") return DirectIoPolicy::never;
  return std::nullopt;
}

std::optional<CachePolicy> parse_cache_policy(std::string_view text) {
  std::string t = lower(text);
  if (t == "auto") return CachePolicy::automatic;
  if (t == "keep") return CachePolicy::keep;
  if (t == "bypass") return CachePolicy::bypass;
  return std::nullopt;
}

const char* cache_policy_name(CachePolicy c) {
  switch (c) {
    case CachePolicy::automatic: return "auto";
    case CachePolicy::keep: return "keep";
    case CachePolicy::bypass: return "bypass";
  }
  return "?";
}

std::optional<NumaPlacement> parse_numa_placement(std::string_view text) {
  std::string t = lower(text);
  if (t == "auto") return NumaPlacement::automatic;
  if (t == "off") return NumaPlacement::off;
  return std::nullopt;
}

const char* numa_placement_name(NumaPlacement p) {
  return p == NumaPlacement::off ? "off" : "auto";
}

std::optional<VendorPolicy> parse_vendor(std::string_view text) {
  std::string t = lower(text);
  if (t == "auto") return VendorPolicy::automatic;
  if (t == "on") return VendorPolicy::on;
  if (t == "off") return VendorPolicy::off;
  return std::nullopt;
}

const char* vendor_name(VendorPolicy v) {
  switch (v) {
    case VendorPolicy::automatic: return "auto";
    case VendorPolicy::on: return "on";
    case VendorPolicy::off: return "off";
  }
  return "?";
}

const char* engine_name(EnginePolicy e) {
  switch (e) {
    case EnginePolicy::automatic: return "auto";
    case EnginePolicy::io_uring: return "io_uring";
    case EnginePolicy::posix: return "posix";
  }
  return "?";
}

const char* direct_io_name(DirectIoPolicy d) {
  switch (d) {
    case DirectIoPolicy::automatic: return "auto";
    case DirectIoPolicy::always: return "always";
    case DirectIoPolicy::never: return "never";
  }
  return "?";
}

}  // namespace gpufile::config
