// Suite: page-cache DMA (src/exec/cache_windows.hpp). Reads of cached bytes into GPU memory are
// copied straight out of registered windows of the page cache, once the bytes are read a second
// time; whatever replaces the file's pages (truncation and rewriting, writes through gpufile) is
// seen before a window serves another read; the budget bounds what is registered; a file the
// kernel will not map is staged; and every byte is right whichever way it went.
#include <linux/falloc.h>
#include <sys/mman.h>

#include <future>

#include "common.hpp"
#include "core/stats.hpp"
#include "sys/faulty_os.hpp"

namespace capi_test {
namespace {

constexpr size_t MiB = 1024 * 1024;
using gpufile::stats::Path;

uint64_t read_bytes_by(Path p) {
  return gpufile::stats::snapshot().paths[0][static_cast<int>(p)].bytes;
}
uint64_t write_bytes_by(Path p) {
  return gpufile::stats::snapshot().paths[1][static_cast<int>(p)].bytes;
}

// The test double's hold on cuMemHostRegister (fakecuda_hold_registrations): while held,
// registrations wait, counted by waiting(). Released whatever happens to the test.
class RegistrationHold {
 public:
  RegistrationHold()
      : hold_(reinterpret_cast<void (*)(int)>(driver_symbol("fakecuda_hold_registrations"))),
        waiting_(reinterpret_cast<int (*)()>(driver_symbol("fakecuda_registrations_waiting"))) {}
  ~RegistrationHold() {
    if (available()) hold_(0);
  }
  bool available() const { return hold_ != nullptr && waiting_ != nullptr; }
  void hold(bool on) { hold_(on ? 1 : 0); }
  int waiting() const { return waiting_(); }

 private:
  void (*hold_)(int);
  int (*waiting_)();
};

class PageCacheDma : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    if (!has_driver()) GTEST_SKIP() << no_driver_reason();
    live_registered_ = reinterpret_cast<size_t (*)()>(driver_symbol("fakecuda_live_registered_bytes"));
    open_session();
    Rng rng(test_seed());
    path_ = dir_.file("cached.bin");
    data_ = rng.bytes(kFileSize);
    ASSERT_NO_FATAL_FAILURE(write_file(path_, data_.data(), data_.size()));  // cached: just written
  }
  void TearDown() override {
    session_.reset();
    unsetenv("GPUFILE_PAGECACHE_DMA_MB");
    unsetenv("GPUFILE_PAGECACHE_DMA_IDLE_MS");
    unsetenv("GPUFILE_PAGECACHE_DMA_LONG_READ_MB");
    unsetenv("LOCAL_WORLD_SIZE");
    unsetenv("GPUFILE_WORKERS");
    CapiTest::TearDown();
  }

  void open_session(const char* budget_mb = nullptr, const char* idle_ms = nullptr) {
    session_.reset();
    if (budget_mb) setenv("GPUFILE_PAGECACHE_DMA_MB", budget_mb, 1);
    if (idle_ms) setenv("GPUFILE_PAGECACHE_DMA_IDLE_MS", idle_ms, 1);
    session_ = std::make_unique<DriverSession>();
    ASSERT_TRUE(session_->ok()) << session_->error();
  }

  // Reads [off, off+n) of the file into device memory with cuFileRead, in `piece` calls; "" or
  // what went wrong.
  std::string read_and_check(Handle& h, const std::vector<uint8_t>& want, uint64_t off, size_t n,
                             size_t piece) {
    bind_context();
    std::string why;
    auto buf = Buffer::make(Mem::device, n, &why);
    if (!buf) return why;
    for (size_t done = 0; done < n; done += piece) {
      const size_t len = std::min(piece, n - done);
      const ssize_t got = cuFileRead(h.get(), buf->ptr(), len, static_cast<off_t>(off + done),
                                     static_cast<off_t>(done));
      if (got != static_cast<ssize_t>(len))
        return "read at " + std::to_string(off + done) + " returned " + std::to_string(got);
    }
    std::vector<uint8_t> got = buf->read_back(0, n);
    return first_mismatch(got.data(), want.data() + off, n);
  }

  // A file of `n` seeded random bytes at `path`, and its bytes.
  void make_file(const std::string& path, uint64_t seed, size_t n, std::vector<uint8_t>* bytes) {
    Rng rng(seed);
    *bytes = rng.bytes(n);
    ASSERT_NO_FATAL_FAILURE(write_file(path, bytes->data(), bytes->size()));
  }

