// gpufile_soak: a long mixed load on the cuFile C API (issue 15), with every byte checked and the
// process's resources sampled every second.
//
// Worker threads run a seeded random mix until the deadline: synchronous cuFileRead/cuFileWrite
// of 1 B to --max-io bytes at unaligned offsets into device, pinned and pageable memory,
// registered or not (cuFileBufRegister/Deregister churn, buffers freed and allocated again);
// batches (cuFileBatchIO*, read-only ones sometimes cancelled); stream IO (cuFileReadAsync/
// WriteAsync on a stream registered with cuFileStreamRegister, then cuStreamSynchronize); and
// small files of their own opened (O_DIRECT or buffered), registered, used, deregistered and
// closed. All threads share one file, opened through one O_DIRECT and one buffered handle: each
// owns a region of it and small stripes of a "mixed zone" where its bytes abut other threads'
// bytes inside the same pages. One shadow of the file holds what it must contain (each thread
// writes only its own bytes): every read is compared with it byte for byte (device memory read
// back with cuMemcpyDtoH), every write must report all its bytes, and at the end the whole file
// must equal it.
//
// Every --reopen-every seconds all workers pause at a barrier (no IO in flight); the main thread
// takes a "quiet" sample, closes the driver (cuFileDriverClose: the use count reaches 0, so every
// handle, buffer registration and stream registration is dropped), takes another, opens the
// driver again and registers the shared file's descriptors again. The workers then treat their
// buffers as unregistered and register their streams again, as a real program must.
//
// A monitor thread samples each second: VmRSS, open descriptors, threads, VmPin/VmLck, the
// library's pinned staging bytes (gpufile::cuda::live_pinned_bytes) and, on the CUDA driver test
// double, its live cuMemHostRegister bytes. The verdict (exit 0 only if all hold): no error and
// no wrong byte; RSS flat (the last 10% of the samples under the warm-up maximum plus
// max(--rss-tolerance-mib, 10%)); the quiet samples of the last pause equal to the first's in
// descriptors and threads; pinned staging 0 whenever the driver is closed; after the final close
// descriptors and threads back to the counts before the first open.
#include <cufile.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda/driver.hpp"
#include "cuda/memory.hpp"
#include "splitmix64.hpp"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SOAK_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define SOAK_SANITIZED 1
#endif
#endif
#ifndef SOAK_SANITIZED
#define SOAK_SANITIZED 0
#endif

namespace {

namespace cu = gpufile::cuda;
using Clock = std::chrono::steady_clock;
constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// ---- options ------------------------------------------------------------------------------------

struct Options {
  double seconds = 600;
  int threads = 8;
  uint64_t seed = 0;
  bool seed_given = false;
  std::string dir;
  std::string csv;
  bool quiet = false;
  double reopen_every = 30;  // 0: never; default min(30, seconds / 5)
  bool reopen_given = false;
  size_t max_io = 8 * MiB;
  size_t region = 16 * MiB;  // each thread's own region of the shared file
  double rss_tolerance_mib = 32;
  std::string kinds = "device,pinned,pageable";  // memory kinds the workers use
  bool fadvise_random = false;  // no readahead on the shared file's buffered fd
};

void usage() {
  std::fprintf(stderr,
               "usage: gpufile_soak [--seconds N] [--threads N] [--seed S] [--dir DIR] [--csv FILE] [--quiet]\n"
               "                    [--reopen-every SECONDS] [--max-io BYTES] [--region-mib N]\n"
               "                    [--rss-tolerance-mib N] [--kinds device,pinned,pageable]\n"
               "                    [--fadvise-random]\n");
}

bool parse(int argc, char** argv, Options* o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--seconds") o->seconds = std::atof(val());
    else if (a == "--threads") o->threads = std::max(1, std::atoi(val()));
    else if (a == "--seed") o->seed = std::strtoull(val(), nullptr, 0), o->seed_given = true;
    else if (a == "--dir") o->dir = val();
    else if (a == "--csv") o->csv = val();
    else if (a == "--quiet") o->quiet = true;
    else if (a == "--reopen-every") o->reopen_every = std::atof(val()), o->reopen_given = true;
    else if (a == "--max-io") o->max_io = std::max<size_t>(1, std::strtoull(val(), nullptr, 0));
    else if (a == "--region-mib") o->region = std::max<size_t>(1, std::strtoull(val(), nullptr, 0)) * MiB;
    else if (a == "--rss-tolerance-mib") o->rss_tolerance_mib = std::atof(val());
    else if (a == "--kinds") o->kinds = val();
    else if (a == "--fadvise-random") o->fadvise_random = true;
    else if (a == "-h" || a == "--help") {
      usage();
      std::exit(0);
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      usage();
      return false;
    }
  }
  if (!o->seed_given) o->seed = static_cast<uint64_t>(Clock::now().time_since_epoch().count()) ^ getpid();
  if (o->dir.empty()) {
    const char* t = std::getenv("TMPDIR");
    o->dir = t && *t ? t : "/tmp";
  }
  if (!o->reopen_given) o->reopen_every = std::min(30.0, std::max(1.0, o->seconds / 5));
  o->max_io = std::min(o->max_io, o->region);
  return true;
}

// ---- randomness ---------------------------------------------------------------------------------

class Rng : public test_support::SplitMix64 {
 public:
  using SplitMix64::SplitMix64;
  bool one_in(uint64_t n) { return below(n) == 0; }
  // 1..max, each power-of-two band equally likely: as many tiny IOs as huge ones.
  uint64_t log_size(uint64_t max) {
    unsigned bits = 0;
    while ((1ull << bits) < max) ++bits;
    uint64_t band = 1ull << below(bits + 1);
    return 1 + below(std::min(band, max));
  }
};

// ---- the process's resources ----------------------------------------------------------------

struct Sample {
  double t = 0;
  std::string phase;
  long rss_kib = 0, vm_pin_kib = 0, vm_lck_kib = 0, fds = 0;
  long threads = 0;     // the process's threads, io_uring's kernel workers not included
  long iou_threads = 0;  // those: iou-wrk-*, iou-sqp-*
  // The CUDA driver test double runs a thread per stream ("fakecuda-strm"); the library makes
  // streams for its staging buffers as the load first needs them, so with the driver open their
  // number follows the load since the last reopen (the real driver starts no thread per stream).
  long fake_stream_threads = 0;
  uint64_t pinned_staging = 0;  // gpufile's own count
  long long fake_registered = -1;  // the test double's live cuMemHostRegister bytes; -1 elsewhere
  uint64_t ops = 0, bytes = 0;
  std::string names;  // the threads by name, at the quiet points only
};

long count_fds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  long n = 0;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') ++n;
  closedir(d);
  return n - 1;  // the directory's own descriptor
}

void read_status(Sample* s) {
  FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return;
  char line[256];
  while (std::fgets(line, sizeof line, f)) {
    long v = 0;
    if (std::sscanf(line, "VmRSS: %ld", &v) == 1) s->rss_kib = v;
    else if (std::sscanf(line, "VmPin: %ld", &v) == 1) s->vm_pin_kib = v;
    else if (std::sscanf(line, "VmLck: %ld", &v) == 1) s->vm_lck_kib = v;
    else if (std::sscanf(line, "Threads: %ld", &v) == 1) s->threads = v;
  }
  std::fclose(f);
}

// The threads by name ("gpufile-io x12, cuda-host x1"): what a thread count that did not come
// back is made of.
// io_uring's own workers (iou-wrk-*, iou-sqp-*): the kernel starts them for IO it punts to its
// worker pool and ends them after some idle seconds, so they come and go with the load; they are
// counted apart from the process's own threads.
long count_threads_named(const char* prefix) {
  const size_t len = std::strlen(prefix);
  long n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      if (FILE* f = std::fopen(("/proc/self/task/" + std::string(e->d_name) + "/comm").c_str(), "re")) {
        char b[64] = {};
        if (std::fgets(b, sizeof b, f) && std::strncmp(b, prefix, len) == 0) ++n;
        std::fclose(f);
      }
    }
    closedir(d);
  }
  return n;
}
long count_io_uring_threads() { return count_threads_named("iou-"); }

