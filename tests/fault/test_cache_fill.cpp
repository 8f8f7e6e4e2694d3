// Reads that keep what they miss in the page cache fill it in large folios first
// (sys::Os::fill_cache, exec::fill_cache_first). What must hold: the fill brings the range in and
// never signals, even past the end of the file; a read under `keep` of bytes not cached fills
// before it reads, and one under `bypass`, or of bytes cached already, never does; a fill that
// fails changes nothing a caller sees.
//
// Method: the file's pages are really dropped (fdatasync + POSIX_FADV_DONTNEED, checked with
// cachestat); FaultyOs rules with probability 0 count fills without faulting them.
#include <fcntl.h>

#include <cstdlib>

#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

constexpr uint64_t MiB = 1 << 20;

class CacheFill : public FaultTest, public ::testing::WithParamInterface<const char*> {
 protected:
  CacheFill() { engine = GetParam(); }
  void before_open() override { set_policy("keep"); }
  void SetUp() override {
    FaultTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // Without O_DIRECT every read goes through the page cache whatever the policy.
    if (!direct_capable()) GTEST_SKIP() << "the file refuses O_DIRECT: no policy to apply";
    if (!evict()) GTEST_SKIP() << "the kernel kept the file's pages after DONTNEED";
  }
  void TearDown() override {
    FaultTest::TearDown();
    unsetenv("GPUFILE_CACHE_POLICY");
  }
  static void set_policy(const char* policy) { setenv("GPUFILE_CACHE_POLICY", policy, 1); }
  // Reopens the session under `policy`, the file's pages dropped again.
  void reopen_under(const char* policy) {
    cuFileHandleDeregister(fh);
    fh = nullptr;
    ASSERT_EQ(cuFileDriverClose().err, CU_FILE_SUCCESS);
    set_policy(policy);
    ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
    CUfileDescr_t d{};
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd;
    ASSERT_EQ(cuFileHandleRegister(&fh, &d).err, CU_FILE_SUCCESS);
    ASSERT_TRUE(evict());
  }
  size_t count_fills() {
    return faults.add({.op = FaultOp::fill_cache, .times = FaultRule::persistent, .probability = 0.0});
  }
  uint64_t cached_pages(uint64_t off, uint64_t len) {
    gpufile::sys::Residency r;
    return gpufile::sys::Os().cachestat(fd, off, len, &r) == 0 ? r.cached_pages : 0;
  }
  uint64_t pages(uint64_t len) const { return (len + 4095) / 4096; }
  // Drops the file's pages; false when the kernel kept some.
  bool evict() {
    ::fdatasync(fd);
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    gpufile::sys::Residency r;
    return gpufile::sys::Os().cachestat(fd, 0, file_size, &r) == 0 && r.cached_pages == 0;
  }
};

TEST_P(CacheFill, TheOsFillBringsARangeIntoTheCache) {
  const uint64_t off = 3 * MiB + 5 * 4096, len = 2 * MiB + 123;
  const int r = gpufile::sys::os().fill_cache(fd, off, len);
  if (r == -EOPNOTSUPP || r == -EINVAL) GTEST_SKIP() << "no MADV_POPULATE_READ here (" << r << ")";
  ASSERT_EQ(r, 0);
  EXPECT_EQ(cached_pages(off, len), pages(len + off % 4096));
  EXPECT_EQ(gpufile::sys::os().fill_cache(fd, off, 0), 0);
}

// Pages wholly past the end of the file cannot be brought in: the fill says so and the process
// gets no SIGBUS (a plain touch of such a mapping would raise one).
TEST_P(CacheFill, AFillPastTheEndFailsWithoutASignal) {
  const int r = gpufile::sys::os().fill_cache(fd, file_size - 100, 4 * MiB);
  if (r == -EOPNOTSUPP) GTEST_SKIP() << "no MADV_POPULATE_READ in these headers";
  EXPECT_LT(r, 0);
}

TEST_P(CacheFill, AFillNeedsReadAccess) {
  const int wronly = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(wronly, 0);
  EXPECT_EQ(gpufile::sys::os().fill_cache(wronly, 0, MiB), -EACCES);
  ::close(wronly);
}

TEST_P(CacheFill, AKeptReadFillsBeforeItReads) {
  const size_t fills = count_fills();
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  EXPECT_GE(faults.seen(fills), 1u) << "a read under keep of bytes not cached made no fill";
  EXPECT_EQ(cached_pages(0, file_size), pages(file_size));
}

TEST_P(CacheFill, ABypassedReadNeverFills) {
  ASSERT_NO_FATAL_FAILURE(reopen_under("bypass"));
  const size_t fills = count_fills();
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  EXPECT_EQ(faults.seen(fills), 0u);
}

TEST_P(CacheFill, AReadOfCachedBytesNeverFills) {
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);  // brings the file in
  ASSERT_EQ(cached_pages(0, file_size), pages(file_size));
  const size_t fills = count_fills();
  expect_read_exact(b, 0, file_size);
  EXPECT_EQ(faults.seen(fills), 0u);
}

// The fill is a hint: refused every time, the reads bring the bytes in themselves.
TEST_P(CacheFill, AFailedFillChangesNothingACallerSees) {
  const size_t refusals =
      faults.add({.op = FaultOp::fill_cache, .times = FaultRule::persistent, .err = ENOMEM});
  GuardedBuffer b(file_size, 7);
  expect_read_exact(b, 0, file_size);
  EXPECT_GE(faults.fired(refusals), 1u);
  EXPECT_EQ(cached_pages(0, file_size), pages(file_size));
}

INSTANTIATE_TEST_SUITE_P(Engines, CacheFill, ::testing::Values("posix", "io_uring"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param == std::string("posix") ? "posix" : "uring");
                         });

}  // namespace
}  // namespace fault
