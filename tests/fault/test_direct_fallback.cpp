// O_DIRECT refused (matrix rows 19, 20). A file may accept O_DIRECT at open and still refuse a
// direct IO with EINVAL (some overlayfs, FUSE and NFS set-ups), or refuse O_DIRECT at open.
// Either way the library must go through the page cache and succeed, and must not loop
// retrying the direct path.
//
// Method: GPUFILE_DIRECT_IO=always so the aligned body of every request is tried with
// O_DIRECT; FaultyOs fails only IO on O_DIRECT fds (or O_DIRECT opens) with EINVAL.
#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

class DirectFallback : public FaultIo {
 protected:
  DirectFallback() { direct_io = "always"; }
  void SetUp() override {
    FaultIo::SetUp();
    if (!IsSkipped() && !HasFatalFailure() && !direct_capable())
      GTEST_SKIP() << "this file system refuses O_DIRECT: nothing to fall back from";
  }
};

// The most chunks a request can be cut into: pieces of at least gpufile.min_chunk_kb (256 KiB
// by default), one more where the request does not start on the grid.
size_t most_chunks(size_t bytes) { return bytes / (256 * 1024) + 2; }

TEST_P(DirectFallback, EinvalOnDirectReadsFallsBackToThePageCache) {
  GuardedBuffer b = buffer();
  size_t id = faults.add({.op = FaultOp::any_read, .direct_only = true,
                          .times = FaultRule::persistent, .err = EINVAL});
  expect_read_exact(b, off(), size());
  EXPECT_GT(faults.fired(id), 0u) << "the read never tried O_DIRECT";
  // Once per direct segment (at most one per chunk), not a retry loop.
  EXPECT_LE(faults.fired(id), (chunked() ? most_chunks(size()) : 1u));
}

TEST_P(DirectFallback, EinvalOnDirectWritesFallsBackToThePageCache) {
  GuardedBuffer b = buffer();
  size_t id = faults.add({.op = FaultOp::any_write, .direct_only = true,
                          .times = FaultRule::persistent, .err = EINVAL});
  expect_write_exact(b, off(), size());
  EXPECT_GT(faults.fired(id), 0u) << "the write never tried O_DIRECT";
  EXPECT_LE(faults.fired(id), (chunked() ? most_chunks(size()) : 1u));
}

// Row 19: O_DIRECT refused at open (tmpfs before Linux 6.6, some FUSE).
TEST_P(DirectFallback, DirectOpenRefusedMeansPageCacheIo) {
  size_t id = faults.add({.op = FaultOp::open, .direct_only = true,
                          .times = FaultRule::persistent, .err = EINVAL});
  reregister();
  EXPECT_GT(faults.fired(id), 0u);
  EXPECT_FALSE(direct_capable());
  GuardedBuffer b = buffer();
  expect_read_exact(b, off(), size());
  expect_write_exact(b, off(), size());
}

INSTANTIATE_TEST_SUITE_P(Matrix, DirectFallback, all_cases(), case_name);

}  // namespace
}  // namespace fault
