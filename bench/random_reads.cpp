// random_reads: synchronous random reads of one IO size into GPU memory, from N application
// threads, through gpufile's cuFile API or through KvikIO's C++ API, with one timing loop.
//
// Why: the 4 KiB target ("2x KvikIO's IOPS at equal threads, p99 no worse") was so far measured
// against KvikIO driven from Python, where the interpreter, not the library, sets the pace.
// Here both backends run under the same C++ loop; only the one call per IO differs.
//
//   random_reads --backend cufile|kvikio --file PATH --io-size BYTES --threads N --seconds S
//                [--seed K] [--align BYTES] [--json] [--buffered] [--cufile-lib PATH]
//                [--kvikio-threads N] [--kvikio-call read|pread]
//
// Built outside CMake (a GPU-machine tool): bench/random-reads-run.sh compiles and runs it.
//   cufile only:  g++ -O2 -std=c++20 -Iinclude bench/random_reads.cpp -o random_reads -ldl -pthread
//   with KvikIO:  add -DGPUFILE_WITH_KVIKIO, KvikIO's and CUDA's include dirs and -lkvikio
//                 (bench/random-reads-run.sh has the exact line)
// The CUDA driver and libcufile are both loaded with dlopen, so the cufile-only build needs no
// CUDA toolkit and runs against the test double of libcuda.so.1 (tests/support/fakecuda).

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <latch>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cufile.h"  // gpufile's declaration of the cuFile ABI (include/), types only: we dlopen

#ifdef GPUFILE_WITH_KVIKIO
#include <kvikio/compat_mode.hpp>
#include <kvikio/defaults.hpp>
#include <kvikio/file_handle.hpp>
#endif

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const char* fmt, ...) {
  std::va_list ap;
  va_start(ap, fmt);
  std::fputs("random_reads: ", stderr);
  std::vfprintf(stderr, fmt, ap);
  std::fputc('\n', stderr);
  va_end(ap);
  std::exit(1);
}

// ---- options ------------------------------------------------------------------------------

struct Options {
  std::string backend, file, cufile_lib = "libcufile.so.0", kvikio_call = "read";
  uint64_t io_size = 0, align = 0, seed = 0;
  unsigned threads = 1, kvikio_threads = 0;
  double seconds = 3;
  bool json = false, buffered = false;
};

void usage() {
  std::fputs(
      "usage: random_reads --backend cufile|kvikio --file PATH --io-size BYTES --threads N\n"
      "                    --seconds S [--seed K] [--align BYTES] [--json] [--buffered]\n"
      "                    [--cufile-lib PATH] [--kvikio-threads N] [--kvikio-call read|pread]\n"
      "  --align       offsets are multiples of this (default: the IO size)\n"
      "  --buffered    cufile: open without O_DIRECT (default: O_DIRECT, like gpufile bench -x 0)\n"
      "  --cufile-lib  what to dlopen for the cufile backend (default libcufile.so.0)\n"
      "  --kvikio-threads  KvikIO's thread pool size (default: --threads)\n"
      "  --kvikio-call     FileHandle::read (default) or FileHandle::pread(...).get()\n",
      stderr);
  std::exit(2);
}

// A count or a size: digits with an optional binary K, M or G (4K = 4096).
uint64_t parse_u64(const char* flag, const char* text) {
  char* end = nullptr;
  errno = 0;
  unsigned long long v = std::strtoull(text, &end, 10);
  static constexpr char kUnits[] = "KMG";
  if (errno || end == text) die("%s: not a number: %s", flag, text);
  int shift = 0;
  if (const char* unit = *end ? std::strchr(kUnits, *end) : nullptr) {
    shift = 10 * static_cast<int>(1 + (unit - kUnits));
    ++end;
  }
  if (*end) die("%s: not a number: %s", flag, text);
  return static_cast<uint64_t>(v) << shift;
}

// Takes the value of `flag` at argv[*i + 1]; dies when it is missing.
const char* value_of(int argc, char** argv, int* i) {
  if (*i + 1 >= argc) die("%s needs a value", argv[*i]);
  return argv[++*i];
}

