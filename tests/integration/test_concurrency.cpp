// Suite 5: concurrency. Many threads on one handle; deregistration and driver close racing
// with IO in flight (no crash, no hang; IO either completes correctly or fails cleanly).
#include <cinttypes>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <utility>

#include "common.hpp"
#include "core/stats.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

class Concurrency : public CapiTest {
 protected:
  void SetUp() override {
    CapiTest::SetUp();
    session_ = std::make_unique<DriverSession>();
    ASSERT_TRUE(session_->ok()) << session_->error();
    seed_ = test_seed();
    Rng rng(seed_);
    path_ = dir_.file("conc.bin");
    shadow_ = rng.bytes(kFileSize);
    ASSERT_NO_FATAL_FAILURE(write_file(path_, shadow_.data(), shadow_.size()));
  }
  void TearDown() override {
    session_.reset();
    for (const std::string& name : env_set_) unsetenv(name.c_str());
    CapiTest::TearDown();
  }
  // A new session with these settings in the environment (unset again after the test).
  // GPUFILE_ENGINE and GPUFILE_DIRECT_IO go through the session, which sets both at its open.
  void reopen_with(std::initializer_list<std::pair<const char*, const char*>> settings) {
    session_.reset();
    EngineConfig engine{nullptr, nullptr};
    for (const auto& [name, value] : settings) {
      if (std::string(name) == "GPUFILE_ENGINE") {
        engine.engine = value;
      } else if (std::string(name) == "GPUFILE_DIRECT_IO") {
        engine.direct_io = value;
      } else {
        ASSERT_EQ(setenv(name, value, 1), 0);
        env_set_.emplace_back(name);
      }
    }
    session_ = std::make_unique<DriverSession>(engine);
    ASSERT_TRUE(session_->ok()) << session_->error();
  }
  // A session whose cached reads are staged (page-cache DMA off): for the tests of who stages
  // what, since the fixture's file is cached.
  void staging_only() { reopen_with({{"GPUFILE_PAGECACHE_DMA_MB", "0"}}); }

  static constexpr uint64_t kFileSize = 64 * MiB;
  TempDir dir_;
  std::unique_ptr<DriverSession> session_;
  uint64_t seed_ = 0;
  std::string path_;
  std::vector<uint8_t> shadow_;
  std::vector<std::string> env_set_;
};

