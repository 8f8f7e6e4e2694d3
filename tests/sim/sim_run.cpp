// The simulation of one seed. Structure:
//
//   Plan      drawn from the seed: threads, phases, files, the settings of each driver session
//             (engine, O_DIRECT policy, workers, slab and chunk sizes, ring depth) and the fault
//             rules. A plan is "benign" (faults the library must hide: short IO, EINTR, EAGAIN,
//             O_DIRECT EINVAL, io_uring refusal, delays) or "hard" (also EIO, ENOSPC, EAGAIN
//             storms past the retry bound, failing fstat and reopen). In a benign plan every
//             call must succeed in full; in a hard one a call may fail, with an errno the
//             faults explain, but must never report bytes it did not move.
//   Model     a shadow of every file's bytes. Threads take range locks (sim_support.hpp) for
//             the bytes an operation reads (shared) or writes (exclusive), so each call's exact
//             result is known although the threads run at once on the same files.
//   Actor     one thread: its own handles of every file (buffered and O_DIRECT fds), its own
//             buffers of different memory kinds with guard zones and a mirror, its own CUDA
//             stream. It draws operations from its own random stream.
//   Phases    the actors run a number of operations each, then meet: the files are compared
//             with the model, every buffer with its mirror; the driver may be closed and opened
//             again with other settings, and the process may fork.
//
// Checked on every call: the result is the expected byte count or a failure the plan allows;
// bytes reported were really moved (read: the buffer holds the model's bytes; write: the model
// takes them); bytes of the buffer outside the call's range (guards included) never change,
// neither during the call nor after it returned; a read leaves bytes past what it reports
// untouched; a failed write leaves each byte of its range old or new and nothing outside it
// changed; no call hangs (HangMonitor). At the end of a seed: no fd, pinned, device or stream
// leaks once the driver is closed.
#include "sim_run.hpp"

#include <cufile.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <memory>
#include <thread>
#include <vector>

#include "cuda/driver.hpp"
#include "exec/runtime.hpp"
#include "sim_buffer.hpp"
#include "sim_plan.hpp"
#include "sim_support.hpp"
#include "sys/faulty_os.hpp"

namespace sim {
namespace {

namespace cu = gpufile::cuda;
using gpufile::sys::FaultOp;

constexpr size_t kBufferSize = 256 * KiB;  // each actor buffer's usable bytes
constexpr int kBuffersPerActor = 2;
constexpr int kMainSlot = 0;  // monitor slot of the main thread; actor i uses slot i + 1

// ---- the model -------------------------------------------------------------------------------

struct ShadowFile {
  std::string path;
  int fd = -1;      // the test's own fd, for truncation and checks through the real kernel
  uint64_t size = 0;  // constant: a truncation puts the size back before it lets go of the file
  std::vector<uint8_t> bytes;
};

bool pread_all(int fd, uint8_t* p, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t r = ::pread(fd, p, n, static_cast<off_t>(off));
    if (r <= 0) return false;
    p += r, n -= static_cast<size_t>(r), off += static_cast<uint64_t>(r);
  }
  return true;
}

bool pwrite_all(int fd, const uint8_t* p, size_t n, uint64_t off) {
  while (n > 0) {
    ssize_t r = ::pwrite(fd, p, n, static_cast<off_t>(off));
    if (r <= 0) return false;
    p += r, n -= static_cast<size_t>(r), off += static_cast<uint64_t>(r);
  }
  return true;
}

int open_fds() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/fd")) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

// Makes device 0's primary context current on the calling thread (buffers of device memory are
// reached through the driver, from every actor thread).
void bind_context() {
  const cu::Driver* d = cu::driver();
  if (!d) return;
  static cu::CUcontext primary = [d] {
    cu::CUcontext ctx = nullptr;
    cu::CUdevice dev = 0;
    d->DeviceGet(&dev, 0);
    d->DevicePrimaryCtxRetain(&ctx, dev);  // kept for the whole process
    return ctx;
  }();
  d->CtxSetCurrent(primary);
}

template <typename T>
T* fake_fn(const char* name) {
  const char* path = std::getenv("GPUFILE_CUDA_LIBRARY");
  void* lib = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  return lib ? reinterpret_cast<T*>(dlsym(lib, name)) : nullptr;
}

// Drops every failure armed in the driver double.
void reset_driver_faults() {
  using Reset = void();
  if (auto* reset = fake_fn<Reset>("fakecuda_reset_faults")) reset();
}

class Run;

// ---- one thread ------------------------------------------------------------------------------

struct FileHandle {
  int fd = -1;
  CUfileHandle_t fh = nullptr;
};

// One transfer of an operation (a sync call, a batch entry, a stream op).
struct Transfer {
  bool write = false;
  int file = 0;
  int kind = 0;  // 0 buffered fd, 1 O_DIRECT fd
  int buf = 0;
  uint64_t off = 0;
  size_t len = 0;
  size_t boff = 0;
  std::vector<uint8_t> data;  // write: the bytes written; read: the pattern the range held before
};

enum class Outcome { done, failed, canceled };

class Actor {
 public:
  Actor(Run& run, int id);
  ~Actor();
  bool setup();  // buffers and stream; false (run failed) when memory cannot be had
  void run_phase(int ops);
  // Between phases (no other thread runs): registrations off before a driver close, on after.
  void unregister_all();
  void register_all();
  std::string check_buffers() const;
  FileHandle& handle(int file,
      int kind) { return handles_[static_cast<size_t>(file)][static_cast<size_t>(kind)]; }
  uint64_t calls = 0, failed_calls = 0;

 private:
  void one_op();
  void op_read_or_write(bool write);
  void op_batch();
  void op_stream(bool write);
  void op_handle_churn();
  void op_buffer_churn();
  void op_truncate_under_read();
  void op_fork();
  void op_arm_cuda_fault();

  bool draw_transfer(Transfer& t, bool write, size_t max_len);
  bool open_fd(int file, int kind);
  bool register_handle(int file, int kind);
  void deregister_handle(int file, int kind, bool close_fd);
  std::vector<RangeLocks::Range> ranges_of(const std::vector<Transfer>& ts) const;
  void prepare(Transfer& t);
  void settle(const Transfer& t, Outcome o, ssize_t n, int err, const std::string& what);
  void settle_read(const Transfer& t, Outcome o, ssize_t n, int err, const std::string& what);
  void settle_write(const Transfer& t, Outcome o, ssize_t n, int err, const std::string& what);
  std::string describe(const Transfer& t, const char* op) const;
  void check_window(int buf, size_t boff, size_t len, const std::string& what);
  bool allowed(bool write, int err) const;

