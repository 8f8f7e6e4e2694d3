// Path 5, "vendor direct" (src/vendor/nvidia.hpp), against the test double of NVIDIA's
// libcufile (tests/support/fakecufile): which IO goes through NVIDIA's library and which stays
// on gpufile's paths, the fallback of refused files with its one log line, an IO failing in
// NVIDIA's library, buffer and file registrations forwarded and taken back, and when the library
// is not used at all. FAKECUFILE_PATH, the double's path, is compiled in (CMakeLists.txt).
#include <dlfcn.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "common.hpp"
#include "core/stats.hpp"
#include "api/file.hpp"
#include "exec/runtime.hpp"
#include "fakecufile.h"
#include "vendor/nvidia.hpp"

namespace capi_test {
namespace {

constexpr size_t KiB = 1024, MiB = 1024 * KiB;
using gpufile::stats::Path;

uint64_t bytes_by(int op, Path p) { return gpufile::stats::snapshot().paths[op][static_cast<int>(p)].bytes; }
uint64_t read_vendor_bytes() { return bytes_by(0, Path::vendor); }
uint64_t write_vendor_bytes() { return bytes_by(1, Path::vendor); }
// Bytes of reads that gpufile's own paths moved, whichever.
uint64_t read_own_bytes() {
  uint64_t sum = 0;
  for (int p = 0; p < gpufile::stats::kPaths; ++p)
    if (p != static_cast<int>(Path::vendor)) sum += bytes_by(0, static_cast<Path>(p));
  return sum;
}

// The double's controls, from the very copy gpufile loaded (same path: same loaded object).
struct Double {
  decltype(&fakecufile_calls) calls = nullptr;
  decltype(&fakecufile_fail) fail = nullptr;
  decltype(&fakecufile_open_files) open_files = nullptr;
  decltype(&fakecufile_open_buffers) open_buffers = nullptr;
  decltype(&fakecufile_driver_is_open) driver_is_open = nullptr;
  decltype(&fakecufile_last_file_direct) last_file_direct = nullptr;
  decltype(&fakecufile_reset) reset = nullptr;
};

const char* double_path() { return FAKECUFILE_PATH; }

// Null until gpufile has loaded the double.
void* double_handle() { return dlopen(double_path(), RTLD_NOW | RTLD_NOLOAD); }

Double controls() {
  Double d;
  void* h = double_handle();
  if (h == nullptr) return d;
  d.calls = reinterpret_cast<decltype(d.calls)>(dlsym(h, "fakecufile_calls"));
  d.fail = reinterpret_cast<decltype(d.fail)>(dlsym(h, "fakecufile_fail"));
  d.open_files = reinterpret_cast<decltype(d.open_files)>(dlsym(h, "fakecufile_open_files"));
  d.open_buffers = reinterpret_cast<decltype(d.open_buffers)>(dlsym(h, "fakecufile_open_buffers"));
  d.driver_is_open = reinterpret_cast<decltype(d.driver_is_open)>(dlsym(h, "fakecufile_driver_is_open"));
  d.last_file_direct = reinterpret_cast<decltype(d.last_file_direct)>(dlsym(h, "fakecufile_last_file_direct"));
  d.reset = reinterpret_cast<decltype(d.reset)>(dlsym(h, "fakecufile_reset"));
  return d;
}

// Sets environment variables for one test and puts the old values back after it.
class Env {
 public:
  void set(const char* name, const char* value) {
    const char* old = std::getenv(name);
    saved_.emplace_back(name, old ? std::optional<std::string>(old) : std::nullopt);
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~Env() {
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it)
      if (it->second) setenv(it->first.c_str(), it->second->c_str(), 1);
      else unsetenv(it->first.c_str());
  }

