// gpufile_compare MODE [FILE [THREADS]]: one measurement per call, one line of output, so that a
// script (bench/side_by_side.py, bench/gpu-run.sh) can drop the page cache between calls.
//
// Ceilings (what the machine allows, no file system or library in the way):
//   h2d-pinned / h2d-pageable   copy 1 GiB host -> GPU four times (pinned: the PCIe ceiling);
//                               pinned = gpufile's staging memory (cuda::alloc_pinned)
//   h2d-hostalloc               the same from cuMemHostAlloc memory (the driver's own pinning)
//   d2h-pinned / d2h-pageable / d2h-hostalloc   the same, GPU -> host
//   h2d-all [THREADS [IO_KIB [SECONDS [FILE [GPUS]]]]]
//                               one process feeding every GPU at once: THREADS (8) threads a GPU,
//                               each copying IO_KIB (16384) pieces synchronously (an async copy on
//                               a stream of its own, then a stream sync) into its GPU for SECONDS
//                               (5). The source is 1 GiB of pinned staging memory a GPU or, given
//                               FILE ("%d" in it becomes the GPU's ordinal; "-" for none), that
//                               file mapped and registered in 64 MiB windows as page-cache DMA
//                               registers them (warm it first). One process's ceiling for "one
//                               process for all GPUs". GPUS: a comma list of ordinals to feed
//                               (default all). With GPUFILE_COMPARE_START_AT=<epoch seconds> the
//                               copies start at that time, after the set-up: processes started
//                               together then copy over the same stretch (bench/host-model.sh)
//   memcpy [THREADS [MIB [SECONDS]]]
//                               THREADS (1) threads copy their slices of one MIB (1024) buffer
//                               into their slices of another, over and over for SECONDS (2):
//                               host memory's copy bandwidth (each byte read once, written once)
//   register-files FILE [WINDOW_MIB [PARALLEL]]
//                               maps every GPU's FILE ("%d" as in h2d-all) and registers it in
//                               WINDOW_MIB (64) windows, one file after another or (PARALLEL 1)
//                               on a thread per file, then unregisters: what making page-cache
//                               windows costs one process, in ms and µs per MiB
//   register-ways FILE [WINDOW_MIB [fill]]
//                               what registering page-cache windows costs, and what part of it is
//                               the mapping's page faults: FILE's first whole windows registered
//                               (WINDOW_MIB, 64) and unregistered in four ways: mapped plainly,
//                               as page-cache DMA maps now; populated first (MADV_POPULATE_READ,
//                               timed apart); on a 2 MiB boundary with MADV_HUGEPAGE, populated
//                               first, so that 2 MiB folios can be mapped whole; mapped plainly
//                               and registered for the current context only (no PORTABLE flag:
//                               whether the driver's cost grows with the GPUs). Each line gives
//                               the mapping's FilePmdMapped. With `fill`, the file's pages are
//                               dropped first and brought back in 2 MiB folios
//                               (sys::Os::fill_cache, as kept reads fill); warm the file first
//   register-pipeline FILE [WINDOW_MIB [GPU]]
//                               a first read through page-cache windows made as it goes: FILE's
//                               whole windows (WINDOW_MIB, 64) registered one after another, each
//                               copied into GPU (0) asynchronously as soon as it is registered,
//                               so that window k+1 is registered while window k is copied; timed
//                               from the first registration to the last copy's end (the start
//                               waits for GPUFILE_COMPARE_START_AT, as h2d-all's does). What one
//                               process's first read could reach without staging
//   copy-latency [BYTES]        one async copy of BYTES (4096) from pinned memory + stream sync,
//                               20000 times: mean and median µs (the floor under a small read)
//   direct-read FILE [THREADS]  THREADS threads read their slices of FILE with O_DIRECT, 16 MiB
//                               at a time: the disk's read ceiling with depth
//   pagecache FILE [THREADS]    THREADS threads pread their slices of FILE into host memory:
//                               the page cache's read ceiling (default: one thread per core)
//   fswrite FILE [THREADS]      THREADS threads pwrite host memory into their slices of FILE.out
//                               through the page cache, then fsync: the file system's write ceiling
//   pread FILE THREADS IO_KIB [pageable|pinned]
//                               THREADS threads pread IO_KIB pieces of FILE, taken in turn from a
//                               shared cursor, three passes, each into a buffer of its own: what
//                               plain pread by that many callers of that IO size reaches (the
//                               ceiling of issue 10's N-caller targets where it is below H2D)
//   pwrite FILE THREADS IO_KIB [pageable|pinned]
//                               the same with pwrite, one pass over FILE in place, O_DIRECT
//                               where the file system takes it (tmpfs does not): the write
//                               ceiling of `gpufile bench -I 1` callers of that IO size
//   staged FILE THREADS IO_KIB [PIECES [HOW]]
//                               THREADS synchronous callers as `pread`'s mode takes pieces, each
//                               read through a pinned buffer of its own into the GPU: PIECES (1)
//                               parts per call, part i+1 read while part i is copied, the call
//                               done when its copies are (a stream sync). HOW a part reaches the
//                               buffer: pread (the kernel's copy), memcpy or stream (the CPU's
//                               copy out of a populated mapping of the file, with plain or
//                               non-temporal stores: the latter do not read the buffer's lines
//                               first, one crossing of host memory fewer). What any loop that
//                               stages page-cache bytes through pinned memory reaches for this
//                               shape: on the H200 machine the DMA reads bytes the CPU has just
//                               written far slower than old ones, so this sits well below
//                               min(H2D, pread) at 1-4 MiB (docs/performance.md, "Many callers").
//                               Its clock starts at GPUFILE_COMPARE_START_AT where that is set
// Baselines (what hand-written loaders do):
//   naive FILE                  pread 16 MiB pieces into one pinned buffer, cuMemcpyHtoD each
//   pageable FILE               the same with a malloc'd buffer
//   naive-write / pageable-write FILE   cuMemcpyDtoH 16 MiB pieces, pwrite each to FILE.out, fsync
// gpufile through the cuFile API:
//   gpufile FILE                one cuFileRead of the whole FILE into device memory
//   gpufile-write FILE          one cuFileWrite of FILE's size to FILE.out (O_DIRECT fd), then fsync
//   dali FILE [THREADS [SECONDS]]  DALI's pattern: one registered 256 MiB device pool, THREADS (8)
//                               threads issuing synchronous 2 MiB cuFileRead calls at random 2 MiB
//                               offsets of FILE into 2 MiB slots of their own 32 MiB region of the
//                               pool (devPtr_offset), for SECONDS (2); adds p50/p99 per call
//
// Output: MODE, GiB moved, seconds, GiB/s, CPU seconds (user + system, all threads) per GiB.
#include <cufile.h>
#if defined(__SSE2__)
#include <immintrin.h>
#endif
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "exec/runtime.hpp"
#include "sys/os.hpp"