  Run& run_;
  const int id_;
  Rng rng_;
  Rng aux_;  // draws added later: from their own stream, so older seeds keep their operations
  std::vector<std::unique_ptr<SimBuffer>> bufs_;
  std::vector<bool> buf_registered_;
  std::vector<std::array<FileHandle, 2>> handles_;
  cu::CUstream stream_ = nullptr;
  bool stream_registered_ = false;
  // The last call's window, checked again at the next operation: nothing may land in a buffer
  // after the call that owned it returned.
  int last_buf_ = -1;
  size_t last_boff_ = 0, last_len_ = 0;
};

// ---- the run ---------------------------------------------------------------------------------

class Run {
 public:
  Run(const Plan& plan, const Options& opts);
  ~Run();
  SeedResult execute();

  // Records the first violation; every actor stops at its next operation.
  void violation(int actor, const std::string& msg);
  bool failed() const { return failed_.load(std::memory_order_relaxed); }
  void report(const std::string& headline) const;

  const Plan& plan;
  const Options& opts;
  gpufile::sys::FaultyOs faults;
  std::vector<ShadowFile> files;
  RangeLocks locks;
  OpLog log;
  std::unique_ptr<HangMonitor> monitor;
  std::vector<std::unique_ptr<Actor>> actors;
  bool direct_ok = true;  // whether O_DIRECT opens work where the files live

 private:
  bool create_files();
  void remove_files();
  bool open_session(const SessionConfig& c);
  bool close_session();
  void run_phase(int phase);
  void check_files();
  void fork_between_phases();
  // What the process holds with the driver closed: fds, and the driver double's live counts.
  struct Holdings {
    int fds = 0;
    size_t bytes[4] = {};
    int streams = 0;
  };
  static Holdings holdings();
  void check_leaks(const Holdings& before);

