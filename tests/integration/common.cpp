#include "common.hpp"

#include <dlfcn.h>
#include <linux/io_uring.h>
#include <sys/syscall.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>

#include "default_config.hpp"
#include "exec/runtime.hpp"

namespace capi_test {

// ---- the process ----------------------------------------------------------------------------

namespace {
[[maybe_unused]] auto* const kDefaultConfig =
    ::testing::AddGlobalTestEnvironment(new test_support::DefaultConfig("capi"));
}  // namespace

// ---- the CUDA driver ------------------------------------------------------------------------

const cu::Driver* drv() { return cu::driver(); }
bool has_driver() { return drv() != nullptr; }
std::string no_driver_reason() { return cu::why_no_driver(); }

void bind_context() {
  const cu::Driver* d = drv();
  if (d == nullptr) return;
  static cu::CUcontext primary = [d] {
    cu::CUcontext ctx = nullptr;
    cu::CUdevice dev = 0;
    d->DeviceGet(&dev, 0);
    d->DevicePrimaryCtxRetain(&ctx, dev);  // kept for the whole process
    return ctx;
  }();
  cu::CUcontext cur = nullptr;
  d->CtxGetCurrent(&cur);
  if (cur != primary) d->CtxSetCurrent(primary);
}

static void* driver_library() {
  const char* path = std::getenv("GPUFILE_CUDA_LIBRARY");
  if (path == nullptr || *path == '\0') path = "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (lib == nullptr) lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  return lib;
}

void* driver_symbol(const char* name) {
  if (!has_driver()) return nullptr;
  void* lib = driver_library();
  return lib ? dlsym(lib, name) : nullptr;
}

FakeControls fake_controls() {
  FakeControls c;
  c.fail_call = reinterpret_cast<decltype(c.fail_call)>(driver_symbol("fakecuda_fail_call"));
  c.reset_faults = reinterpret_cast<decltype(c.reset_faults)>(driver_symbol("fakecuda_reset_faults"));
  c.set_async_delay_us =
      reinterpret_cast<decltype(c.set_async_delay_us)>(driver_symbol("fakecuda_set_async_delay_us"));
  c.call_count = reinterpret_cast<decltype(c.call_count)>(driver_symbol("fakecuda_call_count"));
  c.live_registered_bytes = reinterpret_cast<decltype(c.live_registered_bytes)>(
      driver_symbol("fakecuda_live_registered_bytes"));
  return c;
}

// ---- memory -----------------------------------------------------------------------------------

const char* mem_name(Mem m) {
  switch (m) {
    case Mem::device: return "device";
    case Mem::pinned: return "pinned";
    case Mem::pageable: return "pageable";
    case Mem::managed: return "managed";
  }
  return "?";
}

namespace {
using MemAllocManagedFn = cu::CUresult (*)(cu::CUdeviceptr*, size_t, unsigned);
constexpr unsigned kMemAttachGlobal = 1;
constexpr size_t kPage = 4096;
size_t round_page(size_t n) { return (n + kPage - 1) / kPage * kPage; }
}  // namespace

std::unique_ptr<Buffer> Buffer::make(Mem kind, size_t bytes, std::string* why) {
  std::unique_ptr<Buffer> b(new Buffer());
  b->kind_ = kind;
  b->size_ = bytes;
  const cu::Driver* d = drv();
  if (kind != Mem::pageable && d == nullptr) {
    *why = no_driver_reason();
    return nullptr;
  }
  if (d) bind_context();
  cu::CUresult r = cu::CUDA_SUCCESS;
  switch (kind) {
    case Mem::device: {
      cu::CUdeviceptr p = 0;
      r = d->MemAlloc(&p, bytes);
      b->ptr_ = reinterpret_cast<void*>(p);
      break;
    }
    case Mem::managed: {
      auto fn = reinterpret_cast<MemAllocManagedFn>(driver_symbol("cuMemAllocManaged"));
      if (fn == nullptr) {
        *why = "the CUDA driver has no cuMemAllocManaged";
        return nullptr;
      }
      cu::CUdeviceptr p = 0;
      r = fn(&p, bytes, kMemAttachGlobal);
      if (r == cu::CUDA_ERROR_NOT_SUPPORTED) {
        *why = "managed memory not supported by this device";
        return nullptr;
      }
      b->ptr_ = reinterpret_cast<void*>(p);
      break;
    }
    case Mem::pinned: r = d->MemHostAlloc(&b->ptr_, bytes, 0); break;
    case Mem::pageable: b->ptr_ = std::aligned_alloc(kPage, round_page(bytes)); break;
  }
  if (r != cu::CUDA_SUCCESS || b->ptr_ == nullptr) {
    *why = std::string("allocating ") + std::to_string(bytes) + " bytes of " + mem_name(kind) +
           " memory failed (CUresult " + std::to_string(r) + ")";
    b->ptr_ = nullptr;
    return nullptr;
  }
  return b;
}

Buffer::~Buffer() {
  if (ptr_ == nullptr) return;
  const cu::Driver* d = drv();
  switch (kind_) {
    case Mem::device:
    case Mem::managed:
      bind_context();
      d->MemFree(reinterpret_cast<cu::CUdeviceptr>(ptr_));
      break;
    case Mem::pinned: d->MemFreeHost(ptr_); break;
    case Mem::pageable: std::free(ptr_); break;
  }
}

void Buffer::upload(size_t off, const void* src, size_t n) {
  if (n == 0) return;
  if (kind_ == Mem::device || kind_ == Mem::managed) {
    bind_context();
    cu::CUresult r = drv()->MemcpyHtoD(reinterpret_cast<cu::CUdeviceptr>(ptr_) + off, src, n);
    if (r != cu::CUDA_SUCCESS) ADD_FAILURE() << "cuMemcpyHtoD failed: " << r;
  } else {
    std::memcpy(at(off), src, n);
  }
}

void Buffer::download(size_t off, void* dst, size_t n) const {
  if (n == 0) return;
  if (kind_ == Mem::device || kind_ == Mem::managed) {
    bind_context();
    cu::CUresult r = drv()->MemcpyDtoH(dst, reinterpret_cast<cu::CUdeviceptr>(ptr_) + off, n);
    if (r != cu::CUDA_SUCCESS) ADD_FAILURE() << "cuMemcpyDtoH failed: " << r;
  } else {
    std::memcpy(dst, at(off), n);
  }
}

void Buffer::fill(size_t off, size_t n, uint8_t byte) {
  if (kind_ == Mem::device || kind_ == Mem::managed) {
    std::vector<uint8_t> v(n, byte);
    upload(off, v.data(), n);
  } else {
    std::memset(at(off), byte, n);
  }
}

std::vector<uint8_t> Buffer::read_back(size_t off, size_t n) const {
  std::vector<uint8_t> v(n);
  download(off, v.data(), n);
  return v;
}

// ---- data ---------------------------------------------------------------------------------

uint64_t test_seed() {
  if (const char* s = std::getenv("GPUFILE_TEST_SEED"); s && *s) return std::strtoull(s, nullptr, 0);
  // Deterministic: a hash of the test's full name.
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  uint64_t h = 1469598103934665603ULL;
  for (unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return h;
}

std::string first_mismatch(const void* got, const void* want, size_t n) {
  if (n == 0 || std::memcmp(got, want, n) == 0) return {};  // memcmp wants pointers even for 0
  auto* g = static_cast<const uint8_t*>(got);
  auto* w = static_cast<const uint8_t*>(want);
  size_t i = 0;
  while (g[i] == w[i]) ++i;
  size_t count = 0;
  for (size_t k = i; k < n; ++k) count += g[k] != w[k];
  char msg[160];
  snprintf(msg, sizeof msg, "first mismatch at byte %zu of %zu: got 0x%02x want 0x%02x (%zu bytes differ)",
           i, n, g[i], w[i], count);
  return msg;
}

std::string not_filled(const void* got, size_t n, uint8_t byte) {
  auto* g = static_cast<const uint8_t*>(got);
  for (size_t i = 0; i < n; ++i) {
    if (g[i] != byte) {
      char msg[120];
      snprintf(msg, sizeof msg, "byte %zu of %zu is 0x%02x, expected untouched 0x%02x", i, n, g[i], byte);
      return msg;
    }
  }
  return {};
}

// ---- files -----------------------------------------------------------------------------------

TempDir::TempDir() {
  char tmpl[] = "/tmp/gpufile-capi-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    ADD_FAILURE() << "mkdtemp failed: " << strerror(errno);
    return;
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

void write_file(const std::string& path, const void* data, size_t n) {
  int fd = ::open(path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0) << path << ": " << strerror(errno);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pwrite(fd, static_cast<const char*>(data) + done, n - done, static_cast<off_t>(done));
    ASSERT_GT(r, 0) << strerror(errno);
    done += static_cast<size_t>(r);
  }
  ::close(fd);
}

std::vector<uint8_t> read_file(const std::string& path, uint64_t off, size_t n) {
  std::vector<uint8_t> v(n);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    ADD_FAILURE() << path << ": " << strerror(errno);
    return {};
  }
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd, v.data() + done, n - done, static_cast<off_t>(off + done));
    if (r <= 0) break;
    done += static_cast<size_t>(r);
  }
  ::close(fd);
  v.resize(done);
  return v;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