using namespace gpufile;
using Clock = std::chrono::steady_clock;

namespace {

const cuda::Driver* d = nullptr;
constexpr uint64_t kPiece = 16ull << 20;  // what the naive loops read or write per call
constexpr double kGiB = double(1ull << 30);

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + (u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// Wall and CPU time of one measured stretch.
struct Timer {
  Clock::time_point t0 = Clock::now();
  double cpu0 = cpu_seconds();
  void report(const char* mode, uint64_t bytes, const std::string& note = "") const {
    double s = std::chrono::duration<double>(Clock::now() - t0).count();
    double cpu = cpu_seconds() - cpu0;
    std::printf("%-14s %8.3f GiB %8.3f s %8.2f GiB/s cpu %7.3f s/GiB %s\n", mode, bytes / kGiB, s,
                bytes / kGiB / s, cpu / (bytes / kGiB), note.c_str());
  }
};

// Milliseconds from `t0` to now.
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int fail(const char* what) {
  std::fprintf(stderr, "gpufile_compare: %s\n", what);
  return 1;
}

enum class HostMemory { pageable, pinned, host_alloc };

void* host_buffer(uint64_t n, HostMemory kind) {
  void* p = nullptr;
  if (kind == HostMemory::pinned) return cuda::alloc_pinned(n, &p) ? nullptr : p;
  if (kind == HostMemory::host_alloc) return d->MemHostAlloc(&p, n, 0) ? nullptr : p;
  p = aligned_alloc(4096, n);
  if (p) std::memset(p, 1, n);  // fault it in outside the timed stretch
  return p;
}

const char* memory_name(HostMemory kind) {
  static const char* names[] = {"pageable", "pinned", "hostalloc"};
  return names[static_cast<int>(kind)];
}

int copy_ceiling(bool to_device, HostMemory kind) {
  const uint64_t n = 1ull << 30;
  void* host = host_buffer(n, kind);
  cuda::CUdeviceptr dev = 0;
  if (host == nullptr || d->MemAlloc(&dev, n)) return fail("alloc");
  auto copy = [&] { return to_device ? d->MemcpyHtoD(dev, host, n) : d->MemcpyDtoH(host, dev, n); };
  if (copy()) return fail("copy");  // warm-up
  Timer t;
  for (int i = 0; i < 4; ++i) copy();
  std::string mode = std::string(to_device ? "h2d-" : "d2h-") + memory_name(kind);
  t.report(mode.c_str(), 4 * n);
  return 0;
}

// The fixed cost of one small copy into the GPU as gpufile's small-IO path makes it: an async
// copy of `n` bytes from pinned memory on a stream of its own, then a stream sync. 20000 copies;
// prints the mean and the median in µs: the floor under a synchronous small read (a read cannot
// be done before its copy is).
int copy_latency(uint64_t n) {
  void* host = host_buffer(n, HostMemory::pinned);
  cuda::CUdeviceptr dev = 0;
  cuda::CUstream stream = nullptr;
  if (host == nullptr || d->MemAlloc(&dev, n) || d->StreamCreate(&stream, 0)) return fail("alloc");
  constexpr int kCopies = 20000;
  std::vector<double> us(kCopies);
  for (int i = -100; i < kCopies; ++i) {  // the first 100 warm up
    Clock::time_point t0 = Clock::now();
    if (d->MemcpyHtoDAsync(dev, host, n, stream) || d->StreamSynchronize(stream)) return fail("copy");
    if (i >= 0) us[i] = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
  }
  double sum = 0;
  for (double v : us) sum += v;
  std::nth_element(us.begin(), us.begin() + kCopies / 2, us.end());
  std::printf("copy-latency   %8llu B  mean %6.2f us  p50 %6.2f us\n",
              static_cast<unsigned long long>(n), sum / kCopies, us[kCopies / 2]);
  return 0;
}

// Slice [off, off + len) of `size` bytes for thread i of n, on 16 MiB boundaries.
void slice(uint64_t size, int i, int n, uint64_t* off, uint64_t* len) {
  uint64_t pieces = (size + kPiece - 1) / kPiece;
  uint64_t a = pieces * i / n * kPiece, b = std::min(size, pieces * (i + 1) / n * kPiece);
  *off = a;
  *len = b > a ? b - a : 0;
}

// THREADS threads each moving their slice of the file between host memory and the file: through
// the page cache, or (direct) reading with O_DIRECT.
int host_file_ceiling(const char* path, uint64_t size, int threads, bool write, bool direct) {
  std::string target = write ? std::string(path) + ".out" : path;
  int flags = write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY | (direct ? O_DIRECT : 0);
  int fd = open(target.c_str(), flags, 0644);
  if (fd < 0) return fail("open");
  std::vector<void*> bufs(threads);
  for (auto& b : bufs)
    if ((b = host_buffer(kPiece, HostMemory::pageable)) == nullptr) return fail("alloc");
  bool ok = true;
  Timer t;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      uint64_t off = 0, len = 0;
      slice(size, i, threads, &off, &len);
      for (uint64_t done = 0; done < len;) {
        uint64_t n = std::min(kPiece, len - done);
        ssize_t r = write ? pwrite(fd, bufs[i], n, off + done) : pread(fd, bufs[i], n, off + done);
        if (r <= 0) { ok = false; return; }
        done += static_cast<uint64_t>(r);
      }
    });
  for (auto& th : pool) th.join();
  if (write) fsync(fd);
  if (!ok) return fail(write ? "pwrite" : "pread");
  t.report(write ? "fswrite" : direct ? "direct-read" : "pagecache", size,
           "(" + std::to_string(threads) + " threads)");
  close(fd);
  if (write) unlink(target.c_str());
  return 0;
}