// 16 threads, one handle, disjoint file ranges, mixed reads and writes of mixed sizes and memory
// kinds; every byte verified as it goes and the whole file at the end.
TEST_F(Concurrency, SixteenThreadsOneHandle) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  const bool direct = direct_io_works(dir_.path());
  Handle h(path_, O_RDWR | (direct ? O_DIRECT : 0));
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(180), "SixteenThreadsOneHandle");
  constexpr int kThreads = 16, kOps = 40;
  constexpr uint64_t kSlice = kFileSize / kThreads;  // 4 MiB each
  std::vector<std::vector<uint8_t>> shadows(kThreads);
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    shadows[t].assign(shadow_.begin() + t * kSlice, shadow_.begin() + (t + 1) * kSlice);
    threads.emplace_back([&, t] {
      bind_context();
      Rng rng(seed_ * 31 + static_cast<uint64_t>(t));
      const Mem kind = has_driver() ? kAllMem[t % 4] : Mem::pageable;
      std::string why;
      auto buf = Buffer::make(kind, 2 * MiB + 8192, &why);
      if (!buf) {  // e.g. no managed memory: use device memory
        buf = Buffer::make(has_driver() ? Mem::device : Mem::pageable, 2 * MiB + 8192, &why);
        if (!buf) {
          errors[t] = why;
          return;
        }
      }
      const bool reg = t % 2 == 0;
      if (reg && cuFileBufRegister(buf->ptr(), buf->size(), 0).err != CU_FILE_SUCCESS) {
        errors[t] = "BufRegister";
        return;
      }
      std::vector<uint8_t>& sh = shadows[t];
      for (int i = 0; i < kOps && errors[t].empty(); ++i) {
        // Sizes: mostly small (inline path), some medium, some large (executor).
        static const size_t kinds[] = {1, 512, 4096, 65536, 65537, 300000, 1 * MiB + 1, 2 * MiB};
        size_t size = kinds[rng.below(std::size(kinds))];
        if (rng.below(2)) size = std::max<size_t>(1, size - rng.below(std::min<size_t>(size, 4096)));
        uint64_t off = rng.below(kSlice - size + 1);
        size_t boff = rng.below(8192);
        bool write = rng.below(2) == 1;
        char what[128];
        snprintf(what, sizeof what, "thread %d op %d %s off=%" PRIu64 " size=%zu buf_off=%zu %s", t, i,
                 write ? "write" : "read", t * kSlice + off, size, boff, mem_name(buf->kind()));
        if (write) {
          std::vector<uint8_t> data = rng.bytes(size);
          buf->upload(boff, data.data(), size);
          ssize_t n = cuFileWrite(h.get(), buf->ptr(), size, static_cast<off_t>(t * kSlice + off),
                                  static_cast<off_t>(boff));
          if (n != static_cast<ssize_t>(size)) {
            errors[t] = std::string(what) + ": returned " + std::to_string(n) + " errno " + errno_text(errno);
            break;
          }
          std::memcpy(sh.data() + off, data.data(), size);
        } else {
          ssize_t n = cuFileRead(h.get(), buf->ptr(), size, static_cast<off_t>(t * kSlice + off),
                                 static_cast<off_t>(boff));
          if (n != static_cast<ssize_t>(size)) {
            errors[t] = std::string(what) + ": returned " + std::to_string(n) + " errno " + errno_text(errno);
            break;
          }
          std::vector<uint8_t> got = buf->read_back(boff, size);
          std::string m = first_mismatch(got.data(), sh.data() + off, size);
          if (!m.empty()) errors[t] = std::string(what) + ": " + m;
        }
      }
      if (reg) cuFileBufDeregister(buf->ptr());
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  std::vector<uint8_t> file = read_file(path_, 0, kFileSize);
  for (int t = 0; t < kThreads; ++t)
    EXPECT_EQ(first_mismatch(file.data() + t * kSlice, shadows[t].data(), kSlice), "") << "slice " << t;
}

// Threads writing disjoint, unaligned byte ranges that abut inside shared 4 KiB pages, at the
// same moment, through one O_DIRECT handle: every byte of every write must survive (as with
// pwrite). The library splits unaligned writes into buffered and direct parts; a direct part and
// another thread's buffered part in the same page must not clobber each other.
TEST_F(Concurrency, AdjacentUnalignedWritersSharingPages) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  if (!direct_io_works(dir_.path())) GTEST_SKIP() << "no O_DIRECT";
  Handle h(path_, O_RDWR | O_DIRECT);
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(120), "AdjacentUnalignedWritersSharingPages");
  constexpr int kThreads = 2;
  int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  for (size_t piece : {size_t(3000), size_t(70001)}) {  // inline path and executor path
    SCOPED_TRACE("piece " + std::to_string(piece));
    const size_t stride = piece * kThreads + 4096;
    const int rounds = 60;
    std::vector<std::vector<uint8_t>> datas(kThreads);
    std::vector<std::string> errors(kThreads);
    std::mutex mu;
    std::condition_variable cv;
    int round = -1, done = 0;
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t) {
      Rng rng(seed_ + 77 * t + piece);
      datas[t] = rng.bytes(piece * rounds);
      ts.emplace_back([&, t] {
        bind_context();
        std::string why;
        auto buf = Buffer::make(Mem::pageable, datas[t].size(), &why);
        buf->upload(0, datas[t].data(), datas[t].size());
        for (int j = 0; j < rounds; ++j) {
          {
            std::unique_lock lock(mu);
            cv.wait(lock, [&] { return round >= j; });
          }
          const uint64_t off = 777 + j * stride + t * piece;
          // Stagger the second writer by 0..190 us so its buffered head meets the first
          // writer's direct body in flight.
          if (t == 1) std::this_thread::sleep_for(std::chrono::microseconds((j % 20) * 10));
          ssize_t n = cuFileWrite(h.get(), buf->ptr(), piece, static_cast<off_t>(off), static_cast<off_t>(j * piece));
          if (n != static_cast<ssize_t>(piece) && errors[t].empty())
            errors[t] = "write returned " + std::to_string(n) + " " + errno_text(errno);
          std::lock_guard lock(mu);
          ++done;
          cv.notify_all();
        }
      });
    }
    for (int j = 0; j < rounds; ++j) {
      ::fdatasync(fd);
      ::posix_fadvise(fd, 0, kFileSize, POSIX_FADV_DONTNEED);
      std::unique_lock lock(mu);
      round = j;
      cv.notify_all();
      cv.wait(lock, [&] { return done == (j + 1) * kThreads; });
    }
    for (auto& th : ts) th.join();
    for (int t = 0; t < kThreads; ++t) ASSERT_EQ(errors[t], "") << "thread " << t;
    for (int t = 0; t < kThreads; ++t)
      for (int j = 0; j < rounds; ++j)
        std::memcpy(shadow_.data() + 777 + j * stride + t * piece, datas[t].data() + j * piece, piece);
    std::vector<uint8_t> file = read_file(path_, 0, kFileSize);
    ASSERT_EQ(first_mismatch(file.data(), shadow_.data(), kFileSize), "")
        << "concurrent writes of disjoint ranges lost bytes (a direct part and another write's "
           "buffered part shared a page)";
  }
  ::close(fd);
}

