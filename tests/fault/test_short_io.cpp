// Short transfers (matrix rows 1-3): the kernel may move fewer bytes than asked at any call,
// and the library must continue until done, never reporting a short count except at end of
// file, and never a write count larger than what reached the file.
//
// Method: a FaultyOs rule shortens every kernel read or write (pread/pwrite, or the io_uring
// completion result) to k bytes; data is checked byte by byte against the shadow.
#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

class ShortIo : public FaultIo {
 protected:
  // Odd, so every continuation starts unaligned (and an O_DIRECT segment must switch over).
  uint64_t k() const { return chunked() ? 256 * 1024 - 1 : 1000; }
};

TEST_P(ShortIo, ShortReadAtEveryCallStillReadsEveryByte) {
  GuardedBuffer b = buffer();
  size_t id = faults.add({.op = FaultOp::any_read, .times = FaultRule::persistent,
                          .action = FaultAction::short_io, .limit = k()});
  expect_read_exact(b, off(), size());
  EXPECT_GE(faults.fired(id), size() / k());
}

TEST_P(ShortIo, ShortWriteAtEveryCallStillWritesEveryByte) {
  GuardedBuffer b = buffer();
  size_t id = faults.add({.op = FaultOp::any_write, .times = FaultRule::persistent,
                          .action = FaultAction::short_io, .limit = k()});
  expect_write_exact(b, off(), size());
  EXPECT_GE(faults.fired(id), size() / k());
}

// Row 3: a disk filling up mid-write answers short, then ENOSPC. The call must fail: a
// success count would claim bytes that never reached the file.
TEST_P(ShortIo, ShortThenEnospcWriteIsNeverReportedComplete) {
  GuardedBuffer b = buffer();
  fill_random(b.data(), size(), seed() ^ 0x77);
  faults.add({.op = FaultOp::any_write, .times = FaultRule::persistent,
              .action = FaultAction::short_io, .limit = k()});
  size_t full = faults.add({.op = FaultOp::any_write, .nth = 3, .times = FaultRule::persistent,
                            .err = ENOSPC});
  errno = 0;
  ssize_t n = write(b, off(), size());
  EXPECT_EQ(n, -1);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_GT(faults.fired(full), 0u);
  // Nothing outside the request changed on disk.
  std::vector<char> disk(shadow.size());
  ASSERT_EQ(::pread(fd, disk.data(), disk.size(), 0), static_cast<ssize_t>(disk.size()));
  EXPECT_EQ(first_mismatch(disk.data(), shadow.data(), off()), SIZE_MAX);
  const uint64_t end = off() + size();
  EXPECT_EQ(first_mismatch(disk.data() + end, shadow.data() + end, shadow.size() - end), SIZE_MAX);

  // Space freed: the same write now succeeds.
  faults.clear();
  expect_write_exact(b, off(), size());
}

INSTANTIATE_TEST_SUITE_P(Matrix, ShortIo, all_cases(), case_name);

}  // namespace
}  // namespace fault
