// A test double of the CUDA driver (libcuda.so.1) for machines without a GPU.
//
// It exports the driver entry points gpufile uses (src/cuda/driver.hpp) and a few more that
// tests and examples need, with the real driver's C ABI and symbol names, and keeps "device
// memory" in host memory. It is written to catch the bugs a real GPU would punish:
//
//  - Device addresses come from a large PROT_NONE reservation and are never reused, so code
//    that dereferences device memory on the CPU crashes, and a freed address stays invalid.
//    The bytes live in separate host mappings that only the copy engine touches.
//  - Every stream has its own worker thread, so asynchronous work really finishes after the
//    call returns. A copy from pinned memory reads the source when it runs, not when it was
//    queued; pageable sources are staged at the call, as the real driver does.
//  - The legacy default stream (handle 0) orders against streams created without
//    CU_STREAM_NON_BLOCKING in both directions, as on real hardware.
//  - Calls that need a current context fail with CUDA_ERROR_INVALID_CONTEXT without one;
//    CUDA calls from inside a host function fail with CUDA_ERROR_NOT_PERMITTED.
//
// The behaviour of edge cases (which calls need a context, which ones synchronise, what the
// pointer attributes of unknown memory are) follows what tests/support/probe/driver_probe.c
// recorded on an H100 with driver 580 (see tests/support/probe/README.md). Where the double is
// deliberately stricter than the real driver (copies to freed or out-of-range device memory
// fail instead of landing in the allocator's slack), the comments say so.

#include <cuda.h>

#include "fakecuda.h"

#include <sys/mman.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

// ---------------------------------------------------------------------------------------------
// The functions the double exports, for call counting and fault rules.

#define FAKECUDA_FUNCTIONS(X)                                                                    \
  X(cuInit) X(cuDriverGetVersion) X(cuGetErrorName) X(cuGetErrorString) X(cuDeviceGetCount)     \
  X(cuDeviceGet) X(cuDeviceGetName) X(cuDeviceGetUuid_v2) X(cuDeviceGetAttribute)               \
  X(cuDeviceTotalMem_v2) X(cuDevicePrimaryCtxRetain) X(cuDevicePrimaryCtxRelease_v2)            \
  X(cuDevicePrimaryCtxGetState) X(cuCtxGetCurrent) X(cuCtxSetCurrent) X(cuCtxPushCurrent_v2)    \
  X(cuCtxPopCurrent_v2) X(cuCtxGetDevice) X(cuCtxSynchronize) X(cuMemGetInfo_v2)                \
  X(cuMemAlloc_v2) X(cuMemAllocManaged) X(cuMemFree_v2) X(cuMemGetAddressRange_v2)              \
  X(cuMemAllocHost_v2) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemHostRegister_v2)               \
  X(cuMemHostUnregister) X(cuPointerGetAttribute) X(cuPointerGetAttributes) X(cuMemcpy)         \
  X(cuMemcpyAsync) X(cuMemcpyHtoD_v2) X(cuMemcpyDtoH_v2) X(cuMemcpyDtoD_v2)                     \
  X(cuMemcpyHtoDAsync_v2) X(cuMemcpyDtoHAsync_v2) X(cuMemcpyDtoDAsync_v2) X(cuMemsetD8_v2)      \
  X(cuMemcpyBatchAsync_v2) X(cuMemcpy2DAsync_v2)                                                \
  X(cuMemsetD8Async) X(cuStreamCreate) X(cuStreamDestroy_v2) X(cuStreamSynchronize)             \
  X(cuStreamQuery) X(cuStreamWaitEvent) X(cuEventCreate) X(cuEventDestroy_v2) X(cuEventRecord)  \
  X(cuEventQuery) X(cuEventSynchronize) X(cuLaunchHostFunc)

namespace {

enum Fn : int {
#define FAKECUDA_ENUM(name) FN_##name,
  FAKECUDA_FUNCTIONS(FAKECUDA_ENUM)
#undef FAKECUDA_ENUM
      FN_COUNT
};

constexpr const char* kFnNames[FN_COUNT] = {
#define FAKECUDA_NAME(name) #name,
    FAKECUDA_FUNCTIONS(FAKECUDA_NAME)
#undef FAKECUDA_NAME
};

int fn_by_name(std::string_view name) {
  for (int i = 0; i < FN_COUNT; ++i)
    if (name == kFnNames[i]) return i;
  std::string v2 = std::string(name) + "_v2";
  for (int i = 0; i < FN_COUNT; ++i)
    if (v2 == kFnNames[i]) return i;
  return -1;
}

constexpr size_t kPage = 4096;
constexpr size_t kDeviceAlign = 256;
constexpr size_t kDeviceGap = 64 << 10;  // unused space after each allocation
constexpr size_t kMappingGranule = 2 << 20;
constexpr int kDriverVersion = 13000;
constexpr int kMaxDevices = 64;
constexpr int kMaxPitch = 2147483647;  // CU_DEVICE_ATTRIBUTE_MAX_PITCH of current GPUs

size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Handles. The driver's opaque handle types are declared in the global namespace by cuda.h.

namespace {
struct Queue;
}  // namespace

struct CUctx_st {
  int device = 0;
  int refcount = 0;  // primary-context retains; 0 = not active (guarded by Global::mu)
  int retains = 0;   // every primary-context retain ever made, released or not (Global::mu)
  std::shared_ptr<Queue> null_queue;             // the legacy default stream (Global::order_mu)
  std::vector<std::shared_ptr<Queue>> queues;    // every queue with work possibly pending (order_mu)
};

struct CUstream_st {
  std::shared_ptr<Queue> queue;
  unsigned flags = 0;
};

struct CUevent_st {
  CUctx_st* ctx = nullptr;  // the context current when it was made, destroyed with it
  unsigned flags = 0;
  std::shared_ptr<Queue> queue;  // null until recorded
  uint64_t seq = 0;              // complete when queue->completed >= seq
};

namespace {

// ---------------------------------------------------------------------------------------------
// Memory ranges known to the driver.

enum class Kind { Device, Managed, Pinned, Registered };

struct Range {
  uintptr_t base = 0;
  size_t size = 0;
  Kind kind = Kind::Device;
  int device = 0;
  CUctx_st* ctx = nullptr;
  char* backing = nullptr;  // device: separate host mapping holding the bytes
  size_t map_size = 0;      // bytes mapped for it (backing, managed or pinned mapping)
  uint64_t id = 0;
  bool freed = false;       // device and managed ranges stay in the table after free
  unsigned inflight = 0;    // queued operations currently copying from or to it
  // A read-only registration (CU_MEMHOSTREGISTER_READ_ONLY): what the pages held when they were
  // registered, which copies out of the range read. The real driver pins the physical pages: a
  // file mapping's pages that the file system replaces (truncation, rewriting) are no longer
  // the file's, and its DMA keeps reading the old ones. Freezing the bytes is the strictest
  // model of that: a reader that serves a read-only registration after the file changed gets
  // the old bytes here too.
  std::unique_ptr<char[]> frozen;
};

// ---------------------------------------------------------------------------------------------
// Stream queues. Each queue is worked by its own thread, in FIFO order.

struct Wait {
  std::shared_ptr<Queue> queue;
  uint64_t seq;
};

struct Op {
  uint64_t seq = 0;
  std::vector<Wait> waits;      // other queues' work that must finish first
  std::function<void()> work;   // empty for markers (event records, waits)
  bool delayed = false;         // subject to the async delay knob
};

struct Queue {
  CUctx_st* ctx = nullptr;
  bool legacy = false;    // the context's NULL stream
  bool blocking = true;   // synchronises with the NULL stream
  std::mutex m;
  std::condition_variable cv;
  std::deque<Op> ops;
  uint64_t enqueued = 0;
  uint64_t completed = 0;
  bool closing = false;

  bool busy() {
    std::lock_guard lk(m);
    return completed < enqueued;
  }
  uint64_t last() {
    std::lock_guard lk(m);
    return enqueued;
  }
  void wait_for(uint64_t seq) {
    std::unique_lock lk(m);
    cv.wait(lk, [&] { return completed >= seq; });
  }
};

struct Rule {
  int fn;
  uint64_t calls = 0;
  uint64_t nth;   // 0 with from == true: every call
  bool from;      // the nth and all later calls
  int result;
};

struct Global {
  // Memory table, handle sets and context reference counts.
  std::mutex mu;
  std::condition_variable mem_cv;
  std::map<uintptr_t, Range*> ranges;
  uintptr_t va_base = 0, va_size = 0, va_next = 0;
  bool va_failed = false;
  uint64_t next_id = 1;
  size_t live_pinned = 0, live_registered = 0, live_device = 0, live_managed = 0;
  size_t used[kMaxDevices] = {};
  std::set<CUstream_st*> streams;
  std::set<CUevent_st*> events;
  // Handles destroyed with their primary context (cuDevicePrimaryCtxRelease of its last
  // reference), kept (never freed, so no later handle gets their address) to tell a use of one
  // from a handle that was never made: see used_after_its_context.
  std::set<const void*> destroyed_with_context;
  std::vector<CUctx_st*> ctxs;

