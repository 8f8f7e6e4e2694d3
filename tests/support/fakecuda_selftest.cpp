// Self-test of the CUDA driver test double (tests/support/fakecuda).
//
// The driver is loaded the way gpufile loads it: dlopen($GPUFILE_CUDA_LIBRARY, else
// libcuda.so.1) and dlsym of every entry of GPUFILE_CUDA_DRIVER_FUNCTIONS. Run with
// GPUFILE_CUDA_LIBRARY unset on a GPU machine, the same checks run against the real driver,
// which keeps the double honest; checks that need the double's controls (fakecuda.h) or that
// test its deliberate strictness then skip.

// driver.hpp first: cuda.h defines some of its constant names as macros.
#include "cuda/driver.hpp"

#include <cuda.h>

#include "fakecuda.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

namespace gc = gpufile::cuda;

// ---------------------------------------------------------------------------------------------
// The driver table and cuda.h must agree: same symbol for each entry, same ABI (arity, and per
// parameter the size and pointer-ness).

namespace gpufile::cuda::fakecuda_abi_check {

template <class A, class B>
constexpr bool same_slot() {
  return sizeof(A) == sizeof(B) && std::is_pointer_v<A> == std::is_pointer_v<B>;
}

template <class R1, class... A1, class R2, class... A2>
constexpr bool same_abi(R1 (*)(A1...), R2 (*)(A2...)) {
  if constexpr (sizeof...(A1) != sizeof...(A2))
    return false;
  else
    return same_slot<R1, R2>() && (same_slot<A1, A2>() && ...);
}

#define FAKE_CAT2(a, b) a##b
#define FAKE_CAT(a, b) FAKE_CAT2(a, b)
#define FAKE_STR2(x) #x
#define FAKE_STR(x) FAKE_STR2(x)
#define FAKE_CHECK_ENTRY(name, sym, ret, params)                                             \
  static_assert(std::string_view(sym) == FAKE_STR(FAKE_CAT(cu, name)),                       \
                "driver.hpp's symbol for " #name " is not the one cuda.h names");          \
  static_assert(same_abi(static_cast<ret(*) params>(nullptr), &::FAKE_CAT(cu, name)),        \
                "driver.hpp's signature of " sym " differs from cuda.h's");
GPUFILE_CUDA_DRIVER_FUNCTIONS(FAKE_CHECK_ENTRY)
#undef FAKE_CHECK_ENTRY

static_assert(sizeof(::CUuuid) == sizeof(CUuuid));
static_assert(int(::CUDA_ERROR_NOT_READY) == gc::CUDA_ERROR_NOT_READY);
static_assert(int(::CUDA_ERROR_STUB_LIBRARY) == gc::CUDA_ERROR_STUB_LIBRARY);
static_assert(int(::CU_POINTER_ATTRIBUTE_RANGE_SIZE) == gc::CU_POINTER_ATTRIBUTE_RANGE_SIZE);
static_assert(int(::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID) == gc::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID);

}  // namespace gpufile::cuda::fakecuda_abi_check

// ---------------------------------------------------------------------------------------------
// Loading

namespace {

// Entry points beyond gpufile's table, typed by cuda.h.
#define FAKE_EXTRA_FUNCTIONS(X)                                                              \
  X(cuMemAllocManaged) X(cuMemsetD8_v2) X(cuMemsetD8Async) X(cuCtxSynchronize) X(cuStreamQuery) \
  X(cuMemcpy) X(cuMemcpyAsync) X(cuMemcpyDtoD_v2) X(cuStreamWaitEvent) X(cuCtxPushCurrent_v2)   \
  X(cuCtxPopCurrent_v2) X(cuMemGetAddressRange_v2) X(cuPointerGetAttribute)                   \
  X(cuDevicePrimaryCtxGetState) X(cuMemAllocHost_v2) X(cuMemGetInfo_v2) X(cuDeviceTotalMem_v2)

#define FAKE_CONTROL_FUNCTIONS(X)                                                             \
  X(fakecuda_live_pinned_bytes) X(fakecuda_live_registered_bytes) X(fakecuda_live_device_bytes) \
  X(fakecuda_live_managed_bytes) X(fakecuda_live_streams) X(fakecuda_live_events)             \
  X(fakecuda_primary_ctx_refcount) X(fakecuda_fail_call) X(fakecuda_fail_call_from)           \
  X(fakecuda_reset_faults) X(fakecuda_call_count) X(fakecuda_set_async_delay_us)             \
  X(fakecuda_sticky_error) X(fakecuda_primary_ctx_retains)

struct Extras {
#define FAKE_MEMBER(sym) decltype(&::sym) sym = nullptr;
  FAKE_EXTRA_FUNCTIONS(FAKE_MEMBER)
#undef FAKE_MEMBER
};

struct Controls {
#define FAKE_MEMBER(sym) decltype(&::sym) sym = nullptr;
  FAKE_CONTROL_FUNCTIONS(FAKE_MEMBER)
#undef FAKE_MEMBER
};

struct Loaded {
  void* handle = nullptr;
  std::string error;
  gc::Driver d;
  Extras x;
  Controls f;
  bool fake = false;
  // What the driver answered before and at cuInit.
  int preinit_count_result = -1;
  int preinit_version_result = -1;
  int preinit_version = 0;
  int init_result = -1;
};

Loaded& lib() {
  static Loaded l;
  return l;
}

class DriverEnvironment : public ::testing::Environment {
 public:
  void SetUp() override {
    Loaded& l = lib();
    const char* path = std::getenv("GPUFILE_CUDA_LIBRARY");
    l.handle = ::dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) {
      l.error = ::dlerror();
      return;
    }
#define FAKE_LOAD(name, sym, ret, params)                                 \
  l.d.name = reinterpret_cast<decltype(l.d.name)>(::dlsym(l.handle, sym)); \
  if (!l.d.name) l.error += std::string(" missing ") + sym;
    GPUFILE_CUDA_DRIVER_FUNCTIONS(FAKE_LOAD)
#undef FAKE_LOAD
#define FAKE_LOAD_EXTRA(sym)                                                        \
  l.x.sym = reinterpret_cast<decltype(&::sym)>(::dlsym(l.handle, #sym));            \
  if (!l.x.sym) l.error += std::string(" missing ") + #sym;
    FAKE_EXTRA_FUNCTIONS(FAKE_LOAD_EXTRA)
#undef FAKE_LOAD_EXTRA
#define FAKE_LOAD_CONTROL(sym) \
  l.f.sym = reinterpret_cast<decltype(&::sym)>(::dlsym(l.handle, #sym));
    FAKE_CONTROL_FUNCTIONS(FAKE_LOAD_CONTROL)
#undef FAKE_LOAD_CONTROL
    l.fake = l.f.fakecuda_live_device_bytes != nullptr;
    if (!l.error.empty()) return;
    int count = 0;
    l.preinit_count_result = l.d.DeviceGetCount(&count);
    l.preinit_version_result = l.d.DriverGetVersion(&l.preinit_version);
    l.init_result = l.d.Init(0);
  }
};

[[maybe_unused]] const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new DriverEnvironment);

::CUstream cu(gc::CUstream s) { return reinterpret_cast<::CUstream>(s); }
::CUevent cu(gc::CUevent e) { return reinterpret_cast<::CUevent>(e); }
gc::CUdeviceptr dptr(const void* p) { return reinterpret_cast<gc::CUdeviceptr>(p); }
void* hptr(gc::CUdeviceptr p) { return reinterpret_cast<void*>(p); }

// True when the CPU can read the byte at p (without crashing: the kernel checks for us).
bool cpu_readable(const void* p) {
  int fds[2];
  if (::pipe(fds) != 0) return false;
  bool ok = ::write(fds[1], p, 1) == 1;
  ::close(fds[0]);
  ::close(fds[1]);
  return ok;
}

// A host function that holds its stream until released.
struct Gate {
  std::mutex m;
  std::condition_variable cv;
  bool open = false;
  static void hold(void* self) {
    auto* g = static_cast<Gate*>(self);
    std::unique_lock lk(g->m);
    g->cv.wait(lk, [&] { return g->open; });
  }
  // The owner must make sure the host function has returned before the gate goes away.
  void release() {
    std::lock_guard lk(m);
    open = true;
    cv.notify_all();
  }
};

struct Trace {
  std::mutex m;
  std::vector<int> order;
  std::set<std::thread::id> threads;
};
struct TraceItem {
  Trace* t;
  int n;
};
void trace_fn(void* p) {
  auto* it = static_cast<TraceItem*>(p);
  std::lock_guard lk(it->t->m);
  it->t->order.push_back(it->n);
  it->t->threads.insert(std::this_thread::get_id());
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class Driver : public ::testing::Test {
 protected:
  const gc::Driver& D = lib().d;
  const Extras& X = lib().x;
  const Controls& F = lib().f;
  gc::CUcontext ctx = nullptr;

  void SetUp() override {
    ASSERT_TRUE(lib().handle) << lib().error;
    ASSERT_TRUE(lib().error.empty()) << lib().error;
    ASSERT_EQ(lib().init_result, 0);
    ASSERT_EQ(D.DevicePrimaryCtxRetain(&ctx, 0), 0);
    ASSERT_EQ(D.CtxSetCurrent(ctx), 0);
    if (lib().fake) F.fakecuda_reset_faults();
  }
  void TearDown() override {
    if (!ctx) return;
    EXPECT_EQ(X.cuCtxSynchronize(), CUDA_SUCCESS);
    EXPECT_EQ(D.DevicePrimaryCtxRelease(0), 0);
    if (lib().fake) {
      F.fakecuda_reset_faults();
      F.fakecuda_set_async_delay_us(0);
    }
  }
  bool fake() const { return lib().fake; }

  gc::CUdeviceptr alloc(size_t n) {
    gc::CUdeviceptr d = 0;
    EXPECT_EQ(D.MemAlloc(&d, n), 0);
    return d;
  }
  void* pinned(size_t n) {
    void* p = nullptr;
    EXPECT_EQ(D.MemHostAlloc(&p, n, 0), 0);
    return p;
  }
  gc::CUstream stream(unsigned flags = 0) {
    gc::CUstream s = nullptr;
    EXPECT_EQ(D.StreamCreate(&s, flags), 0);
    return s;
  }
};

#define NEEDS_FAKE() \
  if (!fake()) GTEST_SKIP() << "needs the test double's controls or strictness"

// ---------------------------------------------------------------------------------------------
// Initialisation, devices, contexts

TEST_F(Driver, BeforeInitOnlyVersionAndErrorsWork) {
  EXPECT_EQ(lib().preinit_count_result, CUDA_ERROR_NOT_INITIALIZED);
  EXPECT_EQ(lib().preinit_version_result, CUDA_SUCCESS);
  EXPECT_GE(lib().preinit_version, 12000);
  int v = 0;
  ASSERT_EQ(D.DriverGetVersion(&v), 0);
  if (fake()) {
    EXPECT_EQ(v, 13000);
  }
  EXPECT_EQ(D.Init(0), 0) << "cuInit is idempotent";
  EXPECT_EQ(D.Init(1), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(Driver, Devices) {
  int n = 0;
  ASSERT_EQ(D.DeviceGetCount(&n), 0);
  ASSERT_GE(n, 1);
  gc::CUdevice dev = -1;
  EXPECT_EQ(D.DeviceGet(&dev, 0), 0);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(D.DeviceGet(&dev, n), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(D.DeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  char name[64] = {};
  ASSERT_EQ(D.DeviceGetName(name, sizeof name, 0), 0);
  EXPECT_GT(std::strlen(name), 0u);
  if (fake()) {
    EXPECT_STREQ(name, "Fake GPU 0");
  }
  gc::CUuuid a{}, b{};
  ASSERT_EQ(D.DeviceGetUuid(&a, 0), 0);
  ASSERT_EQ(D.DeviceGetUuid(&b, 0), 0);
  EXPECT_EQ(std::memcmp(a.bytes, b.bytes, 16), 0);
  EXPECT_NE(std::memcmp(a.bytes, gc::CUuuid{}.bytes, 16), 0);
  for (int attr : {gc::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, gc::CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID,
                   gc::CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID}) {
    int v = -1;
    EXPECT_EQ(D.DeviceGetAttribute(&v, attr, 0), 0) << attr;
    EXPECT_GE(v, 0) << attr;
  }
  int v = 0;
  EXPECT_EQ(D.DeviceGetAttribute(&v, gc::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, n),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(D.DeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0), 0);
  EXPECT_EQ(v, 1);
}

TEST_F(Driver, ErrorNamesAndStrings) {
  for (int code : {0, 1, 2, 3, 4, 34, 100, 101, 201, 400, 600, 700, 709, 712, 713, 800, 801, 999}) {
    const char* s = nullptr;
    EXPECT_EQ(D.GetErrorName(code, &s), 0) << code;
    ASSERT_NE(s, nullptr) << code;
    EXPECT_EQ(std::string_view(s).substr(0, 5), "CUDA_") << code;
    s = nullptr;
    EXPECT_EQ(D.GetErrorString(code, &s), 0) << code;
    EXPECT_NE(s, nullptr) << code;
  }
  const char* s = "x";
  EXPECT_EQ(D.GetErrorName(424242, &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  D.GetErrorName(CUDA_ERROR_INVALID_VALUE, &s);
  EXPECT_STREQ(s, "CUDA_ERROR_INVALID_VALUE");
}

TEST_F(Driver, PrimaryContextIsRefcountedAndCurrentPerThread) {
  const int retains_before = fake() ? F.fakecuda_primary_ctx_retains(0) : 0;
  gc::CUcontext again = nullptr;
  ASSERT_EQ(D.DevicePrimaryCtxRetain(&again, 0), 0);
  EXPECT_EQ(again, ctx);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_primary_ctx_refcount(0), 2);
  }
  ASSERT_EQ(D.DevicePrimaryCtxRelease(0), 0);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_primary_ctx_refcount(0), 1);
    EXPECT_EQ(F.fakecuda_primary_ctx_retains(0), retains_before + 1) << "a release undid the count";
  }

  gc::CUcontext cur = nullptr;
  ASSERT_EQ(D.CtxGetCurrent(&cur), 0);
  EXPECT_EQ(cur, ctx);
  gc::CUdevice dev = -1;
  EXPECT_EQ(D.CtxGetDevice(&dev), 0);
  EXPECT_EQ(dev, 0);

  std::thread([&] {
    gc::CUcontext c = reinterpret_cast<gc::CUcontext>(1);
    EXPECT_EQ(D.CtxGetCurrent(&c), 0);
    EXPECT_EQ(c, nullptr) << "a new thread has no current context";
    gc::CUdevice d;
    EXPECT_EQ(D.CtxGetDevice(&d), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.CtxSetCurrent(ctx), 0);
    EXPECT_EQ(D.CtxGetCurrent(&c), 0);
    EXPECT_EQ(c, ctx);
  }).join();

  // Push/pop keep a stack; SetCurrent(NULL) pops.
  ::CUcontext popped = nullptr;
  EXPECT_EQ(X.cuCtxPushCurrent_v2(reinterpret_cast<::CUcontext>(ctx)), 0);
  EXPECT_EQ(X.cuCtxPopCurrent_v2(&popped), 0);
  EXPECT_EQ(popped, reinterpret_cast<::CUcontext>(ctx));
  EXPECT_EQ(D.CtxGetCurrent(&cur), 0);
  EXPECT_EQ(cur, ctx);
}

TEST_F(Driver, ReleasingThePrimaryContextDeactivatesIt) {
  // The fixture holds one reference; drop it, use the context, then take it back.
  ASSERT_EQ(D.DevicePrimaryCtxRelease(0), 0);
  unsigned flags = 0;
  int active = -1;
  EXPECT_EQ(X.cuDevicePrimaryCtxGetState(0, &flags, &active), 0);
  if (active) {
    // Someone else (the real runtime, say) holds it too: nothing to check here.
    ASSERT_EQ(D.DevicePrimaryCtxRetain(&ctx, 0), 0);
    GTEST_SKIP() << "primary context is retained elsewhere";
  }
  gc::CUdeviceptr d = 0;
  EXPECT_EQ(D.MemAlloc(&d, 4096), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  EXPECT_EQ(X.cuCtxSynchronize(), CUDA_ERROR_CONTEXT_IS_DESTROYED);
  gc::CUdevice dev = -1;
  EXPECT_EQ(D.CtxGetDevice(&dev), 0);
  gc::CUcontext again = nullptr;
  ASSERT_EQ(D.DevicePrimaryCtxRetain(&again, 0), 0);
  EXPECT_EQ(again, ctx);
  EXPECT_EQ(D.MemAlloc(&d, 4096), 0);
  EXPECT_EQ(D.MemFree(d), 0);
  if (fake()) {
    // Over-release is an error.
    ASSERT_EQ(D.DevicePrimaryCtxRelease(0), 0);
    EXPECT_EQ(D.DevicePrimaryCtxRelease(0), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_EQ(D.DevicePrimaryCtxRetain(&again, 0), 0);
  }
}

// The real driver destroys a primary context's streams and events with it; a library that
// keeps one past that crashes on a GPU at its next use, or not, by chance. The double stops the
// process at that use, every time.
TEST_F(Driver, StreamsAndEventsGoWithTheirContext) {
  NEEDS_FAKE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  gc::CUstream s = stream(gc::CU_STREAM_NON_BLOCKING);
  gc::CUevent e = nullptr;
  ASSERT_EQ(D.EventCreate(&e, 0), 0);
  ASSERT_EQ(D.EventRecord(e, s), 0);
  ASSERT_EQ(D.DevicePrimaryCtxRelease(0), 0);  // the fixture's reference: the last one
  gc::CUcontext again = nullptr;
  ASSERT_EQ(D.DevicePrimaryCtxRetain(&again, 0), 0);
  ASSERT_EQ(again, ctx);  // the same handle, as a cache keyed by it would find
  EXPECT_DEATH(D.StreamSynchronize(s), "stream .* used after its context was destroyed");
  EXPECT_DEATH(D.StreamDestroy(s), "stream .* used after its context was destroyed");
  EXPECT_DEATH(D.EventQuery(e), "event .* used after its context was destroyed");
  EXPECT_DEATH(D.EventDestroy(e), "event .* used after its context was destroyed");
  // Streams made since live as usual, and a handle never made is still just invalid.
  gc::CUstream fresh = stream();
  EXPECT_EQ(D.StreamSynchronize(fresh), 0);
  EXPECT_EQ(D.StreamDestroy(fresh), 0);
  EXPECT_EQ(D.StreamSynchronize(fresh), CUDA_ERROR_INVALID_HANDLE);
}

// Which calls need a current context, as recorded on the real driver.
TEST_F(Driver, CallsWithoutACurrentContext) {
  gc::CUdeviceptr d = alloc(1 << 20), d2 = alloc(4096);
  void* p = pinned(1 << 20);
  void* p2 = pinned(4096);
  gc::CUstream s = stream();
  gc::CUevent e = nullptr;
  ASSERT_EQ(D.EventCreate(&e, 0), 0);
  std::thread([&] {
    gc::CUdeviceptr x = 0;
    void* h = nullptr;
    gc::CUstream s2 = nullptr;
    gc::CUevent e2 = nullptr;
    std::vector<char> buf(4096);
    EXPECT_EQ(D.MemAlloc(&x, 16), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.MemHostAlloc(&h, 16, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.StreamCreate(&s2, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.EventCreate(&e2, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.MemcpyHtoD(d, buf.data(), 16), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.MemcpyDtoH(buf.data(), d, 16), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.MemcpyHtoDAsync(d, p, 16, nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.StreamSynchronize(nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(D.EventRecord(e, nullptr), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(X.cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    // An explicit stream carries its context.
    EXPECT_EQ(D.MemcpyHtoDAsync(d, p, 16, s), 0);
    EXPECT_EQ(D.MemcpyDtoHAsync(p, d, 16, s), 0);
    EXPECT_EQ(D.EventRecord(e, s), 0);
    EXPECT_EQ(D.StreamSynchronize(s), 0);
    EXPECT_EQ(D.EventSynchronize(e), 0);
    EXPECT_EQ(D.EventQuery(e), 0);
    EXPECT_EQ(X.cuStreamQuery(cu(s)), 0);
    unsigned type = 0;
    int attr = gc::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
    void* data = &type;
    EXPECT_EQ(D.PointerGetAttributes(1, &attr, &data, d), 0);
    EXPECT_EQ(type, gc::CU_MEMORYTYPE_DEVICE);
    EXPECT_EQ(D.MemFree(d2), 0);
    EXPECT_EQ(D.MemFreeHost(p2), 0);
  }).join();
  EXPECT_EQ(D.EventDestroy(e), 0);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

// ---------------------------------------------------------------------------------------------
// Memory

TEST_F(Driver, DeviceAllocAndFree) {
  size_t before = fake() ? F.fakecuda_live_device_bytes() : 0;
  gc::CUdeviceptr d = 0;
  EXPECT_EQ(D.MemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(D.MemAlloc(&d, 1000), 0);
  EXPECT_NE(d, 0u);
  EXPECT_EQ(d % 256, 0u);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_live_device_bytes(), before + 1000);
  }
  EXPECT_EQ(D.MemFree(d + 256), CUDA_ERROR_INVALID_VALUE);
  std::vector<char> host(16);
  EXPECT_EQ(D.MemFree(dptr(host.data())), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemFree(d), 0);
  EXPECT_EQ(D.MemFree(d), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemFree(0), 0);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_live_device_bytes(), before);
  }
  size_t free_bytes = 0, total = 0, t2 = 0;
  EXPECT_EQ(X.cuMemGetInfo_v2(&free_bytes, &total), 0);
  EXPECT_EQ(X.cuDeviceTotalMem_v2(&t2, 0), 0);
  EXPECT_EQ(total, t2);
  EXPECT_LE(free_bytes, total);
}

TEST_F(Driver, DeviceMemoryIsNotCpuAccessibleAndNeverReused) {
  NEEDS_FAKE();
  std::set<gc::CUdeviceptr> seen;
  for (int i = 0; i < 50; ++i) {
    gc::CUdeviceptr d = alloc(4096);
    EXPECT_FALSE(cpu_readable(hptr(d)));
    EXPECT_FALSE(cpu_readable(hptr(d + 4095)));
    EXPECT_TRUE(seen.insert(d).second) << "address reused";
    ASSERT_EQ(D.MemFree(d), 0);
    EXPECT_FALSE(cpu_readable(hptr(d)));
  }
}

TEST_F(Driver, DereferencingDeviceMemoryCrashes) {
  NEEDS_FAKE();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  gc::CUdeviceptr d = alloc(64);
  EXPECT_DEATH(*static_cast<volatile char*>(hptr(d)) = 1, "");
  EXPECT_EQ(D.MemFree(d), 0);
}

TEST_F(Driver, PinnedHostMemory) {
  size_t before = fake() ? F.fakecuda_live_pinned_bytes() : 0;
  void* p = nullptr;
  ASSERT_EQ(D.MemHostAlloc(&p, 10000, CU_MEMHOSTALLOC_PORTABLE), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4096, 0u);
  std::memset(p, 7, 10000);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_live_pinned_bytes(), before + 10000);
    // An inaccessible page follows the allocation.
    EXPECT_FALSE(cpu_readable(static_cast<char*>(p) + 12288));
  }
  std::vector<char> host(16);
  EXPECT_EQ(D.MemFreeHost(static_cast<char*>(p) + 8), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemFreeHost(host.data()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemFreeHost(nullptr), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_live_pinned_bytes(), before);
  }
  void* q = nullptr;
  EXPECT_EQ(X.cuMemAllocHost_v2(&q, 100), 0);
  EXPECT_EQ(D.MemFreeHost(q), 0);
}

TEST_F(Driver, HostRegistration) {
  size_t before = fake() ? F.fakecuda_live_registered_bytes() : 0;
  const size_t len = 4 << 20;
  char* r = static_cast<char*>(::mmap(nullptr, len, PROT_READ | PROT_WRITE,
                                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(r, MAP_FAILED);
  EXPECT_EQ(D.MemHostRegister(nullptr, 4096, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemHostRegister(r, 0, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(D.MemHostRegister(r, 1 << 20, 0), 0);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_live_registered_bytes(), before + (1 << 20));
  }
  EXPECT_EQ(D.MemHostRegister(r, 1 << 20, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(D.MemHostRegister(r + 4096, 1 << 20, 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
  EXPECT_EQ(D.MemHostRegister(r + (1 << 20), 4096, 0), 0) << "adjacent is fine";
  EXPECT_EQ(D.MemHostUnregister(r + 4096), CUDA_ERROR_INVALID_VALUE) << "interior pointer";
  EXPECT_EQ(D.MemHostUnregister(r), 0);
  EXPECT_EQ(D.MemHostUnregister(r), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);
  EXPECT_EQ(D.MemHostUnregister(r + (1 << 20)), 0);
  // Unaligned ranges are allowed.
  EXPECT_EQ(D.MemHostRegister(r + 100, 5000, 0), 0);
  EXPECT_EQ(D.MemHostUnregister(r + 100), 0);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_live_registered_bytes(), before);
  }
  // cuMemHostAlloc memory cannot be registered again.
  void* p = pinned(8192);
  EXPECT_EQ(D.MemHostRegister(p, 4096, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  ::munmap(r, len);
}

TEST_F(Driver, ManagedMemory) {
  gc::CUdeviceptr m = 0;
  EXPECT_EQ(X.cuMemAllocManaged(&m, 4096, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(X.cuMemAllocManaged(&m, 0, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(X.cuMemAllocManaged(&m, 10000, CU_MEM_ATTACH_GLOBAL), 0);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_live_managed_bytes(), 10000u);
  }
  auto* c = static_cast<char*>(hptr(m));
  c[0] = 1;
  c[9999] = 2;
  std::vector<char> out(10000);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), m, 10000), 0);
  EXPECT_EQ(out[0], 1);
  EXPECT_EQ(out[9999], 2);
  unsigned type = 0;
  unsigned managed = 0;
  int attrs[] = {gc::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, gc::CU_POINTER_ATTRIBUTE_IS_MANAGED};
  void* data[] = {&type, &managed};
  ASSERT_EQ(D.PointerGetAttributes(2, attrs, data, m + 100), 0);
  EXPECT_EQ(type, gc::CU_MEMORYTYPE_DEVICE);
  EXPECT_EQ(managed, 1u);
  ASSERT_EQ(D.MemFree(m), 0);
  if (fake()) {
    EXPECT_FALSE(cpu_readable(c)) << "freed managed memory stays inaccessible";
    EXPECT_EQ(F.fakecuda_live_managed_bytes(), 0u);
  }
}

// ---------------------------------------------------------------------------------------------
// Pointer attributes

struct Attrs {
  gc::CUcontext ctx = reinterpret_cast<gc::CUcontext>(0x77);
  unsigned type = 77;
  unsigned managed = 77;
  int ordinal = 77;
  gc::CUdeviceptr start = 77;
  size_t size = 77;
};

Attrs attributes(const gc::Driver& D, gc::CUdeviceptr p, int* result = nullptr) {
  Attrs a;
  int attrs[] = {gc::CU_POINTER_ATTRIBUTE_CONTEXT,        gc::CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                 gc::CU_POINTER_ATTRIBUTE_IS_MANAGED,     gc::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                 gc::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, gc::CU_POINTER_ATTRIBUTE_RANGE_SIZE};
  void* data[] = {&a.ctx, &a.type, &a.managed, &a.ordinal, &a.start, &a.size};
  int r = D.PointerGetAttributes(6, attrs, data, p);
  if (result) *result = r;
  return a;
}

void expect_known(const Attrs& a, gc::CUcontext ctx, unsigned type, gc::CUdeviceptr base,
                  size_t size, const char* what) {
  SCOPED_TRACE(what);
  EXPECT_EQ(a.ctx, ctx);
  EXPECT_EQ(a.type, type);
  EXPECT_EQ(a.managed, 0u);
  EXPECT_EQ(a.ordinal, 0);
  EXPECT_EQ(a.start, base);
  EXPECT_EQ(a.size, size);
}

void expect_unknown(const gc::Driver& D, gc::CUdeviceptr p, const char* what) {
  SCOPED_TRACE(what);
  int r = -1;
  Attrs a = attributes(D, p, &r);
  EXPECT_EQ(r, 0) << "unknown memory is not an error";
  EXPECT_EQ(a.ctx, nullptr);
  EXPECT_EQ(a.type, 0u);
  EXPECT_EQ(a.managed, 0u);
  EXPECT_EQ(a.ordinal, -2);
  // The real driver leaves range start and size untouched for memory it does not know.
  EXPECT_EQ(a.start, 77u);
  EXPECT_EQ(a.size, 77u);
}

TEST_F(Driver, PointerAttributesOfKnownMemory) {
  const size_t n = (1 << 20) + 100;
  gc::CUdeviceptr d = alloc(n);
  void* p = pinned(1 << 20);
  std::vector<char> reg_buf(2 << 20);
  char* r = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(reg_buf.data()) + 4095) / 4096 * 4096);
  ASSERT_EQ(D.MemHostRegister(r, 1 << 20, 0), 0);
  int res = -1;
  expect_known(attributes(D, d, &res), ctx, gc::CU_MEMORYTYPE_DEVICE, d, n, "device base");
  EXPECT_EQ(res, 0);
  expect_known(attributes(D, d + 100), ctx, gc::CU_MEMORYTYPE_DEVICE, d, n, "device interior");
  expect_known(attributes(D, d + n - 1), ctx, gc::CU_MEMORYTYPE_DEVICE, d, n, "device last byte");
  expect_known(attributes(D, dptr(p)), ctx, gc::CU_MEMORYTYPE_HOST, dptr(p), 1 << 20, "pinned");
  expect_known(attributes(D, dptr(p) + 100), ctx, gc::CU_MEMORYTYPE_HOST, dptr(p), 1 << 20,
               "pinned interior");
  expect_known(attributes(D, dptr(r) + 100), ctx, gc::CU_MEMORYTYPE_HOST, dptr(r), 1 << 20,
               "registered interior");
  expect_unknown(D, d + n, "one past the device allocation");
  expect_unknown(D, dptr(r) + (1 << 20), "one past the registration");

  // Sizes written: 4 bytes for type, managed flag and ordinal; 8 for pointers and sizes.
  for (auto [a, bytes] : {std::pair{gc::CU_POINTER_ATTRIBUTE_MEMORY_TYPE, 4},
                          {gc::CU_POINTER_ATTRIBUTE_IS_MANAGED, 4},
                          {gc::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, 4},
                          {gc::CU_POINTER_ATTRIBUTE_CONTEXT, 8},
                          {gc::CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, 8},
                          {gc::CU_POINTER_ATTRIBUTE_RANGE_SIZE, 8}}) {
    int attr = a;
    unsigned char buf[16];
    std::memset(buf, 0xA5, sizeof buf);
    void* data = buf;
    ASSERT_EQ(D.PointerGetAttributes(1, &attr, &data, d + 5), 0);
    int written = 0;
    for (int i = 0; i < 16; ++i)
      if (buf[i] != 0xA5) written = i + 1;
    EXPECT_LE(written, bytes) << "attribute " << attr;
    EXPECT_EQ(buf[bytes], 0xA5) << "attribute " << attr;
  }

  gc::CUdeviceptr base = 0;
  size_t size = 0;
  EXPECT_EQ(X.cuMemGetAddressRange_v2(&base, &size, d + 7), 0);
  EXPECT_EQ(base, d);
  EXPECT_EQ(size, n);
  EXPECT_EQ(X.cuMemGetAddressRange_v2(&base, &size, dptr(reg_buf.data() + reg_buf.size() - 1)),
            CUDA_ERROR_NOT_FOUND);

  EXPECT_EQ(D.MemHostUnregister(r), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

TEST_F(Driver, PointerAttributesOfUnknownMemory) {
  std::vector<char> heap(4096);
  int on_stack = 0;
  gc::CUdeviceptr d = alloc(4096);
  ASSERT_EQ(D.MemFree(d), 0);
  void* p = pinned(4096);
  ASSERT_EQ(D.MemFreeHost(p), 0);
  expect_unknown(D, dptr(heap.data()), "malloc");
  expect_unknown(D, dptr(&on_stack), "stack");
  expect_unknown(D, 0, "NULL");
  expect_unknown(D, 0x1234, "garbage");
  expect_unknown(D, d, "freed device memory");
  expect_unknown(D, dptr(p), "freed pinned memory");
  unsigned type = 9;
  EXPECT_EQ(X.cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dptr(heap.data())),
            CUDA_ERROR_INVALID_VALUE)
      << "the singular form does fail";
}

TEST_F(Driver, PointerAttributesBadArguments) {
  gc::CUdeviceptr d = alloc(64);
  unsigned type;
  int attr = gc::CU_POINTER_ATTRIBUTE_MEMORY_TYPE;
  void* data = &type;
  EXPECT_EQ(D.PointerGetAttributes(0, &attr, &data, d), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.PointerGetAttributes(1, nullptr, &data, d), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.PointerGetAttributes(1, &attr, nullptr, d), CUDA_ERROR_INVALID_VALUE);
  int p2p = CU_POINTER_ATTRIBUTE_P2P_TOKENS;
  EXPECT_EQ(D.PointerGetAttributes(1, &p2p, &data, d), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemFree(d), 0);
}

// ---------------------------------------------------------------------------------------------
// Copies

std::vector<unsigned char> pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>(i * 31 + seed);
  return v;
}

TEST_F(Driver, SynchronousCopies) {
  const size_t n = (1 << 20) + 7;
  auto src = pattern(n, 1);
  std::vector<unsigned char> out(n);
  gc::CUdeviceptr d = alloc(n), d2 = alloc(n);
  ASSERT_EQ(D.MemcpyHtoD(d, src.data(), n), 0);
  ASSERT_EQ(X.cuMemcpyDtoD_v2(d2, d, n), 0);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d2, n), 0);
  EXPECT_EQ(out, src);
  // Unified copies, interior offsets.
  std::fill(out.begin(), out.end(), 0);
  ASSERT_EQ(X.cuMemcpy(dptr(out.data()), d + 1000, 5000), 0);
  EXPECT_EQ(std::memcmp(out.data(), src.data() + 1000, 5000), 0);
  ASSERT_EQ(X.cuMemcpy(d + 3, dptr(src.data() + 50), 100), 0);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d + 3, 100), 0);
  EXPECT_EQ(std::memcmp(out.data(), src.data() + 50, 100), 0);
  // A device pointer is fine as the host side (unified addressing).
  ASSERT_EQ(D.MemcpyHtoD(d2, hptr(d + 2000), 64), 0);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d2, 64), 0);
  EXPECT_EQ(std::memcmp(out.data(), src.data() + 2000, 64), 0);
  // Pinned memory is fine as the device side.
  void* p = pinned(4096);
  ASSERT_EQ(D.MemcpyHtoD(dptr(p), src.data(), 4096), 0);
  EXPECT_EQ(std::memcmp(p, src.data(), 4096), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
  EXPECT_EQ(D.MemFree(d2), 0);
}

TEST_F(Driver, InvalidCopiesFailAndCopyNothing) {
  const size_t n = 1 << 20;
  auto src = pattern(n, 3);
  std::vector<unsigned char> out(n, 0);
  gc::CUdeviceptr d = alloc(n);
  ASSERT_EQ(D.MemcpyHtoD(d, src.data(), n), 0);
  std::vector<unsigned char> other(n, 0xEE);
  EXPECT_EQ(D.MemcpyHtoD(d + 1, other.data(), n), CUDA_ERROR_INVALID_VALUE) << "overflow by one";
  EXPECT_EQ(D.MemcpyDtoH(out.data(), d + n - 8, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemcpyHtoD(0x1234, other.data(), 16), CUDA_ERROR_INVALID_VALUE) << "garbage";
  EXPECT_EQ(D.MemcpyHtoD(dptr(out.data()), other.data(), 16), CUDA_ERROR_INVALID_VALUE)
      << "malloc memory as the device side";
  EXPECT_EQ(D.MemcpyDtoH(out.data(), dptr(other.data()), 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(X.cuMemcpy(d + 8, dptr(other.data()), n), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemcpyHtoD(0x1234, other.data(), 0), 0) << "nothing to copy";
  void* p = pinned(n);
  gc::CUstream s = stream();
  EXPECT_EQ(D.MemcpyHtoDAsync(d + 1, p, n, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.MemcpyDtoHAsync(p, d + 1, n, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(X.cuMemcpyAsync(d + 1, dptr(p), n, cu(s)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(D.StreamSynchronize(s), 0);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d, n), 0);
  EXPECT_EQ(out, src) << "a failed copy changed device memory";
  if (fake()) {
    // Stricter than the real driver, which lets these land in its allocator's slack.
    gc::CUdeviceptr freed = alloc(4096);
    ASSERT_EQ(D.MemFree(freed), 0);
    EXPECT_EQ(D.MemcpyHtoD(freed, other.data(), 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(D.MemcpyDtoH(out.data(), freed, 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(X.cuMemcpy(freed, dptr(other.data()), 16), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(X.cuMemcpy(dptr(out.data()), freed, 16), CUDA_ERROR_INVALID_VALUE)
        << "freed device memory is not host memory";
    EXPECT_EQ(D.MemcpyHtoDAsync(freed, p, 16, s), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(D.MemcpyHtoD(d + n, other.data(), 1), CUDA_ERROR_INVALID_VALUE) << "one past end";
  }
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

TEST_F(Driver, Memset) {
  const size_t n = 1 << 16;
  gc::CUdeviceptr d = alloc(n);
  ASSERT_EQ(X.cuMemsetD8_v2(d, 0x5A, n), 0);
  std::vector<unsigned char> out(n);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d, n), 0) << "ordered after the memset (legacy stream)";
  EXPECT_EQ(out, std::vector<unsigned char>(n, 0x5A));
  EXPECT_EQ(X.cuMemsetD8_v2(d + 1, 0, n), CUDA_ERROR_INVALID_VALUE);
  gc::CUstream s = stream();
  ASSERT_EQ(X.cuMemsetD8Async(d + 100, 1, 10, cu(s)), 0);
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d, n), 0);
  EXPECT_EQ(out[99], 0x5A);
  EXPECT_EQ(out[100], 1);
  EXPECT_EQ(out[109], 1);
  EXPECT_EQ(out[110], 0x5A);
  void* p = pinned(64);
  ASSERT_EQ(X.cuMemsetD8_v2(dptr(p), 9, 64), 0);
  EXPECT_EQ(static_cast<unsigned char*>(p)[63], 9) << "pinned memset is done on return";
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

// A pitched copy: `height` rows of `width` bytes, `spitch` apart in the source and `dpitch` in
// the destination (UNIFIED: any memory the pointers name).
gc::CUDA_MEMCPY2D pitched(gc::CUdeviceptr dst, size_t dpitch, gc::CUdeviceptr src, size_t spitch,
                          size_t width, size_t height) {
  gc::CUDA_MEMCPY2D c;
  c.dstMemoryType = c.srcMemoryType = gc::CU_MEMORYTYPE_UNIFIED;
  c.dstDevice = dst;
  c.dstPitch = dpitch;
  c.srcDevice = src;
  c.srcPitch = spitch;
  c.WidthInBytes = width;
  c.Height = height;
  return c;
}

TEST_F(Driver, PitchedCopies) {
  const size_t rows = 100, width = 24, spitch = 40, dpitch = 64;
  auto src = pattern(rows * spitch, 5);
  gc::CUdeviceptr d = alloc(rows * spitch), d2 = alloc(rows * dpitch);
  ASSERT_EQ(D.MemcpyHtoD(d, src.data(), src.size()), 0);
  std::vector<unsigned char> zeros(rows * dpitch, 0), out(rows * dpitch);
  ASSERT_EQ(D.MemcpyHtoD(d2, zeros.data(), zeros.size()), 0);
  // A blocking stream: ordered after the legacy stream, where those copies from pageable memory
  // may still be landing.
  gc::CUstream s = stream();
  // Device to device, with an offset (x, y) into the source given in the description.
  gc::CUDA_MEMCPY2D c = pitched(d2, dpitch, d, spitch, width, rows - 1);
  c.srcMemoryType = c.dstMemoryType = gc::CU_MEMORYTYPE_DEVICE;
  c.srcXInBytes = 3;
  c.srcY = 1;
  ASSERT_EQ(D.Memcpy2DAsync(&c, s), 0);
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d2, out.size()), 0);
  for (size_t r = 0; r < rows - 1; ++r) {
    ASSERT_EQ(std::memcmp(out.data() + r * dpitch, src.data() + (r + 1) * spitch + 3, width), 0) << r;
    ASSERT_EQ(out[r * dpitch + width], 0) << "nothing between the rows is written, row " << r;
  }
  EXPECT_EQ(out[(rows - 1) * dpitch], 0) << "no row past Height";
  // Device to pageable host (the call waits) and pageable host to device (staged at the call).
  std::vector<unsigned char> host(rows * width);
  c = pitched(dptr(host.data()), width, d, spitch, width, rows);
  c.dstMemoryType = gc::CU_MEMORYTYPE_HOST;
  c.dstHost = host.data();
  ASSERT_EQ(D.Memcpy2DAsync(&c, s), 0);
  for (size_t r = 0; r < rows; ++r)
    ASSERT_EQ(std::memcmp(host.data() + r * width, src.data() + r * spitch, width), 0) << r;
  std::vector<unsigned char> up = pattern(rows * width, 9);
  c = pitched(d2, dpitch, dptr(up.data()), width, width, rows);
  ASSERT_EQ(D.Memcpy2DAsync(&c, s), 0);
  std::fill(up.begin(), up.end(), 0);
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d2, out.size()), 0);
  auto expected = pattern(rows * width, 9);
  for (size_t r = 0; r < rows; ++r)
    ASSERT_EQ(std::memcmp(out.data() + r * dpitch, expected.data() + r * width, width), 0) << r;
  // Nothing to copy is no error.
  c = pitched(0, 0, 0, 0, 0, 0);
  EXPECT_EQ(D.Memcpy2DAsync(&c, s), 0);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFree(d), 0);
  EXPECT_EQ(D.MemFree(d2), 0);
}

TEST_F(Driver, InvalidPitchedCopiesFailAndCopyNothing) {
  const size_t rows = 10, width = 16, pitch = 32;
  gc::CUdeviceptr d = alloc(rows * pitch), d2 = alloc(rows * pitch);
  auto src = pattern(rows * pitch, 1);
  std::vector<unsigned char> zeros(rows * pitch, 0), out(rows * pitch);
  ASSERT_EQ(D.MemcpyHtoD(d, src.data(), src.size()), 0);
  ASSERT_EQ(D.MemcpyHtoD(d2, zeros.data(), zeros.size()), 0);
  gc::CUstream s = stream();
  gc::CUDA_MEMCPY2D c = pitched(d2, pitch, d, pitch, width, rows);
  c.dstPitch = width - 1;
  // The double says CUDA_ERROR_INVALID_VALUE; which error the driver gives is not probed yet.
  const gc::CUresult below = D.Memcpy2DAsync(&c, s);
  EXPECT_NE(below, CUDA_SUCCESS) << "pitch below the width";
  if (fake()) EXPECT_EQ(below, CUDA_ERROR_INVALID_VALUE);
  int max_pitch = 0;
  ASSERT_EQ(D.DeviceGetAttribute(&max_pitch, gc::CU_DEVICE_ATTRIBUTE_MAX_PITCH, 0), 0);
  EXPECT_GT(max_pitch, 0);
  if (fake()) {  // not asked of the driver: no probe recorded what it does with these
    EXPECT_EQ(D.Memcpy2DAsync(nullptr, s), CUDA_ERROR_INVALID_VALUE);
    c = pitched(d2, size_t(max_pitch) + 1, d, pitch, width, 1);
    EXPECT_EQ(D.Memcpy2DAsync(&c, s), CUDA_ERROR_INVALID_VALUE) << "pitch above the maximum";
    c = pitched(d2, pitch, d, pitch, width, rows + 1);
    EXPECT_EQ(D.Memcpy2DAsync(&c, s), CUDA_ERROR_INVALID_VALUE) << "last row past the source";
    c = pitched(d2, pitch, d, pitch, width, rows);
    c.srcMemoryType = 7;
    EXPECT_EQ(D.Memcpy2DAsync(&c, s), CUDA_ERROR_INVALID_VALUE) << "no such memory type";
    c = pitched(d2, pitch, dptr(src.data()), pitch, width, rows);
    c.srcMemoryType = gc::CU_MEMORYTYPE_DEVICE;
    EXPECT_EQ(D.Memcpy2DAsync(&c, s), CUDA_ERROR_INVALID_VALUE) << "malloc memory as DEVICE";
    c = pitched(d2, pitch, d, pitch, width, rows);
    c.srcMemoryType = gc::CU_MEMORYTYPE_ARRAY;
    c.srcArray = reinterpret_cast<gc::CUarray>(0x10);
    EXPECT_EQ(D.Memcpy2DAsync(&c, s), CUDA_ERROR_NOT_SUPPORTED);
  }
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d2, out.size()), 0);
  EXPECT_EQ(out, zeros) << "a refused copy copies nothing";
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFree(d), 0);
  EXPECT_EQ(D.MemFree(d2), 0);
}

// ---------------------------------------------------------------------------------------------
// Streams, events, host functions

TEST_F(Driver, AsyncCopyFromPinnedReadsTheSourceWhenItRuns) {
  const size_t n = 1 << 20;
  gc::CUdeviceptr d = alloc(n);
  auto* p = static_cast<unsigned char*>(pinned(n));
  gc::CUstream s = stream(gc::CU_STREAM_NON_BLOCKING);
  Gate gate;
  std::memset(p, 1, n);
  ASSERT_EQ(D.LaunchHostFunc(s, Gate::hold, &gate), 0);
  ASSERT_EQ(D.MemcpyHtoDAsync(d, p, n, s), 0);
  EXPECT_EQ(X.cuStreamQuery(cu(s)), CUDA_ERROR_NOT_READY);
  std::memset(p, 2, n);  // a staging buffer reused too early
  gate.release();
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  EXPECT_EQ(X.cuStreamQuery(cu(s)), CUDA_SUCCESS);
  std::vector<unsigned char> out(n);
  ASSERT_EQ(D.MemcpyDtoH(out.data(), d, n), 0);
  EXPECT_EQ(out[0], 2);
  EXPECT_EQ(out[n - 1], 2);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

TEST_F(Driver, AsyncCopyFromPageableIsStagedAtTheCall) {
  const size_t n = 1 << 20;
  gc::CUdeviceptr d = alloc(n);
  std::vector<unsigned char> h(n, 1);
  gc::CUstream s = stream(gc::CU_STREAM_NON_BLOCKING);
  Gate gate;
  ASSERT_EQ(D.LaunchHostFunc(s, Gate::hold, &gate), 0);
  ASSERT_EQ(D.MemcpyHtoDAsync(d, h.data(), n, s), 0) << "returns although the stream is held";
  std::fill(h.begin(), h.end(), 2);
  gate.release();
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  ASSERT_EQ(D.MemcpyDtoH(h.data(), d, n), 0);
  EXPECT_EQ(h[0], 1);
  EXPECT_EQ(h[n - 1], 1);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

TEST_F(Driver, AsyncCopyToPinnedCompletesLaterAndToPageableWaits) {
  const size_t n = 1 << 16;
  auto src = pattern(n, 9);
  gc::CUdeviceptr d = alloc(n);
  ASSERT_EQ(D.MemcpyHtoD(d, src.data(), n), 0);
  // From pageable memory the copy may land after the call returned, ordered only on the legacy
  // stream: the non-blocking stream below would not wait for it.
  ASSERT_EQ(D.StreamSynchronize(nullptr), 0);
  auto* p = static_cast<unsigned char*>(pinned(n));
  std::memset(p, 0, n);
  gc::CUstream s = stream(gc::CU_STREAM_NON_BLOCKING);
  {
    Gate gate;
    ASSERT_EQ(D.LaunchHostFunc(s, Gate::hold, &gate), 0);
    ASSERT_EQ(D.MemcpyDtoHAsync(p, d, n, s), 0);
    EXPECT_EQ(p[1], 0) << "copied before the stream got to it";
    gate.release();
    ASSERT_EQ(D.StreamSynchronize(s), 0);
    EXPECT_EQ(std::memcmp(p, src.data(), n), 0);
  }
  {
    Gate gate;
    std::vector<unsigned char> h(n, 0);
    ASSERT_EQ(D.LaunchHostFunc(s, Gate::hold, &gate), 0);
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.release();
    });
    auto t0 = std::chrono::steady_clock::now();
    ASSERT_EQ(D.MemcpyDtoHAsync(h.data(), d, n, s), 0);
    EXPECT_GE(seconds_since(t0), 0.09) << "a copy to pageable memory returns when done";
    EXPECT_EQ(h, src);
    opener.join();
  }
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

TEST_F(Driver, StreamRunsInOrderOnItsOwnThread) {
  gc::CUstream s = stream();
  Trace trace;
  std::vector<TraceItem> items;
  for (int i = 0; i < 100; ++i) items.push_back(TraceItem{&trace, i});
  gc::CUdeviceptr d = alloc(4096);
  auto* p = static_cast<unsigned char*>(pinned(4096));
  for (int i = 0; i < 100; ++i) {
    ASSERT_EQ(D.LaunchHostFunc(s, trace_fn, &items[static_cast<size_t>(i)]), 0);
    if (i % 10 == 0) {
      ASSERT_EQ(D.MemcpyHtoDAsync(d, p, 4096, s), 0);
    }
  }
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  std::vector<int> expect(100);
  for (int i = 0; i < 100; ++i) expect[static_cast<size_t>(i)] = i;
  EXPECT_EQ(trace.order, expect);
  EXPECT_EQ(trace.threads.size(), 1u);
  EXPECT_EQ(trace.threads.count(std::this_thread::get_id()), 0u);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

std::atomic<int> g_inside_result{-1};
const gc::Driver* g_driver = nullptr;
void calls_cuda(void*) {
  gc::CUdeviceptr x = 0;
  g_inside_result = g_driver->MemAlloc(&x, 16);
}

TEST_F(Driver, HostFunctions) {
  gc::CUstream s = stream();
  EXPECT_EQ(D.LaunchHostFunc(s, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  g_driver = &D;
  ASSERT_EQ(D.LaunchHostFunc(s, calls_cuda, nullptr), 0);
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  EXPECT_EQ(g_inside_result.load(), CUDA_ERROR_NOT_PERMITTED) << "no CUDA calls in host functions";
  // Later work waits for a host function to return.
  Gate gate;
  gc::CUevent e = nullptr;
  ASSERT_EQ(D.EventCreate(&e, gc::CU_EVENT_DISABLE_TIMING), 0);
  ASSERT_EQ(D.LaunchHostFunc(s, Gate::hold, &gate), 0);
  ASSERT_EQ(D.EventRecord(e, s), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(D.EventQuery(e), CUDA_ERROR_NOT_READY);
  gate.release();
  EXPECT_EQ(D.EventSynchronize(e), 0);
  EXPECT_EQ(D.EventQuery(e), 0);
  EXPECT_EQ(D.EventDestroy(e), 0);
  EXPECT_EQ(D.StreamDestroy(s), 0);
}

TEST_F(Driver, Events) {
  gc::CUevent e = nullptr, e2 = nullptr;
  ASSERT_EQ(D.EventCreate(&e, 0), 0);
  ASSERT_EQ(D.EventCreate(&e2, gc::CU_EVENT_DISABLE_TIMING), 0);
  EXPECT_EQ(D.EventQuery(e), 0) << "never recorded counts as complete";
  EXPECT_EQ(D.EventSynchronize(e), 0);
  gc::CUstream a = stream(gc::CU_STREAM_NON_BLOCKING), b = stream(gc::CU_STREAM_NON_BLOCKING);
  Gate gate;
  ASSERT_EQ(D.LaunchHostFunc(a, Gate::hold, &gate), 0);
  ASSERT_EQ(D.EventRecord(e, a), 0);
  EXPECT_EQ(D.EventQuery(e), CUDA_ERROR_NOT_READY);
  // b waits for e, so an event recorded on b after the wait is not ready either.
  ASSERT_EQ(X.cuStreamWaitEvent(cu(b), cu(e), 0), 0);
  ASSERT_EQ(D.EventRecord(e2, b), 0);
  EXPECT_EQ(D.EventQuery(e2), CUDA_ERROR_NOT_READY);
  // Re-recording an event moves it: e2 on an idle stream is ready... once b is done.
  gate.release();
  EXPECT_EQ(D.EventSynchronize(e2), 0);
  EXPECT_EQ(D.EventQuery(e), 0);
  EXPECT_EQ(D.EventQuery(e2), 0);
  // Destroying an event whose work is pending is fine.
  Gate gate2;
  ASSERT_EQ(D.LaunchHostFunc(a, Gate::hold, &gate2), 0);
  ASSERT_EQ(D.EventRecord(e, a), 0);
  EXPECT_EQ(D.EventDestroy(e), 0);
  gate2.release();
  EXPECT_EQ(D.StreamSynchronize(a), 0);
  EXPECT_EQ(D.EventDestroy(e2), 0);
  EXPECT_EQ(D.StreamDestroy(a), 0);
  EXPECT_EQ(D.StreamDestroy(b), 0);
  if (fake()) {
    EXPECT_EQ(D.EventQuery(e), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(D.StreamSynchronize(a), CUDA_ERROR_INVALID_HANDLE);
  }
}

// The legacy default stream: ordered against blocking streams, not against non-blocking ones.
TEST_F(Driver, LegacyDefaultStream) {
  gc::CUdeviceptr d = alloc(64);
  std::vector<char> h(64, 1);
  gc::CUstream blocking = stream(0), nonblocking = stream(gc::CU_STREAM_NON_BLOCKING);
  gc::CUevent e = nullptr;
  ASSERT_EQ(D.EventCreate(&e, gc::CU_EVENT_DISABLE_TIMING), 0);
  {
    Gate gate;
    ASSERT_EQ(D.LaunchHostFunc(nonblocking, Gate::hold, &gate), 0);
    EXPECT_EQ(D.MemcpyHtoD(d, h.data(), 64), 0) << "does not wait for a non-blocking stream";
    EXPECT_EQ(D.StreamSynchronize(nullptr), 0);
    EXPECT_EQ(X.cuStreamQuery(nullptr), CUDA_SUCCESS);
    ASSERT_EQ(D.EventRecord(e, nullptr), 0);
    EXPECT_EQ(D.EventQuery(e), CUDA_SUCCESS);
    gate.release();
    ASSERT_EQ(X.cuCtxSynchronize(), 0);
  }
  {
    Gate gate;
    ASSERT_EQ(D.LaunchHostFunc(blocking, Gate::hold, &gate), 0);
    EXPECT_EQ(X.cuStreamQuery(nullptr), CUDA_ERROR_NOT_READY);
    ASSERT_EQ(D.EventRecord(e, nullptr), 0);
    EXPECT_EQ(D.EventQuery(e), CUDA_ERROR_NOT_READY);
    std::atomic<bool> copied{false};
    std::thread t([&] {
      EXPECT_EQ(D.CtxSetCurrent(ctx), 0);
      EXPECT_EQ(D.MemcpyHtoD(d, h.data(), 64), 0);
      copied = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(copied.load()) << "a synchronous copy waits for blocking streams";
    gate.release();
    t.join();
    EXPECT_TRUE(copied.load());
  }
  {
    // Work on a blocking stream waits for the legacy stream.
    Gate gate;
    ASSERT_EQ(D.LaunchHostFunc(nullptr, Gate::hold, &gate), 0);
    ASSERT_EQ(D.EventRecord(e, blocking), 0);
    EXPECT_EQ(D.EventQuery(e), CUDA_ERROR_NOT_READY);
    ASSERT_EQ(D.EventRecord(e, nonblocking), 0);
    EXPECT_EQ(D.EventQuery(e), CUDA_SUCCESS);
    gate.release();
    ASSERT_EQ(X.cuCtxSynchronize(), 0);
  }
  {
    // cuCtxSynchronize waits for everything.
    Gate gate;
    ASSERT_EQ(D.LaunchHostFunc(nonblocking, Gate::hold, &gate), 0);
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.release();
    });
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_EQ(X.cuCtxSynchronize(), 0);
    EXPECT_GE(seconds_since(t0), 0.09);
    opener.join();
  }
  EXPECT_EQ(D.EventDestroy(e), 0);
  EXPECT_EQ(D.StreamDestroy(blocking), 0);
  EXPECT_EQ(D.StreamDestroy(nonblocking), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

TEST_F(Driver, StreamDestroyReturnsAtOnceAndTheWorkStillRuns) {
  gc::CUstream s = stream();
  Gate gate;
  Trace trace;
  TraceItem item{&trace, 7};
  ASSERT_EQ(D.LaunchHostFunc(s, Gate::hold, &gate), 0);
  ASSERT_EQ(D.LaunchHostFunc(s, trace_fn, &item), 0);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  if (fake()) {
    EXPECT_EQ(D.StreamDestroy(s), CUDA_ERROR_INVALID_HANDLE);
  }
  gate.release();
  ASSERT_EQ(X.cuCtxSynchronize(), 0);
  std::lock_guard lk(trace.m);
  EXPECT_EQ(trace.order, std::vector<int>{7});
}

TEST_F(Driver, FreeingWaitsForQueuedWork) {
  gc::CUdeviceptr d = alloc(4096);
  void* p = pinned(4096);
  gc::CUstream s = stream(gc::CU_STREAM_NON_BLOCKING);
  for (int which = 0; which < 2; ++which) {
    Gate gate;
    ASSERT_EQ(D.LaunchHostFunc(s, Gate::hold, &gate), 0);
    std::thread opener([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      gate.release();
    });
    auto t0 = std::chrono::steady_clock::now();
    if (which == 0)
      EXPECT_EQ(D.MemFree(d), 0);
    else
      EXPECT_EQ(D.MemFreeHost(p), 0);
    EXPECT_GE(seconds_since(t0), 0.09) << (which == 0 ? "cuMemFree" : "cuMemFreeHost");
    opener.join();
  }
  EXPECT_EQ(D.StreamDestroy(s), 0);
}

TEST_F(Driver, AsyncDelayWidensTheWindow) {
  NEEDS_FAKE();
  F.fakecuda_set_async_delay_us(50000);
  gc::CUdeviceptr d = alloc(4096);
  void* p = pinned(4096);
  gc::CUstream s = stream(gc::CU_STREAM_NON_BLOCKING);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(D.MemcpyHtoDAsync(d, p, 4096, s), 0);
  EXPECT_LT(seconds_since(t0), 0.04);
  EXPECT_EQ(X.cuStreamQuery(cu(s)), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(D.StreamSynchronize(s), 0);
  EXPECT_GE(seconds_since(t0), 0.045);
  F.fakecuda_set_async_delay_us(0);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

// ---------------------------------------------------------------------------------------------
// Fault injection and counters

TEST_F(Driver, FailTheNthCall) {
  NEEDS_FAKE();
  EXPECT_EQ(F.fakecuda_fail_call("cuNoSuchThing", 1, 2), -1);
  EXPECT_EQ(F.fakecuda_fail_call("cuMemHostAlloc", -1, 2), -1);
  ASSERT_EQ(F.fakecuda_fail_call("cuMemHostAlloc", 2, CUDA_ERROR_OUT_OF_MEMORY), 0);
  unsigned long long calls = F.fakecuda_call_count("cuMemHostAlloc");
  size_t before = F.fakecuda_live_pinned_bytes();
  void* a = nullptr;
  void* b = reinterpret_cast<void*>(1);
  void* c = nullptr;
  EXPECT_EQ(D.MemHostAlloc(&a, 4096, 0), 0);
  EXPECT_EQ(D.MemHostAlloc(&b, 4096, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(b, reinterpret_cast<void*>(1)) << "a failed call has no effect";
  EXPECT_EQ(D.MemHostAlloc(&c, 4096, 0), 0);
  EXPECT_EQ(F.fakecuda_call_count("cuMemHostAlloc"), calls + 3);
  EXPECT_EQ(F.fakecuda_live_pinned_bytes(), before + 8192);
  EXPECT_EQ(D.MemFreeHost(a), 0);
  EXPECT_EQ(D.MemFreeHost(c), 0);
  EXPECT_EQ(F.fakecuda_live_pinned_bytes(), before);

  // Names without the _v2 suffix match; nth == 0 fails every call until reset.
  ASSERT_EQ(F.fakecuda_fail_call("cuMemAlloc", 0, CUDA_ERROR_OUT_OF_MEMORY), 0);
  gc::CUdeviceptr d = 0;
  EXPECT_EQ(D.MemAlloc(&d, 16), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(D.MemAlloc(&d, 16), CUDA_ERROR_OUT_OF_MEMORY);
  F.fakecuda_reset_faults();
  EXPECT_EQ(D.MemAlloc(&d, 16), 0);
  EXPECT_EQ(D.MemFree(d), 0);

  ASSERT_EQ(F.fakecuda_fail_call_from("cuStreamSynchronize", 2, 999), 0);
  gc::CUstream s = stream();
  EXPECT_EQ(D.StreamSynchronize(s), 0);
  EXPECT_EQ(D.StreamSynchronize(s), 999);
  EXPECT_EQ(D.StreamSynchronize(s), 999);
  F.fakecuda_reset_faults();
  EXPECT_EQ(D.StreamSynchronize(s), 0);
  EXPECT_EQ(D.StreamDestroy(s), 0);

  // Async copies can fail too.
  ASSERT_EQ(F.fakecuda_fail_call("cuMemcpyHtoDAsync_v2", 1, CUDA_ERROR_ILLEGAL_ADDRESS), 0);
  d = alloc(64);
  void* p = pinned(64);
  EXPECT_EQ(D.MemcpyHtoDAsync(d, p, 64, nullptr), CUDA_ERROR_ILLEGAL_ADDRESS);
  EXPECT_EQ(D.MemcpyHtoDAsync(d, p, 64, nullptr), 0);
  EXPECT_EQ(D.MemFreeHost(p), 0);
  EXPECT_EQ(D.MemFree(d), 0);
}

TEST_F(Driver, CountersOfLiveObjects) {
  NEEDS_FAKE();
  int streams = F.fakecuda_live_streams(), events = F.fakecuda_live_events();
  gc::CUstream s = stream();
  gc::CUevent e = nullptr;
  ASSERT_EQ(D.EventCreate(&e, 0), 0);
  EXPECT_EQ(F.fakecuda_live_streams(), streams + 1);
  EXPECT_EQ(F.fakecuda_live_events(), events + 1);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.EventDestroy(e), 0);
  EXPECT_EQ(F.fakecuda_live_streams(), streams);
  EXPECT_EQ(F.fakecuda_live_events(), events);
  EXPECT_EQ(F.fakecuda_sticky_error(), 0);
}

TEST_F(Driver, ManyThreadsAtOnce) {
  size_t dev0 = fake() ? F.fakecuda_live_device_bytes() : 0;
  size_t pin0 = fake() ? F.fakecuda_live_pinned_bytes() : 0;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (D.CtxSetCurrent(ctx) != 0) ++failures;
      gc::CUstream s = nullptr;
      if (D.StreamCreate(&s, t % 2 ? gc::CU_STREAM_NON_BLOCKING : 0) != 0) ++failures;
      for (int i = 0; i < 50; ++i) {
        const size_t n = 4096 * static_cast<size_t>(1 + (i % 7));
        auto src = pattern(n, static_cast<unsigned>(t * 100 + i));
        gc::CUdeviceptr d = 0;
        void* p = nullptr;
        if (D.MemAlloc(&d, n) || D.MemHostAlloc(&p, n, 0)) {
          ++failures;
          continue;
        }
        std::memcpy(p, src.data(), n);
        if (D.MemcpyHtoDAsync(d, p, n, s)) ++failures;
        if (D.StreamSynchronize(s)) ++failures;
        std::memset(p, 0, n);
        if (D.MemcpyDtoHAsync(p, d, n, s)) ++failures;
        if (D.StreamSynchronize(s)) ++failures;
        if (std::memcmp(p, src.data(), n) != 0) ++failures;
        if (D.MemFreeHost(p) || D.MemFree(d)) ++failures;
      }
      if (D.StreamDestroy(s)) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  if (fake()) {
    EXPECT_EQ(F.fakecuda_live_device_bytes(), dev0);
    EXPECT_EQ(F.fakecuda_live_pinned_bytes(), pin0);
  }
}

// ---------------------------------------------------------------------------------------------
// Settings read once per process. CTest runs each of these in its own process with the
// environment variable set (tests/support/CMakeLists.txt); elsewhere they skip.

class FakeCudaEnv : public ::testing::Test {
 protected:
  const gc::Driver& D = lib().d;
  const Controls& F = lib().f;
};

#define NEED_ENV(var)                                             \
  do {                                                            \
    if (!std::getenv(var)) GTEST_SKIP() << var << " is not set";  \
    ASSERT_TRUE(lib().handle) << lib().error;                     \
    ASSERT_TRUE(lib().fake);                                      \
  } while (0)

TEST_F(FakeCudaEnv, NoDevice) {
  NEED_ENV("FAKECUDA_NO_DEVICE");
  EXPECT_EQ(lib().init_result, CUDA_ERROR_NO_DEVICE);
  EXPECT_EQ(D.Init(0), CUDA_ERROR_NO_DEVICE);
  int n = 0;
  EXPECT_EQ(D.DeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
}

TEST_F(FakeCudaEnv, Stub) {
  NEED_ENV("FAKECUDA_STUB");
  EXPECT_EQ(lib().init_result, CUDA_ERROR_STUB_LIBRARY);
  const char* s = nullptr;
  EXPECT_EQ(D.GetErrorName(CUDA_ERROR_STUB_LIBRARY, &s), 0);
  EXPECT_STREQ(s, "CUDA_ERROR_STUB_LIBRARY");
}

TEST_F(FakeCudaEnv, TwoDevices) {
  NEED_ENV("FAKECUDA_DEVICES");
  ASSERT_EQ(lib().init_result, 0);
  int n = 0;
  ASSERT_EQ(D.DeviceGetCount(&n), 0);
  ASSERT_EQ(n, 2);
  char name[32];
  ASSERT_EQ(D.DeviceGetName(name, sizeof name, 1), 0);
  EXPECT_STREQ(name, "Fake GPU 1");
  gc::CUuuid a, b;
  ASSERT_EQ(D.DeviceGetUuid(&a, 0), 0);
  ASSERT_EQ(D.DeviceGetUuid(&b, 1), 0);
  EXPECT_NE(std::memcmp(a.bytes, b.bytes, 16), 0);
  int bus0 = -1, bus1 = -1;
  D.DeviceGetAttribute(&bus0, gc::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0);
  D.DeviceGetAttribute(&bus1, gc::CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1);
  EXPECT_NE(bus0, bus1);
  gc::CUcontext c0, c1;
  ASSERT_EQ(D.DevicePrimaryCtxRetain(&c0, 0), 0);
  ASSERT_EQ(D.DevicePrimaryCtxRetain(&c1, 1), 0);
  EXPECT_NE(c0, c1);
  ASSERT_EQ(D.CtxSetCurrent(c1), 0);
  gc::CUdevice dev = -1;
  EXPECT_EQ(D.CtxGetDevice(&dev), 0);
  EXPECT_EQ(dev, 1);
  gc::CUdeviceptr d = 0;
  ASSERT_EQ(D.MemAlloc(&d, 64), 0);
  Attrs at = attributes(D, d);
  EXPECT_EQ(at.ordinal, 1);
  EXPECT_EQ(at.ctx, c1);
  EXPECT_EQ(D.MemFree(d), 0);
  EXPECT_EQ(D.DevicePrimaryCtxRelease(1), 0);
  EXPECT_EQ(D.DevicePrimaryCtxRelease(0), 0);
}

TEST_F(FakeCudaEnv, FailFromEnvironment) {
  NEED_ENV("FAKECUDA_FAIL");
  ASSERT_EQ(lib().init_result, 0);
  gc::CUcontext c;
  ASSERT_EQ(D.DevicePrimaryCtxRetain(&c, 0), 0);
  ASSERT_EQ(D.CtxSetCurrent(c), 0);
  void *a = nullptr, *b = nullptr, *x = nullptr;
  EXPECT_EQ(D.MemHostAlloc(&a, 64, 0), 0);
  EXPECT_EQ(D.MemHostAlloc(&x, 64, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(D.MemHostAlloc(&b, 64, 0), 0);
  gc::CUstream s;
  EXPECT_EQ(D.StreamCreate(&s, 0), 999);
  EXPECT_EQ(D.StreamCreate(&s, 0), 999);
  EXPECT_EQ(D.MemFreeHost(a), 0);
  EXPECT_EQ(D.MemFreeHost(b), 0);
  F.fakecuda_reset_faults();
  EXPECT_EQ(D.StreamCreate(&s, 0), 0);
  EXPECT_EQ(D.StreamDestroy(s), 0);
  EXPECT_EQ(D.DevicePrimaryCtxRelease(0), 0);
}

TEST_F(FakeCudaEnv, PinnedLimit) {
  NEED_ENV("FAKECUDA_PINNED_LIMIT");
  ASSERT_EQ(lib().init_result, 0);
  gc::CUcontext c;
  ASSERT_EQ(D.DevicePrimaryCtxRetain(&c, 0), 0);
  ASSERT_EQ(D.CtxSetCurrent(c), 0);
  void *a = nullptr, *b = nullptr;
  EXPECT_EQ(D.MemHostAlloc(&a, 512 << 10, 0), 0);
  EXPECT_EQ(D.MemHostAlloc(&b, 600 << 10, 0), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(D.MemFreeHost(a), 0);
  EXPECT_EQ(D.MemHostAlloc(&b, 600 << 10, 0), 0);
  EXPECT_EQ(D.MemFreeHost(b), 0);
  EXPECT_EQ(D.DevicePrimaryCtxRelease(0), 0);
}

}  // namespace