 private:
  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t count_lines_with(const std::string& text, const std::string& a, const std::string& b) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(a) != std::string::npos && line.find(b) != std::string::npos) ++n;
  return n;
}

class VendorPath : public ::testing::Test {
 protected:
  void SetUp() override {
    CAPI_REQUIRE_DRIVER();
    if (!direct_io_works(dir_.path())) GTEST_SKIP() << "no O_DIRECT in " << dir_.path();
    drain_driver();
    // gpufile's own choice for these files is O_DIRECT: the page cache must not decide.
    env_.set("GPUFILE_DIRECT_IO", "always");
    env_.set("GPUFILE_LOG_FILE", log_.c_str());
    env_.set("GPUFILE_LOG_LEVEL", "WARN");
    env_.set("FAKECUFILE_REFUSE", "refused");
    env_.set("GPUFILE_VENDOR_LIBRARY", FAKECUFILE_PATH);
    data_ = random_bytes(kFile);
    write_file(dir_.file("data.bin"), data_.data(), data_.size());
    write_file(dir_.file("refused.bin"), data_.data(), data_.size());
  }
  void TearDown() override {
    drain_driver();
    if (Double d = controls(); d.reset) d.reset();
  }

  // Opens the driver with the environment set so far; the double's controls after.
  Double open() {
    bind_context();
    EXPECT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
    Double d = controls();
    if (d.reset) d.reset();
    return d;
  }

  std::vector<uint8_t> random_bytes(size_t n) {
    Rng rng(test_seed());
    return rng.bytes(n);
  }

  // Reads [off, off+n) of `h` into `buf` at `buf_off` and checks every byte.
  void read_and_check(const Handle& h, Buffer& buf, size_t n, off_t off, off_t buf_off = 0) {
    buf.fill(0, buf.size(), 0);
    ASSERT_EQ(cuFileRead(h.get(), buf.ptr(), n, off, buf_off), static_cast<ssize_t>(n));
    EXPECT_EQ(first_mismatch(buf.read_back(static_cast<size_t>(buf_off), n).data(), data_.data() + off, n), "");
  }

  static constexpr size_t kFile = 8 * MiB;
  TempDir dir_;
  std::string log_ = dir_.file("gpufile.log");
  Env env_;
  std::vector<uint8_t> data_;
};

std::unique_ptr<Buffer> device(size_t n) {
  std::string why;
  auto b = Buffer::make(Mem::device, n, &why);
  EXPECT_TRUE(b) << why;
  // The CUDA double aligns allocations to 256 bytes only: the vendor path wants 4 KiB.
  if (b) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->ptr()) % 4096, 0u) << "the test's GPU buffer is off the 4 KiB grid";
  }
  return b;
}

TEST_F(VendorPath, LargeAlignedReadIntoGpuMemoryGoesThroughNvidia) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr) << "gpufile did not load the double " << double_path();
  Handle h(dir_.file("data.bin"), O_RDONLY);
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(d.last_file_direct(), 1) << "NVIDIA's driver got a descriptor without O_DIRECT";
  auto buf = device(4 * MiB);
  const uint64_t before = read_vendor_bytes();
  read_and_check(h, *buf, 4 * MiB, 4 * MiB);
  EXPECT_EQ(d.calls("cuFileRead"), 1);
  EXPECT_EQ(read_vendor_bytes() - before, 4 * MiB);
}

// A Future's IO (Python's pread, the C++ API's futures, the safetensors loader) is taken as a
// synchronous call: run inside start(), done when it returns, counted under the vendor path.
TEST_F(VendorPath, AFuturesLargeAlignedReadGoesThroughNvidiaAndIsDoneOnReturn) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  std::unique_ptr<gpufile::api::File> f;
  ASSERT_FALSE(gpufile::api::File::open(dir_.file("data.bin"), O_RDONLY, 0, &f));
  auto buf = device(4 * MiB);
  const uint64_t before = read_vendor_bytes();
  std::unique_ptr<gpufile::api::Future> fut;
  ASSERT_FALSE(f->start(gpufile::sys::IoKind::read, buf->ptr(), 4 * MiB, 4 * MiB, &fut));
  EXPECT_TRUE(fut->done()) << "a Future path 5 took still runs after start returned";
  const gpufile::IoResult r = fut->wait();
  ASSERT_TRUE(r.ok()) << gpufile::describe(r.error);
  EXPECT_EQ(r.bytes, 4 * MiB);
  EXPECT_EQ(d.calls("cuFileRead"), 1);
  EXPECT_EQ(read_vendor_bytes() - before, 4 * MiB);
  EXPECT_EQ(first_mismatch(buf->read_back(0, 4 * MiB).data(), data_.data() + 4 * MiB, 4 * MiB), "");
  // A small one stays a Future of gpufile's workers.
  ASSERT_FALSE(f->start(gpufile::sys::IoKind::read, buf->ptr(), 4 * KiB, 0, &fut));
  EXPECT_EQ(fut->wait().bytes, 4 * KiB);
  EXPECT_EQ(d.calls("cuFileRead"), 1);
}

