// The memory the page cache can hold (src/exec/memory_room.hpp), read from a fake OS whose
// /proc and /sys/fs/cgroup files are strings: the host's MemAvailable, cgroup v2 and v1 limits.
#include <gtest/gtest.h>

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "exec/memory_room.hpp"
#include "sys/os.hpp"

namespace gpufile::exec {
namespace {

constexpr uint64_t MiB = 1 << 20, GiB = 1 << 30;

// Serves the files in `files` (path -> text) and nothing else, and installs itself while alive.
class FileTextOs : public sys::Os {
 public:
  explicit FileTextOs(std::map<std::string, std::string> files) : files_(std::move(files)) {
    sys::set_os(this);
  }
  ~FileTextOs() override { sys::set_os(nullptr); }

  int open(const char* path, int, mode_t) override {
    auto it = files_.find(path);
    if (it == files_.end()) return -ENOENT;
    open_.push_back(&it->second);
    return static_cast<int>(kFirstFd + open_.size() - 1);
  }
  ssize_t pread(int fd, void* buf, size_t len, uint64_t off) override {
    const std::string& text = *open_.at(static_cast<size_t>(fd - kFirstFd));
    if (off >= text.size()) return 0;
    const size_t n = std::min(len, text.size() - off);
    std::memcpy(buf, text.data() + off, n);
    return static_cast<ssize_t>(n);
  }
  int close(int) override { return 0; }