std::string thread_names() {
  std::vector<std::pair<std::string, int>> names;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] == '.') continue;
      std::string comm = "?";
      if (FILE* f = std::fopen(("/proc/self/task/" + std::string(e->d_name) + "/comm").c_str(), "re")) {
        char b[64] = {};
        if (std::fgets(b, sizeof b, f)) comm = b;
        std::fclose(f);
        while (!comm.empty() && comm.back() == '\n') comm.pop_back();
      }
      auto it = std::find_if(names.begin(), names.end(), [&](auto& p) { return p.first == comm; });
      if (it == names.end()) names.emplace_back(comm, 1);
      else ++it->second;
    }
    closedir(d);
  }
  std::string out;
  for (auto& [n, k] : names) out += (out.empty() ? "" : ", ") + n + " x" + std::to_string(k);
  return out;
}

using LiveBytesFn = size_t (*)();
LiveBytesFn fake_registered_fn = nullptr;  // fakecuda_live_registered_bytes, on the double only
LiveBytesFn fake_pinned_fn = nullptr;      // fakecuda_live_pinned_bytes
LiveBytesFn fake_device_fn = nullptr;      // fakecuda_live_device_bytes

void* driver_library_symbol(const char* name) {
  const char* path = std::getenv("GPUFILE_CUDA_LIBRARY");
  if (path == nullptr || *path == '\0') path = "libcuda.so.1";
  void* lib = dlopen(path, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  return lib ? dlsym(lib, name) : nullptr;
}

// ---- shared state ---------------------------------------------------------------------------------

struct Stripe {
  uint64_t off, len;
};

struct Counters {
  std::atomic<uint64_t> reads{0}, writes{0}, read_bytes{0}, write_bytes{0};
  std::atomic<uint64_t> batches{0}, batch_entries{0}, batch_cancels{0}, batch_canceled_entries{0};
  std::atomic<uint64_t> stream_ops{0}, stream_syncs{0};
  std::atomic<uint64_t> registers{0}, deregisters{0}, reallocs{0};
  std::atomic<uint64_t> files_churned{0}, file_ops{0};
  std::atomic<uint64_t> reopens{0};
  std::atomic<uint64_t> errors{0};
  uint64_t ops() const {
    return reads + writes + batches + stream_ops + registers + deregisters + reallocs + files_churned;
  }
};

struct Soak {
  Options opt;
  Clock::time_point t0;
  bool have_driver = false;
  bool direct_ok = false;
  cu::CUcontext ctx = nullptr;

  std::string path;  // the shared file
  uint64_t file_size = 0;
  uint64_t zone_size = 0;  // the mixed zone at the front
  std::vector<std::vector<Stripe>> stripes;  // per thread, in the mixed zone
  std::vector<uint8_t> shadow;               // what the file must hold
  int fds[2] = {-1, -1};                     // [0] buffered, [1] O_DIRECT where possible
  CUfileHandle_t fh[2] = {nullptr, nullptr};  // rewritten only while the workers are paused

  Counters c;
  std::mutex err_mu;
  std::vector<std::string> error_log;

  // The pause barrier.
  std::atomic<bool> stop{false};
  std::atomic<bool> pause_requested{false};
  std::mutex pause_mu;
  std::condition_variable pause_cv;
  int arrived = 0;
  uint64_t generation = 0;
  uint64_t epoch = 0;  // driver opens so far (read by workers after a pause)

  // Samples.
  std::mutex sample_mu;
  std::vector<Sample> samples;
  FILE* csv = nullptr;
  std::atomic<const char*> phase{"run"};
  std::atomic<uint64_t> last_progress_ops{0};

  double now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }

  void error(const char* fmt, ...) __attribute__((format(printf, 2, 3))) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    c.errors.fetch_add(1);
    std::lock_guard lock(err_mu);
    if (error_log.size() < 50) error_log.push_back(buf);
    std::fprintf(stderr, "soak: ERROR at %.1f s: %s\n", now(), buf);
  }

  Sample sample(const char* ph) {
    Sample s;
    s.t = now();
    s.phase = ph;
    read_status(&s);
    s.fds = count_fds();
    s.iou_threads = count_io_uring_threads();
    s.threads -= s.iou_threads;
    s.fake_stream_threads = count_threads_named("fakecuda-strm");
    s.pinned_staging = cu::live_pinned_bytes();
    s.fake_registered = fake_registered_fn ? static_cast<long long>(fake_registered_fn()) : -1;
    s.ops = c.ops();
    if (std::strcmp(ph, "run") != 0 && std::strcmp(ph, "start") != 0) s.names = thread_names();
    s.bytes = c.read_bytes + c.write_bytes;
    std::lock_guard lock(sample_mu);
    samples.push_back(s);
    if (csv) {
      std::fprintf(csv, "%.3f,%s,%ld,%ld,%ld,%ld,%ld,%ld,%" PRIu64 ",%lld,%" PRIu64 ",%" PRIu64 "\n", s.t,
                   s.phase.c_str(), s.rss_kib, s.fds, s.threads, s.iou_threads, s.vm_pin_kib, s.vm_lck_kib, s.pinned_staging,
                   s.fake_registered, s.ops, s.bytes);
      std::fflush(csv);
    }
    return s;
  }
};

Soak* g = nullptr;

std::string mismatch(const uint8_t* got, const uint8_t* want, size_t n) {
  if (std::memcmp(got, want, n) == 0) return {};
  size_t i = 0;
  while (got[i] == want[i]) ++i;
  size_t differ = 0;
  for (size_t k = i; k < n; ++k) differ += got[k] != want[k];
  char m[160];
  std::snprintf(m, sizeof m, "first wrong byte %zu of %zu: got 0x%02x want 0x%02x (%zu bytes differ)", i, n,
                got[i], want[i], differ);
  return m;
}

// Where a wrong read came from, said after the mismatch: what the file holds now through a
// fresh buffered fd (the page cache) and a fresh O_DIRECT fd (the disk, when the file system
// takes O_DIRECT). Both right: the transfer into the buffer went wrong; the page cache wrong and
// the disk right: a stale cached page; both wrong: a write put wrong bytes there.
std::string file_now(const std::string& path, uint64_t off, size_t n, const uint8_t* want, bool direct) {
  auto compare = [&](const uint8_t* got) {
    size_t differ = 0;
    for (size_t k = 0; k < n; ++k) differ += got[k] != want[k];
    return differ == 0 ? std::string("right") : std::to_string(differ) + " bytes wrong";
  };
  std::string out = "; the file now: page cache ";
  std::vector<uint8_t> got(n);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  out += fd >= 0 && ::pread(fd, got.data(), n, static_cast<off_t>(off)) == static_cast<ssize_t>(n)
             ? compare(got.data()) : "unreadable";
  if (fd >= 0) ::close(fd);
  if (!direct) return out;
  const uint64_t lo = off / 4096 * 4096, len = (off + n + 4095) / 4096 * 4096 - lo;
  void* bounce = nullptr;
  if (posix_memalign(&bounce, 4096, len) != 0) return out;
  out += ", disk ";
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_DIRECT);
  ssize_t r = fd >= 0 ? ::pread(fd, bounce, len, static_cast<off_t>(lo)) : -1;
  out += r >= static_cast<ssize_t>(off + n - lo) ? compare(static_cast<uint8_t*>(bounce) + (off - lo))
                                                  : "unreadable";
  if (fd >= 0) ::close(fd);
  std::free(bounce);
  return out;
}

CUfileError_t register_fd(int fd, CUfileHandle_t* fh) {
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  return cuFileHandleRegister(fh, &d);
}

void bind_context() {
  if (!g->have_driver) return;
  cu::CUcontext cur = nullptr;
  cu::driver()->CtxGetCurrent(&cur);
  if (cur != g->ctx) cu::driver()->CtxSetCurrent(g->ctx);
}

// ---- one worker's buffers -----------------------------------------------------------------------

enum class Kind { device, pinned, pageable };
const char* kind_name(Kind k) {
  return k == Kind::device ? "device" : k == Kind::pinned ? "pinned" : "pageable";
}

struct Buf {
  Kind kind = Kind::pageable;
  void* ptr = nullptr;
  size_t size = 0;
  bool registered = false;
};