bool direct_io_works(const std::string& dir) {
  std::string p = dir + "/.odirect-probe";
  int fd = ::open(p.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) return false;
  void* mem = std::aligned_alloc(4096, 4096);
  std::memset(mem, 0, 4096);
  bool ok = ::pwrite(fd, mem, 4096, 0) == 4096;
  std::free(mem);
  ::close(fd);
  ::unlink(p.c_str());
  return ok;
}

CUfileError_t register_fd(int fd, CUfileHandle_t* fh) {
  CUfileDescr_t descr{};
  descr.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  descr.handle.fd = fd;
  descr.fs_ops = nullptr;
  return cuFileHandleRegister(fh, &descr);
}

Handle::Handle(const std::string& path, int flags) {
  fd_ = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd_ < 0) return;
  CUfileHandle_t fh = nullptr;
  status_ = register_fd(fd_, &fh);
  if (status_.err == CU_FILE_SUCCESS) fh_ = fh;
}

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    reset();
    fd_ = o.fd_;
    fh_ = o.fh_;
    status_ = o.status_;
    o.fd_ = -1;
    o.fh_ = nullptr;
  }
  return *this;
}

void Handle::reset() {
  if (fh_) cuFileHandleDeregister(fh_);
  fh_ = nullptr;
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

// ---- the driver session -----------------------------------------------------------------------

void drain_driver() {
  for (int i = 0; i < 1000 && cuFileUseCount() > 0; ++i) cuFileDriverClose();
}

std::string config_name(const EngineConfig& c) {
  std::string s = c.engine ? c.engine : "default";
  if (c.direct_io) s += std::string("_direct_") + c.direct_io;
  return s;
}

bool io_uring_available() {
  io_uring_params p{};
  int fd = static_cast<int>(syscall(__NR_io_uring_setup, 4, &p));
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

namespace {
void set_env(const char* name, const char* value, bool* had, std::string* old) {
  const char* cur = std::getenv(name);
  *had = cur != nullptr;
  if (cur) *old = cur;
  if (value) setenv(name, value, 1);
  else unsetenv(name);
}
void restore_env(const char* name, bool had, const std::string& old) {
  if (had) setenv(name, old.c_str(), 1);
  else unsetenv(name);
}
}  // namespace

DriverSession::DriverSession(const EngineConfig& c) {
  drain_driver();
  set_env("GPUFILE_ENGINE", c.engine, &had_engine_, &old_engine_);
  set_env("GPUFILE_DIRECT_IO", c.direct_io, &had_direct_, &old_direct_);
  bind_context();
  CUfileError_t st = cuFileDriverOpen();
  if (st.err != CU_FILE_SUCCESS) {
    if (c.engine && std::string(c.engine) == "io_uring" && !io_uring_available())
      skip_ = "io_uring is not available on this kernel";
    else
      error_ = "cuFileDriverOpen failed: " + std::to_string(st.err) + " (" +
               cufileop_status_error(st.err) + ")";
    return;
  }
  if (c.engine) {
    std::string got = gpufile::Runtime::instance().engine_name();
    if (got != c.engine) {
      error_ = std::string("asked for engine ") + c.engine + ", the driver runs " + got;
      return;
    }
  }
  ok_ = true;
}

DriverSession::~DriverSession() {
  drain_driver();
  restore_env("GPUFILE_ENGINE", had_engine_, old_engine_);
  restore_env("GPUFILE_DIRECT_IO", had_direct_, old_direct_);
}

void CapiTest::SetUp() {
  drain_driver();
  bind_context();
}

void CapiTest::TearDown() {
  drain_driver();
  EXPECT_EQ(cuFileUseCount(), 0);
}

// ---- never hang --------------------------------------------------------------------------------

struct StreamGate::State {
  std::mutex mu;
  std::condition_variable cv;
  bool open = false;
  bool reached = false;
};

StreamGate::StreamGate() : state_(std::make_shared<State>()) {}

void StreamGate::host_fn(void* arg) {
  std::unique_ptr<std::shared_ptr<State>> holder(static_cast<std::shared_ptr<State>*>(arg));
  State& s = **holder;
  std::unique_lock lock(s.mu);
  s.reached = true;
  s.cv.notify_all();
  s.cv.wait_for(lock, std::chrono::seconds(30), [&] { return s.open; });
}

cu::CUresult StreamGate::enqueue(cu::CUstream stream) {
  auto* arg = new std::shared_ptr<State>(state_);
  cu::CUresult r = drv()->LaunchHostFunc(stream, &StreamGate::host_fn, arg);
  if (r != cu::CUDA_SUCCESS) delete arg;
  return r;
}

void StreamGate::release() {
  std::lock_guard lock(state_->mu);
  state_->open = true;
  state_->cv.notify_all();
}

bool StreamGate::wait_reached(std::chrono::milliseconds limit) const {
  std::unique_lock lock(state_->mu);
  return state_->cv.wait_for(lock, limit, [&] { return state_->reached; });
}

std::string errno_text(int e) {
  if (e > CUFILEOP_BASE_ERR)
    return std::to_string(e) + " (" + cufileop_status_error(static_cast<CUfileOpError>(e)) + ")";
  return std::to_string(e) + " (" + strerror(e) + ")";
}

}  // namespace capi_test