// cuFileBufDeregister racing with IO on the same buffer from other threads: IO either completes
// with the right bytes or fails cleanly; nothing crashes or hangs.
TEST_F(Concurrency, BufDeregisterRacesWithIo) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Handle h(path_, O_RDWR);
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(120), "BufDeregisterRacesWithIo");
  for (Mem kind : {Mem::device, Mem::pinned, Mem::pageable}) {
    SCOPED_TRACE(mem_name(kind));
    std::string why;
    const size_t size = 5 * MiB;
    auto buf = Buffer::make(kind, 4 * size, &why);
    if (!buf) continue;
    std::atomic<bool> stop{false};
    std::vector<std::string> errors(3);
    std::vector<std::thread> readers;
    for (int r = 0; r < 3; ++r) {
      readers.emplace_back([&, r] {
        bind_context();
        for (int i = 0; !stop.load() && i < 400; ++i) {
          // Each reader its own quarter of the buffer; sizes on both sides of the small-IO path.
          size_t n = (i % 3 == 0) ? 4096 + r : size - r;
          uint64_t off = static_cast<uint64_t>((i * 7 + r) % 8) * MiB + r;
          errno = 0;
          ssize_t got = cuFileRead(h.get(), buf->ptr(), n, static_cast<off_t>(off), static_cast<off_t>(r * size));
          if (got == static_cast<ssize_t>(n)) {
            std::vector<uint8_t> data = buf->read_back(r * size, n);
            std::string m = first_mismatch(data.data(), shadow_.data() + off, n);
            if (!m.empty()) errors[r] = m;
          } else if (got != -1 || errno == 0) {
            errors[r] = "returned " + std::to_string(got) + " errno " + errno_text(errno);
          }
          if (!errors[r].empty()) break;
        }
      });
    }
    for (int i = 0; i < 200; ++i) {
      CUfileError_t st = cuFileBufRegister(buf->ptr(), buf->size(), 0);
      EXPECT_EQ(st.err, CU_FILE_SUCCESS);
      std::this_thread::sleep_for(std::chrono::microseconds(200 + (i % 7) * 100));
      if (st.err == CU_FILE_SUCCESS) {
        EXPECT_EQ(cuFileBufDeregister(buf->ptr()).err, CU_FILE_SUCCESS);
      }
    }
    stop = true;
    for (auto& th : readers) th.join();
    for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "reader " << r;
  }
}

// cuFileHandleDeregister racing with IO on that handle from other threads: each IO completes or
// fails with 5027; after deregister returns, the fd can be closed safely.
TEST_F(Concurrency, HandleDeregisterRacesWithIo) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(120), "HandleDeregisterRacesWithIo");
  std::string why;
  for (int round = 0; round < 20; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    CUfileHandle_t fh = nullptr;
    ASSERT_EQ(register_fd(fd, &fh).err, CU_FILE_SUCCESS);
    std::atomic<bool> go{false};
    std::vector<std::string> errors(4);
    std::vector<std::thread> ts;
    for (int r = 0; r < 4; ++r) {
      ts.emplace_back([&, r] {
        bind_context();
        const Mem kind = has_driver() ? kAllMem[r % 3] : Mem::pageable;
        std::string w;
        auto buf = Buffer::make(kind, 3 * MiB, &w);
        if (!buf) {
          errors[r] = w;
          return;
        }
        while (!go.load()) std::this_thread::yield();
        for (int i = 0; i < 50; ++i) {
          size_t n = (i + r) % 2 ? 3 * MiB - r : 8192 + r;
          uint64_t off = static_cast<uint64_t>(i % 16) * MiB + r;
          errno = 0;
          ssize_t got = cuFileRead(fh, buf->ptr(), n, static_cast<off_t>(off), 0);
          if (got == static_cast<ssize_t>(n)) {
            std::vector<uint8_t> data = buf->read_back(0, n);
            std::string m = first_mismatch(data.data(), shadow_.data() + off, n);
            if (!m.empty()) errors[r] = m;
          } else if (got == -1 && errno == CU_FILE_HANDLE_NOT_REGISTERED) {
            break;  // deregistered: every later IO fails the same way
          } else {
            errors[r] = "returned " + std::to_string(got) + " errno " + errno_text(errno);
          }
          if (!errors[r].empty()) break;
        }
      });
    }
    go = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(round % 5));
    cuFileHandleDeregister(fh);
    ::close(fd);  // allowed once deregister returned
    for (auto& th : ts) th.join();
    for (int r = 0; r < 4; ++r) EXPECT_EQ(errors[r], "") << "reader " << r;
    if (HasFailure()) break;
  }
}

// cuFileDriverClose while other threads do IO: close waits for IO in flight or the IO fails
// cleanly (handle gone, 5027, or driver not open, 5001); no crash, no hang.
TEST_F(Concurrency, DriverCloseWhileIoInFlight) {
  SCOPED_TRACE("seed=" + std::to_string(seed_));
  Watchdog dog(std::chrono::seconds(120), "DriverCloseWhileIoInFlight");
  for (int round = 0; round < 8; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    drain_driver();
    ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
    int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    CUfileHandle_t fh = nullptr;
    ASSERT_EQ(register_fd(fd, &fh).err, CU_FILE_SUCCESS);
    std::atomic<bool> go{false};
    std::atomic<int> completed{0}, failed{0};
    std::vector<std::string> errors(3);
    std::vector<std::thread> ts;
    for (int r = 0; r < 3; ++r) {
      ts.emplace_back([&, r] {
        bind_context();
        const Mem kind = has_driver() ? kAllMem[r % 3] : Mem::pageable;
        std::string w;
        auto buf = Buffer::make(kind, 9 * MiB, &w);
        if (!buf) {
          errors[r] = w;
          return;
        }
        while (!go.load()) std::this_thread::yield();
        for (int i = 0; i < 30; ++i) {
          size_t n = (i + r) % 3 ? 9 * MiB - r : 4096;
          uint64_t off = static_cast<uint64_t>(i % 8) * MiB + r;
          errno = 0;
          ssize_t got = cuFileRead(fh, buf->ptr(), n, static_cast<off_t>(off), 0);
          if (got == static_cast<ssize_t>(n)) {
            ++completed;
            std::vector<uint8_t> data = buf->read_back(0, n);
            std::string m = first_mismatch(data.data(), shadow_.data() + off, n);
            if (!m.empty()) errors[r] = m;
          } else if (got == -1 && (errno == CU_FILE_HANDLE_NOT_REGISTERED || errno == CU_FILE_DRIVER_NOT_INITIALIZED)) {
            ++failed;
            break;
          } else {
            errors[r] = "returned " + std::to_string(got) + " errno " + errno_text(errno);
          }
          if (!errors[r].empty()) break;
        }
      });
    }
    go = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2 + round * 3));
    EXPECT_EQ(cuFileDriverClose().err, CU_FILE_SUCCESS);
    for (auto& th : ts) th.join();
    ::close(fd);
    for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[r], "") << "reader " << r;
    // IO after close may have reopened the driver implicitly; close it for the next round.
    drain_driver();
    if (HasFailure()) break;
  }
}