// Opens FILE for the write ceiling as `gpufile bench -I 1` opens it: O_DIRECT, or the page cache
// where the file system refuses O_DIRECT (tmpfs).
int open_for_writes(const char* path) {
  int fd = open(path, O_WRONLY | O_DIRECT);
  return fd < 0 && errno == EINVAL ? open(path, O_WRONLY) : fd;
}

// THREADS threads move `io` bytes at a time between a host buffer of their own and FILE, taking
// pieces in turn from a shared cursor: reads (pread, through the page cache) make three passes;
// writes (pwrite) overwrite the file in place in one pass, as `gpufile bench -I 1` does, since
// a pass of a 4 GiB file to a disk takes seconds.
int piece_ceiling(const char* path, uint64_t size, int threads, uint64_t io, HostMemory kind,
                  bool write) {
  int fd = write ? open_for_writes(path) : open(path, O_RDONLY);
  if (fd < 0 || io == 0 || io > size) return fail("open / IO size");
  std::vector<void*> bufs(threads);
  for (auto& b : bufs)
    if ((b = host_buffer(io, kind)) == nullptr) return fail("alloc");
  const uint64_t per_pass = size / io, total = (write ? 1 : 3) * per_pass;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> ok{true};
  Timer t;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      for (uint64_t k; (k = next.fetch_add(1)) < total;) {
        const off_t off = static_cast<off_t>((k % per_pass) * io);
        if ((write ? pwrite(fd, bufs[i], io, off) : pread(fd, bufs[i], io, off)) !=
            static_cast<ssize_t>(io))
          ok = false;
      }
    });
  for (auto& th : pool) th.join();
  if (!ok) return fail(write ? "pwrite" : "pread");
  t.report(write ? "pwrite" : "pread", total * io,
           "(" + std::to_string(threads) + " threads, " + std::to_string(io >> 10) + " KiB, " +
               memory_name(kind) + ")");
  close(fd);
  return 0;
}

// Waits until GPUFILE_COMPARE_START_AT (seconds since the epoch), so that processes started
// together measure the same stretch whatever their set-up took. Returns how late it was (0 if
// on time or unset): a late process copied alone for a while, and its line says so.
double wait_for_start() {
  const char* at = std::getenv("GPUFILE_COMPARE_START_AT");
  if (at == nullptr || *at == 0) return 0;
  const auto start = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::duration<double>(std::atof(at))));
  const double late = std::chrono::duration<double>(std::chrono::system_clock::now() - start).count();
  if (late < 0) std::this_thread::sleep_until(start);
  return std::max(0.0, late);
}

// How a staged part reaches its pinned buffer: the kernel's copy (pread), or the CPU's out of a
// mapping of the page cache, with plain stores (memcpy) or non-temporal ones, which write the
// buffer without reading its lines into the cache first (one crossing of host memory fewer).
enum class StageCopy { pread, memcpy, stream };