TEST_F(VendorPath, LargeAlignedWriteFromGpuMemoryGoesThroughNvidia) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDWR);
  ASSERT_TRUE(h.ok());
  auto buf = device(2 * MiB);
  std::vector<uint8_t> fresh = random_bytes(2 * MiB);
  fresh[0] ^= 0xff;  // differs from what the file holds
  buf->upload(0, fresh.data(), fresh.size());
  const uint64_t before = write_vendor_bytes();
  ASSERT_EQ(cuFileWrite(h.get(), buf->ptr(), 2 * MiB, 2 * MiB, 0), static_cast<ssize_t>(2 * MiB));
  EXPECT_EQ(d.calls("cuFileWrite"), 1);
  EXPECT_EQ(write_vendor_bytes() - before, 2 * MiB);
  EXPECT_EQ(first_mismatch(read_file(dir_.file("data.bin"), 2 * MiB, 2 * MiB).data(), fresh.data(), 2 * MiB), "");
}

TEST_F(VendorPath, ReadToTheEndOfTheFileCountsOnlyTheBytesThere) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  ASSERT_EQ(cuFileRead(h.get(), buf->ptr(), 4 * MiB, kFile - 1 * MiB, 0), static_cast<ssize_t>(1 * MiB));
  EXPECT_EQ(first_mismatch(buf->read_back(0, MiB).data(), data_.data() + kFile - MiB, MiB), "");
  EXPECT_EQ(d.calls("cuFileRead"), 1);
}

// gpufile's calls come after work queued on the legacy default stream (test_ordering.cpp); NVIDIA's
// DMA waits for no stream, so the vendor path waits for that work before calling it.
TEST_F(VendorPath, AWriteThroughNvidiaStoresWhatAMemsetQueuedBeforeItWrote) {
  using MemsetD8 = cu::CUresult (*)(cu::CUdeviceptr, unsigned char, size_t);
  auto memset_d8 = reinterpret_cast<MemsetD8>(driver_symbol("cuMemsetD8_v2"));
  if (memset_d8 == nullptr) GTEST_SKIP() << "the driver has no cuMemsetD8_v2";
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDWR);
  auto buf = device(2 * MiB);
  buf->fill(0, 2 * MiB, 0x11);
  Watchdog dog(std::chrono::seconds(60), "vendor write behind a memset");
  StreamGate gate;
  ASSERT_EQ(gate.enqueue(nullptr), cu::CUDA_SUCCESS);
  ASSERT_EQ(memset_d8(reinterpret_cast<cu::CUdeviceptr>(buf->ptr()), 0x5a, 2 * MiB), cu::CUDA_SUCCESS);
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    gate.release();
  });
  const ssize_t n = cuFileWrite(h.get(), buf->ptr(), 2 * MiB, 0, 0);
  opener.join();
  ASSERT_EQ(n, static_cast<ssize_t>(2 * MiB));
  EXPECT_EQ(d.calls("cuFileWrite"), 1);
  EXPECT_EQ(not_filled(read_file(dir_.file("data.bin"), 0, 2 * MiB).data(), 2 * MiB, 0x5a), "");
}

TEST_F(VendorPath, SmallUnalignedAndHostIoStayOnGpufilesPaths) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  read_and_check(h, *buf, 64 * KiB, 0);             // small IO
  read_and_check(h, *buf, 2 * MiB, 512);            // file offset off the 4 KiB grid
  read_and_check(h, *buf, 2 * MiB, 0, 512);         // GPU address off the grid
  read_and_check(h, *buf, 2 * MiB - 512, 0);        // size off the grid
  std::string why;
  auto pinned = Buffer::make(Mem::pinned, 2 * MiB, &why);
  ASSERT_TRUE(pinned) << why;
  read_and_check(h, *pinned, 2 * MiB, 0);           // host memory
  EXPECT_EQ(d.calls("cuFileRead"), 0);
}

