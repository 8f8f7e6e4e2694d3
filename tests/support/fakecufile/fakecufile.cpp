// A test double of NVIDIA's libcufile.so.0: the entry points gpufile's vendor path calls
// (src/vendor/nvidia.cpp), answering as NVIDIA's library does, with bytes moved by pread/pwrite
// through a bounce buffer and the CUDA driver's copies into the "GPU memory" (host memory behind
// device addresses under the CUDA driver double, tests/support/fakecuda; the caller's context
// must be current, as NVIDIA's library wants). It lets the vendor path's routing, fallback, error mapping and registrations be
// tested without nvidia-fs.
//
// Read from the environment at each cuFileDriverOpen:
//   FAKECUFILE_MODE        gds (default): nvidia-fs 2.17 reported; compat: no nvidia-fs (0.0);
//                          p2p: no nvidia-fs, the P2PDMA feature bit set
//   FAKECUFILE_REFUSE      comma-separated substrings: a file whose path contains one is refused
//                          at cuFileHandleRegister with 5027, as NVIDIA's library does in
//                          containers and VMs
//   FAKECUFILE_OPEN_ERROR  a cuFile code cuFileDriverOpen fails with (e.g. 5001)
// fakecufile.h has the test controls.
#include "fakecufile.h"

#include <cufile.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct FakeFile {
  int fd;
};

struct State {
  std::mutex mu;
  bool open = false;
  std::string mode = "gds";
  std::vector<std::string> refuse;
  std::map<std::string, long> calls;
  std::map<std::string, std::pair<int, int>> failures;  // entry point -> (code, times)
  std::map<FakeFile*, int> files;
  std::map<const void*, size_t> buffers;
  bool last_direct = false;
};

State& state() {
  static State* s = new State;  // never destroyed: gpufile may call in during exit
  return *s;
}

void count(const char* name) {
  std::lock_guard lock(state().mu);
  ++state().calls[name];
}

constexpr CUfileError_t ok() { return {CU_FILE_SUCCESS, 0}; }
constexpr CUfileError_t fail(CUfileOpError e) { return {e, 0}; }

std::vector<std::string> split(const char* text) {
  std::vector<std::string> out;
  std::string item;
  for (const char* p = text; p != nullptr && *p != '\0'; ++p) {
    if (*p == ',') {
      if (!item.empty()) out.push_back(item);
      item.clear();
    } else {
      item.push_back(*p);
    }
  }
  if (!item.empty()) out.push_back(item);
  return out;
}

std::string path_of(int fd) {
  char link[64], target[4096];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, target, sizeof target - 1);
  return n > 0 ? std::string(target, static_cast<size_t>(n)) : std::string();
}

bool refused(int fd) {
  const std::string path = path_of(fd);
  for (const std::string& part : state().refuse)
    if (path.find(part) != std::string::npos) return true;
  return false;
}

// A queued failure for this call, as errno; 0 when none.
int take_failure(const char* name) {
  std::lock_guard lock(state().mu);
  auto it = state().failures.find(name);
  if (it == state().failures.end() || it->second.second == 0) return 0;
  --it->second.second;
  return it->second.first;
}

bool known_file(CUfileHandle_t fh) {
  std::lock_guard lock(state().mu);
  return state().open && state().files.count(static_cast<FakeFile*>(fh)) != 0;
}

// The CUDA driver the process loaded (the same path gpufile loads: the same copy), for the
// copies between the bounce buffer and "GPU memory": the CUDA driver double keeps device memory
// behind addresses of its own, as a real GPU does. The copies run on a non-blocking stream of
// their own: NVIDIA's DMA waits for no stream, the legacy default stream included.
struct Cuda {
  using Stream = void*;
  int (*StreamCreate)(Stream*, unsigned) = nullptr;
  int (*StreamDestroy)(Stream) = nullptr;
  int (*StreamSynchronize)(Stream) = nullptr;
  int (*HtoDAsync)(unsigned long long dst, const void* src, size_t n, Stream) = nullptr;
  int (*DtoHAsync)(void* dst, unsigned long long src, size_t n, Stream) = nullptr;
  bool ok() const { return StreamCreate && StreamDestroy && StreamSynchronize && HtoDAsync && DtoHAsync; }
};

template <typename F>
void bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
}