uint64_t number_of(int argc, char** argv, int* i) {
  const char* flag = argv[*i];
  return parse_u64(flag, value_of(argc, argv, i));
}

void check(const Options& o) {
  if (o.backend != "cufile" && o.backend != "kvikio") usage();
  if (o.file.empty() || o.io_size == 0 || o.threads == 0 || !(o.seconds > 0)) usage();
  if (o.kvikio_call != "read" && o.kvikio_call != "pread") die("--kvikio-call: read or pread");
#ifndef GPUFILE_WITH_KVIKIO
  if (o.backend == "kvikio") die("built without KvikIO (compile with -DGPUFILE_WITH_KVIKIO)");
#endif
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") o.json = true;
    else if (a == "--buffered") o.buffered = true;
    else if (a == "--backend") o.backend = value_of(argc, argv, &i);
    else if (a == "--file") o.file = value_of(argc, argv, &i);
    else if (a == "--cufile-lib") o.cufile_lib = value_of(argc, argv, &i);
    else if (a == "--kvikio-call") o.kvikio_call = value_of(argc, argv, &i);
    else if (a == "--io-size") o.io_size = number_of(argc, argv, &i);
    else if (a == "--align") o.align = number_of(argc, argv, &i);
    else if (a == "--seed") o.seed = number_of(argc, argv, &i);
    else if (a == "--threads") o.threads = number_of(argc, argv, &i);
    else if (a == "--kvikio-threads") o.kvikio_threads = number_of(argc, argv, &i);
    else if (a == "--seconds") o.seconds = std::atof(value_of(argc, argv, &i));
    else usage();
  }
  if (o.align == 0) o.align = o.io_size;
  if (o.kvikio_threads == 0) o.kvikio_threads = o.threads;
  check(o);
  return o;
}

// ---- the CUDA driver, loaded at run time --------------------------------------------------
// dlopen rather than -lcuda: the same binary then runs on the GPU machine and against the test
// double, and needs no toolkit to build. Types are our own (int for CUresult, void* for a
// context) so that this part compiles the same with or without <cuda.h> in the translation unit.

struct Driver {
  using DevPtr = unsigned long long;
  int (*init)(unsigned);
  int (*device_get)(int*, int);
  int (*primary_retain)(void**, int);
  int (*primary_release)(int);
  int (*ctx_set_current)(void*);
  int (*mem_alloc)(DevPtr*, size_t);
  int (*mem_free)(DevPtr);
  int (*error_name)(int, const char**);
  void* ctx = nullptr;
};

void* symbol(void* lib, const char* libname, const char* name) {
  void* f = dlsym(lib, name);
  if (!f) die("%s has no %s", libname, name);
  return f;
}

template <typename F>
void bind(F* fn, void* lib, const char* libname, const char* name) {
  *fn = reinterpret_cast<F>(symbol(lib, libname, name));
}

void cu_check(const Driver& d, int rc, const char* what) {
  if (rc == 0) return;
  const char* name = nullptr;
  if (d.error_name) d.error_name(rc, &name);
  die("%s failed: CUDA error %d (%s)", what, rc, name ? name : "?");
}

Driver load_driver() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) die("cannot load the CUDA driver libcuda.so.1: %s", dlerror());
  Driver d{};
  const char* n = "libcuda.so.1";
  bind(&d.init, lib, n, "cuInit");
  bind(&d.device_get, lib, n, "cuDeviceGet");
  bind(&d.primary_retain, lib, n, "cuDevicePrimaryCtxRetain");
  bind(&d.primary_release, lib, n, "cuDevicePrimaryCtxRelease_v2");
  bind(&d.ctx_set_current, lib, n, "cuCtxSetCurrent");
  bind(&d.mem_alloc, lib, n, "cuMemAlloc_v2");
  bind(&d.mem_free, lib, n, "cuMemFree_v2");
  bind(&d.error_name, lib, n, "cuGetErrorName");
  return d;
}