// Handles and buffers registered and deregistered from many threads at once.
TEST_F(Concurrency, RegistrationChurn) {
  Watchdog dog(std::chrono::seconds(60), "RegistrationChurn");
  std::vector<std::string> errors(8);
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t) {
    ts.emplace_back([&, t] {
      bind_context();
      std::string why;
      auto buf = Buffer::make(has_driver() ? kAllMem[t % 3] : Mem::pageable, 64 * KiB, &why);
      for (int i = 0; i < 100 && errors[t].empty(); ++i) {
        int fd = ::open(path_.c_str(), O_RDWR | O_CLOEXEC);
        CUfileHandle_t fh = nullptr;
        if (register_fd(fd, &fh).err != CU_FILE_SUCCESS) errors[t] = "HandleRegister";
        if (buf && cuFileBufRegister(buf->ptr(), buf->size(), 0).err != CU_FILE_SUCCESS) errors[t] = "BufRegister";
        if (fh && buf && cuFileRead(fh, buf->ptr(), 4096, static_cast<off_t>(t * 4096), 0) != 4096)
          errors[t] = "read " + errno_text(errno);
        if (buf && cuFileBufDeregister(buf->ptr()).err != CU_FILE_SUCCESS) errors[t] = "BufDeregister";
        if (fh) cuFileHandleDeregister(fh);
        ::close(fd);
      }
    });
  }
  for (auto& th : ts) th.join();
  for (int t = 0; t < 8; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

// A driver closed from a thread that never made a CUDA context current (a cleanup thread, an
// atexit handler) still unpins every staging buffer: the driver refuses cuMemHostUnregister
// without a current context, and the registrations - pinned pages of memory already unmapped -
// would outlive the session (a later open then failed with CUDA_ERROR_HOST_MEMORY_ALREADY_
// REGISTERED where the kernel handed out the same addresses again).
TEST_F(Concurrency, DriverClosedFromAThreadWithoutAContextUnpinsItsStaging) {
  CAPI_REQUIRE_DRIVER();
  auto live_registered =
      reinterpret_cast<size_t (*)()>(driver_symbol("fakecuda_live_registered_bytes"));
  if (!live_registered) GTEST_SKIP() << "needs the test double's registration counter";
  session_.reset();
  // What is pinned with no session open (the stream API's staging lives for the process).
  const size_t baseline = live_registered();
  session_ = std::make_unique<DriverSession>();
  ASSERT_TRUE(session_->ok()) << session_->error();
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  std::string why;
  auto buf = Buffer::make(Mem::device, 8 * MiB, &why);
  ASSERT_TRUE(buf) << why;
  ASSERT_EQ(cuFileRead(h.get(), buf->ptr(), 8 * MiB, 0, 0), static_cast<ssize_t>(8 * MiB));
  h.reset();
  ASSERT_GT(live_registered(), baseline) << "the session pinned no staging";
  std::thread closer([] { drain_driver(); });  // a thread with no context current
  closer.join();
  EXPECT_EQ(live_registered(), baseline) << "staging stayed pinned after the driver closed";
  session_ = std::make_unique<DriverSession>();
  EXPECT_TRUE(session_->ok()) << session_->error();
}

// The open pins the workers' staging and the callers' first buffers (two slabs, sixteen small
// ones) as one mapping in one registration: each registration is a driver call the first load
// of a checkpoint waits for (issue 13). A caller's first small read and first large read then
// find their staging made and pin nothing more.
TEST_F(Concurrency, OpeningPinsItsStagingInOneRegistration) {
  CAPI_REQUIRE_DRIVER();
  const FakeControls fake = fake_controls();
  if (!fake.call_count) GTEST_SKIP() << "needs the test double's call counts";
  session_.reset();
  // One NUMA node's mapping, and no page-cache windows (they are registrations too).
  const uint64_t before = fake.call_count("cuMemHostRegister_v2");
  reopen_with({{"GPUFILE_NUMA_PLACEMENT", "off"}, {"GPUFILE_PAGECACHE_DMA_MB", "0"}});
  EXPECT_EQ(fake.call_count("cuMemHostRegister_v2") - before, 1u);
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  std::string why;
  auto buf = Buffer::make(Mem::device, 8 * MiB, &why);
  ASSERT_TRUE(buf) << why;
  const uint64_t opened = fake.call_count("cuMemHostRegister_v2");
  ASSERT_EQ(cuFileRead(h.get(), buf->ptr(), 4096, 0, 0), 4096);
  ASSERT_EQ(cuFileRead(h.get(), buf->ptr(), 8 * MiB, 0, 0), static_cast<ssize_t>(8 * MiB));
  EXPECT_EQ(first_mismatch(buf->read_back(0, 8 * MiB).data(), shadow_.data(), 8 * MiB), "");
  EXPECT_EQ(fake.call_count("cuMemHostRegister_v2"), opened) << "a first read pinned staging";
}

// ---- the ring of reads past the page cache (exec/executor.hpp, deepen_for_cold) -------------
//
// A worker's ring of staging slabs grows from gpufile.slabs_per_worker to
// gpufile.cold_slabs_per_worker once it has read kColdPiecesBeforeDeeper long pieces with
// O_DIRECT: every worker's new slabs pinned in one registration, once per session. Here: 2
// workers, rings of 2 slabs of 256 KiB, growing to `cold` slabs; page-cache DMA off (its windows
// are registrations too), one NUMA node's mapping.
class ColdRing : public Concurrency {
 protected:
  static constexpr uint64_t kSlab = 256 * KiB;
  void SetUp() override {
    Concurrency::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    if (!has_driver()) GTEST_SKIP() << "the rings stage reads into GPU memory";
    fake_ = fake_controls();
    if (!fake_.call_count || !fake_.live_registered_bytes || !fake_.fail_call)
      GTEST_SKIP() << "needs the test double's counts";
    if (!direct_io_works(dir_.path())) GTEST_SKIP() << "O_DIRECT refused here: no read goes past the page cache";
    session_.reset();
    registered_without_session_ = fake_.live_registered_bytes();
  }
  void open(const char* direct_io, const char* cold, const char* cold_piece_kb = "0") {
    reopen_with({{"GPUFILE_NUMA_PLACEMENT", "off"}, {"GPUFILE_PAGECACHE_DMA_MB", "0"},
                 {"GPUFILE_DIRECT_IO", direct_io}, {"GPUFILE_WORKERS", "2"},
                 {"GPUFILE_SLABS_PER_WORKER", "2"}, {"GPUFILE_SLAB_SIZE_KB", "256"},
                 {"GPUFILE_COLD_SLABS_PER_WORKER", cold}, {"GPUFILE_COLD_PIECE_KB", cold_piece_kb}});
  }
  unsigned long long registrations() const { return fake_.call_count("cuMemHostRegister_v2"); }
  // Reads the whole file into device memory `rounds` times, or until `enough()`, every byte
  // checked; returns the rounds read.
  int read_file(int rounds, const std::function<bool()>& enough = [] { return false; }) {
    Handle h(path_, O_RDONLY);
    EXPECT_TRUE(h.ok());
    std::string why;
    auto buf = Buffer::make(Mem::device, kFileSize, &why);
    EXPECT_TRUE(buf) << why;
    if (!h.ok() || !buf) return 0;
    for (int round = 1; round <= rounds; ++round) {
      EXPECT_EQ(cuFileRead(h.get(), buf->ptr(), kFileSize, 0, 0), static_cast<ssize_t>(kFileSize));
      EXPECT_EQ(first_mismatch(buf->read_back(0, kFileSize).data(), shadow_.data(), kFileSize), "")
          << "round " << round;
      if (enough()) return round;
    }
    return rounds;
  }
  FakeControls fake_;
  size_t registered_without_session_ = 0;
};

TEST_F(ColdRing, LongDirectReadsGrowEveryRingOnceInOneRegistration) {
  open("always", "4");
  const unsigned long long opened = registrations();
  const size_t before = fake_.live_registered_bytes();
  const unsigned long long events = fake_.call_count("cuEventCreate");
  read_file(8, [&] { return registrations() > opened; });
  EXPECT_EQ(registrations() - opened, 1u) << "the rings did not grow";
  EXPECT_EQ(fake_.live_registered_bytes() - before, 2 * 2 * kSlab) << "2 workers x 2 more slabs";
  read_file(2);
  EXPECT_EQ(registrations() - opened, 1u) << "the rings grew again";
  // A worker makes a copy event per slot it copies from (4 for the two workers' first rings):
  // more means that the new slabs carried reads.
  EXPECT_GT(fake_.call_count("cuEventCreate") - events, 2u * 2u) << "no worker read into its new slabs";
  session_.reset();
  EXPECT_EQ(fake_.live_registered_bytes(), registered_without_session_) << "the grown rings leaked";
}

// gpufile.cold_piece_kb: O_DIRECT reads in pieces of 64 KiB out of 256 KiB slabs, every byte
// right, and the rings still grow (their long pieces are counted against the cold piece size).
TEST_F(ColdRing, ColdPiecesCutDirectReadsAndTheRingsStillGrow) {
  open("always", "4", "64");
  const unsigned long long opened = registrations();
  const unsigned long long before = fake_.host_to_device_copies();
  read_file(1);
  EXPECT_GE(fake_.host_to_device_copies() - before, kFileSize / (64 * KiB)) << "pieces larger than 64 KiB";
  read_file(8, [&] { return registrations() > opened; });
  EXPECT_EQ(registrations() - opened, 1u) << "the rings did not grow";
  open("never", "4", "64");
  const unsigned long long buffered = fake_.host_to_device_copies();
  read_file(1);
  EXPECT_LE(fake_.host_to_device_copies() - buffered, kFileSize / (128 * KiB)) << "reads through the page cache were cut too";
}

TEST_F(ColdRing, ReadsThroughThePageCacheNeverGrowTheRings) {
  open("never", "4");
  const unsigned long long opened = registrations();
  read_file(4);
  EXPECT_EQ(registrations(), opened);
}

TEST_F(ColdRing, AColdRingNoDeeperThanTheRingNeverGrows) {
  open("always", "2");
  const unsigned long long opened = registrations();
  read_file(4);
  EXPECT_EQ(registrations(), opened);
}

// Pinning the deeper rings fails: the reads go on with the rings they have, every byte right,
// nothing is left registered, and the session does not try again.
TEST_F(ColdRing, ARingThatCannotGrowKeepsReading) {
  open("always", "4");
  AtExit reset([&] { fake_.reset_faults(); });
  const unsigned long long opened = registrations();
  const size_t before = fake_.live_registered_bytes();
  ASSERT_EQ(fake_.fail_call("cuMemHostRegister", 1, gpufile::cuda::CUDA_ERROR_OUT_OF_MEMORY), 0);
  read_file(8, [&] { return registrations() > opened; });
  ASSERT_EQ(registrations() - opened, 1u) << "the rings never tried to grow";
  fake_.reset_faults();
  read_file(2);
  EXPECT_EQ(registrations() - opened, 1u) << "a failed growth was tried again";
  EXPECT_EQ(fake_.live_registered_bytes(), before);
}

// Who runs what (src/route/route.hpp, plan_threads), seen through the counters of bytes moved
// by callers' own threads and by the workers. Bytes are checked either way.
struct RunnerBytes {
  uint64_t caller = 0, workers = 0;
};

RunnerBytes read_runner_bytes() {
  gpufile::stats::Snapshot s = gpufile::stats::snapshot();
  return {s.caller_bytes[0], s.worker_bytes[0]};
}

RunnerBytes moved_since(const RunnerBytes& before) {
  RunnerBytes now = read_runner_bytes();
  return {now.caller - before.caller, now.workers - before.workers};
}

// `threads` threads, each reading `reads` calls of `size` bytes (thread t's k-th read at
// (t * reads + k) * size) into its own buffer of `kind`, every byte checked. With `bind` false,
// no context is current on a thread when it calls cuFileRead (as on Python's threads).
void read_from_threads(const Handle& h, const std::vector<uint8_t>& shadow, int threads, int reads,
                       uint64_t size, Mem kind, bool bind = true) {
  std::vector<std::thread> ts;
  std::vector<std::string> errors(threads);
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      if (bind) bind_context();
      std::string err;
      auto b = Buffer::make(kind, size, &err);
      if (!b) return void(errors[t] = err);
      for (int k = 0; k < reads && errors[t].empty(); ++k) {
        const uint64_t off = (static_cast<uint64_t>(t) * reads + k) * size % (shadow.size() - size);
        if (!bind && drv()) drv()->CtxSetCurrent(nullptr);  // Buffer's calls bind one
        if (cuFileRead(h.get(), b->ptr(), size, static_cast<off_t>(off), 0) != static_cast<ssize_t>(size))
          errors[t] = "read failed at " + std::to_string(off) + ": " + errno_text(errno);
        else if (std::vector<uint8_t> got = b->read_back(0, size);
                 !first_mismatch(got.data(), shadow.data() + off, size).empty())
          errors[t] = "wrong bytes at " + std::to_string(off);
      }
    });
  }
  for (auto& th : ts) th.join();
  for (int t = 0; t < threads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
}

