// End of file (matrix rows 13-15): a read crossing EOF returns the bytes up to EOF, a read at or
// past EOF returns 0 (as does any request of 0 bytes, with no kernel call), and the
// caller's bytes past the returned count stay as they were. A file truncated by another
// thread during a large read gives a short count or an error, never a crash, and never bytes
// that the file did not hold.
//
// Method: real files; the destination is pre-filled with a sentinel byte. The truncation test
// slows reads down with FaultyOs (short transfers and a delay) so that the cut lands inside
// the read. Run with the default routing (page cache for cached data) and with O_DIRECT forced.
#include <random>
#include <thread>

#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;

constexpr unsigned char kSentinel = GuardedBuffer::kSentinel;

class Eof : public FaultIo {
 protected:
  // Index of the first byte in [from, to) that is not the sentinel, or SIZE_MAX.
  static size_t first_written(const GuardedBuffer& b, size_t from, size_t to) {
    const char* p = b.data();
    for (size_t i = from; i < to; ++i)
      if (static_cast<unsigned char>(p[i]) != kSentinel) return i;
    return SIZE_MAX;
  }

  void read_crossing_eof() {
    const uint64_t start = file_size - size() / 2 - 3;
    GuardedBuffer b(size(), start % 4096);
    errno = 0;
    ssize_t n = read(b, start, size());
    ASSERT_EQ(n, static_cast<ssize_t>(file_size - start)) << "errno " << errno;
    EXPECT_EQ(first_mismatch(b.data(), shadow.data() + start, n), SIZE_MAX);
    size_t past = first_written(b, n, size());
    if (past != SIZE_MAX) {
      size_t last = past;
      for (size_t i = past; i < size(); ++i)
        if (static_cast<unsigned char>(b.data()[i]) != kSentinel) last = i;
      ADD_FAILURE() << "bytes " << past - n << ".." << last - n << " past end of file were "
                    << "overwritten (first one now " << int(b.data()[past]) << ")";
    }
    EXPECT_TRUE(b.guards_intact());
  }

  void read_at_and_past_eof() {
    for (uint64_t start : {file_size, file_size + 1, file_size + 12345, file_size + (64u << 20)}) {
      GuardedBuffer b(size(), start % 4096);
      errno = 0;
      EXPECT_EQ(read(b, start, size()), 0) << "at " << start << ", errno " << errno;
      EXPECT_EQ(first_written(b, 0, size()), SIZE_MAX);
      EXPECT_TRUE(b.guards_intact());
    }
    GuardedBuffer b(16, 0);
    EXPECT_EQ(read(b, 0, 0), 0);  // an empty read is no error
    EXPECT_TRUE(b.guards_intact());
  }

  // Row 14: a request of 0 bytes makes no kernel call at all. Rules with probability 0 count
  // every kernel read and write (of either engine) without faulting them. (A read at or past
  // EOF does ask the kernel: the file may have grown since gpufile last saw its size.)
  void zero_size_calls_no_kernel() {
    const size_t reads = count(FaultOp::any_read);
    const size_t writes = count(FaultOp::any_write);
    GuardedBuffer b(16, 0);
    for (uint64_t start : {uint64_t{0}, off(), file_size, file_size + 12345}) {
      EXPECT_EQ(read(b, start, 0), 0) << "at " << start << ", errno " << errno;
      EXPECT_EQ(write(b, start, 0), 0) << "at " << start << ", errno " << errno;
    }
    EXPECT_EQ(faults.seen(reads), 0u) << "kernel reads issued for 0 bytes";
    EXPECT_EQ(faults.seen(writes), 0u) << "kernel writes issued for 0 bytes";
    EXPECT_TRUE(b.guards_intact());
    expect_file_matches_shadow();  // a write of 0 bytes past EOF does not extend the file
  }

