// How much memory the page cache can hold for this process: what gpufile.cache_policy=auto
// weighs a file against (route::choose_cache).
//
// Two limits; the tighter one wins:
//   the host     MemAvailable of /proc/meminfo: the kernel's estimate of what can be had
//                without swapping (free memory plus the page cache and slabs it can reclaim);
//   the cgroup   where the process's memory cgroup has a limit (v2 memory.max, v1
//                memory.limit_in_bytes): that limit less what the cgroup holds that is not page
//                cache (v2 memory.current less memory.stat's "file"; v1 memory.usage_in_bytes
//                less "total_cache"). Page cache charged to the cgroup is reclaimed within it,
//                so it counts as room.
// Only the process's own cgroup is read, not the limits of the groups above it.
//
// Every file is read through the OS seam (sys::read_small_file): tests fake them.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace gpufile::exec {

// The value of a "Name:  123 kB" line of /proc/meminfo (or a "name 123" line of memory.stat),
// in bytes; nullopt when there is no such line or it does not parse.
std::optional<uint64_t> meminfo_bytes(std::string_view text, std::string_view name);

// The bytes the page cache can hold; nullopt when neither the host nor a cgroup says.
std::optional<uint64_t> page_cache_room();

}  // namespace gpufile::exec