  // Reads the whole file `passes` times in 16 MiB calls of 4 MiB pieces; "" or what went wrong.
  // `most` is the most registered at once beyond `registered_before`.
  std::string read_in_passes(Handle& h, const std::vector<uint8_t>& bytes, int passes,
                             size_t registered_before, size_t* most) {
    for (int pass = 0; pass < passes; ++pass)
      for (uint64_t off = 0; off < bytes.size(); off += 16 * MiB) {
        std::string why = read_and_check(h, bytes, off, 16 * MiB, 4 * MiB);
        if (!why.empty()) return why + " (at " + std::to_string(off) + ")";
        *most = std::max(*most, live_registered_() - registered_before);
      }
    return "";
  }

  static constexpr uint64_t kFileSize = 24 * MiB;
  TempDir dir_;
  std::unique_ptr<DriverSession> session_;
  size_t (*live_registered_)() = nullptr;
  std::string path_;
  std::vector<uint8_t> data_;
};

// A file read once is staged: no window is made for bytes nobody reads again.
TEST_F(PageCacheDma, AFileReadOnceIsStaged) {
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const size_t registered_before = live_registered_ ? live_registered_() : 0;
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before);
  if (live_registered_) {
    EXPECT_LT(live_registered_() - registered_before, kFileSize) << "a window was registered";
  }
  EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  EXPECT_GT(read_bytes_by(Path::page_cache_dma), dma_before) << "the second reading made no window";
}

// With gpufile.pagecache_dma_long_read_mb 0, a long read (above four slabs: 24 MiB here) only
// uses windows already made: read again and again whole, the file is staged every time. Once
// short reads have made them, a long read copies out of them.
TEST_F(PageCacheDma, WithLongReadsOffOnlyShortReadsMakeWindows) {
  setenv("GPUFILE_PAGECACHE_DMA_LONG_READ_MB", "0", 1);
  ASSERT_NO_FATAL_FAILURE(open_session());
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  for (int pass = 0; pass < 3; ++pass)
    EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, kFileSize), "") << "pass " << pass;
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before) << "a long read made a window";
  for (int pass = 0; pass < 2; ++pass) EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  const uint64_t made = read_bytes_by(Path::page_cache_dma);
  ASSERT_GT(made, dma_before) << "the short reads made no window";
  EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, kFileSize), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma) - made, kFileSize)
      << "the long read did not copy out of the windows the short ones made";
}

// Small IO (at or below gpufile.small_io_kb) stays off the windows even once they exist: one
// kernel read and a small copy beat the change-notice check and the window lookups per call.
TEST_F(PageCacheDma, SmallReadsStayOffTheWindows) {
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");  // the windows are made
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  ASSERT_GT(dma_before, 0u) << "the second reading made no window";
  for (uint64_t off : {uint64_t{0}, 5 * MiB + 17, kFileSize - 4096})
    EXPECT_EQ(read_and_check(h, data_, off, 4096, 4096), "") << "at " << off;
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before) << "a 4 KiB read used a window";
  EXPECT_EQ(read_and_check(h, data_, MiB, 2 * MiB, 2 * MiB), "");
  EXPECT_GT(read_bytes_by(Path::page_cache_dma), dma_before) << "a 2 MiB read used no window";
}

// Four threads read cached 1 MiB pieces at random: every byte right, the bytes counted under the
// page-cache DMA path, the file's one window (24 MiB) registered while the handle lives and
// unregistered with it (the staging the callers borrowed stays with the session).
TEST_F(PageCacheDma, CachedReadsComeStraightOutOfThePageCache) {
  SCOPED_TRACE("seed=" + std::to_string(test_seed()));
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  size_t registered_with_handle = 0;
  {
    Handle h(path_, O_RDONLY);
    ASSERT_TRUE(h.ok());
    std::vector<std::string> errors(4);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t)
      threads.emplace_back([&, t] {
        Rng rng(test_seed() + static_cast<uint64_t>(t));
        for (int i = 0; i < 16 && errors[t].empty(); ++i) {  // 64 MiB of a 24 MiB file
          const uint64_t off = rng.below(kFileSize - MiB) / 4096 * 4096 + rng.below(2) * 17;
          errors[t] = read_and_check(h, data_, off, MiB, MiB);
        }
      });
    for (auto& th : threads) th.join();
    for (int t = 0; t < 4; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
    EXPECT_GT(read_bytes_by(Path::page_cache_dma), dma_before)
        << "no read was copied out of the page cache";
    if (live_registered_) registered_with_handle = live_registered_();
  }
  if (live_registered_) {
    EXPECT_EQ(registered_with_handle - live_registered_(), kFileSize)
        << "the window was not unregistered with the handle";
  }
}