// `len` bytes from `src` to `dst` with non-temporal stores; both 16-byte aligned, len a multiple
// of 64 (staged parts are whole pages). Without SSE2 (not x86-64), a plain copy.
void stream_copy(char* dst, const char* src, uint64_t len) {
#if defined(__SSE2__)
  for (uint64_t i = 0; i < len; i += 64) {
    const __m128i a = _mm_load_si128(reinterpret_cast<const __m128i*>(src + i));
    const __m128i b = _mm_load_si128(reinterpret_cast<const __m128i*>(src + i + 16));
    const __m128i c = _mm_load_si128(reinterpret_cast<const __m128i*>(src + i + 32));
    const __m128i e = _mm_load_si128(reinterpret_cast<const __m128i*>(src + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(dst + i + 48), e);
  }
  _mm_sfence();  // the stores are visible before the copy engine reads the buffer
#else
  std::memcpy(dst, src, len);
#endif
}

// Synchronous callers staging through pinned memory, as the `staged` mode's header says. Each
// thread: its own stream, buffer and device slot; the pieces come from one shared cursor.
int staged_ceiling(const char* path, uint64_t size, int threads, uint64_t io, int parts, StageCopy how) {
  int fd = open(path, O_RDONLY);
  if (fd < 0 || io == 0 || io > size || parts < 1 || io % parts != 0) return fail("open / IO size");
  if (how == StageCopy::stream && (io / parts) % 64 != 0) return fail("stream: parts of whole 64-byte lines");
  const uint64_t part = io / parts, per_pass = size / io, total = 3 * per_pass;
  // The mapping is populated before the clock: its page faults are not what is measured.
  const char* map = nullptr;
  if (how != StageCopy::pread) {
    void* m = mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED || madvise(m, size, MADV_POPULATE_READ) != 0) return fail("map / populate");
    map = static_cast<const char*>(m);
  }
  std::vector<void*> bufs(threads);
  std::vector<cuda::CUdeviceptr> slots(threads);
  std::vector<cuda::CUstream> streams(threads);
  for (int i = 0; i < threads; ++i)
    if ((bufs[i] = host_buffer(io, HostMemory::pinned)) == nullptr || d->MemAlloc(&slots[i], io) ||
        d->StreamCreate(&streams[i], 1 /* non-blocking */))
      return fail("alloc");
  std::atomic<uint64_t> next{0};
  std::atomic<bool> ok{true};
  cuda::CUcontext ctx = nullptr;
  d->CtxGetCurrent(&ctx);
  const double late = wait_for_start();
  Timer t;
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      d->CtxSetCurrent(ctx);
      char* buf = static_cast<char*>(bufs[i]);
      for (uint64_t k; (k = next.fetch_add(1)) < total;) {
        const off_t off = static_cast<off_t>((k % per_pass) * io);
        for (int p = 0; p < parts; ++p) {
          char* to = buf + p * part;
          const off_t at = off + static_cast<off_t>(p * part);
          if (how == StageCopy::pread && pread(fd, to, part, at) != static_cast<ssize_t>(part)) ok = false;
          if (how == StageCopy::memcpy) std::memcpy(to, map + at, part);
          if (how == StageCopy::stream) stream_copy(to, map + at, part);
          if (d->MemcpyHtoDAsync(slots[i] + p * part, to, part, streams[i])) ok = false;
        }
        if (d->StreamSynchronize(streams[i])) ok = false;
      }
    });
  for (auto& th : pool) th.join();
  if (!ok) return fail("pread / copy");
  static const char* const kHow[] = {"pread", "memcpy from a mapping", "non-temporal copy from a mapping"};
  t.report("staged", total * io,
           "(" + std::to_string(threads) + " threads, " + std::to_string(io >> 10) + " KiB, " +
               std::to_string(parts) + " parts, " + kHow[static_cast<int>(how)] + ")" +
               (late > 0 ? ", started " + std::to_string(late) + " s late" : ""));
  if (map != nullptr) munmap(const_cast<char*>(map), size);
  close(fd);
  return 0;
}

// One GPU's side of h2d-all: its context, the host bytes its threads copy from, its threads' slots.
struct GpuFeed {
  cuda::CUcontext ctx = nullptr;
  const char* host = nullptr;
  uint64_t host_bytes = 0;
  cuda::CUdeviceptr slots = 0;
  std::atomic<uint64_t> moved{0};
};

constexpr unsigned kMemHostRegisterReadOnly = 0x08;  // CU_MEMHOSTREGISTER_READ_ONLY

// FILE mapped read-only, its size rounded down to whole windows in *bytes; null on failure.
char* map_windows(const std::string& path, uint64_t window, uint64_t* bytes) {
  int fd = open(path.c_str(), O_RDONLY);
  struct stat st {};
  if (fd < 0 || fstat(fd, &st) != 0) return nullptr;
  *bytes = static_cast<uint64_t>(st.st_size) / window * window;
  void* map = *bytes == 0 ? MAP_FAILED : mmap(nullptr, *bytes, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  return map == MAP_FAILED ? nullptr : static_cast<char*>(map);
}

// Registers (or unregisters) a mapping window by window, as page-cache DMA does: read-only,
// portable (every context of the process may copy out of it). False if the driver refused one.
constexpr unsigned kWindowFlags = cuda::kMemHostRegisterPortable | kMemHostRegisterReadOnly;
bool register_windows(char* map, uint64_t bytes, uint64_t window, bool reg, unsigned flags = kWindowFlags) {
  bool ok = true;
  for (uint64_t off = 0; off < bytes; off += window)
    if (reg ? d->MemHostRegister(map + off, window, flags) : d->MemHostUnregister(map + off))
      ok = false;
  return ok;
}

// FILE mapped and registered in 64 MiB windows, kept for the process's life.
const char* registered_file(const std::string& path, uint64_t* bytes) {
  constexpr uint64_t kWindow = 64ull << 20;
  char* map = map_windows(path, kWindow, bytes);
  return map != nullptr && register_windows(map, *bytes, kWindow, true) ? map : nullptr;
}

// Registers (then unregisters) every GPU's file in windows, serially or a thread per file.
int register_files(const char* pattern, uint64_t window, bool parallel) {
  int gpus = 0;
  if (d->DeviceGetCount(&gpus) || gpus < 1 || window == 0) return fail("no GPU / args");
  struct Mapped { char* map = nullptr; uint64_t bytes = 0; };
  std::vector<Mapped> files(gpus);
  uint64_t total = 0;
  for (int g = 0; g < gpus; ++g) {
    char path[4096];
    std::snprintf(path, sizeof path, pattern, g);
    if ((files[g].map = map_windows(path, window, &files[g].bytes)) == nullptr) return fail("map");
    total += files[g].bytes;
  }
  cuda::CUcontext ctx = nullptr;
  d->CtxGetCurrent(&ctx);
  std::atomic<bool> ok{true};
  for (bool reg : {true, false}) {
    const auto t0 = Clock::now();
    auto one_file = [&](const Mapped& m) {
      d->CtxSetCurrent(ctx);
      if (!register_windows(m.map, m.bytes, window, reg)) ok = false;
    };
    std::vector<std::thread> pool;
    for (const Mapped& m : files) {
      if (parallel) pool.emplace_back(one_file, std::cref(m));
      else one_file(m);
    }
    for (auto& th : pool) th.join();
    const double ms = ms_since(t0);
    std::printf("%-12s %d files, %.0f MiB in %llu MiB windows, %s: %.1f ms, %.1f us/MiB\n",
                reg ? "register" : "unregister", gpus, total / 1048576.0,
                static_cast<unsigned long long>(window >> 20), parallel ? "a thread per file" : "serial",
                ms, ms * 1000 / (total / 1048576.0));
  }
  for (const Mapped& m : files) munmap(m.map, m.bytes);
  return ok ? 0 : fail("register");
}

// The mapping's FilePmdMapped (/proc/self/smaps_rollup), in MiB: file pages mapped 2 MiB at a time.
double file_pmd_mapped_mib() {
  FILE* f = std::fopen("/proc/self/smaps_rollup", "r");
  if (f == nullptr) return -1;
  char line[256];
  double kib = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "FilePmdMapped: %lf kB", &kib) == 1) break;
  std::fclose(f);
  return kib < 0 ? -1 : kib / 1024;
}