TEST_F(VendorPath, CachedRangesStayInThePageCache) {
  env_.set("GPUFILE_DIRECT_IO", nullptr);  // auto: a cached range is read from the cache
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDONLY);
  (void)read_file(dir_.file("data.bin"), 0, kFile);  // all of it in the page cache now
  auto buf = device(4 * MiB);
  read_and_check(h, *buf, 4 * MiB, 0);
  EXPECT_EQ(d.calls("cuFileRead"), 0);
}

TEST_F(VendorPath, RefusedFileFallsBackWithOneLogLine) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle refused(dir_.file("refused.bin"), O_RDONLY);
  Handle accepted(dir_.file("data.bin"), O_RDONLY);
  ASSERT_TRUE(refused.ok()) << "gpufile must register a file NVIDIA's driver refuses";
  auto buf = device(4 * MiB);
  const uint64_t before = read_vendor_bytes();
  for (int i = 0; i < 3; ++i) read_and_check(refused, *buf, 4 * MiB, 0);
  EXPECT_EQ(d.calls("cuFileRead"), 0);
  EXPECT_EQ(read_vendor_bytes(), before);
  read_and_check(accepted, *buf, 4 * MiB, 0);
  EXPECT_EQ(d.calls("cuFileRead"), 1);
  const std::string log = slurp(log_);
  EXPECT_EQ(count_lines_with(log, "refused.bin", "(5027)"), 1u) << log;
  EXPECT_EQ(count_lines_with(log, "data.bin", "vendor path"), 0u) << log;
}

TEST_F(VendorPath, FailedNvidiaReadIsRedoneByGpufileAndTheFileFallsBack) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  d.fail("cuFileRead", CU_FILE_NVFS_DRIVER_ERROR, 1);
  const uint64_t before = read_vendor_bytes();
  const uint64_t own_before = read_own_bytes();
  read_and_check(h, *buf, 4 * MiB, 0);  // all bytes, moved by gpufile's own path
  EXPECT_EQ(read_vendor_bytes(), before) << "bytes NVIDIA did not move were counted as its";
  EXPECT_EQ(read_own_bytes() - own_before, 4 * MiB);
  read_and_check(h, *buf, 4 * MiB, 4 * MiB);
  EXPECT_EQ(d.calls("cuFileRead"), 1) << "the file went back to NVIDIA after it failed";
  EXPECT_EQ(count_lines_with(slurp(log_), "cuFileRead failed", "(5010)"), 1u) << slurp(log_);
}

TEST_F(VendorPath, FailedNvidiaWriteIsRedoneByGpufile) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDWR);
  auto buf = device(2 * MiB);
  std::vector<uint8_t> fresh = random_bytes(2 * MiB);
  fresh[7] ^= 0x5a;
  buf->upload(0, fresh.data(), fresh.size());
  d.fail("cuFileWrite", EIO, 1);
  ASSERT_EQ(cuFileWrite(h.get(), buf->ptr(), 2 * MiB, 0, 0), static_cast<ssize_t>(2 * MiB));
  EXPECT_EQ(first_mismatch(read_file(dir_.file("data.bin"), 0, 2 * MiB).data(), fresh.data(), 2 * MiB), "");
  EXPECT_EQ(count_lines_with(slurp(log_), "cuFileWrite failed", "errno 5"), 1u) << slurp(log_);
}