// Device 0's primary context: the one KvikIO and gpufile both use when a thread has none.
void open_device(Driver* d) {
  int dev = 0;
  cu_check(*d, d->init(0), "cuInit");
  cu_check(*d, d->device_get(&dev, 0), "cuDeviceGet");
  cu_check(*d, d->primary_retain(&d->ctx, dev), "cuDevicePrimaryCtxRetain");
  cu_check(*d, d->ctx_set_current(d->ctx), "cuCtxSetCurrent");
}

// ---- backends: the one call per IO that differs -------------------------------------------

struct Backend {
  virtual ~Backend() = default;
  // Called once per buffer, from the main thread, before any thread starts.
  virtual void add_buffer(void* buf, size_t size) = 0;
  // One synchronous read of `size` bytes at `offset` into `buf`; returns the bytes read.
  virtual size_t read(void* buf, size_t size, uint64_t offset) = 0;
  virtual std::string describe() const = 0;
};

struct CuFileApi {
  decltype(&cuFileDriverOpen) driver_open;
  decltype(&cuFileDriverClose_v2) driver_close;
  decltype(&cuFileHandleRegister) handle_register;
  decltype(&cuFileHandleDeregister) handle_deregister;
  decltype(&cuFileBufRegister) buf_register;
  decltype(&cuFileBufDeregister) buf_deregister;
  decltype(&cuFileRead) read;
};

void cufile_check(CUfileError_t e, const char* what) {
  if (e.err == CU_FILE_SUCCESS) return;
  die("%s failed: cuFile error %d (%s), CUDA error %d", what, static_cast<int>(e.err),
      CUFILE_ERRSTR(e.err), static_cast<int>(e.cu_err));
}

// Like `gpufile bench -x 0`: O_DIRECT unless asked otherwise or the file system refuses it
// (tmpfs). gpufile still serves a resident file from the page cache: it checks with cachestat.
int open_for_cufile(const std::string& path, bool buffered) {
  int flags = O_RDONLY | O_CLOEXEC | (buffered ? 0 : O_DIRECT);
  int fd = ::open(path.c_str(), flags);
  if (fd < 0 && errno == EINVAL && !buffered) {
    std::fprintf(stderr, "random_reads: %s: no O_DIRECT here; using the page cache\n",
                 path.c_str());
    fd = ::open(path.c_str(), flags & ~O_DIRECT);
  }
  if (fd < 0) die("%s: %s", path.c_str(), std::strerror(errno));
  return fd;
}

class CuFileBackend final : public Backend {
 public:
  CuFileBackend(const std::string& lib, const std::string& path, bool buffered) {
    load(lib);
    cufile_check(api_.driver_open(), "cuFileDriverOpen");
    fd_ = open_for_cufile(path, buffered);
    CUfileDescr_t d{};
    d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
    d.handle.fd = fd_;
    cufile_check(api_.handle_register(&fh_, &d), "cuFileHandleRegister");
  }
  ~CuFileBackend() override {
    for (void* b : bufs_) cufile_check(api_.buf_deregister(b), "cuFileBufDeregister");
    api_.handle_deregister(fh_);
    ::close(fd_);
    cufile_check(api_.driver_close(), "cuFileDriverClose");
  }
  // gdsio registers its buffers by default; so do we.
  void add_buffer(void* buf, size_t size) override {
    cufile_check(api_.buf_register(buf, size, 0), "cuFileBufRegister");
    bufs_.push_back(buf);
  }
  size_t read(void* buf, size_t size, uint64_t offset) override {
    ssize_t n = api_.read(fh_, buf, size, static_cast<off_t>(offset), 0);
    if (n < 0) die("cuFileRead at %llu: %zd (%s)", static_cast<unsigned long long>(offset), n,
                   n == -1 ? std::strerror(errno) : CUFILE_ERRSTR(n));
    return static_cast<size_t>(n);
  }
  std::string describe() const override { return "cuFile from " + path_; }

