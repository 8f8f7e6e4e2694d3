// Silent corruption: the library cannot see a flipped byte, but a checksum must. This shows
// the corrupt action really reaches the caller's bytes (so tests built on it mean something);
// it is not a library feature.
//
// Method: FaultyOs flips one byte of every pread; the test compares FNV-1a checksums of the
// destination and of the shadow. io_uring completions carry no buffer, so the chunked reads of
// the io_uring engine (which never call pread) cannot be corrupted this way.
#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

using Corruption = FaultIo;

TEST_P(Corruption, FlippedBytesAreCaughtByAChecksum) {
  if (uring() && chunked()) GTEST_SKIP() << "io_uring results carry no buffer to corrupt";
  GuardedBuffer b = buffer();
  size_t id = faults.add({.op = FaultOp::pread, .times = FaultRule::persistent,
                          .action = FaultAction::corrupt});
  ASSERT_EQ(read(b, off(), size()), static_cast<ssize_t>(size()));
  const uint64_t want = checksum(shadow.data() + off(), size());
  EXPECT_NE(checksum(b.data(), size()), want) << "the corruption went unnoticed";
  // Each kernel read flipped exactly one of its own bytes.
  size_t differ = 0;
  for (size_t i = 0; i < size(); ++i) differ += b.data()[i] != shadow[off() + i];
  EXPECT_EQ(differ, faults.fired(id));

  faults.clear();
  ASSERT_EQ(read(b, off(), size()), static_cast<ssize_t>(size()));
  EXPECT_EQ(checksum(b.data(), size()), want);
}

INSTANTIATE_TEST_SUITE_P(Matrix, Corruption, all_cases(), case_name);

}  // namespace
}  // namespace fault