 private:
  static constexpr int kFirstFd = 1000;
  std::map<std::string, std::string> files_;
  std::vector<const std::string*> open_;
};

std::string meminfo(uint64_t available_kb) {
  return "MemTotal:       24576000 kB\nMemFree:        20000000 kB\nMemAvailable:   " +
         std::to_string(available_kb) + " kB\nBuffers:           12345 kB\n";
}

TEST(MeminfoBytes, ReadsKilobytesAndBytesByWholeName) {
  EXPECT_EQ(meminfo_bytes(meminfo(1000), "MemAvailable"), 1000u * 1024);
  EXPECT_EQ(meminfo_bytes("anon 10\nfile_mapped 7\nfile 4096\n", "file"), 4096u);
  EXPECT_EQ(meminfo_bytes("cache 5\ntotal_cache 9\n", "total_cache"), 9u);
  EXPECT_EQ(meminfo_bytes(meminfo(1000), "Mem"), std::nullopt) << "a prefix is not a name";
  EXPECT_EQ(meminfo_bytes("MemAvailable: lots kB\n", "MemAvailable"), std::nullopt);
  EXPECT_EQ(meminfo_bytes("", "MemAvailable"), std::nullopt);
}

TEST(PageCacheRoom, TheHostsAvailableMemoryWithoutACgroupLimit) {
  FileTextOs os({{"/proc/meminfo", meminfo(16 * GiB / 1024)}, {"/proc/self/cgroup", "0::/\n"}});
  EXPECT_EQ(page_cache_room(), 16 * GiB);
}

TEST(PageCacheRoom, CgroupV2LimitLessWhatIsNotPageCache) {
  // 8 GiB limit; 6 GiB charged, 4 GiB of it page cache: 2 GiB is the job's own, 6 GiB is room.
  FileTextOs os({{"/proc/meminfo", meminfo(20 * GiB / 1024)},
                 {"/proc/self/cgroup", "0::/jobs/serve\n"},
                 {"/sys/fs/cgroup/jobs/serve/memory.max", std::to_string(8 * GiB) + "\n"},
                 {"/sys/fs/cgroup/jobs/serve/memory.current", std::to_string(6 * GiB) + "\n"},
                 {"/sys/fs/cgroup/jobs/serve/memory.stat",
                  "anon 2147483648\nfile " + std::to_string(4 * GiB) + "\nfile_mapped 1\n"}});
  EXPECT_EQ(page_cache_room(), 6 * GiB);
}

TEST(PageCacheRoom, TheTighterOfHostAndCgroupWins) {
  FileTextOs os({{"/proc/meminfo", meminfo(3 * GiB / 1024)},
                 {"/proc/self/cgroup", "0::/jobs/serve\n"},
                 {"/sys/fs/cgroup/jobs/serve/memory.max", std::to_string(8 * GiB)},
                 {"/sys/fs/cgroup/jobs/serve/memory.current", "0"},
                 {"/sys/fs/cgroup/jobs/serve/memory.stat", "file 0\n"}});
  EXPECT_EQ(page_cache_room(), 3 * GiB);
}

TEST(PageCacheRoom, CgroupV2WithoutALimit) {
  FileTextOs os({{"/proc/meminfo", meminfo(16 * GiB / 1024)},
                 {"/proc/self/cgroup", "0::/jobs/serve\n"},
                 {"/sys/fs/cgroup/jobs/serve/memory.max", "max\n"}});
  EXPECT_EQ(page_cache_room(), 16 * GiB);
}

TEST(PageCacheRoom, CgroupNamespaceReadsTheMountedRoot) {
  // Inside a container with its own cgroup namespace, /proc/self/cgroup says "/" and the mount
  // is the container's group.
  FileTextOs os({{"/proc/meminfo", meminfo(64 * GiB / 1024)},
                 {"/proc/self/cgroup", "0::/\n"},
                 {"/sys/fs/cgroup/memory.max", std::to_string(4 * GiB)},
                 {"/sys/fs/cgroup/memory.current", std::to_string(1 * GiB)},
                 {"/sys/fs/cgroup/memory.stat", "file 0\n"}});
  EXPECT_EQ(page_cache_room(), 3 * GiB);
}

TEST(PageCacheRoom, CgroupV1MemoryController) {
  FileTextOs os({{"/proc/meminfo", meminfo(64 * GiB / 1024)},
                 {"/proc/self/cgroup", "5:cpu,cpuacct:/x\n4:memory:/docker/abc\n0::/\n"},
                 {"/sys/fs/cgroup/memory/docker/abc/memory.limit_in_bytes", std::to_string(2 * GiB)},
                 {"/sys/fs/cgroup/memory/docker/abc/memory.usage_in_bytes", std::to_string(GiB)},
                 {"/sys/fs/cgroup/memory/docker/abc/memory.stat",
                  "cache 1\ntotal_cache " + std::to_string(512 * MiB) + "\n"}});
  EXPECT_EQ(page_cache_room(), 2 * GiB - 512 * MiB);
}

TEST(PageCacheRoom, CgroupV1UnlimitedIsTheHost) {
  // What this build machine's own cgroup says.
  FileTextOs os({{"/proc/meminfo", meminfo(22 * GiB / 1024)},
                 {"/proc/self/cgroup", "4:memory:/process_api/e43e\n0::/\n"},
                 {"/sys/fs/cgroup/memory/process_api/e43e/memory.limit_in_bytes",
                  "9223372036854771712\n"}});
  EXPECT_EQ(page_cache_room(), 22 * GiB);
}

TEST(PageCacheRoom, ACgroupAtItsLimitHasNoRoom) {
  FileTextOs os({{"/proc/meminfo", meminfo(22 * GiB / 1024)},
                 {"/proc/self/cgroup", "0::/full\n"},
                 {"/sys/fs/cgroup/full/memory.max", std::to_string(GiB)},
                 {"/sys/fs/cgroup/full/memory.current", std::to_string(2 * GiB)},
                 {"/sys/fs/cgroup/full/memory.stat", "file 0\n"}});
  EXPECT_EQ(page_cache_room(), 0u);
}

TEST(PageCacheRoom, ACgroupLimitAloneWhereMeminfoIsMissing) {
  FileTextOs os({{"/proc/self/cgroup", "0::/j\n"},
                 {"/sys/fs/cgroup/j/memory.max", std::to_string(GiB)},
                 {"/sys/fs/cgroup/j/memory.current", "0\n"},
                 {"/sys/fs/cgroup/j/memory.stat", "file 0\n"}});
  EXPECT_EQ(page_cache_room(), GiB);
}

TEST(PageCacheRoom, UnknownWhenNothingCanBeRead) {
  FileTextOs os({});
  EXPECT_EQ(page_cache_room(), std::nullopt);
}

TEST(PageCacheRoom, TheRealMachineSaysSomething) {
  // Every Linux host has /proc/meminfo with MemAvailable (since 3.14).
  const std::optional<uint64_t> room = page_cache_room();
  ASSERT_TRUE(room.has_value());
  EXPECT_GT(*room, 0u);
}

}  // namespace
}  // namespace gpufile::exec
