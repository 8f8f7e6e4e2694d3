// gpufile.cache_policy (route::choose_cache): what a read that misses the page cache leaves
// there. The file's pages are dropped first (posix_fadvise DONTNEED: clean pages go without
// root), a whole-file cuFileRead runs under the policy, every byte is checked, and the page
// cache is asked (cachestat, or mincore on kernels before 6.5) how much of the file it holds.
#include <sys/mman.h>

#include <cstdlib>
#include <optional>

#include "common.hpp"
#include "exec/runtime.hpp"
#include "sys/faulty_os.hpp"
#include "sys/os.hpp"

namespace capi_test {
namespace {

constexpr size_t MiB = 1024 * 1024;

// Pages of `path` in the page cache, and the file's pages in all.
struct Cached {
  uint64_t pages = 0, total = 0;
};

std::optional<Cached> cached_pages(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  const uint64_t size = file_size(path);
  gpufile::sys::Residency r;
  std::optional<Cached> out;
  if (gpufile::sys::os().cachestat(fd, 0, size, &r) == 0) {
    out = Cached{r.cached_pages, r.total_pages};
  } else if (void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0); map != MAP_FAILED) {
    const uint64_t pages = (size + 4095) / 4096;
    std::vector<unsigned char> in(pages);
    if (::mincore(map, size, in.data()) == 0) {
      out = Cached{0, pages};
      for (unsigned char page : in) out->pages += page & 1;
    }
    ::munmap(map, size);
  }
  ::close(fd);
  return out;
}

class CachePolicy : public CapiTest {
 protected:
  static constexpr size_t kFileSize = 16 * MiB;

  void SetUp() override {
    CapiTest::SetUp();
    seed_ = test_seed();
    path_ = dir_.file("weights.bin");
    shadow_ = Rng(seed_).bytes(kFileSize);
    ASSERT_NO_FATAL_FAILURE(write_file(path_, shadow_.data(), shadow_.size()));
    // On tmpfs every read is a page-cache read whatever the policy: nothing to tell apart.
    if (!direct_io_works(dir_.path())) GTEST_SKIP() << "no O_DIRECT in " << dir_.path();
    if (!cached_pages(path_)) GTEST_SKIP() << "neither cachestat nor mincore answers here";
  }
  void TearDown() override {
    unsetenv("GPUFILE_CACHE_POLICY");
    CapiTest::TearDown();
  }

  // Writes the file back, drops its pages, and checks that they went.
  void drop_pages() {
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(::fdatasync(fd), 0);
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
    ::close(fd);
    const std::optional<Cached> c = cached_pages(path_);
    ASSERT_TRUE(c);
    ASSERT_EQ(c->pages, 0u) << "DONTNEED left pages of the file cached";
  }

  // A session under `policy` (nullptr: the default), the file's pages dropped, one read of the
  // whole file into `mem` through a descriptor opened with `flags`, every byte checked; then
  // how much of the file is cached.
  Cached read_cold(const char* policy, Mem mem, gpufile::Runtime::FileReport* report = nullptr,
                   int flags = O_RDONLY) {
    if (policy) setenv("GPUFILE_CACHE_POLICY", policy, 1);
    else unsetenv("GPUFILE_CACHE_POLICY");
    DriverSession session;
    EXPECT_TRUE(session.ok()) << session.error();
    std::string why;
    auto buf = Buffer::make(mem, kFileSize, &why);
    EXPECT_TRUE(buf) << why;
    Handle h(path_, flags);
    EXPECT_TRUE(h.ok());
    if (!session.ok() || !buf || !h.ok()) return {};
    drop_pages();
    if (HasFatalFailure()) return {};
    if (report) gpufile::Runtime::instance().explain_file(h.get(), report);
    EXPECT_EQ(cuFileRead(h.get(), buf->ptr(), kFileSize, 0, 0), static_cast<ssize_t>(kFileSize));
    EXPECT_EQ(first_mismatch(buf->read_back(0, kFileSize).data(), shadow_.data(), kFileSize), "")
        << "seed " << seed_;
    return cached_pages(path_).value_or(Cached{});
  }