// A window pins the pages it was made from. The file truncated and written again through
// another fd (as a checkpoint rewritten in place) has new pages: the next read must return the
// new bytes, never the pinned old ones.
TEST_F(PageCacheDma, AFileTruncatedAndRewrittenIsReadAnew) {
  SCOPED_TRACE("seed=" + std::to_string(test_seed()));
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const uint64_t dma_at_start = read_bytes_by(Path::page_cache_dma);
  for (int pass = 0; pass < 2; ++pass) ASSERT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  ASSERT_GT(dma_before, dma_at_start) << "two readings made no window";
  for (int round = 1; round <= 3; ++round) {
    Rng rng(test_seed() * 7 + static_cast<uint64_t>(round));
    std::vector<uint8_t> fresh = rng.bytes(kFileSize);
    int fd = open(path_.c_str(), O_WRONLY);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, 0), 0);
    ASSERT_EQ(pwrite(fd, fresh.data(), fresh.size(), 0), static_cast<ssize_t>(fresh.size()));
    close(fd);
    for (int pass = 0; pass < 2; ++pass)  // the second makes windows of the new pages
      EXPECT_EQ(read_and_check(h, fresh, 0, kFileSize, MiB), "") << "round " << round;
  }
  EXPECT_GT(read_bytes_by(Path::page_cache_dma), dma_before)
      << "after the rewrite no read came out of a window: the test proved nothing";
}

// While windows of a file are registered, gpufile's own writes of it go through the page cache
// (into the registered pages) instead of O_DIRECT around them; reads then see the new bytes,
// through gpufile and through the kernel.
TEST_F(PageCacheDma, WritesWhileWindowsLiveGoThroughThePageCache) {
  SCOPED_TRACE("seed=" + std::to_string(test_seed()));
  const bool direct = direct_io_works(dir_.path());
  Handle h(path_, O_RDWR | (direct ? O_DIRECT : 0));
  ASSERT_TRUE(h.ok());
  for (int pass = 0; pass < 2; ++pass) ASSERT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  bind_context();
  std::string why;
  auto buf = Buffer::make(Mem::device, MiB, &why);
  ASSERT_TRUE(buf) << why;
  Rng rng(test_seed() * 11);
  std::vector<uint8_t> fresh = rng.bytes(MiB);
  buf->upload(0, fresh.data(), MiB);
  const uint64_t direct_before = write_bytes_by(Path::staged_direct);
  ASSERT_EQ(cuFileWrite(h.get(), buf->ptr(), MiB, 4 * MiB, 0), static_cast<ssize_t>(MiB));
  EXPECT_EQ(write_bytes_by(Path::staged_direct), direct_before)
      << "the write went O_DIRECT around registered pages";
  std::memcpy(data_.data() + 4 * MiB, fresh.data(), MiB);
  EXPECT_EQ(read_and_check(h, data_, 0, 8 * MiB, MiB), "");
  std::vector<uint8_t> on_disk = read_file(path_, 4 * MiB, MiB);
  EXPECT_EQ(first_mismatch(on_disk.data(), fresh.data(), MiB), "");
}

// The kernel refuses to map the file: its reads are staged, right all the same, and the path is
// not tried again for that file.
TEST_F(PageCacheDma, AFileThatCannotBeMappedIsStaged) {
  gpufile::sys::FaultyOs faults;
  gpufile::sys::ScopedOs use(faults);
  const size_t refusal = faults.add({.op = gpufile::sys::FaultOp::map_file,
                                     .times = gpufile::sys::FaultRule::persistent, .err = ENOMEM});
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  for (int pass = 0; pass < 3; ++pass) EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before);
  EXPECT_EQ(faults.fired(refusal), 1u) << "a refused file must not be mapped again";
}

