#include "fault_support.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "exec/runtime.hpp"

namespace fault {

uint64_t seed() {
  static const uint64_t s = [] {
    const char* v = std::getenv("FAULT_SEED");
    return v && *v ? std::strtoull(v, nullptr, 0) : 0x5eed2026ull;
  }();
  return s;
}

namespace {
std::string running_test() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "?";
  return name + " (FAULT_SEED=" + std::to_string(seed()) + ")";
}
}  // namespace

Watchdog::Watchdog(std::chrono::seconds limit) : test_support::Watchdog(limit, running_test()) {}

GuardedBuffer::GuardedBuffer(size_t size, size_t misalign) : size_(size) {
  total_ = (kGuard + misalign + size + kGuard + 4095) & ~size_t{4095};
  base_ = static_cast<char*>(std::aligned_alloc(4096, total_));
  data_ = base_ + kGuard + misalign;
  fill_sentinel();
}

GuardedBuffer::~GuardedBuffer() { std::free(base_); }

void GuardedBuffer::fill_sentinel() { std::memset(base_, kSentinel, total_); }

bool GuardedBuffer::guards_intact() const {
  auto clean = [](const char* p, const char* end) {
    for (; p < end; ++p)
      if (static_cast<unsigned char>(*p) != kSentinel) return false;
    return true;
  };
  return clean(base_, data_) && clean(data_ + size_, base_ + total_);
}

void fill_random(char* p, size_t n, uint64_t seed) {
  uint64_t x = seed;
  for (size_t i = 0; i < n; i += 8) {
    x += 0x9e3779b97f4a7c15ull;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(p + i, &z, std::min<size_t>(8, n - i));
  }
}

size_t first_mismatch(const char* a, const char* b, size_t n) {
  if (std::memcmp(a, b, n) == 0) return SIZE_MAX;
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return i;
  return SIZE_MAX;
}

uint64_t checksum(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<unsigned char>(p[i])) * 0x100000001b3ull;
  return h;
}

int64_t ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() -
                                                               t0)
      .count();
}

namespace {

bool pwrite_all(int fd, const char* p, size_t n, off_t off) {
  while (n > 0) {
    ssize_t r = ::pwrite(fd, p, n, off);
    if (r <= 0) return false;
    p += r, n -= static_cast<size_t>(r), off += r;
  }
  return true;
}

void set_or_unset(const char* name, const std::string& value) {
  if (value.empty()) {
    unsetenv(name);
  } else {
    setenv(name, value.c_str(), 1);
  }
}

}  // namespace

void FaultTest::SetUp() {
  watchdog.emplace(std::chrono::seconds(60));
  // The runtime reads its settings at open: set them first, and leave nothing from the
  // caller's environment that would change the data path.
  setenv("GPUFILE_CUDA_LIBRARY", "/nonexistent", 1);
  set_or_unset("GPUFILE_ENGINE", engine == "auto" ? "" : engine);
  set_or_unset("GPUFILE_DIRECT_IO", direct_io);
  for (const char* v : {"GPUFILE_SMALL_IO_KB", "GPUFILE_WORKERS", "GPUFILE_SLAB_SIZE_KB",
                        "GPUFILE_SLABS_PER_WORKER", "GPUFILE_RING_DEPTH"})
    unsetenv(v);
  installed.emplace(faults);
  before_open();
  CUfileError_t e = cuFileDriverOpen();
  if (e.err != CU_FILE_SUCCESS && engine == "io_uring") {
    GTEST_SKIP() << "io_uring is not usable here (cuFileDriverOpen: " << e.err << ")";
  }
  ASSERT_EQ(e.err, CU_FILE_SUCCESS);
  driver_open = true;
  if (engine != "auto") {
    ASSERT_EQ(gpufile::Runtime::instance().engine_name(), engine);
  }

  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/gpufile-fault.XXXXXX";
  ASSERT_NE(mkdtemp(templ.data()), nullptr) << std::strerror(errno);
  dir = templ;
  path = dir + "/data";
  fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << std::strerror(errno);
  shadow.resize(file_size);
  fill_random(shadow.data(), shadow.size(), seed());
  ASSERT_TRUE(pwrite_all(fd, shadow.data(), shadow.size(), 0));
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  ASSERT_EQ(cuFileHandleRegister(&fh, &d).err, CU_FILE_SUCCESS);
}

