// `gpufile demo`: the main job. Writes a scratch file, reads it into GPU memory through the
// cuFile API exactly as a GDS program would, checks every byte, writes it back out, and says
// how fast and by which path.
#include <cufile.h>
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "core/stats.hpp"
#include "cuda/driver.hpp"
#include "exec/runtime.hpp"

namespace gpufile::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kPiece = 64ull << 20;  // host-side buffer for writing and checking

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double gib(uint64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); }

// The byte at file offset `off`: cheap to compute, different in every 8-byte word.
void fill_pattern(uint64_t off, char* p, uint64_t n) {
  for (uint64_t i = 0; i < n; ++i) {
    uint64_t w = (off + i) >> 3;
    w ^= w >> 31;
    w *= 0x9e3779b97f4a7c15ull;
    p[i] = static_cast<char>(w >> (8 * ((off + i) & 7)));
  }
}

struct Target {
  const cuda::Driver* gpu = nullptr;
  cuda::CUdeviceptr dev = 0;
  char* host = nullptr;
  uint64_t size = 0;

  bool alloc(uint64_t n) {
    size = n;
    gpu = cuda::driver();
    if (gpu) return gpu->MemAlloc(&dev, n) == cuda::CUDA_SUCCESS;
    host = static_cast<char*>(aligned_alloc(4096, (n + 4095) & ~4095ull));
    return host != nullptr;
  }
  void* ptr() const { return gpu ? reinterpret_cast<void*>(dev) : host; }
  bool copy_out(uint64_t off, char* dst, uint64_t n) const {
    if (!gpu) return std::memcpy(dst, host + off, n), true;
    return gpu->MemcpyDtoH(dst, dev + off, n) == cuda::CUDA_SUCCESS;
  }
  void release() {
    if (gpu && dev) gpu->MemFree(dev);
    std::free(host);
  }
  std::string where() const {
    if (!gpu) return "host memory (no GPU: " + cuda::why_no_driver() + ")";
    char name[128] = "?";
    cuda::CUdevice d = 0;
    gpu->DeviceGet(&d, 0);
    gpu->DeviceGetName(name, sizeof name, d);
    return std::string("GPU 0 (") + name + ")";
  }
};

bool write_scratch(const std::string& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return std::perror(path.c_str()), false;
  std::vector<char> buf(kPiece);
  for (uint64_t off = 0; off < size;) {
    uint64_t n = std::min(kPiece, size - off);
    fill_pattern(off, buf.data(), n);
    if (::pwrite(fd, buf.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n))
      return std::perror("write"), ::close(fd), false;
    off += n;
  }
  // Start cold: flush, then ask the kernel to drop the file from the page cache.
  fsync(fd);
  posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
  return true;
}

int open_direct(const std::string& path, int flags) {
  int fd = ::open(path.c_str(), flags | O_DIRECT, 0644);
  return fd >= 0 ? fd : ::open(path.c_str(), flags, 0644);  // file systems without O_DIRECT
}

// Compares the target against the pattern; returns the first bad offset or UINT64_MAX.
uint64_t verify_target(const Target& t) {
  std::vector<char> got(kPiece), want(kPiece);
  for (uint64_t off = 0; off < t.size; off += kPiece) {
    uint64_t n = std::min(kPiece, t.size - off);
    if (!t.copy_out(off, got.data(), n)) return off;
    fill_pattern(off, want.data(), n);
    if (std::memcmp(got.data(), want.data(), n) != 0)
      for (uint64_t i = 0; i < n; ++i)
        if (got[i] != want[i]) return off + i;
  }
  return UINT64_MAX;
}

uint64_t verify_file(const std::string& path, uint64_t size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::vector<char> got(kPiece), want(kPiece);
  uint64_t bad = UINT64_MAX;
  for (uint64_t off = 0; off < size && bad == UINT64_MAX; off += kPiece) {
    uint64_t n = std::min(kPiece, size - off);
    if (::pread(fd, got.data(), n, static_cast<off_t>(off)) != static_cast<ssize_t>(n)) bad = off;
    fill_pattern(off, want.data(), n);
    if (bad == UINT64_MAX && std::memcmp(got.data(), want.data(), n) != 0) bad = off;
  }
  ::close(fd);
  return bad;
}

void print_paths(stats::Op op) {
  stats::Snapshot s = stats::snapshot();
  for (int p = 0; p < stats::kPaths; ++p) {
    const auto& t = s.paths[static_cast<int>(op)][p];
    if (t.bytes) std::printf("    %-14s %10.3f GiB\n", stats::kPathNames[p], gib(t.bytes));
  }
}