// At most the budget is registered at once: with room for one window, reading three windows'
// worth of file retires the older ones.
TEST_F(PageCacheDma, TheBudgetBoundsWhatIsRegistered) {
  if (!live_registered_) GTEST_SKIP() << "needs the test double's registration counter";
  open_session("64", "0");  // any window no read holds may make room
  const size_t registered_before = live_registered_();
  const std::string big = dir_.file("big.bin");
  std::vector<uint8_t> bytes;
  ASSERT_NO_FATAL_FAILURE(make_file(big, test_seed() * 13, 192 * MiB, &bytes));
  Handle h(big, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  size_t most = 0;
  ASSERT_EQ(read_in_passes(h, bytes, 2, registered_before, &most), "");
  EXPECT_LE(most, 64 * MiB);
  // Each window serves only its own 64 MiB of the file: more than that copied out of windows
  // means a later window was made, in the room an earlier one left.
  EXPECT_GT(read_bytes_by(Path::page_cache_dma) - dma_before, 64 * MiB)
      << "windows were not retired to make room for the next ones";
}

// The same passes with an idle time longer than the test (the default, 1 s, is shorter than a
// pass under ThreadSanitizer): the window in use is kept and the rest of each pass is staged. Retiring it for the next 64 MiB would register and unregister a window for
// every 64 MiB of every pass (on the GPU machine, four files over one budget in one process
// ran at 15% of what four processes reached).
TEST_F(PageCacheDma, WindowsStillBeingReadAreNotChurned) {
  if (!live_registered_) GTEST_SKIP() << "needs the test double's registration counter";
  open_session("64", "600000");
  const std::string big = dir_.file("big.bin");
  std::vector<uint8_t> bytes;
  ASSERT_NO_FATAL_FAILURE(make_file(big, test_seed() * 17, 192 * MiB, &bytes));
  Handle h(big, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const size_t registered_before = live_registered_();
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  size_t most = 0;
  ASSERT_EQ(read_in_passes(h, bytes, 3, registered_before, &most), "");
  const uint64_t dma = read_bytes_by(Path::page_cache_dma) - dma_before;
  EXPECT_GT(dma, 0u) << "no window was made";
  // The first pass makes none (read once); the two others read the one window's 64 MiB each.
  EXPECT_LE(dma, 2 * 64 * MiB) << "windows were retired and made again within a pass";
  EXPECT_LE(most, 64 * MiB);
}

// A window left unused for the idle time makes room for the next one.
TEST_F(PageCacheDma, AnIdleWindowMakesRoom) {
  if (!live_registered_) GTEST_SKIP() << "needs the test double's registration counter";
  open_session("64", "100");
  const std::string big = dir_.file("big.bin");
  std::vector<uint8_t> bytes;
  ASSERT_NO_FATAL_FAILURE(make_file(big, test_seed() * 19, 128 * MiB, &bytes));
  Handle h(big, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const size_t registered_before = live_registered_();
  for (int pass = 0; pass < 2; ++pass) ASSERT_EQ(read_and_check(h, bytes, 0, 64 * MiB, 4 * MiB), "");
  ASSERT_EQ(read_and_check(h, bytes, 64 * MiB, 64 * MiB, 4 * MiB), "");  // read once: staged
  std::this_thread::sleep_for(std::chrono::milliseconds(250));
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  ASSERT_EQ(read_and_check(h, bytes, 64 * MiB, 64 * MiB, 4 * MiB), "");  // its window is made
  ASSERT_EQ(read_and_check(h, bytes, 64 * MiB, 64 * MiB, 4 * MiB), "");
  EXPECT_GE(read_bytes_by(Path::page_cache_dma) - dma_before, 64 * MiB)
      << "the idle window did not make room for the second";
  EXPECT_LE(live_registered_() - registered_before, 64 * MiB) << "over the budget";
}

// One window is made at a time: a read that would make a window while another is being
// registered is staged at once instead of queueing behind that registration (the driver runs
// them one after another and holds the process's other calls up meanwhile); a later read makes
// its window.
TEST_F(PageCacheDma, AReadDoesNotQueueBehindAnotherWindowBeingMade) {
  RegistrationHold holding;
  if (!holding.available()) GTEST_SKIP() << "needs the test double's registration hold";
  const std::string two = dir_.file("two.bin");
  std::vector<uint8_t> bytes;
  ASSERT_NO_FATAL_FAILURE(make_file(two, test_seed() * 23, 128 * MiB, &bytes));
  Handle h(two, O_RDONLY);
  ASSERT_TRUE(h.ok());
  ASSERT_EQ(read_and_check(h, bytes, 0, 128 * MiB, 4 * MiB), "");  // read once: both wanted next
  holding.hold(true);
  auto first = std::async(std::launch::async, [&] { return read_and_check(h, bytes, 0, 4 * MiB, 4 * MiB); });
  for (int i = 0; i < 10000 && holding.waiting() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(holding.waiting(), 1) << "the first window's registration never started";
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  auto second = std::async(std::launch::async, [&] { return read_and_check(h, bytes, 64 * MiB, 4 * MiB, 4 * MiB); });
  const bool done = second.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
  EXPECT_EQ(holding.waiting(), 1) << "the second read began making its window too";
  holding.hold(false);
  ASSERT_TRUE(done) << "the second read waited for the first window's registration";
  EXPECT_EQ(second.get(), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before) << "the second read was not staged";
  EXPECT_EQ(first.get(), "");
  const uint64_t made_first = read_bytes_by(Path::page_cache_dma);
  EXPECT_EQ(made_first - dma_before, 4 * MiB) << "the first read did not copy out of its window";
  ASSERT_EQ(read_and_check(h, bytes, 64 * MiB, 4 * MiB, 4 * MiB), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma) - made_first, 4 * MiB)
      << "the second window was not made by the next read of its bytes";
}

// GPUFILE_PAGECACHE_DMA_MB=0 turns the path off: reads are staged.
TEST_F(PageCacheDma, ZeroTurnsItOff) {
  open_session("0");
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  for (int pass = 0; pass < 2; ++pass) EXPECT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before);
}


// ---- windows made by long reads of bytes read before (gpufile.pagecache_dma_long_read_mb) -------

class LongReadWindows : public PageCacheDma {
 protected:
  void SetUp() override {
    PageCacheDma::SetUp();
    if (IsSkipped()) return;
    setenv("GPUFILE_PAGECACHE_DMA_LONG_READ_MB", "16", 1);
    setenv("LOCAL_WORLD_SIZE", "2", 1);  // another process of the job feeds another GPU here
    setenv("GPUFILE_WORKERS", "4", 1);    // not the two of half a small machine's cores
    ASSERT_NO_FATAL_FAILURE(open_session());
    controls_ = fake_controls();
  }
  void TearDown() override {
    if (controls_.reset_faults) controls_.reset_faults();
    PageCacheDma::TearDown();
  }

  // A file of three page-cache windows (160 MiB = 64 + 64 + 32) at big_, its bytes in big_bytes_.
  void make_three_windows(uint64_t seed) {
    ASSERT_NO_FATAL_FAILURE(make_file(big_, seed, 160 * MiB, &big_bytes_));
  }

  FakeControls controls_;
  const std::string big_ = dir_.file("three-windows.bin");
  std::vector<uint8_t> big_bytes_;
};

// A long read (at least long_read_mb) of cached bytes read before makes their windows as it
// goes, farthest first, while the workers take its pieces from the near end (copying out of the
// windows made by the time they reach them); the first reading makes none. Within a few more
// readings every window is made and a reading copies every byte out of them.
TEST_F(LongReadWindows, LongReadingsAfterTheFirstMakeTheWindows) {
  ASSERT_NO_FATAL_FAILURE(make_three_windows(test_seed() * 29));
  const std::string& big = big_;
  const std::vector<uint8_t>& bytes = big_bytes_;
  Handle h(big, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const size_t registered_before = live_registered_ ? live_registered_() : 0;
  uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before) << "the first reading made a window";
  ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "");
  if (live_registered_) {
    EXPECT_GE(live_registered_() - registered_before, 32 * MiB) << "the second reading made no window";
  }
  bool all = false;
  for (int reading = 3; reading <= 8 && !all; ++reading) {
    dma_before = read_bytes_by(Path::page_cache_dma);
    ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "") << "reading " << reading;
    all = read_bytes_by(Path::page_cache_dma) - dma_before == bytes.size();
  }
  EXPECT_TRUE(all) << "eight readings never copied every byte out of windows";
}