  // Order in which work enters queues, and the per-context queue lists.
  std::mutex order_mu;

  // Configuration, read from the environment at the first driver call.
  std::once_flag env_once;
  int device_count = 1;
  bool no_device = false, stub = false;
  size_t device_memory = size_t(16) << 30;
  size_t pinned_limit = 0;  // 0: unlimited
  std::atomic<bool> initialized{false};
  std::atomic<unsigned> delay_us{0};
  std::atomic<int> sticky{0};

  // fakecuda_hold_registrations: while held, cuMemHostRegister waits (as the real driver's
  // registrations take milliseconds), counted in registrations_waiting.
  std::mutex hold_mu;
  std::condition_variable hold_cv;
  bool hold_registrations = false;
  int registrations_waiting = 0;

  std::mutex fault_mu;
  std::vector<Rule> rules;
  std::atomic<bool> has_rules{false};
  std::atomic<unsigned long long> calls[FN_COUNT] = {};
};

// Never destroyed: stream workers may still run while the process exits.
Global& G() {
  static Global* g = new Global;
  return *g;
}

// The calling thread's context stack. Plain arrays: a thread_local with a destructor in a
// dlopen()ed library trips up thread sanitizers at thread exit.
//
// Under ThreadSanitizer they also live in the static TLS block: a dlopen()ed library's
// thread-locals are otherwise malloc()ed on first use, and glibc frees that block at thread
// exit behind TSan's back, so a later thread that gets the same memory and frees it is
// reported as racing with the dead thread's reads (seen once in CI, in
// Driver.ManyThreadsAtOnce). Only there: the static block's spare room is small and shared
// by every library a process dlopen()s.
#if defined(__SANITIZE_THREAD__)
#define FAKECUDA_TLS thread_local __attribute__((tls_model("initial-exec")))
#else
#define FAKECUDA_TLS thread_local
#endif
constexpr int kMaxCtxDepth = 32;
FAKECUDA_TLS CUctx_st* t_ctx_stack[kMaxCtxDepth];
FAKECUDA_TLS int t_ctx_depth = 0;
FAKECUDA_TLS bool t_in_host_fn = false;

// ---------------------------------------------------------------------------------------------
// Configuration

[[noreturn]] void config_error(const char* what, const char* value) {
  std::fprintf(stderr, "fakecuda: bad %s: '%s'\n", what, value);
  std::abort();
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

long long env_int(const char* name, long long dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v, &end, 10);
  if (errno || *end || x < 0) config_error(name, v);
  return x;
}

size_t env_size(const char* name, size_t dflt) {
  const char* v = std::getenv(name);
  if (!v || !*v) return dflt;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(v, &end, 10);
  if (errno || end == v) config_error(name, v);
  switch (*end) {
    case 'k': case 'K': x <<= 10; ++end; break;
    case 'm': case 'M': x <<= 20; ++end; break;
    case 'g': case 'G': x <<= 30; ++end; break;
    default: break;
  }
  if (*end) config_error(name, v);
  return static_cast<size_t>(x);
}

bool add_rule(int fn, uint64_t nth, bool from, int result) {
  Global& g = G();
  std::lock_guard lk(g.fault_mu);
  g.rules.push_back(Rule{fn, 0, nth, from, result});
  g.has_rules = true;
  return true;
}

void parse_fail_rules(const char* spec) {
  std::string s(spec);
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string item = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    pos = comma == std::string::npos ? s.size() + 1 : comma + 1;
    item.erase(0, item.find_first_not_of(" \t"));
    item.erase(item.find_last_not_of(" \t") + 1);
    if (item.empty()) continue;
    size_t c1 = item.find(':'), c2 = item.rfind(':');
    if (c1 == std::string::npos || c1 == c2) config_error("FAKECUDA_FAIL entry", item.c_str());
    std::string name = item.substr(0, c1), nth = item.substr(c1 + 1, c2 - c1 - 1),
                res = item.substr(c2 + 1);
    int fn = fn_by_name(name);
    if (fn < 0) config_error("FAKECUDA_FAIL function name", name.c_str());
    char* end = nullptr;
    long result = std::strtol(res.c_str(), &end, 10);
    if (res.empty() || *end) config_error("FAKECUDA_FAIL result", item.c_str());
    bool from = false;
    unsigned long long n = 0;
    if (nth == "*") {
      from = true;
      n = 0;
    } else {
      if (!nth.empty() && nth.back() == '+') {
        from = true;
        nth.pop_back();
      }
      n = std::strtoull(nth.c_str(), &end, 10);
      if (nth.empty() || *end || n == 0) config_error("FAKECUDA_FAIL call number", item.c_str());
    }
    add_rule(fn, n, from, static_cast<int>(result));
  }
}

void read_env() {
  Global& g = G();
  long long n = env_int("FAKECUDA_DEVICES", 1);
  if (n > kMaxDevices) config_error("FAKECUDA_DEVICES", std::getenv("FAKECUDA_DEVICES"));
  g.device_count = static_cast<int>(n);
  g.no_device = env_flag("FAKECUDA_NO_DEVICE") || g.device_count == 0;
  g.stub = env_flag("FAKECUDA_STUB");
  g.delay_us = static_cast<unsigned>(env_int("FAKECUDA_ASYNC_DELAY_US", 0));
  g.device_memory = env_size("FAKECUDA_DEVICE_MEMORY", g.device_memory);
  g.pinned_limit = env_size("FAKECUDA_PINNED_LIMIT", 0);
  for (int i = 0; i < g.device_count; ++i) {
    auto* c = new CUctx_st;
    c->device = i;
    g.ctxs.push_back(c);
  }
  if (const char* f = std::getenv("FAKECUDA_FAIL")) parse_fail_rules(f);
}

void ensure_env() { std::call_once(G().env_once, read_env); }

// ---------------------------------------------------------------------------------------------
// Common entry checks

bool fault(int fn, CUresult* out) {
  Global& g = G();
  if (!g.has_rules.load(std::memory_order_relaxed)) return false;
  std::lock_guard lk(g.fault_mu);
  bool hit = false;
  for (Rule& r : g.rules) {
    if (r.fn != fn) continue;
    ++r.calls;
    bool match = r.from ? r.calls >= r.nth : r.calls == r.nth;
    if (match && !hit) {
      hit = true;
      *out = static_cast<CUresult>(r.result);
    }
  }
  return hit;
}

// Counts the call, then: host function -> NOT_PERMITTED, before cuInit -> NOT_INITIALIZED,
// fault rule -> its result.
CUresult enter(int fn, bool needs_init) {
  Global& g = G();
  ensure_env();
  g.calls[fn].fetch_add(1, std::memory_order_relaxed);
  if (t_in_host_fn) return CUDA_ERROR_NOT_PERMITTED;
  if (needs_init && !g.initialized.load()) return CUDA_ERROR_NOT_INITIALIZED;
  CUresult r;
  if (fault(fn, &r)) return r;
  return CUDA_SUCCESS;
}

#define ENTER(name)                                                         \
  do {                                                                      \
    if (CUresult enter_r_ = enter(FN_##name, true); enter_r_ != CUDA_SUCCESS) \
      return enter_r_;                                                      \
  } while (0)

#define ENTER_NO_INIT(name)                                                  \
  do {                                                                       \
    if (CUresult enter_r_ = enter(FN_##name, false); enter_r_ != CUDA_SUCCESS) \
      return enter_r_;                                                       \
  } while (0)

CUctx_st* current_ctx() { return t_ctx_depth ? t_ctx_stack[t_ctx_depth - 1] : nullptr; }

// The calling thread's context, for calls that need one.
CUresult need_ctx(CUctx_st** out) {
  CUctx_st* c = current_ctx();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  {
    std::lock_guard lk(G().mu);
    if (c->refcount == 0) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  }
  if (int s = G().sticky.load()) return static_cast<CUresult>(s);
  *out = c;
  return CUDA_SUCCESS;
}

bool valid_device(CUdevice d) { return d >= 0 && d < G().device_count; }

bool known_ctx(CUcontext c) {
  for (CUctx_st* x : G().ctxs)
    if (x == c) return true;
  return false;
}

// A stream or event handle that is not live (caller holds mu): if its context was destroyed
// under it, the process stops here with the reason. The real driver may crash on such a handle
// (freed driver objects) or do nothing visible, so a test that merely failed the call would
// miss what a GPU shows by chance; a library that keeps streams in a context it did not retain
// is caught at the first use.
void used_after_its_context(const void* handle, const char* what) {
  if (!G().destroyed_with_context.count(handle)) return;
  std::fprintf(stderr,
               "fakecuda: %s %p used after its context was destroyed (the last reference to a "
               "primary context was released while it lived)\n", what, handle);
  std::abort();
}

bool live_stream_locked(CUstream s) {
  if (G().streams.count(s)) return true;
  used_after_its_context(s, "stream");
  return false;
}

bool live_event_locked(CUevent e) {
  if (G().events.count(e)) return true;
  used_after_its_context(e, "event");
  return false;
}

// ---------------------------------------------------------------------------------------------
// Queues

void queue_worker(std::shared_ptr<Queue> q) {
  pthread_setname_np(pthread_self(), "fakecuda-strm");  // tests count these apart
  std::unique_lock lk(q->m);
  for (;;) {
    q->cv.wait(lk, [&] { return !q->ops.empty() || q->closing; });
    if (q->ops.empty()) break;  // closing, and everything ran
    Op op = std::move(q->ops.front());
    q->ops.pop_front();
    lk.unlock();
    for (Wait& w : op.waits) w.queue->wait_for(w.seq);
    if (op.delayed)
      if (unsigned d = G().delay_us.load()) ::usleep(d);
    if (op.work) op.work();
    uint64_t seq = op.seq;
    op = Op{};
    lk.lock();
    q->completed = seq;
    q->cv.notify_all();
  }
  lk.unlock();
  // A destroyed stream whose work has all run: no one needs to wait for it any more.
  std::lock_guard og(G().order_mu);
  auto& v = q->ctx->queues;
  v.erase(std::remove(v.begin(), v.end(), q), v.end());
}

std::shared_ptr<Queue> new_queue_locked(CUctx_st* c, bool legacy, bool blocking) {
  auto q = std::make_shared<Queue>();
  q->ctx = c;
  q->legacy = legacy;
  q->blocking = blocking;
  c->queues.push_back(q);
  std::thread(queue_worker, q).detach();
  return q;
}

std::shared_ptr<Queue> null_queue(CUctx_st* c) {
  std::lock_guard og(G().order_mu);
  if (!c->null_queue) c->null_queue = new_queue_locked(c, true, true);
  return c->null_queue;
}

// Appends work to a queue and returns its sequence number. Work on the legacy stream waits for
// everything queued before it on blocking streams of the context, and work on a blocking stream
// waits for everything queued before it on the legacy stream.
uint64_t enqueue(const std::shared_ptr<Queue>& q, std::function<void()> work, bool delayed,
                 std::vector<Wait> waits = {}) {
  Global& g = G();
  std::lock_guard og(g.order_mu);
  Op op;
  op.work = std::move(work);
  op.delayed = delayed;
  op.waits = std::move(waits);
  if (q->legacy) {
    for (auto& o : q->ctx->queues) {
      if (o == q || !o->blocking) continue;
      std::lock_guard lk(o->m);
      if (o->completed < o->enqueued) op.waits.push_back(Wait{o, o->enqueued});
    }
  } else if (q->blocking && q->ctx->null_queue) {
    auto& n = q->ctx->null_queue;
    std::lock_guard lk(n->m);
    if (n->completed < n->enqueued) op.waits.push_back(Wait{n, n->enqueued});
  }
  // Drop waits that are already satisfied.
  std::erase_if(op.waits, [&](const Wait& w) {
    if (w.queue == q) return true;  // FIFO order covers it
    std::lock_guard lk(w.queue->m);
    return w.queue->completed >= w.seq;
  });
  std::lock_guard lk(q->m);
  op.seq = ++q->enqueued;
  uint64_t seq = op.seq;
  if (!op.work && op.waits.empty() && q->completed + 1 == seq) {
    // A marker on an idle queue: complete now, as an event recorded on an idle stream is.
    q->completed = seq;
    q->cv.notify_all();
    return seq;
  }
  q->ops.push_back(std::move(op));
  q->cv.notify_all();
  return seq;
}

// Waits for everything queued so far on the given contexts' queues (all contexts if null).
void drain(CUctx_st* only) {
  std::vector<Wait> targets;
  {
    Global& g = G();
    std::lock_guard og(g.order_mu);
    for (CUctx_st* c : g.ctxs) {
      if (only && c != only) continue;
      for (auto& q : c->queues) targets.push_back(Wait{q, q->last()});
    }
  }
  for (Wait& w : targets) w.queue->wait_for(w.seq);
}

bool is_default_stream(CUstream s) {
  return s == nullptr || s == CU_STREAM_LEGACY || s == CU_STREAM_PER_THREAD;
}

// The queue behind a stream handle. The default stream needs a current context; an explicit
// stream carries its own.
CUresult stream_queue(CUstream s, std::shared_ptr<Queue>* out) {
  Global& g = G();
  if (is_default_stream(s)) {
    CUctx_st* c;
    if (CUresult r = need_ctx(&c)) return r;
    *out = null_queue(c);
    return CUDA_SUCCESS;
  }
  {
    std::lock_guard lk(g.mu);
    if (!live_stream_locked(s)) return CUDA_ERROR_INVALID_HANDLE;
    *out = s->queue;
  }
  if (int st = g.sticky.load()) return static_cast<CUresult>(st);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Memory

// Caller holds mu.
bool in_device_va(uintptr_t p) {
  Global& g = G();
  return g.va_size && p >= g.va_base && p < g.va_base + g.va_size;
}

// The range holding p (live or freed), or null. Caller holds mu.
Range* find_locked(uintptr_t p) {
  auto& m = G().ranges;
  auto it = m.upper_bound(p);
  if (it == m.begin()) return nullptr;
  --it;
  Range* r = it->second;
  return p - r->base < std::max<size_t>(r->size, 1) ? r : nullptr;
}

Range* find_live_locked(uintptr_t p) {
  Range* r = find_locked(p);
  return r && !r->freed ? r : nullptr;
}

// Takes address space for a device or managed allocation. Caller holds mu.
uintptr_t take_va_locked(size_t size, size_t align) {
  Global& g = G();
  if (!g.va_size && !g.va_failed) {
    for (size_t want = size_t(1) << 40; want >= (size_t(16) << 30); want >>= 1) {
      void* p = ::mmap(nullptr, want, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
      if (p != MAP_FAILED) {
        g.va_base = g.va_next = reinterpret_cast<uintptr_t>(p);
        g.va_size = want;
        break;
      }
    }
    if (!g.va_size) g.va_failed = true;
  }
  if (!g.va_size) return 0;
  uintptr_t p = round_up(g.va_next, align);
  if (size > g.va_base + g.va_size - p) return 0;
  g.va_next = p + round_up(size, kDeviceAlign) + kDeviceGap;
  return p;
}

Range* add_range_locked(uintptr_t base, size_t size, Kind kind, CUctx_st* ctx) {
  Global& g = G();
  auto* r = new Range;
  r->base = base;
  r->size = size;
  r->kind = kind;
  r->ctx = ctx;
  r->device = ctx ? ctx->device : 0;
  r->id = g.next_id++;
  // A stale entry at the same address (host memory reused by the OS) is replaced.
  auto it = g.ranges.find(base);
  if (it != g.ranges.end()) {
    if (it->second->kind == Kind::Device || it->second->kind == Kind::Managed) std::abort();
    delete it->second;
    g.ranges.erase(it);
  }
  g.ranges[base] = r;
  return r;
}

// Marks a device or managed range freed once no queued operation is using it. Caller holds lk.
void retire_locked(std::unique_lock<std::mutex>& lk, Range* r) {
  r->freed = true;
  G().mem_cv.wait(lk, [&] { return r->inflight == 0; });
}

// Queued operations take their ranges for the duration of the copy; memory freed under a queued
// operation turns into a sticky CUDA_ERROR_ILLEGAL_ADDRESS, as a GPU fault would.
bool acquire(Range* r) {
  if (!r) return true;
  Global& g = G();
  std::lock_guard lk(g.mu);
  if (r->freed) {
    int expected = 0;
    g.sticky.compare_exchange_strong(expected, CUDA_ERROR_ILLEGAL_ADDRESS);
    return false;
  }
  ++r->inflight;
  return true;
}

void release(Range* r) {
  if (!r) return;
  Global& g = G();
  std::lock_guard lk(g.mu);
  if (--r->inflight == 0) g.mem_cv.notify_all();
}

// One side of a copy or memset.
struct Side {
  char* mem = nullptr;    // where the bytes are for the copy engine
  Range* range = nullptr; // device or managed range to hold while copying
  bool pinned = false;    // CUDA-known memory (device, managed, pinned, registered)
  bool device = false;    // device memory (cuMemAlloc)
};

// Resolves [p, p+n). With must_know, the memory must be known to the driver (device, managed,
// pinned or registered, the whole span inside one allocation), as for the device side of
// cuMemcpyHtoD. Otherwise unknown memory is plain host memory, except inside the device address
// space, where it is an error (freed, out of range, never allocated). The real driver is laxer
// here: a copy into freed memory or past the end into allocator slack can succeed there.
CUresult resolve(uintptr_t p, size_t n, bool must_know, Side* s) {
  Global& g = G();
  std::lock_guard lk(g.mu);
  Range* r = find_live_locked(p);
  if (r && n <= r->size - (p - r->base)) {
    s->pinned = true;
    switch (r->kind) {
      case Kind::Device:
        s->mem = r->backing + (p - r->base);
        s->range = r;
        s->device = true;
        break;
      case Kind::Managed:
        s->mem = reinterpret_cast<char*>(p);
        s->range = r;
        break;
      default:
        s->mem = r->frozen ? r->frozen.get() + (p - r->base) : reinterpret_cast<char*>(p);
        break;
    }
    return CUDA_SUCCESS;
  }
  if (in_device_va(p) || (n && in_device_va(p + n - 1))) return CUDA_ERROR_INVALID_VALUE;
  if (must_know) return CUDA_ERROR_INVALID_VALUE;
  s->mem = reinterpret_cast<char*>(p);
  s->pinned = false;
  return CUDA_SUCCESS;
}

void run_copy(const Side& dst, const Side& src, size_t n) {
  if (!acquire(dst.range)) return;
  if (!acquire(src.range)) {
    release(dst.range);
    return;
  }
  std::memmove(dst.mem, src.mem, n);
  release(src.range);
  release(dst.range);
}

void run_memset(const Side& dst, unsigned char v, size_t n) {
  if (!acquire(dst.range)) return;
  std::memset(dst.mem, v, n);
  release(dst.range);
}

// A copy in stream order. A pageable source is staged at the call (the caller may reuse it as
// soon as the call returns); a pageable destination makes the call wait for the copy. Pinned
// and device memory on both sides: the call returns at once and the copy runs later.
CUresult copy_async(const std::shared_ptr<Queue>& q, Side dst, Side src, size_t n) {
  if (!src.pinned) {
    auto staged = std::shared_ptr<char[]>(new char[n]);
    std::memcpy(staged.get(), src.mem, n);
    Side from;
    from.mem = staged.get();
    uint64_t seq = enqueue(q, [dst, from, n, staged] { run_copy(dst, from, n); }, true);
    if (!dst.pinned) q->wait_for(seq);
    return CUDA_SUCCESS;
  }
  uint64_t seq = enqueue(q, [dst, src, n] { run_copy(dst, src, n); }, true);
  if (!dst.pinned) q->wait_for(seq);
  return CUDA_SUCCESS;
}

// A synchronous copy: legacy-stream ordered, returns when done, except from pageable memory
// into device memory: the real driver first waits for the work queued before the call
// (a stream sync), then returns once the source is staged, before the bytes land ("API
// synchronization behavior" in the CUDA driver API documentation). Work queued later on the
// legacy stream or a blocking stream comes after the copy; a non-blocking stream's copy of
// the destination may still see the old bytes.
CUresult copy_sync(CUctx_st* c, Side dst, Side src, size_t n) {
  auto q = null_queue(c);
  if (!src.pinned && dst.device) {
    q->wait_for(enqueue(q, {}, false));
    auto staged = std::shared_ptr<char[]>(new char[n]);
    std::memcpy(staged.get(), src.mem, n);
    Side from;
    from.mem = staged.get();
    enqueue(q, [dst, from, n, staged] { run_copy(dst, from, n); }, true);
    return CUDA_SUCCESS;
  }
  uint64_t seq = enqueue(q, [dst, src, n] { run_copy(dst, src, n); }, true);
  q->wait_for(seq);
  if (int st = G().sticky.load()) return static_cast<CUresult>(st);
  return CUDA_SUCCESS;
}

enum class Need { Known, Any };

CUresult memcpy_sync(uintptr_t dst, Need dn, uintptr_t src, Need sn, size_t n) {
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (n == 0) return CUDA_SUCCESS;
  Side d, s;
  if (CUresult r = resolve(dst, n, dn == Need::Known, &d)) return r;
  if (CUresult r = resolve(src, n, sn == Need::Known, &s)) return r;
  return copy_sync(c, d, s, n);
}

CUresult memcpy_async(uintptr_t dst, Need dn, uintptr_t src, Need sn, size_t n, CUstream st) {
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(st, &q)) return r;
  if (n == 0) return CUDA_SUCCESS;
  Side d, s;
  if (CUresult r = resolve(dst, n, dn == Need::Known, &d)) return r;
  if (CUresult r = resolve(src, n, sn == Need::Known, &s)) return r;
  return copy_async(q, d, s, n);
}

// One side of a pitched copy: its rows start at `base` + y * pitch + x.
CUresult pitched_side(unsigned type, const void* host, CUdeviceptr device, CUarray array,
                      size_t x, size_t y, size_t pitch, size_t width, size_t height, Side* s) {
  if (array) return CUDA_ERROR_NOT_SUPPORTED;  // the double has no CUDA arrays
  if (pitch < width || pitch > size_t(kMaxPitch)) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t base;
  switch (type) {
    case CU_MEMORYTYPE_HOST: base = reinterpret_cast<uintptr_t>(host); break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: base = device; break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  const size_t span = (height - 1) * pitch + width;
  return resolve(base + y * pitch + x, span, type == CU_MEMORYTYPE_DEVICE, s);
}

void run_copy_2d(const Side& dst, size_t dpitch, const Side& src, size_t spitch, size_t width,
                 size_t height) {
  if (!acquire(dst.range)) return;
  if (!acquire(src.range)) {
    release(dst.range);
    return;
  }
  for (size_t row = 0; row < height; ++row)
    std::memmove(dst.mem + row * dpitch, src.mem + row * spitch, width);
  release(src.range);
  release(dst.range);
}

CUresult host_alloc(void** pp, size_t size, unsigned flags) {
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (!pp || (flags & ~0x7u)) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0) {
    *pp = nullptr;
    return CUDA_SUCCESS;
  }
  Global& g = G();
  {
    std::lock_guard lk(g.mu);
    if (g.pinned_limit && size > g.pinned_limit - std::min(g.pinned_limit, g.live_pinned))
      return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Page aligned, with an inaccessible page after it to catch overruns.
  size_t len = round_up(size, kPage) + kPage;
  void* p = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ::mprotect(static_cast<char*>(p) + len - kPage, kPage, PROT_NONE);
  std::lock_guard lk(g.mu);
  Range* r = add_range_locked(reinterpret_cast<uintptr_t>(p), size, Kind::Pinned, c);
  r->map_size = len;
  g.live_pinned += size;
  *pp = p;
  return CUDA_SUCCESS;
}

const struct ErrorText {
  int code;
  const char* name;
  const char* text;
} kErrors[] = {
    {CUDA_SUCCESS, "CUDA_SUCCESS", "no error"},
    {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
    {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED", "cuInit has not run"},
    {CUDA_ERROR_DEINITIALIZED, "CUDA_ERROR_DEINITIALIZED", "the driver is shutting down"},
    {CUDA_ERROR_STUB_LIBRARY, "CUDA_ERROR_STUB_LIBRARY",
     "the driver library is only a stub"},
    {CUDA_ERROR_DEVICE_UNAVAILABLE, "CUDA_ERROR_DEVICE_UNAVAILABLE",
     "the device is busy or not available"},
    {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE", "no device found"},
    {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE", "no device with that number"},
    {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT", "the context is not valid"},
    {CUDA_ERROR_CONTEXT_ALREADY_CURRENT, "CUDA_ERROR_CONTEXT_ALREADY_CURRENT",
     "that context is current already"},
    {CUDA_ERROR_MAP_FAILED, "CUDA_ERROR_MAP_FAILED", "could not map the buffer"},
    {CUDA_ERROR_OPERATING_SYSTEM, "CUDA_ERROR_OPERATING_SYSTEM", "a system call failed"},
    {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE", "the handle is not valid"},
    {CUDA_ERROR_ILLEGAL_STATE, "CUDA_ERROR_ILLEGAL_STATE", "not allowed in the current state"},
    {CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND", "not found"},
    {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY", "work still pending"},
    {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS",
     "the device touched memory it may not"},
    {CUDA_ERROR_CONTEXT_IS_DESTROYED, "CUDA_ERROR_CONTEXT_IS_DESTROYED",
     "the context was destroyed"},
    {CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED",
     "the host range is registered already"},
    {CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED, "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED",
     "the host range is not registered"},
    {CUDA_ERROR_NOT_PERMITTED, "CUDA_ERROR_NOT_PERMITTED", "not permitted here"},
    {CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED", "not supported"},
    {CUDA_ERROR_UNKNOWN, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

const ErrorText* error_text(int code) {
  for (const ErrorText& e : kErrors)
    if (e.code == code) return &e;
  return nullptr;
}

}  // namespace

// =============================================================================================
// Driver API

extern "C" {

CUresult cuInit(unsigned int flags) {
  ENTER_NO_INIT(cuInit);
  Global& g = G();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (g.stub) return CUDA_ERROR_STUB_LIBRARY;
  if (g.no_device) return CUDA_ERROR_NO_DEVICE;
  g.initialized = true;
  return CUDA_SUCCESS;
}

CUresult cuDriverGetVersion(int* version) {
  ENTER_NO_INIT(cuDriverGetVersion);
  if (!version) return CUDA_ERROR_INVALID_VALUE;
  *version = kDriverVersion;
  return CUDA_SUCCESS;
}

CUresult cuGetErrorName(CUresult error, const char** str) {
  ENTER_NO_INIT(cuGetErrorName);
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = error_text(error);
  *str = e ? e->name : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult cuGetErrorString(CUresult error, const char** str) {
  ENTER_NO_INIT(cuGetErrorString);
  if (!str) return CUDA_ERROR_INVALID_VALUE;
  const ErrorText* e = error_text(error);
  *str = e ? e->text : nullptr;
  return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---------------------------------------------------------------------------------------------
// Devices

CUresult cuDeviceGetCount(int* count) {
  ENTER(cuDeviceGetCount);
  if (!count) return CUDA_ERROR_INVALID_VALUE;
  *count = G().device_count;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGet(CUdevice* device, int ordinal) {
  ENTER(cuDeviceGet);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *device = ordinal;
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetName(char* name, int len, CUdevice dev) {
  ENTER(cuDeviceGetName);
  if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "Fake GPU %d", dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetUuid_v2(CUuuid* uuid, CUdevice dev) {
  ENTER(cuDeviceGetUuid_v2);
  if (!uuid) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  // "fakecuda" then the ordinal: stable across runs, distinct per device.
  static const unsigned char prefix[8] = {'f', 'a', 'k', 'e', 'c', 'u', 'd', 'a'};
  for (int i = 0; i < 8; ++i) uuid->bytes[i] = static_cast<char>(prefix[i]);
  for (int i = 8; i < 16; ++i) uuid->bytes[i] = 0;
  uuid->bytes[8] = 0x40;  // looks like a version-4 uuid
  uuid->bytes[15] = static_cast<char>(dev);
  return CUDA_SUCCESS;
}

CUresult cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
  ENTER(cuDeviceGetAttribute);
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  int a = static_cast<int>(attrib);
  if (a <= 0 || a > 150) return CUDA_ERROR_INVALID_VALUE;
  switch (a) {
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_PITCH: *value = kMaxPitch; break;
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: *value = 4; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID: *value = 0x10 + dev; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: *value = 9; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: *value = 0; break;
    case CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS: *value = 1; break;
    case CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED: *value = 0; break;
    default: *value = 0; break;
  }
  return CUDA_SUCCESS;
}

CUresult cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
  ENTER(cuDeviceTotalMem_v2);
  if (!bytes) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = G().device_memory;
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Contexts

CUresult cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  ENTER(cuDevicePrimaryCtxRetain);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Global& g = G();
  std::lock_guard lk(g.mu);
  CUctx_st* c = g.ctxs[static_cast<size_t>(dev)];
  ++c->refcount;
  ++c->retains;
  *pctx = c;
  return CUDA_SUCCESS;
}

// Releasing the last reference destroys the context: calls that need it then fail with
// CUDA_ERROR_CONTEXT_IS_DESTROYED until it is retained again, and the streams and events made in
// it are gone with it (work already queued on them still runs, as after cuStreamDestroy); a
// later use of one stops the process (used_after_its_context). Unlike the real driver, its
// memory is left alone, and retaining it again gives the same handle.
CUresult cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
  ENTER(cuDevicePrimaryCtxRelease_v2);
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Global& g = G();
  std::vector<std::shared_ptr<Queue>> closing;
  {
    std::lock_guard lk(g.mu);
    CUctx_st* c = g.ctxs[static_cast<size_t>(dev)];
    if (c->refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--c->refcount > 0) return CUDA_SUCCESS;
    for (auto it = g.streams.begin(); it != g.streams.end();) {
      if ((*it)->queue->ctx != c) {
        ++it;
        continue;
      }
      closing.push_back((*it)->queue);
      g.destroyed_with_context.insert(*it);
      it = g.streams.erase(it);
    }
    for (auto it = g.events.begin(); it != g.events.end();) {
      if ((*it)->ctx != c) {
        ++it;
        continue;
      }
      g.destroyed_with_context.insert(*it);
      it = g.events.erase(it);
    }
  }
  for (const std::shared_ptr<Queue>& q : closing) {
    std::lock_guard lk(q->m);
    q->closing = true;
    q->cv.notify_all();
  }
  return CUDA_SUCCESS;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  ENTER(cuDevicePrimaryCtxGetState);
  if (!flags || !active) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
  Global& g = G();
  std::lock_guard lk(g.mu);
  *flags = 0;
  *active = g.ctxs[static_cast<size_t>(dev)]->refcount > 0;
  return CUDA_SUCCESS;
}

CUresult cuCtxGetCurrent(CUcontext* pctx) {
  ENTER(cuCtxGetCurrent);
  if (!pctx) return CUDA_ERROR_INVALID_VALUE;
  *pctx = current_ctx();
  return CUDA_SUCCESS;
}

CUresult cuCtxSetCurrent(CUcontext ctx) {
  ENTER(cuCtxSetCurrent);
  if (!ctx) {
    if (t_ctx_depth) --t_ctx_depth;
    return CUDA_SUCCESS;
  }
  if (!known_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctx_depth == 0) t_ctx_depth = 1;
  t_ctx_stack[t_ctx_depth - 1] = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxPushCurrent_v2(CUcontext ctx) {
  ENTER(cuCtxPushCurrent_v2);
  if (!ctx) return CUDA_ERROR_INVALID_VALUE;
  if (!known_ctx(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  if (t_ctx_depth == kMaxCtxDepth) return CUDA_ERROR_OUT_OF_MEMORY;
  t_ctx_stack[t_ctx_depth++] = ctx;
  return CUDA_SUCCESS;
}

CUresult cuCtxPopCurrent_v2(CUcontext* pctx) {
  ENTER(cuCtxPopCurrent_v2);
  if (t_ctx_depth == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --t_ctx_depth;
  if (pctx) *pctx = t_ctx_stack[t_ctx_depth];
  return CUDA_SUCCESS;
}

CUresult cuCtxGetDevice(CUdevice* device) {
  ENTER(cuCtxGetDevice);
  if (!device) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c = current_ctx();
  if (!c) return CUDA_ERROR_INVALID_CONTEXT;
  *device = c->device;
  return CUDA_SUCCESS;
}

// Waits for all work of the current context, on every stream.
CUresult cuCtxSynchronize(void) {
  ENTER(cuCtxSynchronize);
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  drain(c);
  if (int st = G().sticky.load()) return static_cast<CUresult>(st);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Memory

CUresult cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
  ENTER(cuMemGetInfo_v2);
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  std::lock_guard lk(g.mu);
  *total = g.device_memory;
  *free_bytes = g.device_memory - std::min(g.device_memory, g.used[c->device]);
  return CUDA_SUCCESS;
}

CUresult cuMemAlloc_v2(CUdeviceptr* dptr, size_t size) {
  ENTER(cuMemAlloc_v2);
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (!dptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  size_t len = round_up(size, kPage);
  {
    std::lock_guard lk(g.mu);
    if (size > g.device_memory - std::min(g.device_memory, g.used[c->device]))
      return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* backing = ::mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (backing == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  std::lock_guard lk(g.mu);
  uintptr_t p = take_va_locked(size, kDeviceAlign);
  if (!p) {
    ::munmap(backing, len);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  Range* r = add_range_locked(p, size, Kind::Device, c);
  r->backing = static_cast<char*>(backing);
  r->map_size = len;
  g.live_device += size;
  g.used[c->device] += size;
  *dptr = p;
  return CUDA_SUCCESS;
}

// Managed memory is ordinary host memory mapped inside the device address space, so the CPU
// may use it; after cuMemFree it becomes inaccessible again.
CUresult cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned int flags) {
  ENTER(cuMemAllocManaged);
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (!dptr || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST))
    return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  std::lock_guard lk(g.mu);
  if (size > g.device_memory - std::min(g.device_memory, g.used[c->device]))
    return CUDA_ERROR_OUT_OF_MEMORY;
  size_t len = round_up(size, kPage);
  uintptr_t p = take_va_locked(len, kPage);
  if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
  void* m = ::mmap(reinterpret_cast<void*>(p), len, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (m == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Range* r = add_range_locked(p, size, Kind::Managed, c);
  r->map_size = len;
  g.live_managed += size;
  g.used[c->device] += size;
  *dptr = p;
  return CUDA_SUCCESS;
}

// Like the real driver, waits for all queued work first and needs no current context.
CUresult cuMemFree_v2(CUdeviceptr p) {
  ENTER(cuMemFree_v2);
  if (p == 0) return CUDA_SUCCESS;
  drain(nullptr);
  Global& g = G();
  std::unique_lock lk(g.mu);
  auto it = g.ranges.find(p);
  if (it == g.ranges.end()) return CUDA_ERROR_INVALID_VALUE;
  Range* r = it->second;
  if (r->freed || (r->kind != Kind::Device && r->kind != Kind::Managed))
    return CUDA_ERROR_INVALID_VALUE;
  retire_locked(lk, r);
  g.used[r->device] -= r->size;
  if (r->kind == Kind::Device) {
    g.live_device -= r->size;
    char* backing = r->backing;
    r->backing = nullptr;
    lk.unlock();
    ::munmap(backing, r->map_size);
  } else {
    g.live_managed -= r->size;
    ::mmap(reinterpret_cast<void*>(r->base), r->map_size, PROT_NONE,
           MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  }
  return CUDA_SUCCESS;
}

CUresult cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr p) {
  ENTER(cuMemGetAddressRange_v2);
  Global& g = G();
  std::lock_guard lk(g.mu);
  Range* r = find_live_locked(p);
  if (!r) return CUDA_ERROR_NOT_FOUND;
  if (pbase) *pbase = r->base;
  if (psize) *psize = r->size;
  return CUDA_SUCCESS;
}

CUresult cuMemAllocHost_v2(void** pp, size_t size) {
  ENTER(cuMemAllocHost_v2);
  return host_alloc(pp, size, 0);
}

CUresult cuMemHostAlloc(void** pp, size_t size, unsigned int flags) {
  ENTER(cuMemHostAlloc);
  return host_alloc(pp, size, flags);
}

// Like the real driver, waits for all queued work first and needs no current context.
CUresult cuMemFreeHost(void* p) {
  ENTER(cuMemFreeHost);
  if (!p) return CUDA_SUCCESS;
  drain(nullptr);
  Global& g = G();
  std::unique_lock lk(g.mu);
  auto it = g.ranges.find(reinterpret_cast<uintptr_t>(p));
  if (it == g.ranges.end() || it->second->kind != Kind::Pinned) return CUDA_ERROR_INVALID_VALUE;
  Range* r = it->second;
  g.ranges.erase(it);
  g.live_pinned -= r->size;
  lk.unlock();
  ::munmap(p, r->map_size);
  delete r;
  return CUDA_SUCCESS;
}

CUresult cuMemHostRegister_v2(void* p, size_t size, unsigned int flags) {
  ENTER(cuMemHostRegister_v2);
  {
    Global& g = G();
    std::unique_lock hold(g.hold_mu);
    ++g.registrations_waiting;
    g.hold_cv.wait(hold, [&] { return !g.hold_registrations; });
    --g.registrations_waiting;
  }
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (!p || size == 0 || (flags & ~0xFu)) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t b = reinterpret_cast<uintptr_t>(p);
  // The pages must exist (the real driver pins them).
  uintptr_t pb = b / kPage * kPage;
  if (::msync(reinterpret_cast<void*>(pb), round_up(b + size, kPage) - pb, MS_ASYNC) != 0)
    return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  std::lock_guard lk(g.mu);
  if (in_device_va(b)) return CUDA_ERROR_INVALID_VALUE;
  // Overlap with another registration: ALREADY_REGISTERED; with cuMemHostAlloc memory: invalid.
  CUresult overlap = CUDA_SUCCESS;
  auto it = g.ranges.upper_bound(b);
  if (it != g.ranges.begin()) --it;
  for (; it != g.ranges.end() && it->first < b + size; ++it) {
    Range* r = it->second;
    if (r->base + r->size <= b) continue;
    if (r->kind == Kind::Pinned) return CUDA_ERROR_INVALID_VALUE;
    if (r->kind == Kind::Registered) overlap = CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  if (overlap) return overlap;
  Range* r = add_range_locked(b, size, Kind::Registered, c);
  r->map_size = size;
  g.live_registered += size;
  constexpr unsigned kReadOnly = 0x08;  // CU_MEMHOSTREGISTER_READ_ONLY
  if (flags & kReadOnly) {
    // Read as the kernel reads pages it pins: a file mapping past the file's end (truncated
    // meanwhile) fails the call, as pinning fails, where a plain load would raise SIGBUS.
    r->frozen.reset(new char[size]);
    iovec into{r->frozen.get(), size}, from{p, size};
    if (process_vm_readv(getpid(), &into, 1, &from, 1, 0) != static_cast<ssize_t>(size)) {
      g.ranges.erase(b);
      g.live_registered -= size;
      delete r;
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

// Waits for all queued work first, like the real driver. Without a current context the real
// driver answers CUDA_ERROR_INVALID_VALUE; so does the double.
CUresult cuMemHostUnregister(void* p) {
  ENTER(cuMemHostUnregister);
  if (!current_ctx()) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  drain(nullptr);
  Global& g = G();
  std::lock_guard lk(g.mu);
  uintptr_t b = reinterpret_cast<uintptr_t>(p);
  auto it = g.ranges.find(b);
  if (it == g.ranges.end() || it->second->kind != Kind::Registered) {
    Range* r = find_live_locked(b);
    return r && r->kind == Kind::Registered ? CUDA_ERROR_INVALID_VALUE
                                            : CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  Range* r = it->second;
  g.ranges.erase(it);
  g.live_registered -= r->size;
  delete r;
  return CUDA_SUCCESS;
}

}  // extern "C"

namespace {

// Writes one pointer attribute; returns false for attributes the double does not know.
// Sizes and values for memory the driver does not know follow the real driver: range start
// and size are left untouched, the device ordinal is -2 and the host pointer is the pointer.
bool write_attribute(int attr, void* data, uintptr_t p, const Range* r) {
  auto put32 = [&](uint32_t v) { std::memcpy(data, &v, 4); };
  auto put64 = [&](uint64_t v) { std::memcpy(data, &v, 8); };
  bool dev = r && (r->kind == Kind::Device || r->kind == Kind::Managed);
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT: {
      CUcontext c = r ? r->ctx : nullptr;
      std::memcpy(data, &c, sizeof c);
      return true;
    }
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      put32(!r ? 0u : dev ? unsigned(CU_MEMORYTYPE_DEVICE) : unsigned(CU_MEMORYTYPE_HOST));
      return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: put64(r ? p : 0); return true;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      put64(r && r->kind == Kind::Device ? 0 : p);
      return true;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS: put32(r && r->kind == Kind::Managed); return true;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID: put64(r ? r->id : 0); return true;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED: put32(r && r->kind == Kind::Managed); return true;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: {
      int32_t v = r ? r->device : -2;
      std::memcpy(data, &v, 4);
      return true;
    }
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      put32(r && r->kind == Kind::Device);
      return true;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
      if (r) put64(r->base);
      return true;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
      if (r) put64(r->size);
      return true;
    case CU_POINTER_ATTRIBUTE_MAPPED: put32(r != nullptr); return true;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES: put64(0); return true;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE: put32(0); return true;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS: put32(r ? 3 : 0); return true;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: put64(0); return true;
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      put64(!r ? 0 : r->kind == Kind::Registered ? r->size : round_up(r->size, kMappingGranule));
      return true;
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR: put64(r ? r->base : 0); return true;
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID: put64(r ? r->id : 0); return true;
    default: return false;
  }
}

// One of the counts of `device`'s primary context (read under Global::mu), or -1 for a bad
// ordinal: the controls fakecuda_primary_ctx_refcount and _retains.
int primary_ctx_count(int device, int CUctx_st::*count) {
  ensure_env();
  Global& g = G();
  if (!valid_device(device)) return -1;
  std::lock_guard lk(g.mu);
  return g.ctxs[static_cast<size_t>(device)]->*count;
}

}  // namespace

extern "C" {

// Never fails for memory the driver does not know (malloc, stack, freed, garbage): it answers
// memory type 0, context NULL, like the real driver. Needs no current context.
CUresult cuPointerGetAttributes(unsigned int num, CUpointer_attribute* attrs, void** data,
                                CUdeviceptr ptr) {
  ENTER(cuPointerGetAttributes);
  if (num == 0 || !attrs || !data) return CUDA_ERROR_INVALID_VALUE;
  unsigned char probe[8];
  for (unsigned i = 0; i < num; ++i)
    if (!data[i] || !write_attribute(attrs[i], probe, 0, nullptr)) return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  std::lock_guard lk(g.mu);
  const Range* r = find_live_locked(ptr);
  for (unsigned i = 0; i < num; ++i) write_attribute(attrs[i], data[i], ptr, r);
  return CUDA_SUCCESS;
}

// Unlike the plural form, fails with CUDA_ERROR_INVALID_VALUE for memory the driver does not
// know and for the host pointer of device memory.
CUresult cuPointerGetAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr) {
  ENTER(cuPointerGetAttribute);
  unsigned char probe[8];
  if (!data || !write_attribute(attr, probe, 0, nullptr)) return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  std::lock_guard lk(g.mu);
  const Range* r = find_live_locked(ptr);
  if (!r) return CUDA_ERROR_INVALID_VALUE;
  if (attr == CU_POINTER_ATTRIBUTE_HOST_POINTER && r->kind == Kind::Device)
    return CUDA_ERROR_INVALID_VALUE;
  write_attribute(attr, data, ptr, r);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Copies. Synchronous copies run on the legacy stream and return when done. The device side
// of a HtoD/DtoH/DtoD copy must be memory the driver knows (device, managed or pinned host,
// wholly inside one allocation); the host side may be any memory, device memory included.

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  ENTER(cuMemcpy);
  return memcpy_sync(dst, Need::Any, src, Need::Any, n);
}

CUresult cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  ENTER(cuMemcpyHtoD_v2);
  return memcpy_sync(dst, Need::Known, reinterpret_cast<uintptr_t>(src), Need::Any, n);
}

CUresult cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  ENTER(cuMemcpyDtoH_v2);
  return memcpy_sync(reinterpret_cast<uintptr_t>(dst), Need::Any, src, Need::Known, n);
}

CUresult cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  ENTER(cuMemcpyDtoD_v2);
  return memcpy_sync(dst, Need::Known, src, Need::Known, n);
}

CUresult cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER(cuMemcpyAsync);
  return memcpy_async(dst, Need::Any, src, Need::Any, n, s);
}

CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  ENTER(cuMemcpyHtoDAsync_v2);
  return memcpy_async(dst, Need::Known, reinterpret_cast<uintptr_t>(src), Need::Any, n, s);
}

CUresult cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER(cuMemcpyDtoHAsync_v2);
  return memcpy_async(reinterpret_cast<uintptr_t>(dst), Need::Any, src, Need::Known, n, s);
}

CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  ENTER(cuMemcpyDtoDAsync_v2);
  return memcpy_async(dst, Need::Known, src, Need::Known, n, s);
}

// Every copy of the batch is checked before any is queued; each then runs as an async copy of
// its own on the stream, in stream order (the double knows no other access order).
CUresult cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                               CUmemcpyAttributes* attrs, size_t* attr_idxs, size_t num_attrs,
                               CUstream s) {
  ENTER(cuMemcpyBatchAsync_v2);
  if (!dsts || !srcs || !sizes || count == 0 || !attrs || !attr_idxs || num_attrs == 0 ||
      num_attrs > count || attr_idxs[0] != 0)
    return CUDA_ERROR_INVALID_VALUE;
  for (size_t a = 0; a < num_attrs; ++a)
    if (attrs[a].srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_INVALID ||
        (a > 0 && attr_idxs[a] <= attr_idxs[a - 1]) || attr_idxs[a] >= count)
      return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(s, &q)) return r;
  for (size_t k = 0; k < count; ++k) {
    Side d, src;
    if (sizes[k] == 0) continue;
    if (CUresult r = resolve(dsts[k], sizes[k], false, &d)) return r;
    if (CUresult r = resolve(srcs[k], sizes[k], false, &src)) return r;
  }
  for (size_t k = 0; k < count; ++k)
    if (CUresult r = memcpy_async(dsts[k], Need::Any, srcs[k], Need::Any, sizes[k], s)) return r;
  return CUDA_SUCCESS;
}

// A pitched copy in stream order, every row checked at the call. As for the 1-D copies, a
// pageable source is staged at the call (rows packed) and a pageable destination makes the call
// wait. Pitches below the width or above CU_DEVICE_ATTRIBUTE_MAX_PITCH fail, as the driver
// documents; a DEVICE side must be memory the driver knows, the whole span of its rows inside
// one allocation. CUDA arrays are not modelled (CUDA_ERROR_NOT_SUPPORTED).
CUresult cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* c, CUstream s) {
  ENTER(cuMemcpy2DAsync_v2);
  if (!c) return CUDA_ERROR_INVALID_VALUE;
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(s, &q)) return r;
  if (c->WidthInBytes == 0 || c->Height == 0) return CUDA_SUCCESS;
  Side d, src;
  if (CUresult r = pitched_side(c->dstMemoryType, c->dstHost, c->dstDevice, c->dstArray,
                                c->dstXInBytes, c->dstY, c->dstPitch, c->WidthInBytes, c->Height, &d))
    return r;
  if (CUresult r = pitched_side(c->srcMemoryType, c->srcHost, c->srcDevice, c->srcArray,
                                c->srcXInBytes, c->srcY, c->srcPitch, c->WidthInBytes, c->Height,
                                &src))
    return r;
  const size_t dpitch = c->dstPitch, width = c->WidthInBytes, height = c->Height;
  size_t spitch = c->srcPitch;
  std::shared_ptr<char[]> staged;
  if (!src.pinned) {
    staged = std::shared_ptr<char[]>(new char[width * height]);
    for (size_t row = 0; row < height; ++row)
      std::memcpy(staged.get() + row * width, src.mem + row * spitch, width);
    src = Side{};
    src.mem = staged.get();
    spitch = width;
  }
  uint64_t seq = enqueue(
      q, [d, dpitch, src, spitch, width, height, staged] { run_copy_2d(d, dpitch, src, spitch, width, height); },
      true);
  if (!d.pinned) q->wait_for(seq);
  return CUDA_SUCCESS;
}

// As on the real driver, a memset of device memory is queued on the legacy stream and the call
// returns at once; a memset of pinned host memory is done when the call returns.
CUresult cuMemsetD8_v2(CUdeviceptr dst, unsigned char v, size_t n) {
  ENTER(cuMemsetD8_v2);
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (n == 0) return CUDA_SUCCESS;
  Side d;
  if (CUresult r = resolve(dst, n, true, &d)) return r;
  auto q = null_queue(c);
  uint64_t seq = enqueue(q, [d, v, n] { run_memset(d, v, n); }, true);
  if (!d.range) q->wait_for(seq);
  return CUDA_SUCCESS;
}

CUresult cuMemsetD8Async(CUdeviceptr dst, unsigned char v, size_t n, CUstream s) {
  ENTER(cuMemsetD8Async);
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(s, &q)) return r;
  if (n == 0) return CUDA_SUCCESS;
  Side d;
  if (CUresult r = resolve(dst, n, true, &d)) return r;
  enqueue(q, [d, v, n] { run_memset(d, v, n); }, true);
  return CUDA_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Streams and events

CUresult cuStreamCreate(CUstream* ps, unsigned int flags) {
  ENTER(cuStreamCreate);
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (!ps || (flags & ~unsigned(CU_STREAM_NON_BLOCKING))) return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  auto* s = new CUstream_st;
  s->flags = flags;
  {
    std::lock_guard og(g.order_mu);
    s->queue = new_queue_locked(c, false, !(flags & CU_STREAM_NON_BLOCKING));
  }
  std::lock_guard lk(g.mu);
  g.streams.insert(s);
  *ps = s;
  return CUDA_SUCCESS;
}

// Returns at once, like the real driver: work already queued still runs, and
// cuCtxSynchronize still waits for it. The handle is invalid from here on.
CUresult cuStreamDestroy_v2(CUstream s) {
  ENTER(cuStreamDestroy_v2);
  if (is_default_stream(s)) return CUDA_ERROR_INVALID_HANDLE;
  Global& g = G();
  {
    std::lock_guard lk(g.mu);
    if (!live_stream_locked(s)) return CUDA_ERROR_INVALID_HANDLE;
    g.streams.erase(s);
  }
  {
    std::lock_guard lk(s->queue->m);
    s->queue->closing = true;
    s->queue->cv.notify_all();
  }
  delete s;
  return CUDA_SUCCESS;
}

// On the default stream: waits for its own work and for work queued before the call on
// blocking streams (not on CU_STREAM_NON_BLOCKING ones), as the real legacy stream does.
CUresult cuStreamSynchronize(CUstream s) {
  ENTER(cuStreamSynchronize);
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(s, &q)) return r;
  if (q->legacy)
    q->wait_for(enqueue(q, {}, false));
  else
    q->wait_for(q->last());
  if (int st = G().sticky.load()) return static_cast<CUresult>(st);
  return CUDA_SUCCESS;
}

CUresult cuStreamQuery(CUstream s) {
  ENTER(cuStreamQuery);
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(s, &q)) return r;
  bool busy = q->busy();
  if (!busy && q->legacy) {
    std::lock_guard og(G().order_mu);
    for (auto& o : q->ctx->queues)
      if (o->blocking && o->busy()) busy = true;
  }
  if (busy) return CUDA_ERROR_NOT_READY;
  if (int st = G().sticky.load()) return static_cast<CUresult>(st);
  return CUDA_SUCCESS;
}

CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int flags) {
  ENTER(cuStreamWaitEvent);
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(s, &q)) return r;
  if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  std::shared_ptr<Queue> eq;
  uint64_t seq;
  {
    std::lock_guard lk(g.mu);
    if (!live_event_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
    eq = e->queue;
    seq = e->seq;
  }
  if (eq && eq != q) enqueue(q, {}, false, {Wait{eq, seq}});
  return CUDA_SUCCESS;
}

CUresult cuEventCreate(CUevent* pe, unsigned int flags) {
  ENTER(cuEventCreate);
  CUctx_st* c;
  if (CUresult r = need_ctx(&c)) return r;
  if (!pe || (flags & ~0x7u)) return CUDA_ERROR_INVALID_VALUE;
  Global& g = G();
  auto* e = new CUevent_st;
  e->ctx = c;
  e->flags = flags;
  std::lock_guard lk(g.mu);
  g.events.insert(e);
  *pe = e;
  return CUDA_SUCCESS;
}

CUresult cuEventDestroy_v2(CUevent e) {
  ENTER(cuEventDestroy_v2);
  Global& g = G();
  std::lock_guard lk(g.mu);
  if (!live_event_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
  g.events.erase(e);
  delete e;
  return CUDA_SUCCESS;
}

// The event completes when everything queued on the stream before it has run (for the default
// stream, also what it implicitly waits for).
CUresult cuEventRecord(CUevent e, CUstream s) {
  ENTER(cuEventRecord);
  Global& g = G();
  {
    std::lock_guard lk(g.mu);
    if (!live_event_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
  }
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(s, &q)) return r;
  uint64_t seq = enqueue(q, {}, false);
  std::lock_guard lk(g.mu);
  if (!live_event_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
  e->queue = q;
  e->seq = seq;
  return CUDA_SUCCESS;
}

CUresult cuEventQuery(CUevent e) {
  ENTER(cuEventQuery);
  Global& g = G();
  std::shared_ptr<Queue> q;
  uint64_t seq;
  {
    std::lock_guard lk(g.mu);
    if (!live_event_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
    q = e->queue;
    seq = e->seq;
  }
  if (!q) return CUDA_SUCCESS;  // never recorded
  std::lock_guard lk(q->m);
  return q->completed >= seq ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult cuEventSynchronize(CUevent e) {
  ENTER(cuEventSynchronize);
  Global& g = G();
  std::shared_ptr<Queue> q;
  uint64_t seq;
  {
    std::lock_guard lk(g.mu);
    if (!live_event_locked(e)) return CUDA_ERROR_INVALID_HANDLE;
    q = e->queue;
    seq = e->seq;
  }
  if (q) q->wait_for(seq);
  if (int st = g.sticky.load()) return static_cast<CUresult>(st);
  return CUDA_SUCCESS;
}

// fn runs on the stream's worker thread, in order; later work on the stream waits for it. CUDA
// calls made from inside it fail with CUDA_ERROR_NOT_PERMITTED.
CUresult cuLaunchHostFunc(CUstream s, CUhostFn fn, void* user_data) {
  ENTER(cuLaunchHostFunc);
  std::shared_ptr<Queue> q;
  if (CUresult r = stream_queue(s, &q)) return r;
  if (!fn) return CUDA_ERROR_INVALID_VALUE;
  enqueue(q, [fn, user_data] {
    t_in_host_fn = true;
    fn(user_data);
    t_in_host_fn = false;
  }, true);
  return CUDA_SUCCESS;
}

// =============================================================================================
// Test controls (fakecuda.h)

size_t fakecuda_live_pinned_bytes(void) {
  std::lock_guard lk(G().mu);
  return G().live_pinned;
}

size_t fakecuda_live_registered_bytes(void) {
  std::lock_guard lk(G().mu);
  return G().live_registered;
}

size_t fakecuda_live_device_bytes(void) {
  std::lock_guard lk(G().mu);
  return G().live_device;
}

size_t fakecuda_live_managed_bytes(void) {
  std::lock_guard lk(G().mu);
  return G().live_managed;
}

int fakecuda_live_streams(void) {
  std::lock_guard lk(G().mu);
  return static_cast<int>(G().streams.size());
}

int fakecuda_live_events(void) {
  std::lock_guard lk(G().mu);
  return static_cast<int>(G().events.size());
}

int fakecuda_primary_ctx_refcount(int device) { return primary_ctx_count(device, &CUctx_st::refcount); }

int fakecuda_primary_ctx_retains(int device) { return primary_ctx_count(device, &CUctx_st::retains); }

int fakecuda_fail_call(const char* name, int nth, int result) {
  ensure_env();
  int fn = name ? fn_by_name(name) : -1;
  if (fn < 0 || nth < 0) return -1;
  add_rule(fn, static_cast<uint64_t>(nth), nth == 0, result);
  return 0;
}

int fakecuda_fail_call_from(const char* name, int nth, int result) {
  ensure_env();
  int fn = name ? fn_by_name(name) : -1;
  if (fn < 0 || nth < 1) return -1;
  add_rule(fn, static_cast<uint64_t>(nth), true, result);
  return 0;
}

void fakecuda_reset_faults(void) {
  ensure_env();
  Global& g = G();
  std::lock_guard lk(g.fault_mu);
  g.rules.clear();
  g.has_rules = false;
  g.sticky = 0;
}

unsigned long long fakecuda_call_count(const char* name) {
  int fn = name ? fn_by_name(name) : -1;
  return fn < 0 ? 0 : G().calls[fn].load();
}

void fakecuda_set_async_delay_us(unsigned microseconds) {
  ensure_env();
  G().delay_us = microseconds;
}

int fakecuda_sticky_error(void) { return G().sticky.load(); }

void fakecuda_hold_registrations(int hold) {
  Global& g = G();
  {
    std::lock_guard lk(g.hold_mu);
    g.hold_registrations = hold != 0;
  }
  g.hold_cv.notify_all();
}

int fakecuda_registrations_waiting(void) {
  std::lock_guard lk(G().hold_mu);
  return G().registrations_waiting;
}

}  // extern "C"