  // Slows every kernel read down and cuts the file at a random moment inside the read.
  void truncated_during_read() {
    std::mt19937_64 rng(seed());
    GuardedBuffer b = buffer();
    faults.add({.op = FaultOp::any_read, .times = FaultRule::persistent,
                .action = FaultAction::short_io, .limit = 256 * 1024});
    faults.add({.op = FaultOp::any_read, .times = FaultRule::persistent,
                .action = FaultAction::delay, .delay_us = 200});
    auto t0 = std::chrono::steady_clock::now();
    expect_read_exact(b, off(), size());
    const int64_t read_us = std::max<int64_t>(1000, 1000 * ms_since(t0));
    int full = 0, shorter = 0, failed = 0;
    uint64_t cut = shadow.size();
    for (int round = 0; round < 50; ++round) {
      SCOPED_TRACE("round " + std::to_string(round));
      restore_file(cut);
      b.fill_sentinel();
      cut = rng() % 4 == 0 ? 0 : off() + rng() % size();
      const auto wait = std::chrono::microseconds(rng() % read_us);
      std::thread cutter([&] {
        std::this_thread::sleep_for(wait);
        EXPECT_EQ(::ftruncate(fd, static_cast<off_t>(cut)), 0);
      });
      errno = 0;
      ssize_t n = read(b, off(), size());
      cutter.join();
      ASSERT_TRUE(b.guards_intact());
      if (n < 0) {  // a clear error is allowed
        ++failed;
        continue;
      }
      ASSERT_LE(static_cast<uint64_t>(n), size());
      n == static_cast<ssize_t>(size()) ? ++full : ++shorter;
      // Counted bytes are the file's. Past the cut the kernel may hand out the zeros it put
      // there while truncating (a read/truncate race the kernel does not order). Uncounted
      // bytes may hold data read before the cut, but nothing else.
      auto byte_ok = [&](size_t i) {
        const char got = b.data()[i];
        return got == shadow[off() + i] || (off() + i >= cut && got == 0) ||
               (i >= static_cast<size_t>(n) && static_cast<unsigned char>(got) == kSentinel);
      };
      size_t bad = SIZE_MAX;
      for (size_t at = 0; at < size() && bad == SIZE_MAX; at += 4096) {
        const size_t len = std::min<size_t>(4096, size() - at);
        if (std::memcmp(b.data() + at, shadow.data() + off() + at, len) == 0) continue;
        for (size_t i = at; i < at + len && bad == SIZE_MAX; ++i)
          if (!byte_ok(i)) bad = i;
      }
      ASSERT_EQ(bad, SIZE_MAX) << "wrong byte in a read that returned " << n << ", cut at "
                               << cut;
    }
    RecordProperty("full", full);
    RecordProperty("short", shorter);
    RecordProperty("failed", failed);
    EXPECT_GT(shorter + failed, 0) << "no cut landed inside a read: nothing was tested";
  }
};

class DirectEof : public Eof {
 protected:
  DirectEof() { direct_io = "always"; }
};

TEST_P(Eof, ReadCrossingEofReturnsBytesUpToEof) { read_crossing_eof(); }
TEST_P(Eof, ReadAtOrPastEofReturnsZero) { read_at_and_past_eof(); }
TEST_P(Eof, TruncatedDuringReadGivesShortCountOrError) { truncated_during_read(); }
TEST_P(Eof, ZeroSizeRequestsMakeNoKernelCall) { zero_size_calls_no_kernel(); }

// O_DIRECT moves whole blocks: the block holding EOF must not spill past EOF into the caller's
// buffer.
TEST_P(DirectEof, ReadCrossingEofReturnsBytesUpToEof) { read_crossing_eof(); }
TEST_P(DirectEof, ReadAtOrPastEofReturnsZero) { read_at_and_past_eof(); }
TEST_P(DirectEof, TruncatedDuringReadGivesShortCountOrError) { truncated_during_read(); }
TEST_P(DirectEof, ZeroSizeRequestsMakeNoKernelCall) { zero_size_calls_no_kernel(); }

INSTANTIATE_TEST_SUITE_P(Matrix, Eof, all_cases(), case_name);
INSTANTIATE_TEST_SUITE_P(Matrix, DirectEof, all_cases(), case_name);

}  // namespace
}  // namespace fault
