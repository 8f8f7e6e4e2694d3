#include "exec/memory_room.hpp"

#include <algorithm>
#include <charconv>
#include <string>
#include <vector>

#include "sys/os.hpp"

namespace gpufile::exec {
namespace {

constexpr const char* kCgroupMount = "/sys/fs/cgroup";

// cgroup v1 writes "no limit" as the largest page-aligned signed value; anything this large is
// no limit on any real machine.
constexpr uint64_t kNoLimit = uint64_t{1} << 60;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
  return s;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  s = trim(s);
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The process's cgroup paths from /proc/self/cgroup: the unified (v2) one, and v1's memory one.
struct CgroupPaths {
  std::optional<std::string> unified;
  std::optional<std::string> v1_memory;
};

bool lists_memory(std::string_view controllers) {
  while (!controllers.empty()) {
    const size_t comma = controllers.find(',');
    if (controllers.substr(0, comma) == "memory") return true;
    if (comma == std::string_view::npos) break;
    controllers.remove_prefix(comma + 1);
  }
  return false;
}

CgroupPaths cgroup_paths(std::string_view text) {
  CgroupPaths out;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    const size_t c1 = line.find(':');
    const size_t c2 = c1 == std::string_view::npos ? c1 : line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) continue;
    const std::string_view hierarchy = line.substr(0, c1);
    const std::string_view controllers = line.substr(c1 + 1, c2 - c1 - 1);
    const std::string path(line.substr(c2 + 1));
    if (hierarchy == "0" && controllers.empty()) out.unified = path;
    else if (lists_memory(controllers)) out.v1_memory = path;
  }
  return out;
}

// A cgroup's limit less what it holds that is not page cache; nullopt when it has no limit.
std::optional<uint64_t> room_under(uint64_t limit, const std::string& usage_text,
                                   const std::string& stat_text, std::string_view cache_key) {
  if (limit >= kNoLimit) return std::nullopt;
  const uint64_t usage = parse_u64(usage_text).value_or(0);
  const uint64_t cached = std::min(usage, meminfo_bytes(stat_text, cache_key).value_or(0));
  const uint64_t not_cache = usage - cached;
  return limit > not_cache ? limit - not_cache : 0;
}

// The process's own group first; then the hierarchy's root as mounted, which is the process's
// group where the container has a cgroup namespace of its own (its /proc/self/cgroup says "/").
std::vector<std::string> group_dirs(const std::string& mount, const std::string& path) {
  if (path.empty() || path == "/") return {mount};
  return {mount + path, mount};
}

std::optional<uint64_t> cgroup_room() {
  const CgroupPaths paths = cgroup_paths(sys::read_small_file("/proc/self/cgroup"));
  if (paths.unified) {
    for (const std::string& dir : group_dirs(kCgroupMount, *paths.unified)) {
      const std::string max = sys::read_small_file(dir + "/memory.max");
      if (max.empty()) continue;
      const std::optional<uint64_t> limit = parse_u64(max);  // "max": no limit
      if (!limit) return std::nullopt;
      return room_under(*limit, sys::read_small_file(dir + "/memory.current"),
                        sys::read_small_file(dir + "/memory.stat"), "file");
    }
  }
  if (paths.v1_memory) {
    for (const std::string& dir : group_dirs(std::string(kCgroupMount) + "/memory", *paths.v1_memory)) {
      const std::optional<uint64_t> limit =
          parse_u64(sys::read_small_file(dir + "/memory.limit_in_bytes"));
      if (!limit) continue;
      return room_under(*limit, sys::read_small_file(dir + "/memory.usage_in_bytes"),
                        sys::read_small_file(dir + "/memory.stat"), "total_cache");
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<uint64_t> meminfo_bytes(std::string_view text, std::string_view name) {
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (line.size() <= name.size() || line.substr(0, name.size()) != name) continue;
    const char after = line[name.size()];
    if (after != ':' && after != ' ') continue;
    line.remove_prefix(name.size() + 1);
    uint64_t scale = 1;
    if (trim(line).ends_with(" kB")) {
      line = trim(line);
      line.remove_suffix(3);
      scale = 1024;
    }
    const std::optional<uint64_t> v = parse_u64(line);
    if (!v) return std::nullopt;
    return *v * scale;
  }
  return std::nullopt;
}

std::optional<uint64_t> page_cache_room() {
  const std::optional<uint64_t> host =
      meminfo_bytes(sys::read_small_file("/proc/meminfo"), "MemAvailable");
  const std::optional<uint64_t> group = cgroup_room();
  if (host && group) return std::min(*host, *group);
  return host ? host : group;
}

}  // namespace gpufile::exec