bool cufile_ok(CUfileError_t e, const char* what) {
  if (e.err == CU_FILE_SUCCESS) return true;
  std::fprintf(stderr, "gpufile demo: %s failed: %s (%d)\n", what, CUFILE_ERRSTR(e.err), e.err);
  return false;
}

struct Options {
  uint64_t size = 1ull << 30;
  std::string dir = "/tmp";
  bool keep = false;
};

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    unsigned long long v = 0;
    if (a == "--size" && i + 1 < argc && parse_size(argv[++i], &v) && v > 0) o->size = v;
    else if (a == "--dir" && i + 1 < argc) o->dir = argv[++i];
    else if (a == "--keep") o->keep = true;
    else return std::fprintf(stderr, "gpufile demo: bad argument '%s'\n", a.c_str()), false;
  }
  return true;
}

}  // namespace

int demo(int argc, char** argv) {
  Options opt;
  if (!parse(argc, argv, &opt)) return 2;
  const std::string src = opt.dir + "/gpufile-demo." + std::to_string(getpid()) + ".in";
  const std::string dst = opt.dir + "/gpufile-demo." + std::to_string(getpid()) + ".out";

  std::printf("gpufile demo: %.3f GiB scratch file in %s\n", gib(opt.size), opt.dir.c_str());
  if (!write_scratch(src, opt.size)) return 1;
  if (!cufile_ok(cuFileDriverOpen(), "cuFileDriverOpen")) return 1;

  Target t;
  if (!t.alloc(opt.size)) return std::fprintf(stderr, "gpufile demo: allocation failed\n"), 1;
  std::printf("  target  %s\n", t.where().c_str());
  std::printf("  engine  %s%s%s\n", Runtime::instance().engine_name().c_str(),
              Runtime::instance().engine_note().empty() ? "" : ": ",
              Runtime::instance().engine_note().c_str());
  int rc = 1;
  int in = open_direct(src, O_RDONLY);
  int out = open_direct(dst, O_WRONLY | O_CREAT | O_TRUNC);
  CUfileDescr_t d_in{}, d_out{};
  d_in.type = d_out.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d_in.handle.fd = in;
  d_out.handle.fd = out;
  CUfileHandle_t h_in = nullptr, h_out = nullptr;
  if (cufile_ok(cuFileHandleRegister(&h_in, &d_in), "cuFileHandleRegister") &&
      cufile_ok(cuFileHandleRegister(&h_out, &d_out), "cuFileHandleRegister") &&
      cufile_ok(cuFileBufRegister(t.ptr(), opt.size, 0), "cuFileBufRegister")) {
    auto t0 = Clock::now();
    ssize_t n = cuFileRead(h_in, t.ptr(), opt.size, 0, 0);
    double rs = seconds_since(t0);
    if (n != static_cast<ssize_t>(opt.size)) {
      std::fprintf(stderr, "gpufile demo: cuFileRead returned %zd (errno %d)\n", n, errno);
    } else {
      std::printf("  read    %.3f GiB in %.3f s: %.2f GiB/s\n", gib(opt.size), rs, gib(opt.size) / rs);
      print_paths(stats::Op::read);
      uint64_t bad = verify_target(t);
      std::printf("  check   %s\n", bad == UINT64_MAX ? "every byte matches the file" : "MISMATCH");
      t0 = Clock::now();
      ssize_t w = cuFileWrite(h_out, t.ptr(), opt.size, 0, 0);
      double ws = seconds_since(t0);
      fsync(out);
      double wss = seconds_since(t0);
      if (w != static_cast<ssize_t>(opt.size)) {
        std::fprintf(stderr, "gpufile demo: cuFileWrite returned %zd (errno %d)\n", w, errno);
      } else {
        std::printf("  write   %.3f GiB in %.3f s: %.2f GiB/s (%.2f GiB/s with fsync)\n",
                    gib(opt.size), ws, gib(opt.size) / ws, gib(opt.size) / wss);
        print_paths(stats::Op::write);
        uint64_t bad_w = verify_file(dst, opt.size);
        std::printf("  check   %s\n", bad_w == UINT64_MAX ? "written file matches" : "MISMATCH");
        if (bad == UINT64_MAX && bad_w == UINT64_MAX) rc = 0;
      }
    }
    cuFileBufDeregister(t.ptr());
  }
  if (h_in) cuFileHandleDeregister(h_in);
  if (h_out) cuFileHandleDeregister(h_out);
  ::close(in);
  ::close(out);
  t.release();
  cuFileDriverClose();
  if (!opt.keep) unlink(src.c_str()), unlink(dst.c_str());
  std::printf("gpufile demo: %s\n", rc == 0 ? "ok" : "FAILED");
  return rc;
}

}  // namespace gpufile::cli
