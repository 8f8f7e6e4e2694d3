// FaultyOs on its own: that each rule fires exactly when and as often as it says, under
// threads too. The other fault tests trust these counts.
//
// Method: calls through sys::os() on a scratch file with a FaultyOs installed, no driver.
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "fault_support.hpp"

namespace fault {
namespace {

using gpufile::sys::FaultAction;
using gpufile::sys::FaultOp;
using gpufile::sys::FaultRule;
using gpufile::sys::FaultyOs;
using gpufile::sys::IoKind;
using gpufile::sys::os;
using gpufile::sys::ScopedOs;

class FaultyOsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char templ[] = "/tmp/gpufile-faultyos.XXXXXX";
    fd = mkstemp(templ);
    ASSERT_GE(fd, 0);
    path = templ;
    data.resize(64 * 1024);
    fill_random(data.data(), data.size(), seed());
    ASSERT_EQ(::pwrite(fd, data.data(), data.size(), 0), static_cast<ssize_t>(data.size()));
  }
  void TearDown() override {
    ::close(fd);
    ::unlink(path.c_str());
  }
  ssize_t read_at(uint64_t off, size_t len) { return os().pread(fd, buf, len, off); }

  Watchdog watchdog{std::chrono::seconds(30)};
  int fd = -1;
  std::string path;
  std::vector<char> data;
  char buf[8192];
};

TEST_F(FaultyOsTest, TransientRuleFailsOnlyTheNthCall) {
  FaultyOs faults;
  size_t id = faults.add({.op = FaultOp::pread, .nth = 3, .err = EIO});
  ScopedOs on(faults);
  EXPECT_EQ(read_at(0, 100), 100);
  EXPECT_EQ(read_at(0, 100), 100);
  EXPECT_EQ(read_at(0, 100), -EIO);
  EXPECT_EQ(read_at(0, 100), 100);
  EXPECT_EQ(faults.fired(id), 1u);
  EXPECT_EQ(faults.seen(id), 4u);
}

TEST_F(FaultyOsTest, PersistentRuleFailsEveryCallFromTheNth) {
  FaultyOs faults;
  size_t id = faults.add({.op = FaultOp::any_read, .nth = 2, .times = FaultRule::persistent,
                          .err = ENOSPC});
  ScopedOs on(faults);
  EXPECT_EQ(read_at(0, 10), 10);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(read_at(0, 10), -ENOSPC);
  EXPECT_EQ(faults.fired(id), 5u);
}

TEST_F(FaultyOsTest, ProbabilityIsReproducibleFromTheSeed) {
  auto pattern = [&](uint64_t s) {
    FaultyOs faults(s);
    faults.add({.op = FaultOp::pread, .times = FaultRule::persistent, .probability = 0.3,
                .err = EAGAIN});
    ScopedOs on(faults);
    std::string p;
    for (int i = 0; i < 400; ++i) p += read_at(0, 1) < 0 ? 'x' : '.';
    return p;
  };
  std::string a = pattern(seed()), b = pattern(seed()), c = pattern(seed() + 1);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  auto fails = std::count(a.begin(), a.end(), 'x');
  EXPECT_GT(fails, 400 * 0.2);
  EXPECT_LT(fails, 400 * 0.4);
}

TEST_F(FaultyOsTest, ShortReadMovesOnlyKBytes) {
  FaultyOs faults;
  faults.add({.op = FaultOp::pread, .action = FaultAction::short_io, .limit = 100});
  ScopedOs on(faults);
  std::memset(buf, 0, sizeof buf);
  EXPECT_EQ(read_at(4096, 1000), 100);
  EXPECT_EQ(std::memcmp(buf, data.data() + 4096, 100), 0);
  EXPECT_EQ(buf[100], 0);  // the real call was shorter: nothing past k was touched
}

TEST_F(FaultyOsTest, ShortWriteMovesOnlyKBytes) {
  FaultyOs faults;
  faults.add({.op = FaultOp::pwrite, .action = FaultAction::short_io, .limit = 7});
  ScopedOs on(faults);
  char ones[64];
  std::memset(ones, 1, sizeof ones);
  EXPECT_EQ(os().pwrite(fd, ones, sizeof ones, 0), 7);
  char back[8];
  ASSERT_EQ(::pread(fd, back, 8, 0), 8);
  EXPECT_EQ(std::memcmp(back, ones, 7), 0);
  EXPECT_EQ(back[7], data[7]);
}