  std::string dir_;
  bool retrying_open_ = false;
  std::atomic<bool> failed_{false};
  mutable std::mutex fail_mu_;
  std::string failure_;
};

std::atomic<Run*> g_current_run{nullptr};

// ---- Actor -----------------------------------------------------------------------------------

Actor::Actor(Run& run, int id)
    : run_(run),
      id_(id),
      rng_(run.plan.seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(id) + 1),
      aux_(run.plan.seed * 0xd1342543de82ef95ull + static_cast<uint64_t>(id) + 7) {
  handles_.resize(run.files.size());
}

Actor::~Actor() {
  for (size_t f = 0; f < handles_.size(); ++f)
    for (int k = 0; k < 2; ++k) deregister_handle(static_cast<int>(f), k, true);
  bind_context();
  for (size_t b = 0; b < bufs_.size(); ++b)
    if (buf_registered_[b]) cuFileBufDeregister(bufs_[b]->base());
  bufs_.clear();
  // The library keys stream registrations by handle, and the driver may hand the same handle to
  // the next stream created.
  if (stream_registered_) cuFileStreamDeregister(stream_);
  if (stream_) cu::driver()->StreamDestroy(stream_);
}

bool Actor::setup() {
  bind_context();
  static const MemKind kinds[] = {MemKind::device, MemKind::device, MemKind::managed,
                                  MemKind::pinned, MemKind::pageable};
  for (int b = 0; b < kBuffersPerActor; ++b) {
    std::string why;
    const size_t misalign = rng_.chance(0.5) ? 0 : rng_.below(4096);
    bufs_.push_back(std::make_unique<SimBuffer>(rng_.pick(kinds), kBufferSize, misalign,
        rng_.next(), &why));
    buf_registered_.push_back(false);
    if (!why.empty()) {
      run_.violation(id_, why);
      return false;
    }
  }
  if (cu::driver()->StreamCreate(&stream_, 0) != cu::CUDA_SUCCESS) {
    run_.violation(id_, "cuStreamCreate failed");
    return false;
  }
  return true;
}

bool Actor::allowed(bool write, int err) const {
  if (!run_.plan.hard) return false;
  if (run_.plan.cuda_faults && err == CU_FILE_CUDA_DRIVER_ERROR) return true;
  return err == EIO || err == EAGAIN || (write && err == ENOSPC);
}

// Makes one of the next calls of an async copy function of the driver (whoever's they are) fail:
// the copies between the staging memory and the GPU, of the workers, the callers and stream ops.
void Actor::op_arm_cuda_fault() {
  using FailCall = int(const char*, int, int);
  static const char* names[] = {"cuMemcpyHtoDAsync", "cuMemcpyDtoHAsync", "cuMemcpyBatchAsync"};
  static const int results[] = {1 /* INVALID_VALUE */, 2 /* OUT_OF_MEMORY */, 999 /* UNKNOWN */};
  const char* name = rng_.pick(names);
  const int nth = static_cast<int>(rng_.between(1, 8)), result = rng_.pick(results);
  run_.log.add("t" + std::to_string(id_) + " arm: call " + std::to_string(nth) + " of " + name
      + " from now fails with " + std::to_string(result));
  auto* fail = fake_fn<FailCall>("fakecuda_fail_call");
  if (fail) fail(name, nth, result);
  // Pinned memory running out: the registration of a staging buffer made on demand (a caller's
  // slab, a stream op's staging) fails.
  if (!aux_.chance(0.3)) return;
  const int pin_nth = static_cast<int>(aux_.between(1, 4));
  run_.log.add("t" + std::to_string(id_) + " arm: call " + std::to_string(pin_nth)
      + " of cuMemHostRegister from now fails with 2");
  if (fail) fail("cuMemHostRegister", pin_nth, 2 /* OUT_OF_MEMORY */);
}

bool Actor::open_fd(int file, int kind) {
  FileHandle& h = handle(file, kind);
  if (h.fd >= 0) return true;
  if (kind == 1 && !run_.direct_ok) return false;
  h.fd = ::open(run_.files[static_cast<size_t>(file)].path.c_str(),
                O_RDWR | O_CLOEXEC | (kind == 1 ? O_DIRECT : 0));
  if (h.fd < 0) run_.violation(id_, "open of a simulated file failed: "
      + std::string(strerror(errno)));
  return h.fd >= 0;
}

bool Actor::register_handle(int file, int kind) {
  FileHandle& h = handle(file, kind);
  if (h.fh) return true;
  if (!open_fd(file, kind)) return false;
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = h.fd;
  CUfileError_t e = cuFileHandleRegister(&h.fh, &d);
  std::string what = "t" + std::to_string(id_) + " register f" + std::to_string(file) +
                     (kind ? " direct" : " buffered") + " fd " + std::to_string(h.fd);
  run_.log.add(what + " -> " + std::to_string(e.err));
  if (e.err == CU_FILE_SUCCESS) return true;
  h.fh = nullptr;
  // Registration reopens the file through the OS seam and checks it with fstat: in a hard plan
  // those may fail (EIO). The error must still be a clean one.
  if (!run_.plan.hard) run_.violation(id_, what + ": failed with " + std::to_string(e.err));
  return false;
}

void Actor::deregister_handle(int file, int kind, bool close_fd) {
  FileHandle& h = handle(file, kind);
  if (h.fh) {
    cuFileHandleDeregister(h.fh);
    h.fh = nullptr;
  }
  if (close_fd && h.fd >= 0) {
    ::close(h.fd);
    h.fd = -1;
  }
}

void Actor::unregister_all() {
  bind_context();
  for (size_t f = 0; f < handles_.size(); ++f)
    for (int k = 0; k < 2; ++k) deregister_handle(static_cast<int>(f), k, rng_.chance(0.5));
  for (size_t b = 0; b < bufs_.size(); ++b) {
    if (buf_registered_[b]) cuFileBufDeregister(bufs_[b]->base());
    buf_registered_[b] = false;
  }
  if (stream_registered_) cuFileStreamDeregister(stream_);
  stream_registered_ = false;
}

void Actor::register_all() {
  bind_context();
  for (size_t f = 0; f < handles_.size(); ++f)
    for (int k = 0; k < 2; ++k)
      if (rng_.chance(0.8)) register_handle(static_cast<int>(f), k);
}

std::string Actor::check_buffers() const {
  for (const auto& b : bufs_)
    if (std::string m = b->check_all(); !m.empty()) return m;
  return "";
}

void Actor::run_phase(int ops) {
  bind_context();
  for (int i = 0; i < ops && !run_.failed(); ++i) one_op();
}

void Actor::one_op() {
  if (last_buf_ >= 0) check_window(last_buf_, last_boff_, last_len_,
      "between calls (after the last call returned)");
  const uint64_t roll = rng_.below(100);
  if (roll < 34) return op_read_or_write(false);
  if (roll < 58) return op_read_or_write(true);
  if (roll < 70) return op_batch();
  if (roll < 80) return op_stream(rng_.chance(0.5));
  if (roll < 86) return op_handle_churn();
  if (roll < 92) return op_buffer_churn();
  if (roll < 97) return op_truncate_under_read();
  if (id_ == 0 && run_.plan.forks && run_.opts.fork_while_busy) return op_fork();
  if (run_.plan.cuda_faults) return op_arm_cuda_fault();
  return op_read_or_write(false);
}

// Sizes around the boundaries the library cares about: 0, tiny, pages, the small-IO threshold,
// chunks and slabs, up to the whole buffer.
size_t draw_len(Rng& r, size_t max) {
  size_t n = 0;
  switch (r.below(6)) {
    case 0: n = r.between(0, 17); break;
    case 1: n = r.between(1, 4096); break;
    case 2: n = 4096 * r.between(1, 16) + r.between(0, 2) * (r.below(64) - 32); break;
    case 3: n = r.between(1, 64 * KiB + 100); break;
    default: n = r.between(1, max); break;
  }
  return std::min(n, max);
}

bool Actor::draw_transfer(Transfer& t, bool write, size_t max_len) {
  t.write = write;
  t.file = static_cast<int>(rng_.below(run_.files.size()));
  t.kind = run_.direct_ok ? static_cast<int>(rng_.below(2)) : 0;
  if (!handle(t.file, t.kind).fh) t.kind ^= 1;
  if (!handle(t.file, t.kind).fh) {
    // No registered handle of this file: register one instead (an operation too).
    register_handle(t.file, static_cast<int>(rng_.below(run_.direct_ok ? 2 : 1)));
    return false;
  }
  t.buf = static_cast<int>(rng_.below(bufs_.size()));
  const uint64_t size = run_.files[static_cast<size_t>(t.file)].size;
  t.len = draw_len(rng_, max_len);
  if (write) t.len = std::min<uint64_t>(t.len, size);  // writes stay inside the file
  const uint64_t off_max = write ? size - t.len : size + 8192;
  switch (rng_.below(4)) {
    case 0: t.off = rng_.below(off_max / 4096 + 1) * 4096; break;           // aligned
    case 1: t.off = off_max - std::min<uint64_t>(off_max, rng_.below(5000)); break;  // near the end
    default: t.off = rng_.below(off_max + 1); break;
  }
  if (t.off > off_max) t.off = off_max;
  const size_t boff_max = max_len - t.len;
  t.boff = rng_.chance(0.4) ? std::min(boff_max, rng_.below(boff_max / 4096 + 1) * 4096)
                            : rng_.below(boff_max + 1);
  return true;
}

std::vector<RangeLocks::Range> Actor::ranges_of(const std::vector<Transfer>& ts) const {
  std::vector<RangeLocks::Range> out;
  for (const Transfer& t : ts) out.push_back({t.file, t.off, t.off + std::max<size_t>(t.len, 1),
      t.write});
  return out;
}

std::string Actor::describe(const Transfer& t, const char* op) const {
  char s[256];
  const SimBuffer& b = *bufs_[static_cast<size_t>(t.buf)];
  std::snprintf(s, sizeof s, "t%d %s %s f%d %s off=%" PRIu64 " len=%zu buf%d(%s%s) boff=%zu", id_,
      op,
                t.write ? "write" : "read", t.file, t.kind ? "direct" : "buffered", t.off, t.len,
                t.buf, mem_name(b.kind()), buf_registered_[static_cast<size_t>(t.buf)]
                    ? ",registered" : "",
                t.boff);
  return s;
}

// Reads get a fresh pattern in their range (to tell which bytes they wrote), writes fresh data.
void Actor::prepare(Transfer& t) {
  t.data.resize(t.len);
  rng_.fill(t.data.data(), t.len);
  bufs_[static_cast<size_t>(t.buf)]->put(t.boff, t.data.data(), t.len);
}

void Actor::check_window(int buf, size_t boff, size_t len, const std::string& what) {
  const SimBuffer& b = *bufs_[static_cast<size_t>(buf)];
  const int64_t from = static_cast<int64_t>(boff) - static_cast<int64_t>(SimBuffer::kGuard);
  if (std::string m = b.check(from, len + 2 * SimBuffer::kGuard); !m.empty())
    run_.violation(id_, what + ": " + m);
  last_buf_ = buf, last_boff_ = boff, last_len_ = len;
}

void Actor::settle(const Transfer& t, Outcome o, ssize_t n, int err, const std::string& what) {
  ++calls;
  if (o != Outcome::done) ++failed_calls;
  const std::string result = o == Outcome::done       ? std::to_string(n)
                             : o == Outcome::canceled ? "canceled"
                                                      : "failed " + errno_name(err);
  run_.log.add(what + " -> " + result);
  if (t.write) {
    settle_write(t, o, n, err, what);
  } else {
    settle_read(t, o, n, err, what);
  }
}

void Actor::settle_read(const Transfer& t, Outcome o, ssize_t n, int err, const std::string& what) {
  const ShadowFile& f = run_.files[static_cast<size_t>(t.file)];
  SimBuffer& b = *bufs_[static_cast<size_t>(t.buf)];
  const uint64_t expect = t.off >= f.size ? 0 : std::min<uint64_t>(t.len, f.size - t.off);
  std::vector<uint8_t> got = b.get(t.boff, t.len);
  if (o == Outcome::failed && !allowed(false, err))
    return run_.violation(id_, what + ": failed with " + errno_name(err)
        + "; the plan's faults allow no such failure (expected " + std::to_string(expect)
        + " bytes)");
  if (o == Outcome::done) {
    if (n != static_cast<ssize_t>(expect))
      return run_.violation(id_, what + ": returned " + std::to_string(n) + ", expected "
          + std::to_string(expect) + " (short counts only at end of file)");
    for (size_t i = 0; i < t.len; ++i) {
      const uint8_t want = i < expect ? f.bytes[t.off + i] : t.data[i];
      const char* why = i < expect ? " (the file's byte)" : " (untouched: past what was reported)";
      if (got[i] != want)
        return run_.violation(id_, what + ": buffer byte " + std::to_string(i) + " is "
            + std::to_string(got[i]) + ", expected " + std::to_string(want) + why);
    }
  }
  b.accept(t.boff, got);  // a failed or canceled read may leave anything inside its range
}

void Actor::settle_write(const Transfer& t, Outcome o, ssize_t n, int err,
    const std::string& what) {
  ShadowFile& f = run_.files[static_cast<size_t>(t.file)];
  if (o == Outcome::done) {
    if (n != static_cast<ssize_t>(t.len))
      return run_.violation(id_, what + ": returned " + std::to_string(n) + ", expected "
          + std::to_string(t.len) + " (a write is never short)");
    if (t.len) std::memcpy(f.bytes.data() + t.off, t.data.data(), t.len);
    return;
  }
  if (o == Outcome::failed && !allowed(true, err))
    return run_.violation(id_, what + ": failed with " + errno_name(err)
        + "; the plan's faults allow no such failure");
  // A failed write may have stored part of its bytes; each byte of its range must be old or
  // new (never garbage), and the model takes what the file holds.
  std::vector<uint8_t> disk(t.len);
  if (!pread_all(f.fd, disk.data(), t.len, t.off))
    return run_.violation(id_, what + ": the test cannot read the file back");
  for (size_t i = 0; i < t.len; ++i) {
    if (disk[i] != f.bytes[t.off + i] && disk[i] != t.data[i])
      return run_.violation(id_, what + ": after the failed write, file byte "
          + std::to_string(t.off + i) + " is " + std::to_string(disk[i])
          + ": neither its old value " + std::to_string(f.bytes[t.off + i]) + " nor the new "
          + std::to_string(t.data[i]));
  }
  if (t.len) std::memcpy(f.bytes.data() + t.off, disk.data(), t.len);
}

void Actor::op_read_or_write(bool write) {
  Transfer t;
  if (!draw_transfer(t, write, kBufferSize)) return;
  run_.locks.acquire(id_, ranges_of({t}));
  prepare(t);
  const std::string what = describe(t, "sync");
  Watched w(*run_.monitor, id_ + 1, what);
  SimBuffer& b = *bufs_[static_cast<size_t>(t.buf)];
  CUfileHandle_t fh = handle(t.file, t.kind).fh;
  errno = 0;
  const ssize_t n = write ? cuFileWrite(fh, b.base(), t.len, static_cast<off_t>(t.off),
      static_cast<off_t>(t.boff))
                          : cuFileRead(fh, b.base(), t.len, static_cast<off_t>(t.off),
                              static_cast<off_t>(t.boff));
  const int err = errno;
  if (n < -1) {
    run_.violation(id_, what + ": returned " + std::to_string(n)
        + "; failures return -1 with errno set");
  } else {
    settle(t, n >= 0 ? Outcome::done : Outcome::failed, n, err, what);
    check_window(t.buf, t.boff, t.len, what);
  }
  run_.locks.release(id_);
}

void Actor::op_batch() {
  const int want = static_cast<int>(rng_.between(1, 4));
  const size_t slot = kBufferSize / static_cast<size_t>(want);
  const int buf = static_cast<int>(rng_.below(bufs_.size()));
  std::vector<Transfer> ts;
  for (int i = 0; i < want; ++i) {
    Transfer t;
    if (!draw_transfer(t, rng_.chance(0.5), slot)) continue;
    if (t.len == 0) continue;  // an empty entry produces no event (cuFile's behaviour)
    t.buf = buf;
    t.boff += static_cast<size_t>(i) * slot;  // entries use disjoint parts of one buffer
    bool clash = false;
    for (const Transfer& o : ts)
      clash |= o.file == t.file && t.off < o.off + o.len && o.off < t.off + t.len;
    if (!clash) ts.push_back(std::move(t));
  }
  if (ts.empty()) return;
  run_.locks.acquire(id_, ranges_of(ts));
  for (Transfer& t : ts) prepare(t);
  const int cancel = static_cast<int>(rng_.below(4));  // 1: at once, 2: after a first poll
  std::string what = "t" + std::to_string(id_) + " batch of " + std::to_string(ts.size())
      + (cancel == 1 ? " (cancel at once)" : cancel == 2 ? " (cancel after a poll)" : "");
  for (const Transfer& t : ts) what += "\n      " + describe(t, "entry");
  Watched w(*run_.monitor, id_ + 1, what);
  std::vector<CUfileIOParams_t> io(ts.size());
  for (size_t i = 0; i < ts.size(); ++i) {
    const Transfer& t = ts[i];
    io[i].mode = CUFILE_BATCH;
    io[i].fh = handle(t.file, t.kind).fh;
    io[i].opcode = t.write ? CUFILE_WRITE : CUFILE_READ;
    io[i].cookie = reinterpret_cast<void*>(i + 1);
    io[i].u.batch.devPtr_base = bufs_[static_cast<size_t>(buf)]->base();
    io[i].u.batch.file_offset = static_cast<off_t>(t.off);
    io[i].u.batch.devPtr_offset = static_cast<off_t>(t.boff);
    io[i].u.batch.size = t.len;
  }
  CUfileBatchHandle_t batch = nullptr;
  CUfileError_t e = cuFileBatchIOSetUp(&batch, static_cast<unsigned>(io.size()));
  if (e.err != CU_FILE_SUCCESS) {
    run_.violation(id_, what + ": cuFileBatchIOSetUp failed with " + std::to_string(e.err));
    return run_.locks.release(id_);
  }
  e = cuFileBatchIOSubmit(batch, static_cast<unsigned>(io.size()), io.data(), 0);
  if (e.err != CU_FILE_SUCCESS) {
    // Submission validates every entry first (fstat of each file): only a failing fstat of a
    // hard plan explains a refusal, and then no entry may have started.
    run_.log.add(what + " -> submit refused " + std::to_string(e.err));
    if (!run_.plan.fstat_faults) run_.violation(id_, what + ": cuFileBatchIOSubmit failed with "
        + std::to_string(e.err));
    // The model stays as it was: the files are compared with it between phases.
    cuFileBatchIODestroy(batch);
    return run_.locks.release(id_);
  }
  if (cancel == 1) cuFileBatchIOCancel(batch);
  std::vector<CUfileIOEvents_t> events;
  std::vector<bool> seen(ts.size(), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  bool polled = false;
  while (events.size() < ts.size() && !run_.failed()) {
    if (std::chrono::steady_clock::now() > deadline) {
      run_.violation(id_, what + ": only " + std::to_string(events.size()) + " events within 30 s");
      break;
    }
    std::vector<CUfileIOEvents_t> ev(ts.size());
    unsigned nr = static_cast<unsigned>(ts.size() - events.size());
    timespec timeout{0, polled ? 200'000'000 : 0};
    e = cuFileBatchIOGetStatus(batch, polled ? 1 : 0, &nr, ev.data(), &timeout);
    if (e.err != CU_FILE_SUCCESS) {
      run_.violation(id_, what + ": cuFileBatchIOGetStatus failed with " + std::to_string(e.err));
      break;
    }
    if (!polled && cancel == 2) cuFileBatchIOCancel(batch);
    polled = true;
    events.insert(events.end(), ev.begin(), ev.begin() + nr);
  }
  cuFileBatchIODestroy(batch);
  for (const CUfileIOEvents_t& ev : events) {
    const size_t i = reinterpret_cast<uintptr_t>(ev.cookie) - 1;
    if (i >= ts.size() || seen[i]) {
      run_.violation(id_, what + ": an event with an unknown or repeated cookie");
      break;
    }
    seen[i] = true;
    const ssize_t ret = static_cast<ssize_t>(ev.ret);
    const std::string entry = describe(ts[i], "batch entry");
    if (ev.status == CUFILE_COMPLETE) {
      settle(ts[i], Outcome::done, ret, 0, entry);
    } else if (ev.status == CUFILE_FAILED) {
      settle(ts[i], Outcome::failed, ret, ret < 0 ? static_cast<int>(-ret) : 0, entry);
    } else if (ev.status == CUFILE_CANCELED && cancel) {
      settle(ts[i], Outcome::canceled, ret, 0, entry);
    } else {
      run_.violation(id_, entry + ": event status " + std::to_string(ev.status) + " ret "
          + std::to_string(ret));
    }
    if (run_.failed()) break;
  }
  // Every entry settled: now the whole buffer must be what the caller knows.
  if (!run_.failed()) check_window(buf, 0, kBufferSize, what);
  run_.locks.release(id_);
}

void Actor::op_stream(bool write) {
  Transfer t;
  if (!draw_transfer(t, write, kBufferSize)) return;
  if (!stream_registered_) {
    static const unsigned flags[] = {0, 1, 2, 4, 7};
    CUfileError_t e = cuFileStreamRegister(stream_, rng_.pick(flags));
    if (e.err != CU_FILE_SUCCESS) return run_.violation(id_, "cuFileStreamRegister failed with "
        + std::to_string(e.err));
    stream_registered_ = true;
  }
  run_.locks.acquire(id_, ranges_of({t}));
  prepare(t);
  const std::string what = describe(t, "stream");
  Watched w(*run_.monitor, id_ + 1, what);
  SimBuffer& b = *bufs_[static_cast<size_t>(t.buf)];
  size_t size = t.len;
  off_t foff = static_cast<off_t>(t.off), boff = static_cast<off_t>(t.boff);
  ssize_t bytes = -77777;
  CUfileHandle_t fh = handle(t.file, t.kind).fh;
  CUfileError_t e = write ? cuFileWriteAsync(fh, b.base(), &size, &foff, &boff, &bytes, stream_)
                          : cuFileReadAsync(fh, b.base(), &size, &foff, &boff, &bytes, stream_);
  if (e.err != CU_FILE_SUCCESS) {
    // Submission checks the fd (fstat) and queues the copies; nothing else of it can fail. A
    // refused op must do nothing at all, not even with copies queued before the refusal: once
    // the stream drained, its range still holds the pattern (the window check below).
    ++calls, ++failed_calls;
    run_.log.add(what + " -> submission failed " + std::to_string(e.err));
    const bool explained = (run_.plan.fstat_faults && e.err == CU_FILE_IO_ERROR) ||
                           (run_.plan.cuda_faults && e.err == CU_FILE_CUDA_DRIVER_ERROR);
    if (!explained) run_.violation(id_, what + ": submission failed with " + std::to_string(e.err));
    cu::driver()->StreamSynchronize(stream_);
    check_window(t.buf, t.boff, t.len, what + " (refused)");
  } else if (cu::CUresult r = cu::driver()->StreamSynchronize(stream_); r != cu::CUDA_SUCCESS) {
    run_.violation(id_, what + ": cuStreamSynchronize returned " + std::to_string(r));
  } else if (bytes == -77777) {
    run_.violation(id_, what + ": *bytes_p not set once the stream passed the op");
  } else {
    // -errno for OS errors, -CUfileOpError otherwise (docs/compatibility.md).
    settle(t, bytes >= 0 ? Outcome::done : Outcome::failed, bytes, bytes < 0
        ? static_cast<int>(-bytes) : 0, what);
    check_window(t.buf, t.boff, t.len, what);
  }
  run_.locks.release(id_);
}

void Actor::op_handle_churn() {
  const int file = static_cast<int>(rng_.below(run_.files.size()));
  const int kind = run_.direct_ok ? static_cast<int>(rng_.below(2)) : 0;
  if (handle(file, kind).fh) {
    // Closing the fd too lets another thread's next open reuse its number: the library must
    // notice when an fd no longer names the file it registered.
    const bool close_fd = rng_.chance(0.5);
    run_.log.add("t" + std::to_string(id_) + " deregister f" + std::to_string(file) + (kind
        ? " direct" : " buffered") + (close_fd ? ", close fd" : ""));
    Watched w(*run_.monitor, id_ + 1, "deregister");
    deregister_handle(file, kind, close_fd);
  } else {
    Watched w(*run_.monitor, id_ + 1, "register");
    register_handle(file, kind);
  }
}

void Actor::op_buffer_churn() {
  const size_t b = rng_.below(bufs_.size());
  Watched w(*run_.monitor, id_ + 1, "buffer (de)register");
  std::string what = "t" + std::to_string(id_) + (buf_registered_[b] ? " BufDeregister buf"
      : " BufRegister buf") + std::to_string(b) + "(" + mem_name(bufs_[b]->kind()) + ")";
  CUfileError_t e = buf_registered_[b] ? cuFileBufDeregister(bufs_[b]->base())
                                       : cuFileBufRegister(bufs_[b]->base(), bufs_[b]->size(), 0);
  run_.log.add(what + " -> " + std::to_string(e.err));
  if (e.err != CU_FILE_SUCCESS) return run_.violation(id_, what + ": failed with "
      + std::to_string(e.err));
  buf_registered_[b] = !buf_registered_[b];
}

// A read while the file shrinks under it: a helper thread cuts the file at a random point of the
// read's range after a random short wait. The read may see the old bytes, end early or fail,
// but every byte it reports below the cut must be the file's, bytes past the cut may only be
// the old ones or zeros (never stale staging bytes), and nothing outside its range changes.
// The file gets its size back (zeros past the cut) before the range is released.
void Actor::op_truncate_under_read() {
  Transfer t;
  if (!draw_transfer(t, false, kBufferSize)) return;
  ShadowFile& f = run_.files[static_cast<size_t>(t.file)];
  if (t.off >= f.size || t.len == 0) return;
  const uint64_t end = std::min<uint64_t>(t.off + t.len, f.size);
  const uint64_t cut = rng_.between(t.off, end);
  run_.locks.acquire(id_, {{t.file, t.off, UINT64_MAX, true}});
  prepare(t);
  const std::string what = describe(t, "truncate-under-read") + " cut=" + std::to_string(cut);
  Watched w(*run_.monitor, id_ + 1, what);
  SimBuffer& b = *bufs_[static_cast<size_t>(t.buf)];
  const unsigned wait_us = static_cast<unsigned>(rng_.below(400));
  std::thread cutter([&] {
    if (wait_us) usleep(wait_us);
    if (::ftruncate(f.fd, static_cast<off_t>(cut)) != 0) std::abort();
  });
  errno = 0;
  const ssize_t n = cuFileRead(handle(t.file, t.kind).fh, b.base(), t.len,
      static_cast<off_t>(t.off), static_cast<off_t>(t.boff));
  const int err = errno;
  cutter.join();
  ++calls;
  run_.log.add(what + " -> " + (n >= 0 ? std::to_string(n) : "failed " + errno_name(err)));
  const uint64_t before = std::min<uint64_t>(t.len, f.size - t.off), after = cut - t.off;
  std::vector<uint8_t> got = b.get(t.boff, t.len);
  if (n < 0) {
    ++failed_calls;
    // What the library makes of a file that ends earlier than its fstat said: EIO at worst.
    if (n != -1 || (err != EIO && !allowed(false, err))) run_.violation(id_, what
        + ": failed with " + errno_name(err));
  } else if (static_cast<uint64_t>(n) < after || static_cast<uint64_t>(n) > before) {
    run_.violation(id_, what + ": returned " + std::to_string(n) + ", expected "
        + std::to_string(after) + " to " + std::to_string(before));
  } else {
    for (size_t i = 0; i < t.len; ++i) {
      const uint8_t old = i < before ? f.bytes[t.off + i] : t.data[i];
      const bool ok = i < after ? got[i] == f.bytes[t.off + i] : got[i] == t.data[i]
          || got[i] == old || got[i] == 0;
      if (!ok) {
        run_.violation(id_, what + ": buffer byte " + std::to_string(i) + " is "
            + std::to_string(got[i]) + (i < after ? ", expected the file's "
            : ", past the cut: neither the old byte nor 0 nor untouched; old ")
            + std::to_string(old));
        break;
      }
    }
  }
  b.accept(t.boff, got);
  check_window(t.buf, t.boff, t.len, what);
  if (::ftruncate(f.fd, static_cast<off_t>(f.size)) != 0) std::abort();
  std::fill(f.bytes.begin() + static_cast<ptrdiff_t>(cut), f.bytes.end(), 0);
  run_.locks.release(id_);
}

// The child of a fork forgets the parent's session: the parent's handle must be refused, and a
// new session must read the file correctly (host memory; CUDA itself may refuse a forked child,
// then a clean failure is fine). The parent goes on as if nothing happened.
int fork_child(const ShadowFile& f, CUfileHandle_t inherited, uint64_t off,
    const std::vector<uint8_t>& want) {
  gpufile::sys::set_os(nullptr);  // the FaultyOs's lock may have been held by another thread
  alarm(20);
  const bool cuda_loaded = cu::driver() != nullptr;
  std::vector<uint8_t> got(want.size() + 1);
  if (inherited) {
    errno = 0;
    ssize_t n = cuFileRead(inherited, got.data(), 1, 0, 0);
    if (n != -1 || (!cuda_loaded && errno != CU_FILE_HANDLE_NOT_REGISTERED)) return 2;
  }
  int fd = ::open(f.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 3;
  CUfileDescr_t d{};
  d.type = CU_FILE_HANDLE_TYPE_OPAQUE_FD;
  d.handle.fd = fd;
  CUfileHandle_t h = nullptr;
  if (cuFileHandleRegister(&h, &d).err != CU_FILE_SUCCESS) return cuda_loaded ? 0 : 4;
  ssize_t n = cuFileRead(h, got.data(), want.size(), static_cast<off_t>(off), 0);
  if (n == -1 && cuda_loaded) return 0;
  if (n != static_cast<ssize_t>(want.size())) return 5;
  return std::memcmp(got.data(), want.data(), want.size()) == 0 ? 0 : 6;
}

bool fork_and_check(Run& run, int actor, const ShadowFile& f, CUfileHandle_t inherited,
    uint64_t off, size_t len) {
  std::vector<uint8_t> want(f.bytes.begin() + static_cast<ptrdiff_t>(off), f.bytes.begin()
      + static_cast<ptrdiff_t>(off + len));
  const pid_t pid = fork();
  if (pid == 0) _exit(fork_child(f, inherited, off, want));
  if (pid < 0) return true;  // no process to spare: nothing to check
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  run.violation(actor, "forked child of the " + std::to_string(len) + "-byte check at "
      + std::to_string(off) + " of " + f.path + " " +
                           (WIFEXITED(status) ? "exited with "
                               + std::to_string(WEXITSTATUS(status))
                               + " (2 old handle not refused, 3-6 new session failed)"
                                              : "died of signal "
                                                  + std::to_string(WTERMSIG(status))
                                                  + " (SIGALRM 14: it hung)"));
  return false;
}

void Actor::op_fork() {
  const int file = static_cast<int>(rng_.below(run_.files.size()));
  const ShadowFile& f = run_.files[static_cast<size_t>(file)];
  const uint64_t off = rng_.below(f.size);
  const size_t len = std::min<uint64_t>(draw_len(rng_, kBufferSize) + 1, f.size - off);
  run_.locks.acquire(id_, {{file, off, off + len, false}});
  run_.log.add("t" + std::to_string(id_) + " fork, child reads f" + std::to_string(file) + " off="
      + std::to_string(off) + " len=" + std::to_string(len));
  Watched w(*run_.monitor, id_ + 1, "fork");
  fork_and_check(run_, id_, f, handle(file, 0).fh, off, len);
  run_.locks.release(id_);
}

// ---- Run -------------------------------------------------------------------------------------

Run::Run(const Plan& p, const Options& o) : plan(p), opts(o), faults(p.seed) {
  for (const NamedRule& r : plan.rules) faults.add(r.rule);
}

Run::~Run() { remove_files(); }

void Run::violation(int actor, const std::string& msg) {
  std::lock_guard lock(fail_mu_);
  if (!failure_.empty()) return;
  failure_ = (actor < 0 ? "main: " : "thread " + std::to_string(actor) + ": ") + msg;
  failed_.store(true);
}

void Run::report(const std::string& headline) const {
  std::string failure;
  {
    std::lock_guard lock(fail_mu_);
    failure = failure_;
  }
  std::fprintf(stderr,
               "\n==== SIMULATION FAILURE, seed %" PRIu64 " ====\n%s\n"
               "reproduce: %s --seed=%" PRIu64 "\nplan:\n%s"
               "last operations (oldest first):\n%s"
               "fault journal (first 200 injected faults):\n%s====\n",
               plan.seed, headline.empty() ? failure.c_str() : headline.c_str(),
                   opts.reproduce.c_str(),
               plan.seed, plan.describe().c_str(), log.tail().c_str(), faults.journal().c_str());
  std::fflush(stderr);
}

bool Run::create_files() {
  const char* tmp = std::getenv("TMPDIR");
  std::string templ = std::string(tmp && *tmp ? tmp : "/tmp") + "/gpufile-sim.XXXXXX";
  if (!mkdtemp(templ.data())) return false;
  dir_ = templ;
  Rng r(plan.seed ^ 0xf11e5ull);
  for (size_t i = 0; i < plan.file_sizes.size(); ++i) {
    ShadowFile f;
    f.path = dir_ + "/f" + std::to_string(i);
    f.size = plan.file_sizes[i];
    f.bytes.resize(f.size);
    r.fill(f.bytes.data(), f.size);
    f.fd = ::open(f.path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f.fd < 0 || !pwrite_all(f.fd, f.bytes.data(), f.size, 0)) return false;
    files.push_back(std::move(f));
  }
  int probe = ::open(files[0].path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  direct_ok = probe >= 0;
  if (probe >= 0) ::close(probe);
  return true;
}

void Run::remove_files() {
  for (ShadowFile& f : files) {
    if (f.fd >= 0) ::close(f.fd);
    ::unlink(f.path.c_str());
  }
  files.clear();
  if (!dir_.empty()) ::rmdir(dir_.c_str());
  dir_.clear();
}

// The library reads its settings when the driver opens.
void apply_settings(const SessionConfig& c) {
  setenv("GPUFILE_ENGINE", c.engine.c_str(), 1);
  setenv("GPUFILE_DIRECT_IO", c.direct_io.c_str(), 1);
  setenv("GPUFILE_WORKERS", std::to_string(c.workers).c_str(), 1);
  setenv("GPUFILE_SLAB_SIZE_KB", std::to_string(c.slab_kb).c_str(), 1);
  setenv("GPUFILE_SMALL_IO_KB", std::to_string(c.small_io_kb).c_str(), 1);
  setenv("GPUFILE_MIN_CHUNK_KB", std::to_string(c.min_chunk_kb).c_str(), 1);
  setenv("GPUFILE_SLABS_PER_WORKER", std::to_string(c.slabs_per_worker).c_str(), 1);
  setenv("GPUFILE_RING_DEPTH", std::to_string(c.ring_depth).c_str(), 1);
  setenv("GPUFILE_COLD_SLABS_PER_WORKER", std::to_string(c.cold_slabs_per_worker).c_str(), 1);
  setenv("GPUFILE_COLD_PIECE_KB", std::to_string(c.cold_piece_kb).c_str(), 1);
  setenv("GPUFILE_SHARED_PIECE_KB", std::to_string(c.shared_piece_kb).c_str(), 1);
  if (c.shared_piece_kb > 0) setenv("LOCAL_WORLD_SIZE", "2", 1);
  else unsetenv("LOCAL_WORLD_SIZE");
  setenv("GPUFILE_CALLER_SLABS", "0", 1);
}

bool g_uring_unusable = false;  // the kernel itself refuses io_uring here (learned once)

bool Run::open_session(const SessionConfig& config) {
  SessionConfig c = config;
  if (g_uring_unusable && c.engine == "io_uring") c.engine = "auto";
  apply_settings(c);
  Watched w(*monitor, kMainSlot, "cuFileDriverOpen " + c.describe());
  CUfileError_t e = cuFileDriverOpen();
  log.add("main: open " + c.describe() + " -> " + std::to_string(e.err));
  if (e.err == CU_FILE_CUDA_DRIVER_ERROR && plan.cuda_faults && !retrying_open_) {
    // Staging memory that cannot be pinned (an armed cuMemHostRegister failure left over from
    // the phase before) fails the open cleanly; with the driver's faults dropped, the same open
    // must work, and the failed one must have given back what it had (the leak check).
    reset_driver_faults();
    retrying_open_ = true;
    const bool ok = open_session(config);
    retrying_open_ = false;
    return ok;
  }
  if (e.err != CU_FILE_SUCCESS && c.engine == "io_uring" && !plan.uring_refused) {
    bool rule_on_uring = false;
    for (const NamedRule& r : plan.rules) rule_on_uring |= r.rule.op == FaultOp::uring_init;
    if (!rule_on_uring) g_uring_unusable = true;  // not a fault of ours: the machine's
    // A demanded io_uring that cannot be set up makes the open fail (a clean failure is right);
    // the session goes on with the engine chosen automatically.
    SessionConfig fallback = config;
    fallback.engine = "auto";
    return open_session(fallback);
  }
  if (e.err != CU_FILE_SUCCESS) {
    violation(-1, "cuFileDriverOpen failed with " + std::to_string(e.err) + " (" + c.describe()
        + ")");
    return false;
  }
  const std::string engine = gpufile::Runtime::instance().engine_name();
  if (plan.uring_refused && engine != "posix") {
    violation(-1, "io_uring set-up always fails, yet the engine is " + engine);
    return false;
  }
  return true;
}

bool Run::close_session() {
  Watched w(*monitor, kMainSlot, "cuFileDriverClose");
  for (int i = 0; i < 64 && cuFileUseCount() > 0; ++i) cuFileDriverClose();
  log.add("main: close");
  if (cuFileUseCount() != 0) {
    violation(-1, "the driver is still open after closing it 64 times");
    return false;
  }
  return true;
}

void Run::check_files() {
  for (size_t i = 0; i < files.size() && !failed(); ++i) {
    const ShadowFile& f = files[i];
    struct stat st {};
    if (::fstat(f.fd, &st) != 0 || static_cast<uint64_t>(st.st_size) != f.size)
      return violation(-1, "file f" + std::to_string(i) + " has size "
          + std::to_string(st.st_size) + ", expected " + std::to_string(f.size));
    std::vector<uint8_t> disk(f.size);
    if (!pread_all(f.fd, disk.data(), f.size, 0)) return violation(-1, "cannot read f"
        + std::to_string(i) + " back");
    for (size_t k = 0; k < f.size; ++k)
      if (disk[k] != f.bytes[k])
        return violation(-1, "file f" + std::to_string(i) + " byte " + std::to_string(k) + " is "
            + std::to_string(disk[k]) + ", the model says " + std::to_string(f.bytes[k])
            + " (a write changed bytes outside its range, reported bytes it did not store, or"
              " landed after its call returned)");
  }
  for (size_t a = 0; a < actors.size() && !failed(); ++a)
    if (std::string m = actors[a]->check_buffers(); !m.empty()) violation(static_cast<int>(a),
        "buffer check between phases: " + m);
}

void Run::fork_between_phases() {
  const ShadowFile& f = files[0];
  const size_t len = std::min<uint64_t>(f.size, 64 * KiB);
  log.add("main: fork between phases");
  Watched w(*monitor, kMainSlot, "fork between phases");
  fork_and_check(*this, -1, f, actors[0]->handle(0, 0).fh, 0, len);
}

void Run::run_phase(int phase) {
  const PhasePlan& ph = plan.phases[static_cast<size_t>(phase)];
  if (phase > 0 && ph.reopen) {
    for (auto& a : actors) a->unregister_all();
    if (!close_session() || !open_session(ph.session)) return;
    for (auto& a : actors) a->register_all();
  }
  if (ph.fork_before) fork_between_phases();
  std::vector<std::thread> threads;
  for (auto& a : actors) threads.emplace_back([&a, this] { a->run_phase(plan.ops_per_phase); });
  for (std::thread& t : threads) t.join();
  if (!failed()) check_files();
}

Run::Holdings Run::holdings() {
  using LiveBytes = size_t();
  using LiveCount = int();
  static const char* names[] = {"fakecuda_live_pinned_bytes", "fakecuda_live_registered_bytes",
                                "fakecuda_live_device_bytes", "fakecuda_live_managed_bytes"};
  Holdings h;
  h.fds = open_fds();
  for (int i = 0; i < 4; ++i)
    if (auto* fn = fake_fn<LiveBytes>(names[i])) h.bytes[i] = fn();
  if (auto* fn = fake_fn<LiveCount>("fakecuda_live_streams")) h.streams = fn();
  return h;
}

// Compared with the seed's start, so that one leak fails one seed, not every later one too.
void Run::check_leaks(const Holdings& before) {
  const Holdings now = holdings();
  if (now.fds != before.fds)
    return violation(-1, "open fds: " + std::to_string(before.fds) + " before the seed, "
        + std::to_string(now.fds) + " after it (the driver closed)");
  static const char* kinds[] = {"pinned", "registered host", "device", "managed"};
  for (int i = 0; i < 4; ++i)
    if (now.bytes[i] != before.bytes[i])
      return violation(-1, std::to_string(now.bytes[i]) + " bytes of " + kinds[i]
          + " memory held after the seed with the driver closed, "
          + std::to_string(before.bytes[i]) + " before it");
  if (now.streams != before.streams)
    return violation(-1, std::to_string(now.streams)
        + " CUDA streams alive after the seed with the driver closed, "
        + std::to_string(before.streams) + " before it");
}

SeedResult Run::execute() {
  SeedResult result;
  const Holdings before = holdings();
  g_current_run.store(this);
  {
    gpufile::sys::ScopedOs installed(faults);
    if (!create_files()) {
      violation(-1, "cannot create the simulated files");
    } else if (open_session(plan.phases[0].session)) {
      for (int i = 0; i < plan.actors; ++i) actors.push_back(std::make_unique<Actor>(*this, i));
      bool ready = true;
      for (auto& a : actors) ready = ready && a->setup();
      if (ready)
        for (auto& a : actors) a->register_all();
      for (size_t p = 0; ready && p < plan.phases.size()
          && !failed(); ++p) run_phase(static_cast<int>(p));
      for (auto& a : actors) {
        result.calls += a->calls;
        result.failed_calls += a->failed_calls;
      }
      actors.clear();  // deregisters and frees everything while the driver is open
      close_session();
    }
  }
  result.faults = faults.fired_total();
  reset_driver_faults();  // none may be left for the next seed
  remove_files();
  if (!failed()) check_leaks(before);
  g_current_run.store(nullptr);
  result.ok = !failed();
  if (!result.ok) report("");
  return result;
}

}  // namespace

SeedResult run_seed(uint64_t seed, const Options& opts) {
  const Plan plan = make_plan(seed);
  Run run(plan, opts);
  const auto limit = std::chrono::milliseconds(opts.hang_ms);
  run.monitor = std::make_unique<HangMonitor>(limit,
      [&run](const std::string& why) { run.report(why); });
  SeedResult r = run.execute();
  run.monitor.reset();
  return r;
}

}  // namespace sim