// FILE's first `bytes` mapped read-only on a 2 MiB boundary, with MADV_HUGEPAGE, so that 2 MiB
// folios of the page cache can be mapped whole; null on failure.
char* map_on_folio_boundary(const std::string& path, uint64_t bytes) {
  constexpr uint64_t kTwoMiB = 2ull << 20;
  const int fd = open(path.c_str(), O_RDONLY);
  if (fd < 0) return nullptr;
  void* map = MAP_FAILED;
  if (void* room = mmap(nullptr, bytes + kTwoMiB, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      room != MAP_FAILED) {
    const uint64_t base = reinterpret_cast<uint64_t>(room);
    const uint64_t at = (base + kTwoMiB - 1) & ~(kTwoMiB - 1);
    map = mmap(reinterpret_cast<void*>(at), bytes, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
    if (at > base) munmap(room, at - base);
    if (base + kTwoMiB > at) munmap(reinterpret_cast<void*>(at + bytes), base + kTwoMiB - at);
    if (map != MAP_FAILED) madvise(map, bytes, MADV_HUGEPAGE);
    else munmap(reinterpret_cast<void*>(at), bytes);  // the reservation's middle
  }
  close(fd);
  return map == MAP_FAILED ? nullptr : static_cast<char*>(map);
}

int register_ways(const std::string& path, uint64_t window, bool fill) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0 || window == 0) return fail("stat / args");
  const uint64_t bytes = static_cast<uint64_t>(st.st_size) / window * window;
  if (bytes == 0) return fail("the file is shorter than one window");
  if (fill) {
    const int fd = open(path.c_str(), O_RDONLY);
    if (fd < 0) return fail("open");
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    const auto t0 = Clock::now();
    const int r = sys::os().fill_cache(fd, 0, bytes);
    const double ms = ms_since(t0);
    close(fd);
    std::printf("fill         %.0f MiB in 2 MiB folios: %.1f ms (%s)\n", bytes / 1048576.0, ms,
                r == 0 ? "ok" : std::strerror(-r));
  }
  const double gib = bytes / double(1ull << 30);
  struct Way { const char* name; bool populate; bool aligned; unsigned flags; };
  for (const Way& w : {Way{"plain", false, false, kWindowFlags}, Way{"populated", true, false, kWindowFlags},
                       Way{"huge", true, true, kWindowFlags},
                       Way{"one-context", false, false, kMemHostRegisterReadOnly}}) {
    uint64_t mapped = bytes;
    char* map = w.aligned ? map_on_folio_boundary(path, bytes) : map_windows(path, window, &mapped);
    if (map == nullptr || mapped != bytes) return fail("map");
    double populate_ms = 0;
    if (w.populate) {
      const auto t0 = Clock::now();
      if (madvise(map, bytes, MADV_POPULATE_READ) != 0) return fail("MADV_POPULATE_READ");
      populate_ms = ms_since(t0);
    }
    const double pmd = file_pmd_mapped_mib();
    auto t0 = Clock::now();
    const bool ok = register_windows(map, bytes, window, true, w.flags);
    const double reg_ms = ms_since(t0);
    t0 = Clock::now();
    register_windows(map, bytes, window, false, w.flags);
    const double unreg_ms = ms_since(t0);
    munmap(map, bytes);
    if (!ok) return fail("register");
    std::printf("%-12s %.0f MiB, %llu MiB windows: populate %.1f ms, FilePmdMapped %.0f MiB, register %.1f ms "
                "(%.1f GiB/s), unregister %.1f ms; populate + register %.1f GiB/s\n",
                w.name, bytes / 1048576.0, static_cast<unsigned long long>(window >> 20), populate_ms, pmd,
                reg_ms, gib / (reg_ms / 1000), unreg_ms, gib / ((populate_ms + reg_ms) / 1000));
  }
  return 0;
}