 private:
  void load(const std::string& lib) {
    void* h = dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) die("cannot load %s: %s", lib.c_str(), dlerror());
    const char* n = lib.c_str();
    bind(&api_.driver_open, h, n, "cuFileDriverOpen");
    bind(&api_.driver_close, h, n, "cuFileDriverClose_v2");
    bind(&api_.handle_register, h, n, "cuFileHandleRegister");
    bind(&api_.handle_deregister, h, n, "cuFileHandleDeregister");
    bind(&api_.buf_register, h, n, "cuFileBufRegister");
    bind(&api_.buf_deregister, h, n, "cuFileBufDeregister");
    bind(&api_.read, h, n, "cuFileRead");
    // Say which file was loaded: NVIDIA's libcufile.so.0 has the same name.
    Dl_info info{};
    path_ = dladdr(reinterpret_cast<void*>(api_.read), &info) && info.dli_fname ? info.dli_fname
                                                                                 : lib;
  }

  CuFileApi api_{};
  std::string path_;
  int fd_ = -1;
  CUfileHandle_t fh_ = nullptr;
  std::vector<void*> bufs_;
};

#ifdef GPUFILE_WITH_KVIKIO
// KvikIO in its POSIX compatibility mode (the script also sets KVIKIO_COMPAT_MODE=ON): no GDS
// kernel parts on the GPU machine, and NVIDIA's libcufile cannot register a file there.
//
// What runs where, read from KvikIO 26.10's headers (file_handle.hpp, defaults.hpp,
// detail/posix_io.hpp), its file_handle.cpp / defaults.cpp source, and the wheel's library:
// - FileHandle::read() never touches the thread pool. In compat mode it calls
//   detail::posix_device_read on the calling thread: pread(2) on the descriptor opened without
//   O_DIRECT into a pinned bounce buffer, an async copy to the device on a stream cached per
//   thread and context, then a synchronisation of that stream.
// - FileHandle::pread() (what Python's CuFile.read calls) takes a shortcut for
//   size < gds_threshold: the same posix_device_read on the calling thread (after looking up the
//   buffer's context and pushing it), returned as a ready future. Larger reads are split into
//   task_size (4 MiB) pieces that the thread pool runs while the caller waits on the future.
// - gds_threshold: defaults.hpp's comment says 1 MiB, but defaults.cpp and the 26.10 library
//   itself use 16 KiB (defaults::gds_threshold() returns 16384 with KVIKIO_GDS_THRESHOLD unset;
//   describe() prints it). So with pread, 4 KiB reads run on the caller and 64 KiB reads hop to
//   a pool thread; with read, both run on the caller.
// The pool is sized like the application (--kvikio-threads defaults to --threads) so that a
// 64 KiB pread never queues behind a smaller pool.
class KvikioBackend final : public Backend {
 public:
  KvikioBackend(const std::string& path, unsigned pool_threads, bool use_pread)
      : use_pread_(use_pread) {
    try {
      kvikio::defaults::set_compat_mode(kvikio::CompatMode::ON);
      kvikio::defaults::set_thread_pool_nthreads(pool_threads);
      file_ = std::make_unique<kvikio::FileHandle>(path, "r", kvikio::FileHandle::m644,
                                                   kvikio::CompatMode::ON);
    } catch (const std::exception& e) {
      die("KvikIO cannot open %s: %s", path.c_str(), e.what());
    }
    if (!file_->get_compat_mode_manager().is_compat_mode_preferred())
      die("KvikIO is not in compatibility mode");
  }
  // Compat mode has nothing to register (memory_register is a no-op there).
  void add_buffer(void*, size_t) override {}
  size_t read(void* buf, size_t size, uint64_t offset) override {
    try {
      if (use_pread_) return file_->pread(buf, size, offset).get();
      return file_->read(buf, size, offset, 0);
    } catch (const std::exception& e) {
      die("KvikIO read at %llu: %s", static_cast<unsigned long long>(offset), e.what());
    }
  }
  std::string describe() const override {
    return std::string("KvikIO ") + (use_pread_ ? "pread" : "read") + ", compat mode, pool " +
           std::to_string(kvikio::defaults::thread_pool_nthreads()) + ", gds_threshold " +
           std::to_string(kvikio::defaults::gds_threshold());
  }

 private:
  std::unique_ptr<kvikio::FileHandle> file_;
  bool use_pread_;
};
#endif