// At INFO the open says what its steps cost (where a first load's fixed cost goes, issue 13).
TEST_F(Concurrency, TheOpenLogsWhatItsStepsCostAtInfo) {
  const std::string log = dir_.file("open.log");
  reopen_with({{"GPUFILE_LOG_LEVEL", "INFO"}, {"GPUFILE_LOG_FILE", log.c_str()}});
  std::ifstream in(log);
  std::string line, found;
  while (std::getline(in, line))
    if (line.find("session opened in ") != std::string::npos) found = line;
  ASSERT_NE(found, "") << "no open line in " << log;
  for (const char* step : {"driver ", "placement ", "workers ", "staging, ", "faulted in ",
                           "registered ", "engines ", "threads ", "remote staging ",
                           "NVIDIA's library ", "page-cache DMA "})
    EXPECT_NE(found.find(step), std::string::npos) << step << " missing from: " << found;
}

// Staging buffers are O_DIRECT targets however small_io_kb rounds: the small buffers pinned at
// open lie end to end in one region, each starting on a 4 KiB boundary (small_io_kb 5 would lay
// them 13 KiB apart unrounded: aligned enough for a disk of 512-byte sectors, as here, but not
// for one whose O_DIRECT wants 4 KiB-aligned memory). Twelve threads at once, so that many of
// the buffers made at open are used.
TEST_F(Concurrency, SmallBuffersOfAnySizeTakeDirectReads) {
  CAPI_REQUIRE_DRIVER();
  if (!direct_io_works(dir_.path())) GTEST_SKIP() << "no O_DIRECT in " << dir_.path();
  reopen_with({{"GPUFILE_PAGECACHE_DMA_MB", "0"}, {"GPUFILE_SMALL_IO_KB", "5"},
               {"GPUFILE_DIRECT_IO", "always"}});
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(120), "SmallBuffersOfAnySizeTakeDirectReads");
  read_from_threads(h, shadow_, 12, 20, 5000, Mem::device);
}