// A long read makes the windows of the bytes read before only: after a short read of a file's
// last MiB, the first long reading of the whole file makes that MiB's window and stages the
// rest (making every window it touched had run at a fifth of the staged speed on four GPUs);
// the next reading, every byte of which was read before, makes the others.
TEST_F(LongReadWindows, ALongReadMakesOnlyTheWindowsOfBytesReadBefore) {
  ASSERT_NO_FATAL_FAILURE(make_three_windows(test_seed() * 31));
  const std::string& big = big_;
  const std::vector<uint8_t>& bytes = big_bytes_;
  Handle h(big, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const size_t registered_before = live_registered_ ? live_registered_() : 0;
  ASSERT_EQ(read_and_check(h, bytes, bytes.size() - MiB, MiB, MiB), "");
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "");
  // The last window holds the file's last 32 MiB (160 = 64 + 64 + 32).
  EXPECT_LE(read_bytes_by(Path::page_cache_dma) - dma_before, 32 * MiB)
      << "the first long reading copied bytes read once out of windows";
  if (live_registered_) {
    EXPECT_LE(live_registered_() - registered_before, 32 * MiB)
        << "the first long reading made windows of bytes read once";
  }
  ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "");
  if (live_registered_) {
    EXPECT_GE(live_registered_() - registered_before, 96 * MiB) << "the second long reading made no window";
  }
}