std::unique_ptr<Backend> make_backend(const Options& o) {
#ifdef GPUFILE_WITH_KVIKIO
  if (o.backend == "kvikio")
    return std::make_unique<KvikioBackend>(o.file, o.kvikio_threads, o.kvikio_call == "pread");
#endif
  return std::make_unique<CuFileBackend>(o.cufile_lib, o.file, o.buffered);
}

// ---- the timing loop, shared by both backends ---------------------------------------------

struct Shared {
  const Options* opt;
  const Driver* drv;
  Backend* backend;
  uint64_t slots;                     // number of aligned offsets that fit a whole IO
  std::latch ready;                   // every thread is set up and has done its first read
  std::atomic<bool> go{false};        // the start gate
  Clock::time_point deadline;         // written before `go` opens
  explicit Shared(unsigned n) : ready(n) {}
};

struct PerThread {
  void* buf = nullptr;
  std::vector<uint32_t> lat_ns;       // uint32 holds 4 s; an IO that long is clamped
  Clock::time_point finished;
};

uint64_t pick_offset(std::mt19937_64& rng, const Shared& s) {
  std::uniform_int_distribution<uint64_t> slot(0, s.slots - 1);
  return slot(rng) * s.opt->align;
}

void read_one(const Shared& s, PerThread* t, uint64_t off) {
  size_t n = s.backend->read(t->buf, s.opt->io_size, off);
  if (n != s.opt->io_size)
    die("short read at %llu: %zu of %llu bytes", static_cast<unsigned long long>(off), n,
        static_cast<unsigned long long>(s.opt->io_size));
}

void worker(Shared* s, PerThread* t, unsigned index) {
  cu_check(*s->drv, s->drv->ctx_set_current(s->drv->ctx), "cuCtxSetCurrent (worker)");
  std::mt19937_64 rng(s->opt->seed * 1000003 + index);
  t->lat_ns.reserve(1 << 18);
  read_one(*s, t, pick_offset(rng, *s));  // untimed: first-call set-up (bounce buffers, rings)
  s->ready.count_down();
  s->go.wait(false);
  for (;;) {
    uint64_t off = pick_offset(rng, *s);
    auto t0 = Clock::now();
    read_one(*s, t, off);
    auto t1 = Clock::now();
    auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count();
    t->lat_ns.push_back(static_cast<uint32_t>(std::min<int64_t>(ns, UINT32_MAX)));
    if (t1 >= s->deadline) {
      t->finished = t1;
      return;
    }
  }
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto sec = [](timeval v) { return static_cast<double>(v.tv_sec) + v.tv_usec / 1e6; };
  return sec(u.ru_utime) + sec(u.ru_stime);
}

struct Result {
  uint64_t ops = 0;
  double secs = 0, cpu = 0, p50_us = 0, p99_us = 0, max_us = 0;
};

// Nearest-rank percentile (the same rule as bench/side_by_side.py).
double percentile_us(std::vector<uint32_t>& v, double p) {
  size_t rank = static_cast<size_t>(p * v.size() + 0.999999);
  size_t k = std::min(v.size() - 1, rank ? rank - 1 : 0);
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k] / 1000.0;
}

Result summarize(std::vector<PerThread>& threads, Clock::time_point start, double cpu) {
  std::vector<uint32_t> all;
  Clock::time_point end = start;
  for (auto& t : threads) {
    all.insert(all.end(), t.lat_ns.begin(), t.lat_ns.end());
    end = std::max(end, t.finished);
  }
  Result r;
  r.ops = all.size();
  r.secs = std::chrono::duration<double>(end - start).count();
  r.cpu = cpu;
  r.max_us = *std::max_element(all.begin(), all.end()) / 1000.0;
  r.p99_us = percentile_us(all, 0.99);
  r.p50_us = percentile_us(all, 0.50);
  return r;
}

Result run(const Options& o, const Driver& drv, Backend* backend, std::vector<PerThread>& per,
           uint64_t slots) {
  Shared s(o.threads);
  s.opt = &o;
  s.drv = &drv;
  s.backend = backend;
  s.slots = slots;
  std::vector<std::thread> pool;
  for (unsigned i = 0; i < o.threads; ++i) pool.emplace_back(worker, &s, &per[i], i);
  s.ready.wait();
  double cpu0 = cpu_seconds();
  auto start = Clock::now();
  s.deadline = start + std::chrono::duration_cast<Clock::duration>(
                           std::chrono::duration<double>(o.seconds));
  s.go.store(true);
  s.go.notify_all();
  for (auto& t : pool) t.join();
  return summarize(per, start, cpu_seconds() - cpu0);
}