TEST_F(FaultyOsTest, CorruptFlipsExactlyOneByte) {
  FaultyOs faults;
  faults.add({.op = FaultOp::pread, .action = FaultAction::corrupt});
  ScopedOs on(faults);
  ASSERT_EQ(read_at(0, 4096), 4096);
  int differ = 0;
  for (int i = 0; i < 4096; ++i) differ += buf[i] != data[i];
  EXPECT_EQ(differ, 1);
}

TEST_F(FaultyOsTest, DelayWaitsThenMakesTheRealCall) {
  FaultyOs faults;
  faults.add({.op = FaultOp::pread, .action = FaultAction::delay, .delay_us = 30000});
  ScopedOs on(faults);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(read_at(0, 10), 10);
  EXPECT_GE(ms_since(t0), 29);
}

TEST_F(FaultyOsTest, FiltersByFdPathAndODirect) {
  FaultyOs faults;
  size_t by_fd = faults.add({.op = FaultOp::fstat, .fd = fd + 1000, .err = EIO});
  size_t by_path = faults.add({.op = FaultOp::pread, .path = "no-such-file", .err = EIO});
  size_t direct = faults.add({.op = FaultOp::pread, .direct_only = true, .err = EINVAL});
  size_t mine = faults.add({.op = FaultOp::pread, .path = path.substr(5), .nth = 2, .err = EIO});
  ScopedOs on(faults);
  struct stat st {};
  EXPECT_EQ(os().fstat(fd, &st), 0);
  EXPECT_EQ(read_at(0, 10), 10);
  EXPECT_EQ(read_at(0, 10), -EIO);
  EXPECT_EQ(faults.seen(by_fd), 0u);
  EXPECT_EQ(faults.seen(by_path), 0u);
  EXPECT_EQ(faults.seen(direct), 0u);  // not an O_DIRECT fd
  EXPECT_EQ(faults.fired(mine), 1u);

  // The library reopens files through /proc/self/fd/N: the rule sees the real name.
  char proc[64];
  std::snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  size_t on_open = faults.add({.op = FaultOp::open, .path = path, .direct_only = true,
                               .err = EINVAL});
  int plain = os().open(proc, O_RDONLY, 0);
  EXPECT_GE(plain, 0);
  EXPECT_EQ(os().open(proc, O_RDONLY | O_DIRECT, 0), -EINVAL);
  EXPECT_EQ(faults.fired(on_open), 1u);
  if (plain >= 0) ::close(plain);
}

TEST_F(FaultyOsTest, UringResultsAreFailedOrClamped) {
  FaultyOs faults;
  faults.add({.op = FaultOp::uring_read, .times = 2, .action = FaultAction::short_io,
              .limit = 512});
  faults.add({.op = FaultOp::uring_write, .err = EAGAIN});
  ScopedOs on(faults);
  EXPECT_EQ(os().uring_result(IoKind::read, fd, 4096, 4096), 512);
  EXPECT_EQ(os().uring_result(IoKind::read, fd, 4096, 100), 100);  // already shorter
  EXPECT_EQ(os().uring_result(IoKind::read, fd, 4096, 4096), 4096);
  EXPECT_EQ(os().uring_result(IoKind::write, fd, 4096, 4096), -EAGAIN);
  EXPECT_EQ(os().uring_result(IoKind::write, fd, 4096, 4096), 4096);
}

TEST_F(FaultyOsTest, ScopedOsPutsBackThePreviousOs) {
  gpufile::sys::Os* real = &os();
  FaultyOs outer, inner;
  {
    ScopedOs a(outer);
    EXPECT_EQ(&os(), &outer);
    {
      ScopedOs b(inner);
      EXPECT_EQ(&os(), &inner);
    }
    EXPECT_EQ(&os(), &outer);
  }
  EXPECT_EQ(&os(), real);
}

TEST_F(FaultyOsTest, CountsAreExactAcrossThreads) {
  FaultyOs faults;
  size_t every = faults.add({.op = FaultOp::pread, .times = FaultRule::persistent,
                             .action = FaultAction::short_io, .limit = 4});
  size_t once = faults.add({.op = FaultOp::pread, .nth = 5000, .err = EIO});
  ScopedOs on(faults);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      char b[16];
      for (int i = 0; i < 1000; ++i)
        if (os().pread(fd, b, sizeof b, 0) < 0) ++errors;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(faults.seen(every), 8000u);
  EXPECT_EQ(faults.fired(every), 8000u);
  EXPECT_EQ(faults.fired(once), 1u);
  EXPECT_EQ(errors.load(), 1);
}

}  // namespace
}  // namespace fault