TEST_F(VendorPath, GpuBuffersAreRegisteredWithNvidiaAndTakenBack) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  std::string why;
  auto pinned = Buffer::make(Mem::pinned, MiB, &why);
  ASSERT_TRUE(pinned) << why;
  ASSERT_EQ(cuFileBufRegister(buf->ptr(), 4 * MiB, 0).err, CU_FILE_SUCCESS);
  ASSERT_EQ(cuFileBufRegister(pinned->ptr(), MiB, 0).err, CU_FILE_SUCCESS);
  EXPECT_EQ(d.open_buffers(), 1) << "only GPU memory is NVIDIA's to pin";
  read_and_check(h, *buf, 2 * MiB, 0, 2 * MiB);  // the registered base and an offset into it
  EXPECT_EQ(d.calls("cuFileRead"), 1);
  ASSERT_EQ(cuFileBufDeregister(buf->ptr()).err, CU_FILE_SUCCESS);
  EXPECT_EQ(d.open_buffers(), 0);
  // Left registered at close: NVIDIA's registration goes with the session.
  ASSERT_EQ(cuFileBufRegister(buf->ptr(), 4 * MiB, 0).err, CU_FILE_SUCCESS);
  EXPECT_EQ(d.open_buffers(), 1);
  ASSERT_EQ(cuFileBufDeregister(pinned->ptr()).err, CU_FILE_SUCCESS);
  h.reset();
  drain_driver();
  EXPECT_EQ(d.open_buffers(), 0);
  EXPECT_EQ(d.driver_is_open(), 0);
}

TEST_F(VendorPath, FilesAreDeregisteredWithNvidiaAtDeregisterAndAtClose) {
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  {
    Handle h(dir_.file("data.bin"), O_RDONLY);
    EXPECT_EQ(d.open_files(), 1);
  }
  EXPECT_EQ(d.open_files(), 0);
  const int fd = ::open(dir_.file("data.bin").c_str(), O_RDONLY);
  CUfileHandle_t fh = nullptr;
  ASSERT_EQ(register_fd(fd, &fh).err, CU_FILE_SUCCESS);
  EXPECT_EQ(d.open_files(), 1);
  drain_driver();  // never deregistered by the caller
  EXPECT_EQ(d.open_files(), 0);
  EXPECT_EQ(d.driver_is_open(), 0);
  ::close(fd);
}

TEST_F(VendorPath, CompatModeOnlyIsLeftAloneUnlessForcedOn) {
  env_.set("FAKECUFILE_MODE", "compat");
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  EXPECT_EQ(d.driver_is_open(), 0) << "auto keeps NVIDIA's driver open in compat mode";
  {
    Handle h(dir_.file("data.bin"), O_RDONLY);
    auto buf = device(4 * MiB);
    read_and_check(h, *buf, 4 * MiB, 0);
    EXPECT_EQ(d.calls("cuFileRead"), 0);
  }
  drain_driver();
  env_.set("GPUFILE_VENDOR", "on");
  d = open();
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  read_and_check(h, *buf, 4 * MiB, 0);
  EXPECT_EQ(d.calls("cuFileRead"), 1);
}

TEST_F(VendorPath, P2PdmaWithoutNvidiaFsCountsAsGds) {
  env_.set("FAKECUFILE_MODE", "p2p");
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  read_and_check(h, *buf, 4 * MiB, 0);
  EXPECT_EQ(d.calls("cuFileRead"), 1);
}

TEST_F(VendorPath, DriverOpenFailureLeavesGpufilesPaths) {
  env_.set("GPUFILE_VENDOR", "on");
  env_.set("FAKECUFILE_OPEN_ERROR", "5001");
  Double d = open();
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  read_and_check(h, *buf, 4 * MiB, 0);
  ASSERT_NE(d.calls, nullptr);
  EXPECT_EQ(d.calls("cuFileRead"), 0);
  gpufile::Runtime::FileReport r;
  ASSERT_EQ(gpufile::Runtime::instance().explain_file(h.get(), &r).code, gpufile::Errc::ok);
  EXPECT_NE(r.vendor_state.find("cuFileDriverOpen failed"), std::string::npos) << r.vendor_state;
  EXPECT_NE(r.vendor_state.find("5001"), std::string::npos) << r.vendor_state;
  EXPECT_EQ(r.vendor.why, gpufile::route::Reason::vendor_not_loaded);
}

TEST_F(VendorPath, GpufilesOwnLibraryIsRefused) {
  env_.set("GPUFILE_VENDOR", "on");
  env_.set("GPUFILE_VENDOR_LIBRARY", GPUFILE_OWN_LIBCUFILE);
  open();
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  read_and_check(h, *buf, 4 * MiB, 0);
  gpufile::Runtime::FileReport r;
  ASSERT_EQ(gpufile::Runtime::instance().explain_file(h.get(), &r).code, gpufile::Errc::ok);
  EXPECT_NE(r.vendor_state.find("gpufile's own libcufile"), std::string::npos) << r.vendor_state;
  EXPECT_FALSE(r.vendor.use);
}

