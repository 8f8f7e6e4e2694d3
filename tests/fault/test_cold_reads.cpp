// Cold reads cut smaller (gpufile.cold_read_kb): a worker's O_DIRECT read of one piece goes to
// the kernel in reads of at most that size, the next issued when the last completes. What must
// hold: every byte arrives; no direct kernel read is longer than the cap; a kernel that answers
// short or fails midway through a piece is handled as it is for a whole piece (continued, or the
// call fails with the error and nothing more is reported).
//
// Method: every read runs on the workers (gpufile.small_io_kb 0) with O_DIRECT (direct_io
// always), slabs of 1 MiB cut into kernel reads of 64 KiB (UncutColdReads: not cut, the
// control); a FaultyOs rule of probability 0 counts the direct kernel reads without faulting any.
#include <cstdlib>

#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;

constexpr uint64_t KiB = 1024;
constexpr uint64_t kCap = 64 * KiB;

class ColdReads : public FaultTest, public ::testing::WithParamInterface<const char*> {
 protected:
  ColdReads() {
    engine = GetParam();
    direct_io = "always";
  }
  void before_open() override {
    setenv("GPUFILE_COLD_READ_KB", cap_kb, 1);
    setenv("GPUFILE_SMALL_IO_KB", "0", 1);
    setenv("GPUFILE_SLAB_SIZE_KB", "1024", 1);
  }
  void SetUp() override {
    FaultTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!direct_capable()) GTEST_SKIP() << "the file refuses O_DIRECT: no read goes past the page cache";
  }
  void TearDown() override {
    FaultTest::TearDown();
    for (const char* v : {"GPUFILE_COLD_READ_KB", "GPUFILE_SMALL_IO_KB", "GPUFILE_SLAB_SIZE_KB"}) unsetenv(v);
  }
  size_t count_direct_reads() { return count(FaultOp::any_read, /*direct_only=*/true); }
  // Direct bytes of a whole-file read: all but the file's last partial block at most.
  uint64_t direct_bytes() const { return file_size / 4096 * 4096; }

  const char* cap_kb = "64";  // GPUFILE_COLD_READ_KB
};

class UncutColdReads : public ColdReads {
 protected:
  UncutColdReads() { cap_kb = "0"; }
};

TEST_P(ColdReads, EveryByteArrivesInKernelReadsOfAtMostTheCap) {
  const size_t direct = count_direct_reads();
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  EXPECT_GE(faults.seen(direct), direct_bytes() / kCap) << "a direct kernel read was longer than the cap";
}

// The control: without the cap the same read takes far fewer direct kernel reads (a piece is at
// most a 1 MiB slab, cut no finer than 256 KiB), so the count above tells the cap's work.
TEST_P(UncutColdReads, APieceIsOneKernelRead) {
  const size_t direct = count_direct_reads();
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  EXPECT_GT(faults.seen(direct), 0u);
  EXPECT_LE(faults.seen(direct), file_size / (256 * KiB) + 2);
}

// A part answered short (not a multiple of the block: the rest of the piece continues through
// the page cache, as for any short direct read).
TEST_P(ColdReads, APartAnsweredShortIsContinued) {
  const size_t shortened = faults.add({.op = FaultOp::any_read, .direct_only = true, .nth = 3,
                                       .times = 4, .action = FaultAction::short_io, .limit = 1000});
  GuardedBuffer b(file_size, 0);
  expect_read_exact(b, 0, file_size);
  EXPECT_EQ(faults.fired(shortened), 4u);
}

// A later part of a piece fails: the call fails with that error, and reports no bytes.
TEST_P(ColdReads, APartThatFailsFailsTheCall) {
  const size_t failed = faults.add({.op = FaultOp::any_read, .direct_only = true, .nth = 6, .err = EIO});
  GuardedBuffer b(file_size, 0);
  errno = 0;
  EXPECT_EQ(read(b, 0, file_size), -1);
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(faults.fired(failed), 1u);
  EXPECT_TRUE(b.guards_intact());
  // The next read, the fault spent, is whole.
  expect_read_exact(b, 0, file_size);
}

std::string engine_name(const ::testing::TestParamInfo<const char*>& i) { return i.param; }
INSTANTIATE_TEST_SUITE_P(Engines, ColdReads, ::testing::Values("posix", "io_uring"), engine_name);
INSTANTIATE_TEST_SUITE_P(Engines, UncutColdReads, ::testing::Values("posix", "io_uring"), engine_name);

}  // namespace
}  // namespace fault