// Small IO runs on the caller; a call alone shares its pieces with idle workers; asynchronous IO
// (a batch) is the workers' alone.
TEST_F(Concurrency, SmallIoStaysOnTheCallerAndACallAloneSharesItsPieces) {
  CAPI_REQUIRE_DRIVER();
  ASSERT_NO_FATAL_FAILURE(staging_only());
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(120), "ACallAloneSharesItsPieces");
  std::string why;
  auto buf = Buffer::make(Mem::device, 32 * MiB, &why);
  ASSERT_TRUE(buf) << why;
  auto read_exact = [&](uint64_t off, size_t n) {
    ASSERT_EQ(cuFileRead(h.get(), buf->ptr(), n, static_cast<off_t>(off), 0), static_cast<ssize_t>(n));
    std::vector<uint8_t> got = buf->read_back(0, n);
    ASSERT_EQ(first_mismatch(got.data(), shadow_.data() + off, n), "");
  };

  RunnerBytes before = read_runner_bytes();
  for (int i = 0; i < 20; ++i) read_exact(static_cast<uint64_t>(i) * 12345, 4 * KiB);
  RunnerBytes small = moved_since(before);
  EXPECT_EQ(small.caller, 20 * 4 * KiB);
  EXPECT_EQ(small.workers, 0u);

  // Idle workers help a large call: workers go to sleep right after a call, so a few calls in a
  // row find them idle (one may start before the last one's workers are back asleep).
  RunnerBytes large;
  for (int i = 0; i < 10 && (large.caller == 0 || large.workers == 0); ++i) {
    before = read_runner_bytes();
    read_exact(MiB * static_cast<uint64_t>(i), 32 * MiB);
    large = moved_since(before);
    EXPECT_EQ(large.caller + large.workers, 32 * MiB);
  }
  EXPECT_GT(large.caller, 0u) << "the caller did not run any piece of its own call";
  EXPECT_GT(large.workers, 0u) << "no idle worker helped a call alone";

  before = read_runner_bytes();
  CUfileBatchHandle_t b = nullptr;
  ASSERT_EQ(cuFileBatchIOSetUp(&b, 1).err, CU_FILE_SUCCESS);
  CUfileIOParams_t p{};
  p.mode = CUFILE_BATCH;
  p.fh = h.get();
  p.opcode = CUFILE_READ;
  p.u.batch.devPtr_base = buf->ptr();
  p.u.batch.size = 8 * MiB;
  ASSERT_EQ(cuFileBatchIOSubmit(b, 1, &p, 0).err, CU_FILE_SUCCESS);
  CUfileIOEvents_t ev{};
  unsigned nr = 1;
  timespec forever{30, 0};
  ASSERT_EQ(cuFileBatchIOGetStatus(b, 1, &nr, &ev, &forever).err, CU_FILE_SUCCESS);
  cuFileBatchIODestroy(b);
  ASSERT_EQ(nr, 1u);
  EXPECT_EQ(ev.ret, 8 * MiB);
  RunnerBytes batch = moved_since(before);
  EXPECT_EQ(batch.caller, 0u);
  EXPECT_EQ(batch.workers, 8 * MiB);
}