  TempDir dir_;
  uint64_t seed_ = 0;
  std::string path_;
  std::vector<uint8_t> shadow_;
};

TEST_F(CachePolicy, KeepLeavesTheFileCached) {
  CAPI_REQUIRE_DRIVER();
  gpufile::Runtime::FileReport report;
  const Cached c = read_cold("keep", Mem::device, &report);
  EXPECT_EQ(report.cache.why, gpufile::route::Reason::cache_keep);
  EXPECT_EQ(report.read.why, gpufile::route::Reason::not_cached_kept)
      << gpufile::route::describe(report.read.why);
  EXPECT_EQ(c.total, kFileSize / 4096);
  EXPECT_EQ(c.pages, c.total) << "a read under keep left pages of the file uncached";
}

TEST_F(CachePolicy, BypassLeavesThePageCacheAsItWas) {
  CAPI_REQUIRE_DRIVER();
  gpufile::Runtime::FileReport report;
  const Cached c = read_cold("bypass", Mem::device, &report);
  EXPECT_EQ(report.cache.why, gpufile::route::Reason::cache_bypass);
  EXPECT_EQ(report.read.why, gpufile::route::Reason::not_cached);
  EXPECT_EQ(c.total, kFileSize / 4096);
  // O_DIRECT reads bring nothing into the cache; a page or two of slack for a stray readahead.
  EXPECT_LE(c.pages * 100, c.total) << c.pages << " pages cached after an O_DIRECT read";
}

// The default: auto weighs the file against the memory the page cache can hold. 16 MiB fits on
// any machine that runs these tests.
TEST_F(CachePolicy, AutoKeepsAFileThatFits) {
  CAPI_REQUIRE_DRIVER();
  gpufile::Runtime::FileReport report;
  const Cached c = read_cold(nullptr, Mem::device, &report);
  ASSERT_TRUE(report.cache_room) << "the memory the page cache can hold was not read";
  ASSERT_GE(*report.cache_room, 2 * kFileSize);
  EXPECT_EQ(report.cache.why, gpufile::route::Reason::cache_fits)
      << gpufile::route::describe(report.cache.why);
  EXPECT_EQ(c.pages, c.total);
}

// Host memory is read into directly, not staged: the same choice holds there.
TEST_F(CachePolicy, KeepAndBypassIntoHostMemory) {
  EXPECT_EQ(read_cold("keep", Mem::pageable).pages, kFileSize / 4096);
  EXPECT_LE(read_cold("bypass", Mem::pageable).pages * 100, kFileSize / 4096);
}

// A caller that opened the file O_DIRECT (as GDS programs do) is read through gpufile's own
// page-cache descriptor, which reads no further than asked (registry.cpp says why): its pages
// come in as the kernel's smallest folios unless the read fills them in first, and then a next
// start reads them at half speed (docs/performance.md, "Restarts: the page cache across
// starts"). Under keep, each piece is filled before it is read.
TEST_F(CachePolicy, AFileOpenedDirectIsFilledBeforeItIsRead) {
  CAPI_REQUIRE_DRIVER();
  gpufile::sys::FaultyOs faults;
  gpufile::sys::ScopedOs use(faults);
  const size_t fills = faults.add({.op = gpufile::sys::FaultOp::fill_cache,
                                   .times = gpufile::sys::FaultRule::persistent, .probability = 0.0});
  gpufile::Runtime::FileReport report;
  const Cached c = read_cold("keep", Mem::device, &report, O_RDONLY | O_DIRECT);
  EXPECT_EQ(report.read.why, gpufile::route::Reason::not_cached_kept)
      << gpufile::route::describe(report.read.why);
  EXPECT_EQ(c.pages, c.total) << "a read under keep left pages of the file uncached";
  // One fill per piece the workers and the caller read: the 16 MiB file is more than one piece,
  // and no piece of 2 MiB or more is filled twice.
  EXPECT_GE(faults.seen(fills), 2u);
  EXPECT_LE(faults.seen(fills), kFileSize / (2 * MiB));
}

// After a read under keep, the next session finds the file cached and reads it from there.
TEST_F(CachePolicy, TheNextSessionFindsTheFileCached) {
  CAPI_REQUIRE_DRIVER();
  ASSERT_EQ(read_cold("keep", Mem::device).pages, kFileSize / 4096);
  unsetenv("GPUFILE_CACHE_POLICY");
  DriverSession session;
  ASSERT_TRUE(session.ok()) << session.error();
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  gpufile::Runtime::FileReport report;
  ASSERT_EQ(gpufile::Runtime::instance().explain_file(h.get(), &report).code, gpufile::Errc::ok);
  EXPECT_EQ(report.read.why, gpufile::route::Reason::cached);
}

}  // namespace
}  // namespace capi_test