// ---- set-up and report --------------------------------------------------------------------

uint64_t count_slots(const Options& o) {
  struct stat st{};
  if (::stat(o.file.c_str(), &st) != 0) die("%s: %s", o.file.c_str(), std::strerror(errno));
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < o.io_size) die("%s: %llu bytes, smaller than one IO", o.file.c_str(),
                            static_cast<unsigned long long>(size));
  return (size - o.io_size) / o.align + 1;
}

std::vector<PerThread> alloc_buffers(const Options& o, const Driver& d, Backend* b) {
  std::vector<PerThread> per(o.threads);
  for (auto& t : per) {
    Driver::DevPtr p = 0;
    cu_check(d, d.mem_alloc(&p, o.io_size), "cuMemAlloc");
    t.buf = reinterpret_cast<void*>(static_cast<uintptr_t>(p));
    b->add_buffer(t.buf, o.io_size);
  }
  return per;
}

void free_buffers(const Driver& d, std::vector<PerThread>& per) {
  for (auto& t : per)
    cu_check(d, d.mem_free(static_cast<Driver::DevPtr>(reinterpret_cast<uintptr_t>(t.buf))),
             "cuMemFree");
}

// Enough escaping for a path or a description inside a JSON string.
std::string json_text(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  }
  return out;
}

void print_json(const Options& o, const Result& r, const std::string& what) {
  double gib = static_cast<double>(r.ops) * o.io_size / (1ull << 30);
  std::printf("{\"backend\": \"%s\", \"via\": \"%s\", \"io_size\": %llu, \"threads\": %u, ",
              o.backend.c_str(), json_text(what).c_str(),
              static_cast<unsigned long long>(o.io_size), o.threads);
  if (o.backend == "kvikio")
    std::printf("\"kvikio_threads\": %u, \"kvikio_call\": \"%s\", ", o.kvikio_threads,
                o.kvikio_call.c_str());
  std::printf("\"seed\": %llu, \"seconds\": %.3f, \"ops\": %llu, \"iops\": %.0f, "
              "\"gib_s\": %.4f, \"p50_us\": %.2f, \"p99_us\": %.2f, \"max_us\": %.2f, "
              "\"cpu_s\": %.3f, \"cpu_s_per_gib\": %.3f}\n",
              static_cast<unsigned long long>(o.seed), r.secs,
              static_cast<unsigned long long>(r.ops), r.ops / r.secs, gib / r.secs, r.p50_us,
              r.p99_us, r.max_us, r.cpu, gib > 0 ? r.cpu / gib : 0.0);
}

void print_line(const Options& o, const Result& r, const std::string& what) {
  double gib = static_cast<double>(r.ops) * o.io_size / (1ull << 30);
  std::printf(
      "%s: %llu B x %u threads, %.2f s: %llu ops, %.0f IOPS, %.3f GiB/s, p50 %.1f us, "
      "p99 %.1f us, max %.1f us, %.2f CPU s/GiB [%s]\n",
      o.backend.c_str(), static_cast<unsigned long long>(o.io_size), o.threads, r.secs,
      static_cast<unsigned long long>(r.ops), r.ops / r.secs, gib / r.secs, r.p50_us, r.p99_us,
      r.max_us, gib > 0 ? r.cpu / gib : 0.0, what.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  uint64_t slots = count_slots(o);
  Driver drv = load_driver();
  open_device(&drv);
  auto backend = make_backend(o);
  auto per = alloc_buffers(o, drv, backend.get());
  Result r = run(o, drv, backend.get(), per, slots);
  std::string what = backend->describe();
  backend.reset();  // deregisters the buffers before they are freed
  free_buffers(drv, per);
  drv.primary_release(0);
  (o.json ? print_json : print_line)(o, r, what);
  return 0;
}
