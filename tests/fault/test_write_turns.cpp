// Files in memory (tmpfs, ramfs) hold their inode lock through every write, so threads writing
// one such file at once only spin in the kernel (on the H100, 16 callers writing /dev/shm burnt
// 3.4 CPU-seconds per GiB for less speed than one writer). gpufile writes them one at a time:
// one turn per file, shared by every handle of it (callers commonly register one fd per thread).
#include <fcntl.h>
#include <sys/vfs.h>

#include <atomic>

#include "fault_support.hpp"

namespace fault {
namespace {

// The real calls, counting the most pwrites that were ever in the kernel at once. Each write
// lingers a little, so that writers that do not wait their turn overlap.
class OverlapCountingOs : public gpufile::sys::Os {
 public:
  ssize_t pwrite(int fd, const void* buf, size_t len, uint64_t off) override {
    const int now = in_flight_.fetch_add(1) + 1;
    for (int seen = most_.load(); now > seen && !most_.compare_exchange_weak(seen, now);) {
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    ssize_t r = Os::pwrite(fd, buf, len, off);
    in_flight_.fetch_sub(1);
    return r;
  }
  int most() const { return most_.load(); }

 private:
  std::atomic<int> in_flight_{0};
  std::atomic<int> most_{0};
};

bool on_tmpfs(const char* dir) {
  struct statfs sf {};
  return statfs(dir, &sf) == 0 && sf.f_type == 0x01021994;
}

TEST(WriteTurns, WritesToAFileInMemoryGoOneAtATimeWhicheverHandleCarriesThem) {
  if (!on_tmpfs("/dev/shm")) GTEST_SKIP() << "/dev/shm is not tmpfs here";
  Watchdog dog(std::chrono::seconds(120));
  OverlapCountingOs counting;
  gpufile::sys::ScopedOs scoped(counting);
  ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  const std::string path = "/dev/shm/gpufile-turns-" + std::to_string(getpid());
  constexpr int kThreads = 4, kWrites = 8;
  constexpr size_t kPiece = 256 << 10, kRegion = kWrites * kPiece;
  {
    int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0600);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(ftruncate(fd, kThreads * kRegion), 0);
    ::close(fd);
  }
  std::vector<std::vector<char>> data(kThreads, std::vector<char>(kRegion));
  std::vector<std::string> errors(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    fill_random(data[t].data(), kRegion, seed() + t);
    threads.emplace_back([&, t] {
      int fd = ::open(path.c_str(), O_RDWR);  // a handle of its own
      CUfileDescr_t d{};
      d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
      d.handle.fd = fd;
      CUfileHandle_t h = nullptr;
      if (cuFileHandleRegister(&h, &d).err != CU_FILE_SUCCESS) errors[t] = "register";
      for (int k = 0; k < kWrites && errors[t].empty(); ++k) {
        const off_t at = static_cast<off_t>(t * kRegion + k * kPiece);
        if (cuFileWrite(h, data[t].data() + k * kPiece, kPiece, at, 0) != static_cast<ssize_t>(kPiece))
          errors[t] = "write " + std::to_string(k) + ": " + strerror(errno);
      }
      if (h) cuFileHandleDeregister(h);
      ::close(fd);
    });
  }
  for (auto& th : threads) th.join();
  cuFileDriverClose();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(errors[t], "") << "thread " << t;
  EXPECT_EQ(counting.most(), 1) << "writes to one file in memory overlapped";
  int fd = ::open(path.c_str(), O_RDONLY);
  std::vector<char> got(kRegion);
  for (int t = 0; t < kThreads; ++t) {
    ASSERT_EQ(pread(fd, got.data(), kRegion, static_cast<off_t>(t * kRegion)), static_cast<ssize_t>(kRegion));
    EXPECT_EQ(first_mismatch(got.data(), data[t].data(), kRegion), SIZE_MAX) << "region " << t;
  }
  ::close(fd);
  unlink(path.c_str());
}

}  // namespace
}  // namespace fault
