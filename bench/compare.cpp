// gpufile_compare MODE FILE: one measurement per call, one line of output, so that a script can
// drop the page cache between calls. Modes:
//   h2d-pinned   copy 1 GiB from pinned host memory to the GPU (the PCIe ceiling)
//   h2d-pageable copy 1 GiB from pageable host memory to the GPU
//   naive        pread 16 MiB pieces of FILE into one pinned buffer, cuMemcpyHtoD each (the loop
//                most hand-written loaders use)
//   gpufile      cuFileRead of the whole FILE into device memory
//   gpufile-write  cuFileWrite of FILE's size from device memory to FILE.out (then fsync)
#include <cufile.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "exec/runtime.hpp"

using namespace gpufile;
using Clock = std::chrono::steady_clock;

namespace {

const cuda::Driver* d = nullptr;

double secs(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

void report(const char* mode, uint64_t bytes, double s, const char* note = "") {
  std::printf("%-14s %8.3f GiB %8.3f s %8.2f GiB/s %s\n", mode, bytes / double(1ull << 30), s,
              bytes / double(1ull << 30) / s, note);
}

int fail(const char* what) {
  std::fprintf(stderr, "gpufile_compare: %s\n", what);
  return 1;
}

int h2d(bool pinned) {
  const uint64_t n = 1ull << 30;
  void* host = nullptr;
  if (pinned) {
    if (cuda::alloc_pinned(n, &host)) return fail("pinned alloc");
  } else {
    host = aligned_alloc(4096, n);
  }
  std::memset(host, 1, n);
  cuda::CUdeviceptr dev = 0;
  if (d->MemAlloc(&dev, n)) return fail("device alloc");
  d->MemcpyHtoD(dev, host, n);  // warm-up
  auto t0 = Clock::now();
  for (int i = 0; i < 4; ++i) d->MemcpyHtoD(dev, host, n);
  report(pinned ? "h2d-pinned" : "h2d-pageable", 4 * n, secs(t0));
  return 0;
}

int naive(const char* path, uint64_t size) {
  const uint64_t piece = 16ull << 20;
  void* host = nullptr;
  if (cuda::alloc_pinned(piece, &host)) return fail("pinned alloc");
  cuda::CUdeviceptr dev = 0;
  if (d->MemAlloc(&dev, size)) return fail("device alloc");
  int fd = open(path, O_RDONLY);
  auto t0 = Clock::now();
  for (uint64_t off = 0; off < size; off += piece) {
    uint64_t n = std::min(piece, size - off);
    if (pread(fd, host, n, off) != static_cast<ssize_t>(n)) return fail("pread");
    d->MemcpyHtoD(dev + off, host, n);
  }
  report("naive", size, secs(t0), "(pread 16 MiB + cuMemcpyHtoD, 1 thread)");
  return 0;
}

int with_gpufile(const char* path, uint64_t size, bool write) {
  cuda::CUdeviceptr dev = 0;
  if (cuFileDriverOpen().err) return fail("driver open");
  if (d->MemAlloc(&dev, size)) return fail("device alloc");
  std::string target = write ? std::string(path) + ".out" : path;
  int fd = open(target.c_str(), write ? O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT : O_RDONLY, 0644);
  if (fd < 0) return fail("open");
  CUfileDescr_t desc{};
  desc.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  desc.handle.fd = fd;
  CUfileHandle_t h = nullptr;
  if (cuFileHandleRegister(&h, &desc).err) return fail("handle register");
  cuFileBufRegister(reinterpret_cast<void*>(dev), size, 0);
  auto t0 = Clock::now();
  ssize_t r = write ? cuFileWrite(h, reinterpret_cast<void*>(dev), size, 0, 0)
                    : cuFileRead(h, reinterpret_cast<void*>(dev), size, 0, 0);
  if (write) fsync(fd);
  double s = secs(t0);
  if (r != static_cast<ssize_t>(size)) return fail("short transfer");
  std::string note = "(engine " + Runtime::instance().engine_name() + ")";
  report(write ? "gpufile-write" : "gpufile", size, s, note.c_str());
  cuFileHandleDeregister(h);
  close(fd);
  if (write) unlink(target.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: gpufile_compare MODE [FILE]");
  d = cuda::driver();
  if (d == nullptr) return fail(cuda::why_no_driver().c_str());
  cuda::CUcontext ctx = nullptr;
  cuda::CUdevice dev = 0;
  d->DeviceGet(&dev, 0);
  d->DevicePrimaryCtxRetain(&ctx, dev);
  d->CtxSetCurrent(ctx);
  std::string mode = argv[1];
  if (mode == "h2d-pinned") return h2d(true);
  if (mode == "h2d-pageable") return h2d(false);
  if (argc < 3) return fail("this mode needs a FILE");
  struct stat st {};
  if (stat(argv[2], &st) != 0) return fail("stat");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (mode == "naive") return naive(argv[2], size);
  if (mode == "gpufile") return with_gpufile(argv[2], size, false);
  if (mode == "gpufile-write") return with_gpufile(argv[2], size, true);
  return fail("unknown mode");
}