// Callers enough to keep every worker busy hand their calls on GPU memory to the workers whole;
// on host memory, which needs no staging, each reads into its own buffer. Copies take 2 ms
// each (the test double's delay), so the calls overlap.
TEST_F(Concurrency, ManyCallersGiveGpuIoToTheWorkersAndRunHostIoThemselves) {
  CAPI_REQUIRE_DRIVER();
  const FakeControls fake = fake_controls();
  if (!fake.set_async_delay_us) GTEST_SKIP() << "needs the test double's copy delay";
  // Two workers, whatever the cores. Host IO goes to the callers once the callers in flight
  // leave the workers no spare cores; with the machine's own count (12 on 16 cores) that took
  // nine or more pageable calls in flight at once, which calls of a few hundred microseconds
  // seldom are: on the 16-core GPU machine the workers moved 41-50% of the host IO and the
  // test failed, on 2 cores it passed. With two workers, three callers in flight already get no
  // worker's share (route.cpp: idle workers / callers in flight).
  ASSERT_NO_FATAL_FAILURE(reopen_with({{"GPUFILE_PAGECACHE_DMA_MB", "0"}, {"GPUFILE_WORKERS", "2"}}));
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(120), "ManyCallers");
  fake.set_async_delay_us(2000);
  AtExit undo([&] { fake.set_async_delay_us(0); });
  const int threads = 16;
  RunnerBytes before = read_runner_bytes();
  read_from_threads(h, shadow_, threads, 12, 2 * MiB, Mem::device);
  RunnerBytes moved = moved_since(before);
  EXPECT_EQ(moved.caller + moved.workers, uint64_t(threads) * 12 * 2 * MiB);
  // A thread's first call may start before the others are under way and run on its caller.
  EXPECT_GE(moved.workers, (moved.caller + moved.workers) * 3 / 4)
      << "busy callers ran GPU IO themselves";

  before = read_runner_bytes();
  read_from_threads(h, shadow_, threads, 12, 2 * MiB, Mem::pageable);
  moved = moved_since(before);
  EXPECT_EQ(moved.caller + moved.workers, uint64_t(threads) * 12 * 2 * MiB);
  EXPECT_GE(moved.caller, (moved.caller + moved.workers) * 3 / 4)
      << "busy callers handed host IO to the workers";
}