const Cuda& cuda() {
  static const Cuda c = [] {
    Cuda out;
    const char* path = std::getenv("GPUFILE_CUDA_LIBRARY");
    void* lib = dlopen(path != nullptr && *path != '\0' ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return out;
    bind(lib, "cuStreamCreate", out.StreamCreate);
    bind(lib, "cuStreamDestroy_v2", out.StreamDestroy);
    bind(lib, "cuStreamSynchronize", out.StreamSynchronize);
    bind(lib, "cuMemcpyHtoDAsync_v2", out.HtoDAsync);
    bind(lib, "cuMemcpyDtoHAsync_v2", out.DtoHAsync);
    return out;
  }();
  return c;
}

// One copy between host and GPU memory on a non-blocking stream of its own; 0 when it worked.
template <typename Copy>
int copy_on_own_stream(Copy copy) {
  const Cuda& c = cuda();
  if (!c.ok()) return -1;
  Cuda::Stream s = nullptr;
  constexpr unsigned kNonBlocking = 0x1;  // CU_STREAM_NON_BLOCKING
  if (c.StreamCreate(&s, kNonBlocking) != 0) return -1;
  int rc = copy(s);
  if (rc == 0) rc = c.StreamSynchronize(s);
  c.StreamDestroy(s);
  return rc;
}

// A page-aligned bounce buffer: the descriptor may be O_DIRECT.
struct Bounce {
  explicit Bounce(size_t n) : size((n + 4095) & ~size_t{4095}), p(static_cast<char*>(std::aligned_alloc(4096, size ? size : 4096))) {}
  ~Bounce() { std::free(p); }
  size_t size;
  char* p;
};

// pread or pwrite until done, the end of the file, or an error (-errno).
ssize_t move_all(bool read, int fd, char* p, size_t size, off_t off) {
  size_t done = 0;
  while (done < size) {
    const ssize_t n = read ? ::pread(fd, p + done, size - done, off + static_cast<off_t>(done))
                           : ::pwrite(fd, p + done, size - done, off + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return -errno;
    if (n == 0) break;
    done += static_cast<size_t>(n);
  }
  return static_cast<ssize_t>(done);
}

constexpr int kCudaFailed = CU_FILE_CUDA_DRIVER_ERROR;

ssize_t read_into_gpu(int fd, unsigned long long gpu, size_t size, off_t off) {
  Bounce b(size);
  const ssize_t n = move_all(true, fd, b.p, size, off);
  if (n <= 0) return n;
  if (copy_on_own_stream([&](Cuda::Stream s) { return cuda().HtoDAsync(gpu, b.p, static_cast<size_t>(n), s); }) != 0)
    return -kCudaFailed;
  return n;
}

ssize_t write_from_gpu(int fd, unsigned long long gpu, size_t size, off_t off) {
  Bounce b(size);
  if (copy_on_own_stream([&](Cuda::Stream s) { return cuda().DtoHAsync(b.p, gpu, size, s); }) != 0)
    return -kCudaFailed;
  return move_all(false, fd, b.p, size, off);
}

ssize_t io_result(const char* name, CUfileHandle_t fh, const void* base, size_t size,
                  off_t file_offset, off_t buffer_offset) {
  count(name);
  if (!known_file(fh)) return errno = CU_FILE_HANDLE_NOT_REGISTERED, -1;
  if (int code = take_failure(name)) return errno = code, -1;
  const int fd = static_cast<FakeFile*>(fh)->fd;
  const auto gpu = reinterpret_cast<unsigned long long>(base) + static_cast<unsigned long long>(buffer_offset);
  const bool read = std::strcmp(name, "cuFileRead") == 0;
  const ssize_t n = read ? read_into_gpu(fd, gpu, size, file_offset) : write_from_gpu(fd, gpu, size, file_offset);
  if (n < 0) return errno = static_cast<int>(-n), -1;
  return n;
}

}  // namespace

extern "C" {

CUfileError_t cuFileDriverOpen(void) {
  count("cuFileDriverOpen");
  if (const char* e = std::getenv("FAKECUFILE_OPEN_ERROR"); e != nullptr && *e != '\0')
    return fail(static_cast<CUfileOpError>(std::atoi(e)));
  State& s = state();
  std::lock_guard lock(s.mu);
  const char* mode = std::getenv("FAKECUFILE_MODE");
  s.mode = mode != nullptr && *mode != '\0' ? mode : "gds";
  s.refuse = split(std::getenv("FAKECUFILE_REFUSE"));
  s.open = true;
  return ok();
}

CUfileError_t cuFileDriverClose_v2(void) {
  count("cuFileDriverClose");
  std::lock_guard lock(state().mu);
  state().open = false;
  return ok();
}

#undef cuFileDriverClose
CUfileError_t cuFileDriverClose(void) { return cuFileDriverClose_v2(); }

CUfileError_t cuFileDriverGetProperties(CUfileDrvProps_t* props) {
  count("cuFileDriverGetProperties");
  if (props == nullptr) return fail(CU_FILE_INVALID_VALUE);
  std::lock_guard lock(state().mu);
  if (!state().open) return fail(CU_FILE_DRIVER_NOT_INITIALIZED);
  *props = CUfileDrvProps_t{};
  props->nvfs.max_direct_io_size = 16384;
  props->nvfs.dcontrolflags = 1u << CU_FILE_ALLOW_COMPAT_MODE;
  props->fflags = 0xF;
  if (state().mode == "gds") {
    props->nvfs.major_version = 2;
    props->nvfs.minor_version = 17;
    props->nvfs.dstatusflags = 1u << CU_FILE_NVME_SUPPORTED;
  } else if (state().mode == "p2p") {
    props->fflags |= 1u << 4;  // P2P_SUPPORTED (cuFile 1.17)
  }
  return ok();
}

CUfileError_t cuFileHandleRegister(CUfileHandle_t* fh, CUfileDescr_t* descr) {
  count("cuFileHandleRegister");
  if (fh == nullptr || descr == nullptr || descr->type != CU_FILE_HANDLE_TYPE_OPAQUE_FD)
    return fail(CU_FILE_INVALID_VALUE);
  std::lock_guard lock(state().mu);
  if (!state().open) return fail(CU_FILE_DRIVER_NOT_INITIALIZED);
  if (refused(descr->handle.fd)) return fail(CU_FILE_HANDLE_NOT_REGISTERED);
  auto* f = new FakeFile{descr->handle.fd};
  state().files[f] = descr->handle.fd;
  const int flags = fcntl(descr->handle.fd, F_GETFL);
  state().last_direct = flags >= 0 && (flags & O_DIRECT) != 0;
  *fh = f;
  return ok();
}

void cuFileHandleDeregister(CUfileHandle_t fh) {
  count("cuFileHandleDeregister");
  std::lock_guard lock(state().mu);
  auto* f = static_cast<FakeFile*>(fh);
  if (state().files.erase(f) != 0) delete f;
}

CUfileError_t cuFileBufRegister(const void* base, size_t length, int) {
  count("cuFileBufRegister");
  std::lock_guard lock(state().mu);
  if (!state().open) return fail(CU_FILE_DRIVER_NOT_INITIALIZED);
  if (!state().buffers.emplace(base, length).second) return fail(CU_FILE_MEMORY_ALREADY_REGISTERED);
  return ok();
}

CUfileError_t cuFileBufDeregister(const void* base) {
  count("cuFileBufDeregister");
  std::lock_guard lock(state().mu);
  if (state().buffers.erase(base) == 0) return fail(CU_FILE_MEMORY_NOT_REGISTERED);
  return ok();
}

ssize_t cuFileRead(CUfileHandle_t fh, void* base, size_t size, off_t file_offset, off_t buffer_offset) {
  return io_result("cuFileRead", fh, base, size, file_offset, buffer_offset);
}

ssize_t cuFileWrite(CUfileHandle_t fh, const void* base, size_t size, off_t file_offset,
                    off_t buffer_offset) {
  return io_result("cuFileWrite", fh, base, size, file_offset, buffer_offset);
}

long fakecufile_calls(const char* entry_point) {
  std::lock_guard lock(state().mu);
  auto it = state().calls.find(entry_point);
  return it == state().calls.end() ? 0 : it->second;
}

void fakecufile_fail(const char* entry_point, int code, int times) {
  std::lock_guard lock(state().mu);
  state().failures[entry_point] = {code, times};
}

int fakecufile_open_files(void) {
  std::lock_guard lock(state().mu);
  return static_cast<int>(state().files.size());
}

int fakecufile_open_buffers(void) {
  std::lock_guard lock(state().mu);
  return static_cast<int>(state().buffers.size());
}

int fakecufile_driver_is_open(void) {
  std::lock_guard lock(state().mu);
  return state().open ? 1 : 0;
}

int fakecufile_last_file_direct(void) {
  std::lock_guard lock(state().mu);
  return state().last_direct ? 1 : 0;
}

void fakecufile_reset(void) {
  std::lock_guard lock(state().mu);
  state().calls.clear();
  state().failures.clear();
}

}  // extern "C"
