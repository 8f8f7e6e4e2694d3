// Kernel errors in the middle of a transfer (matrix rows 4, 5, 7, 8, 10).
//
//   EINTR / EAGAIN   transient: retried, the call succeeds. Persistent EAGAIN: an error after a
//                    bounded number of retries, quickly, never a hang.
//   EIO              the whole call fails with EIO; sibling chunks are drained first (nothing
//                    is written to the caller's buffer after return); the handle stays usable.
//   ENOSPC           the call fails with ENOSPC; bytes outside the request never change; the
//                    write succeeds once space is back.
//
// Method: FaultyOs rules on every kernel read or write (pread/pwrite or io_uring results),
// countdown loops over the position of the failing call (SQLite's fault-simulation style).
#include <thread>

#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

using Errors = FaultIo;
using Clock = std::chrono::steady_clock;

TEST_P(Errors, TransientEintrAndEagainAreRetried) {
  GuardedBuffer b = buffer();
  for (int err : {EINTR, EAGAIN}) {
    SCOPED_TRACE(std::strerror(err));
    faults.clear();
    size_t r = faults.add({.op = FaultOp::any_read, .err = err});
    expect_read_exact(b, off(), size());
    EXPECT_EQ(faults.fired(r), 1u);
    size_t w = faults.add({.op = FaultOp::any_write, .err = err});
    expect_write_exact(b, off(), size());
    EXPECT_EQ(faults.fired(w), 1u);
  }
}

// Half of all calls interrupted, at random (seeded).
TEST_P(Errors, EintrAndEagainStormIsRetried) {
  GuardedBuffer b = buffer();
  for (int err : {EINTR, EAGAIN}) {
    SCOPED_TRACE(std::strerror(err));
    faults.clear();
    faults.add({.op = FaultOp::any_read, .times = FaultRule::persistent, .probability = 0.5,
                .err = err});
    faults.add({.op = FaultOp::any_write, .times = FaultRule::persistent, .probability = 0.5,
                .err = err});
    expect_read_exact(b, off(), size());
    expect_write_exact(b, off(), size());
    EXPECT_GT(faults.fired_total(), 0u);
  }
}

// The same storm over a transfer that the kernel also moves in small pieces, as under a signal
// storm (SIGALRM every 100 µs): every interruption is followed by progress, so none of them
// may count towards giving up.
TEST_P(Errors, EintrAndEagainBetweenShortTransfersAreRetried) {
  GuardedBuffer b = buffer();
  const uint64_t k = chunked() ? 16 * 1024 + 1 : 1000;
  for (int err : {EINTR, EAGAIN}) {
    SCOPED_TRACE(std::strerror(err));
    faults.clear();
    for (FaultOp op : {FaultOp::any_read, FaultOp::any_write}) {
      faults.add({.op = op, .times = FaultRule::persistent, .action = FaultAction::short_io,
                  .limit = k});
      faults.add({.op = op, .times = FaultRule::persistent, .probability = 0.5, .err = err});
    }
    expect_read_exact(b, off(), size());
    expect_write_exact(b, off(), size());
  }
}

TEST_P(Errors, PersistentEagainFailsInBoundedTime) {
  GuardedBuffer b = buffer();
  for (FaultOp op : {FaultOp::any_read, FaultOp::any_write}) {
    const bool reading = op == FaultOp::any_read;
    SCOPED_TRACE(reading ? "read" : "write");
    faults.clear();
    size_t id = faults.add({.op = op, .times = FaultRule::persistent, .err = EAGAIN});
    auto t0 = Clock::now();
    errno = 0;
    ssize_t n = reading ? read(b, off(), size()) : write(b, off(), size());
    EXPECT_EQ(n, -1);
    EXPECT_EQ(errno, EAGAIN);
    EXPECT_LT(ms_since(t0), 10000);
    EXPECT_GT(faults.fired(id), 1u);  // retried before giving up
    EXPECT_TRUE(b.guards_intact());
    if (!reading) restore_file();  // the failed write may have left part of its bytes
    faults.clear();
    expect_read_exact(b, off(), size());
  }
}