// Below long_read_mb (and above the short reads' four slabs), or with it 0, a long read makes
// nothing however often it is read.
TEST_F(LongReadWindows, ShorterReadsAndZeroMakeNone) {
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  setenv("GPUFILE_PAGECACHE_DMA_LONG_READ_MB", "20", 1);
  ASSERT_NO_FATAL_FAILURE(open_session());
  Handle shorter(path_, O_RDONLY);
  ASSERT_TRUE(shorter.ok());
  for (int pass = 0; pass < 3; ++pass) ASSERT_EQ(read_and_check(shorter, data_, 0, 18 * MiB, 18 * MiB), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before) << "an 18 MiB read made a window";
  setenv("GPUFILE_PAGECACHE_DMA_LONG_READ_MB", "0", 1);
  ASSERT_NO_FATAL_FAILURE(open_session());
  Handle again(path_, O_RDONLY);
  ASSERT_TRUE(again.ok());
  for (int pass = 0; pass < 3; ++pass) ASSERT_EQ(read_and_check(again, data_, 0, kFileSize, kFileSize), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before) << "0 did not turn it off";
}

// A process alone with one GPU makes none: its link takes staged bytes near host-to-device
// anyway, and making the windows would halve the speed of the reading that made them.
TEST_F(LongReadWindows, OneGpuAloneOnTheHostMakesNone) {
  int gpus = 0;
  ASSERT_EQ(drv()->DeviceGetCount(&gpus), cu::CUDA_SUCCESS);
  if (gpus != 1) GTEST_SKIP() << "the test double shows " << gpus << " GPUs";
  unsetenv("LOCAL_WORLD_SIZE");
  ASSERT_NO_FATAL_FAILURE(open_session());
  ASSERT_NO_FATAL_FAILURE(make_three_windows(test_seed() * 43));
  const std::string& big = big_;
  const std::vector<uint8_t>& bytes = big_bytes_;
  Handle h(big, O_RDONLY);
  ASSERT_TRUE(h.ok());
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  for (int reading = 1; reading <= 3; ++reading)
    ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "") << "reading " << reading;
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma), dma_before) << "a lone GPU's long readings made windows";
}

// ---- processes that no launcher announced (capi.pagecache_dma_nvml: the NVML test double) ------

// A process that no launcher started beside others (no LOCAL_WORLD_SIZE) and that sees one GPU
// asks NVML whether other processes use the host's GPUs (exec::HostSharing): its long readings
// make windows where they do, and stay staged where it is alone or NVML cannot tell.
class NvmlPeers : public LongReadWindows {
 protected:
  void SetUp() override {
    const char* nvml = std::getenv("GPUFILE_NVML_LIBRARY");
    if (nvml == nullptr || std::string(nvml).find("fakenvml") == std::string::npos)
      GTEST_SKIP() << "needs the NVML test double (capi.pagecache_dma_nvml)";
    LongReadWindows::SetUp();
    if (IsSkipped()) return;
    unsetenv("LOCAL_WORLD_SIZE");
    int gpus = 0;
    ASSERT_EQ(drv()->DeviceGetCount(&gpus), cu::CUDA_SUCCESS);
    if (gpus != 1) GTEST_SKIP() << "the test double shows " << gpus << " GPUs";
  }
  void TearDown() override {
    session_.reset();
    unsetenv("FAKENVML_PROCESSES");
    unsetenv("FAKENVML_FAIL");
    LongReadWindows::TearDown();
  }