bool alloc_buf(Buf* b, Kind kind, size_t size) {
  b->kind = kind;
  b->size = size;
  b->registered = false;
  b->ptr = nullptr;
  if (kind == Kind::device) {
    cu::CUdeviceptr p = 0;
    if (cu::driver()->MemAlloc(&p, size) != cu::CUDA_SUCCESS) return false;
    b->ptr = reinterpret_cast<void*>(p);
  } else if (kind == Kind::pinned) {
    if (cu::driver()->MemHostAlloc(&b->ptr, size, 0) != cu::CUDA_SUCCESS) return false;
  } else {
    b->ptr = std::aligned_alloc(4096, (size + 4095) / 4096 * 4096);
  }
  return b->ptr != nullptr;
}

void free_buf(Buf* b) {
  if (b->ptr == nullptr) return;
  if (b->registered) cuFileBufDeregister(b->ptr);
  if (b->kind == Kind::device) cu::driver()->MemFree(reinterpret_cast<cu::CUdeviceptr>(b->ptr));
  else if (b->kind == Kind::pinned) cu::driver()->MemFreeHost(b->ptr);
  else std::free(b->ptr);
  b->ptr = nullptr;
  b->registered = false;
}

// Moves bytes between a host vector and the buffer (CUDA copies for device memory).
bool upload(const Buf& b, size_t off, const void* src, size_t n) {
  if (n == 0) return true;
  if (b.kind == Kind::device)
    return cu::driver()->MemcpyHtoD(reinterpret_cast<cu::CUdeviceptr>(b.ptr) + off, src, n) == cu::CUDA_SUCCESS;
  std::memcpy(static_cast<char*>(b.ptr) + off, src, n);
  return true;
}
bool download(const Buf& b, size_t off, void* dst, size_t n) {
  if (n == 0) return true;
  if (b.kind == Kind::device)
    return cu::driver()->MemcpyDtoH(dst, reinterpret_cast<cu::CUdeviceptr>(b.ptr) + off, n) == cu::CUDA_SUCCESS;
  std::memcpy(dst, static_cast<char*>(b.ptr) + off, n);
  return true;
}

// ---- a worker -------------------------------------------------------------------------------------

constexpr size_t kGuard = 64;  // bytes each side of a read's target checked untouched

struct StreamParams {  // in pinned memory: the library reads and writes these at execution
  size_t size;
  off_t file_offset;
  off_t buf_offset;
  ssize_t bytes;
};

class Worker {
 public:
  Worker(int id, uint64_t seed) : id_(id), rng_(seed * 0x100000001b3ULL + static_cast<uint64_t>(id) * 7919 + 1) {}