// Row 7: EIO at the 1st, 2nd, ... kernel read until one runs without a fault firing. Every
// other read is slowed down so sibling chunks are still in flight when one fails.
TEST_P(Errors, TransientEioAtAnyCallFailsTheReadAndDrainsIt) {
  GuardedBuffer b = buffer();
  std::vector<char> after(size());
  for (uint64_t nth = 1;; ++nth) {
    ASSERT_LT(nth, 200u) << "the countdown never ended";
    SCOPED_TRACE("EIO at read call " + std::to_string(nth));
    faults.clear();
    faults.add({.op = FaultOp::any_read, .times = FaultRule::persistent,
                .action = FaultAction::delay, .delay_us = 2000});
    size_t eio = faults.add({.op = FaultOp::any_read, .nth = nth, .err = EIO});
    b.fill_sentinel();
    errno = 0;
    ssize_t n = read(b, off(), size());
    if (faults.fired(eio) == 0) {  // past the last call: the read ran clean
      ASSERT_EQ(n, static_cast<ssize_t>(size()));
      EXPECT_EQ(first_mismatch(b.data(), shadow.data() + off(), size()), SIZE_MAX);
      break;
    }
    EXPECT_EQ(n, -1);
    EXPECT_EQ(errno, EIO);
    EXPECT_TRUE(b.guards_intact());
    // Nothing may land in the buffer after the call returned.
    std::memcpy(after.data(), b.data(), size());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(first_mismatch(after.data(), b.data(), size()), SIZE_MAX)
        << "the buffer changed after cuFileRead returned";
    // The handle still works.
    faults.clear();
    expect_read_exact(b, off(), size());
  }
}

TEST_P(Errors, TransientEioAtAnyCallFailsTheWrite) {
  GuardedBuffer b = buffer();
  for (uint64_t nth = 1;; ++nth) {
    ASSERT_LT(nth, 200u) << "the countdown never ended";
    SCOPED_TRACE("EIO at write call " + std::to_string(nth));
    faults.clear();
    size_t eio = faults.add({.op = FaultOp::any_write, .nth = nth, .err = EIO});
    fill_random(b.data(), size(), seed() + nth);
    errno = 0;
    ssize_t n = write(b, off(), size());
    if (faults.fired(eio) == 0) {
      ASSERT_EQ(n, static_cast<ssize_t>(size()));
      std::memcpy(shadow.data() + off(), b.data(), size());
      expect_file_matches_shadow();
      break;
    }
    EXPECT_EQ(n, -1);
    EXPECT_EQ(errno, EIO);
    faults.clear();
    expect_write_exact(b, off(), size());
  }
}

TEST_P(Errors, PersistentEioFailsEveryCallAndTheHandleRecovers) {
  GuardedBuffer b = buffer();
  for (FaultOp op : {FaultOp::any_read, FaultOp::any_write}) {
    const bool reading = op == FaultOp::any_read;
    SCOPED_TRACE(reading ? "read" : "write");
    faults.clear();
    faults.add({.op = op, .nth = 2, .times = FaultRule::persistent, .err = EIO});
    for (int call = 0; call < 3; ++call) {
      auto t0 = Clock::now();
      errno = 0;
      ssize_t n = reading ? read(b, off(), size()) : write(b, off(), size());
      if (call == 0 && n >= 0) continue;  // a request of one kernel call: the 1st one passed
      EXPECT_EQ(n, -1);
      EXPECT_EQ(errno, EIO);
      EXPECT_LT(ms_since(t0), 10000);
    }
    EXPECT_TRUE(b.guards_intact());
    faults.clear();
    if (!reading) restore_file();
    expect_read_exact(b, off(), size());
    expect_write_exact(b, off(), size());
  }
}

// Row 10: the disk fills up mid-write.
TEST_P(Errors, EnospcMidWriteFailsAndWritesResumeAfterwards) {
  GuardedBuffer b = buffer();
  fill_random(b.data(), size(), seed() ^ 0x10);
  size_t full = faults.add({.op = FaultOp::any_write, .nth = chunked() ? 2u : 1u,
                            .times = FaultRule::persistent, .err = ENOSPC});
  errno = 0;
  EXPECT_EQ(write(b, off(), size()), -1);
  EXPECT_EQ(errno, ENOSPC);
  EXPECT_GT(faults.fired(full), 0u);
  std::vector<char> disk(shadow.size());
  ASSERT_EQ(::pread(fd, disk.data(), disk.size(), 0), static_cast<ssize_t>(disk.size()));
  const uint64_t end = off() + size();
  EXPECT_EQ(first_mismatch(disk.data(), shadow.data(), off()), SIZE_MAX);
  EXPECT_EQ(first_mismatch(disk.data() + end, shadow.data() + end, shadow.size() - end), SIZE_MAX);

  faults.clear();
  expect_write_exact(b, off(), size());
}

INSTANTIATE_TEST_SUITE_P(Matrix, Errors, all_cases(), case_name);

}  // namespace
}  // namespace fault