void FaultTest::TearDown() {
  if (fh) cuFileHandleDeregister(fh);
  if (fd >= 0) ::close(fd);
  if (driver_open) cuFileDriverClose();
  installed.reset();
  if (HasFailure()) {
    std::fprintf(stderr, "fault seed: FAULT_SEED=%llu reruns this test with the same faults\n",
                 static_cast<unsigned long long>(seed()));
    std::string j = faults.journal();
    if (!j.empty()) std::fprintf(stderr, "injected faults (first 200):\n%s", j.c_str());
  }
  if (!path.empty()) ::unlink(path.c_str());
  if (!dir.empty()) ::rmdir(dir.c_str());
  watchdog.reset();
}

ssize_t FaultTest::read(GuardedBuffer& b, uint64_t off, uint64_t len) {
  return cuFileRead(fh, b.data(), len, static_cast<off_t>(off), 0);
}

ssize_t FaultTest::write(GuardedBuffer& b, uint64_t off, uint64_t len) {
  return cuFileWrite(fh, b.data(), len, static_cast<off_t>(off), 0);
}

void FaultTest::expect_read_exact(GuardedBuffer& b, uint64_t off, uint64_t len) {
  b.fill_sentinel();
  errno = 0;
  ssize_t n = read(b, off, len);
  ASSERT_EQ(n, static_cast<ssize_t>(len)) << "cuFileRead failed, errno " << errno;
  EXPECT_TRUE(b.guards_intact()) << "bytes outside the destination changed";
  size_t bad = first_mismatch(b.data(), shadow.data() + off, len);
  EXPECT_EQ(bad, SIZE_MAX) << "first wrong byte at " << bad << " of " << len;
}

void FaultTest::expect_write_exact(GuardedBuffer& b, uint64_t off, uint64_t len) {
  fill_random(b.data(), len, seed() ^ (++rounds << 40));
  errno = 0;
  ssize_t n = write(b, off, len);
  ASSERT_EQ(n, static_cast<ssize_t>(len)) << "cuFileWrite failed, errno " << errno;
  std::memcpy(shadow.data() + off, b.data(), len);
  expect_file_matches_shadow();
}

void FaultTest::expect_file_matches_shadow() {
  struct stat st {};
  ASSERT_EQ(::fstat(fd, &st), 0);
  ASSERT_EQ(static_cast<uint64_t>(st.st_size), shadow.size());
  std::vector<char> disk(shadow.size());
  ASSERT_EQ(::pread(fd, disk.data(), disk.size(), 0), static_cast<ssize_t>(disk.size()));
  size_t bad = first_mismatch(disk.data(), shadow.data(), disk.size());
  if (bad == SIZE_MAX) return;
  size_t last = bad, count = 0;
  for (size_t i = bad; i < disk.size(); ++i)
    if (disk[i] != shadow[i]) last = i, ++count;
  ADD_FAILURE() << "file differs from its shadow in " << count << " bytes, from byte " << bad
                << " to byte " << last;
}

void FaultTest::restore_file(uint64_t from) {
  ASSERT_EQ(::ftruncate(fd, static_cast<off_t>(shadow.size())), 0);
  ASSERT_TRUE(pwrite_all(fd, shadow.data() + from, shadow.size() - from, static_cast<off_t>(from)));
}

void FaultTest::reregister() {
  cuFileHandleDeregister(fh);
  fh = nullptr;
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  ASSERT_EQ(cuFileHandleRegister(&fh, &d).err, CU_FILE_SUCCESS);
}

size_t FaultTest::count(gpufile::sys::FaultOp op) {
  return faults.add({.op = op, .times = gpufile::sys::FaultRule::persistent, .probability = 0.0});
}

std::optional<gpufile::sys::Residency> FaultTest::residency(uint64_t off, uint64_t len) {
  gpufile::sys::Residency r;
  if (gpufile::sys::Os().cachestat(fd, off, len, &r) != 0) return std::nullopt;
  return r;
}

bool FaultTest::evict(uint64_t off, uint64_t len) {
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const auto r = residency(off, len);
  return r && r->cached_pages == 0;
}

bool FaultTest::direct_capable() {
  gpufile::Runtime::FileReport rep;
  return !gpufile::Runtime::instance().explain_file(fh, &rep) && rep.direct_capable;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.engine << ", " << c.size << " bytes at " << c.off;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.engine) + (info.param.size > 64 * 1024 ? "_chunked" : "_inline");
}

::testing::internal::ParamGenerator<Case> all_cases() {
  const uint64_t inline_size = 40000, chunked_size = (9u << 20) + 123;
  return ::testing::Values(Case{"io_uring", inline_size, 8197}, Case{"posix", inline_size, 8197},
                           Case{"io_uring", chunked_size, 1000}, Case{"posix", chunked_size, 1000});
}

}  // namespace fault