  void run() {
    bind_context();
    buf_size_ = g->opt.max_io + 64 * KiB;
    scratch_.resize(buf_size_ + 2 * kGuard);
    want_.resize(buf_size_ + 2 * kGuard);
    std::vector<Kind> kinds;  // --kinds: the three buffers cycle through the kinds named
    for (Kind k : {Kind::device, Kind::pinned, Kind::pageable})
      if (g->opt.kinds.find(kind_name(k)) != std::string::npos) kinds.push_back(k);
    if (kinds.empty()) kinds.push_back(Kind::pageable);
    for (size_t k = 0; k < 3; ++k) {
      Kind kind = g->have_driver ? kinds[k % kinds.size()] : Kind::pageable;
      if (!alloc_buf(&bufs_[k], kind, buf_size_)) g->error("thread %d: allocating %s memory failed", id_, kind_name(kind));
    }
    if (g->have_driver) {
      void* p = nullptr;
      if (cu::driver()->MemHostAlloc(&p, 4096, 0) == cu::CUDA_SUCCESS) params_ = static_cast<StreamParams*>(p);
      if (cu::driver()->StreamCreate(&stream_, 0) != cu::CUDA_SUCCESS) stream_ = nullptr;
      register_stream();
    }
    seen_epoch_ = g->epoch;
    while (!g->stop.load()) {
      if (g->pause_requested.load()) pause();
      if (failed_) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
        continue;
      }
      one_op();
    }
    // Leave nothing behind: registrations, the stream, memory, the small files.
    if (stream_) {
      cu::driver()->StreamSynchronize(stream_);
      if (stream_registered_ && cuFileStreamDeregister(reinterpret_cast<CUstream>(stream_)).err != CU_FILE_SUCCESS)
        fail("cuFileStreamDeregister at the end failed");
      cu::driver()->StreamDestroy(stream_);
    }
    for (Buf& b : bufs_) {
      if (b.registered && cuFileBufDeregister(b.ptr).err != CU_FILE_SUCCESS) fail("cuFileBufDeregister at the end failed");
      b.registered = false;
      free_buf(&b);
    }
    if (params_) cu::driver()->MemFreeHost(params_);
    for (int k = 0; k < kSmallFiles; ++k) ::unlink(small_path(k).c_str());
  }

  bool failed() const { return failed_; }

 private:
  static constexpr int kSmallFiles = 4;

  void fail(const std::string& what) {
    failed_ = true;  // this thread stops its IO: its bytes of the file are no longer known
    g->error("thread %d: %s", id_, what.c_str());
  }

  void register_stream() {
    if (!stream_) return;
    stream_flags_ = rng_.one_in(2) ? 0u : (CU_FILE_STREAM_FIXED_BUF_OFFSET | CU_FILE_STREAM_FIXED_FILE_OFFSET |
                                          CU_FILE_STREAM_FIXED_FILE_SIZE);
    CUfileError_t st = cuFileStreamRegister(reinterpret_cast<CUstream>(stream_), stream_flags_);
    stream_registered_ = st.err == CU_FILE_SUCCESS;
    if (!stream_registered_) fail("cuFileStreamRegister failed: " + std::to_string(st.err));
  }

  void pause() {
    {
      std::unique_lock lock(g->pause_mu);
      ++g->arrived;
      g->pause_cv.notify_all();
      const uint64_t gen = g->generation;
      g->pause_cv.wait(lock, [&] { return g->generation != gen; });
    }
    bind_context();
    if (g->epoch != seen_epoch_) {
      // The driver was closed and opened again: cuFile dropped our buffer registrations and the
      // stream's registration with it. Register the stream again (a program that reuses its
      // streams must); buffers are registered again by the churn when it picks them.
      seen_epoch_ = g->epoch;
      for (Buf& b : bufs_) b.registered = false;
      if (stream_ && !failed_) register_stream();
    }
  }

  // A range of this thread's bytes: inside one of its stripes in the mixed zone, or inside its
  // own region (up to max_io bytes).
  struct Range {
    uint64_t off;
    size_t size;
  };
  Range pick(size_t max) {
    max = std::max<size_t>(1, std::min(max, g->opt.max_io));
    if (rng_.one_in(4) && !g->stripes[id_].empty()) {
      const Stripe& s = g->stripes[id_][rng_.below(g->stripes[id_].size())];
      uint64_t a = rng_.below(s.len);
      size_t n = static_cast<size_t>(std::min<uint64_t>({1 + rng_.below(s.len - a), max}));
      return {s.off + a, n};
    }
    const uint64_t base = g->zone_size + static_cast<uint64_t>(id_) * g->opt.region;
    size_t n = static_cast<size_t>(rng_.log_size(max));
    return {base + rng_.below(g->opt.region - n + 1), n};
  }
  size_t pick_boff(size_t size, size_t room) {
    const size_t hi = room - size;
    switch (rng_.below(4)) {
      case 0: return 0;
      case 1: return std::min(hi, rng_.below(hi / 4096 + 1) * 4096);
      default: return rng_.below(hi + 1);
    }
  }
  Buf& pick_buf() { return bufs_[rng_.below(3)]; }
  int pick_handle() { return static_cast<int>(rng_.below(2)); }

  std::string what(const char* op, int h, const Buf& b, uint64_t off, size_t size, size_t boff) const {
    char s[256];
    std::snprintf(s, sizeof s, "%s handle=%s file_off=%" PRIu64 " size=%zu buf=%s%s buf_off=%zu", op,
                  h ? "O_DIRECT" : "buffered", off, size, kind_name(b.kind), b.registered ? "(registered)" : "",
                  boff);
    return s;
  }

  void one_op() {
    const uint64_t r = rng_.below(100);
    if (r < 34) sync_read();
    else if (r < 58) sync_write();
    else if (r < 70) batch();
    else if (r < 82) stream_io();
    else if (r < 93) churn_registration();
    else churn_file();
    g->last_progress_ops.fetch_add(1, std::memory_order_relaxed);
  }

  // Guard bytes around [boff, boff + size) in the buffer: set before a read, checked after.
  void set_guards(const Buf& b, size_t boff, size_t size, uint8_t pat) {
    uint8_t gb[kGuard];
    std::memset(gb, pat, kGuard);
    size_t lo = std::min(boff, kGuard);
    upload(b, boff - lo, gb, lo);
    size_t hi = std::min(kGuard, b.size - boff - size);
    upload(b, boff + size, gb, hi);
  }

  // Reads back [boff - guard, boff + size + guard) and compares with the shadow and the guards.
  bool check_read(const char* op, int h, const Buf& b, uint64_t off, size_t size, size_t boff, uint8_t pat,
                  const uint8_t* want) {
    const size_t lo = std::min(boff, kGuard), hi = std::min(kGuard, b.size - boff - size);
    if (!download(b, boff - lo, scratch_.data(), lo + size + hi)) {
      fail(what(op, h, b, off, size, boff) + ": cuMemcpyDtoH failed");
      return false;
    }
    std::string m = mismatch(scratch_.data() + lo, want, size);
    if (!m.empty()) {
      if (want == g->shadow.data() + off) m += file_now(g->path, off, size, want, g->direct_ok);
      fail(what(op, h, b, off, size, boff) + ": " + m);
      return false;
    }
    for (size_t i = 0; i < lo; ++i)
      if (scratch_[i] != pat) {
        fail(what(op, h, b, off, size, boff) + ": a byte before the target changed");
        return false;
      }
    for (size_t i = 0; i < hi; ++i)
      if (scratch_[lo + size + i] != pat) {
        fail(what(op, h, b, off, size, boff) + ": a byte after the target changed");
        return false;
      }
    return true;
  }

  void sync_read() {
    Buf& b = pick_buf();
    Range r = pick(b.size);
    size_t boff = pick_boff(r.size, b.size);
    int h = pick_handle();
    uint8_t pat = static_cast<uint8_t>(rng_.next());
    set_guards(b, boff, r.size, pat);
    ssize_t n = cuFileRead(g->fh[h], b.ptr, r.size, static_cast<off_t>(r.off), static_cast<off_t>(boff));
    if (n != static_cast<ssize_t>(r.size))
      return fail(what("read", h, b, r.off, r.size, boff) + ": returned " + std::to_string(n) + " errno " +
                  std::to_string(errno));
    g->c.reads.fetch_add(1, std::memory_order_relaxed);
    g->c.read_bytes.fetch_add(r.size, std::memory_order_relaxed);
    check_read("read", h, b, r.off, r.size, boff, pat, g->shadow.data() + r.off);
  }

  void sync_write() {
    Buf& b = pick_buf();
    Range r = pick(b.size);
    size_t boff = pick_boff(r.size, b.size);
    int h = pick_handle();
    rng_.fill(want_.data(), r.size);
    if (!upload(b, boff, want_.data(), r.size)) return fail("cuMemcpyHtoD failed");
    ssize_t n = cuFileWrite(g->fh[h], b.ptr, r.size, static_cast<off_t>(r.off), static_cast<off_t>(boff));
    if (n != static_cast<ssize_t>(r.size))
      return fail(what("write", h, b, r.off, r.size, boff) + ": returned " + std::to_string(n) + " errno " +
                  std::to_string(errno));
    std::memcpy(g->shadow.data() + r.off, want_.data(), r.size);
    g->c.writes.fetch_add(1, std::memory_order_relaxed);
    g->c.write_bytes.fetch_add(r.size, std::memory_order_relaxed);
  }

  // 2 to 8 entries into disjoint slots of one buffer and disjoint ranges of the file; writes
  // change the shadow only once they reported every byte. One batch in six is read-only and
  // cancelled right after submission: every entry then completes (checked) or is cancelled.
  void batch() {
    Buf& b = pick_buf();
    const unsigned want_n = 2 + static_cast<unsigned>(rng_.below(7));
    const size_t slot = b.size / 8;
    const bool cancel = rng_.one_in(6);
    struct Entry {
      Range r;
      size_t boff;
      int h;
      bool write;
      size_t data_at;  // in want_
    };
    std::vector<Entry> es;
    size_t data_at = 0;
    for (unsigned i = 0; i < want_n; ++i) {
      Entry e{pick(std::min<size_t>(slot - 64, 1 * MiB)), 0, pick_handle(), !cancel && rng_.one_in(2), 0};
      e.boff = i * slot + rng_.below(64);
      bool clash = false;
      for (const Entry& o : es) clash |= e.r.off < o.r.off + o.r.size && o.r.off < e.r.off + e.r.size;
      if (clash) continue;
      if (e.write) {
        e.data_at = data_at;
        rng_.fill(want_.data() + data_at, e.r.size);
        if (!upload(b, e.boff, want_.data() + data_at, e.r.size)) return fail("cuMemcpyHtoD failed");
        data_at += e.r.size;
      }
      es.push_back(e);
    }
    std::vector<CUfileIOParams_t> io(es.size());
    for (size_t i = 0; i < es.size(); ++i) {
      io[i] = CUfileIOParams_t{};
      io[i].mode = CUFILE_BATCH;
      io[i].fh = g->fh[es[i].h];
      io[i].opcode = es[i].write ? CUFILE_WRITE : CUFILE_READ;
      io[i].cookie = reinterpret_cast<void*>(i + 1);
      io[i].u.batch.devPtr_base = b.ptr;
      io[i].u.batch.file_offset = static_cast<off_t>(es[i].r.off);
      io[i].u.batch.devPtr_offset = static_cast<off_t>(es[i].boff);
      io[i].u.batch.size = es[i].r.size;
    }
    CUfileBatchHandle_t bh = nullptr;
    CUfileError_t st = cuFileBatchIOSetUp(&bh, static_cast<unsigned>(io.size()));
    if (st.err != CU_FILE_SUCCESS) return fail("cuFileBatchIOSetUp failed: " + std::to_string(st.err));
    st = cuFileBatchIOSubmit(bh, static_cast<unsigned>(io.size()), io.data(), 0);
    if (st.err != CU_FILE_SUCCESS) {
      cuFileBatchIODestroy(bh);
      return fail("cuFileBatchIOSubmit failed: " + std::to_string(st.err));
    }
    if (cancel) {
      st = cuFileBatchIOCancel(bh);
      if (st.err != CU_FILE_SUCCESS) {
        cuFileBatchIODestroy(bh);
        return fail("cuFileBatchIOCancel failed: " + std::to_string(st.err));
      }
    }
    std::vector<CUfileIOEvents_t> ev(io.size());
    std::vector<bool> seen(io.size(), false);
    size_t nseen = 0;
    const auto limit = Clock::now() + std::chrono::seconds(60);
    int idle = 0;
    while (nseen < io.size() && Clock::now() < limit && !(cancel && idle >= 20)) {
      unsigned nr = static_cast<unsigned>(io.size());
      timespec t{0, 50 * 1000 * 1000};
      st = cuFileBatchIOGetStatus(bh, 1, &nr, ev.data(), &t);
      if (st.err != CU_FILE_SUCCESS) {
        cuFileBatchIODestroy(bh);
        return fail("cuFileBatchIOGetStatus failed: " + std::to_string(st.err));
      }
      idle = nr == 0 ? idle + 1 : 0;
      for (unsigned k = 0; k < nr; ++k) {
        const size_t i = reinterpret_cast<uintptr_t>(ev[k].cookie) - 1;
        if (i >= io.size() || seen[i]) {
          cuFileBatchIODestroy(bh);
          return fail("batch: an unknown or repeated cookie");
        }
        seen[i] = true;
        ++nseen;
        const Entry& e = es[i];
        const char* op = e.write ? "batch write" : "batch read";
        if (cancel && ev[k].status == CUFILE_CANCELED) {
          g->c.batch_canceled_entries.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        if (ev[k].status != CUFILE_COMPLETE || ev[k].ret != e.r.size) {
          cuFileBatchIODestroy(bh);
          return fail(what(op, e.h, b, e.r.off, e.r.size, e.boff) + ": status " + std::to_string(ev[k].status) +
                      " ret " + std::to_string(static_cast<ssize_t>(ev[k].ret)));
        }
        if (e.write) {
          std::memcpy(g->shadow.data() + e.r.off, want_.data() + e.data_at, e.r.size);
          g->c.write_bytes.fetch_add(e.r.size, std::memory_order_relaxed);
        } else {
          // No guards here: the slots of other entries abut.
          std::vector<uint8_t> got(e.r.size);
          if (!download(b, e.boff, got.data(), e.r.size)) return fail("cuMemcpyDtoH failed");
          std::string m = mismatch(got.data(), g->shadow.data() + e.r.off, e.r.size);
          if (!m.empty()) m += file_now(g->path, e.r.off, e.r.size, g->shadow.data() + e.r.off, g->direct_ok);
          if (!m.empty()) {
            cuFileBatchIODestroy(bh);
            return fail(what(op, e.h, b, e.r.off, e.r.size, e.boff) + ": " + m);
          }
          g->c.read_bytes.fetch_add(e.r.size, std::memory_order_relaxed);
        }
      }
    }
    cuFileBatchIODestroy(bh);
    if (nseen < io.size() && !cancel) return fail("batch: entries still not complete after 60 s");
    g->c.batches.fetch_add(1, std::memory_order_relaxed);
    g->c.batch_entries.fetch_add(io.size(), std::memory_order_relaxed);
    if (cancel) g->c.batch_cancels.fetch_add(1, std::memory_order_relaxed);
  }

  // 1 to 4 ops queued on the thread's stream, reads and writes into disjoint quarters of one
  // buffer; a read may cover a range an earlier op of the same group writes (stream order). Then
  // one cuStreamSynchronize and the checks, in queue order.
  void stream_io() {
    if (!stream_ || !params_) return sync_read();
    Buf& b = pick_buf();
    const unsigned n = 1 + static_cast<unsigned>(rng_.below(4));
    const size_t quarter = b.size / 4;
    struct Op {
      Range r;
      size_t boff;
      bool write;
      size_t data_at;
    };
    std::vector<Op> ops;
    size_t data_at = 0;
    for (unsigned i = 0; i < n; ++i) {
      Op o{pick(quarter - 4096), 0, rng_.one_in(2), 0};
      if (!o.write && !ops.empty() && ops.front().write && rng_.one_in(2)) o.r = ops.front().r;  // ordering
      o.boff = i * quarter + pick_boff(o.r.size, quarter);
      if (o.write) {
        o.data_at = data_at;
        rng_.fill(want_.data() + data_at, o.r.size);
        if (!upload(b, o.boff, want_.data() + data_at, o.r.size)) return fail("cuMemcpyHtoD failed");
        data_at += o.r.size;
      }
      ops.push_back(o);
    }
    CUstream s = reinterpret_cast<CUstream>(stream_);
    for (unsigned i = 0; i < n; ++i) {
      StreamParams& p = params_[i];
      p = StreamParams{ops[i].r.size, static_cast<off_t>(ops[i].r.off), static_cast<off_t>(ops[i].boff), -12345};
      CUfileError_t st = ops[i].write
                             ? cuFileWriteAsync(g->fh[1], b.ptr, &p.size, &p.file_offset, &p.buf_offset, &p.bytes, s)
                             : cuFileReadAsync(g->fh[0], b.ptr, &p.size, &p.file_offset, &p.buf_offset, &p.bytes, s);
      if (st.err != CU_FILE_SUCCESS) {
        cu::driver()->StreamSynchronize(stream_);
        return fail(std::string(ops[i].write ? "cuFileWriteAsync" : "cuFileReadAsync") + " failed: " +
                    std::to_string(st.err) + " (" + kind_name(b.kind) + ")");
      }
    }
    if (cu::CUresult cr = cu::driver()->StreamSynchronize(stream_); cr != cu::CUDA_SUCCESS)
      return fail("cuStreamSynchronize failed: " + std::to_string(cr));
    g->c.stream_syncs.fetch_add(1, std::memory_order_relaxed);
    for (unsigned i = 0; i < n; ++i) {
      const Op& o = ops[i];
      const char* op = o.write ? "stream write" : "stream read";
      if (params_[i].bytes != static_cast<ssize_t>(o.r.size))
        return fail(what(op, o.write ? 1 : 0, b, o.r.off, o.r.size, o.boff) + ": *bytes_p " +
                    std::to_string(params_[i].bytes));
      if (o.write) {
        std::memcpy(g->shadow.data() + o.r.off, want_.data() + o.data_at, o.r.size);
        g->c.write_bytes.fetch_add(o.r.size, std::memory_order_relaxed);
      } else {
        std::vector<uint8_t> got(o.r.size);
        if (!download(b, o.boff, got.data(), o.r.size)) return fail("cuMemcpyDtoH failed");
        std::string m = mismatch(got.data(), g->shadow.data() + o.r.off, o.r.size);
          if (!m.empty()) m += file_now(g->path, o.r.off, o.r.size, g->shadow.data() + o.r.off, g->direct_ok);
        if (!m.empty()) return fail(what(op, 0, b, o.r.off, o.r.size, o.boff) + ": " + m);
        g->c.read_bytes.fetch_add(o.r.size, std::memory_order_relaxed);
      }
      g->c.stream_ops.fetch_add(1, std::memory_order_relaxed);
    }
  }

  // Registers or deregisters one buffer; one time in five frees it and allocates a new one.
  void churn_registration() {
    Buf& b = pick_buf();
    if (rng_.one_in(5)) {
      if (b.registered && cuFileBufDeregister(b.ptr).err != CU_FILE_SUCCESS) return fail("cuFileBufDeregister failed");
      if (b.registered) g->c.deregisters.fetch_add(1, std::memory_order_relaxed);
      b.registered = false;
      Kind k = b.kind;
      free_buf(&b);
      if (!alloc_buf(&b, k, buf_size_)) return fail(std::string("allocating ") + kind_name(k) + " memory failed");
      g->c.reallocs.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (b.registered) {
      CUfileError_t st = cuFileBufDeregister(b.ptr);
      if (st.err != CU_FILE_SUCCESS) return fail("cuFileBufDeregister failed: " + std::to_string(st.err));
      b.registered = false;
      g->c.deregisters.fetch_add(1, std::memory_order_relaxed);
    } else {
      CUfileError_t st = cuFileBufRegister(b.ptr, b.size, 0);
      if (st.err != CU_FILE_SUCCESS)
        return fail(std::string("cuFileBufRegister of ") + kind_name(b.kind) + " failed: " + std::to_string(st.err));
      b.registered = true;
      g->c.registers.fetch_add(1, std::memory_order_relaxed);
    }
  }

  std::string small_path(int k) const {
    return g->opt.dir + "/gpufile-soak-" + std::to_string(getpid()) + "-t" + std::to_string(id_) + "-" +
           std::to_string(k) + ".bin";
  }

  // A small file of this thread's own: created, opened (O_DIRECT or buffered), registered, written
  // whole, read in pieces (one of them across end of file: a short count), deregistered, closed.
  void churn_file() {
    const std::string p = small_path(static_cast<int>(rng_.below(kSmallFiles)));
    const bool direct = g->direct_ok && rng_.one_in(2);
    int fd = ::open(p.c_str(), O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC | (direct ? O_DIRECT : 0), 0644);
    if (fd < 0) return fail("open " + p + ": " + std::strerror(errno));
    CUfileHandle_t fh = nullptr;
    CUfileError_t st = register_fd(fd, &fh);
    if (st.err != CU_FILE_SUCCESS) {
      ::close(fd);
      return fail("cuFileHandleRegister of a small file failed: " + std::to_string(st.err));
    }
    Buf& b = pick_buf();
    const size_t size = 1 + rng_.below(std::min<size_t>(256 * KiB, b.size / 2 - 8192));
    std::vector<uint8_t> content(size);
    rng_.fill(content.data(), size);
    const size_t boff = rng_.below(4096);
    std::string err;
    if (!upload(b, boff, content.data(), size)) err = "cuMemcpyHtoD failed";
    ssize_t n = err.empty() ? cuFileWrite(fh, b.ptr, size, 0, static_cast<off_t>(boff)) : 0;
    if (err.empty() && n != static_cast<ssize_t>(size))
      err = "small file write of " + std::to_string(size) + " returned " + std::to_string(n);
    g->c.file_ops.fetch_add(1, std::memory_order_relaxed);
    const int reads = 1 + static_cast<int>(rng_.below(3));
    for (int i = 0; i < reads && err.empty(); ++i) {
      const uint64_t off = rng_.below(size);
      size_t len = 1 + rng_.below(size - off);
      size_t expect = len;
      if (i == 0) {  // across end of file
        len = size - off + 1 + rng_.below(4096);
        expect = size - off;
      }
      const size_t rb = rng_.below(b.size - len - 8192);
      n = cuFileRead(fh, b.ptr, len, static_cast<off_t>(off), static_cast<off_t>(rb));
      if (n != static_cast<ssize_t>(expect)) {
        err = "small file read off=" + std::to_string(off) + " len=" + std::to_string(len) + " of a " +
              std::to_string(size) + "-byte file (" + (direct ? "O_DIRECT" : "buffered") + ", " + kind_name(b.kind) +
              ") returned " + std::to_string(n) + ", expected " + std::to_string(expect);
        break;
      }
      std::vector<uint8_t> got(expect);
      if (!download(b, rb, got.data(), expect)) err = "cuMemcpyDtoH failed";
      else if (std::string m = mismatch(got.data(), content.data() + off, expect); !m.empty())
        err = "small file read off=" + std::to_string(off) + " len=" + std::to_string(len) + " (" +
              (direct ? "O_DIRECT" : "buffered") + ", " + kind_name(b.kind) + "): " + m;
      g->c.file_ops.fetch_add(1, std::memory_order_relaxed);
    }
    cuFileHandleDeregister(fh);
    ::close(fd);
    if (rng_.one_in(3)) ::unlink(p.c_str());
    if (!err.empty()) return fail(err);
    g->c.files_churned.fetch_add(1, std::memory_order_relaxed);
  }

  int id_;
  Rng rng_;
  size_t buf_size_ = 0;
  Buf bufs_[3];
  std::vector<uint8_t> scratch_, want_;
  cu::CUstream stream_ = nullptr;
  unsigned stream_flags_ = 0;
  bool stream_registered_ = false;
  StreamParams* params_ = nullptr;
  uint64_t seen_epoch_ = 0;
  bool failed_ = false;
};

// ---- setup and the verdict --------------------------------------------------------------------------

bool direct_io_works(const std::string& dir) {
  std::string p = dir + "/.gpufile-soak-odirect-" + std::to_string(getpid());
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

bool write_whole(int fd, const uint8_t* data, uint64_t n) {
  for (uint64_t done = 0; done < n;) {
    ssize_t r = ::pwrite(fd, data + done, std::min<uint64_t>(n - done, 64 * MiB), static_cast<off_t>(done));
    if (r <= 0) return false;
    done += static_cast<uint64_t>(r);
  }
  return true;
}

// Stripes of 1 B to 20 KiB dealt to the threads in turn over the mixed zone.
void deal_stripes(Rng& rng) {
  g->stripes.assign(g->opt.threads, {});
  uint64_t at = 0;
  for (int k = 0; at < g->zone_size; ++k) {
    static const uint64_t lens[] = {1, 17, 512, 4096, 4095, 5000, 12288, 20000};
    uint64_t len = std::min(lens[rng.below(std::size(lens))] + rng.below(64), g->zone_size - at);
    g->stripes[k % g->opt.threads].push_back({at, len});
    at += len;
  }
}

// Counts of the process before the first driver open, with the CUDA driver already warm (a
// context, a stream that ran a host function): the final state must come back to these.
struct Baseline {
  long fds = 0, threads = 0;
  std::string names;
};

void noop_host_fn(void*) {}
void settle_threads();

Baseline warm_cuda_and_count() {
  if (g->have_driver) {
    const cu::Driver* d = cu::driver();
    cu::CUdevice dev = 0;
    d->DeviceGet(&dev, 0);
    d->DevicePrimaryCtxRetain(&g->ctx, dev);
    d->CtxSetCurrent(g->ctx);
    cu::CUstream s = nullptr;
    if (d->StreamCreate(&s, 0) == cu::CUDA_SUCCESS) {
      d->LaunchHostFunc(s, noop_host_fn, nullptr);
      d->StreamSynchronize(s);
      d->StreamDestroy(s);
    }
    cu::CUdeviceptr p = 0;
    if (d->MemAlloc(&p, 1 * MiB) == cu::CUDA_SUCCESS) d->MemFree(p);
    void* h = nullptr;
    if (d->MemHostAlloc(&h, 1 * MiB, 0) == cu::CUDA_SUCCESS) d->MemFreeHost(h);
    // Synchronous copies (the legacy stream; the test double starts its thread at the first).
    if (d->MemAlloc(&p, 4096) == cu::CUDA_SUCCESS) {
      char b[4096] = {};
      d->MemcpyHtoD(p, b, sizeof b);
      d->MemcpyDtoH(b, p, sizeof b);
      d->MemFree(p);
    }
    settle_threads();  // the warm-up stream's thread ends a moment after its destruction
  }
  Sample s;
  read_status(&s);
  return Baseline{count_fds(), s.threads - count_io_uring_threads(), thread_names()};
}

// Waits (up to 3 s) until the thread count, io_uring's workers aside, holds still for 250 ms:
// threads of a destroyed CUDA stream (the test double's, and the real driver's internal ones)
// end a moment after the call that destroyed it returned.
void settle_threads() {
  auto count = [] {
    Sample s;
    read_status(&s);
    return s.threads - count_io_uring_threads();
  };
  const auto limit = Clock::now() + std::chrono::seconds(3);
  long last = count();
  int still = 0;
  while (still < 5 && Clock::now() < limit) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    long n = count();
    still = n == last ? still + 1 : 0;
    last = n;
  }
}

struct Range3 {
  double min = 0, max = 0, first = 0, last = 0;
};
template <typename F>
Range3 range_of(const std::vector<Sample>& v, F f) {
  Range3 r;
  if (v.empty()) return r;
  r.min = r.max = r.first = f(v.front());
  r.last = f(v.back());
  for (const Sample& s : v) r.min = std::min(r.min, f(s)), r.max = std::max(r.max, f(s));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  Soak soak;
  g = &soak;
  if (!parse(argc, argv, &soak.opt)) return 2;
  Options& o = soak.opt;
  char cmd[512];
  std::snprintf(cmd, sizeof cmd, "%s --seconds %g --threads %d --seed %" PRIu64 " --dir %s --reopen-every %g --max-io %zu --region-mib %zu",
                argv[0], o.seconds, o.threads, o.seed, o.dir.c_str(), o.reopen_every, o.max_io, o.region / MiB);
  auto say = [&](const char* fmt, auto... args) {
    if (!o.quiet) {
      std::printf(fmt, args...);
      std::fflush(stdout);
    }
  };

  soak.have_driver = cu::driver() != nullptr;
  fake_registered_fn = reinterpret_cast<LiveBytesFn>(driver_library_symbol("fakecuda_live_registered_bytes"));
  fake_pinned_fn = reinterpret_cast<LiveBytesFn>(driver_library_symbol("fakecuda_live_pinned_bytes"));
  fake_device_fn = reinterpret_cast<LiveBytesFn>(driver_library_symbol("fakecuda_live_device_bytes"));
  // Before the baseline: its descriptor is then counted at the start and at the end alike.
  if (!o.csv.empty()) {
    soak.csv = std::fopen(o.csv.c_str(), "we");
    if (soak.csv == nullptr) {
      std::fprintf(stderr, "gpufile_soak: cannot write %s\n", o.csv.c_str());
      return 2;
    }
    std::fprintf(soak.csv,
                 "t_s,phase,rss_kib,fds,threads,io_uring_threads,vm_pin_kib,vm_lck_kib,pinned_staging_bytes,fake_registered_bytes,"
                 "ops,bytes\n");
  }

  const Baseline base = warm_cuda_and_count();
  soak.direct_ok = direct_io_works(o.dir);
  say("gpufile_soak: %g s, %d threads, seed %" PRIu64 ", dir %s (O_DIRECT %s), CUDA driver: %s%s\n", o.seconds,
      o.threads, o.seed, o.dir.c_str(), soak.direct_ok ? "yes" : "no",
      soak.have_driver ? "yes" : cu::why_no_driver().c_str(), fake_registered_fn ? " (the test double)" : "");
  say("  before the first driver open: %ld descriptors, %ld threads\n", base.fds, base.threads);

  // The shared file.
  Rng rng(o.seed);
  soak.zone_size = 4 * MiB;
  soak.file_size = soak.zone_size + static_cast<uint64_t>(o.threads) * o.region;
  soak.shadow.resize(soak.file_size);
  rng.fill(soak.shadow.data(), soak.file_size);
  deal_stripes(rng);
  soak.path = o.dir + "/gpufile-soak-" + std::to_string(getpid()) + ".bin";
  {
    int fd = ::open(soak.path.c_str(), O_CREAT | O_TRUNC | O_WRONLY | O_CLOEXEC, 0644);
    if (fd < 0 || !write_whole(fd, soak.shadow.data(), soak.file_size)) {
      std::fprintf(stderr, "gpufile_soak: cannot write %s: %s\n", soak.path.c_str(), std::strerror(errno));
      return 2;
    }
    ::close(fd);
  }
  soak.fds[0] = ::open(soak.path.c_str(), O_RDWR | O_CLOEXEC);
  if (o.fadvise_random && soak.fds[0] >= 0) posix_fadvise(soak.fds[0], 0, 0, POSIX_FADV_RANDOM);
  soak.fds[1] = ::open(soak.path.c_str(), O_RDWR | O_CLOEXEC | (soak.direct_ok ? O_DIRECT : 0));
  if (soak.fds[0] < 0 || soak.fds[1] < 0) {
    std::fprintf(stderr, "gpufile_soak: cannot open %s\n", soak.path.c_str());
    return 2;
  }
  const long base_fds_with_file = base.fds + 2;

  soak.t0 = Clock::now();
  auto open_driver = [&]() -> bool {
    CUfileError_t st = cuFileDriverOpen();
    if (st.err != CU_FILE_SUCCESS) {
      soak.error("cuFileDriverOpen failed: %d", st.err);
      return false;
    }
    for (int h = 0; h < 2; ++h) {
      st = register_fd(soak.fds[h], &soak.fh[h]);
      if (st.err != CU_FILE_SUCCESS) {
        soak.error("cuFileHandleRegister of the shared file failed: %d", st.err);
        return false;
      }
    }
    ++soak.epoch;
    return true;
  };
  // Handles go with the driver's close (cuFile drops them); a program keeps its fds and
  // registers them again after the next open.
  auto close_driver = [&]() -> bool {
    soak.fh[0] = soak.fh[1] = nullptr;
    CUfileError_t st = cuFileDriverClose();
    if (st.err != CU_FILE_SUCCESS) {
      soak.error("cuFileDriverClose failed: %d", st.err);
      return false;
    }
    if (long n = cuFileUseCount(); n != 0) {
      soak.error("cuFileUseCount is %ld after the close (expected 0)", n);
      return false;
    }
    return true;
  };
  bind_context();
  if (!open_driver()) return 1;
  soak.sample("start");

  // The monitor.
  std::atomic<bool> monitor_stop{false};
  std::thread monitor([&] {
    auto next = Clock::now() + std::chrono::seconds(1);
    uint64_t last_ops = 0;
    auto last_change = Clock::now();
    while (!monitor_stop.load()) {
      std::this_thread::sleep_until(next);
      next += std::chrono::seconds(1);
      if (monitor_stop.load()) break;
      Sample s = soak.sample(soak.phase.load());
      if (!o.quiet && static_cast<long>(s.t) % 10 == 0)
        std::printf("  %6.0f s  rss %ld MiB  fds %ld  threads %ld  pinned staging %.1f MiB  ops %" PRIu64
                    "  %.2f GiB moved  errors %" PRIu64 "\n",
                    s.t, s.rss_kib / 1024, s.fds, s.threads, s.pinned_staging / double(MiB), s.ops,
                    s.bytes / double(1ull << 30), soak.c.errors.load()), std::fflush(stdout);
      // Never hang: no operation finished for 120 s while running is a hang.
      uint64_t ops = soak.last_progress_ops.load();
      if (ops != last_ops || std::strcmp(soak.phase.load(), "run") != 0) last_ops = ops, last_change = Clock::now();
      if (Clock::now() - last_change > std::chrono::seconds(120)) {
        std::fprintf(stderr, "gpufile_soak: no operation finished for 120 s: a hang. seed %" PRIu64 "\n  reproduce: %s\n",
                     o.seed, cmd);
        std::fflush(stderr);
        _exit(3);
      }
    }
  });

  // The workers.
  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < o.threads; ++t) workers.push_back(std::make_unique<Worker>(t, o.seed));
  std::vector<std::thread> threads;
  for (int t = 0; t < o.threads; ++t) threads.emplace_back([&, t] { workers[t]->run(); });

  const auto deadline = soak.t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.seconds));
  auto next_reopen = o.reopen_every > 0
                         ? soak.t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.reopen_every))
                         : Clock::time_point::max();
  std::vector<Sample> quiet_open, quiet_closed;
  bool driver_ok = true;
  while (driver_ok) {
    const auto until = std::min(deadline, next_reopen);
    std::this_thread::sleep_until(until);
    if (Clock::now() >= deadline) break;
    // Pause every worker between two operations: no IO in flight.
    {
      std::unique_lock lock(soak.pause_mu);
      soak.pause_requested = true;
      if (!soak.pause_cv.wait_for(lock, std::chrono::seconds(120), [&] { return soak.arrived == o.threads; })) {
        std::fprintf(stderr, "gpufile_soak: workers did not reach the pause in 120 s: a hang. seed %" PRIu64 "\n  reproduce: %s\n",
                     o.seed, cmd);
        std::fflush(stderr);
        _exit(3);
      }
    }
    soak.phase = "pause";
    settle_threads();
    quiet_open.push_back(soak.sample("quiet-open"));
    driver_ok = close_driver();
    if (driver_ok) {
      settle_threads();
      quiet_closed.push_back(soak.sample("quiet-closed"));
      if (quiet_closed.back().pinned_staging != 0)
        soak.error("%" PRIu64 " bytes of pinned staging still held with the driver closed",
                   quiet_closed.back().pinned_staging);
      if (quiet_closed.back().fake_registered > 0)
        soak.error("%lld bytes still cuMemHostRegister'ed with the driver closed", quiet_closed.back().fake_registered);
      driver_ok = open_driver();
      soak.c.reopens.fetch_add(1);
    }
    {
      std::lock_guard lock(soak.pause_mu);
      soak.pause_requested = false;
      soak.arrived = 0;
      ++soak.generation;
      soak.phase = "run";
    }
    soak.pause_cv.notify_all();
    next_reopen += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(o.reopen_every));
  }
  soak.stop = true;
  {  // release workers should a pause have been left half done (driver failure)
    std::lock_guard lock(soak.pause_mu);
    soak.pause_requested = false;
    ++soak.generation;
  }
  soak.pause_cv.notify_all();
  for (auto& th : threads) th.join();
  const double run_s = soak.now();
  soak.phase = "end";
  soak.sample("end-open");

  // The whole file against the shadow.
  bool file_ok = true;
  {
    std::vector<uint8_t> got(soak.file_size);
    uint64_t done = 0;
    while (done < soak.file_size) {
      ssize_t r = ::pread(soak.fds[0], got.data() + done, soak.file_size - done, static_cast<off_t>(done));
      if (r <= 0) break;
      done += static_cast<uint64_t>(r);
    }
    bool any_failed = false;
    for (auto& w : workers) any_failed |= w->failed();
    if (done != soak.file_size) {
      soak.error("the shared file is %" PRIu64 " bytes, expected %" PRIu64, done, soak.file_size);
      file_ok = false;
    } else if (std::string m = mismatch(got.data(), soak.shadow.data(), soak.file_size); !m.empty()) {
      if (!any_failed) soak.error("the shared file at the end: %s", m.c_str());
      file_ok = false;
    }
  }

  // The final close: handles, fds, driver. Then everything must be back where it started.
  for (int h = 0; h < 2; ++h)
    if (soak.fh[h]) cuFileHandleDeregister(soak.fh[h]);
  soak.fh[0] = soak.fh[1] = nullptr;
  if (driver_ok) close_driver();
  ::close(soak.fds[0]);
  ::close(soak.fds[1]);
  ::unlink(soak.path.c_str());
  monitor_stop = true;
  monitor.join();
  Sample fin;
  const auto settle = Clock::now() + std::chrono::seconds(5);
  do {  // the driver's threads end as it closes; give stragglers a moment all the same
    fin = soak.sample("final-closed");
    if (fin.fds == base.fds && fin.threads == base.threads) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  } while (Clock::now() < settle);
  if (soak.csv) std::fclose(soak.csv);
  if (soak.have_driver) cu::driver()->DevicePrimaryCtxRelease(0);

  // ---- the verdict ----
  std::vector<std::string> failures;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) failures.push_back(what);
    return ok;
  };
  check(soak.c.errors.load() == 0, std::to_string(soak.c.errors.load()) + " errors (wrong bytes or failed calls)");
  check(file_ok, "the shared file differs from the shadow at the end");
  std::vector<Sample> all;
  {
    std::lock_guard lock(soak.sample_mu);
    all = soak.samples;
  }
  std::vector<Sample> run;
  for (const Sample& s : all)
    if (s.phase == "run") run.push_back(s);
  std::string rss_note;
  if (run.size() >= 10) {
    long warm_max = 0;
    for (const Sample& s : run)
      if (s.t <= 0.2 * o.seconds) warm_max = std::max(warm_max, s.rss_kib);
    long tail_max = 0;
    for (const Sample& s : run)
      if (s.t >= 0.9 * run_s) tail_max = std::max(tail_max, s.rss_kib);
    const long tol = std::max(static_cast<long>(o.rss_tolerance_mib * 1024), warm_max / 10);
    char m[200];
    std::snprintf(m, sizeof m, "RSS: warm-up max %ld MiB, last 10%% max %ld MiB, limit %ld MiB", warm_max / 1024,
                  tail_max / 1024, (warm_max + tol) / 1024);
    rss_note = m;
    if (SOAK_SANITIZED) rss_note += " (not judged under a sanitizer: its quarantine and shadow grow)";
    else check(warm_max > 0 && tail_max <= warm_max + tol, "RSS grew: " + rss_note);
  } else {
    rss_note = "RSS: too few samples to judge";
  }
  if (quiet_open.size() >= 2) {
    const Sample &a = quiet_open.front(), &b = quiet_open.back();
    check(a.fds == b.fds, "descriptors at the pauses (driver open): first " + std::to_string(a.fds) + ", last " +
                              std::to_string(b.fds));
    check(a.threads - a.fake_stream_threads == b.threads - b.fake_stream_threads,
          "threads at the pauses (driver open): first " + std::to_string(a.threads) +
                                      " (" + a.names + "), last " + std::to_string(b.threads) + " (" + b.names + ")");
  }
  if (quiet_closed.size() >= 2) {
    const Sample &a = quiet_closed.front(), &b = quiet_closed.back();
    check(a.fds == b.fds, "descriptors at the pauses (driver closed): first " + std::to_string(a.fds) + ", last " +
                              std::to_string(b.fds));
    check(a.threads == b.threads, "threads at the pauses (driver closed): first " + std::to_string(a.threads) +
                                      " (" + a.names + "), last " + std::to_string(b.threads) + " (" + b.names + ")");
  }
  for (const Sample& s : quiet_closed)
    check(s.fds == base_fds_with_file, "descriptors with the driver closed at " + std::to_string(s.t) + " s: " +
                                           std::to_string(s.fds) + ", expected " + std::to_string(base_fds_with_file) +
                                           " (the start's and the shared file's two)");
  check(fin.fds == base.fds, "descriptors after the final close: " + std::to_string(fin.fds) + ", at the start " +
                                 std::to_string(base.fds));
  check(fin.threads == base.threads, "threads after the final close: " + std::to_string(fin.threads) + " (" +
                                         fin.names + "), at the start " + std::to_string(base.threads) + " (" +
                                         base.names + ")");
  check(fin.pinned_staging == 0, "pinned staging after the final close: " + std::to_string(fin.pinned_staging) + " bytes");
  if (fake_registered_fn)
    check(fake_registered_fn() == 0, "cuMemHostRegister'ed bytes after the final close: " +
                                         std::to_string(fake_registered_fn()));
  if (fake_pinned_fn)
    check(fake_pinned_fn() == 0, "cuMemHostAlloc bytes after the final close: " + std::to_string(fake_pinned_fn()));
  if (fake_device_fn)
    check(fake_device_fn() == 0, "device bytes after the final close: " + std::to_string(fake_device_fn()));

  // ---- the summary ----
  const Counters& c = soak.c;
  const double gib = (c.read_bytes + c.write_bytes) / double(1ull << 30);
  std::printf("gpufile_soak: %.1f s, %d threads, seed %" PRIu64 "\n", run_s, o.threads, o.seed);
  std::printf("  reads %" PRIu64 " (%.2f GiB with batch and stream), writes %" PRIu64 " (%.2f GiB), %.2f GiB/s overall\n",
              c.reads.load(), c.read_bytes / double(1ull << 30), c.writes.load(), c.write_bytes / double(1ull << 30),
              gib / std::max(run_s, 1e-9));
  std::printf("  batches %" PRIu64 " (%" PRIu64 " entries; %" PRIu64 " cancelled, %" PRIu64
              " entries cancelled), stream ops %" PRIu64 " in %" PRIu64 " synchronisations\n",
              c.batches.load(), c.batch_entries.load(), c.batch_cancels.load(), c.batch_canceled_entries.load(),
              c.stream_ops.load(), c.stream_syncs.load());
  std::printf("  buffer registrations %" PRIu64 ", deregistrations %" PRIu64 ", reallocations %" PRIu64
              ", small files %" PRIu64 " (%" PRIu64 " IOs), driver reopens %" PRIu64 ", errors %" PRIu64 "\n",
              c.registers.load(), c.deregisters.load(), c.reallocs.load(), c.files_churned.load(), c.file_ops.load(),
              c.reopens.load(), c.errors.load());
  auto row = [&](const char* name, Range3 r, const char* unit) {
    std::printf("  %-22s first %10.1f  last %10.1f  min %10.1f  max %10.1f %s\n", name, r.first, r.last, r.min, r.max,
                unit);
  };
  row("RSS", range_of(all, [](const Sample& s) { return s.rss_kib / 1024.0; }), "MiB");
  row("descriptors", range_of(all, [](const Sample& s) { return double(s.fds); }), "");
  row("threads", range_of(all, [](const Sample& s) { return double(s.threads); }), "(io_uring's not counted)");
  row("io_uring workers", range_of(all, [](const Sample& s) { return double(s.iou_threads); }), "");
  row("VmPin", range_of(all, [](const Sample& s) { return s.vm_pin_kib / 1024.0; }), "MiB");
  row("VmLck", range_of(all, [](const Sample& s) { return s.vm_lck_kib / 1024.0; }), "MiB");
  row("pinned staging", range_of(all, [](const Sample& s) { return s.pinned_staging / double(MiB); }), "MiB");
  if (fake_registered_fn)
    row("double: registered", range_of(all, [](const Sample& s) { return s.fake_registered / double(MiB); }), "MiB");
  std::printf("  %s\n", rss_note.c_str());
  std::printf("  pauses: %zu; at the first/last (driver open) fds %ld/%ld threads %ld/%ld; (driver closed) fds %ld/%ld "
              "threads %ld/%ld\n",
              quiet_open.size(), quiet_open.empty() ? 0 : quiet_open.front().fds,
              quiet_open.empty() ? 0 : quiet_open.back().fds, quiet_open.empty() ? 0 : quiet_open.front().threads,
              quiet_open.empty() ? 0 : quiet_open.back().threads, quiet_closed.empty() ? 0 : quiet_closed.front().fds,
              quiet_closed.empty() ? 0 : quiet_closed.back().fds,
              quiet_closed.empty() ? 0 : quiet_closed.front().threads,
              quiet_closed.empty() ? 0 : quiet_closed.back().threads);
  std::printf("  final (driver closed): fds %ld (start %ld), threads %ld (start %ld), pinned staging %" PRIu64 " B\n",
              fin.fds, base.fds, fin.threads, base.threads, fin.pinned_staging);
  {
    std::lock_guard lock(soak.err_mu);
    for (const std::string& e : soak.error_log) std::printf("  error: %s\n", e.c_str());
  }
  if (!failures.empty()) {
    for (const std::string& f : failures) std::printf("  FAILED: %s\n", f.c_str());
    std::printf("gpufile_soak: FAILED (seed %" PRIu64 ")\n  reproduce: %s\n", o.seed, cmd);
    return 1;
  }
  std::printf("gpufile_soak: ok\n");
  return 0;
}
