// Reads that keep what they miss in the page cache fill it in large folios first
// (sys::Os::fill_cache, exec::fill_cache_first). What must hold: the fill brings the range in and
// never signals, even past the end of the file; a read under `keep` of bytes not cached, through
// a read-only handle, fills each segment of 2 MiB or more once, before reading it; one under
// `bypass`, of bytes cached already, a small one, or through a handle that can write never
// fills; a fill that fails changes nothing a caller sees.
//
// Method: the file's pages are really dropped (fdatasync + POSIX_FADV_DONTNEED, checked with
// cachestat); FaultyOs rules with probability 0 count fills without faulting them, and rules
// that delay by 0 put fills and reads in the FaultyOs journal in the order they happened.
#include <fcntl.h>
#include <sys/mman.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

constexpr uint64_t MiB = 1 << 20;

// Whether this kernel populates mappings on request (MADV_POPULATE_READ, Linux 5.14).
bool kernel_populates() {
#ifdef MADV_POPULATE_READ
  void* p = ::mmap(nullptr, 4096, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = ::madvise(p, 4096, MADV_POPULATE_READ) == 0;
  ::munmap(p, 4096);
  return ok;
#else
  return false;
#endif
}

class CacheFill : public FaultTest, public ::testing::WithParamInterface<const char*> {
 protected:
  CacheFill() { engine = GetParam(); }
  void before_open() override { set_policy("keep"); }
  void SetUp() override {
    FaultTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // Without O_DIRECT every read goes through the page cache whatever the policy.
    if (!direct_capable()) GTEST_SKIP() << "the file refuses O_DIRECT: no policy to apply";
    // Loaders open checkpoints read-only, and only read-only handles fill: register one.
    ro = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    ASSERT_GE(ro, 0);
    ASSERT_NO_FATAL_FAILURE(register_fd(ro));
    if (!evict(0, file_size)) GTEST_SKIP() << "the kernel kept the file's pages after DONTNEED";
  }
  void TearDown() override {
    FaultTest::TearDown();
    if (ro >= 0) ::close(ro);
    unsetenv("GPUFILE_CACHE_POLICY");
  }
  static void set_policy(const char* policy) { setenv("GPUFILE_CACHE_POLICY", policy, 1); }
  void register_fd(int which) {
    if (fh) cuFileHandleDeregister(fh);
    fh = nullptr;
    CUfileDescr_t d{};
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = which;
    ASSERT_EQ(cuFileHandleRegister(&fh, &d).err, CU_FILE_SUCCESS);
  }
  // Reopens the session under `policy`, the read-only handle registered, the pages dropped.
  void reopen_under(const char* policy) {
    cuFileHandleDeregister(fh);
    fh = nullptr;
    ASSERT_EQ(cuFileDriverClose().err, CU_FILE_SUCCESS);
    set_policy(policy);
    ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
    ASSERT_NO_FATAL_FAILURE(register_fd(ro));
    ASSERT_TRUE(evict(0, file_size));
  }
  // Puts every call of `op` in the journal, in order, changing nothing.
  void journal(FaultOp op) {
    faults.add({.op = op, .times = FaultRule::persistent, .action = FaultAction::delay, .delay_us = 0});
  }
  uint64_t cached_pages(uint64_t off, uint64_t len) {
    const auto r = residency(off, len);
    return r ? r->cached_pages : 0;
  }
  uint64_t pages(uint64_t len) const { return (len + 4095) / 4096; }

  int ro = -1;
};

TEST_P(CacheFill, TheOsFillBringsARangeIntoTheCache) {
  if (!kernel_populates()) GTEST_SKIP() << "no MADV_POPULATE_READ in this kernel";
  const uint64_t off = 3 * MiB + 5 * 4096, len = 2 * MiB + 123;
  ASSERT_EQ(gpufile::sys::os().fill_cache(fd, off, len), 0);
  EXPECT_EQ(cached_pages(off, len), pages(len + off % 4096));
  EXPECT_EQ(gpufile::sys::os().fill_cache(fd, off, 0), 0);
}

// Pages wholly past the end of the file cannot be brought in: the fill says so and the process
// gets no SIGBUS (a plain touch of such a mapping would raise one).
TEST_P(CacheFill, AFillPastTheEndFailsWithoutASignal) {
  if (!kernel_populates()) GTEST_SKIP() << "no MADV_POPULATE_READ in this kernel";
  EXPECT_EQ(gpufile::sys::os().fill_cache(fd, file_size - 100, 4 * MiB), -EFAULT);
}

TEST_P(CacheFill, AFillNeedsReadAccess) {
  const int wronly = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  ASSERT_GE(wronly, 0);
  EXPECT_EQ(gpufile::sys::os().fill_cache(wronly, 0, MiB), -EACCES);
  ::close(wronly);
}

TEST_P(CacheFill, AKeptReadFillsBeforeItReads) {
  const size_t fills = count(FaultOp::fill_cache);
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  // One fill per segment of 2 MiB or more: at least one, at most one per whole 2 MiB.
  EXPECT_GE(faults.seen(fills), 1u) << "a read under keep of bytes not cached made no fill";
  EXPECT_LE(faults.seen(fills), file_size / (2 * MiB)) << "a segment was filled more than once";
  EXPECT_EQ(cached_pages(0, file_size), pages(file_size));
}

// The order, from the journal: every kernel read of a filled segment comes after its fill.
// (The posix engine: io_uring's reads reach the journal as results, without their offsets.)
TEST_P(CacheFill, EachSegmentIsFilledBeforeItIsRead) {
  if (engine != std::string("posix")) GTEST_SKIP() << "reads are journaled with offsets by posix";
  journal(FaultOp::fill_cache);
  journal(FaultOp::pread);
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  struct Range { uint64_t off, len; };
  std::vector<Range> filled;
  size_t reads_checked = 0;
  std::istringstream lines(faults.journal());
  for (std::string line; std::getline(lines, line);) {
    char op[32] = {};
    int at_fd = -1;
    unsigned long long off = 0, len = 0;
    ASSERT_EQ(std::sscanf(line.c_str(), "%31s fd %d off %llu len %llu", op, &at_fd, &off, &len), 4) << line;
    if (std::string(op) == "fill_cache") {
      filled.push_back({off, len});
    } else if (len >= 2 * MiB) {  // a read of a segment the rule fills
      const bool covered = std::any_of(filled.begin(), filled.end(), [&](const Range& f) {
        return f.off <= off && off + len <= f.off + f.len;
      });
      EXPECT_TRUE(covered) << "read before its fill: " << line << "\n" << faults.journal();
      ++reads_checked;
    }
  }
  EXPECT_GE(reads_checked, 1u) << faults.journal();
}

TEST_P(CacheFill, ASmallKeptReadNeverFills) {
  const size_t fills = count(FaultOp::fill_cache);
  GuardedBuffer b(4096, 0);
  expect_read_exact(b, 5 * MiB, 4096);
  EXPECT_EQ(faults.seen(fills), 0u) << "a 4 KiB read filled (a fill reads whole 2 MiB folios)";
}

// A handle that can write does not fill: the fill reads around what is asked, and gpufile's own
// page-cache descriptor reads no further than asked so as not to race the handle's O_DIRECT
// writes (registry.cpp).
TEST_P(CacheFill, AHandleThatCanWriteNeverFills) {
  ASSERT_NO_FATAL_FAILURE(register_fd(fd));  // the fixture's O_RDWR descriptor
  ASSERT_TRUE(evict(0, file_size));
  const size_t fills = count(FaultOp::fill_cache);
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  EXPECT_EQ(faults.seen(fills), 0u);
  EXPECT_EQ(cached_pages(0, file_size), pages(file_size)) << "keep still keeps what it reads";
}

TEST_P(CacheFill, ABypassedReadNeverFills) {
  ASSERT_NO_FATAL_FAILURE(reopen_under("bypass"));
  const size_t fills = count(FaultOp::fill_cache);
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  EXPECT_EQ(faults.seen(fills), 0u);
}

TEST_P(CacheFill, AReadOfCachedBytesNeverFills) {
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);  // brings the file in
  ASSERT_EQ(cached_pages(0, file_size), pages(file_size));
  const size_t fills = count(FaultOp::fill_cache);
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