  // Page-cache DMA bytes of the third of three whole readings of a 160 MiB file, in a session
  // opened with NVML listing `processes` (FAKENVML_PROCESSES), its process list failing where
  // `fails`. The environment is changed with no session open: a session's thread reads it when
  // it asks NVML.
  uint64_t third_reading_from_windows(const char* processes, bool fails = false) {
    session_.reset();
    setenv("FAKENVML_PROCESSES", processes, 1);
    if (fails) setenv("FAKENVML_FAIL", "processes", 1);
    else unsetenv("FAKENVML_FAIL");
    open_session();
    const std::string big = dir_.file("peers.bin");
    std::vector<uint8_t> bytes;
    make_file(big, test_seed() * 37, 160 * MiB, &bytes);
    Handle h(big, O_RDONLY);
    uint64_t dma = 0;
    for (int reading = 1; reading <= 3; ++reading) {
      dma = read_bytes_by(Path::page_cache_dma);
      EXPECT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "") << "reading " << reading;
    }
    return read_bytes_by(Path::page_cache_dma) - dma;
  }
};

TEST_F(NvmlPeers, AnotherProcessOnTheHostsGpusMeansWindows) {
  EXPECT_GT(third_reading_from_windows("self;4242"), 0u) << "another process on GPU 1";
}

TEST_F(NvmlPeers, AloneOnTheHostMeansNone) {
  EXPECT_EQ(third_reading_from_windows("self;"), 0u) << "nobody else on either GPU";
}

TEST_F(NvmlPeers, WhereNvmlCannotTellOneGpuMeansNone) {
  // This process's PID missing from the list: NVML numbers PIDs of another namespace.
  EXPECT_EQ(third_reading_from_windows("4242;4343"), 0u);
  EXPECT_EQ(third_reading_from_windows("self;4242", /*fails=*/true), 0u);
}

// The driver refusing a registration midway (the second window of three, on the second
// reading): the read is whole,
// the file is staged from then on until it changes, and nothing stays registered after it.
TEST_F(LongReadWindows, ARegistrationRefusedMidwayLeavesTheReadWhole) {
  if (!controls_.fail_call || !live_registered_) GTEST_SKIP() << "needs the test double's fault hooks";
  ASSERT_NO_FATAL_FAILURE(make_three_windows(test_seed() * 31));
  const std::string& big = big_;
  const std::vector<uint8_t>& bytes = big_bytes_;
  const size_t registered_before = live_registered_();
  {
    Handle h(big, O_RDONLY);
    ASSERT_TRUE(h.ok());
    ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "");  // read once: staged
    const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
    ASSERT_EQ(controls_.fail_call("cuMemHostRegister_v2", 2, 2 /* CUDA_ERROR_OUT_OF_MEMORY */), 0);
    const unsigned long long calls = controls_.call_count("cuMemHostRegister_v2");
    ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "");
    const bool refused = controls_.call_count("cuMemHostRegister_v2") - calls >= 2;
    const uint64_t made = read_bytes_by(Path::page_cache_dma) - dma_before;
    EXPECT_LE(made, 32 * MiB) << "bytes came out of a window whose registration was refused";
    controls_.reset_faults();
    const uint64_t registered = live_registered_();
    ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "");
    if (refused) EXPECT_EQ(live_registered_(), registered) << "a refused file was registered again";
  }
  EXPECT_EQ(live_registered_(), registered_before) << "a window outlived its file's handle";
}

