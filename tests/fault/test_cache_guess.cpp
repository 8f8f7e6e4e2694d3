// The page-cache guess for small reads (src/exec/runtime.cpp: guess_cached, run_inline). Once
// cachestat found a file's reads cached, small reads skip cachestat and read with RWF_NOWAIT
// (Os::pread_cached); the first one that finds bytes missing drops the guess. What must hold:
// every byte read is right whatever the guess, a wrong guess is dropped at once, a fault on
// the guessed read is reported like any read fault, and a cached file stops paying cachestat.
//
// Method: FaultyOs rules with probability 0 count the calls without faulting them; a miss is
// injected (EAGAIN from RWF_NOWAIT) where a test counts what follows it, and pages are really
// dropped (fdatasync + POSIX_FADV_DONTNEED, checked with cachestat) where only the bytes count.
#include <fcntl.h>

#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

constexpr uint64_t kSmall = 4096;
constexpr int kReads = 40;

class CacheGuess : public FaultTest {
 protected:
  void SetUp() override {
    FaultTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    // Without O_DIRECT every read goes to the page cache and nothing asks cachestat.
    if (!direct_capable()) GTEST_SKIP() << "the file refuses O_DIRECT: there is no choice to guess";
    if (!cached(0, file_size)) GTEST_SKIP() << "the scratch file is not all in the page cache";
  }
  bool cached(uint64_t off, uint64_t len) {
    const auto r = residency(off, len);
    return r && r->cached_pages == r->total_pages;
  }
  // Offsets spread over the file.
  uint64_t spread(int i) const { return (i * 7919ull * kSmall) % (file_size - 4 * kSmall); }
};

TEST_F(CacheGuess, SmallReadsOfACachedFileSkipCachestat) {
  GuardedBuffer b(kSmall, 0);
  const size_t asks = count(FaultOp::cachestat), nowait = count(FaultOp::pread_cached);
  for (int i = 0; i < kReads; ++i) expect_read_exact(b, spread(i), kSmall);
  // The fixture's own check left the guess set (the whole file was cached); allow a few more
  // asks in case the kernel dropped a page meanwhile, but not one per read.
  EXPECT_LE(faults.seen(asks), 3u) << "cachestat was asked on every small read";
  EXPECT_GE(faults.seen(nowait), kReads - 3u) << "small reads of cached data did not use RWF_NOWAIT";
}

// Reads of up to 1 MiB that are one piece for the executor (up to gpufile.min_chunk_kb, 256 KiB
// by default) run on the caller's thread too, and guess the same way.
TEST_F(CacheGuess, OnePieceReadsGuessToo) {
  constexpr uint64_t kPiece = 200 * 1024;
  GuardedBuffer b(kPiece, 0);
  const size_t asks = count(FaultOp::cachestat), nowait = count(FaultOp::pread_cached);
  for (int i = 0; i < 10; ++i) expect_read_exact(b, spread(i) % (file_size - kPiece), kPiece);
  EXPECT_LE(faults.seen(asks), 3u);
  EXPECT_GE(faults.seen(nowait), 7u);
}

// The miss is injected: RWF_NOWAIT answers EAGAIN, as it does when pages are missing. Dropping
// the pages does not force a miss everywhere: on a fast disk the kernel may bring them back
// (the readahead a NOWAIT read starts) before it answers (a CI runner did).
TEST_F(CacheGuess, AWrongGuessStillReadsEveryByteAndIsDropped) {
  GuardedBuffer b(kSmall, 100);
  expect_read_exact(b, 0, kSmall);  // cached: the guess is set
  const size_t miss = faults.add({.op = FaultOp::pread_cached, .err = EAGAIN});
  const size_t asks = count(FaultOp::cachestat), nowait = count(FaultOp::pread_cached);
  expect_read_exact(b, file_size / 2 + 123, kSmall);  // guessed, missed, read with a waiting read
  EXPECT_EQ(faults.fired(miss), 1u);
  EXPECT_EQ(faults.seen(asks), 0u);
  expect_read_exact(b, file_size / 4 + 77, kSmall);  // no guess now: cachestat decides
  EXPECT_EQ(faults.seen(asks), 1u) << "the guess survived a miss";
  EXPECT_EQ(faults.seen(nowait), 1u);
}

// Pages really dropped under a guessed read: whatever the kernel answers to RWF_NOWAIT (EAGAIN,
// part of the bytes, or all of them once its own readahead landed), every byte is right.
TEST_F(CacheGuess, DroppedPagesUnderAGuessAreReadRight) {
  GuardedBuffer b(kSmall * 3, 100);
  expect_read_exact(b, 0, kSmall);  // cached: the guess is set
  for (int i = 0; i < 8; ++i) {
    const uint64_t at = spread(i + 1) + 511;
    if (!evict(at, kSmall * 3)) GTEST_SKIP() << "the kernel kept the pages this test must drop";
    expect_read_exact(b, at, kSmall * 3);
  }
}

TEST_F(CacheGuess, AShortGuessedReadIsCompleted) {
  GuardedBuffer b(kSmall * 3, 5);
  const size_t cut = faults.add({.op = FaultOp::pread_cached, .times = FaultRule::persistent,
                                 .action = FaultAction::short_io, .limit = 1000});
  for (int i = 0; i < 4; ++i) expect_read_exact(b, spread(i) + 17, kSmall * 3);
  EXPECT_GT(faults.fired(cut), 0u) << "no guessed read ran";
}

TEST_F(CacheGuess, AnErrorOnTheGuessedReadIsReportedAndClaimsNoBytes) {
  GuardedBuffer b(kSmall, 0);
  expect_read_exact(b, 0, kSmall);  // the guess is set
  const size_t fail = faults.add({.op = FaultOp::pread_cached, .err = EIO});
  b.fill_sentinel();
  errno = 0;
  EXPECT_EQ(read(b, kSmall, kSmall), -1);
  EXPECT_EQ(errno, EIO);
  EXPECT_EQ(faults.fired(fail), 1u);
  EXPECT_TRUE(b.guards_intact());
  expect_read_exact(b, kSmall, kSmall);  // and the next read works
}

TEST_F(CacheGuess, EndOfFileIsNoMiss) {
  GuardedBuffer b(kSmall, 0);
  const uint64_t tail = file_size % kSmall ? file_size % kSmall : kSmall;
  expect_read_exact(b, 0, kSmall);  // the guess is set
  const size_t asks = count(FaultOp::cachestat);
  b.fill_sentinel();
  EXPECT_EQ(read(b, file_size - tail, kSmall), static_cast<ssize_t>(tail));
  expect_read_exact(b, kSmall, kSmall);
  EXPECT_EQ(faults.seen(asks), 0u) << "a read short at end of file dropped the guess";
}

}  // namespace
}  // namespace fault