// The GPU ordinals a comma list names ("all" or empty: every GPU); empty if one is out of range.
std::vector<int> gpu_list(const std::string& list, int count) {
  std::vector<int> out;
  if (list.empty() || list == "all") {
    for (int g = 0; g < count; ++g) out.push_back(g);
    return out;
  }
  for (size_t at = 0; at <= list.size();) {
    size_t comma = list.find(',', at);
    if (comma == std::string::npos) comma = list.size();
    char* end = nullptr;
    const long g = std::strtol(list.c_str() + at, &end, 10);
    if (comma == at || end != list.c_str() + comma || g < 0 || g >= count) return {};
    out.push_back(static_cast<int>(g));
    at = comma + 1;
  }
  return out;
}

int register_pipeline(const std::string& path, uint64_t window, int gpu) {
  cuda::CUdevice dev = 0;
  cuda::CUcontext ctx = nullptr;
  if (window == 0 || d->DeviceGet(&dev, gpu) || d->DevicePrimaryCtxRetain(&ctx, dev) || d->CtxSetCurrent(ctx))
    return fail("GPU / args");
  uint64_t bytes = 0;
  char* map = map_windows(path, window, &bytes);
  if (map == nullptr) return fail("map");
  cuda::CUdeviceptr dst = 0;
  cuda::CUstream s = nullptr;
  if (d->MemAlloc(&dst, bytes) || d->StreamCreate(&s, 1 /* non-blocking */)) return fail("device memory / stream");
  const double late = wait_for_start();
  const auto t0 = Clock::now();
  double registering_ms = 0;
  bool ok = true;
  for (uint64_t off = 0; off < bytes && ok; off += window) {
    const auto r0 = Clock::now();
    ok = d->MemHostRegister(map + off, window, cuda::kMemHostRegisterPortable | kMemHostRegisterReadOnly) == 0;
    registering_ms += ms_since(r0);
    ok = ok && d->MemcpyHtoDAsync(dst + off, map + off, window, s) == 0;
  }
  ok = ok && d->StreamSynchronize(s) == 0;
  const double total_ms = ms_since(t0);
  const double gib = bytes / double(1ull << 30);
  std::printf("register-pipeline GPU %d: %.0f MiB in %llu MiB windows: %.1f ms, %.2f GiB/s (registering %.1f ms of it)%s\n",
              gpu, bytes / 1048576.0, static_cast<unsigned long long>(window >> 20), total_ms,
              gib / (total_ms / 1000), registering_ms, late > 0.05 ? " (started late)" : "");
  register_windows(map, bytes, window, false);
  d->StreamDestroy(s);
  d->MemFree(dst);
  munmap(map, bytes);
  return ok ? 0 : fail("register / copy");
}

int h2d_all(int threads, uint64_t io, double seconds, const char* file_pattern, const std::string& gpu_names) {
  int count = 0;
  if (d->DeviceGetCount(&count) || count < 1 || threads < 1 || io == 0) return fail("no GPU / args");
  const std::vector<int> gpus = gpu_list(gpu_names, count);
  if (gpus.empty()) return fail("GPUS: a comma list of GPU ordinals, or all");
  std::vector<GpuFeed> feeds(gpus.size());
  for (size_t k = 0; k < gpus.size(); ++k) {
    GpuFeed& f = feeds[k];
    cuda::CUdevice dev = 0;
    if (d->DeviceGet(&dev, gpus[k]) || d->DevicePrimaryCtxRetain(&f.ctx, dev) || d->CtxSetCurrent(f.ctx))
      return fail("context");
    if (file_pattern != nullptr) {
      char path[4096];
      std::snprintf(path, sizeof path, file_pattern, gpus[k]);
      f.host = registered_file(path, &f.host_bytes);
    } else {
      f.host_bytes = 1ull << 30;
      f.host = static_cast<const char*>(host_buffer(f.host_bytes, HostMemory::pinned));
    }
    if (f.host == nullptr || f.host_bytes < io || d->MemAlloc(&f.slots, io * threads))
      return fail("source / device alloc");
  }
  const double late = wait_for_start();
  std::atomic<bool> stop{false}, ok{true};
  Timer t;
  std::vector<std::thread> pool;
  for (GpuFeed& f : feeds)
    for (int i = 0; i < threads; ++i)
      pool.emplace_back([&, i] {
        cuda::CUstream s = nullptr;
        if (d->CtxSetCurrent(f.ctx) || d->StreamCreate(&s, 1 /* non-blocking */)) return void(ok = false);
        const uint64_t pieces = f.host_bytes / io;
        for (uint64_t k = i; !stop.load(std::memory_order_relaxed); k += threads) {
          if (d->MemcpyHtoDAsync(f.slots + i * io, f.host + (k % pieces) * io, io, s) ||
              d->StreamSynchronize(s))
            return void(ok = false);
          f.moved.fetch_add(io, std::memory_order_relaxed);
        }
        d->StreamDestroy(s);
      });
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  if (!ok) return fail("copy");
  uint64_t total = 0;
  std::string each, names;
  const double s = std::chrono::duration<double>(Clock::now() - t.t0).count();
  for (size_t k = 0; k < feeds.size(); ++k) {
    total += feeds[k].moved;
    char one[32];
    std::snprintf(one, sizeof one, "%s%.2f", k ? " + " : "", feeds[k].moved / kGiB / s);
    each += one;
    names += (k ? "," : "") + std::to_string(gpus[k]);
  }
  char lateness[48] = "";
  if (late > 0) std::snprintf(lateness, sizeof lateness, "; started %.3f s late", late);
  t.report("h2d-all", total,
           "(" + std::to_string(gpus.size()) + " GPUs x " + std::to_string(threads) + " threads, " +
               std::to_string(io >> 10) + " KiB, " + (file_pattern ? "registered file" : "pinned") +
               "; GPUs " + names + "; per GPU " + each + " GiB/s" + lateness + ")");
  return 0;
}

