// Buffered and O_DIRECT pieces of one write must not share a page. A write whose offset is not
// aligned is planned (exec/job.cpp, plan_split) as a buffered head, an O_DIRECT body and a
// buffered tail, split at the file's DIO alignment. Where that alignment is smaller than a
// page (512 on most block devices), the head or tail shares a page with the body. The io_uring
// engine submits all pieces of a chunk at once (exec/worker.cpp, issue_all), and a buffered
// write running beside a direct write to the same page can read the page's old bytes back
// around the direct write and keep them dirty in the cache: later reads and writeback see old
// bytes. The kernel says so in its log ("Page cache invalidation failure on direct I/O.
// Possible data corruption due to collision with buffered I/O!") and marks the file so that
// the next fsync fails with EIO.
//
// Method: (1) deterministic: record the plan's kernel writes on the posix engine (same plan,
// run one piece after another, so offsets can be seen) and check that no page gets both a
// buffered and a direct write. (2) behavioural: unaligned writes on the io_uring engine, each
// followed by fdatasync and a page-cache drop; the race needs the timing to line up, so this
// one fails mostly on a busy machine.
#include <fcntl.h>

#include <map>

#include "fault_support.hpp"

namespace fault {
namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kAt = 1000;  // head [1000, 1024) shares page 0 with a body from 1024

// Notes which pages each kernel write touched, through the buffered or the O_DIRECT fd.
class RecordingOs : public gpufile::sys::FaultyOs {
 public:
  ssize_t pwrite(int fd, const void* buf, size_t len, uint64_t off) override {
    const int fl = ::fcntl(fd, F_GETFL);
    const bool direct = fl >= 0 && (fl & O_DIRECT);
    {
      std::lock_guard lock(mu_);
      for (uint64_t p = off / kPage; len > 0 && p <= (off + len - 1) / kPage; ++p)
        pages_[p] |= direct ? 2 : 1;
    }
    return FaultyOs::pwrite(fd, buf, len, off);
  }
  // Pages written both ways, as text (empty: none).
  std::string shared_pages() {
    std::lock_guard lock(mu_);
    std::string out;
    for (auto [page, how] : pages_)
      if (how == 3) out += " " + std::to_string(page * kPage);
    return out;
  }

 private:
  std::mutex mu_;
  std::map<uint64_t, int> pages_;  // bit 0: buffered, bit 1: direct
};

class PagePlan : public FaultTest, public ::testing::WithParamInterface<uint64_t> {
 protected:
  PagePlan() { direct_io = "always"; }
};

TEST_P(PagePlan, BufferedAndDirectPiecesOfAWriteShareNoPage) {
  if (!direct_capable()) GTEST_SKIP() << "no O_DIRECT here: every piece is buffered";
  RecordingOs recorder;
  gpufile::sys::ScopedOs on(recorder);
  GuardedBuffer b(GetParam(), kAt % kPage);
  expect_write_exact(b, kAt, GetParam());
  EXPECT_EQ(recorder.shared_pages(), "")
      << "file pages (by offset) written through the page cache and O_DIRECT at once";
}

INSTANTIATE_TEST_SUITE_P(Matrix, PagePlan, ::testing::Values(40000, (9u << 20) + 123),
                         [](const auto& info) {
                           return std::string(info.param > 64 * 1024 ? "chunked" : "inline");
                         });

class PageSharing : public FaultTest {
 protected:
  PageSharing() { engine = "io_uring"; }
};

TEST_F(PageSharing, UnalignedIoUringWritesStayCoherentWithThePageCache) {
  const uint64_t size = (9u << 20) + 123;
  GuardedBuffer b(size, kAt % kPage);
  for (int round = 0; round < 20 && !HasFailure(); ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    expect_write_exact(b, kAt, size);
    // The kernel marks the file with EIO when it finds a collision (dio_warn_stale_pagecache).
    EXPECT_EQ(::fdatasync(fd), 0) << std::strerror(errno)
                                  << ": the kernel saw buffered and direct IO collide";
    ASSERT_EQ(::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  }
}

}  // namespace
}  // namespace fault