// No library configured: the search finds one in $CUDA_HOME/lib64 (here a link to the double).
TEST_F(VendorPath, TheSearchFindsTheLibraryInTheCudaToolkit) {
  const std::string lib64 = dir_.file("cuda/lib64");
  ASSERT_EQ(system(("mkdir -p " + lib64).c_str()), 0);
  ASSERT_EQ(symlink(FAKECUFILE_PATH, (lib64 + "/libcufile.so.0").c_str()), 0);
  env_.set("GPUFILE_VENDOR_LIBRARY", nullptr);
  env_.set("CUDA_HOME", dir_.file("cuda").c_str());
  env_.set("GPUFILE_VENDOR", "on");
  Double d = open();
  ASSERT_NE(d.calls, nullptr);
  Handle h(dir_.file("data.bin"), O_RDONLY);
  auto buf = device(4 * MiB);
  read_and_check(h, *buf, 4 * MiB, 0);
  EXPECT_EQ(d.calls("cuFileRead"), 1);
  gpufile::Runtime::FileReport r;
  ASSERT_EQ(gpufile::Runtime::instance().explain_file(h.get(), &r).code, gpufile::Errc::ok);
  EXPECT_EQ(r.vendor_state.rfind(lib64 + "/libcufile.so.0", 0), 0u) << r.vendor_state;
}

// auto with no library configured does not even search where nvidia-fs is absent and P2PDMA was
// not asked for: NVIDIA's open would cost most of a second for a compat mode it would not use.
TEST_F(VendorPath, AutoWithoutNvidiaFsDoesNotSearch) {
  if (gpufile::vendor::nvidia_fs_present()) GTEST_SKIP() << "this machine has nvidia-fs";
  const std::string lib64 = dir_.file("cuda/lib64");
  ASSERT_EQ(system(("mkdir -p " + lib64).c_str()), 0);
  ASSERT_EQ(symlink(FAKECUFILE_PATH, (lib64 + "/libcufile.so.0").c_str()), 0);
  env_.set("GPUFILE_VENDOR_LIBRARY", nullptr);
  env_.set("CUDA_HOME", dir_.file("cuda").c_str());
  open();
  Handle h(dir_.file("data.bin"), O_RDONLY);
  gpufile::Runtime::FileReport r;
  ASSERT_EQ(gpufile::Runtime::instance().explain_file(h.get(), &r).code, gpufile::Errc::ok);
  EXPECT_NE(r.vendor_state.find("no nvidia-fs"), std::string::npos) << r.vendor_state;
  EXPECT_EQ(r.vendor.why, gpufile::route::Reason::vendor_not_loaded);
}

// Run alone, in a process of its own with GPUFILE_VENDOR=off (CMakeLists.txt): nothing loads it.
TEST(VendorOff, NeverLoadsNvidiasLibrary) {
  CAPI_REQUIRE_DRIVER();
  ASSERT_STREQ(std::getenv("GPUFILE_VENDOR"), "off");
  TempDir dir;
  std::vector<uint8_t> data(4 * MiB, 7);
  write_file(dir.file("f.bin"), data.data(), data.size());
  ASSERT_EQ(cuFileDriverOpen().err, CU_FILE_SUCCESS);
  {
    Handle h(dir.file("f.bin"), O_RDONLY);
    auto buf = device(4 * MiB);
    ASSERT_EQ(cuFileRead(h.get(), buf->ptr(), 4 * MiB, 0, 0), static_cast<ssize_t>(4 * MiB));
    gpufile::Runtime::FileReport r;
    gpufile::Runtime::instance().explain_file(h.get(), &r);
    EXPECT_EQ(r.vendor.why, gpufile::route::Reason::vendor_off);
  }
  drain_driver();
  EXPECT_EQ(double_handle(), nullptr) << "gpufile.vendor = off, yet the library was loaded";
}

}  // namespace
}  // namespace capi_test