// The far end of the file replaced (its pages punched out and written anew) while a second
// reading's window over it is being registered: that reading ends whole (what it read of the
// changed bytes is whatever a pread racing with the change would give), and the readings after
// see the new bytes, never the pages the old window pinned.
TEST_F(LongReadWindows, PagesReplacedWhileTheirWindowIsMadeAreReadAnewNextTime) {
  RegistrationHold holding;
  if (!holding.available()) GTEST_SKIP() << "needs the test double's registration hold";
  ASSERT_NO_FATAL_FAILURE(make_three_windows(test_seed() * 41));
  const std::string& big = big_;
  const std::vector<uint8_t>& bytes = big_bytes_;
  constexpr uint64_t kTail = 4 * MiB;  // in the farthest window, the first one made
  const uint64_t tail_at = bytes.size() - kTail;
  Handle h(big, O_RDONLY);
  ASSERT_TRUE(h.ok());
  bind_context();
  std::string why;
  auto buf = Buffer::make(Mem::device, bytes.size(), &why);
  ASSERT_TRUE(buf) << why;
  ASSERT_EQ(read_and_check(h, bytes, 0, bytes.size(), bytes.size()), "");  // read once: staged
  holding.hold(true);
  auto second = std::async(std::launch::async, [&] {
    bind_context();
    return cuFileRead(h.get(), buf->ptr(), bytes.size(), 0, 0);
  });
  for (int i = 0; i < 10000 && holding.waiting() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_EQ(holding.waiting(), 1) << "the second reading never began registering a window";
  std::vector<uint8_t> renewed = bytes;
  {
    Rng rng(test_seed() * 37);
    const std::vector<uint8_t> tail = rng.bytes(kTail);
    std::memcpy(renewed.data() + tail_at, tail.data(), kTail);
    const int fd = ::open(big.c_str(), O_WRONLY | O_CLOEXEC);
    ASSERT_GE(fd, 0) << strerror(errno);
    if (::fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, static_cast<off_t>(tail_at),
                    static_cast<off_t>(kTail)) != 0) {
      const int e = errno;
      ::close(fd);
      holding.hold(false);
      second.wait();
      GTEST_SKIP() << "the file system cannot punch holes: " << strerror(e);
    }
    ASSERT_EQ(::pwrite(fd, tail.data(), kTail, static_cast<off_t>(tail_at)), static_cast<ssize_t>(kTail));
    ::close(fd);
  }
  holding.hold(false);
  ASSERT_EQ(second.get(), static_cast<ssize_t>(bytes.size()));
  for (int reading = 3; reading <= 5; ++reading)
    EXPECT_EQ(read_and_check(h, renewed, 0, bytes.size(), bytes.size()), "")
        << "reading " << reading << " saw stale pages";
}

// The workers copy out of windows made already: a batch read (the workers' IO) of a file whose
// window exists takes every byte straight from it.
TEST_F(LongReadWindows, WorkersCopyOutOfWindowsMadeAlready) {
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  // Short reads make the window (on their second reading, on the caller's thread).
  for (int pass = 0; pass < 2; ++pass) ASSERT_EQ(read_and_check(h, data_, 0, kFileSize, MiB), "");
  bind_context();
  std::string why;
  auto buf = Buffer::make(Mem::device, kFileSize, &why);
  ASSERT_TRUE(buf) << why;
  constexpr unsigned kEntries = 6;  // 4 MiB each, one piece apiece
  std::vector<CUfileIOParams_t> io(kEntries);
  for (unsigned k = 0; k < kEntries; ++k) {
    io[k].mode = CUFILE_BATCH;
    io[k].u.batch = {buf->ptr(), static_cast<off_t>(k * 4 * MiB), static_cast<off_t>(k * 4 * MiB), 4 * MiB};
    io[k].fh = h.get();
    io[k].opcode = CUFILE_READ;
    io[k].cookie = &io[k];
  }
  const uint64_t dma_before = read_bytes_by(Path::page_cache_dma);
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, kEntries).err, CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileBatchIOSubmit(b, kEntries, io.data(), 0).err, CU_FILE_SUCCESS);
  unsigned done = 0;
  std::vector<CUfileIOEvents_t> ev(kEntries);
  for (int tries = 0; done < kEntries && tries < 2000; ++tries) {
    unsigned nr = kEntries - done;
    timespec t{0, 10 * 1000 * 1000};
    ASSERT_EQ(cuFileBatchIOGetStatus(b, 1, &nr, ev.data(), &t).err, CU_FILE_SUCCESS);
    for (unsigned k = 0; k < nr; ++k) {
      EXPECT_EQ(ev[k].status, CUFILE_COMPLETE);
      EXPECT_EQ(ev[k].ret, 4 * MiB);
    }
    done += nr;
  }
  cuFileBatchIODestroy(b);
  ASSERT_EQ(done, kEntries);
  const std::vector<uint8_t> got = buf->read_back(0, kFileSize);
  EXPECT_EQ(first_mismatch(got.data(), data_.data(), kFileSize), "");
  EXPECT_EQ(read_bytes_by(Path::page_cache_dma) - dma_before, kFileSize)
      << "the workers staged bytes a window holds";
}

}  // namespace
}  // namespace capi_test