// THREADS threads copying their slices of one host buffer into another, as the `memcpy` mode's
// header says. Each thread faults its own slices in first (the pages then sit on its NUMA node,
// as a worker's staging would); the copies start together once all have.
int memcpy_ceiling(int threads, uint64_t bytes, double seconds) {
  constexpr uint64_t kChunk = 64ull << 20;  // between looks at the clock's stop flag
  const uint64_t per_thread = threads > 0 ? bytes / threads / 4096 * 4096 : 0;
  if (threads < 1 || threads > 1024 || per_thread == 0 || seconds <= 0) return fail("THREADS / MIB / SECONDS");
  char* src = static_cast<char*>(aligned_alloc(4096, per_thread * threads));
  char* dst = static_cast<char*>(aligned_alloc(4096, per_thread * threads));
  if (src == nullptr || dst == nullptr) return fail("alloc");
  std::atomic<int> ready{0};
  std::atomic<bool> go{false}, stop{false};
  std::atomic<uint64_t> copied{0};
  std::vector<std::thread> pool;
  for (int i = 0; i < threads; ++i)
    pool.emplace_back([&, i] {
      char* from = src + i * per_thread;
      char* to = dst + i * per_thread;
      std::memset(from, i + 1, per_thread);
      std::memset(to, 0, per_thread);
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      uint64_t mine = 0;
      for (uint64_t off = 0; !stop.load(std::memory_order_relaxed);) {
        const uint64_t n = std::min(kChunk, per_thread - off);
        std::memcpy(to + off, from + off, n);
        mine += n;
        off = off + n == per_thread ? 0 : off + n;
      }
      copied.fetch_add(mine);
    });
  while (ready.load() < threads) std::this_thread::yield();
  Timer t;
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& th : pool) th.join();
  t.report("memcpy", copied, "(" + std::to_string(threads) + " threads, 2 x " +
                                 std::to_string(per_thread * threads >> 20) + " MiB)");
  std::free(src);
  std::free(dst);
  return 0;
}

// DALI's reader: one registered device pool, synchronous 2 MiB reads into slots inside it.
int dali(const char* path, uint64_t size, int threads, int seconds) {
  constexpr uint64_t kPool = 256ull << 20, kRead = 2ull << 20;
  const uint64_t region = kPool / threads / kRead * kRead;
  if (region < kRead || size < kRead) return fail("too many threads for the pool, or file too small");
  cuda::CUdeviceptr pool = 0;
  if (cuFileDriverOpen().err) return fail("driver open");
  if (d->MemAlloc(&pool, kPool)) return fail("device alloc");
  void* base = reinterpret_cast<void*>(pool);
  if (cuFileBufRegister(base, kPool, 0).err) return fail("buffer register");
  int fd = open(path, O_RDONLY | O_DIRECT);
  CUfileDescr_t desc{};
  desc.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  desc.handle.fd = fd;
  CUfileHandle_t h = nullptr;
  if (fd < 0 || cuFileHandleRegister(&h, &desc).err) return fail("handle register");
  std::vector<std::vector<double>> us(threads);
  std::atomic<bool> ok{true};
  const auto until = Clock::now() + std::chrono::seconds(seconds);
  Timer t;
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([&, i] {
      cuda::CUcontext ctx = nullptr;
      cuda::CUdevice dev = 0;
      d->DeviceGet(&dev, 0);
      d->DevicePrimaryCtxRetain(&ctx, dev);
      d->CtxSetCurrent(ctx);
      uint64_t rng = 0x9E3779B97F4A7C15ull * (i + 1);
      for (uint64_t k = 0; Clock::now() < until; ++k) {
        rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
        const uint64_t off = rng % (size / kRead) * kRead;
        const off_t slot = static_cast<off_t>(i * region + k * kRead % region);
        const Clock::time_point t0 = Clock::now();
        if (cuFileRead(h, base, kRead, static_cast<off_t>(off), slot) != static_cast<ssize_t>(kRead))
          ok = false;
        us[i].push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      }
    });
  for (auto& th : ts) th.join();
  std::vector<double> all;
  for (auto& v : us) all.insert(all.end(), v.begin(), v.end());
  if (!ok || all.empty()) return fail("read");
  std::sort(all.begin(), all.end());
  char note[128];
  std::snprintf(note, sizeof note, "(%d threads, 2 MiB into a 256 MiB pool; p50 %.0f us p99 %.0f us)",
                threads, all[all.size() / 2], all[all.size() * 99 / 100]);
  t.report("dali", all.size() * kRead, note);
  cuFileHandleDeregister(h);
  cuFileBufDeregister(base);
  close(fd);
  return 0;
}