// Callers on threads without a current context grow the staging pool as others do: pinning
// needs a context, and the pool grew on the caller's thread before its job's context was
// made current, so such callers found no staging beyond the slabs made at open and left
// their pieces to the workers.
TEST_F(Concurrency, CallersWithoutAContextGrowTheStagingPool) {
  CAPI_REQUIRE_DRIVER();
  const FakeControls fake = fake_controls();
  auto live_registered =
      reinterpret_cast<size_t (*)()>(driver_symbol("fakecuda_live_registered_bytes"));
  if (!fake.set_async_delay_us || !live_registered)
    GTEST_SKIP() << "needs the test double's copy delay and registration counter";
  // 4 callers stay fewer than half of 16 workers
  ASSERT_NO_FATAL_FAILURE(reopen_with({{"GPUFILE_WORKERS", "16"}}));
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(120), "CallersWithoutAContext");
  fake.set_async_delay_us(2000);  // the calls overlap: four callers want two slabs each
  AtExit undo([&] { fake.set_async_delay_us(0); });
  const size_t pinned_at_open = live_registered();
  read_from_threads(h, shadow_, 4, 6, 8 * MiB, Mem::device, /*bind=*/false);
  EXPECT_GT(live_registered(), pinned_at_open)
      << "callers without a context could not add staging to the pool";
}

// Staging is lent per call and never held between calls: with two slabs for six callers (fewer
// than half of 16 workers, so they take part in their calls), the callers left without one give
// their pieces to the workers, and every call completes.
TEST_F(Concurrency, CallersWithoutStagingLeaveTheirPiecesToTheWorkers) {
  CAPI_REQUIRE_DRIVER();
  const FakeControls fake = fake_controls();
  if (!fake.set_async_delay_us) GTEST_SKIP() << "needs the test double's copy delay";
  ASSERT_NO_FATAL_FAILURE(reopen_with({{"GPUFILE_CALLER_SLABS", "2"}, {"GPUFILE_WORKERS", "16"}}));
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(120), "CallersWithoutStaging");
  fake.set_async_delay_us(2000);
  AtExit undo([&] { fake.set_async_delay_us(0); });
  const RunnerBytes before = read_runner_bytes();
  read_from_threads(h, shadow_, 6, 6, 8 * MiB, Mem::device);
  const RunnerBytes moved = moved_since(before);
  EXPECT_EQ(moved.caller + moved.workers, 6 * 6 * 8 * MiB);
  EXPECT_GT(moved.caller, 0u);
  EXPECT_GT(moved.workers, 0u) << "callers without staging did not leave their pieces to the workers";
}

// Cached bytes copied straight out of registered page cache cost the CPU nothing but the
// copies' issue: once the file's windows are made (it was read twice), however many callers,
// each makes its own copies (the workers take none), and the bytes are counted under that path. (Each caller still borrows a staging slab, whose stream
// carries its copies and which stages a piece no window serves: 32 slabs for 16 callers here,
// two per core on a 16-core machine.)
TEST_F(Concurrency, ManyCallersCopyOutOfThePageCacheThemselves) {
  CAPI_REQUIRE_DRIVER();
  const FakeControls fake = fake_controls();
  if (!fake.set_async_delay_us) GTEST_SKIP() << "needs the test double's copy delay";
  ASSERT_NO_FATAL_FAILURE(reopen_with({{"GPUFILE_CALLER_SLABS", "32"}}));
  Handle h(path_, O_RDONLY);
  ASSERT_TRUE(h.ok());
  Watchdog dog(std::chrono::seconds(120), "ManyCallersOutOfThePageCache");
  fake.set_async_delay_us(2000);
  AtExit undo([&] { fake.set_async_delay_us(0); });
  const uint64_t dma_before =
      gpufile::stats::snapshot().paths[0][static_cast<int>(gpufile::stats::Path::page_cache_dma)].bytes;
  read_from_threads(h, shadow_, 16, 4, 2 * MiB, Mem::device);  // the file read twice: windows made
  const RunnerBytes before = read_runner_bytes();
  read_from_threads(h, shadow_, 16, 12, 2 * MiB, Mem::device);
  const RunnerBytes moved = moved_since(before);
  EXPECT_EQ(moved.caller, 16u * 12 * 2 * MiB);
  EXPECT_EQ(moved.workers, 0u);
  EXPECT_GT(gpufile::stats::snapshot().paths[0][static_cast<int>(gpufile::stats::Path::page_cache_dma)].bytes,
            dma_before);
}

}  // namespace
}  // namespace capi_test