// The loop most hand-written loaders use: one thread, one 16 MiB host buffer, a synchronous
// copy after each read (or before each write).
int naive(const char* path, uint64_t size, bool pinned, bool write) {
  void* host = host_buffer(kPiece, pinned ? HostMemory::pinned : HostMemory::pageable);
  cuda::CUdeviceptr dev = 0;
  if (host == nullptr || d->MemAlloc(&dev, size)) return fail("alloc");
  std::string target = write ? std::string(path) + ".out" : path;
  int fd = open(target.c_str(), write ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY, 0644);
  if (fd < 0) return fail("open");
  Timer t;
  for (uint64_t off = 0; off < size; off += kPiece) {
    uint64_t n = std::min(kPiece, size - off);
    if (write) {
      d->MemcpyDtoH(host, dev + off, n);
      if (pwrite(fd, host, n, off) != static_cast<ssize_t>(n)) return fail("pwrite");
    } else {
      if (pread(fd, host, n, off) != static_cast<ssize_t>(n)) return fail("pread");
      d->MemcpyHtoD(dev + off, host, n);
    }
  }
  if (write) fsync(fd);
  std::string mode = std::string(pinned ? "naive" : "pageable") + (write ? "-write" : "");
  t.report(mode.c_str(), size, pinned ? "(16 MiB pieces, pinned, 1 thread)"
                                      : "(16 MiB pieces, malloc'd, 1 thread)");
  close(fd);
  if (write) unlink(target.c_str());
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
  Timer t;
  ssize_t r = write ? cuFileWrite(h, reinterpret_cast<void*>(dev), size, 0, 0)
                    : cuFileRead(h, reinterpret_cast<void*>(dev), size, 0, 0);
  if (write) fsync(fd);
  if (r != static_cast<ssize_t>(size)) return fail("short transfer");
  t.report(write ? "gpufile-write" : "gpufile", size,
           "(engine " + Runtime::instance().engine_name() + ")");
  cuFileHandleDeregister(h);
  close(fd);
  if (write) unlink(target.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return fail("usage: gpufile_compare MODE [FILE [THREADS]]");
  d = cuda::driver();
  if (d == nullptr) return fail(cuda::why_no_driver().c_str());
  cuda::CUcontext ctx = nullptr;
  cuda::CUdevice dev = 0;
  d->DeviceGet(&dev, 0);
  d->DevicePrimaryCtxRetain(&ctx, dev);
  d->CtxSetCurrent(ctx);
  std::string mode = argv[1];
  for (HostMemory kind : {HostMemory::pageable, HostMemory::pinned, HostMemory::host_alloc}) {
    if (mode == std::string("h2d-") + memory_name(kind)) return copy_ceiling(true, kind);
    if (mode == std::string("d2h-") + memory_name(kind)) return copy_ceiling(false, kind);
  }
  if (mode == "h2d-all") {
    const bool file = argc > 5 && std::string(argv[5]) != "-";
    return h2d_all(argc > 2 ? std::atoi(argv[2]) : 8,
                   (argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 16384) << 10,
                   argc > 4 ? std::atof(argv[4]) : 5.0, file ? argv[5] : nullptr,
                   argc > 6 ? argv[6] : "all");
  }
  if (mode == "memcpy")
    return memcpy_ceiling(argc > 2 ? std::atoi(argv[2]) : 1,
                          (argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 1024) << 20,
                          argc > 4 ? std::atof(argv[4]) : 2.0);
  if (mode == "register-files" && argc > 2)
    return register_files(argv[2], (argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 64) << 20,
                          argc > 4 && std::atoi(argv[4]) == 1);
  if (mode == "register-ways" && argc > 2)
    return register_ways(argv[2], (argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 64) << 20,
                         argc > 4 && std::string(argv[4]) == "fill");
  if (mode == "register-pipeline" && argc > 2)
    return register_pipeline(argv[2], (argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 64) << 20,
                             argc > 4 ? std::atoi(argv[4]) : 0);
  if (mode == "copy-latency")
    return copy_latency(argc > 2 ? std::strtoull(argv[2], nullptr, 0) : 4096);
  if (argc < 3) return fail("this mode needs a FILE");
  struct stat st {};
  if (stat(argv[2], &st) != 0) return fail("stat");
  uint64_t size = static_cast<uint64_t>(st.st_size);
  int threads = argc > 3 ? std::atoi(argv[3]) : static_cast<int>(std::thread::hardware_concurrency());
  if (threads < 1 || threads > 1024) return fail("THREADS must be 1..1024");
  if (mode == "pagecache") return host_file_ceiling(argv[2], size, threads, false, false);
  if (mode == "direct-read") return host_file_ceiling(argv[2], size, threads, false, true);
  if (mode == "fswrite") return host_file_ceiling(argv[2], size, threads, true, false);
  if (mode == "naive") return naive(argv[2], size, true, false);
  if (mode == "pageable") return naive(argv[2], size, false, false);
  if (mode == "naive-write") return naive(argv[2], size, true, true);
  if (mode == "pageable-write") return naive(argv[2], size, false, true);
  if (mode == "pread" || mode == "pwrite") {
    const uint64_t io = argc > 4 ? std::strtoull(argv[4], nullptr, 0) << 10 : kPiece;
    const bool pinned = argc > 5 && std::string(argv[5]) == "pinned";
    return piece_ceiling(argv[2], size, threads, io,
                         pinned ? HostMemory::pinned : HostMemory::pageable, mode == "pwrite");
  }
  if (mode == "staged") {
    const uint64_t io = argc > 4 ? std::strtoull(argv[4], nullptr, 0) << 10 : kPiece;
    const std::string how = argc > 6 ? argv[6] : "pread";
    if (how != "pread" && how != "memcpy" && how != "stream") return fail("HOW: pread, memcpy or stream");
    return staged_ceiling(argv[2], size, threads, io, argc > 5 ? std::atoi(argv[5]) : 1,
                          how == "pread" ? StageCopy::pread : how == "memcpy" ? StageCopy::memcpy : StageCopy::stream);
  }
  if (mode == "dali")
    return dali(argv[2], size, argc > 3 ? threads : 8, argc > 4 ? std::atoi(argv[4]) : 2);
  if (mode == "gpufile") return with_gpufile(argv[2], size, false);
  if (mode == "gpufile-write") return with_gpufile(argv[2], size, true);
  return fail("unknown mode");
}
